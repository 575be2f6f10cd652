//! Recorded traffic (pure): the text of one log file → [`Log`], a list of
//! requests with what a profile needs and nothing else — times, token
//! counts, sessions, and prompt prefixes as chained block hashes. No prompt
//! text survives this module, so none can leak into a profile.
//!
//! The format is detected by content, like `dataset`:
//! - a first non-blank character other than `{` or `[`: a CSV with a header
//!   row — BurstGPT (parsed as for `arrival trace`, see
//!   [`crate::data::trace`]);
//! - JSONL whose first record has `"kind": "run"`: a capcard journal
//!   (`runs/<id>.jsonl` of a results folder), one record per call, the task
//!   as the session;
//! - JSONL with `input_length` and `output_length`: Mooncake (hash ids are
//!   its prefix blocks, `block_tokens` each);
//! - records with `conversations`: ShareGPT (every exchange is a turn of one
//!   session; prompts re-send the history, as a chat client does);
//! - any other JSON object: a request log ([`request_record`]), one record
//!   per request, as JSONL or as one JSON array.
//!
//! # Request logs
//!
//! Field names are looked up at the top level, then under `request`, `body`
//! and `response` (for logs that store the OpenAI request and response):
//! - time: `timestamp`, `timestamp_ms`, `timestamp_s`, `time`, `time_ms`,
//!   `time_s`, `created`, `created_at`, `start_time`, `arrival_time`, `ts`,
//!   `ts_ms` —
//!   an RFC 3339 string, or a number whose unit, seconds or milliseconds, is
//!   decided once per key and file by the rule of [`super::times`] (the
//!   key's suffix, an epoch's size, else the span of a relative clock,
//!   warned about) and stated in [`Log::times`];
//! - input tokens: `input_tokens`, `prompt_tokens`, `usage.prompt_tokens`,
//!   `usage.input_tokens`; else counted from `prompt` or `messages` (one
//!   word = one token, as for datasets);
//! - output tokens: `output_tokens`, `completion_tokens`,
//!   `usage.completion_tokens`, `usage.output_tokens`; else counted from a
//!   `completion`/`output`/`response` text or `choices[0]`'s content;
//! - optional: a session (`session_id`, `conversation_id`, `session`,
//!   `conversation`, `thread_id`, `chat_id`), `hash_ids`, and the latency
//!   (`latency_ms`, `e2e_ms`, `duration_ms`, or `latency`/`latency_s`/
//!   `duration` in seconds), which lets think time exclude the answer's own
//!   time.
//!
//! The formats with a clock of their own fix its unit: Mooncake's
//! `timestamp` is milliseconds, BurstGPT's seconds, a journal's
//! `scheduled_ms` milliseconds. `--time-unit` overrides every numeric
//! timestamp but a journal's.
//!
//! # Prefix blocks
//!
//! A prompt's text is cut into blocks of [`TEXT_BLOCK_WORDS`] words, and each
//! block is hashed together with the hash of the block before it, as a KV
//! prefix cache keys its blocks: two prompts share block `k` exactly when
//! their first `k + 1` blocks are equal. Mooncake's hash ids are such chains
//! already.

use std::hash::{Hash, Hasher};

use serde_json::Value;

use super::times::{self, TimeField, TimeRole, TimeUnit};
use crate::data::dataset::{self, DatasetError, EntryPrompt, approx_tokens};
use crate::data::trace;

/// Words per prefix block of a text prompt (≈ tokens, by the word rule).
pub const TEXT_BLOCK_WORDS: usize = 16;

/// The layouts [`read_log`] recognises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    Mooncake,
    BurstGpt,
    RequestLog,
    CapcardJournal,
    ShareGpt,
}

impl LogFormat {
    pub fn label(self) -> &'static str {
        match self {
            LogFormat::Mooncake => "Mooncake trace",
            LogFormat::BurstGpt => "BurstGPT CSV",
            LogFormat::RequestLog => "request log",
            LogFormat::CapcardJournal => "capcard journal",
            LogFormat::ShareGpt => "ShareGPT conversations",
        }
    }
}

