//! Runs on the built-in engine's own clock: the same plan, request stream,
//! journal and footer as [`runner`](super::runner), without HTTP, sockets
//! or sleeping (`capcard run --virtual`, `virtual #true` on a `sim` target).
//!
//! A discrete-event loop owns the engines (one per replica, routed by
//! [`sim::cluster::Router`]) and the client side of every task. Time only
//! moves when the next event says so: an arrival, a call's submission, a
//! step's end, a think or tool pause, a timeout, the drain deadline. All
//! events at one instant are applied before any idle engine starts its
//! next step, so a closed loop's `c` first calls share a step, and a call
//! sent the moment another ends joins the next step, as on a real server
//! with no client overhead. `network-overhead` adds a declared constant
//! between a call's send and its submission to the engine (TTFT and E2E
//! include it, as a real client's do).
//!
//! The rules of the [module docs](super) hold unchanged: latencies from the
//! scheduled instant (with zero schedule lag: nothing here can fall
//! behind), closed slots refilled at the instant a task ends, open arrivals
//! never held back, the stop rules, the measured window, the drain deadline
//! (planned end + timeout + 1 s), Ctrl-C. Bodies are rendered exactly as
//! the HTTP runner sends them and read back by the simulator's own parser
//! ([`sim::request::parse_call`]), so the engine sees the same tokens and
//! stopping rules, and refuses what the server would refuse. Injected faults
//! (fail, cut, stall) use the server's seeded draws.
//!
//! Answers are the server's too ([`sim::answer`]): a call reasons the
//! tokens the server's seeded draw gives its request id, answers with a
//! tool call when its body offers tools, and its tokens reach the client
//! in events of the preset's `tokens-per-event`. Each record is what the
//! client's parser ([`super::stream`]) makes of that stream: TTFT at the
//! first event, TTFO at the first event of the answer, ITL between
//! events, reasoning tokens and the tool call from usage (or, without
//! usage, counted in events, as the client counts chunks).
//!
//! Each run starts on fresh engines: an empty prefix cache, as a real
//! server whose cache is reset before every run.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::journal::{self, FooterPlan, WindowEnd, WriterMsg};
use super::record::{
    DecisiveStop, ErrorClass, Journal, JournalLine, RequestRecord, RunHeader, RunWatch, TaskRecord,
    TokenSource,
};
use super::request::{BodyOptions, RequestSource, build_spec_body};
use super::runner::DRAIN_GRACE;
use super::stream::round_us;
use super::telemetry::{ScrapeRecord, record_from_text};
use super::{ExecError, RunInputs, RunOptions};
use crate::config::{Api, SimFaults, SimRouter, StopRule};
use crate::plan::{Load, RunPlan};
use crate::sim::answer::AnswerPlan;
use crate::sim::cluster::Router;
use crate::sim::http::merge_rendered;
use crate::sim::metrics::render;
use crate::sim::request::{Faulted, Refusal, fault_draw, parse_call};
use crate::sim::{Engine, FinishReason, Preset, RequestId};
use crate::workload::{CallSpec, Task, TaskSpec};

/// Period of the in-flight samples in the footer (as in real time).
const INFLIGHT_SAMPLE_PERIOD: Duration = Duration::from_millis(100);
/// Period of the engine's telemetry, as `capcard run` scrapes a server.
const SCRAPE_PERIOD: Duration = Duration::from_secs(1);

/// A `sim` target as the virtual clock drives it.
#[derive(Debug, Clone)]
pub struct VirtualTarget {
    /// With the target's knobs applied.
    pub preset: Preset,
    pub replicas: u32,
    pub router: SimRouter,
    pub faults: SimFaults,
    /// The simulator's seed (token draws, stops, faults).
    pub seed: u64,
    /// The model id sent in every call (the preset's served name unless the
    /// target names another).
    pub model: String,
    /// Names the engine serves: the base model, then adapters.
    pub served: Vec<String>,
    pub api: Api,
    pub body: BodyOptions,
    /// Per call, from send to end of stream.
    pub timeout: Duration,
    /// Added between a call's send and its submission to the engine.
    pub network_overhead: Duration,
    /// The engine's window and where it comes from, for the journal.
    pub context_window: Option<crate::plan::context::ContextWindow>,
}

impl VirtualTarget {
    /// The journal's `clock`: which clock measured the run, for the card.
    pub fn clock(&self) -> String {
        let mut clock =
            "virtual time (the simulated engine's own clock, in process, no HTTP)".to_string();
        if !self.network_overhead.is_zero() {
            clock.push_str(&format!(
                "; {:.3} ms network overhead per call declared",
                self.network_overhead.as_secs_f64() * 1e3
            ));
        }
        clock
    }
}

