//! What an OpenAI-style token stream means (pure): SSE events with their
//! arrival times → TTFT, inter-chunk gaps, token counts, finish reason and,
//! when something went wrong, the [`ErrorClass`].
//!
//! Kept apart from the HTTP code so that every classification rule (what is
//! a broken stream, what is an empty output, when `usage` is trusted over
//! counting chunks) is a plain function tested without a network or a clock.
//!
//! A *generated* event carries reasoning (`reasoning_content` /
//! `reasoning`, sent by reasoning models before the answer), content
//! (`choices[].delta.content` on chat, `choices[].text` on completions) or a
//! tool call (`delta.tool_calls`: its name, then its arguments). TTFT is the
//! first generated event of any kind, the first token a user sees being
//! generated; TTFO the first *output* event (content or a tool call), when
//! the answer starts. ITL is the gap between generated events, as a user
//! sees them, whatever each carried; a server that sends several tokens per
//! event (hosted APIs, speculative decoding) has fewer, longer gaps, and
//! the summary says how many tokens an event carried on average.
//!
//! The Responses API (`POST /v1/responses`) streams typed events instead of
//! chunks: `response.reasoning_text.delta` (reasoning),
//! `response.output_text.delta` and `response.function_call_arguments.delta`
//! (output), `response.output_item.added` of a `function_call` (a tool
//! call), usage in `response.completed` (or `response.incomplete`, the end
//! of an answer cut at `max_output_tokens`), and failures in
//! `response.failed` or an `error` event. The same record comes out of
//! both ([`Wire`]).

use std::borrow::Cow;

use serde::Deserialize;

use super::record::{ErrorClass, RequestRecord, TokenSource};
use super::sse::SseEvent;
use crate::data::tokenizer::PromptTokenizer;

/// `ms` rounded to the microsecond: the clock's useful resolution, and what
/// keeps journal lines short.
pub fn round_us(ms: f64) -> f64 {
    (ms * 1e3).round() / 1e3
}

/// Milliseconds from `t0` to `t` (0 if `t` is earlier), to the microsecond.
pub fn ms_since(t0: tokio::time::Instant, t: tokio::time::Instant) -> f64 {
    round_us(t.saturating_duration_since(t0).as_secs_f64() * 1e3)
}

/// Longest server message or event excerpt kept in `error_detail`.
pub const MAX_DETAIL_CHARS: usize = 300;

/// Cut `s` to at most [`MAX_DETAIL_CHARS`] characters, marking the cut.
pub fn truncate_detail(s: &str) -> String {
    let s = s.trim();
    match s.char_indices().nth(MAX_DETAIL_CHARS) {
        Some((cut, _)) => format!("{}…", &s[..cut]),
        None => s.to_string(),
    }
}

/// What the caller should do after an event.
#[derive(Debug, Clone, PartialEq)]
pub enum EventVerdict {
    /// Keep reading.
    Continue,
    /// `[DONE]`: the stream is complete.
    Done,
    /// The call failed; stop reading.
    Fail(ErrorClass, String),
}

/// How reading the stream ended.
#[derive(Debug, Clone, PartialEq)]
pub enum StreamEnd {
    /// `[DONE]` arrived.
    Done,
    /// The body ended (cleanly, from HTTP's point of view).
    Eof,
    /// Reading stopped on an error: transport, timeout, cancel or a bad event.
    Failed(ErrorClass, String),
}

/// Which wire format a stream speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Wire {
    /// `chat/completions` and `completions`: `data: {"choices": [...]}`
    /// chunks, `[DONE]` at the end.
    #[default]
    Chunks,
    /// `responses`: typed events, `response.completed` at the end.
    Responses,
}

impl Wire {
    pub fn of(api: crate::config::Api) -> Wire {
        match api {
            crate::config::Api::Responses => Wire::Responses,
            _ => Wire::Chunks,
        }
    }
}

/// Accumulates one call's stream. Times are ms since the run's `t0`.
#[derive(Debug, Clone, Default)]
pub struct StreamObserver {
    wire: Wire,
    first_content_ms: Option<f64>,
    /// The first output (content or tool call) event, after any reasoning.
    first_output_ms: Option<f64>,
    last_content_ms: Option<f64>,
    itl_ms: Vec<f32>,
    content_chunks: u32,
    /// Events that carried reasoning.
    reasoning_chunks: u32,
    /// `completion_tokens_details.reasoning_tokens` (or the Responses API's
    /// `output_tokens_details.reasoning_tokens`).
    reasoning_tokens_reported: Option<u32>,
    /// Tool calls seen (distinct `index` of `delta.tool_calls`, or
    /// `function_call` items).
    tool_calls: u32,
    /// The streamed reasoning, kept only when it will be counted locally.
    reasoning_text: Option<String>,
    reasoning_tokens_counted: Option<u32>,
    /// The streamed output text, kept only when it will be counted locally.
    output_text: Option<String>,
    /// Output tokens of `output_text` by the target's tokenizer.
    output_tokens_counted: Option<u32>,
    prompt_tokens_reported: Option<u32>,
    /// `prompt_tokens_details.cached_tokens` (or `input_tokens_details`).
    cached_tokens_reported: Option<u32>,
    completion_tokens_reported: Option<u32>,
    finish_reason: Option<String>,
    done: bool,
    events: u32,
    bytes: u64,
}

#[derive(Deserialize)]
struct ChunkWire<'a> {
    #[serde(default, borrow)]
    choices: Option<Vec<ChoiceWire<'a>>>,
    #[serde(default)]
    usage: Option<UsageWire>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct ChoiceWire<'a> {
    #[serde(default, borrow)]
    delta: Option<DeltaWire<'a>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct DeltaWire<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolCallDeltaWire<'a>>>,
}

#[derive(Deserialize)]
struct ToolCallDeltaWire<'a> {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default, borrow)]
    function: Option<FunctionDeltaWire<'a>>,
}

#[derive(Deserialize)]
struct FunctionDeltaWire<'a> {
    #[serde(default, borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct UsageWire {
    #[serde(default)]
    prompt_tokens: Option<u32>,
    #[serde(default)]
    completion_tokens: Option<u32>,
    #[serde(default)]
    completion_tokens_details: Option<TokenDetailsWire>,
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetailsWire>,
}

#[derive(Deserialize)]
struct TokenDetailsWire {
    #[serde(default)]
    reasoning_tokens: Option<u32>,
}

/// `prompt_tokens_details` (`input_tokens_details`): a `null` inside, or
/// the object absent, is "not reported", never 0.
#[derive(Deserialize)]
struct PromptDetailsWire {
    #[serde(default)]
    cached_tokens: Option<u32>,
}

