//! The simulator's answers over HTTP: reasoning before the answer, tool
//! calls, several tokens per event, the Responses API's typed stream, the
//! `capcard sim` flags that set them, and the same call read by the
//! client's parser over HTTP and journaled in virtual time. Every test
//! starts its own `tiny` engine on an ephemeral loopback port; none
//! asserts on a duration.

use std::sync::Arc;
use std::time::Duration;

use capcard::config::{Api, Dist, SimServing};
use capcard::exec::record::RequestRecord;
use capcard::exec::sse::SseDecoder;
use capcard::exec::stream::{CallId, CallTimes, EventVerdict, StreamEnd, StreamObserver, Wire};
use capcard::exec::virtual_time::{VirtualTarget, simulate};
use capcard::exec::{BodyOptions, ChatMessage, JournalLine, Prompt, RequestSource, RunInputs};
use capcard::plan::{Load, RunPlan};
use capcard::sim::answer::reasoning_draw;
use capcard::sim::{RequestId, SimConfig, SimServer, knobs, presets, start};
use capcard::workload::{CallSpec, Task, TaskSpec};
use serde_json::{Value, json};

use super::support::words;
use crate::support::SimChild;

/// The `tiny` engine with `serving`'s knobs, seed 11.
async fn tiny_with(serving: &SimServing) -> SimServer {
    let config = SimConfig::for_target("tiny", serving)
        .expect("valid knobs")
        .with_seed(11);
    start(config, "127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("sim starts")
}

fn answers(reasoning: Option<Dist>, tokens_per_event: Option<u32>) -> SimServing {
    SimServing {
        reasoning_tokens: reasoning,
        tokens_per_event,
        ..SimServing::default()
    }
}

/// The JSON of each `data:` line of a chunk stream, `[DONE]` excluded
/// (and checked to be last).
fn chunk_events(body: &str) -> Vec<Value> {
    let payloads: Vec<&str> = body
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| e.strip_prefix("data: ").expect("a data event"))
        .collect();
    assert_eq!(payloads.last(), Some(&"[DONE]"), "{body}");
    payloads[..payloads.len() - 1]
        .iter()
        .map(|p| serde_json::from_str(p).expect("JSON event"))
        .collect()
}

/// `(event:, data: JSON)` of each Responses API event.
fn typed_events(body: &str) -> Vec<(String, Value)> {
    body.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (event, data) = e.split_once('\n').expect("two lines");
            let event = event.strip_prefix("event: ").expect("an event line");
            let data = data.strip_prefix("data: ").expect("a data line");
            (event.to_string(), serde_json::from_str(data).expect("JSON"))
        })
        .collect()
}

async fn post(server: &SimServer, path: &str, body: &Value) -> String {
    let resp = crate::support::web::Client::new()
        .post(format!("{}/{path}", server.base_url()))
        .json(body)
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status(), 200);
    resp.text().await.expect("body")
}

fn delta(event: &Value) -> &Value {
    &event["choices"][0]["delta"]
}

