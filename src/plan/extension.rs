//! Extensions of inconclusive open runs: how long one is, what a card may
//! spend on them, and the most wall time that can add. The runner spends the
//! budget ([`crate::runner`]) and the estimate bounds it ([`super::estimate`])
//! with these same functions, so the two cannot drift apart.
//!
//! A rate found inconclusive for an SLO still wanted is run again, once, as a
//! run of its own (`<id>--ext`), measured [`EXTENSION_FACTOR`] times its
//! planned measured time — fewer if the budget has less room, never less than
//! [`MIN_EXTENSION_FACTOR`] times, otherwise not at all ([`extension_factor`]).
//! Each extension spends its warmup and measured time from the card's budget
//! ([`extension_budget`]): `budget` of the `open` block, else
//! [`EXTENSION_FACTOR`] × the planned measured time of the card's longest open
//! run ([`longest_open_run`]: a search's run at `min`, lengthened most for
//! samples, or a grid's longest).
//!
//! # The bound ([`extensions_bound_s`])
//!
//! An extension starts only while the budget left holds at least twice its
//! run's planned measured time, and its measured time never exceeds what is
//! left, so only its warmup can overshoot the budget, once, on the last one
//! (the budget then reads zero). The extensions' warmup and measured time
//! together are therefore at most `budget + warmup`. Each costs at least
//! `2 × p_min + warmup` of it (`p_min`: the shortest extendable run's planned
//! measured time), so the budget buys at most `⌊(budget + warmup) / (2 ×
//! p_min + warmup)⌋` of them, and never more than the runs that can be
//! extended (each at most once); each adds a drain allowance. Planned
//! measured time counts a `requests` stop as that many arrivals at the run's
//! rate, as the runner does: for agent tasks or conversations (several calls
//! per arrival) that overstates the time, so the bound stays a bound.

use std::time::Duration;

use crate::config::{Experiment, StopRule};

use super::{Load, OpenPlan, RunPlan};

/// Time allowed per run for in-flight calls to finish after the measured window.
pub const DRAIN_ALLOWANCE: Duration = Duration::from_secs(2);

/// An extension runs this many times the planned measured time.
pub const EXTENSION_FACTOR: u32 = 4;
/// …and at least this many times, or not at all.
pub const MIN_EXTENSION_FACTOR: f64 = 2.0;

/// A run's planned measured time (a request count at its rate); zero for a
/// trace replay that lasts its trace, or a closed run counted in requests.
pub fn planned_measured_time(run: &RunPlan) -> Duration {
    match (run.stop, run.load) {
        (StopRule::Duration(d), _) => d,
        (StopRule::Requests(n), Load::Rate { rate, .. }) if rate.0 > 0.0 => {
            Duration::from_secs_f64(n as f64 / rate.0)
        }
        _ => Duration::ZERO,
    }
}

/// Whether the runner can make a longer version of `run` at all.
fn extendable(run: &RunPlan) -> bool {
    !planned_measured_time(run).is_zero() && !matches!(run.stop, StopRule::TraceEnd)
}

/// How many times its planned measured time an extension of a run planned
/// for `planned` is measured, with `budget_left` left: [`EXTENSION_FACTOR`],
/// fewer (whole) when the budget has less room, `None` below
/// [`MIN_EXTENSION_FACTOR`].
pub fn extension_factor(budget_left: Duration, planned: Duration) -> Option<f64> {
    if planned.is_zero() {
        return None;
    }
    let factor = (budget_left.as_secs_f64() / planned.as_secs_f64())
        .min(f64::from(EXTENSION_FACTOR))
        .floor();
    (factor >= MIN_EXTENSION_FACTOR).then_some(factor)
}

/// The open run a card's budget is counted from: a search's run at `min`
/// (the one lengthened most for samples), a grid's longest; `None` without
/// open runs.
pub fn longest_open_run(open: &OpenPlan, experiment: &Experiment) -> Option<RunPlan> {
    match open {
        OpenPlan::None => None,
        OpenPlan::Grid { runs } => runs
            .iter()
            .max_by_key(|r| planned_measured_time(r))
            .cloned(),
        OpenPlan::Search { min, template, .. } => {
            Some(super::run_at_rate_of(template, *min, experiment))
        }
    }
}

