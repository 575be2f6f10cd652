//! Where one SLO clause crosses its bound, from every run at once (pure):
//! a monotone model of the clause against the realized arrival rate,
//! fitted to all runs, and a profile-likelihood range on the rate where the
//! model meets the bound. `docs/measuring.md` ("Cr_open: one model across
//! all runs") states the method and its assumptions for a reviewer;
//! this is the code it describes.
//!
//! # The model
//!
//! - A **count** clause (a percentile bound, the error rate) is the
//!   probability π(λ) that a sample exceeds the bound: "TTFT p90 ≤ 250 ms"
//!   holds while π ≤ 10%. Each run contributes `beyond` of `samples`, worth
//!   `samples / inflation` independent ones (batch means), at its realized
//!   rate λ. The model is logistic in log λ:
//!   `logit π = logit π₀ + b·(ln λ − θ)`, `b ≥ 0`, so θ = ln λ* is the
//!   crossing itself and `b` how steep the tail rises there.
//! - A **mean** clause is `ln mean = ln bound + b·(ln λ − θ)`, each run's
//!   mean weighted by its batch-means standard error.
//!
//! # The fit and its range
//!
//! The profile deviance `D(θ) = min_b D(θ, b)` is scanned over θ; its
//! minimum is the estimate, and the range is `{θ : D(θ) − D_min ≤ c·φ}`
//! with `c = z²` of the two-sided confidence (2.71 at 90%): the profile
//! likelihood interval, which, unlike a delta-method one, stays honest when
//! the crossing is barely inside or outside the runs. `φ ≥ 1` is the
//! Pearson dispersion of the fit when there are runs to estimate it:
//! when the runs scatter more than their batch-means weights say (a model
//! that bends, inflation underestimated), the range widens by as much.
//!
//! The fit is local: runs far from the estimate (bracketing runs at half or
//! twice the rate) would bend a two-parameter curve; a tricube kernel in
//! `ln λ` around the estimate keeps the nearest runs at full weight and
//! fades the others (at least [`KERNEL_MIN_RATES`] distinct rates kept).
//!
//! # When the model does not hold
//!
//! - **A cliff** (a KV-cache wall, preemption): π jumps from near 0 to near
//!   1 between two runs, the best slope runs off to its cap, and the
//!   model says nothing between them. A cliff is called only when the runs
//!   show one beyond their noise: the fitted slope would rise by more than
//!   `CLIFF_LOGITS` (6) across the gap between the runs either side, *and* a
//!   likelihood-ratio test rejects every curve that rises by at most that
//!   much there — the kernel-weighted deviance with the slope capped at
//!   `CLIFF_LOGITS / ln(b/a)` exceeds the free fit's by more than `z²·φ`
//!   (the range's own cut and dispersion). At the cap the statistic is a
//!   half-and-half mixture of 0 and χ²₁, so a smooth curve as steep as the
//!   cap is called a cliff with probability (1 − c)/2 (5% at a 90% range),
//!   and a gentler one (every queue's tail) far less often. Two short runs
//!   that differ by more than a smooth curve allows by their point
//!   estimates, but not by their intervals, are no cliff; the smooth
//!   fit's range stands.
//! - **Censored runs** (overloaded, invalid, rate-limited, decided early,
//!   and a backlogged run whose counts are beyond the bound: see
//!   `analyze::cr_open::censored_for`): they show the rate is above the
//!   crossing without a fraction to fit; they cap the range's upper end,
//!   never bend the curve. One below the fitted crossing contradicts the
//!   fit, and the crossing falls back to the bracket too. (A run decided
//!   early below the crossing fitted without it never gets here: its
//!   counts are a point, `analyze::cr_open::fit_clause`.)
//! - **The bracket** ([`Method::Bracket`]) carries the range's confidence
//!   like the fit: its lower end is the highest rate whose run is within
//!   the bound at the one-sided level (its Wilson interval's upper end
//!   below what is allowed, from its pooled effective samples), its upper
//!   end the lowest rate whose run is beyond it at that level, or a
//!   censored rate. A neighbouring run that is neither is passed over for
//!   the next one out; an end with none is open. The estimate is the
//!   geometric middle of the runs either side by their point estimates,
//!   kept within the range.
//! - **One side only**: with every run below the bound, the range has no
//!   upper end (`None`), with every run beyond it no lower end.

use super::interval::{batch_means_ratio, normal_quantile, t_quantile};

/// How a run saw one clause.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Observation {
    /// `beyond` of `samples` exceeded the bound; consecutive samples are
    /// correlated, and were worth `samples / inflation` independent ones.
    Count {
        samples: f64,
        beyond: f64,
        inflation: f64,
    },
    /// A mean of `samples` values and its (batch-means) standard error, in
    /// the bound's unit.
    Mean {
        mean: f64,
        std_error: f64,
        samples: f64,
    },
}

/// One run's observation of a clause at its realized arrival rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub rate_per_s: f64,
    pub observation: Observation,
}

/// What the clause allows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Bound {
    /// The largest allowed fraction beyond the bound (1 − q for a
    /// percentile, the error-rate limit).
    Fraction(f64),
    /// The largest allowed mean.
    Mean(f64),
}

/// How the crossing was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// The model fitted; estimate and range from its profile likelihood.
    Fit,
    /// The model did not fit (a cliff): the bracket between the runs on
    /// either side; the estimate is its geometric middle.
    Bracket,
    /// Nothing to fit: no run measured the clause.
    None,
}

impl Method {
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Fit => "fit",
            Method::Bracket => "bracket",
            Method::None => "none",
        }
    }
}

/// The crossing of one clause.
#[derive(Debug, Clone, PartialEq)]
pub struct Crossing {
    /// The rate where the model meets the bound; `None` when the runs do not
    /// place it (all on one side, with no end of the range).
    pub estimate_per_s: Option<f64>,
    /// The range at the asked confidence; an end is `None` when the runs do
    /// not bound it on that side.
    pub range_per_s: [Option<f64>; 2],
    pub method: Method,
    /// `b`: the model's slope in `ln λ` (logit or log-mean per log rate).
    pub slope: f64,
    /// The Pearson dispersion the range was widened by (≥ 1).
    pub dispersion: f64,
    /// The highest rate seen within the bound below every rate seen beyond
    /// it, and the lowest beyond it (a censored run counts beyond): the
    /// bracket the runs themselves show, by their point estimates.
    pub bracket_per_s: [Option<f64>; 2],
    /// Where a pool-adjacent-violators (isotonic) fit of the runs crosses
    /// the bound, interpolated in `ln λ`: the model-free check of the
    /// estimate.
    pub isotonic_per_s: Option<f64>,
}

impl Crossing {
    fn none() -> Crossing {
        Crossing {
            estimate_per_s: None,
            range_per_s: [None, None],
            method: Method::None,
            slope: 0.0,
            dispersion: 1.0,
            bracket_per_s: [None, None],
            isotonic_per_s: None,
        }
    }

    /// The range's relative half-width around the estimate, `None` when an
    /// end is open.
    pub fn half_width(&self) -> Option<f64> {
        let (e, [Some(lo), Some(hi)]) = (self.estimate_per_s?, self.range_per_s) else {
            return None;
        };
        Some(((e - lo) / e).max((hi - e) / e))
    }
}

/// Where one run stands against a clause's bound by its own interval at
/// the one-sided level of the range's two-sided confidence (95% for a 90%
/// range): the interval's upper end below what is allowed, its lower end
/// above it, or neither.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Within,
    Beyond,
    Unsure,
}

/// Where `beyond` of `effective` independent samples stand against an
/// allowed fraction, `z` the two-sided normal quantile of the confidence:
/// the Wilson interval (as the runs' own intervals on the card). A bound of
/// 0 is a count, not an estimate: within with none beyond, beyond with one.
fn count_side(fraction: f64, effective: f64, allowed: f64, z: f64) -> Side {
    if allowed <= 0.0 {
        return if fraction > 0.0 {
            Side::Beyond
        } else {
            Side::Within
        };
    }
    if effective.is_nan() || effective <= 0.0 {
        return Side::Unsure;
    }
    let z2 = z * z;
    let centre = (fraction + z2 / (2.0 * effective)) / (1.0 + z2 / effective);
    let half = z / (1.0 + z2 / effective)
        * (fraction * (1.0 - fraction) / effective + z2 / (4.0 * effective * effective)).sqrt();
    if centre + half < allowed {
        Side::Within
    } else if centre - half > allowed {
        Side::Beyond
    } else {
        Side::Unsure
    }
}

/// Where `ln(mean / bound)` with standard deviation `sd` stands.
fn mean_side(log_ratio: f64, sd: f64, z: f64) -> Side {
    if log_ratio + z * sd < 0.0 {
        Side::Within
    } else if log_ratio - z * sd > 0.0 {
        Side::Beyond
    } else {
        Side::Unsure
    }
}

