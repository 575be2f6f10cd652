//! The Cr_open search (pure state machine): bracket fast, then spend the
//! budget where the one fitted model of every clause
//! ([`cr_open`](super::cr_open)) says the range shrinks most. The runner
//! asks [`Search::next_rate`], runs it, and feeds the run's evidence back
//! with [`Search::record`]; it never loops on its own, so the whole search
//! is testable with a synthetic queue.
//!
//! # The search, per SLO
//!
//! A run is *within* an SLO when every clause's observed fraction beyond
//! its bound (or mean) is within what the clause allows, *beyond* it
//! otherwise; a run that could not keep up (overloaded, backlogged,
//! invalid) is beyond.
//!
//! 1. Start at the estimate from the closed sweep ([`start_estimate`],
//!    Little's law), clamped to `[min, max]`; without one, at the geometric
//!    mean of `min` and `max`.
//! 2. Bracket: while every run is within, double the highest rate (capped
//!    at `max`; `max` within ends the search: Cr_open ≥ max); while every
//!    run is beyond, halve the lowest (floored at `min`).
//! 3. Narrow: with runs on both sides, fit. When the range is within
//!    ±`precision` of the estimate, the SLO is done. Otherwise the next run
//!    goes a step `δ` below or above the estimate (the side with fewer
//!    effective samples near it), `δ` half the range's half-width, within
//!    `[precision/2, 20%]`: close enough that the run informs the crossing,
//!    far enough that the two sides pin its slope. A rate may be visited
//!    again; its samples add up. When the model does not fit (a cliff),
//!    the bracket between the runs either side is bisected instead.
//!
//! The search ends when every SLO is done, when the runs made have spent
//! the budget ([`Search::affords`]), or at [`Search::max_runs`], a safety
//! net. Rates are rounded to 3 significant digits.
//!
//! # The runner's loop
//!
//! ```text
//! let mut search = Search::new(min, max, precision, confidence, start_estimate(..), slo_names, budget);
//! while let Some(rate) = search.next_rate() {
//!     let run = plan_run(rate);
//!     if !search.affords(run.seconds()) { break; }
//!     let summary = execute(run);
//!     search.record(evidence_of(&summary), run.seconds());
//! }
//! ```

use super::cr_open::{self, RunEvidence, SloFit};
use super::{CrClosed, CrOpen, RunSummary};
use crate::format::significant;
use crate::stats::crossing::{Bound, Method, Observation};
use crate::stats::interval::Verdict;

/// The most runs one search makes, whatever its budget.
pub const MAX_RUNS: u32 = 60;
/// The narrowing step's bounds, relative to the estimate.
const STEP_MAX: f64 = 0.25;
/// The search stops once the range, widened by this much, is within the
/// precision: a range that is narrow by luck (runs that happened to agree)
/// would otherwise end the search and lock its error in. 1.2 is about the
/// ratio of a 95% range to a 90% one.
const STOP_MARGIN: f64 = 1.2;
/// Runs needed on each side of the estimate, within ±ln 1.5 of it, before a
/// fitted range is trusted to end the search: a range from runs all far
/// away is the curve's shape speaking, not the runs.
const SUPPORT_RUNS: usize = 2;
/// How far in logits of the fitted curve the narrowing step moves.
const STEP_LOGITS: f64 = 0.5;

/// Search state for all SLOs of one card.
#[derive(Debug, Clone)]
pub struct Search {
    min_rps: f64,
    max_rps: f64,
    precision: f64,
    confidence: f64,
    start_rps: f64,
    slos: Vec<String>,
    runs: Vec<RunEvidence>,
    /// Seconds the search may spend (warmups included); `None`: no limit
    /// but [`MAX_RUNS`].
    budget_s: Option<f64>,
    spent_s: f64,
}

/// Where an SLO's search stands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// It wants a run at this rate.
    Run(f64),
    /// Its range is within the precision.
    Reached,
    /// `max` was within the SLO: Cr_open ≥ max.
    AboveMax,
    /// `min` was beyond it.
    BelowMin,
    /// A cliff bracketed as finely as the rates can be.
    Resolution,
}

impl Search {
    /// `min`/`max` in requests (tasks) per second, `precision` a fraction
    /// (0.05 = ±5%), `confidence` of the range (0.9). `start_rps` is clamped
    /// to `[min, max]`; `budget_s` bounds the seconds its runs may take.
    pub fn new(
        min: f64,
        max: f64,
        precision: f64,
        confidence: f64,
        start_rps: Option<f64>,
        slos: Vec<String>,
        budget_s: Option<f64>,
    ) -> Search {
        // Defensive against an unvalidated caller: rates must be positive and ordered.
        let min_rps = if min > 0.0 { min } else { 1e-3 };
        let max_rps = if max > min_rps { max } else { min_rps };
        let start_rps = match start_rps {
            Some(s) if s.is_finite() && s > 0.0 => round_rate(s.clamp(min_rps, max_rps)),
            _ => round_rate((min_rps * max_rps).sqrt()),
        }
        .clamp(min_rps, max_rps);
        Search {
            min_rps,
            max_rps,
            precision: if precision.is_finite() && precision > 0.0 {
                precision
            } else {
                0.05
            },
            confidence,
            start_rps,
            slos,
            runs: Vec::new(),
            budget_s,
            spent_s: 0.0,
        }
    }

    /// Next rate to run, or `None` when every SLO is done, the budget is
    /// spent, or [`MAX_RUNS`] were made.
    pub fn next_rate(&self) -> Option<f64> {
        // The first run is always made: a search with no run says nothing.
        let spent = !self.runs.is_empty() && self.budget_s.is_some_and(|b| self.spent_s >= b);
        if self.runs.len() >= MAX_RUNS as usize || spent {
            return None;
        }
        self.slos.iter().find_map(|slo| match self.step(slo) {
            Step::Run(rate) => Some(rate),
            _ => None,
        })
    }

    /// Whether a run of `seconds` fits in what is left of the budget. The
    /// first run always does: a search with no run says nothing.
    pub fn affords(&self, seconds: f64) -> bool {
        self.runs.is_empty()
            || self
                .budget_s
                .is_none_or(|b| self.spent_s + seconds <= b * 1.000_001)
    }

    /// Record a run's evidence and what it cost (seconds, warmup included).
    pub fn record(&mut self, evidence: RunEvidence, cost_s: f64) {
        self.spent_s += cost_s.max(0.0);
        self.runs.push(evidence);
    }

