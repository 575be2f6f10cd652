//! What real engines do that a friendly server would not, reproduced on the
//! simulator and checked through the real binary: out-of-vocabulary token
//! ids answered with a 200 and an error event, and runs where every call
//! fails.

use std::path::Path;

use assert_cmd::Command;
use capcard::exec::read_journal;
use capcard::sim::{SimConfig, presets, start};

fn capcard() -> Command {
    Command::cargo_bin("capcard").expect("binary built")
}

/// The tiny preset with a small vocabulary, like the peers' tiny-llama (8,192).
fn small_vocabulary_preset() -> &'static presets::Preset {
    let mut preset = presets::find("tiny").expect("tiny").clone();
    preset.model.vocab = 8192;
    Box::leak(Box::new(preset))
}

fn requests_in(dir: &Path) -> Vec<capcard::exec::RequestRecord> {
    let mut all = Vec::new();
    for entry in std::fs::read_dir(dir.join("runs")).unwrap() {
        let journal = read_journal(&entry.unwrap().path()).unwrap();
        all.extend(journal.requests);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_ids_stay_inside_a_small_vocabulary() {
    let server = start(
        SimConfig::new(small_vocabulary_preset()).with_seed(1),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("small-vocab.kdl");
    std::fs::write(
        &file,
        format!(
            r#"
experiment "small-vocab" {{ seed 3 }}
target "t" {{
    endpoint "{}"
    api completions
    metrics #false
}}
workload "w" {{
    input-tokens uniform min=64 max=256
    output-tokens fixed 8
}}
closed {{
    concurrency 4
    requests 200
}}
"#,
            server.base_url()
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let output = tokio::task::spawn_blocking({
        let (file, out) = (file.clone(), out.clone());
        move || {
            capcard()
                .args(["run", "--quiet", "--out"])
                .arg(&out)
                .arg(&file)
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("prompts as token ids 1000..=7781"),
        "the probe found the vocabulary: {stderr}"
    );
    let requests = requests_in(&out);
    assert!(requests.len() >= 200);
    let failed = requests.iter().filter(|r| !r.is_ok()).count();
    assert!(
        failed * 100 < requests.len(),
        "{failed} of {} failed",
        requests.len()
    );
    for r in &requests {
        assert_eq!(
            r.prompt_tokens_reported,
            Some(r.prompt_tokens_requested),
            "token-id prompts are exact: {r:?}"
        );
    }
    server.shutdown().await;
}

#[test]
fn a_run_where_every_call_fails_is_invalid_and_exits_4() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("broken.kdl");
    std::fs::write(
        &file,
        r#"
experiment "broken" { seed 3 }
target "t" { sim tiny fail-rate=1.0; }
workload "w" {
    input-tokens fixed 32
    output-tokens fixed 8
}
slo "s" { ttft p50="1s"; }
closed {
    concurrency 1 2
    requests 20
}
open {
    arrival poisson
    rates 5
    requests 20
}
"#,
    )
    .unwrap();
    let out = tmp.path().join("out");
    let output = capcard()
        .args(["run", "--quiet", "--out"])
        .arg(&out)
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(4), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("warning: 3 run(s) invalid"),
        "one warning line at the end: {stderr}"
    );
    let card = std::fs::read_to_string(out.join("t--w.md")).expect("the card is still written");
    let status = card
        .lines()
        .find(|l| l.starts_with("| Status |"))
        .unwrap_or_default();
    assert!(status.contains("with invalid runs"), "{status}");
    let reading = card
        .split("## Reading")
        .nth(1)
        .and_then(|r| r.lines().find(|l| !l.trim().is_empty()))
        .unwrap_or_default();
    assert!(
        reading.starts_with(
            "**3 of 3 runs are invalid: 60 of their 60 measured calls failed (http-status 60)"
        ),
        "the Reading starts with it: {reading}"
    );
    let results: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("results.json")).unwrap()).unwrap();
    let card = &results["cards"][0];
    assert!(card["crossp"].is_null());
    assert!(card["cr_closed"].is_null());
    assert!(card["cr_open"][0]["rps"].is_null());
    assert_eq!(card["open"][0]["invalid"], true);
}
