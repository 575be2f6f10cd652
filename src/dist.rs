//! Drawing values from a [`Dist`] (token counts, seconds), with min/max clamps.
//!
//! Every draw is clamped to the distribution's `min`/`max` and then to zero,
//! because every quantity drawn here (tokens, turns, seconds) is a
//! non-negative amount; a normal with a large stddev must not yield a
//! negative prompt. Clamping (rather than re-drawing) piles the cut-off mass
//! on the bound, which is what a user writing `max=8192` expects: long
//! prompts become exactly 8192, not rarer.
//!
//! Counts (tokens, turns, steps, fan-out) go through [`sample_count`]: a
//! `uniform` is then discrete and inclusive (`turns uniform min=1 max=6`
//! gives each of 1..=6 with probability 1/6, as a reader of the file expects),
//! every other kind is rounded to the nearest integer.
//!
//! `sample` is total: the config validator rejects impossible parameters,
//! but a hand-built [`Dist`] with e.g. a non-positive gamma shape degrades to
//! its mean instead of panicking in the middle of a run.

use std::time::Duration;

use rand::{Rng, RngExt};
use rand_distr::{Distribution, Exp1, Gamma, StandardNormal};

use serde::{Deserialize, Serialize};

/// A probability distribution over token counts or times.
///
/// Values are in the base unit of the quantity: tokens, or seconds for
/// times (`mean="4s"` is stored as 4.0). `min`/`max` clamp every draw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Dist {
    pub kind: DistKind,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

