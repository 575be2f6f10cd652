//! Journal → [`RunSummary`]: what one run measured over its measured window.
//!
//! A summary is computed from the journal alone (no clock, no endpoint), so
//! `capcard report` recomputes exactly what `capcard run` computed.
//!
//! # The measured window
//!
//! `[header.measure_from_ms, footer.measured_window_ms[1]]`. Without a footer
//! (the process died mid-run) the window ends at the last completion in the
//! journal and the summary is marked `incomplete`, as is a run whose footer
//! says `interrupted`.
//!
//! - **Latency** (TTFT, ITL, TPOT, E2E, task E2E, schedule lag) and **errors**
//!   are taken over calls *scheduled* inside the window, `[from, to)`. A call
//!   belongs to the load offered when it started: selecting by completion
//!   would drop exactly the slowest calls of the window and flatter the tail.
//! - **Throughput** (requests/s, output tokens/s, total tokens/s, goodput, the
//!   achieved open-loop rate) counts calls or tasks *completed* inside the
//!   window, `[from, to]`, divided by its length: the rate at which work left
//!   the replica. In steady state the warmup calls that complete inside the
//!   window balance the measured calls that complete after it.
//! - Latency and throughput use successful calls only; failures are counted
//!   by [`ErrorClass`]. `cancelled` calls (aborted by the client on Ctrl-C or
//!   at the drain deadline) are counted apart: the client stopped them, not
//!   the endpoint.
//! - TPOT per call = (E2E − TTFT) / (output tokens − 1), for calls with at
//!   least 2 output tokens. ITL = every inter-chunk gap of every measured call.
//!   Prompt tokens in total tokens/s are the server's `usage` when reported,
//!   else the planned count.
//! - Percentiles come from HDR histograms (hdrhistogram, values in µs, 3
//!   significant digits: ≤ 0.1% relative error) with the nearest-rank
//!   definition; `mean` and `max` are exact.
//!
//! # Open loop: keeping up
//!
//! `completed_fraction` = arrivals scheduled in the window whose task
//! completed successfully (during the window or the drain after it) /
//! arrivals scheduled in it (`offered`). Counting by arrival, not by
//! completion time, keeps a low-rate run from failing on the one straggler
//! that arrived just before the window closed; a replica that cannot keep up
//! shows in the backlog test and in its latencies instead. A task with a
//! failed call does not count as completed: a replica that answers fast with
//! errors has not kept up. The backlog test splits the in-flight samples inside the window into
//! thirds by order (they are taken at a fixed period): the backlog grows when
//! the mean of the last third exceeds 1.5 × the mean of the first third + 2
//! and the middle third's mean is above the first's (a real backlog grows
//! through the window; a Poisson burst at the end lifts only the last third).
//! The ratio catches linear growth of the queue over the window without
//! reacting to the noise of a stable queue; the `+ 2` keeps a replica at
//! 1–3 calls in flight from tripping it on jitter. Fewer than 6 samples: no
//! verdict (`backlog_growing = None`, not counted against the run).
//! Arrivals completing late can hide an overloaded replica, so a third test
//! compares *when* work completed: the tasks completed inside the window must
//! keep pace with the arrivals scheduled in it, within the wander of the
//! calls in flight ([`completions_keep_pace`]).
//! `kept_up` = `completed_fraction ≥ 0.95`, completions keep pace and no
//! growing backlog. A window with no arrivals (a low rate's Poisson gap, or
//! sessions that all started before it) shows neither: `kept_up` is unknown,
//! the run is judged on what it holds (nothing, so every clause is
//! inconclusive) and the card says why. Calling it overloaded would put a
//! failure with no evidence under Cr_open's range.

use std::collections::{BTreeMap, BTreeSet};

use crate::config::{LatencyMetric, Slo, SloClause, Stat};
use crate::exec::record::{ErrorClass, Journal, RequestRecord, RunFooter, RunHeader, TaskRecord};
use crate::plan::{Load, Mode};

use super::slo::{self, SloEvidence};
use super::{RunState, RunSummary};
use crate::stats::interval::{self, BATCHES, batch_of};
pub use crate::stats::latency_stats;
use crate::stats::{LatencyStats, StatsAccumulator};

/// Open loop: the share of offered arrivals that must complete.
pub const KEPT_UP_MIN_COMPLETED_FRACTION: f64 = 0.95;
/// Backlog test: last-third mean in flight > `RATIO` × first-third mean + `SLACK`.
pub const BACKLOG_GROWTH_RATIO: f64 = 1.5;
pub const BACKLOG_GROWTH_SLACK_CALLS: f64 = 2.0;
/// Below this many in-flight samples in the window the backlog test abstains.
pub const BACKLOG_MIN_SAMPLES: usize = 6;

/// The percentiles every [`LatencyStats`] has as fields.
const STANDARD_PERCENTILES: [f64; 4] = [50.0, 90.0, 95.0, 99.0];

/// Summarise one run. `slos` are evaluated for open runs (verdicts, goodput);
/// any percentile they name that is not a standard field lands in `extra`.
pub fn summarize(journal: &Journal, slos: &[Slo]) -> RunSummary {
    summarize_with(journal, slos, &[])
}

/// [`summarize`], also computing `extra_stats` (e.g. the CrossP statistic of
/// a closed sweep when it is not one of p50/p90/p95/p99) in every metric.
pub fn summarize_with(journal: &Journal, slos: &[Slo], extra_stats: &[Stat]) -> RunSummary {
    summarize_judged(
        journal,
        slos,
        extra_stats,
        interval::DEFAULT_CONFIDENCE,
        &[],
    )
}

/// [`summarize_with`], judging the SLOs at `confidence`. `frontier`: the
/// experiment's `frontier` multipliers (`open`), counted with the default
/// ladder for the SLO frontier ([`super::frontier::multipliers`]).
pub fn summarize_judged(
    journal: &Journal,
    slos: &[Slo],
    extra_stats: &[Stat],
    confidence: f64,
    frontier: &[f64],
) -> RunSummary {
    let ends = JournalEnds {
        header: journal.header.as_ref(),
        footer: journal.footer.as_ref(),
    };
    let pass = |window: Window| {
        let mut acc = Summarizer::new(ends, window, slos, extra_stats, confidence, frontier);
        for record in &journal.requests {
            acc.request(record);
        }
        for task in &journal.tasks {
            acc.task(task);
        }
        acc
    };
    let window = window_of(journal);
    let first = pass(window);
    match first.steady_start_ms() {
        Some(from) => pass(window.starting_at(from)).finish(),
        None => first.finish(),
    }
}

/// A journal's first and last lines: what a summary needs before its records.
#[derive(Debug, Clone, Copy)]
pub struct JournalEnds<'a> {
    pub header: Option<&'a RunHeader>,
    pub footer: Option<&'a RunFooter>,
}

/// A run's summary from its records: a [`RunAccumulator`] over the whole
/// run and, for a run of a mix (its header's plan names the classes), one
/// per class over the class's records, each judged on its class's own SLO
/// (see [`super::mix`]).
pub struct Summarizer<'a> {
    whole: RunAccumulator<'a>,
    classes: Vec<(&'a crate::plan::ClassPlan, RunAccumulator<'a>)>,
}

impl<'a> Summarizer<'a> {
    /// `slos`: every SLO of the experiment; a plain run is judged on all of
    /// them, a mix run's classes each on their own. `frontier`: the
    /// experiment's `frontier` multipliers (a plain run also counts its
    /// percentile clauses at those bounds and the default ladder's; a mix,
    /// whose frontier is not supported, at none).
    pub fn new(
        ends: JournalEnds<'a>,
        window: Window,
        slos: &'a [Slo],
        extra_stats: &[Stat],
        confidence: f64,
        frontier: &[f64],
    ) -> Self {
        let mix = ends.header.and_then(|h| h.run.mix.as_ref());
        let Some(mix) = mix else {
            return Summarizer {
                whole: RunAccumulator::new(ends, window, slos, extra_stats)
                    .with_confidence(confidence)
                    .with_frontier(&super::frontier::multipliers(frontier)),
                classes: Vec::new(),
            };
        };
        let classes = mix
            .classes
            .iter()
            .map(|class| {
                let own: &'a [Slo] = class
                    .slo
                    .as_deref()
                    .and_then(|name| slos.iter().find(|s| s.name == name))
                    .map_or(&[], std::slice::from_ref);
                let mut acc = RunAccumulator::new(ends, window, own, extra_stats)
                    .with_confidence(confidence)
                    .with_frontier(&[]);
                acc.own_arrivals = true;
                (class, acc)
            })
            .collect();
        Summarizer {
            whole: RunAccumulator::new(ends, window, &[], extra_stats).with_confidence(confidence),
            classes,
        }
    }

