//! Scheduling a run: the closed loop's slots, the open loop's dispatcher, the
//! life of a task (turns, steps, think and tool time), and the end of a run
//! (stop, drain deadline, Ctrl-C). The rules are in the [module
//! docs](super); this file is their implementation.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::client::{self, CallEnv, HttpTarget};
use super::journal::{self, FooterPlan, WindowEnd, WriterMsg};
use super::progress::{Live, ProgressTotal, spawn_progress};
use super::record::{
    DecisiveStop, EarlyStop, ErrorClass, Journal, JournalLine, RequestRecord, RunHeader, RunWatch,
    TaskRecord,
};
use super::request::{BodyOptions, RequestSource, api_path, build_spec_body};
use super::stream::{CallId, ms_since, round_us};
use super::timer::PreciseTimer;
use super::{Endpoint, ExecError, RunInputs, RunOptions};
use crate::config::{Api, StopRule};
use crate::plan::shard::{self, ShardPart};
use crate::plan::{Load, RunPlan};
use crate::workload::{CallSpec, Task, TaskClass, TaskSpec};

/// How far ahead of its scheduled instant an open-loop arrival is spawned, to
/// render its body and be parked on the timer when its instant comes.
pub const DISPATCH_LEAD: Duration = Duration::from_millis(30);
/// Margin of the drain deadline beyond the per-request timeout, so that a
/// call started just before starting stopped ends by its own timeout (and is
/// classified as such), not by the deadline.
pub const DRAIN_GRACE: Duration = Duration::from_secs(1);
/// Period of the in-flight samples in the footer.
const INFLIGHT_SAMPLE_PERIOD: Duration = Duration::from_millis(100);
/// Closed loop: how long a slot waits after a `rate-limited` call whose
/// server named no `Retry-After`, so a quota is not hammered blind.
pub const RATE_LIMIT_DEFAULT_WAIT: Duration = Duration::from_secs(1);

/// How long a call's slot waits before its next call (pure). Open loop:
/// never, the schedule is not held back by any failure, a 429 or a 503
/// alike. Closed loop: after a `rate-limited` call, the server's
/// `Retry-After` (capped when it was read) or [`RATE_LIMIT_DEFAULT_WAIT`],
/// so a quota is not hammered blind; after an `overloaded` call, the
/// server's `Retry-After` if it named one (a 503 with one read as a quota
/// before it had a class of its own, and waited), else no wait: the
/// replica refused under load and the slot's next call measures it again,
/// as after any other failure.
pub(crate) fn backoff_after(closed: bool, record: &RequestRecord) -> Option<Duration> {
    if !closed {
        return None;
    }
    let asked = record
        .retry_after_ms
        .map(|ms| Duration::from_secs_f64(ms / 1e3));
    match record.error {
        Some(ErrorClass::RateLimited) => Some(asked.unwrap_or(RATE_LIMIT_DEFAULT_WAIT)),
        Some(ErrorClass::Overloaded) => asked,
        _ => None,
    }
}

/// The early-stop rule ([`EarlyStop::RULE`]) over a run's first completed
/// calls (pure): once [`EarlyStop::CALLS`] calls have completed, the run
/// stops if every one of them failed with the same class and status.
/// Cancelled calls are the client's own and do not count.
#[derive(Debug, Default)]
pub(crate) struct FailFast {
    seen: u32,
    /// The first call's failure, while every call so far matched it.
    alike: Option<(ErrorClass, Option<u16>, Option<String>)>,
    /// A call succeeded or failed differently: the rule can no longer fire.
    mixed: bool,
}

impl FailFast {
    /// Whether the rule is settled either way (no need to look further).
    pub fn settled(&self) -> bool {
        self.mixed || self.seen >= EarlyStop::CALLS
    }

    /// One completed call at `at_ms`; the stop, the moment the rule fires.
    pub fn observe(&mut self, record: &RequestRecord, at_ms: f64) -> Option<EarlyStop> {
        if self.settled() || record.error == Some(ErrorClass::Cancelled) {
            return None;
        }
        self.seen += 1;
        let Some(class) = record.error else {
            self.mixed = true;
            return None;
        };
        match &self.alike {
            None if self.seen == 1 => {
                self.alike = Some((class, record.http_status, record.error_detail.clone()));
            }
            Some((c, status, _)) if *c == class && *status == record.http_status => {}
            _ => {
                self.mixed = true;
                return None;
            }
        }
        if self.seen < EarlyStop::CALLS {
            return None;
        }
        let (class, http_status, detail) = self.alike.clone()?;
        Some(EarlyStop {
            rule: EarlyStop::RULE.to_string(),
            calls: self.seen,
            class,
            http_status,
            detail,
            at_ms,
        })
    }
}

