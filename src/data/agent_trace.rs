//! Recorded agent sessions (pure): the text of an agent trace → sessions of
//! LLM calls with their call graph, whatever format recorded them.
//!
//! One model serves both consumers: `capcard profile` fits the agent loop
//! from it, and a `sessions` workload replays it call by call. Readers of
//! each published format fill it; [`parse_agent_trace`] detects the format
//! by content and says which it found.
//!
//! # The model
//!
//! A [`TraceSession`] is one task: what a user asked the agent to do, from
//! its first call to its last. Its calls are in start order, and each call
//! names at most one *parent*: the call whose answer it waited for. A call
//! leaves `gap_ms` after its parent's answer arrived (tool time, the
//! harness's own work); a call without a parent leaves `start_ms` after the
//! session started. Siblings (calls with the same parent) are a fan-out:
//! parallel tool calls or sub-agents spawned together.
//!
//! Prompts are described by `hash_ids`: the prompt's blocks of
//! `block_tokens` tokens, chained as a prefix cache keys them, so an id
//! names a block *and* everything before it. Equal ids mean equal prefixes.
//! Formats that record blocks (Bailian, the coding-agent traces) give them;
//! for the others the reader derives them from what the format does say
//! (TraceLab's `prefix_tokens` re-sent + `newly_append_tokens`, or an
//! OpenTelemetry agent's growing context) and says so in
//! [`AgentTrace::block_origin`].

use std::collections::HashMap;

use serde_json::Value;

use super::dataset::DatasetError;

/// The formats [`parse_agent_trace`] reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentTraceFormat {
    /// OpenTelemetry GenAI spans, as OTLP JSON from a file exporter.
    OtelGenAi,
    /// Coding-agent traces in the Weka / SemiAnalysis form (`block_size`,
    /// `requests[]` of `t`, `type`, `in`, `out`, `hash_ids`).
    CodingAgent,
    /// TraceLab rounds (`session_id`, `round_index`, `prefix_tokens`,
    /// `newly_append_tokens`, `tools[]`).
    TraceLab,
    /// Alibaba Bailian usage traces (`chat_id`, `parent_chat_id`,
    /// `timestamp`, `input_length`, `output_length`, `turn`, `hash_ids`).
    Bailian,
}

impl AgentTraceFormat {
    pub fn label(self) -> &'static str {
        match self {
            AgentTraceFormat::OtelGenAi => "OpenTelemetry GenAI spans",
            AgentTraceFormat::CodingAgent => "coding-agent trace (Weka/SemiAnalysis)",
            AgentTraceFormat::TraceLab => "TraceLab rounds",
            AgentTraceFormat::Bailian => "Alibaba Bailian trace",
        }
    }
}

/// Where a trace's prompt blocks came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BlockOrigin {
    /// The format records them (`hash_ids`).
    Recorded,
    /// Derived from the re-sent prefix and appended tokens the format
    /// records (each call re-sends `prefix_tokens` of its lane's context).
    FromPrefixTokens,
    /// Assumed: each call of an agent lane re-sends the previous call's
    /// prompt and answer, as far as its prompt is long enough. The format
    /// records no prefix, so reuse read from it is an upper bound.
    AssumedGrowingContext,
}

/// A parsed agent trace.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentTrace {
    pub format: AgentTraceFormat,
    /// Tokens per block of `hash_ids`.
    pub block_tokens: u32,
    pub block_origin: BlockOrigin,
    /// Sessions in order of their start.
    pub sessions: Vec<TraceSession>,
    /// `(count, why)` of records left out.
    pub skipped: Vec<(usize, String)>,
}

/// One task of the agent: its calls, in start order.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceSession {
    pub id: String,
    /// When its first call started, in ms on the trace's clock.
    pub start_ms: f64,
    pub calls: Vec<TraceCall>,
}

/// Who made a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CallKind {
    /// The main agent loop.
    Main,
    /// A sub-agent (or a parallel side call the harness spawned).
    Subagent,
}

/// One LLM call of a session.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceCall {
    /// Start, ms after the session's start.
    pub start_ms: f64,
    /// End (last token), ms after the session's start, where recorded.
    pub end_ms: Option<f64>,
    /// Index (in the session's `calls`) of the call whose answer this one
    /// waited for; always an earlier call. `None`: a root, leaving
    /// `start_ms` after the session starts.
    pub parent: Option<u32>,
    /// From the parent's answer to this call's start, ms (≥ 0): tool time
    /// and the harness's own work. For a root, equal to `start_ms`.
    pub gap_ms: f64,
    /// Wall time of the tools run in that gap, where the format records it
    /// (TraceLab's `tool_wall_latency_ms`, OpenTelemetry `execute_tool` spans).
    pub tool_ms: Option<f64>,
    pub kind: CallKind,
    pub input_tokens: u32,
    /// At least 1.
    pub output_tokens: u32,
    /// Of `output_tokens`, those spent reasoning, where recorded.
    pub reasoning_tokens: Option<u32>,
    /// Prompt tokens the recorded server served from its cache, where recorded.
    pub cached_tokens: Option<u32>,
    /// The prompt's blocks (see the module docs); may cover less than
    /// `input_tokens` (the rest is unique to the call).
    pub hash_ids: Vec<u64>,
}