/// Execute one run in virtual time: the journal at `journal_path` as
/// [`super::execute_run_with`] writes it, and the journal in memory.
/// The engine's own `/metrics`, rendered every second of virtual time, go
/// to `telemetry_path` as `capcard run` journals a server's scrapes.
pub async fn execute_virtual(
    target: &VirtualTarget,
    run: &RunPlan,
    inputs: RunInputs,
    (journal_path, telemetry_path): (&Path, Option<&Path>),
    options: &RunOptions,
) -> Result<Journal, ExecError> {
    let (journal_tx, writer) = journal::spawn_writer(
        journal_path,
        !options.discard_records,
        Some(Arc::clone(&inputs.source)),
    )?;
    let run_id = run.id.clone();
    let (target, run, cancel) = (target.clone(), run.clone(), options.cancel.clone());
    let header_extra = (
        options.prefix_cache_reset.clone(),
        options.telemetry_off.clone(),
    );
    let tx = journal_tx.clone();
    let watch = options.watch.as_ref().and_then(|f| f.watch_for(&run));
    let simulated = tokio::task::spawn_blocking(move || {
        let mut sink = |line: JournalLine| {
            // Fails only if the writer stopped; its error is returned below.
            let _ = tx.send(WriterMsg::Line(line));
        };
        simulate(
            &target,
            &run,
            inputs,
            header_extra,
            &|| cancel.is_cancelled(),
            &mut sink,
            watch,
        )
    })
    .await;
    let (footer, telemetry) = match simulated {
        Ok(simulated) => simulated?,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => {
            return Err(ExecError::BadRun {
                run: run_id,
                reason: format!("the virtual-time run was cancelled: {e}"),
            });
        }
    };
    if let Some(path) = telemetry_path {
        write_telemetry(path, &telemetry).map_err(|source| ExecError::Journal {
            path: path.to_path_buf(),
            source,
        })?;
    }
    let _ = journal_tx.send(WriterMsg::Finish(footer));
    drop(journal_tx);
    match writer.await {
        Ok(result) => result,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(ExecError::Journal {
            path: journal_path.to_path_buf(),
            source: std::io::Error::other(e),
        }),
    }
}

/// One line per scrape, as [`super::telemetry::Scraper`] writes them.
fn write_telemetry(path: &Path, scrapes: &[ScrapeRecord]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut text = String::new();
    for scrape in scrapes {
        text.push_str(&serde_json::to_string(scrape).map_err(std::io::Error::other)?);
        text.push('\n');
    }
    std::fs::write(path, text)
}

/// One run in virtual time, in memory: the journal's lines go to `sink` in
/// the order the HTTP runner writes them (header, then records as calls and
/// tasks end); the footer's plan and the engine's telemetry (one scrape per
/// second) are returned. No I/O, no clock: the same target, run and inputs
/// give the same lines. `cancelled` is polled (Ctrl-C). `watch`, if any, is
/// told every record at its completion instant and may end the run, as in
/// real time.
pub fn simulate(
    target: &VirtualTarget,
    run: &RunPlan,
    inputs: RunInputs,
    (prefix_cache_reset, telemetry_off): (Option<String>, Option<String>),
    cancelled: &dyn Fn() -> bool,
    sink: &mut dyn FnMut(JournalLine),
    watch: Option<Box<dyn RunWatch>>,
) -> Result<(FooterPlan, Vec<ScrapeRecord>), ExecError> {
    let bad_run = |reason: &str| ExecError::BadRun {
        run: run.id.clone(),
        reason: reason.to_string(),
    };
    let RunInputs { source, arrivals } = inputs;
    let (concurrency, arrivals) = super::load_of(run, arrivals).map_err(bad_run)?;
    if target.replicas == 0 {
        return Err(bad_run("a simulator with 0 replicas"));
    }
    let measure_from_ms = run.warmup.as_secs_f64() * 1e3;
    sink(JournalLine::Run(RunHeader {
        run: run.clone(),
        started_at: crate::time::rfc3339_utc(SystemTime::now()),
        model: target.model.clone(),
        measure_from_ms,
        content_nonce: source.content_nonce(),
        prompt_sizing: source.prompt_sizing(),
        prefix_cache_reset,
        telemetry_off,
        clock: Some(target.clock()),
        context_window: target.context_window.clone(),
        shard: None,
        shards: Vec::new(),
        dialect: None,
    }));
    let mut sim = Sim::new(target, run, source, concurrency.is_some(), sink);
    sim.watch = watch;
    let outcome = sim.run(concurrency, arrivals, cancelled);
    let footer = FooterPlan {
        // An early stop judges every call the run made (see `exec::runner`).
        measure_from_ms: if outcome.stopped_early.is_some() {
            0.0
        } else {
            measure_from_ms
        },
        window_end: outcome.window_end,
        arrivals_ms: outcome.arrivals_ms,
        inflight_samples: std::mem::take(&mut sim.inflight_samples),
        interrupted: outcome.interrupted,
        finished_at: crate::time::rfc3339_utc(SystemTime::now()),
        connections_opened: None,
        stopped_early: outcome.stopped_early,
        decided: outcome.decided,
    };
    Ok((footer, std::mem::take(&mut sim.scrapes)))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The open loop's next arrival is due.
    Arrival,
    /// A sent call reaches the engine (after the network overhead).
    Submit(u64),
    /// A call's timeout (from its send) is up.
    Timeout(u64),
    /// A call's last byte arrives later than its last token (a stall).
    Complete(u64),
    /// A replica's step ends: its tokens are delivered.
    StepEnd(usize),
    /// A queue replica (`sim queue`) has something due: a token, a slot
    /// freed. Its steps take no time, so it asks to be woken.
    Wake(usize),
    /// A task's next turn or agent step is due (think or tool time over).
    Stage(u64),
    /// A graph task's call is due (its parent answered and its gap is over).
    Ready(u64, u32),
    /// The planned end: no task starts after it.
    StopStarting,
    /// Whatever is still in flight is cancelled.
    Drain,
}