/// One parsed log file.
#[derive(Debug, Clone, PartialEq)]
pub struct Log {
    pub origin: String,
    pub format: LogFormat,
    /// In file order.
    pub records: Vec<LogRecord>,
    /// Records left out, and why (failed calls, conversations without an
    /// exchange), in words.
    pub skipped: Vec<(usize, &'static str)>,
    /// How each time field was read: arrivals first, then latencies.
    pub times: Vec<TimeField>,
}

/// One request as a profile sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LogRecord {
    /// Arrival, in seconds (any origin, consistent within the file).
    pub timestamp_s: Option<f64>,
    /// Prompt tokens, the whole prompt (history and prefix included).
    pub input_tokens: u32,
    /// `None` when the log does not say.
    pub output_tokens: Option<u32>,
    /// Conversation or session id; `None` = a request of its own.
    pub session: Option<String>,
    /// Start → end of the answer, when the log records it.
    pub latency_s: Option<f64>,
    /// Chained hashes of the prompt's leading blocks; empty = unknown.
    pub prefix_blocks: Vec<u64>,
    /// Tokens per prefix block (a text block of words, scaled by the log's
    /// own token count when it gives one).
    pub tokens_per_block: f64,
    /// The blocks are the log's own hash ids (not hashed from text).
    pub blocks_are_hash_ids: bool,
}

/// Parse one log file's text; `origin` names it in errors. `block_tokens`
/// is the size of a Mooncake hash-id block; `time_unit` is `--time-unit`.
pub fn read_log(
    text: &str,
    origin: &str,
    block_tokens: u32,
    time_unit: Option<TimeUnit>,
) -> Result<Log, DatasetError> {
    let first = text.trim_start().chars().next();
    let bad = |line: usize, message: String| DatasetError::BadRecord {
        origin: origin.to_string(),
        line,
        message,
    };
    let log = match first {
        None => {
            return Err(DatasetError::Unusable {
                origin: origin.to_string(),
                message: "is empty".to_string(),
            });
        }
        Some('{') => {
            let line = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            let head: Value = serde_json::from_str(line)
                .map_err(|e| bad(1, format!("not a JSON object: {e}")))?;
            if head.get("kind").and_then(Value::as_str) == Some("run") {
                journal(text, origin)?
            } else if head.get("input_length").is_some() && head.get("output_length").is_some() {
                mooncake(text, origin, block_tokens, time_unit)?
            } else if head.get("conversations").is_some() {
                sharegpt(text, origin)?
            } else {
                let mut records = Vec::new();
                for (number, line) in text.lines().enumerate() {
                    if line.trim().is_empty() {
                        continue;
                    }
                    let value: Value = serde_json::from_str(line)
                        .map_err(|e| bad(number + 1, format!("not a JSON object: {e}")))?;
                    records.push(request_record(&value).map_err(|m| bad(number + 1, m))?);
                }
                request_log(origin, records, time_unit)
            }
        }
        Some('[') => {
            let values: Vec<Value> = serde_json::from_str(text)
                .map_err(|e| bad(e.line(), format!("not a JSON array of records: {e}")))?;
            if values
                .first()
                .is_some_and(|v| v.get("conversations").is_some())
            {
                sharegpt(text, origin)?
            } else {
                let records = values
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        request_record(v).map_err(|m| bad(1, format!("record {}: {m}", i + 1)))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                request_log(origin, records, time_unit)
            }
        }
        Some(_) => {
            let parsed = trace::parse_trace(text, origin)?;
            let time = by_format(
                "timestamp column",
                TimeUnit::S,
                "BurstGPT records seconds",
                time_unit,
            );
            Log {
                origin: origin.to_string(),
                format: LogFormat::BurstGpt,
                records: parsed
                    .rows
                    .iter()
                    .map(|row| LogRecord {
                        // The trace holds the column's seconds × 1000.
                        timestamp_s: Some(time.seconds(row.timestamp_ms / 1000.0)),
                        input_tokens: row.input_tokens,
                        output_tokens: Some(row.output_tokens),
                        ..LogRecord::default()
                    })
                    .collect(),
                skipped: Vec::new(),
                times: vec![time],
            }
        }
    };
    if log.records.is_empty() {
        return Err(DatasetError::Unusable {
            origin: origin.to_string(),
            message: "holds no usable request".to_string(),
        });
    }
    Ok(log)
}

/// The time field of a format that fixes its unit, unless `--time-unit`
/// says otherwise.
fn by_format(field: &str, unit: TimeUnit, why: &str, forced: Option<TimeUnit>) -> TimeField {
    let own = TimeField::by_format(field, TimeRole::Arrival, unit, why);
    match forced {
        Some(unit) => TimeField::forced(own, unit),
        None => own,
    }
}