/// Where one run's `observation` stands against `bound` by its own counts
/// (its own batch-means inflation) at the one-sided level of `confidence`
/// (two-sided). `None` when the observation does not fit the bound.
pub fn side(observation: Observation, bound: Bound, confidence: f64) -> Option<Side> {
    let z = normal_quantile(1.0 - (1.0 - confidence.clamp(0.5, 0.999_999)) / 2.0);
    match (observation, bound) {
        (
            Observation::Count {
                samples,
                beyond,
                inflation,
            },
            Bound::Fraction(allowed),
        ) if samples > 0.0 => Some(count_side(
            (beyond / samples).clamp(0.0, 1.0),
            samples / inflation.max(1.0),
            allowed,
            z,
        )),
        (
            Observation::Mean {
                mean, std_error, ..
            },
            Bound::Mean(m),
        ) if mean > 0.0 && m > 0.0 && std_error.is_finite() => {
            Some(mean_side((mean / m).ln(), mean_sd(mean, std_error), z))
        }
        _ => None,
    }
}

/// `sd(ln mean)` by the delta method, `se / mean`, floored so that one run
/// with identical batches cannot take all weight.
fn mean_sd(mean: f64, std_error: f64) -> f64 {
    (std_error / mean).max(1e-3)
}

/// The slope's cap: a logit rising by 10 within 1% of the rate. A fit that
/// wants it steeper is a cliff.
const SLOPE_CAP: f64 = 1000.0;
/// A count clause's observation from a run's batches (`samples[j]` of
/// which `beyond[j]` exceeded the bound). The inflation is the largest of
/// the batch-means ratio of the batches as they are, of half as many twice
/// as long (adjacent pairs merged), and of the two corrected for the
/// batches' shortness ([`corrected_batch_variance`]), at least 1: batches
/// shorter than the queue's correlation time underestimate the variance,
/// and longer ones see more of it. `None` without samples.
pub fn count_observation(samples: &[u64], beyond: &[u64]) -> Option<Observation> {
    let n: u64 = samples.iter().sum();
    if n == 0 {
        return None;
    }
    let hits: Vec<f64> = beyond.iter().map(|&b| b as f64).collect();
    let (merged_samples, merged_hits) = merge_pairs(samples, &hits);
    let (coarse_samples, coarse_hits) = merge_into(samples, &hits, COARSE_BATCHES);
    let fine = batch_means_ratio(samples, &hits);
    let corrected = fine
        .zip(batch_means_ratio(&coarse_samples, &coarse_hits))
        .map(|(fine, coarse)| corrected_batch_variance(fine, samples.len(), coarse));
    let inflation = [
        fine,
        batch_means_ratio(&merged_samples, &merged_hits),
        corrected,
    ]
    .into_iter()
    .flatten()
    .fold(1.0, f64::max);
    Some(Observation::Count {
        samples: n as f64,
        beyond: hits.iter().sum(),
        inflation,
    })
}

/// The batches the fine batch-means estimate is compared with to correct
/// its bias ([`corrected_batch_variance`]).
const COARSE_BATCHES: usize = 5;

/// A batch-means variance estimate with its first-order bias removed.
///
/// With `b` batches of `m` over `n = b·m` samples of a stationary series
/// with autocovariances `R(h)`, the mean of a batch has variance about
/// `(σ² − γ/m)/m`, where `σ² = Σ R(h)` is the variance parameter and
/// `γ = Σ |h|·R(h)`; the batch-means estimate of σ² then has expectation
/// `σ² − (b + 1)·γ/n`: batches not much longer than the correlation miss
/// the covariance across their edges (the first-order bias of
/// non-overlapping batch means; Song and Schmeiser, "Variance of the sample
/// mean: properties and graphs of quadratic-form estimators", Operations
/// Research 41, 1993). Two estimates from
/// the same samples, `fine` with `fine_batches` batches and `coarse` with
/// [`COARSE_BATCHES`], lie on that line in `b + 1`; the line at `b + 1 = 0`
/// is the estimate without the bias. A window of 20 slices of 0.2 s on
/// `sim tiny` at 80% load read 3.7 times the binomial variance as it was,
/// 5.0 in 5 slices, and 5.5 corrected; 100 windows of the same rate
/// scattered by 6.7 times (BENCHMARKS.md, "Cr_open out of sample"). It is
/// at most 1.4 × `coarse` when `coarse ≥ fine`, and below `fine` when the
/// coarse batches happened to vary less: it only ever adds to the larger
/// of the uncorrected estimates it is taken with.
pub fn corrected_batch_variance(fine: f64, fine_batches: usize, coarse: f64) -> f64 {
    let (b_fine, b_coarse) = (fine_batches as f64 + 1.0, COARSE_BATCHES as f64 + 1.0);
    fine + (coarse - fine) * b_fine / (b_fine - b_coarse)
}

/// `samples` and `sums` summed into `groups` consecutive groups of equal
/// length (the last takes what is left).
fn merge_into(samples: &[u64], sums: &[f64], groups: usize) -> (Vec<u64>, Vec<f64>) {
    let size = samples.len().div_ceil(groups.max(1)).max(1);
    (
        samples.chunks(size).map(|c| c.iter().sum()).collect(),
        sums.chunks(size).map(|c| c.iter().sum()).collect(),
    )
}

/// A mean clause's observation from a run's batches (`samples[j]` values
/// summing to `sums[j]`): the mean, and its batch-means standard error, the
/// largest of the batches as they are, merged in pairs, and the two
/// corrected for the batches' shortness ([`corrected_batch_variance`]).
/// `None` with
/// fewer than 20 samples or 2 non-empty batches.
pub fn mean_observation(samples: &[u64], sums: &[f64]) -> Option<Observation> {
    let n: u64 = samples.iter().sum();
    let used = samples.iter().filter(|&&s| s > 0).count();
    if n < super::interval::MIN_MEAN_SAMPLES || used < 2 {
        return None;
    }
    let mean = sums.iter().sum::<f64>() / n as f64;
    let std_error = |samples: &[u64], sums: &[f64]| -> Option<f64> {
        let b = samples.iter().filter(|&&s| s > 0).count() as f64;
        if b < 2.0 {
            return None;
        }
        let spread: f64 = samples
            .iter()
            .zip(sums)
            .filter(|(s, _)| **s > 0)
            .map(|(&s, &sum)| (sum - mean * s as f64).powi(2))
            .sum();
        Some((b / (b - 1.0) * spread).sqrt() / n as f64)
    };
    let (merged_samples, merged_sums) = merge_pairs(samples, sums);
    let (coarse_samples, coarse_sums) = merge_into(samples, sums, COARSE_BATCHES);
    let fine = std_error(samples, sums);
    let corrected = fine
        .zip(std_error(&coarse_samples, &coarse_sums))
        .map(|(fine, coarse)| {
            corrected_batch_variance(fine * fine, samples.len(), coarse * coarse)
                .max(0.0)
                .sqrt()
        });
    let std_error = [fine, std_error(&merged_samples, &merged_sums), corrected]
        .into_iter()
        .flatten()
        .fold(0.0, f64::max);
    Some(Observation::Mean {
        mean,
        std_error,
        samples: n as f64,
    })
}

fn merge_pairs(samples: &[u64], sums: &[f64]) -> (Vec<u64>, Vec<f64>) {
    (
        samples.chunks(2).map(|c| c.iter().sum()).collect(),
        sums.chunks(2).map(|c| c.iter().sum()).collect(),
    )
}

/// Across the gap between the runs either side of the crossing, a rise
/// larger than this (in logits, or in ln of the mean: π from 0.6% to 69%
/// around a 10% bound) is a cliff the runs do not resolve, when the runs
/// reject every curve rising less (the likelihood-ratio test in
/// [`crossing`]).
const CLIFF_LOGITS: f64 = 6.0;
/// Half a tricube kernel's support never narrower than this, in `ln λ`.
const KERNEL_MIN_HALF_WIDTH: f64 = 0.405; // ln 1.5
/// The kernel keeps at least this many distinct rates.
pub const KERNEL_MIN_RATES: usize = 3;
/// The most a run's hits (or misses, whichever are fewer) weigh its own
/// inflation in the pooled one: past this, its batches show its bursts.
const RELIABLE_HITS: f64 = 100.0;
/// Whether a count clause's model has a curvature term (a quadratic in
/// `ln λ`). Off: in the coverage simulations (`tests/it/cr_open_coverage.rs`)
/// the straight logit, fitted locally, held the truth as often and with
/// ranges half as wide; the third parameter cost more than the bend it
/// caught.
const QUADRATIC: bool = false;
/// Points of the θ scan.
const SCAN: usize = 240;