/// A call between its send and its end.
struct Call {
    task: u64,
    call: u32,
    input_tokens: u32,
    output_tokens: u32,
    scheduled: Duration,
    /// `None` until the engine took it (or refused it).
    replica: Option<usize>,
    request: Option<crate::sim::EngineRequest>,
    include_usage: bool,
    faults: crate::sim::request::FaultPlan,
    /// Which API answers, for its finish reasons.
    api: crate::sim::request::Api,
    /// Reasoning, tool call and events, as the server answers it.
    answer: AnswerPlan,
    /// When each generated token reached the client.
    token_at: Vec<Duration>,
    /// When each event reached the client (its last token's time), and
    /// whether it carried the answer rather than reasoning.
    event_at: Vec<(Duration, bool)>,
    /// Tokens in the events sent (a cut loses those buffered for the next).
    event_tokens: u32,
    stall_release: Option<Duration>,
    prompt_tokens: Option<u32>,
    /// Prompt tokens the engine found in its prefix cache.
    cached_tokens: Option<u32>,
    finish: Option<&'static str>,
}

/// The finish reason the client reads of an answer of `generated` tokens
/// that the engine ended for `reason`: chat's (`tool_calls` once the tool
/// was called), or what the client makes of the Responses API's final
/// status (`length` for `incomplete`, `tool_calls` after a function call,
/// else `stop`, as chat says it).
fn finish_label(
    api: crate::sim::request::Api,
    answer: &AnswerPlan,
    reason: FinishReason,
    generated: u32,
) -> &'static str {
    use crate::sim::request::Api as SimApi;
    match (api, reason) {
        (SimApi::Completions, _) => reason.as_str(),
        (SimApi::Chat, _) => answer.finish_reason(reason, generated),
        (SimApi::Responses, FinishReason::Length) => "length",
        (SimApi::Responses, FinishReason::Stop) if answer.calls_tool(generated) => "tool_calls",
        (SimApi::Responses, FinishReason::Stop) => "stop",
    }
}

/// A task between its start and its end.
struct TaskState {
    task: Task,
    stage: usize,
    /// Calls of the current stage still in flight.
    pending: u32,
    stage_end: Duration,
    calls: u32,
    failed: u32,
    context_rejected: u32,
    started: Duration,
    closed_slot: bool,
}

/// A task's calls in stages: one turn, or one agent step's fan-out, with
/// the pause before each stage.
fn stages(task: &Task) -> Vec<(Duration, Vec<(u32, &CallSpec)>)> {
    match &task.spec {
        TaskSpec::Single(call) => vec![(Duration::ZERO, vec![(0, call)])],
        TaskSpec::Conversation { turns } => turns
            .iter()
            .enumerate()
            .map(|(k, t)| (t.think_time_before, vec![(k as u32, &t.call)]))
            .collect(),
        // Scheduled call by call (`Event::Ready`), not in stages.
        TaskSpec::Graph { .. } => Vec::new(),
        TaskSpec::Agent { steps } => {
            let mut next = 0u32;
            let mut pause = Duration::ZERO;
            steps
                .iter()
                .map(|s| {
                    let calls = s
                        .calls
                        .iter()
                        .map(|c| {
                            next += 1;
                            (next - 1, c)
                        })
                        .collect();
                    let stage = (pause, calls);
                    pause = s.tool_time_after;
                    stage
                })
                .collect()
        }
    }
}

/// A graph task's roots and their start offsets; `None` for other shapes.
fn graph_roots(task: &Task) -> Option<Vec<(u32, Duration)>> {
    match &task.spec {
        TaskSpec::Graph { calls } => Some(
            calls
                .iter()
                .enumerate()
                .filter(|(_, c)| c.parent.is_none())
                .map(|(k, c)| (k as u32, c.gap))
                .collect(),
        ),
        _ => None,
    }
}

struct Outcome {
    window_end: WindowEnd,
    arrivals_ms: Option<Vec<f64>>,
    interrupted: bool,
    stopped_early: Option<crate::exec::record::EarlyStop>,
    decided: Option<DecisiveStop>,
}

fn ms(t: Duration) -> f64 {
    round_us(t.as_secs_f64() * 1e3)
}

struct Sim<'a> {
    target: &'a VirtualTarget,
    run: &'a RunPlan,
    source: Arc<dyn RequestSource>,
    sink: &'a mut dyn FnMut(JournalLine),
    engines: Vec<Engine>,
    /// Per replica: whether a step is under way.
    busy: Vec<bool>,
    /// Per replica: the step under way's tokens, delivered at its end.
    step_out: Vec<Option<crate::sim::StepOutput>>,
    /// Per replica: the wake-up already scheduled for a queue engine.
    wake_at: Vec<Option<Duration>>,
    router: Router,
    now: Duration,
    events: BinaryHeap<Reverse<(Duration, u64, Event)>>,
    event_seq: u64,
    calls: HashMap<u64, Call>,
    tasks: HashMap<u64, TaskState>,
    next_request_id: u64,
    closed: bool,
    stop_starting: bool,
    stopped_at: Option<Duration>,
    planned_end: Option<Duration>,
    measure_from: Duration,
    // Closed loop.
    next_index: u64,
    measured_calls: u64,
    request_limit: Option<u64>,
    limit_reached: bool,
    inflight: u32,
    next_sample: Duration,
    inflight_samples: Vec<(f64, u32)>,
    next_scrape: Duration,
    scrapes: Vec<ScrapeRecord>,
    /// The early-stop rule, as in real time.
    fail_fast: super::runner::FailFast,
    stopped_early: Option<crate::exec::record::EarlyStop>,
    /// The run's watch, as in real time; what it decided.
    watch: Option<Box<dyn RunWatch>>,
    decided: Option<DecisiveStop>,
}

