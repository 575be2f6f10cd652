//! OpenTelemetry GenAI spans, as OTLP JSON from a file exporter: one
//! `{"resourceSpans":[{"scopeSpans":[{"spans":[...]}]}]}` document, or one
//! per line.
//!
//! Span fields read: `traceId`, `spanId`, `parentSpanId`,
//! `startTimeUnixNano`, `endTimeUnixNano` (strings or numbers), and
//! `attributes` (`[{key, value: {stringValue | intValue | doubleValue}}]`,
//! `intValue` a string or a number). Attributes, per the GenAI semantic
//! conventions: `gen_ai.operation.name` (`chat`, also `text_completion` and
//! `generate_content`, are LLM calls; `invoke_agent` an agent; `execute_tool`
//! a tool), `gen_ai.conversation.id`, `gen_ai.usage.input_tokens` /
//! `output_tokens` (or the older `prompt_tokens` / `completion_tokens`),
//! `gen_ai.usage.cache_read.input_tokens` (→ `cached_tokens`), and
//! `gen_ai.usage.reasoning.output_tokens` (or `gen_ai.usage.reasoning_tokens`,
//! as some instrumentations write it). A call span without input tokens is
//! left out (counted in `skipped`).
//!
//! A session is a conversation id (the span's own or its nearest
//! ancestor's), else the trace id. A call's lane is its nearest
//! `invoke_agent` ancestor. Its parent is the latest earlier call of the
//! same lane that ended before it started; a call of a nested agent (one
//! whose `invoke_agent` has an `invoke_agent` ancestor) is
//! [`CallKind::Subagent`], and with no such call in its lane its parent is
//! the parent lane's latest call ended before it started. `tool_ms` adds
//! up the `execute_tool` spans of the call's or its parent's lane that run
//! between the parent's end and the call's start.
//!
//! No prefix is recorded: blocks are [`BlockOrigin::AssumedGrowingContext`],
//! 16 tokens. Each call re-sends its same-lane parent's prompt and answer,
//! as far as its own prompt is long; a lane's first call starts a context of
//! its own (a sub-agent has its own system prompt and task). Ids are unique
//! per (session, lane, position), so equal ids mean equal prefixes.

use std::collections::HashMap;

use serde_json::Value;

use super::{
    AgentTrace, AgentTraceFormat, BlockMinter, BlockOrigin, CallKind, TraceCall, TraceSession,
};

const BLOCK_TOKENS: u32 = 16;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Call,
    Agent,
    Tool,
    Other,
}

struct Span {
    trace: String,
    id: String,
    parent: Option<String>,
    start_ms: f64,
    end_ms: f64,
    op: Op,
    conversation: Option<String>,
    input: Option<u32>,
    output: Option<u32>,
    cached: Option<u32>,
    reasoning: Option<u32>,
}

