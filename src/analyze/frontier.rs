//! The SLO frontier (pure): for each percentile latency clause of an SLO,
//! Cr_open of that clause as a function of its bound — what an SLO could be
//! negotiated to, read from the open runs already measured.
//!
//! # The fitted crossing at each bound
//!
//! Every open run counts, per batch of its window, the samples of each
//! percentile clause beyond the declared bound (`batches.beyond`, what
//! Cr_open is fitted from) and beyond each *frontier bound*
//! (`at_bounds[]`): the declared bound times each of [`multipliers`], the
//! experiment's `frontier` multipliers and always [`DEFAULT_LADDER`], so a
//! card has a curve without asking. At each bound the clause's crossing is
//! fitted over all runs at once with Cr_open's own model
//! ([`cr_open::clause_crossing`]: a logistic in ln(realized rate) of the
//! fraction beyond the bound, allowed `1 − q`; censored runs cap the
//! range), so the point at the declared bound *is* the clause's Cr_open
//! crossing, and every point has an estimate and a range at the card's
//! confidence, an end the runs do not bound left null.
//!
//! A looser bound cannot be crossed at a lower rate. Fitted independently,
//! the estimates may still dip where neighbouring bounds cross close
//! together; they are then made monotone by pooling adjacent violators
//! (equal weights, in ln of the rate) with the declared bound's estimate
//! held fixed, since it is Cr_open itself ([`FittedPoint::unadjusted_rps`]
//! keeps the fitted value, and the range is widened to hold the pooled one).
//!
//! Mean clauses and the error rate have no frontier: a mean's bound is no
//! count of samples beyond it, and the error rate has no bound in ms.
//!
//! # Before the fit: the measured frontier
//!
//! A folder whose runs carry no `at_bounds` (written before the fitted
//! frontier, and a mix's runs) keeps the measured frontier
//! ([`measured_frontiers`]): for each latency clause, the largest measured
//! rate that would pass as a function of the bound. Each open run gives a
//! point: its rate and its value of the clause's statistic (failed calls
//! counted beyond every bound, as in the verdicts). Sorted by rate, the
//! bound a rate needs is the largest value seen at that rate or below (a
//! tighter bound would fail some lower rate, and Cr_open is read below the
//! lowest failure), so the curve is monotone. A point whose own verdict was
//! inconclusive is marked: its interval straddled the bound, so its value
//! is the least certain part of the curve. A rate whose value falls on
//! failed calls (no finite value), or whose run was invalid, overloaded or
//! backlogged (it passes at no bound), ends the curve.
//!
//! # Dense where a user will negotiate
//!
//! The search's rates are chosen for the declared bounds, so the curve is
//! coarse elsewhere. `frontier 0.5 1.5` in `open` asks for more: after the
//! search, a [`FrontierPhase`] runs extra rates until, for every latency
//! clause and multiplier `m`, the crossing of the bound `m × limit` is
//! resolved: its fitted range within ± the search's precision, or (before
//! the fit) the rates either side of the measured curve's crossing within
//! it, as [`next_frontier_rate`] decides from the runs measured so far.
//! Like the search it is a pure state machine the runner drives, bounded
//! per bound and in all ([`crate::plan::frontier_max_runs`], the same bound
//! `capcard plan` counts), and deterministic in the runs it is given, so
//! `--resume` replays the same rates and finds their journals.

use serde::{Deserialize, Serialize};

use super::cr_open::{self, ClauseCrossing, RunEvidence};
use super::search::{round_rate, same_rate};
use super::slo::ClauseVerdict;
use super::{RunState, RunSummary};
use crate::config::{Slo, SloClause};
use crate::stats::crossing;

/// The bounds every card's frontier is fitted at, as multipliers of each
/// percentile clause's declared bound, whether or not `frontier` is set:
/// half and three quarters of it (what a tighter SLO costs), one and a half
/// and twice it (what a looser one buys). A handful, so the evidence each
/// run keeps stays small (20 counts per bound per clause).
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Frontier {
    pub slo: String,
    /// The clause's label, e.g. `"ttft p99 ≤ 1s"`.
    pub clause: String,
    /// By rising bound.
    pub points: Vec<FrontierPoint>,
}

impl Frontier {
    /// Whether the points are fitted crossings (else measured, a folder
    /// from before the fit).
    pub fn is_fitted(&self) -> bool {
        self.points
            .iter()
            .any(|p| matches!(p, FrontierPoint::Fitted(_)))
    }
}

/// One point of a frontier: a fitted crossing, or (a folder from before the
/// fit) the largest measured rate that passes. In results.json a fitted
/// point has `method`, a measured one `rps`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum FrontierPoint {
    Fitted(FittedPoint),
    Measured(MeasuredPoint),
}

impl FrontierPoint {
    pub fn bound_ms(&self) -> f64 {
        match self {
            FrontierPoint::Fitted(p) => p.bound_ms,
            FrontierPoint::Measured(p) => p.bound_ms,
        }
    }
}

/// The clause's crossing at one bound, fitted over all runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FittedPoint {
    /// A bound on the clause's statistic…
    pub bound_ms: f64,
    /// …as a multiple of the declared bound (1: the declared bound, where
    /// the point is the clause's Cr_open crossing).
    pub multiplier: f64,
    /// …and the rate where the fitted model meets it (tasks/s); null when
    /// the runs do not place it (all on one side of it).
    pub estimate_rps: Option<f64>,
    /// The range at the card's confidence; an end is null when no run
    /// bounds it.
    pub range: [Option<f64>; 2],
    /// As the clause's Cr_open crossing states it: `"fit"`, `"bracket"` (a
    /// cliff the model does not fit) or `"none"`.
    pub method: String,
    /// The fitted estimate, when making the frontier monotone in the bound
    /// moved it (see the module's docs).
    #[serde(default)]
    pub unadjusted_rps: Option<f64>,
}