    fn class_of(&mut self, class: Option<&str>) -> Option<&mut RunAccumulator<'a>> {
        let class = class?;
        self.classes
            .iter_mut()
            .find(|(c, _)| c.name == class)
            .map(|(_, acc)| acc)
    }

    pub fn request(&mut self, r: &RequestRecord) {
        self.whole.request(r);
        if let Some(acc) = self.class_of(r.class.as_deref()) {
            acc.request(r);
        }
    }

    pub fn task(&mut self, t: &TaskRecord) {
        self.whole.task(t);
        if let Some(acc) = self.class_of(t.class.as_deref()) {
            acc.task(t);
        }
    }

    /// The whole run's ([`RunAccumulator::steady_start_ms`]): one window
    /// for every class.
    pub fn steady_start_ms(&self) -> Option<f64> {
        self.whole.steady_start_ms()
    }

    pub fn finish(self) -> RunSummary {
        let name = self.whole.ends.header.map(|h| h.run.workload.clone());
        let mut summary = self.whole.finish();
        if self.classes.is_empty() {
            return summary;
        }
        let classes: Vec<(&crate::plan::ClassPlan, RunSummary)> = self
            .classes
            .into_iter()
            .map(|(plan, acc)| (plan, acc.finish()))
            .collect();
        super::mix::join_classes(&mut summary, &name.unwrap_or_default(), &classes);
        summary
    }
}

/// An exact mean, accumulated.
#[derive(Debug, Clone, Copy, Default)]
struct MeanAccumulator {
    count: u64,
    sum: f64,
}

impl MeanAccumulator {
    fn push(&mut self, v: f64) {
        self.count += 1;
        self.sum += v;
    }

    fn mean(self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }
}

/// One run's summary, built record by record (the journal's lines in file
/// order) in memory that does not grow with the run: every rule of the module
/// doc, applied as each record streams by.
pub struct RunAccumulator<'a> {
    ends: JournalEnds<'a>,
    window: Window,
    slos: &'a [Slo],
    extra: Vec<f64>,
    started: u64,
    ok: u64,
    errors_by_class: BTreeMap<String, u64>,
    /// The server's (or the client's) words for the failures, by kind.
    error_details: ErrorDetailCounter,
    cancelled: u64,
    reconnects: u64,
    completed_ok: u64,
    output_tokens: f64,
    prompt_tokens_completed: f64,
    ttft: StatsAccumulator,
    ttfo: StatsAccumulator,
    /// Successful measured calls that reasoned, and their reasoning tokens.
    reasoning: MeanAccumulator,
    reasoned_calls: u64,
    /// Successful measured calls' output tokens and the events that carried them.
    event_tokens: f64,
    token_events: u64,
    tool_call_answers: u64,
    e2e: StatsAccumulator,
    tpot: StatsAccumulator,
    itl: StatsAccumulator,
    lags: StatsAccumulator,
    reported: MeanAccumulator,
    prompt_requested: MeanAccumulator,
    output_requested: MeanAccumulator,
    output_counted: MeanAccumulator,
    short_outputs: u64,
    /// Per SLO: completed calls whose own latencies met every clause.
    good: Vec<u64>,
    /// Per SLO: the batch counts its verdict is judged on.
    evidence: Vec<SloEvidence>,
    confidence: f64,
    /// Scratch for one call's own ITL percentile (goodput).
    gaps: StatsAccumulator,
    /// Successful measured calls per batch of the window: (count, TTFT sum),
    /// for the steady-state checks.
    trend: [(u64, f64); BATCHES],
    has_tasks: bool,
    task_e2e: StatsAccumulator,
    tasks_completed: u64,
    /// Measured tasks with a failed call.
    tasks_failed: u64,
    /// Sum of the calls' time in flight within the window, ms.
    busy_ms: f64,
    /// Arrivals (first calls) scheduled in the window, from the records:
    /// `offered` when the footer's count does not apply.
    arrivals: u64,
    /// A mix class's share of the records: `offered` is always its own
    /// arrivals (the footer counts the whole run's).
    own_arrivals: bool,
    /// `usage.prompt_tokens_details.cached_tokens` of the measured calls.
    cached: super::reuse::CachedTokens,
}

impl<'a> RunAccumulator<'a> {
    /// `window` from [`window_of`] or [`window_from_ends`].
    pub fn new(
        ends: JournalEnds<'a>,
        window: Window,
        slos: &'a [Slo],
        extra_stats: &[Stat],
    ) -> Self {
        RunAccumulator {
            ends,
            window,
            slos,
            extra: extra_percentiles(slos, extra_stats),
            started: 0,
            ok: 0,
            errors_by_class: BTreeMap::new(),
            error_details: ErrorDetailCounter::default(),
            cancelled: 0,
            reconnects: 0,
            completed_ok: 0,
            output_tokens: 0.0,
            prompt_tokens_completed: 0.0,
            ttft: StatsAccumulator::default(),
            ttfo: StatsAccumulator::default(),
            reasoning: MeanAccumulator::default(),
            reasoned_calls: 0,
            event_tokens: 0.0,
            token_events: 0,
            tool_call_answers: 0,
            e2e: StatsAccumulator::default(),
            tpot: StatsAccumulator::default(),
            itl: StatsAccumulator::default(),
            lags: StatsAccumulator::default(),
            reported: MeanAccumulator::default(),
            prompt_requested: MeanAccumulator::default(),
            output_requested: MeanAccumulator::default(),
            output_counted: MeanAccumulator::default(),
            short_outputs: 0,
            good: vec![0; slos.len()],
            evidence: {
                let multipliers = super::frontier::multipliers(&[]);
                slos.iter()
                    .map(|s| SloEvidence::new(s, &multipliers))
                    .collect()
            },
            confidence: interval::DEFAULT_CONFIDENCE,
            gaps: StatsAccumulator::default(),
            trend: [(0, 0.0); BATCHES],
            has_tasks: false,
            task_e2e: StatsAccumulator::default(),
            tasks_completed: 0,
            busy_ms: 0.0,
            tasks_failed: 0,
            arrivals: 0,
            own_arrivals: false,
            cached: super::reuse::CachedTokens::default(),
        }
    }

    /// Judge the SLOs at `confidence` (default 95%).
    pub fn with_confidence(mut self, confidence: f64) -> Self {
        self.confidence = confidence;
        self
    }

    /// Count each percentile clause's samples beyond its bound times each
    /// of `multipliers` (the full list, [`super::frontier::multipliers`];
    /// by default the default ladder's). Before the first record.
    pub fn with_frontier(mut self, multipliers: &[f64]) -> Self {
        self.evidence = self
            .slos
            .iter()
            .map(|s| SloEvidence::new(s, multipliers))
            .collect();
        self
    }

    fn batch(&self, scheduled_ms: f64) -> usize {
        let [from, to] = self.window.bounds_ms();
        batch_of(scheduled_ms, from, to)
    }

