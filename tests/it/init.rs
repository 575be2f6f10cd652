//! `capcard init URL`: the file it writes from what a server says must pass
//! `capcard check` and run as it is (here with its durations shortened).

use crate::support::{capcard, experiment_file};
use capcard::sim::{SimConfig, SimDialect, SimServer, presets, start};

fn serve(dialect: SimDialect) -> (tokio::runtime::Runtime, SimServer) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let preset = presets::find("tiny").expect("tiny preset");
    let config = SimConfig::new(preset).with_seed(3).with_dialect(dialect);
    let server = runtime
        .block_on(start(config, "127.0.0.1:0".parse().unwrap()))
        .unwrap();
    (runtime, server)
}

#[test]
fn init_writes_an_experiment_that_checks_and_runs() {
    let (_runtime, server) = serve(SimDialect::vllm());
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("mine.kdl");
    // The bare URL: `/v1` is found.
    let root = format!("http://{}", server.addr);
    let output = capcard()
        .args(["init", &root, "--out"])
        .arg(&file)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(stderr.contains("next: capcard run"), "{stderr}");
    let text = std::fs::read_to_string(&file).unwrap();
    for expected in [
        &format!("endpoint \"{root}/v1\"") as &str,
        "model \"sim/tiny\"",
        "//   context window: 2048 tokens, prompt + output (GET /v1/models max_model_len)",
        "runtime \"vLLM (from its /metrics)\"",
        "//   request dialect: `max_completion_tokens`, `ignore_eos` + `min_tokens`, `stream_options`",
        "// A DRAFT SLO",
        "input-tokens lognormal median=256 sigma=0.6 min=16 max=1024",
    ] {
        assert!(text.contains(expected), "{expected}\n{text}");
    }
    assert!(
        !text.contains("force-length"),
        "the server takes the extensions"
    );
    capcard().arg("check").arg(&file).assert().success();

    // It runs as written; only its durations are shortened for the test.
    let short = text
        .replace("concurrency 1 2 4 8 16 32", "concurrency 1 4")
        .replace("duration \"30s\"", "duration \"2s\"")
        .replace("warmup \"5s\"", "warmup \"0s\"")
        .replace("search min=0.1 max=64 precision=\"10%\"", "rates 2")
        .replace("duration \"60s\"", "duration \"2s\"")
        .replace("warmup \"10s\"", "warmup \"0s\"")
        .replace("budget \"5m\"", "budget \"0s\"");
    let short_file = tmp.path().join("short.kdl");
    std::fs::write(&short_file, short).unwrap();
    let out = tmp.path().join("out");
    let output = capcard()
        .args(["run", "--quiet", "--out"])
        .arg(&out)
        .arg(&short_file)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let card = std::fs::read_to_string(out.join("tiny--chat.md")).unwrap();
    assert!(card.contains("| Request dialect |"), "{card}");
    assert!(
        card.contains("| Runtime | vLLM (from its /metrics) |"),
        "{card}"
    );

    // An existing file is never overwritten.
    capcard()
        .args(["init", &root, "--out"])
        .arg(&file)
        .assert()
        .code(1);
}

#[test]
fn init_writes_the_settings_a_strict_server_needs_with_its_words() {
    let (_runtime, server) = serve(SimDialect::vllm().strict());
    let output = capcard()
        .args(["init", &server.base_url()])
        .output()
        .unwrap();
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("// The server refuses `ignore_eos`/`min_tokens`: HTTP 400 Bad Request: \"Unrecognized request argument supplied: min_tokens, ignore_eos\"\n    // Outputs may end before their planned length; the card counts them.\n    force-length #false\n"),
        "{text}"
    );
    let (_tmp, file) = experiment_file("strict.kdl", &text);
    // The file's preflight is accepted by the same server.
    capcard()
        .args(["check", "--probe"])
        .arg(&file)
        .assert()
        .success();
}

#[test]
fn init_says_when_nothing_answers() {
    let port = crate::support::free_port();
    let output = capcard()
        .args(["init", &format!("http://127.0.0.1:{port}/v1")])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("does not answer as an OpenAI-compatible server"),
        "{stderr}"
    );
}
