//! `capcard audit` end to end, a fast subset of the out-of-sample table of
//! BENCHMARKS.md ("Cr_open out of sample"): the shipped audit shapes pass
//! `capcard check`, and the audit of one of them runs `capcard run` over
//! seeds against a `sim queue` and holds each search to Erlang C. The
//! seeds are fixed, so the figures are too: the thresholds are the
//! stated confidence less what 20 seeds can wander (a binomial at 90%
//! gives 15 or fewer in 20 about 4% of the time).

use std::path::Path;

use crate::support::capcard;

fn audit_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/audit")
}

#[test]
fn every_audit_shape_is_a_valid_experiment() {
    let mut files: Vec<_> = std::fs::read_dir(audit_dir())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "kdl"))
        .collect();
    files.sort();
    assert!(files.len() >= 8, "{files:?}");
    capcard().arg("check").args(&files).assert().success();
}

#[test]
fn the_audit_holds_short_window_searches_to_erlang_c() {
    let out = capcard()
        .arg("audit")
        .arg(audit_dir().join("short-window.kdl"))
        .args(["--seeds", "20", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let row = &rows[0];
    assert_eq!(row["row"]["reference_method"], "Erlang C (closed form)");
    let reference = row["row"]["reference_rps"].as_f64().unwrap();
    // M/M/4, 200 ms, P(W > 100 ms) = 10%.
    assert!((reference - 11.234).abs() < 0.01, "{reference}");
    let summary = &row["summary"];
    assert_eq!(summary["seeds"], 20);
    let covered = summary["covered"].as_u64().unwrap();
    assert!(
        covered >= 16,
        "the 90% range held the truth in {covered} of 20: {summary}"
    );
    let seeds = row["row"]["seeds"].as_array().unwrap();
    assert!(seeds.iter().all(|s| s["calls"].as_u64().unwrap() > 0));
}

#[test]
fn the_audit_refuses_an_endpoint_and_an_experiment_without_a_search() {
    capcard()
        .arg("audit")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/local-vllm.kdl"))
        .args(["--target", "vllm-cpu", "--seeds", "1"])
        .assert()
        .code(1)
        .stderr(predicates::str::contains("is an endpoint"));
    capcard()
        .arg("audit")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/batch.kdl"))
        .args(["--seeds", "1"])
        .assert()
        .code(1);
}

/// `sim queue` over HTTP, in real time: one slot, 200 ms of service, two
/// clients in a closed loop. Each call waits for the other's service, so
/// TTFT is about 200 ms and E2E about 400 ms (first token at service
/// start, the last at its end).
#[test]
fn a_queue_serves_in_real_time_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rt-queue.kdl");
    std::fs::write(
        &file,
        r#"
experiment "rt-queue" { seed 1; }
target "q" {
    sim queue {
        slots 1
        service "deterministic" mean="200ms"
    }
    api completions
}
workload "w" { input-tokens fixed 16; output-tokens fixed 4; }
closed { concurrency 2; duration "3s"; warmup "1s"; }
"#,
    )
    .unwrap();
    let out = dir.path().join("out");
    capcard()
        .args(["run", "--quiet", "--out"])
        .arg(&out)
        .arg(&file)
        .assert()
        .success();
    let results: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("results.json")).unwrap()).unwrap();
    let run = &results["cards"][0]["closed"][0];
    let ttft = run["ttft_ms"]["p50"].as_f64().unwrap();
    let e2e = run["e2e_ms"]["p50"].as_f64().unwrap();
    assert!((170.0..260.0).contains(&ttft), "TTFT p50 {ttft} ms: {run}");
    assert!((370.0..480.0).contains(&e2e), "E2E p50 {e2e} ms: {run}");
}