/// Everything a call needs, shared by all tasks of a run.
struct Ctx {
    target: HttpTarget,
    api: Api,
    model: String,
    body_options: BodyOptions,
    source: Arc<dyn RequestSource>,
    t0: Instant,
    measure_from: Instant,
    user_cancel: CancellationToken,
    stop_starting: CancellationToken,
    abort: CancellationToken,
    journal: mpsc::UnboundedSender<WriterMsg>,
    live: Arc<Live>,
    /// Closed loop: a task's first call is sent the moment its slot is free.
    closed: bool,
    /// Render bodies on the blocking pool (the source has a tokenizer).
    render_off_thread: bool,
    timer: PreciseTimer,
    /// The early-stop rule over the first calls; `fail_fast_settled` spares
    /// every later call the lock.
    fail_fast: std::sync::Mutex<FailFast>,
    fail_fast_settled: std::sync::atomic::AtomicBool,
    stopped_early: std::sync::Mutex<Option<EarlyStop>>,
    /// The run's watch (a search's open run), told every record; it may
    /// end the run, decisively beyond its SLOs.
    watch: Option<std::sync::Mutex<Box<dyn RunWatch>>>,
    decided: std::sync::Mutex<Option<DecisiveStop>>,
    /// Set before starting stops when the watch ended the run: the drain
    /// deadline then counts from the stop, not from the planned end.
    ended_early: Arc<std::sync::atomic::AtomicBool>,
}

/// How one call ended, for its task.
#[derive(Debug, Clone, Copy)]
struct CallOutcome {
    ok: bool,
    rejected_for_context: bool,
    scheduled: Instant,
    completed: Instant,
    /// Closed loop, a `rate-limited` call (`Retry-After`, capped; else the
    /// default wait) or an `overloaded` one with a `Retry-After`: how long
    /// its slot waits before its next call ([`backoff_after`]).
    backoff: Option<Duration>,
}

impl Ctx {
    fn ms(&self, t: Instant) -> f64 {
        ms_since(self.t0, t)
    }

    /// A call's body, with its mix class's model and priority if it has one.
    fn body_now(&self, call: &CallSpec, class: Option<&TaskClass>) -> Bytes {
        build_spec_body(
            self.api,
            class
                .and_then(|c| c.model.as_deref())
                .unwrap_or(&self.model),
            &self.source.render(call),
            call,
            &self.body_options,
            class.and_then(|c| c.priority),
        )
    }

    /// A call's body. With a tokenizer, rendering (encoding and re-encoding
    /// text to hit exact lengths: milliseconds for long prompts) runs on
    /// the blocking pool, never on the runtime threads that timestamp
    /// streams; word and token-id rendering takes microseconds and stays.
    async fn body(self: &Arc<Self>, call: &CallSpec, class: Option<&Arc<TaskClass>>) -> Bytes {
        if !self.render_off_thread {
            return self.body_now(call, class.map(|c| &**c));
        }
        let (ctx, owned, class_owned) = (Arc::clone(self), call.clone(), class.cloned());
        match tokio::task::spawn_blocking(move || ctx.body_now(&owned, class_owned.as_deref()))
            .await
        {
            Ok(body) => body,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            // Cancelled only at runtime shutdown; render here then.
            Err(_) => self.body_now(call, class.map(|c| &**c)),
        }
    }

    /// Bodies of the task's first call (or first agent step's calls).
    async fn prepare_first(self: &Arc<Self>, task: &Task) -> Vec<Bytes> {
        let class = task.class.as_ref();
        let calls: Vec<&CallSpec> = match &task.spec {
            TaskSpec::Single(call) => vec![call],
            TaskSpec::Conversation { turns } => {
                turns.first().map(|t| &t.call).into_iter().collect()
            }
            TaskSpec::Agent { steps } => steps
                .first()
                .map(|s| s.calls.iter().collect())
                .unwrap_or_default(),
            TaskSpec::Graph { calls } => calls.first().map(|c| &c.call).into_iter().collect(),
        };
        let mut bodies = Vec::with_capacity(calls.len());
        for call in calls {
            bodies.push(self.body(call, class).await);
        }
        bodies
    }

    /// The watch ended the run: starting stops now, and the drain deadline
    /// counts from now.
    fn decide(&self, stop: DecisiveStop) {
        *self
            .decided
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(stop);
        self.ended_early.store(true, Ordering::SeqCst);
        self.stop_starting.cancel();
    }

