//! What is sent (pure apart from the prompt renderer): tasks by index,
//! prompts rendered from segments, and the JSON body of each call.
//!
//! Bodies are built *before* a call's scheduled instant, outside the timing
//! path: rendering an 8k-token prompt must not show up as latency.
//!
//! Every body asks for a stream with `usage` (`stream_options.include_usage`)
//! so output tokens can be counted by the server, `temperature: 0`, and forces
//! the planned output length with the length field — `max_completion_tokens`
//! on chat (its current name; `max_tokens` is deprecated there and refused by
//! hosted reasoning models), `max_tokens` on completions — plus the
//! vLLM/SGLang extensions `ignore_eos: true` and `min_tokens` = the length.
//! Servers that do not know the extensions mostly ignore them (vLLM, SGLang,
//! TGI, llama.cpp do); for those that refuse a field, the preflight
//! ([`super::preflight`]) settles the body before anything is measured, and
//! [`BodyOptions`] carries what it settled.

use std::sync::Arc;

use bytes::Bytes;
use serde::Serialize;

use crate::config::{Api, Workload};
use crate::data::tokenizer::PromptTokenizer;
use crate::data::trace::Trace;
use crate::workload::classes::{ClassStream, ClassedGenerator};
use crate::workload::prompt::{TokenIdRange, WordList};
use crate::workload::{CallSpec, Message, Role, Task, TaskGenerator, prompt};

/// A rendered prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// Chat messages (`/chat/completions`).
    Chat(Vec<ChatMessage>),
    /// One text prompt (`/completions`).
    Text(String),
    /// Token ids (`/completions` on servers that accept `prompt: [ids]`).
    TokenIds(Vec<u32>),
}

/// One chat message as sent. A tool turn is written in each API's own
/// shape: on chat an assistant message with `tool_calls` (its `content`
/// the arguments) or a `tool` message, on the Responses API a
/// `function_call` or `function_call_output` item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub role: &'static str,
    pub content: String,
    pub tool: Option<ToolTurn>,
}

/// What a tool turn of a conversation is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolTurn {
    /// The model called tool `name`; the message's content is the arguments.
    Call { id: String, name: String },
    /// The result of call `id`.
    Result { id: String },
}

impl ChatMessage {
    /// A plain text message.
    pub fn text(role: &'static str, content: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: content.into(),
            tool: None,
        }
    }

    /// The message as a Responses API `input` item.
    fn responses_item(&self) -> serde_json::Value {
        match &self.tool {
            None => serde_json::json!({"role": self.role, "content": self.content}),
            Some(ToolTurn::Call { id, name }) => serde_json::json!({
                "type": "function_call", "call_id": id, "name": name, "arguments": self.content
            }),
            Some(ToolTurn::Result { id }) => serde_json::json!({
                "type": "function_call_output", "call_id": id, "output": self.content
            }),
        }
    }
}

impl Serialize for ChatMessage {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        match &self.tool {
            None => {
                map.serialize_entry("role", self.role)?;
                map.serialize_entry("content", &self.content)?;
            }
            Some(ToolTurn::Call { id, name }) => {
                map.serialize_entry("role", "assistant")?;
                map.serialize_entry("content", &Option::<&str>::None)?;
                map.serialize_entry(
                    "tool_calls",
                    &[serde_json::json!({
                        "id": id,
                        "type": "function",
                        "function": {"name": name, "arguments": self.content},
                    })],
                )?;
            }
            Some(ToolTurn::Result { id }) => {
                map.serialize_entry("role", "tool")?;
                map.serialize_entry("tool_call_id", id)?;
                map.serialize_entry("content", &self.content)?;
            }
        }
        map.end()
    }
}

pub fn role_name(role: Role) -> &'static str {
    match role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant | Role::ToolCall(_) => "assistant",
        Role::ToolResult(_) => "tool",
    }
}

