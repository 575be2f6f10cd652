//! The simulator playing servers stricter than vLLM, over HTTP: the status,
//! body and `Retry-After` a client negotiating the request dialect must
//! read, and the call counters its tests count with. Each test starts its
//! own `tiny` engine on an ephemeral loopback port (one, through the CLI).

use std::time::Duration;

use capcard::sim::{RateLimit, SimConfig, SimDialect, SimServer, presets, start};
use predicates::prelude::*;
use serde_json::{Value, json};

use super::support::words;
use crate::support::SimChild;

async fn tiny_with(dialect: SimDialect) -> SimServer {
    let preset = presets::find("tiny").expect("tiny preset");
    let config = SimConfig::new(preset).with_seed(3).with_dialect(dialect);
    start(config, "127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("sim starts")
}

/// POSTs `body` as written (key order matters to the refusals) to
/// `/v1/{path}`; the status, the `Retry-After` header and the body.
async fn post_raw(
    client: &crate::support::web::Client,
    base_url: &str,
    path: &str,
    body: &str,
) -> (u16, Option<String>, String) {
    let resp = client
        .post(format!("{base_url}/{path}"))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let retry_after = resp
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (status, retry_after, resp.text().await.unwrap())
}

#[tokio::test]
async fn strict_refuses_unknown_fields_in_openai_words() {
    let server = tiny_with(SimDialect::vllm().strict()).await;
    let client = crate::support::web::Client::new();
    let url = server.base_url();
    let body = r#"{"model":"sim/tiny","messages":[{"role":"user","content":"hi"}],"ignore_eos":true,"max_tokens":2,"min_tokens":1}"#;
    let (status, _, text) = post_raw(&client, &url, "chat/completions", body).await;
    assert_eq!(status, 400);
    assert_eq!(
        text,
        r#"{"error":{"message":"Unrecognized request argument supplied: ignore_eos, min_tokens","type":"invalid_request_error","param":null,"code":null}}"#
    );
    // Only OpenAI's fields: served.
    let body = r#"{"model":"sim/tiny","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":2,"temperature":0,"stream_options":null}"#;
    let (status, _, text) = post_raw(&client, &url, "chat/completions", body).await;
    assert_eq!(status, 200, "{text}");
    // The completions endpoint has its own list: `echo` is OpenAI's there.
    let body = r#"{"prompt":"hi","max_tokens":2,"echo":false,"best_of":1,"priority":0}"#;
    let (status, _, text) = post_raw(&client, &url, "completions", body).await;
    assert_eq!(status, 400);
    assert!(text.contains("supplied: priority\""), "{text}");
    assert_eq!(server.calls_received(), 3);
    assert_eq!(server.field_refused_calls(), 2);
    assert_eq!(server.rate_limited_calls(), 0);
    server.shutdown().await;
}

#[tokio::test]
async fn refused_stream_options_is_an_axum_serde_422() {
    let server = tiny_with(SimDialect::vllm().refusing("stream_options")).await;
    let client = crate::support::web::Client::new();
    let body = r#"{"model":"sim/tiny","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;
    let (status, _, text) = post_raw(&client, &server.base_url(), "chat/completions", body).await;
    assert_eq!(status, 422);
    let parsed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(parsed["error_type"], "validation");
    let message = parsed["error"].as_str().unwrap();
    let prefix = "Failed to deserialize the JSON body into the target type: unknown field `stream_options`, expected one of `model`, `messages`, `max_tokens`, `temperature`, `stream` at line 1 column ";
    let column = message
        .strip_prefix(prefix)
        .unwrap_or_else(|| panic!("{message}"));
    assert!(column.parse::<u32>().is_ok_and(|c| c > 0), "{message}");
    // Without it the same stream is served, and other fields pass: not strict.
    let body = r#"{"messages":[{"role":"user","content":"hi"}],"stream":true,"max_tokens":2,"ignore_eos":true}"#;
    let (status, _, text) = post_raw(&client, &server.base_url(), "chat/completions", body).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    server.shutdown().await;
}

#[tokio::test]
async fn refused_max_tokens_points_to_max_completion_tokens() {
    let server = tiny_with(SimDialect::vllm().refusing("max_tokens")).await;
    let client = crate::support::web::Client::new();
    let url = server.base_url();
    let body = r#"{"messages":[{"role":"user","content":"hi"}],"max_tokens":3}"#;
    let (status, _, text) = post_raw(&client, &url, "chat/completions", body).await;
    assert_eq!(status, 400);
    assert_eq!(
        text,
        r#"{"error":{"message":"Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.","type":"invalid_request_error","param":"max_tokens","code":"unsupported_parameter"}}"#
    );
    let body = r#"{"messages":[{"role":"user","content":"hi"}],"max_completion_tokens":3,"ignore_eos":true}"#;
    let (status, _, text) = post_raw(&client, &url, "chat/completions", body).await;
    assert_eq!(status, 200, "{text}");
    let parsed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(parsed["usage"]["completion_tokens"], 3);
    server.shutdown().await;
}

/// An ignored length field does not bound the output: the chat default,
/// what the context leaves, does. The prompt fills all but 48 tokens of
/// tiny's 2,048-token window, so the run is short.
#[tokio::test]
async fn an_ignored_length_field_runs_to_the_default_length() {
    let call = json!({
        "messages": [{"role": "user", "content": words(2000, "w")}],
        "max_completion_tokens": 4,
        "ignore_eos": true,
    });
    let mut completion_tokens = Vec::new();
    for dialect in [
        SimDialect::vllm(),
        SimDialect::vllm().ignoring("max_completion_tokens"),
    ] {
        let server = tiny_with(dialect).await;
        let resp = crate::support::web::Client::new()
            .post(format!("{}/chat/completions", server.base_url()))
            .json(&call)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["usage"]["prompt_tokens"], 2000);
        completion_tokens.push(body["usage"]["completion_tokens"].clone());
        server.shutdown().await;
    }
    assert_eq!(completion_tokens, [json!(4), json!(48)]);
}

