//! Measurements → capacity (pure): run summaries from journals, SLO verdicts,
//! CrossP, the Cr_closed knee, the Cr_open search and sizing.
//!
//! Every derived number here is computed from journals alone, so `capcard
//! report` can recompute a card from a results folder without any endpoint.
//! [`CapacityReport`] is the `results.json` model that `report` renders.

pub mod audited;
pub mod card;
pub mod cr_open;
pub mod crossp;
pub mod decisive;
pub mod frontier;
pub mod harness;
/// Moved down to the statistics leaf; kept at this path for callers.
pub use crate::stats::interval;
pub mod knee;
pub mod mix;
pub mod reuse;
pub mod search;
pub mod settings;
pub mod sharding;
pub mod sizing;
pub mod slo;
pub mod summary;
pub mod telemetry;
pub mod tune;
pub mod wall_time;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::config::{CrossPSpec, KneeSpec, Slo, Workload};
use crate::plan::Mode;

pub use crate::stats::LatencyStats;
pub use card::{build_card, build_report};
pub use crossp::crossp;
pub use interval::Verdict;
pub use knee::cr_closed;
pub use search::{Search, cr_open, needs_extension, start_estimate};
pub use sizing::size;
pub use slo::{ClauseVerdict, SloVerdict};
pub use summary::{summarize, summarize_with};

/// Which repetition of its level or rate a run is (1-based; 1 by default).
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
#[serde(transparent)]
pub struct Repetition(pub u32);

impl Default for Repetition {
    fn default() -> Self {
        Repetition(1)
    }
}

