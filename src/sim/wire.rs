//! The simulator's answers as each API puts them on the wire (pure):
//! vLLM's SSE chunks of `/v1/completions` and `/v1/chat/completions`, the
//! typed events of `/v1/responses`, and the non-streamed bodies of all
//! three.
//!
//! Kept apart from the HTTP server ([`super::http`]) so that every event
//! kind is a plain function of its inputs, tested without a socket, and so
//! that scripted servers (`examples/erlang_c`) speak exactly what the
//! simulator speaks ([`Framer`] is public for them).
//!
//! [`Framer`] writes one chunk or event; [`AnswerWriter`] turns a
//! request's tokens, as the engine produces them, into its stream: it
//! buffers tokens into events of `tokens-per-event` ([`AnswerPlan`]),
//! labels them reasoning (`delta.reasoning`, vLLM ≥ 0.10's name;
//! `reasoning_content` is deprecated there), content, or the arguments of
//! a tool call, and ends the stream as the API does.
//!
//! The Responses API streams `event: TYPE\ndata: JSON\n\n` where every JSON
//! has its `type` and an increasing `sequence_number`: `response.created`
//! and `response.in_progress`; per output item (`reasoning`, `message` or
//! `function_call`), `response.output_item.added` (and for text items
//! `response.content_part.added`), its deltas, their `.done` events and
//! `response.output_item.done`; then `response.completed` with the whole
//! response and its usage, status `incomplete` when the length limit ended
//! the answer (as vLLM sends it: under `response.completed`). No `[DONE]`.

use std::fmt::Write as _;

use serde_json::Value;

use super::answer::{AnswerPlan, TokenKind};
use super::engine::FinishReason;
use super::request::Api;

/// `s` as a JSON string literal.
fn js(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// Token counts of one answer, as `usage` reports them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u32,
    /// Every generated token, reasoning included.
    pub completion_tokens: u32,
    /// Of `completion_tokens`, the reasoning ones.
    pub reasoning_tokens: u32,
    /// Of `prompt_tokens`, those served from the prefix cache, when the
    /// server reports them (`prompt_tokens_details.cached_tokens`, the
    /// Responses API's `input_tokens_details`); `None`: not reported.
    pub cached_tokens: Option<u32>,
}

impl Usage {
    fn total(&self) -> u64 {
        u64::from(self.prompt_tokens) + u64::from(self.completion_tokens)
    }

    /// The chunk APIs' `usage` (`completion_tokens_details` only for an
    /// answer that reasoned, as vLLM sends it).
    fn chunks_json(&self) -> String {
        let mut json = format!(
            "{{\"prompt_tokens\":{},\"completion_tokens\":{},\"total_tokens\":{}",
            self.prompt_tokens,
            self.completion_tokens,
            self.total()
        );
        if let Some(cached) = self.cached_tokens {
            let _ = write!(
                json,
                ",\"prompt_tokens_details\":{{\"cached_tokens\":{cached}}}"
            );
        }
        if self.reasoning_tokens > 0 {
            let _ = write!(
                json,
                ",\"completion_tokens_details\":{{\"reasoning_tokens\":{}}}",
                self.reasoning_tokens
            );
        }
        json.push('}');
        json
    }

    /// The Responses API's `usage`.
    fn responses_json(&self) -> String {
        let cached = self.cached_tokens.map_or(String::new(), |n| {
            format!(",\"input_tokens_details\":{{\"cached_tokens\":{n}}}")
        });
        format!(
            "{{\"input_tokens\":{}{cached},\"output_tokens\":{},\"total_tokens\":{},\"output_tokens_details\":{{\"reasoning_tokens\":{}}}}}",
            self.prompt_tokens,
            self.completion_tokens,
            self.total(),
            self.reasoning_tokens
        )
    }
}

/// Serialises one request's chunks and events in vLLM's wire format.
/// Public so scripted servers (`examples/erlang_c`) speak exactly what the
/// simulator speaks.
///
/// [`token_event`](Self::token_event), [`role_event`](Self::role_event),
/// [`usage_event`](Self::usage_event) and
/// [`full_response`](Self::full_response) are the chunk APIs' (completions
/// and chat; a Responses framer writes chat's chunks from them); the
/// Responses API's events are written by [`AnswerWriter`].
pub struct Framer {
    api: Api,
    serial: u64,
    id: String,
    created: u64,
    model: String,
}

impl Framer {
    /// The framer of response number `serial` (ids `cmpl-…`, `chatcmpl-…`,
    /// `resp_…`), created at `created` (Unix seconds), for `model`.
    pub fn new(api: Api, serial: u64, created: u64, model: &str) -> Framer {
        Framer {
            api,
            serial,
            id: match api {
                Api::Completions => format!("cmpl-{serial:016x}"),
                Api::Chat => format!("chatcmpl-{serial:016x}"),
                Api::Responses => format!("resp_{serial:016x}"),
            },
            created,
            model: model.to_string(),
        }
    }

