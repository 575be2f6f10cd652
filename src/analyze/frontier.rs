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
//!
//! # Dense where a user will negotiate
//!
//! The search's rates are chosen for the declared bounds, so the curve is
//! coarse elsewhere. `frontier 0.5 1.5` in `open` asks for more: after the
//! search, a [`FrontierPhase`] runs extra rates until, for every latency
//! clause and multiplier `m`, the curve's crossing of the bound `m × limit`
//! is bracketed to the search's precision — the highest rate whose curve
//! value is within it and the lowest beyond it, as [`next_frontier_rate`]
//! decides from the runs measured so far. Like the search it is a pure
//! state machine the runner drives, bounded per bound and in all
//! ([`crate::plan::frontier_max_runs`], the same bound `capcard plan`
//! counts), and deterministic in the runs it is given, so `--resume`
//! replays the same rates and finds their journals.

use serde::{Deserialize, Serialize};

use super::search::{round_rate, same_rate};
use super::{RunState, RunSummary};
use crate::config::{Slo, SloClause};

/// The bounds every run counts its percentile clauses at, as multipliers
/// of each declared bound, whether or not `frontier` is set: half and
/// three quarters of it (what a tighter SLO costs), one and a half and
/// twice it (what a looser one buys). A handful, so the evidence each run
/// keeps stays small (20 counts per bound per clause).
pub const DEFAULT_LADDER: [f64; 4] = [0.5, 0.75, 1.5, 2.0];

/// The multipliers a run counts its percentile clauses at: the default
/// ladder and `asked` (the experiment's `frontier`), by rising value, each
/// once, never 1 (the declared bound is counted already).
pub fn multipliers(asked: &[f64]) -> Vec<f64> {
    let mut all: Vec<f64> = DEFAULT_LADDER
        .iter()
        .chain(asked)
        .copied()
        .filter(|m| m.is_finite() && *m > 0.0 && !same_bound(*m, 1.0))
        .collect();
    all.sort_by(f64::total_cmp);
    all.dedup_by(|a, b| same_bound(*a, *b));
    all
}

