//! SLO verdicts for one run (pure): every clause is `pass`, `fail` or
//! `inconclusive`, with the confidence interval that decided it.
//!
//! # Clauses
//!
//! - A **percentile** bound (`ttft p99="1s"`) is judged on the order-statistic
//!   interval of the percentile, widened for correlated samples by batch
//!   means ([`interval`](crate::stats::interval)): pass when the whole interval is
//!   within the bound, fail when the whole interval is beyond it.
//! - A **failed call counts beyond every latency bound** of the SLO: a
//!   timeout is exactly the tail a percentile is there to bound. Each failed
//!   call is one sample beyond the bound for TTFT, E2E, TPOT and ITL; a task
//!   with a failed call is one beyond for task E2E. So a p95 of calls of
//!   which 6% timed out fails whether or not the SLO has an `error-rate`.
//!   `cancelled` calls (stopped by the client) are not samples at all.
//! - A **mean** bound is judged on the batch-means t interval of the mean of
//!   the successful calls (a failed call has no latency to average; the
//!   error rate and the percentiles judge failures).
//! - An **error-rate** bound is judged on the Wilson interval of the failed
//!   share of the measured calls, on the effective sample of the batch means.
//!   `max="0%"` is a count: any failure fails it.
//!
//! The SLO's verdict is `fail` if any clause fails, `pass` if every clause
//! passes, else `inconclusive`. What the run's steady state adds (an
//! overloaded open run fails, a backlogged one cannot pass) is applied by
//! the summary, which knows the run ([`summary`](super::summary)).
//!
//! # Goodput
//!
//! [`request_meets`] asks the same clauses of one call, for goodput.

use serde::{Deserialize, Serialize};

use crate::config::{LatencyMetric, Slo, SloClause, Stat};
use crate::exec::record::{RequestRecord, TaskRecord};
use crate::format::{ms_compact, pct_compact};
use crate::stats::StatsAccumulator;

use crate::stats::interval::{self, BATCHES, BatchCounts, BatchSums, Verdict};

/// Whether a run met an SLO, and why (`open[].verdicts[]` in results.json).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SloVerdict {
    pub slo: String,
    pub verdict: Verdict,
    /// The confidence of every interval behind the verdict.
    pub confidence: f64,
    /// One entry per clause of the SLO, in the SLO's order.
    pub clauses: Vec<ClauseVerdict>,
    /// Why the run did not pass, one short phrase each
    /// (`"ttft p99 1.8s > 1s"`, `"overloaded: 81% of arrivals finished"`).
    #[serde(default)]
    pub reasons: Vec<String>,
}

impl Default for SloVerdict {
    fn default() -> Self {
        SloVerdict {
            slo: String::new(),
            verdict: Verdict::Inconclusive,
            confidence: interval::DEFAULT_CONFIDENCE,
            clauses: Vec::new(),
            reasons: Vec::new(),
        }
    }
}

impl SloVerdict {
    /// `reasons` joined for display; `None` on a pass.
    pub fn note(&self) -> Option<String> {
        (!self.reasons.is_empty()).then(|| self.reasons.join("; "))
    }

    /// Override the clauses' verdict for what the run as a whole shows:
    /// `Fail` fails the SLO, `Inconclusive` keeps a pass from standing.
    pub fn overrule(&mut self, at_most: Verdict, reason: String) {
        let before = self.verdict;
        self.verdict = match (before, at_most) {
            (_, Verdict::Fail) | (Verdict::Fail, _) => Verdict::Fail,
            (_, Verdict::Inconclusive) | (Verdict::Inconclusive, _) => Verdict::Inconclusive,
            (Verdict::Pass, Verdict::Pass) => Verdict::Pass,
        };
        if at_most != Verdict::Pass {
            self.reasons.insert(0, reason);
        }
    }
}

