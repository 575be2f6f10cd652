//! `diff` on two stored results folders: B is A's chat card on a changed
//! engine (renamed target, −15% throughput from 32 concurrent, Cr_open
//! `interactive` up one step, `batch` down from 8 to 4.8 /s).

use std::path::PathBuf;

use capcard::diff::{DiffError, diff, diff_folders, render_diff};
use capcard::report::parse_results_json;

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
    assert!(card.regressions[1].starts_with("Cr_open `batch` -40"));

    let interactive = card
        .cr_open
        .iter()
        .find(|c| c.slo == "interactive")
        .unwrap();
    assert_eq!((interactive.a, interactive.b), (Some(4.0), Some(4.4)));
    assert!(!interactive.regression);
    assert!(
        interactive.beyond_noise,
        "[4, 4.4) and [4.4, 4.8) are disjoint: B passed where A failed"
    );
    let batch = card.cr_open.iter().find(|c| c.slo == "batch").unwrap();
    assert!(batch.regression && batch.beyond_noise);

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