impl<'a> Sim<'a> {
    fn new(
        target: &'a VirtualTarget,
        run: &'a RunPlan,
        source: Arc<dyn RequestSource>,
        closed: bool,
        sink: &'a mut dyn FnMut(JournalLine),
    ) -> Self {
        let replicas = target.replicas as usize;
        // A queue's service times are its draws by request id, and ids
        // start again each run: drawn from the target's seed alone, every
        // run would replay one service sequence, and runs meant to be
        // independent would share its luck. A queue's draws follow the
        // run's seed too, as a server that went on serving would. (The
        // batching engine keeps its token and stop draws by the target's
        // seed, which its calibrations and tests were made with.)
        let base = if target.preset.queue.is_some() {
            crate::hash::mix(target.seed, run.seed)
        } else {
            target.seed
        };
        let engines = (0..replicas)
            .map(|r| {
                // Replicas draw their own tokens, as separate servers do.
                let seed = crate::hash::mix(base, r as u64);
                Engine::new(&target.preset, if r == 0 { base } else { seed })
            })
            .collect();
        let planned_end = match run.stop {
            StopRule::Duration(d) => Some(run.warmup + d),
            StopRule::Requests(_) | StopRule::TraceEnd => None,
        };
        Sim {
            target,
            run,
            source,
            sink,
            engines,
            busy: vec![false; replicas],
            step_out: (0..replicas).map(|_| None).collect(),
            wake_at: vec![None; replicas],
            router: Router::new(target.router),
            now: Duration::ZERO,
            events: BinaryHeap::new(),
            event_seq: 0,
            calls: HashMap::new(),
            tasks: HashMap::new(),
            next_request_id: 0,
            closed,
            stop_starting: false,
            stopped_at: None,
            planned_end,
            measure_from: run.warmup,
            next_index: 0,
            measured_calls: 0,
            request_limit: match run.stop {
                StopRule::Requests(n) => Some(n),
                StopRule::Duration(_) | StopRule::TraceEnd => None,
            },
            limit_reached: false,
            inflight: 0,
            next_sample: Duration::ZERO,
            inflight_samples: Vec::new(),
            next_scrape: Duration::ZERO,
            scrapes: Vec::new(),
            fail_fast: super::runner::FailFast::default(),
            stopped_early: None,
            watch: None,
            decided: None,
        }
    }

    fn at(&mut self, t: Duration, event: Event) {
        self.event_seq += 1;
        self.events.push(Reverse((t, self.event_seq, event)));
    }

    fn emit(&mut self, line: JournalLine) {
        if !self.stop_starting
            && let Some(watch) = self.watch.as_mut()
            && let Some(stop) = watch.observe(&line, ms(self.now))
        {
            self.decided = Some(stop);
            self.stop_early();
        }
        (self.sink)(line);
    }

    /// Starting stops now; the drain deadline counts from the planned end
    /// (or now, past it).
    fn stop(&mut self) {
        let drain_from = self.planned_end.map_or(self.now, |end| end.max(self.now));
        self.stop_draining_from(drain_from);
    }

    /// The watch ended the run: starting stops now, and the drain deadline
    /// counts from now, not from the planned end (as in real time).
    fn stop_early(&mut self) {
        self.stop_draining_from(self.now);
    }

    fn stop_draining_from(&mut self, drain_from: Duration) {
        if self.stop_starting {
            return;
        }
        self.stop_starting = true;
        self.stopped_at = Some(self.now);
        self.at(drain_from + self.target.timeout + DRAIN_GRACE, Event::Drain);
    }