/// One clause of an SLO on one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct ClauseVerdict {
    /// `"ttft p99 ≤ 1s"`, `"error-rate ≤ 0.5%"`.
    pub label: String,
    /// `"ttft"`, …, `"task-e2e"`, `"error-rate"`.
    pub metric: String,
    /// `"p99"`, `"mean"`; `None` for the error rate.
    pub stat: Option<String>,
    pub verdict: Option<Verdict>,
    /// Latency clauses: the statistic over successes and failures (a failed
    /// call counts beyond the bound); `None` when the rank falls on failed
    /// calls (beyond any bound) or nothing was measured.
    pub observed_ms: Option<f64>,
    /// The interval's ends; `None` for an end that is unbounded (below: 0,
    /// above: ∞ — too few samples, or failed calls).
    pub low_ms: Option<f64>,
    pub high_ms: Option<f64>,
    pub limit_ms: Option<f64>,
    /// Error-rate clause: failed / measured calls, and its interval.
    pub observed_fraction: Option<f64>,
    pub low_fraction: Option<f64>,
    pub high_fraction: Option<f64>,
    pub limit_fraction: Option<f64>,
    /// Samples the clause was judged on (failed calls included), and of
    /// them, failed calls.
    pub samples: u64,
    pub failed: u64,
    /// The batch-means variance inflation: the samples were worth
    /// `samples / inflation` independent ones.
    pub inflation: f64,
    /// The clause's evidence per batch of the window, kept for the Cr_open
    /// fit across runs (`analyze::cr_open`); absent in folders written
    /// before it.
    #[serde(default)]
    pub batches: Option<ClauseBatches>,
    /// A percentile clause: the samples beyond each *frontier bound* (the
    /// declared bound times each multiplier of
    /// [`frontier::multipliers`](super::frontier::multipliers)) per batch,
    /// for the SLO frontier's fit (`analyze::frontier`). The samples per
    /// batch are `batches.samples`. Empty for other clauses and in folders
    /// written before the fitted frontier.
    #[serde(default)]
    pub at_bounds: Vec<BoundBatches>,
}

/// One frontier bound of a percentile clause on one run: how many of each
/// batch's samples (`ClauseBatches::samples`) were beyond `bound_ms`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct BoundBatches {
    pub bound_ms: f64,
    pub beyond: Vec<u64>,
}

/// One clause's evidence per batch (time slice) of a run's measured window:
/// how many samples, and how many were beyond the bound (a percentile, the
/// error rate) or what they summed to (a mean, in ms).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct ClauseBatches {
    pub samples: Vec<u64>,
    #[serde(default)]
    pub beyond: Vec<u64>,
    #[serde(default)]
    pub sums_ms: Vec<f64>,
}

impl ClauseBatches {
    fn of_counts(counts: &BatchCounts) -> Self {
        ClauseBatches {
            samples: counts.samples.to_vec(),
            beyond: counts.hits.to_vec(),
            sums_ms: vec![],
        }
    }

    fn of_sums(sums: &BatchSums) -> Self {
        ClauseBatches {
            samples: sums.samples.to_vec(),
            beyond: vec![],
            sums_ms: sums.sums.to_vec(),
        }
    }

    pub fn total_samples(&self) -> u64 {
        self.samples.iter().sum()
    }
}

/// What a run showed of one SLO, gathered call by call as the journal
/// streams by: per clause, batch counts of samples beyond its bound (or sums
/// for a mean), so that a verdict needs no second pass. Task E2E is
/// gathered both per call (a single-call workload's task is its call) and
/// per task record; [`judge`](Self::judge) uses the tasks when there are any.
#[derive(Debug, Clone)]
pub struct SloEvidence {
    by_call: Vec<ClauseEvidence>,
    by_task: Vec<ClauseEvidence>,
}

#[derive(Debug, Clone)]
enum ClauseEvidence {
    Percentile {
        metric: LatencyMetric,
        bound_ms: f64,
        beyond: BatchCounts,
        failed: u64,
        /// The frontier bounds and, per batch, the samples beyond each.
        at_bounds: Vec<(f64, [u64; BATCHES])>,
    },
    Mean {
        metric: LatencyMetric,
        sums: BatchSums,
    },
    ErrorRate {
        failed: BatchCounts,
    },
}

impl SloEvidence {
    /// Evidence for `slo`; each percentile clause also counts the samples
    /// beyond its bound times each of `frontier_multipliers` (the full list:
    /// [`frontier::multipliers`](super::frontier::multipliers)).
    pub fn new(slo: &Slo, frontier_multipliers: &[f64]) -> Self {
        let clauses = slo
            .clauses
            .iter()
            .map(|c| match c {
                SloClause::Latency {
                    metric,
                    stat: Stat::Percentile(_),
                    limit,
                } => {
                    let bound_ms = limit.as_secs_f64() * 1000.0;
                    ClauseEvidence::Percentile {
                        metric: *metric,
                        bound_ms,
                        beyond: BatchCounts::default(),
                        failed: 0,
                        at_bounds: frontier_multipliers
                            .iter()
                            .map(|m| (m * bound_ms, [0; BATCHES]))
                            .collect(),
                    }
                }
                SloClause::Latency {
                    metric,
                    stat: Stat::Mean,
                    ..
                } => ClauseEvidence::Mean {
                    metric: *metric,
                    sums: BatchSums::default(),
                },
                SloClause::ErrorRate { .. } => ClauseEvidence::ErrorRate {
                    failed: BatchCounts::default(),
                },
            })
            .collect::<Vec<_>>();
        SloEvidence {
            by_task: clauses.clone(),
            by_call: clauses,
        }
    }

