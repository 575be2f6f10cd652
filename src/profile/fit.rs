//! Fitting the language's length distributions and an arrival process to
//! observed traffic (pure): the numbers behind `capcard profile`.
//!
//! # Lengths
//!
//! Each parametric family is fitted by maximum likelihood — lognormal (mean
//! and standard deviation of the logs), gamma (Minka's approximation refined
//! by Newton steps on the shape), normal, exponential — and judged by the
//! Kolmogorov–Smirnov statistic `D` against the data. The family with the
//! smallest `D` wins if `D` is below the 1% critical value `1.63 / √n`
//! (conservative here, since the parameters were fitted to the same data),
//! except that the one-parameter exponential is kept when it passes and no
//! two-parameter family beats it by a quarter of that critical value;
//! otherwise no family describes the data and an `empirical` table of
//! quantiles is used. The observed minimum and maximum become `min=` and
//! `max=` clamps, so a fitted tail never produces lengths the traffic never
//! had.
//!
//! # Arrivals
//!
//! From sorted arrival timestamps: the mean rate over the span, the busiest
//! 1-minute and 10-second windows, and the coefficient of variation (CV) of
//! the gaps. A Poisson process has CV 1; the recommendation is `poisson`
//! when the CV is within 0.8–1.25, else `gamma cv=` with the measured CV
//! (bursty above 1, regular below).

use serde::{Deserialize, Serialize};

use crate::config::DistKind;

/// Most distinct values an `empirical` fit keeps exactly (more are binned).
pub const EMPIRICAL_POINTS: usize = 20;
/// KS critical value coefficient at the 1% level: `D_crit = 1.63 / √n`.
pub const KS_CRITICAL_1PCT: f64 = 1.63;

/// The families a length can be fitted with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    LogNormal,
    Gamma,
    Normal,
    Exponential,
    Empirical,
}

impl Family {
    /// The family's name in the language (`lognormal`, …).
    pub fn label(self) -> &'static str {
        match self {
            Family::LogNormal => "lognormal",
            Family::Gamma => "gamma",
            Family::Normal => "normal",
            Family::Exponential => "exponential",
            Family::Empirical => "empirical",
        }
    }
}

/// A fitted length distribution and how well it fits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LengthFit {
    pub family: Family,
    /// The distribution in the language's terms.
    pub kind: DistKind,
    /// KS statistic of the chosen family (of the best parametric one when
    /// the empirical table was chosen).
    pub ks_statistic: f64,
    /// Whether the best parametric family passed the KS test.
    pub accepted: bool,
    pub n: usize,
    pub mean: f64,
    pub p50: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
}