pub(super) fn read(text: &str) -> Result<AgentTrace, (usize, String)> {
    let docs: Vec<(usize, Value)> = super::json_documents(text)?
        .into_iter()
        .map(|(line, _, v)| (line, v))
        .collect();
    let mut spans = Vec::new();
    for (line, doc) in &docs {
        let err = |m: String| (*line, m);
        let resources = doc
            .get("resourceSpans")
            .and_then(Value::as_array)
            .ok_or_else(|| err("`resourceSpans` must be an array".to_string()))?;
        for (i, r) in resources.iter().enumerate() {
            let scopes = match r.get("scopeSpans") {
                None | Some(Value::Null) => continue,
                Some(s) => s.as_array().ok_or_else(|| {
                    err(format!("`resourceSpans[{i}].scopeSpans` must be an array"))
                })?,
            };
            for (j, s) in scopes.iter().enumerate() {
                let list = match s.get("spans") {
                    None | Some(Value::Null) => continue,
                    Some(l) => l.as_array().ok_or_else(|| {
                        err(format!(
                            "`resourceSpans[{i}].scopeSpans[{j}].spans` must be an array"
                        ))
                    })?,
                };
                for (k, span) in list.iter().enumerate() {
                    let at = format!("resourceSpans[{i}].scopeSpans[{j}].spans[{k}]");
                    spans.push(span_of(span, &at).map_err(err)?);
                }
            }
        }
    }
    let index: HashMap<(&str, &str), usize> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| ((s.trace.as_str(), s.id.as_str()), i))
        .collect();
    let parent_of = |i: usize| -> Option<usize> {
        let s = &spans[i];
        s.parent
            .as_deref()
            .and_then(|p| index.get(&(s.trace.as_str(), p)).copied())
    };
    // Nearest invoke_agent strictly above span i.
    let agent_above = |i: usize| -> Option<usize> {
        let mut at = parent_of(i);
        let mut steps = 0;
        while let Some(a) = at {
            if spans[a].op == Op::Agent {
                return Some(a);
            }
            at = parent_of(a);
            steps += 1;
            if steps > spans.len() {
                return None;
            }
        }
        None
    };
    let session_of = |i: usize| -> String {
        let mut at = Some(i);
        let mut steps = 0;
        while let Some(a) = at {
            if let Some(c) = &spans[a].conversation {
                return c.clone();
            }
            at = parent_of(a);
            steps += 1;
            if steps > spans.len() {
                break;
            }
        }
        spans[i].trace.clone()
    };
    // Per session: its calls and tool spans, with their lanes.
    let mut order: Vec<String> = Vec::new();
    let mut calls_of: HashMap<String, Vec<usize>> = HashMap::new();
    let mut tools_of: HashMap<String, Vec<usize>> = HashMap::new();
    let mut no_tokens = 0usize;
    for (i, s) in spans.iter().enumerate() {
        let is_call = match s.op {
            Op::Call if s.input.is_some_and(|n| n >= 1) => true,
            Op::Call => {
                no_tokens += 1;
                continue;
            }
            Op::Tool => false,
            _ => continue,
        };
        let key = session_of(i);
        if !calls_of.contains_key(&key) && !tools_of.contains_key(&key) {
            order.push(key.clone());
        }
        let into = if is_call {
            &mut calls_of
        } else {
            &mut tools_of
        };
        into.entry(key).or_default().push(i);
    }
    let mut minter = BlockMinter::new(BLOCK_TOKENS);
    let mut sessions = Vec::new();
    for key in order {
        let Some(mut members) = calls_of.remove(&key) else {
            continue;
        };
        members.sort_by(|&a, &b| spans[a].start_ms.total_cmp(&spans[b].start_ms));
        let tools = tools_of.remove(&key).unwrap_or_default();
        let lanes: Vec<Option<usize>> = members.iter().map(|&m| agent_above(m)).collect();
        let tool_lanes: Vec<Option<usize>> = tools.iter().map(|&t| agent_above(t)).collect();
        let session_start = spans[members[0]].start_ms;
        let mut calls: Vec<TraceCall> = Vec::with_capacity(members.len());
        let mut contexts: Vec<Vec<u64>> = Vec::with_capacity(members.len());
        for (c, &m) in members.iter().enumerate() {
            let s = &spans[m];
            let latest_in = |lane: Option<usize>| -> Option<usize> {
                (0..c)
                    .filter(|&k| lanes[k] == lane && spans[members[k]].end_ms <= s.start_ms)
                    .max_by(|&a, &b| {
                        spans[members[a]]
                            .end_ms
                            .total_cmp(&spans[members[b]].end_ms)
                    })
            };
            let nested = lanes[c].is_some_and(|a| agent_above(a).is_some());
            let mut parent = latest_in(lanes[c]);
            let mut lane = lanes[c];
            while parent.is_none() {
                let Some(agent) = lane else { break };
                lane = agent_above(agent);
                parent = latest_in(lane);
            }
            let start_ms = s.start_ms - session_start;
            let (gap_ms, tool_ms) = match parent {
                None => (start_ms, None),
                Some(p) => {
                    let p_end = spans[members[p]].end_ms;
                    let ran: Vec<f64> = tools
                        .iter()
                        .zip(&tool_lanes)
                        .filter(|(t, l)| {
                            (**l == lanes[c] || **l == lanes[p])
                                && spans[**t].start_ms >= p_end
                                && spans[**t].end_ms <= s.start_ms
                        })
                        .map(|(t, _)| spans[*t].end_ms - spans[*t].start_ms)
                        .collect();
                    (
                        (s.start_ms - p_end).max(0.0),
                        (!ran.is_empty()).then(|| ran.iter().sum()),
                    )
                }
            };
            let input = s.input.unwrap_or(1);
            let output = s.output.unwrap_or(1).max(1);
            let same_lane = parent.filter(|&p| lanes[p] == lanes[c]);
            let (context, shared): (&[u64], u32) = match same_lane {
                Some(p) => (
                    &contexts[p],
                    calls[p].input_tokens.saturating_add(calls[p].output_tokens),
                ),
                None => (&[], 0),
            };
            let (hash_ids, after) = minter.call(context, shared, input, output);
            calls.push(TraceCall {
                start_ms,
                end_ms: Some(s.end_ms - session_start),
                parent: parent.map(|p| p as u32),
                gap_ms,
                tool_ms,
                kind: if nested {
                    CallKind::Subagent
                } else {
                    CallKind::Main
                },
                input_tokens: input,
                output_tokens: output,
                reasoning_tokens: s.reasoning,
                cached_tokens: s.cached,
                hash_ids,
            });
            contexts.push(after);
        }
        sessions.push(TraceSession {
            id: key,
            start_ms: session_start,
            calls,
        });
    }
    sessions.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
    let mut skipped = Vec::new();
    if no_tokens > 0 {
        skipped.push((
            no_tokens,
            "LLM call span without gen_ai.usage.input_tokens".to_string(),
        ));
    }
    Ok(AgentTrace {
        format: AgentTraceFormat::OtelGenAi,
        block_tokens: BLOCK_TOKENS,
        block_origin: BlockOrigin::AssumedGrowingContext,
        sessions,
        skipped,
    })
}