/// A call's messages as sent, each rendered by `text`: tool turns in their
/// own shape, the arguments as the JSON object they are.
fn chat_messages(call: &CallSpec, text: impl Fn(&Message) -> String) -> Vec<ChatMessage> {
    let name = call
        .tools
        .as_ref()
        .map_or("tool", |t| t.first_name.as_str());
    call.messages
        .iter()
        .map(|m| {
            let content = text(m);
            match m.role {
                Role::ToolCall(n) => ChatMessage {
                    role: "assistant",
                    content: serde_json::json!({ "input": content }).to_string(),
                    tool: Some(ToolTurn::Call {
                        id: format!("call_{n}"),
                        name: name.to_string(),
                    }),
                },
                Role::ToolResult(n) => ChatMessage {
                    role: "tool",
                    content,
                    tool: Some(ToolTurn::Result {
                        id: format!("call_{n}"),
                    }),
                },
                role => ChatMessage::text(role_name(role), content),
            }
        })
        .collect()
}

/// How `completions` prompts are sent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum CompletionsPrompt {
    /// Text (works everywhere; length in tokens is approximate, `usage` tells the truth).
    #[default]
    Text,
    /// `prompt: [ids]`: exact lengths, for servers that accept token ids
    /// (check with [`probe_token_ids`](super::probe_token_ids)).
    TokenIds,
}

/// What a run sends: task `i` of the stream, and how a call is rendered.
///
/// The runner uses [`WorkloadSource`]; tests and tools can substitute their own.
pub trait RequestSource: Send + Sync {
    fn task(&self, index: u64) -> Task;
    fn render(&self, call: &CallSpec) -> Prompt;
    /// The tokenizer prompts are sized with, which also counts output
    /// tokens when the server reports no usage.
    fn tokenizer(&self) -> Option<Arc<PromptTokenizer>> {
        None
    }
    /// The content nonce the prompts were drawn with (journaled).
    fn content_nonce(&self) -> u64 {
        0
    }
    /// How prompt lengths were made to match the plan, in words for the card.
    fn prompt_sizing(&self) -> Option<String> {
        None
    }
}

/// The workload's seeded task stream, rendered for one API.
#[derive(Debug, Clone)]
pub struct WorkloadSource {
    generator: Generator,
    api: Api,
    completions_prompt: CompletionsPrompt,
    /// The target's tokenizer: synthetic text sized exactly with it
    /// ([`crate::workload::tokenize`]); `None` = the word approximation.
    tokenizer: Option<Arc<PromptTokenizer>>,
    /// Where synthetic token-id prompts draw their ids from.
    token_ids: TokenIdRange,
    content_nonce: u64,
    /// Words the server's own tokenizer counts as one token each (from its
    /// tokenize endpoint): exact text sizing without a local tokenizer.
    words: Option<Arc<WordList>>,
}

/// One workload's stream, or a mix's classes.
#[derive(Debug, Clone)]
enum Generator {
    One(Box<TaskGenerator>),
    Classes(ClassedGenerator),
}

impl WorkloadSource {
    pub fn new(
        workload: &Workload,
        seed: u64,
        api: Api,
        completions_prompt: CompletionsPrompt,
    ) -> Self {
        Self::with_generator(
            Generator::One(Box::new(TaskGenerator::new(workload, seed))),
            api,
            completions_prompt,
        )
    }

    /// A mix's stream: each task of the class its index draws
    /// ([`ClassedGenerator`]).
    pub fn classes(
        classes: &[ClassStream<'_>],
        seed: u64,
        api: Api,
        completions_prompt: CompletionsPrompt,
    ) -> Self {
        Self::with_generator(
            Generator::Classes(ClassedGenerator::new(classes, seed)),
            api,
            completions_prompt,
        )
    }

    fn with_generator(
        generator: Generator,
        api: Api,
        completions_prompt: CompletionsPrompt,
    ) -> Self {
        WorkloadSource {
            generator,
            api,
            completions_prompt,
            tokenizer: None,
            token_ids: TokenIdRange::DEFAULT,
            content_nonce: 0,
            words: None,
        }
    }

    /// Size synthetic text with `words` (see [`WordList`]); a tokenizer,
    /// when there is one, still takes precedence.
    pub fn with_word_list(mut self, words: Option<Arc<WordList>>) -> Self {
        self.words = words;
        self
    }

    /// Draw prompt content with `nonce` (see [`TaskGenerator::with_content_nonce`]).
    pub fn with_content_nonce(mut self, nonce: u64) -> Self {
        self.generator = match self.generator {
            Generator::One(g) => Generator::One(Box::new(g.with_content_nonce(nonce))),
            Generator::Classes(g) => Generator::Classes(g.with_content_nonce(nonce)),
        };
        self.content_nonce = nonce;
        self
    }

    /// Draw synthetic token-id prompts from `range` (the model's vocabulary,
    /// as the token-id probe found it).
    pub fn with_token_id_range(mut self, range: TokenIdRange) -> Self {
        self.token_ids = range;
        self
    }

    /// Size text prompts with `tokenizer` (token-id prompts for
    /// `completions` then are the tokenizer's ids of that text).
    pub fn with_tokenizer(mut self, tokenizer: Option<Arc<PromptTokenizer>>) -> Self {
        self.tokenizer = tokenizer;
        self
    }

    pub fn shared(self) -> Arc<dyn RequestSource> {
        Arc::new(self)
    }
}

impl RequestSource for WorkloadSource {
    fn task(&self, index: u64) -> Task {
        match &self.generator {
            Generator::One(g) => g.task(index),
            Generator::Classes(g) => g.task(index),
        }
    }