/// Fit `values` (token counts); `None` with fewer than 2 distinct positive values.
pub fn fit_lengths(values: &[f64]) -> Option<LengthFit> {
    let mut xs: Vec<f64> = values
        .iter()
        .copied()
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    if n < 2 || xs[0] == xs[n - 1] {
        return None;
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    let quantile = |q: f64| xs[(((q * n as f64).ceil() as usize).max(1) - 1).min(n - 1)];
    let candidates = [
        (Family::LogNormal, fit_lognormal(&xs)),
        (Family::Gamma, fit_gamma(&xs)),
        (Family::Normal, fit_normal(&xs)),
        (Family::Exponential, Some(DistKind::Exponential { mean })),
    ];
    let fitted: Vec<(Family, DistKind, f64)> = candidates
        .into_iter()
        .filter_map(|(f, k)| {
            let k = k?;
            let d = ks_statistic(&xs, |x| cdf(&k, x));
            d.is_finite().then_some((f, k, d))
        })
        .collect();
    let critical = KS_CRITICAL_1PCT / (n as f64).sqrt();
    let best = fitted.iter().min_by(|a, b| a.2.total_cmp(&b.2))?.clone();
    // The exponential is the gamma of shape 1: a fitted shape near 1 always
    // fits a hair better, so the one-parameter family wins unless the
    // others beat it by a quarter of the critical value.
    let (family, kind, d) = match fitted.iter().find(|f| f.0 == Family::Exponential) {
        Some(exp) if exp.2 <= critical && exp.2 <= best.2 + 0.25 * critical => exp.clone(),
        _ => best,
    };
    let accepted = d <= critical;
    let (family, kind) = if accepted {
        (family, kind)
    } else {
        (Family::Empirical, empirical(&xs))
    };
    Some(LengthFit {
        family,
        kind,
        ks_statistic: d,
        accepted,
        n,
        mean,
        p50: quantile(0.5),
        p99: quantile(0.99),
        min: xs[0],
        max: xs[n - 1],
    })
}

fn fit_lognormal(xs: &[f64]) -> Option<DistKind> {
    let n = xs.len() as f64;
    let mu = xs.iter().map(|x| x.ln()).sum::<f64>() / n;
    let var = xs.iter().map(|x| (x.ln() - mu).powi(2)).sum::<f64>() / n;
    (var > 0.0).then(|| DistKind::LogNormal {
        median: mu.exp(),
        sigma: var.sqrt(),
    })
}

fn fit_normal(xs: &[f64]) -> Option<DistKind> {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (var > 0.0).then(|| DistKind::Normal {
        mean,
        stddev: var.sqrt(),
    })
}

/// Gamma by maximum likelihood: Minka's closed-form start for the shape
/// `k` from `s = ln(mean) − mean(ln x)`, then Newton steps on
/// `ln k − ψ(k) = s`; the scale is `mean / k`.
fn fit_gamma(xs: &[f64]) -> Option<DistKind> {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let s = mean.ln() - xs.iter().map(|x| x.ln()).sum::<f64>() / n;
    if s <= 0.0 || !s.is_finite() {
        return None;
    }
    let mut k = (3.0 - s + ((s - 3.0).powi(2) + 24.0 * s).sqrt()) / (12.0 * s);
    for _ in 0..20 {
        let f = k.ln() - digamma(k) - s;
        let df = 1.0 / k - trigamma(k);
        let next = k - f / df;
        if !next.is_finite() || next <= 0.0 {
            break;
        }
        let done = (next - k).abs() < 1e-10 * k;
        k = next;
        if done {
            break;
        }
    }
    Some(DistKind::Gamma {
        shape: k,
        scale: mean / k,
    })
}

/// An empirical table of sorted `xs`. Up to `EMPIRICAL_POINTS` distinct
/// values — counts such as turns — are kept exactly, weighted by
/// their frequency. Otherwise each point is the median of a quantile bin
/// weighted by the bin's probability: 5% bins up to the 95th percentile,
/// then 95–99%, 99–99.9% and the last 0.1%, so the tail a capacity test
/// cares about survives the table.
fn empirical(xs: &[f64]) -> DistKind {
    let n = xs.len();
    // Token counts are whole; times are not, and keep their fractions.
    let whole = xs.iter().all(|x| x.fract() == 0.0);
    let value = |x: f64| if whole { x.round() } else { x };
    let mut distinct: Vec<(f64, f64)> = Vec::new();
    for v in xs.iter().map(|x| value(*x)) {
        match distinct.last_mut() {
            Some(last) if last.0 == v => last.1 += 1.0,
            _ => distinct.push((v, 1.0)),
        }
        if distinct.len() > EMPIRICAL_POINTS {
            break;
        }
    }
    if distinct.len() <= EMPIRICAL_POINTS {
        return DistKind::Empirical { points: distinct };
    }
    let mut edges: Vec<f64> = (0..=19).map(|i| f64::from(i) * 0.05).collect();
    edges.extend([0.99, 0.999, 1.0]);
    let at = |q: f64| xs[((q * n as f64) as usize).min(n - 1)];
    let points = edges
        .windows(2)
        .map(|w| {
            let bin = w[1] - w[0];
            (
                value(at((w[0] + w[1]) / 2.0)),
                (bin * 1000.0).round() / 1000.0,
            )
        })
        .collect();
    DistKind::Empirical { points }
}

/// The KS statistic `sup |F_n(x) − F(x)|` of sorted `xs` against `cdf`.
pub fn ks_statistic(xs: &[f64], cdf: impl Fn(f64) -> Option<f64>) -> f64 {
    let n = xs.len() as f64;
    let mut d: f64 = 0.0;
    for (i, &x) in xs.iter().enumerate() {
        let Some(f) = cdf(x) else {
            return f64::INFINITY;
        };
        d = d.max((i as f64 + 1.0) / n - f).max(f - i as f64 / n);
    }
    d
}

/// The CDF `P(X ≤ x)` of a distribution at `x`, before any `min`/`max`
/// clamp: the law [`crate::dist::sample`] draws from. `fixed` is
/// a step at its value, `uniform` is continuous on `[min, max]` (count
/// draws round it, like every other kind), and `empirical` is the step CDF
/// of its weighted points, with weights read as the sampler reads them.
/// `None` only for an empirical table with no points.
pub fn cdf(kind: &DistKind, x: f64) -> Option<f64> {
    Some(match *kind {
        DistKind::Fixed { value } => {
            if x >= value {
                1.0
            } else {
                0.0
            }
        }
        DistKind::Uniform { min, max } => {
            let (lo, hi) = if min <= max { (min, max) } else { (max, min) };
            if x < lo {
                0.0
            } else if x >= hi {
                1.0
            } else {
                // lo ≤ x < hi, so hi > lo: no division by zero.
                (x - lo) / (hi - lo)
            }
        }
        DistKind::Empirical { ref points } => return empirical_cdf(points, x),
        DistKind::LogNormal { median, sigma } if x > 0.0 => {
            normal_cdf((x.ln() - median.ln()) / sigma)
        }
        DistKind::LogNormal { .. } => 0.0,
        DistKind::Normal { mean, stddev } => normal_cdf((x - mean) / stddev),
        DistKind::Exponential { mean } => {
            if x <= 0.0 {
                0.0
            } else {
                1.0 - (-x / mean).exp()
            }
        }
        DistKind::Gamma { shape, scale } => {
            if x <= 0.0 {
                0.0
            } else {
                regularized_gamma_p(shape, x / scale)
            }
        }
    })
}

/// The step CDF of `(value, weight)` points as the sampler draws them:
/// weights that are negative or not finite count as zero, and with no
/// positive weight every point is equally likely.
fn empirical_cdf(points: &[(f64, f64)], x: f64) -> Option<f64> {
    if points.is_empty() {
        return None;
    }
    let usable = |w: f64| if w.is_finite() && w > 0.0 { w } else { 0.0 };
    let total: f64 = points.iter().map(|(_, w)| usable(*w)).sum();
    let weight = |w: f64| if total > 0.0 { usable(w) } else { 1.0 };
    let total = if total > 0.0 {
        total
    } else {
        points.len() as f64
    };
    let below: f64 = points
        .iter()
        .filter(|(v, _)| *v <= x)
        .map(|(_, w)| weight(*w))
        .sum();
    Some((below / total).min(1.0))
}

/// What the arrivals of a log look like.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArrivalFit {
    pub n: usize,
    pub mean_rps: f64,
    pub peak_rps_1m: f64,
    pub peak_rps_10s: f64,
    /// Coefficient of variation of the gaps between arrivals.
    pub cv: f64,
    /// `"poisson"` or `"gamma cv=X"`.
    pub process: String,
}