    pub fn request(&mut self, r: &RequestRecord) {
        let overlap = r.completed_ms.min(self.window.to_ms) - r.sent_ms.max(self.window.from_ms);
        if overlap > 0.0 {
            self.busy_ms += overlap;
        }
        if r.is_ok() && self.window.completed(r.completed_ms) {
            self.completed_ok += 1;
            self.output_tokens += f64::from(r.output_tokens);
            self.prompt_tokens_completed += f64::from(
                r.prompt_tokens_reported
                    .unwrap_or(r.prompt_tokens_requested),
            );
            for (good, slo) in self.good.iter_mut().zip(self.slos) {
                *good += u64::from(slo::request_meets(r, slo, &mut self.gaps));
            }
        }
        if !self.window.started(r.scheduled_ms) {
            return;
        }
        self.started += 1;
        self.arrivals += u64::from(r.call == 0);
        let batch = self.batch(r.scheduled_ms);
        if r.error != Some(ErrorClass::Cancelled) {
            for evidence in &mut self.evidence {
                evidence.call(r, batch);
            }
        }
        self.reconnects += u64::from(r.reconnects);
        self.lags.push(r.schedule_lag_ms);
        match r.error {
            Some(ErrorClass::Cancelled) => self.cancelled += 1,
            Some(class) => {
                *self
                    .errors_by_class
                    .entry(class.as_str().to_string())
                    .or_insert(0) += 1;
                self.error_details.count(r);
            }
            None => {
                self.ok += 1;
                if let Some(t) = r.ttfo() {
                    self.ttfo.push(t);
                }
                if r.reasoning_tokens > 0 {
                    self.reasoned_calls += 1;
                }
                self.reasoning.push(f64::from(r.reasoning_tokens));
                let events = r.token_events();
                if events > 0 {
                    self.token_events += u64::from(events);
                    self.event_tokens += f64::from(r.output_tokens);
                }
                self.tool_call_answers += u64::from(r.tool_calls > 0);
                if let Some(t) = r.ttft_ms {
                    self.ttft.push(t);
                    self.trend[batch].0 += 1;
                    self.trend[batch].1 += t;
                }
                if let Some(t) = r.e2e_ms {
                    self.e2e.push(t);
                }
                if let Some(t) = r.tpot_ms() {
                    self.tpot.push(t);
                }
                for &gap in &r.itl_ms {
                    self.itl.push(f64::from(gap));
                }
                if let Some(n) = r.prompt_tokens_reported {
                    self.reported.push(f64::from(n));
                }
                if let Some(n) = r.cached_tokens {
                    self.cached.calls += 1;
                    self.cached.prompt_tokens += u64::from(
                        r.prompt_tokens_reported
                            .unwrap_or(r.prompt_tokens_requested),
                    );
                    self.cached.cached_tokens += u64::from(n);
                }
                self.prompt_requested
                    .push(f64::from(r.prompt_tokens_requested));
                self.output_requested
                    .push(f64::from(r.output_tokens_requested));
                self.output_counted.push(f64::from(r.output_tokens));
                self.short_outputs += u64::from(r.output_tokens < r.output_tokens_requested);
            }
        }
    }

    pub fn task(&mut self, t: &TaskRecord) {
        self.has_tasks = true;
        if self.window.started(t.scheduled_ms) {
            let batch = self.batch(t.scheduled_ms);
            for evidence in &mut self.evidence {
                evidence.task(t, batch);
            }
            self.tasks_failed += u64::from(t.failed_calls > 0);
        }
        if let Some(e2e) = t.e2e_ms {
            if self.window.started(t.scheduled_ms) {
                self.task_e2e.push(e2e);
            }
            if self.window.completed(t.completed_ms) {
                self.tasks_completed += 1;
            }
        }
    }

    /// Where the run's steady state begins, when its first batches are not
    /// yet steady ([`steady_from_batch`]): the window's new start, in ms.
    pub fn steady_start_ms(&self) -> Option<f64> {
        let skip = steady_from_batch(&self.trend);
        (skip > 0).then(|| {
            let [from, to] = self.window.bounds_ms();
            from + (to - from) * skip as f64 / BATCHES as f64
        })
    }

    pub fn finish(self) -> RunSummary {
        let RunAccumulator {
            ends,
            window,
            slos,
            extra,
            ..
        } = &self;
        let window_s = window.seconds();
        let per_s = |n: f64| if window_s > 0.0 { n / window_s } else { 0.0 };
        let mode = ends.header.map(|h| h.run.mode);
        let (concurrency, rate_rps) = match ends.header.map(|h| h.run.load) {
            Some(Load::Concurrency { concurrency }) => (Some(concurrency), None),
            Some(Load::Rate { rate, .. }) => (None, Some(rate.0)),
            None => (None, None),
        };
        let open_loop = mode == Some(Mode::Open);
        let errors: u64 = self.errors_by_class.values().sum();
        // Multi-call workloads journal one TaskRecord per task; single calls
        // are their own task.
        let (tasks, tasks_failed, tasks_completed, task_e2e_ms) = if self.has_tasks {
            (
                self.task_e2e.count(),
                self.tasks_failed,
                self.tasks_completed,
                Some(self.task_e2e.finish(extra)),
            )
        } else {
            (self.ok, errors, self.completed_ok, None)
        };
        let in_window_samples = |f: &RunFooter| -> Vec<(f64, u32)> {
            f.inflight_samples
                .iter()
                .copied()
                .filter(|&(t, _)| window.completed(t))
                .collect()
        };
        let trend_rising = latency_rising(&self.trend);
        let (
            offered,
            completed_fraction,
            climbed_in_flight,
            backlog_growing,
            achieved_rps,
            schedule_lag_ms,
        ) = if open_loop {
            // The footer counted the arrivals of the planned window; a
            // window moved past an unsteady start counts its own.
            let offered = match ends.footer.and_then(|f| f.offered) {
                Some(n) if !window.moved && !self.own_arrivals => n,
                _ => self.arrivals,
            };
            // Finished either way: failures are judged by the SLOs (as
            // beyond their latency bounds, and by `error-rate`), not here.
            let finished = tasks + tasks_failed;
            let completed_fraction =
                (offered > 0).then(|| (finished as f64 / offered as f64).min(1.0));
            let samples = ends.footer.map(in_window_samples).unwrap_or_default();
            (
                Some(offered),
                completed_fraction,
                inflight_climbed(&samples),
                backlog_growing(&samples),
                Some(per_s(tasks_completed as f64)),
                Some(self.lags.finish(extra)),
            )
        } else {
            (None, None, None, None, None, None)
        };
        let (state, state_reason) = if open_loop {
            open_state(
                offered.unwrap_or(0),
                completed_fraction,
                tasks_completed,
                climbed_in_flight,
                backlog_growing,
                trend_rising,
            )
        } else if trend_rising {
            (
                RunState::Backlogged,
                Some("TTFT rose through the window".to_string()),
            )
        } else {
            (RunState::Stable, None)
        };
        let kept_up =
            (open_loop && completed_fraction.is_some()).then_some(state != RunState::Overloaded);
        let mean_inflight = ends.footer.and_then(|f| {
            let in_window: Vec<f64> = in_window_samples(f)
                .iter()
                .map(|&(_, n)| f64::from(n))
                .collect();
            mean(&in_window)
        });
        let stopped_early = ends.footer.and_then(|f| f.stopped_early.clone());
        let invalid = is_invalid(self.ok, errors) || stopped_early.is_some();
        let task_success_fraction = (self.has_tasks && tasks + tasks_failed > 0)
            .then(|| tasks as f64 / (tasks + tasks_failed) as f64);
        let mut summary = RunSummary {
            run_id: ends.header.map(|h| h.run.id.clone()).unwrap_or_default(),
            repetition: super::Repetition(ends.header.map_or(1, |h| h.run.repetition)),
            mode,
            concurrency,
            rate_rps,
            achieved_rps,
            offered,
            requests: self.ok,
            errors,
            errors_by_class: self.errors_by_class.clone(),
            error_details: self.error_details.top(TOP_ERROR_DETAILS),
            rate_limited_calls: self
                .errors_by_class
                .get(ErrorClass::RateLimited.as_str())
                .copied()
                .unwrap_or(0),
            stopped_early,
            decided: ends.footer.and_then(|f| f.decided.clone()),
            cancelled: self.cancelled,
            reconnects: self.reconnects,
            connections_opened: ends.footer.and_then(|f| f.connections_opened),
            tasks,
            tasks_failed: if self.has_tasks { tasks_failed } else { 0 },
            task_success_fraction,
            calls_in_flight_mean: (self.has_tasks && window_s > 0.0)
                .then(|| self.busy_ms / 1000.0 / window_s),
            window_s,
            warmup_extended_s: window.moved.then(|| window.moved_by_ms / 1000.0),
            requests_per_s: per_s(self.completed_ok as f64),
            output_tokens_per_s: per_s(self.output_tokens),
            total_tokens_per_s: per_s(self.prompt_tokens_completed + self.output_tokens),
            ttft_ms: self.ttft.finish(extra),
            // Without reasoning TTFO is TTFT: stated once, as TTFT.
            ttfo_ms: (self.reasoned_calls > 0).then(|| self.ttfo.finish(extra)),
            reasoning_tokens_mean: (self.reasoned_calls > 0)
                .then(|| self.reasoning.mean())
                .flatten(),
            tokens_per_event: (self.token_events > 0)
                .then(|| self.event_tokens / self.token_events as f64),
            tool_call_answers: self.tool_call_answers,
            itl_ms: self.itl.finish(extra),
            tpot_ms: self.tpot.finish(extra),
            e2e_ms: self.e2e.finish(extra),
            task_e2e_ms,
            schedule_lag_ms,
            prompt_tokens_requested_mean: self.prompt_requested.mean().unwrap_or(0.0),
            prompt_tokens_reported_mean: self.reported.mean(),
            output_tokens_requested_mean: self.output_requested.mean().unwrap_or(0.0),
            output_tokens_mean: self.output_counted.mean().unwrap_or(0.0),
            short_outputs: self.short_outputs,
            mean_inflight,
            verdicts: Vec::new(),
            goodput_rps: BTreeMap::new(),
            state,
            state_reason: state_reason.clone(),
            kept_up,
            completed_fraction,
            backlog_growing,
            generator_lagging: ends.footer.is_some_and(|f| f.generator_lagging),
            incomplete: window.incomplete,
            invalid,
            server: None,
            // A mix class's records are a share of the run: the footer's
            // tally is the whole run's.
            reuse_potential: ends
                .footer
                .and_then(|f| f.reuse_potential)
                .filter(|_| !self.own_arrivals),
            cached_tokens: (self.cached.calls > 0).then_some(self.cached),
            reuse: None,
            classes: Vec::new(),
        };
        if open_loop {
            let task_e2e = if self.has_tasks {
                &self.task_e2e
            } else {
                &self.e2e
            };
            let values = |metric: LatencyMetric| match metric {
                LatencyMetric::Ttft => &self.ttft,
                LatencyMetric::Ttfo => &self.ttfo,
                LatencyMetric::Itl => &self.itl,
                LatencyMetric::Tpot => &self.tpot,
                LatencyMetric::E2e => &self.e2e,
                LatencyMetric::TaskE2e => task_e2e,
            };
            for ((slo, good), evidence) in slos.iter().zip(&self.good).zip(&self.evidence) {
                let mut verdict = evidence.judge(slo, values, self.confidence, self.has_tasks);
                slo::apply_run_state(&mut verdict, &summary);
                summary.verdicts.push(verdict);
                summary
                    .goodput_rps
                    .insert(slo.name.clone(), per_s(*good as f64));
            }
        }
        summary
    }
}

