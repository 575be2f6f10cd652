//! The only place with network and clock: drives an OpenAI-compatible
//! streaming endpoint exactly as a [`RunPlan`](crate::plan::RunPlan) says and
//! journals what happened to every request.
//!
//! Everything that can be decided without a socket or a clock lives in pure
//! submodules with byte- and number-level tests: SSE framing ([`sse`]), the
//! meaning of a token stream ([`stream`]), request bodies ([`request`]) and
//! the run footer ([`journal::build_footer`]). [`client`] sends one call,
//! [`runner`] schedules them.
//!
//! # Measurement rules
//!
//! Times are milliseconds since the run's start `t0` (the start of warmup).
//! Every call has a *scheduled* instant — latencies (TTFT, E2E) are measured
//! from it, not from the send — and `schedule_lag_ms = sent − scheduled`.
//!
//! **Closed loop** (`concurrency c`): `c` slots; each takes the next task
//! index, renders its first request, and sends it at once (scheduled = sent,
//! lag 0; the first step of an agent task is scheduled at the slot's start).
//! A finished task's slot takes the next index immediately. A conversation or
//! agent task holds its slot for its whole life, think and tool time included.
//!
//! **Open loop** (`rate λ`): task arrivals follow the seeded schedule of
//! [`arrival_times`](crate::workload::arrival_times) and are never rescaled,
//! dropped or held back (there is no concurrency cap). A dispatcher spawns
//! each arrival [`DISPATCH_LEAD`] ahead of time; the task renders its body and
//! sleeps until its scheduled instant on a dedicated timer thread with
//! sub-millisecond precision (tokio's timer wheel rounds up to the next
//! millisecond). If the generator falls behind, the lag is recorded per call
//! and the footer flags `generator_lagging` when the measured lag p99 exceeds
//! [`GENERATOR_LAG_P99_LIMIT_MS`](journal::GENERATOR_LAG_P99_LIMIT_MS).
//!
//! **Calls inside a task** follow the task's own loop: turn *k* of a
//! conversation is scheduled when turn *k−1* ended plus its think time; the
//! calls of an agent step are scheduled together when the previous step ended
//! plus its tool time, and run concurrently. Each body is rendered before its
//! scheduled instant (during the think or tool time). A failed call does not
//! end its task (the load stays as planned); the task's record counts it and
//! has no E2E.
//!
//! **Warmup and window.** Calls scheduled before `warmup` are journaled like
//! all others; the header's `measure_from_ms` tells analysis where measurement
//! starts. A call is *measured* when its scheduled instant lies in the
//! footer's `measured_window_ms`.
//! - Stop by duration: no task starts (closed) or is scheduled (open) at or
//!   after `warmup + duration`; the window is `[warmup, warmup + duration]`.
//! - Stop by `requests n`: tasks keep being started (closed) or scheduled
//!   (open) after warmup until they account for at least `n` calls (`n` tasks
//!   for single-call workloads); the window ends at the last completion of a
//!   measured call — except in closed loop, whose window ends when the last
//!   measured task starts: from then on the slots drain below `c`, which is
//!   not the load the level is about.
//!
//! **End of a run.** Tasks in flight when starting stops run to their end, so
//! no measured call is cut short by the clock — but not for ever: at the
//! *drain deadline* (the window's planned end, or the moment starting stopped,
//! plus the per-request timeout and a [`DRAIN_GRACE`](runner::DRAIN_GRACE) of
//! 1 s, so that single calls end by their own timeout) whatever is still in
//! flight is aborted and recorded as `cancelled`, and unfinished tasks get no
//! E2E. Ctrl-C (the runner cancels [`RunOptions::cancel`]) stops starting and
//! aborts in-flight calls at once, recording them as `cancelled`; the footer
//! says `interrupted`, the window ends at the interrupt, and everything
//! finished before stays in the journal. Calls never sent are not recorded.
//!
//! **Failed calls** keep what was measured before the failure (TTFT, gaps,
//! tokens counted) but have no E2E: a broken stream's first token is real.
//!
//! **Journal.** One writer thread owns the file ([`journal`]): header first,
//! one line per call and per multi-call task as each completes, footer last;
//! a crash loses at most the lines not yet flushed (milliseconds' worth).
//! Times are rounded to the microsecond.

