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
//! keep pace with the arrivals scheduled in it ([`completions_keep_pace`]).
//! `kept_up` = `completed_fraction ≥ 0.95`, completions keep pace and no
//! growing backlog; a window with no arrivals did not keep up (nothing shows
//! that it did).

use std::collections::{BTreeMap, BTreeSet};

use hdrhistogram::Histogram;

use crate::config::{LatencyMetric, Slo, SloClause, Stat};
use crate::exec::record::{ErrorClass, Journal, RequestRecord, RunFooter, RunHeader, TaskRecord};
use crate::plan::{Load, Mode};

use super::{LatencyStats, RunSummary, slo};

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
    let ends = JournalEnds {
        header: journal.header.as_ref(),
        footer: journal.footer.as_ref(),
    };
    let mut acc = RunAccumulator::new(ends, window_of(journal), slos, extra_stats);
    for record in &journal.requests {
        acc.request(record);
    }
    for task in &journal.tasks {
        acc.task(task);
    }
    acc.finish()
}

/// A journal's first and last lines: what a summary needs before its records.
#[derive(Debug, Clone, Copy)]
pub struct JournalEnds<'a> {
    pub header: Option<&'a RunHeader>,
    pub footer: Option<&'a RunFooter>,
}

/// Streaming percentiles: an HDR histogram (µs, 3 significant digits) and
/// the exact count, sum and max. Gives what [`latency_stats`] gives for the
/// same values in the same order, in constant memory.
#[derive(Debug, Clone, Default)]
pub struct StatsAccumulator {
    hist: Option<Histogram<u64>>,
    count: u64,
    sum: f64,
    max: f64,
}

impl StatsAccumulator {
    pub fn push(&mut self, v: f64) {
        let hist = self.hist.get_or_insert_with(|| {
            Histogram::<u64>::new(3).expect("3 significant digits is a valid HDR precision")
        });
        // Saturating cast: negative or NaN → 0, absurdly large → u64::MAX.
        let us = (v * 1000.0).round() as u64;
        // `new` auto-resizes, so `record` only fails beyond what any
        // histogram can track; clamp those to its highest value.
        if hist.record(us).is_err() {
            hist.saturating_record(us);
        }
        self.max = if self.count == 0 { v } else { self.max.max(v) };
        self.count += 1;
        self.sum += v;
    }

    pub fn finish(&self, extra_percentiles: &[f64]) -> LatencyStats {
        let Some(hist) = self.hist.as_ref().filter(|_| self.count > 0) else {
            return LatencyStats::default();
        };
        // Nearest rank = ceil(q × n); the epsilon keeps float error
        // (0.999 × 1000 = 999.0000000000001) from skipping to the next rank.
        let at = |p: f64| hist.value_at_quantile((p / 100.0 - 1e-12).max(0.0)) as f64 / 1000.0;
        LatencyStats {
            count: self.count,
            mean: self.sum / self.count as f64,
            p50: at(50.0),
            p90: at(90.0),
            p95: at(95.0),
            p99: at(99.0),
            max: self.max,
            extra: extra_percentiles
                .iter()
                .map(|&p| (Stat::Percentile(p).key(), at(p)))
                .collect(),
        }
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
    cancelled: u64,
    reconnects: u64,
    completed_ok: u64,
    output_tokens: f64,
    prompt_tokens_completed: f64,
    ttft: StatsAccumulator,
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
    has_tasks: bool,
    task_e2e: StatsAccumulator,
    tasks_completed: u64,
    /// Without a footer only: each task's first scheduled instant (the
    /// arrivals of a run cut short), for `offered`.
    first_scheduled: Option<BTreeMap<u64, f64>>,
}

impl<'a> RunAccumulator<'a> {
    /// `window` from [`window_of`] or [`window_from_ends`].
    pub fn new(
        ends: JournalEnds<'a>,
        window: Window,
        slos: &'a [Slo],
        extra_stats: &[Stat],
    ) -> Self {
        let open_loop = ends.header.map(|h| h.run.mode) == Some(Mode::Open);
        RunAccumulator {
            ends,
            window,
            slos,
            extra: extra_percentiles(slos, extra_stats),
            started: 0,
            ok: 0,
            errors_by_class: BTreeMap::new(),
            cancelled: 0,
            reconnects: 0,
            completed_ok: 0,
            output_tokens: 0.0,
            prompt_tokens_completed: 0.0,
            ttft: StatsAccumulator::default(),
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
            has_tasks: false,
            task_e2e: StatsAccumulator::default(),
            tasks_completed: 0,
            first_scheduled: (open_loop && ends.footer.is_none()).then(BTreeMap::new),
        }
    }