/// Fit arrivals from timestamps in seconds (any order); `None` with fewer
/// than 3 arrivals or no time between them.
pub fn fit_arrivals(timestamps_s: &[f64]) -> Option<ArrivalFit> {
    let mut ts: Vec<f64> = timestamps_s
        .iter()
        .copied()
        .filter(|t| t.is_finite())
        .collect();
    ts.sort_by(f64::total_cmp);
    let n = ts.len();
    if n < 3 {
        return None;
    }
    let span = ts[n - 1] - ts[0];
    if span <= 0.0 {
        return None;
    }
    let gaps: Vec<f64> = ts.windows(2).map(|w| w[1] - w[0]).collect();
    let gap_mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let gap_var = gaps.iter().map(|g| (g - gap_mean).powi(2)).sum::<f64>() / gaps.len() as f64;
    let cv = if gap_mean > 0.0 {
        gap_var.sqrt() / gap_mean
    } else {
        0.0
    };
    let process = recommended_process(cv);
    Some(ArrivalFit {
        n,
        mean_rps: (n - 1) as f64 / span,
        peak_rps_1m: peak_rate(&ts, 60.0),
        peak_rps_10s: peak_rate(&ts, 10.0),
        cv,
        process,
    })
}

/// The arrival process for a gap CV: `poisson` within 0.8–1.25, else
/// `gamma cv=` with the CV to two decimals.
pub fn recommended_process(cv: f64) -> String {
    if (0.8..=1.25).contains(&cv) {
        "poisson".to_string()
    } else {
        format!("gamma cv={}", (cv * 100.0).round() / 100.0)
    }
}

