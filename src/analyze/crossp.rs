//! CrossP (SPEC §3): the first sweep level where latency grows faster than
//! throughput.
//!
//! For consecutive levels, ΔT% = (T_i − T_{i−1}) / T_{i−1} of the chosen
//! latency statistic (default TTFT p50) and ΔX% the same for output tokens/s;
//! CrossP is the first level where ΔT% > ΔX%, with its zone `[c_{i−1}, c_i]`.
//! The rule is applied literally, with no smoothing: it is the framework's
//! definition, and a noisy sweep is better shown as such (the card prints the
//! deltas) than silently corrected. Levels where the statistic or the
//! throughput was not measured (no successful calls, or a zero value that no
//! percentage can be taken of) are skipped, so "previous level" means the
//! previous level with data.

use crate::config::CrossPSpec;

use super::{CrossP, RunSummary};

/// `closed` in any order (sorted by concurrency here). `None` = not reached in
/// the sweep, or fewer than two levels with data.
pub fn crossp(closed: &[RunSummary], spec: &CrossPSpec) -> Option<CrossP> {
    let mut levels: Vec<(u32, f64, f64)> = closed
        .iter()
        .filter_map(|s| {
            let c = s.concurrency?;
            let t = s.latency(spec.metric).get(spec.stat)?;
            let x = s.output_tokens_per_s;
            (t > 0.0 && x > 0.0).then_some((c, t, x))
        })
        .collect();
    levels.sort_by_key(|&(c, _, _)| c);
    levels.windows(2).find_map(|pair| {
        let [(c0, t0, x0), (c1, t1, x1)] = [pair[0], pair[1]];
        let delta_t = (t1 - t0) / t0;
        let delta_x = (x1 - x0) / x0;
        (delta_t > delta_x).then(|| CrossP {
            concurrency: c1,
            zone: [c0, c1],
            metric: spec.metric.as_str().to_string(),
            stat: spec.stat.key(),
            delta_latency_pct: delta_t * 100.0,
            delta_throughput_pct: delta_x * 100.0,
        })
    })
}