    /// One measured call (scheduled in the window, not cancelled), in batch
    /// `batch`.
    pub fn call(&mut self, r: &RequestRecord, batch: usize) {
        let failed = r.is_failure();
        for clause in &mut self.by_call {
            match clause {
                ClauseEvidence::ErrorRate { failed: counts } => counts.push(batch, failed),
                ClauseEvidence::Percentile {
                    metric,
                    bound_ms,
                    beyond,
                    failed: failures,
                    at_bounds,
                } => {
                    if failed {
                        beyond.push(batch, true);
                        count_beyond(at_bounds, batch, f64::INFINITY);
                        *failures += 1;
                        continue;
                    }
                    if *metric == LatencyMetric::Itl {
                        for &gap in &r.itl_ms {
                            let v = f64::from(gap);
                            beyond.push(batch, v > *bound_ms);
                            count_beyond(at_bounds, batch, v);
                        }
                    } else if let Some(v) = call_value(r, *metric) {
                        beyond.push(batch, v > *bound_ms);
                        count_beyond(at_bounds, batch, v);
                    }
                }
                ClauseEvidence::Mean { metric, sums } => {
                    if failed {
                        continue;
                    }
                    if *metric == LatencyMetric::Itl {
                        for &gap in &r.itl_ms {
                            sums.push(batch, f64::from(gap));
                        }
                    } else if let Some(v) = call_value(r, *metric) {
                        sums.push(batch, v);
                    }
                }
            }
        }
    }

    /// One measured task of a multi-call workload, in batch `batch`. A task
    /// with a failed call is beyond every task-E2E bound; one the client
    /// stopped (no E2E, no failed call) is not a sample.
    pub fn task(&mut self, t: &TaskRecord, batch: usize) {
        for clause in &mut self.by_task {
            match clause {
                ClauseEvidence::Percentile {
                    metric: LatencyMetric::TaskE2e,
                    bound_ms,
                    beyond,
                    failed,
                    at_bounds,
                } => match t.e2e_ms {
                    Some(v) => {
                        beyond.push(batch, v > *bound_ms);
                        count_beyond(at_bounds, batch, v);
                    }
                    // A task whose only failures are context-window
                    // refusals never fit the target: no sample either way.
                    None if t.failed_calls > t.context_rejected_calls => {
                        beyond.push(batch, true);
                        count_beyond(at_bounds, batch, f64::INFINITY);
                        *failed += 1;
                    }
                    None => {}
                },
                ClauseEvidence::Mean {
                    metric: LatencyMetric::TaskE2e,
                    sums,
                } => {
                    if let Some(v) = t.e2e_ms {
                        sums.push(batch, v);
                    }
                }
                _ => {}
            }
        }
    }

    /// A count clause's batch counts so far (samples beyond a percentile's
    /// bound, or failed calls for the error rate); `None` for a mean. Task
    /// E2E: the tasks' counts when `has_tasks`, as [`judge`](Self::judge)
    /// reads them.
    pub fn beyond_counts(&self, slo: &Slo, clause: usize, has_tasks: bool) -> Option<&BatchCounts> {
        match self.clause(slo, clause, has_tasks)? {
            ClauseEvidence::Percentile { beyond, .. } => Some(beyond),
            ClauseEvidence::ErrorRate { failed } => Some(failed),
            ClauseEvidence::Mean { .. } => None,
        }
    }

    /// The evidence the `index`th clause of `slo` is judged on: a task E2E
    /// clause counts tasks when there are any, every other clause calls.
    fn clause(&self, slo: &Slo, index: usize, has_tasks: bool) -> Option<&ClauseEvidence> {
        let per_task = has_tasks
            && matches!(
                slo.clauses.get(index),
                Some(SloClause::Latency {
                    metric: LatencyMetric::TaskE2e,
                    ..
                })
            );
        if per_task {
            self.by_task.get(index)
        } else {
            self.by_call.get(index)
        }
    }

    /// The verdict of `slo` (the SLO this evidence was made for). `values`
    /// gives each metric's successful samples, for the interval's ends (task
    /// E2E: the tasks' when `has_tasks`, else the calls' E2E).
    pub fn judge<'v>(
        &self,
        slo: &Slo,
        values: impl Fn(LatencyMetric) -> &'v StatsAccumulator,
        confidence: f64,
        has_tasks: bool,
    ) -> SloVerdict {
        let clauses: Vec<ClauseVerdict> = slo
            .clauses
            .iter()
            .enumerate()
            .map(|(i, clause)| match self.clause(slo, i, has_tasks) {
                Some(evidence) => judge_clause(clause, evidence, &values, confidence),
                // SloEvidence::new makes one evidence per clause of `slo`.
                None => ClauseVerdict {
                    label: clause_label(clause),
                    verdict: Some(Verdict::Inconclusive),
                    ..ClauseVerdict::default()
                },
            })
            .collect();
        let verdict = Verdict::all(
            clauses
                .iter()
                .map(|c| c.verdict.unwrap_or(Verdict::Inconclusive)),
        );
        let reasons = clauses.iter().filter_map(ClauseVerdict::reason).collect();
        SloVerdict {
            slo: slo.name.clone(),
            verdict,
            confidence,
            clauses,
            reasons,
        }
    }
}