    pub fn api(&self) -> Api {
        self.api
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.api, chunk) {
            (Api::Completions, _) => "text_completion",
            (Api::Chat | Api::Responses, true) => "chat.completion.chunk",
            (Api::Chat | Api::Responses, false) => "chat.completion",
        }
    }

    fn head(&self, chunk: bool) -> String {
        format!(
            "{{\"id\":\"{}\",\"object\":\"{}\",\"created\":{},\"model\":{}",
            self.id,
            self.object(chunk),
            self.created,
            js(&self.model)
        )
    }

    fn finish_json(finish: Option<&str>) -> String {
        finish.map_or_else(|| "null".to_string(), |f| format!("\"{f}\""))
    }

    /// `data: {...}` of one chat choice whose delta is `delta` (JSON).
    fn chat_chunk(&self, out: &mut String, delta: &str, finish: Option<&str>) {
        let finish = Self::finish_json(finish);
        let head = self.head(true);
        let _ = write!(
            out,
            "data: {head},\"choices\":[{{\"index\":0,\"delta\":{delta},\"logprobs\":null,\"finish_reason\":{finish}}}]}}\n\n"
        );
    }

    /// `data: {...}` for one streamed event of answer text.
    pub fn token_event(&self, out: &mut String, text: &str, finish: Option<&str>) {
        match self.api {
            Api::Completions => {
                let text = js(text);
                let finish = Self::finish_json(finish);
                let head = self.head(true);
                let _ = write!(
                    out,
                    "data: {head},\"choices\":[{{\"index\":0,\"text\":{text},\"logprobs\":null,\"finish_reason\":{finish},\"stop_reason\":null}}]}}\n\n"
                );
            }
            Api::Chat | Api::Responses => {
                self.chat_chunk(out, &format!("{{\"content\":{}}}", js(text)), finish)
            }
        }
    }

    /// One chat event of reasoning: `delta.reasoning`.
    pub fn reasoning_event(&self, out: &mut String, text: &str, finish: Option<&str>) {
        self.chat_chunk(out, &format!("{{\"reasoning\":{}}}", js(text)), finish);
    }

    /// The id of the answer's tool call (`call_…`).
    pub fn call_id(&self) -> String {
        format!("call_{:016x}", self.serial)
    }

    /// One chat event of a tool call's arguments: the first (`name` given)
    /// names the call and its function, later ones stream its arguments.
    pub fn tool_call_event(
        &self,
        out: &mut String,
        name: Option<&str>,
        arguments: &str,
        finish: Option<&str>,
    ) {
        let arguments = js(arguments);
        let call = match name {
            Some(name) => format!(
                "{{\"index\":0,\"id\":\"{}\",\"type\":\"function\",\"function\":{{\"name\":{},\"arguments\":{arguments}}}}}",
                self.call_id(),
                js(name)
            ),
            None => format!("{{\"index\":0,\"function\":{{\"arguments\":{arguments}}}}}"),
        };
        self.chat_chunk(out, &format!("{{\"tool_calls\":[{call}]}}"), finish);
    }

    /// The chat role chunk vLLM sends before the first content token.
    pub fn role_event(&self, out: &mut String) {
        self.chat_chunk(out, "{\"role\":\"assistant\",\"content\":\"\"}", None);
    }

    /// The final chunk with `usage` (when `stream_options.include_usage`).
    pub fn usage_event(&self, out: &mut String, prompt: u32, completion: u32) {
        self.usage_event_of(
            out,
            Usage {
                prompt_tokens: prompt,
                completion_tokens: completion,
                reasoning_tokens: 0,
                cached_tokens: None,
            },
        );
    }

    /// [`usage_event`](Self::usage_event) with the reasoning tokens.
    pub fn usage_event_of(&self, out: &mut String, usage: Usage) {
        let head = self.head(true);
        let usage = usage.chunks_json();
        let _ = write!(out, "data: {head},\"choices\":[],\"usage\":{usage}}}\n\n");
    }

    /// A whole non-streamed response of answer text.
    pub fn full_response(&self, text: &str, finish: &str, prompt: u32, completion: u32) -> String {
        let head = self.head(false);
        let text = js(text);
        let usage = Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            reasoning_tokens: 0,
            cached_tokens: None,
        }
        .chunks_json();
        match self.api {
            Api::Completions => format!(
                "{head},\"choices\":[{{\"index\":0,\"text\":{text},\"logprobs\":null,\"finish_reason\":\"{finish}\",\"stop_reason\":null}}],\"usage\":{usage}}}"
            ),
            Api::Chat | Api::Responses => format!(
                "{head},\"choices\":[{{\"index\":0,\"message\":{{\"role\":\"assistant\",\"content\":{text}}},\"logprobs\":null,\"finish_reason\":\"{finish}\"}}],\"usage\":{usage}}}"
            ),
        }
    }

    /// A whole non-streamed chat answer: its text (`null` for none, or for
    /// a tool call), its reasoning, its tool call.
    fn full_chat(&self, answer: &Accumulated, finish: &str, usage: Usage) -> String {
        let head = self.head(false);
        let content = match (&answer.tool, answer.output.is_empty()) {
            (None, false) => js(&answer.output),
            _ => "null".to_string(),
        };
        let mut message = format!("{{\"role\":\"assistant\",\"content\":{content}");
        if !answer.reasoning.is_empty() {
            let _ = write!(message, ",\"reasoning\":{}", js(&answer.reasoning));
        }
        if let Some(name) = &answer.tool {
            let _ = write!(
                message,
                ",\"tool_calls\":[{{\"id\":\"{}\",\"type\":\"function\",\"function\":{{\"name\":{},\"arguments\":{}}}}}]",
                self.call_id(),
                js(name),
                js(&answer.output)
            );
        }
        message.push('}');
        format!(
            "{head},\"choices\":[{{\"index\":0,\"message\":{message},\"logprobs\":null,\"finish_reason\":\"{finish}\"}}],\"usage\":{}}}",
            usage.chunks_json()
        )
    }

    // ------------------------------------------------------ Responses API

    fn item_id(&self, kind: TokenKind) -> String {
        let prefix = match kind {
            TokenKind::Reasoning => "rs",
            TokenKind::Content => "msg",
            TokenKind::ToolArguments => "fc",
        };
        format!("{prefix}_{:016x}", self.serial)
    }

    /// An output item: as added (`text` empty, status `in_progress`) or
    /// done.
    fn item_json(&self, kind: TokenKind, name: &str, text: &str, status: &str) -> String {
        let id = self.item_id(kind);
        let text = js(text);
        match kind {
            TokenKind::Reasoning => {
                let content = if status == "in_progress" {
                    "[]".to_string()
                } else {
                    format!("[{{\"type\":\"reasoning_text\",\"text\":{text}}}]")
                };
                format!(
                    "{{\"type\":\"reasoning\",\"id\":\"{id}\",\"summary\":[],\"content\":{content},\"status\":\"{status}\"}}"
                )
            }
            TokenKind::Content => {
                let content = if status == "in_progress" {
                    "[]".to_string()
                } else {
                    format!("[{{\"type\":\"output_text\",\"text\":{text},\"annotations\":[]}}]")
                };
                format!(
                    "{{\"type\":\"message\",\"id\":\"{id}\",\"status\":\"{status}\",\"role\":\"assistant\",\"content\":{content}}}"
                )
            }
            TokenKind::ToolArguments => format!(
                "{{\"type\":\"function_call\",\"id\":\"{id}\",\"call_id\":\"{}\",\"name\":{},\"arguments\":{text},\"status\":\"{status}\"}}",
                self.call_id(),
                js(name)
            ),
        }
    }

    /// The content part of a text item (none for a function call).
    fn part_json(kind: TokenKind, text: &str) -> Option<String> {
        let text = js(text);
        match kind {
            TokenKind::Reasoning => {
                Some(format!("{{\"type\":\"reasoning_text\",\"text\":{text}}}"))
            }
            TokenKind::Content => Some(format!(
                "{{\"type\":\"output_text\",\"text\":{text},\"annotations\":[]}}"
            )),
            TokenKind::ToolArguments => None,
        }
    }

    /// The response object: `output` and `usage` are JSON (`usage` `null`
    /// while in progress); `incomplete` when the length limit ended it.
    fn response_json(&self, status: &str, output: &str, usage: Option<Usage>) -> String {
        let incomplete = if status == "incomplete" {
            "{\"reason\":\"max_output_tokens\"}"
        } else {
            "null"
        };
        let usage = usage.map_or_else(|| "null".to_string(), |u| u.responses_json());
        format!(
            "{{\"id\":\"{}\",\"object\":\"response\",\"created_at\":{},\"status\":\"{status}\",\"model\":{},\"output\":[{output}],\"incomplete_details\":{incomplete},\"error\":null,\"usage\":{usage}}}",
            self.id,
            self.created,
            js(&self.model)
        )
    }
}

