//! Cr_closed (SPEC §3): the knee of output tokens/s vs concurrency, as a range.
//!
//! With X_max the largest output tokens/s of the sweep, Cr_closed is
//! `[smallest level with X ≥ lower·X_max, smallest level with X ≥ upper·X_max]`
//! (fractions from `knee`, default 0.9 and 0.97), with throughput and
//! latencies at both ends. A range rather than a point because the knee of a
//! real curve is a zone: the lower end is where the replica is already near
//! its ceiling while latency has not yet paid for the last few percent.
//!
//! `saturated` says whether the sweep reached the ceiling at all: it is true
//! when the largest level gained less than [`SATURATION_GAIN`] (5%) output
//! tokens/s over the level before it (or lost throughput). Above that gain the
//! curve is still climbing, X_max is just the last point measured, and the
//! range is a lower bound of the real knee: the card says so. A sweep of one
//! level cannot show a gain and is never saturated.

use crate::config::KneeSpec;

use super::{CrClosed, RunSummary};

/// The largest level's gain over the previous one below which the sweep
/// counts as saturated.
pub const SATURATION_GAIN: f64 = 0.05;

/// `closed` in any order. `None` when no level produced output tokens.
pub fn cr_closed(closed: &[RunSummary], spec: &KneeSpec) -> Option<CrClosed> {
    let mut levels: Vec<&RunSummary> = closed.iter().filter(|s| s.concurrency.is_some()).collect();
    levels.sort_by_key(|s| s.concurrency);
    let best = levels
        .iter()
        .copied()
        .max_by(|a, b| a.output_tokens_per_s.total_cmp(&b.output_tokens_per_s))?;
    let x_max = best.output_tokens_per_s;
    if x_max.is_nan() || x_max <= 0.0 {
        return None;
    }
    // The X_max level itself satisfies both fractions (≤ 1), so both finds succeed.
    let first_at = |fraction: f64| {
        levels
            .iter()
            .copied()
            .find(|s| s.output_tokens_per_s >= fraction * x_max)
    };
    let lower = first_at(spec.lower)?;
    let upper = first_at(spec.upper)?;
    let ends = [lower, upper];
    let saturated = match levels.as_slice() {
        [.., previous, last] if previous.output_tokens_per_s > 0.0 => {
            (last.output_tokens_per_s - previous.output_tokens_per_s) / previous.output_tokens_per_s
                < SATURATION_GAIN
        }
        _ => false,
    };
    Some(CrClosed {
        range: ends.map(|s| s.concurrency.unwrap_or_default()),
        output_tokens_per_s: ends.map(|s| s.output_tokens_per_s),
        requests_per_s: ends.map(|s| s.requests_per_s),
        ttft_p50_ms: ends.map(|s| s.ttft_ms.p50),
        ttft_p99_ms: ends.map(|s| s.ttft_ms.p99),
        e2e_p50_ms: ends.map(|s| s.e2e_ms.p50),
        max_output_tokens_per_s: x_max,
        max_at_concurrency: best.concurrency.unwrap_or_default(),
        fractions: [spec.lower, spec.upper],
        saturated,
    })
}

/// The largest level's output tokens/s gain over the previous level, in
/// percent (for the "saturation not reached" note); `None` below 2 levels.
pub fn last_gain_pct(closed: &[RunSummary]) -> Option<(u32, u32, f64)> {
    let mut levels: Vec<&RunSummary> = closed.iter().filter(|s| s.concurrency.is_some()).collect();
    levels.sort_by_key(|s| s.concurrency);
    match levels.as_slice() {
        [.., previous, last] if previous.output_tokens_per_s > 0.0 => Some((
            previous.concurrency.unwrap_or_default(),
            last.concurrency.unwrap_or_default(),
            100.0 * (last.output_tokens_per_s - previous.output_tokens_per_s)
                / previous.output_tokens_per_s,
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::crossp::tests::level;

    fn curve(points: &[(u32, f64)]) -> Vec<RunSummary> {
        points
            .iter()
            .map(|&(c, x)| level(c, 10.0 * f64::from(c), x))
            .collect()
    }

    #[test]
    fn flat_then_saturating() {
        let sweep = curve(&[
            (1, 100.0),
            (2, 195.0),
            (4, 380.0),
            (8, 700.0),
            (16, 940.0),
            (32, 1000.0),
            (64, 1010.0),
        ]);
        let got = cr_closed(&sweep, &KneeSpec::default()).unwrap();
        // X_max 1010: 0.9 → 909 (first at 16), 0.97 → 979.7 (first at 32).
        assert_eq!(got.range, [16, 32]);
        assert_eq!(got.output_tokens_per_s, [940.0, 1000.0]);
        assert_eq!(got.requests_per_s, [9.4, 10.0]);
        assert_eq!(got.ttft_p50_ms, [160.0, 320.0]);
        assert_eq!(got.ttft_p99_ms, [160.0, 320.0]);
        assert_eq!(got.e2e_p50_ms, [1600.0, 3200.0]);
        assert_eq!(got.max_output_tokens_per_s, 1010.0);
        assert_eq!(got.max_at_concurrency, 64);
        assert_eq!(got.fractions, [0.9, 0.97]);
        assert!(got.saturated, "64 gained 1% over 32");
    }

    #[test]
    fn noisy_peak_then_drop() {
        // Throughput peaks at 16 and falls back: still saturated, range before the peak.
        let sweep = curve(&[
            (1, 100.0),
            (2, 210.0),
            (4, 390.0),
            (8, 930.0),
            (16, 1000.0),
            (32, 960.0),
        ]);
        let got = cr_closed(&sweep, &KneeSpec::default()).unwrap();
        assert_eq!(got.range, [8, 16]);
        assert_eq!(got.max_at_concurrency, 16);
        assert!(got.saturated);
    }

    #[test]
    fn never_saturating() {
        let sweep = curve(&[(1, 100.0), (2, 200.0), (4, 400.0), (8, 800.0)]);
        let got = cr_closed(
            &sweep,
            &KneeSpec {
                lower: 0.8,
                upper: 0.95,
            },
        )
        .unwrap();
        // X_max is the last point: both ends at 8, and the curve still climbs.
        assert_eq!(got.range, [8, 8]);
        assert_eq!(got.fractions, [0.8, 0.95]);
        assert!(!got.saturated);
        assert_eq!(last_gain_pct(&sweep), Some((4, 8, 100.0)));
    }

    #[test]
    fn single_level() {
        let got = cr_closed(&curve(&[(8, 500.0)]), &KneeSpec::default()).unwrap();
        assert_eq!(got.range, [8, 8]);
        assert!(!got.saturated);
        assert_eq!(last_gain_pct(&curve(&[(8, 500.0)])), None);
    }

    #[test]
    fn nothing_measured() {
        assert_eq!(cr_closed(&[], &KneeSpec::default()), None);
        assert_eq!(
            cr_closed(&curve(&[(1, 0.0), (2, 0.0)]), &KneeSpec::default()),
            None
        );
    }
}