/// What one run measured (one entry of `closed[]` or `open[]` in results.json).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RunSummary {
    pub run_id: String,
    pub mode: Option<Mode>,
    /// Closed loop: the fixed concurrency.
    #[serde(default)]
    pub concurrency: Option<u32>,
    /// `repeat N`: which repetition of its level or rate this run is.
    #[serde(default)]
    pub repetition: Repetition,
    /// Open loop: the scheduled mean arrival rate (tasks/s).
    #[serde(default)]
    pub rate_rps: Option<f64>,
    /// Open loop: completed tasks/s over the measured window.
    #[serde(default)]
    pub achieved_rps: Option<f64>,
    /// Open loop: arrivals scheduled in the measured window.
    #[serde(default)]
    pub offered: Option<u64>,
    /// Measured (post-warmup) calls that succeeded.
    pub requests: u64,
    /// Measured calls that failed, all classes except `cancelled`.
    pub errors: u64,
    pub errors_by_class: BTreeMap<String, u64>,
    /// The most frequent failure messages of the measured calls, in the
    /// server's own words (or the client's, for a failure before any
    /// answer), most frequent first.
    #[serde(default)]
    pub error_details: Vec<ErrorDetail>,
    /// Measured calls refused for a quota (`rate-limited`): any at all, and
    /// the run measured the provider's limit, not the replica (it decides
    /// no CrossP or Cr_closed, and in open loop it fails).
    #[serde(default)]
    pub rate_limited_calls: u64,
    /// The early-stop rule ended the run: its first calls all failed alike.
    #[serde(default)]
    pub stopped_early: Option<crate::exec::record::EarlyStop>,
    /// A search's run ended once it was decisively beyond every SLO of its
    /// card: its window ends at the stop, and Cr_open reads it as a
    /// censored fail (`cr_open::censored_because`).
    #[serde(default)]
    pub decided: Option<crate::exec::record::DecisiveStop>,
    /// Measured calls aborted by the client (Ctrl-C, drain deadline): not an
    /// error of the endpoint, but shown.
    #[serde(default)]
    pub cancelled: u64,
    /// Measured calls that found their kept-alive connection closed by the
    /// server and were resent once on a fresh one (not errors).
    #[serde(default)]
    pub reconnects: u64,
    /// HTTP/1.1 connections the run opened.
    #[serde(default)]
    pub connections_opened: Option<u64>,
    /// Measured tasks (conversations / agent tasks) that completed without a
    /// failed call; = requests for single calls.
    pub tasks: u64,
    /// Multi-call workloads: measured tasks failed by one of their calls.
    #[serde(default)]
    pub tasks_failed: u64,
    /// Multi-call workloads: tasks / (tasks + tasks_failed).
    #[serde(default)]
    pub task_success_fraction: Option<f64>,
    /// Multi-call workloads: mean calls in flight over the window (the sum
    /// of the calls' time in flight within it / its length); in closed loop
    /// the concurrency counts tasks, this counts their calls.
    #[serde(default)]
    pub calls_in_flight_mean: Option<f64>,
    /// Length of the measured window, seconds.
    pub window_s: f64,
    /// The window's start was moved this far past the planned warmup,
    /// because the run's beginning was not yet steady.
    #[serde(default)]
    pub warmup_extended_s: Option<f64>,
    /// Completed calls/s.
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    /// Prompt + output tokens/s.
    pub total_tokens_per_s: f64,
    pub ttft_ms: LatencyStats,
    /// Time to the first output token, when any measured call reasoned
    /// first; without reasoning it is TTFT, which says it.
    #[serde(default)]
    pub ttfo_ms: Option<LatencyStats>,
    /// Mean reasoning tokens per successful measured call, when any reasoned.
    #[serde(default)]
    pub reasoning_tokens_mean: Option<f64>,
    /// Output tokens per streamed event of the successful measured calls:
    /// above 1, the server sends several tokens per event, and ITL (the gap
    /// between events, as a user sees it) is per event, not per token.
    #[serde(default)]
    pub tokens_per_event: Option<f64>,
    /// Successful measured calls whose answer was a tool call.
    #[serde(default)]
    pub tool_call_answers: u64,
    pub itl_ms: LatencyStats,
    pub tpot_ms: LatencyStats,
    pub e2e_ms: LatencyStats,
    #[serde(default)]
    pub task_e2e_ms: Option<LatencyStats>,
    /// Open loop: actual − scheduled send time.
    #[serde(default)]
    pub schedule_lag_ms: Option<LatencyStats>,
    /// Mean prompt tokens planned vs reported by the server (usage).
    pub prompt_tokens_requested_mean: f64,
    pub prompt_tokens_reported_mean: Option<f64>,
    pub output_tokens_requested_mean: f64,
    pub output_tokens_mean: f64,
    /// Calls whose output was shorter than planned.
    pub short_outputs: u64,
    /// Mean calls in flight over the window (Little's law check).
    pub mean_inflight: Option<f64>,
    /// Open loop, per SLO: pass, fail or inconclusive, clause by clause.
    #[serde(default)]
    pub verdicts: Vec<slo::SloVerdict>,
    /// Per SLO: calls/s whose own latencies met every per-request clause.
    #[serde(default)]
    pub goodput_rps: BTreeMap<String, f64>,
    /// Steady state over the window (see `summary`): only stable runs
    /// decide CrossP and Cr_closed; an overloaded open run fails every SLO
    /// and a backlogged one cannot pass.
    #[serde(default)]
    pub state: RunState,
    /// Why the run is not `stable`.
    #[serde(default)]
    pub state_reason: Option<String>,
    /// Open loop: the run was not `overloaded`.
    #[serde(default)]
    pub kept_up: Option<bool>,
    /// Open loop: tasks finished (with or without an error) / `offered`.
    #[serde(default)]
    pub completed_fraction: Option<f64>,
    /// Open loop: calls in flight grew over the window (see `summary`);
    /// `None` when there were too few in-flight samples to tell.
    #[serde(default)]
    pub backlog_growing: Option<bool>,
    pub generator_lagging: bool,
    /// The journal had no footer or the run was interrupted.
    pub incomplete: bool,
    /// Most of the run's measured calls failed ([`summary::is_invalid`]):
    /// not a measurement of the replica. An invalid run counts toward no
    /// CrossP, Cr_closed or Cr_open (in open loop it is never a pass).
    #[serde(default)]
    pub invalid: bool,
    /// What the server's own metrics said over the measured window; null
    /// when telemetry was off or the run had no scrape inside its window.
    #[serde(default)]
    pub server: Option<telemetry::ServerSignals>,
    /// What an ideal prefix cache would have served of the measured calls'
    /// prompts (the journal footer's tally); null in older or merged
    /// journals.
    #[serde(default)]
    pub reuse_potential: Option<crate::workload::reuse::ReuseTally>,
    /// `usage.prompt_tokens_details.cached_tokens` over the measured
    /// successful calls that reported it; null when none did (not 0).
    #[serde(default)]
    pub cached_tokens: Option<reuse::CachedTokens>,
    /// Potential against realized reuse, and why they differ (set with the
    /// card, [`reuse::annotate_runs`]).
    #[serde(default)]
    pub reuse: Option<reuse::RunReuse>,
    /// A run of a mix: each class's own summary (see [`mix`]).
    #[serde(default)]
    pub classes: Vec<mix::ClassSummary>,
}

/// A run's steady state over its measured window.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum RunState {
    #[default]
    Stable,
    Backlogged,
    Overloaded,
}