/// What one answer said so far.
#[derive(Debug, Default)]
struct Accumulated {
    reasoning: String,
    /// The answer's text, or its tool call's arguments.
    output: String,
    tool: Option<String>,
}

/// An output item of the Responses API being streamed.
#[derive(Debug, Clone, Copy)]
struct OpenItem {
    kind: TokenKind,
    output_index: usize,
}

/// One request's stream (or, unstreamed, its body), written token by token
/// as the engine produces them (see the module docs).
pub struct AnswerWriter {
    framer: Framer,
    plan: AnswerPlan,
    stream: bool,
    include_usage: bool,
    /// Tokens produced but not yet sent (less than one event).
    pending: String,
    said: Accumulated,
    generated: u32,
    events: u32,
    /// The Responses API's next `sequence_number`.
    sequence: u64,
    open_item: Option<OpenItem>,
    /// The Responses API's finished items, as the final response lists them.
    items: Vec<String>,
    /// Whether `usage` reports the cached prompt tokens
    /// ([`with_cached_tokens`](Self::with_cached_tokens)), and how many.
    report_cached: bool,
    cached_tokens: u32,
}

impl AnswerWriter {
    /// A writer of `framer`'s answer planned as `plan`, streamed (with the
    /// usage chunk when `include_usage`) or as one body.
    pub fn new(framer: Framer, plan: AnswerPlan, stream: bool, include_usage: bool) -> Self {
        let said = Accumulated {
            tool: plan.tool.clone(),
            ..Accumulated::default()
        };
        AnswerWriter {
            framer,
            plan,
            stream,
            include_usage,
            pending: String::new(),
            said,
            generated: 0,
            events: 0,
            sequence: 0,
            open_item: None,
            items: Vec::new(),
            report_cached: false,
            cached_tokens: 0,
        }
    }