    /// Tell the watch of an arrival about to be sent; `true` when it ended
    /// the run (the arrival is then not sent: it lies after the stop).
    fn watch_arrival(&self, scheduled_ms: f64) -> bool {
        let Some(watch) = &self.watch else {
            return false;
        };
        let now_ms = self.ms(Instant::now());
        let stop = watch
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .arrived(scheduled_ms, now_ms);
        stop.map(|stop| self.decide(stop)).is_some()
    }

    fn emit(&self, line: JournalLine) {
        if let Some(watch) = &self.watch
            && !self.stop_starting.is_cancelled()
        {
            let now_ms = self.ms(Instant::now());
            let stop = watch
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .observe(&line, now_ms);
            if let Some(stop) = stop {
                self.decide(stop);
            }
        }
        // Fails only if the writer has stopped; its I/O error is reported at
        // the end of the run.
        let _ = self.journal.send(WriterMsg::Line(line));
    }

    fn abort_detail(&self) -> String {
        if self.user_cancel.is_cancelled() {
            "run interrupted while the call was in flight".to_string()
        } else {
            "still in flight at the run's drain deadline (starting stopped + timeout + 1 s)"
                .to_string()
        }
    }

    /// One call at `scheduled` (`None`: now, the closed loop's first call).
    async fn call(
        &self,
        (task, class): (u64, Option<&Arc<TaskClass>>),
        call: u32,
        spec: &CallSpec,
        body: Bytes,
        scheduled: Option<Instant>,
    ) -> Option<CallOutcome> {
        let id = CallId {
            task,
            call,
            prompt_tokens_requested: spec.input_tokens,
            output_tokens_requested: spec.output_tokens,
        };
        let detail = || self.abort_detail();
        let env = CallEnv {
            target: &self.target,
            t0: self.t0,
            abort: &self.abort,
            abort_detail: &detail,
            live: &self.live,
            timer: &self.timer,
        };
        let mut sent = client::perform_call(&env, body, id, scheduled).await?;
        sent.record.class = class.map(|c| c.name.to_string());
        self.live.on_record(&sent.record);
        self.watch_fail_fast(&sent.record, sent.completed);
        let ok = sent.record.is_ok();
        let rejected_for_context = sent.record.is_context_rejection();
        // Open loop: the schedule is never held back, a 429 or a 503 is a
        // failed call like any other.
        let backoff = backoff_after(self.closed, &sent.record);
        self.emit(JournalLine::Request(sent.record));
        Some(CallOutcome {
            ok,
            rejected_for_context,
            scheduled: sent.scheduled,
            completed: sent.completed,
            backoff,
        })
    }

    /// Apply the early-stop rule to a completed call: stop starting when
    /// the run's first calls all failed alike.
    fn watch_fail_fast(&self, record: &RequestRecord, completed: Instant) {
        if self.fail_fast_settled.load(Ordering::Relaxed) {
            return;
        }
        let mut rule = self
            .fail_fast
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stop = rule.observe(record, self.ms(completed));
        if rule.settled() {
            self.fail_fast_settled.store(true, Ordering::Relaxed);
        }
        drop(rule);
        if let Some(stop) = stop {
            *self
                .stopped_early
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(stop);
            self.stop_starting.cancel();
        }
    }

