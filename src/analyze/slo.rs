//! SLO verdicts for one run: every clause, sample sufficiency, keeping up.
//!
//! A run passes an SLO when every clause holds on the run's distribution,
//! every percentile rests on enough samples, and (open loop) the run kept up
//! with its arrivals. A verdict keeps each clause's observed value so a card
//! can say *why* a rate failed ("ttft p99 1.8s > 1s").
//!
//! # Sample sufficiency
//!
//! A percentile pX judged on n samples has n·(1 − X/100) samples above it;
//! with only one or two, the estimate *is* the sample maximum and a single
//! unlucky call decides the verdict. The rule: pX needs at least
//! `ceil(10 / (1 − X/100))` samples (ten samples in the tail), never fewer
//! than [`MIN_SAMPLES_FLOOR`] (20, also the mean's minimum), and never more
//! than [`MIN_SAMPLES_CAP`] (500): p50 → 20, p90 → 100, p95 → 200, p99 and
//! beyond → 500. The cap keeps runs at low rates finite (500 calls at
//! 0.5 rps is already ~17 minutes) while a p99 still rests on 5 tail
//! samples: the nearest-rank p99 of 500 samples lies, with ~95% confidence,
//! between the true p98.1 and p99.8. An error-rate bound `max` is judged like
//! the percentile `100·(1 − max)` of the success indicator (0.5% → p99.5 →
//! 500 calls; 5% → 200 calls). Too few samples is never a pass: the runner
//! re-runs the rate longer ([`needs_longer`](super::search::needs_longer)).

use serde::{Deserialize, Serialize};

use crate::config::{LatencyMetric, Slo, SloClause, Stat};
use crate::exec::record::RequestRecord;

use super::RunSummary;
use super::summary::tpot_ms;

/// Tail samples a percentile must rest on.
pub const TAIL_SAMPLES: f64 = 10.0;
/// Fewest samples for any statistic (and for the mean).
pub const MIN_SAMPLES_FLOOR: u64 = 20;
/// Most samples the rule ever asks for.
pub const MIN_SAMPLES_CAP: u64 = 500;

/// Whether a run met an SLO, and why.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SloVerdict {
    /// Every clause holds, on enough samples, and the run kept up.
    pub pass: bool,
    /// One entry per clause of the SLO, in the SLO's order.
    pub clauses: Vec<ClauseVerdict>,
    /// Open loop: the run kept up with its arrivals (closed runs: true).
    pub kept_up: bool,
    /// Every clause had at least its minimum number of samples.
    pub enough_samples: bool,
    /// Why the run did not pass, one short phrase each
    /// (`"ttft p99 1.8s > 1s"`, `"did not keep up: 81% of arrivals completed"`).
    #[serde(default)]
    pub reasons: Vec<String>,
    /// `reasons` joined for display; `None` on a pass.
    pub note: Option<String>,
}

/// One clause of an SLO on one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClauseVerdict {
    /// `"ttft p99 ≤ 1s"`, `"error-rate ≤ 0.5%"`.
    pub label: String,
    /// `"ttft"`, …, `"task-e2e"`, `"error-rate"`.
    pub metric: String,
    /// `"p99"`, `"mean"`; `None` for the error rate.
    pub stat: Option<String>,
    /// Latency clauses: the run's value of the statistic; `None` if nothing was measured.
    pub observed_ms: Option<f64>,
    pub limit_ms: Option<f64>,
    /// Error-rate clause: errors / (requests + errors); `None` if no calls.
    pub observed_fraction: Option<f64>,
    pub limit_fraction: Option<f64>,
    /// The bound holds on the observed value (sample count aside).
    pub pass: bool,
    pub samples: u64,
    pub min_samples: u64,
    pub enough_samples: bool,
}

/// Judge `summary` against `slo` (rules in the module doc). A summary without
/// `kept_up` (closed loop) is not judged on keeping up.
pub fn evaluate(summary: &RunSummary, slo: &Slo) -> SloVerdict {
    let clauses: Vec<ClauseVerdict> = slo
        .clauses
        .iter()
        .map(|c| clause_verdict(summary, c))
        .collect();
    let kept_up = summary.kept_up.unwrap_or(true);
    let enough_samples = clauses.iter().all(|c| c.enough_samples);
    let pass = kept_up && enough_samples && clauses.iter().all(|c| c.pass);

    let mut reasons: Vec<String> = clauses.iter().filter_map(ClauseVerdict::failure).collect();
    if !kept_up {
        reasons.push(kept_up_reason(summary));
    }
    let note = (!reasons.is_empty()).then(|| reasons.join("; "));
    SloVerdict {
        pass,
        clauses,
        kept_up,
        enough_samples,
        reasons,
        note,
    }
}

