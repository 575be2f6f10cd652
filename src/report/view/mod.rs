//! The card as templates see it: every figure already attached to the mode
//! that measured it, every missing value an explicit `null` plus a tag saying
//! why, so the built-in templates never have to guess what an absent field
//! means.
//!
//! The card's sentences (the Reading, the warnings, the reasons) are composed
//! in the templates from this data, not here, so a custom template can reword
//! them. What stays in Rust are words shared with the charts and derived from
//! the config (SLO clauses, the data profile, in `describe`), short labels
//! (mode tags, table marks) and reason phrases that results.json already
//! carries.
//!
//! Templates get this view as `view`, next to the raw `report` and `card`, so
//! a custom template can reach anything in results.json.

use serde::Serialize;

use crate::analyze::{
    CapacityReport, Card, CrClosed, CrOpen, CrossP, LatencyStats, RunSummary, SizingRow,
};

use super::chart::{FRONTIER_SUFFIX, chart_links};
use super::describe::{
    arrival_unit_words, arrival_words, clause_words, metric_label_str, profile_lines,
};
use crate::format::plain;

mod frontier;
mod reuse;
mod status;
mod summary;

pub use frontier::*;
pub use reuse::*;
pub use status::*;
pub use summary::*;

/// Measured and requested token counts that differ by more than this
/// (relative) get a warning on the card.
const TOKEN_MISMATCH_WARN: f64 = 0.05;

#[derive(Debug, Clone, Serialize)]
pub struct Labelled {
    pub label: String,
    pub text: String,
}