/// How many of a run's most frequent failure messages it keeps.
pub const TOP_ERROR_DETAILS: usize = 5;
/// Distinct messages counted per run; past it, new ones are counted only
/// by class (the totals stay exact), so memory does not grow with a run
/// whose every error is worded differently.
const MAX_DISTINCT_DETAILS: usize = 64;

/// Failures counted by their words: class, status and the message with its
/// digits masked, so "you requested 9000 tokens" and "… 9100 tokens" are
/// one kind, quoted by the first call that said it.
#[derive(Debug, Default)]
struct ErrorDetailCounter {
    kinds: BTreeMap<(ErrorClass, Option<u16>, String), (String, u64)>,
}

impl ErrorDetailCounter {
    fn count(&mut self, r: &RequestRecord) {
        let Some(class) = r.error else {
            return;
        };
        let detail = r.error_detail.as_deref().unwrap_or("");
        let key = (class, r.http_status, mask_digits(detail));
        let full = self.kinds.len() >= MAX_DISTINCT_DETAILS;
        match self.kinds.get_mut(&key) {
            Some((_, n)) => *n += 1,
            None if !full => {
                self.kinds.insert(key, (detail.to_string(), 1));
            }
            None => {}
        }
    }

    /// The `n` most frequent kinds, most frequent first (ties in class order).
    fn top(&self, n: usize) -> Vec<super::ErrorDetail> {
        let mut all: Vec<super::ErrorDetail> = self
            .kinds
            .iter()
            .map(
                |((class, status, _), (example, count))| super::ErrorDetail {
                    class: class.as_str().to_string(),
                    http_status: *status,
                    detail: example.clone(),
                    count: *count,
                },
            )
            .collect();
        all.sort_by_key(|d| std::cmp::Reverse(d.count));
        all.truncate(n);
        all
    }
}

/// `s` with every run of ASCII digits replaced by `#`.
fn mask_digits(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut in_digits = false;
    for c in s.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push('#');
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
    out
}

/// The keep-up rule of an open run, stated on every card: a run is
/// **overloaded** — and fails every SLO — when fewer than 95% of the arrivals
/// scheduled in its window finished (with or without an error), or when the
/// tasks completed inside the window fell behind those arrivals
/// ([`completions_keep_pace`]). It is **backlogged** — and cannot pass —
/// when its calls in flight or its TTFT kept rising through the window
/// ([`backlog_growing`], [`latency_rising`]): its queue had not settled, so
/// its percentiles understate the rate's steady state. Otherwise it is
/// **stable**.
fn open_state(
    offered: u64,
    completed_fraction: Option<f64>,
    tasks_completed: u64,
    inflight_climbed: Option<bool>,
    backlog_growing: Option<bool>,
    trend_rising: bool,
) -> (RunState, Option<String>) {
    let mut overloaded = vec![];
    match completed_fraction {
        Some(f) if f < KEPT_UP_MIN_COMPLETED_FRACTION => {
            overloaded.push(format!(
                "{} of arrivals finished",
                crate::format::pct_compact(f)
            ));
        }
        // Nothing arrived, so nothing says whether the replica kept up.
        None => {
            return (
                RunState::Stable,
                Some("no arrivals in the measured window: nothing to judge".to_string()),
            );
        }
        Some(_) => {}
    }
    if offered > 0 && !completions_keep_pace(offered, tasks_completed as f64, inflight_climbed) {
        overloaded.push(format!(
            "{tasks_completed} tasks completed in the window for {offered} arrivals"
        ));
    }
    if !overloaded.is_empty() {
        return (RunState::Overloaded, Some(overloaded.join(", ")));
    }
    let mut backlog = vec![];
    if backlog_growing == Some(true) {
        backlog.push("calls in flight kept growing");
    }
    if trend_rising {
        backlog.push("TTFT rose through the window");
    }
    if backlog.is_empty() {
        (RunState::Stable, None)
    } else {
        (RunState::Backlogged, Some(backlog.join(", ")))
    }
}

/// Fewest successful calls each third of the window needs for the trend test.
pub const TREND_MIN_SAMPLES: u64 = 10;
/// Trend and start tests: a third (or batch) is off when its mean TTFT
/// differs from the reference by more than this factor.
pub const TREND_RATIO: f64 = 1.5;
/// The most batches (of [`BATCHES`]) the steady-state check may drop from
/// the start of a window: a quarter of it.
pub const MAX_UNSTEADY_BATCHES: usize = BATCHES / 4;

/// Mann–Kendall z above which the batch means are read as a trend (one
/// sided, 1%).
pub const TREND_MIN_Z: f64 = 2.33;

/// Whether the mean TTFT rose through the window: the middle third above
/// the first and the last above [`TREND_RATIO`] × the first, like the
/// backlog test on calls in flight, each third on at least
/// [`TREND_MIN_SAMPLES`] calls — and the batch means rise as a trend
/// (Mann–Kendall z > [`TREND_MIN_Z`]). The trend test is what tells a
/// queue that keeps growing from the bursts of a Poisson stream: on vLLM at
/// 40% load, two bursty batches in the last third lifted its mean 1.5×
/// with no trend at all, and the run was wrongly barred from passing.
pub fn latency_rising(trend: &[(u64, f64); BATCHES]) -> bool {
    effect_rising(trend) && mann_kendall_z(trend) > TREND_MIN_Z
}