/// Minimum samples for a statistic (rule in the module doc).
pub fn min_samples(stat: Stat) -> u64 {
    match stat {
        Stat::Mean => MIN_SAMPLES_FLOOR,
        Stat::Percentile(p) => {
            let tail = 1.0 - p / 100.0;
            if tail <= 0.0 {
                return MIN_SAMPLES_CAP;
            }
            // The epsilon keeps 10 / 0.01 = 1000.0000000000001 from rounding up.
            let needed = (TAIL_SAMPLES / tail - 1e-9).ceil();
            (needed as u64).clamp(MIN_SAMPLES_FLOOR, MIN_SAMPLES_CAP)
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
/// call with a single output token.
pub fn request_meets(record: &RequestRecord, slo: &Slo) -> bool {
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
                LatencyMetric::E2e => Some(record.e2e_ms),
                LatencyMetric::Tpot => tpot_ms(record).map(Some),
                LatencyMetric::Itl => own_itl(&record.itl_ms, *stat).map(Some),
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

/// `1800.0` → `"1.8s"`, `300.0` → `"300ms"`, `45.26` → `"45.3ms"`: three
/// significant digits, trailing zeros dropped.
pub fn format_ms(ms: f64) -> String {
    if ms.abs() >= 1000.0 {
        format!("{}s", significant(ms / 1000.0))
    } else {
        format!("{}ms", significant(ms))
    }
}

/// `0.005` → `"0.5%"`.
pub fn format_fraction(fraction: f64) -> String {
    format!("{}%", significant(fraction * 100.0))
}

/// Three significant digits, trailing zeros dropped: `4.0` → `"4"`.
pub(crate) fn significant(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let magnitude = x.abs().log10().floor() as i32;
    let decimals = (2 - magnitude).max(0) as usize;
    let text = format!("{x:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

impl ClauseVerdict {
    /// Why this clause fails the SLO, if it does.
    pub fn failure(&self) -> Option<String> {
        if self.pass && self.enough_samples {
            return None;
        }
        let name = match &self.stat {
            Some(stat) => format!("{} {stat}", self.metric),
            None => self.metric.clone(),
        };
        let shortfall = format!(
            "only {} of {} samples needed",
            self.samples, self.min_samples
        );
        let value = match (
            self.observed_ms,
            self.limit_ms,
            self.observed_fraction,
            self.limit_fraction,
        ) {
            (Some(o), Some(l), _, _) => Some(format!("{name} {} > {}", format_ms(o), format_ms(l))),
            (_, _, Some(o), Some(l)) => Some(format!(
                "{name} {} > {}",
                format_fraction(o),
                format_fraction(l)
            )),
            _ => None,
        };
        // Past the early return, a passing clause is one short of samples.
        Some(match (self.pass, value) {
            (false, Some(v)) if self.enough_samples => v,
            (false, Some(v)) => format!("{v} ({shortfall})"),
            (false, None) => format!("{name}: not measured ({shortfall})"),
            (true, _) => format!("{name}: {shortfall}"),
        })
    }
}

fn clause_verdict(summary: &RunSummary, clause: &SloClause) -> ClauseVerdict {
    match clause {
        SloClause::Latency {
            metric,
            stat,
            limit,
        } => {
            let stats = summary.latency(*metric);
            let limit_ms = limit.as_secs_f64() * 1000.0;
            let observed_ms = stats.get(*stat);
            let min_samples = min_samples(*stat);
            ClauseVerdict {
                label: format!(
                    "{} {} ≤ {}",
                    metric.as_str(),
                    stat.key(),
                    format_ms(limit_ms)
                ),
                metric: metric.as_str().to_string(),
                stat: Some(stat.key()),
                observed_ms,
                limit_ms: Some(limit_ms),
                observed_fraction: None,
                limit_fraction: None,
                pass: observed_ms.is_some_and(|v| v <= limit_ms),
                samples: stats.count,
                min_samples,
                enough_samples: stats.count >= min_samples,
            }
        }
        SloClause::ErrorRate { max } => {
            let calls = summary.requests + summary.errors;
            let observed = (calls > 0).then(|| summary.errors as f64 / calls as f64);
            let min_samples = min_samples(Stat::Percentile(100.0 * (1.0 - max.0)));
            ClauseVerdict {
                label: format!("error-rate ≤ {}", format_fraction(max.0)),
                metric: "error-rate".to_string(),
                stat: None,
                observed_ms: None,
                limit_ms: None,
                observed_fraction: observed,
                limit_fraction: Some(max.0),
                pass: observed.is_some_and(|v| v <= max.0),
                samples: calls,
                min_samples,
                enough_samples: calls >= min_samples,
            }
        }
    }
}

fn kept_up_reason(summary: &RunSummary) -> String {
    let mut parts = vec![];
    match summary.completed_fraction {
        Some(f) if f < super::summary::KEPT_UP_MIN_COMPLETED_FRACTION => {
            parts.push(format!("{} of arrivals completed", format_fraction(f)));
        }
        None => parts.push("no arrivals in the measured window".to_string()),
        Some(_) => {}
    }
    if let (Some(offered), Some(achieved)) = (summary.offered, summary.achieved_rps) {
        let completed = achieved * summary.window_s;
        if !super::summary::completions_keep_pace(offered, completed) {
            parts.push(format!(
                "{completed:.0} tasks completed in the window for {offered} arrivals"
            ));
        }
    }
    if summary.backlog_growing == Some(true) {
        parts.push("calls in flight kept growing (backlog)".to_string());
    }
    if parts.is_empty() {
        "did not keep up".to_string()
    } else {
        format!("did not keep up: {}", parts.join(", "))
    }
}

/// The clause's statistic over one call's own inter-chunk gaps.
fn own_itl(gaps: &[f32], stat: Stat) -> Option<f64> {
    if gaps.is_empty() {
        return None;
    }
    let mut values: Vec<f64> = gaps.iter().map(|&g| f64::from(g)).collect();
    match stat {
        Stat::Mean => Some(values.iter().sum::<f64>() / values.len() as f64),
        Stat::Percentile(p) => {
            values.sort_by(f64::total_cmp);
            let rank = ((p / 100.0) * values.len() as f64).ceil().max(1.0) as usize;
            values.get(rank.min(values.len()) - 1).copied()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::analyze::LatencyStats;
    use crate::analyze::summary::tests::{call, failed};
    use crate::config::Fraction;
    use crate::exec::record::ErrorClass;

    fn stats(count: u64, p50: f64, p99: f64) -> LatencyStats {
        LatencyStats {
            count,
            mean: p50,
            p50,
            p90: p99,
            p95: p99,
            p99,
            max: p99,
            extra: BTreeMap::new(),
        }
    }

    fn latency(metric: LatencyMetric, stat: Stat, limit_ms: u64) -> SloClause {
        SloClause::Latency {
            metric,
            stat,
            limit: Duration::from_millis(limit_ms),
        }
    }

    fn interactive() -> Slo {
        Slo {
            name: "interactive".into(),
            span: None,
            clauses: vec![
                latency(LatencyMetric::Ttft, Stat::Percentile(50.0), 300),
                latency(LatencyMetric::Ttft, Stat::Percentile(99.0), 1000),
                SloClause::ErrorRate {
                    max: Fraction(0.005),
                },
            ],
        }
    }

    fn open_summary(requests: u64, errors: u64, ttft_p50: f64, ttft_p99: f64) -> RunSummary {
        RunSummary {
            requests,
            errors,
            ttft_ms: stats(requests, ttft_p50, ttft_p99),
            kept_up: Some(true),
            completed_fraction: Some(1.0),
            ..RunSummary::default()
        }
    }

    #[test]
    fn min_samples_rule() {
        assert_eq!(min_samples(Stat::Mean), 20);
        assert_eq!(min_samples(Stat::Percentile(50.0)), 20);
        assert_eq!(min_samples(Stat::Percentile(75.0)), 40);
        assert_eq!(min_samples(Stat::Percentile(90.0)), 100);
        assert_eq!(min_samples(Stat::Percentile(95.0)), 200);
        assert_eq!(min_samples(Stat::Percentile(99.0)), 500);
        assert_eq!(min_samples(Stat::Percentile(99.9)), 500);
    }

    #[test]
    fn pass_when_every_clause_holds() {
        let v = evaluate(&open_summary(600, 1, 200.0, 900.0), &interactive());
        assert!(v.pass, "{v:?}");
        assert!(v.kept_up && v.enough_samples);
        assert_eq!(v.note, None);
        assert_eq!(v.clauses[1].label, "ttft p99 ≤ 1s");
        assert_eq!(v.clauses[2].label, "error-rate ≤ 0.5%");
        assert_eq!(v.clauses[1].observed_ms, Some(900.0));
        assert_eq!(v.clauses[2].min_samples, 500);
    }

    #[test]
    fn failing_clause_is_named_with_values() {
        let v = evaluate(&open_summary(600, 0, 200.0, 1800.0), &interactive());
        assert!(!v.pass);
        assert!(!v.clauses[1].pass && v.clauses[1].enough_samples);
        assert_eq!(v.reasons, vec!["ttft p99 1.8s > 1s".to_string()]);

        let v = evaluate(&open_summary(594, 6, 200.0, 900.0), &interactive());
        assert_eq!(v.reasons, vec!["error-rate 1% > 0.5%".to_string()]);
    }

    #[test]
    fn too_few_samples_is_not_a_pass() {
        let v = evaluate(&open_summary(120, 0, 200.0, 900.0), &interactive());
        assert!(!v.pass);
        assert!(!v.enough_samples);
        assert!(v.clauses[0].enough_samples, "p50 needs 20");
        assert!(v.clauses[1].pass && !v.clauses[1].enough_samples);
        assert_eq!(
            v.reasons,
            vec![
                "ttft p99: only 120 of 500 samples needed".to_string(),
                "error-rate: only 120 of 500 samples needed".to_string(),
            ]
        );
    }

    #[test]
    fn not_keeping_up_fails_with_reason() {
        let mut s = open_summary(600, 0, 200.0, 900.0);
        s.kept_up = Some(false);
        s.completed_fraction = Some(0.81);
        s.backlog_growing = Some(true);
        let v = evaluate(&s, &interactive());
        assert!(!v.pass && !v.kept_up);
        assert_eq!(
            v.note.as_deref(),
            Some(
                "did not keep up: 81% of arrivals completed, calls in flight kept growing (backlog)"
            )
        );
    }

    #[test]
    fn nothing_measured_is_not_a_pass() {
        let v = evaluate(
            &RunSummary {
                kept_up: Some(true),
                ..RunSummary::default()
            },
            &interactive(),
        );
        assert!(!v.pass);
        assert_eq!(v.clauses[0].observed_ms, None);
        assert_eq!(
            v.reasons[0],
            "ttft p50: not measured (only 0 of 20 samples needed)"
        );
    }

    #[test]
    fn task_e2e_falls_back_to_e2e_for_single_calls() {
        let slo = Slo {
            name: "t".into(),
            span: None,
            clauses: vec![latency(
                LatencyMetric::TaskE2e,
                Stat::Percentile(50.0),
                1000,
            )],
        };
        let s = RunSummary {
            e2e_ms: stats(50, 800.0, 900.0),
            ..RunSummary::default()
        };
        assert!(evaluate(&s, &slo).pass);
        let s = RunSummary {
            task_e2e_ms: Some(stats(50, 1200.0, 1300.0)),
            ..s
        };
        assert!(!evaluate(&s, &slo).pass);
    }

    #[test]
    fn per_request_clauses() {
        let slo = Slo {
            name: "s".into(),
            span: None,
            clauses: vec![
                latency(LatencyMetric::Ttft, Stat::Percentile(99.0), 100),
                latency(LatencyMetric::Itl, Stat::Percentile(95.0), 20),
                latency(LatencyMetric::Tpot, Stat::Mean, 15),
                latency(LatencyMetric::TaskE2e, Stat::Percentile(50.0), 1),
                SloClause::ErrorRate { max: Fraction(0.0) },
            ],
        };
        assert!(request_meets(&call(0, 0.0, 90.0, 10, 10.0), &slo));
        assert!(!request_meets(&call(0, 0.0, 110.0, 10, 10.0), &slo), "ttft");
        assert!(
            !request_meets(&call(0, 0.0, 90.0, 10, 16.0), &slo),
            "tpot 16 > 15"
        );
        let mut spiky = call(0, 0.0, 90.0, 21, 5.0);
        spiky.itl_ms[0] = 100.0; // 1 of 20 gaps: the own p95 is still 5 ms
        assert!(request_meets(&spiky, &slo));
        spiky.itl_ms[1] = 100.0; // 2 of 20: p95 is 100 ms (and TPOT still ≤ 15)
        assert!(!request_meets(&spiky, &slo));
        assert!(
            request_meets(&call(0, 0.0, 90.0, 1, 0.0), &slo),
            "one token: no ITL/TPOT"
        );
        assert!(!request_meets(&failed(0, 0.0, ErrorClass::Timeout), &slo));
    }

    #[test]
    fn formatting() {
        assert_eq!(format_ms(1000.0), "1s");
        assert_eq!(format_ms(1800.0), "1.8s");
        assert_eq!(format_ms(20_000.0), "20s");
        assert_eq!(format_ms(300.0), "300ms");
        assert_eq!(format_ms(45.26), "45.3ms");
        assert_eq!(format_ms(0.2), "0.2ms");
        assert_eq!(format_fraction(0.005), "0.5%");
        assert_eq!(format_fraction(0.8123), "81.2%");
    }
}
