//! The simulator over HTTP: OpenAI framing, errors, metrics that move with
//! load, prefix-cache hits, client disconnects and injected faults. Every test
//! starts its own `tiny` engine on an ephemeral loopback port.

use std::time::Duration;

use capcard::config::{Fraction, SimFaults};
use capcard::sim::SimServer;
use capcard::sim::metrics::sample;
use serde_json::{Value, json};

use super::support::{overload_tiny, tiny_sim as tiny, words};

/// `data:` payloads of an SSE body, in order.
fn sse_payloads(body: &str) -> Vec<String> {
    assert!(
        body.ends_with("\n\n"),
        "events end with a blank line: {body:?}"
    );
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            e.strip_prefix("data: ")
                .unwrap_or_else(|| panic!("not a data event: {e:?}"))
                .to_string()
        })
        .collect()
}

async fn metrics_text(client: &crate::support::web::Client, server: &SimServer) -> String {
    let url = format!("http://{}/metrics", server.addr);
    client.get(url).send().await.unwrap().text().await.unwrap()
}

#[tokio::test]
async fn chat_stream_has_role_tokens_usage_and_done() {
    let server = tiny(SimFaults::default()).await;
    let client = crate::support::web::Client::new();
    let resp = client
        .post(format!("{}/chat/completions", server.base_url()))
        .json(&json!({
            "model": "sim/tiny",
            "messages": [
                {"role": "system", "content": words(10, "sys")},
                {"role": "user", "content": words(30, "user")}
            ],
            "max_tokens": 20,
            "ignore_eos": true,
            "stream": true,
            "stream_options": {"include_usage": true}
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let payloads = sse_payloads(&resp.text().await.unwrap());
    assert_eq!(payloads.last().map(String::as_str), Some("[DONE]"));
    let events: Vec<Value> = payloads[..payloads.len() - 1]
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    // role chunk + 20 tokens + usage chunk
    assert_eq!(events.len(), 22);
    assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
    let contents: Vec<&Value> = events[1..21]
        .iter()
        .map(|e| &e["choices"][0]["delta"]["content"])
        .collect();
    assert!(contents.iter().all(|c| {
        c.as_str()
            .is_some_and(|s| s.split_whitespace().count() == 1)
    }));
    assert!(
        events[1..20]
            .iter()
            .all(|e| e["choices"][0]["finish_reason"].is_null())
    );
    assert_eq!(events[20]["choices"][0]["finish_reason"], "length");
    let usage = &events[21]["usage"];
    assert_eq!(usage["prompt_tokens"], 40, "content words only");
    assert_eq!(usage["completion_tokens"], 20);
    assert_eq!(usage["total_tokens"], 60);
    assert_eq!(events[21]["choices"], json!([]));
    assert!(
        events
            .iter()
            .all(|e| e["object"] == "chat.completion.chunk" && e["model"] == "sim/tiny")
    );
    server.shutdown().await;
}

#[tokio::test]
async fn completions_accept_token_ids_and_text() {
    let server = tiny(SimFaults::default()).await;
    let client = crate::support::web::Client::new();
    let ids: Vec<u32> = (100..150).collect();
    let body = client
        .post(format!("{}/completions", server.base_url()))
        .json(
            &json!({"prompt": ids, "max_tokens": 32, "ignore_eos": true, "stream": true,
                      "stream_options": {"include_usage": true}}),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let payloads = sse_payloads(&body);
    let events: Vec<Value> = payloads[..payloads.len() - 1]
        .iter()
        .map(|p| serde_json::from_str(p).unwrap())
        .collect();
    assert_eq!(events.len(), 33, "32 tokens + usage");
    assert!(
        events[..32]
            .iter()
            .all(|e| e["object"] == "text_completion")
    );
    assert_eq!(events[31]["choices"][0]["finish_reason"], "length");
    assert_eq!(events[32]["usage"]["prompt_tokens"], 50);
    assert_eq!(events[32]["usage"]["completion_tokens"], 32);

    // Non-streaming, text prompt: the text holds one word per token.
    let full: Value = client
        .post(format!("{}/completions", server.base_url()))
        .json(&json!({"prompt": words(17, "w"), "max_tokens": 9, "ignore_eos": true}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(full["object"], "text_completion");
    assert_eq!(full["usage"]["prompt_tokens"], 17);
    assert_eq!(full["usage"]["completion_tokens"], 9);
    assert_eq!(
        full["choices"][0]["text"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .count(),
        9
    );
    assert_eq!(full["choices"][0]["finish_reason"], "length");
    server.shutdown().await;
}

#[tokio::test]
async fn models_and_health() {
    let server = tiny(SimFaults::default()).await;
    let client = crate::support::web::Client::new();
    let models: Value = client
        .get(format!("{}/models", server.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "sim/tiny");
    assert_eq!(models["data"][0]["max_model_len"], 2048);
    let health = client
        .get(format!("http://{}/health", server.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    server.shutdown().await;
}

#[tokio::test]
async fn adapters_are_served_beside_the_base_model_and_priority_is_accepted() {
    let preset = capcard::sim::presets::find("tiny").expect("tiny preset");
    let config = capcard::sim::SimConfig::new(preset)
        .with_adapters(vec!["chat-lora".into(), "rag-lora".into()]);
    let server = capcard::sim::start(config, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let client = crate::support::web::Client::new();
    let models: Value = client
        .get(format!("{}/models", server.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, vec!["sim/tiny", "chat-lora", "rag-lora"]);
    assert_eq!(models["data"][1]["parent"], "sim/tiny");
    let ask = |model: &str| {
        client
            .post(format!("{}/completions", server.base_url()))
            .json(
                &json!({"model": model, "prompt": words(8, "p"), "max_tokens": 4, "priority": -1}),
            )
            .send()
    };
    let answer: Value = ask("rag-lora").await.unwrap().json().await.unwrap();
    assert_eq!(
        answer["model"], "rag-lora",
        "answers name the adapter asked for"
    );
    assert_eq!(answer["usage"]["completion_tokens"], 4);
    assert_eq!(ask("other-lora").await.unwrap().status(), 404);
    server.shutdown().await;
}

#[tokio::test]
async fn malformed_requests_get_openai_style_errors() {
    let server = tiny(SimFaults::default()).await;
    let client = crate::support::web::Client::new();
    let url = format!("{}/chat/completions", server.base_url());
    let cases: Vec<(&str, String, u16)> = vec![
        ("not json", "{\"messages\": [".to_string(), 400),
        ("missing messages", json!({"max_tokens": 3}).to_string(), 400),
        ("negative max_tokens", json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": -1}).to_string(), 400),
        ("empty prompt", json!({"messages": [{"role": "user", "content": "   "}]}).to_string(), 400),
        ("too long", json!({"messages": [{"role": "user", "content": words(2000, "x")}], "max_tokens": 100}).to_string(), 400),
        ("min > max", json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "min_tokens": 5}).to_string(), 400),
        ("unknown model", json!({"model": "gpt-9", "messages": [{"role": "user", "content": "hi"}]}).to_string(), 404),
    ];
    for (name, body, status) in cases {
        let resp = client
            .post(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), status, "{name}");
        let err: Value = resp.json().await.unwrap();
        assert_eq!(err["error"]["type"], "invalid_request_error", "{name}");
        assert!(
            err["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{name}"
        );
    }
    let resp = client
        .post(format!("{}/completions", server.base_url()))
        .json(&json!({"prompt": [5, 999_999], "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let missing = client
        .get(format!("{}/nope", server.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    // The server is still fine.
    let ok = client
        .post(&url)
        .json(&json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    server.shutdown().await;
}

#[tokio::test]
async fn metrics_move_with_load_and_disconnects_free_the_engine() {
    let server = tiny(SimFaults::default()).await;
    let client = crate::support::web::Client::new();
    let idle = metrics_text(&client, &server).await;
    assert_eq!(sample(&idle, "vllm:num_requests_running"), Some(0.0));
    assert_eq!(sample(&idle, "vllm:num_requests_waiting"), Some(0.0));

    // 48 long streams on a 32-seat engine: 16 must wait.
    let streams = overload_tiny(&client, &server).await;
    let mut loaded = String::new();
    for _ in 0..200 {
        loaded = metrics_text(&client, &server).await;
        if sample(&loaded, "vllm:num_requests_running") == Some(32.0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        sample(&loaded, "vllm:num_requests_running"),
        Some(32.0),
        "{loaded}"
    );
    assert_eq!(sample(&loaded, "vllm:num_requests_waiting"), Some(16.0));
    assert!(sample(&loaded, "vllm:kv_cache_usage_perc").unwrap() > 0.0);
    assert!(sample(&loaded, "vllm:generation_tokens_total").unwrap() > 0.0);

    // Clients go away: the engine must drop their work, not finish it.
    drop(streams);
    let mut after = String::new();
    for _ in 0..200 {
        after = metrics_text(&client, &server).await;
        if sample(&after, "vllm:num_requests_running") == Some(0.0)
            && sample(&after, "vllm:num_requests_waiting") == Some(0.0)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        sample(&after, "vllm:num_requests_running"),
        Some(0.0),
        "{after}"
    );
    assert_eq!(sample(&after, "vllm:num_requests_waiting"), Some(0.0));
    assert_eq!(sample(&after, "vllm:kv_cache_usage_perc"), Some(0.0));
    assert!(after.contains(
        "vllm:request_success_total{model_name=\"sim/tiny\",finished_reason=\"abort\"} 48"
    ));
    server.shutdown().await;
}

#[tokio::test]
async fn shared_prefix_repeat_hits_the_prefix_cache() {
    let server = tiny(SimFaults::default()).await;
    let client = crate::support::web::Client::new();
    let prefix = words(256, "system");
    for i in 0..2 {
        let resp = client
            .post(format!("{}/completions", server.base_url()))
            .json(&json!({"prompt": format!("{prefix} {}", words(8, &format!("q{i}-"))), "max_tokens": 1}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        let _ = resp.text().await.unwrap();
    }
    let text = metrics_text(&client, &server).await;
    assert_eq!(
        sample(&text, "vllm:prefix_cache_queries_total"),
        Some(2.0 * 264.0)
    );
    assert_eq!(
        sample(&text, "vllm:prefix_cache_hits_total"),
        Some(256.0),
        "{text}"
    );
    assert_eq!(sample(&text, "vllm:prompt_tokens_total"), Some(2.0 * 264.0));
    server.shutdown().await;
}

#[tokio::test]
async fn injected_failures_cuts_and_stalls() {
    let chat = json!({"messages": [{"role": "user", "content": "hello there"}], "max_tokens": 8,
                      "ignore_eos": true, "stream": true});

    let failing = tiny(SimFaults {
        fail_rate: Fraction(1.0),
        ..SimFaults::default()
    })
    .await;
    let resp = crate::support::web::Client::new()
        .post(format!("{}/chat/completions", failing.base_url()))
        .json(&chat)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 500);
    let err: Value = resp.json().await.unwrap();
    assert!(
        err["error"]["message"]
            .as_str()
            .unwrap()
            .contains("injected")
    );
    failing.shutdown().await;

    let cutting = tiny(SimFaults {
        cut_rate: Fraction(1.0),
        ..SimFaults::default()
    })
    .await;
    let resp = crate::support::web::Client::new()
        .post(format!("{}/chat/completions", cutting.base_url()))
        .json(&chat)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.is_err(), "the body breaks off mid-stream");
    cutting.shutdown().await;

    let stalling = tiny(SimFaults {
        stall: Some(Duration::from_millis(20)),
        ..SimFaults::default()
    })
    .await;
    let body = crate::support::web::Client::new()
        .post(format!("{}/chat/completions", stalling.base_url()))
        .json(&chat)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let payloads = sse_payloads(&body);
    assert_eq!(
        payloads.len(),
        1 + 8 + 1,
        "role, 8 tokens, [DONE]: a stall loses nothing"
    );
    stalling.shutdown().await;
}

/// Output tokens per second of `clients` closed-loop clients, each sending
/// the next non-streamed request (8 prompt tokens, 96 out) as soon as the
/// last returns, for `window`; and the requests completed.
async fn closed_loop_throughput(
    server: &SimServer,
    clients: usize,
    window: Duration,
) -> (f64, u64, u64) {
    let client = crate::support::web::Client::new();
    let url = format!("{}/completions", server.base_url());
    let started = std::time::Instant::now();
    let deadline = started + window;
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let (client, url) = (client.clone(), url.clone());
            tokio::spawn(async move {
                let (mut tokens, mut requests) = (0u64, 0u64);
                while std::time::Instant::now() < deadline {
                    let body = json!({"prompt": words(8, &format!("c{c}r{requests}-")), "max_tokens": 96, "ignore_eos": true});
                    let answer: Value = client.post(&url).json(&body).send().await.unwrap().json().await.unwrap();
                    tokens += answer["usage"]["completion_tokens"].as_u64().unwrap();
                    requests += 1;
                }
                (tokens, requests)
            })
        })
        .collect();
    let (mut tokens, mut requests) = (0, 0);
    for t in tasks {
        let (n, r) = t.await.unwrap();
        tokens += n;
        requests += r;
    }
    (
        tokens as f64 / started.elapsed().as_secs_f64(),
        tokens,
        requests,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_serve_twice_the_saturated_throughput_of_one() {
    use capcard::config::SimRouter;
    let preset = capcard::sim::presets::find("tiny").expect("tiny preset");
    // 96 clients: 32 seats on one replica, so it is saturated either way.
    let window = Duration::from_millis(1500);
    let one = capcard::sim::start(
        capcard::sim::SimConfig::new(preset).with_seed(1),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let (x1, _, _) = closed_loop_throughput(&one, 96, window).await;
    one.shutdown().await;
    let two = capcard::sim::start(
        capcard::sim::SimConfig::new(preset)
            .with_seed(1)
            .with_replicas(2)
            .with_router(SimRouter::LeastLoaded),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let (x2, tokens, requests) = closed_loop_throughput(&two, 96, window).await;
    let ratio = x2 / x1;
    eprintln!("tiny, 96 closed-loop clients: 1 replica {x1:.0} tok/s, 2 replicas {x2:.0} tok/s");
    assert!(
        (1.7..2.3).contains(&ratio),
        "{x1:.0} vs {x2:.0} tok/s: ×{ratio:.2}"
    );
    // `/metrics` adds the replicas up.
    let client = crate::support::web::Client::new();
    let text = metrics_text(&client, &two).await;
    assert_eq!(
        sample(&text, "vllm:generation_tokens_total"),
        Some(tokens as f64)
    );
    assert_eq!(
        sample(&text, "vllm:prompt_tokens_total"),
        Some(8.0 * requests as f64)
    );
    assert_eq!(
        sample(&text, "vllm:e2e_request_latency_seconds_count"),
        Some(requests as f64)
    );
    assert_eq!(sample(&text, "vllm:num_requests_running"), Some(0.0));
    assert_eq!(sample(&text, "vllm:kv_cache_usage_perc"), Some(0.0));
    // Both replicas served about half.
    let each = two.replica_metrics().await.unwrap();
    assert_eq!(each.len(), 2);
    for m in &each {
        let share = m.generation_tokens as f64 / tokens as f64;
        assert!((0.4..0.6).contains(&share), "{share}");
    }
    two.shutdown().await;
}

#[tokio::test]
async fn prefix_affinity_sends_a_shared_prefix_back_to_the_replica_that_cached_it() {
    use capcard::config::SimRouter;
    let preset = capcard::sim::presets::find("tiny").expect("tiny preset");
    let prefix = words(256, "system");
    // Four requests in turn sharing 256 prompt tokens: affinity keeps them
    // on one replica (3 repeats hit), round-robin alternates (2 hit).
    for (router, hits) in [
        (SimRouter::PrefixAffinity, 3.0),
        (SimRouter::RoundRobin, 2.0),
    ] {
        let config = capcard::sim::SimConfig::new(preset)
            .with_replicas(2)
            .with_router(router);
        let server = capcard::sim::start(config, "127.0.0.1:0".parse().unwrap())
            .await
            .unwrap();
        let client = crate::support::web::Client::new();
        for i in 0..4 {
            let resp = client
                .post(format!("{}/completions", server.base_url()))
                .json(&json!({"prompt": format!("{prefix} {}", words(8, &format!("q{i}-"))), "max_tokens": 1}))
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            let _ = resp.text().await.unwrap();
        }
        let text = metrics_text(&client, &server).await;
        assert_eq!(
            sample(&text, "vllm:prefix_cache_hits_total"),
            Some(hits * 256.0),
            "{router:?}"
        );
        assert_eq!(
            sample(&text, "vllm:prefix_cache_queries_total"),
            Some(4.0 * 264.0)
        );
        server.shutdown().await;
    }
}

// ------------------------------------- `capcard sim` as a launched engine

/// `capcard sim` started as a launcher starts an engine: the knobs as
/// flags (its batch cap of 4 seen in its metrics under load, and said at
/// startup), then SIGTERM stops it, exit 0, with streams still open.
#[cfg(unix)]
#[test]
fn capcard_sim_takes_its_knobs_as_flags_and_stops_on_sigterm() {
    use std::io::Read;
    let mut sim =
        crate::support::SimChild::start_logged(&["--preset", "tiny", "--max-num-seqs", "4"]);
    let addr = sim.addr;
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let client = crate::support::web::Client::new();
    let (streams, loaded) = runtime.block_on(async {
        // Six long streams on four seats: two must wait.
        let mut streams = Vec::new();
        for i in 0..6 {
            let resp = client
                .post(format!("http://{addr}/v1/completions"))
                .json(
                    &json!({"prompt": words(16, &format!("s{i}-")), "max_tokens": 1500,
                    "ignore_eos": true, "stream": true}),
                )
                .send()
                .await
                .unwrap();
            assert_eq!(resp.status(), 200);
            streams.push(resp);
        }
        let mut loaded = String::new();
        for _ in 0..300 {
            let url = format!("http://{addr}/metrics");
            loaded = client.get(url).send().await.unwrap().text().await.unwrap();
            if sample(&loaded, "vllm:num_requests_waiting") == Some(2.0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (streams, loaded)
    });
    assert_eq!(
        sample(&loaded, "vllm:num_requests_running"),
        Some(4.0),
        "{loaded}"
    );
    assert_eq!(sample(&loaded, "vllm:num_requests_waiting"), Some(2.0));

    let pid = libc::pid_t::try_from(sim.child.id()).expect("a pid");
    let sent = std::time::Instant::now();
    // SAFETY: a signal to the child this test started and still holds.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let status = loop {
        if let Some(status) = sim.child.try_wait().expect("the child is ours") {
            break status;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(10),
            "capcard sim still runs 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let stopped_after = sent.elapsed();
    drop(streams);
    let mut log = String::new();
    if let Some(mut stderr) = sim.child.stderr.take() {
        stderr.read_to_string(&mut log).expect("its stderr");
    }
    assert_eq!(status.code(), Some(0), "{status:?}\n{log}");
    assert!(stopped_after < Duration::from_secs(5), "{stopped_after:?}");
    assert!(
        log.starts_with(&format!(
            "capcard sim: tiny with max-num-seqs 4 (preset 32) on http://{addr}/v1"
        )),
        "{log}"
    );
    assert!(log.contains("capcard sim: SIGTERM, stopping"), "{log}");
}

/// A knob a `sim { }` block refuses is refused as a flag too, with the
/// block's words: a usage error, exit 1, nothing served.
#[test]
fn capcard_sim_refuses_the_knobs_a_sim_block_refuses() {
    use predicates::prelude::*;
    for (flags, says) in [
        (
            &["--max-num-seqs", "0"][..],
            "`max-num-seqs` must be at least 1, got 0",
        ),
        (&["--gpu-memory-utilization", "90"], "for 90% write 0.9"),
        (
            &["--tensor-parallel", "3"],
            "tensor-parallel 3 does not divide",
        ),
        (
            &["--max-model-len", "4096"],
            "beyond sim/tiny's own context of 2048 tokens",
        ),
        (&["--kv-cache-tokens", "8"], "holds no whole KV-cache block"),
        (&["--prefix-caching", "maybe"], "--prefix-caching"),
        (&["--replicas", "65"], "`replicas` must be at most 64"),
    ] {
        crate::support::capcard()
            .args(["sim", "--preset", "tiny", "--listen", "127.0.0.1:0"])
            .args(flags)
            .assert()
            .code(1)
            .stderr(predicate::str::contains(says));
    }
}
