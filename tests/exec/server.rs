//! A scripted OpenAI-style streaming server for the executor tests: each
//! scenario (the first path segment) is a fixed script of chunks at fixed
//! offsets from the request's arrival, so the truth about TTFT and
//! inter-token gaps is known by construction.
//!
//! It also counts requests and the largest number of streams open at once.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use tokio::time::Instant;

/// First content token after this, ms.
pub const FIRST_TOKEN_MS: u64 = 20;
/// Then one token every this, ms.
pub const TOKEN_GAP_MS: u64 = 5;
/// What the server reports as prompt tokens in `usage`.
pub const REPORTED_PROMPT_TOKENS: u32 = 42;

#[derive(Default)]
pub struct ServerState {
    pub requests: AtomicUsize,
    active: AtomicUsize,
    pub max_active: AtomicUsize,
    pub bodies: Mutex<Vec<serde_json::Value>>,
    pub auth_headers: Mutex<Vec<String>>,
    /// Per request (by arrival number): when each content token was actually
    /// handed to the connection, ms after the request arrived.
    pub token_offsets_ms: Mutex<Vec<(usize, Vec<f64>)>>,
    /// Per request (by arrival number): when it arrived, and its first
    /// message's text (to tell calls apart).
    pub arrivals: Mutex<Vec<(Instant, String)>>,
}

impl ServerState {
    pub fn max_active(&self) -> usize {
        self.max_active.load(Ordering::SeqCst)
    }
}

/// Start the server on an ephemeral port; it lives as long as the runtime.
pub async fn start() -> (SocketAddr, Arc<ServerState>) {
    let state = Arc::new(ServerState::default());
    let app = Router::new()
        .route("/{scenario}/v1/chat/completions", post(chat))
        .route("/{scenario}/v1/completions", post(completions))
        .route("/{scenario}/v1/responses", post(responses))
        .route("/{scenario}/v1/models", get(models))
        .with_state(Arc::clone(&state));
    // `serve` sets TCP_NODELAY: without it, Nagle + delayed ACKs hold small
    // SSE writes back by up to 40 ms on a reused connection, and the
    // server's timing would be a lie.
    let addr = capcard::serve::start(SocketAddr::from(([127, 0, 0, 1], 0)), app)
        .await
        .expect("bind loopback")
        .detach();
    (addr, state)
}

/// A port on which nothing listens.
pub async fn closed_port() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

async fn models(Path(scenario): Path<String>) -> Response {
    if scenario == "http500" {
        return (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response();
    }
    axum::Json(
        serde_json::json!({"object": "list", "data": [{"id": "test-model"}, {"id": "other"}]}),
    )
    .into_response()
}

async fn chat(
    state: State<Arc<ServerState>>,
    scenario: Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond(state, scenario, headers, body, Format::Chat).await
}

async fn completions(
    state: State<Arc<ServerState>>,
    scenario: Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond(state, scenario, headers, body, Format::Completions).await
}

async fn responses(
    state: State<Arc<ServerState>>,
    scenario: Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    respond(state, scenario, headers, body, Format::Responses).await
}

#[derive(Clone, Copy, PartialEq)]
enum Format {
    Chat,
    Completions,
    Responses,
}

/// Reasoning tokens of the `reasoning` scenarios, sent before the answer.
pub const REASONING_TOKENS: u32 = 20;
/// Tokens per event of the `multi` scenario.
pub const TOKENS_PER_EVENT: u32 = 4;

/// One generated event of any kind, in `format`'s framing.
fn generated_event(format: Format, kind: Kind, text: &str, finish: Option<&str>) -> String {
    let finish_json = finish.map_or("null".to_string(), |f| format!("\"{f}\""));
    match (format, kind) {
        (Format::Responses, Kind::Reasoning) => format!(
            "event: response.reasoning_text.delta\ndata: {{\"type\":\"response.reasoning_text.delta\",\"delta\":\"{text}\"}}\n\n"
        ),
        (Format::Responses, Kind::Content) => format!(
            "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"delta\":\"{text}\"}}\n\n"
        ),
        (Format::Responses, Kind::ToolCall { first }) => {
            let added = if first {
                "event: response.output_item.added\ndata: {\"type\":\"response.output_item.added\",\"item\":{\"type\":\"function_call\",\"name\":\"search\"}}\n\n"
            } else {
                ""
            };
            format!(
                "{added}event: response.function_call_arguments.delta\ndata: {{\"type\":\"response.function_call_arguments.delta\",\"delta\":\"{text}\"}}\n\n"
            )
        }
        (_, Kind::Reasoning) => format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"reasoning\":\"{text}\"}},\"finish_reason\":{finish_json}}}]}}\n\n"
        ),
        (_, Kind::ToolCall { first: true }) => format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{{\"name\":\"search\",\"arguments\":\"{text}\"}}}}]}},\"finish_reason\":{finish_json}}}]}}\n\n"
        ),
        (_, Kind::ToolCall { first: false }) => format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":0,\"function\":{{\"arguments\":\"{text}\"}}}}]}},\"finish_reason\":{finish_json}}}]}}\n\n"
        ),
        (_, Kind::Content) => content_event(format, text, finish),
    }
}

