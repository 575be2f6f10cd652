//! Confidence intervals for percentiles, means and proportions, and the
//! three-valued verdict each gives against a bound (pure).
//!
//! # Percentiles: order statistics
//!
//! For `n` independent samples, the interval `[x₍ₗ₎, x₍ᵤ₎]` between two order
//! statistics holds the true q-quantile with probability `P(l ≤ B ≤ u − 1)`,
//! `B ~ Binomial(n, q)`, whatever the distribution. [`rank_interval`] picks
//! the widest `l` and narrowest `u` with at most `α/2` outside on each side
//! (exact binomial tails up to 20,000 samples, the normal approximation with
//! continuity correction beyond). A rank below 1 or above `n` leaves that end
//! of the interval unbounded: a p99 from 50 samples has no upper bound.
//!
//! # Correlated samples: batch means
//!
//! Consecutive latencies under load are correlated (a queue lifts a run of
//! calls together), so `n` correlated samples carry the information of fewer
//! independent ones. The window is cut into [`BATCHES`] equal slices of time;
//! for the indicator "sample beyond the bound", the variance of the overall
//! fraction estimated from the batch totals (a ratio estimator, since batches
//! hold different numbers of samples), divided by the binomial variance, is
//! the variance inflation `v` ([`variance_inflation`]). The interval is then
//! computed for `n / v` samples and its ranks scaled back to `n`. `v` is
//! never taken below 1: a verdict never claims more than independent samples
//! would give. The coverage tests below show the stated confidence holds
//! for independent and for strongly autocorrelated (AR(1), ρ = 0.9) samples,
//! and that without the correction it does not.
//!
//! # Verdicts
//!
//! A bound on a percentile **passes** when the whole interval is within it,
//! **fails** when the whole interval is beyond it, and is **inconclusive**
//! otherwise ([`percentile_verdict`]). A bound on a fraction (the error rate)
//! uses the Wilson score interval on the effective sample ([`proportion_verdict`]);
//! a bound on a mean uses the batch means and Student's t with `batches − 1`
//! degrees of freedom ([`mean_verdict`]).

use serde::{Deserialize, Serialize};

/// Time slices of a measured window for batch means.
pub const BATCHES: usize = 20;
/// Confidence of every interval unless the experiment sets `confidence`.
pub const DEFAULT_CONFIDENCE: f64 = 0.95;
/// Fewest samples a mean is judged on.
pub const MIN_MEAN_SAMPLES: u64 = 20;
/// Up to this many effective samples the binomial tails are summed exactly.
const EXACT_BINOMIAL_MAX: u64 = 20_000;

/// Pass, fail, or not enough evidence either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Pass,
    Fail,
    Inconclusive,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Inconclusive => "inconclusive",
        }
    }

    /// Every part must pass for the whole to pass; one failure fails it.
    pub fn all(verdicts: impl IntoIterator<Item = Verdict>) -> Verdict {
        let mut all = Verdict::Pass;
        for v in verdicts {
            match v {
                Verdict::Fail => return Verdict::Fail,
                Verdict::Inconclusive => all = Verdict::Inconclusive,
                Verdict::Pass => {}
            }
        }
        all
    }
}

/// Which batch of [`BATCHES`] an instant falls in, for a window `[from, to)`.
pub fn batch_of(t_ms: f64, from_ms: f64, to_ms: f64) -> usize {
    let span = to_ms - from_ms;
    if span <= 0.0 || !t_ms.is_finite() {
        return 0;
    }
    let i = ((t_ms - from_ms) / span * BATCHES as f64).floor();
    (i.max(0.0) as usize).min(BATCHES - 1)
}

/// Samples and hits (samples beyond a bound) per batch.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchCounts {
    pub samples: [u64; BATCHES],
    pub hits: [u64; BATCHES],
}

impl Default for BatchCounts {
    fn default() -> Self {
        BatchCounts {
            samples: [0; BATCHES],
            hits: [0; BATCHES],
        }
    }
}

