//! The Cr_open search (pure state machine): bracket, then bisect, per SLO,
//! sharing runs across SLOs, on three-valued verdicts. The runner asks
//! [`Search::next_rate`], runs it, and feeds the verdicts back with
//! [`Search::record`]; it never loops on its own, so the whole search is
//! testable with a synthetic oracle.
//!
//! # Verdicts
//!
//! Each run is `pass`, `fail` or `inconclusive` per SLO
//! ([`slo`](super::slo)). Only conclusive verdicts move a bracket: an
//! inconclusive rate is never read as a failure (nor as a pass), so an SLO
//! whose verdict at a rate run for another SLO was inconclusive keeps its
//! own bracket. Each SLO's bracket is *(highest pass below the lowest
//! failure, lowest failure)*: a pass above a failure (noise) cannot lift
//! Cr_open above a rate that was seen to fail, the conservative reading for
//! a capacity promise.
//!
//! # The search, per SLO
//!
//! 1. Start at the estimate from the closed sweep ([`start_estimate`],
//!    Little's law), clamped to `[min, max]`; without one, at the geometric
//!    mean of `min` and `max`.
//! 2. Bracket: after a pass, double the rate (capped at `max`) until a rate
//!    fails or `max` passes; after a failure, halve it (floored at `min`)
//!    until a rate passes or `min` fails. Rates already run inconclusive are
//!    stepped over. With only inconclusive rates so far, go down from the
//!    lowest, then up from the highest.
//! 3. Bisect: inside the bracket, the rates found inconclusive cut it into
//!    gaps; the widest gap wider than `precision` (relative) is halved,
//!    until every gap is within `precision`. When inconclusive rates are
//!    what keeps the bracket wide, the precision asked for was not reached
//!    and the card says so.
//!
//! Rates are rounded to 3 significant digits and never run twice (the
//! runner may extend a rate once, and records the longer run's verdicts in
//! its place); when rounding leaves no new rate inside a gap, that gap is
//! as fine as the search can make it. [`Search::max_runs`] bounds the
//! search as a safety net.
//!
//! # The runner's loop
//!
//! ```text
//! let mut search = Search::new(min, max, precision, start_estimate(..), slo_names);
//! while let Some(rate) = search.next_rate() {
//!     let mut summary = run(rate);
//!     if needs_extension(&summary, &search.unresolved()) && budget_left {
//!         summary = run(rate, longer);   // a journal of its own
//!     }
//!     search.record(rate, &verdicts_of(&summary));
//! }
//! ```

use std::collections::BTreeMap;

use super::{CrClosed, CrOpen, RunSummary};
use crate::format::significant;
use crate::stats::interval::Verdict;

/// Search state for all SLOs of one card.
#[derive(Debug, Clone)]
pub struct Search {
    min_rps: f64,
    max_rps: f64,
    precision: f64,
    start_rps: f64,
    slos: Vec<String>,
    runs: Vec<SearchRun>,
    max_runs: u32,
}

/// One recorded run of the search.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRun {
    pub rate_rps: f64,
    /// SLO name → verdict. An SLO missing here is inconclusive.
    pub verdicts: BTreeMap<String, Verdict>,
}

/// The verdicts of a run by SLO name, as the search records them.
pub fn verdicts_of(summary: &RunSummary) -> BTreeMap<String, Verdict> {
    summary
        .verdicts
        .iter()
        .map(|v| (v.slo.clone(), v.verdict))
        .collect()
}

impl Search {
    /// `min`/`max` in requests (tasks) per second, `precision` a fraction
    /// (0.05 = 5%). `start_rps` is clamped to `[min, max]`.
    pub fn new(
        min: f64,
        max: f64,
        precision: f64,
        start_rps: Option<f64>,
        slos: Vec<String>,
    ) -> Search {
        // Defensive against an unvalidated caller: rates must be positive and ordered.
        let min_rps = if min > 0.0 { min } else { 1e-3 };
        let max_rps = if max > min_rps { max } else { min_rps };
        let start_rps = match start_rps {
            Some(s) if s.is_finite() && s > 0.0 => round_rate(s.clamp(min_rps, max_rps)),
            _ => round_rate((min_rps * max_rps).sqrt()),
        }
        .clamp(min_rps, max_rps);
        let max_runs = Self::run_bound(min_rps, max_rps, precision, slos.len());
        Search {
            min_rps,
            max_rps,
            precision,
            start_rps,
            slos,
            runs: Vec::new(),
            max_runs,
        }
    }