    fn tokenizer(&self) -> Option<Arc<PromptTokenizer>> {
        self.tokenizer.clone()
    }

    fn content_nonce(&self) -> u64 {
        self.content_nonce
    }

    fn prompt_sizing(&self) -> Option<String> {
        Some(match (&self.tokenizer, self.api, self.completions_prompt) {
            (Some(t), Api::Completions, CompletionsPrompt::TokenIds) => format!(
                "token ids from the tokenizer {} (exact)",
                t.path().display()
            ),
            (Some(t), _, _) => format!(
                "text sized with the tokenizer {} (exact)",
                t.path().display()
            ),
            (None, Api::Completions, CompletionsPrompt::TokenIds) => format!(
                "token ids {}..={} inside the model's vocabulary (exact)",
                self.token_ids.min, self.token_ids.max
            ),
            (None, _, _) if self.words.is_some() => format!(
                "text of {} words the server's tokenize endpoint counts as one token each \
                 (exact for the content; chat templates and BOS come on top)",
                self.words.as_ref().map_or(0, |w| w.len())
            ),
            (None, _, _) => "text sized by words, one common English word per token \
                             (approximate; the server's usage is the truth)"
                .to_string(),
        })
    }

    fn render(&self, call: &CallSpec) -> Prompt {
        if let Some(tokenizer) = &self.tokenizer {
            return render_with(tokenizer, self.api, self.completions_prompt, call);
        }
        let token_ids =
            self.api == Api::Completions && self.completions_prompt == CompletionsPrompt::TokenIds;
        if let Some(words) = &self.words
            && !token_ids
        {
            return match self.api {
                Api::Chat | Api::Responses => {
                    Prompt::Chat(chat_messages(call, |m| words.render_text(&m.segments)))
                }
                Api::Completions => Prompt::Text(words.render_flat_text(&call.messages)),
            };
        }
        match (self.api, self.completions_prompt) {
            (Api::Chat | Api::Responses, _) => {
                Prompt::Chat(chat_messages(call, |m| prompt::render_text(&m.segments)))
            }
            (Api::Completions, CompletionsPrompt::Text) => {
                Prompt::Text(prompt::render_flat_text(&call.messages))
            }
            (Api::Completions, CompletionsPrompt::TokenIds) => Prompt::TokenIds(
                prompt::render_token_ids_in(&all_segments(&call.messages), self.token_ids),
            ),
        }
    }
}

/// [`WorkloadSource::render`] with a tokenizer: every message sized exactly.
fn render_with(
    tokenizer: &PromptTokenizer,
    api: Api,
    completions_prompt: CompletionsPrompt,
    call: &CallSpec,
) -> Prompt {
    match (api, completions_prompt) {
        (Api::Chat | Api::Responses, _) => {
            Prompt::Chat(chat_messages(call, |m| tokenizer.render_text(&m.segments)))
        }
        (Api::Completions, CompletionsPrompt::Text) => {
            Prompt::Text(tokenizer.render_flat_text(&call.messages))
        }
        (Api::Completions, CompletionsPrompt::TokenIds) => {
            let text = tokenizer.render_flat_text(&call.messages);
            match tokenizer.ids(&text) {
                Some(ids) => Prompt::TokenIds(ids),
                None => Prompt::Text(text),
            }
        }
    }
}

/// An arrival trace's rows as tasks (row `i` = task `i`), rendered like
/// [`WorkloadSource`] renders (see [`crate::workload::trace`]).
#[derive(Debug, Clone)]
pub struct TraceSource {
    trace: Arc<Trace>,
    seed: u64,
    block_tokens: u32,
    renderer: WorkloadSource,
}

impl TraceSource {
    /// `workload` only chooses nothing here but keeps rendering identical to
    /// the workload's own source for this API.
    pub fn new(
        trace: Arc<Trace>,
        block_tokens: u32,
        workload: &Workload,
        seed: u64,
        api: Api,
        completions_prompt: CompletionsPrompt,
    ) -> Self {
        TraceSource {
            trace,
            seed,
            block_tokens,
            renderer: WorkloadSource::new(workload, seed, api, completions_prompt),
        }
    }