/// One event of the Responses API's stream.
#[derive(Deserialize)]
struct ResponsesEventWire<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    delta: Option<Cow<'a, str>>,
    #[serde(default)]
    response: Option<ResponseWire>,
    #[serde(default)]
    item: Option<ItemWire>,
    /// An `error` event's own fields.
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    code: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct ResponseWire {
    #[serde(default)]
    status: Option<String>,
    #[serde(default)]
    usage: Option<ResponsesUsageWire>,
    #[serde(default)]
    incomplete_details: Option<IncompleteWire>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct ResponsesUsageWire {
    #[serde(default)]
    input_tokens: Option<u32>,
    #[serde(default)]
    output_tokens: Option<u32>,
    #[serde(default)]
    output_tokens_details: Option<TokenDetailsWire>,
    #[serde(default)]
    input_tokens_details: Option<PromptDetailsWire>,
}

#[derive(Deserialize)]
struct IncompleteWire {
    #[serde(default)]
    reason: Option<String>,
}

#[derive(Deserialize)]
struct ItemWire {
    #[serde(rename = "type", default)]
    kind: Option<String>,
}

fn non_empty(s: &Option<Cow<'_, str>>) -> bool {
    s.as_deref().is_some_and(|s| !s.is_empty())
}

/// The message of an OpenAI-style error object (`{"error": {"message": ..}}`,
/// `{"error": "..."}`, `{"message": ..}`), or `None`.
pub fn error_message(value: &serde_json::Value) -> Option<String> {
    let error = value.get("error").unwrap_or(value);
    match error {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(map) => match map.get("message") {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
            None if value.get("error").is_some() => Some(error.to_string()),
            None => None,
        },
        _ => None,
    }
}

/// Phrases engines use when a prompt plus the output asked for do not fit
/// the model's window, lowercased: vLLM and OpenAI ("maximum context
/// length", `context_length_exceeded`), vLLM's V1 engine ("longer than the
/// maximum model length"), SGLang ("longer than the model's context
/// length"), llama.cpp (`exceed_context_size_error`, "exceeds the available
/// context size"), TGI ("`inputs` tokens + `max_new_tokens` must be <="),
/// Anthropic-style proxies ("prompt is too long").
const CONTEXT_OVERFLOW_PHRASES: [&str; 8] = [
    "maximum context length",
    "context_length_exceeded",
    "longer than the maximum model length",
    "longer than the model's context length",
    "exceed_context_size_error",
    "exceeds the available context size",
    "must be <=",
    "prompt is too long",
];

/// Whether an error (an HTTP body or an error event's text) says the call
/// does not fit the model's context window. TGI's "must be <=" only counts
/// next to its token names, so an unrelated bound is not taken for one.
pub fn says_context_overflow(text: &str) -> bool {
    let text = text.to_lowercase();
    CONTEXT_OVERFLOW_PHRASES.iter().any(|phrase| {
        text.contains(phrase)
            && (*phrase != "must be <="
                || text.contains("max_new_tokens")
                || text.contains("max_total_tokens"))
    })
}

/// The class of an error event inside a stream: some servers refuse an
/// oversized prompt, a call over quota, or a call they are too busy for, in
/// the stream itself. A quota is named in the error's fields (or its `code`
/// is 429); an overload in its fields, its `code` (503, 529), or its words
/// (TGI's event is `{"error":"Model is overloaded","error_type":"overloaded"}`,
/// and only the words reach here).
fn error_event_class(error: &serde_json::Value) -> ErrorClass {
    let code = error.get("code").and_then(|c| {
        c.as_u64()
            .or_else(|| c.as_str().and_then(|s| s.trim().parse().ok()))
    });
    let wrapped = serde_json::json!({ "error": error });
    if says_context_overflow(&error.to_string()) {
        ErrorClass::ContextLength
    } else if names_a_rate_limit(&wrapped) || code == Some(429) {
        ErrorClass::RateLimited
    } else if names_an_overload(&wrapped)
        || matches!(code, Some(503 | 529))
        || error_message(&wrapped).is_some_and(|m| says_overloaded_in_words(&m))
    {
        ErrorClass::Overloaded
    } else {
        ErrorClass::BrokenStream
    }
}

/// The class of a call the server answered with a non-2xx `status` and
/// `body`. Only a quota is `rate-limited`: an error whose `code` or `type`
/// names a rate limit (whatever the status), or a 429 that names no
/// overload. A call the server is too busy for is `overloaded`: a 503 or a
/// 529 (whatever its words, a `Retry-After` or not), or an error whose
/// `code` or `type` names an overload (Anthropic's `overloaded_error`,
/// TGI's 429 with `error_type: "overloaded"`, which is its queue full, not
/// a quota). A context-window refusal (400, 413, 422) is its own class.
pub fn http_error_class(status: u16, body: &str) -> ErrorClass {
    let value = serde_json::from_str::<serde_json::Value>(body).ok();
    let names = |f: fn(&serde_json::Value) -> bool| value.as_ref().is_some_and(f);
    if names(names_a_rate_limit) {
        ErrorClass::RateLimited
    } else if matches!(status, 503 | 529) || names(names_an_overload) {
        ErrorClass::Overloaded
    } else if status == 429 {
        ErrorClass::RateLimited
    } else if matches!(status, 400 | 413 | 422) && says_context_overflow(body) {
        ErrorClass::ContextLength
    } else {
        ErrorClass::HttpStatus
    }
}

/// Whether an error body's machine-readable fields (`code`, `type`,
/// `error_type`, at the top or under `error`) name a rate limit, as OpenAI
/// (`rate_limit_exceeded`), Anthropic-style gateways (`rate_limit_error`),
/// LiteLLM (`RateLimitError`) and AWS (`ThrottlingException`) spell it.
/// The message alone is not read: "rate limit" in free text is too loose.
pub fn says_rate_limited(body: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(body).is_ok_and(|v| names_a_rate_limit(&v))
}

fn names_a_rate_limit(value: &serde_json::Value) -> bool {
    names_in_fields(value, |s| {
        s.contains("rate_limit") || s.contains("ratelimit") || s.contains("throttl")
    })
}

/// The fields name an overload, as Anthropic (`overloaded_error`), TGI
/// (`error_type: "overloaded"`) and gateways (`server_overloaded`) spell it.
fn names_an_overload(value: &serde_json::Value) -> bool {
    names_in_fields(value, |s| s.contains("overload"))
}

/// Whether a field `code`, `type` or `error_type` (at the top or under
/// `error`) is a string that, lowercased, `names`.
fn names_in_fields(value: &serde_json::Value, names: impl Fn(&str) -> bool) -> bool {
    let of = |v: &serde_json::Value| {
        ["code", "type", "error_type"].iter().any(|key| {
            v.get(key)
                .and_then(|f| f.as_str())
                .is_some_and(|s| names(&s.to_ascii_lowercase()))
        })
    };
    of(value) || value.get("error").is_some_and(of)
}

/// Whether an error event's words say the server is too busy to serve the
/// call ("Model is overloaded", "the server is busy", "at capacity"). Read
/// only for error events, which have no status to go by.
fn says_overloaded_in_words(message: &str) -> bool {
    let message = message.to_lowercase();
    [
        "overloaded",
        "server is busy",
        "at capacity",
        "over capacity",
    ]
    .iter()
    .any(|phrase| message.contains(phrase))
}

/// The longest wait a `Retry-After` is taken at: beyond it a header is
/// read as "a long time" (an hour-long quota window must not park a slot
/// for an hour of a 60 s run).
pub const RETRY_AFTER_CAP: std::time::Duration = std::time::Duration::from_secs(60);

/// A refusal's wait: `retry-after-ms` (milliseconds, OpenAI's and Azure's)
/// wins over `Retry-After`, which is whole or decimal seconds or an HTTP
/// date (RFC 9110 §10.2.3; a date in the past means now). Capped at
/// [`RETRY_AFTER_CAP`]; `None` when neither header parses.
pub fn parse_retry_after(
    retry_after: Option<&str>,
    retry_after_ms: Option<&str>,
    now: std::time::SystemTime,
) -> Option<std::time::Duration> {
    use std::time::Duration;
    let from_ms = retry_after_ms
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|ms| ms.is_finite() && *ms >= 0.0)
        .map(|ms| Duration::from_secs_f64(ms / 1e3));
    let from_header = || {
        let v = retry_after?.trim();
        if let Ok(s) = v.parse::<f64>() {
            return (s.is_finite() && s >= 0.0).then(|| Duration::from_secs_f64(s));
        }
        let at = crate::time::parse_http_date(v)?;
        Some(at.duration_since(now).unwrap_or(Duration::ZERO))
    };
    from_ms.or_else(from_header).map(|d| d.min(RETRY_AFTER_CAP))
}

impl StreamObserver {
    pub fn new() -> Self {
        Self::default()
    }

