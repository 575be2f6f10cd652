//! Percentiles, the one implementation: HDR histograms (hdrhistogram,
//! values in µs, 3 significant digits: ≤ 0.1% relative error) with the
//! nearest-rank definition, and exact count, mean and max. Every percentile
//! capcard reports, from a run's TTFT p99 to one call's own ITL p95 and the
//! generator's schedule-lag p99, comes from here; so does the one median
//! of observed values ([`median_of_sorted`]) and, in [`interval`], the
//! confidence intervals and verdicts built on them.

pub mod crossing;
pub mod interval;
pub mod sequential;

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// A statistic of a latency distribution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Stat {
    Mean,
    /// Percentile in (0, 100), e.g. 99.0 or 99.9.
    Percentile(f64),
}

impl Stat {
    /// `"mean"`, `"p50"`, `"p99.9"`: the key used in summaries and JSON.
    pub fn key(self) -> String {
        match self {
            Stat::Mean => "mean".to_string(),
            Stat::Percentile(p) => {
                if p.fract() == 0.0 {
                    format!("p{}", p as u32)
                } else {
                    format!("p{p}")
                }
            }
        }
    }
}

/// The median element of values already in order, the one convention of the
/// crate for a median that must be a value that was observed (a run, a
/// batch mean, a token count), never an average of two: the middle element
/// of an odd count, and for an even count the later of the two middle ones
/// in the order given (index `len / 2`). A caller that wants the earlier one
/// on a tie orders its values the other way round. `None` when empty.
pub fn median_of_sorted<T>(sorted: &[T]) -> Option<&T> {
    sorted.get(sorted.len() / 2)
}

/// Latency distribution of one metric in one run, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LatencyStats {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
    pub max: f64,
    /// Other percentiles an SLO asked for, keyed like `"p99.9"`, `"p75"`.
    #[serde(default)]
    pub extra: BTreeMap<String, f64>,
}

impl LatencyStats {
    /// The value of `stat`, or `None` when nothing was measured or the
    /// percentile was not computed (it is in `extra` only if asked for).
    pub fn get(&self, stat: Stat) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        match stat {
            Stat::Mean => Some(self.mean),
            Stat::Percentile(50.0) => Some(self.p50),
            Stat::Percentile(90.0) => Some(self.p90),
            Stat::Percentile(95.0) => Some(self.p95),
            Stat::Percentile(99.0) => Some(self.p99),
            Stat::Percentile(_) => self.extra.get(&stat.key()).copied(),
        }
    }
}

/// Streaming percentiles: an HDR histogram (µs, 3 significant digits) and
/// the exact count, sum and max. Gives what [`latency_stats`] gives for the
/// same values in the same order, in constant memory.
#[derive(Debug, Clone, Default)]
pub struct StatsAccumulator {
    hist: Option<Histogram<u64>>,
    count: u64,
    sum: f64,
    max: f64,
}