impl BatchCounts {
    pub fn push(&mut self, batch: usize, hit: bool) {
        let b = batch.min(BATCHES - 1);
        self.samples[b] += 1;
        self.hits[b] += u64::from(hit);
    }

    pub fn total(&self) -> u64 {
        self.samples.iter().sum()
    }

    pub fn total_hits(&self) -> u64 {
        self.hits.iter().sum()
    }

    /// [`variance_inflation`] of the hit indicator.
    pub fn variance_inflation(&self, confidence: f64) -> f64 {
        let hits: Vec<f64> = self.hits.iter().map(|&h| h as f64).collect();
        variance_inflation(&self.samples, &hits, confidence)
    }
}

/// Samples and their sum per batch (for a mean).
#[derive(Debug, Clone, PartialEq)]
pub struct BatchSums {
    pub samples: [u64; BATCHES],
    pub sums: [f64; BATCHES],
}

impl Default for BatchSums {
    fn default() -> Self {
        BatchSums {
            samples: [0; BATCHES],
            sums: [0.0; BATCHES],
        }
    }
}

impl BatchSums {
    pub fn push(&mut self, batch: usize, value: f64) {
        let b = batch.min(BATCHES - 1);
        self.samples[b] += 1;
        self.sums[b] += value;
    }
}

/// How much correlation inflates the variance of an overall mean, from the
/// batch totals (`samples[j]` values summing to `sums[j]` in batch `j`):
/// the batch-means variance of the mean over its binomial variance
/// `p(1 − p)/n` (the sums are of a 0/1 indicator), at least 1. The
/// batch-means variance is itself estimated from a few batches, so, as in
/// the batch-means t interval, it is scaled by `(t_{b−1} / z)²` at the
/// interval's `confidence`. Fewer than 2 non-empty batches, or no
/// variation: 1.
pub fn variance_inflation(samples: &[u64], sums: &[f64], confidence: f64) -> f64 {
    let batches = samples.iter().filter(|&&s| s > 0).count();
    let Some(ratio) = batch_means_ratio(samples, sums) else {
        return 1.0;
    };
    let b = batches as f64;
    let upper = 1.0 - (1.0 - confidence.clamp(0.5, 0.999_999)) / 2.0;
    let small_sample = (t_quantile(upper, b - 1.0) / normal_quantile(upper)).powi(2);
    (ratio * small_sample).max(1.0)
}

/// The batch-means variance of an indicator's overall fraction over its
/// binomial variance `p(1 − p)/n`, unscaled and unfloored; `None` with
/// fewer than 2 non-empty batches or no variation.
pub fn batch_means_ratio(samples: &[u64], sums: &[f64]) -> Option<f64> {
    let n: u64 = samples.iter().sum();
    let batches = samples.iter().filter(|&&s| s > 0).count();
    if n == 0 || batches < 2 {
        return None;
    }
    let n = n as f64;
    let p = sums.iter().sum::<f64>() / n;
    let independent = p * (1.0 - p) / n;
    if independent <= 0.0 || !independent.is_finite() {
        return None;
    }
    let b = batches as f64;
    let spread: f64 = samples
        .iter()
        .zip(sums)
        .filter(|(s, _)| **s > 0)
        .map(|(&s, &sum)| (sum - p * s as f64).powi(2))
        .sum();
    let batch_means = b / (b - 1.0) * spread / (n * n);
    Some(batch_means / independent)
}

/// 1-based ranks of an order-statistic interval; `None` = unbounded there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RankInterval {
    pub lower: Option<u64>,
    pub upper: Option<u64>,
}

