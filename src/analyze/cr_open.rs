//! Cr_open from one model across all runs (pure): each open run's evidence
//! per SLO clause ([`RunEvidence`], read from its summary), every clause's
//! crossing fitted over all runs at once ([`crate::stats::crossing`]), and
//! the SLO's Cr_open as the smallest crossing, with its range ([`fit`]).
//! The search, the card, sizing, `diff` and `tune` read this one result;
//! none of them re-derives a verdict.
//!
//! A run at a rate visited twice, a repetition and an extension are each
//! one more point of the same fit: their samples add up. A run that could
//! not keep up (overloaded, backlogged, invalid, capped by a quota) shows
//! only that its rate is above the crossing: it is *censored*, caps the
//! range and never bends the curve.

use serde::{Deserialize, Serialize};

use super::{RunState, RunSummary};
use crate::stats::crossing::{self, Bound, Method, Observation, Point, Side};
use crate::stats::interval::{normal_quantile, proportion_interval};

/// The confidence of the Cr_open range unless `search ... confidence=`
/// says otherwise.
pub const DEFAULT_CONFIDENCE: f64 = 0.9;

/// One open run as the fit sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEvidence {
    pub run_id: String,
    /// The rate asked for (tasks/s).
    pub rate_rps: f64,
    /// Arrivals scheduled in the measured window over its length: the
    /// load the run really offered (a Poisson window's count strays ±7%
    /// from its rate in a few hundred arrivals).
    pub realized_rps: f64,
    /// Why the run only shows that its rate is above the crossing
    /// (`"overloaded"`, `"backlogged"`, `"invalid"`, `"rate-limited"`).
    pub censored: Option<String>,
    pub slos: Vec<SloObservations>,
}

/// One SLO's clauses on one run.
#[derive(Debug, Clone, PartialEq)]
pub struct SloObservations {
    pub slo: String,
    pub clauses: Vec<ClauseObservation>,
}

/// One clause on one run: what it allows and what the run showed.
#[derive(Debug, Clone, PartialEq)]
pub struct ClauseObservation {
    /// `"ttft p90 ≤ 250ms"`.
    pub label: String,
    pub bound: Bound,
    /// `None` when the run measured nothing for it.
    pub observation: Option<Observation>,
    /// The counts per slice of the window it was read from (`None` for
    /// evidence built without them): the fit drops a settling start from
    /// every run at once ([`settling_slices`]).
    pub slices: Option<Slices>,
}

/// A clause's counts per slice of a run's window: calls, and calls beyond
/// the bound (a count clause) or their sum in ms (a mean).
#[derive(Debug, Clone, PartialEq)]
pub struct Slices {
    pub samples: Vec<u64>,
    pub values: Vec<f64>,
}

impl Slices {
    /// The clause's observation from slice `from` on.
    fn observation_from(&self, bound: Bound, from: usize) -> Option<Observation> {
        let from = from.min(self.samples.len());
        match bound {
            Bound::Fraction(_) => {
                let beyond: Vec<u64> = self.values[from..]
                    .iter()
                    .map(|&v| v.round() as u64)
                    .collect();
                crossing::count_observation(&self.samples[from..], &beyond)
            }
            Bound::Mean(_) => {
                crossing::mean_observation(&self.samples[from..], &self.values[from..])
            }
        }
    }
}

impl RunEvidence {
    fn clauses(&self, slo: &str) -> Option<&[ClauseObservation]> {
        self.slos
            .iter()
            .find(|s| s.slo == slo)
            .map(|s| &s.clauses[..])
    }
}

/// The evidence of an open run, `None` for a closed run, or for one whose
/// verdicts carry no batches (a folder written before the fit): such a
/// folder's Cr_open comes from its verdicts.
pub fn evidence_of(summary: &RunSummary) -> Option<RunEvidence> {
    let rate_rps = summary.rate_rps?;
    let realized_rps = realized_rps(summary)?;
    let censored = censored_because(summary);
    let mut slos = Vec::new();
    for verdict in &summary.verdicts {
        if verdict.clauses.is_empty() {
            return None;
        }
        let mut clauses = Vec::new();
        for clause in &verdict.clauses {
            let batches = clause.batches.as_ref()?;
            let bound = clause_bound(clause)?;
            let observation = match bound {
                Bound::Fraction(_) => {
                    crossing::count_observation(&batches.samples, &batches.beyond)
                }
                Bound::Mean(_) => crossing::mean_observation(&batches.samples, &batches.sums_ms),
            };
            let values: Vec<f64> = match bound {
                Bound::Fraction(_) => batches.beyond.iter().map(|&b| b as f64).collect(),
                Bound::Mean(_) => batches.sums_ms.clone(),
            };
            clauses.push(ClauseObservation {
                label: clause.label.clone(),
                bound,
                observation,
                slices: (values.len() == batches.samples.len()).then(|| Slices {
                    samples: batches.samples.clone(),
                    values,
                }),
            });
        }
        slos.push(SloObservations {
            slo: verdict.slo.clone(),
            clauses,
        });
    }
    Some(RunEvidence {
        run_id: summary.run_id.clone(),
        rate_rps,
        realized_rps,
        censored: censored.map(str::to_string),
        slos,
    })
}