/// The crossing of a clause from `points` (any order; several at one rate
/// add up) and `censored_per_s` (rates of runs that could not keep up), at
/// `confidence` (two-sided, e.g. 0.9).
pub fn crossing(
    points: &[Point],
    censored_per_s: &[f64],
    bound: Bound,
    confidence: f64,
) -> Crossing {
    let mut data = Data::new(points, bound);
    let lowest_censored = censored_per_s
        .iter()
        .copied()
        .filter(|r| r.is_finite() && *r > 0.0)
        .min_by(f64::total_cmp);
    let bracket = data.bracket(lowest_censored);
    let isotonic = data.isotonic_crossing();
    if data.x.is_empty() {
        return Crossing {
            bracket_per_s: bracket,
            range_per_s: [None, lowest_censored],
            ..Crossing::none()
        };
    }
    let z = normal_quantile(1.0 - (1.0 - confidence.clamp(0.5, 0.999_999)) / 2.0);

    let x_min = data.x.iter().copied().fold(f64::INFINITY, f64::min);
    let x_max = data.x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    // Far enough out that an end the runs do not bound shows as open.
    let (lo, hi) = (x_min - 1.5, x_max + 1.5);
    let mut kernel = vec![1.0; data.x.len()];
    let mut half_width = (x_max - x_min).max(KERNEL_MIN_HALF_WIDTH);
    let mut profile = data.profile(&kernel, half_width, lo, hi);
    for _ in 0..3 {
        let Some(centre) = profile.best_theta() else {
            break;
        };
        let (next, width) = data.kernel(centre);
        if next == kernel {
            break;
        }
        (kernel, half_width) = (next, width);
        data.pool_mean_variance(&kernel);
        profile = data.profile(&kernel, half_width, lo, hi);
    }
    let Some(theta) = profile.best_theta() else {
        return Crossing {
            bracket_per_s: bracket,
            isotonic_per_s: isotonic,
            ..Crossing::none()
        };
    };
    let shape = data.best_shape(&kernel, theta, half_width, SLOPE_CAP);
    let slope = shape.slope;
    let (dispersion, dispersion_dof) = data.dispersion(&kernel, theta, shape);
    // The noise the range is drawn with was estimated (the pooled
    // inflation, the runs' scatter about the curve): Student's t on its
    // degrees of freedom, not the normal (Satterthwaite on the log scale:
    // `1/ν = 1/ν_inflation + 1/ν_dispersion`).
    let dof = 1.0 / (1.0 / data.inflation_dof + 1.0 / dispersion_dof);
    let z = student_z(confidence, dof).unwrap_or(z);
    let cut = z * z;
    let allowed = cut * dispersion;
    let [low, high] = profile.interval(allowed, |t| data.deviance(&kernel, t, half_width));
    let cap = |r: Option<f64>| match (r, lowest_censored) {
        (Some(r), Some(c)) => Some(r.min(c)),
        (None, Some(c)) => Some(c),
        (r, None) => r,
    };
    // A cliff: the runs ask for a curve steeper than any that rises by at
    // most CLIFF_LOGITS across the gap between the runs either side, by
    // more than their noise allows (see `cliff_shown`); then where in the
    // gap it crosses is the model's shape, not the runs' evidence.
    let steepest_smooth = match bracket {
        [Some(a), Some(b)] if b > a => CLIFF_LOGITS / (b / a).ln(),
        _ => SLOPE_CAP * 0.5,
    };
    let cliff = slope > steepest_smooth
        && profile.best.is_some_and(|(_, free)| {
            let smooth = data.profile_capped(&kernel, half_width, (lo, hi), steepest_smooth);
            smooth
                .best
                .is_some_and(|(_, capped)| capped - free > cut * dispersion)
        });
    // Where the model says nothing, what the runs show at the same
    // confidence: the range from the runs confidently on either side (see
    // `Data::confident_bracket`), the estimate the geometric middle of the
    // runs either side by their point estimates, kept within that range.
    let from_bracket = || {
        let range = data.confident_bracket(lowest_censored, z);
        let [b_lo, b_hi] = bracket;
        let estimate = b_lo.zip(b_hi).map(|(a, b)| {
            let middle = (a * b).sqrt();
            let middle = range[0].map_or(middle, |l| middle.max(l));
            range[1].map_or(middle, |h| middle.min(h))
        });
        Crossing {
            estimate_per_s: estimate,
            range_per_s: range,
            method: Method::Bracket,
            slope,
            dispersion,
            bracket_per_s: bracket,
            isotonic_per_s: isotonic,
        }
    };
    if cliff {
        return from_bracket();
    }
    let estimate = theta.exp();
    let range_low = low.map(f64::exp);
    let range_high = cap(high.map(f64::exp));
    // A censored run below the fitted crossing: a run that could not keep
    // up contradicts the fit, and the runs show no more than the bracket
    // below it (the highest run confidently within the bound, the censored
    // rate).
    if lowest_censored.is_some_and(|c| c < estimate) {
        return from_bracket();
    }
    let method = Method::Fit;
    // Runs on one side only: the other end would be the model's
    // extrapolation, which the runs do not show.
    if data.all_within() && lowest_censored.is_none() {
        let highest = data.rate.iter().copied().fold(0.0, f64::max);
        return Crossing {
            estimate_per_s: None,
            range_per_s: [range_low.map(|l| l.min(highest)), None],
            method,
            slope,
            dispersion,
            bracket_per_s: bracket,
            isotonic_per_s: isotonic,
        };
    }
    if data.all_beyond() {
        let lowest = bracket[1].unwrap_or(f64::INFINITY);
        return Crossing {
            estimate_per_s: None,
            range_per_s: [None, range_high.map(|h| h.min(lowest)).or(bracket[1])],
            method,
            slope,
            dispersion,
            bracket_per_s: bracket,
            isotonic_per_s: isotonic,
        };
    }
    Crossing {
        estimate_per_s: Some(estimate),
        range_per_s: [
            range_low.map(|l| l.min(estimate)),
            range_high.map(|h| h.max(estimate)),
        ],
        method,
        slope,
        dispersion,
        bracket_per_s: bracket,
        isotonic_per_s: isotonic,
    }
}

/// The degrees of freedom of a pooled variance, from the scatter of the
/// estimates it pools: `shares` are `(weight, estimate)`, on a scale where
/// the pool is `centre` and a unit change is a relative one (the logs of
/// the estimates, or each over the pool). An estimate on `ν` degrees of
/// freedom varies by `2/ν` on that scale, so `ν = 2 / Var`, with `Var`
/// the variance of the weighted mean `Σ aᵢ²·s²` (`aᵢ` the weights'
/// shares, `s²` the estimates' scatter about the pool, unbiased for such
/// weights): the estimates disagree as much as the pool is uncertain,
/// whatever the reason (bursts some windows see and others miss, a
/// variance that changes with the rate). One estimate alone: a run's
/// corrected batch-means estimate leans on [`COARSE_BATCHES`] batches,
/// `COARSE_BATCHES − 1` degrees of freedom. None: infinite (nothing was
/// estimated).
fn pool_dof(shares: &[(f64, f64)], centre: f64) -> f64 {
    let total: f64 = shares.iter().map(|(w, _)| w).sum();
    match shares.len() {
        0 => f64::INFINITY,
        1 => (COARSE_BATCHES - 1) as f64,
        _ if total <= 0.0 => f64::INFINITY,
        _ => {
            let sum_sq: f64 = shares.iter().map(|(w, _)| (w / total).powi(2)).sum();
            let scatter = shares
                .iter()
                .map(|(w, v)| w / total * (v - centre).powi(2))
                .sum::<f64>()
                / (1.0 - sum_sq).max(f64::MIN_POSITIVE);
            let variance = scatter * sum_sq;
            if variance > 0.0 {
                2.0 / variance
            } else {
                f64::INFINITY
            }
        }
    }
}

/// The two-sided `confidence` quantile of Student's t on `dof` degrees of
/// freedom, `None` when they are infinite (the normal's). Below 3 the
/// Cornish–Fisher expansion of [`t_quantile`] loses its accuracy, and 3 is
/// used.
fn student_z(confidence: f64, dof: f64) -> Option<f64> {
    dof.is_finite().then(|| {
        t_quantile(
            1.0 - (1.0 - confidence.clamp(0.5, 0.999_999)) / 2.0,
            dof.max(3.0),
        )
    })
}

/// The model's shape at the crossing: its slope in `ln λ` and a curvature.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Shape {
    slope: f64,
    curvature: f64,
}

/// `shape` within its bounds: slope in `[0, cap]`, curvature within
/// `±room·slope`.
fn clamp_shape(shape: Shape, room: f64, cap: f64) -> Shape {
    let slope = shape.slope.clamp(0.0, cap);
    let bound = room * slope;
    Shape {
        slope,
        curvature: shape.curvature.clamp(-bound, bound),
    }
}

/// The runs in fitting form: `x = ln λ`, and per point either effective
/// counts or a log-mean with its variance.
struct Data {
    /// The rates as given, and their logarithms.
    rate: Vec<f64>,
    x: Vec<f64>,
    /// Count clauses: effective samples and the fraction beyond.
    weight: Vec<f64>,
    /// Count clauses: each run's own batch-means inflation (before
    /// pooling; see [`Data::pool_inflation`]).
    inflation: Vec<f64>,
    fraction: Vec<f64>,
    /// Mean clauses: ln(mean / bound) and its variance (pooled: see
    /// [`Data::pool_mean_variance`]); each run's own variance, and its
    /// samples in `weight`.
    log_ratio: Vec<f64>,
    variance: Vec<f64>,
    own_variance: Vec<f64>,
    counts: bool,
    /// logit π₀ (counts).
    target_logit: f64,
    target: f64,
    /// The fraction allowed as declared (counts; `target` is clamped off 0).
    allowed: f64,
    /// Count clauses: the degrees of freedom of the pooled inflation, from
    /// the scatter of the runs' own ([`Data::pool_inflation`]); infinite
    /// when nothing estimated it.
    inflation_dof: f64,
}

