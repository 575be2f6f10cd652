//! Open-loop arrival schedules, precomputed from the seed and never rescaled.

use std::time::Duration;

use crate::config::{Arrival, RatePerS};

/// Scheduled arrival offsets (from the run's start) of an open-loop run at
/// `rate`, an endless, deterministic iterator for `(arrival, rate, seed)`.
pub fn arrival_times(arrival: Arrival, rate: RatePerS, seed: u64) -> impl Iterator<Item = Duration> {
    let _ = (arrival, rate, seed);
    todo!("workload helper");
    #[allow(unreachable_code)]
    std::iter::empty()
}