/// Two bounds (or multipliers) the frontier treats as one.
fn same_bound(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * a.abs().max(b.abs())
}

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
                if !run.measures_replica() || run.state != super::RunState::Stable {
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

// ------------------------------------------------------ the frontier phase

/// One bound the `frontier` setting asks the phase to resolve: `multiplier`
/// × the declared bound of one latency clause of one SLO.
#[derive(Debug, Clone, PartialEq)]
pub struct FrontierTarget {
    pub slo: String,
    /// The clause's index in the SLO, which is its index in every verdict.
    pub clause: usize,
    /// The clause's label (`"ttft p99 ≤ 1s"`), for the run log.
    pub label: String,
    pub multiplier: f64,
    pub bound_ms: f64,
}

/// Every bound `multipliers` ask of `slos`: per SLO, per latency clause (the
/// error rate has no bound in ms), per multiplier, in declaration order.
pub fn frontier_targets(slos: &[Slo], multipliers: &[f64]) -> Vec<FrontierTarget> {
    let mut targets = Vec::new();
    for slo in slos {
        for (clause, c) in slo.clauses.iter().enumerate() {
            let SloClause::Latency { limit, .. } = c else {
                continue;
            };
            let limit_ms = limit.as_secs_f64() * 1000.0;
            for &multiplier in multipliers {
                targets.push(FrontierTarget {
                    slo: slo.name.clone(),
                    clause,
                    label: super::slo::clause_label(c),
                    multiplier,
                    bound_ms: multiplier * limit_ms,
                });
            }
        }
    }
    targets
}

/// The next rate the frontier wants, from the open runs measured so far
/// (one summary per rate, repetitions combined), or `None` when every
/// target is resolved. Targets are served in order; see [`wanted_rate`].
pub fn next_frontier_rate(
    open: &[RunSummary],
    targets: &[FrontierTarget],
    min_rps: f64,
    max_rps: f64,
    precision: f64,
) -> Option<f64> {
    targets
        .iter()
        .find_map(|t| wanted_rate(open, t, min_rps, max_rps, precision))
}

/// The rate `target` wants next, `None` once it is resolved.
///
/// On the curve of the clause (each rate's value, +∞ for a run that is
/// invalid, overloaded, backlogged or whose value falls on failed calls,
/// then the running maximum by rate, as [`frontiers`] reads it), `lo` is
/// the highest rate whose value is within the bound and `hi` the lowest
/// beyond it. No `lo`: halve below the lowest rate (floored at `min`); no
/// `hi`: double above the highest (capped at `max`); both: the rounded
/// midpoint while `hi` is more than `precision` above `lo`. A rate already
/// run (after rounding, as the search compares rates) is never asked for
/// again: the target is then as fine as rates go.
pub fn wanted_rate(
    open: &[RunSummary],
    target: &FrontierTarget,
    min_rps: f64,
    max_rps: f64,
    precision: f64,
) -> Option<f64> {
    let curve = curve_of(open, target);
    let b = target.bound_ms;
    let lo = curve.iter().rev().find(|(_, needed)| *needed <= b);
    let hi = curve.iter().find(|(_, needed)| *needed > b);
    let candidate = match (lo, hi) {
        (None, None) => return None, // no run judged this clause
        (None, Some(&(lowest, _))) => {
            if lowest <= min_rps * (1.0 + 1e-9) {
                return None; // even `min` needs a looser bound
            }
            if lowest / 2.0 <= min_rps {
                min_rps
            } else {
                round_rate(lowest / 2.0)
            }
        }
        (Some(&(highest, _)), None) => {
            if highest >= max_rps * (1.0 - 1e-9) {
                return None; // `max` meets it
            }
            if highest * 2.0 >= max_rps {
                max_rps
            } else {
                round_rate(highest * 2.0)
            }
        }
        (Some(&(lo, _)), Some(&(hi, _))) => {
            if (hi - lo) / lo <= precision + 1e-12 {
                return None;
            }
            let mid = round_rate((lo + hi) / 2.0);
            if !(mid > lo && mid < hi) {
                return None;
            }
            mid
        }
    };
    let tried = open
        .iter()
        .any(|r| r.rate_rps.is_some_and(|rate| same_rate(rate, candidate)));
    (!tried).then_some(candidate)
}

/// `(rate, value the rate needs)` of the target's clause, by rising rate:
/// the running maximum of each run's value, +∞ from the first run that
/// passes at no bound. Runs at one rate (after rounding) are one point.
fn curve_of(open: &[RunSummary], target: &FrontierTarget) -> Vec<(f64, f64)> {
    let mut values: Vec<(f64, f64)> = open
        .iter()
        .filter_map(|run| {
            let rate = run.rate_rps.filter(|r| r.is_finite() && *r > 0.0)?;
            let verdict = run.verdict(&target.slo)?;
            let value = if !run.measures_replica() || run.state != RunState::Stable {
                f64::INFINITY
            } else {
                verdict
                    .clauses
                    .get(target.clause)
                    .and_then(|c| c.observed_ms)
                    .unwrap_or(f64::INFINITY)
            };
            Some((rate, value))
        })
        .collect();
    values.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut curve: Vec<(f64, f64)> = Vec::new();
    let mut needed: f64 = 0.0;
    for (rate, value) in values {
        needed = needed.max(value);
        match curve.last_mut() {
            Some(last) if same_rate(last.0, rate) => last.1 = needed,
            _ => curve.push((rate, needed)),
        }
    }
    curve
}

/// The frontier phase of one card, after its search: which rates to add,
/// within [`crate::plan::FRONTIER_RUNS_PER_BOUND`] runs per target (a run
/// counts against the target that asked for it, though it may settle
/// others too) and [`crate::plan::frontier_max_runs`] in all.
///
/// ```text
/// let mut phase = FrontierPhase::new(&slos, &multipliers, min, max, precision);
/// while let Some((rate, _target)) = phase.next_rate(&combined_per_rate(&open)) {
///     open.push(run(rate));
/// }
/// ```
#[derive(Debug, Clone)]
pub struct FrontierPhase {
    targets: Vec<FrontierTarget>,
    /// Runs asked for by each target.
    asked: Vec<u32>,
    total: u32,
    max_total: u32,
    min_rps: f64,
    max_rps: f64,
    precision: f64,
}

impl FrontierPhase {
    /// `min`/`max` and `precision` are the search's.
    pub fn new(
        slos: &[Slo],
        multipliers: &[f64],
        min: f64,
        max: f64,
        precision: f64,
    ) -> FrontierPhase {
        let targets = frontier_targets(slos, multipliers);
        // Defensive against an unvalidated caller, as the search is.
        let min_rps = if min > 0.0 { min } else { 1e-3 };
        let max_rps = if max > min_rps { max } else { min_rps };
        let precision = if precision.is_finite() && precision > 0.0 {
            precision
        } else {
            0.05
        };
        FrontierPhase {
            asked: vec![0; targets.len()],
            max_total: crate::plan::frontier_max_runs(targets.len()),
            targets,
            total: 0,
            min_rps,
            max_rps,
            precision,
        }
    }

    pub fn targets(&self) -> &[FrontierTarget] {
        &self.targets
    }

    /// The next rate to run and the target that wants it, counted against
    /// the caps; `None` when every target is resolved or out of runs.
    /// `open`: the card's open runs so far, one summary per rate.
    pub fn next_rate(&mut self, open: &[RunSummary]) -> Option<(f64, &FrontierTarget)> {
        if self.total >= self.max_total {
            return None;
        }
        let (index, rate) = self.targets.iter().enumerate().find_map(|(i, t)| {
            if self.asked[i] >= crate::plan::FRONTIER_RUNS_PER_BOUND {
                return None;
            }
            wanted_rate(open, t, self.min_rps, self.max_rps, self.precision).map(|r| (i, r))
        })?;
        self.asked[index] += 1;
        self.total += 1;
        Some((rate, &self.targets[index]))
    }
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

#[cfg(test)]
mod phase_tests {
    use std::time::Duration;

    use super::*;
    use crate::analyze::{ClauseVerdict, SloVerdict, Verdict};
    use crate::config::{Fraction, LatencyMetric, Stat};

    /// `chat`: ttft p99 ≤ 1s and an error rate (which has no frontier).
    fn slo() -> Slo {
        Slo {
            name: "chat".into(),
            span: None,
            clauses: vec![
                SloClause::ErrorRate {
                    max: Fraction(0.01),
                },
                SloClause::Latency {
                    metric: LatencyMetric::Ttft,
                    stat: Stat::Percentile(99.0),
                    limit: Duration::from_secs(1),
                },
            ],
        }
    }

    /// A run at `rate` whose ttft p99 (clause 1) is `p99_ms`.
    fn run(rate: f64, p99_ms: Option<f64>) -> RunSummary {
        RunSummary {
            rate_rps: Some(rate),
            verdicts: vec![SloVerdict {
                slo: "chat".into(),
                verdict: Verdict::Pass,
                clauses: vec![
                    ClauseVerdict {
                        label: "error-rate ≤ 1%".into(),
                        limit_fraction: Some(0.01),
                        ..ClauseVerdict::default()
                    },
                    ClauseVerdict {
                        label: "ttft p99 ≤ 1s".into(),
                        observed_ms: p99_ms,
                        limit_ms: Some(1000.0),
                        ..ClauseVerdict::default()
                    },
                ],
                ..SloVerdict::default()
            }],
            ..RunSummary::default()
        }
    }

    fn target(multiplier: f64) -> FrontierTarget {
        frontier_targets(&[slo()], &[multiplier]).remove(0)
    }

    /// What a search leaves: 2, 4, 8 measured, 16 beyond every bound.
    fn searched() -> Vec<RunSummary> {
        vec![
            run(2.0, Some(100.0)),
            run(4.0, Some(300.0)),
            run(8.0, Some(900.0)),
            run(16.0, None),
        ]
    }

    const MIN: f64 = 0.5;
    const MAX: f64 = 64.0;
    const PRECISION: f64 = 0.1;

    #[test]
    fn targets_are_each_latency_clause_times_each_multiplier() {
        let targets = frontier_targets(&[slo()], &[0.5, 2.0]);
        let got: Vec<(usize, f64, &str)> = targets
            .iter()
            .map(|t| (t.clause, t.bound_ms, t.label.as_str()))
            .collect();
        assert_eq!(
            got,
            [(1, 500.0, "ttft p99 ≤ 1s"), (1, 2000.0, "ttft p99 ≤ 1s")]
        );
    }

    #[test]
    fn bisects_between_the_rates_around_the_bound() {
        let open = searched();
        // 0.5 s: 4 rps needs 300 ms, 8 rps 900 ms → between them.
        assert_eq!(
            next_frontier_rate(&open, &[target(0.5)], MIN, MAX, PRECISION),
            Some(6.0)
        );
        // 0.2 s: between 2 (100 ms) and 4 (300 ms).
        assert_eq!(
            next_frontier_rate(&open, &[target(0.2)], MIN, MAX, PRECISION),
            Some(3.0)
        );
        // Within precision: resolved.
        let mut fine = open.clone();
        fine.push(run(4.3, Some(520.0)));
        fine.push(run(4.1, Some(450.0)));
        assert_eq!(
            next_frontier_rate(&fine, &[target(0.5)], MIN, MAX, PRECISION),
            None,
            "4.1 within, 4.3 beyond: 4.9% apart"
        );
    }

    #[test]
    fn halves_below_and_doubles_above_within_min_and_max() {
        let open = searched();
        // 50 ms: even 2 rps needs 100 ms.
        assert_eq!(
            next_frontier_rate(&open, &[target(0.05)], MIN, MAX, PRECISION),
            Some(1.0)
        );
        assert_eq!(
            next_frontier_rate(&open, &[target(0.05)], 1.5, MAX, PRECISION),
            Some(1.5),
            "floored at min"
        );
        assert_eq!(
            next_frontier_rate(&open, &[target(0.05)], 2.0, MAX, PRECISION),
            None,
            "min itself needs more"
        );
        // Without a failure the top of the curve is open: double.
        let passing = &open[..3];
        assert_eq!(
            next_frontier_rate(passing, &[target(2.0)], MIN, MAX, PRECISION),
            Some(16.0)
        );
        assert_eq!(
            next_frontier_rate(passing, &[target(2.0)], MIN, 12.0, PRECISION),
            Some(12.0),
            "capped at max"
        );
        assert_eq!(
            next_frontier_rate(passing, &[target(2.0)], MIN, 8.0, PRECISION),
            None,
            "max itself meets it"
        );
    }

    #[test]
    fn runs_that_pass_at_no_bound_count_as_infinite() {
        for state in [RunState::Overloaded, RunState::Backlogged] {
            let mut open = searched();
            let mut over = run(6.0, Some(350.0));
            over.state = state;
            open.push(over);
            assert_eq!(
                next_frontier_rate(&open, &[target(0.5)], MIN, MAX, PRECISION),
                Some(5.0),
                "{state:?}: 6 rps is beyond the bound"
            );
        }
        let mut open = searched();
        let mut invalid = run(6.0, Some(350.0));
        invalid.invalid = true;
        open.push(invalid);
        assert_eq!(
            next_frontier_rate(&open, &[target(0.5)], MIN, MAX, PRECISION),
            Some(5.0)
        );
        // A lower value above a higher one needs the higher (monotone).
        let mut open = searched();
        open.push(run(6.0, Some(250.0)));
        assert_eq!(
            next_frontier_rate(&open, &[target(0.5)], MIN, MAX, PRECISION),
            Some(7.0),
            "6 rps needs what 4 rps needs, 300 ms"
        );
    }

    #[test]
    fn never_asks_for_a_rate_already_run() {
        let mut open = searched();
        // 6 rps was run, for another SLO only: it is still taken.
        let mut other = run(6.0, Some(1.0));
        other.verdicts[0].slo = "batch".into();
        open.push(other);
        assert_eq!(
            next_frontier_rate(&open, &[target(0.5)], MIN, MAX, PRECISION),
            None
        );
        // The next target is served instead.
        assert_eq!(
            next_frontier_rate(&open, &[target(0.5), target(0.2)], MIN, MAX, PRECISION),
            Some(3.0)
        );
        // A midpoint that rounds onto an end is as fine as rates go.
        let close = vec![run(4.0, Some(300.0)), run(4.01, Some(900.0))];
        assert_eq!(
            next_frontier_rate(&close, &[target(0.5)], MIN, MAX, 1e-6),
            None
        );
        assert_eq!(
            next_frontier_rate(&[], &[target(0.5)], MIN, MAX, PRECISION),
            None
        );
    }

    /// A replica whose ttft p99 is 100 ms per rps, up to 12 rps.
    fn oracle(rate: f64) -> RunSummary {
        run(rate, (rate < 12.0).then_some(100.0 * rate))
    }

    fn drive(phase: &mut FrontierPhase, open: &mut Vec<RunSummary>) -> Vec<(f64, f64)> {
        let mut asked = Vec::new();
        while let Some((rate, target)) = phase.next_rate(open) {
            asked.push((rate, target.multiplier));
            open.push(oracle(rate));
        }
        asked
    }

    #[test]
    fn the_phase_resolves_each_bound_and_the_frontier_gets_its_point() {
        let mut open: Vec<RunSummary> = [2.0, 4.0, 8.0, 16.0].map(oracle).to_vec();
        let mut phase = FrontierPhase::new(&[slo()], &[0.35, 0.75], MIN, MAX, 0.25);
        let asked = drive(&mut phase, &mut open);
        // The search left 2, 4, 8 (200, 400, 800 ms) and 16 (beyond).
        // 350 ms: between 2 and 4 → 3 (300 ms, within), then 3.5 (350 ms,
        // within), 3.5..4 is 14% apart. 750 ms: between 4 and 8 → 6 (600 ms),
        // then 7 (700 ms); 7..8 is 14% apart.
        assert_eq!(asked, [(3.0, 0.35), (3.5, 0.35), (6.0, 0.75), (7.0, 0.75)]);
        let f = frontiers(&open);
        let at = |bound_ms: f64| {
            f[0].points
                .iter()
                .rev()
                .find(|p| p.bound_ms <= bound_ms)
                .map(|p| p.rps)
        };
        assert_eq!(at(350.0), Some(3.5));
        assert_eq!(at(750.0), Some(7.0));

        // Deterministic: the same runs, the same rates (what --resume needs).
        let mut again: Vec<RunSummary> = [2.0, 4.0, 8.0, 16.0].map(oracle).to_vec();
        let mut phase = FrontierPhase::new(&[slo()], &[0.35, 0.75], MIN, MAX, 0.25);
        assert_eq!(drive(&mut phase, &mut again), asked);
    }

    #[test]
    fn the_phase_stops_at_its_caps() {
        // A precision no run count reaches: each bound takes its 3 runs.
        let mut open = searched();
        let mut phase = FrontierPhase::new(&[slo()], &[0.35], MIN, MAX, 1e-6);
        let asked = drive(&mut phase, &mut open);
        assert_eq!(asked.len(), crate::plan::FRONTIER_RUNS_PER_BOUND as usize);
        // Eight multipliers × 3 runs > the card's cap.
        let mut open = searched();
        let many = [0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85];
        let mut phase = FrontierPhase::new(&[slo()], &many, MIN, MAX, 1e-6);
        let asked = drive(&mut phase, &mut open);
        assert_eq!(phase.targets().len(), 8);
        assert_eq!(
            asked.len(),
            crate::plan::FRONTIER_MAX_RUNS as usize,
            "{asked:?}"
        );
        for m in many {
            let n = asked.iter().filter(|(_, t)| *t == m).count();
            assert!(n <= 3, "{m}: {n} runs");
        }
    }
}