/// The runs a Cr_open search's default budget pays for, at the length of
/// its run at the geometric middle of `min` and `max`: the bracketing (3–4
/// runs from the closed sweep's estimate) and about eight runs placed
/// around the crossing.
pub const SEARCH_BUDGET_RUNS: u32 = 12;

/// Seconds a run takes as planned: its warmup and its measured time.
pub fn planned_run_seconds(run: &RunPlan) -> f64 {
    (run.warmup + planned_measured_time(run)).as_secs_f64()
}

/// The time a Cr_open search may spend on its runs, warmups included:
/// `budget` of the `open` block, else [`SEARCH_BUDGET_RUNS`] × its run at
/// the geometric middle of `min` and `max`. Zero for a grid (which has no
/// search) and no open loop.
pub fn search_budget(experiment: &Experiment, open: &OpenPlan) -> Duration {
    let OpenPlan::Search {
        min, max, template, ..
    } = open
    else {
        return Duration::ZERO;
    };
    if let Some(budget) = experiment.open.as_ref().and_then(|o| o.budget) {
        return budget;
    }
    let middle = super::run_at_rate_of(
        template,
        crate::quantity::RatePerS((min.0 * max.0).sqrt()),
        experiment,
    );
    Duration::from_secs_f64(planned_run_seconds(&middle) * f64::from(SEARCH_BUDGET_RUNS))
}

/// The measured (and warmup) time one card's open runs may add by extending
/// inconclusive rates: `budget` of the `open` block, else
/// [`EXTENSION_FACTOR`] × the planned measured time of
/// [`longest_open_run`].
pub fn extension_budget(experiment: &Experiment, open: &OpenPlan) -> Duration {
    if let Some(budget) = experiment.open.as_ref().and_then(|o| o.budget) {
        return budget;
    }
    longest_open_run(open, experiment).map_or(Duration::ZERO, |run| {
        planned_measured_time(&run) * EXTENSION_FACTOR
    })
}

/// The runs of a card that may be extended, as the bound needs them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Extendable {
    /// How many runs can be extended (each at most once).
    pub runs: u64,
    /// The shortest and longest planned measured time among them.
    pub shortest: Duration,
    pub longest: Duration,
    /// Their warmup (the `open` block's).
    pub warmup: Duration,
}

impl Extendable {
    /// The open runs of a card that can be extended: a grid's runs. A
    /// search's runs are never extended, nor the frontier phase's.
    pub fn of(open: &OpenPlan, _experiment: &Experiment) -> Option<Extendable> {
        match open {
            OpenPlan::None => None,
            OpenPlan::Grid { runs } => {
                let runs: Vec<&RunPlan> = runs.iter().filter(|r| extendable(r)).collect();
                let times = runs.iter().map(|r| planned_measured_time(r));
                Some(Extendable {
                    runs: runs.len() as u64,
                    shortest: times.clone().min()?,
                    longest: times.max()?,
                    warmup: runs.first()?.warmup,
                })
            }
            // A search revisits rates instead: its budget is its own
            // ([`search_budget`]).
            OpenPlan::Search { .. } => None,
        }
    }
}

/// The most extensions `budget` can buy among `runs` (see the module doc).
pub fn max_extensions(budget: Duration, runs: &Extendable) -> u64 {
    let p_min = runs.shortest.as_secs_f64();
    let (b, w) = (budget.as_secs_f64(), runs.warmup.as_secs_f64());
    if runs.runs == 0 || p_min <= 0.0 || b < MIN_EXTENSION_FACTOR * p_min {
        return 0;
    }
    let bought = ((b + w) / (MIN_EXTENSION_FACTOR * p_min + w)).floor();
    // A huge explicit budget: the runs, not the budget, are the limit.
    if bought >= runs.runs as f64 {
        runs.runs
    } else {
        bought as u64
    }
}