    /// Upper bound on the runs of a search: bracketing shares one doubling /
    /// halving path through `[min, max]`, and each SLO then bisects a bracket
    /// of ratio ≤ 2 down to `precision` — twice over, for the gaps that
    /// inconclusive rates leave. Usable by the planner's estimate.
    pub fn run_bound(min: f64, max: f64, precision: f64, slos: usize) -> u32 {
        crate::plan::search_max_runs(
            crate::config::RatePerS(min),
            crate::config::RatePerS(max),
            crate::config::Fraction(precision),
            slos,
        )
    }

    /// Next rate to run, or `None` when every SLO's bracket is resolved (or
    /// the run bound is reached).
    pub fn next_rate(&self) -> Option<f64> {
        if self.runs.len() >= self.max_runs as usize {
            return None;
        }
        self.slos.iter().find_map(|slo| self.step(slo))
    }

    /// Record the verdicts of a run at `rate_rps`. Recording a rate that was
    /// already run (e.g. extended for a conclusive verdict) replaces it.
    pub fn record(&mut self, rate_rps: f64, verdicts: &BTreeMap<String, Verdict>) {
        let run = SearchRun {
            rate_rps,
            verdicts: verdicts.clone(),
        };
        match self
            .runs
            .iter_mut()
            .find(|r| same_rate(r.rate_rps, rate_rps))
        {
            Some(existing) => *existing = run,
            None => self.runs.push(run),
        }
    }

    /// The runs recorded so far, in order.
    pub fn runs(&self) -> &[SearchRun] {
        &self.runs
    }

    /// The safety bound on the number of runs.
    pub fn max_runs(&self) -> u32 {
        self.max_runs
    }

    /// The first rate the search runs.
    pub fn start_rps(&self) -> f64 {
        self.start_rps
    }

    /// The SLOs that still want runs.
    pub fn unresolved(&self) -> Vec<String> {
        self.slos
            .iter()
            .filter(|s| !self.is_resolved(s))
            .cloned()
            .collect()
    }

    fn verdict_at(run: &SearchRun, slo: &str) -> Verdict {
        run.verdicts
            .get(slo)
            .copied()
            .unwrap_or(Verdict::Inconclusive)
    }

    /// `(highest conclusive pass below the lowest conclusive failure, that
    /// failure)` for `slo`.
    pub fn bracket(&self, slo: &str) -> (Option<f64>, Option<f64>) {
        let with = |v: Verdict| {
            self.runs
                .iter()
                .filter(move |r| Self::verdict_at(r, slo) == v)
                .map(|r| r.rate_rps)
        };
        let lowest_fail = with(Verdict::Fail).min_by(f64::total_cmp);
        let highest_pass = with(Verdict::Pass)
            .filter(|&r| lowest_fail.is_none_or(|f| r < f))
            .max_by(f64::total_cmp);
        (highest_pass, lowest_fail)
    }

    /// Rates run so far whose verdict for `slo` was inconclusive, ascending.
    pub fn inconclusive(&self, slo: &str) -> Vec<f64> {
        let mut rates: Vec<f64> = self
            .runs
            .iter()
            .filter(|r| Self::verdict_at(r, slo) == Verdict::Inconclusive)
            .map(|r| r.rate_rps)
            .collect();
        rates.sort_by(f64::total_cmp);
        rates
    }

    /// Whether `slo` needs no more runs.
    pub fn is_resolved(&self, slo: &str) -> bool {
        self.step(slo).is_none()
    }

    fn tried(&self, rate: f64) -> bool {
        self.runs.iter().any(|r| same_rate(r.rate_rps, rate))
    }

    fn up(&self, rate: f64) -> f64 {
        if rate * 2.0 >= self.max_rps {
            self.max_rps
        } else {
            round_rate(rate * 2.0)
        }
    }

    fn down(&self, rate: f64) -> f64 {
        if rate / 2.0 <= self.min_rps {
            self.min_rps
        } else {
            round_rate(rate / 2.0)
        }
    }

    /// From `rate`, keep stepping (`up` or `down`) over rates already run
    /// until an untried one; `None` at the end of `[min, max]`.
    fn walk(&self, rate: f64, step: impl Fn(&Self, f64) -> f64) -> Option<f64> {
        let mut r = rate;
        for _ in 0..64 {
            let next = step(self, r);
            if same_rate(next, r) {
                return None; // at min or max
            }
            if !self.tried(next) {
                return Some(next);
            }
            r = next;
        }
        None
    }