    fn run(
        &mut self,
        concurrency: Option<u32>,
        arrivals: Option<Box<dyn Iterator<Item = Duration> + Send>>,
        cancelled: &dyn Fn() -> bool,
    ) -> Outcome {
        if let Some(end) = self.planned_end {
            self.at(end, Event::StopStarting);
        }
        let mut arrivals = arrivals;
        let mut arrivals_ms: Option<Vec<f64>> = arrivals.as_ref().map(|_| Vec::new());
        // The open loop's next arrival: (index, offset).
        let mut next_arrival: Option<(u64, Duration)> = None;
        let mut schedule_exhausted = false;
        let mut arrival_index = 0u64;
        let mut pull_arrival = |sim: &mut Self, exhausted: &mut bool| -> Option<(u64, Duration)> {
            let offset = arrivals.as_mut()?.next();
            let Some(offset) = offset else {
                *exhausted = true;
                return None;
            };
            match sim.run.stop {
                StopRule::Duration(d) if offset >= sim.run.warmup + d => return None,
                StopRule::Requests(n) if sim.measured_calls >= n => return None,
                _ => {}
            }
            let index = arrival_index;
            arrival_index += 1;
            Some((index, offset))
        };
        match concurrency {
            Some(c) => {
                for _ in 0..c {
                    self.start_closed_task();
                }
            }
            None => {
                next_arrival = pull_arrival(self, &mut schedule_exhausted);
                match next_arrival {
                    Some((_, offset)) => self.at(offset, Event::Arrival),
                    None => self.stop(),
                }
            }
        }

        let mut interrupted = false;
        let mut polls = 0u32;
        while let Some(&Reverse((t, _, _))) = self.events.peek() {
            polls = polls.wrapping_add(1);
            if polls % 256 == 0 && cancelled() {
                interrupted = true;
                self.abort_all("run interrupted while the call was in flight");
                break;
            }
            if self.calls.is_empty() && self.tasks.is_empty() && self.stop_starting {
                break;
            }
            self.advance_to(t);
            // Every event at this instant, including those it schedules now.
            while let Some(&Reverse((t2, _, event))) = self.events.peek() {
                if t2 != t {
                    break;
                }
                self.events.pop();
                match event {
                    Event::Arrival => {
                        if self.stop_starting {
                            continue;
                        }
                        let Some((index, offset)) = next_arrival.take() else {
                            continue;
                        };
                        let task = self.source.task(index);
                        if offset >= self.run.warmup {
                            self.measured_calls += task.spec.calls() as u64;
                        }
                        if let Some(list) = arrivals_ms.as_mut() {
                            list.push(ms(offset));
                        }
                        if let Some(stop) = self
                            .watch
                            .as_mut()
                            .and_then(|w| w.arrived(ms(offset), ms(offset)))
                        {
                            // The arrival lies at the stop: not sent.
                            self.decided = Some(stop);
                            self.stop_early();
                            continue;
                        }
                        self.start_task(task, false);
                        next_arrival = pull_arrival(self, &mut schedule_exhausted);
                        match next_arrival {
                            Some((_, offset)) => self.at(offset, Event::Arrival),
                            None => self.stop(),
                        }
                    }
                    Event::Submit(id) => self.submit(id),
                    Event::Timeout(id) => {
                        if self.calls.contains_key(&id) {
                            let detail = format!(
                                "no complete response within the {:.3} s timeout ({} content chunks received)",
                                self.target.timeout.as_secs_f64(),
                                self.calls[&id].event_at.len()
                            );
                            self.end_call(id, Some((ErrorClass::Timeout, detail)), None);
                        }
                    }
                    Event::Complete(id) => {
                        if self.calls.contains_key(&id) {
                            self.end_call(id, None, None);
                        }
                    }
                    Event::StepEnd(replica) => self.deliver(replica),
                    Event::Wake(replica) => {
                        if self.wake_at[replica] == Some(t) {
                            self.wake_at[replica] = None;
                        }
                    }
                    Event::Stage(task) => self.start_stage(task),
                    Event::Ready(task, call) => self.start_graph_call(task, call),
                    Event::StopStarting => self.stop(),
                    Event::Drain => {
                        self.abort_all(
                            "still in flight at the run's drain deadline (starting stopped + timeout + 1 s)",
                        );
                    }
                }
            }
            self.start_steps();
        }
        self.advance_to(self.now);

        let replays_trace = matches!(
            self.run.load,
            Load::Rate {
                arrival: crate::config::Arrival::Trace,
                ..
            }
        );
        let stopped_early = self.stopped_early.take();
        let decided = self.decided.take();
        let window_end = match self.run.stop {
            _ if stopped_early.is_some() && !interrupted => {
                WindowEnd::At(stopped_early.as_ref().map_or(0.0, |s| s.at_ms))
            }
            _ if decided.is_some() && !interrupted => {
                WindowEnd::At(decided.as_ref().map_or(0.0, |d| d.at_ms))
            }
            StopRule::Duration(_) if replays_trace && schedule_exhausted && !interrupted => {
                WindowEnd::LastMeasuredCompletion
            }
            StopRule::Duration(_) => {
                let planned = self.planned_end.unwrap_or(self.measure_from);
                WindowEnd::At(ms(if interrupted {
                    self.now.min(planned)
                } else {
                    planned
                }))
            }
            StopRule::Requests(_) if !interrupted && self.closed && self.limit_reached => {
                WindowEnd::LastMeasuredStart
            }
            StopRule::Requests(_) | StopRule::TraceEnd => WindowEnd::LastMeasuredCompletion,
        };
        Outcome {
            window_end,
            arrivals_ms,
            interrupted,
            stopped_early,
            decided,
        }
    }

    /// Moves the clock to `t`, sampling the calls in flight and scraping
    /// the engines' metrics on the way (nothing changes between events).
    fn advance_to(&mut self, t: Duration) {
        while self.next_sample < t {
            self.inflight_samples
                .push((ms(self.next_sample), self.inflight));
            self.next_sample += INFLIGHT_SAMPLE_PERIOD;
        }
        while self.next_scrape < t {
            let texts: Vec<String> = self
                .engines
                .iter()
                .map(|e| render(&self.target.model, &e.metrics()))
                .collect();
            let text = if texts.len() == 1 {
                texts.into_iter().next().unwrap_or_default()
            } else {
                merge_rendered(&texts)
            };
            self.scrapes
                .push(record_from_text(ms(self.next_scrape), &text));
            self.next_scrape += SCRAPE_PERIOD;
        }
        self.now = self.now.max(t);
    }

    /// A closed slot takes the next task, unless starting has stopped.
    fn start_closed_task(&mut self) {
        if self.stop_starting {
            return;
        }
        if self.planned_end.is_some_and(|end| self.now >= end) {
            self.stop();
            return;
        }
        let task = self.source.task(self.next_index);
        self.next_index += 1;
        if let Some(limit) = self.request_limit
            && self.now >= self.measure_from
        {
            let calls = task.spec.calls() as u64;
            let before = self.measured_calls;
            self.measured_calls += calls;
            if before >= limit {
                self.stop();
                return;
            }
            if before + calls >= limit {
                self.limit_reached = true;
                self.stop();
            }
        }
        self.start_task(task, true);
    }

    fn start_task(&mut self, task: Task, closed_slot: bool) {
        let index = task.index;
        self.tasks.insert(
            index,
            TaskState {
                task,
                stage: 0,
                pending: 0,
                stage_end: self.now,
                calls: 0,
                failed: 0,
                context_rejected: 0,
                started: self.now,
                closed_slot,
            },
        );
        if let Some(roots) = graph_roots(&self.tasks[&index].task) {
            let state = self.tasks.get_mut(&index).expect("just inserted");
            state.pending = state.task.spec.calls() as u32;
            if roots.is_empty() {
                self.end_task(index);
            }
            for (call, gap) in roots {
                self.at(self.now + gap, Event::Ready(index, call));
            }
            return;
        }
        self.start_stage(index);
    }