    /// See [`WorkloadSource::with_tokenizer`].
    pub fn with_tokenizer(mut self, tokenizer: Option<Arc<PromptTokenizer>>) -> Self {
        self.renderer = self.renderer.with_tokenizer(tokenizer);
        self
    }

    /// See [`WorkloadSource::with_token_id_range`].
    pub fn with_token_id_range(mut self, range: TokenIdRange) -> Self {
        self.renderer = self.renderer.with_token_id_range(range);
        self
    }

    /// See [`WorkloadSource::with_content_nonce`].
    pub fn with_content_nonce(mut self, nonce: u64) -> Self {
        self.renderer = self.renderer.with_content_nonce(nonce);
        self
    }

    /// See [`WorkloadSource::with_word_list`].
    pub fn with_word_list(mut self, words: Option<Arc<WordList>>) -> Self {
        self.renderer = self.renderer.with_word_list(words);
        self
    }

    pub fn shared(self) -> Arc<dyn RequestSource> {
        Arc::new(self)
    }
}

impl RequestSource for TraceSource {
    fn task(&self, index: u64) -> Task {
        self.trace.task(
            index,
            self.seed,
            self.block_tokens,
            self.renderer.content_nonce,
        )
    }

    fn render(&self, call: &CallSpec) -> Prompt {
        self.renderer.render(call)
    }

    fn tokenizer(&self) -> Option<Arc<PromptTokenizer>> {
        self.renderer.tokenizer()
    }

    fn content_nonce(&self) -> u64 {
        self.renderer.content_nonce
    }

    fn prompt_sizing(&self) -> Option<String> {
        self.renderer.prompt_sizing()
    }
}

fn all_segments(messages: &[Message]) -> Vec<crate::workload::Segment> {
    messages
        .iter()
        .flat_map(|m| m.segments.iter().cloned())
        .collect()
}

/// The URL path (relative to the base URL) of an API.
pub fn api_path(api: Api) -> &'static str {
    match api {
        Api::Chat => "chat/completions",
        Api::Completions => "completions",
        Api::Responses => "responses",
    }
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(untagged)]
enum PromptField<'a> {
    Text(&'a str),
    Ids(&'a [u32]),
}

#[derive(Serialize)]
#[serde(untagged)]
enum InputField<'a> {
    Items(Vec<serde_json::Value>),
    Text(&'a str),
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    messages: Option<Vec<ChatMessage>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    prompt: Option<PromptField<'a>>,
    /// The Responses API's prompt: messages, or one text.
    #[serde(skip_serializing_if = "Option::is_none")]
    input: Option<InputField<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    min_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    ignore_eos: Option<bool>,
    temperature: f64,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    priority: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'a serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<&'static str>,
}

/// The body field that bounds the output length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthField {
    /// `max_tokens`: completions' only name, chat's deprecated one.
    MaxTokens,
    /// `max_completion_tokens`: chat's current name (OpenAI, vLLM ≥ 0.6).
    MaxCompletionTokens,
    /// `max_output_tokens`: the Responses API's only name.
    MaxOutputTokens,
}