impl Data {
    fn new(points: &[Point], bound: Bound) -> Data {
        let mut data = Data {
            rate: vec![],
            x: vec![],
            weight: vec![],
            inflation: vec![],
            fraction: vec![],
            log_ratio: vec![],
            variance: vec![],
            own_variance: vec![],
            counts: matches!(bound, Bound::Fraction(_)),
            target_logit: 0.0,
            target: 0.0,
            allowed: 0.0,
            inflation_dof: f64::INFINITY,
        };
        match bound {
            Bound::Fraction(p0) => {
                data.allowed = p0;
                let p0 = p0.clamp(1e-9, 1.0 - 1e-9);
                data.target = p0;
                data.target_logit = (p0 / (1.0 - p0)).ln();
            }
            Bound::Mean(m) => data.target = m,
        }
        for p in points {
            if !(p.rate_per_s.is_finite() && p.rate_per_s > 0.0) {
                continue;
            }
            match (p.observation, bound) {
                (
                    Observation::Count {
                        samples,
                        beyond,
                        inflation,
                    },
                    Bound::Fraction(_),
                ) if samples > 0.0 => {
                    data.rate.push(p.rate_per_s);
                    data.x.push(p.rate_per_s.ln());
                    data.weight.push(samples);
                    data.inflation.push(inflation.max(1.0));
                    data.fraction.push((beyond / samples).clamp(0.0, 1.0));
                }
                (
                    Observation::Mean {
                        mean,
                        std_error,
                        samples,
                    },
                    Bound::Mean(m),
                ) if mean > 0.0 && m > 0.0 && std_error.is_finite() => {
                    let sd = mean_sd(mean, std_error);
                    data.rate.push(p.rate_per_s);
                    data.x.push(p.rate_per_s.ln());
                    data.log_ratio.push((mean / m).ln());
                    data.variance.push(sd * sd);
                    data.weight.push(samples.max(1.0));
                    data.own_variance.push(sd * sd);
                }
                _ => {}
            }
        }
        data.pool_inflation();
        let everywhere = vec![1.0; data.x.len()];
        data.pool_mean_variance(&everywhere);
        data
    }

    /// A mean clause's counterpart of [`Data::pool_inflation`]: each run's
    /// variance of `ln mean` from the runs' pooled variance per sample,
    /// `Σ kᵢ·nᵢ·vᵢ / Σ kᵢ` over the runs the `kernel` weighs (`vᵢ` a run's
    /// own variance of `ln mean`, `nᵢ` its samples), divided by its own
    /// samples.
    ///
    /// A run's own batch-means standard error is read from the same calls
    /// as its mean: a window that caught a burst reads a high mean *and* a
    /// wide error, one that missed it a low mean and a narrow one, and
    /// weighing each run by its own error pulls the curve down (the
    /// crossing up). On an M/M/4 (100 ms, TTFT mean ≤ 40 ms, 30 s windows)
    /// the runs near the crossing read `sd(ln mean)` from 0.19 to 1.3, the
    /// narrowest the lowest means, and the range held Erlang C's answer in
    /// 65 of 100 seeds, the estimate +3.3% (BENCHMARKS.md). The pool is the
    /// ordinary pooled variance (an arithmetic mean, unbiased, where a
    /// geometric one reads low), local like the fit: the variance per call
    /// of a queue's mean wait grows towards saturation. Its degrees of
    /// freedom, from the runs' scatter about it, go to the range's t.
    fn pool_mean_variance(&mut self, kernel: &[f64]) {
        if self.counts || self.own_variance.is_empty() {
            return;
        }
        let per_sample: Vec<(f64, f64)> = (0..self.x.len())
            .filter(|&i| kernel[i] > 0.0)
            .map(|i| (kernel[i], self.weight[i] * self.own_variance[i]))
            .collect();
        let total: f64 = per_sample.iter().map(|(k, _)| k).sum();
        if total <= 0.0 {
            return;
        }
        let pooled = per_sample.iter().map(|(k, v)| k * v).sum::<f64>() / total;
        for i in 0..self.x.len() {
            self.variance[i] = pooled / self.weight[i];
        }
        let relative: Vec<(f64, f64)> = per_sample.iter().map(|&(k, v)| (k, v / pooled)).collect();
        self.inflation_dof = pool_dof(&relative, 1.0);
    }

    /// Turns each count run's samples into effective samples, with an
    /// inflation that does not depend on the run's own outcome.
    ///
    /// A run's own batch-means inflation is read from the same calls as its
    /// fraction: a run whose tail came in fewer bursts shows both fewer
    /// calls beyond the bound and a smaller inflation, and weighing it by
    /// its own inflation would pull the curve down (the crossing up) —
    /// +2% on an M/M/4 in simulation. With a handful of hits the batches
    /// cannot show the bursts at all. So every run takes the runs' pooled
    /// inflation: the geometric mean of their own, each weighted by its
    /// hits or misses (the fewer, up to [`RELIABLE_HITS`]).
    ///
    /// Known defect (issue 44): quiet runs far below the crossing take the
    /// inflation of saturated runs too, and a search whose only runs with
    /// hits are saturated can fit a slope too shallow through its quiet
    /// runs (BENCHMARKS.md, "Real time, on loopback", try 5). Two remedies
    /// were tried on the tuning shapes and rejected there: pooling only
    /// from the runs at or below each run's rate (the M/M/16 p99 shape's
    /// range held the truth in 59 of 100 seeds), and letting runs without
    /// a hit below every run with one keep an inflation of 1 (82 of 100).
    fn pool_inflation(&mut self) {
        if !self.counts || self.weight.is_empty() {
            return;
        }
        // (reliability, ln inflation) of each run with hits (or misses).
        let shares: Vec<(f64, f64)> = (0..self.weight.len())
            .filter_map(|i| {
                let n = self.weight[i];
                let fewer = (n * self.fraction[i]).min(n * (1.0 - self.fraction[i]));
                let reliability = fewer.min(RELIABLE_HITS);
                (reliability > 0.0).then(|| (reliability, self.inflation[i].max(1.0).ln()))
            })
            .collect();
        let total: f64 = shares.iter().map(|(r, _)| r).sum();
        let mean_log =
            shares.iter().map(|(r, l)| r * l).sum::<f64>() / total.max(f64::MIN_POSITIVE);
        let pooled = if total > 0.0 {
            mean_log.exp().max(1.0)
        } else {
            1.0
        };
        self.inflation_dof = pool_dof(&shares, mean_log);
        for i in 0..self.weight.len() {
            self.inflation[i] = pooled;
            self.weight[i] /= pooled;
        }
    }

    /// Whether the model has its curvature term: a mean always (a queue's
    /// mean wait bends up steeply towards saturation, `ρ/(1 − ρ)`), a
    /// count when [`QUADRATIC`] says.
    fn curved(&self) -> bool {
        QUADRATIC || !self.counts
    }

    /// Whether point `i` was beyond the bound.
    fn beyond(&self, i: usize) -> bool {
        if self.counts {
            self.fraction[i] > self.target
        } else {
            self.log_ratio[i] > 0.0
        }
    }

    fn all_within(&self) -> bool {
        (0..self.x.len()).all(|i| !self.beyond(i))
    }

    fn all_beyond(&self) -> bool {
        (0..self.x.len()).all(|i| self.beyond(i))
    }

    /// `[highest rate within the bound below the lowest beyond it, that
    /// lowest]`, a censored rate counting beyond.
    fn bracket(&self, censored: Option<f64>) -> [Option<f64>; 2] {
        let lowest_beyond = (0..self.x.len())
            .filter(|&i| self.beyond(i))
            .map(|i| self.rate[i])
            .chain(censored)
            .min_by(f64::total_cmp);
        let highest_within = (0..self.x.len())
            .filter(|&i| !self.beyond(i))
            .map(|i| self.rate[i])
            .filter(|&r| lowest_beyond.is_none_or(|b| r < b))
            .max_by(f64::total_cmp);
        [highest_within, lowest_beyond]
    }

    /// Where run `i` stands against the bound by its interval at the
    /// one-sided level of `z` (its effective samples after pooling).
    fn side(&self, i: usize, z: f64) -> Side {
        if self.counts {
            count_side(self.fraction[i], self.weight[i], self.allowed, z)
        } else {
            mean_side(self.log_ratio[i], self.variance[i].sqrt(), z)
        }
    }