#[tokio::test]
async fn chat_reasons_20_tokens_then_answers() {
    let server = tiny_with(&answers(Some(Dist::fixed(20.0)), None)).await;
    let body = json!({
        "messages": [{"role": "user", "content": words(12, "q")}],
        "max_completion_tokens": 30, "ignore_eos": true, "stream": true,
        "stream_options": {"include_usage": true}
    });
    let events = chunk_events(&post(&server, "chat/completions", &body).await);
    // role, 20 reasoning, 10 content, usage
    assert_eq!(events.len(), 32);
    assert_eq!(delta(&events[0])["role"], "assistant");
    assert!(events[1..21].iter().all(|e| {
        delta(e)["reasoning"].as_str().is_some() && delta(e).get("content").is_none()
    }));
    assert!(events[21..31].iter().all(|e| {
        delta(e)["content"].as_str().is_some() && delta(e).get("reasoning").is_none()
    }));
    assert_eq!(events[30]["choices"][0]["finish_reason"], "length");
    let usage = &events[31]["usage"];
    assert_eq!(usage["completion_tokens"], 30);
    assert_eq!(usage["prompt_tokens"], 12);
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 20);

    // The output budget bounds reasoning and answer together: none is left.
    let short = json!({"messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 8, "ignore_eos": true, "stream": true,
        "stream_options": {"include_usage": true}});
    let events = chunk_events(&post(&server, "chat/completions", &short).await);
    assert_eq!(events.len(), 10);
    assert!(
        events[1..9]
            .iter()
            .all(|e| delta(e)["reasoning"].is_string())
    );
    assert_eq!(
        events[9]["usage"]["completion_tokens_details"]["reasoning_tokens"],
        8
    );

    // Unstreamed: the message carries both.
    let whole = json!({"messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 25, "ignore_eos": true});
    let full: Value =
        serde_json::from_str(&post(&server, "chat/completions", &whole).await).expect("JSON body");
    let message = &full["choices"][0]["message"];
    assert_eq!(
        message["reasoning"]
            .as_str()
            .map(|r| r.split_whitespace().count()),
        Some(20)
    );
    assert_eq!(
        message["content"]
            .as_str()
            .map(|c| c.split_whitespace().count()),
        Some(5)
    );
    // Completions have no reasoning: all text.
    let completion = json!({"prompt": "a b", "max_tokens": 6, "ignore_eos": true,
        "stream": true, "stream_options": {"include_usage": true}});
    let events = chunk_events(&post(&server, "completions", &completion).await);
    assert_eq!(events.len(), 7);
    assert!(
        events[6]["usage"]
            .get("completion_tokens_details")
            .is_none()
    );
    server.shutdown().await;
}

#[tokio::test]
async fn tools_are_answered_with_a_call_of_the_first_function() {
    let server = tiny_with(&answers(Some(Dist::fixed(3.0)), None)).await;
    let tools = json!([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {}}}}]);
    let body = json!({
        "messages": [{"role": "user", "content": "weather in Oslo"}],
        "tools": tools, "max_completion_tokens": 8, "ignore_eos": true, "stream": true
    });
    let events = chunk_events(&post(&server, "chat/completions", &body).await);
    // role, 3 reasoning, 5 tool-call events
    assert_eq!(events.len(), 9);
    assert!(
        events[1..4]
            .iter()
            .all(|e| delta(e)["reasoning"].is_string())
    );
    let first = &delta(&events[4])["tool_calls"][0];
    assert_eq!(first["index"], 0);
    assert_eq!(first["type"], "function");
    assert_eq!(first["function"]["name"], "get_weather");
    let id = first["id"].as_str().expect("a call id");
    assert!(id.starts_with("call_"), "{id}");
    for e in &events[5..] {
        let call = &delta(e)["tool_calls"][0];
        assert_eq!(call["index"], 0);
        assert!(call["function"]["arguments"].is_string());
        assert!(call.get("id").is_none() && call["function"].get("name").is_none());
        assert!(delta(e).get("content").is_none());
    }
    assert_eq!(events[8]["choices"][0]["finish_reason"], "tool_calls");
    assert!(
        events[4..8]
            .iter()
            .all(|e| e["choices"][0]["finish_reason"].is_null())
    );
    // `tool_choice: "none"`: plain content.
    let none = json!({"messages": [{"role": "user", "content": "hi"}], "tools": tools,
        "tool_choice": "none", "max_completion_tokens": 5, "ignore_eos": true, "stream": true});
    let events = chunk_events(&post(&server, "chat/completions", &none).await);
    assert!(delta(&events[4])["content"].is_string());
    assert_eq!(events[5]["choices"][0]["finish_reason"], "length");
    server.shutdown().await;
}

#[tokio::test]
async fn four_tokens_per_event() {
    let server = tiny_with(&answers(None, Some(4))).await;
    for tokens in [1u32, 4, 10, 33] {
        let body = json!({"messages": [{"role": "user", "content": "go"}],
            "max_completion_tokens": tokens, "ignore_eos": true, "stream": true,
            "stream_options": {"include_usage": true}});
        let events = chunk_events(&post(&server, "chat/completions", &body).await);
        let content: Vec<&str> = events[1..events.len() - 1]
            .iter()
            .map(|e| delta(e)["content"].as_str().expect("content"))
            .collect();
        assert_eq!(content.len() as u32, tokens.div_ceil(4), "{tokens} tokens");
        let counts: Vec<usize> = content
            .iter()
            .map(|c| c.split_whitespace().count())
            .collect();
        assert_eq!(counts.iter().sum::<usize>() as u32, tokens);
        assert!(counts[..counts.len() - 1].iter().all(|&n| n == 4));
        assert_eq!(
            events[events.len() - 1]["usage"]["completion_tokens"],
            tokens
        );
        let completion = json!({"prompt": "go", "max_tokens": tokens, "ignore_eos": true,
            "stream": true});
        let events = chunk_events(&post(&server, "completions", &completion).await);
        assert_eq!(events.len() as u32, tokens.div_ceil(4));
    }
    server.shutdown().await;
}