impl LengthField {
    /// What `api` is sent by default: chat's current name, or completions'
    /// only one.
    pub fn default_for(api: Api) -> LengthField {
        match api {
            Api::Chat => LengthField::MaxCompletionTokens,
            Api::Completions => LengthField::MaxTokens,
            Api::Responses => LengthField::MaxOutputTokens,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            LengthField::MaxTokens => "max_tokens",
            LengthField::MaxCompletionTokens => "max_completion_tokens",
            LengthField::MaxOutputTokens => "max_output_tokens",
        }
    }
}

/// What a target changes in every call's body.
#[derive(Debug, Clone, PartialEq)]
pub struct BodyOptions {
    /// Send vLLM's and SGLang's `ignore_eos` and `min_tokens` to force the
    /// planned output length (`force-length #false` on the target turns them
    /// off, for services that reject unknown fields; shorter outputs are then
    /// counted and shown).
    pub force_length: bool,
    /// The length field; `None`: [`LengthField::default_for`] the API.
    /// The preflight sets it when the server refuses the default.
    pub length_field: Option<LengthField>,
    /// Send `stream_options.include_usage` (the preflight turns it off for
    /// servers that refuse it; output tokens are then counted locally).
    pub stream_usage: bool,
    /// `extra-body { ... }`: top-level fields added to every body, after
    /// capcard's own (a field named here replaces capcard's).
    pub extra: serde_json::Map<String, serde_json::Value>,
}

impl Default for BodyOptions {
    fn default() -> Self {
        BodyOptions {
            force_length: true,
            length_field: None,
            stream_usage: true,
            extra: serde_json::Map::new(),
        }
    }
}

impl BodyOptions {
    /// A target's own options (`force-length`, `extra-body`), before any
    /// preflight settled anything.
    pub fn for_target(target: &crate::config::Target) -> Self {
        BodyOptions {
            force_length: target.force_length,
            extra: target.extra_body.clone(),
            ..BodyOptions::default()
        }
    }

    /// The length field sent to `api`.
    pub fn length_field_for(&self, api: Api) -> LengthField {
        match (api, self.length_field) {
            // Completions and responses have one name each.
            (Api::Completions | Api::Responses, _) => LengthField::default_for(api),
            (Api::Chat, Some(field)) => field,
            (Api::Chat, None) => LengthField::default_for(api),
        }
    }

    /// Whether `stream_options` goes out: asked for, and an API that has it
    /// (the Responses API reports usage in its last event anyway).
    pub fn sends_stream_options(&self, api: Api) -> bool {
        self.stream_usage && api != Api::Responses
    }

    /// The top-level fields every body of `api` carries, in body order
    /// (for the preflight, to tell which of them a refusal names).
    pub fn sent_fields(&self, api: Api) -> Vec<String> {
        let mut fields = vec![
            "model".to_string(),
            match api {
                Api::Chat => "messages",
                Api::Completions => "prompt",
                Api::Responses => "input",
            }
            .to_string(),
            self.length_field_for(api).as_str().to_string(),
        ];
        if self.force_length {
            fields.push("min_tokens".into());
            fields.push("ignore_eos".into());
        }
        fields.extend(["temperature".to_string(), "stream".to_string()]);
        if self.sends_stream_options(api) {
            fields.push("stream_options".into());
        }
        for key in self.extra.keys() {
            if !fields.contains(key) {
                fields.push(key.clone());
            }
        }
        fields
    }
}

/// [`build_body_with`] with the default options.
pub fn build_body(api: Api, model: &str, prompt: &Prompt, max_tokens: u32) -> Bytes {
    build_body_with(api, model, prompt, max_tokens, &BodyOptions::default())
}

/// The JSON body of one streaming call. A prompt of the other API's shape is
/// adapted (messages joined for `completions`, text as one user message for
/// `chat`), so a custom [`RequestSource`] cannot produce an invalid body.
pub fn build_body_with(
    api: Api,
    model: &str,
    prompt: &Prompt,
    max_tokens: u32,
    options: &BodyOptions,
) -> Bytes {
    build_call_body(api, model, prompt, max_tokens, options, None)
}

