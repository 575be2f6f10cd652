//! Datasets of real prompts (pure): text of a dataset file → [`Dataset`].
//!
//! The file is read elsewhere (config loading, at the edge); this module only
//! parses, so every format and every mistake is testable without files. The
//! format is detected by content, per record:
//! - JSONL `{"prompt": "...", "output_tokens": N}` (output optional),
//! - JSONL `{"input_tokens": N, "output_tokens": M}` (sizes only: rendered
//!   as synthetic unique text of that many tokens),
//! - chat JSONL `{"messages": [{"role", "content"}...], "output_tokens": N}`;
//!   a trailing assistant message is the reference answer: it is not sent,
//!   and its length is the output length when `output_tokens` is absent,
//! - ShareGPT-style JSON: an array of `{"conversations": [{"from", "value"}]}`
//!   (`human`/`user` and `gpt`/`assistant`/`chatgpt`); the first human turn
//!   is the prompt and its answer's length the output length. The whole
//!   conversation is kept as [`Entry::turns`] for multi-turn replay.
//!   Conversations without a human turn followed by an answer are skipped
//!   and counted ([`Dataset::skipped`]), as real ShareGPT dumps hold many.
//!
//! A file whose first non-blank character is `[` is one JSON array (whose
//! elements may be of any record shape above); anything else is JSONL, one
//! record per non-blank line.
//!
//! Lengths of text are counted with the documented approximation
//! [`approx_tokens`]: one whitespace-separated word = one token. That is
//! exact for the built-in simulator and close for BPE tokenizers on English
//! prose; real servers report `usage`, which the journal records as truth.

use std::sync::Arc;

use serde_json::Value;
use thiserror::Error;

use super::Role;

/// A parsed dataset: its records in file order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Dataset {
    pub entries: Vec<Entry>,
    /// ShareGPT conversations skipped because they hold no (human, answer) pair.
    pub skipped: usize,
}

/// One record: a prompt (text messages or a bare token count) and its output length.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub prompt: EntryPrompt,
    /// Output length from the record; `None` = use the workload's `output-tokens`.
    pub output_tokens: Option<u32>,
    /// ShareGPT: every (user, answer) exchange, in order (empty for other formats).
    pub turns: Vec<DataTurn>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum EntryPrompt {
    /// Only a length is known: rendered as synthetic text of that many tokens.
    Tokens(u32),
    /// Real text, sent verbatim.
    Messages(Vec<DataMessage>),
}

#[derive(Debug, Clone, PartialEq)]
pub struct DataMessage {
    pub role: Role,
    pub text: Arc<str>,
}

/// One exchange of a recorded conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct DataTurn {
    pub user: Arc<str>,
    pub answer: Arc<str>,
}

impl Entry {
    /// Prompt length in tokens (word approximation for text).
    pub fn input_tokens(&self) -> u32 {
        match &self.prompt {
            EntryPrompt::Tokens(n) => *n,
            EntryPrompt::Messages(messages) => messages
                .iter()
                .fold(0u32, |sum, m| sum.saturating_add(approx_tokens(&m.text))),
        }
    }
}

/// The documented size of a text in tokens: its whitespace-separated words.
pub fn approx_tokens(text: &str) -> u32 {
    u32::try_from(text.split_whitespace().count()).unwrap_or(u32::MAX)
}

/// Why a dataset file is not usable; `line` is 1-based.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum DatasetError {
    #[error("{origin} line {line}: {message}")]
    BadRecord {
        origin: String,
        line: usize,
        message: String,
    },
    #[error("{origin}: {message}")]
    Unusable { origin: String, message: String },
}