fn span_of(span: &Value, at: &str) -> Result<Span, String> {
    let text = |name: &str| -> Option<String> {
        span.get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    let nanos = |name: &str| -> Result<f64, String> {
        let v = span.get(name);
        v.and_then(|v| {
            v.as_str()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .or_else(|| v.as_u64())
        })
        .map(|n| n as f64 / 1e6)
        .ok_or(format!(
            "`{at}.{name}` must be a whole number of nanoseconds (a string or a number)"
        ))
    };
    let trace = text("traceId").ok_or(format!("`{at}.traceId` is missing"))?;
    let id = text("spanId").ok_or(format!("`{at}.spanId` is missing"))?;
    let start_ms = nanos("startTimeUnixNano")?;
    let end_ms = nanos("endTimeUnixNano")?;
    if end_ms < start_ms {
        return Err(format!("`{at}` ends before it starts"));
    }
    let mut attrs: HashMap<&str, &Value> = HashMap::new();
    match span.get("attributes") {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for (n, a) in list.iter().enumerate() {
                let key = a
                    .get("key")
                    .and_then(Value::as_str)
                    .ok_or(format!("`{at}.attributes[{n}].key` must be a string"))?;
                if let Some(v) = a.get("value") {
                    attrs.insert(key, v);
                }
            }
        }
        Some(other) => return Err(format!("`{at}.attributes` must be an array, got {other}")),
    }
    let string = |key: &str| -> Option<String> {
        let v = attrs.get(key)?;
        v.get("stringValue")
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| {
                v.get("intValue").map(|i| match i {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
            })
    };
    let count = |keys: &[&str]| -> Result<Option<u32>, String> {
        for key in keys {
            let Some(v) = attrs.get(key) else { continue };
            let raw = v
                .get("intValue")
                .or_else(|| v.get("doubleValue"))
                .or_else(|| v.get("stringValue"));
            return super::tokens_at(raw, &format!("{at} attribute {key}")).and_then(|n| {
                n.map(Some)
                    .ok_or(format!("`{at}` attribute {key} has no intValue"))
            });
        }
        Ok(None)
    };
    let op = match string("gen_ai.operation.name").as_deref() {
        Some("chat" | "text_completion" | "generate_content") => Op::Call,
        Some("invoke_agent") => Op::Agent,
        Some("execute_tool") => Op::Tool,
        _ => Op::Other,
    };
    Ok(Span {
        trace,
        id,
        parent: text("parentSpanId"),
        start_ms,
        end_ms,
        op,
        conversation: string("gen_ai.conversation.id"),
        input: count(&["gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens"])?,
        output: count(&[
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.completion_tokens",
        ])?,
        cached: count(&[
            "gen_ai.usage.cache_read.input_tokens",
            "gen_ai.usage.cache_read_input_tokens",
        ])?,
        reasoning: count(&[
            "gen_ai.usage.reasoning.output_tokens",
            "gen_ai.usage.reasoning_tokens",
        ])?,
    })
}