fn mooncake(
    text: &str,
    origin: &str,
    block_tokens: u32,
    time_unit: Option<TimeUnit>,
) -> Result<Log, DatasetError> {
    let parsed = trace::parse_trace(text, origin)?;
    let time = by_format(
        "timestamp",
        TimeUnit::Ms,
        "Mooncake traces record milliseconds",
        time_unit,
    );
    Ok(Log {
        origin: origin.to_string(),
        format: LogFormat::Mooncake,
        records: parsed
            .rows
            .into_iter()
            .map(|row| LogRecord {
                timestamp_s: Some(time.seconds(row.timestamp_ms)),
                input_tokens: row.input_tokens,
                output_tokens: Some(row.output_tokens),
                blocks_are_hash_ids: !row.hash_ids.is_empty(),
                prefix_blocks: row.hash_ids,
                tokens_per_block: f64::from(block_tokens.max(1)),
                ..LogRecord::default()
            })
            .collect(),
        skipped: Vec::new(),
        times: vec![time],
    })
}

fn sharegpt(text: &str, origin: &str) -> Result<Log, DatasetError> {
    let data = dataset::parse_dataset(text, origin)?;
    let mut records = Vec::new();
    for (index, entry) in data.entries.iter().enumerate() {
        let session = Some(format!("conversation-{index}"));
        if entry.turns.is_empty() {
            // A record of another shape inside the array: one request.
            let words = prompt_words(&entry.prompt);
            records.push(LogRecord {
                input_tokens: entry.input_tokens(),
                output_tokens: entry.output_tokens,
                session,
                prefix_blocks: text_blocks(words.iter().copied()),
                tokens_per_block: TEXT_BLOCK_WORDS as f64,
                ..LogRecord::default()
            });
            continue;
        }
        // Turn k re-sends every earlier exchange, then its user message.
        let mut history: Vec<&str> = Vec::new();
        for turn in &entry.turns {
            history.extend(turn.user.split_whitespace());
            let input_tokens = u32::try_from(history.len()).unwrap_or(u32::MAX);
            if input_tokens > 0 {
                records.push(LogRecord {
                    input_tokens,
                    output_tokens: Some(approx_tokens(&turn.answer).max(1)),
                    session: session.clone(),
                    prefix_blocks: text_blocks(history.iter().copied()),
                    tokens_per_block: TEXT_BLOCK_WORDS as f64,
                    ..LogRecord::default()
                });
            }
            history.extend(turn.answer.split_whitespace());
        }
    }
    Ok(Log {
        origin: origin.to_string(),
        format: LogFormat::ShareGpt,
        records,
        skipped: if data.skipped > 0 {
            vec![(
                data.skipped,
                "conversations without a (user, answer) exchange",
            )]
        } else {
            Vec::new()
        },
        times: Vec::new(),
    })
}

fn prompt_words(prompt: &EntryPrompt) -> Vec<&str> {
    match prompt {
        EntryPrompt::Tokens(_) => Vec::new(),
        EntryPrompt::Messages(messages) => messages
            .iter()
            .flat_map(|m| m.text.split_whitespace())
            .collect(),
    }
}

/// A capcard journal: successful calls only (a failed call's lengths are
/// what was asked, not what the traffic was).
fn journal(text: &str, origin: &str) -> Result<Log, DatasetError> {
    let mut records = Vec::new();
    let mut failed = 0;
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let value: Value = serde_json::from_str(line).map_err(|e| DatasetError::BadRecord {
            origin: origin.to_string(),
            line: number + 1,
            message: format!("not a JSON object: {e}"),
        })?;
        if value.get("kind").and_then(Value::as_str) != Some("request") {
            continue;
        }
        if value.get("error").is_some_and(|e| !e.is_null()) {
            failed += 1;
            continue;
        }
        let number_at = |key: &str| value.get(key).and_then(Value::as_f64);
        let input_tokens = number_at("prompt_tokens_reported")
            .or_else(|| number_at("prompt_tokens_requested"))
            .map_or(0, |n| n as u32);
        if input_tokens == 0 {
            continue;
        }
        records.push(LogRecord {
            timestamp_s: number_at("scheduled_ms").map(|ms| ms / 1000.0),
            input_tokens,
            output_tokens: number_at("output_tokens").map(|n| (n as u32).max(1)),
            session: number_at("task").map(|t| format!("task-{t}")),
            latency_s: number_at("e2e_ms").map(|ms| ms / 1000.0),
            ..LogRecord::default()
        });
    }
    // capcard wrote these keys itself: `--time-unit` does not apply.
    let times = [
        records
            .iter()
            .any(|r| r.timestamp_s.is_some())
            .then(|| times::arrival_field("scheduled_ms", &[], None)),
        records
            .iter()
            .any(|r| r.latency_s.is_some())
            .then(|| TimeField::latency("e2e_ms")),
    ]
    .into_iter()
    .flatten()
    .collect();
    Ok(Log {
        origin: origin.to_string(),
        format: LogFormat::CapcardJournal,
        records,
        skipped: if failed > 0 {
            vec![(failed, "failed calls")]
        } else {
            Vec::new()
        },
        times,
    })
}