    /// A closed-loop slot's wait after a refused call, cut short when
    /// the run stops starting.
    async fn back_off(&self, wait: Duration) {
        tokio::select! {
            biased;
            _ = self.stop_starting.cancelled() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }

    /// Run a whole task whose first call is scheduled at `start` (closed
    /// loop: `start` is now, and the first call is sent without delay).
    /// Returns how long the slot must wait before its next task: a closed
    /// loop's last call was refused for a quota, or as overloaded with a
    /// `Retry-After` ([`backoff_after`]).
    async fn run_task(
        self: &Arc<Self>,
        task: Task,
        first: Vec<Bytes>,
        start: Instant,
    ) -> Option<Duration> {
        let index = task.index;
        let class = task.class.as_ref();
        let first_at = (!self.closed).then_some(start);
        let mut first = first.into_iter();
        let mut calls = 0u32;
        let mut failed = 0u32;
        let mut context_rejected = 0u32;
        let mut cut = false;
        let mut last_end = start;
        // The first call's scheduled instant (closed loop: its send).
        let mut task_start = start;
        // Closed loop: the last call's refusal wait, honoured before the next.
        let mut backoff: Option<Duration> = None;
        match &task.spec {
            TaskSpec::Single(call) => {
                let body = match first.next() {
                    Some(body) => body,
                    None => self.body(call, class).await,
                };
                let outcome = self.call((index, class), 0, call, body, first_at).await;
                return outcome.and_then(|o| o.backoff);
            }
            TaskSpec::Conversation { turns } => {
                for (k, turn) in turns.iter().enumerate() {
                    let (scheduled, body) = match (k, first.next()) {
                        (0, Some(body)) => (first_at, body),
                        (0, None) => (first_at, self.body(&turn.call, class).await),
                        _ => (
                            Some(
                                (last_end + turn.think_time_before)
                                    .max(last_end + backoff.take().unwrap_or_default()),
                            ),
                            self.body(&turn.call, class).await,
                        ),
                    };
                    let Some(outcome) = self
                        .call((index, class), k as u32, &turn.call, body, scheduled)
                        .await
                    else {
                        cut = true;
                        break;
                    };
                    if k == 0 {
                        task_start = outcome.scheduled;
                    }
                    calls += 1;
                    failed += u32::from(!outcome.ok);
                    context_rejected += u32::from(outcome.rejected_for_context);
                    last_end = outcome.completed;
                    backoff = outcome.backoff;
                }
            }
            TaskSpec::Agent { steps } => {
                let mut next_call = 0u32;
                // A step's calls share one scheduled instant, also the first
                // step's in closed loop (their sends are microseconds apart).
                let mut step_start = Some(start);
                for (k, step) in steps.iter().enumerate() {
                    let mut bodies: Vec<Bytes> = Vec::with_capacity(step.calls.len());
                    for c in &step.calls {
                        let body = match (k, first.next()) {
                            (0, Some(body)) => body,
                            _ => self.body(c, class).await,
                        };
                        bodies.push(body);
                    }
                    let calls_of_step =
                        step.calls
                            .iter()
                            .zip(bodies)
                            .enumerate()
                            .map(|(j, (spec, body))| {
                                self.call(
                                    (index, class),
                                    next_call + j as u32,
                                    spec,
                                    body,
                                    step_start,
                                )
                            });
                    let outcomes = futures_util::future::join_all(calls_of_step).await;
                    next_call += step.calls.len() as u32;
                    let mut step_end = step_start.unwrap_or(start);
                    backoff = None;
                    for outcome in outcomes {
                        match outcome {
                            Some(outcome) => {
                                calls += 1;
                                failed += u32::from(!outcome.ok);
                                context_rejected += u32::from(outcome.rejected_for_context);
                                step_end = step_end.max(outcome.completed);
                                backoff = backoff.max(outcome.backoff);
                            }
                            None => cut = true,
                        }
                    }
                    last_end = step_end;
                    if cut {
                        break;
                    }
                    let wait = step.tool_time_after.max(backoff.take().unwrap_or_default());
                    step_start = Some(step_end + wait);
                }
            }
            TaskSpec::Graph { calls: graph } => {
                use futures_util::FutureExt;
                use futures_util::future::{BoxFuture, Shared};
                // One future per call, each awaiting its parent's answer
                // (shared by the siblings of a fan-out), then sent through
                // the same `call` path at parent's answer + gap. A failed
                // parent still releases its children; a cut one cuts them.
                let mut done: Vec<Shared<BoxFuture<'_, Option<CallOutcome>>>> =
                    Vec::with_capacity(graph.len());
                let mut first_body = first.next();
                for (k, node) in graph.iter().enumerate() {
                    let parent = node.parent.and_then(|p| done.get(p as usize).cloned());
                    let ready = if k == 0 { first_body.take() } else { None };
                    let this = self;
                    let fut = async move {
                        // Rendered before the wait, so the send is on time.
                        let body = match ready {
                            Some(body) => body,
                            None => this.body(&node.call, class).await,
                        };
                        let scheduled = match parent {
                            None => start + node.gap,
                            Some(parent) => parent.await?.completed + node.gap,
                        };
                        this.call((index, class), k as u32, &node.call, body, Some(scheduled))
                            .await
                    }
                    .boxed()
                    .shared();
                    done.push(fut);
                }
                let outcomes = futures_util::future::join_all(done).await;
                backoff = None;
                for (k, outcome) in outcomes.into_iter().enumerate() {
                    match outcome {
                        Some(outcome) => {
                            if k == 0 {
                                task_start = outcome.scheduled;
                            }
                            calls += 1;
                            failed += u32::from(!outcome.ok);
                            context_rejected += u32::from(outcome.rejected_for_context);
                            last_end = last_end.max(outcome.completed);
                            backoff = backoff.max(outcome.backoff);
                        }
                        None => cut = true,
                    }
                }
            }
        }
        if calls == 0 {
            // Aborted before its first call was sent: the task never started.
            return None;
        }
        let completed = if cut { Instant::now() } else { last_end };
        let scheduled_ms = self.ms(task_start);
        let completed_ms = self.ms(completed);
        self.emit(JournalLine::Task(TaskRecord {
            task: index,
            scheduled_ms,
            completed_ms,
            e2e_ms: (!cut && failed == 0).then_some(round_us(completed_ms - scheduled_ms)),
            calls,
            failed_calls: failed,
            context_rejected_calls: context_rejected,
            class: class.map(|c| c.name.to_string()),
        }));
        backoff
    }
}

/// Counters of the closed loop's slots.
struct ClosedState {
    /// Tasks this process started so far (a shard maps them to its own
    /// indices of the run's stream).
    next_index: AtomicU64,
    part: Option<ShardPart>,
    measured_calls: AtomicU64,
    planned_end: Option<Instant>,
    request_limit: Option<u64>,
    /// `requests n`: the last measured task has started. From then on the
    /// slots drain, so the measured window ends there.
    limit_reached: std::sync::atomic::AtomicBool,
}

async fn closed_slot(ctx: Arc<Ctx>, state: Arc<ClosedState>) {
    loop {
        if ctx.stop_starting.is_cancelled() {
            return;
        }
        let local = state.next_index.fetch_add(1, Ordering::Relaxed);
        let index = state.part.map_or(local, |p| p.task_index(local));
        let task = ctx.source.task(index);
        let first = ctx.prepare_first(&task).await;
        // The slot's start instant is taken after rendering, so the render is
        // not part of the measured latency.
        let now = Instant::now();
        if ctx.stop_starting.is_cancelled() {
            return;
        }
        if state.planned_end.is_some_and(|end| now >= end) {
            ctx.stop_starting.cancel();
            return;
        }
        if let Some(limit) = state.request_limit
            && now >= ctx.measure_from
        {
            let calls = task.spec.calls() as u64;
            let before = state.measured_calls.fetch_add(calls, Ordering::Relaxed);
            if before >= limit {
                ctx.stop_starting.cancel();
                return;
            }
            ctx.live
                .measured_started
                .fetch_add(calls, Ordering::Relaxed);
            if before + calls >= limit {
                state.limit_reached.store(true, Ordering::Relaxed);
                ctx.stop_starting.cancel();
            }
        }
        if let Some(wait) = ctx.run_task(task, first, now).await {
            ctx.back_off(wait).await;
        }
    }
}

/// Dispatch every arrival of the schedule (a shard: every arrival it owns);
/// returns their offsets (ms) and whether the schedule ran out before the
/// stop rule ended it (a finite schedule such as a replayed trace).
async fn dispatch_open(
    ctx: &Arc<Ctx>,
    arrivals: Box<dyn Iterator<Item = Duration> + Send>,
    (warmup, stop): (Duration, StopRule),
    part: Option<ShardPart>,
) -> (Vec<f64>, bool) {
    let mut arrivals_ms = Vec::new();
    let mut tasks = JoinSet::new();
    let mut measured_calls = 0u64;
    let mut exhausted = true;
    for (index, offset) in arrivals.enumerate() {
        match stop {
            StopRule::Duration(d) if offset >= warmup + d => {
                exhausted = false;
                break;
            }
            StopRule::Requests(n) if measured_calls >= n => {
                exhausted = false;
                break;
            }
            _ => {}
        }
        if let Some(part) = part
            && !part.owns(index as u64)
        {
            // Another shard sends it; a `requests` stop still counts it, so
            // that every shard stops at the same arrival.
            if offset >= warmup && matches!(stop, StopRule::Requests(_)) {
                measured_calls += ctx.source.task(index as u64).spec.calls() as u64;
            }
            continue;
        }
        let at = ctx.t0 + offset;
        let wake = at.checked_sub(DISPATCH_LEAD).unwrap_or(at);
        tokio::select! {
            biased;
            _ = ctx.stop_starting.cancelled() => {
                exhausted = false;
                break;
            }
            _ = tokio::time::sleep_until(wake) => {}
        }
        let task = ctx.source.task(index as u64);
        if offset >= warmup {
            let calls = task.spec.calls() as u64;
            measured_calls += calls;
            ctx.live
                .measured_started
                .fetch_add(calls, Ordering::Relaxed);
        }
        arrivals_ms.push(ms_since(ctx.t0, at));
        if ctx.watch_arrival(ms_since(ctx.t0, at)) {
            exhausted = false;
            break;
        }
        let task_ctx = Arc::clone(ctx);
        tasks.spawn(async move {
            let first = task_ctx.prepare_first(&task).await;
            // Open loop: no backoff is ever returned (the schedule rules).
            task_ctx.run_task(task, first, at).await;
        });
        while let Some(result) = tasks.try_join_next() {
            propagate_panic(result);
        }
    }
    ctx.stop_starting.cancel();
    while let Some(result) = tasks.join_next().await {
        propagate_panic(result);
    }
    (arrivals_ms, exhausted)
}

/// Sleep until `start_at` (this host's clock) and return it as an
/// [`Instant`], with how late the wake-up was. The last two milliseconds
/// are spun: tokio's timer rounds up to the next millisecond.
async fn wait_for(start_at: SystemTime) -> (Instant, Duration) {
    const SPIN: Duration = Duration::from_millis(2);
    let target = instant_of(start_at);
    if let Some(wake) = target.checked_sub(SPIN)
        && wake > Instant::now()
    {
        tokio::time::sleep_until(wake).await;
    }
    while Instant::now() < target {
        std::hint::spin_loop();
    }
    (target, Instant::now().saturating_duration_since(target))
}

/// The wall-clock instant `t` (this host's clock) as a runtime instant,
/// for timers and scrapers; one that has passed lies that far back.
pub fn instant_of(t: SystemTime) -> Instant {
    let now = Instant::now();
    match t.duration_since(SystemTime::now()) {
        Ok(ahead) => now + ahead,
        Err(past) => now.checked_sub(past.duration()).unwrap_or(now),
    }
}

fn propagate_panic(result: Result<(), tokio::task::JoinError>) {
    if let Err(e) = result
        && e.is_panic()
    {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// Stops starting at the planned end, then aborts what is still in flight at
/// the drain deadline: the planned end + timeout + grace, or, for a run its
/// watch ended (`ended_early`), the stop + timeout + grace.
async fn supervise(
    stop_starting: CancellationToken,
    abort: CancellationToken,
    planned_end: Option<Instant>,
    timeout: Duration,
    ended_early: Arc<std::sync::atomic::AtomicBool>,
) {
    match planned_end {
        Some(end) => tokio::select! {
            _ = tokio::time::sleep_until(end) => stop_starting.cancel(),
            _ = stop_starting.cancelled() => {}
        },
        None => stop_starting.cancelled().await,
    }
    let now = Instant::now();
    let drain_from = if ended_early.load(Ordering::SeqCst) {
        now
    } else {
        planned_end.map_or(now, |end| end.max(now))
    };
    tokio::time::sleep_until(drain_from + timeout + DRAIN_GRACE).await;
    abort.cancel();
}

async fn sample_inflight(live: Arc<Live>, t0: Instant, done: CancellationToken) -> Vec<(f64, u32)> {
    let mut samples = Vec::new();
    let mut ticker = tokio::time::interval(INFLIGHT_SAMPLE_PERIOD);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            biased;
            _ = done.cancelled() => return samples,
            _ = ticker.tick() => {
                let at_ms = ms_since(t0, Instant::now());
                samples.push((at_ms, live.inflight.load(Ordering::Relaxed)));
            }
        }
    }
}

pub(crate) async fn run(
    endpoint: &Endpoint,
    run: &RunPlan,
    inputs: RunInputs,
    journal_path: &std::path::Path,
    options: &RunOptions,
) -> Result<Journal, ExecError> {
    let bad_run = |reason: &str| ExecError::BadRun {
        run: run.id.clone(),
        reason: reason.to_string(),
    };
    let url = client::endpoint_url(&endpoint.base_url, api_path(endpoint.api))?;
    let auth = client::bearer(endpoint.api_key.as_deref())?;
    let RunInputs { source, arrivals } = inputs;
    let (concurrency, arrivals) = super::load_of(run, arrivals).map_err(bad_run)?;
    let headers = client::parse_headers(&endpoint.headers)?;
    let target = HttpTarget {
        transport: client::build_transport(&url, endpoint.http2, auth.as_ref(), &headers)?,
        timeout: endpoint.timeout,
        tokenizer: source.tokenizer(),
        wire: super::stream::Wire::of(endpoint.api),
    };
    let target_has_tokenizer = target.tokenizer.is_some();
    let (journal_tx, writer) = journal::spawn_writer(
        journal_path,
        !options.discard_records,
        Some(Arc::clone(&source)),
    )?;

    // A shard's t0 is the agreed instant, not when it got there: a late
    // start shows as start lag and as every call's schedule lag, and the
    // schedule is never shifted to hide it.
    let (t0, shard_clock) = match &options.shard {
        Some(shard) => {
            let (t0, lag) = wait_for(shard.start_at).await;
            let mut clock = shard.clock.clone();
            clock.start_lag_ms = round_us(lag.as_secs_f64() * 1e3);
            (t0, Some(clock))
        }
        None => (Instant::now(), None),
    };
    let started_at = crate::time::rfc3339_utc(SystemTime::now());
    let part = options.shard.as_ref().map(|s| s.part);
    let measure_from = t0 + run.warmup;
    let measure_from_ms = run.warmup.as_secs_f64() * 1e3;
    let _ = journal_tx.send(WriterMsg::Line(JournalLine::Run(RunHeader {
        run: run.clone(),
        started_at,
        model: endpoint.model.clone(),
        measure_from_ms,
        content_nonce: source.content_nonce(),
        prompt_sizing: source.prompt_sizing(),
        prefix_cache_reset: options.prefix_cache_reset.clone(),
        telemetry_off: options.telemetry_off.clone(),
        clock: None,
        context_window: options.context_window.clone(),
        shard: shard_clock,
        shards: Vec::new(),
        dialect: options.dialect.clone(),
    })));

    let user_cancel = options.cancel.clone();
    let stop_starting = user_cancel.child_token();
    let abort = user_cancel.child_token();
    let done = CancellationToken::new();
    let planned_end = match run.stop {
        StopRule::Duration(d) => Some(measure_from + d),
        StopRule::Requests(_) | StopRule::TraceEnd => None,
    };
    let live = Arc::new(Live::default());
    let ended_early = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watch = options
        .watch
        .as_ref()
        .and_then(|factory| factory.watch_for(run))
        .map(std::sync::Mutex::new);
    let ctx = Arc::new(Ctx {
        target,
        api: endpoint.api,
        model: endpoint.model.clone(),
        body_options: endpoint.body.clone(),
        source,
        t0,
        measure_from,
        user_cancel: user_cancel.clone(),
        stop_starting: stop_starting.clone(),
        abort: abort.clone(),
        journal: journal_tx.clone(),
        live: Arc::clone(&live),
        closed: concurrency.is_some(),
        render_off_thread: target_has_tokenizer,
        timer: PreciseTimer::start(),
        fail_fast: std::sync::Mutex::new(FailFast::default()),
        fail_fast_settled: std::sync::atomic::AtomicBool::new(false),
        stopped_early: std::sync::Mutex::new(None),
        watch,
        decided: std::sync::Mutex::new(None),
        ended_early: Arc::clone(&ended_early),
    });

    let supervisor = tokio::spawn(supervise(
        stop_starting,
        abort,
        planned_end,
        endpoint.timeout,
        ended_early,
    ));
    let sampler = tokio::spawn(sample_inflight(Arc::clone(&live), t0, done.clone()));
    let interrupt_watch = {
        let (user_cancel, done) = (user_cancel.clone(), done.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = user_cancel.cancelled() => Some(Instant::now()),
                _ = done.cancelled() => None,
            }
        })
    };
    let progress = options.show_progress.then(|| {
        let total = match run.stop {
            StopRule::Duration(d) => ProgressTotal::Time(run.warmup + d),
            StopRule::Requests(n) => ProgressTotal::Requests(n),
            // Plans give trace replays their duration; a bare one shows time.
            StopRule::TraceEnd => ProgressTotal::Time(run.warmup),
        };
        spawn_progress(&run.id, total, Arc::clone(&live), t0, done.clone())
    });

    let mut schedule_exhausted = false;
    let mut closed_limit_reached = false;
    let arrivals_ms = match (concurrency, arrivals) {
        (Some(concurrency), _) => {
            let slots_here = part.map_or(concurrency, |p| shard::slots(concurrency, p));
            let state = Arc::new(ClosedState {
                next_index: AtomicU64::new(0),
                part,
                measured_calls: AtomicU64::new(0),
                planned_end,
                request_limit: match run.stop {
                    StopRule::Requests(n) => {
                        Some(part.map_or(n, |p| shard::request_share(n, concurrency, p)))
                    }
                    StopRule::Duration(_) | StopRule::TraceEnd => None,
                },
                limit_reached: std::sync::atomic::AtomicBool::new(false),
            });
            let mut slots = JoinSet::new();
            for _ in 0..slots_here {
                slots.spawn(closed_slot(Arc::clone(&ctx), Arc::clone(&state)));
            }
            while let Some(result) = slots.join_next().await {
                propagate_panic(result);
            }
            closed_limit_reached = state.limit_reached.load(Ordering::Relaxed);
            None
        }
        (None, Some(arrivals)) => {
            let (arrivals_ms, exhausted) =
                dispatch_open(&ctx, arrivals, (run.warmup, run.stop), part).await;
            schedule_exhausted = exhausted;
            Some(arrivals_ms)
        }
        (None, None) => None,
    };

    done.cancel();
    supervisor.abort();
    let inflight_samples = sampler.await.unwrap_or_default();
    let interrupted_at = interrupt_watch.await.ok().flatten();
    if let Some(progress) = progress {
        let _ = progress.await;
    }
    let interrupted = user_cancel.is_cancelled();
    let stopped_early = ctx
        .stopped_early
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    let decided = ctx
        .decided
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    let replays_trace = matches!(
        run.load,
        Load::Rate {
            arrival: crate::config::Arrival::Trace,
            ..
        }
    );
    let window_end = match run.stop {
        // A run that could measure only a failure is judged on every call
        // it made, warmup included, up to the stop.
        _ if stopped_early.is_some() && !interrupted => {
            WindowEnd::At(stopped_early.as_ref().map_or(0.0, |s| s.at_ms))
        }
        // A run decisively beyond its SLOs: its window ends at the stop.
        _ if decided.is_some() && !interrupted => {
            WindowEnd::At(decided.as_ref().map_or(0.0, |d| d.at_ms))
        }
        // A replayed trace that ended before the planned stop: the window
        // ends with the last measured call, not at a planned instant with
        // no arrivals before it (which would understate rates). Other
        // explicit schedules keep the planned window.
        StopRule::Duration(_) if replays_trace && schedule_exhausted && !interrupted => {
            WindowEnd::LastMeasuredCompletion
        }
        StopRule::Duration(_) => {
            let planned = planned_end.unwrap_or(measure_from);
            let end = if interrupted {
                interrupted_at.unwrap_or_else(Instant::now).min(planned)
            } else {
                planned
            };
            WindowEnd::At(ctx.ms(end))
        }
        // A closed loop measures only while all c slots are busy: its
        // window ends when the last measured task started, not after the
        // drain.
        StopRule::Requests(_) if !interrupted && closed_limit_reached => {
            WindowEnd::LastMeasuredStart
        }
        StopRule::Requests(_) | StopRule::TraceEnd => WindowEnd::LastMeasuredCompletion,
    };
    let _ = journal_tx.send(WriterMsg::Finish(FooterPlan {
        measure_from_ms: if stopped_early.is_some() {
            0.0
        } else {
            measure_from_ms
        },
        window_end,
        arrivals_ms,
        inflight_samples,
        interrupted,
        finished_at: crate::time::rfc3339_utc(SystemTime::now()),
        connections_opened: ctx.target.transport.connections_opened(),
        stopped_early,
        decided,
    }));
    drop(ctx);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(class: ErrorClass, status: u16, retry_after_ms: Option<f64>) -> RequestRecord {
        RequestRecord {
            error: Some(class),
            http_status: Some(status),
            retry_after_ms,
            ..RequestRecord::succeeded(0, 0.0, 1.0, Vec::new())
        }
    }

    #[test]
    fn open_loop_arrivals_wait_for_no_refusal() {
        for record in [
            refused(ErrorClass::Overloaded, 503, Some(5_000.0)),
            refused(ErrorClass::Overloaded, 529, None),
            refused(ErrorClass::RateLimited, 429, Some(5_000.0)),
            refused(ErrorClass::RateLimited, 429, None),
        ] {
            assert_eq!(backoff_after(false, &record), None, "{record:?}");
        }
    }

    #[test]
    fn closed_loop_waits_for_a_quota_and_an_overload_that_says_when() {
        // A quota: the server's wait, else the default.
        assert_eq!(
            backoff_after(true, &refused(ErrorClass::RateLimited, 429, Some(2_500.0))),
            Some(Duration::from_millis(2_500))
        );
        assert_eq!(
            backoff_after(true, &refused(ErrorClass::RateLimited, 429, None)),
            Some(RATE_LIMIT_DEFAULT_WAIT)
        );
        // An overload: the server's wait if it named one, else none.
        assert_eq!(
            backoff_after(true, &refused(ErrorClass::Overloaded, 503, Some(3_000.0))),
            Some(Duration::from_secs(3))
        );
        assert_eq!(
            backoff_after(true, &refused(ErrorClass::Overloaded, 529, None)),
            None
        );
        // Any other failure, or a success: none.
        assert_eq!(
            backoff_after(true, &refused(ErrorClass::HttpStatus, 500, Some(1_000.0))),
            None
        );
        assert_eq!(
            backoff_after(true, &RequestRecord::succeeded(0, 0.0, 1.0, Vec::new())),
            None
        );
    }
}
