//! What the simulator reads from a call's body, and what it refuses (pure).
//!
//! Shared by the HTTP server ([`super::http`]) and the virtual-time executor
//! (`exec::virtual_time`), so a call that the server would answer with a 400
//! is refused the same way on the engine's own clock, and both submit the
//! same tokens with the same stopping rules. Also here: the seeded draws of
//! the injected faults, which depend only on the seed and the request id.
//!
//! Three bodies: completions (`prompt`), chat (`messages`) and the
//! Responses API (`input`, a string or message items, and `instructions`,
//! counted as prompt tokens). Chat and responses may offer `tools`: the
//! call then names the function the simulated model answers with (the
//! first function tool, or the one `tool_choice` names; none with
//! `tool_choice: "none"`).

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::SimFaults;
use super::engine::{EngineRequest, RequestId, validate_request};
use super::presets::Preset;
use super::tokenize::tokenize_into;
use crate::hash::mix;

/// Which OpenAI endpoint a call went to (and a response answers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Completions,
    Chat,
    /// `POST /v1/responses`.
    Responses,
}

#[derive(Debug, Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

/// The fields the completions and chat endpoints read (the Responses API's
/// are mapped onto them); anything else (temperature, top_p, …) is
/// accepted and ignored, as vLLM does.
#[derive(Debug, Deserialize)]
struct CommonParams {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    max_tokens: Option<u32>,
    #[serde(default)]
    max_completion_tokens: Option<u32>,
    #[serde(default)]
    min_tokens: Option<u32>,
    #[serde(default)]
    ignore_eos: Option<bool>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    #[serde(default)]
    n: Option<u32>,
    /// vLLM's priority scheduling: lower is served first.
    #[serde(default)]
    priority: Option<i32>,
}

#[derive(Debug, Deserialize)]
struct CompletionBody {
    prompt: Value,
    #[serde(flatten)]
    common: CommonParams,
}

#[derive(Debug, Deserialize)]
pub(crate) struct ChatMessage {
    #[serde(default)]
    #[allow(dead_code)] // roles add no tokens (see `tokenize`), but must be strings
    role: Option<String>,
    #[serde(default)]
    content: Value,
    /// An assistant turn's tool calls: their arguments are prompt tokens.
    #[serde(default)]
    tool_calls: Option<Vec<Value>>,
}

#[derive(Debug, Deserialize)]
struct ChatBody {
    messages: Vec<ChatMessage>,
    #[serde(default)]
    tools: Option<Value>,
    #[serde(default)]
    tool_choice: Option<Value>,
    #[serde(flatten)]
    common: CommonParams,
}

/// `POST /v1/responses`: what vLLM reads of OpenAI's fields, with vLLM's
/// own `ignore_eos`, `min_tokens` and `priority`.
#[derive(Debug, Deserialize)]
struct ResponsesBody {
    input: Value,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    max_output_tokens: Option<u32>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    min_tokens: Option<u32>,
    #[serde(default)]
    ignore_eos: Option<bool>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(default)]
    priority: Option<i32>,
    #[serde(default)]
    tools: Option<Value>,
    #[serde(default)]
    tool_choice: Option<Value>,
}

/// A call the engine accepts, before it is given an id.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedCall {
    pub prompt: Vec<u32>,
    pub max_tokens: u32,
    pub min_tokens: u32,
    pub ignore_eos: bool,
    pub priority: i32,
    /// The model (or adapter) asked for, if the body names one.
    pub model: Option<String>,
    pub stream: bool,
    /// Usage in the stream: asked for with `stream_options.include_usage`
    /// on completions and chat; always on the Responses API, whose last
    /// event carries it.
    pub include_usage: bool,
    /// The function the answer calls (see the module docs), if any.
    pub tool: Option<String>,
}

impl ParsedCall {
    pub fn into_engine_request(self, id: RequestId) -> EngineRequest {
        EngineRequest {
            id,
            prompt: self.prompt,
            max_tokens: self.max_tokens,
            min_tokens: self.min_tokens,
            ignore_eos: self.ignore_eos,
            priority: self.priority,
        }
    }
}

/// Why a call is answered with an error instead of tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// HTTP 400 `invalid_request_error`.
    BadRequest(String),
    /// HTTP 404: a model that is not served.
    UnknownModel(String),
    /// A token id outside the vocabulary (vLLM: a 400, or on a stream an
    /// HTTP 200 holding one error event).
    OutOfVocabulary { id: u32, stream: bool },
}