/// The most wall time, in seconds, extensions can add to a card with
/// `budget` (see the module doc): `min(budget + warmup, n × (4 × p_max +
/// warmup)) + n × drain` for the `n` extensions it can buy.
pub fn extensions_bound_s(budget: Duration, runs: &Extendable) -> f64 {
    let n = max_extensions(budget, runs);
    if n == 0 {
        return 0.0;
    }
    let warmup = runs.warmup.as_secs_f64();
    let each_at_most = f64::from(EXTENSION_FACTOR) * runs.longest.as_secs_f64() + warmup;
    let spent = (budget.as_secs_f64() + warmup).min(n as f64 * each_at_most);
    spent + n as f64 * DRAIN_ALLOWANCE.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Arrival, RatePerS};

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn open_run(rate: f64, stop: StopRule) -> RunPlan {
        let load = Load::Rate {
            rate: RatePerS(rate),
            arrival: Arrival::Poisson,
        };
        RunPlan::new("t", "w", load, secs(5), stop, 1)
    }

    #[test]
    fn the_factor_is_four_fewer_when_the_budget_is_short_never_below_two() {
        assert_eq!(extension_factor(secs(100), secs(10)), Some(4.0));
        assert_eq!(extension_factor(secs(35), secs(10)), Some(3.0));
        assert_eq!(extension_factor(secs(20), secs(10)), Some(2.0));
        assert_eq!(extension_factor(secs(19), secs(10)), None);
        assert_eq!(extension_factor(secs(100), Duration::ZERO), None);
    }

    #[test]
    fn planned_measured_time_counts_requests_at_the_rate() {
        assert_eq!(
            planned_measured_time(&open_run(2.0, StopRule::Duration(secs(30)))),
            secs(30)
        );
        assert_eq!(
            planned_measured_time(&open_run(2.0, StopRule::Requests(100))),
            secs(50)
        );
        assert_eq!(
            planned_measured_time(&open_run(2.0, StopRule::TraceEnd)),
            Duration::ZERO
        );
    }

    #[test]
    fn the_budget_buys_extensions_of_at_least_twice_the_shortest_run() {
        let runs = Extendable {
            runs: 100,
            shortest: secs(10),
            longest: secs(40),
            warmup: secs(5),
        };
        // Each costs at least 2 × 10 + 5 s; 160 + 5 = 165 s buys 6 of them.
        assert_eq!(max_extensions(secs(160), &runs), 6);
        // Less than twice the shortest run: none.
        assert_eq!(max_extensions(secs(19), &runs), 0);
        assert_eq!(extensions_bound_s(secs(19), &runs), 0.0);
        // Exactly twice: one, and its warmup beyond the budget.
        assert_eq!(max_extensions(secs(20), &runs), 1);
        assert_eq!(extensions_bound_s(secs(20), &runs), 20.0 + 5.0 + 2.0);
        // The whole budget, one warmup over it, and a drain per extension.
        assert_eq!(
            extensions_bound_s(secs(160), &runs),
            160.0 + 5.0 + 6.0 * 2.0
        );
        // Few runs: a huge budget is limited by them, each at most 4× the
        // longest run.
        let two = Extendable { runs: 2, ..runs };
        assert_eq!(max_extensions(secs(100_000), &two), 2);
        assert_eq!(
            extensions_bound_s(secs(100_000), &two),
            2.0 * (160.0 + 5.0) + 2.0 * 2.0
        );
    }

    /// Spending the budget as the runner does never takes longer than the
    /// bound, whatever the order of the runs it extends.
    #[test]
    fn the_runners_spending_stays_within_the_bound() {
        let runs = Extendable {
            runs: 1000,
            shortest: secs(7),
            longest: secs(31),
            warmup: secs(3),
        };
        for budget_s in [0u64, 13, 14, 15, 40, 124, 500, 1999] {
            for planned_s in [7u64, 11, 31] {
                let budget = secs(budget_s);
                let bound = extensions_bound_s(budget, &runs);
                let (mut left, mut wall_s, mut n) = (budget, 0.0, 0u64);
                while let Some(factor) = extension_factor(left, secs(planned_s)) {
                    let measured = secs(planned_s).mul_f64(factor);
                    wall_s += (measured + runs.warmup + DRAIN_ALLOWANCE).as_secs_f64();
                    left = left.saturating_sub(measured + runs.warmup);
                    n += 1;
                }
                assert!(n <= max_extensions(budget, &runs), "{budget_s} {planned_s}");
                assert!(
                    wall_s <= bound + 1e-9,
                    "{budget_s} {planned_s}: {wall_s} > {bound}"
                );
            }
        }
    }
}
