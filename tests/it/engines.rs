//! What real engines do that a friendly server would not, reproduced on the
//! simulator and checked through the real binary: out-of-vocabulary token
//! ids answered with a 200 and an error event, and runs where every call
//! fails.

use std::path::Path;

use crate::support::{capcard, experiment_file};
use capcard::exec::read_journal;
use capcard::sim::{SimConfig, presets, start};

/// The tiny preset with a small vocabulary, like the peers' tiny-llama (8,192).
fn small_vocabulary_preset() -> &'static presets::Preset {
    let mut preset = presets::find("tiny").expect("tiny").clone();
    preset.model.vocab = 8192;
    Box::leak(Box::new(preset))
}

/// `capcard run --quiet --out OUT FILE`, off the runtime (the test's own
/// server keeps serving meanwhile).
async fn run_binary(file: &Path, out: &Path) -> std::process::Output {
    let (file, out) = (file.to_path_buf(), out.to_path_buf());
    tokio::task::spawn_blocking(move || {
        capcard()
            .args(["run", "--quiet", "--out"])
            .arg(&out)
            .arg(&file)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

/// [`run_binary`], which must succeed; its stderr (the run log).
async fn run_ok(file: &Path, out: &Path) -> String {
    let output = run_binary(file, out).await;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{stderr}");
    stderr
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
    let (tmp, file) = experiment_file(
        "small-vocab.kdl",
        &format!(
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
    );
    let out = tmp.path().join("out");
    let stderr = run_ok(&file, &out).await;
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
fn a_server_that_fails_every_call_is_stopped_by_the_preflight() {
    // Before the preflight, this sent 60 calls in three invalid runs; now
    // its first call, retried twice, says all there is to say.
    let (tmp, file) = experiment_file(
        "broken.kdl",
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
    );
    let out = tmp.path().join("out");
    let output = crate::support::run(&file, &out, &[]);
    let stderr = String::from_utf8_lossy(&output.stderr)
        .replace('│', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("refused capcard's first call, so nothing was measured (3 calls sent)"),
        "{stderr}"
    );
    assert!(
        stderr.contains("injected failure (sim fail-rate)"),
        "the server's words: {stderr}"
    );
    assert!(
        stderr.contains("failed the preflight call with a server error"),
        "{stderr}"
    );
    assert!(!out.exists(), "nothing measured, nothing written");
}

/// A server that answers every call with two tokens at once and logs each
/// prompt: its words (text; chat messages joined) or its token ids.
mod prompt_log {
    use std::sync::{Arc, Mutex};

    use axum::Router;
    use axum::extract::State;
    use axum::response::{IntoResponse, Response};
    use axum::routing::{get, post};
    use serde_json::{Value, json};

    use capcard::workload::tokenize::PromptTokenizer;

    #[derive(Default)]
    pub struct Log {
        pub prompts: Mutex<Vec<Vec<String>>>,
        /// Text prompts are split into this tokenizer's tokens, else words.
        tokenizer: Option<PromptTokenizer>,
        /// A small vocabulary: words of more than five letters are two
        /// tokens, and `POST /tokenize` (vLLM's shape) says so.
        small_vocabulary: bool,
        /// `POST /reset_prefix_cache` calls (offered with the small vocabulary).
        pub resets: std::sync::atomic::AtomicUsize,
    }

    pub async fn start(tokenizer: Option<PromptTokenizer>) -> (String, Arc<Log>) {
        start_with(Log {
            tokenizer,
            ..Log::default()
        })
        .await
    }

    pub async fn start_small_vocabulary() -> (String, Arc<Log>) {
        start_with(Log {
            small_vocabulary: true,
            ..Log::default()
        })
        .await
    }

    async fn tokenize(State(log): State<Arc<Log>>, body: axum::body::Bytes) -> Response {
        let body: Value = serde_json::from_slice(&body).unwrap_or_default();
        if !log.small_vocabulary {
            return (axum::http::StatusCode::NOT_FOUND, "no such route").into_response();
        }
        let tokens = units(&log, &body);
        axum::Json(json!({"count": tokens.len(), "tokens": tokens})).into_response()
    }

    async fn reset(State(log): State<Arc<Log>>) -> Response {
        if !log.small_vocabulary {
            return (axum::http::StatusCode::NOT_FOUND, "no such route").into_response();
        }
        log.resets.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        "ok".into_response()
    }

    async fn start_with(log: Log) -> (String, Arc<Log>) {
        let log = Arc::new(log);
        let app = Router::new()
            .route(
                "/v1/models",
                get(|| async { axum::Json(json!({"data": [{"id": "m"}]})) }),
            )
            .route("/v1/completions", post(answer))
            .route("/v1/chat/completions", post(answer))
            .route("/tokenize", post(tokenize))
            .route("/reset_prefix_cache", post(reset))
            .route(
                "/metrics",
                get(|| async { (axum::http::StatusCode::UNAUTHORIZED, "no key").into_response() }),
            )
            .with_state(Arc::clone(&log));
        let addr = capcard::serve::start(([127, 0, 0, 1], 0).into(), app)
            .await
            .expect("bind loopback")
            .detach();
        (format!("http://{addr}/v1"), log)
    }

    fn units(log: &Log, body: &Value) -> Vec<String> {
        let split = |text: &str| -> Vec<String> {
            match &log.tokenizer {
                Some(t) => t
                    .ids(text)
                    .unwrap_or_default()
                    .iter()
                    .map(u32::to_string)
                    .collect(),
                None if log.small_vocabulary => text
                    .split_whitespace()
                    .flat_map(|w| {
                        if w.len() > 5 {
                            vec![w[..3].to_string(), w[3..].to_string()]
                        } else {
                            vec![w.to_string()]
                        }
                    })
                    .collect(),
                None => text.split_whitespace().map(str::to_string).collect(),
            }
        };
        if let Some(messages) = body["messages"].as_array() {
            let text: Vec<&str> = messages
                .iter()
                .filter_map(|m| m["content"].as_str())
                .collect();
            return split(&text.join(" "));
        }
        match &body["prompt"] {
            Value::String(text) => split(text),
            Value::Array(ids) => ids.iter().map(|id| id.to_string()).collect(),
            _ => vec![],
        }
    }

    async fn answer(State(log): State<Arc<Log>>, body: axum::body::Bytes) -> Response {
        let body: Value = serde_json::from_slice(&body).unwrap_or_default();
        let prompt = units(&log, &body);
        let prompt_tokens = prompt.len();
        // The token-id probe's four-id prompts are not workload prompts.
        if body["max_tokens"] != 1 {
            log.prompts.lock().unwrap().push(prompt);
        }
        let chat = body["messages"].is_array();
        let piece = |t: &str| {
            if chat {
                json!({"choices": [{"index": 0, "delta": {"content": t}, "finish_reason": null}]})
            } else {
                json!({"choices": [{"index": 0, "text": t, "finish_reason": null}]})
            }
        };
        let usage = json!({"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 2, "total_tokens": prompt_tokens + 2}});
        let stream = format!(
            "data: {}\n\ndata: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
            piece(" a"),
            piece(" b"),
            usage
        );
        ([("content-type", "text/event-stream")], stream).into_response()
    }
}

#[cfg(feature = "tokenizer")]
fn tokenizer_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizer-small.json")
}

/// Run `kdl` through the binary twice (two invocations, each a fresh nonce).
async fn run_twice(kdl: String, dir: &Path) {
    let file = dir.join("e.kdl");
    std::fs::write(&file, kdl).unwrap();
    for i in 0..2 {
        run_ok(&file, &dir.join(format!("out{i}"))).await;
    }
}

#[cfg(feature = "tokenizer")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_two_synthetic_prompts_share_their_first_32_tokens_even_across_invocations() {
    for api in ["chat", "completions"] {
        for tokenizer in [false, true] {
            let loaded = tokenizer.then(|| {
                capcard::workload::tokenize::PromptTokenizer::load(&tokenizer_path()).unwrap()
            });
            let (url, log) = prompt_log::start(loaded).await;
            let tmp = tempfile::tempdir().unwrap();
            let tokenizer_line = if tokenizer {
                format!("tokenizer \"{}\"", tokenizer_path().display())
            } else {
                String::new()
            };
            let kdl = format!(
                r#"
experiment "no-reuse" {{ seed 9 }}
target "t" {{
    endpoint "{url}"
    api {api}
    metrics #false
    {tokenizer_line}
}}
workload "w" {{
    input-tokens uniform min=40 max=120
    output-tokens fixed 2
}}
closed {{
    concurrency 1 8
    requests 100
}}
"#
            );
            run_twice(kdl, tmp.path()).await;
            let prompts = log.prompts.lock().unwrap().clone();
            assert!(prompts.len() >= 400, "{api} {tokenizer}: {}", prompts.len());
            let mut seen = std::collections::HashSet::new();
            for p in &prompts {
                assert!(p.len() >= 32, "{api} tokenizer={tokenizer}: {p:?}");
                assert!(
                    seen.insert(p[..32].to_vec()),
                    "{api} tokenizer={tokenizer}: a repeated 32-token head {:?}",
                    &p[..32]
                );
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_prefix_shares_exactly_the_declared_tokens() {
    let (url, log) = prompt_log::start(None).await;
    let tmp = tempfile::tempdir().unwrap();
    let kdl = format!(
        r#"
experiment "prefix" {{ seed 9 }}
target "t" {{
    endpoint "{url}"
    api completions
    metrics #false
}}
workload "w" {{
    input-tokens fixed 128
    output-tokens fixed 2
    shared-prefix tokens=64 groups=2
}}
closed {{
    concurrency 4
    requests 60
}}
"#
    );
    run_twice(kdl, tmp.path()).await;
    let prompts = log.prompts.lock().unwrap().clone();
    let common = |a: &[String], b: &[String]| a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let (mut within, mut across) = (0, 0);
    for (i, a) in prompts.iter().enumerate() {
        for b in &prompts[i + 1..] {
            let n = common(a, b);
            if n >= 64 {
                within += 1;
                assert!(n < 72, "only the declared 64 tokens are shared, not {n}");
            } else {
                across += 1;
                assert!(n < 32, "distinct groups or invocations share {n} tokens");
            }
        }
    }
    assert!(within > 0 && across > 0, "{within} {across}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_prompts_are_sized_exactly_with_the_servers_tokenize_endpoint() {
    let (url, log) = prompt_log::start_small_vocabulary().await;
    let (tmp, file) = experiment_file(
        "e.kdl",
        &format!(
            r#"
experiment "calibrated" {{ seed 4 }}
target "t" {{
    endpoint "{url}"
    api chat
}}
workload "w" {{
    input-tokens uniform min=20 max=400
    output-tokens fixed 2
}}
closed {{
    concurrency 2 4
    requests 50
}}
"#
        ),
    );
    let out = tmp.path().join("out");
    let stderr = run_ok(&file, &out).await;
    assert!(
        stderr.contains("words are one token each by POST"),
        "{stderr}"
    );
    let requests = requests_in(&out);
    assert!(requests.len() >= 100);
    for r in &requests {
        assert_eq!(
            r.prompt_tokens_reported,
            Some(r.prompt_tokens_requested),
            "the server counts exactly what was planned: {r:?}"
        );
    }
    let card = std::fs::read_to_string(out.join("t--w.md")).unwrap();
    assert!(
        card.contains("words the server's tokenize endpoint counts as one token each"),
        "the card says how prompts were sized"
    );
    assert!(
        card.contains("| Server telemetry | off: GET ")
            && card.contains("was refused (401 Unauthorized)"),
        "the card says why there is no telemetry"
    );
    // The server offers a prefix-cache reset: found once, used before each run.
    assert_eq!(log.resets.load(std::sync::atomic::Ordering::SeqCst), 1 + 2);
    assert!(
        card.contains("emptied before every run (POST /reset_prefix_cache)"),
        "{card}"
    );
}
