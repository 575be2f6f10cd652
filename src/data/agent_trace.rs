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

mod coding_agent;
mod otel;
mod tracelab;

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

impl AgentTrace {
    /// The share of prompt tokens an ideal prefix cache (unlimited, never
    /// evicting, shared by all sessions) would serve: calls in start order
    /// across all sessions, each served its leading `hash_ids` already seen
    /// (stopping at the first unseen, as ids are chained), at most its
    /// `input_tokens`. 0 with no prompt tokens.
    pub fn reuse_potential(&self) -> f64 {
        let mut calls: Vec<(f64, &TraceCall)> = self
            .sessions
            .iter()
            .flat_map(|s| s.calls.iter().map(move |c| (s.start_ms + c.start_ms, c)))
            .collect();
        calls.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut seen = std::collections::HashSet::new();
        let (mut served, mut total) = (0u64, 0u64);
        for (_, call) in calls {
            let hits = call
                .hash_ids
                .iter()
                .take_while(|id| seen.contains(*id))
                .count() as u64;
            served += (hits * u64::from(self.block_tokens)).min(u64::from(call.input_tokens));
            total += u64::from(call.input_tokens);
            seen.extend(call.hash_ids.iter().copied());
        }
        if total == 0 {
            0.0
        } else {
            served as f64 / total as f64
        }
    }
}

/// Mints block ids for formats that record none: each call re-sends part
/// of a context (a list of blocks) and appends blocks of its own; fresh ids
/// are unique in the trace, so equal ids mean equal prefixes.
struct BlockMinter {
    block_tokens: u32,
    next: u64,
}

impl BlockMinter {
    fn new(block_tokens: u32) -> Self {
        BlockMinter {
            block_tokens,
            next: 1,
        }
    }

    /// A call's prompt blocks and the context it leaves (prompt + answer):
    /// the first `shared_tokens` of `context` in whole blocks (no more than
    /// the prompt holds), then fresh blocks up to `input` tokens; the
    /// answer's whole blocks follow in the context.
    fn call(
        &mut self,
        context: &[u64],
        shared_tokens: u32,
        input: u32,
        output: u32,
    ) -> (Vec<u64>, Vec<u64>) {
        let b = self.block_tokens.max(1);
        let prompt_blocks = (input / b) as usize;
        let shared = ((shared_tokens / b) as usize)
            .min(context.len())
            .min(prompt_blocks);
        let mut ids: Vec<u64> = context[..shared].to_vec();
        while ids.len() < prompt_blocks {
            ids.push(self.next);
            self.next += 1;
        }
        let mut after = ids.clone();
        let context_blocks = (input.saturating_add(output) / b) as usize;
        while after.len() < context_blocks {
            after.push(self.next);
            self.next += 1;
        }
        (ids, after)
    }
}

/// A JSON number of tokens at `path`: a whole number ≥ 0 (a float with no
/// fraction is accepted).
fn tokens_at(value: Option<&Value>, path: &str) -> Result<Option<u32>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => {
            let n = v
                .as_u64()
                .or_else(|| {
                    v.as_f64()
                        .filter(|f| *f >= 0.0 && f.fract() == 0.0)
                        .map(|f| f as u64)
                })
                .or_else(|| v.as_str().and_then(|s| s.trim().parse::<u64>().ok()))
                .ok_or(format!(
                    "`{path}` must be a whole number of tokens, got {v}"
                ))?;
            u32::try_from(n)
                .map(Some)
                .map_err(|_| format!("`{path}` is out of range ({n})"))
        }
    }
}

impl AgentTrace {
    /// Sessions started per second over the trace's span (first to last
    /// session start); `None` for a single session or a zero span.
    pub fn session_rate_per_s(&self) -> Option<f64> {
        let first = self.sessions.first()?.start_ms;
        let last = self.sessions.last()?.start_ms;
        let span_s = (last - first) / 1e3;
        (self.sessions.len() > 1 && span_s > 0.0).then(|| (self.sessions.len() - 1) as f64 / span_s)
    }
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
        AgentTraceFormat::Bailian => bailian(text),
        AgentTraceFormat::CodingAgent => coding_agent::read(text),
        AgentTraceFormat::TraceLab => tracelab::read(text),
        AgentTraceFormat::OtelGenAi => otel::read(text),
    }
    .map_err(|(l, m)| bad(l, m))?;
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

/// A document of a trace file: the line it starts on, its index in an
/// array, and its value.
type Document = (usize, Option<usize>, Value);