/// One sample of value `v` (∞ for a failed call, beyond every bound) in
/// batch `batch`, against each frontier bound: one comparison per bound.
fn count_beyond(at_bounds: &mut [(f64, [u64; BATCHES])], batch: usize, v: f64) {
    let b = batch.min(BATCHES - 1);
    for (bound_ms, beyond) in at_bounds {
        beyond[b] += u64::from(v > *bound_ms);
    }
}

/// A call's own value of a per-call metric (not ITL, which has many).
fn call_value(r: &RequestRecord, metric: LatencyMetric) -> Option<f64> {
    match metric {
        LatencyMetric::Ttft => r.ttft_ms,
        LatencyMetric::Ttfo => r.ttfo(),
        LatencyMetric::E2e | LatencyMetric::TaskE2e => r.e2e_ms,
        LatencyMetric::Tpot => r.tpot_ms(),
        LatencyMetric::Itl => None,
    }
}

/// A clause as verdicts and the frontier name it: `"ttft p99 ≤ 1s"`,
/// `"e2e mean ≤ 20s"`, `"error-rate ≤ 0.5%"`. One function, so a chart can
/// find a frontier's declared bound by its label.
pub fn clause_label(clause: &SloClause) -> String {
    match clause {
        SloClause::Latency {
            metric,
            stat,
            limit,
        } => format!(
            "{} {} ≤ {}",
            metric.as_str(),
            stat.key(),
            ms_compact(limit.as_secs_f64() * 1000.0)
        ),
        SloClause::ErrorRate { max } => format!("error-rate ≤ {}", pct_compact(max.0)),
    }
}

fn judge_clause<'v>(
    clause: &SloClause,
    evidence: &ClauseEvidence,
    values: &impl Fn(LatencyMetric) -> &'v StatsAccumulator,
    confidence: f64,
) -> ClauseVerdict {
    match (clause, evidence) {
        (
            SloClause::Latency {
                metric,
                stat: Stat::Percentile(p),
                limit,
            },
            ClauseEvidence::Percentile {
                beyond,
                failed,
                at_bounds,
                ..
            },
        ) => {
            let limit_ms = limit.as_secs_f64() * 1000.0;
            let n = beyond.total();
            let inflation = beyond.variance_inflation(confidence);
            let q = p / 100.0;
            let (verdict, ranks) =
                interval::percentile_verdict(n, beyond.total_hits(), q, confidence, inflation);
            // Ranks count failed calls last (beyond any bound): a rank past
            // the successes is unbounded.
            let ok = values(*metric);
            let successes = n - failed;
            let at = |rank: u64| (rank <= successes).then(|| ok.value_at_rank(rank));
            let point = (n > 0)
                .then(|| ((q * n as f64) - 1e-9).ceil().max(1.0) as u64)
                .and_then(at);
            ClauseVerdict {
                label: clause_label(clause),
                metric: metric.as_str().to_string(),
                stat: Some(Stat::Percentile(*p).key()),
                verdict: Some(verdict),
                observed_ms: point,
                low_ms: ranks.lower.and_then(at),
                high_ms: ranks.upper.and_then(at),
                limit_ms: Some(limit_ms),
                samples: n,
                failed: *failed,
                inflation,
                batches: Some(ClauseBatches::of_counts(beyond)),
                at_bounds: at_bounds
                    .iter()
                    .map(|(bound_ms, beyond)| BoundBatches {
                        bound_ms: *bound_ms,
                        beyond: beyond.to_vec(),
                    })
                    .collect(),
                ..ClauseVerdict::default()
            }
        }
        (
            SloClause::Latency {
                metric,
                stat: Stat::Mean,
                limit,
            },
            ClauseEvidence::Mean { sums, .. },
        ) => {
            let limit_ms = limit.as_secs_f64() * 1000.0;
            let ci = interval::mean_interval(sums, confidence);
            ClauseVerdict {
                label: clause_label(clause),
                metric: metric.as_str().to_string(),
                stat: Some("mean".to_string()),
                verdict: Some(interval::mean_verdict(sums, limit_ms, confidence)),
                observed_ms: ci.map(|c| c.0).or_else(|| values(*metric).mean()),
                low_ms: ci.map(|c| c.1.max(0.0)),
                high_ms: ci.map(|c| c.2),
                limit_ms: Some(limit_ms),
                samples: sums.samples.iter().sum(),
                inflation: 1.0,
                batches: Some(ClauseBatches::of_sums(sums)),
                ..ClauseVerdict::default()
            }
        }
        (SloClause::ErrorRate { max }, ClauseEvidence::ErrorRate { failed }) => {
            let n = failed.total();
            let hits = failed.total_hits();
            let inflation = failed.variance_inflation(confidence);
            let (verdict, (low, high)) =
                interval::proportion_verdict(hits, n, max.0, confidence, inflation);
            ClauseVerdict {
                label: clause_label(clause),
                metric: "error-rate".to_string(),
                stat: None,
                verdict: Some(verdict),
                observed_fraction: (n > 0).then(|| hits as f64 / n as f64),
                low_fraction: (n > 0).then_some(low),
                high_fraction: (n > 0).then_some(high),
                limit_fraction: Some(max.0),
                samples: n,
                failed: hits,
                inflation,
                batches: Some(ClauseBatches::of_counts(failed)),
                ..ClauseVerdict::default()
            }
        }
        // SloEvidence::new builds one evidence per clause of the same kind.
        _ => ClauseVerdict {
            label: "?".to_string(),
            verdict: Some(Verdict::Inconclusive),
            ..ClauseVerdict::default()
        },
    }
}