/// [`build_body_with`] for a call of a mix class: `priority` (the class's)
/// is sent as the body's `priority` field and wins over a `priority` in the
/// target's `extra-body`, being the more specific of the two.
pub fn build_call_body(
    api: Api,
    model: &str,
    prompt: &Prompt,
    max_tokens: u32,
    options: &BodyOptions,
    priority: Option<i64>,
) -> Bytes {
    body_bytes(
        api,
        model,
        prompt,
        (max_tokens, None, false),
        options,
        priority,
    )
}

/// The body of `call` as the runs send it: [`build_call_body`] with the
/// workload's `tools` (in the API's shape) and, on an agent's last step,
/// `tool_choice: "none"`.
pub fn build_spec_body(
    api: Api,
    model: &str,
    prompt: &Prompt,
    call: &CallSpec,
    options: &BodyOptions,
    priority: Option<i64>,
) -> Bytes {
    let tools = call.tools.as_deref();
    let spec = (call.output_tokens, tools, call.answer_in_words);
    body_bytes(api, model, prompt, spec, options, priority)
}

fn body_bytes(
    api: Api,
    model: &str,
    prompt: &Prompt,
    (max_tokens, tools, answer_in_words): (u32, Option<&crate::workload::Tools>, bool),
    options: &BodyOptions,
    priority: Option<i64>,
) -> Bytes {
    let joined;
    let as_messages = |prompt: &Prompt| match prompt {
        Prompt::Chat(messages) => messages.clone(),
        Prompt::Text(text) => vec![ChatMessage::text("user", text.clone())],
        Prompt::TokenIds(ids) => vec![ChatMessage::text(
            "user",
            ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" "),
        )],
    };
    let (messages, prompt_field, input) = match (api, prompt) {
        (Api::Chat, _) => (Some(as_messages(prompt)), None, None),
        (Api::Responses, Prompt::Text(text)) => (None, None, Some(InputField::Text(text))),
        (Api::Responses, _) => (
            None,
            None,
            Some(InputField::Items(
                as_messages(prompt)
                    .iter()
                    .map(ChatMessage::responses_item)
                    .collect(),
            )),
        ),
        (Api::Completions, Prompt::Text(text)) => (None, Some(PromptField::Text(text)), None),
        (Api::Completions, Prompt::TokenIds(ids)) => (None, Some(PromptField::Ids(ids)), None),
        (Api::Completions, Prompt::Chat(messages)) => {
            joined = messages
                .iter()
                .map(|m| m.content.as_str())
                .collect::<Vec<_>>()
                .join("\n\n");
            (None, Some(PromptField::Text(&joined)), None)
        }
    };
    let length_field = options.length_field_for(api);
    let body = Body {
        model,
        messages,
        prompt: prompt_field,
        input,
        max_tokens: (length_field == LengthField::MaxTokens).then_some(max_tokens),
        max_completion_tokens: (length_field == LengthField::MaxCompletionTokens)
            .then_some(max_tokens),
        max_output_tokens: (length_field == LengthField::MaxOutputTokens).then_some(max_tokens),
        min_tokens: options.force_length.then_some(max_tokens),
        ignore_eos: options.force_length.then_some(true),
        temperature: 0.0,
        stream: true,
        stream_options: options.sends_stream_options(api).then_some(StreamOptions {
            include_usage: true,
        }),
        priority,
        tools: tools.map(|t| match api {
            Api::Responses => &*t.responses_definitions,
            Api::Chat | Api::Completions => &*t.definitions,
        }),
        tool_choice: (tools.is_some() && answer_in_words).then_some("none"),
    };
    // Invariant: a struct of strings, numbers and bools always serializes.
    if options.extra.is_empty() {
        return Bytes::from(serde_json::to_vec(&body).expect("request body serializes"));
    }
    let mut value = serde_json::to_value(&body).expect("request body serializes");
    if let Some(map) = value.as_object_mut() {
        for (key, extra) in &options.extra {
            if key == "priority" && priority.is_some() {
                continue;
            }
            map.insert(key.clone(), extra.clone());
        }
    }
    Bytes::from(serde_json::to_vec(&value).expect("request body serializes"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn parse(b: &Bytes) -> Value {
        serde_json::from_slice(b).unwrap()
    }

    #[test]
    fn a_class_sends_its_priority_over_the_targets_extra_body() {
        let prompt = Prompt::Text("hi".into());
        let options = BodyOptions {
            extra: serde_json::from_str(r#"{"priority": 2, "top_p": 0.9}"#).unwrap(),
            ..BodyOptions::default()
        };
        let body = parse(&build_call_body(
            Api::Chat,
            "rag-lora",
            &prompt,
            4,
            &options,
            Some(-1),
        ));
        assert_eq!(body["model"], "rag-lora");
        assert_eq!(body["priority"], -1);
        assert_eq!(body["top_p"], 0.9);
        let plain = parse(&build_call_body(
            Api::Chat,
            "m",
            &prompt,
            4,
            &BodyOptions::default(),
            None,
        ));
        assert!(plain.get("priority").is_none());
    }

    #[test]
    fn targets_can_drop_the_extensions_and_add_fields() {
        let options = BodyOptions {
            force_length: false,
            extra: serde_json::from_str(r#"{"temperature": 0.7, "priority": 2}"#).unwrap(),
            ..BodyOptions::default()
        };
        let body = parse(&build_body_with(
            Api::Chat,
            "m",
            &Prompt::Text("t".into()),
            9,
            &options,
        ));
        assert_eq!(body.get("ignore_eos"), None);
        assert_eq!(body.get("min_tokens"), None);
        assert_eq!(body["max_completion_tokens"], 9);
        assert_eq!(body["temperature"], 0.7, "a field named in extra-body wins");
        assert_eq!(body["priority"], 2);
    }

    #[test]
    fn chat_body() {
        let prompt = Prompt::Chat(vec![
            ChatMessage::text("system", "sys"),
            ChatMessage::text("user", "hi"),
        ]);
        let body = parse(&build_body(Api::Chat, "m", &prompt, 64));
        assert_eq!(
            body,
            json!({
                "model": "m",
                "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"}],
                "max_completion_tokens": 64, "min_tokens": 64, "ignore_eos": true,
                "temperature": 0.0, "stream": true, "stream_options": {"include_usage": true}
            })
        );
    }

    #[test]
    fn the_preflight_can_settle_the_length_field_and_usage() {
        let prompt = Prompt::Text("t".into());
        let options = BodyOptions {
            length_field: Some(LengthField::MaxTokens),
            stream_usage: false,
            ..BodyOptions::default()
        };
        let body = parse(&build_body_with(Api::Chat, "m", &prompt, 5, &options));
        assert_eq!(body["max_tokens"], 5);
        assert!(body.get("max_completion_tokens").is_none());
        assert!(body.get("stream_options").is_none());
        // Completions has one name only, whatever was settled for chat.
        let options = BodyOptions {
            length_field: Some(LengthField::MaxCompletionTokens),
            ..BodyOptions::default()
        };
        let body = parse(&build_body_with(
            Api::Completions,
            "m",
            &prompt,
            5,
            &options,
        ));
        assert_eq!(body["max_tokens"], 5);
        assert!(body.get("max_completion_tokens").is_none());
        assert_eq!(
            options.sent_fields(Api::Chat),
            [
                "model",
                "messages",
                "max_completion_tokens",
                "min_tokens",
                "ignore_eos",
                "temperature",
                "stream",
                "stream_options"
            ]
        );
    }

    #[test]
    fn completions_bodies() {
        let text = parse(&build_body(
            Api::Completions,
            "m",
            &Prompt::Text("abc".into()),
            8,
        ));
        assert_eq!(text["prompt"], json!("abc"));
        assert!(text.get("messages").is_none());
        let ids = parse(&build_body(
            Api::Completions,
            "m",
            &Prompt::TokenIds(vec![1, 2, 3]),
            8,
        ));
        assert_eq!(ids["prompt"], json!([1, 2, 3]));
        assert_eq!(ids["min_tokens"], json!(8));
    }

    #[test]
    fn prompts_of_the_other_shape_are_adapted() {
        let chat = Prompt::Chat(vec![
            ChatMessage::text("system", "a"),
            ChatMessage::text("user", "b"),
        ]);
        let body = parse(&build_body(Api::Completions, "m", &chat, 1));
        assert_eq!(body["prompt"], json!("a\n\nb"));
        let body = parse(&build_body(Api::Chat, "m", &Prompt::Text("t".into()), 1));
        assert_eq!(body["messages"], json!([{"role": "user", "content": "t"}]));
    }

    #[test]
    fn responses_bodies_carry_input_and_max_output_tokens() {
        let chat = Prompt::Chat(vec![ChatMessage::text("user", "hi")]);
        let body = parse(&build_body(Api::Responses, "m", &chat, 7));
        assert_eq!(
            body,
            json!({
                "model": "m",
                "input": [{"role": "user", "content": "hi"}],
                "max_output_tokens": 7, "min_tokens": 7, "ignore_eos": true,
                "temperature": 0.0, "stream": true
            })
        );
        let text = parse(&build_body(
            Api::Responses,
            "m",
            &Prompt::Text("t".into()),
            7,
        ));
        assert_eq!(text["input"], "t");
        assert_eq!(
            BodyOptions::default().sent_fields(Api::Responses),
            [
                "model",
                "input",
                "max_output_tokens",
                "min_tokens",
                "ignore_eos",
                "temperature",
                "stream"
            ]
        );
    }

    #[test]
    fn an_agent_talks_in_tool_calls_on_chat_and_on_the_responses_api() {
        use crate::workload::{Segment, Tools};
        let tools = std::sync::Arc::new(Tools::new(
            std::sync::Arc::new(
                json!([{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]),
            ),
            "search".into(),
        ));
        let unique = |key, tokens| Segment::Unique { key, tokens };
        let call = CallSpec {
            messages: vec![
                Message {
                    role: Role::User,
                    segments: vec![unique(1, 3)],
                },
                Message {
                    role: Role::ToolCall(0),
                    segments: vec![unique(2, 2)],
                },
                Message {
                    role: Role::ToolResult(0),
                    segments: vec![unique(3, 2)],
                },
                Message {
                    role: Role::User,
                    segments: vec![unique(4, 1)],
                },
            ],
            input_tokens: 8,
            output_tokens: 4,
            tools: Some(tools),
            answer_in_words: false,
        };
        let prompt = Prompt::Chat(chat_messages(&call, |m| format!("w{}", m.segments.len())));
        let body = parse(&build_spec_body(
            Api::Chat,
            "m",
            &prompt,
            &call,
            &BodyOptions::default(),
            None,
        ));
        assert_eq!(body["tools"][0]["function"]["name"], "search");
        assert!(body.get("tool_choice").is_none(), "the model chooses");
        let messages = &body["messages"];
        assert_eq!(messages[1]["role"], "assistant");
        assert_eq!(messages[1]["content"], serde_json::Value::Null);
        assert_eq!(messages[1]["tool_calls"][0]["id"], "call_0");
        assert_eq!(messages[1]["tool_calls"][0]["function"]["name"], "search");
        assert_eq!(
            messages[1]["tool_calls"][0]["function"]["arguments"],
            r#"{"input":"w1"}"#
        );
        assert_eq!(
            messages[2],
            json!({"role": "tool", "tool_call_id": "call_0", "content": "w1"})
        );
        // The last step answers in words; the Responses API has its own items
        // and its tools' fields at the top.
        let last = CallSpec {
            answer_in_words: true,
            ..call.clone()
        };
        let body = parse(&build_spec_body(
            Api::Responses,
            "m",
            &prompt,
            &last,
            &BodyOptions::default(),
            None,
        ));
        assert_eq!(body["tool_choice"], "none");
        assert_eq!(
            body["tools"][0],
            json!({"type": "function", "name": "search", "parameters": {"type": "object"}})
        );
        assert_eq!(
            body["input"][1],
            json!({"type": "function_call", "call_id": "call_0", "name": "search", "arguments": r#"{"input":"w1"}"#})
        );
        assert_eq!(
            body["input"][2],
            json!({"type": "function_call_output", "call_id": "call_0", "output": "w1"})
        );
        assert_eq!(body["input"][0], json!({"role": "user", "content": "w1"}));
    }

    #[test]
    fn api_paths() {
        assert_eq!(api_path(Api::Chat), "chat/completions");
        assert_eq!(api_path(Api::Completions), "completions");
        assert_eq!(api_path(Api::Responses), "responses");
    }
}