#[derive(Clone, Copy)]
enum Kind {
    Reasoning,
    Content,
    ToolCall { first: bool },
}

/// The end of a stream: usage (with the reasoning tokens) and `[DONE]`, or
/// the Responses API's `response.completed`.
fn end_events(format: Format, tokens: u32, reasoning: u32, finish: &str) -> String {
    match format {
        Format::Responses => format!(
            "event: response.completed\ndata: {{\"type\":\"response.completed\",\"response\":{{\"status\":\"completed\",\"usage\":{{\"input_tokens\":{REPORTED_PROMPT_TOKENS},\"output_tokens\":{tokens},\"output_tokens_details\":{{\"reasoning_tokens\":{reasoning}}}}}}}}}\n\n"
        ),
        _ => format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"{finish}\"}}]}}\n\ndata: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{REPORTED_PROMPT_TOKENS},\"completion_tokens\":{tokens},\"completion_tokens_details\":{{\"reasoning_tokens\":{reasoning}}}}}}}\n\n{DONE}"
        ),
    }
}

/// `reasoning` tokens of reasoning, then the answer (content, or a tool
/// call), `per_event` tokens an event, an event every `gap_ms` from
/// `first_ms`: 2026's models, by construction.
fn answer(
    format: Format,
    tokens: u32,
    (reasoning, tool_call, per_event): (u32, bool, u32),
    (first_ms, gap_ms): (u64, u64),
) -> Vec<Step> {
    let mut steps = Vec::new();
    if format == Format::Chat {
        steps.push(Step::Send(ROLE_EVENT.to_string()));
    }
    let reasoning = reasoning.min(tokens);
    let mut event = 0u64;
    let mut sent = 0u32;
    while sent < tokens {
        let kind = if sent < reasoning {
            Kind::Reasoning
        } else if tool_call {
            Kind::ToolCall {
                first: sent == reasoning,
            }
        } else {
            Kind::Content
        };
        // An event holds one kind only.
        let limit = if sent < reasoning { reasoning } else { tokens };
        let n = per_event.min(limit - sent);
        let text: String = (0..n).map(|k| format!("t{}", sent + k)).collect();
        steps.push(Step::At(ms(first_ms + gap_ms * event)));
        steps.push(Step::Token(generated_event(format, kind, &text, None)));
        sent += n;
        event += 1;
    }
    steps.push(Step::Release);
    let finish = if tool_call { "tool_calls" } else { "length" };
    steps.push(Step::Send(end_events(format, tokens, reasoning, finish)));
    steps
}