/// Parse a dataset file's text; `origin` names it in errors (its path).
/// The first bad record is reported with its line number.
pub fn parse_dataset(text: &str, origin: &str) -> Result<Dataset, DatasetError> {
    let bad = |line: usize, message: String| DatasetError::BadRecord {
        origin: origin.to_string(),
        line,
        message,
    };
    let mut dataset = Dataset::default();
    if text.trim_start().starts_with('[') {
        let values: Vec<Value> = serde_json::from_str(text)
            .map_err(|e| bad(e.line(), format!("not a JSON array of records: {e}")))?;
        // Element line numbers: serde_json does not keep them, so the
        // element's index is named instead (line 1 = the array's line).
        for (index, value) in values.iter().enumerate() {
            match record(value) {
                Ok(Some(entry)) => dataset.entries.push(entry),
                Ok(None) => dataset.skipped += 1,
                Err(message) => {
                    return Err(bad(
                        line_of_element(text, index),
                        format!("record {}: {message}", index + 1),
                    ));
                }
            }
        }
    } else {
        for (number, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value: Value = serde_json::from_str(line)
                .map_err(|e| bad(number + 1, format!("not a JSON object: {e}")))?;
            match record(&value) {
                Ok(Some(entry)) => dataset.entries.push(entry),
                Ok(None) => dataset.skipped += 1,
                Err(message) => return Err(bad(number + 1, message)),
            }
        }
    }
    if dataset.entries.is_empty() {
        return Err(DatasetError::Unusable {
            origin: origin.to_string(),
            message: "holds no usable record".to_string(),
        });
    }
    Ok(dataset)
}

/// Best-effort line of the `index`-th top-level element of a JSON array
/// (counts top-level `{` outside strings), for error messages.
fn line_of_element(text: &str, index: usize) -> usize {
    let (mut depth, mut in_string, mut escaped, mut seen, mut line) = (0i32, false, false, 0, 1);
    for c in text.chars() {
        if c == '\n' {
            line += 1;
        }
        if in_string {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => {
                if depth == 1 {
                    if seen == index {
                        return line;
                    }
                    seen += 1;
                }
                depth += 1;
            }
            '}' | ']' => depth -= 1,
            _ => {}
        }
    }
    1
}

/// One record; `Ok(None)` = a conversation without a usable exchange.
fn record(value: &Value) -> Result<Option<Entry>, String> {
    let object = value
        .as_object()
        .ok_or_else(|| "expected a JSON object".to_string())?;
    let output_tokens = match object.get("output_tokens") {
        None | Some(Value::Null) => None,
        Some(v) => Some(count(v, "output_tokens")?.max(1)),
    };
    if let Some(conversations) = object.get("conversations") {
        return sharegpt(conversations, output_tokens);
    }
    if let Some(messages) = object.get("messages") {
        return chat(messages, output_tokens).map(Some);
    }
    if let Some(prompt) = object.get("prompt") {
        let text = prompt
            .as_str()
            .ok_or_else(|| "`prompt` must be a string".to_string())?;
        if approx_tokens(text) == 0 {
            return Err("`prompt` is empty".to_string());
        }
        return Ok(Some(Entry {
            prompt: EntryPrompt::Messages(vec![DataMessage {
                role: Role::User,
                text: Arc::from(text),
            }]),
            output_tokens,
            turns: Vec::new(),
        }));
    }
    if let Some(input) = object.get("input_tokens") {
        let input = count(input, "input_tokens")?;
        if input == 0 {
            return Err("`input_tokens` must be at least 1".to_string());
        }
        return Ok(Some(Entry {
            prompt: EntryPrompt::Tokens(input),
            output_tokens,
            turns: Vec::new(),
        }));
    }
    Err(
        "a record needs `prompt`, `input_tokens`, `messages` or `conversations` (ShareGPT)"
            .to_string(),
    )
}

fn count(value: &Value, field: &str) -> Result<u32, String> {
    value
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| format!("`{field}` must be a whole number of tokens, got {value}"))
}

fn chat(messages: &Value, output_tokens: Option<u32>) -> Result<Entry, String> {
    let list = messages
        .as_array()
        .ok_or_else(|| "`messages` must be an array".to_string())?;
    let mut parsed = Vec::with_capacity(list.len());
    for (i, message) in list.iter().enumerate() {
        let role = message
            .get("role")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("message {} has no `role`", i + 1))?;
        let role = match role {
            "system" | "developer" => Role::System,
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => return Err(format!("message {} has unknown role `{other}`", i + 1)),
        };
        let text = message
            .get("content")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("message {} has no string `content`", i + 1))?;
        parsed.push(DataMessage {
            role,
            text: Arc::from(text),
        });
    }
    // A trailing answer is the reference, not part of the prompt.
    let mut output_tokens = output_tokens;
    if parsed.last().is_some_and(|m| m.role == Role::Assistant) {
        let answer = parsed.pop().map(|m| approx_tokens(&m.text)).unwrap_or(0);
        output_tokens = output_tokens.or(Some(answer.max(1)));
    }
    if !parsed.iter().any(|m| m.role == Role::User) {
        return Err("`messages` holds no user message".to_string());
    }
    Ok(Entry {
        prompt: EntryPrompt::Messages(parsed),
        output_tokens,
        turns: Vec::new(),
    })
}