/// The order-statistic interval for the `q`-quantile (0 < q < 1) of `n`
/// samples at `confidence`, for samples worth `n / inflation` independent
/// ones (rules in the module doc).
pub fn rank_interval(n: u64, q: f64, confidence: f64, inflation: f64) -> RankInterval {
    let unbounded = RankInterval {
        lower: None,
        upper: None,
    };
    if n == 0 || !(q > 0.0 && q < 1.0) {
        return unbounded;
    }
    let alpha_half = (1.0 - confidence.clamp(0.5, 0.999_999)) / 2.0;
    let effective = ((n as f64 / inflation.max(1.0)).floor() as u64).clamp(1, n);
    let (l_eff, u_eff) = if effective <= EXACT_BINOMIAL_MAX {
        exact_ranks(effective, q, alpha_half)
    } else {
        normal_ranks(effective, q, alpha_half)
    };
    let scale = n as f64 / effective as f64;
    let lower = (l_eff >= 1)
        .then(|| (l_eff as f64 * scale).floor() as u64)
        .filter(|&l| l >= 1);
    let upper = (u_eff <= effective)
        .then(|| (u_eff as f64 * scale).ceil() as u64)
        .filter(|&u| u <= n);
    RankInterval { lower, upper }
}

/// Fewest independent samples for which the `q`-quantile has an upper
/// confidence bound at all: the largest sample bounds it once
/// `q^n ≤ α/2`. A p90 at 95% needs 36, a p99 368; a run with fewer can
/// never pass a bound on that percentile, however fast the server.
pub fn min_samples_for_upper_bound(q: f64, confidence: f64) -> u64 {
    if !(q > 0.0 && q < 1.0) {
        return 1;
    }
    let alpha_half = (1.0 - confidence.clamp(0.5, 0.999_999)) / 2.0;
    (alpha_half.ln() / q.ln()).ceil().max(1.0) as u64
}

/// `(l, u)` for `m` samples by exact binomial tails: `l` the largest with
/// `P(B ≤ l − 1) ≤ α/2` (0: none), `u` the smallest with `P(B ≥ u) ≤ α/2`
/// (`m + 1`: none).
fn exact_ranks(m: u64, q: f64, alpha_half: f64) -> (u64, u64) {
    // pmf in log space: (1 − q)^m underflows long before m = 20,000.
    let ln_q = q.ln();
    let ln_1q = (1.0 - q).ln();
    let mut ln_pmf = Vec::with_capacity(m as usize + 1);
    let mut lp = m as f64 * ln_1q;
    for k in 0..=m {
        ln_pmf.push(lp);
        if k < m {
            lp += ((m - k) as f64 / (k + 1) as f64).ln() + ln_q - ln_1q;
        }
    }
    let peak = ln_pmf.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let pmf: Vec<f64> = ln_pmf.iter().map(|&l| (l - peak).exp()).collect();
    let total: f64 = pmf.iter().sum();
    // Lower: accumulate from the left while P(B ≤ j − 1) stays ≤ α/2.
    let mut below = 0.0;
    let mut l = 0;
    for (j, p) in pmf.iter().enumerate() {
        // P(B ≤ j − 1) = below (before adding pmf[j]); rank j + 1 needs P(B ≤ j).
        if (below + p) / total > alpha_half {
            l = j as u64;
            break;
        }
        below += p;
    }
    // Upper: accumulate from the right while P(B ≥ u) stays ≤ α/2.
    let mut above = 0.0;
    let mut u = m + 1;
    for j in (0..=m as usize).rev() {
        if (above + pmf[j]) / total > alpha_half {
            u = j as u64 + 1;
            break;
        }
        above += pmf[j];
    }
    (l, u)
}

fn normal_ranks(m: u64, q: f64, alpha_half: f64) -> (u64, u64) {
    let z = normal_quantile(1.0 - alpha_half);
    let mean = m as f64 * q;
    let sd = (m as f64 * q * (1.0 - q)).sqrt();
    let l = (mean + 0.5 - z * sd).floor().max(0.0) as u64;
    let u = (mean + 0.5 + z * sd).ceil().min((m + 1) as f64) as u64;
    (l, u)
}