/// Most arrivals in any window of `window_s` starting at an arrival, per
/// second; the span itself when the log is shorter than the window.
fn peak_rate(ts: &[f64], window_s: f64) -> f64 {
    let span = ts[ts.len() - 1] - ts[0];
    let window = window_s.min(span.max(f64::MIN_POSITIVE));
    let mut best = 0;
    let mut j = 0;
    for i in 0..ts.len() {
        while j < ts.len() && ts[j] < ts[i] + window {
            j += 1;
        }
        best = best.max(j - i);
    }
    best as f64 / window
}

// ------------------------------------------------------- special functions

/// Φ(z), via the complementary error function (Numerical-Recipes-style
/// Chebyshev fit, relative error < 1.2e-7).
pub fn normal_cdf(z: f64) -> f64 {
    0.5 * erfc(-z / std::f64::consts::SQRT_2)
}

fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let r = t
        * (-z * z - 1.265_512_23
            + t * (1.000_023_68
                + t * (0.374_091_96
                    + t * (0.096_784_18
                        + t * (-0.186_288_06
                            + t * (0.278_868_07
                                + t * (-1.135_203_98
                                    + t * (1.488_515_87
                                        + t * (-0.822_152_23 + t * 0.170_872_77)))))))))
            .exp();
    if x >= 0.0 { r } else { 2.0 - r }
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms).
pub fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The regularized lower incomplete gamma P(a, x): its series below
/// `a + 1`, the continued fraction of Q above.
pub fn regularized_gamma_p(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    let ln_front = a * x.ln() - x - ln_gamma(a);
    if x < a + 1.0 {
        let (mut sum, mut term, mut ap) = (1.0 / a, 1.0 / a, a);
        for _ in 0..500 {
            ap += 1.0;
            term *= x / ap;
            sum += term;
            if term.abs() < sum.abs() * 1e-15 {
                break;
            }
        }
        (sum.ln() + ln_front).exp().min(1.0)
    } else {
        // Lentz's method for the continued fraction of Q(a, x).
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..500 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let delta = d * c;
            h *= delta;
            if (delta - 1.0).abs() < 1e-15 {
                break;
            }
        }
        (1.0 - (ln_front.exp() * h)).clamp(0.0, 1.0)
    }
}

/// ψ(x) for x > 0: recurrence up to x ≥ 10, then the asymptotic series.
fn digamma(mut x: f64) -> f64 {
    let mut acc = 0.0;
    while x < 10.0 {
        acc -= 1.0 / x;
        x += 1.0;
    }
    let f = 1.0 / (x * x);
    acc + x.ln() - 0.5 / x - f * (1.0 / 12.0 - f * (1.0 / 120.0 - f * (1.0 / 252.0 - f / 240.0)))
}