/// The Mann–Kendall statistic of the non-empty batches' means, as a z
/// score (no ties correction: means of real latencies rarely tie).
pub fn mann_kendall_z(trend: &[(u64, f64); BATCHES]) -> f64 {
    let means: Vec<f64> = trend
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|&(n, sum)| sum / n as f64)
        .collect();
    let n = means.len();
    if n < 4 {
        return 0.0;
    }
    let mut s = 0.0;
    for i in 0..n {
        for j in i + 1..n {
            s += (means[j] - means[i]).signum() * f64::from(u8::from(means[j] != means[i]));
        }
    }
    let nf = n as f64;
    let variance = nf * (nf - 1.0) * (2.0 * nf + 5.0) / 18.0;
    // Continuity correction towards zero.
    let s = if s > 0.0 {
        s - 1.0
    } else if s < 0.0 {
        s + 1.0
    } else {
        0.0
    };
    s / variance.sqrt()
}

fn effect_rising(trend: &[(u64, f64); BATCHES]) -> bool {
    let third = |range: std::ops::Range<usize>| {
        let (n, sum) = trend[range]
            .iter()
            .fold((0, 0.0), |(n, s), &(bn, bs)| (n + bn, s + bs));
        (n >= TREND_MIN_SAMPLES).then(|| sum / n as f64)
    };
    let a = BATCHES / 3;
    match (
        third(0..a),
        third(a..BATCHES - a),
        third(BATCHES - a..BATCHES),
    ) {
        (Some(first), Some(middle), Some(last)) => middle > first && last > TREND_RATIO * first,
        _ => false,
    }
}

/// How many leading batches of a window are not yet steady: each batch
/// (with at least 5 calls) whose mean TTFT is off by more than
/// [`TREND_RATIO`] either way from the median batch mean of the second half
/// of the window — the synchronized start of a closed loop, a queue still
/// filling — up to [`MAX_UNSTEADY_BATCHES`]. Dropping them extends the
/// warmup within that budget.
pub fn steady_from_batch(trend: &[(u64, f64); BATCHES]) -> usize {
    let mut later: Vec<f64> = trend[BATCHES / 2..]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|&(n, sum)| sum / n as f64)
        .collect();
    if later.len() < BATCHES / 4 {
        return 0;
    }
    later.sort_by(f64::total_cmp);
    let reference = crate::stats::median_of_sorted(&later)
        .copied()
        .unwrap_or(0.0);
    if reference <= 0.0 {
        return 0;
    }
    trend
        .iter()
        .take(MAX_UNSTEADY_BATCHES)
        .take_while(|&&(n, sum)| {
            let m = sum / n.max(1) as f64;
            n >= 5 && (m > TREND_RATIO * reference || m * TREND_RATIO < reference)
        })
        .count()
}

/// The rule for a run that is not a measurement: more than half of its
/// measured calls failed (any class but `cancelled`). Such a run measures the
/// failure — a wrong model name, a refused prompt format, a server that is
/// down — not the replica's capacity; one bad call in a few is still a
/// measurement, and the SLO's error-rate clause judges it.
pub fn is_invalid(ok_calls: u64, failed_calls: u64) -> bool {
    failed_calls > 0 && failed_calls * 2 > ok_calls + failed_calls
}

impl RunSummary {
    /// The distribution of `metric`. A single-call workload has no task
    /// records: each call is its own task, so task E2E is the call's E2E.
    pub fn latency(&self, metric: LatencyMetric) -> &LatencyStats {
        match metric {
            LatencyMetric::Ttft => &self.ttft_ms,
            // Without reasoning the answer starts with the first token.
            LatencyMetric::Ttfo => self.ttfo_ms.as_ref().unwrap_or(&self.ttft_ms),
            LatencyMetric::Itl => &self.itl_ms,
            LatencyMetric::Tpot => &self.tpot_ms,
            LatencyMetric::E2e => &self.e2e_ms,
            LatencyMetric::TaskE2e => self.task_e2e_ms.as_ref().unwrap_or(&self.e2e_ms),
        }
    }
}

/// Whether the tasks completed inside the window kept pace with the
/// arrivals scheduled in it: in steady state the two counts differ only by
/// noise, while an overloaded replica completes at its own ceiling.
///
/// The allowance is 5% of the arrivals or two Poisson standard deviations
/// (2·√offered), whichever is larger, so a short low-rate run is not failed
/// for one straggler. Arrivals minus completions in the window is the
/// growth of the work in flight between the window's two ends, and an end
/// can fall on a lump: a batching engine's calls of similar lengths finish
/// together, so the calls in flight wander in a sawtooth, and a window
/// that closes just before a batch finishes shows a deficit the replica
/// does not have. So where the window's in-flight samples are given
/// (`inflight_climbed`, [`inflight_climbed`]), a deficit counts only when
/// they climbed too, beyond their own wander. On `sim tiny` at 78% load in
/// a 4 s window, 114 arrivals and 88 completions, every latency far within
/// its bounds, were read as overloaded by the counts alone: 23 calls
/// finished in the half second after the window closed.
pub fn completions_keep_pace(
    offered: u64,
    completed_in_window: f64,
    inflight_climbed: Option<bool>,
) -> bool {
    let offered = offered as f64;
    let allowance = (0.05 * offered).max(2.0 * offered.sqrt());
    offered - completed_in_window <= allowance || inflight_climbed == Some(false)
}

/// Whether the calls in flight climbed through the window beyond their
/// own wander: the mean of the last tenth of the window's samples (at
/// least 2) minus the mean of the first tenth exceeds two standard
/// deviations of such a difference in steady state, `2·√2·sd`, where `sd`
/// is the samples' spread around their straight-line trend (a climb does
/// not count as wander). `None` below [`BACKLOG_MIN_SAMPLES`] samples.
pub fn inflight_climbed(samples: &[(f64, u32)]) -> Option<bool> {
    let n = samples.len();
    if n < BACKLOG_MIN_SAMPLES.max(4) {
        return None;
    }
    let values: Vec<f64> = samples.iter().map(|&(_, v)| f64::from(v)).collect();
    let ends = (n / 10).max(2);
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    let growth = mean(&values[n - ends..]) - mean(&values[..ends]);
    // Residuals around the least-squares line through (sample index, value):
    // the samples are taken at a fixed period.
    let nf = n as f64;
    let t_mean = (nf - 1.0) / 2.0;
    let v_mean = mean(&values);
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (i, v) in values.iter().enumerate() {
        let dt = i as f64 - t_mean;
        sxy += dt * (v - v_mean);
        sxx += dt * dt;
    }
    let slope = sxy / sxx;
    let residual_ss: f64 = values
        .iter()
        .enumerate()
        .map(|(i, v)| (v - v_mean - slope * (i as f64 - t_mean)).powi(2))
        .sum();
    let sd = (residual_ss / (nf - 2.0)).sqrt();
    Some(growth > 2.0 * std::f64::consts::SQRT_2 * sd)
}

/// `Some(true)` when calls in flight grew over the window (rule in the module doc).
pub fn backlog_growing(samples: &[(f64, u32)]) -> Option<bool> {
    if samples.len() < BACKLOG_MIN_SAMPLES {
        return None;
    }
    let third = samples.len() / 3;
    let mean_in =
        |s: &[(f64, u32)]| s.iter().map(|&(_, n)| f64::from(n)).sum::<f64>() / s.len() as f64;
    let first = mean_in(&samples[..third]);
    let middle = mean_in(&samples[third..samples.len() - third]);
    let last = mean_in(&samples[samples.len() - third..]);
    // A queue that grows because arrivals outpace service grows through the
    // whole window; a burst near the end (Poisson clusters do that) lifts
    // only the last third. So the middle third must sit above the first too.
    Some(middle > first && last > BACKLOG_GROWTH_RATIO * first + BACKLOG_GROWTH_SLACK_CALLS)
}

/// The measured window of a journal (rules in the module doc).
#[derive(Debug, Clone, Copy)]
pub struct Window {
    from_ms: f64,
    to_ms: f64,
    incomplete: bool,
    /// The start was moved past an unsteady beginning, by this much.
    moved: bool,
    moved_by_ms: f64,
}

