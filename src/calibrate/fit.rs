//! The pure half of calibration: the free parameters, the error between a
//! simulated and a measured sweep, and a Nelder–Mead search over them.
//!
//! The engine's parameters are searched in log space (each is a positive
//! scale), so a step means the same relative change for a 10 µs overhead
//! and a 0.8 efficiency, and none can turn negative. The network overhead
//! is searched in milliseconds, linearly: it may well be 0, and near 0 a
//! log scale would make it look irrelevant to the search. The error is the sum,
//! over the sweep's levels, of squared log ratios sim/real of TTFT p50,
//! ITL p50 and output tok/s: symmetric in over- and under-prediction, and
//! blind to the units of each figure.

use std::time::Duration;

/// The simulator's free parameters that calibration fits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Params {
    pub compute_efficiency: f64,
    pub memory_efficiency: f64,
    pub step_overhead_s: f64,
    pub per_seq_overhead_s: f64,
    pub network_overhead_s: f64,
}

/// Bounds of each parameter, in the order of [`Params::to_search`].
const BOUNDS: [(f64, f64); 5] = [
    (1e-4, 1.0),
    (1e-4, 1.0),
    (1e-6, 1.0),
    (1e-7, 0.1),
    (0.0, 0.1),
];

impl Params {
    pub const NAMES: [&'static str; 5] = [
        "compute-efficiency",
        "memory-efficiency",
        "step-overhead",
        "per-seq-overhead",
        "network-overhead",
    ];

    pub fn to_search(self) -> [f64; 5] {
        [
            self.compute_efficiency.ln(),
            self.memory_efficiency.ln(),
            self.step_overhead_s.ln(),
            self.per_seq_overhead_s.ln(),
            self.network_overhead_s * 1e3,
        ]
    }

    /// From the search's space, each clamped into its bounds.
    pub fn from_search(x: &[f64; 5]) -> Params {
        let v: Vec<f64> = x
            .iter()
            .zip(BOUNDS)
            .enumerate()
            .map(|(i, (x, (lo, hi)))| {
                let value = if i == 4 { x / 1e3 } else { x.exp() };
                value.clamp(lo, hi)
            })
            .collect();
        Params {
            compute_efficiency: v[0],
            memory_efficiency: v[1],
            step_overhead_s: v[2],
            per_seq_overhead_s: v[3],
            network_overhead_s: v[4],
        }
    }

    pub fn values(&self) -> [f64; 5] {
        [
            self.compute_efficiency,
            self.memory_efficiency,
            self.step_overhead_s,
            self.per_seq_overhead_s,
            self.network_overhead_s,
        ]
    }

    /// Initial simplex steps of the search, `scale` × (e-fold for the
    /// engine's parameters, 0.5 ms for the network overhead).
    pub fn search_steps(scale: f64) -> [f64; 5] {
        [scale, scale, scale, scale, 0.5 * scale]
    }

    pub fn network_overhead(&self) -> Duration {
        Duration::from_secs_f64(self.network_overhead_s)
    }
}

/// What calibration compares at one closed level: the figures it reports
/// (p50s and throughput) and the means it fits.
///
/// The fit uses means of TTFT, ITL and E2E, not the reported p50s and
/// tok/s: a median of a few dozen calls, or the count of calls finished in
/// a window, moves in jumps as a parameter changes, and a simplex search
/// stalls on such plateaus; means move smoothly. In a closed loop the E2E
/// mean carries the throughput (Little's law: c / (E2E + gap)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LevelFigures {
    pub concurrency: u32,
    pub ttft_p50_ms: f64,
    pub itl_p50_ms: f64,
    pub output_tokens_per_s: f64,
    pub ttft_mean_ms: f64,
    pub itl_mean_ms: f64,
    pub e2e_mean_ms: f64,
}

/// Σ over levels of squared log ratios sim/real of the means; a level the
/// simulation could not measure (no successful call) costs as much as a
/// 10× error.
pub fn sweep_error(real: &[LevelFigures], sim: &[Option<LevelFigures>]) -> f64 {
    let miss = 10f64.ln().powi(2) * 3.0;
    real.iter()
        .zip(sim)
        .map(|(r, s)| match s {
            Some(s) => {
                log_ratio_sq(s.ttft_mean_ms, r.ttft_mean_ms)
                    + log_ratio_sq(s.itl_mean_ms, r.itl_mean_ms)
                    + log_ratio_sq(s.e2e_mean_ms, r.e2e_mean_ms)
            }
            None => miss,
        })
        .sum()
}

fn log_ratio_sq(sim: f64, real: f64) -> f64 {
    if !(sim > 0.0 && real > 0.0) {
        // A zero figure on either side (e.g. no ITL: one-token outputs)
        // carries no information about the fit.
        return 0.0;
    }
    (sim / real).ln().powi(2)
}

/// Relative error sim/real − 1.
pub fn relative_error(sim: f64, real: f64) -> Option<f64> {
    (real > 0.0 && sim.is_finite()).then(|| sim / real - 1.0)
}