/// ψ′(x) for x > 0: recurrence up to x ≥ 10, then the asymptotic series.
fn trigamma(mut x: f64) -> f64 {
    let mut acc = 0.0;
    while x < 10.0 {
        acc += 1.0 / (x * x);
        x += 1.0;
    }
    let f = 1.0 / (x * x);
    acc + 1.0 / x + f / 2.0 + f / x * (1.0 / 6.0 - f * (1.0 / 30.0 - f / 42.0))
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_distr::{Distribution, Exp, Gamma, LogNormal, Normal};

    use super::*;

    type Rng = rand::rngs::Xoshiro256PlusPlus;
    const N: usize = 5_000;

    fn draw(d: impl Distribution<f64>, seed: u64) -> Vec<f64> {
        let mut rng = Rng::seed_from_u64(seed);
        (0..N).map(|_| d.sample(&mut rng)).collect()
    }

    fn within(got: f64, want: f64, tol: f64) -> bool {
        (got - want).abs() <= tol * want.abs()
    }

    #[test]
    fn special_functions() {
        assert!((normal_cdf(1.959_964) - 0.975).abs() < 1e-6);
        assert!((normal_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-10);
        assert!((ln_gamma(0.5) - std::f64::consts::PI.sqrt().ln()).abs() < 1e-10);
        // P(1, x) = 1 − e^−x; P(3, 2) = 0.323323583816936.
        assert!((regularized_gamma_p(1.0, 2.0) - (1.0 - (-2f64).exp())).abs() < 1e-12);
        assert!((regularized_gamma_p(3.0, 2.0) - 0.323_323_583_816_936).abs() < 1e-10);
        assert!((regularized_gamma_p(3.0, 10.0) - 0.997_230_604_284_488_3).abs() < 1e-10);
        // ψ(1) = −γ, ψ′(1) = π²/6.
        assert!((digamma(1.0) + 0.577_215_664_901_532_9).abs() < 1e-9);
        assert!((trigamma(1.0) - std::f64::consts::PI.powi(2) / 6.0).abs() < 1e-9);
    }

    #[test]
    fn lognormal_comes_back() {
        let fit = fit_lengths(&draw(LogNormal::new(600f64.ln(), 0.6).unwrap(), 1)).unwrap();
        assert_eq!(fit.family, Family::LogNormal, "{fit:?}");
        let DistKind::LogNormal { median, sigma } = fit.kind else {
            panic!("{fit:?}")
        };
        assert!(
            within(median, 600.0, 0.05) && within(sigma, 0.6, 0.05),
            "{fit:?}"
        );
        assert!(fit.accepted && fit.n == N);
    }

    #[test]
    fn gamma_comes_back() {
        let fit = fit_lengths(&draw(Gamma::new(2.5, 80.0).unwrap(), 2)).unwrap();
        assert_eq!(fit.family, Family::Gamma, "{fit:?}");
        let DistKind::Gamma { shape, scale } = fit.kind else {
            panic!("{fit:?}")
        };
        assert!(
            within(shape, 2.5, 0.05) && within(scale, 80.0, 0.05),
            "{fit:?}"
        );
    }

    #[test]
    fn normal_and_exponential_come_back() {
        let fit = fit_lengths(&draw(Normal::new(220.0, 30.0).unwrap(), 3)).unwrap();
        assert_eq!(fit.family, Family::Normal, "{fit:?}");
        let DistKind::Normal { mean, stddev } = fit.kind else {
            panic!("{fit:?}")
        };
        assert!(within(mean, 220.0, 0.05) && within(stddev, 30.0, 0.05));
        let fit = fit_lengths(&draw(Exp::new(1.0 / 150.0).unwrap(), 4)).unwrap();
        assert_eq!(fit.family, Family::Exponential, "{fit:?}");
        let DistKind::Exponential { mean } = fit.kind else {
            panic!("{fit:?}")
        };
        assert!(within(mean, 150.0, 0.05));
    }

    #[test]
    fn a_mixture_no_family_fits_is_empirical() {
        let mut values = draw(Normal::new(100.0, 5.0).unwrap(), 5);
        values.extend(draw(Normal::new(2000.0, 50.0).unwrap(), 6));
        let fit = fit_lengths(&values).unwrap();
        assert_eq!(fit.family, Family::Empirical);
        assert!(!fit.accepted);
        let DistKind::Empirical { points } = &fit.kind else {
            panic!()
        };
        // 5% bins to the 95th percentile, then 95-99, 99-99.9, 99.9-100.
        assert_eq!(points.len(), 22);
        let total: f64 = points.iter().map(|p| p.1).sum();
        assert!((total - 1.0).abs() < 1e-9);
        assert!(points[21].0 > 2000.0, "the tail survives: {points:?}");
        // Few distinct values are kept exactly, with their frequencies.
        let turns = [1.0, 1.0, 1.0, 2.0, 2.0, 3.0, 7.0];
        assert_eq!(
            empirical(&turns),
            DistKind::Empirical {
                points: vec![(1.0, 3.0), (2.0, 2.0), (3.0, 1.0), (7.0, 1.0)]
            }
        );
        assert_eq!(
            (fit.min.round(), fit.max.round() > 2000.0),
            (fit.min.round(), true)
        );
        assert_eq!(fit_lengths(&[5.0, 5.0, 5.0]), None);
    }

    #[test]
    fn cdf_of_fixed_uniform_and_empirical() {
        let fixed = DistKind::Fixed { value: 5.0 };
        assert_eq!((cdf(&fixed, 4.9), cdf(&fixed, 5.0)), (Some(0.0), Some(1.0)));
        // Bounds given the wrong way round read as the sampler reads them.
        let uniform = DistKind::Uniform {
            min: 30.0,
            max: 10.0,
        };
        let at = |x| cdf(&uniform, x);
        assert_eq!(
            (at(5.0), at(15.0), at(30.0)),
            (Some(0.0), Some(0.25), Some(1.0))
        );
        let point = DistKind::Uniform { min: 3.0, max: 3.0 };
        assert_eq!((cdf(&point, 2.0), cdf(&point, 3.0)), (Some(0.0), Some(1.0)));
        // Steps of 1/4, 1/4 and 1/2 at 10, 20 and 40; a negative weight is 0.
        let table = DistKind::Empirical {
            points: vec![(20.0, 1.0), (10.0, 1.0), (40.0, 2.0), (30.0, -1.0)],
        };
        let at = |x| cdf(&table, x);
        assert_eq!(
            [at(9.0), at(10.0), at(19.9), at(20.0), at(35.0), at(40.0)],
            [0.0, 0.25, 0.25, 0.5, 0.5, 1.0].map(Some)
        );
        // No positive weight: equally likely points; no points: no law.
        let unweighted = DistKind::Empirical {
            points: vec![(1.0, 0.0), (2.0, f64::NAN)],
        };
        assert_eq!(cdf(&unweighted, 1.5), Some(0.5));
        assert_eq!(cdf(&DistKind::Empirical { points: vec![] }, 1.0), None);
    }

    /// Arrival instants from the gaps between them.
    fn arrivals(gaps: &[f64]) -> Vec<f64> {
        gaps.iter()
            .scan(0.0, |t, g| {
                *t += g;
                Some(*t)
            })
            .collect()
    }

    #[test]
    fn arrival_cv_and_process() {
        // Poisson at 4/s: CV ≈ 1.
        let gaps = draw(Exp::new(4.0).unwrap(), 7);
        let fit = fit_arrivals(&arrivals(&gaps)).unwrap();
        assert!(within(fit.mean_rps, 4.0, 0.05), "{fit:?}");
        assert!(within(fit.cv, 1.0, 0.05), "{fit:?}");
        assert_eq!(fit.process, "poisson");
        assert!(fit.peak_rps_10s >= fit.peak_rps_1m && fit.peak_rps_1m >= fit.mean_rps * 0.9);
        // Gamma gaps with shape 0.25: CV = 2.
        let gaps = draw(Gamma::new(0.25, 1.0).unwrap(), 8);
        let fit = fit_arrivals(&arrivals(&gaps)).unwrap();
        assert!(within(fit.cv, 2.0, 0.05), "{fit:?}");
        let cv: f64 = fit.process["gamma cv=".len()..].parse().unwrap();
        assert!(
            fit.process.starts_with("gamma cv=") && within(cv, 2.0, 0.05),
            "{fit:?}"
        );
        assert_eq!(fit_arrivals(&[1.0, 1.0]), None);
    }
}