/// A percentile bound judged on `n` samples of which `beyond` exceed it.
pub fn percentile_verdict(
    n: u64,
    beyond: u64,
    q: f64,
    confidence: f64,
    inflation: f64,
) -> (Verdict, RankInterval) {
    let ranks = rank_interval(n, q, confidence, inflation);
    let within = n.saturating_sub(beyond);
    let verdict = if n == 0 {
        Verdict::Inconclusive
    } else if ranks.upper.is_some_and(|u| u <= within) {
        Verdict::Pass
    } else if ranks.lower.is_some_and(|l| l > within) {
        Verdict::Fail
    } else {
        Verdict::Inconclusive
    };
    (verdict, ranks)
}

/// Wilson score interval for a fraction: `hits` of `n`, worth
/// `n / inflation` independent trials.
pub fn proportion_interval(hits: u64, n: u64, confidence: f64, inflation: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let v = inflation.max(1.0);
    let n_eff = n as f64 / v;
    let p = hits as f64 / n as f64;
    let z = normal_quantile(1.0 - (1.0 - confidence.clamp(0.5, 0.999_999)) / 2.0);
    let z2 = z * z;
    let center = (p + z2 / (2.0 * n_eff)) / (1.0 + z2 / n_eff);
    let half = z / (1.0 + z2 / n_eff) * (p * (1.0 - p) / n_eff + z2 / (4.0 * n_eff * n_eff)).sqrt();
    ((center - half).max(0.0), (center + half).min(1.0))
}

/// The fewest calls that let an error rate with no failure at all pass a
/// bound `max` at `confidence`: the Wilson upper end of 0 of `n`,
/// `z² / (n + z²)`, is at most `max` from `n = z² (1 − max) / max` (765 for
/// 0.5% at 95%, 381 for 1%). 1 for a bound of 0 (a count) or of 1.
pub fn min_samples_for_proportion_bound(max: f64, confidence: f64) -> u64 {
    if !(max > 0.0 && max < 1.0) {
        return 1;
    }
    let z = normal_quantile(1.0 - (1.0 - confidence.clamp(0.5, 0.999_999)) / 2.0);
    (z * z * (1.0 - max) / max).ceil().max(1.0) as u64
}

/// A bound `max` on a fraction. A bound of 0 is a count, not an estimate:
/// it passes with no hits and fails with one.
pub fn proportion_verdict(
    hits: u64,
    n: u64,
    max: f64,
    confidence: f64,
    inflation: f64,
) -> (Verdict, (f64, f64)) {
    let interval = proportion_interval(hits, n, confidence, inflation);
    let verdict = if n == 0 {
        Verdict::Inconclusive
    } else if max <= 0.0 {
        if hits == 0 {
            Verdict::Pass
        } else {
            Verdict::Fail
        }
    } else if interval.1 <= max {
        Verdict::Pass
    } else if interval.0 > max {
        Verdict::Fail
    } else {
        Verdict::Inconclusive
    };
    (verdict, interval)
}

/// The batch-means interval of a mean: `(mean, low, high)`; `None` below
/// [`MIN_MEAN_SAMPLES`] samples or 2 non-empty batches.
pub fn mean_interval(batches: &BatchSums, confidence: f64) -> Option<(f64, f64, f64)> {
    let n: u64 = batches.samples.iter().sum();
    let used = batches.samples.iter().filter(|&&s| s > 0).count();
    if n < MIN_MEAN_SAMPLES || used < 2 {
        return None;
    }
    let nf = n as f64;
    let mean = batches.sums.iter().sum::<f64>() / nf;
    let b = used as f64;
    let spread: f64 = batches
        .samples
        .iter()
        .zip(&batches.sums)
        .filter(|(s, _)| **s > 0)
        .map(|(&s, &sum)| (sum - mean * s as f64).powi(2))
        .sum();
    let sd = (b / (b - 1.0) * spread / (nf * nf)).sqrt();
    let t = t_quantile(
        1.0 - (1.0 - confidence.clamp(0.5, 0.999_999)) / 2.0,
        b - 1.0,
    );
    Some((mean, mean - t * sd, mean + t * sd))
}