const TIME_KEYS: [&str; 12] = [
    "timestamp",
    "timestamp_ms",
    "timestamp_s",
    "time",
    "time_ms",
    "time_s",
    "created",
    "created_at",
    "start_time",
    "arrival_time",
    "ts",
    "ts_ms",
];
const INPUT_KEYS: [&str; 4] = [
    "input_tokens",
    "prompt_tokens",
    "usage.prompt_tokens",
    "usage.input_tokens",
];
const OUTPUT_KEYS: [&str; 4] = [
    "output_tokens",
    "completion_tokens",
    "usage.completion_tokens",
    "usage.output_tokens",
];
const SESSION_KEYS: [&str; 6] = [
    "session_id",
    "conversation_id",
    "session",
    "conversation",
    "thread_id",
    "chat_id",
];
/// Where the fields of a logged request may be nested.
const ROOTS: [&str; 4] = ["", "request", "body", "response"];

/// The first of `keys` present under any of the [`ROOTS`] (a dotted key
/// descends into objects), with the key that matched.
fn lookup<'v>(value: &'v Value, keys: &[&'static str]) -> Option<(&'v Value, &'static str)> {
    for root in ROOTS {
        let base = if root.is_empty() {
            Some(value)
        } else {
            value.get(root)
        };
        let Some(base) = base else { continue };
        for key in keys {
            let found = key.split('.').try_fold(base, |v, part| v.get(part));
            if let Some(found) = found.filter(|v| !v.is_null()) {
                return Some((found, *key));
            }
        }
    }
    None
}

/// In order of preference; each read in the unit its key names (seconds
/// when it names none).
const LATENCY_KEYS: [&str; 6] = [
    "latency_ms",
    "e2e_ms",
    "duration_ms",
    "latency",
    "latency_s",
    "duration",
];

/// A request's time as the log wrote it: a number waits for its file's
/// unit (see [`super::times`]), a string is already seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LoggedTime {
    Number(f64),
    Rfc3339Seconds(f64),
}

/// One record of a request log before its file's time unit is known.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRecord {
    /// `timestamp_s` is set only for an RFC 3339 time.
    pub record: LogRecord,
    /// The key of the time, and the time.
    pub time: Option<(&'static str, LoggedTime)>,
    /// The key the latency was found under.
    pub latency_key: Option<&'static str>,
}