impl Refusal {
    pub fn status(&self) -> u16 {
        match self {
            Refusal::BadRequest(_) => 400,
            Refusal::UnknownModel(_) => 404,
            Refusal::OutOfVocabulary { stream: true, .. } => 200,
            Refusal::OutOfVocabulary { stream: false, .. } => 400,
        }
    }

    pub fn message(&self) -> String {
        match self {
            Refusal::BadRequest(m) => m.clone(),
            Refusal::UnknownModel(model) => format!("The model `{model}` does not exist."),
            Refusal::OutOfVocabulary { id, .. } => format!("Token id {id} is out of vocabulary"),
        }
    }
}

/// The body as `T`, or the 400 message.
fn parse<T: for<'de> Deserialize<'de>>(body: &[u8]) -> Result<T, String> {
    serde_json::from_slice(body).map_err(|e| format!("invalid request body: {e}"))
}

/// Reads a call's body as the server at `preset` serving `served` (the base
/// model and its adapters) would, and checks it as the engine would.
pub fn parse_call(
    api: Api,
    body: &[u8],
    preset: &Preset,
    served: &[String],
) -> Result<ParsedCall, Refusal> {
    let vocab = preset.model.vocab;
    let (prompt, common, tool) = match api {
        Api::Completions => {
            let parsed: CompletionBody = parse(body).map_err(Refusal::BadRequest)?;
            let prompt = completion_prompt(&parsed.prompt, vocab).map_err(Refusal::BadRequest)?;
            if let Some(&id) = prompt.iter().find(|&&id| id >= vocab) {
                return Err(Refusal::OutOfVocabulary {
                    id,
                    stream: parsed.common.stream.unwrap_or(false),
                });
            }
            (prompt, parsed.common, None)
        }
        Api::Chat => {
            let parsed: ChatBody = parse(body).map_err(Refusal::BadRequest)?;
            let prompt = chat_prompt(&parsed.messages, vocab).map_err(Refusal::BadRequest)?;
            let tool = tool_to_call(api, parsed.tools.as_ref(), parsed.tool_choice.as_ref())
                .map_err(Refusal::BadRequest)?;
            (prompt, parsed.common, tool)
        }
        Api::Responses => {
            let parsed: ResponsesBody = parse(body).map_err(Refusal::BadRequest)?;
            let prompt = responses_prompt(parsed.instructions.as_deref(), &parsed.input, vocab)
                .map_err(Refusal::BadRequest)?;
            let tool = tool_to_call(api, parsed.tools.as_ref(), parsed.tool_choice.as_ref())
                .map_err(Refusal::BadRequest)?;
            let common = CommonParams {
                model: parsed.model,
                max_tokens: None,
                max_completion_tokens: parsed.max_output_tokens,
                min_tokens: parsed.min_tokens,
                ignore_eos: parsed.ignore_eos,
                stream: parsed.stream,
                stream_options: Some(StreamOptions {
                    include_usage: Some(true),
                }),
                n: None,
                priority: parsed.priority,
            };
            (prompt, common, tool)
        }
    };
    if let Some(model) = &common.model {
        if !served.contains(model) {
            return Err(Refusal::UnknownModel(model.clone()));
        }
    }
    if common.n.is_some_and(|n| n != 1) {
        return Err(Refusal::BadRequest("n must be 1 on the simulator".into()));
    }
    let max_tokens = match api {
        Api::Completions => common.max_tokens.unwrap_or(16),
        // vLLM's chat and responses default: whatever the context leaves.
        Api::Chat | Api::Responses => common
            .max_completion_tokens
            .or(common.max_tokens)
            .unwrap_or_else(|| {
                preset
                    .max_model_len()
                    .saturating_sub(prompt.len() as u32)
                    .max(1)
            }),
    };
    let min_tokens = common.min_tokens.unwrap_or(0);
    if min_tokens > max_tokens {
        return Err(Refusal::BadRequest(format!(
            "min_tokens ({min_tokens}) must be less than or equal to max_tokens ({max_tokens})"
        )));
    }
    let call = ParsedCall {
        prompt,
        max_tokens,
        min_tokens,
        ignore_eos: common.ignore_eos.unwrap_or(false),
        priority: common.priority.unwrap_or(0),
        model: common.model,
        stream: common.stream.unwrap_or(false),
        include_usage: common
            .stream_options
            .and_then(|o| o.include_usage)
            .unwrap_or(false),
        tool,
    };
    // The id is irrelevant to validation.
    validate_request(preset, &call.clone().into_engine_request(RequestId(0)))
        .map_err(|e| Refusal::BadRequest(e.to_string()))?;
    Ok(call)
}

