//! The SLO frontier (pure): for each latency clause of an SLO, the largest
//! measured rate that would pass as a function of the clause's bound — what
//! an SLO could be negotiated to, read from the open runs already measured.
//!
//! Each open run gives a point: its rate and its value of the clause's
//! statistic (failed calls counted beyond every bound, as in the verdicts).
//! Sorted by rate, the bound a rate needs is the largest value seen at that
//! rate or below (a tighter bound would fail some lower rate, and Cr_open is
//! read below the lowest failure), so the curve is monotone. A point whose
//! own verdict was inconclusive is marked: its interval straddled the
//! bound, so its value is the least certain part of the curve. A rate whose
//! value falls on failed calls (no finite value), or whose run was invalid,
//! overloaded or backlogged (it passes at no bound), ends the curve.

use serde::{Deserialize, Serialize};

use super::RunSummary;

/// One clause's frontier (`cards[].frontier[]` in results.json).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Frontier {
    pub slo: String,
    /// The clause's label, e.g. `"ttft p99 ≤ 1s"`.
    pub clause: String,
    /// By rising bound and rate.
    pub points: Vec<FrontierPoint>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FrontierPoint {
    /// A bound on the clause's statistic…
    pub bound_ms: f64,
    /// …and the largest measured rate that meets it (and every rate below).
    pub rps: f64,
    /// The run at this rate was inconclusive for its SLO.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inconclusive: bool,
}

/// The frontier of every latency clause judged on the `open` runs.
pub fn frontiers(open: &[RunSummary]) -> Vec<Frontier> {
    let mut runs: Vec<&RunSummary> = open.iter().filter(|r| r.rate_rps.is_some()).collect();
    runs.sort_by(|a, b| {
        a.rate_rps
            .unwrap_or(0.0)
            .total_cmp(&b.rate_rps.unwrap_or(0.0))
    });
    let mut out: Vec<Frontier> = Vec::new();
    let Some(first) = runs.first() else {
        return out;
    };
    for verdict in &first.verdicts {
        for (i, clause) in verdict.clauses.iter().enumerate() {
            if clause.limit_ms.is_none() {
                continue; // the error rate has no latency bound
            }
            let mut points: Vec<FrontierPoint> = Vec::new();
            let mut needed: f64 = 0.0;
            for run in &runs {
                let Some(v) = run.verdict(&verdict.slo) else {
                    continue;
                };
                let Some(value) = v.clauses.get(i).and_then(|c| c.observed_ms) else {
                    break; // beyond every bound: no rate from here on can pass
                };
                // An overloaded or backlogged run passes at no bound.
                if run.invalid || run.state != super::RunState::Stable {
                    break;
                }
                needed = needed.max(value);
                let point = FrontierPoint {
                    bound_ms: needed,
                    rps: run.rate_rps.unwrap_or(0.0),
                    inconclusive: v.verdict == super::Verdict::Inconclusive,
                };
                // A higher rate at the same bound replaces the lower one.
                match points.last_mut() {
                    Some(last) if last.bound_ms == needed => *last = point,
                    _ => points.push(point),
                }
            }
            if !points.is_empty() {
                out.push(Frontier {
                    slo: verdict.slo.clone(),
                    clause: clause.label.clone(),
                    points,
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::{ClauseVerdict, RunState, SloVerdict, Verdict};

    fn run(rate: f64, p99_ms: Option<f64>, verdict: Verdict) -> RunSummary {
        RunSummary {
            rate_rps: Some(rate),
            verdicts: vec![SloVerdict {
                slo: "chat".into(),
                verdict,
                clauses: vec![
                    ClauseVerdict {
                        label: "ttft p99 ≤ 1s".into(),
                        observed_ms: p99_ms,
                        limit_ms: Some(1000.0),
                        ..ClauseVerdict::default()
                    },
                    ClauseVerdict {
                        label: "error-rate ≤ 1%".into(),
                        limit_fraction: Some(0.01),
                        ..ClauseVerdict::default()
                    },
                ],
                ..SloVerdict::default()
            }],
            ..RunSummary::default()
        }
    }

    #[test]
    fn monotone_curve_from_measured_runs() {
        let runs = [
            run(8.0, Some(520.0), Verdict::Pass),
            run(2.0, Some(210.0), Verdict::Pass),
            run(4.0, Some(300.0), Verdict::Pass),
            // Noise: a lower value at a higher rate needs the bound seen below it.
            run(6.0, Some(280.0), Verdict::Pass),
            run(12.0, Some(990.0), Verdict::Inconclusive),
            run(16.0, None, Verdict::Fail),
            run(20.0, Some(400.0), Verdict::Fail),
        ];
        let f = frontiers(&runs);
        assert_eq!(f.len(), 1, "the error rate has no frontier");
        assert_eq!(
            (f[0].slo.as_str(), f[0].clause.as_str()),
            ("chat", "ttft p99 ≤ 1s")
        );
        let pts: Vec<(f64, f64, bool)> = f[0]
            .points
            .iter()
            .map(|p| (p.bound_ms, p.rps, p.inconclusive))
            .collect();
        assert_eq!(
            pts,
            vec![
                (210.0, 2.0, false),
                (300.0, 6.0, false),
                (520.0, 8.0, false),
                (990.0, 12.0, true),
            ]
        );
    }

    #[test]
    fn overloaded_and_backlogged_runs_end_the_curve() {
        for state in [RunState::Overloaded, RunState::Backlogged] {
            let mut over = run(4.0, Some(100.0), Verdict::Fail);
            over.state = state;
            let f = frontiers(&[run(2.0, Some(90.0), Verdict::Pass), over]);
            assert_eq!(f[0].points.len(), 1, "{state:?}");
        }
        assert!(frontiers(&[]).is_empty());
    }
}
