//! Open-loop arrival schedules, precomputed from the seed and never rescaled.
//!
//! The schedule is a pure function of `(arrival, rate, seed)`, so a rate is
//! replayed exactly on every target and re-run, and it is generated lazily
//! (an endless iterator) because a duration-stopped run does not know how
//! many arrivals it needs. Gaps are drawn, summed and handed out as they are:
//! they are never rescaled to make the realised mean hit `rate` exactly,
//! because that would make the process non-renewal and hide the very burst
//! structure (CV) the user asked for.
//!
//! Every process puts its first arrival at offset 0 (the run starts with an
//! arrival) and arrival `k` at the sum of the first `k` gaps:
//! - `constant`: gaps of exactly `1/rate`, so arrival `k` is at `k/rate`;
//! - `poisson`: exponential gaps with mean `1/rate` (CV 1);
//! - `gamma cv=C`: gamma gaps with shape `k = 1/C²` and scale `1/(rate·k)`,
//!   so the mean gap is `1/rate` and the gaps' CV is `C`; `C ≤ 0` (or not
//!   finite) has no spread and is treated as `constant`.
//!
//! A rate that is not a positive finite number has no arrivals at all: the
//! iterator is empty rather than endless.

use std::time::Duration;

use rand_distr::{Distribution, Exp1, Gamma};

use crate::config::{Arrival, RatePerS};

use super::{SeededRng, hash_str, mix, seeded_rng};

/// Scheduled arrival offsets (from the run's start) of an open-loop run at
/// `rate`, an endless, deterministic iterator for `(arrival, rate, seed)`.
pub fn arrival_times(
    arrival: Arrival,
    rate: RatePerS,
    seed: u64,
) -> impl Iterator<Item = Duration> {
    ArrivalTimes::new(arrival, rate, seed)
}

/// How gaps are drawn, with the parameters resolved once.
#[derive(Debug, Clone)]
enum Gaps {
    /// No valid rate: no arrivals.
    Never,
    Constant {
        gap_s: f64,
    },
    Exponential {
        mean_gap_s: f64,
    },
    Gamma(Gamma<f64>),
}

/// The iterator behind [`arrival_times`].
#[derive(Debug, Clone)]
struct ArrivalTimes {
    gaps: Gaps,
    rng: SeededRng,
    /// Offset of the next arrival, in seconds. Summed in f64: after 10⁹
    /// arrivals the rounding error is still far below a microsecond.
    next_s: f64,
    /// Arrivals handed out so far (constant uses `k/rate`, not a running sum).
    count: u64,
}

impl ArrivalTimes {
    fn new(arrival: Arrival, rate: RatePerS, seed: u64) -> Self {
        let rate = rate.0;
        let gaps = if !(rate.is_finite() && rate > 0.0) {
            Gaps::Never
        } else {
            match arrival {
                Arrival::Constant => Gaps::Constant { gap_s: 1.0 / rate },
                Arrival::Poisson => Gaps::Exponential {
                    mean_gap_s: 1.0 / rate,
                },
                Arrival::Gamma { cv } if cv.is_finite() && cv > 0.0 => {
                    let shape = 1.0 / (cv * cv);
                    match Gamma::new(shape, 1.0 / (rate * shape)) {
                        Ok(gamma) => Gaps::Gamma(gamma),
                        // Only reachable for a shape that underflows to 0
                        // (cv ≳ 1e154): no finite spread can be drawn.
                        Err(_) => Gaps::Constant { gap_s: 1.0 / rate },
                    }
                }
                Arrival::Gamma { .. } => Gaps::Constant { gap_s: 1.0 / rate },
                // A trace's schedule is the file's (see `workload::trace`);
                // there is no process to draw it from.
                Arrival::Trace | Arrival::Recorded => Gaps::Never,
            }
        };
        // A stream of its own, so arrival gaps are not correlated with the
        // draws of task 0, 1, ... (which use `mix(seed, index)`).
        let rng = seeded_rng(mix(seed, hash_str("capcard/arrivals")));
        ArrivalTimes {
            gaps,
            rng,
            next_s: 0.0,
            count: 0,
        }
    }
}