fn content_event(format: Format, text: &str, finish: Option<&str>) -> String {
    let finish = finish.map_or("null".to_string(), |f| format!("\"{f}\""));
    match format {
        Format::Chat => format!(
            "data: {{\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{text}\"}},\"finish_reason\":{finish}}}]}}\n\n"
        ),
        Format::Completions => format!(
            "data: {{\"object\":\"text_completion\",\"choices\":[{{\"index\":0,\"text\":\"{text}\",\"finish_reason\":{finish}}}]}}\n\n"
        ),
        Format::Responses => format!(
            "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"delta\":\"{text}\"}}\n\n"
        ),
    }
}

const ROLE_EVENT: &str = "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n";

fn usage_event(completion_tokens: u32) -> String {
    format!(
        "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":{REPORTED_PROMPT_TOKENS},\"completion_tokens\":{completion_tokens}}}}}\n\n"
    )
}

const DONE: &str = "data: [DONE]\n\n";

/// One step of a response script.
enum Step {
    /// Wait until this long after the request arrived.
    At(Duration),
    Send(String),
    /// A content token: sent, and its actual send time recorded.
    Token(String),
    /// The stream is about to end normally: no longer count it as open.
    Release,
    /// Abort the connection (a transport error for the client).
    Fail,
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

/// The token stream of a healthy response of `tokens` tokens.
fn healthy(format: Format, tokens: u32, first_ms: u64, gap_ms: u64, usage: bool) -> Vec<Step> {
    let mut steps = vec![Step::Send(ROLE_EVENT.to_string())];
    for k in 0..tokens {
        steps.push(Step::At(ms(first_ms + gap_ms * u64::from(k))));
        let finish = (k + 1 == tokens).then_some("length");
        steps.push(Step::Token(content_event(format, &format!("t{k}"), finish)));
    }
    if usage {
        steps.push(Step::Send(usage_event(tokens)));
    }
    steps.push(Step::Release);
    steps.push(Step::Send(DONE.to_string()));
    steps
}

async fn respond(
    State(state): State<Arc<ServerState>>,
    Path(scenario): Path<String>,
    headers: HeaderMap,
    body: Bytes,
    format: Format,
) -> Response {
    let arrived = Instant::now();
    let number = state.requests.fetch_add(1, Ordering::SeqCst);
    let request: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    // Chat's current name first, as servers read it.
    let max_tokens = request["max_completion_tokens"]
        .as_u64()
        .or(request["max_tokens"].as_u64())
        .or(request["max_output_tokens"].as_u64())
        .unwrap_or(4) as u32;
    let text = request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    {
        let mut arrivals = state.arrivals.lock().unwrap();
        if arrivals.len() < number + 1 {
            arrivals.resize(number + 1, (arrived, String::new()));
        }
        arrivals[number] = (arrived, text);
    }
    state.bodies.lock().unwrap().push(request);
    if let Some(auth) = headers.get("authorization") {
        state
            .auth_headers
            .lock()
            .unwrap()
            .push(auth.to_str().unwrap_or_default().to_string());
    }
    let fail_500 = || {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            axum::Json(serde_json::json!({"error": {"message": "injected failure", "type": "server_error"}})),
        )
            .into_response()
    };
    let steps = match scenario.as_str() {
        "ok" if format == Format::Responses => answer(
            format,
            max_tokens,
            (0, false, 1),
            (FIRST_TOKEN_MS, TOKEN_GAP_MS),
        ),
        "ok" => healthy(format, max_tokens, FIRST_TOKEN_MS, TOKEN_GAP_MS, true),
        "reasoning" => answer(
            format,
            max_tokens,
            (REASONING_TOKENS, false, 1),
            (FIRST_TOKEN_MS, 4),
        ),
        "tools" => answer(format, max_tokens, (0, true, 1), (FIRST_TOKEN_MS, 4)),
        "reasoning-tools" => answer(
            format,
            max_tokens,
            (REASONING_TOKENS, true, 1),
            (FIRST_TOKEN_MS, 4),
        ),
        "multi" => answer(
            format,
            max_tokens,
            (0, false, TOKENS_PER_EVENT),
            (FIRST_TOKEN_MS, 4),
        ),
        "nousage" => healthy(format, max_tokens, FIRST_TOKEN_MS, TOKEN_GAP_MS, false),
        "slow" => healthy(format, 2, 250, 5, true),
        "split" => {
            // Every event delivered in three pieces, 1 ms apart.
            let mut steps = Vec::new();
            let mut offset = 0;
            for step in healthy(format, max_tokens, 0, 0, true) {
                match step {
                    Step::Send(text) | Step::Token(text) => {
                        let bytes = text.into_bytes();
                        let third = bytes.len().div_ceil(3);
                        for piece in bytes.chunks(third) {
                            offset += 1;
                            steps.push(Step::At(ms(offset)));
                            steps.push(Step::Send(String::from_utf8_lossy(piece).into_owned()));
                        }
                    }
                    Step::At(_) => {}
                    other => steps.push(other),
                }
            }
            steps
        }
        "http500" => return fail_500(),
        "flaky" if number % 2 == 1 => return fail_500(),
        "flaky" => healthy(format, max_tokens, 1, 1, true),
        // Three tokens, no finish reason, no [DONE]: the body just ends.
        "cut" => vec![
            Step::Send(content_event(format, "a", None)),
            Step::At(ms(1)),
            Step::Send(content_event(format, "b", None)),
            Step::At(ms(2)),
            Step::Send(content_event(format, "c", None)),
        ],
        "reset" => vec![
            Step::Send(content_event(format, "a", None)),
            Step::At(ms(2)),
            Step::Fail,
        ],
        "malformed" => vec![
            Step::Send(content_event(format, "a", None)),
            Step::At(ms(2)),
            Step::Send("data: {\"choices\": [oops\n\n".to_string()),
            Step::At(ms(4)),
            Step::Send(DONE.to_string()),
        ],
        "stall" => vec![
            Step::Send(content_event(format, "a", None)),
            Step::At(ms(10_000)),
        ],
        "empty" => vec![
            Step::Send(ROLE_EVENT.to_string()),
            Step::At(ms(2)),
            Step::Send(content_event(format, "", Some("stop"))),
            Step::Send(usage_event(0)),
            Step::Release,
            Step::Send(DONE.to_string()),
        ],
        "notsse" => vec![Step::Send("plain text, not an event stream".to_string())],
        _ => return (StatusCode::NOT_FOUND, "unknown scenario").into_response(),
    };
    let active = state.active.fetch_add(1, Ordering::SeqCst) + 1;
    state.max_active.fetch_max(active, Ordering::SeqCst);
    let guard = ActiveGuard {
        state: Arc::clone(&state),
        released: false,
        number,
        token_offsets_ms: Vec::new(),
    };
    let stream = futures_util::stream::unfold(
        (VecDeque::from(steps), guard),
        move |(mut steps, mut guard)| async move {
            loop {
                match steps.pop_front()? {
                    Step::At(offset) => tokio::time::sleep_until(arrived + offset).await,
                    Step::Release => guard.release(),
                    Step::Send(text) => {
                        return Some((Ok::<_, std::io::Error>(Bytes::from(text)), (steps, guard)));
                    }
                    Step::Token(text) => {
                        guard
                            .token_offsets_ms
                            .push(arrived.elapsed().as_secs_f64() * 1e3);
                        return Some((Ok(Bytes::from(text)), (steps, guard)));
                    }
                    Step::Fail => {
                        return Some((
                            Err(std::io::Error::other("injected reset")),
                            (steps, guard),
                        ));
                    }
                }
            }
        },
    );
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// Counts a stream as open until it is released or dropped, and files its
/// token timings when dropped.
struct ActiveGuard {
    state: Arc<ServerState>,
    released: bool,
    number: usize,
    token_offsets_ms: Vec<f64>,
}

impl ActiveGuard {
    fn release(&mut self) {
        if !self.released {
            self.released = true;
            self.state.active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.release();
        let offsets = std::mem::take(&mut self.token_offsets_ms);
        if let Ok(mut all) = self.state.token_offsets_ms.lock() {
            all.push((self.number, offsets));
        }
    }
}