impl TraceSession {
    /// Calls waiting on call `index`'s answer.
    pub fn children(&self, index: u32) -> impl Iterator<Item = u32> + '_ {
        self.calls
            .iter()
            .enumerate()
            .filter(move |(_, c)| c.parent == Some(index))
            .map(|(i, _)| i as u32)
    }
}

/// Parse an agent trace's text; `origin` names it in errors. The format is
/// detected by content ([`detect`]).
pub fn parse_agent_trace(text: &str, origin: &str) -> Result<AgentTrace, DatasetError> {
    let format = detect(text).ok_or_else(|| DatasetError::Unusable {
        origin: origin.to_string(),
        message: "not an agent trace this version reads (OpenTelemetry GenAI spans, \
                  a Weka/SemiAnalysis coding-agent trace, TraceLab rounds, or an \
                  Alibaba Bailian trace)"
            .to_string(),
    })?;
    let bad = |line: usize, message: String| DatasetError::BadRecord {
        origin: origin.to_string(),
        line,
        message,
    };
    let trace = match format {
        AgentTraceFormat::Bailian => bailian(text).map_err(|(l, m)| bad(l, m))?,
        other => {
            return Err(DatasetError::Unusable {
                origin: origin.to_string(),
                message: format!("{} is detected but not read yet", other.label()),
            });
        }
    };
    if trace.sessions.is_empty() {
        return Err(DatasetError::Unusable {
            origin: origin.to_string(),
            message: format!("{} with no calls", format.label()),
        });
    }
    Ok(trace)
}

/// The format of an agent trace, from its first record's keys.
pub fn detect(text: &str) -> Option<AgentTraceFormat> {
    let first = text.lines().find(|l| !l.trim().is_empty())?.trim();
    let value: Value = serde_json::from_str(first)
        .ok()
        .or_else(|| serde_json::from_str(text).ok())?;
    let record = match &value {
        Value::Array(items) => items.first()?,
        other => other,
    };
    let has = |key: &str| record.get(key).is_some();
    if has("resourceSpans") {
        Some(AgentTraceFormat::OtelGenAi)
    } else if has("requests") && (has("block_size") || has("blockSize")) {
        Some(AgentTraceFormat::CodingAgent)
    } else if has("round_index") || has("newly_append_tokens") {
        Some(AgentTraceFormat::TraceLab)
    } else if has("chat_id") && has("input_length") {
        Some(AgentTraceFormat::Bailian)
    } else {
        None
    }
}

/// Bailian's blocks are 16 tokens.
const BAILIAN_BLOCK_TOKENS: u32 = 16;

