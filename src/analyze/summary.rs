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
use crate::exec::record::{ErrorClass, Journal, RequestRecord};
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
    let window = Window::of(journal);
    let extra = extra_percentiles(slos, extra_stats);
    let window_s = window.seconds();
    let per_s = |n: f64| if window_s > 0.0 { n / window_s } else { 0.0 };

    let mode = journal.header.as_ref().map(|h| h.run.mode);
    let (concurrency, rate_rps) = match journal.header.as_ref().map(|h| h.run.load) {
        Some(Load::Concurrency { concurrency }) => (Some(concurrency), None),
        Some(Load::Rate { rate, .. }) => (None, Some(rate.0)),
        None => (None, None),
    };
    let open_loop = mode == Some(Mode::Open);

    let started: Vec<&RequestRecord> = journal
        .requests
        .iter()
        .filter(|r| window.started(r.scheduled_ms))
        .collect();
    let ok: Vec<&RequestRecord> = started.iter().copied().filter(|r| r.is_ok()).collect();
    let mut errors_by_class = BTreeMap::new();
    let mut cancelled = 0;
    for class in started.iter().filter_map(|r| r.error) {
        if class == ErrorClass::Cancelled {
            cancelled += 1;
        } else {
            *errors_by_class
                .entry(class.as_str().to_string())
                .or_insert(0) += 1;
        }
    }
    let errors = errors_by_class.values().sum();
    let reconnects = started.iter().map(|r| u64::from(r.reconnects)).sum();
    let connections_opened = journal.footer.as_ref().and_then(|f| f.connections_opened);

    let completed_ok: Vec<&RequestRecord> = journal
        .requests
        .iter()
        .filter(|r| r.is_ok() && window.completed(r.completed_ms))
        .collect();
    let output_tokens: f64 = completed_ok
        .iter()
        .map(|r| f64::from(r.output_tokens))
        .sum();
    let total_tokens: f64 = completed_ok
        .iter()
        .map(|r| {
            f64::from(
                r.prompt_tokens_reported
                    .unwrap_or(r.prompt_tokens_requested),
            )
        })
        .sum::<f64>()
        + output_tokens;

    let ttft: Vec<f64> = ok.iter().filter_map(|r| r.ttft_ms).collect();
    let e2e: Vec<f64> = ok.iter().filter_map(|r| r.e2e_ms).collect();
    let tpot: Vec<f64> = ok.iter().filter_map(|r| tpot_ms(r)).collect();
    let itl: Vec<f64> = ok
        .iter()
        .flat_map(|r| r.itl_ms.iter().map(|&g| f64::from(g)))
        .collect();

    // Multi-call workloads journal one TaskRecord per task; single calls are their own task.
    let (tasks, tasks_completed, task_e2e_ms) = if journal.tasks.is_empty() {
        (ok.len() as u64, completed_ok.len() as u64, None)
    } else {
        let started_ok: Vec<f64> = journal
            .tasks
            .iter()
            .filter(|t| window.started(t.scheduled_ms))
            .filter_map(|t| t.e2e_ms)
            .collect();
        let completed = journal
            .tasks
            .iter()
            .filter(|t| t.e2e_ms.is_some() && window.completed(t.completed_ms))
            .count();
        (
            started_ok.len() as u64,
            completed as u64,
            Some(latency_stats(&started_ok, &extra)),
        )
    };

    let (offered, completed_fraction, backlog_growing, kept_up, achieved_rps, schedule_lag_ms) =
        if open_loop {
            let offered = journal
                .footer
                .as_ref()
                .and_then(|f| f.offered)
                .unwrap_or_else(|| offered_from_records(journal, &window));
            let completed_fraction =
                (offered > 0).then(|| (tasks as f64 / offered as f64).min(1.0));
            let samples: Vec<(f64, u32)> = journal
                .footer
                .as_ref()
                .map(|f| {
                    f.inflight_samples
                        .iter()
                        .copied()
                        .filter(|&(t, _)| window.completed(t))
                        .collect()
                })
                .unwrap_or_default();
            let backlog_growing = backlog_growing(&samples);
            let kept_up = completed_fraction.is_some_and(|f| f >= KEPT_UP_MIN_COMPLETED_FRACTION)
                && completions_keep_pace(offered, tasks_completed as f64)
                && backlog_growing != Some(true);
            let lags: Vec<f64> = started.iter().map(|r| r.schedule_lag_ms).collect();
            (
                Some(offered),
                completed_fraction,
                backlog_growing,
                Some(kept_up),
                Some(per_s(tasks_completed as f64)),
                Some(latency_stats(&lags, &extra)),
            )
        } else {
            (None, None, None, None, None, None)
        };

    let mean_inflight = journal.footer.as_ref().and_then(|f| {
        let in_window: Vec<f64> = f
            .inflight_samples
            .iter()
            .filter(|&&(t, _)| window.completed(t))
            .map(|&(_, n)| f64::from(n))
            .collect();
        mean(&in_window)
    });

    let reported: Vec<f64> = ok
        .iter()
        .filter_map(|r| r.prompt_tokens_reported.map(f64::from))
        .collect();

    let mut summary = RunSummary {
        run_id: journal
            .header
            .as_ref()
            .map(|h| h.run.id.clone())
            .unwrap_or_default(),
        mode,
        concurrency,
        rate_rps,
        achieved_rps,
        offered,
        requests: ok.len() as u64,
        errors,
        errors_by_class,
        cancelled,
        reconnects,
        connections_opened,
        tasks,
        window_s,
        requests_per_s: per_s(completed_ok.len() as f64),
        output_tokens_per_s: per_s(output_tokens),
        total_tokens_per_s: per_s(total_tokens),
        ttft_ms: latency_stats(&ttft, &extra),
        itl_ms: latency_stats(&itl, &extra),
        tpot_ms: latency_stats(&tpot, &extra),
        e2e_ms: latency_stats(&e2e, &extra),
        task_e2e_ms,
        schedule_lag_ms,
        prompt_tokens_requested_mean: mean_of(&ok, |r| r.prompt_tokens_requested),
        prompt_tokens_reported_mean: mean(&reported),
        output_tokens_requested_mean: mean_of(&ok, |r| r.output_tokens_requested),
        output_tokens_mean: mean_of(&ok, |r| r.output_tokens),
        short_outputs: ok
            .iter()
            .filter(|r| r.output_tokens < r.output_tokens_requested)
            .count() as u64,
        mean_inflight,
        slo_pass: BTreeMap::new(),
        slo_verdicts: BTreeMap::new(),
        goodput_rps: BTreeMap::new(),
        kept_up,
        completed_fraction,
        backlog_growing,
        generator_lagging: journal.footer.as_ref().is_some_and(|f| f.generator_lagging),
        incomplete: window.incomplete,
        invalid: is_invalid(ok.len() as u64, errors),
        server: None,
    };

    if open_loop {
        for slo in slos {
            let verdict = slo::evaluate(&summary, slo);
            let good = completed_ok
                .iter()
                .filter(|r| slo::request_meets(r, slo))
                .count();
            let mut verdict = verdict;
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
                .insert(slo.name.clone(), per_s(good as f64));
        }
    }
    summary
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
    if values_ms.is_empty() {
        return LatencyStats::default();
    }
    let mut hist = Histogram::<u64>::new(3).expect("3 significant digits is a valid HDR precision");
    for &v in values_ms {
        // Saturating cast: negative or NaN → 0, absurdly large → u64::MAX.
        let us = (v * 1000.0).round() as u64;
        // `new` auto-resizes, so `record` only fails beyond what any
        // histogram can track; clamp those to its highest value.
        if hist.record(us).is_err() {
            hist.saturating_record(us);
        }
    }
    // Nearest rank = ceil(q × n); the epsilon keeps float error
    // (0.999 × 1000 = 999.0000000000001) from skipping to the next rank.
    let at = |p: f64| hist.value_at_quantile((p / 100.0 - 1e-12).max(0.0)) as f64 / 1000.0;
    LatencyStats {
        count: values_ms.len() as u64,
        mean: values_ms.iter().sum::<f64>() / values_ms.len() as f64,
        p50: at(50.0),
        p90: at(90.0),
        p95: at(95.0),
        p99: at(99.0),
        max: values_ms.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        extra: extra_percentiles
            .iter()
            .map(|&p| (Stat::Percentile(p).key(), at(p)))
            .collect(),
    }
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
struct Window {
    from_ms: f64,
    to_ms: f64,
    incomplete: bool,
}