impl ClauseVerdict {
    pub fn verdict(&self) -> Verdict {
        self.verdict.unwrap_or(Verdict::Inconclusive)
    }

    /// The clause's name: `"ttft p99"`, `"error-rate"`.
    pub fn name(&self) -> String {
        match &self.stat {
            Some(stat) => format!("{} {stat}", self.metric),
            None => self.metric.clone(),
        }
    }

    /// The observed value and its interval, for display:
    /// `"1.8s [1.6s, 2.1s]"`, `"≥ 1s (failed calls) [900ms, ∞)"`, `"0.4% [0.1%, 1.2%]"`.
    pub fn observed(&self) -> String {
        if let Some(limit) = self.limit_fraction {
            let _ = limit;
            return match (
                self.observed_fraction,
                self.low_fraction,
                self.high_fraction,
            ) {
                (Some(o), Some(l), Some(h)) => format!(
                    "{} [{}, {}]",
                    pct_compact(o),
                    pct_compact(l),
                    pct_compact(h)
                ),
                _ => "no calls".to_string(),
            };
        }
        if self.samples == 0 {
            return "not measured".to_string();
        }
        let point = match self.observed_ms {
            Some(v) => ms_compact(v),
            None => "∞ (failed calls)".to_string(),
        };
        let low = self.low_ms.map_or("0".to_string(), ms_compact);
        let high = self
            .high_ms
            .map_or("∞)".to_string(), |h| format!("{}]", ms_compact(h)));
        format!("{point} [{low}, {high}")
    }

    /// Why this clause keeps the SLO from passing, if it does.
    pub fn reason(&self) -> Option<String> {
        let name = self.name();
        let bound = match (self.limit_ms, self.limit_fraction) {
            (Some(l), _) => ms_compact(l),
            (_, Some(f)) => pct_compact(f),
            _ => String::new(),
        };
        match self.verdict() {
            Verdict::Pass => None,
            Verdict::Fail => Some(format!("{name} {} > {bound}", self.observed())),
            Verdict::Inconclusive if self.samples == 0 => Some(format!("{name}: not measured")),
            Verdict::Inconclusive => Some(format!(
                "{name} {}: interval straddles {bound}{}",
                self.observed(),
                if self.high_ms.is_none() && self.limit_ms.is_some() && self.failed == 0 {
                    " (too few samples for an upper bound)"
                } else {
                    ""
                }
            )),
        }
    }
}

/// Whether one call met every per-request clause of `slo` (for goodput).
///
/// TTFT, E2E and TPOT compare the call's own value with the bound; ITL
/// compares the clause's statistic over the call's own gaps (its mean, or
/// its nearest-rank percentile). A failed call never meets the SLO. Clauses
/// that do not exist per call are skipped: `task-e2e` (a task, not a call)
/// and the error rate (the call succeeded). TPOT and ITL are vacuous for a
/// call with a single output token. `gaps` is scratch space reused call
/// after call.
pub fn request_meets(record: &RequestRecord, slo: &Slo, gaps: &mut StatsAccumulator) -> bool {
    if !record.is_ok() {
        return false;
    }
    slo.clauses.iter().all(|clause| match clause {
        SloClause::Latency {
            metric,
            stat,
            limit,
        } => {
            let limit_ms = limit.as_secs_f64() * 1000.0;
            let own = match metric {
                LatencyMetric::Ttft => Some(record.ttft_ms),
                LatencyMetric::Ttfo => Some(record.ttfo()),
                LatencyMetric::E2e => Some(record.e2e_ms),
                LatencyMetric::Tpot => record.tpot_ms().map(Some),
                LatencyMetric::Itl => own_itl(&record.itl_ms, *stat, gaps).map(Some),
                LatencyMetric::TaskE2e => None,
            };
            match own {
                None => true,        // does not apply to this call
                Some(None) => false, // should exist on a success, but was not measured
                Some(Some(v)) => v <= limit_ms,
            }
        }
        SloClause::ErrorRate { .. } => true,
    })
}