    /// The next rate `slo` wants, `None` once its bracket is resolved.
    fn step(&self, slo: &str) -> Option<f64> {
        match self.bracket(slo) {
            (None, None) => {
                if !self.tried(self.start_rps) {
                    return Some(self.start_rps);
                }
                let tried = self.inconclusive(slo);
                let lowest = tried.first().copied().unwrap_or(self.start_rps);
                let highest = tried.last().copied().unwrap_or(self.start_rps);
                self.walk(lowest, Self::down)
                    .or_else(|| self.walk(highest, Self::up))
            }
            (Some(pass), None) => {
                if pass >= self.max_rps * (1.0 - 1e-9) {
                    return None; // Cr_open ≥ max
                }
                self.walk(pass, Self::up)
            }
            (None, Some(fail)) => {
                if fail <= self.min_rps * (1.0 + 1e-9) {
                    return None; // even min fails
                }
                self.walk(fail, Self::down)
            }
            (Some(pass), Some(fail)) => {
                let mut points = vec![pass];
                points.extend(
                    self.inconclusive(slo)
                        .into_iter()
                        .filter(|&r| r > pass && r < fail),
                );
                points.push(fail);
                let mut gaps: Vec<(f64, f64)> = points.windows(2).map(|w| (w[0], w[1])).collect();
                gaps.sort_by(|a, b| ((b.1 - b.0) / b.0).total_cmp(&((a.1 - a.0) / a.0)));
                gaps.into_iter()
                    .filter(|(a, b)| (b - a) / a > self.precision + 1e-12)
                    .map(|(a, b)| (a, b, round_rate((a + b) / 2.0)))
                    .find(|&(a, b, mid)| mid > a && mid < b && !self.tried(mid))
                    .map(|(_, _, mid)| mid)
            }
        }
    }
}

/// One verdict per SLO from the repetitions of a rate (`repeat N`): a
/// failure if any repetition failed, a pass only if every one passed.
pub fn combine_repetitions(runs: &[BTreeMap<String, Verdict>]) -> BTreeMap<String, Verdict> {
    let mut combined: BTreeMap<String, Verdict> = BTreeMap::new();
    for run in runs {
        for (slo, &v) in run {
            let entry = combined.entry(slo.clone()).or_insert(Verdict::Pass);
            *entry = Verdict::all([*entry, v]);
        }
    }
    // An SLO some repetition did not judge cannot pass.
    for (slo, v) in &mut combined {
        if runs.iter().any(|r| !r.contains_key(slo)) {
            *v = Verdict::all([*v, Verdict::Inconclusive]);
        }
    }
    combined
}

/// Should the run just made be extended before it is recorded? Yes when an
/// SLO in `wanted` (those the search or grid still needs) was inconclusive
/// on it. A failure — conclusive, or an overloaded or invalid run — is never
/// extended: more samples cannot save it.
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