    /// Events with generated tokens written so far.
    pub fn events(&self) -> u32 {
        self.events
    }

    /// What a stream sends before the first token: the Responses API's
    /// `response.created` and `response.in_progress`; nothing on the chunk
    /// APIs (their role chunk goes with the first token).
    pub fn begin(&mut self, out: &mut String) {
        if !self.stream || self.framer.api != Api::Responses {
            return;
        }
        let response = self.framer.response_json("in_progress", "", None);
        self.typed(out, "response.created", &format!("\"response\":{response}"));
        self.typed(
            out,
            "response.in_progress",
            &format!("\"response\":{response}"),
        );
    }

    /// The token at `index` (its text `text`), the last one when `finish`
    /// is set; the request's prompt had `prompt_tokens`. Writes to `out`
    /// what goes on the wire now: the events it completes and, with the
    /// last token, the end of the stream, or unstreamed, the whole body.
    pub fn token(
        &mut self,
        out: &mut String,
        index: u32,
        text: &str,
        finish: Option<FinishReason>,
        prompt_tokens: u32,
    ) {
        let kind = self.plan.kind(index);
        self.generated += 1;
        match kind {
            TokenKind::Reasoning => self.said.reasoning.push_str(text),
            TokenKind::Content | TokenKind::ToolArguments => self.said.output.push_str(text),
        }
        if !self.stream {
            if let Some(reason) = finish {
                let usage = self.usage(prompt_tokens);
                out.push_str(&self.full_body(reason, usage));
            }
            return;
        }
        self.pending.push_str(text);
        if self.plan.ends_event(index, finish.is_some()) {
            let finish = finish.map(|reason| self.finish_label(reason));
            let pending = std::mem::take(&mut self.pending);
            self.event(out, kind, &pending, finish);
        }
        if let Some(reason) = finish {
            let usage = self.usage(prompt_tokens);
            self.end(out, reason, usage);
        }
    }

    /// An error after the stream began (an engine refusal): chat's error
    /// chunk and `[DONE]`, or the Responses API's `error` event.
    pub fn error(&mut self, out: &mut String, message: &str) {
        match self.framer.api {
            Api::Completions | Api::Chat => {
                let body = serde_json::json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": 400}});
                let _ = write!(out, "data: {body}\n\ndata: [DONE]\n\n");
            }
            Api::Responses => self.typed(
                out,
                "error",
                &format!(
                    "\"code\":\"invalid_request_error\",\"message\":{},\"param\":null",
                    js(message)
                ),
            ),
        }
    }

    fn usage(&self, prompt_tokens: u32) -> Usage {
        Usage {
            prompt_tokens,
            completion_tokens: self.generated,
            reasoning_tokens: self.plan.reasoning_of(self.generated),
            cached_tokens: self.report_cached.then_some(self.cached_tokens),
        }
    }

    /// Report the cached prompt tokens in `usage` (vLLM's
    /// `--enable-prompt-tokens-details`; off, as vLLM's default, they are
    /// not reported at all).
    pub fn with_cached_tokens(mut self, report: bool) -> Self {
        self.report_cached = report;
        self
    }

    /// The prompt tokens the engine found cached (told with each token;
    /// reported only when [`with_cached_tokens`](Self::with_cached_tokens)).
    pub fn set_cached_tokens(&mut self, n: u32) {
        self.cached_tokens = n;
    }