/// Minimises `f` from `start` with the Nelder–Mead simplex (initial step
/// `step[i]` along coordinate `i`), for at most `max_evals` evaluations.
/// Returns the best point, its value and the evaluations used.
pub fn nelder_mead<const N: usize>(
    f: &mut dyn FnMut(&[f64; N]) -> f64,
    start: [f64; N],
    step: [f64; N],
    max_evals: usize,
) -> ([f64; N], f64, usize) {
    let mut evals = 0usize;
    let mut eval = |x: &[f64; N], evals: &mut usize| {
        *evals += 1;
        let v = f(x);
        if v.is_finite() { v } else { f64::MAX }
    };
    let mut simplex: Vec<([f64; N], f64)> = Vec::with_capacity(N + 1);
    simplex.push((start, eval(&start, &mut evals)));
    for i in 0..N {
        let mut x = start;
        x[i] += step[i];
        simplex.push((x, eval(&x, &mut evals)));
    }
    let (alpha, gamma, rho, sigma) = (1.0, 2.0, 0.5, 0.5);
    while evals < max_evals {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        let (best, worst) = (simplex[0].1, simplex[N].1);
        if (worst - best).abs() <= 1e-10 * (1.0 + best.abs()) {
            break;
        }
        let mut centroid = [0.0; N];
        for (x, _) in &simplex[..N] {
            for i in 0..N {
                centroid[i] += x[i] / N as f64;
            }
        }
        let along = |t: f64| {
            let mut x = [0.0; N];
            for i in 0..N {
                x[i] = centroid[i] + t * (simplex[N].0[i] - centroid[i]);
            }
            x
        };
        let reflected = along(-alpha);
        let fr = eval(&reflected, &mut evals);
        if fr < simplex[0].1 {
            let expanded = along(-gamma);
            let fe = eval(&expanded, &mut evals);
            simplex[N] = if fe < fr {
                (expanded, fe)
            } else {
                (reflected, fr)
            };
        } else if fr < simplex[N - 1].1 {
            simplex[N] = (reflected, fr);
        } else {
            let contracted = if fr < simplex[N].1 {
                along(-rho)
            } else {
                along(rho)
            };
            let fc = eval(&contracted, &mut evals);
            if fc < simplex[N].1.min(fr) {
                simplex[N] = (contracted, fc);
            } else {
                // Shrink towards the best point.
                let best_x = simplex[0].0;
                for (x, v) in simplex.iter_mut().skip(1) {
                    for i in 0..N {
                        x[i] = best_x[i] + sigma * (x[i] - best_x[i]);
                    }
                    *v = eval(x, &mut evals);
                }
            }
        }
    }
    simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
    (simplex[0].0, simplex[0].1, evals)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nelder_mead_finds_the_minimum_of_a_valley() {
        // Rosenbrock's banana, minimum 0 at (1, 1).
        let mut f = |x: &[f64; 2]| (1.0 - x[0]).powi(2) + 100.0 * (x[1] - x[0] * x[0]).powi(2);
        let (x, v, evals) = nelder_mead(&mut f, [-1.2, 1.0], [0.5, 0.5], 2000);
        assert!(v < 1e-6, "{v} at {x:?} after {evals}");
        assert!(
            (x[0] - 1.0).abs() < 1e-2 && (x[1] - 1.0).abs() < 1e-2,
            "{x:?}"
        );
    }

    #[test]
    fn params_round_trip_through_log_space_within_bounds() {
        let p = Params {
            compute_efficiency: 0.6,
            memory_efficiency: 0.8,
            step_overhead_s: 1e-3,
            per_seq_overhead_s: 1e-5,
            network_overhead_s: 2e-4,
        };
        let back = Params::from_search(&p.to_search());
        for (a, b) in p.values().iter().zip(back.values()) {
            assert!((a - b).abs() < 1e-12 * a.max(1.0));
        }
        // An efficiency above 1 is clamped to 1.
        let mut x = p.to_search();
        x[0] = 2.0f64.ln();
        assert_eq!(Params::from_search(&x).compute_efficiency, 1.0);
    }

    #[test]
    fn the_error_is_zero_on_a_perfect_fit_and_symmetric() {
        let real = [LevelFigures {
            concurrency: 1,
            ttft_p50_ms: 100.0,
            itl_p50_ms: 10.0,
            output_tokens_per_s: 50.0,
            ttft_mean_ms: 100.0,
            itl_mean_ms: 10.0,
            e2e_mean_ms: 500.0,
        }];
        assert_eq!(sweep_error(&real, &[Some(real[0])]), 0.0);
        let double = LevelFigures {
            ttft_mean_ms: 200.0,
            ..real[0]
        };
        let half = LevelFigures {
            ttft_mean_ms: 50.0,
            ..real[0]
        };
        let (e2, e_half) = (
            sweep_error(&real, &[Some(double)]),
            sweep_error(&real, &[Some(half)]),
        );
        assert!((e2 - e_half).abs() < 1e-12 && e2 > 0.0);
        assert!(sweep_error(&real, &[None]) > e2);
    }
}