/// An open run's realized arrival rate: arrivals scheduled in its measured
/// window over its length (the nominal rate when the run kept no count).
pub fn realized_rps(summary: &RunSummary) -> Option<f64> {
    let rate = summary.rate_rps?;
    Some(match summary.offered {
        Some(offered) if summary.window_s > 0.0 && offered > 0 => offered as f64 / summary.window_s,
        _ => rate,
    })
}

/// Why a run only shows that its rate is above the crossing (it could not
/// keep up, or measured something other than the replica); `None` for a
/// run that measured.
pub fn censored_because(summary: &RunSummary) -> Option<&'static str> {
    if summary.invalid {
        Some("invalid")
    } else if summary.rate_limited_calls > 0 {
        Some("rate-limited")
    } else if summary.decided.is_some() {
        // Stopped when its counts were decisive: the test that stopped it
        // says it lies beyond the crossing, and it caps the range (below
        // the fitted crossing, see `fit_clause`).
        Some(DECIDED_EARLY)
    } else {
        match summary.state {
            RunState::Overloaded => Some("overloaded"),
            RunState::Backlogged => Some(BACKLOGGED),
            RunState::Stable => None,
        }
    }
}

/// Why a run was flagged by a trend test alone (calls in flight or TTFT
/// rising through its window): the one reason the run's own counts can
/// overrule (see [`censored_for`]).
pub const BACKLOGGED: &str = "backlogged";
/// Why a run the watch stopped once it was decisively beyond is censored.
pub const DECIDED_EARLY: &str = "decided early";

/// Whether `run` is censored for one clause, which it observed as
/// `observation` against `bound`. Overloaded (arrivals left unfinished),
/// invalid, rate-limited and decided early: always, whatever the counts.
/// Backlogged alone is a trend test over a short window, and a queue's
/// wander trips it well below saturation (seen at 67% utilisation); one
/// such run censored below the fitted crossing collapsed the range to a
/// bracket at the lowest rates tried. A backlogged run still carries its
/// counts, and a queue that is truly filling shows it there: it is
/// censored for the clause only when its own counts put the clause
/// beyond the bound at the one-sided level of the range's `confidence`
/// (its interval's lower end above what is allowed), or when it measured
/// nothing of it. Otherwise its counts are a point of the fit like any
/// other run's (a point beyond the bound by its fraction pulls the
/// crossing down as a cap would, without cutting the range).
pub fn censored_for(
    run: &RunEvidence,
    observation: Option<Observation>,
    bound: Bound,
    confidence: f64,
) -> bool {
    match run.censored.as_deref() {
        None => false,
        Some(BACKLOGGED) => observation
            .and_then(|o| crossing::side(o, bound, confidence))
            .is_none_or(|side| side == Side::Beyond),
        Some(_) => true,
    }
}

/// The highest realized rate of the runs that measured (not censored).
pub fn highest_measured_rps<'r>(runs: impl IntoIterator<Item = &'r RunEvidence>) -> Option<f64> {
    runs.into_iter()
        .filter(|r| r.censored.is_none())
        .map(|r| r.realized_rps)
        .reduce(f64::max)
}

/// Whether a run censored `why` at `realized_rps` stays censored, given the
/// highest realized rate of the runs that measured. *Backlogged* is a trend
/// test over a short window (calls in flight or TTFT rising), and near
/// saturation a queue's wander trips it: when a run at a higher rate kept
/// up with no trend, the queue does not grow at this lower one, so the flag
/// was a false alarm and the run's counts enter the fit like any other's
/// (were it truly filling, its counts show it). Every other reason stands:
/// overloaded (arrivals left unfinished), invalid, rate-limited, decided
/// early.
pub fn censoring_stands(why: &str, realized_rps: f64, highest_measured: Option<f64>) -> bool {
    why != BACKLOGGED || highest_measured.is_none_or(|h| h <= realized_rps)
}