impl Dist {
    /// The largest value a draw can take, when the distribution is bounded
    /// (a `max=` clamp, or a fixed, uniform or empirical law); `None` for an
    /// unbounded tail.
    pub fn upper_bound(&self) -> Option<f64> {
        let law = match &self.kind {
            DistKind::Fixed { value } => Some(*value),
            DistKind::Uniform { max, .. } => Some(*max),
            DistKind::Empirical { points } => points.iter().map(|p| p.0).reduce(f64::max),
            _ => None,
        };
        match (law, self.max) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn fixed(v: f64) -> Self {
        Dist {
            kind: DistKind::Fixed { value: v },
            min: None,
            max: None,
        }
    }

    /// `lognormal median= sigma= min= max=`: the usual law of prompt and
    /// output lengths, clamped to `[min, max]`.
    pub fn lognormal(median: f64, sigma: f64, min: f64, max: f64) -> Self {
        Dist {
            kind: DistKind::LogNormal { median, sigma },
            min: Some(min),
            max: Some(max),
        }
    }

    /// The distribution of a token count as a file writes it after the
    /// node's name, clamps included (`lognormal median=200 sigma=0.5
    /// max=2000`), so that the decoder reads it back as it is. For cards.
    pub fn kdl_words(&self) -> String {
        let mut words = match &self.kind {
            DistKind::Fixed { value } => format!("fixed {value}"),
            DistKind::Uniform { min, max } => format!("uniform min={min} max={max}"),
            DistKind::Normal { mean, stddev } => format!("normal mean={mean} stddev={stddev}"),
            DistKind::LogNormal { median, sigma } => {
                format!("lognormal median={median} sigma={sigma}")
            }
            DistKind::Exponential { mean } => format!("exponential mean={mean}"),
            DistKind::Gamma { shape, scale } => format!("gamma shape={shape} scale={scale}"),
            DistKind::Empirical { points } => {
                let values: Vec<String> = points
                    .iter()
                    .map(|(value, weight)| format!("value {value} weight={weight}"))
                    .collect();
                format!("empirical {{ {} }}", values.join("; "))
            }
        };
        // A uniform's bounds are its parameters, not clamps.
        if !matches!(self.kind, DistKind::Uniform { .. }) {
            for (name, bound) in [("min", self.min), ("max", self.max)] {
                if let Some(bound) = bound {
                    words.push_str(&format!(" {name}={bound}"));
                }
            }
        }
        words
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "dist", rename_all = "kebab-case")]
pub enum DistKind {
    Fixed {
        value: f64,
    },
    Uniform {
        min: f64,
        max: f64,
    },
    Normal {
        mean: f64,
        stddev: f64,
    },
    /// Parameterised by the median (= e^mu) and sigma of the underlying
    /// normal; `mean=`/`stddev=` in the file are converted to these.
    LogNormal {
        median: f64,
        sigma: f64,
    },
    Exponential {
        mean: f64,
    },
    Gamma {
        shape: f64,
        scale: f64,
    },
    /// `(value, weight)` pairs; weights need not sum to 1.
    Empirical {
        points: Vec<(f64, f64)>,
    },
}

/// One draw from `dist`, clamped to its `min`/`max`. Never negative.
pub fn sample<R: Rng + ?Sized>(dist: &Dist, rng: &mut R) -> f64 {
    clamp(dist, raw_sample(&dist.kind, rng))
}

/// One draw as a whole number (tokens, turns, steps): discrete inclusive for
/// `uniform`, rounded to nearest otherwise; within `min`/`max` after rounding.
pub fn sample_count<R: Rng + ?Sized>(dist: &Dist, rng: &mut R) -> u32 {
    let value = match &dist.kind {
        DistKind::Uniform { min, max } => {
            let (lo, hi) = ordered(*min, *max);
            let (lo, hi) = (lo.ceil(), hi.floor());
            if lo.is_finite() && hi.is_finite() && lo < hi {
                // Width is at most u32::MAX + 1 after the casts below saturate.
                let lo_count = lo.max(0.0) as u64;
                let hi_count = hi.max(0.0).min(f64::from(u32::MAX)) as u64;
                rng.random_range(lo_count..=hi_count.max(lo_count)) as f64
            } else {
                lo.max(hi).max(0.0)
            }
        }
        kind => raw_sample(kind, rng).round(),
    };
    // Clamping to a fractional bound (max=5.5) yields a fraction: round it,
    // and if that steps over the bound, take the integer on the inner side.
    let mut value = clamp(dist, value).round();
    if let Some(max) = dist.max.filter(|m| value > *m) {
        value = max.floor();
    }
    if let Some(min) = dist.min.filter(|m| value < *m) {
        value = min.ceil();
    }
    // `as` saturates (and maps NaN to 0), the right behaviour for a count.
    value.max(0.0) as u32
}

/// One draw of a time distribution (values in seconds) as a [`Duration`].
pub fn sample_duration<R: Rng + ?Sized>(dist: &Dist, rng: &mut R) -> Duration {
    Duration::try_from_secs_f64(sample(dist, rng)).unwrap_or(Duration::MAX)
}

fn raw_sample<R: Rng + ?Sized>(kind: &DistKind, rng: &mut R) -> f64 {
    match kind {
        DistKind::Fixed { value } => *value,
        DistKind::Uniform { min, max } => {
            let (lo, hi) = ordered(*min, *max);
            lo + (hi - lo) * rng.random::<f64>()
        }
        DistKind::Normal { mean, stddev } => {
            let z: f64 = StandardNormal.sample(rng);
            mean + stddev.abs() * z
        }
        DistKind::LogNormal { median, sigma } => {
            let z: f64 = StandardNormal.sample(rng);
            median * (sigma.abs() * z).exp()
        }
        DistKind::Exponential { mean } => {
            let e: f64 = Exp1.sample(rng);
            mean * e
        }
        DistKind::Gamma { shape, scale } => match Gamma::new(*shape, *scale) {
            Ok(gamma) => gamma.sample(rng),
            Err(_) => shape * scale,
        },
        DistKind::Empirical { points } => weighted_choice(points, rng),
    }
}

/// A value of `points` chosen with probability proportional to its weight.
/// Weights that are negative or not finite count as zero; with no positive
/// weight at all the choice is uniform, and with no points it is 0.
fn weighted_choice<R: Rng + ?Sized>(points: &[(f64, f64)], rng: &mut R) -> f64 {
    let usable = |w: f64| if w.is_finite() && w > 0.0 { w } else { 0.0 };
    let total: f64 = points.iter().map(|(_, w)| usable(*w)).sum();
    if points.is_empty() {
        return 0.0;
    }
    if total <= 0.0 {
        return points[rng.random_range(0..points.len())].0;
    }
    let mut target = rng.random::<f64>() * total;
    for (value, weight) in points {
        let weight = usable(*weight);
        if target < weight {
            return *value;
        }
        target -= weight;
    }
    // Rounding in the running subtraction can leave `target` a hair above
    // the last weight: the draw belongs to the last positive point.
    points
        .iter()
        .rev()
        .find(|(_, w)| usable(*w) > 0.0)
        .map_or(0.0, |(v, _)| *v)
}

fn ordered(a: f64, b: f64) -> (f64, f64) {
    if a <= b { (a, b) } else { (b, a) }
}

fn clamp(dist: &Dist, mut value: f64) -> f64 {
    if value.is_nan() {
        value = 0.0;
    }
    if let Some(min) = dist.min {
        value = value.max(min);
    }
    if let Some(max) = dist.max {
        value = value.min(max);
    }
    value.max(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::seeded_rng;

    const DRAWS: usize = 100_000;

    fn dist(kind: DistKind) -> Dist {
        Dist {
            kind,
            min: None,
            max: None,
        }
    }

    fn draws(d: &Dist, seed: u64) -> Vec<f64> {
        let mut rng = seeded_rng(seed);
        (0..DRAWS).map(|_| sample(d, &mut rng)).collect()
    }

    fn mean_var(xs: &[f64]) -> (f64, f64) {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var)
    }

    fn assert_close(actual: f64, expected: f64, rel_tol: f64, what: &str) {
        let err = ((actual - expected) / expected).abs();
        assert!(
            err <= rel_tol,
            "{what}: got {actual}, expected {expected} (±{rel_tol})"
        );
    }

    #[test]
    fn fixed_is_exact() {
        let mut rng = seeded_rng(1);
        assert_eq!(sample(&Dist::fixed(42.5), &mut rng), 42.5);
        assert_eq!(sample_count(&Dist::fixed(42.5), &mut rng), 43);
    }

    #[test]
    fn uniform_mean_and_variance() {
        let (mean, var) = mean_var(&draws(
            &dist(DistKind::Uniform {
                min: 10.0,
                max: 30.0,
            }),
            2,
        ));
        assert_close(mean, 20.0, 0.01, "mean");
        assert_close(var, 400.0 / 12.0, 0.03, "variance");
    }

    #[test]
    fn normal_mean_and_variance() {
        let (mean, var) = mean_var(&draws(
            &dist(DistKind::Normal {
                mean: 220.0,
                stddev: 60.0,
            }),
            3,
        ));
        assert_close(mean, 220.0, 0.01, "mean");
        assert_close(var, 3600.0, 0.03, "variance");
    }

    #[test]
    fn lognormal_median_mean_and_variance() {
        let (median, sigma) = (600.0_f64, 0.6_f64);
        let mut xs = draws(&dist(DistKind::LogNormal { median, sigma }), 4);
        let (mean, var) = mean_var(&xs);
        let s2 = sigma * sigma;
        assert_close(mean, median * (s2 / 2.0).exp(), 0.02, "mean");
        assert_close(
            var,
            (s2.exp() - 1.0) * median * median * s2.exp(),
            0.06,
            "variance",
        );
        xs.sort_by(f64::total_cmp);
        assert_close(xs[DRAWS / 2], median, 0.02, "median");
    }

    #[test]
    fn exponential_mean_and_variance() {
        let (mean, var) = mean_var(&draws(&dist(DistKind::Exponential { mean: 4.0 }), 5));
        assert_close(mean, 4.0, 0.02, "mean");
        assert_close(var, 16.0, 0.05, "variance");
    }

    #[test]
    fn gamma_mean_and_variance() {
        let (mean, var) = mean_var(&draws(
            &dist(DistKind::Gamma {
                shape: 2.0,
                scale: 3.0,
            }),
            6,
        ));
        assert_close(mean, 6.0, 0.02, "mean");
        assert_close(var, 18.0, 0.05, "variance");
    }

    #[test]
    fn invalid_gamma_degrades_to_its_mean() {
        let mut rng = seeded_rng(7);
        assert_eq!(
            sample(
                &dist(DistKind::Gamma {
                    shape: 0.0,
                    scale: 3.0
                }),
                &mut rng
            ),
            0.0
        );
        assert_eq!(
            sample(
                &dist(DistKind::Gamma {
                    shape: -1.0,
                    scale: 3.0
                }),
                &mut rng
            ),
            0.0
        );
    }

    #[test]
    fn empirical_follows_weights() {
        let d = dist(DistKind::Empirical {
            points: vec![(100.0, 1.0), (200.0, 3.0), (300.0, 0.0)],
        });
        let xs = draws(&d, 8);
        let share_200 = xs.iter().filter(|x| **x == 200.0).count() as f64 / DRAWS as f64;
        assert_close(share_200, 0.75, 0.02, "share of 200");
        assert!(
            xs.iter().all(|x| *x == 100.0 || *x == 200.0),
            "zero weight drawn"
        );
    }

    #[test]
    fn empirical_degenerate_cases() {
        let mut rng = seeded_rng(9);
        assert_eq!(
            sample(&dist(DistKind::Empirical { points: vec![] }), &mut rng),
            0.0
        );
        let zero = dist(DistKind::Empirical {
            points: vec![(5.0, 0.0), (5.0, 0.0)],
        });
        assert_eq!(sample(&zero, &mut rng), 5.0);
    }

    #[test]
    fn clamps_hold_and_pile_mass_on_the_bound() {
        let d = Dist {
            kind: DistKind::Normal {
                mean: 100.0,
                stddev: 100.0,
            },
            min: Some(16.0),
            max: Some(150.0),
        };
        let xs = draws(&d, 10);
        assert!(xs.iter().all(|x| (16.0..=150.0).contains(x)));
        // P(N(100,100) < 16) ≈ 0.20, P(> 150) ≈ 0.31.
        let at_min = xs.iter().filter(|x| **x == 16.0).count() as f64 / DRAWS as f64;
        let at_max = xs.iter().filter(|x| **x == 150.0).count() as f64 / DRAWS as f64;
        assert_close(at_min, 0.2005, 0.05, "mass at min");
        assert_close(at_max, 0.3085, 0.05, "mass at max");
    }

    #[test]
    fn never_negative_without_clamps() {
        let xs = draws(
            &dist(DistKind::Normal {
                mean: 0.0,
                stddev: 10.0,
            }),
            11,
        );
        assert!(xs.iter().all(|x| *x >= 0.0));
        assert!(xs.iter().filter(|x| **x == 0.0).count() > DRAWS / 3);
    }

    #[test]
    fn uniform_counts_are_discrete_and_inclusive() {
        let d = dist(DistKind::Uniform { min: 1.0, max: 6.0 });
        let mut rng = seeded_rng(12);
        let mut seen = [0usize; 8];
        for _ in 0..60_000 {
            seen[sample_count(&d, &mut rng) as usize] += 1;
        }
        assert_eq!(seen[0], 0);
        assert_eq!(seen[7], 0);
        for (k, n) in seen.iter().enumerate().take(7).skip(1) {
            assert_close(*n as f64, 10_000.0, 0.05, &format!("count of {k}"));
        }
    }

    #[test]
    fn counts_round_and_respect_fractional_bounds() {
        let d = Dist {
            kind: DistKind::Fixed { value: 9.0 },
            min: None,
            max: Some(5.5),
        };
        assert_eq!(sample_count(&d, &mut seeded_rng(13)), 5);
        let d = Dist {
            kind: DistKind::Fixed { value: 1.0 },
            min: Some(2.5),
            max: None,
        };
        assert_eq!(sample_count(&d, &mut seeded_rng(13)), 3);
        let d = dist(DistKind::Normal {
            mean: 10.0,
            stddev: 0.2,
        });
        let mut rng = seeded_rng(14);
        assert!((0..1000).all(|_| (9..=11).contains(&sample_count(&d, &mut rng))));
    }

    #[test]
    fn durations_are_seconds() {
        let d = Dist::fixed(1.25);
        assert_eq!(
            sample_duration(&d, &mut seeded_rng(15)),
            Duration::from_millis(1250)
        );
    }

    #[test]
    fn same_seed_same_draws() {
        let d = dist(DistKind::LogNormal {
            median: 50.0,
            sigma: 1.0,
        });
        let a: Vec<f64> = draws(&d, 16).into_iter().take(100).collect();
        let b: Vec<f64> = draws(&d, 16).into_iter().take(100).collect();
        let c: Vec<f64> = draws(&d, 17).into_iter().take(100).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
