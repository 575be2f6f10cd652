//! The Cr_open search (pure state machine): bracket, then bisect, per SLO,
//! sharing runs across SLOs. The runner asks [`Search::next_rate`], runs it,
//! and feeds the verdicts back with [`Search::record`]; it never loops on
//! its own, so the whole search is testable with a synthetic oracle.
//!
//! # The search, per SLO
//!
//! 1. Start at the estimate from the closed sweep ([`start_estimate`],
//!    Little's law), clamped to `[min, max]`; without one, at the geometric
//!    mean of `min` and `max`.
//! 2. Bracket: after a pass, double the rate (capped at `max`) until a rate
//!    fails or `max` passes; after a failure, halve it (floored at `min`)
//!    until a rate passes or `min` fails.
//! 3. Bisect between the highest passing rate and the lowest failing rate
//!    until `(fail − pass) / pass ≤ precision`.
//!
//! Every recorded run updates every SLO's bracket, and [`Search::next_rate`]
//! returns the next rate of the first unresolved SLO, so an SLO often finds
//! its bracket already narrowed by the runs of the ones before it.
//!
//! # The runner's loop
//!
//! ```text
//! let mut search = Search::new(min, max, precision, start_estimate(..), slo_names);
//! while let Some(rate) = search.next_rate() {
//!     let mut summary = run(rate, planned_stop);
//!     if let Some(calls) = needs_longer(&summary, &slos) {
//!         summary = run(rate, StopRule::Requests(calls));   // once, then judge
//!     }
//!     search.record(rate, &summary.slo_pass);
//! }
//! let cards_cr_open = slos.iter().map(|s| cr_open(&open_summaries, &s.name, Some(max)));
//! ```
//!
//! A search without SLOs has nothing to find: `next_rate` is `None` at once.
//!
//! # Noise and termination
//!
//! Each SLO's bracket is *(highest pass below the lowest failure, lowest
//! failure)*: a pass above a failure (noise) cannot lift Cr_open above a rate
//! that was seen to fail, which is the conservative reading for a capacity
//! promise. [`cr_open`] applies the same rule to summaries, so the search and
//! a later `capcard report` agree. Rates are rounded to 3 significant digits
//! and never run twice; when rounding leaves no new rate strictly inside a
//! bracket, that bracket is as fine as the search can make it and counts as
//! resolved. Each run either lands strictly inside a bracket or at its
//! bounds, so the search ends; [`Search::max_runs`] bounds it as a safety net
//! against a pathological oracle.

use std::collections::BTreeMap;

use crate::config::{Slo, SloClause};