    /// The bracket the runs show at the range's confidence, `z` its
    /// two-sided quantile: from below, the highest rate whose run is
    /// confidently within the bound (its interval's upper end below what is
    /// allowed, at the one-sided level); from above, the lowest rate whose
    /// run is confidently beyond it, or a censored rate. A run neither way
    /// is passed over for the next one out, and an end with no such run is
    /// open. Wherever π rises (smoothly or in a jump), a run above the
    /// crossing is beyond the bound and shows confidently within it with
    /// probability at most (1 − c)/2, and less the further it is from the
    /// crossing; so each end errs at about the one-sided level, and the
    /// pair holds the crossing at about the two-sided confidence (runs
    /// close to the crossing on the wrong side add a little to the error).
    fn confident_bracket(&self, censored: Option<f64>, z: f64) -> [Option<f64>; 2] {
        let lowest_beyond = (0..self.x.len())
            .filter(|&i| self.side(i, z) == Side::Beyond)
            .map(|i| self.rate[i])
            .chain(censored)
            .min_by(f64::total_cmp);
        let highest_within = (0..self.x.len())
            .filter(|&i| self.side(i, z) == Side::Within)
            .map(|i| self.rate[i])
            .filter(|&r| lowest_beyond.is_none_or(|b| r < b))
            .max_by(f64::total_cmp);
        [highest_within, lowest_beyond]
    }

    /// Deviance of point `i` at linear predictor `eta` (its contribution to
    /// −2 log-likelihood against a perfect fit).
    fn point_deviance(&self, i: usize, eta: f64) -> f64 {
        if self.counts {
            let p = sigmoid(eta).clamp(1e-300, 1.0 - 1e-16);
            let f = self.fraction[i];
            let term = |obs: f64, fit: f64| {
                if obs > 0.0 {
                    obs * (obs / fit).ln()
                } else {
                    0.0
                }
            };
            2.0 * self.weight[i] * (term(f, p) + term(1.0 - f, 1.0 - p))
        } else {
            (self.log_ratio[i] - eta).powi(2) / self.variance[i]
        }
    }

    /// The linear predictor of point `i` at `theta` with `shape`: logit π
    /// for counts, ln(mean / bound) for means.
    fn eta(&self, i: usize, theta: f64, shape: Shape) -> f64 {
        let base = if self.counts { self.target_logit } else { 0.0 };
        let u = self.x[i] - theta;
        base + shape.slope * u + shape.curvature * u * u
    }

    fn deviance_at(&self, kernel: &[f64], theta: f64, shape: Shape) -> f64 {
        (0..self.x.len())
            .filter(|&i| kernel[i] > 0.0)
            .map(|i| kernel[i] * self.point_deviance(i, self.eta(i, theta, shape)))
            .sum()
    }

    /// Half the deviance's first and second derivatives in the linear
    /// predictor at point `i` (the log-likelihood's, negated).
    fn point_derivatives(&self, i: usize, eta: f64) -> (f64, f64) {
        if self.counts {
            let p = sigmoid(eta);
            let w = self.weight[i];
            (w * (p - self.fraction[i]), w * p * (1.0 - p))
        } else {
            let v = self.variance[i];
            ((eta - self.log_ratio[i]) / v, 1.0 / v)
        }
    }

    /// The best shape at `theta`: slope in `[0, cap]`, curvature
    /// within `±slope / (2·half_width)`, so the curve rises throughout the
    /// kernel's support. Newton's method on the (convex) half deviance in
    /// the two coefficients, then, when a bound binds, along it alone.
    fn best_shape(&self, kernel: &[f64], theta: f64, half_width: f64, cap: f64) -> Shape {
        let used: Vec<usize> = (0..self.x.len()).filter(|&i| kernel[i] > 0.0).collect();
        let curvature_room = if self.curved() {
            0.5 / half_width.max(1e-6)
        } else {
            0.0
        };
        // Newton along a direction `d(u)` from `start`: the best multiple
        // t ≥ 0 of (slope, curvature) = start + t·dir, by bisection on the
        // derivative (the deviance is convex along any line).
        let line = |start: Shape, dir: Shape, t_max: f64| -> Shape {
            let at = |t: f64| Shape {
                slope: start.slope + t * dir.slope,
                curvature: start.curvature + t * dir.curvature,
            };
            // The deviance's first and second derivatives in t.
            let derivatives = |t: f64| -> (f64, f64) {
                let shape = at(t);
                used.iter().fold((0.0, 0.0), |(g, h), &i| {
                    let u = self.x[i] - theta;
                    let z = dir.slope * u + dir.curvature * u * u;
                    let (d1, d2) = self.point_derivatives(i, self.eta(i, theta, shape));
                    (g + kernel[i] * d1 * z, h + kernel[i] * d2 * z * z)
                })
            };
            if derivatives(0.0).0 >= 0.0 {
                return at(0.0);
            }
            if derivatives(t_max).0 <= 0.0 {
                return at(t_max);
            }
            // Newton's method, kept inside the bracket of the derivative's
            // sign change (bisection when a step leaves it).
            let (mut lo, mut hi) = (0.0, t_max);
            let mut t = 1.0f64.clamp(lo, hi);
            for _ in 0..100 {
                let (g, h) = derivatives(t);
                if g < 0.0 {
                    lo = t;
                } else {
                    hi = t;
                }
                let newton = if h > 0.0 { t - g / h } else { f64::NAN };
                let next = if newton > lo && newton < hi {
                    newton
                } else {
                    0.5 * (lo + hi)
                };
                if (next - t).abs() <= 1e-10 * (1.0 + t) || hi - lo <= 1e-12 * (1.0 + t) {
                    t = next;
                    break;
                }
                t = next;
            }
            at(t)
        };
        let zero = Shape::default();
        // The slope alone first: the start, and the answer without curvature.
        let mut shape = line(
            zero,
            Shape {
                slope: 1.0,
                curvature: 0.0,
            },
            cap,
        );
        if curvature_room == 0.0 || shape.slope >= cap {
            return shape;
        }
        for _ in 0..30 {
            // The Newton step in (slope, curvature).
            let (mut g0, mut g1, mut h00, mut h01, mut h11) = (0.0, 0.0, 0.0, 0.0, 0.0);
            for &i in &used {
                let u = self.x[i] - theta;
                let (d1, d2) = self.point_derivatives(i, self.eta(i, theta, shape));
                let k = kernel[i];
                g0 += k * d1 * u;
                g1 += k * d1 * u * u;
                h00 += k * d2 * u * u;
                h01 += k * d2 * u * u * u;
                h11 += k * d2 * u * u * u * u;
            }
            let det = h00 * h11 - h01 * h01;
            if det.abs() < 1e-12 * (h00 * h11).abs().max(1e-300) {
                break;
            }
            let step = Shape {
                slope: -(h11 * g0 - h01 * g1) / det,
                curvature: -(h00 * g1 - h01 * g0) / det,
            };
            let before = self.deviance_at(kernel, theta, shape);
            let mut t = 1.0;
            let mut moved = false;
            for _ in 0..30 {
                let next = clamp_shape(
                    Shape {
                        slope: shape.slope + t * step.slope,
                        curvature: shape.curvature + t * step.curvature,
                    },
                    curvature_room,
                    cap,
                );
                if self.deviance_at(kernel, theta, next) <= before {
                    moved = (next.slope - shape.slope).abs()
                        + (next.curvature - shape.curvature).abs()
                        > 1e-10 * (1.0 + shape.slope.abs());
                    shape = next;
                    break;
                }
                t *= 0.5;
            }
            if !moved {
                break;
            }
        }
        // A bound that binds: the best slope along it.
        let bound = curvature_room * shape.slope;
        if shape.curvature.abs() >= bound * (1.0 - 1e-9) && shape.slope > 0.0 {
            let sign = shape.curvature.signum();
            shape = line(
                zero,
                Shape {
                    slope: 1.0,
                    curvature: sign * curvature_room,
                },
                cap,
            );
        }
        shape
    }

    /// The profile deviance at `theta`.
    fn deviance(&self, kernel: &[f64], theta: f64, half_width: f64) -> f64 {
        self.deviance_capped(kernel, theta, half_width, SLOPE_CAP)
    }

    /// The profile deviance at `theta`, the slope no steeper than `cap`.
    fn deviance_capped(&self, kernel: &[f64], theta: f64, half_width: f64, cap: f64) -> f64 {
        self.deviance_at(
            kernel,
            theta,
            self.best_shape(kernel, theta, half_width, cap),
        )
    }

    fn profile(&self, kernel: &[f64], half_width: f64, lo: f64, hi: f64) -> Profile {
        self.profile_capped(kernel, half_width, (lo, hi), SLOPE_CAP)
    }

    /// The profile deviance scanned over `θ ∈ [lo, hi]`, the slope no
    /// steeper than `cap`, and its refined minimum.
    fn profile_capped(
        &self,
        kernel: &[f64],
        half_width: f64,
        (lo, hi): (f64, f64),
        cap: f64,
    ) -> Profile {
        let thetas: Vec<f64> = (0..SCAN)
            .map(|k| lo + (hi - lo) * k as f64 / (SCAN - 1) as f64)
            .collect();
        let deviances = thetas
            .iter()
            .map(|&t| self.deviance_capped(kernel, t, half_width, cap))
            .collect();
        let mut profile = Profile {
            thetas,
            deviances,
            best: None,
        };
        profile.refine(|t| self.deviance_capped(kernel, t, half_width, cap));
        profile
    }