    /// An observer of `wire`'s events.
    pub fn for_wire(wire: Wire) -> Self {
        StreamObserver {
            wire,
            ..Self::default()
        }
    }

    /// An observer that keeps the streamed text, so a tokenizer can count
    /// it when the server sends no usage ([`Self::count_output_with`]).
    pub fn keeping_text() -> Self {
        Self::keeping_text_of(Wire::Chunks)
    }

    /// [`Self::keeping_text`] for `wire`'s events.
    pub fn keeping_text_of(wire: Wire) -> Self {
        StreamObserver {
            wire,
            output_text: Some(String::new()),
            reasoning_text: Some(String::new()),
            ..Self::default()
        }
    }

    /// After the stream: when the server reported no output usage, count the
    /// kept text with `tokenizer` (outside the measured time).
    pub fn count_output_with(&mut self, tokenizer: &PromptTokenizer) {
        let count = |text: &str| {
            tokenizer
                .count(text)
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX))
        };
        if self.completion_tokens_reported.is_none()
            && let Some(text) = &self.output_text
        {
            self.output_tokens_counted = count(text);
        }
        if self.reasoning_tokens_reported.is_none()
            && self.reasoning_chunks > 0
            && let Some(text) = &self.reasoning_text
        {
            self.reasoning_tokens_counted = count(text);
        }
    }

    /// One generated event at `at_ms`: reasoning, output, or both.
    fn on_generated(&mut self, at_ms: f64, reasoning: bool, output: bool) {
        if !(reasoning || output) {
            return;
        }
        self.content_chunks += 1;
        self.reasoning_chunks += u32::from(reasoning);
        if output && self.first_output_ms.is_none() {
            self.first_output_ms = Some(at_ms);
        }
        if let Some(last) = self.last_content_ms {
            self.itl_ms.push(round_us((at_ms - last).max(0.0)) as f32);
        } else {
            self.first_content_ms = Some(at_ms);
        }
        self.last_content_ms = Some(at_ms);
    }

    /// One event of the Responses API (see the module docs).
    fn on_responses_event(&mut self, data: &str, at_ms: f64) -> EventVerdict {
        let event: ResponsesEventWire<'_> = match serde_json::from_str(data) {
            Ok(event) => event,
            Err(e) => {
                return EventVerdict::Fail(
                    ErrorClass::MalformedEvent,
                    truncate_detail(&format!("event is not a Responses API event ({e}): {data}")),
                );
            }
        };
        let delta = event.delta.as_deref().filter(|d| !d.is_empty());
        match event.kind.as_ref() {
            "response.output_text.delta" | "response.function_call_arguments.delta" => {
                if let (Some(text), Some(d)) = (self.output_text.as_mut(), delta) {
                    text.push_str(d);
                }
                self.on_generated(at_ms, false, delta.is_some());
            }
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                if let (Some(text), Some(d)) = (self.reasoning_text.as_mut(), delta) {
                    text.push_str(d);
                }
                if let (Some(text), Some(d)) = (self.output_text.as_mut(), delta) {
                    text.push_str(d);
                }
                self.on_generated(at_ms, delta.is_some(), false);
            }
            "response.output_item.added"
                if event.item.as_ref().and_then(|i| i.kind.as_deref()) == Some("function_call") =>
            {
                self.tool_calls += 1;
            }
            "response.completed" | "response.incomplete" => {
                self.done = true;
                if let Some(response) = &event.response {
                    if let Some(usage) = &response.usage {
                        self.prompt_tokens_reported =
                            usage.input_tokens.or(self.prompt_tokens_reported);
                        self.cached_tokens_reported = usage
                            .input_tokens_details
                            .as_ref()
                            .and_then(|d| d.cached_tokens)
                            .or(self.cached_tokens_reported);
                        self.completion_tokens_reported =
                            usage.output_tokens.or(self.completion_tokens_reported);
                        self.reasoning_tokens_reported = usage
                            .output_tokens_details
                            .as_ref()
                            .and_then(|d| d.reasoning_tokens)
                            .or(self.reasoning_tokens_reported);
                    }
                    self.finish_reason = Some(
                        match response
                            .incomplete_details
                            .as_ref()
                            .and_then(|d| d.reason.as_deref())
                        {
                            // As chat says it, so the card reads one vocabulary.
                            Some("max_output_tokens") => "length".to_string(),
                            Some(other) => other.to_string(),
                            None if self.tool_calls > 0 => "tool_calls".to_string(),
                            // `completed`, in chat's word, so every API's
                            // answers read alike on the card.
                            None => match response.status.as_deref() {
                                Some("completed") | None => "stop".to_string(),
                                Some(other) => other.to_string(),
                            },
                        },
                    );
                }
                return EventVerdict::Done;
            }
            "response.failed" | "error" => {
                let error = event
                    .response
                    .as_ref()
                    .and_then(|r| r.error.clone())
                    .unwrap_or_else(
                        || serde_json::json!({"message": event.message, "code": event.code}),
                    );
                let message = error_message(&serde_json::json!({ "error": error }))
                    .unwrap_or_else(|| error.to_string());
                return EventVerdict::Fail(
                    error_event_class(&error),
                    truncate_detail(&format!("server sent an error event: {message}")),
                );
            }
            _ => {}
        }
        EventVerdict::Continue
    }

    /// Count raw body bytes (to tell "not an event stream" from "cut short").
    pub fn on_bytes(&mut self, n: usize) {
        self.bytes += n as u64;
    }

    /// One event that arrived at `at_ms`.
    /// Read a whole SSE body already in memory (a probe's answer, not a
    /// timed call: every event at 0 ms), up to its `[DONE]` or its first
    /// failure: how the stream ended.
    pub fn read_all(&mut self, body: &[u8]) -> StreamEnd {
        let mut decoder = super::sse::SseDecoder::new();
        decoder.push(body);
        let mut events = Vec::new();
        while let Some(event) = decoder.next_event() {
            events.push(event);
        }
        while let Some(event) = decoder.finish() {
            events.push(event);
        }
        for event in &events {
            match self.on_event(event, 0.0) {
                EventVerdict::Continue => {}
                EventVerdict::Done => return StreamEnd::Done,
                EventVerdict::Fail(class, detail) => return StreamEnd::Failed(class, detail),
            }
        }
        StreamEnd::Eof
    }

    pub fn on_event(&mut self, event: &SseEvent, at_ms: f64) -> EventVerdict {
        self.events += 1;
        let data = event.data.trim();
        if data == "[DONE]" {
            self.done = true;
            return EventVerdict::Done;
        }
        if self.wire == Wire::Responses {
            return self.on_responses_event(data, at_ms);
        }
        let chunk: ChunkWire<'_> = match serde_json::from_str(data) {
            Ok(chunk) => chunk,
            Err(e) => {
                return EventVerdict::Fail(
                    ErrorClass::MalformedEvent,
                    truncate_detail(&format!("event is not valid JSON ({e}): {data}")),
                );
            }
        };
        if let Some(error) = &chunk.error {
            let message = error_message(&serde_json::json!({ "error": error }))
                .unwrap_or_else(|| error.to_string());
            return EventVerdict::Fail(
                error_event_class(error),
                truncate_detail(&format!("server sent an error event: {message}")),
            );
        }
        if let Some(usage) = &chunk.usage {
            // Servers with continuous usage stats send it on every chunk: the
            // last one is the total.
            self.prompt_tokens_reported = usage.prompt_tokens.or(self.prompt_tokens_reported);
            self.cached_tokens_reported = usage
                .prompt_tokens_details
                .as_ref()
                .and_then(|d| d.cached_tokens)
                .or(self.cached_tokens_reported);
            self.completion_tokens_reported =
                usage.completion_tokens.or(self.completion_tokens_reported);
            self.reasoning_tokens_reported = usage
                .completion_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens)
                .or(self.reasoning_tokens_reported);
        }
        let Some(choices) = &chunk.choices else {
            if chunk.usage.is_some() {
                return EventVerdict::Continue;
            }
            return EventVerdict::Fail(
                ErrorClass::MalformedEvent,
                truncate_detail(&format!("event has neither `choices` nor `usage`: {data}")),
            );
        };
        let (mut reasoning, mut output) = (false, false);
        for choice in choices {
            if let Some(delta) = &choice.delta {
                reasoning |= non_empty(&delta.reasoning_content) || non_empty(&delta.reasoning);
                output |= non_empty(&delta.content);
                for call in delta.tool_calls.iter().flatten() {
                    // A call's first delta names it, later ones stream its
                    // arguments: both are generated output.
                    let function = call.function.as_ref();
                    output |=
                        function.is_some_and(|f| non_empty(&f.name) || non_empty(&f.arguments));
                    if function.is_some_and(|f| non_empty(&f.name)) {
                        self.tool_calls = self.tool_calls.max(call.index.unwrap_or(0) + 1);
                    }
                }
            }
            output |= non_empty(&choice.text);
            if self.output_text.is_some() {
                self.keep_text(choice);
            }
            if let Some(reason) = &choice.finish_reason {
                self.finish_reason = Some(reason.clone());
            }
        }
        self.on_generated(at_ms, reasoning, output);
        EventVerdict::Continue
    }

    /// The streamed text of one choice, for a local count.
    fn keep_text(&mut self, choice: &ChoiceWire<'_>) {
        let delta = choice.delta.as_ref();
        let reasoning = [
            delta.and_then(|d| d.reasoning_content.as_deref()),
            delta.and_then(|d| d.reasoning.as_deref()),
        ];
        let args = delta
            .and_then(|d| d.tool_calls.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|c| c.function.as_ref().and_then(|f| f.arguments.as_deref()));
        if let Some(text) = self.reasoning_text.as_mut() {
            reasoning.iter().flatten().for_each(|r| text.push_str(r));
        }
        if let Some(text) = self.output_text.as_mut() {
            for piece in reasoning
                .into_iter()
                .flatten()
                .chain(
                    [
                        delta.and_then(|d| d.content.as_deref()),
                        choice.text.as_deref(),
                    ]
                    .into_iter()
                    .flatten(),
                )
                .chain(args)
            {
                text.push_str(piece);
            }
        }
    }

    /// Classify the end of the stream.
    pub fn conclude(&self, end: StreamEnd) -> Option<(ErrorClass, String)> {
        match end {
            StreamEnd::Failed(class, detail) => Some((class, detail)),
            StreamEnd::Done | StreamEnd::Eof => {
                if !self.done && self.finish_reason.is_none() {
                    if self.events == 0 && self.bytes > 0 {
                        return Some((
                            ErrorClass::MalformedEvent,
                            format!(
                                "response is not an event stream ({} bytes, no event)",
                                self.bytes
                            ),
                        ));
                    }
                    return Some((
                        ErrorClass::BrokenStream,
                        format!(
                            "stream closed before [DONE] or a finish reason, after {} content chunks",
                            self.content_chunks
                        ),
                    ));
                }
                if self.content_chunks == 0 {
                    return Some((
                        ErrorClass::EmptyOutput,
                        format!(
                            "stream finished without any content (finish_reason {})",
                            self.finish_reason.as_deref().unwrap_or("none")
                        ),
                    ));
                }
                None
            }
        }
    }

    /// Reasoning tokens and where the count comes from; `(0, None)` for
    /// an answer without reasoning.
    pub fn reasoning_tokens(&self) -> (u32, Option<TokenSource>) {
        match (
            self.reasoning_tokens_reported,
            self.reasoning_tokens_counted,
        ) {
            (Some(n), _) => (
                n,
                (n > 0 || self.reasoning_chunks > 0).then_some(TokenSource::Usage),
            ),
            (None, Some(n)) => (n, Some(TokenSource::Tokenizer)),
            (None, None) if self.reasoning_chunks > 0 => {
                (self.reasoning_chunks, Some(TokenSource::Chunks))
            }
            (None, None) => (0, None),
        }
    }

    /// Output tokens and where the count comes from.
    pub fn output_tokens(&self) -> (u32, TokenSource) {
        match self.completion_tokens_reported {
            Some(n) => (n, TokenSource::Usage),
            None => match self.output_tokens_counted {
                Some(n) => (n, TokenSource::Tokenizer),
                None => (self.content_chunks, TokenSource::Chunks),
            },
        }
    }

    /// The last finish reason the stream gave.
    pub fn finish_reason(&self) -> Option<&str> {
        self.finish_reason.as_deref()
    }

    /// Content chunks seen so far (for live progress).
    pub fn content_chunks(&self) -> u32 {
        self.content_chunks
    }

    /// ms since `t0` of the first content chunk.
    pub fn first_content_ms(&self) -> Option<f64> {
        self.first_content_ms
    }

    /// Assemble the journal record of a call that was scheduled at
    /// `times.scheduled_ms` and ended at `times.completed_ms`.
    ///
    /// A failed call keeps what was measured before the failure (TTFT, gaps,
    /// tokens counted) — it is real data about the failure — but has no E2E.
    pub fn into_record(self, id: CallId, times: CallTimes, end: StreamEnd) -> RequestRecord {
        let error = self.conclude(end);
        let (output_tokens, output_tokens_source) = self.output_tokens();
        let (reasoning_tokens, reasoning_tokens_source) = self.reasoning_tokens();
        let ok = error.is_none();
        let (error, error_detail) = match error {
            Some((class, detail)) => (Some(class), Some(detail)),
            None => (None, None),
        };
        RequestRecord {
            task: id.task,
            call: id.call,
            scheduled_ms: times.scheduled_ms,
            sent_ms: times.sent_ms,
            schedule_lag_ms: round_us((times.sent_ms - times.scheduled_ms).max(0.0)),
            completed_ms: times.completed_ms,
            ttft_ms: self
                .first_content_ms
                .map(|t| round_us(t - times.scheduled_ms)),
            ttfo_ms: self
                .first_output_ms
                .map(|t| round_us(t - times.scheduled_ms)),
            e2e_ms: ok.then_some(round_us(times.completed_ms - times.scheduled_ms)),
            itl_ms: self.itl_ms,
            prompt_tokens_requested: id.prompt_tokens_requested,
            prompt_tokens_reported: self.prompt_tokens_reported,
            cached_tokens: self.cached_tokens_reported,
            output_tokens_requested: id.output_tokens_requested,
            output_tokens,
            output_tokens_source,
            reasoning_tokens,
            reasoning_tokens_source,
            tool_calls: self.tool_calls,
            finish_reason: self.finish_reason,
            error,
            error_detail,
            http_status: times.http_status,
            reconnects: 0,
            class: None,
            retry_after_ms: None,
        }
    }
}