    /// The runs recorded so far, in order.
    pub fn runs(&self) -> &[RunEvidence] {
        &self.runs
    }

    /// Seconds spent so far.
    pub fn spent_s(&self) -> f64 {
        self.spent_s
    }

    /// The first rate the search runs.
    pub fn start_rps(&self) -> f64 {
        self.start_rps
    }

    /// The SLOs that still want runs.
    pub fn unresolved(&self) -> Vec<String> {
        self.slos
            .iter()
            .filter(|s| matches!(self.step(s), Step::Run(_)))
            .cloned()
            .collect()
    }

    /// The fit of `slo` over every run so far.
    pub fn fit(&self, slo: &str) -> SloFit {
        cr_open::fit(&self.runs, slo, self.confidence)
    }

    /// Where `slo`'s search stands, and the rate it wants next.
    pub fn step(&self, slo: &str) -> Step {
        if self.runs.is_empty() {
            return Step::Run(self.start_rps);
        }
        let sides: Vec<(f64, bool)> = self
            .runs
            .iter()
            .filter_map(|r| Some((r.rate_rps, beyond(r, slo)?)))
            .collect();
        if sides.is_empty() {
            // Nothing judged this SLO yet (another SLO's runs only).
            return Step::Run(self.start_rps);
        }
        let lowest_beyond = sides
            .iter()
            .filter(|s| s.1)
            .map(|s| s.0)
            .min_by(f64::total_cmp);
        let highest_within = sides
            .iter()
            .filter(|s| !s.1 && lowest_beyond.is_none_or(|b| s.0 < b))
            .map(|s| s.0)
            .max_by(f64::total_cmp);
        match (highest_within, lowest_beyond) {
            (Some(high), None) => {
                if high >= self.max_rps * (1.0 - 1e-9) {
                    Step::AboveMax
                } else {
                    Step::Run(self.clamp(high * 2.0))
                }
            }
            (None, Some(low)) => {
                if low <= self.min_rps * (1.0 + 1e-9) {
                    Step::BelowMin
                } else {
                    Step::Run(self.clamp(low / 2.0))
                }
            }
            (None, None) => Step::Run(self.start_rps),
            (Some(within), Some(beyond)) => self.narrow(slo, within, beyond),
        }
    }

    fn narrow(&self, slo: &str, within: f64, beyond: f64) -> Step {
        let fit = self.fit(slo);
        if fit
            .half_width()
            .is_some_and(|h| h * STOP_MARGIN <= self.precision)
            && supported(&fit)
        {
            return Step::Reached;
        }
        let bisect = || {
            if (beyond - within) / within <= 2.0 * self.precision {
                return Step::Resolution;
            }
            let mid = self.clamp((within * beyond).sqrt());
            if same_rate(mid, within) || same_rate(mid, beyond) {
                Step::Resolution
            } else {
                Step::Run(mid)
            }
        };
        let Some(estimate) = fit.estimate_rps.filter(|_| fit.method == Method::Fit) else {
            return bisect();
        };
        // A step that moves the binding clause's fitted curve by about one
        // logit (or one e-fold of its mean): far enough that the two sides
        // pin the curve's slope, close enough that each run still speaks of
        // the crossing (the design that estimates a logistic's crossing
        // best puts its runs about there).
        let slope = fit
            .clauses
            .iter()
            .find(|c| Some(&c.label) == fit.bound_by.as_ref())
            .map_or(0.0, |c| c.slope);
        let step = if slope > 0.0 {
            // A precision coarser than the largest step (`precision="30%"`)
            // asks for no finer step than that.
            (STEP_LOGITS / slope).clamp(self.precision.min(STEP_MAX), STEP_MAX)
        } else {
            STEP_MAX
        };
        // The side with fewer effective samples near the estimate.
        let near = |below: bool| -> f64 {
            fit.clauses
                .iter()
                .filter(|c| Some(&c.label) == fit.bound_by.as_ref())
                .flat_map(|c| &c.points)
                .filter(|p| {
                    let d = p.rate_rps / estimate - 1.0;
                    d.abs() <= 2.0 * step + 1e-9 && (d < 0.0) == below
                })
                .map(|p| p.effective_samples.max(1.0))
                .sum()
        };
        let below = near(true) <= near(false);
        let mut rate = if below {
            estimate * (1.0 - step)
        } else {
            estimate * (1.0 + step)
        };
        // Never past a rate that could not keep up.
        if let Some(censored) = fit.censored.iter().map(|c| c.0).min_by(f64::total_cmp) {
            rate = rate.min((estimate.min(censored) * censored).sqrt());
        }
        Step::Run(self.clamp(rate))
    }

    fn clamp(&self, rate: f64) -> f64 {
        let rate = rate.clamp(self.min_rps, self.max_rps);
        if same_rate(rate, self.max_rps) {
            self.max_rps
        } else if same_rate(rate, self.min_rps) {
            self.min_rps
        } else {
            round_rate(rate)
        }
    }
}

/// Whether the binding clause's fit has [`SUPPORT_RUNS`] runs on each side
/// of its estimate, within ±ln 1.5 of it. A cliff's bracket needs none.
fn supported(fit: &SloFit) -> bool {
    let (Some(estimate), Method::Fit) = (fit.estimate_rps, fit.method) else {
        return true;
    };
    let Some(clause) = fit
        .clauses
        .iter()
        .find(|c| Some(&c.label) == fit.bound_by.as_ref())
    else {
        return true;
    };
    let near = |below: bool| {
        clause
            .points
            .iter()
            .filter(|p| {
                let d = (p.rate_rps / estimate).ln();
                d.abs() <= 1.5f64.ln() && (d < 0.0) == below
            })
            .count()
    };
    near(true) >= SUPPORT_RUNS && near(false) >= SUPPORT_RUNS
}

/// Whether a run was beyond `slo` (any clause's observed fraction or mean
/// past what it allows, or the run could not keep up); `None` when the run
/// did not judge it.
fn beyond(run: &RunEvidence, slo: &str) -> Option<bool> {
    let clauses = &run.slos.iter().find(|s| s.slo == slo)?.clauses;
    // A backlogged run is read by its counts, as the fit reads it
    // (`cr_open::censored_for`): a clause it counted beyond the bound is
    // beyond, and one it did not measure counts as censored.
    match run.censored.as_deref() {
        Some(cr_open::BACKLOGGED) if clauses.iter().any(|c| c.observation.is_none()) => {
            return Some(true);
        }
        Some(why) if why != cr_open::BACKLOGGED => return Some(true),
        _ => {}
    }
    Some(clauses.iter().any(|c| match (c.observation, c.bound) {
        (
            Some(Observation::Count {
                samples, beyond, ..
            }),
            Bound::Fraction(allowed),
        ) => samples > 0.0 && beyond / samples > allowed,
        (Some(Observation::Mean { mean, .. }), Bound::Mean(bound)) => mean > bound,
        _ => false,
    }))
}

