//! TraceLab rounds: one JSON object per LLM round of an agent session.
//!
//! Fields read: `session_id`, `round_index`, `prefix_tokens` and
//! `newly_append_tokens` (the prompt is their sum; with only
//! `input_tokens_total` and `prefix_tokens`, the appended part is the
//! difference), `output_tokens`, `reasoning_output_tokens`, `tools[]`'s
//! `tool_wall_latency_ms`, and `timing_events[]`'s `timestamp` (RFC 3339,
//! or seconds since the epoch): a round starts at its earliest event
//! (`user_message` or `tool_result`) and ends at its latest.
//!
//! A session whose rounds do not all carry timestamps is timed from the
//! tools alone: a round starts when the previous rounds' tool wall
//! latencies add up to (the model's own time is not known and counts 0),
//! and the session starts at 0.
//!
//! Rounds are linear: a round's parent is the previous round, and the gap
//! from its end is the tool time (`tool_ms`, the previous round's tools'
//! wall latencies added up). Rounds with timestamps sharing the previous
//! round's start are a fan-out: siblings with its parent.
//!
//! Blocks ([`BlockOrigin::FromPrefixTokens`], 16 tokens): the session keeps
//! a running context, the parent's prompt and answer; a round re-sends the
//! first `prefix_tokens` of it (whole blocks shared), then new blocks of
//! its own. `prefix_tokens` is not read as the recorded server's cache hits
//! (`cached_tokens` stays empty): what it counts depends on the recording
//! provider.

use std::collections::HashMap;

use serde_json::Value;

use super::{
    AgentTrace, AgentTraceFormat, BlockMinter, BlockOrigin, CallKind, TraceCall, TraceSession,
    tokens_at,
};

const BLOCK_TOKENS: u32 = 16;

struct Round {
    line: usize,
    index: i64,
    prefix: u32,
    input: u32,
    output: u32,
    reasoning: Option<u32>,
    /// Sum of the tools' wall latencies, ms; `None` without `tools`.
    tools_ms: Option<f64>,
    /// (start, end) in ms since the epoch, from `timing_events`.
    times: Option<(f64, f64)>,
}