/// Cr_open for one SLO from the open runs that were executed (after a search,
/// over a grid, or recomputed by `capcard report`).
///
/// `range` is `[highest conclusive pass below the lowest conclusive failure,
/// that failure]` (see the module doc on noise); `rps`, the point, is its
/// lower end: the highest rate shown to meet the SLO. Inconclusive rates
/// decide nothing and are listed. `precision` (a search's) says whether the
/// range is as narrow as asked. Nothing passed: `rps` is null and the note
/// says why. No failure: `at_least` — with `max_rps` (a search) and the
/// highest rate ≥ max the note says to raise `max`; without it (a grid), to
/// add higher rates.
pub fn cr_open(
    open: &[RunSummary],
    slo: &str,
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
                    "even {} rps, the lowest rate tested, failed{why}",
                    significant(rate)
                )
            } else {
                format!(
                    "no rate passed conclusively: {} rps failed{why}; {} rps stayed inconclusive within the budget",
                    significant(rate),
                    below.join(", ")
                )
            })
        }
        (None, None) => {
            let first = runs.first().map(|r| reasons(r.2)).unwrap_or_default();
            Some(format!(
                "inconclusive within the budget at every rate tested ({} rps){}",
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
                format!(" ({} rps inconclusive)", above.join(", "))
            };
            Some(match max_rps {
                Some(max) if rate >= max * (1.0 - 1e-9) => format!(
                    "Cr_open ≥ {} rps: the search ceiling passed; raise `max`",
                    significant(rate)
                ),
                Some(_) => format!(
                    "Cr_open ≥ {} rps: no tested rate failed{undecided}",
                    significant(rate)
                ),
                None => format!(
                    "Cr_open ≥ {} rps: no rate of the grid failed{undecided}; add higher rates",
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
                    "the precision asked for was not reached: {} rps stayed inconclusive \
                     within the budget, so Cr_open lies between {} and {} rps",
                    between.join(", "),
                    significant(pass_rate),
                    significant(fail_rate)
                ))
            } else if let Some(r) = above_fail {
                Some(format!(
                    "passed again at {} rps, above the failure at {} rps: results are not \
                     monotonic (noise, or an unstable replica); Cr_open is taken below the \
                     lowest failure",
                    significant(r.0),
                    significant(fail_rate)
                ))
            } else if result.precision_reached == Some(false) {
                Some(format!(
                    "the precision asked for was not reached within the search's runs: \
                     Cr_open lies between {} and {} rps",
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
    use crate::analyze::crossp::tests::level;
    use crate::analyze::slo::SloVerdict;

    fn pass_or_fail(pass: bool) -> Verdict {
        if pass { Verdict::Pass } else { Verdict::Fail }
    }

    fn v(pass: bool) -> BTreeMap<String, Verdict> {
        BTreeMap::from([("s".to_string(), pass_or_fail(pass))])
    }

    /// Run the search against threshold oracles: SLO `name` passes below `threshold`.
    fn drive(search: &mut Search, thresholds: &[(&str, f64)]) -> Vec<f64> {
        let mut rates = vec![];
        while let Some(rate) = search.next_rate() {
            assert!(!rates.contains(&rate), "rate {rate} run twice: {rates:?}");
            rates.push(rate);
            let verdicts = thresholds
                .iter()
                .map(|&(name, t)| (name.to_string(), pass_or_fail(rate <= t)))
                .collect();
            search.record(rate, &verdicts);
            assert!(rates.len() <= 100, "search does not terminate: {rates:?}");
        }
        rates
    }

    #[test]
    fn converges_within_precision_of_the_threshold() {
        for threshold in [0.7, 3.3, 5.0, 11.9, 40.0, 63.0] {
            let mut search = Search::new(0.5, 64.0, 0.05, Some(8.0), vec!["s".into()]);
            let rates = drive(&mut search, &[("s", threshold)]);
            let (pass, fail) = search.bracket("s");
            let (pass, fail) = (pass.unwrap(), fail.unwrap());
            assert!(
                pass <= threshold && fail > threshold,
                "{threshold}: {pass}..{fail}"
            );
            assert!(
                (fail - pass) / pass <= 0.05 + 1e-9,
                "{threshold}: {rates:?}"
            );
            assert!(rates.len() as u32 <= search.max_runs(), "{rates:?}");
        }
    }

    #[test]
    fn brackets_by_doubling_and_halving() {
        let mut search = Search::new(0.5, 64.0, 0.05, Some(8.0), vec!["s".into()]);
        let rates = drive(&mut search, &[("s", 20.0)]);
        assert_eq!(&rates[..3], &[8.0, 16.0, 32.0]);
        assert_eq!(rates[3], 24.0);
        let mut search = Search::new(0.5, 64.0, 0.05, Some(8.0), vec!["s".into()]);
        let rates = drive(&mut search, &[("s", 1.5)]);
        assert_eq!(&rates[..4], &[8.0, 4.0, 2.0, 1.0]);
    }

    #[test]
    fn min_failing_gives_no_pass() {
        let mut search = Search::new(0.5, 64.0, 0.05, Some(3.0), vec!["s".into()]);
        let rates = drive(&mut search, &[("s", 0.1)]);
        assert_eq!(rates, vec![3.0, 1.5, 0.75, 0.5]);
        assert_eq!(search.bracket("s"), (None, Some(0.5)));
    }

    #[test]
    fn max_passing_is_at_least() {
        let mut search = Search::new(0.5, 64.0, 0.05, Some(10.0), vec!["s".into()]);
        let rates = drive(&mut search, &[("s", 1000.0)]);
        assert_eq!(rates, vec![10.0, 20.0, 40.0, 64.0]);
        assert_eq!(search.bracket("s"), (Some(64.0), None));
    }

    #[test]
    fn no_estimate_starts_at_geometric_mean() {
        let search = Search::new(0.5, 32.0, 0.05, None, vec!["s".into()]);
        assert_eq!(search.next_rate(), Some(4.0));
        // An estimate outside [min, max] is clamped.
        assert_eq!(
            Search::new(0.5, 32.0, 0.05, Some(500.0), vec![]).start_rps(),
            32.0
        );
    }

    #[test]
    fn two_slos_share_runs() {
        let thresholds = [("interactive", 3.1), ("batch", 13.0)];
        let mut search = Search::new(
            0.5,
            64.0,
            0.05,
            Some(8.0),
            vec!["interactive".into(), "batch".into()],
        );
        let rates = drive(&mut search, &thresholds);
        for (name, t) in thresholds {
            let (pass, fail) = search.bracket(name);
            let (pass, fail) = (pass.unwrap(), fail.unwrap());
            assert!(
                pass <= t && fail > t && (fail - pass) / pass <= 0.05 + 1e-9,
                "{name}"
            );
        }
        // `batch` reuses the runs of `interactive` (its pass at 8 and below).
        let alone = |t| {
            drive(
                &mut Search::new(0.5, 64.0, 0.05, Some(8.0), vec!["s".into()]),
                &[("s", t)],
            )
            .len()
        };
        assert!(rates.len() < alone(3.1) + alone(13.0), "{rates:?}");
        assert!(rates.len() as u32 <= search.max_runs());
    }

    #[test]
    fn noisy_oracle_terminates_and_stays_below_the_lowest_failure() {
        let mut search = Search::new(0.5, 64.0, 0.02, Some(8.0), vec!["s".into()]);
        let mut rates = vec![];
        // A glitch fails the start rate 8, although everything up to 20 would pass.
        while let Some(rate) = search.next_rate() {
            rates.push(rate);
            let pass = rate <= 20.0 && rate != 8.0;
            search.record(rate, &v(pass));
        }
        let (pass, fail) = search.bracket("s");
        assert_eq!(fail, Some(8.0));
        assert!(pass.unwrap() < 8.0 && (8.0 - pass.unwrap()) / pass.unwrap() <= 0.02);
        assert!(rates.len() as u32 <= search.max_runs());

        // A pass above a failure does not lift the bracket.
        let mut search = Search::new(0.5, 64.0, 0.02, Some(8.0), vec!["s".into()]);
        for (rate, pass) in [(16.0, true), (8.0, false), (4.0, true)] {
            search.record(rate, &v(pass));
        }
        assert_eq!(search.bracket("s"), (Some(4.0), Some(8.0)));
        assert_eq!(search.next_rate(), Some(6.0));
    }

    #[test]
    fn precision_finer_than_rounding_still_ends() {
        let mut search = Search::new(1.0, 2.0, 1e-6, Some(1.0), vec!["s".into()]);
        let rates = drive(&mut search, &[("s", 1.2345)]);
        let (pass, fail) = search.bracket("s");
        assert_eq!((pass, fail), (Some(1.23), Some(1.24)));
        assert!(rates.len() <= 12, "{rates:?}");
    }

    #[test]
    fn rerecording_a_rate_replaces_it() {
        let mut search = Search::new(0.5, 64.0, 0.05, Some(8.0), vec!["s".into()]);
        search.record(8.0, &v(false));
        search.record(8.0, &v(true));
        assert_eq!(search.runs().len(), 1);
        assert_eq!(search.next_rate(), Some(16.0));
        // A run without the SLO's verdict decides nothing for it.
        search.record(16.0, &BTreeMap::new());
        assert_eq!(search.bracket("s"), (Some(8.0), None));
        assert_eq!(search.inconclusive("s"), vec![16.0]);
        assert_eq!(search.next_rate(), Some(32.0));
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
        let got = cr_open(&runs, "chat", Some(64.0), None);
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
        let got = cr_open(
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
    fn cr_open_at_least_when_max_passes() {
        let got = cr_open(
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
        let grid = cr_open(
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
        let got = cr_open(
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
        let got = cr_open(&[open_run(2.0, true)], "batch", Some(64.0), None);
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
    fn an_inconclusive_rate_is_neither_pass_nor_fail() {
        let mut search = Search::new(0.5, 64.0, 0.05, Some(8.0), vec!["s".into()]);
        search.record(8.0, &BTreeMap::from([("s".into(), Verdict::Inconclusive)]));
        assert_eq!(search.bracket("s"), (None, None));
        // Only inconclusive so far: look below it for a pass first.
        assert_eq!(search.next_rate(), Some(4.0));
        search.record(4.0, &v(true));
        // 8 stays inconclusive: step over it to find a failure.
        assert_eq!(search.next_rate(), Some(16.0));
        search.record(16.0, &v(false));
        // Bisect the gaps 4–8 and 8–16 (as wide, relatively): the lower first.
        assert_eq!(search.next_rate(), Some(6.0));
    }

    #[test]
    fn inconclusive_band_ends_the_search_without_its_precision() {
        // Everything within ±10% of 10 is inconclusive (the noise band of a
        // finite run); below passes, above fails.
        let oracle = |rate: f64| {
            if rate < 9.0 {
                Verdict::Pass
            } else if rate <= 11.0 {
                Verdict::Inconclusive
            } else {
                Verdict::Fail
            }
        };
        let mut search = Search::new(0.5, 64.0, 0.02, Some(8.0), vec!["s".into()]);
        let mut runs = vec![];
        while let Some(rate) = search.next_rate() {
            assert!(!runs.contains(&rate), "{rate} twice: {runs:?}");
            runs.push(rate);
            search.record(rate, &BTreeMap::from([("s".into(), oracle(rate))]));
            assert!(runs.len() <= 60);
        }
        let summaries: Vec<RunSummary> = runs.iter().map(|&r| verdict_run(r, oracle(r))).collect();
        let got = cr_open(&summaries, "chat", Some(64.0), Some(0.02));
        let [lo, hi] = got.range;
        assert!(
            lo.unwrap() < 9.0 && lo.unwrap() >= 9.0 / 1.02 - 1e-9,
            "{got:?}"
        );
        assert!(
            hi.unwrap() > 11.0 && hi.unwrap() <= 11.0 * 1.02 + 1e-9,
            "{got:?}"
        );
        assert_eq!(got.rps, lo);
        assert_eq!(got.precision_reached, Some(false));
        assert!(
            got.note
                .unwrap()
                .contains("the precision asked for was not reached")
        );
        assert!(!got.inconclusive_rps.is_empty());
        assert!(runs.len() as u32 <= search.max_runs());
    }

    #[test]
    fn a_second_slo_keeps_its_bracket_through_another_slos_inconclusive_runs() {
        // `strict` drives the search low; at those rates `relaxed` (which holds
        // to 20 rps) is inconclusive for lack of samples. Before, that read as
        // a failure and `relaxed` lost its Cr_open.
        let mut search = Search::new(
            0.5,
            64.0,
            0.05,
            Some(8.0),
            vec!["strict".into(), "relaxed".into()],
        );
        let mut runs = vec![];
        while let Some(rate) = search.next_rate() {
            runs.push(rate);
            let strict = if rate <= 3.0 {
                Verdict::Pass
            } else {
                Verdict::Fail
            };
            let relaxed = if rate < 6.0 {
                Verdict::Inconclusive
            } else if rate <= 20.0 {
                Verdict::Pass
            } else {
                Verdict::Fail
            };
            search.record(
                rate,
                &BTreeMap::from([("strict".into(), strict), ("relaxed".into(), relaxed)]),
            );
            assert!(runs.len() <= 60);
        }
        let (pass, fail) = search.bracket("relaxed");
        assert!(pass.unwrap() <= 20.0 && fail.unwrap() > 20.0, "{runs:?}");
        assert!((fail.unwrap() - pass.unwrap()) / pass.unwrap() <= 0.05 + 1e-9);
        let (pass, fail) = search.bracket("strict");
        assert!(pass.unwrap() <= 3.0 && fail.unwrap() > 3.0, "{runs:?}");
    }

    #[test]
    fn cr_open_range_and_inconclusive_notes() {
        let got = cr_open(
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
        let got = cr_open(
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
        let got = cr_open(
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
    fn repetitions_pass_only_together() {
        let one =
            |a: Verdict, b: Verdict| BTreeMap::from([("a".to_string(), a), ("b".to_string(), b)]);
        let got = combine_repetitions(&[
            one(Verdict::Pass, Verdict::Pass),
            one(Verdict::Inconclusive, Verdict::Fail),
            one(Verdict::Pass, Verdict::Pass),
        ]);
        assert_eq!(got["a"], Verdict::Inconclusive);
        assert_eq!(got["b"], Verdict::Fail);
        // A repetition that did not judge an SLO keeps it from passing.
        let got = combine_repetitions(&[one(Verdict::Pass, Verdict::Pass), BTreeMap::new()]);
        assert_eq!(got["a"], Verdict::Inconclusive);
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

    /// The plan's bound on a search's runs is the search's own (the plan
    /// sits below the analysis, so the check lives here, where both are seen).
    #[test]
    fn the_plans_bound_is_the_searchs_own() {
        use crate::quantity::{Fraction, RatePerS};
        assert_eq!(
            crate::plan::search_max_runs(RatePerS(0.5), RatePerS(64.0), Fraction(0.05), 2),
            Search::new(0.5, 64.0, 0.05, None, vec!["a".into(), "b".into()]).max_runs()
        );
    }

    /// The typical count against the search itself: Cr_open spread evenly
    /// in log over `[min, max]`, an oracle that passes every rate at or
    /// below it, and the search's mean number of runs.
    #[test]
    fn the_typical_count_is_what_the_search_takes_on_average() {
        use crate::plan::search_typical_runs;
        use crate::quantity::{Fraction, RatePerS};
        let runs_until_done = |min: f64, max: f64, p: f64, crs: &[f64], start: Option<f64>| {
            let names: Vec<String> = (0..crs.len()).map(|i| format!("s{i}")).collect();
            let mut search = Search::new(min, max, p, start, names.clone());
            let mut n = 0;
            while let Some(rate) = search.next_rate() {
                let verdicts = names
                    .iter()
                    .zip(crs)
                    .map(|(name, &cr)| {
                        let v = if rate <= cr {
                            Verdict::Pass
                        } else {
                            Verdict::Fail
                        };
                        (name.clone(), v)
                    })
                    .collect();
                search.record(rate, &verdicts);
                n += 1;
            }
            n
        };
        for (min, max, p) in [
            (1.0f64, 200.0f64, 0.1),
            (0.05, 8.0, 0.05),
            (0.5, 64.0, 0.05),
            (2.0, 8.0, 0.02),
            (1.0, 400.0, 0.25),
            (1.0, 3.0, 0.1),
        ] {
            // A narrow range leaves a looser second SLO passing at `max`
            // (no bisection): the formula assumes each SLO finds its
            // Cr_open inside.
            let slo_counts: &[usize] = if max / min >= 64.0 { &[1, 2] } else { &[1] };
            for &slos in slo_counts {
                let quantiles = 200;
                let (mut middle, mut closed) = (0.0, 0.0);
                for k in 0..quantiles {
                    let q = (f64::from(k) + 0.5) / f64::from(quantiles);
                    let cr = min * (max / min).powf(q);
                    // A second SLO twice as loose as the first.
                    let crs: Vec<f64> = (0..slos).map(|i| cr * 2f64.powi(i as i32)).collect();
                    middle += f64::from(runs_until_done(min, max, p, &crs, None));
                    // The closed sweep's start (Little's law at the knee)
                    // sits above Cr_open, by less than a factor 2: spread
                    // over 1.05–1.95, in another order than Cr_open.
                    let spread = f64::from((k * 37) % quantiles) / f64::from(quantiles);
                    let start = cr * (1.05 + 0.9 * spread);
                    closed += f64::from(runs_until_done(min, max, p, &crs, Some(start)));
                }
                let (middle, closed) =
                    (middle / f64::from(quantiles), closed / f64::from(quantiles));
                let typical = |from_closed| {
                    f64::from(search_typical_runs(
                        RatePerS(min),
                        RatePerS(max),
                        Fraction(p),
                        slos,
                        from_closed,
                    ))
                };
                assert!(
                    (typical(false) - middle).abs() <= 1.0,
                    "[{min}, {max}] at {p}, {slos} SLOs: typical {} vs the search's mean {middle}",
                    typical(false)
                );
                assert!(
                    (typical(true) - closed).abs() <= 1.0,
                    "[{min}, {max}] at {p}, {slos} SLOs from a closed sweep: typical {} vs {closed}",
                    typical(true)
                );
            }
        }
        // One rate: one run.
        assert_eq!(
            search_typical_runs(RatePerS(4.0), RatePerS(4.0), Fraction(0.05), 1, false),
            1
        );
    }
}