/// What the run as a whole adds to a verdict on its clauses: an overloaded
/// or invalid run fails, a backlogged one cannot pass.
pub fn apply_run_state(verdict: &mut SloVerdict, summary: &super::RunSummary) {
    let why = summary.state_reason.clone().unwrap_or_default();
    match summary.state {
        super::RunState::Overloaded => {
            verdict.overrule(Verdict::Fail, format!("overloaded: {why}"));
        }
        super::RunState::Backlogged => {
            verdict.overrule(Verdict::Inconclusive, format!("backlogged: {why}"));
        }
        super::RunState::Stable => {}
    }
    if summary.invalid {
        verdict.overrule(
            Verdict::Fail,
            format!(
                "invalid run: {} of {} calls failed",
                summary.errors,
                summary.errors + summary.requests
            ),
        );
    } else if summary.rate_limited_calls > 0 {
        // The rate cannot be promised through this quota; what capped it is
        // the provider's limit, which the card says in so many words.
        verdict.overrule(
            Verdict::Fail,
            format!(
                "rate limited: {} of {} calls were refused for a quota",
                summary.rate_limited_calls,
                summary.errors + summary.requests
            ),
        );
    }
}

/// The clause's statistic over one call's own inter-chunk gaps.
fn own_itl(gaps: &[f32], stat: Stat, scratch: &mut StatsAccumulator) -> Option<f64> {
    if gaps.is_empty() {
        return None;
    }
    scratch.clear();
    for &g in gaps {
        scratch.push(f64::from(g));
    }
    match stat {
        Stat::Mean => scratch.mean(),
        Stat::Percentile(p) => scratch.percentile(p),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::analyze::summary::tests::{call, failed};
    use crate::config::Fraction;
    use crate::exec::record::ErrorClass;

    fn latency(metric: LatencyMetric, stat: Stat, limit_ms: u64) -> SloClause {
        SloClause::Latency {
            metric,
            stat,
            limit: Duration::from_millis(limit_ms),
        }
    }

    fn slo(clauses: Vec<SloClause>) -> Slo {
        Slo {
            name: "s".into(),
            span: None,
            clauses,
        }
    }

    /// Judge `records` (spread over the batches in order) against `slo`.
    fn judge(slo: &Slo, records: &[RequestRecord]) -> SloVerdict {
        let mut evidence = SloEvidence::new(slo, &[]);
        let mut ttft = StatsAccumulator::default();
        let mut e2e = StatsAccumulator::default();
        let mut itl = StatsAccumulator::default();
        let mut tpot = StatsAccumulator::default();
        for (i, r) in records.iter().enumerate() {
            evidence.call(r, i * interval::BATCHES / records.len());
            if r.is_ok() {
                ttft.push(r.ttft_ms.unwrap_or(0.0));
                e2e.push(r.e2e_ms.unwrap_or(0.0));
                if let Some(t) = r.tpot_ms() {
                    tpot.push(t);
                }
                for &g in &r.itl_ms {
                    itl.push(f64::from(g));
                }
            }
        }
        let values = |m: LatencyMetric| match m {
            LatencyMetric::Ttft | LatencyMetric::Ttfo => &ttft,
            LatencyMetric::Itl => &itl,
            LatencyMetric::Tpot => &tpot,
            LatencyMetric::E2e | LatencyMetric::TaskE2e => &e2e,
        };
        evidence.judge(slo, values, 0.95, false)
    }

    /// `n` calls with TTFT cycling 1..=100 ms (so pX ≈ X ms).
    fn calls(n: usize) -> Vec<RequestRecord> {
        (0..n)
            .map(|i| call(i as u64, i as f64, (i % 100 + 1) as f64, 4, 5.0))
            .collect()
    }

    #[test]
    fn three_verdicts_from_the_interval() {
        let p90 = |limit| {
            slo(vec![latency(
                LatencyMetric::Ttft,
                Stat::Percentile(90.0),
                limit,
            )])
        };
        let v = judge(&p90(120), &calls(1000));
        assert_eq!(v.verdict, Verdict::Pass, "{v:?}");
        let c = &v.clauses[0];
        assert!((c.observed_ms.unwrap() - 90.0).abs() < 0.1, "{c:?}");
        assert!(
            c.low_ms.unwrap() < 90.0 && c.high_ms.unwrap() > 90.0,
            "{c:?}"
        );
        assert_eq!(judge(&p90(60), &calls(1000)).verdict, Verdict::Fail);
        let v = judge(&p90(90), &calls(1000));
        assert_eq!(v.verdict, Verdict::Inconclusive);
        assert!(
            v.reasons[0].contains("interval straddles 90ms"),
            "{:?}",
            v.reasons
        );
        // 50 calls cannot bound a p99 from above: never a pass.
        let p99 = slo(vec![latency(
            LatencyMetric::Ttft,
            Stat::Percentile(99.0),
            500,
        )]);
        let v = judge(&p99, &calls(50));
        assert_eq!(v.verdict, Verdict::Inconclusive);
        assert!(v.reasons[0].contains("too few samples"), "{:?}", v.reasons);
    }

    #[test]
    fn failed_calls_count_beyond_every_latency_bound() {
        // Every success is fast, but 10% of calls timed out: the p95 fails
        // although the SLO has no error-rate clause.
        let mut records = calls(1000);
        for r in records.iter_mut().step_by(10) {
            *r = failed(r.task, r.scheduled_ms, ErrorClass::Timeout);
        }
        let p95 = slo(vec![latency(
            LatencyMetric::E2e,
            Stat::Percentile(95.0),
            10_000,
        )]);
        let v = judge(&p95, &records);
        assert_eq!(v.verdict, Verdict::Fail, "{v:?}");
        assert_eq!(v.clauses[0].failed, 100);
        assert_eq!(
            v.clauses[0].observed_ms, None,
            "the p95 falls on failed calls"
        );
        assert!(v.reasons[0].contains("∞ (failed calls)"), "{:?}", v.reasons);
        // Cancelled calls are not samples: the summary never passes them in.
        assert!(!failed(0, 0.0, ErrorClass::Cancelled).is_failure());
    }

    #[test]
    fn percentile_clauses_count_each_frontier_bound_per_batch() {
        // TTFT cycling 1..=100 ms, every 10th call timed out.
        let mut records = calls(1000);
        for r in records.iter_mut().step_by(10) {
            *r = failed(r.task, r.scheduled_ms, ErrorClass::Timeout);
        }
        let s = slo(vec![
            latency(LatencyMetric::Ttft, Stat::Percentile(90.0), 60),
            latency(LatencyMetric::Ttft, Stat::Mean, 60),
        ]);
        let mut evidence = SloEvidence::new(&s, &[0.5, 2.0]);
        let values = StatsAccumulator::default();
        for (i, r) in records.iter().enumerate() {
            evidence.call(r, i * interval::BATCHES / records.len());
        }
        let v = evidence.judge(&s, |_| &values, 0.95, false);
        let p90 = &v.clauses[0];
        let batches = p90.batches.as_ref().expect("batches");
        let bounds: Vec<f64> = p90.at_bounds.iter().map(|b| b.bound_ms).collect();
        assert_eq!(bounds, [30.0, 120.0]);
        // A failed call is beyond every bound; a success beyond those its
        // TTFT exceeds.
        let beyond = |bound_ms: f64| -> u64 {
            records
                .iter()
                .filter(|r| !r.is_ok() || r.ttft_ms.is_some_and(|t| t > bound_ms))
                .count() as u64
        };
        for b in &p90.at_bounds {
            assert_eq!(b.beyond.len(), interval::BATCHES);
            assert_eq!(b.beyond.iter().sum::<u64>(), beyond(b.bound_ms), "{b:?}");
            assert!(b.beyond.iter().zip(&batches.samples).all(|(k, n)| k <= n));
        }
        assert_eq!(
            p90.at_bounds[1].beyond.iter().sum::<u64>(),
            100,
            "the failures"
        );
        assert_eq!(batches.beyond.iter().sum::<u64>(), beyond(60.0));
        // A mean has no frontier; results.json (v2) writes it empty.
        assert!(v.clauses[1].at_bounds.is_empty());
        let json = serde_json::to_string(&v.clauses[1]).expect("serializes");
        assert!(json.contains("\"at_bounds\":[]"), "{json}");
        // A clause from before the frontier's evidence still reads.
        let old: ClauseVerdict =
            serde_json::from_str(r#"{"label": "ttft p90 ≤ 60ms", "samples": 3}"#).expect("parses");
        assert!(old.at_bounds.is_empty());
    }

    #[test]
    fn error_rate_and_mean_clauses() {
        let mut records = calls(2000);
        for r in records.iter_mut().step_by(100) {
            *r = failed(r.task, r.scheduled_ms, ErrorClass::Timeout);
        }
        let rate = |max: f64| slo(vec![SloClause::ErrorRate { max: Fraction(max) }]);
        assert_eq!(judge(&rate(0.05), &records).verdict, Verdict::Pass);
        assert_eq!(judge(&rate(0.001), &records).verdict, Verdict::Fail);
        assert_eq!(judge(&rate(0.01), &records).verdict, Verdict::Inconclusive);
        let v = judge(&rate(0.001), &records);
        assert_eq!(v.clauses[0].observed_fraction, Some(0.01));
        // Mean TTFT of the successes is ≈ 50.5 ms.
        let mean = |limit| slo(vec![latency(LatencyMetric::Ttft, Stat::Mean, limit)]);
        assert_eq!(judge(&mean(60), &records).verdict, Verdict::Pass);
        assert_eq!(judge(&mean(40), &records).verdict, Verdict::Fail);
        assert_eq!(
            judge(&mean(50), &records[..10]).verdict,
            Verdict::Inconclusive
        );
    }

    #[test]
    fn any_failing_clause_fails_the_slo() {
        let both = slo(vec![
            latency(LatencyMetric::Ttft, Stat::Percentile(50.0), 1000),
            latency(LatencyMetric::Ttft, Stat::Percentile(90.0), 10),
            latency(LatencyMetric::Ttft, Stat::Percentile(99.0), 99),
        ]);
        let v = judge(&both, &calls(300));
        assert_eq!(v.verdict, Verdict::Fail);
        assert_eq!(
            v.clauses
                .iter()
                .map(ClauseVerdict::verdict)
                .collect::<Vec<_>>(),
            vec![Verdict::Pass, Verdict::Fail, Verdict::Inconclusive]
        );
        let mut v = judge(
            &slo(vec![latency(
                LatencyMetric::Ttft,
                Stat::Percentile(50.0),
                1000,
            )]),
            &calls(300),
        );
        assert_eq!(v.verdict, Verdict::Pass);
        v.overrule(Verdict::Inconclusive, "backlogged".into());
        assert_eq!(
            (v.verdict, v.reasons[0].as_str()),
            (Verdict::Inconclusive, "backlogged")
        );
        v.overrule(Verdict::Fail, "overloaded".into());
        assert_eq!(v.verdict, Verdict::Fail);
    }

    #[test]
    fn task_e2e_uses_tasks_when_there_are_any() {
        let s = slo(vec![latency(
            LatencyMetric::TaskE2e,
            Stat::Percentile(50.0),
            1000,
        )]);
        let mut evidence = SloEvidence::new(&s, &[]);
        let e2e = StatsAccumulator::default();
        for i in 0..40u64 {
            let t = TaskRecord {
                task: i,
                scheduled_ms: i as f64,
                completed_ms: i as f64 + 2000.0,
                e2e_ms: (i % 2 == 0).then_some(2000.0),
                calls: 3,
                failed_calls: u32::from(i % 2 == 1),
                context_rejected_calls: 0,
                class: None,
            };
            evidence.task(&t, (i / 2) as usize);
        }
        let v = evidence.judge(&s, |_| &e2e, 0.95, true);
        assert_eq!(v.verdict, Verdict::Fail);
        assert_eq!((v.clauses[0].samples, v.clauses[0].failed), (40, 20));
    }

    #[test]
    fn per_request_clauses() {
        let slo = slo(vec![
            latency(LatencyMetric::Ttft, Stat::Percentile(99.0), 100),
            latency(LatencyMetric::Itl, Stat::Percentile(95.0), 20),
            latency(LatencyMetric::Tpot, Stat::Mean, 15),
            latency(LatencyMetric::TaskE2e, Stat::Percentile(50.0), 1),
            SloClause::ErrorRate { max: Fraction(0.0) },
        ]);
        let mut gaps = StatsAccumulator::default();
        assert!(request_meets(
            &call(0, 0.0, 90.0, 10, 10.0),
            &slo,
            &mut gaps
        ));
        assert!(!request_meets(
            &call(0, 0.0, 110.0, 10, 10.0),
            &slo,
            &mut gaps
        ));
        assert!(!request_meets(
            &call(0, 0.0, 90.0, 10, 16.0),
            &slo,
            &mut gaps
        ));
        let mut spiky = call(0, 0.0, 90.0, 21, 5.0);
        spiky.itl_ms[0] = 100.0; // 1 of 20 gaps: the own p95 is still 5 ms
        assert!(request_meets(&spiky, &slo, &mut gaps));
        spiky.itl_ms[1] = 100.0; // 2 of 20: p95 is 100 ms
        assert!(!request_meets(&spiky, &slo, &mut gaps));
        assert!(request_meets(&call(0, 0.0, 90.0, 1, 0.0), &slo, &mut gaps));
        assert!(!request_meets(
            &failed(0, 0.0, ErrorClass::Timeout),
            &slo,
            &mut gaps
        ));
    }
}