    /// Sends call `call` of graph task `index` now.
    fn start_graph_call(&mut self, index: u64, call: u32) {
        let Some(state) = self.tasks.get(&index) else {
            return;
        };
        let TaskSpec::Graph { calls } = &state.task.spec else {
            return;
        };
        let Some(node) = calls.get(call as usize) else {
            return;
        };
        let (spec, class) = (node.call.clone(), state.task.class.clone());
        self.send_call(index, call, spec, class);
    }

    /// Sends every call of the task's current stage now.
    fn start_stage(&mut self, index: u64) {
        let Some(state) = self.tasks.get(&index) else {
            return;
        };
        let class = state.task.class.clone();
        let calls: Vec<(u32, CallSpec)> = stages(&state.task)
            .get(state.stage)
            .map(|(_, calls)| calls.iter().map(|(i, c)| (*i, (*c).clone())).collect())
            .unwrap_or_default();
        if calls.is_empty() {
            self.end_task(index);
            return;
        }
        if let Some(state) = self.tasks.get_mut(&index) {
            state.pending = calls.len() as u32;
            if state.stage == 0 {
                state.started = self.now;
            }
        }
        for (call_index, spec) in calls {
            self.send_call(index, call_index, spec, class.clone());
        }
    }

    /// Sends one call of task `index` now.
    fn send_call(
        &mut self,
        index: u64,
        call_index: u32,
        spec: CallSpec,
        class: Option<Arc<crate::workload::TaskClass>>,
    ) {
        {
            let model = class
                .as_ref()
                .and_then(|c| c.model.as_deref())
                .unwrap_or(&self.target.model);
            let body = build_spec_body(
                self.target.api,
                model,
                &self.source.render(&spec),
                &spec,
                &self.target.body,
                class.as_ref().and_then(|c| c.priority),
            );
            let id = self.next_request_id;
            self.next_request_id += 1;
            let api = match self.target.api {
                Api::Chat => crate::sim::request::Api::Chat,
                Api::Completions => crate::sim::request::Api::Completions,
                Api::Responses => crate::sim::request::Api::Responses,
            };
            let mut call = Call {
                task: index,
                call: call_index,
                input_tokens: spec.input_tokens,
                output_tokens: spec.output_tokens,
                scheduled: self.now,
                replica: None,
                request: None,
                include_usage: false,
                faults: Default::default(),
                api,
                answer: AnswerPlan::plain(),
                token_at: Vec::new(),
                event_at: Vec::new(),
                event_tokens: 0,
                stall_release: None,
                prompt_tokens: None,
                cached_tokens: None,
                finish: None,
            };
            self.inflight += 1;
            let arrives = self.now + self.target.network_overhead;
            let refusal = match parse_call(api, &body, &self.target.preset, &self.target.served) {
                Ok(parsed) => {
                    call.include_usage = parsed.include_usage;
                    call.prompt_tokens = Some(parsed.prompt.len() as u32);
                    call.answer = AnswerPlan::for_call(
                        api,
                        &self.target.preset.answers,
                        self.target.seed,
                        RequestId(id),
                        parsed.tool.clone(),
                    );
                    match fault_draw(
                        &self.target.faults,
                        self.target.seed,
                        RequestId(id),
                        parsed.max_tokens,
                    ) {
                        Faulted::Fail => Some((
                            ErrorClass::HttpStatus,
                            "HTTP 500 Internal Server Error: injected failure (sim fail-rate)"
                                .to_string(),
                            500,
                        )),
                        Faulted::Serve(plan) => {
                            call.faults = plan;
                            call.request = Some(parsed.into_engine_request(RequestId(id)));
                            None
                        }
                    }
                }
                Err(refusal) => Some(refused(&refusal)),
            };
            self.calls.insert(id, call);
            match refusal {
                None => {
                    self.at(arrives, Event::Submit(id));
                    self.at(self.now + self.target.timeout, Event::Timeout(id));
                }
                // Answered at once, one network trip after the send.
                Some((class, detail, status)) => {
                    self.advance_to(self.now);
                    let at = arrives;
                    self.end_call_at(id, at, Some((class, detail)), Some(status));
                }
            }
        }
    }

    fn submit(&mut self, id: u64) {
        let Some(call) = self.calls.get_mut(&id) else {
            return;
        };
        let Some(request) = call.request.take() else {
            return;
        };
        let replica = self.router.pick(&self.engines, &request.prompt);
        call.replica = Some(replica);
        if let Err(e) = self.engines[replica].submit(request, self.now) {
            let detail = format!("HTTP 400 Bad Request: {e}");
            let class = crate::exec::stream::http_error_class(400, &detail);
            self.end_call(id, Some((class, detail)), Some(400));
        }
    }

    /// Every idle replica with work starts a step now.
    fn start_steps(&mut self) {
        for r in 0..self.engines.len() {
            if self.busy[r] || !self.engines[r].has_work() {
                continue;
            }
            let out = self.engines[r].step(self.now);
            if out.batch_seqs == 0 {
                // Nothing schedulable: wait for the next event, or, for a
                // queue, for its next token or freed slot.
                if let Some(due) = self.engines[r].next_due()
                    && due > self.now
                    && self.wake_at[r].is_none_or(|w| w > due)
                {
                    self.wake_at[r] = Some(due);
                    self.at(due, Event::Wake(r));
                }
                continue;
            }
            self.busy[r] = true;
            let end = out.ends_at();
            self.step_out[r] = Some(out);
            self.at(end, Event::StepEnd(r));
        }
    }

