//! `diff` on two stored results folders: B is A's chat card on a changed
//! engine (renamed target, −15% throughput from 32 concurrent, Cr_open
//! `interactive` up one step, 4–4.4 → 4.4–4.8 req/s, `batch` down from
//! 8–9.5 to 4.4–4.8 req/s). The Cr_open range cases run `capcard diff` on A
//! against a copy of A whose ranges were changed, so nothing else differs.

use std::path::{Path, PathBuf};

use crate::support::capcard;
use capcard::analyze::CapacityReport;
use capcard::diff::{DiffError, RangeVerdict, diff, diff_folders, render_diff};
use capcard::report::parse_results_json;
use predicates::prelude::*;

fn folder(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

#[test]
fn a_throughput_and_cr_open_drop_is_a_regression() {
    let d = diff_folders(&folder("diff-a"), &folder("diff-b"), Some(10.0)).unwrap();
    assert!(d.regression);
    assert_eq!(
        d.cards.len(),
        1,
        "one card each: paired despite the new target name"
    );
    let card = &d.cards[0];
    assert_eq!(card.a, "h100-vllm × chat");
    assert_eq!(card.b, "h100-vllm-next × chat");
    assert_eq!(card.regressions.len(), 2, "{:?}", card.regressions);
    assert!(card.regressions[0].starts_with("Cr_closed output tok/s -15"));
    assert_eq!(
        card.regressions[1],
        "Cr_open `batch` 8.00–9.50 → 4.40–4.80 req/s: B's whole range is more than 10% below A's"
    );

    let interactive = card
        .cr_open
        .iter()
        .find(|c| c.slo == "interactive")
        .unwrap();
    assert_eq!((interactive.a, interactive.b), (Some(4.0), Some(4.4)));
    assert_eq!(interactive.range_b, Some([Some(4.4), Some(4.8)]));
    assert!(!interactive.regression);
    assert_eq!(
        interactive.verdict,
        Some(RangeVerdict::WithinNoise),
        "4–4.4 and 4.4–4.8 share 4.4: not apart by more than 10%"
    );
    let batch = card.cr_open.iter().find(|c| c.slo == "batch").unwrap();
    assert!(batch.regression && batch.beyond_noise);
    assert!((batch.change_pct.unwrap() + 45.0).abs() < 1e-9);

    // Every level of the sweep matches; 4.0 /s matches 4.1 /s (within 5%).
    assert_eq!(card.closed.len(), 8);
    assert_eq!(card.open.len(), 6);
    let r4 = card.open.iter().find(|l| l.rate_a == Some(4.0)).unwrap();
    assert_eq!(r4.rate_b, Some(4.1));
    let c64 = card
        .closed
        .iter()
        .find(|l| l.concurrency == Some(64))
        .unwrap();
    let tps = &c64.metrics[0];
    assert!(tps.beyond_noise && (tps.change_pct.unwrap() + 15.0).abs() < 1e-6);
    let ttft = &c64.metrics[1];
    assert_eq!(ttft.metric, "TTFT p50");
    assert!((ttft.change_pct.unwrap() - 30.0).abs() < 1e-6);
    let c1 = card
        .closed
        .iter()
        .find(|l| l.concurrency == Some(1))
        .unwrap();
    assert!(
        c1.metrics.iter().all(|m| !m.beyond_noise),
        "unchanged levels are noise"
    );
}

#[test]
fn a_looser_threshold_or_none_passes() {
    let d = diff_folders(&folder("diff-a"), &folder("diff-b"), Some(50.0)).unwrap();
    assert!(!d.regression);
    let d = diff_folders(&folder("diff-a"), &folder("diff-b"), None).unwrap();
    assert!(!d.regression);
    assert!(d.cards[0].regressions.is_empty());
}

#[test]
fn a_report_against_itself_has_no_change_beyond_noise() {
    let text = std::fs::read_to_string(folder("results-fixture.json")).unwrap();
    let report = parse_results_json(&text).unwrap();
    let d = diff(&report, &report, Some(1.0));
    assert!(!d.regression);
    assert_eq!(d.cards.len(), 2, "paired by target and workload");
    assert!(d.only_in_a.is_empty() && d.only_in_b.is_empty());
    for card in &d.cards {
        assert!(card.cr_open.iter().all(|c| !c.beyond_noise));
        for level in card.closed.iter().chain(&card.open) {
            assert!(
                level
                    .metrics
                    .iter()
                    .all(|m| !m.beyond_noise && m.change_pct == Some(0.0))
            );
        }
    }
}

#[test]
fn cards_on_one_side_only_are_listed() {
    let text = std::fs::read_to_string(folder("results-fixture.json")).unwrap();
    let two = parse_results_json(&text).unwrap();
    let mut other = two.clone();
    other.cards[1].workload = "rag".into();
    let d = diff(&two, &other, None);
    assert_eq!(d.cards.len(), 1);
    assert_eq!(d.only_in_a, ["what-if × coding-agent"]);
    assert_eq!(d.only_in_b, ["what-if × rag"]);
}

#[test]
fn a_missing_folder_is_a_read_error() {
    let err = diff_folders(&folder("no-such-folder"), &folder("diff-b"), None).unwrap_err();
    assert!(matches!(err, DiffError::Read { .. }), "{err}");
}

#[test]
fn rendered_diff_snapshot() {
    let d = diff_folders(&folder("diff-a"), &folder("diff-b"), Some(10.0)).unwrap();
    insta::assert_snapshot!("diff-a-vs-b.md", render_diff(&d));
}

fn fixture_a() -> CapacityReport {
    let text = std::fs::read_to_string(folder("diff-a").join("results.json")).unwrap();
    parse_results_json(&text).unwrap()
}

/// Fixture A with the Cr_open ranges of `batch` and `interactive` replaced
/// (`rps`, `failed_at_rps` and `at_least` follow them).
fn with_ranges(batch: [Option<f64>; 2], interactive: [Option<f64>; 2]) -> CapacityReport {
    let mut report = fixture_a();
    for cr in &mut report.cards[0].cr_open {
        let range = if cr.slo == "batch" {
            batch
        } else {
            interactive
        };
        cr.range = range;
        cr.rps = range[0];
        cr.failed_at_rps = range[1];
        cr.at_least = range[0].is_some() && range[1].is_none();
    }
    report
}

fn write_folder(dir: &Path, name: &str, report: &CapacityReport) -> PathBuf {
    let path = dir.join(name);
    std::fs::create_dir_all(&path).unwrap();
    std::fs::write(
        path.join("results.json"),
        serde_json::to_string_pretty(report).unwrap(),
    )
    .unwrap();
    path
}

const A_INTERACTIVE: [Option<f64>; 2] = [Some(4.0), Some(4.4)];

/// `capcard diff A B --fail-on-regression 10`, with A's batch range
/// `a_batch` and B's `b_batch` (`interactive` unchanged).
fn diff_cli(a_batch: [Option<f64>; 2], b_batch: [Option<f64>; 2]) -> assert_cmd::assert::Assert {
    let dir = tempfile::tempdir().unwrap();
    let a = write_folder(dir.path(), "a", &with_ranges(a_batch, A_INTERACTIVE));
    let b = write_folder(dir.path(), "b", &with_ranges(b_batch, A_INTERACTIVE));
    capcard()
        .arg("diff")
        .arg(&a)
        .arg(&b)
        .args(["--fail-on-regression", "10"])
        .assert()
}

#[test]
fn overlapping_cr_open_ranges_are_within_noise_and_exit_0() {
    // B's point is 15% below A's, beyond the 10% threshold, but its range
    // reaches into A's: within noise.
    diff_cli([Some(8.0), Some(9.5)], [Some(6.8), Some(8.2)])
        .success()
        .stdout(
            predicate::str::contains(
                "| Cr_open `batch` (open loop, req/s) | 8.00–9.50 | 6.80–8.20 | -15.0% | no: ranges overlap |",
            )
            .and(predicate::str::contains("**No regression** beyond 10%")),
        );
}

#[test]
fn cr_open_ranges_apart_by_more_than_the_threshold_regress_and_exit_3() {
    // 6.0 < 8.0 × 0.9 = 7.2.
    diff_cli([Some(8.0), Some(9.5)], [Some(5.0), Some(6.0)])
        .code(3)
        .stdout(
            predicate::str::contains(
                "- ⚠ regression: Cr_open `batch` 8.00–9.50 → 5.00–6.00 req/s: B's whole range is more than 10% below A's",
            )
            .and(predicate::str::contains("| 8.00–9.50 | 5.00–6.00 | -37.5% | yes, **worse** |")),
        )
        .stderr(predicate::str::contains("regression beyond 10%"));
}

#[test]
fn cr_open_ranges_apart_by_less_than_the_threshold_are_within_noise() {
    // Disjoint, but 7.4 is only 7.5% below 8.0.
    diff_cli([Some(8.0), Some(9.5)], [Some(6.4), Some(7.4)])
        .success()
        .stdout(predicate::str::contains(
            "| 8.00–9.50 | 6.40–7.40 | -20.0% | no: apart by 10% or less |",
        ));
}

#[test]
fn an_at_least_baseline_regresses_only_below_its_lower_end() {
    let at_least = [Some(8.0), None];
    diff_cli(at_least, [Some(5.0), Some(6.0)])
        .code(3)
        .stdout(predicate::str::contains(
            "Cr_open `batch` ≥ 8.00 → 5.00–6.00 req/s",
        ));
    // Inside 10% of the lower end, or itself unbounded: within noise.
    diff_cli(at_least, [Some(7.6), Some(8.0)])
        .success()
        .stdout(predicate::str::contains(
            "| ≥ 8.00 | 7.60–8.00 | -5.0% | no: ranges overlap |",
        ));
    diff_cli(at_least, [Some(16.0), None])
        .success()
        .stdout(predicate::str::contains(
            "| ≥ 8.00 | ≥ 16.0 | +100.0% | no: ranges overlap |",
        ));
    // The other way round an at-least candidate can still regress.
    diff_cli([Some(8.0), Some(9.5)], [None, Some(2.0)])
        .code(3)
        .stdout(predicate::str::contains("8.00–9.50 → < 2.00 req/s"));
}

#[test]
fn results_without_range_fall_back_to_rps_and_the_failing_rate() {
    // Results written before `range` existed: the same verdicts.
    let dir = tempfile::tempdir().unwrap();
    let strip = |name: &str| {
        let text = std::fs::read_to_string(folder(name).join("results.json")).unwrap();
        let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
        for cr in json["cards"][0]["cr_open"].as_array_mut().unwrap() {
            assert!(cr.as_object_mut().unwrap().remove("range").is_some());
        }
        let path = dir.path().join(name);
        std::fs::create_dir_all(&path).unwrap();
        std::fs::write(path.join("results.json"), json.to_string()).unwrap();
        path
    };
    let (a, b) = (strip("diff-a"), strip("diff-b"));
    let old = diff_folders(&a, &b, Some(10.0)).unwrap();
    let new = diff_folders(&folder("diff-a"), &folder("diff-b"), Some(10.0)).unwrap();
    assert_eq!(old, new);
    assert_eq!(
        old.cards[0].cr_open[1].range_a,
        Some([Some(8.0), Some(9.5)])
    );
}