/// The records of one request log, their numeric times read in the unit
/// [`times::arrival_field`] decides for each key over the whole file.
pub fn request_log(origin: &str, parsed: Vec<RequestRecord>, time_unit: Option<TimeUnit>) -> Log {
    // Keys in order of first appearance (a log has one, as a rule).
    let mut numbers: Vec<(&'static str, Vec<f64>)> = Vec::new();
    let mut strings: Vec<&'static str> = Vec::new();
    let mut latencies: Vec<&'static str> = Vec::new();
    for p in &parsed {
        match p.time {
            Some((key, LoggedTime::Number(t))) => match numbers.iter_mut().find(|(k, _)| *k == key)
            {
                Some((_, values)) => values.push(t),
                None => numbers.push((key, vec![t])),
            },
            Some((key, LoggedTime::Rfc3339Seconds(_))) if !strings.contains(&key) => {
                strings.push(key);
            }
            _ => {}
        }
        if let Some(key) = p.latency_key.filter(|k| !latencies.contains(k)) {
            latencies.push(key);
        }
    }
    let numeric: Vec<TimeField> = numbers
        .iter()
        .map(|(key, values)| times::arrival_field(key, values, time_unit))
        .collect();
    let records = parsed
        .into_iter()
        .map(|p| {
            let mut record = p.record;
            if let Some((key, LoggedTime::Number(t))) = p.time {
                record.timestamp_s = numeric
                    .iter()
                    .find(|f| f.field == key)
                    .map(|f| f.seconds(t));
            }
            record
        })
        .collect();
    let mut fields = numeric;
    fields.extend(strings.into_iter().map(TimeField::rfc3339));
    fields.extend(latencies.into_iter().map(TimeField::latency));
    Log {
        origin: origin.to_string(),
        format: LogFormat::RequestLog,
        records,
        skipped: Vec::new(),
        times: fields,
    }
}

/// One record of a request log (see the module doc for the fields).
pub fn request_record(value: &Value) -> Result<RequestRecord, String> {
    if !value.is_object() {
        return Err("expected a JSON object".to_string());
    }
    let time = match lookup(value, &TIME_KEYS) {
        None => None,
        Some((v, key)) => Some((key, logged_time(v, key)?)),
    };
    let timestamp_s = match time {
        Some((_, LoggedTime::Rfc3339Seconds(s))) => Some(s),
        _ => None,
    };
    let (words, prompt_words) = prompt_text(value)?;
    let input_tokens = match lookup(value, &INPUT_KEYS) {
        Some((v, key)) => tokens(v, key)?,
        None if prompt_words > 0 => u32::try_from(prompt_words).unwrap_or(u32::MAX),
        None => {
            return Err(
                "a request needs its input tokens (`prompt_tokens`, `input_tokens`, `usage`) or its prompt (`prompt`, `messages`)"
                    .to_string(),
            );
        }
    };
    if input_tokens == 0 {
        return Err("the request has no input tokens".to_string());
    }
    let output_tokens = match lookup(value, &OUTPUT_KEYS) {
        Some((v, key)) => Some(tokens(v, key)?),
        None => answer_text(value).map(approx_tokens),
    };
    let session = lookup(value, &SESSION_KEYS).map(|(v, _)| match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    });
    let latency = LATENCY_KEYS.iter().find_map(|key| {
        lookup(value, &[*key])
            .and_then(|(v, _)| v.as_f64())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(|v| (*key, v * times::latency_unit(key).seconds_per_unit()))
    });
    let blocks_are_hash_ids = matches!(value.get("hash_ids"), Some(Value::Array(_)));
    let (prefix_blocks, tokens_per_block) = match value.get("hash_ids") {
        Some(Value::Array(ids)) => (
            ids.iter()
                .map(|id| {
                    id.as_u64()
                        .ok_or_else(|| format!("hash id {id} is not a whole number"))
                })
                .collect::<Result<Vec<_>, _>>()?,
            value
                .get("block_tokens")
                .and_then(Value::as_u64)
                .map_or(f64::from(trace::DEFAULT_BLOCK_TOKENS), |b| {
                    b.clamp(1, 1 << 20) as f64
                }),
        ),
        // A block is 16 words; when the log counts tokens, 16 words are
        // that many tokens on average.
        _ => (
            text_blocks(words.iter().map(String::as_str)),
            TEXT_BLOCK_WORDS as f64 * f64::from(input_tokens) / prompt_words.max(1) as f64,
        ),
    };
    Ok(RequestRecord {
        record: LogRecord {
            timestamp_s,
            input_tokens,
            output_tokens,
            session,
            latency_s: latency.map(|(_, s)| s),
            prefix_blocks,
            tokens_per_block,
            blocks_are_hash_ids,
        },
        time,
        latency_key: latency.map(|(key, _)| key),
    })
}

fn tokens(value: &Value, key: &str) -> Result<u32, String> {
    value
        .as_f64()
        .filter(|n| n.is_finite() && *n >= 0.0 && n.fract() == 0.0)
        .map(|n| n.min(f64::from(u32::MAX)) as u32)
        .ok_or_else(|| format!("`{key}` must be a whole number of tokens, got {value}"))
}

/// The prompt's words for block hashing, and how many of them are the
/// prompt's own: `prompt` (a string or a list of strings) or the
/// `messages`' contents (strings or lists of `{type: text, text}` parts).
/// Each message is led by a role marker, so that equal texts in different
/// roles do not share blocks; markers are not counted as tokens.
fn prompt_text(value: &Value) -> Result<(Vec<String>, usize), String> {
    let mut words = Vec::new();
    if let Some((prompt, _)) = lookup_any(value, "prompt") {
        match prompt {
            Value::String(s) => words.extend(s.split_whitespace().map(str::to_string)),
            Value::Array(parts) => {
                for part in parts {
                    if let Some(s) = part.as_str() {
                        words.extend(s.split_whitespace().map(str::to_string));
                    }
                }
            }
            _ => return Err("`prompt` must be a string or a list of strings".to_string()),
        }
        let count = words.len();
        return Ok((words, count));
    }
    if let Some((messages, _)) = lookup_any(value, "messages") {
        let list = messages
            .as_array()
            .ok_or_else(|| "`messages` must be an array".to_string())?;
        let mut count = 0;
        for message in list {
            let role = message.get("role").and_then(Value::as_str).unwrap_or("");
            words.push(format!("<{role}>"));
            let content = content_text(message.get("content"));
            count += content.len();
            words.extend(content);
        }
        return Ok((words, count));
    }
    Ok((words, 0))
}