    /// The chunk APIs' `finish_reason` of the answer so far.
    fn finish_label(&self, reason: FinishReason) -> &'static str {
        match self.framer.api {
            Api::Completions => reason.as_str(),
            Api::Chat | Api::Responses => self.plan.finish_reason(reason, self.generated),
        }
    }

    /// One event of `kind` carrying `text`.
    fn event(&mut self, out: &mut String, kind: TokenKind, text: &str, finish: Option<&str>) {
        let framer = &self.framer;
        match framer.api {
            Api::Completions => framer.token_event(out, text, finish),
            Api::Chat => {
                if self.events == 0 {
                    framer.role_event(out);
                }
                match kind {
                    TokenKind::Reasoning => framer.reasoning_event(out, text, finish),
                    TokenKind::Content => framer.token_event(out, text, finish),
                    TokenKind::ToolArguments => {
                        // The call's first event names it.
                        let first = self.said.output.len() == text.len();
                        let name = self.said.tool.as_deref().filter(|_| first);
                        framer.tool_call_event(out, name, text, finish);
                    }
                }
            }
            Api::Responses => self.responses_delta(out, kind, text),
        }
        self.events += 1;
    }

    /// `event: TYPE\ndata: {"type", "sequence_number", FIELDS}\n\n`.
    fn typed(&mut self, out: &mut String, kind: &str, fields: &str) {
        let _ = write!(
            out,
            "event: {kind}\ndata: {{\"type\":\"{kind}\",\"sequence_number\":{}",
            self.sequence
        );
        if !fields.is_empty() {
            out.push(',');
            out.push_str(fields);
        }
        out.push_str("}\n\n");
        self.sequence += 1;
    }

    /// `item_id`, `output_index`, `content_index` of the open item.
    fn item_ref(&self, item: OpenItem) -> String {
        format!(
            "\"item_id\":\"{}\",\"output_index\":{},\"content_index\":0",
            self.framer.item_id(item.kind),
            item.output_index
        )
    }

    fn tool_name(&self) -> String {
        self.said.tool.clone().unwrap_or_default()
    }

    /// One delta of the Responses API, opening its item first (and closing
    /// the one before, of the other kind).
    fn responses_delta(&mut self, out: &mut String, kind: TokenKind, text: &str) {
        let item = match self.open_item {
            Some(item) if item.kind == kind => item,
            _ => {
                self.close_item(out, "completed");
                let item = OpenItem {
                    kind,
                    output_index: self.items.len(),
                };
                let added = self
                    .framer
                    .item_json(kind, &self.tool_name(), "", "in_progress");
                self.typed(
                    out,
                    "response.output_item.added",
                    &format!("\"output_index\":{},\"item\":{added}", item.output_index),
                );
                if let Some(part) = Framer::part_json(kind, "") {
                    let fields = format!("{},\"part\":{part}", self.item_ref(item));
                    self.typed(out, "response.content_part.added", &fields);
                }
                self.open_item = Some(item);
                item
            }
        };
        let (event, extra) = match kind {
            TokenKind::Reasoning => ("response.reasoning_text.delta", ""),
            TokenKind::Content => ("response.output_text.delta", ",\"logprobs\":[]"),
            TokenKind::ToolArguments => ("response.function_call_arguments.delta", ""),
        };
        let fields = format!("{},\"delta\":{}{extra}", self.item_ref(item), js(text));
        self.typed(out, event, &fields);
    }

    /// The open item's `.done` events, its `output_item.done`, and its
    /// place in the final response.
    fn close_item(&mut self, out: &mut String, status: &str) {
        let Some(item) = self.open_item.take() else {
            return;
        };
        let text = match item.kind {
            TokenKind::Reasoning => self.said.reasoning.clone(),
            TokenKind::Content | TokenKind::ToolArguments => self.said.output.clone(),
        };
        let at = self.item_ref(item);
        match item.kind {
            TokenKind::Reasoning => {
                self.typed(
                    out,
                    "response.reasoning_text.done",
                    &format!("{at},\"text\":{}", js(&text)),
                );
            }
            TokenKind::Content => {
                self.typed(
                    out,
                    "response.output_text.done",
                    &format!("{at},\"text\":{},\"logprobs\":[]", js(&text)),
                );
            }
            TokenKind::ToolArguments => {
                let fields = format!(
                    "{at},\"name\":{},\"arguments\":{}",
                    js(&self.tool_name()),
                    js(&text)
                );
                self.typed(out, "response.function_call_arguments.done", &fields);
            }
        }
        if let Some(part) = Framer::part_json(item.kind, &text) {
            self.typed(
                out,
                "response.content_part.done",
                &format!("{at},\"part\":{part}"),
            );
        }
        let done = self
            .framer
            .item_json(item.kind, &self.tool_name(), &text, status);
        self.typed(
            out,
            "response.output_item.done",
            &format!("\"output_index\":{},\"item\":{done}", item.output_index),
        );
        self.items.push(done);
    }

    /// The end of the stream after its last event.
    fn end(&mut self, out: &mut String, reason: FinishReason, usage: Usage) {
        match self.framer.api {
            Api::Completions | Api::Chat => {
                if self.include_usage {
                    self.framer.usage_event_of(out, usage);
                }
                out.push_str("data: [DONE]\n\n");
            }
            Api::Responses => {
                let status = responses_status(reason);
                self.close_item(out, status);
                let response =
                    self.framer
                        .response_json(status, &self.items.join(","), Some(usage));
                // vLLM ends an incomplete answer under `response.completed` too.
                self.typed(
                    out,
                    "response.completed",
                    &format!("\"response\":{response}"),
                );
            }
        }
    }

    /// The whole answer as one body.
    fn full_body(&self, reason: FinishReason, usage: Usage) -> String {
        let framer = &self.framer;
        match framer.api {
            Api::Completions => framer.full_response(
                &self.said.output,
                reason.as_str(),
                usage.prompt_tokens,
                usage.completion_tokens,
            ),
            Api::Chat => framer.full_chat(&self.said, self.finish_label(reason), usage),
            Api::Responses => {
                let status = responses_status(reason);
                let name = self.tool_name();
                let mut items = Vec::new();
                if !self.said.reasoning.is_empty() {
                    items.push((TokenKind::Reasoning, &self.said.reasoning));
                }
                if !self.said.output.is_empty() {
                    let kind = self.plan.kind(self.plan.reasoning_tokens);
                    items.push((kind, &self.said.output));
                }
                let last = items.len().saturating_sub(1);
                let output: Vec<String> = items
                    .iter()
                    .enumerate()
                    .map(|(i, (kind, text))| {
                        let item_status = if i == last { status } else { "completed" };
                        framer.item_json(*kind, &name, text, item_status)
                    })
                    .collect();
                framer.response_json(status, &output.join(","), Some(usage))
            }
        }
    }
}