impl RunState {
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Stable => "stable",
            RunState::Backlogged => "backlogged",
            RunState::Overloaded => "overloaded",
        }
    }
}

/// One kind of failure and how often it happened: the server's words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ErrorDetail {
    pub class: String,
    pub http_status: Option<u16>,
    /// The first call's `error_detail` of this kind (numbers in others may
    /// differ).
    pub detail: String,
    pub count: u64,
}

impl RunSummary {
    /// Whether the run measured the replica: valid, and not capped by a
    /// provider's rate limit. Only such runs decide CrossP, Cr_closed and
    /// the frontier.
    pub fn measures_replica(&self) -> bool {
        !self.invalid && self.rate_limited_calls == 0
    }

    /// This run's verdict for SLO `slo`, if it was judged on it.
    pub fn verdict(&self, slo: &str) -> Option<&slo::SloVerdict> {
        self.verdicts.iter().find(|v| v.slo == slo)
    }
}

/// CrossP: first level where ΔT% > ΔX% vs the previous level (SPEC §3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CrossP {
    pub concurrency: u32,
    pub zone: [u32; 2],
    pub metric: String,
    pub stat: String,
    /// ΔT% and ΔX% at the crossing, in percent.
    pub delta_latency_pct: f64,
    pub delta_throughput_pct: f64,
}

/// Cr_closed: the knee of throughput vs concurrency, a range (SPEC §3).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CrClosed {
    pub range: [u32; 2],
    pub output_tokens_per_s: [f64; 2],
    pub requests_per_s: [f64; 2],
    pub ttft_p50_ms: [f64; 2],
    pub ttft_p99_ms: [f64; 2],
    pub e2e_p50_ms: [f64; 2],
    /// X_max and where it was measured.
    pub max_output_tokens_per_s: f64,
    pub max_at_concurrency: u32,
    /// The fractions used (defaults 0.9, 0.97).
    pub fractions: [f64; 2],
    /// The largest level gained < 5% output tokens/s over the one before it
    /// (see `knee`); `false` = saturation not reached in the sweep.
    pub saturated: bool,
}

/// Cr_open for one SLO: from one model of every clause fitted across all
/// open runs ([`cr_open`]), an estimate with a range at a stated
/// confidence; `rps` is null when the runs do not place it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CrOpen {
    pub slo: String,
    /// The estimate: where the fitted model of the binding clause meets its
    /// bound (folders from before the fit: the highest rate that passed
    /// conclusively below the lowest that failed).
    pub rps: Option<f64>,
    /// The range at `confidence`; an end is null when no run bounds it
    /// (before the fit: `[highest conclusive pass, lowest conclusive
    /// failure]`).
    #[serde(default)]
    pub range: [Option<f64>; 2],
    /// The range's lower end, the rate one can promise: what sizing uses
    /// unless `sizing` says `cr-open "estimate"`; null when the range has
    /// no lower end (then nothing is promised).
    #[serde(default)]
    pub promise_rps: Option<f64>,
    /// The confidence of `range` (two-sided); null before the fit.
    #[serde(default)]
    pub confidence: Option<f64>,
    /// `"fit"` (the model), `"bracket"` (a cliff the model does not fit:
    /// the runs either side), or `"verdicts"` (a folder from before the fit).
    #[serde(default)]
    pub method: Option<String>,
    /// The clause whose crossing is the smallest.
    #[serde(default)]
    pub bound_by: Option<String>,
    /// Every clause's own crossing, with the runs' showing of it.
    #[serde(default)]
    pub clauses: Vec<cr_open::ClauseCrossing>,
    /// The lowest tested rate whose verdict was a conclusive failure; null
    /// if none failed.
    pub failed_at_rps: Option<f64>,
    /// No run bounds Cr_open from above: Cr_open ≥ `range[0]`.
    pub at_least: bool,
    /// Rates whose verdict stayed inconclusive run by run (the fit still
    /// uses their samples).
    #[serde(default)]
    pub inconclusive_rps: Vec<f64>,
    /// A search: whether the range is within ±`precision` of the estimate.
    #[serde(default)]
    pub precision_reached: Option<bool>,
    /// Plain-language reason when `rps` is null, only a bound, or the
    /// range is wider than asked.
    pub note: Option<String>,
    /// What an audit of this experiment (`capcard audit --json`, in the
    /// folder as `audit.json`) measured of this range: how often ranges of
    /// these settings held the reference on a simulated twin. Null
    /// without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<audited::AuditQuote>,
    /// The run whose metrics stand for Cr_open: the highest-rate run within
    /// the SLO at or below the estimate.
    pub run_id: Option<String>,
    /// Run id of the failing run at `failed_at_rps`, and which clauses failed there.
    pub failed_run_id: Option<String>,
    pub failed_clauses: Vec<String>,
    /// A mix: the class that fails first (at `failed_at_rps`) and its
    /// clause (see [`mix::limited_by`]).
    #[serde(default)]
    pub limited_by: Option<mix::LimitedBy>,
}