/// The window of a journal in memory.
pub fn window_of(journal: &Journal) -> Window {
    let last = journal
        .requests
        .iter()
        .map(|r| r.completed_ms)
        .chain(journal.tasks.iter().map(|t| t.completed_ms))
        .fold(0.0, f64::max);
    window_from_ends(journal.header.as_ref(), journal.footer.as_ref(), last)
}

/// The window from a journal's ends; `last_completed_ms` (the latest
/// completion of any line) is used only when there is no footer.
pub fn window_from_ends(
    header: Option<&RunHeader>,
    footer: Option<&RunFooter>,
    last_completed_ms: f64,
) -> Window {
    // A run stopped early is judged on every call it made (its footer's
    // window starts at 0, before the warmup's end).
    let stopped_early_from = footer
        .filter(|f| f.stopped_early.is_some())
        .map(|f| f.measured_window_ms[0]);
    let from_ms = stopped_early_from
        .or(header.map(|h| h.measure_from_ms))
        .or(footer.map(|f| f.measured_window_ms[0]))
        .unwrap_or(0.0);
    match footer {
        Some(footer) => Window {
            from_ms,
            to_ms: footer.measured_window_ms[1].max(from_ms),
            incomplete: footer.interrupted,
            moved: false,
            moved_by_ms: 0.0,
        },
        None => Window {
            from_ms,
            to_ms: last_completed_ms.max(from_ms),
            incomplete: true,
            moved: false,
            moved_by_ms: 0.0,
        },
    }
}

impl Window {
    /// The same window, starting later at `from_ms` (an extended warmup).
    pub fn starting_at(self, from_ms: f64) -> Window {
        let from = from_ms.clamp(self.from_ms, self.to_ms);
        Window {
            from_ms: from,
            moved: from > self.from_ms,
            moved_by_ms: self.moved_by_ms + (from - self.from_ms),
            ..self
        }
    }

    /// The `[from, to]` of the window, ms since the run's start.
    pub fn bounds_ms(&self) -> [f64; 2] {
        [self.from_ms, self.to_ms]
    }

    fn seconds(&self) -> f64 {
        (self.to_ms - self.from_ms) / 1000.0
    }

    fn started(&self, scheduled_ms: f64) -> bool {
        scheduled_ms >= self.from_ms && scheduled_ms < self.to_ms
    }

    fn completed(&self, t_ms: f64) -> bool {
        t_ms >= self.from_ms && t_ms <= self.to_ms
    }
}

/// Percentiles the SLOs (and callers) ask for beyond the standard four.
fn extra_percentiles(slos: &[Slo], extra_stats: &[Stat]) -> Vec<f64> {
    let from_slos = slos
        .iter()
        .flat_map(|s| &s.clauses)
        .filter_map(|c| match c {
            SloClause::Latency { stat, .. } => Some(*stat),
            SloClause::ErrorRate { .. } => None,
        });
    let mut seen = BTreeSet::new();
    from_slos
        .chain(extra_stats.iter().copied())
        .filter_map(|s| match s {
            Stat::Percentile(p) if !STANDARD_PERCENTILES.contains(&p) => Some(p),
            _ => None,
        })
        .filter(|p| seen.insert(Stat::Percentile(*p).key()))
        .collect()
}