/// The largest measured rate that meets a bound (a folder from before the
/// fit).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MeasuredPoint {
    /// A bound on the clause's statistic…
    pub bound_ms: f64,
    /// …and the largest measured rate that meets it (and every rate below).
    pub rps: f64,
    /// The run at this rate was inconclusive for its SLO.
    #[serde(default)]
    pub inconclusive: bool,
}

/// The frontier of every latency clause judged on the `open` runs (all of
/// them: repetitions, revisits and extensions are points of the fit, as
/// for Cr_open), fitted at `confidence` (the card's Cr_open confidence).
/// A clause whose runs carry no evidence at the frontier bounds gets its
/// measured frontier instead; when any run carries some, mean clauses are
/// left out.
pub fn frontiers(open: &[RunSummary], confidence: f64) -> Vec<Frontier> {
    let mut by_rate: Vec<&RunSummary> = open.iter().filter(|r| r.rate_rps.is_some()).collect();
    by_rate.sort_by(|a, b| {
        a.rate_rps
            .unwrap_or(0.0)
            .total_cmp(&b.rate_rps.unwrap_or(0.0))
    });
    let Some(first) = by_rate.first() else {
        return vec![];
    };
    let measured = measured_frontiers(&super::card::combined_per_rate(open));
    let evidence = has_frontier_evidence(open);
    let mut out = Vec::new();
    for verdict in &first.verdicts {
        for (i, clause) in verdict.clauses.iter().enumerate() {
            if clause.limit_ms.is_none() {
                continue; // the error rate has no latency bound
            }
            let fitted = ClauseRuns::of(open, &verdict.slo, i).and_then(|c| c.frontier(confidence));
            match fitted {
                Some(points) => out.push(Frontier {
                    slo: verdict.slo.clone(),
                    clause: clause.label.clone(),
                    points,
                }),
                None if evidence && percentile_of(clause).is_none() => {} // a mean
                None => out.extend(
                    measured
                        .iter()
                        .find(|f| f.slo == verdict.slo && f.clause == clause.label)
                        .cloned(),
                ),
            }
        }
    }
    out
}

/// Whether any run counted a clause at frontier bounds.
fn has_frontier_evidence(open: &[RunSummary]) -> bool {
    open.iter()
        .flat_map(|r| &r.verdicts)
        .flat_map(|v| &v.clauses)
        .any(|c| !c.at_bounds.is_empty())
}

/// A percentile clause's `q` (0.95 for `"p95"`); `None` for a mean or the
/// error rate.
fn percentile_of(clause: &ClauseVerdict) -> Option<f64> {
    clause.limit_ms?;
    let p: f64 = clause.stat.as_deref()?.strip_prefix('p')?.parse().ok()?;
    (p > 0.0 && p < 100.0).then_some(p / 100.0)
}

/// One percentile clause of one SLO over the open runs, ready to be fitted
/// at any bound every run counted.
struct ClauseRuns<'a> {
    slo: &'a str,
    index: usize,
    declared_ms: f64,
    /// Each run that judged the SLO, as Cr_open's fit sees it…
    evidence: Vec<RunEvidence>,
    /// …and its verdict on the clause, with the counts at each bound.
    clauses: Vec<&'a ClauseVerdict>,
    /// The frontier bounds every run counted, by rising bound.
    bounds_ms: Vec<f64>,
}