pub mod client;
pub mod journal;
pub mod preflight;
pub mod progress;
pub mod record;
pub mod request;
pub mod runner;
pub mod sse;
pub mod stream;
pub mod telemetry;
mod timer;
pub mod tokenize;
mod transport;
pub mod virtual_time;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::config::{Api, Workload};
use crate::plan::{Load, RunPlan};

pub use client::{TokenIdSupport, probe_models, probe_token_ids};
pub use journal::{read_journal, read_journal_ends, stream_journal};
pub use record::{
    Dialect, EarlyStop, ErrorClass, Journal, JournalLine, RequestRecord, RunFooter, RunHeader,
    ShardClock, TaskRecord, TokenSource,
};
pub use request::{
    BodyOptions, ChatMessage, CompletionsPrompt, LengthField, Prompt, RequestSource, TraceSource,
    WorkloadSource,
};
pub use runner::DISPATCH_LEAD;
pub use transport::{HttpClient, HttpError, Reply, Streaming, Url};

/// One OpenAI-compatible endpoint as the runner resolved it.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Base URL including the version prefix, e.g. `http://127.0.0.1:8000/v1`.
    pub base_url: String,
    pub api: Api,
    /// Model id sent in every request.
    pub model: String,
    /// Sent as `Authorization: Bearer`; never journaled or logged.
    pub api_key: Option<String>,
    /// Per request, from send to end of stream.
    pub timeout: Duration,
    /// Let calls use HTTP/2 (multiplexed on few connections) where the
    /// server offers it; default HTTP/1.1, one connection per call in flight.
    pub http2: bool,
    /// Extra headers sent with every call (`header "name" "value"`).
    pub headers: Vec<(String, String)>,
    /// Fields dropped from or added to every call's body.
    pub body: BodyOptions,
}

/// How a run is carried out (not what it measures).
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Draw a progress bar (the runner passes false when not a TTY or `--quiet`).
    pub show_progress: bool,
    /// Cancelled by the runner on Ctrl-C: the run stops and is marked interrupted.
    pub cancel: CancellationToken,
    /// How the server's prefix cache was reset before this run, if it was
    /// (journaled, for the card).
    pub prefix_cache_reset: Option<String>,
    /// Why the server's telemetry is not scraped, if it is not (journaled).
    pub telemetry_off: Option<String>,
    /// Return only the journal's header and footer: the records stay on
    /// disk, and memory does not grow with the run (`capcard run` does this).
    pub discard_records: bool,
    /// The target's context window, if known (journaled, for the card).
    pub context_window: Option<crate::plan::context::ContextWindow>,
    /// Send only one shard's part of the run, from an agreed instant.
    pub shard: Option<ShardRun>,
    /// What the target's preflight settled (journaled, for the card).
    pub dialect: Option<record::Dialect>,
    /// Makes each run's watch, which may end it early (a search's open
    /// runs, once decisively beyond their SLOs); `None`: runs run their
    /// course.
    pub watch: Option<WatchFactory>,
}

/// What makes a run's watch: given the run, its watch, if it gets one.
pub type MakeWatch =
    dyn Fn(&crate::plan::RunPlan) -> Option<Box<dyn record::RunWatch>> + Send + Sync;

/// Makes the [`RunWatch`](record::RunWatch) of a run, if it gets one.
#[derive(Clone)]
pub struct WatchFactory(pub Arc<MakeWatch>);

impl std::fmt::Debug for WatchFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WatchFactory")
    }
}

impl WatchFactory {
    pub fn watch_for(&self, run: &crate::plan::RunPlan) -> Option<Box<dyn record::RunWatch>> {
        (self.0)(run)
    }
}

/// One shard's part of a run ([`crate::plan::shard`] says which part).
#[derive(Debug, Clone)]
pub struct ShardRun {
    pub part: crate::plan::shard::ShardPart,
    /// The agreed t0 on this host's clock (the reference instant corrected
    /// by the measured clock offset).
    pub start_at: std::time::SystemTime,
    /// Journaled in the header; its `start_lag_ms` is filled in by the run.
    pub clock: record::ShardClock,
}

