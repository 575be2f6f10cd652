//! Planned against actual time of one card's runs, so a card says how good
//! `capcard plan`'s figures were: the plan's expected and bound times (from
//! plan.json) beside the time the runs took (from the journals).
//!
//! The actual time is the **sum over the card's runs** of each run's
//! `started_at` → `finished_at` (header → footer), extensions and runs cut
//! short included: what the plan estimates, since it prices runs one by one.
//! It leaves out what lies between runs — re-rendering the cards after each
//! run, and the days between an interrupted run and its `--resume` — which
//! first start → last finish would count. A journal without a footer (the
//! process died) has no finish time and is counted apart.
//!
//! On a virtual-time card (`clock` in the journals) the plan's figures are
//! simulated time, and the journals' timestamps are the wall clock of a
//! simulation that took seconds. Comparing those would be meaningless: the
//! card compares the plan with the runs' simulated time (each run's start to
//! the end of its measured window on the engine's clock — the drain after
//! it, which the footer does not time, left out) and gives the wall time
//! apart.

use serde::{Deserialize, Serialize};

/// `cards[].wall_time` in results.json.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct CardWallTime {
    /// The plan's expected time for the card, in seconds; `None` when the
    /// plan has no such card.
    pub planned_expected_s: Option<f64>,
    /// The plan's bound for the card, in seconds; `None` in a folder
    /// planned before capcard recorded one.
    pub planned_bound_s: Option<f64>,
    /// Sum over the runs of `started_at` → `finished_at`, in seconds of
    /// wall time; `None` when no run has both.
    pub actual_s: Option<f64>,
    /// The runs (journals, extensions included) summed in `actual_s`.
    pub runs: u32,
    /// Journals without a finish time (no footer), not in `actual_s`.
    #[serde(default)]
    pub runs_without_finish: u32,
    /// Virtual-time cards: the runs' simulated time, summed, in seconds —
    /// what the planned figures are in. `None` on the wall clock.
    #[serde(default)]
    pub simulated_s: Option<f64>,
}

/// What one journal says about its run's time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunTimes {
    /// `started_at` and `finished_at`, in ms since the Unix epoch (`None`
    /// when either is missing or unreadable).
    pub wall_ms: Option<[f64; 2]>,
    /// The end of the run's measured window (its last completion when the
    /// journal has no footer), in ms since its start on its own clock.
    pub last_event_ms: f64,
}

/// Planned against actual for one card: `planned` = (expected, bound)
/// from the plan, `runs` = every journal of the card, `virtual_time` = the
/// journals name a clock other than the wall clock.
pub fn card_wall_time(
    planned: (Option<f64>, Option<f64>),
    runs: &[RunTimes],
    virtual_time: bool,
) -> CardWallTime {
    // A clock set back between start and finish says nothing: not counted.
    let spans: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.wall_ms)
        .map(|[start, end]| end - start)
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
        .collect();
    let simulated_s = virtual_time.then(|| {
        runs.iter()
            .map(|r| r.last_event_ms)
            .filter(|ms| ms.is_finite() && *ms > 0.0)
            .sum::<f64>()
            / 1000.0
    });
    CardWallTime {
        planned_expected_s: planned.0,
        planned_bound_s: planned.1,
        actual_s: (!spans.is_empty()).then(|| spans.iter().sum::<f64>() / 1000.0),
        runs: spans.len() as u32,
        runs_without_finish: (runs.len() - spans.len()) as u32,
        simulated_s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(start_s: f64, end_s: Option<f64>, last_event_s: f64) -> RunTimes {
        RunTimes {
            wall_ms: end_s.map(|e| [start_s * 1000.0, e * 1000.0]),
            last_event_ms: last_event_s * 1000.0,
        }
    }

    #[test]
    fn actual_time_is_the_sum_of_the_runs_not_the_gaps_between() {
        // Two runs of 10 s and 20 s, an hour apart (a --resume).
        let runs = [run(0.0, Some(10.0), 9.5), run(3600.0, Some(3620.0), 19.0)];
        let t = card_wall_time((Some(25.0), Some(90.0)), &runs, false);
        assert_eq!(t.actual_s, Some(30.0));
        assert_eq!((t.runs, t.runs_without_finish), (2, 0));
        assert_eq!(
            (t.planned_expected_s, t.planned_bound_s),
            (Some(25.0), Some(90.0))
        );
        assert_eq!(t.simulated_s, None, "wall clock: nothing simulated");
    }

    #[test]
    fn a_run_without_a_finish_is_counted_apart() {
        let runs = [run(0.0, Some(10.0), 9.0), run(10.0, None, 4.0)];
        let t = card_wall_time((Some(20.0), None), &runs, false);
        assert_eq!(t.actual_s, Some(10.0));
        assert_eq!((t.runs, t.runs_without_finish), (1, 1));
        let none = card_wall_time((None, None), &[run(0.0, None, 1.0)], false);
        assert_eq!(none.actual_s, None);
    }

    #[test]
    fn virtual_time_compares_the_plan_with_the_simulated_time() {
        // Two simulated runs of 70 s and 130 s, in 0.4 s of wall time.
        let runs = [run(0.0, Some(0.1), 70.0), run(0.1, Some(0.4), 130.0)];
        let t = card_wall_time((Some(180.0), Some(600.0)), &runs, true);
        assert_eq!(t.simulated_s, Some(200.0));
        assert!(t.actual_s.is_some_and(|s| (s - 0.4).abs() < 1e-9));
    }
}