/// What a judged clause allows: `1 − q` beyond the bound for a percentile,
/// the limit for the error rate, the bound for a mean.
fn clause_bound(clause: &super::ClauseVerdict) -> Option<Bound> {
    if let Some(limit) = clause.limit_fraction {
        return Some(Bound::Fraction(limit));
    }
    match clause.stat.as_deref() {
        Some("mean") => clause.limit_ms.map(Bound::Mean),
        Some(p) => {
            let q: f64 = p.strip_prefix('p')?.parse().ok()?;
            Some(Bound::Fraction(1.0 - q / 100.0))
        }
        None => None,
    }
}

/// One clause's crossing over all runs (`cr_open[].clauses[]` in
/// results.json).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClauseCrossing {
    /// `"ttft p90 ≤ 250ms"`.
    pub label: String,
    /// Where the fitted model meets the bound, tasks/s; null when the runs
    /// do not place it (all on one side).
    pub estimate_rps: Option<f64>,
    /// The range at the card's confidence; an end is null when no run
    /// bounds it.
    pub range: [Option<f64>; 2],
    /// `"fit"`, `"bracket"` (a cliff the model does not fit) or `"none"`.
    pub method: String,
    /// The model's slope in ln(rate): logit of the fraction beyond the
    /// bound, or ln of the mean.
    pub slope: f64,
    /// The Pearson dispersion the range was widened by (≥ 1).
    pub dispersion: f64,
    /// Where an isotonic (pool-adjacent-violators) fit crosses: the
    /// model-free check.
    #[serde(default)]
    pub isotonic_rps: Option<f64>,
    /// The share of every run's window the fit left out at its start,
    /// because the runs together were still settling there (0, 0.25 or
    /// 0.5; [`settling_slices`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub settling_skipped: f64,
    /// `"fraction"`: the runs show the fraction beyond the bound, allowed
    /// up to `allowed`; `"mean_ms"`: the mean, allowed up to `allowed` ms.
    pub scale: String,
    pub allowed: f64,
    /// What each run showed, for the chart.
    pub points: Vec<ClausePoint>,
}

/// One run's showing of one clause.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClausePoint {
    pub run_id: String,
    /// The realized arrival rate.
    pub rate_rps: f64,
    /// The fraction beyond the bound, or the mean (ms).
    pub value: f64,
    /// Its interval at the card's confidence (effective samples).
    pub low: f64,
    pub high: f64,
    /// Effective (independent-equivalent) samples.
    pub effective_samples: f64,
}

/// An SLO's Cr_open from the fit: the smallest crossing over its clauses.
#[derive(Debug, Clone, PartialEq)]
pub struct SloFit {
    pub slo: String,
    pub confidence: f64,
    pub estimate_rps: Option<f64>,
    pub range: [Option<f64>; 2],
    /// `Fit` when the binding clause's model fitted, `Bracket` when it
    /// fell back (a cliff, or a censored run below the fitted crossing).
    pub method: Method,
    /// The label of the clause that binds.
    pub bound_by: Option<String>,
    pub clauses: Vec<ClauseCrossing>,
    /// Rates of the censored runs, and why.
    pub censored: Vec<(f64, String)>,
}

impl SloFit {
    /// The range's relative half-width around the estimate; `None` when
    /// the estimate or an end is missing.
    pub fn half_width(&self) -> Option<f64> {
        let e = self.estimate_rps?;
        let [Some(lo), Some(hi)] = self.range else {
            return None;
        };
        Some(((e - lo) / e).max((hi - e) / e))
    }
}