    /// Tricube weights in `ln λ` around `centre`, wide enough for
    /// [`KERNEL_MIN_RATES`] distinct rates and never narrower than ±ln 1.5;
    /// and the half-width.
    fn kernel(&self, centre: f64) -> (Vec<f64>, f64) {
        let mut distances: Vec<f64> = self.x.iter().map(|x| (x - centre).abs()).collect();
        distances.sort_by(f64::total_cmp);
        distances.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
        let kth = distances
            .get(KERNEL_MIN_RATES - 1)
            .or(distances.last())
            .copied()
            .unwrap_or(0.0);
        let half_width = KERNEL_MIN_HALF_WIDTH.max(kth * 1.25);
        let weights = self
            .x
            .iter()
            .map(|x| {
                let d = ((x - centre).abs() / half_width).min(1.0);
                (1.0 - d.powi(3)).powi(3)
            })
            .collect();
        (weights, half_width)
    }

    /// Pearson χ² / degrees of freedom of the fit, at least 1; 1 when
    /// fewer than 3 degrees of freedom leave it unknowable.
    fn dispersion(&self, kernel: &[f64], theta: f64, shape: Shape) -> (f64, f64) {
        let used: Vec<usize> = (0..self.x.len()).filter(|&i| kernel[i] > 0.0).collect();
        let effective_points: f64 = used.iter().map(|&i| kernel[i]).sum();
        let dof = effective_points - if self.curved() { 3.0 } else { 2.0 };
        if dof < 3.0 {
            return (1.0, f64::INFINITY);
        }
        let pearson: f64 = used
            .iter()
            .map(|&i| {
                let eta = self.eta(i, theta, shape);
                let r2 = if self.counts {
                    let p = sigmoid(eta).clamp(1e-9, 1.0 - 1e-9);
                    self.weight[i] * (self.fraction[i] - p).powi(2) / (p * (1.0 - p))
                } else {
                    (self.log_ratio[i] - eta).powi(2) / self.variance[i]
                };
                kernel[i] * r2
            })
            .sum();
        let dispersion = pearson / dof;
        if dispersion > 1.0 {
            (dispersion, dof)
        } else {
            (1.0, f64::INFINITY)
        }
    }

    /// Pool adjacent violators over the points sorted by rate (weights: the
    /// effective samples, or 1 / variance), then the crossing of the
    /// monotone step function, interpolated in `ln λ` between the blocks on
    /// either side of the bound.
    fn isotonic_crossing(&self) -> Option<f64> {
        let mut order: Vec<usize> = (0..self.x.len()).collect();
        order.sort_by(|&a, &b| self.x[a].total_cmp(&self.x[b]));
        // Blocks: (weighted value sum, weight, x sum weighted, count).
        let mut blocks: Vec<(f64, f64, f64)> = Vec::new();
        for &i in &order {
            let (value, w) = if self.counts {
                (self.fraction[i] - self.target, self.weight[i])
            } else {
                (self.log_ratio[i], 1.0 / self.variance[i])
            };
            if w <= 0.0 {
                continue;
            }
            blocks.push((value * w, w, self.x[i] * w));
            while blocks.len() >= 2 {
                let n = blocks.len();
                let (a, b) = (blocks[n - 2], blocks[n - 1]);
                if a.0 / a.1 <= b.0 / b.1 {
                    break;
                }
                blocks.truncate(n - 2);
                blocks.push((a.0 + b.0, a.1 + b.1, a.2 + b.2));
            }
        }
        let levels: Vec<(f64, f64)> = blocks.iter().map(|b| (b.2 / b.1, b.0 / b.1)).collect();
        let first_beyond = levels.iter().position(|&(_, v)| v > 0.0)?;
        if first_beyond == 0 {
            return None;
        }
        let (x0, v0) = levels[first_beyond - 1];
        let (x1, v1) = levels[first_beyond];
        let t = if v1 > v0 { -v0 / (v1 - v0) } else { 0.5 };
        Some((x0 + t * (x1 - x0)).exp())
    }
}

/// The scanned profile deviance.
struct Profile {
    thetas: Vec<f64>,
    deviances: Vec<f64>,
    /// The refined minimum `(theta, deviance)`.
    best: Option<(f64, f64)>,
}

impl Profile {
    fn best_theta(&self) -> Option<f64> {
        self.best.map(|b| b.0)
    }

    /// The minimum, refined by golden section around the best scan point.
    /// A flat stretch of equal minima (a cliff's bracket) gives its middle.
    fn refine(&mut self, deviance: impl Fn(f64) -> f64) {
        let Some(min) = self
            .deviances
            .iter()
            .copied()
            .filter(|d| d.is_finite())
            .min_by(f64::total_cmp)
        else {
            return;
        };
        let tolerance = 1e-9 * (1.0 + min.abs());
        let flat: Vec<usize> = (0..self.thetas.len())
            .filter(|&k| self.deviances[k] <= min + tolerance)
            .collect();
        let (first, last) = (flat[0], flat[flat.len() - 1]);
        if last > first + 1 {
            let mid = 0.5 * (self.thetas[first] + self.thetas[last]);
            self.best = Some((mid, deviance(mid)));
            return;
        }
        let k = first;
        let mut a = self.thetas[k.saturating_sub(1)];
        let mut b = self.thetas[(k + 1).min(self.thetas.len() - 1)];
        let ratio = 0.618_033_988_749_895;
        for _ in 0..60 {
            let c = b - ratio * (b - a);
            let d = a + ratio * (b - a);
            if deviance(c) <= deviance(d) {
                b = d;
            } else {
                a = c;
            }
        }
        let theta = 0.5 * (a + b);
        let d = deviance(theta);
        self.best = Some(if d <= min {
            (theta, d)
        } else {
            (self.thetas[k], min)
        });
    }

    /// `[low, high]` where the deviance rises `allowed` above the minimum,
    /// each end by bisection between scan points; `None` where the scan
    /// ends first.
    fn interval(&self, allowed: f64, deviance: impl Fn(f64) -> f64) -> [Option<f64>; 2] {
        let Some((theta, min)) = self.best else {
            return [None, None];
        };
        let level = min + allowed;
        let start = self
            .thetas
            .iter()
            .position(|&t| t >= theta)
            .unwrap_or(self.thetas.len() - 1);
        let end = |mut inside: f64, outside: f64| {
            let mut out = outside;
            for _ in 0..50 {
                let mid = 0.5 * (inside + out);
                if deviance(mid) > level {
                    out = mid;
                } else {
                    inside = mid;
                }
            }
            0.5 * (inside + out)
        };
        let high = (start..self.thetas.len())
            .find(|&k| self.deviances[k] > level)
            .map(|k| end(theta.max(self.thetas[k.saturating_sub(1)]), self.thetas[k]));
        let low = (0..start.min(self.thetas.len()))
            .rev()
            .find(|&k| self.deviances[k] > level)
            .map(|k| end(theta.min(self.thetas[k + 1]), self.thetas[k]));
        [low, high]
    }
}

fn sigmoid(eta: f64) -> f64 {
    if eta >= 0.0 {
        1.0 / (1.0 + (-eta).exp())
    } else {
        let e = eta.exp();
        e / (1.0 + e)
    }
}

#[cfg(test)]
mod tests {
    use rand::{RngExt, SeedableRng};

    use super::*;

    type Rng64 = rand::rngs::Xoshiro256PlusPlus;

    /// A sticky two-state chain (stays with probability 0.95, so its
    /// autocorrelation is 0.9^h): the variance parameter of its 0/1
    /// indicator is (1 + 0.9)/(1 − 0.9) = 19 times the binomial variance.
    /// 400 samples in 20 batches of 20 read about half of it; corrected by
    /// the 5-batch estimate, about all of it.
    #[test]
    fn the_correction_recovers_what_short_batches_miss() {
        let mut rng = Rng64::seed_from_u64(11);
        let (mut fine_sum, mut corrected_sum, mut runs) = (0.0, 0.0, 0.0);
        for _ in 0..400 {
            let mut state = rng.random::<f64>() < 0.5;
            let (mut samples, mut beyond) = ([0u64; 20], [0u64; 20]);
            for i in 0..400 {
                if rng.random::<f64>() >= 0.95 {
                    state = !state;
                }
                samples[i / 20] += 1;
                beyond[i / 20] += u64::from(state);
            }
            let hits: Vec<f64> = beyond.iter().map(|&b| b as f64).collect();
            let (coarse_samples, coarse_hits) = merge_into(&samples, &hits, COARSE_BATCHES);
            let (Some(fine), Some(coarse)) = (
                batch_means_ratio(&samples, &hits),
                batch_means_ratio(&coarse_samples, &coarse_hits),
            ) else {
                continue;
            };
            fine_sum += fine;
            corrected_sum += corrected_batch_variance(fine, 20, coarse);
            runs += 1.0;
        }
        let (fine, corrected) = (fine_sum / runs, corrected_sum / runs);
        assert!(fine < 0.65 * 19.0, "fine batches read {fine}");
        assert!(
            (corrected / 19.0 - 1.0).abs() < 0.2,
            "corrected {corrected}"
        );
        // The count observation takes the larger.
        let Some(Observation::Count { inflation, .. }) = count_observation(
            &[20; 20],
            &[
                0, 0, 20, 20, 20, 0, 0, 0, 20, 20, 0, 0, 0, 0, 20, 20, 20, 20, 0, 0,
            ],
        ) else {
            panic!("an observation");
        };
        let plain = batch_means_ratio(
            &[20; 20],
            &[
                0., 0., 20., 20., 20., 0., 0., 0., 20., 20., 0., 0., 0., 0., 20., 20., 20., 20.,
                0., 0.,
            ],
        )
        .unwrap();
        assert!(inflation >= plain, "{inflation} {plain}");
    }