#[tokio::test]
async fn the_responses_api_streams_typed_events_and_its_usage() {
    let server = tiny_with(&answers(Some(Dist::fixed(4.0)), Some(2))).await;
    let body = json!({
        "model": "sim/tiny",
        "instructions": words(3, "sys"),
        "input": [{"role": "user", "content": [{"type": "input_text", "text": words(9, "u")}]}],
        "max_output_tokens": 9, "ignore_eos": true, "stream": true
    });
    let text = post(&server, "responses", &body).await;
    assert!(!text.contains("[DONE]"));
    let events = typed_events(&text);
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    let mut expected = vec![
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ];
    expected.extend(["response.reasoning_text.delta"; 2]);
    expected.extend([
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
    ]);
    // 5 answer tokens, 2 per event.
    expected.extend(["response.output_text.delta"; 3]);
    expected.extend([
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]);
    assert_eq!(kinds, expected);
    for (i, (kind, json)) in events.iter().enumerate() {
        assert_eq!(json["type"], kind.as_str());
        assert_eq!(json["sequence_number"], i as u64);
    }
    let created = &events[0].1["response"];
    assert!(
        created["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("resp_"))
    );
    assert_eq!(created["status"], "in_progress");
    assert_eq!(created["model"], "sim/tiny");
    assert_eq!(events[2].1["item"]["type"], "reasoning");
    assert_eq!(events[9].1["item"]["type"], "message");
    assert_eq!(events[9].1["output_index"], 1);
    let first_text = &events[11].1;
    assert_eq!(first_text["output_index"], 1);
    assert_eq!(first_text["content_index"], 0);
    assert_eq!(first_text["item_id"], events[9].1["item"]["id"]);
    let done = &events[events.len() - 1].1["response"];
    // The length limit ended it: vLLM says so under `response.completed`.
    assert_eq!(done["status"], "incomplete");
    assert_eq!(done["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(
        done["usage"],
        json!({"input_tokens": 12, "output_tokens": 9, "total_tokens": 21,
            "output_tokens_details": {"reasoning_tokens": 4}})
    );
    assert_eq!(done["output"].as_array().map(Vec::len), Some(2));

    // A function call, unstreamed.
    let call = json!({"input": "weather?", "max_output_tokens": 6, "ignore_eos": true,
        "tools": [{"type": "function", "name": "get_weather", "parameters": {}}]});
    let full: Value =
        serde_json::from_str(&post(&server, "responses", &call).await).expect("JSON body");
    assert_eq!(full["object"], "response");
    assert_eq!(full["output"][0]["type"], "reasoning");
    let function = &full["output"][1];
    assert_eq!(function["type"], "function_call");
    assert_eq!(function["name"], "get_weather");
    assert!(
        function["call_id"]
            .as_str()
            .is_some_and(|c| c.starts_with("call_"))
    );
    assert_eq!(
        function["arguments"]
            .as_str()
            .map(|a| a.split_whitespace().count()),
        Some(2)
    );
    assert_eq!(full["usage"]["output_tokens"], 6);
    server.shutdown().await;
}

#[tokio::test]
async fn the_responses_api_goes_through_the_dialect() {
    let preset = presets::find("tiny").expect("tiny");
    let config = SimConfig::new(preset).with_dialect(capcard::sim::SimDialect::vllm().strict());
    let server = start(config, "127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("sim starts");
    let resp = crate::support::web::Client::new()
        .post(format!("{}/responses", server.base_url()))
        .json(&json!({"input": "hi", "ignore_eos": true}))
        .send()
        .await
        .expect("sent");
    assert_eq!(resp.status(), 400);
    let text = resp.text().await.expect("body");
    assert!(
        text.contains("Unrecognized request argument supplied: ignore_eos"),
        "{text}"
    );
    assert_eq!(server.field_refused_calls(), 1);
    let text = post(
        &server,
        "responses",
        &json!({"input": "hi", "max_output_tokens": 2}),
    )
    .await;
    let body: Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(body["object"], "response");
    server.shutdown().await;
}

#[test]
fn capcard_sim_reasons_and_groups_tokens_as_its_flags_say() {
    let sim = SimChild::start(&[
        "--preset",
        "tiny",
        "--reasoning-tokens",
        "20",
        "--tokens-per-event",
        "4",
    ]);
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let body = runtime.block_on(async {
        let request = json!({"messages": [{"role": "user", "content": "hi"}],
            "max_completion_tokens": 30, "ignore_eos": true, "stream": true,
            "stream_options": {"include_usage": true}});
        crate::support::web::Client::new()
            .post(format!("{}/v1/chat/completions", sim.base_url()))
            .json(&request)
            .send()
            .await
            .expect("capcard sim answers")
            .text()
            .await
            .expect("body")
    });
    drop(sim);
    let events = chunk_events(&body);
    // role, 20 reasoning tokens in 5 events, 10 answer tokens in 3, usage
    assert_eq!(events.len(), 10, "{body}");
    assert!(
        events[1..6]
            .iter()
            .all(|e| delta(e)["reasoning"].is_string())
    );
    assert!(events[6..9].iter().all(|e| delta(e)["content"].is_string()));
    let usage = &events[9]["usage"];
    assert_eq!(usage["completion_tokens"], 30);
    assert_eq!(usage["completion_tokens_details"]["reasoning_tokens"], 20);
}

// ------------------------------------------------ HTTP against virtual time

/// One call of `output_tokens` on a prompt of `input_tokens` words.
struct OneCall {
    input_tokens: u32,
    output_tokens: u32,
}

impl OneCall {
    fn spec(&self) -> CallSpec {
        CallSpec {
            messages: Vec::new(),
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            tools: None,
            answer_in_words: false,
        }
    }
}

impl RequestSource for OneCall {
    fn task(&self, index: u64) -> Task {
        Task {
            index,
            spec: TaskSpec::Single(self.spec()),
            class: None,
        }
    }

    fn render(&self, call: &CallSpec) -> Prompt {
        Prompt::Chat(vec![ChatMessage {
            role: "user",
            content: words(call.input_tokens as usize, "w"),
            tool: None,
        }])
    }
}

/// The call as `exec::client` reads it: SSE decoded chunk by chunk, each
/// event given to the observer of the API's wire.
async fn over_http(
    server: &SimServer,
    api: Api,
    body: bytes::Bytes,
    source: &OneCall,
) -> RequestRecord {
    let path = capcard::exec::request::api_path(api);
    let t0 = tokio::time::Instant::now();
    let mut response = crate::support::web::Client::new()
        .post(format!("{}/{path}", server.base_url()))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("sent");
    assert_eq!(response.status(), 200);
    let mut observer = StreamObserver::for_wire(Wire::of(api));
    let mut decoder = SseDecoder::new();
    let ms = |t| capcard::exec::stream::ms_since(t0, t);
    let end = 'read: loop {
        match response.chunk().await.expect("a chunk") {
            Some(chunk) => {
                let at = tokio::time::Instant::now();
                observer.on_bytes(chunk.len());
                decoder.push(&chunk);
                while let Some(event) = decoder.next_event() {
                    match observer.on_event(&event, ms(at)) {
                        EventVerdict::Continue => {}
                        EventVerdict::Done => break 'read StreamEnd::Done,
                        EventVerdict::Fail(class, detail) => {
                            break 'read StreamEnd::Failed(class, detail);
                        }
                    }
                }
            }
            None => break StreamEnd::Eof,
        }
    };
    let completed_ms = ms(tokio::time::Instant::now());
    observer.into_record(
        CallId {
            task: 0,
            call: 0,
            prompt_tokens_requested: source.input_tokens,
            output_tokens_requested: source.output_tokens,
        },
        CallTimes {
            scheduled_ms: 0.0,
            sent_ms: 0.0,
            completed_ms,
            http_status: Some(200),
        },
        end,
    )
}

/// The same call journaled on the engine's own clock.
fn in_virtual_time(target: &VirtualTarget, source: Arc<OneCall>) -> RequestRecord {
    let run = RunPlan::new(
        "answers",
        "one",
        Load::Concurrency { concurrency: 1 },
        Duration::ZERO,
        capcard::config::StopRule::Requests(1),
        1,
    );
    let mut records = Vec::new();
    let mut sink = |line: JournalLine| {
        if let JournalLine::Request(r) = line {
            records.push(r);
        }
    };
    let inputs = RunInputs {
        source,
        arrivals: None,
    };
    simulate(
        target,
        &run,
        inputs,
        (None, None),
        &|| false,
        &mut sink,
        None,
    )
    .expect("a run");
    assert_eq!(records.len(), 1);
    records.remove(0)
}

#[tokio::test]
async fn a_reasoning_tool_call_in_events_of_4_reads_the_same_over_http_and_in_virtual_time() {
    let reasoning = Dist {
        kind: capcard::config::DistKind::LogNormal {
            median: 14.0,
            sigma: 0.3,
        },
        min: Some(6.0),
        max: Some(30.0),
    };
    let serving = answers(Some(reasoning), Some(4));
    let seed = 11;
    let preset = knobs::apply(presets::find("tiny").expect("tiny"), &serving).expect("knobs");
    // The first call of either clock is request 0.
    let r = reasoning_draw(&preset.answers, seed, RequestId(0));
    assert!((6..=30).contains(&r), "R = {r}");
    for (api, tools) in [
        (
            Api::Chat,
            json!([{"type": "function", "function": {"name": "lookup", "parameters": {}}}]),
        ),
        (
            Api::Responses,
            json!([{"type": "function", "name": "lookup", "parameters": {}}]),
        ),
    ] {
        let source = Arc::new(OneCall {
            input_tokens: 24,
            output_tokens: 45,
        });
        let mut body = BodyOptions::default();
        body.extra.insert("tools".into(), tools);
        let model = preset.model.served_name.to_string();
        let target = VirtualTarget {
            preset: preset.clone(),
            replicas: 1,
            router: Default::default(),
            faults: Default::default(),
            seed,
            model: model.clone(),
            served: vec![model.clone()],
            api,
            body: body.clone(),
            timeout: Duration::from_secs(60),
            network_overhead: Duration::ZERO,
            context_window: None,
        };
        let virt = in_virtual_time(&target, source.clone());

        let server = tiny_with(&serving).await;
        let request = capcard::exec::request::build_call_body(
            api,
            &model,
            &source.render(&source.spec()),
            source.output_tokens,
            &body,
            None,
        );
        let http = over_http(&server, api, request, &source).await;
        server.shutdown().await;

        let fields = |rec: &RequestRecord| {
            (
                rec.error,
                rec.ttft_ms.is_some(),
                rec.ttfo_ms.is_some(),
                rec.reasoning_tokens,
                rec.reasoning_tokens_source,
                rec.tool_calls,
                rec.token_events(),
                rec.output_tokens,
                rec.output_tokens_source,
                rec.finish_reason.clone(),
                rec.prompt_tokens_reported,
            )
        };
        assert_eq!(fields(&http), fields(&virt), "{api:?}");
        assert_eq!(virt.reasoning_tokens, r, "{api:?}");
        assert_eq!(virt.tool_calls, 1);
        assert_eq!(virt.output_tokens, 45);
        // R reasoning tokens, then 45 − R of arguments, 4 per event.
        assert_eq!(virt.token_events(), r.div_ceil(4) + (45 - r).div_ceil(4));
        assert!(virt.ttfo_ms > virt.ttft_ms);
        assert_eq!(virt.itl_ms.len(), http.itl_ms.len());
    }
}

#[tokio::test]
async fn usage_reports_the_prompt_tokens_found_in_the_prefix_cache_when_asked() {
    let with = SimServing {
        prompt_tokens_details: Some(true),
        ..SimServing::default()
    };
    let server = tiny_with(&with).await;
    let chat = json!({
        "messages": [{"role": "user", "content": words(64, "shared")}],
        "max_completion_tokens": 4, "ignore_eos": true, "stream": true,
        "stream_options": {"include_usage": true}
    });
    let cached =
        |events: &[Value]| events.last().unwrap()["usage"]["prompt_tokens_details"].clone();
    let first = chunk_events(&post(&server, "chat/completions", &chat).await);
    assert_eq!(cached(&first)["cached_tokens"], 0, "a cold cache reports 0");
    let second = chunk_events(&post(&server, "chat/completions", &chat).await);
    // 64 prompt tokens: 3 whole blocks of 16 (the last token is always
    // computed).
    assert_eq!(cached(&second)["cached_tokens"], 48);
    // The Responses API says it in `input_tokens_details`.
    let responses = json!({"input": words(64, "shared"), "max_output_tokens": 4, "stream": true});
    let events = typed_events(&post(&server, "responses", &responses).await);
    let (_, completed) = events.last().unwrap();
    assert_eq!(
        completed["response"]["usage"]["input_tokens_details"]["cached_tokens"], 48,
        "{completed}"
    );

    // vLLM's default: not reported at all, which is not 0.
    let server = tiny_with(&SimServing::default()).await;
    for _ in 0..2 {
        let events = chunk_events(&post(&server, "chat/completions", &chat).await);
        let usage = &events.last().unwrap()["usage"];
        assert!(usage["prompt_tokens"].is_number());
        assert!(usage.get("prompt_tokens_details").is_none(), "{usage}");
    }
}