impl StatsAccumulator {
    pub fn push(&mut self, v: f64) {
        let hist = self.hist.get_or_insert_with(|| {
            Histogram::<u64>::new(3).expect("3 significant digits is a valid HDR precision")
        });
        // Saturating cast: negative or NaN → 0, absurdly large → u64::MAX.
        let us = (v * 1000.0).round() as u64;
        // `new` auto-resizes, so `record` only fails beyond what any
        // histogram can track; clamp those to its highest value.
        if hist.record(us).is_err() {
            hist.saturating_record(us);
        }
        self.max = if self.count == 0 { v } else { self.max.max(v) };
        self.count += 1;
        self.sum += v;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// The value of nearest rank `rank` (1-based, clamped to `1..=count`);
    /// 0 when empty.
    pub fn value_at_rank(&self, rank: u64) -> f64 {
        match self.hist.as_ref().filter(|_| self.count > 0) {
            None => 0.0,
            Some(hist) => {
                let rank = rank.clamp(1, self.count);
                // value_at_quantile(q) is the value at rank ceil(q × n); the
                // epsilon keeps float error from skipping to the next rank.
                let q = (rank as f64 / self.count as f64 - 1e-12).max(0.0);
                self.within_max(hist.value_at_quantile(q))
            }
        }
    }

    /// A histogram value (µs) in ms, no higher than the exact max. HDR
    /// answers with the highest value of the bucket a rank falls in, up to
    /// 0.1% above every value in it: the top percentiles would then read
    /// above the max measured (p99 82.431 ms beside a max of 82.376 ms),
    /// which no percentile of the values can be.
    fn within_max(&self, hist_value_us: u64) -> f64 {
        (hist_value_us as f64 / 1000.0).min(self.max)
    }

    /// The nearest-rank `p`-th percentile (0 < p ≤ 100); `None` when empty.
    pub fn percentile(&self, p: f64) -> Option<f64> {
        (self.count > 0).then(|| {
            let rank = ((p / 100.0) * self.count as f64 - 1e-9).ceil().max(1.0) as u64;
            self.value_at_rank(rank)
        })
    }

    /// The exact mean; `None` when empty.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }

    /// Forget every value, keeping the histogram's memory (for one
    /// accumulator reused call after call).
    pub fn clear(&mut self) {
        if let Some(h) = &mut self.hist {
            h.reset();
        }
        self.count = 0;
        self.sum = 0.0;
        self.max = 0.0;
    }

    pub fn finish(&self, extra_percentiles: &[f64]) -> LatencyStats {
        let Some(hist) = self.hist.as_ref().filter(|_| self.count > 0) else {
            return LatencyStats::default();
        };
        // Nearest rank = ceil(q × n); the epsilon keeps float error
        // (0.999 × 1000 = 999.0000000000001) from skipping to the next rank.
        let at = |p: f64| self.within_max(hist.value_at_quantile((p / 100.0 - 1e-12).max(0.0)));
        LatencyStats {
            count: self.count,
            mean: self.sum / self.count as f64,
            p50: at(50.0),
            p90: at(90.0),
            p95: at(95.0),
            p99: at(99.0),
            max: self.max,
            extra: extra_percentiles
                .iter()
                .map(|&p| (Stat::Percentile(p).key(), at(p)))
                .collect(),
        }
    }
}

/// HDR percentiles (µs, 3 significant digits) plus exact mean and max.
pub fn latency_stats(values_ms: &[f64], extra_percentiles: &[f64]) -> LatencyStats {
    let mut acc = StatsAccumulator::default();
    for &v in values_ms {
        acc.push(v);
    }
    acc.finish(extra_percentiles)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_percentile_reads_above_the_max_measured() {
        // 82.376 ms lies inside an HDR bucket whose highest value is
        // higher: unclamped, p99 and p100 read above the max.
        let mut acc = StatsAccumulator::default();
        for v in [1.0, 2.0, 3.0, 82.376] {
            acc.push(v);
        }
        let stats = acc.finish(&[99.9, 100.0]);
        assert_eq!(stats.max, 82.376);
        for p in [
            stats.p95,
            stats.p99,
            stats.extra["p99.9"],
            stats.extra["p100"],
        ] {
            assert!(p <= stats.max, "{p} > max {}", stats.max);
            assert!((p - 82.376).abs() <= 82.376 * 1e-3);
        }
        assert!(acc.percentile(100.0).is_some_and(|p| p <= stats.max));
        assert!(acc.value_at_rank(4) <= stats.max);
    }

    #[test]
    fn nearest_rank_within_hdr_precision() {
        let mut acc = StatsAccumulator::default();
        for v in (1..=100).rev() {
            acc.push(f64::from(v));
        }
        let near = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() <= b * 1e-3);
        assert!(near(acc.percentile(99.0), 99.0));
        assert!(near(acc.percentile(50.0), 50.0));
        assert!(near(Some(acc.value_at_rank(1)), 1.0));
        assert_eq!(acc.mean(), Some(50.5));
        assert_eq!(StatsAccumulator::default().percentile(50.0), None);
        acc.clear();
        assert_eq!(acc.count(), 0);
        acc.push(7.0);
        assert!(near(acc.percentile(50.0), 7.0));
    }

    #[test]
    fn the_median_element_takes_the_later_middle_on_a_tie() {
        assert_eq!(median_of_sorted::<u32>(&[]), None);
        assert_eq!(median_of_sorted(&[7]), Some(&7));
        assert_eq!(median_of_sorted(&[1, 2, 3]), Some(&2));
        assert_eq!(median_of_sorted(&[1, 2, 3, 4]), Some(&3));
    }
}