impl<'a> ClauseRuns<'a> {
    /// `None` when a run that judged the SLO has no evidence for the fit
    /// (a folder from before it), the clause is no percentile, or no bound
    /// was counted by every run.
    fn of(open: &'a [RunSummary], slo: &'a str, index: usize) -> Option<ClauseRuns<'a>> {
        let judged: Vec<&RunSummary> = open.iter().filter(|s| s.verdict(slo).is_some()).collect();
        let evidence: Vec<RunEvidence> = judged
            .iter()
            .map(|s| cr_open::evidence_of(s))
            .collect::<Option<_>>()?;
        let clauses: Vec<&ClauseVerdict> = judged
            .iter()
            .map(|s| s.verdict(slo)?.clauses.get(index))
            .collect::<Option<_>>()?;
        let first = clauses.first()?;
        percentile_of(first)?;
        let declared_ms = first.limit_ms?;
        let mut bounds_ms: Vec<f64> = first
            .at_bounds
            .iter()
            .map(|b| b.bound_ms)
            .filter(|&b| b.is_finite() && b > 0.0)
            .filter(|&b| {
                clauses
                    .iter()
                    .all(|c| c.at_bounds.iter().any(|x| same_bound(x.bound_ms, b)))
            })
            .collect();
        bounds_ms.sort_by(f64::total_cmp);
        bounds_ms.dedup_by(|a, b| same_bound(*a, *b));
        (!bounds_ms.is_empty()).then_some(ClauseRuns {
            slo,
            index,
            declared_ms,
            evidence,
            clauses,
            bounds_ms,
        })
    }

    /// The clause's crossing at `bound_ms`: at the declared bound, the
    /// clause's Cr_open crossing; at a frontier bound, the same fit with
    /// each run's count beyond that bound. `None` for a bound some run did
    /// not count.
    fn crossing(&self, bound_ms: f64, confidence: f64) -> Option<ClauseCrossing> {
        if same_bound(bound_ms, self.declared_ms) {
            return cr_open::clause_crossing(&self.evidence, self.slo, self.index, confidence);
        }
        let mut evidence = self.evidence.clone();
        for (run, clause) in evidence.iter_mut().zip(&self.clauses) {
            let beyond = &clause
                .at_bounds
                .iter()
                .find(|b| same_bound(b.bound_ms, bound_ms))?
                .beyond;
            let samples = clause.batches.as_ref().map(|b| &b.samples[..])?;
            let observation = crossing::count_observation(samples, beyond);
            let slot = run
                .slos
                .iter_mut()
                .find(|s| s.slo == self.slo)
                .and_then(|s| s.clauses.get_mut(self.index))?;
            slot.observation = observation;
            slot.slices = Some(cr_open::Slices {
                samples: samples.to_vec(),
                values: beyond.iter().map(|&b| b as f64).collect(),
            });
        }
        cr_open::clause_crossing(&evidence, self.slo, self.index, confidence)
    }

    /// The fitted frontier: the declared bound and every frontier bound,
    /// by rising bound, made monotone.
    fn frontier(&self, confidence: f64) -> Option<Vec<FrontierPoint>> {
        let mut bounds = self.bounds_ms.clone();
        bounds.push(self.declared_ms);
        bounds.sort_by(f64::total_cmp);
        bounds.dedup_by(|a, b| same_bound(*a, *b));
        let mut points = Vec::with_capacity(bounds.len());
        for bound_ms in bounds {
            let c = self.crossing(bound_ms, confidence)?;
            points.push(FittedPoint {
                bound_ms,
                multiplier: round_multiplier(bound_ms / self.declared_ms),
                estimate_rps: c.estimate_rps,
                range: c.range,
                method: c.method,
                unadjusted_rps: None,
            });
        }
        let anchor = points
            .iter()
            .position(|p| same_bound(p.bound_ms, self.declared_ms));
        make_monotone(&mut points, anchor);
        Some(points.into_iter().map(FrontierPoint::Fitted).collect())
    }
}

/// A multiplier as written (`0.75`, not `0.7500000000000001`).
fn round_multiplier(m: f64) -> f64 {
    (m * 1e6).round() / 1e6
}

/// Make the estimates of `points` (by rising bound) non-decreasing: pool
/// adjacent violators in ln of the rate, equal weights, the point at
/// `anchor` (the declared bound: Cr_open itself) held fixed. A moved
/// estimate keeps its fitted value in `unadjusted_rps`, and its range
/// widens to hold the new one. Points without an estimate are left alone.
pub fn make_monotone(points: &mut [FittedPoint], anchor: Option<usize>) {
    struct Block {
        sum: f64,
        count: f64,
        /// The anchor's value, when the block holds it.
        fixed: Option<f64>,
        members: Vec<usize>,
    }
    impl Block {
        fn value(&self) -> f64 {
            self.fixed.unwrap_or(self.sum / self.count)
        }
    }
    let mut blocks: Vec<Block> = Vec::new();
    for (i, p) in points.iter().enumerate() {
        let Some(x) = p
            .estimate_rps
            .filter(|e| e.is_finite() && *e > 0.0)
            .map(f64::ln)
        else {
            continue;
        };
        blocks.push(Block {
            sum: x,
            count: 1.0,
            fixed: (anchor == Some(i)).then_some(x),
            members: vec![i],
        });
        while blocks.len() >= 2 {
            let n = blocks.len();
            if blocks[n - 2].value() <= blocks[n - 1].value() + 1e-12 {
                break;
            }
            let Some(last) = blocks.pop() else { break };
            let Some(prev) = blocks.last_mut() else { break };
            prev.sum += last.sum;
            prev.count += last.count;
            prev.fixed = prev.fixed.or(last.fixed);
            prev.members.extend(last.members);
        }
    }
    for block in &blocks {
        let value = block.value().exp();
        for &i in &block.members {
            let p = &mut points[i];
            let Some(fitted) = p.estimate_rps else {
                continue;
            };
            if same_bound(fitted, value) {
                continue;
            }
            p.unadjusted_rps = Some(fitted);
            p.estimate_rps = Some(value);
            p.range = [
                p.range[0].map(|lo| lo.min(value)),
                p.range[1].map(|hi| hi.max(value)),
            ];
        }
    }
}

