//! How many runs a Cr_open search and its frontier can take: the bounds
//! `capcard plan` counts (at most) and the typical counts it estimates from.

use crate::config::{Experiment, Fraction, RatePerS};

/// Upper bound on the runs of a Cr_open search over `[min, max]` for
/// `slo_count` SLOs (at least one counted).
///
/// The bound assumes the search `analyze::search` runs: bracketing by
/// doubling (or halving) from a start estimate inside `[min, max]`, clamped
/// to the bounds, visits at most `⌈log2(max/min)⌉ + 1` rates, and the verdict
/// at every rate serves all SLOs; it ends with a bracket whose ends are at
/// most a factor 2 apart. Bisecting that bracket until its width is at most
/// `precision` of its lower end takes at most `⌈log2(1/precision)⌉` runs per
/// SLO (SLOs may end in different brackets, so these are not shared), plus
/// one — and twice that for the gaps that inconclusive rates leave to
/// bisect. A precision below 10⁻⁴ is counted as 10⁻⁴. The plan counts runs
/// with it (the drains of a search's runs); the search itself is bounded by
/// its `budget` ([`search_budget`](super::search_budget)) and a safety net
/// of 60 runs (`analyze::search::MAX_RUNS`).
pub fn search_max_runs(min: RatePerS, max: RatePerS, precision: Fraction, slo_count: usize) -> u32 {
    let ratio = max.0 / min.0;
    let bracketing = if ratio.is_finite() && ratio > 1.0 {
        ratio.log2().ceil() as u32 + 2
    } else {
        2
    };
    let precision = if precision.0.is_finite() {
        precision.0.clamp(1e-4, 1.0)
    } else {
        1.0
    };
    let bisection = (1.0 / precision).log2().ceil() as u32 + 1;
    let slo_count = u32::try_from(slo_count.max(1)).unwrap_or(u32::MAX);
    bracketing.saturating_add(2u32.saturating_mul(slo_count).saturating_mul(bisection))
}

/// The number of runs a Cr_open search over `[min, max]` for `slo_count`
/// SLOs typically takes, for the expected time (the formula and the
/// evidence for it are in `plan::estimate`'s module doc): bracketing — 2
/// runs when it starts from a closed sweep (`from_closed_sweep`), else
/// `1.5 + log2(max/min) / 4` from the geometric middle, and half a run
/// more per further SLO — plus `log2(1/precision)` bisections per SLO,
/// rounded, at least 1 and at most [`search_max_runs`]. A precision below 10⁻⁴ is counted as 10⁻⁴, as
/// there.
pub fn search_typical_runs(
    min: RatePerS,
    max: RatePerS,
    precision: Fraction,
    slo_count: usize,
    from_closed_sweep: bool,
) -> u32 {
    let ratio = max.0 / min.0;
    let octaves = if ratio.is_finite() && ratio > 1.0 {
        ratio.log2()
    } else {
        0.0
    };
    let max_runs = search_max_runs(min, max, precision, slo_count);
    if octaves == 0.0 {
        // One rate: it passes (Cr_open ≥ max) or fails (even min fails).
        return 1;
    }
    let bracketing = if from_closed_sweep {
        2.0
    } else {
        1.5 + octaves / 4.0
    };
    let precision = if precision.0.is_finite() {
        precision.0.clamp(1e-4, 1.0)
    } else {
        1.0
    };
    // A range narrower than a factor 2 leaves a narrower bracket to bisect.
    let bracket_width = (ratio - 1.0).min(1.0);
    let bisection = (bracket_width / precision).log2().max(0.0);
    let slos = slo_count.max(1) as f64;
    let typical = bracketing + (slos - 1.0) / 2.0 + slos * bisection;
    // Rounded, within 1..=max_runs, so the cast cannot wrap.
    (typical.round().clamp(1.0, f64::from(max_runs.max(1)))) as u32
}

/// The frontier phase's typical number of runs for `bounds` multiplied
/// bounds: one per bound, within the phase's cap ([`FRONTIER_MAX_RUNS`]).
/// See `plan::estimate` for why one.
pub fn frontier_typical_runs(bounds: usize) -> u32 {
    u32::try_from(bounds)
        .unwrap_or(u32::MAX)
        .min(frontier_max_runs(bounds))
}

/// The frontier phase runs at most this many rates for one multiplied bound
/// (`frontier` in `open`): after the search, the bracket around a bound is
/// at most a factor 2 wide, and three bisections take it to 12.5%.
pub const FRONTIER_RUNS_PER_BOUND: u32 = 3;

/// …and at most this many rates per card in all, whatever the number of
/// SLOs, clauses and multipliers: about one more search's worth of runs, so
/// a long list of bounds cannot silently multiply the wall time.
pub const FRONTIER_MAX_RUNS: u32 = 24;

/// Upper bound on the rates the frontier phase runs for `bounds` multiplied
/// bounds (latency clauses × multipliers), repetitions not counted: the
/// phase's own caps ([`FRONTIER_RUNS_PER_BOUND`], [`FRONTIER_MAX_RUNS`]).
pub fn frontier_max_runs(bounds: usize) -> u32 {
    let bounds = u32::try_from(bounds).unwrap_or(u32::MAX);
    bounds
        .saturating_mul(FRONTIER_RUNS_PER_BOUND)
        .min(FRONTIER_MAX_RUNS)
}

/// How many bounds `frontier` asks the phase to resolve: every latency
/// clause of every SLO (the error rate has no bound in ms) times every
/// multiplier.
pub fn frontier_bounds(experiment: &Experiment) -> usize {
    let multipliers = experiment.open.as_ref().map_or(0, |o| o.frontier.len());
    let clauses: usize = experiment
        .slos
        .iter()
        .map(|s| {
            s.clauses
                .iter()
                .filter(|c| matches!(c, crate::config::SloClause::Latency { .. }))
                .count()
        })
        .sum();
    clauses * multipliers
}