use super::slo::{evaluate, significant};
use super::{CrClosed, CrOpen, RunSummary};

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
    /// SLO name → passed. An SLO missing here counts as failed.
    pub slo_pass: BTreeMap<String, bool>,
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
    /// of ratio ≤ 2 down to `precision`. Usable by the planner's estimate.
    pub fn run_bound(min: f64, max: f64, precision: f64, slos: usize) -> u32 {
        let ratio = if min > 0.0 && max > min {
            max / min
        } else {
            1.0
        };
        let bracketing = ratio.log2().ceil() as u32 + 2;
        let bisecting = (1.0 / precision.clamp(1e-4, 1.0)).log2().ceil() as u32 + 1;
        bracketing + slos.max(1) as u32 * bisecting
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
    /// already run (e.g. re-run longer for more samples) replaces its verdicts.
    pub fn record(&mut self, rate_rps: f64, slo_pass: &BTreeMap<String, bool>) {
        let run = SearchRun {
            rate_rps,
            slo_pass: slo_pass.clone(),
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

    /// `(highest pass below the lowest failure, lowest failure)` for `slo`.
    pub fn bracket(&self, slo: &str) -> (Option<f64>, Option<f64>) {
        let passed = |r: &SearchRun| r.slo_pass.get(slo).copied().unwrap_or(false);
        let lowest_fail = self
            .runs
            .iter()
            .filter(|r| !passed(r))
            .map(|r| r.rate_rps)
            .min_by(f64::total_cmp);
        let highest_pass = self
            .runs
            .iter()
            .filter(|r| passed(r) && lowest_fail.is_none_or(|f| r.rate_rps < f))
            .map(|r| r.rate_rps)
            .max_by(f64::total_cmp);
        (highest_pass, lowest_fail)
    }

    /// Whether `slo` needs no more runs.
    pub fn is_resolved(&self, slo: &str) -> bool {
        self.step(slo).is_none()
    }

    /// The next rate `slo` wants, `None` once its bracket is resolved.
    fn step(&self, slo: &str) -> Option<f64> {
        let candidate = match self.bracket(slo) {
            (None, None) => self.start_rps,
            (Some(pass), None) => {
                if pass >= self.max_rps * (1.0 - 1e-9) {
                    return None; // Cr_open ≥ max
                }
                if pass * 2.0 >= self.max_rps {
                    self.max_rps
                } else {
                    round_rate(pass * 2.0)
                }
            }
            (None, Some(fail)) => {
                if fail <= self.min_rps * (1.0 + 1e-9) {
                    return None; // even min fails
                }
                if fail / 2.0 <= self.min_rps {
                    self.min_rps
                } else {
                    round_rate(fail / 2.0)
                }
            }
            (Some(pass), Some(fail)) => {
                if (fail - pass) / pass <= self.precision + 1e-12 {
                    return None;
                }
                let mid = round_rate((pass + fail) / 2.0);
                if mid <= pass || mid >= fail {
                    return None; // no 3-significant-digit rate left inside
                }
                mid
            }
        };
        (!self.runs.iter().any(|r| same_rate(r.rate_rps, candidate))).then_some(candidate)
    }
}

/// Should the run just made be re-run longer before it is judged? Returns the
/// number of measured calls the re-run needs (with a 10% margin for calls that
/// fall outside the window), or `None` when every SLO is decided.
///
/// An SLO is undecided when it has a clause short of samples and no decisive
/// failure: a clause that fails *on enough samples*, or a run that did not
/// keep up, fails the SLO whatever more samples would say, so extending it
/// would only cost time. Samples per call differ by metric (ITL has one per
/// gap, task E2E one per task, TPOT none for one-token outputs): the calls
/// needed are scaled by the samples per call this run observed. A clause with
/// no samples out of many calls (e.g. every call failed) cannot be helped by
/// a longer run and is skipped. The runner should extend a rate once and then
/// record the verdict, whatever it is.
pub fn needs_longer(summary: &RunSummary, slos: &[Slo]) -> Option<u64> {
    let calls = summary.requests + summary.errors;
    let mut needed: u64 = 0;
    for slo in slos {
        let verdict = evaluate(summary, slo);
        let decided =
            !verdict.kept_up || verdict.clauses.iter().any(|c| !c.pass && c.enough_samples);
        if decided {
            continue;
        }
        for (clause, cv) in slo.clauses.iter().zip(&verdict.clauses) {
            if cv.enough_samples {
                continue;
            }
            let per_call = match clause {
                SloClause::ErrorRate { .. } => 1.0,
                SloClause::Latency { .. } if calls == 0 => 1.0,
                SloClause::Latency { .. } => cv.samples as f64 / calls as f64,
            };
            if per_call > 0.0 {
                needed = needed.max((cv.min_samples as f64 / per_call).ceil() as u64);
            }
        }
    }
    (needed > 0).then(|| (needed * 11).div_ceil(10))
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
/// Cr_open is the highest passing rate below the lowest failing rate (see the
/// module doc on noise), `failed_at_rps` that lowest failure. Nothing passed:
/// `rps` is null and the note says why the lowest rate failed. No failure:
/// `at_least` — with `max_rps` (a search) and the highest rate ≥ max the note
/// says to raise `max`; without it (a grid), to add higher rates.
pub fn cr_open(open: &[RunSummary], slo: &str, max_rps: Option<f64>) -> CrOpen {
    let mut runs: Vec<(f64, bool, &RunSummary)> = open
        .iter()
        .filter_map(|s| Some((s.rate_rps?, *s.slo_pass.get(slo)?, s)))
        .collect();
    runs.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut result = CrOpen {
        slo: slo.to_string(),
        rps: None,
        failed_at_rps: None,
        at_least: false,
        note: None,
        run_id: None,
        failed_run_id: None,
        failed_clauses: vec![],
    };
    if runs.is_empty() {
        result.note = Some(format!("no open run evaluated the SLO `{slo}`"));
        return result;
    }
    let fail = runs.iter().find(|r| !r.1);
    let pass = runs
        .iter()
        .rev()
        .find(|r| r.1 && fail.is_none_or(|f| r.0 < f.0));
    if let Some(&(rate, _, summary)) = fail {
        result.failed_at_rps = Some(rate);
        result.failed_run_id = Some(summary.run_id.clone());
        result.failed_clauses = summary
            .slo_verdicts
            .get(slo)
            .map(|v| v.reasons.clone())
            .unwrap_or_default();
    }
    if let Some(&(rate, _, summary)) = pass {
        result.rps = Some(rate);
        result.run_id = Some(summary.run_id.clone());
    }
    result.note = match (pass, fail) {
        (None, Some(&(rate, ..))) => {
            let why = if result.failed_clauses.is_empty() {
                String::new()
            } else {
                format!(": {}", result.failed_clauses.join("; "))
            };
            Some(format!(
                "even {} rps, the lowest rate tested, failed{why}",
                fmt_rate(rate)
            ))
        }
        (Some(&(rate, ..)), None) => {
            result.at_least = true;
            Some(match max_rps {
                Some(max) if rate >= max * (1.0 - 1e-9) => format!(
                    "Cr_open ≥ {} rps: the search ceiling passed; raise `max`",
                    fmt_rate(rate)
                ),
                Some(_) => format!(
                    "Cr_open ≥ {} rps: no tested rate failed (the search did not finish)",
                    fmt_rate(rate)
                ),
                None => format!(
                    "Cr_open ≥ {} rps: the highest rate of the grid passed; add higher rates",
                    fmt_rate(rate)
                ),
            })
        }
        (_, Some(&(fail_rate, ..))) => {
            runs.iter().rev().find(|r| r.1 && r.0 > fail_rate).map(|r| {
                format!(
                    "passed again at {} rps, above the failure at {} rps: results are not \
                     monotonic (noise, or an unstable replica); Cr_open is taken below the \
                     lowest failure",
                    fmt_rate(r.0),
                    fmt_rate(fail_rate)
                )
            })
        }
        (None, None) => None,
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

fn same_rate(a: f64, b: f64) -> bool {
    round_rate(a) == round_rate(b)
}

/// `4.0` → `"4"`, `0.5` → `"0.5"`, `12.34` → `"12.3"`.
pub fn fmt_rate(rate: f64) -> String {
    significant(rate)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::analyze::LatencyStats;
    use crate::analyze::crossp::tests::level;
    use crate::analyze::slo::SloVerdict;
    use crate::config::{Fraction, LatencyMetric, Stat};

    /// Run the search against threshold oracles: SLO `name` passes below `threshold`.
    fn drive(search: &mut Search, thresholds: &[(&str, f64)]) -> Vec<f64> {
        let mut rates = vec![];
        while let Some(rate) = search.next_rate() {
            assert!(!rates.contains(&rate), "rate {rate} run twice: {rates:?}");
            rates.push(rate);
            let verdicts = thresholds
                .iter()
                .map(|&(name, t)| (name.to_string(), rate <= t))
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
            search.record(rate, &BTreeMap::from([("s".to_string(), pass)]));
        }
        let (pass, fail) = search.bracket("s");
        assert_eq!(fail, Some(8.0));
        assert!(pass.unwrap() < 8.0 && (8.0 - pass.unwrap()) / pass.unwrap() <= 0.02);
        assert!(rates.len() as u32 <= search.max_runs());

        // A pass above a failure does not lift the bracket.
        let mut search = Search::new(0.5, 64.0, 0.02, Some(8.0), vec!["s".into()]);
        for (rate, pass) in [(16.0, true), (8.0, false), (4.0, true)] {
            search.record(rate, &BTreeMap::from([("s".to_string(), pass)]));
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
        search.record(8.0, &BTreeMap::from([("s".to_string(), false)]));
        search.record(8.0, &BTreeMap::from([("s".to_string(), true)]));
        assert_eq!(search.runs().len(), 1);
        assert_eq!(search.next_rate(), Some(16.0));
        // A run without the SLO's verdict counts as a failure.
        search.record(16.0, &BTreeMap::new());
        assert_eq!(search.bracket("s"), (Some(8.0), Some(16.0)));
    }

    #[test]
    fn rounding() {
        assert_eq!(round_rate(4.4), 4.4);
        assert_eq!(round_rate(12.345), 12.3);
        assert_eq!(round_rate(0.123456), 0.123);
        assert_eq!(round_rate(1234.5), 1230.0);
        assert_eq!(fmt_rate(0.5), "0.5");
        assert_eq!(fmt_rate(4.0), "4");
    }

    fn open_run(rate: f64, pass: bool) -> RunSummary {
        let verdict = SloVerdict {
            pass,
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
            slo_pass: BTreeMap::from([("chat".to_string(), pass)]),
            slo_verdicts: BTreeMap::from([("chat".to_string(), verdict)]),
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
        let got = cr_open(&runs, "chat", Some(64.0));
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
        );
        assert_eq!((got.rps, got.at_least), (Some(64.0), true));
        assert_eq!(
            got.note.as_deref(),
            Some("Cr_open ≥ 64 rps: the search ceiling passed; raise `max`")
        );
        let grid = cr_open(&[open_run(1.0, true), open_run(2.0, true)], "chat", None);
        assert!(grid.at_least);
        assert!(
            grid.note
                .unwrap()
                .contains("highest rate of the grid passed")
        );
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
        );
        assert_eq!((got.rps, got.failed_at_rps), (Some(2.0), Some(4.0)));
        assert!(got.note.unwrap().starts_with("passed again at 8 rps"));
    }

    #[test]
    fn cr_open_without_runs_for_the_slo() {
        let got = cr_open(&[open_run(2.0, true)], "batch", Some(64.0));
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

    fn p99_slo() -> Slo {
        Slo {
            name: "chat".into(),
            span: None,
            clauses: vec![
                SloClause::Latency {
                    metric: LatencyMetric::Ttft,
                    stat: Stat::Percentile(50.0),
                    limit: Duration::from_millis(300),
                },
                SloClause::Latency {
                    metric: LatencyMetric::Itl,
                    stat: Stat::Percentile(99.0),
                    limit: Duration::from_millis(50),
                },
                SloClause::ErrorRate {
                    max: Fraction(0.05),
                },
            ],
        }
    }

    fn sampled(requests: u64, ttft_p50: f64, itl_per_call: u64) -> RunSummary {
        let stats = |count: u64, v: f64| LatencyStats {
            count,
            mean: v,
            p50: v,
            p90: v,
            p95: v,
            p99: v,
            max: v,
            extra: Default::default(),
        };
        RunSummary {
            requests,
            ttft_ms: stats(requests, ttft_p50),
            itl_ms: stats(requests * itl_per_call, 20.0),
            kept_up: Some(true),
            ..RunSummary::default()
        }
    }

    #[test]
    fn needs_longer_when_undecided() {
        // 150 calls: error rate needs 200 (5% ↔ p95), ITL p99 has 150×2 = 300 < 500 gaps.
        let got = needs_longer(&sampled(150, 100.0, 2), &[p99_slo()]);
        // max(200 calls, 500 / 2 per call = 250 calls) × 1.1
        assert_eq!(got, Some(275));
        // Plenty of gaps: only the error rate is short.
        assert_eq!(
            needs_longer(&sampled(150, 100.0, 100), &[p99_slo()]),
            Some(220)
        );
        assert_eq!(needs_longer(&sampled(600, 100.0, 2), &[p99_slo()]), None);
    }

    #[test]
    fn no_extension_when_already_failed() {
        // TTFT p50 fails on 150 ≥ 20 samples: more samples cannot save it.
        assert_eq!(needs_longer(&sampled(150, 900.0, 2), &[p99_slo()]), None);
        let mut not_kept_up = sampled(150, 100.0, 2);
        not_kept_up.kept_up = Some(false);
        assert_eq!(needs_longer(&not_kept_up, &[p99_slo()]), None);
    }
}