pub(super) fn read(text: &str) -> Result<AgentTrace, (usize, String)> {
    let mut order: Vec<String> = Vec::new();
    let mut by_session: HashMap<String, Vec<Round>> = HashMap::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = number + 1;
        let err = |m: String| (at, m);
        let v: Value =
            serde_json::from_str(line).map_err(|e| err(format!("not a JSON object: {e}")))?;
        let session = match v.get("session_id") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => return Err(err("`session_id` must be a string".to_string())),
        };
        let index = v
            .get("round_index")
            .and_then(Value::as_i64)
            .ok_or_else(|| err("`round_index` must be a whole number".to_string()))?;
        let prefix = tokens_at(v.get("prefix_tokens"), "prefix_tokens")
            .map_err(err)?
            .unwrap_or(0);
        let total = tokens_at(v.get("input_tokens_total"), "input_tokens_total").map_err(err)?;
        let append =
            match tokens_at(v.get("newly_append_tokens"), "newly_append_tokens").map_err(err)? {
                Some(a) => a,
                None => total
                    .and_then(|t| t.checked_sub(prefix))
                    .ok_or_else(|| err("`newly_append_tokens` is missing".to_string()))?,
            };
        let input = prefix.saturating_add(append);
        if input == 0 {
            return Err(err(
                "`prefix_tokens` + `newly_append_tokens` must be at least 1".to_string(),
            ));
        }
        let output = tokens_at(v.get("output_tokens"), "output_tokens")
            .map_err(err)?
            .unwrap_or(1)
            .max(1);
        let reasoning =
            tokens_at(v.get("reasoning_output_tokens"), "reasoning_output_tokens").map_err(err)?;
        let tools_ms = match v.get("tools") {
            None | Some(Value::Null) => None,
            Some(Value::Array(tools)) => {
                let mut sum = 0.0;
                for (k, tool) in tools.iter().enumerate() {
                    match tool.get("tool_wall_latency_ms") {
                        None | Some(Value::Null) => {}
                        Some(ms) => {
                            sum += ms
                                .as_f64()
                                .filter(|m| m.is_finite() && *m >= 0.0)
                                .ok_or_else(|| {
                                    err(format!(
                                        "`tools[{k}].tool_wall_latency_ms` must be a \
                                         non-negative number of ms, got {ms}"
                                    ))
                                })?
                        }
                    }
                }
                Some(sum)
            }
            Some(other) => return Err(err(format!("`tools` must be an array, got {other}"))),
        };
        let times = match v.get("timing_events") {
            None | Some(Value::Null) => None,
            Some(Value::Array(events)) => {
                let mut stamps = Vec::new();
                for (k, e) in events.iter().enumerate() {
                    let ms = match e.get("timestamp") {
                        Some(Value::String(s)) => crate::time::rfc3339_seconds(s),
                        Some(Value::Number(n)) => n.as_f64().filter(|t| t.is_finite()),
                        _ => None,
                    }
                    .ok_or_else(|| {
                        err(format!(
                            "`timing_events[{k}].timestamp` must be an RFC 3339 time or \
                             seconds since the epoch"
                        ))
                    })?;
                    stamps.push(ms * 1000.0);
                }
                let lo = stamps.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = stamps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                (!stamps.is_empty()).then_some((lo, hi))
            }
            Some(other) => {
                return Err(err(format!(
                    "`timing_events` must be an array, got {other}"
                )));
            }
        };
        if !by_session.contains_key(&session) {
            order.push(session.clone());
        }
        by_session.entry(session).or_default().push(Round {
            line: at,
            index,
            prefix,
            input,
            output,
            reasoning,
            tools_ms,
            times,
        });
    }
    let mut minter = BlockMinter::new(BLOCK_TOKENS);
    let mut sessions = Vec::new();
    for id in order {
        let mut rounds = by_session.remove(&id).unwrap_or_default();
        rounds.sort_by_key(|r| r.index);
        if let Some(w) = rounds.windows(2).find(|w| w[0].index == w[1].index) {
            return Err((
                w[1].line,
                format!("round_index {} repeats in session {id}", w[1].index),
            ));
        }
        let timed = rounds.iter().all(|r| r.times.is_some());
        let session_start = if timed {
            rounds
                .iter()
                .filter_map(|r| r.times.map(|t| t.0))
                .fold(f64::INFINITY, f64::min)
        } else {
            0.0
        };
        let mut calls: Vec<TraceCall> = Vec::with_capacity(rounds.len());
        let mut contexts: Vec<Vec<u64>> = Vec::with_capacity(rounds.len());
        let mut elapsed = 0.0;
        for (i, r) in rounds.iter().enumerate() {
            let (start_ms, end_ms) = match r.times {
                Some((a, b)) if timed => (a - session_start, (b > a).then_some(b - session_start)),
                _ => {
                    if i > 0 {
                        elapsed += rounds[i - 1].tools_ms.unwrap_or(0.0);
                    }
                    (elapsed, None)
                }
            };
            let parent = match calls.last() {
                None => None,
                Some(prev) if timed && (prev.start_ms - start_ms).abs() < 1e-6 => prev.parent,
                Some(_) => Some((i - 1) as u32),
            };
            let (gap_ms, tool_ms) = match parent {
                None => (start_ms, None),
                Some(p) => {
                    let p = p as usize;
                    let tools = rounds[p].tools_ms;
                    let gap = if timed {
                        (start_ms - calls[p].end_ms.unwrap_or(calls[p].start_ms)).max(0.0)
                    } else {
                        tools.unwrap_or(0.0)
                    };
                    (gap, tools)
                }
            };
            let context: &[u64] = parent.map_or(&[], |p| &contexts[p as usize]);
            let (hash_ids, after) = minter.call(context, r.prefix, r.input, r.output);
            calls.push(TraceCall {
                start_ms,
                end_ms,
                parent,
                gap_ms,
                tool_ms,
                kind: CallKind::Main,
                input_tokens: r.input,
                output_tokens: r.output,
                reasoning_tokens: r.reasoning,
                cached_tokens: None,
                hash_ids,
            });
            contexts.push(after);
        }
        sessions.push(TraceSession {
            id,
            start_ms: session_start,
            calls,
        });
    }
    sessions.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
    Ok(AgentTrace {
        format: AgentTraceFormat::TraceLab,
        block_tokens: BLOCK_TOKENS,
        block_origin: BlockOrigin::FromPrefixTokens,
        sessions,
        skipped: Vec::new(),
    })
}
