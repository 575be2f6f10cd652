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
    the_card_quotes_the_audit_of_its_own_settings(&rows, covered);
}

/// `capcard report DIR --audit FILE`: a run of the same file quotes the
/// audit's share beside its range; one whose share is below the stated
/// confidence says the range is not of that confidence; an audit of
/// other settings is refused, and the folder keeps none.
fn the_card_quotes_the_audit_of_its_own_settings(rows: &serde_json::Value, covered: u64) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("run");
    capcard()
        .arg("run")
        .arg(audit_dir().join("short-window.kdl"))
        .arg("--out")
        .arg(&dir)
        .assert()
        .success();
    let card = || std::fs::read_to_string(dir.join("queue--short.md")).unwrap();
    assert!(
        !card().contains("an audit of this experiment"),
        "{}",
        card()
    );
    let write = |name: &str, value: &serde_json::Value| {
        let path = tmp.path().join(name);
        std::fs::write(&path, serde_json::to_string(value).unwrap()).unwrap();
        path
    };

    // Another window: the fingerprint is not this experiment's.
    let mut other = rows.clone();
    other[0]["row"]["fingerprint"] = "0000000000000000".into();
    let out = capcard()
        .arg("report")
        .arg(&dir)
        .arg("--audit")
        .arg(write("other.json", &other))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("audited other settings"), "{stderr}");
    assert!(!dir.join("audit.json").exists());

    capcard()
        .arg("report")
        .arg(&dir)
        .arg("--audit")
        .arg(write("audit.json", rows))
        .assert()
        .success();
    let quoted = format!("held the reference in {covered} of 20 searches");
    assert!(card().contains(&quoted), "{}", card());
    assert!(card().contains("audited: held"), "{}", card());
    // Kept in the folder: a plain `report` quotes it again.
    capcard().arg("report").arg(&dir).assert().success();
    assert!(card().contains(&quoted), "{}", card());

    // A share below the stated 90% (10 of 20, 30–70%).
    let mut low = rows.clone();
    low[0]["summary"]["covered"] = 10.into();
    low[0]["summary"]["coverage_interval"] = serde_json::json!([0.3, 0.7]);
    capcard()
        .arg("report")
        .arg(&dir)
        .arg("--audit")
        .arg(write("low.json", &low))
        .assert()
        .success();
    assert!(
        card().contains("**This range is not a 90% one here:**")
            && card().contains("Read it as a 50% range"),
        "{}",
        card()
    );

    // An audit of an engine ten times faster (a twin calibrated
    // elsewhere): its searches' estimates are nowhere near this range.
    let mut faster = rows.clone();
    for seed in faster[0]["row"]["seeds"].as_array_mut().unwrap() {
        if let Some(e) = seed["estimate_rps"].as_f64() {
            seed["estimate_rps"] = (e * 10.0).into();
        }
    }
    capcard()
        .arg("report")
        .arg(&dir)
        .arg("--audit")
        .arg(write("faster.json", &faster))
        .assert()
        .success();
    assert!(
        card().contains("does not describe this card")
            && card().contains("the audit is of another engine")
            && !card().contains("borne out"),
        "{}",
        card()
    );
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