/// Whether any level has the statistic CrossP uses (a missing `extra`
/// percentile makes CrossP unavailable rather than "not reached").
pub fn has_statistic(closed: &[RunSummary], spec: &CrossPSpec) -> bool {
    closed
        .iter()
        .any(|s| s.latency(spec.metric).get(spec.stat).is_some())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::analyze::LatencyStats;
    use crate::config::{LatencyMetric, Stat};

    /// A closed level with TTFT p50 = p99 = `ttft_ms` and `tokens_per_s`.
    pub(crate) fn level(c: u32, ttft_ms: f64, tokens_per_s: f64) -> RunSummary {
        let stats = LatencyStats {
            count: 100,
            mean: ttft_ms,
            p50: ttft_ms,
            p90: ttft_ms,
            p95: ttft_ms,
            p99: ttft_ms,
            max: ttft_ms,
            extra: Default::default(),
        };
        RunSummary {
            run_id: format!("t--w--c{c:04}"),
            concurrency: Some(c),
            requests: 100,
            output_tokens_per_s: tokens_per_s,
            requests_per_s: tokens_per_s / 100.0,
            ttft_ms: stats.clone(),
            e2e_ms: LatencyStats {
                p50: ttft_ms * 10.0,
                ..stats
            },
            ..RunSummary::default()
        }
    }

    fn curve(points: &[(u32, f64, f64)]) -> Vec<RunSummary> {
        points.iter().map(|&(c, t, x)| level(c, t, x)).collect()
    }

    #[test]
    fn flat_then_saturating() {
        // Throughput doubles while TTFT barely moves, then flattens at 16.
        let sweep = curve(&[
            (1, 20.0, 100.0),
            (2, 21.0, 195.0),
            (4, 22.0, 380.0),
            (8, 25.0, 700.0),
            (16, 40.0, 1000.0),
            (32, 90.0, 1050.0),
        ]);
        let got = crossp(&sweep, &CrossPSpec::default()).unwrap();
        assert_eq!(got.concurrency, 16);
        assert_eq!(got.zone, [8, 16]);
        assert_eq!(got.metric, "ttft");
        assert_eq!(got.stat, "p50");
        assert!((got.delta_latency_pct - 60.0).abs() < 1e-9);
        assert!((got.delta_throughput_pct - 100.0 * 300.0 / 700.0).abs() < 1e-9);
    }

    #[test]
    fn order_of_input_does_not_matter() {
        let mut sweep = curve(&[(1, 20.0, 100.0), (2, 21.0, 195.0), (4, 40.0, 210.0)]);
        sweep.reverse();
        assert_eq!(crossp(&sweep, &CrossPSpec::default()).unwrap().zone, [2, 4]);
    }

    #[test]
    fn noisy_sweep_takes_the_first_crossing_literally() {
        // Noise that stays below the throughput gain does not trigger…
        let sweep = curve(&[
            (1, 20.0, 100.0),
            (2, 24.0, 190.0), // ΔT 20% < ΔX 90%
            (4, 22.0, 360.0), // TTFT dips: ΔT < 0
            (8, 30.0, 640.0), // ΔT 36% < ΔX 78%
            (16, 55.0, 900.0),
        ]);
        assert_eq!(
            crossp(&sweep, &CrossPSpec::default()).unwrap().zone,
            [8, 16]
        );
        // …but a throughput dip in the flat region is a crossing by definition.
        let sweep = curve(&[(1, 20.0, 100.0), (2, 20.2, 99.0), (4, 21.0, 390.0)]);
        let got = crossp(&sweep, &CrossPSpec::default()).unwrap();
        assert_eq!(got.zone, [1, 2]);
        assert!(got.delta_throughput_pct < 0.0);
    }

    #[test]
    fn never_saturating_is_not_reached() {
        let sweep = curve(&[
            (1, 20.0, 100.0),
            (2, 22.0, 200.0),
            (4, 25.0, 400.0),
            (8, 30.0, 790.0),
        ]);
        assert_eq!(crossp(&sweep, &CrossPSpec::default()), None);
    }

    #[test]
    fn single_level_or_empty_is_none() {
        assert_eq!(
            crossp(&curve(&[(8, 20.0, 100.0)]), &CrossPSpec::default()),
            None
        );
        assert_eq!(crossp(&[], &CrossPSpec::default()), None);
    }

    #[test]
    fn levels_without_data_are_skipped() {
        let mut sweep = curve(&[(1, 20.0, 100.0), (2, 21.0, 190.0), (4, 50.0, 200.0)]);
        sweep[1].ttft_ms = LatencyStats::default();
        // 1 → 4: ΔT 150% > ΔX 100%.
        assert_eq!(crossp(&sweep, &CrossPSpec::default()).unwrap().zone, [1, 4]);
    }

    #[test]
    fn other_metric_and_extra_percentile() {
        let spec = CrossPSpec {
            metric: LatencyMetric::E2e,
            stat: Stat::Percentile(75.0),
        };
        let mut sweep = curve(&[(1, 20.0, 100.0), (2, 21.0, 190.0), (4, 30.0, 200.0)]);
        assert!(!has_statistic(&sweep, &spec));
        assert_eq!(crossp(&sweep, &spec), None);
        for (s, v) in sweep.iter_mut().zip([100.0, 150.0, 160.0]) {
            s.e2e_ms.extra.insert("p75".into(), v);
        }
        assert!(has_statistic(&sweep, &spec));
        // 1→2: ΔT 50% < ΔX 90%; 2→4: ΔT 6.7% > ΔX 5.3%.
        let got = crossp(&sweep, &spec).unwrap();
        assert_eq!(
            (got.zone, got.metric.as_str(), got.stat.as_str()),
            ([2, 4], "e2e", "p75")
        );
    }
}