impl CrOpen {
    /// The rate one can promise: the range's lower end. A fitted Cr_open
    /// (one with a `confidence`) whose range has no lower end promises
    /// nothing: its estimate is where the model crosses, and the runs do
    /// not show the replica holds the SLO there at the stated confidence.
    /// Only a folder from before the fit, read by its verdicts, promises
    /// its one figure (the highest rate that passed).
    pub fn promise(&self) -> Option<f64> {
        let lower_end = self.promise_rps.or(self.range[0]);
        if self.confidence.is_some() {
            lower_end
        } else {
            lower_end.or(self.rps)
        }
    }

    /// A fitted Cr_open with an estimate but nothing to promise: the range
    /// has no lower end (the runs do not bound Cr_open from below).
    pub fn estimate_without_promise(&self) -> bool {
        self.confidence.is_some() && self.rps.is_some() && self.promise().is_none()
    }
}

/// `repeat N`: how the capacity numbers spread over the repetitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RepeatSpread {
    pub repetitions: u32,
    /// Per closed level: `[min, median, max]` over its repetitions.
    pub levels: Vec<LevelSpread>,
    /// CrossP's concurrency from each repetition's sweep alone.
    pub crossp: Vec<Option<u32>>,
    /// Cr_closed's range from each repetition's sweep alone.
    pub cr_closed: Vec<Option<[u32; 2]>>,
    /// Per SLO, Cr_open from each repetition's rates alone.
    pub cr_open: Vec<SloSpread>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LevelSpread {
    pub concurrency: u32,
    pub runs: u32,
    pub output_tokens_per_s: [f64; 3],
    pub requests_per_s: [f64; 3],
    pub ttft_p50_ms: [f64; 3],
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SloSpread {
    pub slo: String,
    pub rps: Vec<Option<f64>>,
}

/// One row of the sizing table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SizingRow {
    /// `"rps=150"`, `"output-tokens-per-s=500000"`.
    pub target: String,
    /// `"cr_open:interactive"` or `"cr_closed"`.
    pub uses: String,
    /// The capacity per replica used, in the target's unit; null when not measured.
    pub cr_per_replica: Option<f64>,
    pub unit: String,
    pub headroom: f64,
    pub spares: u32,
    pub replicas: Option<u32>,
    pub cost_per_hour: Option<f64>,
    /// Per replica at Cr_closed's lower end (see `sizing`), whatever the target.
    pub cost_per_million_output_tokens: Option<f64>,
    pub currency: Option<String>,
    pub note: Option<String>,
}

/// The `results.json` model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CapacityReport {
    /// Always [`crate::report::RESULTS_SCHEMA`] when written (`"capcard/results/v2"`).
    pub schema: String,
    pub experiment: String,
    pub description: Option<String>,
    pub tool_version: String,
    pub seed: u64,
    /// `"complete"`, `"interrupted"` or `"partial"` (some runs missing).
    pub status: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// The content nonce of the invocation that measured the runs: with
    /// `seed` it reproduces the exact request stream (`capcard run --nonce`).
    #[serde(default)]
    pub content_nonce: Option<u64>,
    pub cards: Vec<Card>,
    /// Swept targets: their settings side by side, per workload.
    #[serde(default)]
    pub settings: Vec<settings::SettingsComparison>,
    /// Targets with two or more agent workloads: the harnesses side by side.
    #[serde(default)]
    pub harnesses: Vec<harness::HarnessComparison>,
}