/// `prompt` as a string, token ids, or a one-element batch of either.
pub(crate) fn completion_prompt(prompt: &Value, vocab: u32) -> Result<Vec<u32>, String> {
    match prompt {
        Value::String(text) => Ok(super::tokenize::tokenize(text, vocab)),
        Value::Array(items) if items.iter().all(Value::is_number) => items
            .iter()
            .map(|v| {
                v.as_u64()
                    .and_then(|t| u32::try_from(t).ok())
                    .ok_or_else(|| {
                        format!("prompt token ids must be non-negative integers, got {v}")
                    })
            })
            .collect(),
        Value::Array(items) if items.len() == 1 => completion_prompt(&items[0], vocab),
        Value::Array(items) if items.is_empty() => Err("prompt must not be empty".into()),
        Value::Array(_) => Err(
            "batched prompts are not supported by the simulator: send one prompt per request"
                .into(),
        ),
        _ => Err(
            "prompt must be a string, an array of token ids, or a one-element array of either"
                .into(),
        ),
    }
}

/// Concatenates the text of every message's content (see `tokenize`).
pub(crate) fn chat_prompt(messages: &[ChatMessage], vocab: u32) -> Result<Vec<u32>, String> {
    if messages.is_empty() {
        return Err("messages must not be empty".into());
    }
    let mut tokens = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        match &m.content {
            Value::String(text) => tokenize_into(text, vocab, &mut tokens),
            Value::Null => {}
            Value::Array(parts) => {
                for part in parts {
                    match part.get("text").and_then(Value::as_str) {
                        Some(text) => tokenize_into(text, vocab, &mut tokens),
                        None => {
                            return Err(format!(
                                "messages[{i}].content: only text parts are supported by the simulator"
                            ));
                        }
                    }
                }
            }
            _ => {
                return Err(format!(
                    "messages[{i}].content must be a string or an array of text parts"
                ));
            }
        }
        for call in m.tool_calls.iter().flatten() {
            let arguments = call
                .get("function")
                .and_then(|f| f.get("arguments"))
                .and_then(Value::as_str);
            if let Some(text) = arguments {
                tokenize_into(text, vocab, &mut tokens);
            }
        }
    }
    Ok(tokens)
}

/// The Responses API's prompt: `instructions` (the system prompt), then
/// `input`, a string or an array of items: messages (`{role, content}`,
/// `type: "message"` or none; content a string or text parts), and the
/// items a tool loop sends back (a `function_call`'s arguments, a
/// `function_call_output`'s output). Earlier `reasoning` items add no
/// tokens, as vLLM drops them from the prompt.
pub(crate) fn responses_prompt(
    instructions: Option<&str>,
    input: &Value,
    vocab: u32,
) -> Result<Vec<u32>, String> {
    let mut tokens = Vec::new();
    if let Some(text) = instructions {
        tokenize_into(text, vocab, &mut tokens);
    }
    let items = match input {
        Value::String(text) => {
            tokenize_into(text, vocab, &mut tokens);
            return Ok(tokens);
        }
        Value::Array(items) => items,
        _ => return Err("input must be a string or an array of input items".into()),
    };
    for (i, item) in items.iter().enumerate() {
        let text_field = |field: &str| match item.get(field) {
            Some(Value::String(text)) => Ok(text.as_str()),
            _ => Err(format!("input[{i}].{field} must be a string")),
        };
        match item.get("type").and_then(Value::as_str) {
            None | Some("message") => match item.get("content") {
                Some(Value::String(text)) => tokenize_into(text, vocab, &mut tokens),
                Some(Value::Array(parts)) => {
                    for (j, part) in parts.iter().enumerate() {
                        let kind = part.get("type").and_then(Value::as_str);
                        let text = part.get("text").and_then(Value::as_str);
                        match (kind, text) {
                            (Some("input_text" | "output_text" | "text"), Some(text)) => {
                                tokenize_into(text, vocab, &mut tokens)
                            }
                            _ => {
                                return Err(format!(
                                    "input[{i}].content[{j}]: only text parts (input_text, output_text) are supported by the simulator"
                                ));
                            }
                        }
                    }
                }
                _ => {
                    return Err(format!(
                        "input[{i}].content must be a string or an array of text parts"
                    ));
                }
            },
            Some("function_call") => tokenize_into(text_field("arguments")?, vocab, &mut tokens),
            Some("function_call_output") => {
                tokenize_into(text_field("output")?, vocab, &mut tokens)
            }
            Some("reasoning") => {}
            Some(other) => {
                return Err(format!(
                    "input[{i}]: items of type `{other}` are not supported by the simulator (message, function_call, function_call_output, reasoning)"
                ));
            }
        }
    }
    Ok(tokens)
}