#[tokio::test]
async fn a_burst_past_the_rate_limit_gets_one_429_per_extra_call() {
    // One token back every 20 s: none comes back during the burst.
    let limit_per_min = 3;
    let limit = RateLimit::per_minute(limit_per_min).unwrap();
    let server = tiny_with(SimDialect::vllm().with_rate_limit(limit)).await;
    let client = crate::support::web::Client::new();
    let body = r#"{"prompt":"hi","max_tokens":1}"#;
    let mut refusals = 0;
    for _ in 0..limit_per_min + 5 {
        let (status, retry_after, text) =
            post_raw(&client, &server.base_url(), "completions", body).await;
        match status {
            200 => {}
            429 => {
                refusals += 1;
                let retry_after: u64 = retry_after.expect("Retry-After").parse().unwrap();
                assert!(retry_after >= 1);
                let parsed: Value = serde_json::from_str(&text).unwrap();
                assert_eq!(parsed["error"]["code"], "rate_limit_exceeded");
                assert_eq!(parsed["error"]["type"], "requests");
                let message = parsed["error"]["message"].as_str().unwrap();
                assert!(
                    message.starts_with(
                        "Rate limit reached for requests per min (RPM): Limit 3, Used 3, Requested 1. Please try again in "
                    ),
                    "{message}"
                );
            }
            other => panic!("HTTP {other}: {text}"),
        }
    }
    assert_eq!(refusals, 5);
    assert_eq!(server.calls_received(), u64::from(limit_per_min) + 5);
    assert_eq!(server.rate_limited_calls(), 5);
    assert_eq!(server.calls_admitted(), u64::from(limit_per_min));
    // Only the generation calls are limited.
    let health = client
        .get(format!("http://{}/health", server.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    server.shutdown().await;
}

/// A gateway checks the quota before it reads the body: a refused call
/// spends a token too.
#[tokio::test]
async fn the_rate_limit_comes_before_the_field_check() {
    let limit = RateLimit::per_minute(2).unwrap();
    let server = tiny_with(SimDialect::vllm().strict().with_rate_limit(limit)).await;
    let client = crate::support::web::Client::new();
    let body = r#"{"prompt":"hi","ignore_eos":true}"#;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let (status, _, _) = post_raw(&client, &server.base_url(), "completions", body).await;
        statuses.push(status);
    }
    assert_eq!(statuses, [400, 400, 429]);
    assert_eq!(server.field_refused_calls(), 2);
    assert_eq!(server.rate_limited_calls(), 1);
    server.shutdown().await;
}

#[tokio::test]
async fn a_rate_limit_of_zero_is_refused_at_start() {
    let preset = presets::find("tiny").expect("tiny preset");
    let dialect = SimDialect {
        rate_limit: Some(RateLimit {
            requests: 0,
            per: Duration::from_secs(60),
        }),
        ..SimDialect::default()
    };
    let config = SimConfig::new(preset).with_dialect(dialect);
    let err = start(config, "127.0.0.1:0".parse().expect("addr"))
        .await
        .err()
        .expect("refused");
    assert!(err.to_string().contains("0 requests"), "{err}");
}

#[test]
fn sim_rejects_a_bad_rate_limit() {
    crate::support::capcard()
        .args(["sim", "--preset", "tiny", "--rate-limit", "30/hour"])
        .assert()
        .code(1)
        .stderr(
            predicates::str::contains("--rate-limit").and(predicates::str::contains("e.g. 30/min")),
        );
}

/// The flags of `capcard sim` reach the server.
#[tokio::test]
async fn sim_flags_play_the_dialect() {
    let sim = SimChild::start(&[
        "--preset",
        "tiny",
        "--strict",
        "--refuse-field",
        "max_tokens",
        "--rate-limit",
        "3/min",
        "--ignore-field",
        "ignore_eos",
    ]);
    let client = crate::support::web::Client::new();
    let url = format!("{}/v1", sim.base_url());
    let mut answers = Vec::new();
    for body in [
        r#"{"messages":[{"content":"hi"}],"min_tokens":1}"#,
        r#"{"messages":[{"content":"hi"}],"max_tokens":1}"#,
        r#"{"messages":[{"content":"hi"}],"max_completion_tokens":1,"ignore_eos":true}"#,
        r#"{"messages":[{"content":"hi"}],"max_completion_tokens":1}"#,
    ] {
        let (status, retry_after, text) = post_raw(&client, &url, "chat/completions", body).await;
        answers.push((status, retry_after.is_some(), text));
    }
    drop(sim);
    let statuses: Vec<(u16, bool)> = answers.iter().map(|(s, r, _)| (*s, *r)).collect();
    assert_eq!(
        statuses,
        [(400, false), (400, false), (200, false), (429, true)],
        "{answers:?}"
    );
    assert!(answers[0].2.contains("supplied: min_tokens\""));
    assert!(answers[1].2.contains("unsupported_parameter"));
}