/// The JSON documents of a trace file: one document, an array of them
/// (each with its index), or one per line (JSONL), each with the line it
/// starts on.
fn json_documents(text: &str) -> Result<Vec<Document>, (usize, String)> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(items)) => Ok(items
            .into_iter()
            .enumerate()
            .map(|(i, v)| (1, Some(i), v))
            .collect()),
        Ok(v) => Ok(vec![(1, None, v)]),
        Err(_) => {
            let mut docs = Vec::new();
            for (number, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let v: Value = serde_json::from_str(line)
                    .map_err(|e| (number + 1, format!("not a JSON object: {e}")))?;
                docs.push((number + 1, None, v));
            }
            Ok(docs)
        }
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
        let hash_ids = super::trace::hash_ids(&value, at)?;
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

    fn bad_line(err: DatasetError) -> (usize, String) {
        match err {
            DatasetError::BadRecord { line, message, .. } => (line, message),
            other => panic!("not a bad record: {other}"),
        }
    }

    const CODING_AGENT: &str = r#"{"id": "w1", "block_size": 16, "t": 5, "requests": [
  {"t": 0.0, "type": "s", "in": 40, "out": 8, "hash_ids": [1, 2], "api_time": 1.0},
  {"t": 2.0, "type": "n", "in": 60, "out": 8, "hash_ids": [1, 2, 3], "api_time": 0.5},
  {"t": 3.0, "type": "subagent", "agent_id": "a1", "requests": [
    {"t": 0.0, "type": "s", "in": 20, "out": 4, "hash_ids": [7]},
    {"t": 1.0, "type": "s", "in": 40, "out": 4, "hash_ids": [7, 8]}]},
  {"t": 5.0, "type": "s", "in": 80, "out": 8, "hash_ids": [1, 2, 3, 4]},
  {"t": 5.0, "type": "s", "in": 80, "out": 8, "hash_ids": [1, 2, 3, 5]}
]}"#;

    #[test]
    fn agent_trace_coding_agent_infers_parents_from_order_and_type() {
        assert_eq!(detect(CODING_AGENT), Some(AgentTraceFormat::CodingAgent));
        let trace = parse_agent_trace(CODING_AGENT, "w.json").unwrap();
        assert_eq!(trace.block_tokens, 16);
        assert_eq!(trace.block_origin, BlockOrigin::Recorded);
        let s = &trace.sessions[0];
        assert_eq!(s.id, "w1");
        assert!((s.start_ms - 5000.0).abs() < 1e-9);
        let parents: Vec<_> = s.calls.iter().map(|c| c.parent).collect();
        assert_eq!(
            parents,
            vec![None, Some(0), Some(1), Some(2), Some(1), Some(1)]
        );
        let kinds: Vec<_> = s.calls.iter().map(|c| c.kind).collect();
        use CallKind::{Main, Subagent};
        assert_eq!(kinds, vec![Main, Main, Subagent, Subagent, Main, Main]);
        // Gaps from the parent's end (start + api_time), else its start.
        let gaps: Vec<_> = s.calls.iter().map(|c| c.gap_ms).collect();
        for (got, want) in gaps
            .iter()
            .zip([0.0, 1000.0, 500.0, 1000.0, 2500.0, 2500.0])
        {
            assert!((got - want).abs() < 1e-6, "{gaps:?}");
        }
        // The sub-agent's inner times are from its spawn.
        assert!((s.calls[3].start_ms - 4000.0).abs() < 1e-6);
        assert_eq!(s.children(1).collect::<Vec<_>>(), vec![2, 4, 5]);
        assert_eq!(s.calls[5].hash_ids, vec![1, 2, 3, 5]);
        // Served: 2 + 3 + 3 blocks of 16 over 40+60+20+40+80+80 tokens
        // (call 3 re-sends block 7, the sub-agent's own).
        let want = (16.0 * (2.0 + 1.0 + 3.0 + 3.0)) / 320.0;
        assert!((trace.reuse_potential() - want).abs() < 1e-9);
    }

    #[test]
    fn agent_trace_coding_agent_bad_input_names_the_field() {
        let text = CODING_AGENT.replace(r#""in": 60"#, r#""in": "many""#);
        let (line, message) = bad_line(parse_agent_trace(&text, "w.json").unwrap_err());
        assert_eq!(line, 1);
        assert!(message.contains("requests[1].in"), "{message}");
        let lines =
            "{\"block_size\": 16, \"requests\": []}\n{\"block_size\": 16, \"requests\": 3}\n";
        let (line, message) = bad_line(parse_agent_trace(lines, "w.jsonl").unwrap_err());
        assert_eq!(line, 2);
        assert!(message.contains("requests"), "{message}");
    }

    const TRACELAB: &str = r#"{"session_id": "a", "round_index": 0, "prefix_tokens": 0, "newly_append_tokens": 40, "output_tokens": 8, "reasoning_output_tokens": 3, "tools": [{"tool_name": "bash", "tool_wall_latency_ms": 300}], "timing_events": [{"event_type": "user_message", "timestamp": "2026-08-25T00:00:00Z"}, {"event_type": "tool_call", "timestamp": "2026-08-25T00:00:01Z"}]}
{"session_id": "a", "round_index": 1, "prefix_tokens": 48, "newly_append_tokens": 20, "output_tokens": 8, "tools": [], "timing_events": [{"event_type": "tool_result", "timestamp": "2026-08-25T00:00:01.300Z"}, {"event_type": "text", "timestamp": "2026-08-25T00:00:02Z"}]}
{"session_id": "a", "round_index": 2, "prefix_tokens": 64, "newly_append_tokens": 16, "output_tokens": 4, "timing_events": [{"event_type": "tool_result", "timestamp": "2026-08-25T00:00:03Z"}, {"event_type": "text", "timestamp": "2026-08-25T00:00:04Z"}]}
{"session_id": "a", "round_index": 3, "prefix_tokens": 64, "newly_append_tokens": 16, "output_tokens": 4, "timing_events": [{"event_type": "tool_result", "timestamp": "2026-08-25T00:00:03Z"}, {"event_type": "text", "timestamp": "2026-08-25T00:00:04.5Z"}]}
{"session_id": "b", "round_index": 1, "prefix_tokens": 0, "newly_append_tokens": 32, "output_tokens": 4, "tools": [{"tool_wall_latency_ms": 200}, {"tool_wall_latency_ms": 100}]}
{"session_id": "b", "round_index": 0, "prefix_tokens": 0, "newly_append_tokens": 32, "output_tokens": 4, "tools": [{"tool_wall_latency_ms": 500}]}
{"session_id": "b", "round_index": 2, "prefix_tokens": 32, "newly_append_tokens": 16, "output_tokens": 4}
"#;

    #[test]
    fn agent_trace_tracelab_rounds_chain_and_share_their_prefix() {
        assert_eq!(detect(TRACELAB), Some(AgentTraceFormat::TraceLab));
        let trace = parse_agent_trace(TRACELAB, "t.jsonl").unwrap();
        assert_eq!(trace.block_origin, BlockOrigin::FromPrefixTokens);
        // b has no timestamps: it starts at 0, timed by its tools.
        let b = &trace.sessions[0];
        assert_eq!(b.id, "b");
        let starts: Vec<_> = b.calls.iter().map(|c| c.start_ms).collect();
        assert_eq!(starts, vec![0.0, 500.0, 800.0]);
        assert_eq!(b.calls[2].parent, Some(1));
        assert_eq!(b.calls[2].tool_ms, Some(300.0));
        assert!((b.calls[2].gap_ms - 300.0).abs() < 1e-9);
        assert_eq!(b.calls[2].hash_ids[..2], b.calls[1].hash_ids[..]);
        assert_ne!(b.calls[1].hash_ids[0], b.calls[0].hash_ids[0]);
        let a = &trace.sessions[1];
        assert_eq!(a.id, "a");
        let c = &a.calls;
        assert_eq!(c[0].input_tokens, 40);
        assert_eq!(c[0].reasoning_tokens, Some(3));
        assert_eq!(c[1].parent, Some(0));
        assert!((c[1].gap_ms - 300.0).abs() < 1e-6);
        assert_eq!(c[1].tool_ms, Some(300.0));
        // 48 tokens re-sent: the first prompt's 2 blocks and the answer's 1.
        assert_eq!(c[1].hash_ids.len(), 4);
        assert_eq!(c[1].hash_ids[..2], c[0].hash_ids[..]);
        // Rounds 2 and 3 start together: a fan-out off round 1.
        assert_eq!((c[2].parent, c[3].parent), (Some(1), Some(1)));
        assert_eq!(c[2].hash_ids[..4], c[1].hash_ids[..]);
        assert_eq!(c[3].hash_ids[..4], c[1].hash_ids[..]);
        assert_ne!(c[2].hash_ids[4], c[3].hash_ids[4]);
    }

    #[test]
    fn agent_trace_tracelab_bad_input_names_the_line() {
        let text = TRACELAB.replacen(r#""prefix_tokens": 48"#, r#""prefix_tokens": -3"#, 1);
        let (line, message) = bad_line(parse_agent_trace(&text, "t.jsonl").unwrap_err());
        assert_eq!(line, 2);
        assert!(message.contains("prefix_tokens"), "{message}");
        let text = TRACELAB.replacen("2026-08-25T00:00:03Z", "soon", 1);
        let (line, message) = bad_line(parse_agent_trace(&text, "t.jsonl").unwrap_err());
        assert_eq!(line, 3);
        assert!(message.contains("timing_events[0].timestamp"), "{message}");
    }

    /// One OTLP document: an agent with a nested sub-agent.
    fn otel_document() -> String {
        let base: u64 = 1_780_000_000_000_000_000;
        let span = |id: &str, parent: &str, from_ms: u64, to_ms: u64, attrs: Value| {
            serde_json::json!({
                "traceId": "t1", "spanId": id, "parentSpanId": parent, "name": id,
                "startTimeUnixNano": (base + from_ms * 1_000_000).to_string(),
                "endTimeUnixNano": (base + to_ms * 1_000_000).to_string(),
                "attributes": attrs,
            })
        };
        let kv = |pairs: &[(&str, Value)]| -> Value {
            Value::Array(
                pairs
                    .iter()
                    .map(|(k, v)| serde_json::json!({"key": k, "value": v}))
                    .collect(),
            )
        };
        let op = |name: &str| {
            (
                "gen_ai.operation.name",
                serde_json::json!({"stringValue": name}),
            )
        };
        let int = |n: u64| serde_json::json!({"intValue": n.to_string()});
        let spans = vec![
            span(
                "a",
                "",
                0,
                10_000,
                kv(&[
                    op("invoke_agent"),
                    (
                        "gen_ai.conversation.id",
                        serde_json::json!({"stringValue": "conv-1"}),
                    ),
                ]),
            ),
            span(
                "c1",
                "a",
                0,
                1000,
                kv(&[
                    op("chat"),
                    ("gen_ai.usage.input_tokens", int(100)),
                    ("gen_ai.usage.output_tokens", int(20)),
                    ("gen_ai.usage.cache_read.input_tokens", int(30)),
                    ("gen_ai.usage.reasoning.output_tokens", int(5)),
                ]),
            ),
            span("t1", "a", 1100, 1500, kv(&[op("execute_tool")])),
            span(
                "c2",
                "a",
                2000,
                3000,
                kv(&[
                    op("chat"),
                    ("gen_ai.usage.input_tokens", int(150)),
                    ("gen_ai.usage.output_tokens", int(10)),
                ]),
            ),
            span("s", "a", 3100, 6000, kv(&[op("invoke_agent")])),
            span(
                "c3",
                "s",
                3200,
                4000,
                kv(&[
                    op("chat"),
                    ("gen_ai.usage.input_tokens", int(50)),
                    ("gen_ai.usage.output_tokens", int(10)),
                ]),
            ),
            span(
                "c4",
                "s",
                4500,
                5000,
                kv(&[
                    op("chat"),
                    (
                        "gen_ai.usage.prompt_tokens",
                        serde_json::json!({"intValue": 80}),
                    ),
                    (
                        "gen_ai.usage.completion_tokens",
                        serde_json::json!({"intValue": 5}),
                    ),
                ]),
            ),
            span(
                "c5",
                "a",
                6200,
                7000,
                kv(&[
                    op("chat"),
                    ("gen_ai.usage.input_tokens", int(200)),
                    ("gen_ai.usage.output_tokens", int(10)),
                ]),
            ),
        ];
        serde_json::json!({"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {"name": "x"}, "spans": spans}]}]})
            .to_string()
    }

    #[test]
    fn agent_trace_otel_lanes_subagents_and_tools() {
        let text = otel_document();
        assert_eq!(detect(&text), Some(AgentTraceFormat::OtelGenAi));
        let trace = parse_agent_trace(&text, "o.json").unwrap();
        assert_eq!(trace.block_origin, BlockOrigin::AssumedGrowingContext);
        assert_eq!(trace.sessions.len(), 1);
        let s = &trace.sessions[0];
        assert_eq!(s.id, "conv-1");
        let c = &s.calls;
        let parents: Vec<_> = c.iter().map(|c| c.parent).collect();
        assert_eq!(parents, vec![None, Some(0), Some(1), Some(2), Some(1)]);
        use CallKind::{Main, Subagent};
        let kinds: Vec<_> = c.iter().map(|c| c.kind).collect();
        assert_eq!(kinds, vec![Main, Main, Subagent, Subagent, Main]);
        assert!((c[1].gap_ms - 1000.0).abs() < 1e-6);
        assert_eq!(c[1].tool_ms, Some(400.0));
        assert!((c[2].gap_ms - 200.0).abs() < 1e-6);
        assert_eq!(c[2].tool_ms, None);
        assert_eq!(c[0].cached_tokens, Some(30));
        assert_eq!(c[0].reasoning_tokens, Some(5));
        assert_eq!((c[3].input_tokens, c[3].output_tokens), (80, 5));
        assert_eq!(c[1].end_ms, Some(3000.0));
        // Growing context: call 1 re-sends call 0's prompt and answer.
        assert_eq!(c[1].hash_ids.len(), 9);
        assert_eq!(c[1].hash_ids[..6], c[0].hash_ids[..]);
        // The sub-agent starts a context of its own, then grows it.
        assert!(!c[0].hash_ids.contains(&c[2].hash_ids[0]));
        assert_eq!(c[3].hash_ids[..3], c[2].hash_ids[..]);
        assert_eq!(c[4].hash_ids[..9], c[1].hash_ids[..]);
    }

    #[test]
    fn agent_trace_otel_bad_input_names_the_span() {
        let text =
            otel_document().replacen("\"startTimeUnixNano\":\"", "\"startTimeUnixNano\":\"x", 1);
        let (line, message) = bad_line(parse_agent_trace(&text, "o.json").unwrap_err());
        assert_eq!(line, 1);
        assert!(message.contains("spans[0].startTimeUnixNano"), "{message}");
        let lines = format!("{}\n{{\"resourceSpans\": 4}}\n", otel_document());
        let (line, _) = bad_line(parse_agent_trace(&lines, "o.jsonl").unwrap_err());
        assert_eq!(line, 2);
    }

    #[test]
    fn agent_trace_reuse_potential_counts_leading_seen_blocks() {
        let call = |start_ms: f64, input_tokens: u32, hash_ids: Vec<u64>| TraceCall {
            start_ms,
            end_ms: None,
            parent: None,
            gap_ms: start_ms,
            tool_ms: None,
            kind: CallKind::Main,
            input_tokens,
            output_tokens: 1,
            reasoning_tokens: None,
            cached_tokens: None,
            hash_ids,
        };
        let trace = AgentTrace {
            format: AgentTraceFormat::Bailian,
            block_tokens: 16,
            block_origin: BlockOrigin::Recorded,
            sessions: vec![
                TraceSession {
                    id: "x".into(),
                    start_ms: 0.0,
                    calls: vec![call(0.0, 40, vec![1, 2]), call(10.0, 50, vec![1, 9, 2])],
                },
                TraceSession {
                    id: "y".into(),
                    start_ms: 5.0,
                    calls: vec![call(0.0, 20, vec![1])],
                },
            ],
            skipped: Vec::new(),
        };
        // In start order: [1,2] none, [1] at 5 ms: 16 of 20, [1,9,2]: 16.
        assert!((trace.reuse_potential() - 32.0 / 110.0).abs() < 1e-12);
    }

    #[test]
    fn agent_trace_harnesses_differ_in_reuse() {
        let a = parse_agent_trace(
            include_str!("../../experiments/data/harness-a.json"),
            "harness-a.json",
        )
        .unwrap();
        let b = parse_agent_trace(
            include_str!("../../experiments/data/harness-b.jsonl"),
            "harness-b.jsonl",
        )
        .unwrap();
        assert_eq!(a.format, AgentTraceFormat::CodingAgent);
        assert_eq!(b.format, AgentTraceFormat::TraceLab);
        assert_eq!((a.sessions.len(), b.sessions.len()), (16, 16));
        // The same tasks, the same calls and call graph.
        for (x, y) in a.sessions.iter().zip(&b.sessions) {
            assert_eq!(x.id, y.id);
            let (sa, sb) = (x.start_ms, y.start_ms - 1_772_362_800_000.0);
            assert!((sa - sb).abs() < 2.0, "{sa} {sb}");
            let graph = |s: &TraceSession| -> Vec<_> {
                s.calls
                    .iter()
                    .map(|c| (c.parent, c.output_tokens))
                    .collect()
            };
            assert_eq!(graph(x), graph(y), "{}", x.id);
        }
        let fan_outs = a
            .sessions
            .iter()
            .filter(|s| (0..s.calls.len() as u32).any(|i| s.children(i).count() > 1))
            .count();
        assert!(fan_outs >= 3, "{fan_outs}");
        let (ra, rb) = (a.reuse_potential(), b.reuse_potential());
        assert!(ra >= rb + 0.3, "harness-a {ra}, harness-b {rb}");
    }
}