/// One card: one target × one workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Card {
    pub target: String,
    pub workload: String,
    pub target_info: TargetInfo,
    pub workload_profile: Workload,
    /// Measured token counts over all measured calls of this card.
    pub measured_tokens: Option<MeasuredTokens>,
    pub slos: Vec<Slo>,
    /// Arrival process of the open runs (`"poisson"`, ...), if any.
    pub arrival: Option<String>,
    pub closed: Vec<RunSummary>,
    pub crossp_spec: Option<CrossPSpec>,
    pub knee_spec: Option<KneeSpec>,
    pub crossp: Option<CrossP>,
    pub cr_closed: Option<CrClosed>,
    pub open: Vec<RunSummary>,
    pub cr_open: Vec<CrOpen>,
    pub sizing: Vec<SizingRow>,
    /// `repeat N` with N > 1: the spread over repetitions. The headline
    /// numbers come from each level's median run (by output tok/s) and,
    /// per rate, from the repetitions' combined verdict (a pass only if
    /// every repetition passed, a failure if any failed).
    #[serde(default)]
    pub repeat: Option<RepeatSpread>,
    /// Per percentile clause of each SLO: its Cr_open crossing fitted at
    /// the declared bound and at each frontier bound (a folder from before
    /// the fit: the largest measured rate that would pass as a function of
    /// the bound; see [`frontier`]).
    #[serde(default)]
    pub frontier: Vec<frontier::Frontier>,
    /// `frontier` in `open`: the multipliers of each latency bound at which
    /// the search added rates, so the curve is dense there.
    #[serde(default)]
    pub frontier_multipliers: Vec<f64>,
    /// What is missing or questionable, in plain language.
    pub notes: Vec<String>,
    /// Telemetry gaps and server/client disagreements, in plain language.
    #[serde(default)]
    pub telemetry_notes: Vec<String>,
    /// A mix card: its classes, weights and each class's Cr_open inside the
    /// mix.
    #[serde(default)]
    pub mix: Option<mix::MixCard>,
    /// The likely limit read from server telemetry, keyed `"crossp"`,
    /// `"cr_closed"` and `"cr_open:<slo>"` (see [`telemetry::annotate_card`]).
    #[serde(default)]
    pub limits: BTreeMap<String, String>,
    /// Prefix reuse over the card's runs: potential against realized
    /// ([`reuse::annotate_runs`]); null when no run has a figure.
    #[serde(default)]
    pub reuse: Option<reuse::CardReuse>,
    /// The plan's expected and bound times beside the time the runs took
    /// (see [`wall_time`]); set from the results folder.
    #[serde(default)]
    pub wall_time: Option<wall_time::CardWallTime>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct TargetInfo {
    /// `"endpoint http://..."` or `"sim h100-llama3-8b"`.
    pub kind: String,
    /// The serving setting this target is, for a swept target:
    /// `[name, value]` pairs in the sweep's order.
    #[serde(default)]
    pub setting: Vec<(String, String)>,
    /// The engine capcard launched for this target, and how it fared.
    #[serde(default)]
    pub server: Option<settings::ServerRecord>,
    /// Why `tune` stopped measuring this setting, when it did.
    #[serde(default)]
    pub pruned: Option<String>,
    pub api: String,
    pub model: Option<String>,
    pub hardware: Option<String>,
    pub runtime: Option<String>,
    pub cost_per_hour: Option<f64>,
    pub currency: Option<String>,
    /// How prompt lengths were matched to the plan (from the journals).
    #[serde(default)]
    pub prompt_sizing: Option<String>,
    /// How the server's prefix cache was reset before runs, if it was.
    #[serde(default)]
    pub prefix_cache_reset: Option<String>,
    /// Why the runs have no server telemetry, if they have none.
    #[serde(default)]
    pub telemetry_off: Option<String>,
    /// Which clock measured the runs when it was not the wall clock
    /// ("virtual time (...)", from the journals); `None`: real time.
    #[serde(default)]
    pub clock: Option<String>,
    /// How several load-generator processes (shards) sent the load, when
    /// they did (from the merged journals); `None`: one process.
    #[serde(default)]
    pub load_generator: Option<String>,
    /// A shard whose late start biases the result, if one did.
    #[serde(default)]
    pub load_generator_warning: Option<String>,
    /// How the preflight settled the request body (from the journals);
    /// `None` without a preflight (virtual time, older folders).
    #[serde(default)]
    pub dialect: Option<crate::exec::Dialect>,
    /// The model's context window the runs met (from the journals).
    #[serde(default)]
    pub context_window: Option<crate::plan::context::ContextWindow>,
    /// How the card's workload compares with that window, one sentence
    /// (`plan::context::ContextFit::describe`); `None` when every call drawn
    /// fits, or the window is unknown.
    #[serde(default)]
    pub context_fit: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MeasuredTokens {
    pub calls: u64,
    pub prompt_tokens_requested_mean: f64,
    pub prompt_tokens_reported_mean: Option<f64>,
    pub output_tokens_requested_mean: f64,
    pub output_tokens_mean: f64,
    pub short_outputs: u64,
}