/// The function a call's answer calls: none without `tools` (or with
/// `tool_choice: "none"`), the one a named `tool_choice` names, else the
/// first function tool. A function is `{"type": "function", "function":
/// {"name"}}` on chat and `{"type": "function", "name"}` on the Responses
/// API; other tools (a hosted web search) are never called.
pub(crate) fn tool_to_call(
    api: Api,
    tools: Option<&Value>,
    tool_choice: Option<&Value>,
) -> Result<Option<String>, String> {
    let tools = match tools {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(tools)) => tools,
        Some(_) => return Err("tools must be an array".into()),
    };
    if tools.is_empty() {
        return Ok(None);
    }
    let name_of = |v: &Value| {
        v.pointer("/function/name")
            .or_else(|| v.get("name"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    match tool_choice {
        None | Some(Value::Null) => {}
        Some(Value::String(choice)) => match choice.as_str() {
            "none" => return Ok(None),
            "auto" | "required" => {}
            other => {
                return Err(format!(
                    "tool_choice must be \"none\", \"auto\", \"required\" or a named function, got \"{other}\""
                ));
            }
        },
        Some(choice @ Value::Object(_)) => {
            if choice.get("type").and_then(Value::as_str) == Some("function") {
                return match name_of(choice) {
                    Some(name) => Ok(Some(name)),
                    None => Err("tool_choice of type function must name the function".into()),
                };
            }
        }
        Some(_) => {
            return Err(
                "tool_choice must be \"none\", \"auto\", \"required\" or a named function".into(),
            );
        }
    }
    for (i, tool) in tools.iter().enumerate() {
        if tool.get("type").and_then(Value::as_str) != Some("function") {
            continue;
        }
        let name = match api {
            Api::Chat | Api::Completions => tool.pointer("/function/name"),
            Api::Responses => tool.get("name"),
        };
        return match name.and_then(Value::as_str) {
            Some(name) => Ok(Some(name.to_string())),
            None => Err(format!(
                "tools[{i}]: a function tool needs a name (`{}`)",
                match api {
                    Api::Responses => "name",
                    Api::Chat | Api::Completions => "function.name",
                }
            )),
        };
    }
    Ok(None)
}

fn unit_draw(seed: u64, salt: u64, id: u64) -> f64 {
    (mix(seed ^ salt, id) >> 11) as f64 / (1u64 << 53) as f64
}

const FAIL_SALT: u64 = 0xFA11_0000_0000_0001;
const CUT_SALT: u64 = 0xC075_0000_0000_0001;

/// What the injected faults do to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Faulted {
    /// HTTP 500 before any token (`fail-rate`).
    Fail,
    /// Streamed, possibly cut or stalled.
    Serve(FaultPlan),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultPlan {
    /// Drop the connection after this many tokens.
    pub cut_after: Option<u32>,
    /// Pause before sending the token at this index.
    pub stall: Option<(u32, Duration)>,
}

/// The seeded fault draws of request `id` with `max_tokens`.
pub fn fault_draw(faults: &SimFaults, seed: u64, id: RequestId, max_tokens: u32) -> Faulted {
    if faults.fail_rate.0 > 0.0 && unit_draw(seed, FAIL_SALT, id.0) < faults.fail_rate.0 {
        return Faulted::Fail;
    }
    Faulted::Serve(FaultPlan {
        cut_after: (faults.cut_rate.0 > 0.0 && unit_draw(seed, CUT_SALT, id.0) < faults.cut_rate.0)
            .then_some((max_tokens / 2).max(1)),
        stall: faults.stall.map(|d| (max_tokens / 2, d)),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::quantity::Fraction;
    use crate::sim::presets::find;

    #[test]
    fn prompts_accept_text_ids_and_singleton_batches() {
        assert_eq!(
            completion_prompt(&json!("a b c"), 100).map(|p| p.len()),
            Ok(3)
        );
        assert_eq!(completion_prompt(&json!([1, 2, 3]), 100), Ok(vec![1, 2, 3]));
        assert_eq!(completion_prompt(&json!([[4, 5]]), 100), Ok(vec![4, 5]));
        assert_eq!(
            completion_prompt(&json!(["x y"]), 100).map(|p| p.len()),
            Ok(2)
        );
        assert!(
            completion_prompt(&json!(["a", "b"]), 100)
                .unwrap_err()
                .contains("batched")
        );
        assert!(completion_prompt(&json!([-1]), 100).is_err());
        assert!(completion_prompt(&json!(7), 100).is_err());
    }

    #[test]
    fn chat_prompt_counts_content_words_only() {
        let messages: Vec<ChatMessage> = serde_json::from_value(json!([
            {"role": "system", "content": "you are terse"},
            {"role": "user", "content": [{"type": "text", "text": "two words"}]},
            {"role": "assistant", "content": null},
        ]))
        .unwrap();
        assert_eq!(chat_prompt(&messages, 1000).unwrap().len(), 5);
        // An agent's tool call in the history: its arguments are prompt.
        let with_call: Vec<ChatMessage> = serde_json::from_value(json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": [{"id": "call_0", "type": "function",
                "function": {"name": "f", "arguments": "{\"input\":\"a b c\"}"}}]},
            {"role": "tool", "tool_call_id": "call_0", "content": "result words"},
        ]))
        .unwrap();
        assert_eq!(chat_prompt(&with_call, 1000).unwrap().len(), 1 + 3 + 2);
        assert!(chat_prompt(&[], 1000).is_err());
    }

    #[test]
    fn responses_input_in_every_form() {
        let len = |instructions: Option<&str>, input: Value| {
            responses_prompt(instructions, &input, 1000).map(|p| p.len())
        };
        assert_eq!(len(None, json!("three short words")), Ok(3));
        assert_eq!(len(Some("be brief"), json!("hi")), Ok(3));
        assert_eq!(
            len(
                None,
                json!([
                    {"role": "system", "content": "you are terse"},
                    {"type": "message", "role": "user",
                     "content": [{"type": "input_text", "text": "two words"}]},
                    {"role": "assistant", "content": [{"type": "output_text", "text": "ok"}]},
                    {"role": "user", "content": [{"type": "text", "text": "go"}]},
                ])
            ),
            Ok(7)
        );
        // A tool loop's items: the call's arguments, its output.
        assert_eq!(
            len(
                None,
                json!([
                    {"role": "user", "content": "weather?"},
                    {"type": "reasoning", "id": "rs_1", "summary": []},
                    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{\"city\": \"Oslo\"}"},
                    {"type": "function_call_output", "call_id": "c", "output": "12 degrees"},
                ])
            ),
            Ok(5)
        );
        let image =
            json!([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]);
        assert!(
            len(None, image)
                .unwrap_err()
                .contains("input[0].content[0]")
        );
        assert!(len(None, json!([{"type": "web_search_call"}])).is_err());
        assert!(len(None, json!([{"type": "function_call_output"}])).is_err());
        assert!(len(None, json!(7)).is_err());
        assert!(len(None, json!([{"role": "user", "content": 7}])).is_err());
    }

    #[test]
    fn the_tool_to_call_is_the_first_function_or_the_one_named() {
        let chat_tools = json!([
            {"type": "code_interpreter"},
            {"type": "function", "function": {"name": "get_weather", "parameters": {}}},
            {"type": "function", "function": {"name": "lookup"}},
        ]);
        let call = |api, tools: &Value, choice: Option<Value>| {
            tool_to_call(api, Some(tools), choice.as_ref())
        };
        assert_eq!(
            call(Api::Chat, &chat_tools, None),
            Ok(Some("get_weather".into()))
        );
        assert_eq!(
            call(Api::Chat, &chat_tools, Some(json!("required"))),
            Ok(Some("get_weather".into()))
        );
        assert_eq!(call(Api::Chat, &chat_tools, Some(json!("none"))), Ok(None));
        assert_eq!(
            call(
                Api::Chat,
                &chat_tools,
                Some(json!({"type": "function", "function": {"name": "lookup"}}))
            ),
            Ok(Some("lookup".into()))
        );
        assert!(call(Api::Chat, &chat_tools, Some(json!("always"))).is_err());
        assert_eq!(tool_to_call(Api::Chat, None, None), Ok(None));
        assert_eq!(call(Api::Chat, &json!([]), None), Ok(None));
        assert!(call(Api::Chat, &json!({"a": 1}), None).is_err());
        assert!(
            call(
                Api::Chat,
                &json!([{"type": "function", "function": {}}]),
                None
            )
            .unwrap_err()
            .contains("function.name")
        );
        let responses_tools = json!([
            {"type": "web_search"},
            {"type": "function", "name": "lookup", "parameters": {}},
        ]);
        assert_eq!(
            call(Api::Responses, &responses_tools, Some(json!("auto"))),
            Ok(Some("lookup".into()))
        );
        assert_eq!(
            call(
                Api::Responses,
                &responses_tools,
                Some(json!({"type": "function", "name": "other"}))
            ),
            Ok(Some("other".into()))
        );
        assert_eq!(
            call(Api::Responses, &json!([{"type": "web_search"}]), None),
            Ok(None)
        );
    }

    #[test]
    fn a_responses_call_reads_its_own_fields() {
        let tiny = find("tiny").unwrap();
        let served = vec!["sim/tiny".to_string()];
        let body = json!({"model": "sim/tiny", "input": "a b c", "instructions": "d e",
            "max_output_tokens": 9, "min_tokens": 9, "ignore_eos": true, "stream": true,
            "tools": [{"type": "function", "name": "f"}], "max_tokens": 2});
        let call = parse_call(Api::Responses, body.to_string().as_bytes(), tiny, &served).unwrap();
        assert_eq!(call.prompt.len(), 5);
        assert_eq!((call.max_tokens, call.min_tokens), (9, 9));
        assert!(call.ignore_eos && call.stream && call.include_usage);
        assert_eq!(call.tool.as_deref(), Some("f"));
        // The default length: what the context leaves.
        let body = json!({"input": "a b c"});
        let call = parse_call(Api::Responses, body.to_string().as_bytes(), tiny, &served).unwrap();
        assert_eq!(call.max_tokens, tiny.max_model_len() - 3);
        assert_eq!(call.tool, None);
        let chat = json!({"messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": {"name": "g"}}], "tool_choice": "auto"});
        let call = parse_call(Api::Chat, chat.to_string().as_bytes(), tiny, &served).unwrap();
        assert_eq!(call.tool.as_deref(), Some("g"));
        assert!(!call.include_usage);
        let no_input = json!({"model": "sim/tiny"});
        let refused = parse_call(
            Api::Responses,
            no_input.to_string().as_bytes(),
            tiny,
            &served,
        );
        assert_eq!(refused.unwrap_err().status(), 400);
        let unknown = json!({"model": "other", "input": "hi"});
        let refused = parse_call(
            Api::Responses,
            unknown.to_string().as_bytes(),
            tiny,
            &served,
        );
        assert_eq!(refused.unwrap_err().status(), 404);
    }

    #[test]
    fn a_call_is_read_and_refused_as_the_server_would() {
        let tiny = find("tiny").unwrap();
        let served = vec!["sim/tiny".to_string()];
        let body = json!({"model": "sim/tiny", "prompt": [1, 2, 3], "max_tokens": 8,
            "min_tokens": 8, "ignore_eos": true, "stream": true, "priority": 2,
            "stream_options": {"include_usage": true}});
        let call =
            parse_call(Api::Completions, body.to_string().as_bytes(), tiny, &served).unwrap();
        assert_eq!(call.prompt, vec![1, 2, 3]);
        assert_eq!((call.max_tokens, call.min_tokens, call.priority), (8, 8, 2));
        assert!(call.ignore_eos && call.stream && call.include_usage);

        let unknown = json!({"model": "other", "messages": [{"role": "user", "content": "hi"}]});
        let refused = parse_call(Api::Chat, unknown.to_string().as_bytes(), tiny, &served);
        assert_eq!(refused.unwrap_err().status(), 404);
        let oov = json!({"prompt": [tiny.model.vocab], "stream": true});
        let refused =
            parse_call(Api::Completions, oov.to_string().as_bytes(), tiny, &served).unwrap_err();
        assert_eq!(refused.status(), 200);
        let too_long = json!({"prompt": "a", "max_tokens": 10_000_000});
        let refused = parse_call(
            Api::Completions,
            too_long.to_string().as_bytes(),
            tiny,
            &served,
        )
        .unwrap_err();
        assert!(
            refused.message().contains("maximum context length"),
            "{refused:?}"
        );
    }

    #[test]
    fn fault_draws_hit_the_requested_rate() {
        let faults = SimFaults {
            fail_rate: Fraction(0.1),
            ..SimFaults::default()
        };
        let hits = (0..10_000)
            .filter(|&i| fault_draw(&faults, 9, RequestId(i), 8) == Faulted::Fail)
            .count();
        assert!((900..1100).contains(&hits), "{hits}");
    }
}