/// Cr_open of `slo` from every run in `runs` at `confidence`.
pub fn fit(runs: &[RunEvidence], slo: &str, confidence: f64) -> SloFit {
    let judged = judged_by(runs, slo);
    // A run censored for any clause of the SLO (a backlogged run whose
    // counts were within every bound is a point of every fit instead).
    let censored: Vec<(f64, String)> = judged
        .iter()
        .filter(|(r, clauses)| {
            (clauses.is_empty() && r.censored.is_some())
                || clauses
                    .iter()
                    .any(|c| censored_for(r, c.observation, c.bound, confidence))
        })
        .filter_map(|(r, _)| Some((r.realized_rps, r.censored.clone()?)))
        .collect();
    let labels: Vec<(String, Bound)> = judged
        .first()
        .map(|(_, clauses)| clauses.iter().map(|c| (c.label.clone(), c.bound)).collect())
        .unwrap_or_default();
    let clauses: Vec<(ClauseCrossing, Method)> = labels
        .iter()
        .enumerate()
        .map(|(i, (label, bound))| fit_clause(&judged, i, label, *bound, confidence))
        .collect();

    // The SLO holds while every clause does: its crossing is the smallest.
    // A clause with every run within its bound has no estimate and binds
    // only through its lower end; one with every run beyond it has no
    // lower end, and then neither has the SLO.
    let binding = clauses
        .iter()
        .enumerate()
        .min_by(|a, b| {
            let key = |c: &ClauseCrossing| c.estimate_rps.or(c.range[1]).unwrap_or(f64::INFINITY);
            key(&a.1.0).total_cmp(&key(&b.1.0))
        })
        .map(|(i, _)| i);
    let low = if clauses.iter().any(|(c, _)| c.range[0].is_none()) {
        None
    } else {
        clauses
            .iter()
            .filter_map(|(c, _)| c.range[0])
            .min_by(f64::total_cmp)
    };
    let high = clauses
        .iter()
        .filter_map(|(c, _)| c.range[1])
        .min_by(f64::total_cmp);
    let estimate = binding
        .and_then(|i| clauses[i].0.estimate_rps)
        .and_then(|e| {
            // Another clause with no estimate whose upper end is below it.
            (high.is_none_or(|h| e <= h * (1.0 + 1e-12))).then_some(e)
        });
    let method = binding.map_or(Method::None, |i| clauses[i].1);
    SloFit {
        slo: slo.to_string(),
        confidence,
        estimate_rps: estimate,
        range: [low.map(|l| estimate.map_or(l, |e| l.min(e))), high],
        method,
        bound_by: binding
            .filter(|&i| clauses[i].0.estimate_rps.is_some() || clauses[i].0.range[1].is_some())
            .map(|i| clauses[i].0.label.clone()),
        clauses: clauses.into_iter().map(|(c, _)| c).collect(),
        censored,
    }
}

/// The crossing of the `index`th clause of `slo` over every run in `runs`
/// at `confidence`: the clause's entry of [`fit`]'s `clauses`, alone.
/// The SLO frontier fits each of its bounds through it, with each run's
/// observation of the clause counted at that bound. `None` when no run
/// judged the SLO or it has no such clause.
pub fn clause_crossing(
    runs: &[RunEvidence],
    slo: &str,
    index: usize,
    confidence: f64,
) -> Option<ClauseCrossing> {
    let judged = judged_by(runs, slo);
    let first = judged.first()?.1.get(index)?;
    let (label, bound) = (first.label.clone(), first.bound);
    Some(fit_clause(&judged, index, &label, bound, confidence).0)
}

/// The runs that judged `slo`, with their clauses of it. A run flagged
/// backlogged that a faster, measured run contradicts is read as measured
/// (see [`censoring_stands`]).
fn judged_by<'r>(
    runs: &'r [RunEvidence],
    slo: &str,
) -> Vec<(RunEvidence, &'r [ClauseObservation])> {
    let judged: Vec<(&RunEvidence, &[ClauseObservation])> = runs
        .iter()
        .filter_map(|r| Some((r, r.clauses(slo)?)))
        .collect();
    let highest_measured = highest_measured_rps(judged.iter().map(|(r, _)| *r));
    judged
        .into_iter()
        .map(|(r, clauses)| {
            let mut r = r.clone();
            if r.censored
                .as_deref()
                .is_some_and(|why| !censoring_stands(why, r.realized_rps, highest_measured))
            {
                r.censored = None;
            }
            (r, clauses)
        })
        .collect()
}