/// A bound on a mean.
pub fn mean_verdict(batches: &BatchSums, bound: f64, confidence: f64) -> Verdict {
    match mean_interval(batches, confidence) {
        None => Verdict::Inconclusive,
        Some((_, _, high)) if high <= bound => Verdict::Pass,
        Some((_, low, _)) if low > bound => Verdict::Fail,
        Some(_) => Verdict::Inconclusive,
    }
}

/// Φ⁻¹(p) by Acklam's rational approximation (relative error < 1.2e-9).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    let p = p.clamp(1e-300, 1.0 - 1e-16);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < 0.02425 {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - 0.02425 {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

/// Student's t quantile by the Cornish–Fisher expansion in `1/ν` (within
/// 0.5% of the exact value from ν = 3 at the 97.5% point).
pub fn t_quantile(p: f64, dof: f64) -> f64 {
    let z = normal_quantile(p);
    let n = dof.max(1.0);
    let z3 = z.powi(3);
    let z5 = z.powi(5);
    let z7 = z.powi(7);
    let z9 = z.powi(9);
    z + (z3 + z) / (4.0 * n)
        + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * n * n)
        + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * n.powi(3))
        + (79.0 * z9 + 776.0 * z7 + 1482.0 * z5 - 1920.0 * z3 - 945.0 * z) / (92160.0 * n.powi(4))
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_distr::{Distribution, LogNormal, StandardNormal};

    use super::*;
    use crate::stats::StatsAccumulator;

    type Rng = rand::rngs::Xoshiro256PlusPlus;

    #[test]
    fn quantiles_of_the_normal_and_t() {
        assert!((normal_quantile(0.975) - 1.959_964).abs() < 1e-5);
        assert!((normal_quantile(0.5)).abs() < 1e-9);
        assert!((normal_quantile(0.001) + 3.090_232).abs() < 1e-5);
        // t(0.975) for 19 and 5 degrees of freedom: 2.093, 2.571.
        assert!((t_quantile(0.975, 19.0) - 2.093).abs() < 0.002);
        assert!((t_quantile(0.975, 5.0) - 2.571).abs() < 0.01);
    }

    #[test]
    fn exact_ranks_of_a_known_case() {
        // n = 100, median, 95%: the classic interval is [x(40), x(61)].
        let r = rank_interval(100, 0.5, 0.95, 1.0);
        assert_eq!((r.lower, r.upper), (Some(40), Some(61)));
        // p99 of 50 samples: no upper bound at all.
        let r = rank_interval(50, 0.99, 0.95, 1.0);
        assert_eq!(r.upper, None);
        // Exact and normal agree at the switch-over within a rank or two.
        let (le, ue) = exact_ranks(20_000, 0.99, 0.025);
        let (ln, un) = normal_ranks(20_000, 0.99, 0.025);
        assert!(
            le.abs_diff(ln) <= 2 && ue.abs_diff(un) <= 2,
            "{le} {ln} {ue} {un}"
        );
    }

    #[test]
    fn inflation_widens_the_interval() {
        let tight = rank_interval(2_000, 0.9, 0.95, 1.0);
        let wide = rank_interval(2_000, 0.9, 0.95, 4.0);
        assert!(wide.lower.unwrap() < tight.lower.unwrap());
        assert!(wide.upper.unwrap() > tight.upper.unwrap());
    }

    #[test]
    fn percentile_verdicts() {
        // 1,000 samples, p90 bound: 50 beyond passes, 150 beyond fails, 100 is a coin toss.
        assert_eq!(
            percentile_verdict(1000, 50, 0.9, 0.95, 1.0).0,
            Verdict::Pass
        );
        assert_eq!(
            percentile_verdict(1000, 150, 0.9, 0.95, 1.0).0,
            Verdict::Fail
        );
        assert_eq!(
            percentile_verdict(1000, 100, 0.9, 0.95, 1.0).0,
            Verdict::Inconclusive
        );
        // Few samples: a clean p99 is not yet a pass; a bad one already fails.
        assert_eq!(
            percentile_verdict(100, 0, 0.99, 0.95, 1.0).0,
            Verdict::Inconclusive
        );
        assert_eq!(
            percentile_verdict(100, 20, 0.99, 0.95, 1.0).0,
            Verdict::Fail
        );
        assert_eq!(percentile_verdict(400, 0, 0.99, 0.95, 1.0).0, Verdict::Pass);
        assert_eq!(
            percentile_verdict(0, 0, 0.5, 0.95, 1.0).0,
            Verdict::Inconclusive
        );
    }

    #[test]
    fn proportion_and_mean_verdicts() {
        assert_eq!(
            proportion_verdict(0, 1000, 0.01, 0.95, 1.0).0,
            Verdict::Pass
        );
        assert_eq!(
            proportion_verdict(0, 100, 0.01, 0.95, 1.0).0,
            Verdict::Inconclusive
        );
        assert_eq!(
            proportion_verdict(30, 1000, 0.01, 0.95, 1.0).0,
            Verdict::Fail
        );
        assert_eq!(proportion_verdict(0, 5, 0.0, 0.95, 1.0).0, Verdict::Pass);
        assert_eq!(proportion_verdict(1, 5000, 0.0, 0.95, 1.0).0, Verdict::Fail);

        let mut sums = BatchSums::default();
        for i in 0..400 {
            sums.push(i % BATCHES, 10.0 + (i % 7) as f64);
        }
        assert_eq!(mean_verdict(&sums, 15.0, 0.95), Verdict::Pass);
        assert_eq!(mean_verdict(&sums, 11.0, 0.95), Verdict::Fail);
        assert_eq!(mean_verdict(&sums, 13.0, 0.95), Verdict::Inconclusive);
        assert_eq!(
            mean_verdict(&BatchSums::default(), 1.0, 0.95),
            Verdict::Inconclusive
        );
    }

    #[test]
    fn inflation_is_one_for_independent_and_large_for_clustered() {
        let mut even = BatchCounts::default();
        let mut clustered = BatchCounts::default();
        for i in 0..2000 {
            even.push(i * BATCHES / 2000, i % 10 == 0);
            // The same 10% of hits, all in the first two batches.
            clustered.push(i * BATCHES / 2000, i < 200);
        }
        assert!(
            even.variance_inflation(0.95) < 1.6,
            "{}",
            even.variance_inflation(0.95)
        );
        assert!(clustered.variance_inflation(0.95) > 50.0);
        assert_eq!(BatchCounts::default().variance_inflation(0.95), 1.0);
    }

    /// How often the interval for the q-quantile holds the true one, over
    /// `reps` seeded samples of `n` latencies from `draw`, with or without
    /// the batch-means correction. Values go through the HDR histogram,
    /// as in a real run.
    fn coverage(
        reps: u64,
        n: usize,
        q: f64,
        truth: f64,
        correct: bool,
        mut draw: impl FnMut(&mut Rng, usize) -> Vec<f64>,
    ) -> u64 {
        let mut covered = 0;
        for seed in 0..reps {
            let mut rng = Rng::seed_from_u64(seed);
            let values = draw(&mut rng, n);
            let mut acc = StatsAccumulator::default();
            let mut batches = BatchCounts::default();
            for (i, &v) in values.iter().enumerate() {
                acc.push(v);
                batches.push(i * BATCHES / n, v > truth);
            }
            let inflation = if correct {
                batches.variance_inflation(0.95)
            } else {
                1.0
            };
            let r = rank_interval(n as u64, q, 0.95, inflation);
            let low = r.lower.map_or(f64::NEG_INFINITY, |l| acc.value_at_rank(l));
            let high = r.upper.map_or(f64::INFINITY, |u| acc.value_at_rank(u));
            // HDR keeps 3 significant digits: compare at that resolution.
            covered += u64::from(low <= truth * 1.001 && truth <= high * 1.001);
        }
        covered
    }

    fn lognormal(rng: &mut Rng, n: usize) -> Vec<f64> {
        let d = LogNormal::new(100f64.ln(), 0.5).expect("valid lognormal");
        (0..n).map(|_| d.sample(rng)).collect()
    }

    /// Lognormal with an AR(1) log: each latency leans on the one before
    /// (ρ = 0.9), with the same marginal distribution as [`lognormal`].
    fn correlated(rng: &mut Rng, n: usize) -> Vec<f64> {
        let rho: f64 = 0.9;
        let mut x: f64 = StandardNormal.sample(rng);
        (0..n)
            .map(|_| {
                let e: f64 = StandardNormal.sample(rng);
                x = rho * x + (1.0 - rho * rho).sqrt() * e;
                (100f64.ln() + 0.5 * x).exp()
            })
            .collect()
    }

    #[test]
    fn stated_confidence_holds_for_independent_latencies() {
        // Lognormal(median 100 ms, σ 0.5): p95 = 100·e^(0.5·1.6449) = 227.6 ms.
        let p95 = 100.0 * (0.5 * normal_quantile(0.95)).exp();
        let got = coverage(100, 1000, 0.95, p95, true, lognormal);
        assert!(got >= 90, "95% interval held the true p95 in {got} of 100");
        let p50 = coverage(100, 200, 0.5, 100.0, true, lognormal);
        assert!(p50 >= 90, "p50: {p50} of 100");
    }

    #[test]
    fn stated_confidence_holds_for_correlated_latencies_only_with_batch_means() {
        let p95 = 100.0 * (0.5 * normal_quantile(0.95)).exp();
        let with = coverage(100, 4000, 0.95, p95, true, correlated);
        let without = coverage(100, 4000, 0.95, p95, false, correlated);
        assert!(with >= 90, "with batch means: {with} of 100");
        assert!(
            without < 80,
            "the correction matters: {without} of 100 without it"
        );
    }

    #[test]
    fn fewest_samples_for_an_upper_bound_match_the_rank_interval() {
        assert_eq!(min_samples_for_upper_bound(0.9, 0.95), 36);
        assert_eq!(min_samples_for_upper_bound(0.99, 0.95), 368);
        assert_eq!(min_samples_for_upper_bound(0.5, 0.95), 6);
        for (q, c) in [(0.5, 0.95), (0.9, 0.95), (0.95, 0.9), (0.99, 0.99)] {
            let n = min_samples_for_upper_bound(q, c);
            assert!(rank_interval(n, q, c, 1.0).upper.is_some(), "q={q} n={n}");
            assert!(
                rank_interval(n - 1, q, c, 1.0).upper.is_none(),
                "q={q} n={}",
                n - 1
            );
        }
    }

    #[test]
    fn an_error_rate_of_zero_passes_from_the_fewest_calls_and_not_one_before() {
        for (max, expected) in [(0.005, 765), (0.01, 381), (0.05, 73)] {
            let n = min_samples_for_proportion_bound(max, 0.95);
            assert_eq!(n, expected, "{max}");
            assert_eq!(proportion_verdict(0, n, max, 0.95, 1.0).0, Verdict::Pass);
            assert_eq!(
                proportion_verdict(0, n - 1, max, 0.95, 1.0).0,
                Verdict::Inconclusive
            );
        }
        assert_eq!(min_samples_for_proportion_bound(0.0, 0.95), 1);
    }
}