impl Window {
    fn of(journal: &Journal) -> Window {
        let from_ms = journal
            .header
            .as_ref()
            .map(|h| h.measure_from_ms)
            .or(journal.footer.as_ref().map(|f| f.measured_window_ms[0]))
            .unwrap_or(0.0);
        match &journal.footer {
            Some(footer) => Window {
                from_ms,
                to_ms: footer.measured_window_ms[1].max(from_ms),
                incomplete: footer.interrupted,
            },
            None => {
                let last = journal
                    .requests
                    .iter()
                    .map(|r| r.completed_ms)
                    .chain(journal.tasks.iter().map(|t| t.completed_ms))
                    .fold(from_ms, f64::max);
                Window {
                    from_ms,
                    to_ms: last,
                    incomplete: true,
                }
            }
        }
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

/// Without a footer, the arrivals known to have happened in the window: the
/// tasks whose first call was scheduled in it (in-flight tasks lost in a crash
/// are missing, which is why such a run is marked incomplete).
fn offered_from_records(journal: &Journal, window: &Window) -> u64 {
    let mut first_scheduled: BTreeMap<u64, f64> = BTreeMap::new();
    for r in &journal.requests {
        let e = first_scheduled.entry(r.task).or_insert(r.scheduled_ms);
        *e = e.min(r.scheduled_ms);
    }
    first_scheduled
        .values()
        .filter(|&&t| window.started(t))
        .count() as u64
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

fn mean_of(records: &[&RequestRecord], f: impl Fn(&RequestRecord) -> u32) -> f64 {
    let values: Vec<f64> = records.iter().map(|r| f64::from(f(r))).collect();
    mean(&values).unwrap_or(0.0)
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