/// Should a grid's run just made be extended before it is recorded? Yes
/// when an SLO in `wanted` was inconclusive on it. A failure — conclusive,
/// or an overloaded or invalid run — is never extended: more samples
/// cannot save it.
pub fn needs_extension(summary: &RunSummary, wanted: &[String]) -> bool {
    !summary.invalid
        && summary
            .verdicts
            .iter()
            .any(|v| v.verdict == Verdict::Inconclusive && wanted.contains(&v.slo))
}

/// Start estimate from the closed sweep by Little's law: at Cr_closed's lower
/// end `c`, λ ≈ c / E2E_mean(task) (tasks/s). A closed loop at `c` is exactly
/// such a system, so this is the arrival rate the replica absorbed there; the
/// open search usually ends below it, because SLOs bind before saturation.
/// `None` without closed data.
pub fn start_estimate(closed: &[RunSummary], cr_closed: Option<&CrClosed>) -> Option<f64> {
    let c = cr_closed?.range[0];
    let level = closed.iter().find(|s| s.concurrency == Some(c))?;
    let task = level
        .task_e2e_ms
        .as_ref()
        .filter(|t| t.count > 0)
        .unwrap_or(&level.e2e_ms);
    (task.count > 0 && task.mean > 0.0).then(|| f64::from(c) / (task.mean / 1000.0))
}

/// Cr_open for one SLO from the open runs that were executed (a search, a
/// grid, or a folder `capcard report` reads again): every run of the SLO
/// (repetitions, extensions and revisits each one more point) into one fit
/// per clause ([`cr_open::fit`]) at `confidence`. A folder written before
/// the runs kept their evidence per batch reads as it did then
/// ([`cr_open_by_verdicts`]). `max_rps` (a search's) and `precision` shape
/// the notes.
pub fn cr_open(
    open: &[RunSummary],
    slo: &str,
    max_rps: Option<f64>,
    precision: Option<f64>,
    confidence: f64,
) -> CrOpen {
    cr_open_in(open, (slo, "rps"), max_rps, precision, confidence)
}

/// [`cr_open`], its notes giving rates in `unit` (`rps`, `tasks/s`,
/// `conversations/s`: what the card's arrivals are).
pub fn cr_open_in(
    open: &[RunSummary],
    (slo, unit): (&str, &str),
    max_rps: Option<f64>,
    precision: Option<f64>,
    confidence: f64,
) -> CrOpen {
    let judged: Vec<&RunSummary> = open.iter().filter(|s| s.verdict(slo).is_some()).collect();
    let evidence: Option<Vec<RunEvidence>> =
        judged.iter().map(|s| cr_open::evidence_of(s)).collect();
    let by_verdicts = || {
        // Repetitions of a rate combine by verdict there, as they did.
        let per_rate = super::card::combined_per_rate(open);
        let mut found = by_verdicts_in(&per_rate, (slo, unit), max_rps, precision);
        if !judged.is_empty() {
            found.method = Some("verdicts".to_string());
        }
        found
    };
    let Some(runs) = evidence.filter(|r| !r.is_empty()) else {
        return by_verdicts();
    };
    let fit = cr_open::fit(&runs, slo, confidence);
    from_fit(&judged, &runs, &fit, (slo, unit), max_rps, precision)
}

/// The card's Cr_open from the fit, with the runs' verdicts for what they
/// show run by run (the lowest conclusive failure, the inconclusive rates).
fn from_fit(
    judged: &[&RunSummary],
    runs: &[RunEvidence],
    fit: &SloFit,
    (slo, unit): (&str, &str),
    max_rps: Option<f64>,
    precision: Option<f64>,
) -> CrOpen {
    let verdict_of = |s: &RunSummary| s.verdict(slo).map(|v| v.verdict);
    let mut by_rate: Vec<&RunSummary> = judged.to_vec();
    by_rate.sort_by(|a, b| {
        a.rate_rps
            .unwrap_or(0.0)
            .total_cmp(&b.rate_rps.unwrap_or(0.0))
    });
    let failed = by_rate
        .iter()
        .find(|s| verdict_of(s) == Some(Verdict::Fail))
        .copied();
    let mut inconclusive: Vec<f64> = by_rate
        .iter()
        .filter(|s| verdict_of(s) == Some(Verdict::Inconclusive))
        .filter_map(|s| s.rate_rps)
        .collect();
    inconclusive.dedup_by(|a, b| same_rate(*a, *b));
    // The run that stands for Cr_open: the highest within the SLO at or
    // below the estimate (or the promise, when there is no estimate).
    let at = fit.estimate_rps.or(fit.range[0]);
    let standing = at.and_then(|at| {
        runs.iter()
            .zip(judged)
            .filter(|(r, _)| r.rate_rps <= at * (1.0 + 1e-9) && beyond(r, slo) == Some(false))
            .max_by(|a, b| a.0.rate_rps.total_cmp(&b.0.rate_rps))
            .map(|(_, s)| s.run_id.clone())
    });
    let half_width = fit.half_width();
    let precision_reached = precision.map(|p| half_width.is_some_and(|h| h <= p + 1e-9));
    let note = match (
        fit_note(fit, runs, (slo, unit), max_rps, precision, half_width),
        settling_note(fit),
    ) {
        (Some(n), Some(s)) => Some(format!("{n}; {s}")),
        (n, s) => n.or(s),
    };
    let at_least = fit.range[0].is_some() && fit.range[1].is_none();
    CrOpen {
        slo: slo.to_string(),
        // With no run beyond the SLO there is no estimate, only its lower
        // end: "Cr_open ≥ rps", as `at_least` says.
        rps: fit
            .estimate_rps
            .or(if at_least { fit.range[0] } else { None }),
        range: fit.range,
        promise_rps: fit.range[0],
        confidence: Some(fit.confidence),
        method: Some(fit.method.as_str().to_string()),
        bound_by: fit.bound_by.clone(),
        clauses: fit.clauses.clone(),
        failed_at_rps: failed.and_then(|s| s.rate_rps),
        at_least,
        inconclusive_rps: inconclusive,
        precision_reached,
        note,
        run_id: standing,
        failed_run_id: failed.map(|s| s.run_id.clone()),
        failed_clauses: failed
            .and_then(|s| s.verdict(slo))
            .map(|v| v.reasons.clone())
            .unwrap_or_default(),
        limited_by: None,
        // Quoted by the folder from its `audit.json`, not from the runs.
        audit: None,
    }
}

