//! How long the Cr_open fit takes on a 50-run folder: `capcard report`
//! refits every card from its runs' evidence, so this is what a refit costs
//! per SLO. The runs are an M/M/4-like tail at 50 rates around its
//! crossing, four clauses each (three percentiles and the error rate).
//!
//! `cargo bench --bench cr_open_refit` prints the median and the slowest of
//! 30 fits; BENCHMARKS.md has the figures. Timing belongs here, never in a
//! test.

use std::time::Instant;

use capcard::analyze::cr_open::{ClauseObservation, RunEvidence, Slices, SloObservations, fit};
use capcard::stats::crossing::{Bound, Observation};

fn runs() -> Vec<RunEvidence> {
    (0..50)
        .map(|i| {
            // 50 runs from 0.6× to 1.6× the crossing of a p90 at 10 rps.
            let rate = 10.0 * (0.6 + f64::from(i) * 0.02);
            let logistic = |at: f64, allowed: f64, slope: f64| {
                let eta = (allowed / (1.0 - allowed)).ln() + slope * (rate / at).ln();
                1.0 / (1.0 + (-eta).exp())
            };
            let samples = 30.0 * rate;
            let clause = |label: &str, allowed: f64, at: f64, slope: f64| ClauseObservation {
                label: label.to_string(),
                bound: Bound::Fraction(allowed),
                observation: Some(Observation::Count {
                    samples,
                    beyond: (samples * logistic(at, allowed, slope)).round(),
                    inflation: 4.0,
                }),
                // 20 slices, as a run's summary keeps them: the fit's
                // settling test reads them.
                slices: Some(Slices {
                    samples: vec![(samples / 20.0).round() as u64; 20],
                    values: vec![(samples * logistic(at, allowed, slope) / 20.0).round(); 20],
                }),
            };
            RunEvidence {
                run_id: format!("r{i}"),
                rate_rps: rate,
                realized_rps: rate * (1.0 + 0.03 * (f64::from(i) * 1.7).sin()),
                censored: (rate > 15.5).then(|| "overloaded".to_string()),
                slos: vec![SloObservations {
                    slo: "interactive".to_string(),
                    clauses: vec![
                        clause("ttft p50 ≤ 150ms", 0.5, 12.0, 4.0),
                        clause("ttft p90 ≤ 400ms", 0.1, 10.0, 4.6),
                        clause("e2e p99 ≤ 2s", 0.01, 11.0, 9.0),
                        clause("error-rate ≤ 1%", 0.01, 14.0, 6.0),
                    ],
                }],
            }
        })
        .collect()
}

fn main() {
    let runs = runs();
    let mut times_ms: Vec<f64> = (0..30)
        .map(|_| {
            let start = Instant::now();
            let fitted = fit(&runs, "interactive", 0.9);
            let elapsed = start.elapsed().as_secs_f64() * 1000.0;
            assert!(fitted.estimate_rps.is_some(), "{fitted:?}");
            elapsed
        })
        .collect();
    times_ms.sort_by(f64::total_cmp);
    let fitted = fit(&runs, "interactive", 0.9);
    println!(
        "Cr_open fit of 50 runs × 4 clauses: median {:.1} ms, slowest {:.1} ms over 30 fits \
         (estimate {:.2} rps, range {:?}, bound by {:?})",
        times_ms[times_ms.len() / 2],
        times_ms[times_ms.len() - 1],
        fitted.estimate_rps.unwrap_or(f64::NAN),
        fitted.range,
        fitted.bound_by
    );
}