fn sharegpt(conversations: &Value, output_tokens: Option<u32>) -> Result<Option<Entry>, String> {
    let list = conversations
        .as_array()
        .ok_or_else(|| "`conversations` must be an array".to_string())?;
    let mut turns = Vec::new();
    let mut pending_user: Option<Arc<str>> = None;
    for (i, turn) in list.iter().enumerate() {
        let from = turn
            .get("from")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("conversation turn {} has no `from`", i + 1))?;
        let value = turn
            .get("value")
            .and_then(Value::as_str)
            .ok_or_else(|| format!("conversation turn {} has no string `value`", i + 1))?;
        match from {
            "human" | "user" => pending_user = Some(Arc::from(value)),
            "gpt" | "assistant" | "chatgpt" | "bard" | "bing" => {
                if let Some(user) = pending_user.take() {
                    turns.push(DataTurn {
                        user,
                        answer: Arc::from(value),
                    });
                }
            }
            // System notes and unknown speakers carry no exchange.
            _ => {}
        }
    }
    let Some(first) = turns.first() else {
        return Ok(None);
    };
    if approx_tokens(&first.user) == 0 {
        return Ok(None);
    }
    Ok(Some(Entry {
        prompt: EntryPrompt::Messages(vec![DataMessage {
            role: Role::User,
            text: Arc::clone(&first.user),
        }]),
        output_tokens: output_tokens.or(Some(approx_tokens(&first.answer).max(1))),
        turns,
    }))
}

/// mean, p50 and p99 of a list of lengths (nearest rank), for `capcard plan`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LengthStats {
    pub mean: f64,
    pub p50: u32,
    pub p99: u32,
}

impl LengthStats {
    pub fn of(values: &[u32]) -> Option<LengthStats> {
        if values.is_empty() {
            return None;
        }
        let mut sorted = values.to_vec();
        sorted.sort_unstable();
        let rank = |p: f64| {
            let r = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
            sorted[r.clamp(1, sorted.len()) - 1]
        };
        let mean = sorted.iter().map(|&v| f64::from(v)).sum::<f64>() / sorted.len() as f64;
        Some(LengthStats {
            mean,
            p50: rank(50.0),
            p99: rank(99.0),
        })
    }
}

impl Dataset {
    /// Only the entries whose prompt fits in `max_input_tokens`.
    pub fn filtered(mut self, max_input_tokens: Option<u32>) -> Dataset {
        if let Some(max) = max_input_tokens {
            self.entries.retain(|e| e.input_tokens() <= max);
        }
        self
    }

    /// Every entry's prompt length (word approximation for text).
    pub fn input_lengths(&self) -> Vec<u32> {
        self.entries.iter().map(Entry::input_tokens).collect()
    }

    /// Output lengths of the entries that carry one.
    pub fn output_lengths(&self) -> Vec<u32> {
        self.entries
            .iter()
            .filter_map(|e| e.output_tokens)
            .collect()
    }