    fn count(rate: f64, samples: f64, beyond: f64) -> Point {
        Point {
            rate_per_s: rate,
            observation: Observation::Count {
                samples,
                beyond,
                inflation: 1.0,
            },
        }
    }

    /// The true curve of the synthetic tests: logistic in ln λ, crossing
    /// 10% at `truth`.
    fn true_pi(rate: f64, truth: f64, slope: f64) -> f64 {
        sigmoid((0.1f64 / 0.9).ln() + slope * (rate / truth).ln())
    }

    fn binomial(rng: &mut Rng64, n: u64, p: f64) -> f64 {
        (0..n).filter(|_| rng.random::<f64>() < p).count() as f64
    }

    #[test]
    fn exact_data_recovers_the_crossing() {
        let truth = 5.92;
        let points: Vec<Point> = [4.0, 5.0, 5.5, 6.0, 6.5, 8.0]
            .iter()
            .map(|&r| count(r, 10_000.0, 10_000.0 * true_pi(r, truth, 4.6)))
            .collect();
        let c = crossing(&points, &[], Bound::Fraction(0.1), 0.9);
        assert_eq!(c.method, Method::Fit);
        let e = c.estimate_per_s.unwrap();
        assert!((e - truth).abs() / truth < 0.002, "{c:?}");
        let [lo, hi] = c.range_per_s;
        assert!(lo.unwrap() < truth && hi.unwrap() > truth, "{c:?}");
        assert!((c.slope - 4.6).abs() < 0.05, "{c:?}");
        assert!(
            (c.isotonic_per_s.unwrap() - truth).abs() / truth < 0.05,
            "{c:?}"
        );
        assert_eq!(c.bracket_per_s, [Some(5.5), Some(6.0)]);
    }

    #[test]
    fn the_range_narrows_with_samples() {
        let truth = 10.0;
        let width = |n: f64| {
            let points: Vec<Point> = [8.0, 9.5, 10.5, 12.0]
                .iter()
                .map(|&r| count(r, n, (n * true_pi(r, truth, 5.0)).round()))
                .collect();
            crossing(&points, &[], Bound::Fraction(0.1), 0.9)
                .half_width()
                .unwrap()
        };
        let (few, many) = (width(500.0), width(20_000.0));
        assert!(many < few / 4.0, "{few} {many}");
    }

    #[test]
    fn inflation_widens_the_range() {
        let truth = 10.0;
        let at = |inflation: f64| {
            let points: Vec<Point> = [8.0, 9.5, 10.5, 12.0]
                .iter()
                .map(|&r| Point {
                    rate_per_s: r,
                    observation: Observation::Count {
                        samples: 4000.0,
                        beyond: (4000.0 * true_pi(r, truth, 5.0)).round(),
                        inflation,
                    },
                })
                .collect();
            crossing(&points, &[], Bound::Fraction(0.1), 0.9)
                .half_width()
                .unwrap()
        };
        let ratio = at(9.0) / at(1.0);
        assert!((2.5..3.5).contains(&ratio), "{ratio}");
    }

    /// Binomial data from the model itself at 90%: the range holds the truth
    /// in about 90% of 300 replications (binomial sd of the rate: 1.7%).
    #[test]
    fn the_range_covers_the_truth_at_its_confidence() {
        let mut rng = Rng64::seed_from_u64(7);
        let truth = 23.7;
        let mut covered = 0;
        let reps = 300;
        for _ in 0..reps {
            let points: Vec<Point> = [18.0, 21.0, 22.5, 24.0, 25.5, 28.0]
                .iter()
                .map(|&r| count(r, 600.0, binomial(&mut rng, 600, true_pi(r, truth, 4.6))))
                .collect();
            let c = crossing(&points, &[], Bound::Fraction(0.1), 0.9);
            if let [Some(lo), Some(hi)] = c.range_per_s
                && lo <= truth
                && truth <= hi
            {
                covered += 1;
            }
        }
        let rate = f64::from(covered) / f64::from(reps);
        assert!((0.85..=0.96).contains(&rate), "coverage {rate}");
    }

    #[test]
    fn a_cliff_falls_back_to_the_bracket() {
        let points = [
            count(8.0, 2000.0, 10.0),
            count(9.0, 2000.0, 20.0),
            count(10.0, 2000.0, 1900.0),
            count(12.0, 2000.0, 2000.0),
        ];
        let c = crossing(&points, &[], Bound::Fraction(0.1), 0.9);
        assert_eq!(c.method, Method::Bracket, "{c:?}");
        assert_eq!(c.range_per_s, [Some(9.0), Some(10.0)]);
        let e = c.estimate_per_s.unwrap();
        assert!(e > 9.0 && e < 10.0);
    }

    /// `n` samples in bursts of `burst` consecutive ones, each burst all
    /// beyond the bound with probability `p`: a correlated queue's tail,
    /// whose batch-means inflation is `burst`.
    fn bursts(rng: &mut Rng64, n: u64, burst: u64, p: f64) -> f64 {
        ((0..n / burst).filter(|_| rng.random::<f64>() < p).count() as u64 * burst) as f64
    }

    /// The rule before the likelihood-ratio test: a fitted rise of more
    /// than `CLIFF_LOGITS` across the runs either side was a cliff.
    fn steep_across_the_bracket(c: &Crossing) -> bool {
        c.slope >= SLOPE_CAP * 0.5
            || matches!(c.bracket_per_s, [Some(a), Some(b)] if c.slope * (b / a).ln() > CLIFF_LOGITS)
    }

    /// A smooth, steep tail crossing at 30.8 seen by short runs of a
    /// bursty queue (the inflation known): neighbouring runs often differ
    /// by more than a smooth curve allows by their point estimates, and
    /// the fitted rise across the runs either side exceeds 6 logits in a
    /// fair share of replications (the rule before the likelihood-ratio
    /// test called each a cliff). The runs' noise allows it: at 25 logits
    /// per e-fold (100 calls in bursts of 16) a cliff is called in at most
    /// 3%; at 40 (240 calls in bursts of 4), as steep as the smooth curve
    /// the test allows across the gap 28.6–33, at most its 5% level.
    #[test]
    fn noise_between_neighbouring_runs_is_no_cliff() {
        let mut rng = Rng64::seed_from_u64(44);
        let truth = 30.8;
        let reps = 400;
        for (slope, calls, burst, at_most_pct) in [(25.0, 100, 16, 3), (40.0, 240, 4, 5)] {
            let (mut called, mut steep) = (0, 0);
            for _ in 0..reps {
                let points: Vec<Point> = [22.0, 26.5, 28.6, 33.0, 36.0]
                    .iter()
                    .map(|&r| Point {
                        rate_per_s: r,
                        observation: Observation::Count {
                            samples: calls as f64,
                            beyond: bursts(&mut rng, calls, burst, true_pi(r, truth, slope)),
                            inflation: burst as f64,
                        },
                    })
                    .collect();
                let c = crossing(&points, &[], Bound::Fraction(0.1), 0.9);
                called += usize::from(c.method == Method::Bracket);
                steep += usize::from(steep_across_the_bracket(&c));
            }
            eprintln!(
                "slope {slope}: cliffs called {called}/{reps}; steep across the bracket {steep}/{reps}"
            );
            assert!(
                called * 100 <= reps * at_most_pct,
                "{called}/{reps} cliffs called"
            );
            assert!(
                steep * 100 >= reps * 10,
                "{steep}/{reps}: the old rule is not reached"
            );
        }
    }

    /// A real step, near 0 below and near 1 above with plenty of samples,
    /// is a cliff; a neighbour within the bound by its point estimate but
    /// not by its interval widens the bracket to the next run out, and with
    /// none further out that end is open.
    #[test]
    fn a_cliffs_bracket_widens_past_an_unsure_neighbour() {
        let points = [
            count(8.0, 2000.0, 2.0),
            // 8% of 200: within by its point, not by its interval.
            count(9.0, 200.0, 16.0),
            count(10.0, 2000.0, 1990.0),
            count(12.0, 2000.0, 2000.0),
        ];
        let c = crossing(&points, &[], Bound::Fraction(0.1), 0.9);
        assert_eq!(c.method, Method::Bracket, "{c:?}");
        assert_eq!(c.bracket_per_s, [Some(9.0), Some(10.0)]);
        assert_eq!(c.range_per_s, [Some(8.0), Some(10.0)]);
        let e = c.estimate_per_s.unwrap();
        assert!((9.0..10.0).contains(&e), "{c:?}");
        let c = crossing(&points[1..], &[], Bound::Fraction(0.1), 0.9);
        assert_eq!(c.method, Method::Bracket, "{c:?}");
        assert_eq!(c.range_per_s, [None, Some(10.0)]);
        // Beyond by its point, not by its interval: the next run above.
        let points = [
            count(8.0, 2000.0, 2.0),
            count(9.0, 2000.0, 4.0),
            // 13% of 100.
            count(10.0, 100.0, 13.0),
            count(11.0, 2000.0, 1995.0),
            count(12.0, 2000.0, 2000.0),
        ];
        let c = crossing(&points, &[], Bound::Fraction(0.1), 0.9);
        assert_eq!(c.method, Method::Bracket, "{c:?}");
        assert_eq!(c.range_per_s, [Some(9.0), Some(11.0)], "{c:?}");
    }