impl Iterator for ArrivalTimes {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let offset_s = match self.gaps {
            Gaps::Never => return None,
            Gaps::Constant { gap_s } => self.count as f64 * gap_s,
            Gaps::Exponential { .. } | Gaps::Gamma(_) => self.next_s,
        };
        let gap_s = match &self.gaps {
            Gaps::Never | Gaps::Constant { .. } => 0.0,
            Gaps::Exponential { mean_gap_s } => {
                let e: f64 = Exp1.sample(&mut self.rng);
                mean_gap_s * e
            }
            Gaps::Gamma(gamma) => gamma.sample(&mut self.rng),
        };
        self.next_s += gap_s;
        self.count += 1;
        // Past ~5·10¹¹ years the offset no longer fits a Duration: end there.
        Duration::try_from_secs_f64(offset_s).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gaps_s(arrival: Arrival, rate: f64, seed: u64, n: usize) -> Vec<f64> {
        let times: Vec<f64> = arrival_times(arrival, RatePerS(rate), seed)
            .take(n + 1)
            .map(|d| d.as_secs_f64())
            .collect();
        times.windows(2).map(|w| w[1] - w[0]).collect()
    }

    fn mean_cv(xs: &[f64]) -> (f64, f64) {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var.sqrt() / mean)
    }

    fn assert_close(actual: f64, expected: f64, rel_tol: f64, what: &str) {
        let err = ((actual - expected) / expected).abs();
        assert!(
            err <= rel_tol,
            "{what}: got {actual}, expected {expected} (±{rel_tol})"
        );
    }

    #[test]
    fn constant_starts_at_zero_and_is_evenly_spaced() {
        let times: Vec<Duration> = arrival_times(Arrival::Constant, RatePerS(4.0), 1)
            .take(5)
            .collect();
        let expected: Vec<Duration> = (0..5).map(|k| Duration::from_millis(250 * k)).collect();
        assert_eq!(times, expected);
        // No drift from a running sum: arrival 10⁶ is exactly at 10⁶/rate.
        let far = arrival_times(Arrival::Constant, RatePerS(3.0), 1).nth(999_999);
        assert_eq!(far, Some(Duration::from_secs_f64(999_999.0 / 3.0)));
    }

    #[test]
    fn random_processes_start_at_zero() {
        for arrival in [Arrival::Poisson, Arrival::Gamma { cv: 2.0 }] {
            let first = arrival_times(arrival, RatePerS(5.0), 3).next();
            assert_eq!(first, Some(Duration::ZERO), "{arrival:?}");
        }
    }

    #[test]
    fn poisson_gaps_have_mean_one_over_rate_and_cv_one() {
        let (mean, cv) = mean_cv(&gaps_s(Arrival::Poisson, 8.0, 42, 20_000));
        assert_close(mean, 1.0 / 8.0, 0.02, "mean gap");
        assert_close(cv, 1.0, 0.05, "cv");
    }

    #[test]
    fn gamma_gaps_have_requested_cv() {
        for (cv_wanted, n) in [(0.5, 20_000), (2.0, 200_000)] {
            let (mean, cv) = mean_cv(&gaps_s(Arrival::Gamma { cv: cv_wanted }, 2.0, 7, n));
            assert_close(mean, 0.5, 0.02, "mean gap");
            assert_close(cv, cv_wanted, 0.05, "cv");
        }
    }

    #[test]
    fn gamma_without_spread_is_constant() {
        let gamma: Vec<Duration> = arrival_times(Arrival::Gamma { cv: 0.0 }, RatePerS(2.0), 1)
            .take(4)
            .collect();
        let constant: Vec<Duration> = arrival_times(Arrival::Constant, RatePerS(2.0), 1)
            .take(4)
            .collect();
        assert_eq!(gamma, constant);
    }

    #[test]
    fn same_seed_same_schedule_different_seed_differs() {
        let take = |seed| -> Vec<Duration> {
            arrival_times(Arrival::Poisson, RatePerS(10.0), seed)
                .take(1000)
                .collect()
        };
        assert_eq!(take(5), take(5));
        assert_ne!(take(5), take(6));
    }

    #[test]
    fn schedule_is_not_rescaled_to_the_rate() {
        // The realised mean of a short Poisson stretch differs from 1/rate:
        // proof the gaps are used as drawn.
        let times: Vec<Duration> = arrival_times(Arrival::Poisson, RatePerS(1.0), 11)
            .take(11)
            .collect();
        assert_ne!(times[10], Duration::from_secs(10));
    }

    #[test]
    fn invalid_rate_has_no_arrivals() {
        for rate in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(
                arrival_times(Arrival::Poisson, RatePerS(rate), 1).count(),
                0
            );
        }
    }

    #[test]
    fn offsets_never_decrease() {
        let times: Vec<Duration> = arrival_times(Arrival::Gamma { cv: 3.0 }, RatePerS(50.0), 9)
            .take(10_000)
            .collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
    }
}