/// The measured frontier of every latency clause judged on the `open` runs
/// (one summary per rate, repetitions combined): a folder's frontier from
/// before the fit.
pub fn measured_frontiers(open: &[RunSummary]) -> Vec<Frontier> {
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
            let mut points: Vec<MeasuredPoint> = Vec::new();
            let mut needed: f64 = 0.0;
            for run in &runs {
                let Some(v) = run.verdict(&verdict.slo) else {
                    continue;
                };
                let Some(value) = v.clauses.get(i).and_then(|c| c.observed_ms) else {
                    break; // beyond every bound: no rate from here on can pass
                };
                // An overloaded or backlogged run passes at no bound.
                if !run.measures_replica() || run.state != RunState::Stable {
                    break;
                }
                needed = needed.max(value);
                let point = MeasuredPoint {
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
                    points: points.into_iter().map(FrontierPoint::Measured).collect(),
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
/// (every run: repetitions and revisits are points of the fit), or `None`
/// when every target is resolved. Targets are served in order; see
/// [`wanted_rate`].
pub fn next_frontier_rate(
    open: &[RunSummary],
    targets: &[FrontierTarget],
    min_rps: f64,
    max_rps: f64,
    precision: f64,
    confidence: f64,
) -> Option<f64> {
    targets
        .iter()
        .find_map(|t| wanted_rate(open, t, min_rps, max_rps, precision, confidence))
}

/// The rate `target` wants next, `None` once it is resolved.
///
/// When the runs carry evidence at the target's bound, the clause's
/// crossing there is fitted (at `confidence`, as the card's frontier is):
/// the target is resolved once the range is within ±`precision` of the
/// estimate. Otherwise it wants the estimate (rounded), then a step either
/// side of it (half the range's half-width, within [`precision`, 25%], the
/// wider side of the range first); with every run within the bound,
/// twice the highest rate (capped at `max`; `max` itself within resolves
/// it); with every run beyond it, half the lowest (floored at `min`). A
/// mean clause has no fitted frontier: resolved at once.
///
/// Without that evidence (a folder from before the fit), today's rule on
/// the measured curve, per rate ([`super::card::combined_per_rate`]): on
/// the curve of the clause (each rate's value, +∞ for a run that is
/// invalid, overloaded, backlogged or whose value falls on failed calls,
/// then the running maximum by rate, as [`measured_frontiers`] reads it),
/// `lo` is the highest rate whose value is within the bound and `hi` the
/// lowest beyond it. No `lo`: halve below the lowest rate (floored at
/// `min`); no `hi`: double above the highest (capped at `max`); both: the
/// rounded midpoint while `hi` is more than `precision` above `lo`.
///
/// Either way a rate already run (after rounding, as the search compares
/// rates) is never asked for again: its run id would be the one run's.
pub fn wanted_rate(
    open: &[RunSummary],
    target: &FrontierTarget,
    min_rps: f64,
    max_rps: f64,
    precision: f64,
    confidence: f64,
) -> Option<f64> {
    let tried = |rate: f64| {
        open.iter()
            .any(|r| r.rate_rps.is_some_and(|x| same_rate(x, rate)))
    };
    if has_frontier_evidence(open) {
        let clause = open
            .iter()
            .find_map(|r| r.verdict(&target.slo)?.clauses.get(target.clause));
        if clause.is_some_and(|c| percentile_of(c).is_none()) {
            return None; // a mean: the fitted frontier leaves it out
        }
        let fit = ClauseRuns::of(open, &target.slo, target.clause)
            .and_then(|runs| runs.crossing(target.bound_ms, confidence));
        if let Some(fit) = fit {
            let judged_rates: Vec<f64> = open
                .iter()
                .filter(|r| r.verdict(&target.slo).is_some())
                .filter_map(|r| r.rate_rps)
                .collect();
            return fitted_candidates(&fit, &judged_rates, min_rps, max_rps, precision)
                .into_iter()
                .find(|&rate| !tried(rate));
        }
    }
    let candidate = measured_candidate(
        &super::card::combined_per_rate(open),
        target,
        min_rps,
        max_rps,
        precision,
    )?;
    (!tried(candidate)).then_some(candidate)
}

/// The rates a fitted crossing wants, best first (see [`wanted_rate`]);
/// empty once it is resolved. `rates`: the nominal rates of the runs that
/// judged the SLO.
fn fitted_candidates(
    fit: &ClauseCrossing,
    rates: &[f64],
    min_rps: f64,
    max_rps: f64,
    precision: f64,
) -> Vec<f64> {
    let place = |rate: f64| {
        if rate >= max_rps {
            max_rps
        } else if rate <= min_rps {
            min_rps
        } else {
            round_rate(rate)
        }
    };
    let half_width = |e: f64| match fit.range {
        [Some(lo), Some(hi)] if e > 0.0 => Some(((e - lo) / e).max((hi - e) / e)),
        _ => None,
    };
    let centre = fit.estimate_rps.or(match fit.range {
        [Some(lo), Some(hi)] => Some((lo * hi).sqrt()),
        _ => None,
    });
    match (centre, fit.range) {
        (Some(e), [lo, hi]) if e.is_finite() && e > 0.0 => {
            let half = half_width(e);
            if half.is_some_and(|h| h <= precision + 1e-9) {
                return vec![]; // resolved
            }
            let step = half.map_or(0.25, |h| (h / 2.0).clamp(precision.min(0.25), 0.25));
            // Runs on the side where the range is wider narrow it most.
            let above_first = match (lo, hi) {
                (_, None) => true,
                (None, Some(_)) => false,
                (Some(l), Some(h)) => h / e - 1.0 >= 1.0 - l / e,
            };
            let (first, second) = if above_first {
                (e * (1.0 + step), e * (1.0 - step))
            } else {
                (e * (1.0 - step), e * (1.0 + step))
            };
            vec![place(e), place(first), place(second)]
        }
        // Every run within the bound: double above the highest.
        (_, [Some(_), None]) => {
            let highest = rates.iter().copied().fold(0.0, f64::max);
            if highest <= 0.0 || highest >= max_rps * (1.0 - 1e-9) {
                return vec![]; // `max` meets it
            }
            vec![place(highest * 2.0)]
        }
        // Every run beyond it: halve below the lowest.
        (_, [None, Some(_)]) => {
            let lowest = rates.iter().copied().fold(f64::INFINITY, f64::min);
            if !lowest.is_finite() || lowest <= min_rps * (1.0 + 1e-9) {
                return vec![]; // even `min` needs a looser bound
            }
            vec![place(lowest / 2.0)]
        }
        _ => vec![], // nothing measured the clause
    }
}

/// Today's rule on the measured curve (see [`wanted_rate`]), before the
/// check that the rate was not run already.
fn measured_candidate(
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
    match (lo, hi) {
        (None, None) => None, // no run judged this clause
        (None, Some(&(lowest, _))) => {
            if lowest <= min_rps * (1.0 + 1e-9) {
                return None; // even `min` needs a looser bound
            }
            Some(if lowest / 2.0 <= min_rps {
                min_rps
            } else {
                round_rate(lowest / 2.0)
            })
        }
        (Some(&(highest, _)), None) => {
            if highest >= max_rps * (1.0 - 1e-9) {
                return None; // `max` meets it
            }
            Some(if highest * 2.0 >= max_rps {
                max_rps
            } else {
                round_rate(highest * 2.0)
            })
        }
        (Some(&(lo, _)), Some(&(hi, _))) => {
            if (hi - lo) / lo <= precision + 1e-12 {
                return None;
            }
            let mid = round_rate((lo + hi) / 2.0);
            (mid > lo && mid < hi).then_some(mid)
        }
    }
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
/// let mut phase = FrontierPhase::new(&slos, &multipliers, min, max, precision, confidence);
/// while let Some((rate, _target)) = phase.next_rate(&open) {
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
    confidence: f64,
}

impl FrontierPhase {
    /// `min`/`max`, `precision` and `confidence` are the search's.
    pub fn new(
        slos: &[Slo],
        multipliers: &[f64],
        min: f64,
        max: f64,
        precision: f64,
        confidence: f64,
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
            confidence: if confidence > 0.0 && confidence < 1.0 {
                confidence
            } else {
                cr_open::DEFAULT_CONFIDENCE
            },
        }
    }

    pub fn targets(&self) -> &[FrontierTarget] {
        &self.targets
    }

    /// The next rate to run and the target that wants it, counted against
    /// the caps; `None` when every target is resolved or out of runs.
    /// `open`: the card's open runs so far, every one of them.
    pub fn next_rate(&mut self, open: &[RunSummary]) -> Option<(f64, &FrontierTarget)> {
        if self.total >= self.max_total {
            return None;
        }
        let (index, rate) = self.targets.iter().enumerate().find_map(|(i, t)| {
            if self.asked[i] >= crate::plan::FRONTIER_RUNS_PER_BOUND {
                return None;
            }
            wanted_rate(
                open,
                t,
                self.min_rps,
                self.max_rps,
                self.precision,
                self.confidence,
            )
            .map(|r| (i, r))
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
        let f = measured_frontiers(&runs);
        assert_eq!(f.len(), 1, "the error rate has no frontier");
        assert_eq!(
            (f[0].slo.as_str(), f[0].clause.as_str()),
            ("chat", "ttft p99 ≤ 1s")
        );
        let pts: Vec<(f64, f64, bool)> = f[0]
            .points
            .iter()
            .filter_map(|p| match p {
                FrontierPoint::Measured(p) => Some((p.bound_ms, p.rps, p.inconclusive)),
                FrontierPoint::Fitted(_) => None,
            })
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
            let f = measured_frontiers(&[run(2.0, Some(90.0), Verdict::Pass), over]);
            assert_eq!(f[0].points.len(), 1, "{state:?}");
        }
        assert!(measured_frontiers(&[]).is_empty());
        assert!(frontiers(&[], 0.9).is_empty());
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
    const CONF: f64 = 0.9;

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
            next_frontier_rate(&open, &[target(0.5)], MIN, MAX, PRECISION, CONF),
            Some(6.0)
        );
        // 0.2 s: between 2 (100 ms) and 4 (300 ms).
        assert_eq!(
            next_frontier_rate(&open, &[target(0.2)], MIN, MAX, PRECISION, CONF),
            Some(3.0)
        );
        // Within precision: resolved.
        let mut fine = open.clone();
        fine.push(run(4.3, Some(520.0)));
        fine.push(run(4.1, Some(450.0)));
        assert_eq!(
            next_frontier_rate(&fine, &[target(0.5)], MIN, MAX, PRECISION, CONF),
            None,
            "4.1 within, 4.3 beyond: 4.9% apart"
        );
    }

    #[test]
    fn halves_below_and_doubles_above_within_min_and_max() {
        let open = searched();
        // 50 ms: even 2 rps needs 100 ms.
        assert_eq!(
            next_frontier_rate(&open, &[target(0.05)], MIN, MAX, PRECISION, CONF),
            Some(1.0)
        );
        assert_eq!(
            next_frontier_rate(&open, &[target(0.05)], 1.5, MAX, PRECISION, CONF),
            Some(1.5),
            "floored at min"
        );
        assert_eq!(
            next_frontier_rate(&open, &[target(0.05)], 2.0, MAX, PRECISION, CONF),
            None,
            "min itself needs more"
        );
        // Without a failure the top of the curve is open: double.
        let passing = &open[..3];
        assert_eq!(
            next_frontier_rate(passing, &[target(2.0)], MIN, MAX, PRECISION, CONF),
            Some(16.0)
        );
        assert_eq!(
            next_frontier_rate(passing, &[target(2.0)], MIN, 12.0, PRECISION, CONF),
            Some(12.0),
            "capped at max"
        );
        assert_eq!(
            next_frontier_rate(passing, &[target(2.0)], MIN, 8.0, PRECISION, CONF),
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
                next_frontier_rate(&open, &[target(0.5)], MIN, MAX, PRECISION, CONF),
                Some(5.0),
                "{state:?}: 6 rps is beyond the bound"
            );
        }
        let mut open = searched();
        let mut invalid = run(6.0, Some(350.0));
        invalid.invalid = true;
        open.push(invalid);
        assert_eq!(
            next_frontier_rate(&open, &[target(0.5)], MIN, MAX, PRECISION, CONF),
            Some(5.0)
        );
        // A lower value above a higher one needs the higher (monotone).
        let mut open = searched();
        open.push(run(6.0, Some(250.0)));
        assert_eq!(
            next_frontier_rate(&open, &[target(0.5)], MIN, MAX, PRECISION, CONF),
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
            next_frontier_rate(&open, &[target(0.5)], MIN, MAX, PRECISION, CONF),
            None
        );
        // The next target is served instead.
        assert_eq!(
            next_frontier_rate(
                &open,
                &[target(0.5), target(0.2)],
                MIN,
                MAX,
                PRECISION,
                CONF
            ),
            Some(3.0)
        );
        // A midpoint that rounds onto an end is as fine as rates go.
        let close = vec![run(4.0, Some(300.0)), run(4.01, Some(900.0))];
        assert_eq!(
            next_frontier_rate(&close, &[target(0.5)], MIN, MAX, 1e-6, CONF),
            None
        );
        assert_eq!(
            next_frontier_rate(&[], &[target(0.5)], MIN, MAX, PRECISION, CONF),
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
        let mut phase = FrontierPhase::new(&[slo()], &[0.35, 0.75], MIN, MAX, 0.25, CONF);
        let asked = drive(&mut phase, &mut open);
        // The search left 2, 4, 8 (200, 400, 800 ms) and 16 (beyond).
        // 350 ms: between 2 and 4 → 3 (300 ms, within), then 3.5 (350 ms,
        // within), 3.5..4 is 14% apart. 750 ms: between 4 and 8 → 6 (600 ms),
        // then 7 (700 ms); 7..8 is 14% apart.
        assert_eq!(asked, [(3.0, 0.35), (3.5, 0.35), (6.0, 0.75), (7.0, 0.75)]);
        let f = measured_frontiers(&open);
        let at = |bound_ms: f64| {
            f[0].points.iter().rev().find_map(|p| match p {
                FrontierPoint::Measured(p) if p.bound_ms <= bound_ms => Some(p.rps),
                _ => None,
            })
        };
        assert_eq!(at(350.0), Some(3.5));
        assert_eq!(at(750.0), Some(7.0));

        // Deterministic: the same runs, the same rates (what --resume needs).
        let mut again: Vec<RunSummary> = [2.0, 4.0, 8.0, 16.0].map(oracle).to_vec();
        let mut phase = FrontierPhase::new(&[slo()], &[0.35, 0.75], MIN, MAX, 0.25, CONF);
        assert_eq!(drive(&mut phase, &mut again), asked);
    }

    #[test]
    fn the_phase_stops_at_its_caps() {
        // A precision no run count reaches: each bound takes its 3 runs.
        let mut open = searched();
        let mut phase = FrontierPhase::new(&[slo()], &[0.35], MIN, MAX, 1e-6, CONF);
        let asked = drive(&mut phase, &mut open);
        assert_eq!(asked.len(), crate::plan::FRONTIER_RUNS_PER_BOUND as usize);
        // Eight multipliers × 3 runs > the card's cap.
        let mut open = searched();
        let many = [0.15, 0.25, 0.35, 0.45, 0.55, 0.65, 0.75, 0.85];
        let mut phase = FrontierPhase::new(&[slo()], &many, MIN, MAX, 1e-6, CONF);
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

#[cfg(test)]
mod fit_tests {
    use std::time::Duration;

    use super::*;
    use crate::analyze::slo::{BoundBatches, ClauseBatches};
    use crate::analyze::{SloVerdict, Verdict};
    use crate::config::LatencyMetric;
    use crate::stats::interval::BATCHES;

    /// `s`: ttft p90 ≤ 400 ms.
    const DECLARED_MS: f64 = 400.0;
    const CONF: f64 = 0.9;

    fn slo() -> Slo {
        Slo {
            name: "s".into(),
            span: None,
            clauses: vec![SloClause::Latency {
                metric: LatencyMetric::Ttft,
                stat: crate::config::Stat::Percentile(90.0),
                limit: Duration::from_millis(400),
            }],
        }
    }

    /// A queue whose TTFT is exponential with mean 50 / (1 − λ/20) ms: the
    /// share beyond `B` is exp(−B / mean), and the p90 bound `B` is met up
    /// to λ* = 20·(1 − 50·ln 10 / B) (8.49 rps at 200 ms, 14.2 at 400 ms,
    /// 17.1 at 800 ms).
    fn beyond_share(rate: f64, bound_ms: f64) -> f64 {
        let mean_ms = 50.0 / (1.0 - rate / 20.0).max(1e-6);
        (-bound_ms / mean_ms).exp()
    }

    fn truth(bound_ms: f64) -> f64 {
        20.0 * (1.0 - 50.0 * 10f64.ln() / bound_ms)
    }

    /// An open run at `rate` with 100 calls per batch, counted beyond the
    /// declared bound and each of `multipliers` of it (the expected count,
    /// a little noise from batch to batch so the batches vary).
    fn run(rate: f64, multipliers: &[f64]) -> RunSummary {
        run_of(rate, multipliers, 100)
    }

    /// [`run`] with `per_batch` calls per batch.
    fn run_of(rate: f64, multipliers: &[f64], per_batch: u64) -> RunSummary {
        let n = per_batch as f64;
        // Rounded cumulatively, so the run's total is its expected count
        // however few calls a batch holds.
        let counts = |bound_ms: f64| -> Vec<u64> {
            let p = beyond_share(rate, bound_ms);
            let mut expected = 0.0;
            let mut counted = 0.0;
            (0..BATCHES)
                .map(|b| {
                    let wobble = if b % 2 == 0 { 0.9 } else { 1.1 };
                    expected += (n * p * wobble).min(n);
                    let now = expected.round() - counted;
                    counted += now;
                    now as u64
                })
                .collect()
        };
        RunSummary {
            run_id: format!("r{rate}"),
            rate_rps: Some(rate),
            verdicts: vec![SloVerdict {
                slo: "s".into(),
                verdict: Verdict::Pass,
                clauses: vec![ClauseVerdict {
                    label: "ttft p90 ≤ 400ms".into(),
                    metric: "ttft".into(),
                    stat: Some("p90".into()),
                    limit_ms: Some(DECLARED_MS),
                    samples: per_batch * BATCHES as u64,
                    batches: Some(ClauseBatches {
                        samples: vec![per_batch; BATCHES],
                        beyond: counts(DECLARED_MS),
                        sums_ms: vec![],
                    }),
                    at_bounds: multipliers
                        .iter()
                        .map(|m| BoundBatches {
                            bound_ms: m * DECLARED_MS,
                            beyond: counts(m * DECLARED_MS),
                        })
                        .collect(),
                    ..ClauseVerdict::default()
                }],
                ..SloVerdict::default()
            }],
            ..RunSummary::default()
        }
    }

    fn runs(rates: &[f64]) -> Vec<RunSummary> {
        let ladder = multipliers(&[]);
        rates.iter().map(|&r| run(r, &ladder)).collect()
    }

    fn fitted(f: &Frontier) -> Vec<&FittedPoint> {
        f.points
            .iter()
            .map(|p| match p {
                FrontierPoint::Fitted(p) => p,
                FrontierPoint::Measured(p) => panic!("measured: {p:?}"),
            })
            .collect()
    }

    const RATES: [f64; 11] = [
        4.0, 6.0, 8.0, 10.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0, 18.0,
    ];

    #[test]
    fn multipliers_are_the_ladder_and_the_asked_each_once() {
        assert_eq!(multipliers(&[]), DEFAULT_LADDER);
        assert_eq!(
            multipliers(&[2.0, 0.6, 1.0, 0.5]),
            [0.5, 0.6, 0.75, 1.5, 2.0],
            "sorted, 1 and repeats left out"
        );
    }

    #[test]
    fn the_declared_bound_is_the_clauses_cr_open_crossing() {
        let open = runs(&RATES);
        let f = frontiers(&open, CONF);
        assert_eq!(f.len(), 1);
        let points = fitted(&f[0]);
        let got: Vec<f64> = points.iter().map(|p| p.multiplier).collect();
        assert_eq!(got, [0.5, 0.75, 1.0, 1.5, 2.0]);
        let cr = crate::analyze::search::cr_open(&open, "s", None, None, CONF);
        let clause = &cr.clauses[0];
        let declared = points[2];
        assert_eq!(declared.bound_ms, DECLARED_MS);
        assert_eq!(
            (
                declared.estimate_rps,
                declared.range,
                declared.method.as_str()
            ),
            (clause.estimate_rps, clause.range, clause.method.as_str())
        );
        assert_eq!(declared.unadjusted_rps, None, "the declared bound is held");
        // And the model finds the queue's crossing at every bound.
        for p in &points {
            let e = p
                .estimate_rps
                .expect("every bound is crossed between the rates");
            let t = truth(p.bound_ms);
            assert!((e - t).abs() / t < 0.08, "{} ms: {e} vs {t}", p.bound_ms);
            assert!(p.range[0].is_some_and(|lo| lo <= e) && p.range[1].is_some_and(|hi| hi >= e));
        }
    }

    #[test]
    fn a_looser_bound_allows_at_least_as_high_a_rate() {
        let f = frontiers(&runs(&RATES), CONF);
        let points = fitted(&f[0]);
        assert!(points.windows(2).all(|w| w[0].bound_ms < w[1].bound_ms));
        let estimates: Vec<f64> = points.iter().filter_map(|p| p.estimate_rps).collect();
        assert_eq!(estimates.len(), 5);
        assert!(estimates.windows(2).all(|w| w[0] <= w[1]), "{estimates:?}");
        // A bound no run meets: an upper end only, never an invented estimate.
        let low = frontiers(&runs(&[12.0, 14.0, 16.0]), CONF);
        let tightest = fitted(&low[0])[0];
        assert_eq!(tightest.estimate_rps, None, "{tightest:?}");
        assert_eq!(tightest.range[0], None);
        assert!(tightest.range[1].is_some());
    }

    fn point(bound_ms: f64, estimate: Option<f64>) -> FittedPoint {
        FittedPoint {
            bound_ms,
            multiplier: bound_ms / 100.0,
            estimate_rps: estimate,
            range: [estimate.map(|e| e * 0.98), estimate.map(|e| e * 1.02)],
            method: "fit".into(),
            unadjusted_rps: None,
        }
    }

    #[test]
    fn violators_are_pooled_around_the_declared_bound() {
        // 13 at 75 ms above the declared 12 at 100 ms: held to 12.
        let mut points = vec![
            point(50.0, Some(10.0)),
            point(75.0, Some(13.0)),
            point(100.0, Some(12.0)),
            point(150.0, Some(12.5)),
            point(200.0, Some(14.0)),
        ];
        make_monotone(&mut points, Some(2));
        let estimates: Vec<Option<f64>> = points.iter().map(|p| p.estimate_rps).collect();
        assert_eq!(
            estimates,
            [Some(10.0), Some(12.0), Some(12.0), Some(12.5), Some(14.0)]
        );
        assert_eq!(points[1].unadjusted_rps, Some(13.0));
        assert_eq!(
            points[1].range[0],
            Some(12.0),
            "the range holds the pooled estimate"
        );
        assert!(
            points
                .iter()
                .enumerate()
                .all(|(i, p)| i == 1 || p.unadjusted_rps.is_none())
        );

        // Without an anchor, the violators meet in the middle (in ln);
        // a point without an estimate is left alone.
        let mut free = vec![
            point(50.0, Some(13.0)),
            point(75.0, None),
            point(100.0, Some(12.0)),
        ];
        make_monotone(&mut free, None);
        let middle = (13.0f64 * 12.0).sqrt();
        assert!((free[0].estimate_rps.unwrap() - middle).abs() < 1e-9);
        assert!((free[2].estimate_rps.unwrap() - middle).abs() < 1e-9);
        assert_eq!(free[1].estimate_rps, None);
    }

    #[test]
    fn old_and_new_points_read_back() {
        // A results.json from before the fit: measured points.
        let old: Frontier = serde_json::from_str(
            r#"{"slo": "s", "clause": "ttft p90 ≤ 400ms",
                "points": [{"bound_ms": 52.0, "rps": 2.0},
                           {"bound_ms": 96.0, "rps": 4.0, "inconclusive": true}]}"#,
        )
        .expect("an old frontier parses");
        assert!(!old.is_fitted());
        assert_eq!(
            old.points[1],
            FrontierPoint::Measured(MeasuredPoint {
                bound_ms: 96.0,
                rps: 4.0,
                inconclusive: true
            })
        );
        // A fitted point keeps its nulls: nothing is invented for them.
        let new = Frontier {
            slo: "s".into(),
            clause: "ttft p90 ≤ 400ms".into(),
            points: vec![FrontierPoint::Fitted(FittedPoint {
                range: [None, Some(4.0)],
                ..point(50.0, None)
            })],
        };
        let text = serde_json::to_string(&new).expect("serializes");
        assert!(
            text.contains(r#""estimate_rps":null,"range":[null,4.0],"method":"fit""#),
            "{text}"
        );
        assert_eq!(serde_json::from_str::<Frontier>(&text).ok(), Some(new));
    }

    #[test]
    fn runs_without_frontier_evidence_keep_the_measured_frontier() {
        let mut open = runs(&RATES);
        for r in &mut open {
            for c in &mut r.verdicts[0].clauses {
                c.at_bounds.clear();
                c.observed_ms = Some(30.0 * r.rate_rps.unwrap_or(0.0));
            }
        }
        let f = frontiers(&open, CONF);
        assert_eq!(f.len(), 1);
        assert!(!f[0].is_fitted());
        assert_eq!(f[0], measured_frontiers(&open)[0]);
    }

    /// The phase on a fitted frontier: each asked bound is resolved (its
    /// range within the precision) or its runs are spent, deterministically.
    #[test]
    fn the_phase_narrows_each_fitted_bound() {
        let asked = [0.6, 1.25];
        let counted = multipliers(&asked);
        // Short runs (200 calls): the search's runs leave wide ranges.
        let oracle = |rate: f64| run_of(rate, &counted, 10);
        let drive = || {
            let mut open: Vec<RunSummary> = [4.0, 8.0, 16.0, 18.0].map(oracle).to_vec();
            let mut phase = FrontierPhase::new(&[slo()], &asked, 1.0, 19.0, 0.05, CONF);
            let mut rates = Vec::new();
            while let Some((rate, target)) = phase.next_rate(&open) {
                rates.push((rate, target.multiplier));
                open.push(oracle(rate));
            }
            (rates, open)
        };
        let (rates, open) = drive();
        assert!(!rates.is_empty());
        assert!(rates.len() as u32 <= crate::plan::frontier_max_runs(2));
        assert_eq!(drive().0, rates, "the same runs, the same rates");
        for target in frontier_targets(&[slo()], &asked) {
            let spent = rates.iter().filter(|r| r.1 == target.multiplier).count() as u32;
            let fit = ClauseRuns::of(&open, "s", 0)
                .and_then(|c| c.crossing(target.bound_ms, CONF))
                .expect("a fitted crossing");
            let e = fit.estimate_rps.expect("placed");
            let t = truth(target.bound_ms);
            assert!((e - t).abs() / t < 0.08, "{}: {e} vs {t}", target.bound_ms);
            assert!(
                spent >= crate::plan::FRONTIER_RUNS_PER_BOUND
                    || wanted_rate(&open, &target, 1.0, 19.0, 0.05, CONF).is_none(),
                "{target:?}: {rates:?} {fit:?}"
            );
        }
        // The frontier then has a point at each asked bound.
        let f = frontiers(&open, CONF);
        let bounds: Vec<f64> = fitted(&f[0]).iter().map(|p| p.multiplier).collect();
        assert_eq!(bounds, [0.5, 0.6, 0.75, 1.0, 1.25, 1.5, 2.0]);
    }
}