fn mean(values: &[f64]) -> Option<f64> {
    (!values.is_empty()).then(|| values.iter().sum::<f64>() / values.len() as f64)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;
    use crate::config::{Arrival, RatePerS, StopRule};
    use crate::exec::record::{RunFooter, RunHeader, TaskRecord};
    use crate::plan::RunPlan;
    use crate::stats::interval::Verdict;

    pub(crate) fn header(load: Load, measure_from_ms: f64) -> RunHeader {
        RunHeader {
            run: RunPlan::new(
                "t",
                "w",
                load,
                Duration::from_millis(measure_from_ms as u64),
                StopRule::Duration(Duration::from_secs(10)),
                1,
            ),
            started_at: "2026-01-01T00:00:00Z".into(),
            model: "m".into(),
            measure_from_ms,
            content_nonce: 0,
            prompt_sizing: None,
            prefix_cache_reset: None,
            telemetry_off: None,
            clock: None,
            context_window: None,
            shard: None,
            shards: Vec::new(),
            dialect: None,
        }
    }

    /// A successful call: `ttft` then `tokens` tokens spaced `gap` ms apart.
    pub(crate) fn call(
        task: u64,
        scheduled_ms: f64,
        ttft: f64,
        tokens: u32,
        gap: f32,
    ) -> RequestRecord {
        RequestRecord::succeeded(
            task,
            scheduled_ms,
            ttft,
            vec![gap; tokens.saturating_sub(1) as usize],
        )
    }

    pub(crate) fn failed(task: u64, scheduled_ms: f64, class: ErrorClass) -> RequestRecord {
        RequestRecord::failed(task, scheduled_ms, scheduled_ms + 5.0, class)
    }

    fn footer(window: [f64; 2], offered: Option<u64>, samples: Vec<(f64, u32)>) -> RunFooter {
        RunFooter {
            measured_window_ms: window,
            offered,
            inflight_samples: samples,
            generator_lagging: false,
            interrupted: false,
            finished_at: "2026-01-01T00:01:00Z".into(),
            connections_opened: None,
            stopped_early: None,
            decided: None,
            reuse_potential: None,
        }
    }

    fn slo_ttft_p50(limit_ms: u64) -> Slo {
        Slo {
            name: "chat".into(),
            span: None,
            clauses: vec![SloClause::Latency {
                metric: LatencyMetric::Ttft,
                stat: Stat::Percentile(50.0),
                limit: Duration::from_millis(limit_ms),
            }],
        }
    }

    #[test]
    fn closed_run_window_throughput_and_latencies() {
        // Window [1000, 11000] = 10 s. Calls every 100 ms from t=0; each takes
        // 50 + 9×10 = 140 ms with 10 tokens.
        let mut requests = vec![];
        for i in 0..120u64 {
            requests.push(call(i, i as f64 * 100.0, 50.0, 10, 10.0));
        }
        let journal = Journal {
            header: Some(header(Load::Concurrency { concurrency: 2 }, 1000.0)),
            requests,
            tasks: vec![],
            footer: Some(footer(
                [1000.0, 11000.0],
                None,
                vec![(2000.0, 2), (3000.0, 4)],
            )),
        };
        let s = summarize(&journal, &[]);
        assert_eq!(s.run_id, "t--w--c0002");
        assert_eq!(s.mode, Some(Mode::Closed));
        assert_eq!(s.concurrency, Some(2));
        assert_eq!(s.window_s, 10.0);
        // Started in [1000, 11000): i = 10..=109 → 100 calls.
        assert_eq!(s.requests, 100);
        assert_eq!(s.tasks, 100);
        // Completed in [1000, 11000]: completion = 100 i + 140 → i = 9..=108 → 100 calls.
        assert!((s.requests_per_s - 10.0).abs() < 1e-9);
        assert!((s.output_tokens_per_s - 100.0).abs() < 1e-9);
        assert!((s.total_tokens_per_s - 1100.0).abs() < 1e-9);
        assert_eq!(s.ttft_ms.count, 100);
        assert!((s.ttft_ms.p50 - 50.0).abs() < 0.05);
        assert!((s.e2e_ms.p99 - 140.0).abs() < 0.14);
        assert_eq!(s.e2e_ms.max, 140.0);
        assert_eq!(s.itl_ms.count, 900);
        assert!((s.itl_ms.mean - 10.0).abs() < 1e-6);
        // TPOT = (140 − 50) / 9 = 10 ms.
        assert!((s.tpot_ms.mean - 10.0).abs() < 1e-9);
        assert_eq!(s.mean_inflight, Some(3.0));
        assert_eq!(s.achieved_rps, None);
        assert_eq!(s.kept_up, None);
        assert!(s.schedule_lag_ms.is_none());
        assert!(!s.incomplete);
        assert!(s.verdicts.is_empty());
    }

    #[test]
    fn a_run_where_most_calls_failed_is_invalid() {
        assert!(
            !is_invalid(0, 0),
            "nothing measured is not invalid, just empty"
        );
        assert!(!is_invalid(10, 10), "half is not most");
        assert!(is_invalid(9, 10));
        assert!(is_invalid(0, 1));
        assert!(!is_invalid(99, 1));
    }

    #[test]
    fn errors_by_class_and_cancelled_apart() {
        let journal = Journal {
            header: Some(header(Load::Concurrency { concurrency: 1 }, 0.0)),
            requests: vec![
                call(0, 10.0, 20.0, 5, 5.0),
                failed(1, 20.0, ErrorClass::Timeout),
                failed(2, 30.0, ErrorClass::Timeout),
                failed(3, 40.0, ErrorClass::HttpStatus),
                failed(4, 50.0, ErrorClass::Cancelled),
                // Scheduled after the window: not measured.
                failed(5, 2000.0, ErrorClass::Connect),
            ],
            tasks: vec![],
            footer: Some(footer([0.0, 1000.0], None, vec![])),
        };
        let s = summarize(&journal, &[]);
        assert_eq!(s.requests, 1);
        assert_eq!(s.errors, 3);
        assert_eq!(s.cancelled, 1);
        assert_eq!(
            s.errors_by_class,
            BTreeMap::from([("http-status".to_string(), 1), ("timeout".to_string(), 2)])
        );
    }

    #[test]
    fn tpot_needs_two_tokens() {
        assert_eq!(call(0, 0.0, 30.0, 1, 0.0).tpot_ms(), None);
        assert_eq!(call(0, 0.0, 30.0, 2, 8.0).tpot_ms(), Some(8.0));
        assert_eq!(failed(0, 0.0, ErrorClass::Timeout).tpot_ms(), None);
    }

    #[test]
    fn no_footer_is_incomplete_and_ends_at_last_completion() {
        let journal = Journal {
            header: Some(header(Load::Concurrency { concurrency: 1 }, 0.0)),
            requests: vec![call(0, 0.0, 100.0, 1, 0.0), call(1, 100.0, 100.0, 1, 0.0)],
            tasks: vec![],
            footer: None,
        };
        let s = summarize(&journal, &[]);
        assert!(s.incomplete);
        assert_eq!(s.window_s, 0.2);
        assert_eq!(s.requests, 2);
        assert!((s.requests_per_s - 10.0).abs() < 1e-9);
        assert_eq!(s.mean_inflight, None);
    }

    #[test]
    fn percentiles_within_hdr_precision_and_extra_from_slos() {
        let values: Vec<f64> = (1..=1000).map(f64::from).collect();
        let stats = latency_stats(&values, &[99.9, 75.0]);
        assert_eq!(stats.count, 1000);
        assert!((stats.mean - 500.5).abs() < 1e-9);
        for (got, want) in [(stats.p50, 500.0), (stats.p90, 900.0), (stats.p99, 990.0)] {
            assert!((got - want).abs() <= want * 0.001, "{got} vs {want}");
        }
        assert!((stats.extra["p99.9"] - 999.0).abs() <= 1.0);
        assert!((stats.extra["p75"] - 750.0).abs() <= 0.75);
        assert_eq!(stats.get(Stat::Percentile(75.0)), Some(stats.extra["p75"]));
        assert_eq!(stats.get(Stat::Percentile(80.0)), None);
        assert_eq!(LatencyStats::default().get(Stat::Mean), None);

        let slo = Slo {
            name: "s".into(),
            span: None,
            clauses: vec![SloClause::Latency {
                metric: LatencyMetric::E2e,
                stat: Stat::Percentile(99.9),
                limit: Duration::from_secs(1),
            }],
        };
        assert_eq!(
            extra_percentiles(&[slo.clone(), slo], &[Stat::Percentile(50.0)]),
            vec![99.9]
        );
    }

    #[test]
    fn backlog_rule() {
        let flat: Vec<(f64, u32)> = (0..30)
            .map(|i| (f64::from(i) * 100.0, 10 + i % 3))
            .collect();
        assert_eq!(backlog_growing(&flat), Some(false));
        let growing: Vec<(f64, u32)> = (0..30)
            .map(|i| (f64::from(i) * 100.0, 10 + 2 * i))
            .collect();
        assert_eq!(backlog_growing(&growing), Some(true));
        // Jitter at a tiny queue is not a backlog: 1 → 3 is within the slack.
        let tiny: Vec<(f64, u32)> = (0..9)
            .map(|i| (f64::from(i), if i < 3 { 1 } else { 3 }))
            .collect();
        assert_eq!(backlog_growing(&tiny), Some(false));
        assert_eq!(backlog_growing(&flat[..5]), None);
        // A burst in the last third only (seen at 64% load on the tiny sim).
        let burst: Vec<(f64, u32)> = (0..30)
            .map(|i| (f64::from(i) * 100.0, if i < 24 { 5 } else { 20 }))
            .collect();
        assert_eq!(backlog_growing(&burst), Some(false));
    }

    fn open_journal(rate: f64, offered: u64, samples: Vec<(f64, u32)>, ttft: f64) -> Journal {
        // Window [0, 10000]: one call every 100 ms scheduled, 10 tokens each.
        let requests = (0..100u64)
            .map(|i| {
                let mut r = call(i, i as f64 * 100.0, ttft, 10, 10.0);
                r.schedule_lag_ms = 0.5;
                r
            })
            .collect();
        Journal {
            header: Some(header(
                Load::Rate {
                    rate: RatePerS(rate),
                    arrival: Arrival::Poisson,
                },
                0.0,
            )),
            requests,
            tasks: vec![],
            footer: Some(footer([0.0, 10000.0], Some(offered), samples)),
        }
    }

    #[test]
    fn open_run_kept_up_verdicts_and_goodput() {
        let samples: Vec<(f64, u32)> = (0..100).map(|i| (f64::from(i) * 100.0, 2)).collect();
        let journal = open_journal(10.0, 100, samples, 50.0);
        let s = summarize(&journal, &[]);
        // The last call (scheduled 9900, done 10040) completes after the
        // window: it counts as completed (by arrival) but not in achieved_rps.
        assert_eq!(s.offered, Some(100));
        assert_eq!(s.completed_fraction, Some(1.0));
        assert_eq!(s.backlog_growing, Some(false));
        assert_eq!(s.kept_up, Some(true));
        assert_eq!(s.achieved_rps, Some(9.9));
        let lag = s.schedule_lag_ms.as_ref().unwrap();
        assert!((lag.p99 - 0.5).abs() < 0.001);
        assert!(s.verdicts.is_empty());

        let slos = [
            Slo {
                name: "loose".into(),
                ..slo_ttft_p50(100)
            },
            Slo {
                name: "tight".into(),
                ..slo_ttft_p50(40)
            },
        ];
        let s = summarize(&journal, &slos);
        let verdicts: Vec<_> = s
            .verdicts
            .iter()
            .map(|v| (v.slo.as_str(), v.verdict))
            .collect();
        assert_eq!(
            verdicts,
            vec![("loose", Verdict::Pass), ("tight", Verdict::Fail)]
        );
        assert_eq!(s.goodput_rps["loose"], 9.9);
        assert_eq!(s.goodput_rps["tight"], 0.0);
        assert!(
            s.verdict("tight")
                .unwrap()
                .note()
                .unwrap()
                .contains("ttft p50 50ms [50ms, 50ms] > 40ms"),
            "{:?}",
            s.verdict("tight")
        );
    }

    #[test]
    fn a_window_with_no_arrivals_is_judged_on_nothing_not_failed() {
        // vLLM CPU, harness B at 0.0127 tasks/s: no session started in the
        // window. That run once read "overloaded", a failure with no
        // evidence, and so bounded Cr_open from above.
        let mut journal = open_journal(0.0127, 0, vec![], 50.0);
        journal.requests.clear();
        let s = summarize(&journal, &[slo_ttft_p50(100)]);
        assert_eq!(s.offered, Some(0));
        assert_eq!(s.kept_up, None);
        assert_eq!(s.state, RunState::Stable);
        assert!(
            s.state_reason
                .as_deref()
                .unwrap()
                .contains("nothing to judge"),
            "{:?}",
            s.state_reason
        );
        assert_eq!(s.verdicts[0].verdict, Verdict::Inconclusive);
    }

    #[test]
    fn completions_must_keep_pace_with_arrivals() {
        // Overload seen on the simulated H100: 977 arrivals, 669 completed in the window.
        assert!(!completions_keep_pace(977, 669.0, None));
        assert!(
            !completions_keep_pace(1000, 930.0, None),
            "allowance is 2·√1000 ≈ 63"
        );
        assert!(completions_keep_pace(1000, 940.0, None));
        // One straggler in a short low-rate run is counting noise, not overload.
        assert!(completions_keep_pace(9, 8.0, None));
        assert!(completions_keep_pace(190, 170.0, None));
    }

    #[test]
    fn a_batching_engines_lumpy_completions_are_not_overload() {
        let sampled = |values: &[u32]| -> Vec<(f64, u32)> {
            values
                .iter()
                .enumerate()
                .map(|(i, &n)| (i as f64 * 100.0, n))
                .collect()
        };
        // sim tiny at 78% load, a 4 s window, its in-flight samples as
        // journaled: 114 arrivals, 88 completed in the window and 23 more
        // in the next half second. The counts alone read it as overloaded.
        let sawtooth = sampled(&[
            9, 9, 15, 18, 21, 22, 17, 10, 1, 1, 2, 2, 5, 7, 4, 6, 7, 8, 7, 8, 7, 2, 2, 7, 8, 7, 3,
            3, 6, 4, 2, 4, 6, 4, 10, 13, 15, 18, 24, 29,
        ]);
        assert_eq!(inflight_climbed(&sawtooth), Some(false));
        assert!(!completions_keep_pace(114, 88.0, None));
        assert!(completions_keep_pace(114, 88.0, Some(false)));
        // sim tiny at 39.4 req/s, just past its ceiling (the export
        // fixture's run): 255 arrivals, 223 completed, and the queue
        // climbed from about 57 to 80 through a 6.4 s window.
        let past_ceiling = sampled(&[
            50, 51, 53, 58, 60, 60, 61, 61, 64, 64, 63, 61, 58, 58, 60, 61, 57, 61, 58, 56, 61, 59,
            59, 61, 62, 58, 58, 57, 54, 57, 54, 54, 54, 54, 55, 58, 59, 62, 62, 61, 59, 59, 53, 56,
            55, 57, 57, 57, 59, 59, 59, 60, 60, 63, 65, 66, 67, 67, 70, 70, 70, 76, 79, 80, 82,
        ]);
        assert_eq!(inflight_climbed(&past_ceiling), Some(true));
        assert!(!completions_keep_pace(255, 223.0, Some(true)));
        // A steady climb of 60 calls.
        let climb: Vec<(f64, u32)> = (0..40)
            .map(|i| (f64::from(i) * 100.0, (i * 3 / 2) as u32))
            .collect();
        assert_eq!(inflight_climbed(&climb), Some(true));
        assert_eq!(inflight_climbed(&climb[..5]), None);
    }

    #[test]
    fn open_run_not_kept_up() {
        let growing: Vec<(f64, u32)> = (0..100).map(|i| (f64::from(i) * 100.0, 5 + i)).collect();
        let s = summarize(&open_journal(10.0, 100, growing, 50.0), &[]);
        assert_eq!(s.backlog_growing, Some(true));
        // A growing queue that still finishes its arrivals is backlogged:
        // it cannot pass, but it is not (yet) overloaded.
        assert_eq!(s.state, RunState::Backlogged);
        assert_eq!(s.kept_up, Some(true));

        let flat: Vec<(f64, u32)> = (0..100).map(|i| (f64::from(i) * 100.0, 5)).collect();
        let s = summarize(&open_journal(12.0, 120, flat.clone(), 50.0), &[]);
        assert!((s.completed_fraction.unwrap() - 100.0 / 120.0).abs() < 1e-12);
        assert_eq!(s.kept_up, Some(false));
        assert_eq!(s.state, RunState::Overloaded);
        assert!(
            s.state_reason
                .as_deref()
                .unwrap()
                .contains("83.3% of arrivals finished")
        );
    }

    #[test]
    fn tasks_from_task_records() {
        let mut journal = open_journal(1.0, 3, vec![], 50.0);
        journal.tasks = vec![
            TaskRecord {
                task: 0,
                scheduled_ms: 0.0,
                completed_ms: 3000.0,
                e2e_ms: Some(3000.0),
                calls: 3,
                failed_calls: 0,
                context_rejected_calls: 0,
                class: None,
            },
            TaskRecord {
                task: 1,
                scheduled_ms: 1000.0,
                completed_ms: 5000.0,
                e2e_ms: Some(4000.0),
                calls: 3,
                failed_calls: 0,
                context_rejected_calls: 0,
                class: None,
            },
            TaskRecord {
                task: 2,
                scheduled_ms: 2000.0,
                completed_ms: 6000.0,
                e2e_ms: None,
                calls: 3,
                failed_calls: 1,
                context_rejected_calls: 0,
                class: None,
            },
        ];
        let s = summarize(&journal, &[]);
        assert_eq!(s.tasks, 2);
        assert_eq!(s.achieved_rps, Some(0.2));
        // The failed task finished too: failures are the SLOs' to judge.
        assert_eq!(s.completed_fraction, Some(1.0));
        assert_eq!(s.tasks_failed, 1);
        assert_eq!(s.task_success_fraction, Some(2.0 / 3.0));
        let task = s.task_e2e_ms.as_ref().unwrap();
        assert_eq!(task.count, 2);
        assert_eq!(task.mean, 3500.0);
        assert_eq!(s.latency(LatencyMetric::TaskE2e).count, 2);
    }

    #[test]
    fn offered_without_footer_from_first_calls() {
        let mut journal = open_journal(10.0, 0, vec![], 50.0);
        journal.footer = None;
        let s = summarize(&journal, &[]);
        assert!(s.incomplete);
        assert_eq!(s.offered, Some(100));
    }

    #[test]
    fn token_means_and_short_outputs() {
        let mut short = call(1, 10.0, 10.0, 4, 1.0);
        short.output_tokens_requested = 8;
        short.prompt_tokens_reported = None;
        let journal = Journal {
            header: Some(header(Load::Concurrency { concurrency: 1 }, 0.0)),
            requests: vec![call(0, 0.0, 10.0, 8, 1.0), short],
            tasks: vec![],
            footer: Some(footer([0.0, 1000.0], None, vec![])),
        };
        let s = summarize(&journal, &[]);
        assert_eq!(s.short_outputs, 1);
        assert_eq!(s.output_tokens_requested_mean, 8.0);
        assert_eq!(s.output_tokens_mean, 6.0);
        assert_eq!(s.prompt_tokens_requested_mean, 100.0);
        assert_eq!(s.prompt_tokens_reported_mean, Some(100.0));
    }

    fn batches(means: [f64; BATCHES]) -> [(u64, f64); BATCHES] {
        means.map(|m| (10, 10.0 * m))
    }

    #[test]
    fn a_growing_queue_is_a_trend_and_bursts_are_not() {
        // A queue that keeps growing: TTFT climbs batch after batch.
        let mut climbing = [0.0; BATCHES];
        for (i, m) in climbing.iter_mut().enumerate() {
            *m = 100.0 + 30.0 * i as f64 + if i % 2 == 0 { 10.0 } else { -10.0 };
        }
        assert!(mann_kendall_z(&batches(climbing)) > 5.0);
        assert!(latency_rising(&batches(climbing)));
        // As on vLLM at 0.82 rps (40% load): Poisson bursts in a few
        // batches lift the later thirds' means, with no trend (z ≈ 2.1).
        let bursty = [
            99.0, 92.0, 98.0, 91.0, 86.0, 115.0, 112.0, 82.0, 100.0, 333.0, 100.0, 103.0, 103.0,
            103.0, 98.0, 492.0, 118.0, 99.0, 107.0, 285.0,
        ];
        assert!(
            effect_rising(&batches(bursty)),
            "the thirds alone read it as rising"
        );
        assert!(mann_kendall_z(&batches(bursty)) < TREND_MIN_Z);
        assert!(!latency_rising(&batches(bursty)));
        // Flat: neither.
        assert!(!latency_rising(&batches([100.0; BATCHES])));
    }
}