/// How each mode is named next to a number.
#[derive(Debug, Clone, Serialize)]
pub struct ModeTags {
    /// `"closed loop"`.
    pub closed: String,
    /// `"open loop, poisson"`.
    pub open: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ConditionsView {
    pub kind: String,
    pub api: String,
    pub model: Option<String>,
    pub hardware: Option<String>,
    pub runtime: Option<String>,
    pub cost_per_hour: Option<f64>,
    pub currency: Option<String>,
    pub prompt_sizing: Option<String>,
    pub prefix_cache_reset: Option<String>,
    pub telemetry_off: Option<String>,
    /// Which clock measured the runs, when not the wall clock.
    pub clock: Option<String>,
    pub load_generator: Option<String>,
    pub load_generator_warning: Option<String>,
    /// `"8192 tokens (sim preset ...)"`; `None`: unknown.
    pub context_window: Option<String>,
    /// What the preflight settled, in one line, and its sentences; `None`
    /// without a preflight.
    pub dialect: Option<String>,
    pub dialect_settled: Vec<String>,
    /// How the workload compares with it, when it can exceed it.
    pub context_fit: Option<String>,
    /// Arrival process label as stored (`"poisson"`), and in words.
    pub arrival: Option<String>,
    pub arrival_words: Option<String>,
    /// What one open-loop arrival is (`"request"`, `"conversation"`, `"agent task"`).
    pub arrival_unit: String,
    /// The unit of open-loop arrival rates and Cr_open (`"req/s"`, `"tasks/s"`).
    pub rate_unit: String,
    /// The unit of call rates: throughput and goodput (`"req/s"`, `"calls/s"`).
    pub call_rate_unit: String,
    /// The closed sweep's levels, ascending.
    pub closed_levels: Vec<u32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TokensView {
    pub calls: u64,
    pub prompt_requested_mean: f64,
    pub prompt_reported_mean: Option<f64>,
    /// (reported − requested) / requested, in percent.
    pub prompt_difference_pct: Option<f64>,
    pub output_requested_mean: f64,
    pub output_mean: f64,
    pub output_difference_pct: Option<f64>,
    pub short_outputs: u64,
    /// The prompt tokens the server reported differ from those requested by
    /// more than `mismatch_threshold`: the profile was not sent as planned.
    pub prompt_mismatch: bool,
    pub output_mismatch: bool,
    /// The relative difference that warns, as a fraction; decided here so the
    /// flags and the number the template prints cannot disagree.
    pub mismatch_threshold: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SloView {
    pub name: String,
    pub clauses: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CrossPView {
    pub value: Option<CrossP>,
    /// `"TTFT p50"`: the latency statistic compared.
    pub metric: String,
    /// Why there is no value: `"no_sweep"`, `"single_level"` (nothing to
    /// compare the one level with) or `"not_reached"`; `None` with a value.
    pub missing: Option<String>,
    /// The closed sweep's levels, ascending: what a missing CrossP was looked for in.
    pub levels: Vec<u32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CrClosedView {
    pub value: Option<CrClosed>,
    /// Why there is no value: `"no_sweep"` or `"not_determined"` (the notes
    /// say why); `None` with a value.
    pub missing: Option<String>,
}

/// Metrics of one open run at a point of interest (Cr_open or the failing rate).
#[derive(Debug, Clone, Serialize)]
pub struct OpenPointView {
    pub run_id: String,
    pub rate_rps: Option<f64>,
    pub achieved_rps: Option<f64>,
    pub calls_per_s: f64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub ttfo_p50_ms: Option<f64>,
    pub ttfo_p99_ms: Option<f64>,
    pub itl_p95_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
    pub task_e2e_p99_ms: Option<f64>,
    pub schedule_lag_p99_ms: Option<f64>,
    /// Goodput for the SLO this point belongs to.
    pub goodput_rps: Option<f64>,
    pub kept_up: Option<bool>,
    /// `"stable"`, `"backlogged"` or `"overloaded"`.
    pub state: String,
    pub errors: u64,
    pub error_rate: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct CrOpenView {
    pub slo: String,
    /// `"reached"`, `"at_least"` (no run bounds it from above) or
    /// `"not_reached"`.
    pub status: String,
    pub rps: Option<f64>,
    /// The fit's range at `confidence_pct` (a folder from before the fit:
    /// `[highest conclusive pass, lowest conclusive failure]`).
    pub range: [Option<f64>; 2],
    /// Cr_open comes from the model fitted across all runs (`false`: a
    /// folder from before it, read by its verdicts).
    pub fitted: bool,
    /// `"fit"`, `"bracket"` (a cliff) or `"verdicts"`.
    pub method: String,
    /// `"90%"`: the confidence of `range`.
    pub confidence_pct: Option<String>,
    /// The range's lower end: what sizing uses by default; none when the
    /// range has no lower end (a fitted Cr_open then promises nothing).
    pub promise: Option<f64>,
    /// The clause whose crossing binds, in words (`"TTFT p90 ≤ 250 ms"`).
    pub bound_by: Option<String>,
    /// Every clause's crossing.
    pub clauses: Vec<ClauseCrossingView>,
    /// The runs (and their calls) the fit used.
    pub runs: usize,
    pub inconclusive_rps: Vec<f64>,
    pub failed_at_rps: Option<f64>,
    pub failed_clauses: Vec<String>,
    /// `Some(false)`: the search ran out of budget before its range was as
    /// narrow as asked; `None` when no precision was asked for.
    pub precision_reached: Option<bool>,
    pub note: Option<String>,
    /// The passing run at `rps`; `None` when its run is not in the report.
    pub at: Option<OpenPointView>,
    pub failed: Option<OpenPointView>,
    /// What an audit of the experiment measured of this range.
    pub audit: Option<AuditView>,
}

/// An audit's measurement of a Cr_open range, in the card's words.
#[derive(Debug, Clone, Serialize)]
pub struct AuditView {
    pub target: String,
    pub engine: String,
    pub reference_method: String,
    pub seeds: usize,
    pub held: usize,
    /// `"77%"`, and its 95% interval `"68–84%"`.
    pub held_pct: String,
    pub held_interval: String,
    /// The confidence the range states, `"90%"`.
    pub stated_pct: String,
    /// The share held is below the stated confidence (the interval's upper
    /// end below it).
    pub below: bool,
    pub within_precision: usize,
    pub precision_pct: String,
    pub median_width_pct: Option<String>,
    /// The audited engine's reference Cr_open, and the 5th–95th percentile
    /// of its searches' estimates (`"1.05–1.38"`), in rps.
    pub reference_rps: Option<f64>,
    pub estimates: Option<String>,
    /// The card's range meets the audited searches' spread: the audit
    /// speaks of this card (`AuditQuote::describes`).
    pub describes: bool,
}

impl AuditView {
    fn of(quote: &crate::analyze::audited::AuditQuote, range: [Option<f64>; 2]) -> AuditView {
        let pct = |x: f64| format!("{:.0}%", x * 100.0);
        AuditView {
            target: quote.target.clone(),
            engine: quote.engine.clone(),
            reference_method: quote.reference_method.clone(),
            seeds: quote.seeds,
            held: quote.held,
            held_pct: pct(quote.held as f64 / quote.seeds.max(1) as f64),
            held_interval: format!(
                "{:.0}–{:.0}%",
                quote.held_interval[0] * 100.0,
                quote.held_interval[1] * 100.0
            ),
            stated_pct: format!("{}%", crate::format::significant(quote.stated * 100.0)),
            below: quote.below_stated(),
            within_precision: quote.within_precision,
            precision_pct: format!("{}%", crate::format::significant(quote.precision * 100.0)),
            median_width_pct: quote.median_width.map(|w| format!("{:.1}%", w * 100.0)),
            reference_rps: quote.reference_rps,
            estimates: quote.estimates_rps.map(|[low, high]| {
                format!(
                    "{}–{}",
                    crate::format::significant(low),
                    crate::format::significant(high)
                )
            }),
            describes: quote.describes(range),
        }
    }
}

/// One clause's crossing, for the card's table.
#[derive(Debug, Clone, Serialize)]
pub struct ClauseCrossingView {
    /// `"TTFT p90 ≤ 250 ms"`.
    pub clause: String,
    pub estimate: Option<f64>,
    pub range: [Option<f64>; 2],
    pub method: String,
    pub binds: bool,
    /// Runs that measured it, and their effective samples in all.
    pub runs: usize,
    pub effective_samples: f64,
    /// The slope of the fitted curve (logits, or e-folds of the mean, per
    /// e-fold of the rate).
    pub slope: f64,
    /// The model-free (isotonic) crossing, for a check by eye.
    pub isotonic: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SweepRow {
    pub run_id: String,
    pub concurrency: Option<u32>,
    /// Multi-call workloads: mean calls in flight at this level.
    pub calls_in_flight: Option<f64>,
    pub requests: u64,
    pub errors: u64,
    pub error_rate: Option<f64>,
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub total_tokens_per_s: f64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    /// Only when the card's calls reasoned (`CardView::reasoning`).
    pub ttfo_p50_ms: Option<f64>,
    pub ttfo_p99_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p95_ms: Option<f64>,
    pub tpot_p50_ms: Option<f64>,
    pub e2e_p50_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
    pub incomplete: bool,
    /// What this level is for the derived quantities (`"CrossP"`, `"Cr_closed lower"`, `"X_max"`).
    pub marks: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SloCell {
    pub slo: String,
    pub goodput_rps: Option<f64>,
    /// `"pass"`, `"fail"` or `"inconclusive"`; `None` when not judged.
    pub verdict: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SearchRow {
    pub run_id: String,
    pub rate_rps: Option<f64>,
    pub achieved_rps: Option<f64>,
    pub calls_per_s: f64,
    pub offered: Option<u64>,
    /// Tasks completed in the window.
    pub completed: u64,
    /// completed / offered.
    pub completion: Option<f64>,
    pub errors: u64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub ttfo_p50_ms: Option<f64>,
    pub ttfo_p99_ms: Option<f64>,
    pub itl_p95_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
    pub task_e2e_p99_ms: Option<f64>,
    pub schedule_lag_p99_ms: Option<f64>,
    pub slos: Vec<SloCell>,
    pub kept_up: Option<bool>,
    /// `"stable"`, `"backlogged"` or `"overloaded"`.
    pub state: String,
    pub generator_lagging: bool,
    pub incomplete: bool,
    pub marks: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SizingView {
    pub row: SizingRow,
    /// `"Cr_open interactive"` / `"Cr_closed"`.
    pub uses: String,
    /// The mode that measured the capacity used.
    pub mode: String,
    /// What the "Cr per replica" cell says when there is none: `"not
    /// measured"`, or `"no promise yet"` when the Cr_open sized on has an
    /// estimate but its range no lower end.
    pub missing: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct SizingNote {
    pub target: String,
    pub note: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ChartLink {
    pub file_name: String,
    pub alt: String,
}

/// Everything a card template needs beyond the raw report.
#[derive(Debug, Clone, Serialize)]
pub struct CardView {
    pub experiment: String,
    pub description: Option<String>,
    pub tool_version: String,
    pub seed: u64,
    pub content_nonce: Option<u64>,
    /// The confidence of the verdicts' intervals, `"95%"`.
    pub confidence_pct: String,
    pub status: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// The plan's times beside the runs'; `None` for a card from a
    /// results.json that has none.
    pub wall_time: Option<WallTimeView>,
    pub target: String,
    pub workload: String,
    pub file_name: String,
    pub modes: ModeTags,
    pub conditions: ConditionsView,
    pub profile: Vec<Labelled>,
    pub tokens: Option<TokensView>,
    pub slos: Vec<SloView>,
    pub crossp: CrossPView,
    pub cr_closed: CrClosedView,
    pub cr_open: Vec<CrOpenView>,
    pub sweep: Vec<SweepRow>,
    pub search: Vec<SearchRow>,
    /// SLO names in the order of the search table's per-SLO columns.
    pub search_slos: Vec<String>,
    pub has_task_e2e: bool,
    pub sizing: Vec<SizingView>,
    /// Notes attached to sizing rows, with their target.
    pub sizing_notes: Vec<SizingNote>,
    pub notes: Vec<String>,
    pub errors: Vec<ErrorClassRow>,
    pub charts: Vec<ChartLink>,
    /// The SLO frontier, fitted: per clause, per bound, Cr_open of the
    /// clause at that bound. Empty for a folder from before the fit, whose
    /// measured frontier the template reads from `card.frontier`.
    pub frontier: Vec<FrontierView>,
    /// `"90%"`: the confidence of the frontier's ranges (Cr_open's).
    pub frontier_confidence_pct: String,
    /// The SLO frontier's chart, also among `charts`, for its own section.
    pub frontier_chart: Option<ChartLink>,
    /// `frontier` in `open`: where the search made the curve dense,
    /// `"0.5×, 1.5×"` (of each bound); `None` without the setting.
    pub frontier_dense: Option<String>,
    /// Shown under Status and first in the Reading. `None`: every run valid.
    pub invalid: Option<InvalidRunsView>,
    /// The model reasoned before answering; `None`: it did not, and TTFO
    /// is TTFT (no TTFO column is shown).
    pub reasoning: Option<ReasoningView>,
    /// How many output tokens a streamed event carried, over the card's
    /// measured calls; `None` without any.
    pub tokens_per_event: Option<f64>,
    /// Events carried clearly more than one token: ITL figures and clauses
    /// are per event, and the card says so beside them.
    pub itl_per_event: bool,
    /// Successful measured calls that answered with a tool call.
    pub tool_call_answers: u64,
    /// Runs the early-stop rule ended; `None`: none.
    pub stopped_early: Option<StoppedEarlyView>,
    /// Runs a provider's quota capped; `None`: none.
    pub rate_limited: Option<RateLimitedView>,
    /// Calls the server refused for context length; `None`: none were.
    pub context_rejections: Option<ContextRejectionsView>,
    /// Runs with prefix-cache hits the workload does not explain (it declares
    /// no reuse), so their TTFT is optimistic; empty when there are none.
    pub unexplained_cache_hits: Vec<CacheHitRun>,
    /// Server-side telemetry; `None` when no run has any (the card then
    /// renders exactly as without telemetry support).
    pub telemetry: Option<TelemetryView>,
    /// Prefix reuse, potential against realized; `None` when no run has
    /// any figure (older folders).
    pub reuse: Option<ReuseView>,
    /// A mix card: its classes, what limits it, and each class at Cr_open
    /// and at the first failing rate.
    pub mix: Option<MixView>,
}

/// A mix card's classes and verdicts.
#[derive(Debug, Clone, Serialize)]
pub struct MixView {
    pub name: String,
    /// `"80 : 20"`.
    pub weights: String,
    /// `false` for a `weights` what-if setting.
    pub declared: bool,
    pub classes: Vec<MixClassView>,
    pub limited_by: Option<LimitedByView>,
    /// Each class on the run at Cr_open, and on the first failing run.
    pub at_cr_open: Vec<ClassPointView>,
    pub at_failure: Vec<ClassPointView>,
    pub cr_open_rps: Option<f64>,
    pub failed_at_rps: Option<f64>,
    /// Each class's closed-loop output tok/s per level: `[(c, [per class])]`.
    pub closed: Vec<ClassLevelView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MixClassView {
    pub name: String,
    pub share: f64,
    pub workload: String,
    pub slo: Option<String>,
    pub model: Option<String>,
    pub priority: Option<i64>,
    pub profile: Vec<Labelled>,
    /// Its own SLO on the mix's runs: the highest total rate it passed.
    pub cr_open_rps: Option<f64>,
    /// `"reached"`, `"at_least"`, `"not_reached"`; `None` without an SLO.
    pub cr_open_status: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LimitedByView {
    pub class: String,
    pub slo: Option<String>,
    pub clause: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClassPointView {
    pub class: String,
    pub rate_rps: Option<f64>,
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub tpot_p50_ms: Option<f64>,
    pub e2e_p99_ms: Option<f64>,
    pub goodput_rps: Option<f64>,
    /// `"pass"`, `"fail"`, `"inconclusive"`; `None` without an SLO.
    pub verdict: Option<String>,
    pub reasons: Vec<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ClassLevelView {
    pub concurrency: u32,
    pub output_tokens_per_s: Vec<f64>,
    pub requests_per_s: Vec<f64>,
}

/// Server means of one run, next to the client's view of it.
#[derive(Debug, Clone, Serialize)]
pub struct TelemetryRow {
    /// `"closed loop"` / the open-loop tag.
    pub mode: String,
    /// Concurrency (closed) or scheduled rate (open).
    pub concurrency: Option<u32>,
    pub rate_rps: Option<f64>,
    pub run_id: String,
    /// The run has a `server` block with at least one successful scrape.
    pub has_data: bool,
    /// Scrapes attempted in the window; `None` without a `server` block.
    pub scrapes: Option<u64>,
    pub running_mean: Option<f64>,
    pub waiting_mean: Option<f64>,
    pub waiting_max: Option<f64>,
    pub kv_cache_usage_mean: Option<f64>,
    pub kv_cache_usage_max: Option<f64>,
    pub prefix_cache_hit_rate: Option<f64>,
    pub preemptions: Option<f64>,
    pub generation_tokens_per_s: Option<f64>,
    /// `None` when the server reported neither requests nor tokens.
    pub agreement_ok: Option<bool>,
    /// (server − client) / client, in percent.
    pub requests_difference_pct: Option<f64>,
    pub output_tokens_difference_pct: Option<f64>,
}

/// The likely limit at one derived quantity, read from the server's signals.
#[derive(Debug, Clone, Serialize)]
pub struct LimitView {
    /// The key in results.json: `"crossp"`, `"cr_closed"`, `"cr_open:SLO"`.
    pub key: String,
    /// The SLO of a `cr_open:` key.
    pub slo: Option<String>,
    /// A `cr_open:` reading is taken at the first failing rate when the
    /// search saw one, else at Cr_open itself.
    pub at_failing_rate: bool,
    pub text: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct TelemetryView {
    pub rows: Vec<TelemetryRow>,
    /// CrossP, Cr_closed, then Cr_open in the card's SLO order, then any other key.
    pub limits: Vec<LimitView>,
    pub notes: Vec<String>,
}

/// A latency statistic, or `None` when the run had no samples: a run with
/// nothing measured must not show 0 ms.
fn stat(stats: &LatencyStats, pick: fn(&LatencyStats) -> f64) -> Option<f64> {
    (stats.count > 0)
        .then(|| pick(stats))
        .filter(|v| v.is_finite())
}

fn error_rate(run: &RunSummary) -> Option<f64> {
    let total = run.requests + run.errors;
    (total > 0).then(|| run.errors as f64 / total as f64)
}

fn relative_difference(requested: f64, actual: f64) -> Option<f64> {
    (requested > 0.0 && actual.is_finite()).then(|| (actual - requested) / requested)
}

fn sorted_closed(card: &Card) -> Vec<&RunSummary> {
    let mut runs: Vec<&RunSummary> = card.closed.iter().collect();
    runs.sort_by(|a, b| {
        a.concurrency
            .cmp(&b.concurrency)
            .then_with(|| a.run_id.cmp(&b.run_id))
    });
    runs
}

fn sorted_open(card: &Card) -> Vec<&RunSummary> {
    let mut runs: Vec<&RunSummary> = card.open.iter().collect();
    runs.sort_by(|a, b| {
        let (x, y) = (
            a.rate_rps.unwrap_or(f64::INFINITY),
            b.rate_rps.unwrap_or(f64::INFINITY),
        );
        x.total_cmp(&y).then_with(|| a.run_id.cmp(&b.run_id))
    });
    runs
}

fn levels(card: &Card) -> Vec<u32> {
    let mut levels: Vec<u32> = card.closed.iter().filter_map(|r| r.concurrency).collect();
    levels.sort_unstable();
    levels.dedup();
    levels
}

fn open_point(run: &RunSummary, slo: &str) -> OpenPointView {
    OpenPointView {
        run_id: run.run_id.clone(),
        rate_rps: run.rate_rps,
        achieved_rps: run.achieved_rps,
        calls_per_s: run.requests_per_s,
        ttft_p50_ms: stat(&run.ttft_ms, |s| s.p50),
        ttft_p99_ms: stat(&run.ttft_ms, |s| s.p99),
        ttfo_p50_ms: run.ttfo_ms.as_ref().and_then(|t| stat(t, |s| s.p50)),
        ttfo_p99_ms: run.ttfo_ms.as_ref().and_then(|t| stat(t, |s| s.p99)),
        itl_p95_ms: stat(&run.itl_ms, |s| s.p95),
        e2e_p99_ms: stat(&run.e2e_ms, |s| s.p99),
        task_e2e_p99_ms: run.task_e2e_ms.as_ref().and_then(|s| stat(s, |s| s.p99)),
        schedule_lag_p99_ms: run
            .schedule_lag_ms
            .as_ref()
            .and_then(|s| stat(s, |s| s.p99)),
        goodput_rps: run.goodput_rps.get(slo).copied(),
        kept_up: run.kept_up,
        state: run.state.as_str().to_string(),
        errors: run.errors,
        error_rate: error_rate(run),
    }
}

fn find_run<'a>(card: &'a Card, run_id: Option<&str>) -> Option<&'a RunSummary> {
    let id = run_id?;
    card.open.iter().find(|r| r.run_id == id)
}

fn cr_open_status(cr: &CrOpen) -> &'static str {
    match (cr.rps, cr.at_least) {
        (_, true) if cr.promise().is_some() => "at_least",
        (None, _) => "not_reached",
        (Some(_), true) => "at_least",
        (Some(_), false) => "reached",
    }
}

fn crossp_view(card: &Card) -> CrossPView {
    let spec = card.crossp_spec.unwrap_or_default();
    let metric = match &card.crossp {
        Some(c) => format!("{} {}", metric_label_str(&c.metric), c.stat),
        None => format!(
            "{} {}",
            super::describe::metric_label(spec.metric),
            spec.stat.key()
        ),
    };
    let levels = levels(card);
    let missing = match (&card.crossp, levels.as_slice()) {
        (Some(_), _) => None,
        (None, []) => Some("no_sweep"),
        (None, [_]) => Some("single_level"),
        (None, _) => Some("not_reached"),
    };
    CrossPView {
        value: card.crossp.clone(),
        metric,
        missing: missing.map(str::to_string),
        levels,
    }
}

fn cr_closed_view(card: &Card) -> CrClosedView {
    let missing = match (&card.cr_closed, card.closed.is_empty()) {
        (Some(_), _) => None,
        (None, true) => Some("no_sweep"),
        (None, false) => Some("not_determined"),
    };
    CrClosedView {
        value: card.cr_closed.clone(),
        missing: missing.map(str::to_string),
    }
}

fn tokens_view(card: &Card) -> Option<TokensView> {
    let t = card.measured_tokens.as_ref()?;
    let prompt_difference = t
        .prompt_tokens_reported_mean
        .and_then(|r| relative_difference(t.prompt_tokens_requested_mean, r));
    let output_difference =
        relative_difference(t.output_tokens_requested_mean, t.output_tokens_mean);
    let mismatch = |d: Option<f64>| d.is_some_and(|d| d.abs() > TOKEN_MISMATCH_WARN);
    Some(TokensView {
        calls: t.calls,
        prompt_requested_mean: t.prompt_tokens_requested_mean,
        prompt_reported_mean: t.prompt_tokens_reported_mean,
        prompt_difference_pct: prompt_difference.map(|d| d * 100.0),
        output_requested_mean: t.output_tokens_requested_mean,
        output_mean: t.output_tokens_mean,
        output_difference_pct: output_difference.map(|d| d * 100.0),
        short_outputs: t.short_outputs,
        prompt_mismatch: mismatch(prompt_difference),
        output_mismatch: mismatch(output_difference),
        mismatch_threshold: TOKEN_MISMATCH_WARN,
    })
}

fn sweep_rows(card: &Card) -> Vec<SweepRow> {
    sorted_closed(card)
        .into_iter()
        .map(|r| {
            let mut marks = Vec::new();
            if let (Some(c), Some(level)) = (&card.crossp, r.concurrency) {
                if level == c.concurrency {
                    marks.push("CrossP".to_string());
                }
            }
            if let (Some(k), Some(level)) = (&card.cr_closed, r.concurrency) {
                if level == k.range[0] && level == k.range[1] {
                    marks.push("Cr_closed".to_string());
                } else if level == k.range[0] {
                    marks.push("Cr_closed lower".to_string());
                } else if level == k.range[1] {
                    marks.push("Cr_closed upper".to_string());
                }
                if level == k.max_at_concurrency {
                    marks.push("X_max".to_string());
                }
            }
            if r.incomplete {
                marks.push("incomplete".to_string());
            }
            if r.state != crate::analyze::RunState::Stable {
                marks.push(format!("{} (not used)", r.state.as_str()));
            }
            if r.repetition.0 > 1 {
                marks.push(format!("rep {}", r.repetition.0));
            }
            SweepRow {
                run_id: r.run_id.clone(),
                concurrency: r.concurrency,
                calls_in_flight: r.calls_in_flight_mean,
                requests: r.requests,
                errors: r.errors,
                error_rate: error_rate(r),
                requests_per_s: r.requests_per_s,
                output_tokens_per_s: r.output_tokens_per_s,
                total_tokens_per_s: r.total_tokens_per_s,
                ttft_p50_ms: stat(&r.ttft_ms, |s| s.p50),
                ttft_p99_ms: stat(&r.ttft_ms, |s| s.p99),
                ttfo_p50_ms: r.ttfo_ms.as_ref().and_then(|t| stat(t, |s| s.p50)),
                ttfo_p99_ms: r.ttfo_ms.as_ref().and_then(|t| stat(t, |s| s.p99)),
                itl_p50_ms: stat(&r.itl_ms, |s| s.p50),
                itl_p95_ms: stat(&r.itl_ms, |s| s.p95),
                tpot_p50_ms: stat(&r.tpot_ms, |s| s.p50),
                e2e_p50_ms: stat(&r.e2e_ms, |s| s.p50),
                e2e_p99_ms: stat(&r.e2e_ms, |s| s.p99),
                incomplete: r.incomplete,
                marks,
            }
        })
        .collect()
}

/// The confidence the open runs were judged at (the first verdict's; 95%
/// when none was judged).
fn confidence_pct(card: &Card) -> String {
    let confidence = card
        .open
        .iter()
        .find_map(|r| r.verdicts.first().map(|v| v.confidence))
        .unwrap_or(crate::stats::interval::DEFAULT_CONFIDENCE);
    crate::format::pct_of_fraction(confidence)
}

/// SLO names for the search table: the card's SLOs in declaration order,
/// then any other name a run was judged against.
fn search_slos(card: &Card) -> Vec<String> {
    // A mix card is judged on its own verdict only (its classes' SLOs are
    // in the mix's tables).
    let mut names: Vec<String> = if card.mix.is_some() {
        Vec::new()
    } else {
        card.slos.iter().map(|s| s.name.clone()).collect()
    };
    for run in &card.open {
        for name in run
            .verdicts
            .iter()
            .map(|v| &v.slo)
            .chain(run.goodput_rps.keys())
        {
            if !names.contains(name) {
                names.push(name.clone());
            }
        }
    }
    names
}

/// `"decided after 4.5 s: ttft p90 ≤ 62.5ms 41 of 52 beyond (10% allowed)"`:
/// a search's run its watch ended, decisively beyond every SLO.
fn decided_mark(d: &crate::exec::record::DecisiveStop, window_s: f64) -> String {
    let clauses: Vec<String> = d
        .clauses
        .iter()
        .map(|c| {
            format!(
                "`{}` {} {} of {} beyond ({} allowed)",
                c.slo,
                c.clause,
                crate::format::num(c.beyond as f64, 0),
                crate::format::num(c.samples as f64, 0),
                crate::format::pct_compact(c.allowed)
            )
        })
        .collect();
    format!(
        "decided after {} s of its window: {}",
        crate::format::significant(window_s),
        clauses.join("; ")
    )
}

fn search_rows(card: &Card, slos: &[String]) -> Vec<SearchRow> {
    sorted_open(card)
        .into_iter()
        .map(|r| {
            let mut marks = Vec::new();
            for cr in &card.cr_open {
                if cr.run_id.as_deref() == Some(r.run_id.as_str()) {
                    marks.push(format!("Cr_open {}", cr.slo));
                }
                if cr.failed_run_id.as_deref() == Some(r.run_id.as_str()) {
                    marks.push(format!("fails {}", cr.slo));
                }
            }
            if r.generator_lagging {
                marks.push("generator lagging".to_string());
            }
            if r.incomplete {
                marks.push("incomplete".to_string());
            }
            if let Some(d) = &r.decided {
                marks.push(decided_mark(d, r.window_s));
            }
            if r.repetition.0 > 1 {
                marks.push(format!("rep {}", r.repetition.0));
            }
            SearchRow {
                run_id: r.run_id.clone(),
                rate_rps: r.rate_rps,
                achieved_rps: r.achieved_rps,
                calls_per_s: r.requests_per_s,
                offered: r.offered,
                completed: r.tasks,
                completion: r
                    .offered
                    .filter(|o| *o > 0)
                    .map(|o| r.tasks as f64 / o as f64),
                errors: r.errors,
                ttft_p50_ms: stat(&r.ttft_ms, |s| s.p50),
                ttft_p99_ms: stat(&r.ttft_ms, |s| s.p99),
                ttfo_p50_ms: r.ttfo_ms.as_ref().and_then(|t| stat(t, |s| s.p50)),
                ttfo_p99_ms: r.ttfo_ms.as_ref().and_then(|t| stat(t, |s| s.p99)),
                itl_p95_ms: stat(&r.itl_ms, |s| s.p95),
                e2e_p99_ms: stat(&r.e2e_ms, |s| s.p99),
                task_e2e_p99_ms: r.task_e2e_ms.as_ref().and_then(|s| stat(s, |s| s.p99)),
                schedule_lag_p99_ms: r.schedule_lag_ms.as_ref().and_then(|s| stat(s, |s| s.p99)),
                slos: slos
                    .iter()
                    .map(|name| SloCell {
                        slo: name.clone(),
                        goodput_rps: r.goodput_rps.get(name).copied(),
                        verdict: r.verdict(name).map(|v| v.verdict.as_str().to_string()),
                    })
                    .collect(),
                kept_up: r.kept_up,
                state: r.state.as_str().to_string(),
                generator_lagging: r.generator_lagging,
                incomplete: r.incomplete,
                marks,
            }
        })
        .collect()
}

fn sizing_views(card: &Card, modes: &ModeTags) -> Vec<SizingView> {
    card.sizing
        .iter()
        .map(|row| {
            let without_promise = row
                .uses
                .strip_prefix("cr_open:")
                .and_then(|rest| rest.strip_suffix(":promise"))
                .and_then(|key| {
                    let key = key.strip_prefix("mix=").unwrap_or(key);
                    card.cr_open.iter().find(|c| c.slo == key)
                })
                .is_some_and(CrOpen::estimate_without_promise);
            let missing = if without_promise {
                "no promise yet"
            } else {
                "not measured"
            }
            .to_string();
            let (uses, mode) = match row.uses.strip_prefix("cr_open:") {
                Some(rest) => {
                    let words = match rest.rsplit_once(':') {
                        Some((slo, "promise")) => {
                            format!("Cr_open {slo}, its promise (the range's lower end)")
                        }
                        Some((slo, "estimate")) => format!("Cr_open {slo}, its estimate"),
                        _ => format!("Cr_open {rest}"),
                    };
                    (words, modes.open.clone())
                }
                None if row.uses == "cr_closed" => ("Cr_closed".to_string(), modes.closed.clone()),
                None => (row.uses.clone(), "—".to_string()),
            };
            SizingView {
                row: row.clone(),
                uses,
                mode,
                missing,
            }
        })
        .collect()
}

fn telemetry_view(card: &Card, modes: &ModeTags) -> Option<TelemetryView> {
    let any_server = card
        .closed
        .iter()
        .chain(&card.open)
        .any(|r| r.server.is_some());
    if !any_server && card.limits.is_empty() && card.telemetry_notes.is_empty() {
        return None;
    }
    let row = |mode: &str, r: &RunSummary| {
        let s = r.server.as_ref();
        let agreement = crate::analyze::telemetry::run_agreement(r);
        TelemetryRow {
            mode: mode.to_string(),
            concurrency: r.concurrency,
            rate_rps: r.rate_rps,
            run_id: r.run_id.clone(),
            has_data: s.is_some_and(|s| s.has_data()),
            scrapes: s.map(|s| s.scrapes),
            running_mean: s.and_then(|s| s.requests_running_mean),
            waiting_mean: s.and_then(|s| s.requests_waiting_mean),
            waiting_max: s.and_then(|s| s.requests_waiting_max),
            kv_cache_usage_mean: s.and_then(|s| s.kv_cache_usage_mean),
            kv_cache_usage_max: s.and_then(|s| s.kv_cache_usage_max),
            prefix_cache_hit_rate: s.and_then(|s| s.prefix_cache_hit_rate),
            preemptions: s.and_then(|s| s.preemptions),
            generation_tokens_per_s: s.and_then(|s| s.generation_tokens_per_s),
            agreement_ok: agreement.as_ref().and_then(|a| a.ok),
            requests_difference_pct: agreement
                .as_ref()
                .and_then(|a| a.requests_difference)
                .map(|d| d * 100.0),
            output_tokens_difference_pct: agreement
                .as_ref()
                .and_then(|a| a.output_tokens_difference)
                .map(|d| d * 100.0),
        }
    };
    let mut rows: Vec<TelemetryRow> = sorted_closed(card)
        .into_iter()
        .map(|r| row(&modes.closed, r))
        .collect();
    rows.extend(sorted_open(card).into_iter().map(|r| row(&modes.open, r)));
    // Fixed order: CrossP, Cr_closed, then Cr_open in the card's SLO order.
    let mut keys: Vec<String> = vec!["crossp".into(), "cr_closed".into()];
    keys.extend(card.cr_open.iter().map(|c| format!("cr_open:{}", c.slo)));
    keys.extend(
        card.limits
            .keys()
            .filter(|k| !keys.contains(k))
            .cloned()
            .collect::<Vec<_>>(),
    );
    let limits = keys
        .iter()
        .filter_map(|key| {
            let text = card.limits.get(key)?;
            let slo = key.strip_prefix("cr_open:");
            Some(LimitView {
                key: key.clone(),
                slo: slo.map(str::to_string),
                at_failing_rate: slo.is_some_and(|slo| {
                    card.cr_open
                        .iter()
                        .any(|c| c.slo == slo && c.failed_run_id.is_some())
                }),
                text: text.clone(),
            })
        })
        .collect();
    Some(TelemetryView {
        rows,
        limits,
        notes: card.telemetry_notes.clone(),
    })
}

/// Builds the template view of one card.
pub fn card_view(report: &CapacityReport, card: &Card) -> CardView {
    let (arrival_unit, rate_unit, call_rate_unit) = match &card.mix {
        // Classes of one kind of arrival keep its words; a mix of kinds
        // (requests beside conversations) counts tasks.
        Some(mix)
            if mix
                .workloads
                .iter()
                .any(|w| w.unit() != card.workload_profile.unit()) =>
        {
            ("task", "tasks/s", "calls/s")
        }
        _ => arrival_unit_words(&card.workload_profile),
    };
    let info = &card.target_info;
    // A simulated run in virtual time says so beside every figure.
    let clock = if info.clock.is_some() {
        ", virtual time"
    } else {
        ""
    };
    let modes = ModeTags {
        closed: format!("closed loop{clock}"),
        open: match &card.arrival {
            Some(a) => format!("open loop, {a}{clock}"),
            None => format!("open loop{clock}"),
        },
    };
    let frontier = frontier::frontier_views(card, rate_unit);
    let conditions = ConditionsView {
        kind: info.kind.clone(),
        api: info.api.clone(),
        model: info.model.clone(),
        hardware: info.hardware.clone(),
        runtime: info.runtime.clone(),
        prompt_sizing: info.prompt_sizing.clone(),
        prefix_cache_reset: info.prefix_cache_reset.clone(),
        telemetry_off: info.telemetry_off.clone(),
        clock: info.clock.clone(),
        load_generator: info.load_generator.clone(),
        load_generator_warning: info.load_generator_warning.clone(),
        context_window: info
            .context_window
            .as_ref()
            .map(|w| format!("{} tokens, prompt + output ({})", w.tokens, w.source)),
        context_fit: info.context_fit.clone(),
        dialect: info.dialect.as_ref().map(super::describe::dialect),
        dialect_settled: info
            .dialect
            .as_ref()
            .map(|d| d.settled.clone())
            .unwrap_or_default(),
        cost_per_hour: info.cost_per_hour,
        currency: info.currency.clone(),
        arrival: card.arrival.clone(),
        arrival_words: card.arrival.as_deref().map(arrival_words),
        arrival_unit: arrival_unit.to_string(),
        rate_unit: rate_unit.to_string(),
        call_rate_unit: call_rate_unit.to_string(),
        closed_levels: levels(card),
    };
    let search_slos = search_slos(card);
    let cr_open = card
        .cr_open
        .iter()
        .map(|cr| CrOpenView {
            slo: cr.slo.clone(),
            status: cr_open_status(cr).to_string(),
            rps: cr.rps,
            range: cr.range,
            inconclusive_rps: cr.inconclusive_rps.clone(),
            failed_at_rps: cr.failed_at_rps,
            failed_clauses: cr
                .failed_clauses
                .iter()
                .map(|c| crate::report::describe::stored_clause_words(c))
                .collect(),
            precision_reached: cr.precision_reached,
            note: cr.note.clone(),
            fitted: matches!(cr.method.as_deref(), Some("fit" | "bracket")),
            method: cr.method.clone().unwrap_or_else(|| "verdicts".to_string()),
            confidence_pct: cr
                .confidence
                .map(|c| format!("{}%", crate::format::significant(c * 100.0))),
            promise: cr.promise(),
            bound_by: cr
                .bound_by
                .as_deref()
                .map(crate::report::describe::stored_clause_words),
            clauses: cr
                .clauses
                .iter()
                .map(|c| ClauseCrossingView {
                    clause: crate::report::describe::stored_clause_words(&c.label),
                    estimate: c.estimate_rps,
                    range: c.range,
                    method: c.method.clone(),
                    binds: cr.bound_by.as_ref() == Some(&c.label),
                    runs: c.points.len(),
                    effective_samples: c.points.iter().map(|p| p.effective_samples).sum(),
                    slope: c.slope,
                    isotonic: c.isotonic_rps,
                })
                .collect(),
            runs: cr.clauses.first().map_or(0, |c| c.points.len()),
            at: find_run(card, cr.run_id.as_deref()).map(|r| open_point(r, &cr.slo)),
            failed: find_run(card, cr.failed_run_id.as_deref()).map(|r| open_point(r, &cr.slo)),
            audit: cr.audit.as_ref().map(|q| AuditView::of(q, cr.range)),
        })
        .collect();
    let sizing = sizing_views(card, &modes);
    let sizing_notes = card
        .sizing
        .iter()
        .filter_map(|r| {
            r.note.as_ref().map(|note| SizingNote {
                target: r.target.clone(),
                note: note.clone(),
            })
        })
        .collect();
    let telemetry = telemetry_view(card, &modes);
    let reuse = reuse_view(card, &modes);
    CardView {
        experiment: report.experiment.clone(),
        description: report.description.clone(),
        tool_version: report.tool_version.clone(),
        seed: report.seed,
        content_nonce: report.content_nonce,
        confidence_pct: confidence_pct(card),
        status: report.status.clone(),
        started_at: report.started_at.clone(),
        finished_at: report.finished_at.clone(),
        wall_time: card.wall_time.as_ref().map(wall_time_view),
        target: card.target.clone(),
        workload: card.workload.clone(),
        file_name: super::card_file_name(card),
        modes,
        conditions,
        profile: profile_lines(&card.workload_profile)
            .into_iter()
            .map(|(label, text)| Labelled { label, text })
            .collect(),
        tokens: tokens_view(card),
        slos: card
            .slos
            .iter()
            .map(|s| SloView {
                name: s.name.clone(),
                clauses: s.clauses.iter().map(clause_words).collect(),
            })
            .collect(),
        crossp: crossp_view(card),
        cr_closed: cr_closed_view(card),
        cr_open,
        sweep: sweep_rows(card),
        search: search_rows(card, &search_slos),
        search_slos,
        has_task_e2e: card.open.iter().any(|r| r.task_e2e_ms.is_some()),
        sizing,
        sizing_notes,
        notes: card.notes.clone(),
        errors: error_rows(card),
        charts: chart_links(card)
            .into_iter()
            .map(|(file_name, alt)| ChartLink { file_name, alt })
            .collect(),
        frontier,
        frontier_confidence_pct: crate::format::pct_of_fraction(super::fit_chart::confidence(card)),
        frontier_chart: chart_links(card)
            .into_iter()
            .find(|(file_name, _)| file_name.ends_with(FRONTIER_SUFFIX))
            .map(|(file_name, alt)| ChartLink { file_name, alt }),
        frontier_dense: (!card.frontier_multipliers.is_empty()).then(|| {
            card.frontier_multipliers
                .iter()
                .map(|m| format!("{}×", plain(*m)))
                .collect::<Vec<_>>()
                .join(", ")
        }),
        invalid: invalid_runs(card),
        stopped_early: stopped_early(card),
        rate_limited: rate_limited(card),
        reasoning: reasoning(card),
        tokens_per_event: tokens_per_event(card),
        itl_per_event: tokens_per_event(card).is_some_and(|t| t > PER_EVENT_TOKENS),
        tool_call_answers: card
            .closed
            .iter()
            .chain(&card.open)
            .map(|r| r.tool_call_answers)
            .sum(),
        context_rejections: context_rejections(card),
        unexplained_cache_hits: unexplained_cache_hits(card),
        telemetry,
        reuse,
        mix: mix_view(card),
    }
}

fn class_points(run: Option<&RunSummary>) -> Vec<ClassPointView> {
    run.map_or_else(Vec::new, |run| {
        run.classes
            .iter()
            .map(|c| ClassPointView {
                class: c.class.clone(),
                rate_rps: c.rate_rps,
                requests_per_s: c.requests_per_s,
                output_tokens_per_s: c.output_tokens_per_s,
                ttft_p50_ms: stat(&c.ttft_ms, |l| l.p50),
                ttft_p99_ms: stat(&c.ttft_ms, |l| l.p99),
                tpot_p50_ms: stat(&c.tpot_ms, |l| l.p50),
                e2e_p99_ms: stat(c.task_e2e_ms.as_ref().unwrap_or(&c.e2e_ms), |l| l.p99),
                goodput_rps: c.goodput_rps,
                verdict: c.verdict.as_ref().map(|v| v.verdict.as_str().to_string()),
                reasons: c
                    .verdict
                    .as_ref()
                    .map(|v| v.reasons.clone())
                    .unwrap_or_default(),
            })
            .collect()
    })
}

fn mix_view(card: &Card) -> Option<MixView> {
    let mix = card.mix.as_ref()?;
    let plan = &mix.plan;
    let cr = card.cr_open.first();
    let classes = plan
        .classes
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let own = mix.class_cr_open.iter().find(|o| o.slo == c.name);
            MixClassView {
                name: c.name.clone(),
                share: c.share,
                workload: c.workload.clone(),
                slo: c.slo.clone(),
                model: c.model.clone(),
                priority: c.priority,
                profile: mix
                    .workloads
                    .iter()
                    .find(|w| w.name == c.workload)
                    .or(mix.workloads.get(i))
                    .map(|w| {
                        profile_lines(w)
                            .into_iter()
                            .map(|(label, text)| Labelled { label, text })
                            .collect()
                    })
                    .unwrap_or_default(),
                cr_open_rps: own.and_then(|o| o.rps),
                cr_open_status: own.map(|o| cr_open_status(o).to_string()),
            }
        })
        .collect();
    let closed = sorted_closed(card)
        .into_iter()
        .filter(|r| r.repetition.0 <= 1)
        .map(|r| ClassLevelView {
            concurrency: r.concurrency.unwrap_or(0),
            output_tokens_per_s: r.classes.iter().map(|c| c.output_tokens_per_s).collect(),
            requests_per_s: r.classes.iter().map(|c| c.requests_per_s).collect(),
        })
        .collect();
    Some(MixView {
        name: plan.mix.clone(),
        weights: plan
            .weights
            .iter()
            .map(|w| plain(*w))
            .collect::<Vec<_>>()
            .join(" : "),
        declared: plan.declared,
        classes,
        limited_by: cr
            .and_then(|c| c.limited_by.as_ref())
            .map(|l| LimitedByView {
                class: l.class.clone(),
                slo: l.slo.clone(),
                clause: crate::report::describe::stored_clause_words(&l.clause),
            }),
        at_cr_open: class_points(cr.and_then(|c| find_run(card, c.run_id.as_deref()))),
        at_failure: class_points(cr.and_then(|c| find_run(card, c.failed_run_id.as_deref()))),
        cr_open_rps: cr.and_then(|c| c.rps),
        failed_at_rps: cr.and_then(|c| c.failed_at_rps),
        closed,
    })
}

/// Planned against actual time, as the card states it (durations in
/// words, `"25m"`; see `analyze::wall_time`).
#[derive(Debug, Clone, Serialize)]
pub struct WallTimeView {
    /// The plan's expected time; `None` when the plan has no such card.
    pub planned: Option<String>,
    /// The plan's bound; `None` when the plan recorded none.
    pub planned_bound: Option<String>,
    /// The runs' wall time: the sum of each run's start → finish.
    pub actual: Option<String>,
    pub runs: u32,
    pub runs_without_finish: u32,
    /// Virtual time: the runs' simulated time, which `planned` is in.
    pub simulated: Option<String>,
    /// The runs took longer than the plan's bound (on the clock the plan
    /// is in).
    pub beyond_bound: bool,
}

fn wall_time_view(t: &crate::analyze::wall_time::CardWallTime) -> WallTimeView {
    let words = |s: Option<f64>| s.map(crate::format::duration_words);
    // The plan counts a virtual card in simulated time: compare like with like.
    let compared = t.simulated_s.or(t.actual_s);
    WallTimeView {
        planned: words(t.planned_expected_s),
        planned_bound: words(t.planned_bound_s),
        actual: words(t.actual_s),
        runs: t.runs,
        runs_without_finish: t.runs_without_finish,
        simulated: words(t.simulated_s),
        beyond_bound: compared
            .zip(t.planned_bound_s)
            .is_some_and(|(took, bound)| took > bound),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::MeasuredTokens;
    use crate::config::{Dist, Workload};
    use crate::plan::Mode;
    use std::collections::BTreeMap;

    fn report_with(card: Card) -> CapacityReport {
        CapacityReport {
            schema: crate::report::RESULTS_SCHEMA.into(),
            experiment: "exp".into(),
            description: None,
            tool_version: "0.1.0".into(),
            seed: 1,
            status: "complete".into(),
            started_at: None,
            finished_at: None,
            content_nonce: None,
            cards: vec![card],
            settings: Vec::new(),
            harnesses: Vec::new(),
        }
    }

    fn empty_card() -> Card {
        Card {
            target: "t".into(),
            workload: "w".into(),
            target_info: Default::default(),
            workload_profile: Workload::new("w", Dist::fixed(100.0), Dist::fixed(50.0)),
            measured_tokens: None,
            slos: vec![],
            arrival: None,
            closed: vec![],
            crossp_spec: None,
            knee_spec: None,
            crossp: None,
            cr_closed: None,
            open: vec![],
            cr_open: vec![],
            sizing: vec![],
            repeat: None,
            frontier: vec![],
            frontier_multipliers: vec![],
            notes: vec![],
            telemetry_notes: vec![],
            limits: BTreeMap::new(),
            reuse: None,
            mix: None,
            wall_time: None,
        }
    }

    /// The card as the built-in template renders it.
    fn rendered(card: &Card) -> String {
        let report = report_with(card.clone());
        super::super::render_card(&report, card, &super::super::Templates::builtin())
            .expect("the built-in template renders")
    }

    /// The Reading paragraph of the rendered card.
    fn reading(card: &Card) -> String {
        let card_md = rendered(card);
        card_md
            .split_once("## Reading\n\n")
            .and_then(|(_, rest)| rest.split("\n\n").next())
            .expect("a Reading paragraph")
            .to_string()
    }

    fn closed_run(concurrency: u32, tps: f64, ttft_count: u64) -> RunSummary {
        RunSummary {
            run_id: format!("c{concurrency}"),
            mode: Some(Mode::Closed),
            concurrency: Some(concurrency),
            output_tokens_per_s: tps,
            ttft_ms: LatencyStats {
                count: ttft_count,
                p50: 40.0,
                p99: 90.0,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn cache_hits_the_workload_does_not_explain_are_flagged() {
        let mut card = empty_card();
        let mut run = closed_run(1, 10.0, 50);
        run.server = Some(crate::analyze::telemetry::ServerSignals {
            prefix_cache_hit_rate: Some(0.53),
            ..Default::default()
        });
        card.closed = vec![run, closed_run(2, 20.0, 50)];
        let view = card_view(&report_with(card.clone()), &card);
        assert_eq!(view.unexplained_cache_hits.len(), 1, "flagged");
        assert_eq!(view.unexplained_cache_hits[0].run_id, "c1");
        let card_md = rendered(&card);
        assert!(
            card_md.contains("prefix cache (c1 53%) although the workload `w` declares no reuse"),
            "{card_md}"
        );
        // A declared shared prefix explains hits.
        card.workload_profile.shared_prefix = Some(crate::config::SharedPrefix {
            tokens: 64,
            groups: 2,
        });
        let view = card_view(&report_with(card.clone()), &card);
        assert!(view.unexplained_cache_hits.is_empty());
    }

    #[test]
    fn a_statistic_without_samples_is_missing_not_zero() {
        let mut card = empty_card();
        card.closed = vec![closed_run(4, 300.0, 0), closed_run(1, 100.0, 10)];
        let view = card_view(&report_with(card.clone()), &card);
        let levels: Vec<Option<u32>> = view.sweep.iter().map(|r| r.concurrency).collect();
        assert_eq!(
            levels,
            [Some(1), Some(4)],
            "sweep rows sorted by concurrency"
        );
        assert_eq!(view.sweep[0].ttft_p50_ms, Some(40.0));
        assert_eq!(view.sweep[1].ttft_p50_ms, None);
        assert_eq!(view.sweep[1].error_rate, None, "no calls → no error rate");
    }

    #[test]
    fn missing_quantities_carry_their_reason() {
        let card = empty_card();
        let view = card_view(&report_with(card.clone()), &card);
        assert_eq!(view.crossp.missing.as_deref(), Some("no_sweep"));
        assert_eq!(view.cr_closed.missing.as_deref(), Some("no_sweep"));
        let card_md = rendered(&card);
        assert!(
            card_md.contains("| CrossP | not measured (no closed-loop sweep) |"),
            "{card_md}"
        );
        assert!(
            card_md.contains("| Cr_closed | not measured (no closed-loop sweep) |"),
            "{card_md}"
        );
        let text = reading(&card);
        assert!(text.contains("Cr_open not measured"), "{text}");

        let mut one_level = empty_card();
        one_level.closed = vec![closed_run(8, 500.0, 10)];
        let view = card_view(&report_with(one_level.clone()), &one_level);
        assert_eq!(view.crossp.missing.as_deref(), Some("single_level"));
        let card_md = rendered(&one_level);
        assert!(
            card_md.contains(
                "| CrossP | not measured: a single sweep level (8) has no previous level to compare |"
            ),
            "{card_md}"
        );

        let mut swept = empty_card();
        swept.closed = vec![
            closed_run(1, 100.0, 10),
            closed_run(2, 190.0, 10),
            closed_run(4, 350.0, 10),
        ];
        let view = card_view(&report_with(swept.clone()), &swept);
        assert_eq!(view.crossp.missing.as_deref(), Some("not_reached"));
        assert!(rendered(&swept).contains("| CrossP | not reached in sweep (levels 1–4) |"));
        assert!(
            reading(&swept)
                .contains("CrossP was not reached in the sweep (levels 1–4, closed loop)")
        );
    }

    #[test]
    fn the_reading_tags_every_figure_with_its_mode() {
        let mut card = empty_card();
        card.arrival = Some("poisson".into());
        card.closed = vec![closed_run(16, 1900.0, 10), closed_run(32, 2050.0, 10)];
        card.cr_closed = Some(CrClosed {
            range: [16, 32],
            output_tokens_per_s: [1900.0, 2050.0],
            requests_per_s: [8.8, 9.5],
            ttft_p50_ms: [100.0, 200.0],
            ttft_p99_ms: [300.0, 600.0],
            e2e_p50_ms: [3000.0, 5000.0],
            max_output_tokens_per_s: 2050.0,
            max_at_concurrency: 32,
            fractions: [0.9, 0.97],
            saturated: true,
        });
        card.cr_open = vec![CrOpen {
            slo: "interactive".into(),
            rps: Some(4.0),
            range: [Some(4.0), Some(4.4)],
            failed_at_rps: Some(4.4),
            at_least: false,
            inconclusive_rps: vec![],
            precision_reached: None,
            note: None,
            run_id: None,
            failed_run_id: None,
            failed_clauses: vec!["TTFT p99".into()],
            limited_by: None,
            ..CrOpen::default()
        }];
        let view = card_view(&report_with(card.clone()), &card);
        assert_eq!(
            reading(&card),
            "Within the `interactive` SLO this replica serves **4.00 req/s** of the `w` profile (open loop, poisson; \
             Cr_open lies between 4.00 and 4.40 req/s, the highest rate that passed and the lowest that failed, \
             each at 95% confidence); at 4.40 req/s it failed (TTFT p99). At saturation it does **2,050 output tok/s** at 32 concurrent \
             (closed loop); the knee, Cr_closed, spans 16–32 concurrent. CrossP was not reached in the sweep \
             (levels 16–32, closed loop): TTFT p50 never rose faster than output tok/s between consecutive levels."
        );
        assert_eq!(view.sweep[1].marks, ["Cr_closed upper", "X_max"]);
    }

    #[test]
    fn token_mismatch_over_five_percent_warns() {
        let mut card = empty_card();
        card.measured_tokens = Some(MeasuredTokens {
            calls: 100,
            prompt_tokens_requested_mean: 1000.0,
            prompt_tokens_reported_mean: Some(1040.0),
            output_tokens_requested_mean: 200.0,
            output_tokens_mean: 180.0,
            short_outputs: 7,
        });
        let tokens = tokens_view(&card).unwrap();
        assert!((tokens.prompt_difference_pct.unwrap() - 4.0).abs() < 1e-9);
        assert!(!tokens.prompt_mismatch);
        assert!(tokens.output_mismatch);
        let card_md = rendered(&card);
        assert_eq!(card_md.matches("> ⚠").count(), 1, "{card_md}");
        assert!(
            card_md.contains(
                "> ⚠ output tokens differ from those requested by -10.0% (more than 5%); \
                 7 calls ended short\n"
            ),
            "{card_md}"
        );
    }

    #[test]
    fn sizing_rows_name_the_mode_of_the_capacity_they_use() {
        let mut card = empty_card();
        card.arrival = Some("gamma cv=2".into());
        let row = |uses: &str| SizingRow {
            target: "x".into(),
            uses: uses.into(),
            cr_per_replica: None,
            unit: "req/s".into(),
            headroom: 0.3,
            spares: 0,
            replicas: None,
            cost_per_hour: None,
            cost_per_million_output_tokens: None,
            currency: None,
            note: None,
        };
        card.sizing = vec![row("cr_open:chat"), row("cr_closed")];
        let view = card_view(&report_with(card.clone()), &card);
        assert_eq!(view.sizing[0].uses, "Cr_open chat");
        assert_eq!(view.sizing[0].mode, "open loop, gamma cv=2");
        assert_eq!(view.sizing[1].mode, "closed loop");
    }

    /// An audit whose share held is below the stated confidence: the
    /// summary says the range is not of that confidence, the Key numbers
    /// row gives the share, and sizing, which reads the range, says so too.
    #[test]
    fn an_audit_below_the_stated_confidence_is_said_in_the_summary_and_in_sizing() {
        let mut card = empty_card();
        card.arrival = Some("poisson".into());
        card.cr_open = vec![CrOpen {
            slo: "chat".into(),
            rps: Some(10.0),
            range: [Some(9.0), Some(10.5)],
            promise_rps: Some(9.0),
            confidence: Some(0.9),
            method: Some("fit".into()),
            audit: Some(crate::analyze::audited::AuditQuote {
                target: "twin".into(),
                engine: "sim queue: 8 slots".into(),
                reference_method: "a long run".into(),
                seeds: 100,
                held: 77,
                held_interval: [0.68, 0.84],
                stated: 0.9,
                within_precision: 57,
                precision: 0.05,
                median_width: Some(0.125),
                reference_rps: Some(10.2),
                estimates_rps: Some([9.1, 11.0]),
            }),
            ..CrOpen::default()
        }];
        card.sizing = vec![SizingRow {
            target: "x".into(),
            uses: "cr_open:chat".into(),
            cr_per_replica: Some(9.0),
            unit: "req/s".into(),
            headroom: 0.3,
            spares: 0,
            replicas: Some(2),
            cost_per_hour: None,
            cost_per_million_output_tokens: None,
            currency: None,
            note: None,
        }];
        let text = rendered(&card);
        assert!(
            text.contains("**This range is not a 90% one here:** an audit of this experiment on `twin`")
                && text.contains("held the reference in 77 of 100 searches (77%; 68–84% at 95% confidence). Read it as a 77% range")
                && text.contains("90% range 9.00–10.5; audited: held 77%")
                && text.contains("- Cr_open `chat`: sizing reads a range that an audit of this experiment held in 77% of searches, not 90%"),
            "{text}"
        );
        // Held as often as stated: no warning, in the summary or in sizing.
        if let Some(audit) = card.cr_open[0].audit.as_mut() {
            audit.held = 92;
            audit.held_interval = [0.85, 0.96];
        }
        let text = rendered(&card);
        assert!(
            text.contains("The stated 90% is borne out")
                && !text.contains("not a 90% one")
                && !text.contains("sizing reads a range"),
            "{text}"
        );
    }

    #[test]
    fn the_card_puts_the_plans_times_beside_the_runs() {
        use crate::analyze::wall_time::CardWallTime;
        let mut card = empty_card();
        card.wall_time = Some(CardWallTime {
            planned_expected_s: Some(185.0),
            planned_bound_s: Some(300.0),
            actual_s: Some(357.0),
            runs: 12,
            runs_without_finish: 0,
            simulated_s: None,
        });
        let text = rendered(&card);
        assert!(
            text.contains(
                "| Time taken | planned 3 min 5 s, at most 5 min; took 5 min 57 s, the sum of 12 runs'"
            ) && text.contains("**beyond the plan's bound**"),
            "{text}"
        );
        // Virtual time: the plan is in simulated time, and so is the
        // comparison; the wall time is given apart.
        card.wall_time = Some(CardWallTime {
            actual_s: Some(1.5),
            simulated_s: Some(240.0),
            ..card.wall_time.clone().unwrap_or_default()
        });
        let text = rendered(&card);
        assert!(
            text.contains("planned 3 min 5 s, at most 5 min of simulated time; the runs simulated 4 min, in 1.5 s of wall time (virtual time)"),
            "{text}"
        );
        assert!(!text.contains("beyond the plan's bound"), "{text}");
    }
}