/// The card's note when the fit left a settling start out of the runs'
/// windows (the binding clause's `settling_skipped`).
fn settling_note(fit: &SloFit) -> Option<String> {
    let c = fit
        .clauses
        .iter()
        .find(|c| Some(&c.label) == fit.bound_by.as_ref() && c.settling_skipped > 0.0)?;
    Some(format!(
        "`{}` read lower at the start of the windows than later (pooled over the runs, \
         one-sided 5%): the runs were still settling, and the first {} of every window \
         was left out of the fit; a warmup that much longer keeps it",
        c.label,
        if c.settling_skipped > 0.3 {
            "half"
        } else {
            "quarter"
        }
    ))
}

/// What the card says of a fitted Cr_open when it is not a plain estimate
/// within the precision: never more than the runs showed.
fn fit_note(
    fit: &SloFit,
    runs: &[RunEvidence],
    (slo, unit): (&str, &str),
    max_rps: Option<f64>,
    precision: Option<f64>,
    half_width: Option<f64>,
) -> Option<String> {
    let rates = |f: &dyn Fn(&RunEvidence) -> bool| -> Vec<f64> {
        let mut r: Vec<f64> = runs.iter().filter(|r| f(r)).map(|r| r.rate_rps).collect();
        r.sort_by(f64::total_cmp);
        r.dedup_by(|a, b| same_rate(*a, *b));
        r
    };
    let list = |r: &[f64]| {
        r.iter()
            .map(|&x| significant(x))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let censored_note = || {
        let mut why: Vec<String> = fit
            .censored
            .iter()
            .map(|(rate, why)| format!("{why} at {} {unit}", significant(*rate)))
            .collect();
        why.dedup();
        why.join(", ")
    };
    let tested = rates(&|_| true);
    if runs.is_empty() {
        return Some(format!("no open run evaluated the SLO `{slo}`"));
    }
    match fit.range {
        [None, None]
            if !fit.censored.is_empty() && fit.clauses.iter().all(|c| c.points.is_empty()) =>
        {
            return Some(format!(
                "no run measured the SLO: every rate tested could not keep up ({})",
                censored_note()
            ));
        }
        [None, None] => {
            return Some(format!(
                "the runs do not place Cr_open (rates tested: {} {unit}): their calls were too \
                 few, or scattered too much, to bound it on either side; a longer `duration` \
                 per run (or a longer `budget`) would give it ends",
                list(&tested)
            ));
        }
        [None, Some(high)] if fit.estimate_rps.is_some() => {
            // Nothing is promised (the promise is the range's lower end):
            // say what would give one.
            let lower = if max_rps.is_some() {
                "a lower `min` for the search"
            } else {
                "lower rates in the grid"
            };
            let why = if fit.method == Method::Bracket {
                format!(
                    "no run below where the SLO is exceeded was within it at the {}% \
                     one-sided level (rates tested: {} {unit}); the range reaches up to {} {unit}",
                    significant((1.0 + fit.confidence) / 2.0 * 100.0),
                    list(&tested),
                    significant(high)
                )
            } else {
                format!(
                    "the {}% range reaches below the lowest rate tested ({} {unit}), up to {} \
                     {unit}",
                    significant(fit.confidence * 100.0),
                    list(&tested[..tested.len().min(1)]),
                    significant(high)
                )
            };
            // Runs already far below the estimate (beyond the fit's
            // narrowest kernel, a factor 1.5) did not bound it: more runs
            // further down would not either; each run's calls are too few
            // to show how the tail falls.
            let far_below = fit
                .estimate_rps
                .zip(tested.first())
                .is_some_and(|(estimate, &lowest)| lowest * 1.5 <= estimate);
            if far_below {
                return Some(format!(
                    "the runs do not bound Cr_open from below: {why}; so nothing is promised \
                     yet: there were runs far below the estimate, but too few calls per run \
                     near it to show how the tail falls; a longer `duration` per run (or a \
                     longer `budget`) would give the range a lower end"
                ));
            }
            return Some(format!(
                "the runs do not bound Cr_open from below: {why}; so nothing is promised yet: \
                 runs further below the estimate ({lower}) or more calls near it (a longer \
                 `budget`, or a longer `duration` per run) would give the range a lower end"
            ));
        }
        [None, Some(high)] => {
            let lowest = tested.first().copied().unwrap_or(high);
            let by = fit
                .bound_by
                .as_ref()
                .map(|b| format!(" (`{b}`)"))
                .unwrap_or_default();
            return Some(format!(
                "even {} {unit}, the lowest rate tested, was beyond the SLO{by}: Cr_open < {} {unit}",
                significant(lowest),
                significant(high)
            ));
        }
        [Some(low), None] => {
            let highest = tested.last().copied().unwrap_or(low);
            return Some(match max_rps {
                Some(max) if highest >= max * (1.0 - 1e-9) => format!(
                    "Cr_open ≥ {} {unit}: every run was within the SLO up to the search's \
                     ceiling ({} {unit}); raise `max`",
                    significant(low),
                    significant(max)
                ),
                Some(_) => format!(
                    "Cr_open ≥ {} {unit}: no run exceeded the SLO (the highest, {} {unit}, was \
                     within it); the search ended before a rate beyond it",
                    significant(low),
                    significant(highest)
                ),
                None => format!(
                    "Cr_open ≥ {} {unit}: no rate of the grid exceeded the SLO; add higher rates",
                    significant(low)
                ),
            });
        }
        [Some(_), Some(_)] => {}
    }
    let [Some(low), Some(high)] = fit.range else {
        return None;
    };
    let mut notes = Vec::new();
    if fit.method == Method::Bracket {
        let cliff = fit
            .clauses
            .iter()
            .find(|c| Some(&c.label) == fit.bound_by.as_ref() && c.method == "bracket");
        notes.push(match cliff {
            Some(c) => format!(
                "`{}` does not follow a smooth curve here (a cliff: it jumps between {} and \
                 {} {unit}): Cr_open is the bracket between the runs either side",
                c.label,
                significant(low),
                significant(high)
            ),
            None => format!(
                "a run that could not keep up ({}) lies below where the other runs place the \
                 crossing: Cr_open is taken below it",
                censored_note()
            ),
        });
    }
    if let (Some(p), Some(h)) = (precision, half_width)
        && h > p + 1e-9
    {
        notes.push(format!(
            "the precision asked for (±{}%) was not reached within the search's budget: \
             the range is ±{}%",
            significant(p * 100.0),
            significant((h * 100.0).ceil())
        ));
    }
    (!notes.is_empty()).then(|| notes.join("; "))
}

/// Cr_open of a folder written before the runs kept their evidence per
/// batch: the highest conclusive pass below the lowest conclusive failure.
pub fn cr_open_by_verdicts(
    open: &[RunSummary],
    slo: &str,
    max_rps: Option<f64>,
    precision: Option<f64>,
) -> CrOpen {
    by_verdicts_in(open, (slo, "rps"), max_rps, precision)
}

/// [`cr_open_by_verdicts`], its notes giving rates in `unit`.
fn by_verdicts_in(
    open: &[RunSummary],
    (slo, unit): (&str, &str),
    max_rps: Option<f64>,
    precision: Option<f64>,
) -> CrOpen {
    let mut runs: Vec<(f64, Verdict, &RunSummary)> = open
        .iter()
        .filter_map(|s| Some((s.rate_rps?, s.verdict(slo)?.verdict, s)))
        .collect();
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut result = CrOpen {
        slo: slo.to_string(),
        rps: None,
        range: [None, None],
        failed_at_rps: None,
        at_least: false,
        inconclusive_rps: runs
            .iter()
            .filter(|r| r.1 == Verdict::Inconclusive)
            .map(|r| r.0)
            .collect(),
        precision_reached: None,
        note: None,
        run_id: None,
        failed_run_id: None,
        failed_clauses: vec![],
        limited_by: None,
        ..CrOpen::default()
    };
    if runs.is_empty() {
        result.note = Some(format!("no open run evaluated the SLO `{slo}`"));
        return result;
    }
    let fail = runs.iter().find(|r| r.1 == Verdict::Fail);
    let pass = runs
        .iter()
        .rev()
        .find(|r| r.1 == Verdict::Pass && fail.is_none_or(|f| r.0 < f.0));
    let reasons = |s: &RunSummary| {
        s.verdict(slo)
            .map(|v| v.reasons.clone())
            .unwrap_or_default()
    };
    if let Some(&(rate, _, summary)) = fail {
        result.failed_at_rps = Some(rate);
        result.range[1] = Some(rate);
        result.failed_run_id = Some(summary.run_id.clone());
        result.failed_clauses = reasons(summary);
    }
    if let Some(&(rate, _, summary)) = pass {
        result.rps = Some(rate);
        result.range[0] = Some(rate);
        result.run_id = Some(summary.run_id.clone());
    }
    if let (Some(p), Some(f), Some(precision)) = (result.range[0], result.range[1], precision) {
        result.precision_reached = Some((f - p) / p <= precision + 1e-9);
    }
    let undecided_between = |lo: f64, hi: f64| -> Vec<String> {
        result
            .inconclusive_rps
            .iter()
            .filter(|&&r| r > lo && r < hi)
            .map(|&r| significant(r))
            .collect()
    };
    result.note = match (pass, fail) {
        (None, Some(&(rate, ..))) => {
            let why = if result.failed_clauses.is_empty() {
                String::new()
            } else {
                format!(": {}", result.failed_clauses.join("; "))
            };
            let below = undecided_between(0.0, rate);
            Some(if below.is_empty() {
                format!(
                    "even {} {unit}, the lowest rate tested, failed{why}",
                    significant(rate)
                )
            } else {
                format!(
                    "no rate passed conclusively: {} {unit} failed{why}; {} {unit} stayed inconclusive within the budget",
                    significant(rate),
                    below.join(", ")
                )
            })
        }
        (None, None) => {
            let first = runs.first().map(|r| reasons(r.2)).unwrap_or_default();
            Some(format!(
                "inconclusive within the budget at every rate tested ({} {unit}){}",
                runs.iter()
                    .map(|r| significant(r.0))
                    .collect::<Vec<_>>()
                    .join(", "),
                if first.is_empty() {
                    String::new()
                } else {
                    format!(": {}", first.join("; "))
                }
            ))
        }
        (Some(&(rate, ..)), None) => {
            result.at_least = true;
            let above = undecided_between(rate, f64::INFINITY);
            let undecided = if above.is_empty() {
                String::new()
            } else {
                format!(" ({} {unit} inconclusive)", above.join(", "))
            };
            Some(match max_rps {
                Some(max) if rate >= max * (1.0 - 1e-9) => format!(
                    "Cr_open ≥ {} {unit}: the search ceiling passed; raise `max`",
                    significant(rate)
                ),
                Some(_) => format!(
                    "Cr_open ≥ {} {unit}: no tested rate failed{undecided}",
                    significant(rate)
                ),
                None => format!(
                    "Cr_open ≥ {} {unit}: no rate of the grid failed{undecided}; add higher rates",
                    significant(rate)
                ),
            })
        }
        (Some(&(pass_rate, ..)), Some(&(fail_rate, ..))) => {
            let between = undecided_between(pass_rate, fail_rate);
            let above_fail = runs
                .iter()
                .rev()
                .find(|r| r.1 == Verdict::Pass && r.0 > fail_rate);
            if result.precision_reached == Some(false) && !between.is_empty() {
                Some(format!(
                    "the precision asked for was not reached: {} {unit} stayed inconclusive \
                     within the budget, so Cr_open lies between {} and {} {unit}",
                    between.join(", "),
                    significant(pass_rate),
                    significant(fail_rate)
                ))
            } else if let Some(r) = above_fail {
                Some(format!(
                    "passed again at {} {unit}, above the failure at {} {unit}: results are not \
                     monotonic (noise, or an unstable replica); Cr_open is taken below the \
                     lowest failure",
                    significant(r.0),
                    significant(fail_rate)
                ))
            } else if result.precision_reached == Some(false) {
                Some(format!(
                    "the precision asked for was not reached within the search's runs: \
                     Cr_open lies between {} and {} {unit}",
                    significant(pass_rate),
                    significant(fail_rate)
                ))
            } else {
                None
            }
        }
    };
    result
}

/// Round a rate to 3 significant digits (the search's resolution).
pub fn round_rate(rate: f64) -> f64 {
    if !rate.is_finite() || rate <= 0.0 {
        return rate;
    }
    let exponent = 2 - rate.log10().floor() as i32;
    if exponent >= 0 {
        let scale = 10f64.powi(exponent);
        (rate * scale).round() / scale
    } else {
        let scale = 10f64.powi(-exponent);
        (rate / scale).round() * scale
    }
}

/// Two rates the search (and the frontier phase) treat as one: equal once
/// rounded like every rate they pick.
pub(crate) fn same_rate(a: f64, b: f64) -> bool {
    round_rate(a) == round_rate(b)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::LatencyStats;
    use crate::analyze::cr_open::{ClauseObservation, SloObservations};
    use crate::analyze::crossp::tests::level;
    use crate::analyze::slo::SloVerdict;

    fn pass_or_fail(pass: bool) -> Verdict {
        if pass { Verdict::Pass } else { Verdict::Fail }
    }

    /// The fraction of calls beyond a p90 bound at `rate` when the SLO
    /// crosses at `truth`: logistic in ln(rate), slope 5.
    fn beyond_fraction(rate: f64, truth: f64) -> f64 {
        1.0 / (1.0 + (-((0.1f64 / 0.9).ln() + 5.0 * (rate / truth).ln())).exp())
    }

    /// A run's evidence for SLOs `(name, truth)`: 2,000 calls, exactly the
    /// expected share beyond the bound (no noise); beyond 1.5× the truth of
    /// the first, the run could not keep up.
    fn evidence(rate: f64, slos: &[(&str, f64)]) -> RunEvidence {
        RunEvidence {
            run_id: format!("r{rate}"),
            rate_rps: rate,
            realized_rps: rate,
            censored: (rate > 1.5 * slos[0].1).then(|| "overloaded".to_string()),
            slos: slos
                .iter()
                .map(|&(name, truth)| SloObservations {
                    slo: name.to_string(),
                    clauses: vec![ClauseObservation {
                        label: "ttft p90 ≤ 1s".into(),
                        bound: Bound::Fraction(0.1),
                        observation: Some(Observation::Count {
                            samples: 2000.0,
                            beyond: (2000.0 * beyond_fraction(rate, truth)).round(),
                            inflation: 1.0,
                        }),
                        slices: None,
                    }],
                })
                .collect(),
        }
    }

    /// Run the search against the synthetic SLOs, 10 s a run.
    fn drive(search: &mut Search, slos: &[(&str, f64)]) -> Vec<f64> {
        let mut rates = vec![];
        while let Some(rate) = search.next_rate() {
            if !search.affords(10.0) {
                break;
            }
            rates.push(rate);
            search.record(evidence(rate, slos), 10.0);
            assert!(rates.len() <= MAX_RUNS as usize, "{rates:?}");
        }
        rates
    }

    #[test]
    fn converges_to_the_crossing_within_its_precision() {
        for truth in [0.7, 3.3, 11.9, 40.0, 63.0] {
            let mut search = Search::new(0.5, 64.0, 0.05, 0.9, Some(8.0), vec!["s".into()], None);
            let rates = drive(&mut search, &[("s", truth)]);
            assert_eq!(search.step("s"), Step::Reached, "{truth}: {rates:?}");
            let fit = search.fit("s");
            let e = fit.estimate_rps.unwrap();
            assert!((e - truth).abs() / truth < 0.02, "{truth}: {fit:?}");
            let [lo, hi] = fit.range;
            assert!(
                lo.unwrap() <= truth && truth <= hi.unwrap(),
                "{truth}: {fit:?}"
            );
            assert!(fit.half_width().unwrap() <= 0.05);
            assert!(rates.len() <= 16, "{truth}: {rates:?}");
        }
    }

    #[test]
    fn a_settling_start_left_out_is_said_on_the_card() {
        let clause = |label: &str, skipped: f64| crate::analyze::cr_open::ClauseCrossing {
            label: label.into(),
            estimate_rps: Some(10.0),
            range: [Some(9.0), Some(11.0)],
            method: "fit".into(),
            slope: 5.0,
            dispersion: 1.0,
            isotonic_rps: None,
            settling_skipped: skipped,
            scale: "fraction".into(),
            allowed: 0.1,
            points: vec![],
        };
        let mut fit = SloFit {
            slo: "s".into(),
            confidence: 0.9,
            estimate_rps: Some(10.0),
            range: [Some(9.0), Some(11.0)],
            method: Method::Fit,
            bound_by: Some("ttft p90 ≤ 1s".into()),
            clauses: vec![clause("ttft p90 ≤ 1s", 0.25), clause("e2e p90 ≤ 5s", 0.5)],
            censored: vec![],
        };
        let note = settling_note(&fit).expect("a note");
        assert!(
            note.contains("`ttft p90 ≤ 1s`") && note.contains("the first quarter"),
            "{note}"
        );
        // Only the binding clause's settling is the card's.
        fit.clauses[0].settling_skipped = 0.0;
        assert_eq!(settling_note(&fit), None);
    }

    #[test]
    fn a_precision_coarser_than_the_largest_step_still_steps() {
        // `precision="30%"`: the step's floor once stood above its cap, and
        // the search panicked on its first fitted step.
        let mut search = Search::new(0.5, 64.0, 0.3, 0.9, Some(8.0), vec!["s".into()], None);
        let rates = drive(&mut search, &[("s", 20.0)]);
        let fit = search.fit("s");
        let e = fit.estimate_rps.expect("a crossing");
        assert!((e - 20.0).abs() / 20.0 < 0.3, "{fit:?} {rates:?}");
    }

    #[test]
    fn brackets_by_doubling_and_halving() {
        let mut search = Search::new(0.5, 64.0, 0.05, 0.9, Some(8.0), vec!["s".into()], None);
        let rates = drive(&mut search, &[("s", 20.0)]);
        assert_eq!(&rates[..3], &[8.0, 16.0, 32.0]);
        let mut search = Search::new(0.5, 64.0, 0.05, 0.9, Some(8.0), vec!["s".into()], None);
        let rates = drive(&mut search, &[("s", 1.5)]);
        assert_eq!(&rates[..4], &[8.0, 4.0, 2.0, 1.0]);
    }

    #[test]
    fn the_ends_of_the_range_stop_the_search() {
        let mut search = Search::new(0.5, 64.0, 0.05, 0.9, Some(10.0), vec!["s".into()], None);
        let rates = drive(&mut search, &[("s", 1000.0)]);
        assert_eq!(rates, vec![10.0, 20.0, 40.0, 64.0]);
        assert_eq!(search.step("s"), Step::AboveMax);
        let mut search = Search::new(0.5, 64.0, 0.05, 0.9, Some(3.0), vec!["s".into()], None);
        let rates = drive(&mut search, &[("s", 0.05)]);
        assert_eq!(rates, vec![3.0, 1.5, 0.75, 0.5]);
        assert_eq!(search.step("s"), Step::BelowMin);
    }

    #[test]
    fn no_estimate_starts_at_geometric_mean() {
        let search = Search::new(0.5, 32.0, 0.05, 0.9, None, vec!["s".into()], None);
        assert_eq!(search.next_rate(), Some(4.0));
        // An estimate outside [min, max] is clamped.
        assert_eq!(
            Search::new(0.5, 32.0, 0.05, 0.9, Some(500.0), vec![], None).start_rps(),
            32.0
        );
    }

    #[test]
    fn the_budget_ends_the_search() {
        let mut search = Search::new(
            0.5,
            64.0,
            0.01,
            0.9,
            Some(8.0),
            vec!["s".into()],
            Some(35.0),
        );
        let rates = drive(&mut search, &[("s", 11.9)]);
        assert_eq!(rates.len(), 3, "{rates:?}");
        assert!((search.spent_s() - 30.0).abs() < 1e-9);
        assert!(!search.affords(10.0));
        assert!(search.affords(5.0));
    }

    #[test]
    fn two_slos_share_runs() {
        let slos = [("interactive", 3.1), ("batch", 4.4)];
        let mut search = Search::new(
            0.5,
            64.0,
            0.05,
            0.9,
            Some(8.0),
            vec!["interactive".into(), "batch".into()],
            None,
        );
        let rates = drive(&mut search, &slos);
        for (name, truth) in slos {
            let fit = search.fit(name);
            let e = fit.estimate_rps.unwrap();
            assert!((e - truth).abs() / truth < 0.02, "{name}: {fit:?}");
            assert_eq!(search.step(name), Step::Reached);
        }
        assert!(rates.len() <= 24, "{rates:?}");
    }

    #[test]
    fn a_cliff_is_bisected_to_the_precision() {
        // Within with no call beyond the bound up to 10 rps, overloaded above.
        let cliff = |rate: f64| RunEvidence {
            censored: (rate > 10.0).then(|| "overloaded".to_string()),
            ..evidence(rate, &[("s", if rate > 10.0 { 1.0 } else { 1e6 })])
        };
        let mut search = Search::new(0.5, 64.0, 0.05, 0.9, Some(4.0), vec!["s".into()], None);
        let mut rates = vec![];
        while let Some(rate) = search.next_rate() {
            rates.push(rate);
            search.record(cliff(rate), 10.0);
            assert!(rates.len() < 20, "{rates:?}");
        }
        let fit = search.fit("s");
        let [lo, hi] = fit.range;
        assert!(lo.unwrap() <= 10.0 && hi.unwrap() > 10.0, "{fit:?}");
        assert!(
            (hi.unwrap() - lo.unwrap()) / lo.unwrap() <= 0.1 + 1e-9,
            "{fit:?}"
        );
        assert!(rates.iter().all(|&r| r <= 16.0), "{rates:?}");
    }

    #[test]
    fn rounding() {
        assert_eq!(round_rate(4.4), 4.4);
        assert_eq!(round_rate(12.345), 12.3);
        assert_eq!(round_rate(0.123456), 0.123);
        assert_eq!(round_rate(1234.5), 1230.0);
        assert_eq!(significant(0.5), "0.5");
        assert_eq!(significant(4.0), "4");
    }

    fn open_run(rate: f64, pass: bool) -> RunSummary {
        let verdict = SloVerdict {
            slo: "chat".into(),
            verdict: pass_or_fail(pass),
            reasons: if pass {
                vec![]
            } else {
                vec!["ttft p99 1.8s > 1s".into()]
            },
            ..SloVerdict::default()
        };
        RunSummary {
            run_id: format!("t--w--r{rate:.3}"),
            rate_rps: Some(rate),
            verdicts: vec![verdict],
            ..RunSummary::default()
        }
    }

    #[test]
    fn cr_open_from_runs() {
        let runs = [
            open_run(8.0, true),
            open_run(4.0, true),
            open_run(16.0, false),
            open_run(12.0, true),
            open_run(14.0, false),
        ];
        let got = cr_open_by_verdicts(&runs, "chat", Some(64.0), None);
        assert_eq!(got.rps, Some(12.0));
        assert_eq!(got.failed_at_rps, Some(14.0));
        assert!(!got.at_least);
        assert_eq!(got.note, None);
        assert_eq!(got.run_id.as_deref(), Some("t--w--r12.000"));
        assert_eq!(got.failed_run_id.as_deref(), Some("t--w--r14.000"));
        assert_eq!(got.failed_clauses, vec!["ttft p99 1.8s > 1s".to_string()]);
    }

    #[test]
    fn cr_open_null_when_min_fails() {
        let got = cr_open_by_verdicts(
            &[open_run(1.0, false), open_run(0.5, false)],
            "chat",
            Some(64.0),
            None,
        );
        assert_eq!(got.rps, None);
        assert_eq!(got.failed_at_rps, Some(0.5));
        assert_eq!(
            got.note.as_deref(),
            Some("even 0.5 rps, the lowest rate tested, failed: ttft p99 1.8s > 1s")
        );
    }

    #[test]
    fn notes_give_rates_in_the_cards_unit() {
        // An agent card's rates are tasks/s: its notes say so, not rps.
        let runs = [open_run(1.0, false), open_run(0.5, false)];
        let got = cr_open_in(&runs, ("chat", "tasks/s"), Some(64.0), None, 0.9);
        let note = got.note.expect("a note");
        assert!(
            note.starts_with("even 0.5 tasks/s, the lowest rate tested"),
            "{note}"
        );
        assert!(!note.contains("rps"), "{note}");
        let passed = by_verdicts_in(
            &[open_run(32.0, true), open_run(64.0, true)],
            ("chat", "conversations/s"),
            Some(64.0),
            None,
        );
        assert_eq!(
            passed.note.as_deref(),
            Some("Cr_open ≥ 64 conversations/s: the search ceiling passed; raise `max`")
        );
    }

    #[test]
    fn cr_open_at_least_when_max_passes() {
        let got = cr_open_by_verdicts(
            &[open_run(32.0, true), open_run(64.0, true)],
            "chat",
            Some(64.0),
            None,
        );
        assert_eq!((got.rps, got.at_least), (Some(64.0), true));
        assert_eq!(
            got.note.as_deref(),
            Some("Cr_open ≥ 64 rps: the search ceiling passed; raise `max`")
        );
        let grid = cr_open_by_verdicts(
            &[open_run(1.0, true), open_run(2.0, true)],
            "chat",
            None,
            None,
        );
        assert!(grid.at_least);
        assert!(grid.note.unwrap().contains("no rate of the grid failed"));
    }

    #[test]
    fn cr_open_non_monotonic_stays_below_the_failure() {
        let got = cr_open_by_verdicts(
            &[
                open_run(2.0, true),
                open_run(4.0, false),
                open_run(8.0, true),
            ],
            "chat",
            Some(64.0),
            None,
        );
        assert_eq!((got.rps, got.failed_at_rps), (Some(2.0), Some(4.0)));
        assert!(got.note.unwrap().starts_with("passed again at 8 rps"));
    }

    #[test]
    fn cr_open_without_runs_for_the_slo() {
        let got = cr_open_by_verdicts(&[open_run(2.0, true)], "batch", Some(64.0), None);
        assert_eq!(got.rps, None);
        assert_eq!(
            got.note.as_deref(),
            Some("no open run evaluated the SLO `batch`")
        );
    }

    #[test]
    fn start_estimate_by_littles_law() {
        let mut closed = vec![level(8, 100.0, 800.0), level(16, 200.0, 1000.0)];
        let knee = crate::analyze::knee::cr_closed(&closed, &Default::default()).unwrap();
        assert_eq!(knee.range[0], 16);
        closed[1].e2e_ms.mean = 4000.0; // 16 in flight / 4 s = 4 tasks/s
        assert_eq!(start_estimate(&closed, Some(&knee)), Some(4.0));
        // Tasks: the task E2E is what Little's law divides by.
        closed[1].task_e2e_ms = Some(LatencyStats {
            count: 10,
            mean: 8000.0,
            ..Default::default()
        });
        assert_eq!(start_estimate(&closed, Some(&knee)), Some(2.0));
        assert_eq!(start_estimate(&closed, None), None);
    }

    fn verdict_run(rate: f64, verdict: Verdict) -> RunSummary {
        RunSummary {
            run_id: format!("t--w--r{rate}"),
            rate_rps: Some(rate),
            verdicts: vec![SloVerdict {
                slo: "chat".into(),
                verdict,
                reasons: vec!["ttft p90 250ms [200ms, 300ms]: interval straddles 250ms".into()],
                ..SloVerdict::default()
            }],
            ..RunSummary::default()
        }
    }

    #[test]
    fn cr_open_range_and_inconclusive_notes() {
        let got = cr_open_by_verdicts(
            &[
                verdict_run(4.0, Verdict::Pass),
                verdict_run(4.2, Verdict::Pass),
                verdict_run(4.4, Verdict::Fail),
            ],
            "chat",
            Some(64.0),
            Some(0.05),
        );
        assert_eq!(got.range, [Some(4.2), Some(4.4)]);
        assert_eq!(got.precision_reached, Some(true));
        assert_eq!(got.note, None);
        // Only inconclusive rates: nothing is promised.
        let got = cr_open_by_verdicts(
            &[
                verdict_run(1.0, Verdict::Inconclusive),
                verdict_run(2.0, Verdict::Inconclusive),
            ],
            "chat",
            None,
            None,
        );
        assert_eq!((got.rps, got.range), (None, [None, None]));
        assert!(
            got.note
                .unwrap()
                .starts_with("inconclusive within the budget at every rate tested (1, 2 rps)")
        );
        // A grid whose lowest rate is inconclusive and the next fails: no false "even".
        let got = cr_open_by_verdicts(
            &[
                verdict_run(1.0, Verdict::Inconclusive),
                verdict_run(2.0, Verdict::Fail),
            ],
            "chat",
            None,
            None,
        );
        assert!(
            got.note
                .unwrap()
                .starts_with("no rate passed conclusively: 2 rps failed")
        );
    }

    #[test]
    fn extension_only_for_wanted_inconclusive_slos() {
        let run = verdict_run(4.0, Verdict::Inconclusive);
        assert!(needs_extension(&run, &["chat".to_string()]));
        assert!(!needs_extension(&run, &["other".to_string()]));
        assert!(!needs_extension(
            &verdict_run(4.0, Verdict::Fail),
            &["chat".to_string()]
        ));
        let invalid = RunSummary {
            invalid: true,
            ..run
        };
        assert!(!needs_extension(&invalid, &["chat".to_string()]));
    }

    /// A fit with an estimate and no lower end: the note says nothing is
    /// promised yet and what would give a promise.
    #[test]
    fn an_open_lower_end_says_nothing_is_promised_and_what_would() {
        let fit = SloFit {
            slo: "s".into(),
            confidence: 0.9,
            estimate_rps: Some(39.0),
            range: [None, Some(45.0)],
            method: Method::Fit,
            bound_by: Some("ttft".into()),
            clauses: vec![],
            censored: vec![],
        };
        let runs: Vec<RunEvidence> = [36.0, 42.0]
            .iter()
            .map(|&r| RunEvidence {
                run_id: format!("r{r}"),
                rate_rps: r,
                realized_rps: r,
                censored: None,
                slos: vec![],
            })
            .collect();
        let note = fit_note(&fit, &runs, ("s", "rps"), Some(80.0), Some(0.05), None).unwrap();
        assert!(
            note.starts_with("the runs do not bound Cr_open from below"),
            "{note}"
        );
        assert!(note.contains("nothing is promised yet"), "{note}");
        assert!(note.contains("a lower `min` for the search"), "{note}");
        assert!(
            note.contains("`budget`") && note.contains("`duration`"),
            "{note}"
        );
        let grid = fit_note(&fit, &runs, ("s", "rps"), None, None, None).unwrap();
        assert!(grid.contains("lower rates in the grid"), "{grid}");
        // Runs already far below the estimate: a lower `min` would not
        // help; longer runs would.
        let mut far = runs.clone();
        far[0].realized_rps = 16.0;
        far[0].rate_rps = 16.0;
        let note = fit_note(&fit, &far, ("s", "rps"), Some(80.0), Some(0.05), None).unwrap();
        assert!(note.contains("nothing is promised yet"), "{note}");
        assert!(!note.contains("a lower `min`"), "{note}");
        assert!(note.contains("a longer `duration` per run"), "{note}");
    }
}