/// Alibaba Bailian: one JSON object per call. A call's parent is
/// `parent_chat_id` (a previous turn of the same conversation; `-1` or
/// absent for a first turn); a session is a root call and everything that
/// descends from it. `timestamp` is in seconds.
fn bailian(text: &str) -> Result<AgentTrace, (usize, String)> {
    struct Row {
        chat_id: i64,
        parent: Option<i64>,
        start_ms: f64,
        input_tokens: u32,
        output_tokens: u32,
        hash_ids: Vec<u64>,
    }
    let mut rows = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = number + 1;
        let value: Value =
            serde_json::from_str(line).map_err(|e| (at, format!("not a JSON object: {e}")))?;
        let int = |name: &str| -> Result<i64, (usize, String)> {
            value
                .get(name)
                .and_then(Value::as_i64)
                .ok_or((at, format!("`{name}` must be a whole number")))
        };
        let tokens = |name: &str| -> Result<u32, (usize, String)> {
            u32::try_from(int(name)?).map_err(|_| (at, format!("`{name}` is out of range")))
        };
        let timestamp_s = value
            .get("timestamp")
            .and_then(Value::as_f64)
            .filter(|t| t.is_finite() && *t >= 0.0)
            .ok_or((
                at,
                "`timestamp` must be a non-negative number of seconds".to_string(),
            ))?;
        let parent = match value.get("parent_chat_id") {
            None | Some(Value::Null) => None,
            Some(v) => v.as_i64().filter(|p| *p >= 0),
        };
        let hash_ids = match value.get("hash_ids") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(ids)) => ids
                .iter()
                .map(|id| {
                    id.as_u64()
                        .ok_or((at, format!("hash id {id} is not a whole number")))
                })
                .collect::<Result<_, _>>()?,
            Some(other) => return Err((at, format!("`hash_ids` must be an array, got {other}"))),
        };
        let input_tokens = tokens("input_length")?;
        if input_tokens == 0 {
            return Err((at, "`input_length` must be at least 1".to_string()));
        }
        rows.push(Row {
            chat_id: int("chat_id")?,
            parent,
            start_ms: timestamp_s * 1000.0,
            input_tokens,
            output_tokens: tokens("output_length")?.max(1),
            hash_ids,
        });
    }
    rows.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
    // Each row's root, so that descendants join their root's session.
    let by_id: HashMap<i64, usize> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| (r.chat_id, i))
        .collect();
    let mut session_of: Vec<usize> = Vec::with_capacity(rows.len());
    let mut sessions: Vec<TraceSession> = Vec::new();
    let mut index_in_session: Vec<u32> = Vec::with_capacity(rows.len());
    let mut orphans = 0usize;
    for (i, row) in rows.iter().enumerate() {
        let parent_row = row
            .parent
            .and_then(|p| by_id.get(&p).copied())
            .filter(|&p| p < i);
        if row.parent.is_some() && parent_row.is_none() {
            orphans += 1;
        }
        let (session, parent) = match parent_row {
            Some(p) => (session_of[p], Some(index_in_session[p])),
            None => {
                sessions.push(TraceSession {
                    id: row.chat_id.to_string(),
                    start_ms: row.start_ms,
                    calls: Vec::new(),
                });
                (sessions.len() - 1, None)
            }
        };
        let s = &mut sessions[session];
        let start_ms = row.start_ms - s.start_ms;
        // The parent's end is not recorded: the gap is from its start, an
        // upper bound on the tool time that includes the parent's answer.
        let gap_ms = match parent {
            Some(p) => start_ms - s.calls[p as usize].start_ms,
            None => start_ms,
        };
        s.calls.push(TraceCall {
            start_ms,
            end_ms: None,
            parent,
            gap_ms,
            tool_ms: None,
            kind: CallKind::Main,
            input_tokens: row.input_tokens,
            output_tokens: row.output_tokens,
            reasoning_tokens: None,
            cached_tokens: None,
            hash_ids: row.hash_ids.clone(),
        });
        session_of.push(session);
        index_in_session.push((s.calls.len() - 1) as u32);
    }
    let mut skipped = Vec::new();
    if orphans > 0 {
        skipped.push((
            orphans,
            "parent_chat_id not in the trace (or later): started a session of its own".to_string(),
        ));
    }
    Ok(AgentTrace {
        format: AgentTraceFormat::Bailian,
        block_tokens: BAILIAN_BLOCK_TOKENS,
        block_origin: BlockOrigin::Recorded,
        sessions,
        skipped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const BAILIAN: &str = r#"{"chat_id": 1, "parent_chat_id": -1, "timestamp": 10.0, "input_length": 40, "output_length": 5, "type": "text", "turn": 1, "hash_ids": [1, 2, 3]}
{"chat_id": 2, "parent_chat_id": -1, "timestamp": 10.5, "input_length": 20, "output_length": 7, "type": "text", "turn": 1, "hash_ids": [9, 10]}
{"chat_id": 3, "parent_chat_id": 1, "timestamp": 12.0, "input_length": 60, "output_length": 3, "type": "text", "turn": 2, "hash_ids": [1, 2, 3, 4]}
"#;

    #[test]
    fn bailian_turns_join_their_root_session() {
        assert_eq!(detect(BAILIAN), Some(AgentTraceFormat::Bailian));
        let trace = parse_agent_trace(BAILIAN, "b.jsonl").unwrap();
        assert_eq!(trace.block_tokens, 16);
        assert_eq!(trace.sessions.len(), 2);
        let first = &trace.sessions[0];
        assert_eq!(first.id, "1");
        assert_eq!(first.calls.len(), 2);
        assert_eq!(first.calls[1].parent, Some(0));
        assert!((first.calls[1].start_ms - 2000.0).abs() < 1e-9);
        assert!((first.calls[1].gap_ms - 2000.0).abs() < 1e-9);
        assert_eq!(first.calls[1].hash_ids, vec![1, 2, 3, 4]);
        assert_eq!(first.children(0).collect::<Vec<_>>(), vec![1]);
        assert_eq!(trace.sessions[1].calls.len(), 1);
    }

    #[test]
    fn unknown_text_is_named_as_such() {
        let err = parse_agent_trace("{\"x\": 1}\n", "x.jsonl").unwrap_err();
        assert!(err.to_string().contains("not an agent trace"), "{err}");
    }
}