    /// A step ended: its tokens reach their calls.
    fn deliver(&mut self, replica: usize) {
        self.busy[replica] = false;
        let Some(out) = self.step_out[replica].take() else {
            return;
        };
        let now = self.now;
        for e in out.emitted {
            let id = e.id.0;
            let Some(call) = self.calls.get_mut(&id) else {
                // Ended already (timeout, drain): the engine forgets it.
                if e.finish.is_none() {
                    self.engines[replica].abort(e.id);
                }
                continue;
            };
            if call.faults.cut_after == Some(e.index) {
                self.engines[replica].abort(e.id);
                let detail = format!(
                    "connection dropped mid-stream after {} content chunks (sim cut-rate)",
                    call.event_at.len()
                );
                self.end_call(id, Some((ErrorClass::BrokenStream, detail)), Some(200));
                continue;
            }
            let mut seen = now;
            match call.faults.stall {
                Some((at, pause)) if e.index == at => {
                    seen = now + pause;
                    call.stall_release = Some(seen);
                }
                _ => {
                    if let Some(release) = call.stall_release {
                        seen = seen.max(release);
                    }
                }
            }
            call.token_at.push(seen);
            if call.answer.ends_event(e.index, e.finish.is_some()) {
                let output = call.answer.kind(e.index).is_output();
                call.event_at.push((seen, output));
                call.event_tokens = e.index + 1;
            }
            call.prompt_tokens = Some(e.prompt_tokens);
            call.cached_tokens = Some(e.cached_tokens);
            if let Some(finish) = e.finish {
                let generated = call.token_at.len() as u32;
                call.finish = Some(finish_label(call.api, &call.answer, finish, generated));
                if seen > now {
                    self.at(seen, Event::Complete(id));
                } else {
                    self.end_call(id, None, None);
                }
            }
        }
    }

    fn end_call(&mut self, id: u64, error: Option<(ErrorClass, String)>, status: Option<u16>) {
        let at = self.now;
        self.end_call_at(id, at, error, status);
    }

    /// Journals a call that ended at `at` and moves its task on.
    fn end_call_at(
        &mut self,
        id: u64,
        at: Duration,
        error: Option<(ErrorClass, String)>,
        status: Option<u16>,
    ) {
        let Some(call) = self.calls.remove(&id) else {
            return;
        };
        if let Some(replica) = call.replica
            && call.finish.is_none()
        {
            // The client went away: the server aborts the request.
            self.engines[replica].abort(RequestId(id));
        }
        self.inflight = self.inflight.saturating_sub(1);
        let ok = error.is_none();
        let rejected_for_context = matches!(error, Some((ErrorClass::ContextLength, _)));
        let scheduled_ms = ms(call.scheduled);
        let completed = if ok {
            call.token_at.last().copied().unwrap_or(at).max(at)
        } else {
            at
        };
        let completed_ms = ms(completed);
        let itl_ms: Vec<f32> = call
            .event_at
            .windows(2)
            .map(|w| round_us((w[1].0 - w[0].0).as_secs_f64() * 1e3) as f32)
            .collect();
        // As the client's parser reads the stream: usage when the server
        // sent it (a whole answer), else what the events show.
        let received = call.event_tokens;
        let reasoning_events = call.event_at.iter().filter(|(_, output)| !output).count() as u32;
        let (output_tokens, output_tokens_source, reasoning_tokens, reasoning_source) =
            if ok && call.include_usage {
                let reasoning = call.answer.reasoning_of(received);
                let source = (reasoning > 0).then_some(TokenSource::Usage);
                (received, TokenSource::Usage, reasoning, source)
            } else {
                let events = call.event_at.len() as u32;
                let source = (reasoning_events > 0).then_some(TokenSource::Chunks);
                (events, TokenSource::Chunks, reasoning_events, source)
            };
        let tool_calls = u32::from(call.answer.tool.is_some() && call.event_at.iter().any(|e| e.1));
        let (error, error_detail) = match error {
            Some((class, detail)) => (Some(class), Some(detail)),
            None => (None, None),
        };
        let record = RequestRecord {
            task: call.task,
            call: call.call,
            scheduled_ms,
            sent_ms: scheduled_ms,
            schedule_lag_ms: 0.0,
            completed_ms,
            ttft_ms: call
                .event_at
                .first()
                .map(|(t, _)| round_us(ms(*t) - scheduled_ms)),
            ttfo_ms: call
                .event_at
                .iter()
                .find(|(_, output)| *output)
                .map(|(t, _)| round_us(ms(*t) - scheduled_ms)),
            e2e_ms: ok.then_some(round_us(completed_ms - scheduled_ms)),
            itl_ms,
            prompt_tokens_requested: call.input_tokens,
            prompt_tokens_reported: if ok && call.include_usage {
                call.prompt_tokens
            } else {
                None
            },
            // As the HTTP server reports it: in `usage`, when the preset
            // reports prompt token details.
            cached_tokens: if ok
                && call.include_usage
                && self.target.preset.answers.prompt_tokens_details
            {
                call.cached_tokens
            } else {
                None
            },
            output_tokens_requested: call.output_tokens,
            output_tokens,
            output_tokens_source,
            reasoning_tokens,
            reasoning_tokens_source: reasoning_source,
            tool_calls,
            finish_reason: call.finish.map(str::to_string),
            error,
            error_detail,
            http_status: status.or(Some(200)),
            reconnects: 0,
            class: self
                .tasks
                .get(&call.task)
                .and_then(|t| t.task.class.as_ref())
                .map(|c| c.name.to_string()),
            retry_after_ms: None,
        };
        if let Some(stop) = self.fail_fast.observe(&record, completed_ms) {
            self.stopped_early = Some(stop);
            self.stop();
        }
        self.emit(JournalLine::Request(record));

        let Some(state) = self.tasks.get_mut(&call.task) else {
            return;
        };
        state.calls += 1;
        state.failed += u32::from(!ok);
        state.context_rejected += u32::from(rejected_for_context);
        state.stage_end = state.stage_end.max(completed);
        state.pending = state.pending.saturating_sub(1);
        if let TaskSpec::Graph { calls } = &state.task.spec {
            // Its children leave at its answer + their gap, whether it
            // failed or not (the load stays as planned).
            let ready: Vec<(u32, Duration)> = calls
                .iter()
                .enumerate()
                .filter(|(_, c)| c.parent == Some(call.call))
                .map(|(k, c)| (k as u32, c.gap))
                .collect();
            let (index, left) = (call.task, state.pending);
            for (child, gap) in ready {
                self.at(completed.max(self.now) + gap, Event::Ready(index, child));
            }
            if left == 0 {
                if completed > self.now {
                    self.at(completed, Event::Stage(index));
                } else {
                    self.end_task(index);
                }
            }
            return;
        }
        if state.pending > 0 {
            return;
        }
        state.stage += 1;
        let index = call.task;
        let next = stages(&state.task)
            .get(state.stage)
            .map(|(pause, _)| *pause);
        let end = state.stage_end;
        match next {
            Some(pause) => self.at(end + pause, Event::Stage(index)),
            None => {
                if completed > self.now {
                    // The last byte is still on its way (a stall): the
                    // task ends then.
                    self.at(completed, Event::Stage(index));
                } else {
                    self.end_task(index);
                }
            }
        }
    }

