//! End to end on the simulator: `capcard run` → results folder → `capcard
//! report`, through the real binary, as a user would.

use std::path::Path;

use assert_cmd::Command;
use capcard::analyze::CapacityReport;

fn capcard() -> Command {
    Command::cargo_bin("capcard").expect("binary built")
}

/// A shortened quickstart: the tiny preset, a short sweep and a coarse search.
const SHORT_QUICKSTART: &str = r#"
experiment "e2e-short" {
    seed 11
}
target "tiny-sim" {
    sim tiny
    hardware "simulated"
    cost-per-hour 1.0 currency=EUR
}
workload "chat-small" {
    input-tokens lognormal median=96 sigma=0.4 min=16 max=512
    output-tokens normal mean=48 stddev=8 min=8 max=96
    shared-prefix tokens=32 groups=2
}
slo "interactive" {
    ttft p50="400ms" p90="1s"
    e2e p90="3s"
    error-rate max="10%"
}
closed {
    concurrency 1 4 16 64
    duration "2s"
    warmup "300ms"
}
open {
    arrival poisson
    search min=1 max=400 precision="25%"
    duration "3s"
    warmup "300ms"
}
sizing {
    target rps=100 slo=interactive
    target output-tokens-per-s=100000
    headroom "30%"
    spares 1
}
"#;

fn read_report(dir: &Path) -> CapacityReport {
    let text = std::fs::read_to_string(dir.join("results.json")).expect("results.json written");
    capcard::report::parse_results_json(&text).expect("results.json parses")
}

#[test]
fn run_then_report_on_the_simulator() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("short.kdl");
    std::fs::write(&file, SHORT_QUICKSTART).unwrap();
    let out = tmp.path().join("results");

    let assert = capcard()
        .args(["run", "--quiet", "--out"])
        .arg(&out)
        .arg(&file)
        .assert();
    let output = assert.get_output();
    assert!(
        output.status.success(),
        "run failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );

    // The folder of SPEC §5.
    for name in [
        "experiment.kdl",
        "plan.json",
        "results.json",
        "tiny-sim--chat-small.md",
    ] {
        assert!(out.join(name).is_file(), "{name} missing");
    }
    assert_eq!(
        std::fs::read_to_string(out.join("experiment.kdl")).unwrap(),
        SHORT_QUICKSTART
    );
    let journal =
        std::fs::read_to_string(out.join("runs/tiny-sim--chat-small--c0004.jsonl")).unwrap();
    assert!(
        journal.lines().count() > 10,
        "journal has a line per request"
    );

    let report = read_report(&out);
    assert_eq!(report.schema, "capcard/results/v1");
    assert_eq!(report.status, "complete");
    let card = &report.cards[0];
    assert_eq!(card.closed.len(), 4);
    assert!(card.closed.iter().all(|r| r.requests > 0 && r.errors == 0));
    // Throughput grows from c=1 to c=16 on a batching engine.
    assert!(card.closed[2].output_tokens_per_s > 2.0 * card.closed[0].output_tokens_per_s);
    assert!(
        card.crossp.is_some(),
        "CrossP reached in a 1..64 sweep of the tiny sim"
    );
    let cr_closed = card.cr_closed.as_ref().expect("Cr_closed measured");
    assert!(cr_closed.range[0] <= cr_closed.range[1]);
    let cr_open = &card.cr_open[0];
    assert_eq!(cr_open.slo, "interactive");
    let rps = cr_open.rps.expect("Cr_open reached");
    assert!((1.0..400.0).contains(&rps), "Cr_open {rps}");
    assert!(cr_open.failed_at_rps.is_some_and(|f| f > rps));
    assert!(!card.open.is_empty());
    assert!(card.open.iter().all(|r| r.schedule_lag_ms.is_some()));
    assert_eq!(card.sizing.len(), 2);
    assert!(card.sizing.iter().all(|s| s.replicas.is_some()));

    // `report` regenerates the card byte for byte from the folder alone.
    let card_path = out.join("tiny-sim--chat-small.md");
    let written = std::fs::read_to_string(&card_path).unwrap();
    assert!(written.contains("Cr_open"));
    std::fs::remove_file(&card_path).unwrap();
    capcard().arg("report").arg(&out).assert().success();
    assert_eq!(std::fs::read_to_string(&card_path).unwrap(), written);
}