    /// True when every entry carries its own output length.
    pub fn has_all_outputs(&self) -> bool {
        self.entries.iter().all(|e| e.output_tokens.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text_of(entry: &Entry) -> Vec<(Role, String)> {
        match &entry.prompt {
            EntryPrompt::Messages(m) => m.iter().map(|m| (m.role, m.text.to_string())).collect(),
            EntryPrompt::Tokens(_) => Vec::new(),
        }
    }

    #[test]
    fn prompt_jsonl_with_and_without_output() {
        let text = "{\"prompt\": \"what is a kv cache\", \"output_tokens\": 40}\n\n{\"prompt\": \"hello there\"}\n";
        let dataset = parse_dataset(text, "d.jsonl").unwrap();
        assert_eq!(dataset.entries.len(), 2);
        assert_eq!(dataset.entries[0].input_tokens(), 5);
        assert_eq!(dataset.entries[0].output_tokens, Some(40));
        assert_eq!(dataset.entries[1].output_tokens, None);
        assert_eq!(
            text_of(&dataset.entries[1]),
            vec![(Role::User, "hello there".to_string())]
        );
    }

    #[test]
    fn token_count_jsonl() {
        let text = "{\"input_tokens\": 120, \"output_tokens\": 30}\n{\"input_tokens\": 7}";
        let dataset = parse_dataset(text, "d.jsonl").unwrap();
        assert_eq!(dataset.entries[0].prompt, EntryPrompt::Tokens(120));
        assert_eq!(dataset.entries[0].output_tokens, Some(30));
        assert_eq!(dataset.entries[1].input_tokens(), 7);
    }

    #[test]
    fn chat_jsonl_drops_the_reference_answer() {
        let text = r#"{"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "why is the sky blue"}, {"role": "assistant", "content": "Rayleigh scattering of light"}]}"#;
        let dataset = parse_dataset(text, "d.jsonl").unwrap();
        let entry = &dataset.entries[0];
        assert_eq!(
            text_of(entry),
            vec![
                (Role::System, "be brief".to_string()),
                (Role::User, "why is the sky blue".to_string())
            ]
        );
        assert_eq!(entry.output_tokens, Some(4));
        assert_eq!(entry.input_tokens(), 7);
    }

    #[test]
    fn sharegpt_array_first_exchange_and_turns() {
        let text = r#"[
  {"id": "a", "conversations": [
    {"from": "human", "value": "tell me a joke"},
    {"from": "gpt", "value": "why did the chicken cross"},
    {"from": "human", "value": "another"},
    {"from": "gpt", "value": "no"}]},
  {"id": "b", "conversations": [{"from": "gpt", "value": "orphan answer"}]}
]"#;
        let dataset = parse_dataset(text, "s.json").unwrap();
        assert_eq!(dataset.entries.len(), 1);
        assert_eq!(dataset.skipped, 1);
        let entry = &dataset.entries[0];
        assert_eq!(entry.input_tokens(), 4);
        assert_eq!(entry.output_tokens, Some(5));
        assert_eq!(entry.turns.len(), 2);
        assert_eq!(&*entry.turns[1].user, "another");
    }

    #[test]
    fn first_bad_line_is_reported_with_its_number() {
        let text = "{\"prompt\": \"ok\"}\n\n{\"prompt\": 3}\n{broken";
        let err = parse_dataset(text, "d.jsonl").unwrap_err();
        assert_eq!(err.to_string(), "d.jsonl line 3: `prompt` must be a string");
        let err = parse_dataset("{\"prompt\": \"ok\"}\n{broken", "d.jsonl").unwrap_err();
        assert!(
            matches!(err, DatasetError::BadRecord { line: 2, .. }),
            "{err}"
        );
        let err = parse_dataset("{\"input_tokens\": -4}", "d.jsonl").unwrap_err();
        assert!(
            err.to_string()
                .contains("line 1: `input_tokens` must be a whole number")
        );
    }

    #[test]
    fn bad_array_element_names_its_line() {
        let text = "[\n {\"prompt\": \"a b\"},\n {\"nothing\": 1}\n]";
        let err = parse_dataset(text, "d.json").unwrap_err();
        assert!(
            matches!(err, DatasetError::BadRecord { line: 3, .. }),
            "{err}"
        );
    }

    #[test]
    fn empty_file_is_unusable() {
        assert!(matches!(
            parse_dataset("\n\n", "e.jsonl"),
            Err(DatasetError::Unusable { .. })
        ));
    }

    #[test]
    fn filter_and_stats() {
        let text = (1..=100)
            .map(|n| format!("{{\"input_tokens\": {n}, \"output_tokens\": {}}}", n * 2))
            .collect::<Vec<_>>()
            .join("\n");
        let dataset = parse_dataset(&text, "d").unwrap().filtered(Some(50));
        assert_eq!(dataset.entries.len(), 50);
        let stats = LengthStats::of(&dataset.input_lengths()).unwrap();
        assert_eq!((stats.p50, stats.p99), (25, 50));
        assert!((stats.mean - 25.5).abs() < 1e-9);
        assert!(dataset.has_all_outputs());
        assert_eq!(LengthStats::of(&[]), None);
    }
}