/// The Responses API's status of an answer the engine ended for `reason`.
fn responses_status(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "completed",
        FinishReason::Length => "incomplete",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framer(api: Api) -> Framer {
        Framer::new(api, 1, 5, "sim/tiny")
    }

    /// The JSON of each `data:` line of chunk-API events (`[DONE]` kept as
    /// a string).
    fn chunks(out: &str) -> Vec<Value> {
        out.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let data = e.strip_prefix("data: ").unwrap();
                serde_json::from_str(data).unwrap_or_else(|_| Value::String(data.into()))
            })
            .collect()
    }

    /// `(event, JSON)` of each Responses API event, checking that the two
    /// name the same type.
    fn typed(out: &str) -> Vec<(String, Value)> {
        out.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (event, data) = e.split_once('\n').unwrap();
                let event = event.strip_prefix("event: ").unwrap().to_string();
                let json: Value =
                    serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                assert_eq!(json["type"], event.as_str());
                (event, json)
            })
            .collect()
    }

    /// Every token of an answer of `n` tokens through a writer.
    fn write_all(writer: &mut AnswerWriter, n: u32, reason: FinishReason) -> String {
        let mut out = String::new();
        writer.begin(&mut out);
        for i in 0..n {
            let finish = (i + 1 == n).then_some(reason);
            writer.token(&mut out, i, &format!(" w{i}"), finish, 7);
        }
        out
    }

    fn plan(reasoning_tokens: u32, tool: Option<&str>, tokens_per_event: u32) -> AnswerPlan {
        AnswerPlan {
            reasoning_tokens,
            tool: tool.map(str::to_string),
            tokens_per_event,
        }
    }

    #[test]
    fn stream_chunks_are_valid_json_events() {
        let framer = framer(Api::Chat);
        let mut out = String::new();
        framer.role_event(&mut out);
        framer.token_event(&mut out, " the", Some("length"));
        framer.usage_event(&mut out, 3, 1);
        let events = chunks(&out);
        assert_eq!(events.len(), 3);
        assert_eq!(events[0]["choices"][0]["delta"]["role"], "assistant");
        assert_eq!(events[1]["choices"][0]["delta"]["content"], " the");
        assert_eq!(events[1]["choices"][0]["finish_reason"], "length");
        assert_eq!(events[2]["usage"]["total_tokens"], 4);
        assert!(
            events[2]["usage"]
                .get("completion_tokens_details")
                .is_none()
        );
        assert_eq!(events[2]["object"], "chat.completion.chunk");
        let full: Value =
            serde_json::from_str(&framer.full_response(" a b", "stop", 2, 2)).unwrap();
        assert_eq!(full["choices"][0]["message"]["content"], " a b");
        assert_eq!(full["object"], "chat.completion");
    }

    #[test]
    fn each_chat_event_kind_is_framed_as_vllm_sends_it() {
        let f = framer(Api::Chat);
        let mut out = String::new();
        f.reasoning_event(&mut out, " hm", None);
        f.tool_call_event(&mut out, Some("get_weather"), " a", None);
        f.tool_call_event(&mut out, None, " b", Some("tool_calls"));
        f.usage_event_of(
            &mut out,
            Usage {
                prompt_tokens: 3,
                completion_tokens: 5,
                reasoning_tokens: 2,
                cached_tokens: Some(0),
            },
        );
        let e = chunks(&out);
        assert_eq!(e[0]["choices"][0]["delta"]["reasoning"], " hm");
        assert!(e[0]["choices"][0]["delta"].get("content").is_none());
        let first = &e[1]["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(first["index"], 0);
        assert_eq!(first["id"], "call_0000000000000001");
        assert_eq!(first["type"], "function");
        assert_eq!(first["function"]["name"], "get_weather");
        assert_eq!(first["function"]["arguments"], " a");
        let later = &e[2]["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(later["function"]["arguments"], " b");
        assert!(later.get("id").is_none() && later["function"].get("name").is_none());
        assert_eq!(e[2]["choices"][0]["finish_reason"], "tool_calls");
        assert_eq!(
            e[3]["usage"]["completion_tokens_details"]["reasoning_tokens"],
            2
        );
        assert_eq!(e[3]["usage"]["total_tokens"], 8);
        // A cold cache reported is 0, not absent.
        assert_eq!(e[3]["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    }

    #[test]
    fn a_chat_stream_reasons_then_answers_in_events_of_n_tokens() {
        let mut w = AnswerWriter::new(framer(Api::Chat), plan(5, None, 4), true, true);
        let e = chunks(&write_all(&mut w, 11, FinishReason::Length));
        // role, 2 reasoning events, 2 content events, usage, [DONE]
        assert_eq!(e.len(), 7, "{e:?}");
        assert_eq!(w.events(), 4);
        let delta = |i: usize| &e[i]["choices"][0]["delta"];
        assert_eq!(delta(0)["role"], "assistant");
        assert_eq!(delta(1)["reasoning"], " w0 w1 w2 w3");
        assert_eq!(delta(2)["reasoning"], " w4");
        assert_eq!(delta(3)["content"], " w5 w6 w7 w8");
        assert_eq!(delta(4)["content"], " w9 w10");
        assert_eq!(e[4]["choices"][0]["finish_reason"], "length");
        assert!(e[3]["choices"][0]["finish_reason"].is_null());
        assert_eq!(e[5]["usage"]["completion_tokens"], 11);
        assert_eq!(
            e[5]["usage"]["completion_tokens_details"]["reasoning_tokens"],
            5
        );
        assert_eq!(e[6], "[DONE]");
    }

    #[test]
    fn a_chat_tool_call_names_its_function_once_and_finishes_with_tool_calls() {
        let mut w = AnswerWriter::new(framer(Api::Chat), plan(2, Some("f"), 2), true, false);
        let e = chunks(&write_all(&mut w, 6, FinishReason::Length));
        // role, 1 reasoning event, 2 tool-call events, [DONE]
        assert_eq!(e.len(), 5, "{e:?}");
        let calls = |i: usize| &e[i]["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(calls(2)["function"]["name"], "f");
        assert_eq!(calls(2)["function"]["arguments"], " w2 w3");
        assert!(calls(3)["function"].get("name").is_none());
        assert_eq!(e[3]["choices"][0]["finish_reason"], "tool_calls");
        // All reasoning: no call was made.
        let mut w = AnswerWriter::new(framer(Api::Chat), plan(9, Some("f"), 1), true, false);
        let e = chunks(&write_all(&mut w, 3, FinishReason::Length));
        assert_eq!(e[3]["choices"][0]["finish_reason"], "length");
        assert!(
            e.iter()
                .all(|c| c["choices"][0]["delta"].get("tool_calls").is_none())
        );
    }

    #[test]
    fn completions_stream_all_text() {
        let mut w = AnswerWriter::new(framer(Api::Completions), plan(0, None, 3), true, true);
        let e = chunks(&write_all(&mut w, 4, FinishReason::Stop));
        assert_eq!(e.len(), 4);
        assert_eq!(e[0]["choices"][0]["text"], " w0 w1 w2");
        assert_eq!(e[1]["choices"][0]["text"], " w3");
        assert_eq!(e[1]["choices"][0]["finish_reason"], "stop");
        assert!(e[2]["usage"].get("completion_tokens_details").is_none());
    }

    #[test]
    fn the_responses_stream_opens_and_closes_each_item() {
        let mut w = AnswerWriter::new(framer(Api::Responses), plan(2, None, 1), true, true);
        let events = typed(&write_all(&mut w, 4, FinishReason::Stop));
        let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.content_part.added",
                "response.reasoning_text.delta",
                "response.reasoning_text.delta",
                "response.reasoning_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.output_item.added",
                "response.content_part.added",
                "response.output_text.delta",
                "response.output_text.delta",
                "response.output_text.done",
                "response.content_part.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        for (i, (_, json)) in events.iter().enumerate() {
            assert_eq!(json["sequence_number"], i as u64);
        }
        let created = &events[0].1["response"];
        assert_eq!(created["id"], "resp_0000000000000001");
        assert_eq!(created["object"], "response");
        assert_eq!(created["status"], "in_progress");
        assert_eq!(created["output"], serde_json::json!([]));
        assert_eq!(events[2].1["item"]["type"], "reasoning");
        assert_eq!(events[2].1["output_index"], 0);
        let delta = &events[4].1;
        assert_eq!(delta["item_id"], "rs_0000000000000001");
        assert_eq!(
            (
                delta["output_index"].as_u64(),
                delta["content_index"].as_u64()
            ),
            (Some(0), Some(0))
        );
        assert_eq!(delta["delta"], " w0");
        assert_eq!(events[6].1["text"], " w0 w1");
        assert_eq!(events[9].1["item"]["type"], "message");
        assert_eq!(events[9].1["output_index"], 1);
        assert_eq!(events[11].1["item_id"], "msg_0000000000000001");
        assert_eq!(events[13].1["text"], " w2 w3");
        let done = &events[16].1["response"];
        assert_eq!(done["status"], "completed");
        assert!(done["incomplete_details"].is_null());
        assert_eq!(done["output"][0]["content"][0]["text"], " w0 w1");
        assert_eq!(done["output"][1]["content"][0]["text"], " w2 w3");
        assert_eq!(
            done["usage"],
            serde_json::json!({"input_tokens": 7, "output_tokens": 4, "total_tokens": 11,
                "output_tokens_details": {"reasoning_tokens": 2}})
        );
    }

    #[test]
    fn a_responses_function_call_streams_its_arguments_and_ends_incomplete_at_the_limit() {
        let mut w = AnswerWriter::new(
            framer(Api::Responses),
            plan(0, Some("lookup"), 2),
            true,
            true,
        );
        let events = typed(&write_all(&mut w, 3, FinishReason::Length));
        let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(
            kinds,
            [
                "response.created",
                "response.in_progress",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed",
            ]
        );
        let item = &events[2].1["item"];
        assert_eq!(item["type"], "function_call");
        assert_eq!(item["name"], "lookup");
        assert_eq!(item["call_id"], "call_0000000000000001");
        assert_eq!(item["arguments"], "");
        assert_eq!(events[3].1["delta"], " w0 w1");
        assert_eq!(events[3].1["item_id"], "fc_0000000000000001");
        assert_eq!(events[5].1["arguments"], " w0 w1 w2");
        let done = &events[7].1["response"];
        assert_eq!(done["status"], "incomplete");
        assert_eq!(done["incomplete_details"]["reason"], "max_output_tokens");
        assert_eq!(done["output"][0]["arguments"], " w0 w1 w2");
        assert_eq!(
            done["usage"]["output_tokens_details"]["reasoning_tokens"],
            0
        );
        let mut out = String::new();
        w.error(&mut out, "boom");
        let (_, error) = &typed(&out)[0];
        assert_eq!(error["message"], "boom");
        assert_eq!(error["sequence_number"], 8);
    }

    #[test]
    fn unstreamed_bodies_hold_the_whole_answer() {
        let mut w = AnswerWriter::new(framer(Api::Chat), plan(1, None, 1), false, false);
        let body: Value = serde_json::from_str(&write_all(&mut w, 3, FinishReason::Stop)).unwrap();
        let message = &body["choices"][0]["message"];
        assert_eq!(message["reasoning"], " w0");
        assert_eq!(message["content"], " w1 w2");
        assert_eq!(
            body["usage"]["completion_tokens_details"]["reasoning_tokens"],
            1
        );

        let mut w = AnswerWriter::new(framer(Api::Chat), plan(0, Some("f"), 1), false, false);
        let body: Value =
            serde_json::from_str(&write_all(&mut w, 2, FinishReason::Length)).unwrap();
        let message = &body["choices"][0]["message"];
        assert!(message["content"].is_null());
        assert_eq!(message["tool_calls"][0]["function"]["name"], "f");
        assert_eq!(message["tool_calls"][0]["function"]["arguments"], " w0 w1");
        assert_eq!(body["choices"][0]["finish_reason"], "tool_calls");

        let mut w = AnswerWriter::new(framer(Api::Responses), plan(1, None, 1), false, true);
        let body: Value = serde_json::from_str(&write_all(&mut w, 2, FinishReason::Stop)).unwrap();
        assert_eq!(body["object"], "response");
        assert_eq!(body["status"], "completed");
        assert_eq!(body["output"][0]["type"], "reasoning");
        assert_eq!(body["output"][1]["type"], "message");
        assert_eq!(body["output"][1]["content"][0]["text"], " w1");
        assert_eq!(body["usage"]["output_tokens"], 2);

        let mut w = AnswerWriter::new(framer(Api::Completions), plan(0, None, 1), false, false);
        let body: Value =
            serde_json::from_str(&write_all(&mut w, 2, FinishReason::Length)).unwrap();
        assert_eq!(body["choices"][0]["text"], " w0 w1");
    }
}