    #[test]
    fn censored_runs_cap_the_range_without_bending_the_fit() {
        let truth = 10.0;
        let points: Vec<Point> = [7.0, 9.0, 10.5, 11.0]
            .iter()
            .map(|&r| count(r, 800.0, (800.0 * true_pi(r, truth, 5.0)).round()))
            .collect();
        let open = crossing(&points, &[], Bound::Fraction(0.1), 0.9);
        let capped = crossing(&points, &[10.1], Bound::Fraction(0.1), 0.9);
        assert_eq!(open.estimate_per_s, capped.estimate_per_s);
        assert!(open.range_per_s[1].unwrap() > 10.1, "{open:?}");
        assert_eq!(capped.range_per_s[1], Some(10.1));
        // Below every run that measured: the censored rate is the bracket's top.
        let low: Vec<Point> = [7.0, 8.0].iter().map(|&r| count(r, 800.0, 8.0)).collect();
        let c = crossing(&low, &[9.0], Bound::Fraction(0.1), 0.9);
        assert_eq!(c.bracket_per_s, [Some(8.0), Some(9.0)]);
        assert!(c.range_per_s[1].unwrap() <= 9.0);
        // A run within the bound above a run that could not keep up: the
        // fit would cross above the censored rate; the runs show the
        // bracket below it, no more.
        let mixed: Vec<Point> = [7.0, 8.0, 9.5]
            .iter()
            .map(|&r| count(r, 800.0, 8.0))
            .collect();
        let c = crossing(&mixed, &[9.0], Bound::Fraction(0.5), 0.9);
        assert_eq!(c.method, Method::Bracket, "{c:?}");
        assert_eq!(c.range_per_s, [Some(8.0), Some(9.0)]);
        assert!(c.estimate_per_s.is_some_and(|e| 8.0 < e && e < 9.0));
        // Only a censored run, nothing to fit: the range's top is the cap.
        let only = crossing(&[], &[11.0], Bound::Fraction(0.1), 0.9);
        assert_eq!(only.range_per_s, [None, Some(11.0)]);
        assert_eq!(only.estimate_per_s, None);
    }

    /// The same counts, their pooled inflation the same (4), once with the
    /// runs' own inflations agreeing and once scattered around it: the
    /// scattered ones estimate it on fewer degrees of freedom, and the
    /// range is drawn with Student's t on them (wider), the estimate
    /// unchanged. Agreeing inflations estimate it on infinitely many,
    /// which is the normal's range.
    #[test]
    fn an_inflation_the_runs_disagree_on_widens_the_range_by_student_t() {
        let truth = 10.0;
        let rates = [8.0, 9.0, 9.5, 10.0, 10.5, 11.0, 12.0];
        let points = |inflations: &[f64]| -> Vec<Point> {
            rates
                .iter()
                .zip(inflations)
                .map(|(&r, &inflation)| Point {
                    rate_per_s: r,
                    observation: Observation::Count {
                        samples: 10_000.0,
                        beyond: (10_000.0 * true_pi(r, truth, 8.0)).round(),
                        inflation,
                    },
                })
                .collect()
        };
        let agreeing = points(&[4.0; 7]);
        // Geometric mean 4 (every run has its 100 reliable hits, so they
        // weigh alike): 4·e^{±1}, 4·e^{±0.5}, 4.
        let e = std::f64::consts::E;
        let scattered = points(&[
            4.0 * e,
            4.0 / e,
            4.0 * e.sqrt(),
            4.0,
            4.0 / e.sqrt(),
            4.0 * e,
            4.0 / e,
        ]);
        let a = crossing(&agreeing, &[], Bound::Fraction(0.1), 0.9);
        let s = crossing(&scattered, &[], Bound::Fraction(0.1), 0.9);
        let width = |c: &Crossing| (c.range_per_s[1].unwrap() / c.range_per_s[0].unwrap()).ln();
        assert_eq!(a.method, Method::Fit, "{a:?}");
        assert!(
            (a.estimate_per_s.unwrap() / truth - 1.0).abs() < 0.02,
            "{a:?}"
        );
        // The scatter of ±1 and ±0.5 in ln over seven runs: about 20
        // degrees of freedom, t 1.72 against 1.64.
        assert!(width(&s) > 1.03 * width(&a), "{a:?}\n{s:?}");
        let data = Data::new(&agreeing, Bound::Fraction(0.1));
        assert!(data.inflation_dof > 1e6, "{}", data.inflation_dof);
        let data = Data::new(&scattered, Bound::Fraction(0.1));
        assert!(
            data.inflation_dof > 3.0 && data.inflation_dof < 60.0,
            "{}",
            data.inflation_dof
        );
        // One run with hits: its corrected inflation leans on 5 batches.
        let one = [count(8.0, 2000.0, 0.0), count(12.0, 2000.0, 600.0)];
        assert_eq!(Data::new(&one, Bound::Fraction(0.1)).inflation_dof, 4.0);
    }

    /// Windows that caught a burst read a high mean and a wide error, the
    /// others a low mean and a narrow one. Here every rate has one of each,
    /// `ln mean` 0.3 above and below the truth (ln mean = ln 40 + 6·ln(λ/10)),
    /// with errors of 0.6 and 0.15: weighed by their own errors, the quiet
    /// runs would count 16 times as much and put the crossing about +5%
    /// high; the pooled variance weighs them alike.
    #[test]
    fn a_mean_clause_pools_its_runs_variance_so_quiet_windows_do_not_outweigh_bursty_ones() {
        let truth = 10.0_f64;
        let mut points = vec![];
        for &r in &[8.5, 9.0, 9.5, 10.0, 10.5, 11.0, 11.5] {
            let level = 40.0 * (r / truth).powi(6);
            for (shift, sd) in [(0.3f64, 0.6), (-0.3, 0.15)] {
                let mean = level * shift.exp();
                points.push(Point {
                    rate_per_s: r,
                    observation: Observation::Mean {
                        mean,
                        std_error: sd * mean,
                        samples: 300.0,
                    },
                });
            }
        }
        let c = crossing(&points, &[], Bound::Mean(40.0), 0.9);
        assert_eq!(c.method, Method::Fit, "{c:?}");
        let estimate = c.estimate_per_s.unwrap();
        assert!((estimate / truth - 1.0).abs() < 0.015, "{c:?}");
        let [low, high] = c.range_per_s;
        assert!(low.unwrap() < truth && truth < high.unwrap(), "{c:?}");
    }

    #[test]
    fn all_within_the_bound_gives_only_a_lower_end() {
        let points = [count(4.0, 2000.0, 0.0), count(8.0, 2000.0, 20.0)];
        let c = crossing(&points, &[], Bound::Fraction(0.1), 0.9);
        assert_eq!(c.estimate_per_s, None, "{c:?}");
        assert_eq!(c.range_per_s[1], None);
        assert!(c.range_per_s[0].unwrap() >= 8.0, "{c:?}");
        // Every run beyond the bound: an upper end, no lower one.
        let points = [count(4.0, 2000.0, 1500.0), count(8.0, 2000.0, 2000.0)];
        let c = crossing(&points, &[], Bound::Fraction(0.1), 0.9);
        assert_eq!(c.range_per_s[0], None, "{c:?}");
        assert!(c.range_per_s[1].unwrap() <= 4.0, "{c:?}");
    }

    #[test]
    fn a_mean_clause_crosses_on_the_log_scale() {
        // mean = 100 ms · (λ / 5)^2: crosses 200 ms at 5·√2.
        let truth = 5.0 * 2f64.sqrt();
        let points: Vec<Point> = [3.0, 5.0, 6.0, 7.5, 9.0]
            .iter()
            .map(|&r| Point {
                rate_per_s: r,
                observation: Observation::Mean {
                    mean: 100.0 * (r / 5.0f64).powi(2),
                    std_error: 2.0,
                    samples: 400.0,
                },
            })
            .collect();
        let c = crossing(&points, &[], Bound::Mean(200.0), 0.9);
        assert_eq!(c.method, Method::Fit);
        assert!(
            (c.estimate_per_s.unwrap() - truth).abs() / truth < 0.01,
            "{c:?}"
        );
        let [lo, hi] = c.range_per_s;
        assert!(lo.unwrap() <= truth && hi.unwrap() >= truth, "{c:?}");
    }

    #[test]
    fn no_points_is_no_crossing() {
        let c = crossing(&[], &[], Bound::Fraction(0.1), 0.9);
        assert_eq!(c.method, Method::None);
        assert_eq!(c.range_per_s, [None, None]);
    }
}