/// Which call a record belongs to and what it asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallId {
    pub task: u64,
    pub call: u32,
    pub prompt_tokens_requested: u32,
    pub output_tokens_requested: u32,
}

/// The instants of a call, ms since `t0`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallTimes {
    pub scheduled_ms: f64,
    pub sent_ms: f64,
    pub completed_ms: f64,
    pub http_status: Option<u16>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(data: &str) -> SseEvent {
        SseEvent {
            event: None,
            data: data.to_string(),
        }
    }

    fn chat(content: &str) -> SseEvent {
        ev(&format!(
            r#"{{"choices":[{{"index":0,"delta":{{"content":"{content}"}},"finish_reason":null}}]}}"#
        ))
    }

    const FINISH: &str = r#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#;
    const USAGE: &str =
        r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":3,"total_tokens":15}}"#;

    fn id() -> CallId {
        CallId {
            task: 7,
            call: 1,
            prompt_tokens_requested: 10,
            output_tokens_requested: 3,
        }
    }

    fn times(scheduled_ms: f64, sent_ms: f64, completed_ms: f64) -> CallTimes {
        CallTimes {
            scheduled_ms,
            sent_ms,
            completed_ms,
            http_status: Some(200),
        }
    }

    #[test]
    fn chat_stream_with_usage() {
        let mut o = StreamObserver::new();
        // Role-only first chunk is not content.
        let role = ev(r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#);
        assert_eq!(o.on_event(&role, 101.0), EventVerdict::Continue);
        assert_eq!(o.on_event(&chat("a"), 120.0), EventVerdict::Continue);
        assert_eq!(o.on_event(&chat("b"), 125.5), EventVerdict::Continue);
        assert_eq!(o.on_event(&chat("c"), 130.0), EventVerdict::Continue);
        assert_eq!(o.on_event(&ev(FINISH), 130.2), EventVerdict::Continue);
        assert_eq!(o.on_event(&ev(USAGE), 130.3), EventVerdict::Continue);
        assert_eq!(o.on_event(&ev("[DONE]"), 130.4), EventVerdict::Done);
        let r = o.into_record(id(), times(100.0, 100.5, 130.4), StreamEnd::Done);
        assert_eq!(r.error, None);
        assert_eq!(r.ttft_ms, Some(20.0));
        assert_eq!(r.itl_ms, vec![5.5, 4.5]);
        assert!((r.e2e_ms.unwrap() - 30.4).abs() < 1e-9);
        assert_eq!(r.schedule_lag_ms, 0.5);
        assert_eq!(r.output_tokens, 3);
        assert_eq!(r.output_tokens_source, TokenSource::Usage);
        assert_eq!(r.prompt_tokens_reported, Some(12));
        assert_eq!(r.finish_reason.as_deref(), Some("length"));
        assert_eq!((r.task, r.call, r.output_tokens_requested), (7, 1, 3));
    }

    #[cfg(feature = "tokenizer")]
    #[test]
    fn without_usage_a_tokenizer_counts_the_streamed_text() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/tokenizer-small.json");
        let tokenizer = PromptTokenizer::load(&path).unwrap();
        let stream = |o: &mut StreamObserver| {
            // Two chunks, " the" (one merged token) and " cat" (three).
            o.on_event(&chat(" the"), 10.0);
            o.on_event(&chat(" cat"), 11.0);
        };
        let mut o = StreamObserver::keeping_text();
        stream(&mut o);
        o.on_event(&ev("[DONE]"), 12.0);
        o.count_output_with(&tokenizer);
        let r = o.into_record(id(), times(0.0, 0.0, 12.0), StreamEnd::Done);
        assert_eq!(
            (r.output_tokens, r.output_tokens_source),
            (4, TokenSource::Tokenizer)
        );
        // Reported usage stays the truth.
        let mut o = StreamObserver::keeping_text();
        stream(&mut o);
        o.on_event(
            &ev(r#"{"choices":[],"usage":{"completion_tokens":9}}"#),
            12.0,
        );
        o.count_output_with(&tokenizer);
        assert_eq!(o.output_tokens(), (9, TokenSource::Usage));
    }

    #[test]
    fn completions_text_without_usage_counts_chunks() {
        let mut o = StreamObserver::new();
        for (i, t) in ["x", "y"].iter().enumerate() {
            let e = ev(&format!(
                r#"{{"choices":[{{"text":"{t}","finish_reason":null}}]}}"#
            ));
            o.on_event(&e, 10.0 + i as f64);
        }
        o.on_event(
            &ev(r#"{"choices":[{"text":"","finish_reason":"stop"}]}"#),
            12.0,
        );
        let r = o.into_record(id(), times(0.0, 0.0, 12.0), StreamEnd::Eof);
        assert_eq!(
            r.error, None,
            "a finish reason without [DONE] is a complete stream"
        );
        assert_eq!(
            (r.output_tokens, r.output_tokens_source),
            (2, TokenSource::Chunks)
        );
        assert_eq!(r.finish_reason.as_deref(), Some("stop"));
        assert_eq!(r.prompt_tokens_reported, None);
    }

    #[test]
    fn reasoning_content_counts_as_first_token() {
        let mut o = StreamObserver::new();
        o.on_event(
            &ev(r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#),
            40.0,
        );
        o.on_event(&ev(r#"{"choices":[{"delta":{"reasoning":"so"}}]}"#), 45.0);
        o.on_event(&chat("ok"), 52.0);
        assert_eq!(o.first_content_ms(), Some(40.0));
        assert_eq!(o.content_chunks(), 3);
    }

    #[test]
    fn reasoning_then_the_answer_are_timed_apart() {
        let mut o = StreamObserver::new();
        o.on_event(&ev(r#"{"choices":[{"delta":{"role":"assistant"}}]}"#), 30.0);
        o.on_event(&ev(r#"{"choices":[{"delta":{"reasoning":"let"}}]}"#), 31.0);
        o.on_event(&ev(r#"{"choices":[{"delta":{"reasoning":" me"}}]}"#), 35.0);
        o.on_event(&chat("Yes"), 112.0);
        o.on_event(&ev(FINISH), 113.0);
        o.on_event(
            &ev(r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"completion_tokens_details":{"reasoning_tokens":2}}}"#),
            113.5,
        );
        o.on_event(&ev("[DONE]"), 114.0);
        let r = o.into_record(id(), times(0.0, 0.0, 114.0), StreamEnd::Done);
        assert_eq!(r.error, None);
        assert_eq!((r.ttft_ms, r.ttfo_ms), (Some(31.0), Some(112.0)));
        assert_eq!(
            (r.reasoning_tokens, r.reasoning_tokens_source),
            (2, Some(TokenSource::Usage))
        );
        assert_eq!(r.itl_ms, vec![4.0, 77.0], "ITL spans every generated event");
        // Without usage details, the reasoning events are counted.
        let mut o = StreamObserver::new();
        o.on_event(
            &ev(r#"{"choices":[{"delta":{"reasoning_content":"hmm"}}]}"#),
            1.0,
        );
        o.on_event(&chat("ok"), 2.0);
        o.on_event(&ev("[DONE]"), 3.0);
        assert_eq!(o.reasoning_tokens(), (1, Some(TokenSource::Chunks)));
        // A server that reports zero reasoning did not reason.
        let mut o = StreamObserver::new();
        o.on_event(&chat("ok"), 2.0);
        o.on_event(
            &ev(r#"{"choices":[],"usage":{"completion_tokens":1,"completion_tokens_details":{"reasoning_tokens":0}}}"#),
            2.5,
        );
        assert_eq!(o.reasoning_tokens(), (0, None));
    }

    #[test]
    fn an_answer_that_is_all_reasoning_has_no_ttfo() {
        let mut o = StreamObserver::new();
        o.on_event(&ev(r#"{"choices":[{"delta":{"reasoning":"a"}}]}"#), 10.0);
        o.on_event(
            &ev(r#"{"choices":[{"delta":{},"finish_reason":"length"}]}"#),
            11.0,
        );
        o.on_event(&ev("[DONE]"), 11.0);
        let r = o.into_record(id(), times(0.0, 0.0, 11.0), StreamEnd::Done);
        assert_eq!(
            r.error, None,
            "reasoning is generated output, not an empty one"
        );
        assert_eq!((r.ttft_ms, r.ttfo_ms, r.ttfo()), (Some(10.0), None, None));
    }

    #[test]
    fn tool_calls_are_output_and_a_normal_end() {
        let mut o = StreamObserver::new();
        o.on_event(
            &ev(r#"{"choices":[{"delta":{"role":"assistant","content":null}}]}"#),
            5.0,
        );
        o.on_event(
            &ev(r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"search","arguments":""}}]}}]}"#),
            20.0,
        );
        o.on_event(
            &ev(r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"q\":"}}]}}]}"#),
            24.0,
        );
        o.on_event(
            &ev(r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"x\"}"}}]}}]}"#),
            28.0,
        );
        o.on_event(
            &ev(r#"{"choices":[{"delta":{},"finish_reason":"tool_calls"}]}"#),
            28.5,
        );
        o.on_event(&ev("[DONE]"), 29.0);
        let r = o.into_record(id(), times(0.0, 0.0, 29.0), StreamEnd::Done);
        assert_eq!(r.error, None, "{r:?}");
        assert_eq!((r.ttft_ms, r.ttfo_ms), (Some(20.0), Some(20.0)));
        assert_eq!(r.tool_calls, 1);
        assert_eq!(r.finish_reason.as_deref(), Some("tool_calls"));
        assert_eq!(r.output_tokens, 3, "counted by events without usage");
    }

    fn responses(kind: &str, rest: &str) -> SseEvent {
        SseEvent {
            event: Some(kind.to_string()),
            data: format!(r#"{{"type":"{kind}"{rest}}}"#),
        }
    }

    #[test]
    fn the_responses_api_is_read_from_its_typed_events() {
        let mut o = StreamObserver::for_wire(Wire::Responses);
        let seq = [
            (
                responses(
                    "response.created",
                    r#","response":{"status":"in_progress"}"#,
                ),
                1.0,
            ),
            (
                responses(
                    "response.output_item.added",
                    r#","item":{"type":"reasoning"}"#,
                ),
                2.0,
            ),
            (
                responses("response.reasoning_text.delta", r#","delta":"think""#),
                30.0,
            ),
            (
                responses("response.reasoning_text.delta", r#","delta":" more""#),
                34.0,
            ),
            (
                responses(
                    "response.output_item.added",
                    r#","item":{"type":"message"}"#,
                ),
                90.0,
            ),
            (
                responses("response.output_text.delta", r#","delta":" Yes""#),
                100.0,
            ),
            (
                responses("response.output_text.delta", r#","delta":" two words""#),
                104.0,
            ),
            (
                responses("response.output_text.done", r#","text":" Yes two words""#),
                104.5,
            ),
        ];
        for (event, at) in &seq {
            assert_eq!(o.on_event(event, *at), EventVerdict::Continue);
        }
        let completed = responses(
            "response.completed",
            r#","response":{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},"usage":{"input_tokens":8,"output_tokens":5,"output_tokens_details":{"reasoning_tokens":2},"total_tokens":13}}"#,
        );
        assert_eq!(o.on_event(&completed, 105.0), EventVerdict::Done);
        let r = o.into_record(id(), times(0.0, 0.0, 105.0), StreamEnd::Eof);
        assert_eq!(r.error, None, "{r:?}");
        assert_eq!((r.ttft_ms, r.ttfo_ms), (Some(30.0), Some(100.0)));
        assert_eq!(
            (r.output_tokens, r.output_tokens_source),
            (5, TokenSource::Usage)
        );
        assert_eq!(r.reasoning_tokens, 2);
        assert_eq!(r.prompt_tokens_reported, Some(8));
        assert_eq!(r.finish_reason.as_deref(), Some("length"));
        assert_eq!(r.itl_ms, vec![4.0, 66.0, 4.0]);
        // A tool call on the Responses API.
        let mut o = StreamObserver::for_wire(Wire::Responses);
        o.on_event(
            &responses(
                "response.output_item.added",
                r#","item":{"type":"function_call","name":"f"}"#,
            ),
            1.0,
        );
        o.on_event(
            &responses("response.function_call_arguments.delta", r#","delta":"{}""#),
            3.0,
        );
        o.on_event(
            &responses(
                "response.completed",
                r#","response":{"status":"completed"}"#,
            ),
            4.0,
        );
        let r = o.into_record(id(), times(0.0, 0.0, 4.0), StreamEnd::Eof);
        assert_eq!(
            (r.tool_calls, r.ttfo_ms, r.finish_reason.as_deref()),
            (1, Some(3.0), Some("tool_calls"))
        );
        // Failures.
        let mut o = StreamObserver::for_wire(Wire::Responses);
        let failed = responses(
            "response.failed",
            r#","response":{"status":"failed","error":{"code":"server_error","message":"engine died"}}"#,
        );
        assert_eq!(
            o.on_event(&failed, 1.0),
            EventVerdict::Fail(
                ErrorClass::BrokenStream,
                "server sent an error event: engine died".into()
            )
        );
        let mut o = StreamObserver::for_wire(Wire::Responses);
        let quota = responses(
            "error",
            r#","code":"rate_limit_exceeded","message":"slow down""#,
        );
        assert!(matches!(
            o.on_event(&quota, 1.0),
            EventVerdict::Fail(ErrorClass::RateLimited, _)
        ));
        // A stream that stops before response.completed is broken.
        let mut o = StreamObserver::for_wire(Wire::Responses);
        o.on_bytes(10);
        o.on_event(
            &responses("response.output_text.delta", r#","delta":"a""#),
            1.0,
        );
        assert!(matches!(
            o.conclude(StreamEnd::Eof),
            Some((ErrorClass::BrokenStream, _))
        ));
    }

    #[test]
    fn non_json_event_is_malformed() {
        let mut o = StreamObserver::new();
        o.on_event(&chat("a"), 1.0);
        match o.on_event(&ev("{not json"), 2.0) {
            EventVerdict::Fail(ErrorClass::MalformedEvent, detail) => {
                assert!(detail.contains("{not json"), "{detail}")
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn json_without_choices_or_usage_is_malformed() {
        let mut o = StreamObserver::new();
        assert!(matches!(
            o.on_event(&ev(r#"{"id":"x"}"#), 1.0),
            EventVerdict::Fail(ErrorClass::MalformedEvent, _)
        ));
    }

    #[test]
    fn error_event_breaks_the_stream_with_its_message() {
        let mut o = StreamObserver::new();
        let verdict = o.on_event(
            &ev(r#"{"error":{"message":"engine died","code":500}}"#),
            1.0,
        );
        assert_eq!(
            verdict,
            EventVerdict::Fail(
                ErrorClass::BrokenStream,
                "server sent an error event: engine died".into()
            )
        );
    }

    #[test]
    fn eof_before_done_is_a_broken_stream() {
        let mut o = StreamObserver::new();
        o.on_bytes(100);
        o.on_event(&chat("a"), 1.0);
        o.on_event(&chat("b"), 2.0);
        let r = o.into_record(id(), times(0.0, 0.0, 3.0), StreamEnd::Eof);
        assert_eq!(r.error, Some(ErrorClass::BrokenStream));
        assert_eq!(r.e2e_ms, None);
        assert_eq!(
            r.ttft_ms,
            Some(1.0),
            "what was measured before the break is kept"
        );
        assert_eq!(r.output_tokens, 2);
    }

    #[test]
    fn done_without_content_is_empty_output() {
        let mut o = StreamObserver::new();
        o.on_event(&ev(r#"{"choices":[{"delta":{"role":"assistant"}}]}"#), 1.0);
        o.on_event(
            &ev(r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#),
            2.0,
        );
        o.on_event(&ev("[DONE]"), 2.0);
        let r = o.into_record(id(), times(0.0, 0.0, 2.0), StreamEnd::Done);
        assert_eq!(r.error, Some(ErrorClass::EmptyOutput));
        assert_eq!(r.ttft_ms, None);
        assert_eq!(r.output_tokens, 0);
    }

    #[test]
    fn body_without_any_event_is_not_an_event_stream() {
        let mut o = StreamObserver::new();
        o.on_bytes(42);
        assert!(matches!(
            o.conclude(StreamEnd::Eof),
            Some((ErrorClass::MalformedEvent, _))
        ));
        let empty = StreamObserver::new();
        assert!(matches!(
            empty.conclude(StreamEnd::Eof),
            Some((ErrorClass::BrokenStream, _))
        ));
    }

    #[test]
    fn failures_keep_their_class() {
        let o = StreamObserver::new();
        let r = o.into_record(
            id(),
            times(5.0, 6.0, 50.0),
            StreamEnd::Failed(ErrorClass::Timeout, "no completion within 40 ms".into()),
        );
        assert_eq!(r.error, Some(ErrorClass::Timeout));
        assert_eq!(
            r.error_detail.as_deref(),
            Some("no completion within 40 ms")
        );
        assert_eq!(r.completed_ms, 50.0);
    }

    #[test]
    fn context_overflow_refusals_of_every_engine_are_one_class() {
        let refusals = [
            // vLLM (OpenAI server), also OpenAI itself.
            r#"{"object":"error","message":"This model's maximum context length is 8192 tokens. However, you requested 9000 tokens (8000 in the messages, 1000 in the completion).","type":"BadRequestError","param":null,"code":400}"#,
            r#"{"error":{"message":"...","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
            // vLLM V1 engine.
            r#"{"message":"The decoder prompt (length 9000) is longer than the maximum model length of 8192."}"#,
            // SGLang.
            r#"{"message":"The input (9000 tokens) is longer than the model's context length (8192 tokens)."}"#,
            // llama.cpp (as llama-server answers).
            r#"{"error":{"code":400,"message":"request (5005 tokens) exceeds the available context size (2048 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5005,"n_ctx":2048}}"#,
            // TGI (422).
            r#"{"error":"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 `inputs` tokens and 200 `max_new_tokens`","error_type":"validation"}"#,
        ];
        for body in refusals {
            let status = if body.contains("validation") {
                422
            } else {
                400
            };
            assert_eq!(
                http_error_class(status, body),
                ErrorClass::ContextLength,
                "{body}"
            );
        }
        // Other refusals, and the same words with a server error status.
        for (status, body) in [
            (400, r#"{"message":"The model `x` does not exist."}"#),
            (
                422,
                r#"{"error":"Input validation error: `temperature` must be <= 2"}"#,
            ),
            (
                500,
                r#"{"message":"This model's maximum context length is 8192 tokens."}"#,
            ),
        ] {
            assert_eq!(
                http_error_class(status, body),
                ErrorClass::HttpStatus,
                "{body}"
            );
        }
    }

    #[test]
    fn quotas_are_their_own_class() {
        // OpenAI's 429, with or without a machine-readable code.
        let openai = r#"{"error":{"message":"Rate limit reached for requests per min (RPM): Limit 30, Used 30, Requested 1.","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#;
        assert_eq!(http_error_class(429, openai), ErrorClass::RateLimited);
        assert_eq!(http_error_class(429, "slow down"), ErrorClass::RateLimited);
        // Named in the error's type or code, whatever the status: a 503
        // or a 529 that names a quota is one.
        for status in [400, 403, 500, 503, 529] {
            for body in [
                openai,
                r#"{"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your rate limit"}}"#,
                r#"{"error":{"message":"litellm.RateLimitError: ...","type":"RateLimitError","code":"400"}}"#,
                r#"{"__type":"x","code":"ThrottlingException","message":"Too many requests"}"#,
            ] {
                assert_eq!(
                    http_error_class(status, body),
                    ErrorClass::RateLimited,
                    "{status} {body}"
                );
            }
        }
        // Free text alone is not enough.
        assert_eq!(
            http_error_class(
                400,
                r#"{"error":{"message":"the rate limit for this key is 10"}}"#,
            ),
            ErrorClass::HttpStatus
        );
        let mut o = StreamObserver::new();
        let verdict = o.on_event(
            &ev(r#"{"error":{"message":"too many requests","code":429}}"#),
            1.0,
        );
        assert!(
            matches!(verdict, EventVerdict::Fail(ErrorClass::RateLimited, _)),
            "{verdict:?}"
        );
        let mut o = StreamObserver::new();
        let verdict = o.on_event(
            &ev(r#"{"error":{"message":"slow down","code":"rate_limit_exceeded"}}"#),
            1.0,
        );
        assert!(
            matches!(verdict, EventVerdict::Fail(ErrorClass::RateLimited, _)),
            "{verdict:?}"
        );
    }

    #[test]
    fn overloads_are_their_own_class() {
        // A 503 or a 529, whatever it says (and a `Retry-After` changes
        // nothing: it no longer makes a 503 a quota).
        for status in [503, 529] {
            for body in [
                "",
                "busy",
                "Service Unavailable",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
                r#"{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error"}}"#,
                r#"{"error":{"message":"The model is at capacity","type":"server_error"}}"#,
                r#"{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}"#,
            ] {
                assert_eq!(
                    http_error_class(status, body),
                    ErrorClass::Overloaded,
                    "{status} {body}"
                );
            }
        }
        // An overload named in the error's fields, whatever the status:
        // TGI answers its full queue with a 429 that is no quota.
        let tgi = r#"{"error":"Model is overloaded","error_type":"overloaded"}"#;
        assert_eq!(http_error_class(429, tgi), ErrorClass::Overloaded);
        let anthropic =
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(http_error_class(500, anthropic), ErrorClass::Overloaded);
        // The words alone, with another status, are not enough.
        assert_eq!(
            http_error_class(500, r#"{"error":{"message":"server overloaded"}}"#),
            ErrorClass::HttpStatus
        );
        assert_eq!(http_error_class(502, "busy"), ErrorClass::HttpStatus);
        assert_eq!(http_error_class(500, "oops"), ErrorClass::HttpStatus);
        // Mid-stream, by fields, code or words; a quota's event stays one.
        for event in [
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            r#"{"error":"Model is overloaded","error_type":"overloaded"}"#,
            r#"{"error":{"message":"try again later","code":503}}"#,
            r#"{"error":{"message":"try again later","code":"529"}}"#,
            r#"{"error":{"message":"The server is busy, please retry","type":"server_error"}}"#,
        ] {
            let mut o = StreamObserver::new();
            o.on_event(&chat("a"), 1.0);
            let verdict = o.on_event(&ev(event), 2.0);
            assert!(
                matches!(verdict, EventVerdict::Fail(ErrorClass::Overloaded, _)),
                "{event}: {verdict:?}"
            );
        }
        let mut o = StreamObserver::new();
        let verdict = o.on_event(&ev(r#"{"error":{"message":"engine died"}}"#), 1.0);
        assert!(
            matches!(verdict, EventVerdict::Fail(ErrorClass::BrokenStream, _)),
            "{verdict:?}"
        );
        let mut o = StreamObserver::for_wire(Wire::Responses);
        let busy = responses(
            "response.failed",
            r#","response":{"status":"failed","error":{"code":"server_overloaded","message":"busy"}}"#,
        );
        assert!(matches!(
            o.on_event(&busy, 1.0),
            EventVerdict::Fail(ErrorClass::Overloaded, _)
        ));
    }

    #[test]
    fn the_classification_table() {
        let quota = r#"{"error":{"message":"Rate limit reached","code":"rate_limit_exceeded"}}"#;
        for (status, body, class) in [
            (429, "", ErrorClass::RateLimited),
            (429, quota, ErrorClass::RateLimited),
            (503, "", ErrorClass::Overloaded),
            (529, "", ErrorClass::Overloaded),
            (503, quota, ErrorClass::RateLimited),
            (529, quota, ErrorClass::RateLimited),
            (400, quota, ErrorClass::RateLimited),
            (500, "", ErrorClass::HttpStatus),
            (400, "", ErrorClass::HttpStatus),
        ] {
            assert_eq!(http_error_class(status, body), class, "{status} {body}");
        }
        assert_eq!(ErrorClass::Overloaded.as_str(), "overloaded");
        assert_eq!(
            serde_json::to_string(&ErrorClass::Overloaded).unwrap(),
            r#""overloaded""#
        );
    }

    #[test]
    fn retry_after_in_every_form() {
        use std::time::{Duration, UNIX_EPOCH};
        let now = UNIX_EPOCH + Duration::from_secs(784_111_770);
        assert_eq!(
            parse_retry_after(Some("7"), None, now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            parse_retry_after(Some(" 1.5 "), None, now),
            Some(Duration::from_millis(1500))
        );
        // OpenAI's and Azure's millisecond header wins.
        assert_eq!(
            parse_retry_after(Some("2"), Some("1250"), now),
            Some(Duration::from_millis(1250))
        );
        // An HTTP date: the time left until it (none if past).
        assert_eq!(
            parse_retry_after(Some("Sun, 06 Nov 1994 08:49:37 GMT"), None, now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            parse_retry_after(Some("Sun, 06 Nov 1994 08:49:00 GMT"), None, now),
            Some(Duration::ZERO)
        );
        // Capped, and nonsense is no header.
        assert_eq!(
            parse_retry_after(Some("86400"), None, now),
            Some(RETRY_AFTER_CAP)
        );
        assert_eq!(parse_retry_after(Some("soon"), None, now), None);
        assert_eq!(parse_retry_after(Some("-3"), None, now), None);
        assert_eq!(parse_retry_after(None, None, now), None);
    }

    #[test]
    fn an_error_event_about_the_context_is_a_context_rejection() {
        let mut o = StreamObserver::new();
        let verdict = o.on_event(
            &ev(r#"{"error":{"message":"This model's maximum context length is 2048 tokens.","code":400}}"#),
            1.0,
        );
        assert!(
            matches!(verdict, EventVerdict::Fail(ErrorClass::ContextLength, _)),
            "{verdict:?}"
        );
    }

    #[test]
    fn error_messages_of_common_shapes() {
        let v = |s: &str| serde_json::from_str::<serde_json::Value>(s).unwrap();
        assert_eq!(
            error_message(&v(r#"{"error":{"message":"bad model"}}"#)).unwrap(),
            "bad model"
        );
        assert_eq!(
            error_message(&v(r#"{"error":"overloaded"}"#)).unwrap(),
            "overloaded"
        );
        assert_eq!(
            error_message(&v(r#"{"message":"m","code":400}"#)).unwrap(),
            "m"
        );
        assert_eq!(error_message(&v(r#"{"detail":"x"}"#)), None);
    }

    #[test]
    fn details_are_truncated_on_char_boundaries() {
        let long = "é".repeat(MAX_DETAIL_CHARS + 10);
        let t = truncate_detail(&long);
        assert_eq!(t.chars().count(), MAX_DETAIL_CHARS + 1);
        assert!(t.ends_with('…'));
        assert_eq!(truncate_detail("  short "), "short");
    }

    /// A whole SSE body, fed to an observer as bytes arrive in `pieces`.
    fn read_bytes(wire: Wire, body: &[u8], pieces: usize) -> RequestRecord {
        let mut o = StreamObserver::for_wire(wire);
        let mut decoder = crate::exec::sse::SseDecoder::new();
        let mut end = StreamEnd::Eof;
        let step = body.len().div_ceil(pieces.max(1));
        'feed: for (i, chunk) in body.chunks(step).enumerate() {
            decoder.push(chunk);
            while let Some(event) = decoder.next_event() {
                match o.on_event(&event, 10.0 * (i + 1) as f64) {
                    EventVerdict::Continue => {}
                    EventVerdict::Done => {
                        end = StreamEnd::Done;
                        break 'feed;
                    }
                    EventVerdict::Fail(class, detail) => {
                        end = StreamEnd::Failed(class, detail);
                        break 'feed;
                    }
                }
            }
        }
        o.into_record(id(), times(0.0, 0.0, 100.0), end)
    }

    #[test]
    fn cached_tokens_are_read_from_chat_usage_bytes() {
        // vLLM with --enable-prompt-tokens-details, byte for byte.
        let body = concat!(
            "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\"},\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"b\"},\"finish_reason\":\"length\"}]}\n\n",
            "data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"choices\":[],\"usage\":{\"prompt_tokens\":1040,\"total_tokens\":1042,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":1024}}}\n\n",
            "data: [DONE]\n\n"
        );
        for pieces in [1, 7, body.len()] {
            let r = read_bytes(Wire::Chunks, body.as_bytes(), pieces);
            assert_eq!(r.error, None, "{pieces} pieces: {r:?}");
            assert_eq!(r.prompt_tokens_reported, Some(1040));
            assert_eq!(r.cached_tokens, Some(1024), "{pieces} pieces");
        }
    }

    #[test]
    fn cached_tokens_are_read_from_completions_usage_bytes() {
        let body = concat!(
            "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" a\",\"finish_reason\":null}]}\n\n",
            "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\" b\",\"finish_reason\":\"length\"}]}\n\n",
            "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[],\"usage\":{\"prompt_tokens\":40,\"total_tokens\":42,\"completion_tokens\":2,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n",
            "data: [DONE]\n\n"
        );
        let r = read_bytes(Wire::Chunks, body.as_bytes(), 3);
        assert_eq!(r.error, None, "{r:?}");
        // A reported 0 is a cold cache, not "not reported".
        assert_eq!(r.cached_tokens, Some(0));
    }

    #[test]
    fn cached_tokens_not_reported_stay_none() {
        // vLLM's default: no details at all; some servers send a null.
        for usage in [
            r#"{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42}"#,
            r#"{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42,"prompt_tokens_details":null}"#,
            r#"{"prompt_tokens":40,"completion_tokens":2,"total_tokens":42,"prompt_tokens_details":{"cached_tokens":null}}"#,
        ] {
            let body = format!(
                "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"a\"}},\"finish_reason\":\"length\"}}]}}\n\ndata: {{\"choices\":[],\"usage\":{usage}}}\n\ndata: [DONE]\n\n"
            );
            let r = read_bytes(Wire::Chunks, body.as_bytes(), 2);
            assert_eq!(r.error, None, "{usage}: {r:?}");
            assert_eq!(r.prompt_tokens_reported, Some(40));
            assert_eq!(r.cached_tokens, None, "{usage}");
        }
    }

    #[test]
    fn cached_tokens_are_read_from_the_responses_api_bytes() {
        let body = concat!(
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"status\":\"in_progress\"}}\n\n",
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"delta\":\"Hi\"}\n\n",
            "event: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{\"status\":\"completed\",\"usage\":{\"input_tokens\":300,\"input_tokens_details\":{\"cached_tokens\":256},\"output_tokens\":1,\"output_tokens_details\":{\"reasoning_tokens\":0},\"total_tokens\":301}}}\n\n"
        );
        let r = read_bytes(Wire::Responses, body.as_bytes(), 5);
        assert_eq!(r.error, None, "{r:?}");
        assert_eq!(r.prompt_tokens_reported, Some(300));
        assert_eq!(r.cached_tokens, Some(256));
        // A JSON round trip keeps "not reported" apart from 0.
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"cached_tokens\":256"), "{json}");
        let none = RequestRecord {
            cached_tokens: None,
            ..r.clone()
        };
        let json = serde_json::to_string(&none).unwrap();
        assert!(!json.contains("cached_tokens"), "{json}");
        let back: RequestRecord = serde_json::from_str(&json).unwrap();
        assert_eq!(back.cached_tokens, None);
    }
}