/// One clause's crossing over the `judged` runs: every run that measured
/// it is a point at its realized rate, every run censored for it
/// ([`censored_for`]) caps the range.
fn fit_clause(
    judged: &[(RunEvidence, &[ClauseObservation])],
    index: usize,
    label: &str,
    bound: Bound,
    confidence: f64,
) -> (ClauseCrossing, Method) {
    let z = normal_quantile(1.0 - (1.0 - confidence) / 2.0);
    let settling = settling_slices(judged, index, bound);
    let mut censored_rates = Vec::new();
    let mut decided = Vec::new();
    let mut points = Vec::new();
    let mut shown = Vec::new();
    for (run, clauses) in judged {
        let observation = clauses
            .get(index)
            .and_then(|c| match (&c.slices, settling) {
                // A backlogged run keeps its whole window: a filling
                // queue's start is not a settling one. (Reading it by its
                // last quarter was tried and reverted: BENCHMARKS.md,
                // "Session 2026-12-07".)
                (Some(slices), from) if from > 0 && run.censored.as_deref() != Some(BACKLOGGED) => {
                    slices.observation_from(bound, from)
                }
                _ => c.observation,
            });
        if censored_for(run, observation, bound, confidence) {
            if run.censored.as_deref() == Some(DECIDED_EARLY) {
                decided.push((run, observation));
            } else {
                censored_rates.push(run.realized_rps);
            }
            continue;
        }
        let Some(observation) = observation else {
            continue;
        };
        points.push(Point {
            rate_per_s: run.realized_rps,
            observation,
        });
        shown.push(point_of(run, observation, z, confidence));
    }
    // A run decided early caps the range where it lies above the fitted
    // crossing. One below it contradicts the fit; its counts up to the
    // stop are evidence like any run's (the likelihood does not depend on
    // the stopping rule), so it joins the fit as a point instead of
    // sending the crossing to the bracket.
    let below = if decided.is_empty() {
        None
    } else {
        let without_decided = crossing::crossing(&points, &censored_rates, bound, confidence);
        without_decided
            .estimate_per_s
            .filter(|_| without_decided.method == Method::Fit)
    };
    for (run, observation) in &decided {
        match (below, observation) {
            (Some(estimate), Some(observation)) if run.realized_rps < estimate => {
                points.push(Point {
                    rate_per_s: run.realized_rps,
                    observation: *observation,
                });
                shown.push(point_of(run, *observation, z, confidence));
            }
            _ => censored_rates.push(run.realized_rps),
        }
    }
    let found = crossing::crossing(&points, &censored_rates, bound, confidence);
    let (scale, allowed) = match bound {
        Bound::Fraction(f) => ("fraction", f),
        Bound::Mean(m) => ("mean_ms", m),
    };
    (
        ClauseCrossing {
            label: label.to_string(),
            estimate_rps: found.estimate_per_s,
            range: found.range_per_s,
            method: found.method.as_str().to_string(),
            slope: found.slope,
            dispersion: found.dispersion,
            isotonic_rps: found.isotonic_per_s,
            settling_skipped: settling_share(judged, index, settling),
            scale: scale.to_string(),
            allowed,
            points: shown,
        },
        found.method,
    )
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

/// The one-sided z below which a start of the windows reads lower than
/// the rest (5%).
const SETTLING_Z: f64 = -1.645;

/// How many slices at the start of every run's window the fit leaves out:
/// 0, a quarter, or a half.
///
/// Each run starts from an empty queue, and a warmup shorter than the
/// queue's relaxation leaves the start of the window quieter than the
/// level the rate holds: the fraction beyond a bound, or the mean, reads
/// low there, and Cr_open high. One run's quarter is too few calls to
/// show it, so the test pools the runs: for each run, the first quarter's
/// count beyond the bound (or its mean) against what the rest of its
/// window predicts, summed over the runs into one z score (each run's
/// difference over its own standard error, the rest's included, widened
/// by the run's batch-means inflation for a count). When the first
/// quarter reads lower at the one-sided 5% level, it is left out of every
/// run, and the second quarter is tested against the second half the
/// same way. Censored runs (backlogged ones included) and runs without
/// slices take no part, and a backlogged run keeps its whole window.
/// Leaving a settled quarter out costs a quarter of the
/// calls and no accuracy; the test leaves one out at most 5% of the time
/// when nothing settles.
pub fn settling_slices(
    judged: &[(RunEvidence, &[ClauseObservation])],
    index: usize,
    bound: Bound,
) -> usize {
    let slices: Vec<&Slices> = judged
        .iter()
        .filter(|(run, _)| run.censored.is_none())
        .filter_map(|(_, clauses)| clauses.get(index)?.slices.as_ref())
        .filter(|s| s.samples.len() >= 8)
        .collect();
    let mut skipped = 0;
    for quarter in 0..2 {
        let Some(z) = settling_z(&slices, bound, quarter) else {
            break;
        };
        if z >= SETTLING_Z {
            break;
        }
        skipped = quarter + 1;
    }
    slices.first().map_or(0, |s| skipped * s.samples.len() / 4)
}

/// The pooled z of quarter `quarter` against the rest of the windows after
/// it (negative: lower); `None` when no run carries a difference.
fn settling_z(slices: &[&Slices], bound: Bound, quarter: usize) -> Option<f64> {
    let (mut sum, mut variance) = (0.0, 0.0);
    for s in slices {
        let q = s.samples.len() / 4;
        let (from, to) = (quarter * q, (quarter + 1) * q);
        let part = |range: std::ops::Range<usize>| -> (f64, f64) {
            (
                s.samples[range.clone()].iter().sum::<u64>() as f64,
                s.values[range].iter().sum::<f64>(),
            )
        };
        let (n_first, v_first) = part(from..to);
        let (n_rest, v_rest) = part(to..s.samples.len());
        if n_first < 1.0 || n_rest < 1.0 {
            continue;
        }
        match bound {
            Bound::Fraction(_) => {
                let p = v_rest / n_rest;
                let inflation = match crossing::count_observation(
                    &s.samples[from..],
                    &s.values[from..]
                        .iter()
                        .map(|&v| v.round() as u64)
                        .collect::<Vec<_>>(),
                ) {
                    Some(Observation::Count { inflation, .. }) => inflation,
                    _ => 1.0,
                };
                let var = p * (1.0 - p) * inflation * (n_first + n_first * n_first / n_rest);
                if var > 0.0 {
                    sum += v_first - n_first * p;
                    variance += var;
                }
            }
            Bound::Mean(_) => {
                let first = crossing::mean_observation(&s.samples[from..to], &s.values[from..to]);
                let rest = crossing::mean_observation(&s.samples[to..], &s.values[to..]);
                if let (
                    Some(Observation::Mean {
                        mean: m1,
                        std_error: e1,
                        ..
                    }),
                    Some(Observation::Mean {
                        mean: m2,
                        std_error: e2,
                        ..
                    }),
                ) = (first, rest)
                {
                    let var = e1 * e1 + e2 * e2;
                    if var > 0.0 {
                        // Inverse-variance weights: Σ(d/v) over √Σ(1/v).
                        sum += (m1 - m2) / var;
                        variance += 1.0 / var;
                    }
                }
            }
        }
    }
    (variance > 0.0).then(|| sum / variance.sqrt())
}

/// The share of a window `settling` slices are (of the first run with
/// slices).
fn settling_share(
    judged: &[(RunEvidence, &[ClauseObservation])],
    index: usize,
    settling: usize,
) -> f64 {
    judged
        .iter()
        .find_map(|(_, clauses)| clauses.get(index)?.slices.as_ref())
        .map_or(0.0, |s| settling as f64 / s.samples.len().max(1) as f64)
}

/// A run's showing of a clause with its interval, for the chart.
fn point_of(run: &RunEvidence, observation: Observation, z: f64, confidence: f64) -> ClausePoint {
    match observation {
        Observation::Count {
            samples,
            beyond,
            inflation,
        } => {
            let (low, high) =
                proportion_interval(beyond.round() as u64, samples as u64, confidence, inflation);
            ClausePoint {
                run_id: run.run_id.clone(),
                rate_rps: run.realized_rps,
                value: beyond / samples,
                low,
                high,
                effective_samples: samples / inflation.max(1.0),
            }
        }
        Observation::Mean {
            mean, std_error, ..
        } => ClausePoint {
            run_id: run.run_id.clone(),
            rate_rps: run.realized_rps,
            value: mean,
            low: (mean - z * std_error).max(0.0),
            high: mean + z * std_error,
            effective_samples: 0.0,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(rate: f64, clauses: &[(f64, f64)], censored: Option<&str>) -> RunEvidence {
        RunEvidence {
            run_id: format!("r{rate}"),
            rate_rps: rate,
            realized_rps: rate,
            censored: censored.map(str::to_string),
            slos: vec![SloObservations {
                slo: "s".into(),
                clauses: clauses
                    .iter()
                    .enumerate()
                    .map(|(i, &(allowed, fraction))| ClauseObservation {
                        label: format!("c{i}"),
                        bound: Bound::Fraction(allowed),
                        observation: Some(Observation::Count {
                            samples: 2000.0,
                            beyond: (2000.0 * fraction).round(),
                            inflation: 1.0,
                        }),
                        slices: None,
                    })
                    .collect(),
            }],
        }
    }

    /// Runs whose windows start quieter than they go on: the first quarter
    /// of each is left out, and the crossing falls; runs as steady at the
    /// start as later keep all of their windows.
    #[test]
    fn a_settling_start_is_left_out_of_every_run() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::Xoshiro256PlusPlus::seed_from_u64(3);
        // 100 calls a slice; the fraction beyond a p90 bound at `rate`
        // (crossing at 10), a third of it in the first quarter when
        // `settling`.
        let mut runs_of = |settling: bool| -> Vec<RunEvidence> {
            [6.0, 8.0, 9.0, 10.0, 11.0, 12.0]
                .iter()
                .map(|&rate| {
                    let p =
                        1.0 / (1.0 + (-((0.1f64 / 0.9).ln() + 6.0 * (rate / 10.0f64).ln())).exp());
                    let samples = vec![100u64; 20];
                    let values: Vec<f64> = (0..20)
                        .map(|j| {
                            let p = if settling && j < 5 { p / 3.0 } else { p };
                            (0..100).filter(|_| rng.random::<f64>() < p).count() as f64
                        })
                        .collect();
                    let slices = Slices { samples, values };
                    let mut r = run(rate, &[(0.1, 0.0)], None);
                    let clause = &mut r.slos[0].clauses[0];
                    clause.observation = slices.observation_from(Bound::Fraction(0.1), 0);
                    clause.slices = Some(slices);
                    r
                })
                .collect()
        };
        let settling = runs_of(true);
        let steady = runs_of(false);
        let judged = |runs: &[RunEvidence]| -> usize {
            let pairs: Vec<(RunEvidence, &[ClauseObservation])> = runs
                .iter()
                .map(|r| (r.clone(), &r.slos[0].clauses[..]))
                .collect();
            settling_slices(&pairs, 0, Bound::Fraction(0.1))
        };
        assert_eq!(judged(&settling), 5);
        assert_eq!(judged(&steady), 0);
        let fitted = fit(&settling, "s", 0.9);
        assert!(
            (fitted.clauses[0].settling_skipped - 0.25).abs() < 1e-9,
            "{fitted:?}"
        );
        // Read whole, the quiet quarters put the crossing higher.
        let mut whole = settling.clone();
        for r in &mut whole {
            r.slos[0].clauses[0].slices = None;
        }
        let whole = fit(&whole, "s", 0.9);
        assert!(
            fitted.estimate_rps.unwrap() < whole.estimate_rps.unwrap(),
            "{fitted:?} {whole:?}"
        );
    }

    #[test]
    fn the_smallest_crossing_binds() {
        // c0 (p90) crosses near 10, c1 (p50) near 6.
        let logistic = |r: f64, at: f64, p0: f64| {
            1.0 / (1.0 + (-((p0 / (1.0 - p0)).ln() + 5.0 * (r / at).ln())).exp())
        };
        let runs: Vec<RunEvidence> = [4.0, 5.5, 6.5, 8.0, 11.0]
            .iter()
            .map(|&r| {
                run(
                    r,
                    &[(0.1, logistic(r, 10.0, 0.1)), (0.5, logistic(r, 6.0, 0.5))],
                    None,
                )
            })
            .collect();
        let fit = fit(&runs, "s", 0.9);
        assert_eq!(fit.bound_by.as_deref(), Some("c1"));
        let e = fit.estimate_rps.unwrap();
        assert!((e - 6.0).abs() < 0.1, "{fit:?}");
        assert!(fit.range[0].unwrap() < 6.0 && fit.range[1].unwrap() > 6.0);
        assert!(fit.range[1].unwrap() < 10.0);
        assert!(fit.half_width().unwrap() < 0.1);
    }

    #[test]
    fn censored_runs_are_listed_and_cap_the_range() {
        let runs = vec![
            run(4.0, &[(0.1, 0.01)], None),
            run(8.0, &[(0.1, 0.05)], None),
            run(9.0, &[(0.1, 0.5)], Some("overloaded")),
        ];
        let fit = fit(&runs, "s", 0.9);
        assert_eq!(fit.censored, vec![(9.0, "overloaded".to_string())]);
        assert!(fit.range[1].unwrap() <= 9.0);
        // The overloaded run is not a point of the fit.
        assert_eq!(fit.clauses[0].points.len(), 2);
    }

    /// A run the watch decided early in a burst below the crossing fitted
    /// without it: as a cap it sent the crossing to the bracket, whose
    /// upper end was that run; its counts up to the stop are a point of
    /// the fit instead. A decided run above the crossing still caps it.
    #[test]
    fn a_run_decided_early_below_the_fitted_crossing_is_a_point_and_above_caps() {
        // A logistic tail crossing 10% at 10 rps, 4 logits per e-fold.
        let pi = |r: f64| 1.0 / (1.0 + (-((0.1f64 / 0.9).ln() + 4.0 * (r / 10.0).ln())).exp());
        let mut burst = run(9.0, &[(0.1, 0.3)], Some(DECIDED_EARLY));
        burst.slos[0].clauses[0].observation = Some(Observation::Count {
            samples: 60.0,
            beyond: 18.0,
            inflation: 1.0,
        });
        let runs = vec![
            run(4.0, &[(0.1, pi(4.0))], None),
            run(6.0, &[(0.1, pi(6.0))], None),
            run(8.0, &[(0.1, pi(8.0))], None),
            burst,
            run(11.0, &[(0.1, pi(11.0))], None),
            run(12.0, &[(0.1, pi(12.0))], None),
            run(16.0, &[(0.1, 0.9)], Some(DECIDED_EARLY)),
        ];
        let fitted = fit(&runs, "s", 0.9);
        assert_eq!(fitted.method, Method::Fit, "{fitted:?}");
        // Five measured runs and the decided one below the crossing.
        assert_eq!(fitted.clauses[0].points.len(), 6, "{fitted:?}");
        let [Some(low), Some(high)] = fitted.range else {
            panic!("{fitted:?}");
        };
        assert!(low <= 10.0 && 10.0 <= high, "{fitted:?}");
        // The decided run above still caps: the range ends below 16.
        assert!(high < 16.0, "{fitted:?}");
    }

    /// A run flagged backlogged by its trend test at a low rate, its
    /// counts well within the bound, with every faster run stopped early:
    /// it used to be censored, and the range collapsed to the bracket
    /// below it. Now its counts make it a point, and the range holds the
    /// crossing; the same run counting the clause beyond the bound (a
    /// queue truly filling) still caps it.
    #[test]
    fn a_backlogged_run_within_the_bound_is_a_point_and_one_beyond_caps() {
        // A logistic tail crossing 10% at 10 rps, 4 logits per e-fold.
        let pi = |r: f64| 1.0 / (1.0 + (-((0.1f64 / 0.9).ln() + 4.0 * (r / 10.0).ln())).exp());
        let mut runs = vec![
            run(4.0, &[(0.1, pi(4.0))], None),
            run(6.0, &[(0.1, pi(6.0))], None),
            run(8.0, &[(0.1, pi(8.0))], Some(BACKLOGGED)),
            run(16.0, &[(0.1, 0.9)], Some("decided early")),
        ];
        let within = fit(&runs, "s", 0.9);
        assert_eq!(within.method, Method::Fit, "{within:?}");
        assert_eq!(within.censored, vec![(16.0, "decided early".to_string())]);
        assert_eq!(within.clauses[0].points.len(), 3);
        let [Some(low), Some(high)] = within.range else {
            panic!("{within:?}");
        };
        assert!(low <= 10.0 && 10.0 <= high, "{within:?}");
        assert!(low > 6.0, "{within:?}");

        runs[2] = run(8.0, &[(0.1, 0.3)], Some(BACKLOGGED));
        let beyond = fit(&runs, "s", 0.9);
        assert_eq!(beyond.clauses[0].points.len(), 2, "{beyond:?}");
        assert!(beyond.censored.contains(&(8.0, BACKLOGGED.to_string())));
        assert!(beyond.range[1].is_some_and(|h| h <= 8.0), "{beyond:?}");

        // Beyond by its point estimate, not by its interval: a point of the
        // fit, beyond the bound, which pulls the crossing below it.
        let mut unsure = run(8.0, &[(0.1, 0.105)], Some(BACKLOGGED));
        unsure.slos[0].clauses[0].observation = Some(Observation::Count {
            samples: 200.0,
            beyond: 21.0,
            inflation: 1.0,
        });
        runs[2] = unsure;
        let unsure = fit(&runs, "s", 0.9);
        assert_eq!(unsure.clauses[0].points.len(), 3, "{unsure:?}");
        assert_eq!(unsure.censored.len(), 1, "{unsure:?}");
        // Overloaded stays censored whatever its counts.
        runs[2] = run(8.0, &[(0.1, pi(8.0))], Some("overloaded"));
        let overloaded = fit(&runs, "s", 0.9);
        assert_eq!(overloaded.clauses[0].points.len(), 2, "{overloaded:?}");
        assert!(overloaded.range[1].is_some_and(|h| h <= 8.0));
    }

    #[test]
    fn an_slo_nobody_judged_has_nothing() {
        let fit = fit(&[run(4.0, &[(0.1, 0.01)], None)], "other", 0.9);
        assert_eq!(fit.estimate_rps, None);
        assert_eq!(fit.range, [None, None]);
        assert!(fit.clauses.is_empty());
    }
}