    fn end_task(&mut self, index: u64) {
        let Some(state) = self.tasks.remove(&index) else {
            return;
        };
        // As in real time: a conversation or agent task has its own record,
        // a single call does not.
        if !matches!(state.task.spec, TaskSpec::Single(_)) {
            self.emit(JournalLine::Task(TaskRecord {
                task: index,
                scheduled_ms: ms(state.started),
                completed_ms: ms(state.stage_end.max(state.started)),
                e2e_ms: (state.failed == 0).then_some(round_us(
                    ms(state.stage_end.max(state.started)) - ms(state.started),
                )),
                calls: state.calls,
                failed_calls: state.failed,
                context_rejected_calls: state.context_rejected,
                class: state.task.class.as_ref().map(|c| c.name.to_string()),
            }));
        }
        if state.closed_slot {
            self.start_closed_task();
        }
    }

    /// Cancels every call in flight and cuts every unfinished task now.
    fn abort_all(&mut self, detail: &str) {
        self.stop();
        let mut ids: Vec<u64> = self.calls.keys().copied().collect();
        ids.sort_unstable();
        for id in ids {
            // A cancelled call still ends its stage; the task is cut below.
            let Some(call) = self.calls.get(&id) else {
                continue;
            };
            let task = call.task;
            if let Some(state) = self.tasks.get_mut(&task) {
                // Keep the task from starting its next stage.
                state.pending = u32::MAX;
            }
            self.end_call(id, Some((ErrorClass::Cancelled, detail.to_string())), None);
        }
        let mut tasks: Vec<u64> = self.tasks.keys().copied().collect();
        tasks.sort_unstable();
        let now = self.now;
        for index in tasks {
            let Some(state) = self.tasks.remove(&index) else {
                continue;
            };
            if state.calls == 0 || matches!(state.task.spec, TaskSpec::Single(_)) {
                continue;
            }
            self.emit(JournalLine::Task(TaskRecord {
                task: index,
                scheduled_ms: ms(state.started),
                completed_ms: ms(now),
                e2e_ms: None,
                calls: state.calls,
                failed_calls: state.failed,
                context_rejected_calls: state.context_rejected,
                class: state.task.class.as_ref().map(|c| c.name.to_string()),
            }));
        }
        self.events.clear();
    }
}

/// The record fields of a call the simulator answers with an error.
fn refused(refusal: &Refusal) -> (ErrorClass, String, u16) {
    match refusal {
        // vLLM streams one error event with HTTP 200.
        Refusal::OutOfVocabulary { stream: true, .. } => (
            ErrorClass::BrokenStream,
            format!("server sent an error event: {}", refusal.message()),
            200,
        ),
        _ => {
            let status = refusal.status();
            let text = match status {
                404 => "404 Not Found",
                _ => "400 Bad Request",
            };
            let message = refusal.message();
            (
                crate::exec::stream::http_error_class(status, &message),
                format!("HTTP {text}: {message}"),
                status,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::request::Api as SimApi;

    #[test]
    fn finish_reasons_are_what_the_client_reads_of_each_api() {
        let tool = AnswerPlan {
            reasoning_tokens: 2,
            tool: Some("f".into()),
            tokens_per_event: 1,
        };
        let plain = AnswerPlan::plain();
        use FinishReason::{Length, Stop};
        assert_eq!(
            finish_label(SimApi::Completions, &plain, Length, 4),
            "length"
        );
        assert_eq!(finish_label(SimApi::Chat, &plain, Stop, 4), "stop");
        assert_eq!(finish_label(SimApi::Chat, &tool, Length, 4), "tool_calls");
        // All reasoning: the call was never made.
        assert_eq!(finish_label(SimApi::Chat, &tool, Length, 2), "length");
        assert_eq!(finish_label(SimApi::Responses, &tool, Length, 4), "length");
        assert_eq!(
            finish_label(SimApi::Responses, &tool, Stop, 4),
            "tool_calls"
        );
        assert_eq!(finish_label(SimApi::Responses, &plain, Stop, 4), "stop");
    }
}