/// What makes a run impossible. Endpoint failures during a run are not
/// errors: they are [`RequestRecord`]s with an [`ErrorClass`].
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("invalid endpoint URL `{url}`: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("the API key contains characters that cannot be sent in an HTTP header")]
    BadApiKey,
    #[error("header `{name}`: its name or value cannot be sent in an HTTP header")]
    BadHeader { name: String },
    #[error("endpoint {url} is unreachable: {reason}")]
    Unreachable { url: String, reason: String },
    #[error("cannot write journal {}: {source}", path.display())]
    Journal {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("journal {} line {line} is not a journal line: {source}", path.display())]
    JournalParse {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
    #[error("cannot create the HTTP client: {0}")]
    Client(String),
    #[error("run {run}: {reason}")]
    BadRun { run: String, reason: String },
}

/// Execute one run: write the journal to `journal_path` (create/truncate;
/// header first, then one line per call/task as each completes, flushed;
/// footer at the end, also when cancelled) and return the journal in memory.
///
/// Requests are the workload's seeded tasks ([`WorkloadSource`], text prompts
/// for `completions`); open-loop arrivals come from
/// [`arrival_times`](crate::workload::arrival_times) with the run's seed.
pub async fn execute_run(
    endpoint: &Endpoint,
    workload: &Workload,
    run: &RunPlan,
    journal_path: &Path,
    options: &RunOptions,
) -> Result<Journal, ExecError> {
    let source =
        WorkloadSource::new(workload, run.seed, endpoint.api, CompletionsPrompt::Text).shared();
    let inputs = RunInputs::for_run(run, source);
    execute_run_with(endpoint, run, inputs, journal_path, options).await
}

/// What a run sends and when, when the caller chooses it (token-id prompts,
/// a custom request source, a recorded arrival trace).
pub struct RunInputs {
    pub source: Arc<dyn RequestSource>,
    /// Open loop: arrival offsets from `t0`, in increasing order. Must be
    /// `Some` exactly for runs with a rate.
    pub arrivals: Option<Box<dyn Iterator<Item = Duration> + Send>>,
}

impl RunInputs {
    /// `source`, and the seeded arrival schedule if the run is open-loop.
    pub fn for_run(run: &RunPlan, source: Arc<dyn RequestSource>) -> Self {
        let arrivals = match run.load {
            Load::Rate { rate, arrival } => Some(Box::new(crate::workload::arrival_times(
                arrival, rate, run.seed,
            ))
                as Box<dyn Iterator<Item = Duration> + Send>),
            Load::Concurrency { .. } => None,
        };
        RunInputs { source, arrivals }
    }
}

/// An open schedule's arrivals.
pub(crate) type Arrivals = Box<dyn Iterator<Item = Duration> + Send>;

/// A run's concurrency (closed loop) or arrival schedule (open loop), or
/// why the two do not go together; shared by both executors.
pub(crate) fn load_of(
    run: &RunPlan,
    arrivals: Option<Arrivals>,
) -> Result<(Option<u32>, Option<Arrivals>), &'static str> {
    match (run.load, arrivals) {
        (Load::Concurrency { concurrency: 0 }, _) => Err("concurrency 0"),
        (Load::Concurrency { concurrency }, None) => Ok((Some(concurrency), None)),
        (Load::Rate { .. }, Some(arrivals)) => Ok((None, Some(arrivals))),
        (Load::Concurrency { .. }, Some(_)) => Err("an arrival schedule for a closed-loop run"),
        (Load::Rate { .. }, None) => Err("an open-loop run without an arrival schedule"),
    }
}

/// [`execute_run`] with explicit inputs.
pub async fn execute_run_with(
    endpoint: &Endpoint,
    run: &RunPlan,
    inputs: RunInputs,
    journal_path: &Path,
    options: &RunOptions,
) -> Result<Journal, ExecError> {
    runner::run(endpoint, run, inputs, journal_path, options).await
}