fn content_text(content: Option<&Value>) -> Vec<String> {
    match content {
        Some(Value::String(s)) => s.split_whitespace().map(str::to_string).collect(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .flat_map(|s| s.split_whitespace().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    }
}

fn lookup_any<'v>(value: &'v Value, key: &str) -> Option<(&'v Value, ())> {
    ROOTS.iter().find_map(|root| {
        let base = if root.is_empty() {
            Some(value)
        } else {
            value.get(*root)
        };
        base.and_then(|b| b.get(key))
            .filter(|v| !v.is_null())
            .map(|v| (v, ()))
    })
}

/// The answer's text, when the log keeps it instead of a count.
fn answer_text(value: &Value) -> Option<&str> {
    for key in ["completion", "output", "response"] {
        if let Some((Value::String(s), _)) = lookup_any(value, key) {
            return Some(s);
        }
    }
    let choice = lookup_any(value, "choices")?.0.get(0)?;
    choice
        .get("message")
        .and_then(|m| m.get("content"))
        .or_else(|| choice.get("text"))
        .and_then(Value::as_str)
}

fn logged_time(value: &Value, key: &str) -> Result<LoggedTime, String> {
    match value {
        Value::Number(n) => n
            .as_f64()
            .filter(|t| t.is_finite() && *t >= 0.0)
            .map(LoggedTime::Number)
            .ok_or_else(|| format!("`{key}` must be a non-negative number")),
        Value::String(s) => crate::time::rfc3339_seconds(s)
            .map(LoggedTime::Rfc3339Seconds)
            .ok_or_else(|| format!("`{key}` is neither a number nor an RFC 3339 time: {s:?}")),
        other => Err(format!("`{key}` must be a number or a string, got {other}")),
    }
}

/// Chained hashes of the full [`TEXT_BLOCK_WORDS`]-word blocks of `words`
/// (a trailing partial block is not a cacheable block).
pub fn text_blocks<'a>(words: impl Iterator<Item = &'a str>) -> Vec<u64> {
    let mut blocks = Vec::new();
    let mut previous: u64 = 0;
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    previous.hash(&mut hasher);
    let mut in_block = 0;
    for word in words {
        word.hash(&mut hasher);
        in_block += 1;
        if in_block == TEXT_BLOCK_WORDS {
            previous = hasher.finish();
            blocks.push(previous);
            hasher = std::collections::hash_map::DefaultHasher::new();
            previous.hash(&mut hasher);
            in_block = 0;
        }
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(n: usize, tag: &str) -> String {
        (0..n)
            .map(|i| format!("{tag}{i}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn request_log_fields_are_found_at_the_top_or_nested() {
        let flat: Value = serde_json::from_str(
            r#"{"timestamp": 1700000000.5, "prompt_tokens": 812, "completion_tokens": 95,
                "session_id": "s1", "latency_ms": 1500}"#,
        )
        .unwrap();
        let r = request_record(&flat).unwrap();
        assert_eq!(
            r.time,
            Some(("timestamp", LoggedTime::Number(1_700_000_000.5)))
        );
        assert_eq!(r.latency_key, Some("latency_ms"));
        let r = r.record;
        assert_eq!((r.input_tokens, r.output_tokens), (812, Some(95)));
        assert_eq!(r.session.as_deref(), Some("s1"));
        assert_eq!(r.latency_s, Some(1.5));

        let nested: Value = serde_json::from_str(
            r#"{"created_at": "2026-03-01T12:00:00Z",
                "request": {"messages": [{"role": "user", "content": "hello there"}]},
                "response": {"usage": {"prompt_tokens": 9, "completion_tokens": 3}}}"#,
        )
        .unwrap();
        let r = request_record(&nested).unwrap().record;
        assert_eq!((r.input_tokens, r.output_tokens), (9, Some(3)));
        assert_eq!(r.timestamp_s, Some(1_772_366_400.0));
    }

    /// A request log of `times` (one field `key`), its arrivals in seconds
    /// and how its time was read.
    fn read_times(key: &str, times: &[f64], flag: Option<TimeUnit>) -> (Vec<f64>, TimeField) {
        let text: String = times
            .iter()
            .map(|t| format!("{{\"{key}\": {t}, \"input_tokens\": 8, \"output_tokens\": 2}}\n"))
            .collect();
        let log = read_log(&text, "r.jsonl", 512, flag).unwrap();
        let arrivals = log.records.iter().filter_map(|r| r.timestamp_s).collect();
        (arrivals, log.times[0].clone())
    }

    #[test]
    fn each_form_of_numeric_time_is_read_in_its_unit_and_says_why() {
        use super::times::TimeRule;
        let at = |start: f64, gap: f64| -> Vec<f64> {
            (0..200).map(|i| start + gap * f64::from(i)).collect()
        };
        // Epoch seconds, epoch milliseconds, an `_ms` key: no warning.
        let (s, field) = read_times("created", &at(1_700_000_000.0, 0.5), None);
        assert_eq!((field.unit, field.rule), (TimeUnit::S, TimeRule::EpochS));
        assert_eq!(s[1] - s[0], 0.5);
        let (s, field) = read_times("timestamp", &at(1_700_000_000_000.0, 500.0), None);
        assert_eq!((field.unit, field.rule), (TimeUnit::Ms, TimeRule::EpochMs));
        assert_eq!(s[0], 1_700_000_000.0);
        let (s, field) = read_times("timestamp_ms", &at(0.0, 2500.0), None);
        assert_eq!((field.unit, field.rule), (TimeUnit::Ms, TimeRule::Key));
        assert_eq!(s[1], 2.5);
        assert!(field.warning.is_none());
        // Relative seconds with fractions, relative whole milliseconds:
        // judged, and warned about.
        let (s, field) = read_times("time", &at(0.25, 0.5), None);
        assert_eq!((field.unit, field.rule), (TimeUnit::S, TimeRule::Relative));
        assert_eq!(s[1], 0.75);
        assert!(field.warning.is_some());
        let (s, field) = read_times("timestamp", &at(0.0, 500.0), None);
        assert_eq!((field.unit, field.rule), (TimeUnit::Ms, TimeRule::Relative));
        assert_eq!(s[1], 0.5);
        assert!(field.warning.unwrap().contains("--time-unit s"));
        // The flag decides, and the statement says so.
        let (s, field) = read_times("timestamp", &at(0.0, 500.0), Some(TimeUnit::S));
        assert_eq!(s[1], 500.0);
        assert_eq!(
            field.statement(),
            "`timestamp` in s (as given by --time-unit)"
        );
    }

    #[test]
    fn formats_with_a_clock_of_their_own_state_its_unit() {
        use super::times::TimeRule;
        let mooncake = "{\"timestamp\": 0, \"input_length\": 6, \"output_length\": 2, \"hash_ids\": [1]}\n\
                        {\"timestamp\": 500, \"input_length\": 7, \"output_length\": 3, \"hash_ids\": [1]}\n";
        let log = read_log(mooncake, "m.jsonl", 512, None).unwrap();
        assert_eq!(log.times.len(), 1);
        assert_eq!(
            (log.times[0].unit, log.times[0].rule),
            (TimeUnit::Ms, TimeRule::Format)
        );
        assert_eq!(log.records[1].timestamp_s, Some(0.5));
        // Forced to seconds against the format: obeyed, and warned.
        let log = read_log(mooncake, "m.jsonl", 512, Some(TimeUnit::S)).unwrap();
        assert_eq!(log.records[1].timestamp_s, Some(500.0));
        assert!(log.times[0].warning.as_ref().unwrap().contains("Mooncake"));

        let burst = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                     5,ChatGPT,472,18,490,Conversation log\n\
                     7,ChatGPT,1087,3,1090,Conversation log\n";
        let log = read_log(burst, "b.csv", 512, None).unwrap();
        assert_eq!(log.times[0].unit, TimeUnit::S);
        assert_eq!(log.records[1].timestamp_s, Some(7.0));
        let log = read_log(burst, "b.csv", 512, Some(TimeUnit::Ms)).unwrap();
        assert_eq!(log.records[1].timestamp_s, Some(0.007));

        // Latencies by their key; strings are RFC 3339.
        let text = "{\"time\": \"2026-03-01T12:00:00Z\", \"input_tokens\": 4, \"duration\": 2}\n";
        let log = read_log(text, "r.jsonl", 512, Some(TimeUnit::Ms)).unwrap();
        let rules: Vec<_> = log
            .times
            .iter()
            .map(|t| (t.field.as_str(), t.unit, t.rule))
            .collect();
        assert_eq!(
            rules,
            vec![
                ("time", TimeUnit::S, TimeRule::Rfc3339),
                ("duration", TimeUnit::S, TimeRule::Default)
            ]
        );
        assert_eq!(log.records[0].latency_s, Some(2.0));
        let sharegpt = r#"[{"conversations": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]}]"#;
        assert!(
            read_log(sharegpt, "s.json", 512, None)
                .unwrap()
                .times
                .is_empty()
        );
    }

    #[test]
    fn text_prompts_are_counted_and_blocked_without_keeping_text() {
        let value: Value = serde_json::json!({
            "prompt": words(40, "w"),
            "completion": "a b c",
        });
        let r = request_record(&value).unwrap().record;
        assert_eq!(r.input_tokens, 40);
        assert_eq!(r.output_tokens, Some(3));
        assert_eq!(r.prefix_blocks.len(), 40 / TEXT_BLOCK_WORDS);
        assert_eq!(r.tokens_per_block, TEXT_BLOCK_WORDS as f64);
    }

    #[test]
    fn block_chains_share_exactly_the_common_prefix() {
        let system = words(32, "sys");
        let a = format!("{system} {}", words(32, "a"));
        let b = format!("{system} {}", words(32, "b"));
        let (ba, bb) = (
            text_blocks(a.split_whitespace()),
            text_blocks(b.split_whitespace()),
        );
        assert_eq!(ba.len(), 4);
        assert_eq!(ba[..2], bb[..2]);
        assert_ne!(ba[2], bb[2]);
        // A later equal block after a difference is not shared: the chain.
        let c = format!("{} {}", words(16, "x"), words(16, "sys"));
        let bc = text_blocks(c.split_whitespace());
        assert_ne!(bc[1], ba[0]);
    }

    #[test]
    fn formats_are_detected_by_content() {
        let mooncake = "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 20, \"hash_ids\": [1, 2]}\n\
                        {\"timestamp\": 500, \"input_length\": 700, \"output_length\": 30, \"hash_ids\": [1, 3]}\n";
        let log = read_log(mooncake, "m.jsonl", 512, None).unwrap();
        assert_eq!(log.format, LogFormat::Mooncake);
        assert_eq!(log.records[1].timestamp_s, Some(0.5));
        assert_eq!(log.records[1].prefix_blocks, vec![1, 3]);

        let burst = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n\
                     5,ChatGPT,472,18,490,Conversation log\n\
                     7,ChatGPT,1087,0,1087,Conversation log\n";
        let log = read_log(burst, "b.csv", 512, None).unwrap();
        assert_eq!(log.format, LogFormat::BurstGpt);
        assert_eq!(log.records.len(), 2);

        let sharegpt = r#"[{"conversations": [
            {"from": "human", "value": "one two three"}, {"from": "gpt", "value": "four five"},
            {"from": "human", "value": "six"}, {"from": "gpt", "value": "seven eight nine"}]}]"#;
        let log = read_log(sharegpt, "s.json", 512, None).unwrap();
        assert_eq!(log.format, LogFormat::ShareGpt);
        // Turn 2 re-sends turn 1 and its answer: 3 + 2 + 1 words.
        let inputs: Vec<u32> = log.records.iter().map(|r| r.input_tokens).collect();
        assert_eq!(inputs, vec![3, 6]);
        assert_eq!(log.records[1].output_tokens, Some(3));
        assert!(log.records.iter().all(|r| r.session.is_some()));

        let journal = concat!(
            r#"{"kind":"run","run":{}}"#,
            "\n",
            r#"{"kind":"request","task":3,"call":0,"scheduled_ms":1000.0,"prompt_tokens_requested":50,"prompt_tokens_reported":52,"output_tokens":7,"e2e_ms":200.0,"error":null}"#,
            "\n",
            r#"{"kind":"request","task":4,"call":0,"scheduled_ms":1500.0,"prompt_tokens_requested":50,"output_tokens":0,"error":{"class":"timeout"}}"#,
            "\n"
        );
        let log = read_log(journal, "runs/x.jsonl", 512, None).unwrap();
        assert_eq!(log.format, LogFormat::CapcardJournal);
        assert_eq!(log.records.len(), 1);
        assert_eq!(log.records[0].input_tokens, 52);
        assert_eq!(log.records[0].session.as_deref(), Some("task-3"));
        assert_eq!(log.skipped, vec![(1, "failed calls")]);

        let requests = "{\"time\": 1, \"input_tokens\": 10, \"output_tokens\": 2}\n";
        assert_eq!(
            read_log(requests, "r.jsonl", 512, None).unwrap().format,
            LogFormat::RequestLog
        );
    }

    #[test]
    fn bad_records_name_their_line() {
        let text = "{\"time\": 1, \"input_tokens\": 10}\n{\"time\": 2}\n";
        let err = read_log(text, "r.jsonl", 512, None)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("r.jsonl line 2:"), "{err}");
        assert!(err.contains("input tokens"), "{err}");
        let err = read_log("", "e.jsonl", 512, None).unwrap_err().to_string();
        assert!(err.contains("empty"), "{err}");
        let text = "{\"time\": \"soon\", \"input_tokens\": 10}\n";
        let err = read_log(text, "r.jsonl", 512, None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("RFC 3339"), "{err}");
    }
}