    pub fn request(&mut self, r: &RequestRecord) {
        if let Some(first) = &mut self.first_scheduled {
            let e = first.entry(r.task).or_insert(r.scheduled_ms);
            *e = e.min(r.scheduled_ms);
        }
        if r.is_ok() && self.window.completed(r.completed_ms) {
            self.completed_ok += 1;
            self.output_tokens += f64::from(r.output_tokens);
            self.prompt_tokens_completed += f64::from(
                r.prompt_tokens_reported
                    .unwrap_or(r.prompt_tokens_requested),
            );
            for (good, slo) in self.good.iter_mut().zip(self.slos) {
                *good += u64::from(slo::request_meets(r, slo));
            }
        }
        if !self.window.started(r.scheduled_ms) {
            return;
        }
        self.started += 1;
        self.reconnects += u64::from(r.reconnects);
        self.lags.push(r.schedule_lag_ms);
        match r.error {
            Some(ErrorClass::Cancelled) => self.cancelled += 1,
            Some(class) => {
                *self
                    .errors_by_class
                    .entry(class.as_str().to_string())
                    .or_insert(0) += 1;
            }
            None => {
                self.ok += 1;
                if let Some(t) = r.ttft_ms {
                    self.ttft.push(t);
                }
                if let Some(t) = r.e2e_ms {
                    self.e2e.push(t);
                }
                if let Some(t) = tpot_ms(r) {
                    self.tpot.push(t);
                }
                for &gap in &r.itl_ms {
                    self.itl.push(f64::from(gap));
                }
                if let Some(n) = r.prompt_tokens_reported {
                    self.reported.push(f64::from(n));
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
        if let Some(e2e) = t.e2e_ms {
            if self.window.started(t.scheduled_ms) {
                self.task_e2e.push(e2e);
            }
            if self.window.completed(t.completed_ms) {
                self.tasks_completed += 1;
            }
        }
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
        let (tasks, tasks_completed, task_e2e_ms) = if self.has_tasks {
            (
                self.task_e2e.count,
                self.tasks_completed,
                Some(self.task_e2e.finish(extra)),
            )
        } else {
            (self.ok, self.completed_ok, None)
        };
        let in_window_samples = |f: &RunFooter| -> Vec<(f64, u32)> {
            f.inflight_samples
                .iter()
                .copied()
                .filter(|&(t, _)| window.completed(t))
                .collect()
        };
        let (offered, completed_fraction, backlog_growing, kept_up, achieved_rps, schedule_lag_ms) =
            if open_loop {
                let offered = ends.footer.and_then(|f| f.offered).unwrap_or_else(|| {
                    self.first_scheduled.as_ref().map_or(0, |first| {
                        first.values().filter(|&&t| window.started(t)).count() as u64
                    })
                });
                let completed_fraction =
                    (offered > 0).then(|| (tasks as f64 / offered as f64).min(1.0));
                let samples = ends.footer.map(in_window_samples).unwrap_or_default();
                let backlog_growing = backlog_growing(&samples);
                let kept_up = completed_fraction
                    .is_some_and(|f| f >= KEPT_UP_MIN_COMPLETED_FRACTION)
                    && completions_keep_pace(offered, tasks_completed as f64)
                    && backlog_growing != Some(true);
                (
                    Some(offered),
                    completed_fraction,
                    backlog_growing,
                    Some(kept_up),
                    Some(per_s(tasks_completed as f64)),
                    Some(self.lags.finish(extra)),
                )
            } else {
                (None, None, None, None, None, None)
            };
        let mean_inflight = ends.footer.and_then(|f| {
            let in_window: Vec<f64> = in_window_samples(f)
                .iter()
                .map(|&(_, n)| f64::from(n))
                .collect();
            mean(&in_window)
        });
        let invalid = is_invalid(self.ok, errors);
        let mut summary = RunSummary {
            run_id: ends.header.map(|h| h.run.id.clone()).unwrap_or_default(),
            mode,
            concurrency,
            rate_rps,
            achieved_rps,
            offered,
            requests: self.ok,
            errors,
            errors_by_class: self.errors_by_class.clone(),
            cancelled: self.cancelled,
            reconnects: self.reconnects,
            connections_opened: ends.footer.and_then(|f| f.connections_opened),
            tasks,
            window_s,
            requests_per_s: per_s(self.completed_ok as f64),
            output_tokens_per_s: per_s(self.output_tokens),
            total_tokens_per_s: per_s(self.prompt_tokens_completed + self.output_tokens),
            ttft_ms: self.ttft.finish(extra),
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
            slo_pass: BTreeMap::new(),
            slo_verdicts: BTreeMap::new(),
            goodput_rps: BTreeMap::new(),
            kept_up,
            completed_fraction,
            backlog_growing,
            generator_lagging: ends.footer.is_some_and(|f| f.generator_lagging),
            incomplete: window.incomplete,
            invalid,
            server: None,
        };
        if open_loop {
            for (slo, good) in slos.iter().zip(&self.good) {
                let mut verdict = slo::evaluate(&summary, slo);
                if summary.invalid {
                    verdict.pass = false;
                    verdict.reasons.insert(
                        0,
                        format!(
                            "invalid run: {} of {} calls failed",
                            summary.errors,
                            summary.errors + summary.requests
                        ),
                    );
                    verdict.note = Some(verdict.reasons.join("; "));
                }
                summary.slo_pass.insert(slo.name.clone(), verdict.pass);
                summary.slo_verdicts.insert(slo.name.clone(), verdict);
                summary
                    .goodput_rps
                    .insert(slo.name.clone(), per_s(*good as f64));
            }
        }
        summary
    }
}

/// The rule for a run that is not a measurement: more than half of its
/// measured calls failed (any class but `cancelled`). Such a run measures the
/// failure — a wrong model name, a refused prompt format, a server that is
/// down — not the replica's capacity; one bad call in a few is still a
/// measurement, and the SLO's error-rate clause judges it.
pub fn is_invalid(ok_calls: u64, failed_calls: u64) -> bool {
    failed_calls > 0 && failed_calls * 2 > ok_calls + failed_calls
}

impl LatencyStats {
    /// The value of `stat`, or `None` when nothing was measured or the
    /// percentile was not computed (it is in `extra` only if asked for).
    pub fn get(&self, stat: Stat) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        match stat {
            Stat::Mean => Some(self.mean),
            Stat::Percentile(50.0) => Some(self.p50),
            Stat::Percentile(90.0) => Some(self.p90),
            Stat::Percentile(95.0) => Some(self.p95),
            Stat::Percentile(99.0) => Some(self.p99),
            Stat::Percentile(_) => self.extra.get(&stat.key()).copied(),
        }
    }
}

impl RunSummary {
    /// The distribution of `metric`. A single-call workload has no task
    /// records: each call is its own task, so task E2E is the call's E2E.
    pub fn latency(&self, metric: LatencyMetric) -> &LatencyStats {
        match metric {
            LatencyMetric::Ttft => &self.ttft_ms,
            LatencyMetric::Itl => &self.itl_ms,
            LatencyMetric::Tpot => &self.tpot_ms,
            LatencyMetric::E2e => &self.e2e_ms,
            LatencyMetric::TaskE2e => self.task_e2e_ms.as_ref().unwrap_or(&self.e2e_ms),
        }
    }
}

/// TPOT of one successful call; `None` below 2 output tokens.
pub fn tpot_ms(record: &RequestRecord) -> Option<f64> {
    if !record.is_ok() || record.output_tokens < 2 {
        return None;
    }
    let (ttft, e2e) = (record.ttft_ms?, record.e2e_ms?);
    Some((e2e - ttft).max(0.0) / f64::from(record.output_tokens - 1))
}

/// HDR percentiles (µs, 3 significant digits) plus exact mean and max.
pub fn latency_stats(values_ms: &[f64], extra_percentiles: &[f64]) -> LatencyStats {
    let mut acc = StatsAccumulator::default();
    for &v in values_ms {
        acc.push(v);
    }
    acc.finish(extra_percentiles)
}

/// Whether the tasks completed inside the window kept pace with the
/// arrivals scheduled in it: in steady state the two counts differ only by
/// counting noise, while an overloaded replica completes at its own ceiling.
/// The allowance is 5% of the arrivals or two Poisson standard deviations
/// (2·√offered), whichever is larger, so a short low-rate run is not failed
/// for one straggler.
pub fn completions_keep_pace(offered: u64, completed_in_window: f64) -> bool {
    let offered = offered as f64;
    let allowance = (0.05 * offered).max(2.0 * offered.sqrt());
    completed_in_window >= offered - allowance
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
    let from_ms = header
        .map(|h| h.measure_from_ms)
        .or(footer.map(|f| f.measured_window_ms[0]))
        .unwrap_or(0.0);
    match footer {
        Some(footer) => Window {
            from_ms,
            to_ms: footer.measured_window_ms[1].max(from_ms),
            incomplete: footer.interrupted,
        },
        None => Window {
            from_ms,
            to_ms: last_completed_ms.max(from_ms),
            incomplete: true,
        },
    }
}

impl Window {
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
    use crate::exec::record::{RunFooter, RunHeader, TaskRecord, TokenSource};
    use crate::plan::RunPlan;

    pub(crate) fn header(load: Load, measure_from_ms: f64) -> RunHeader {
        let mode = match load {
            Load::Concurrency { .. } => Mode::Closed,
            Load::Rate { .. } => Mode::Open,
        };
        RunHeader {
            run: RunPlan {
                id: "t--w--x".into(),
                target: "t".into(),
                workload: "w".into(),
                mode,
                load,
                warmup: Duration::from_millis(measure_from_ms as u64),
                stop: StopRule::Duration(Duration::from_secs(10)),
                seed: 1,
            },
            started_at: "2026-01-01T00:00:00Z".into(),
            model: "m".into(),
            measure_from_ms,
            content_nonce: 0,
            prompt_sizing: None,
            prefix_cache_reset: None,
            telemetry_off: None,
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
        let e2e = ttft + f64::from(gap) * f64::from(tokens.saturating_sub(1));
        RequestRecord {
            task,
            call: 0,
            scheduled_ms,
            sent_ms: scheduled_ms,
            schedule_lag_ms: 0.0,
            completed_ms: scheduled_ms + e2e,
            ttft_ms: Some(ttft),
            e2e_ms: Some(e2e),
            itl_ms: vec![gap; tokens.saturating_sub(1) as usize],
            prompt_tokens_requested: 100,
            prompt_tokens_reported: Some(100),
            output_tokens_requested: tokens,
            output_tokens: tokens,
            output_tokens_source: TokenSource::Usage,
            finish_reason: Some("length".into()),
            error: None,
            error_detail: None,
            http_status: Some(200),
            reconnects: 0,
        }
    }

    pub(crate) fn failed(task: u64, scheduled_ms: f64, class: ErrorClass) -> RequestRecord {
        RequestRecord {
            ttft_ms: None,
            e2e_ms: None,
            itl_ms: vec![],
            output_tokens: 0,
            completed_ms: scheduled_ms + 5.0,
            finish_reason: None,
            error: Some(class),
            http_status: None,
            ..call(task, scheduled_ms, 1.0, 1, 0.0)
        }
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
        assert_eq!(s.run_id, "t--w--x");
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
        assert!(s.slo_pass.is_empty());
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
        assert_eq!(tpot_ms(&call(0, 0.0, 30.0, 1, 0.0)), None);
        assert_eq!(tpot_ms(&call(0, 0.0, 30.0, 2, 8.0)), Some(8.0));
        assert_eq!(tpot_ms(&failed(0, 0.0, ErrorClass::Timeout)), None);
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
        assert!(s.slo_pass.is_empty());

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
        assert_eq!(
            s.slo_pass,
            BTreeMap::from([("loose".into(), true), ("tight".into(), false)])
        );
        assert_eq!(s.goodput_rps["loose"], 9.9);
        assert_eq!(s.goodput_rps["tight"], 0.0);
        assert!(
            s.slo_verdicts["tight"]
                .note
                .as_deref()
                .unwrap()
                .contains("ttft p50 50ms > 40ms")
        );
    }

    #[test]
    fn completions_must_keep_pace_with_arrivals() {
        // Overload seen on the simulated H100: 977 arrivals, 669 completed in the window.
        assert!(!completions_keep_pace(977, 669.0));
        assert!(
            !completions_keep_pace(1000, 930.0),
            "allowance is 2·√1000 ≈ 63"
        );
        assert!(completions_keep_pace(1000, 940.0));
        // One straggler in a short low-rate run is counting noise, not overload.
        assert!(completions_keep_pace(9, 8.0));
        assert!(completions_keep_pace(190, 170.0));
    }

    #[test]
    fn open_run_not_kept_up() {
        let growing: Vec<(f64, u32)> = (0..100).map(|i| (f64::from(i) * 100.0, 5 + i)).collect();
        let s = summarize(&open_journal(10.0, 100, growing, 50.0), &[]);
        assert_eq!(s.backlog_growing, Some(true));
        assert_eq!(s.kept_up, Some(false));

        let flat: Vec<(f64, u32)> = (0..100).map(|i| (f64::from(i) * 100.0, 5)).collect();
        let s = summarize(&open_journal(12.0, 120, flat.clone(), 50.0), &[]);
        assert!((s.completed_fraction.unwrap() - 100.0 / 120.0).abs() < 1e-12);
        assert_eq!(s.kept_up, Some(false));
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
            },
            TaskRecord {
                task: 1,
                scheduled_ms: 1000.0,
                completed_ms: 5000.0,
                e2e_ms: Some(4000.0),
                calls: 3,
                failed_calls: 0,
            },
            TaskRecord {
                task: 2,
                scheduled_ms: 2000.0,
                completed_ms: 6000.0,
                e2e_ms: None,
                calls: 3,
                failed_calls: 1,
            },
        ];
        let s = summarize(&journal, &[]);
        assert_eq!(s.tasks, 2);
        assert_eq!(s.achieved_rps, Some(0.2));
        assert_eq!(s.completed_fraction, Some(2.0 / 3.0));
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
}
