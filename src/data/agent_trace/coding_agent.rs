//! Coding-agent traces in the Weka / SemiAnalysis form: one trace per
//! conversation, as one JSON document, a JSON array of them, or one per
//! line.
//!
//! Fields read (per the published trace format specification): the trace's
//! `id`, `block_size` (or `blockSize`) and `requests[]`; each request's `t`
//! (seconds from the conversation's start), `type` (`"s"` a streaming
//! request, `"n"` a non-streaming one, `"subagent"` a nested sub-agent
//! conversation with its own `t` (when spawned) and `requests[]`), `in`,
//! `out`, `hash_ids`, and `api_time` (seconds, the response's total time)
//! where present. `hash_id_scope: "local"` (ids numbered per conversation)
//! keeps each trace's ids apart from the others'.
//!
//! Not in the published schema: a trace's own top-level `t` (seconds), read
//! as when the conversation started on a clock shared by the file's traces;
//! without it every conversation starts at 0. A sub-agent's inner `t` is
//! read as seconds from the parent conversation's start unless the first
//! is earlier than the spawn (examples of both exist), then as seconds
//! from the spawn.
//!
//! The format records no call graph; parents are inferred from order and
//! type:
//! - main-loop calls (`s`, `n`) chain: each waits on the previous main call;
//! - a sub-agent's calls chain among themselves, and its first waits on the
//!   last main call started at or before the spawn; `type: "subagent"`
//!   entries that are calls themselves (`in`/`out`, no `requests`) form one
//!   such lane;
//! - calls of one lane sharing a start time are a fan-out: siblings with
//!   the parent of the first of them.
//!
//! The gap is from the parent's end (its start plus `api_time`) where
//! recorded, else from its start (an upper bound including its answer).

use std::collections::HashMap;

use serde_json::Value;

use super::{AgentTrace, AgentTraceFormat, BlockOrigin, CallKind, TraceCall, TraceSession};

/// A call lane: the main loop, a nested sub-agent, or the flat sub-agent calls.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Lane {
    Main,
    Nested(usize),
    Flat,
}

struct Entry {
    t_s: f64,
    /// Where a sub-agent lane hangs off the main loop (its spawn).
    spawn_s: f64,
    lane: Lane,
    input: u32,
    output: u32,
    api_time_s: Option<f64>,
    hash_ids: Vec<u64>,
}

pub(super) fn read(text: &str) -> Result<AgentTrace, (usize, String)> {
    let docs: Vec<(usize, String, Value)> = super::json_documents(text)?
        .into_iter()
        .map(|(line, item, v)| {
            (
                line,
                item.map_or_else(String::new, |i| format!("[{i}].")),
                v,
            )
        })
        .collect();
    let mut block_tokens: Option<u32> = None;
    let mut sessions = Vec::new();
    for (n, (line, path, doc)) in docs.iter().enumerate() {
        let err = |m: String| (*line, m);
        let size = doc
            .get("block_size")
            .or_else(|| doc.get("blockSize"))
            .and_then(Value::as_u64)
            .filter(|b| (1..=u64::from(u32::MAX)).contains(b))
            .ok_or_else(|| err(format!("`{path}block_size` must be a whole number ≥ 1")))?
            as u32;
        match block_tokens {
            None => block_tokens = Some(size),
            Some(b) if b != size => {
                return Err(err(format!(
                    "`{path}block_size` is {size}, the first trace's {b}: one block size per file"
                )));
            }
            Some(_) => {}
        }
        let local = doc.get("hash_id_scope").and_then(Value::as_str) == Some("local");
        // Keeps per-conversation ids of different traces apart.
        let offset = if local { (n as u64 + 1) << 40 } else { 0 };
        let id = match doc.get("id") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(x)) => x.to_string(),
            _ => format!("trace {}", n + 1),
        };
        let t0_s = match doc.get("t") {
            None | Some(Value::Null) => 0.0,
            Some(v) => seconds(v, &format!("{path}t")).map_err(err)?,
        };
        let requests = doc
            .get("requests")
            .and_then(Value::as_array)
            .ok_or_else(|| err(format!("`{path}requests` must be an array")))?;
        let mut entries = Vec::new();
        let mut groups = 0usize;
        for (i, r) in requests.iter().enumerate() {
            let at = format!("{path}requests[{i}]");
            let kind = r.get("type").and_then(Value::as_str).unwrap_or("s");
            if kind == "subagent" {
                if let Some(inner) = r.get("requests") {
                    let inner = inner
                        .as_array()
                        .ok_or_else(|| err(format!("`{at}.requests` must be an array")))?;
                    let spawn_s = seconds(r.get("t").unwrap_or(&Value::Null), &format!("{at}.t"))
                        .map_err(err)?;
                    let mut calls = Vec::new();
                    for (j, q) in inner.iter().enumerate() {
                        let mut e =
                            entry(q, &format!("{at}.requests[{j}]"), offset).map_err(err)?;
                        e.lane = Lane::Nested(groups);
                        e.spawn_s = spawn_s;
                        calls.push(e);
                    }
                    let relative = calls.first().is_some_and(|e| e.t_s + 1e-9 < spawn_s);
                    for mut e in calls {
                        if relative {
                            e.t_s += spawn_s;
                        }
                        entries.push(e);
                    }
                    groups += 1;
                    continue;
                }
                let mut e = entry(r, &at, offset).map_err(err)?;
                e.lane = Lane::Flat;
                e.spawn_s = e.t_s;
                entries.push(e);
            } else {
                entries.push(entry(r, &at, offset).map_err(err)?);
            }
        }
        if entries.is_empty() {
            continue;
        }
        entries.sort_by(|a, b| a.t_s.total_cmp(&b.t_s));
        let first_s = entries[0].t_s;
        let mut calls: Vec<TraceCall> = Vec::with_capacity(entries.len());
        // Each lane's last call, and the main calls' starts (in order), so
        // that a long trace is read in O(n log n).
        let mut last: HashMap<Lane, usize> = HashMap::new();
        let mut main_calls: Vec<usize> = Vec::new();
        for e in &entries {
            let start_ms = (e.t_s - first_s) * 1000.0;
            let parent = match last.get(&e.lane).copied() {
                Some(k) if (calls[k].start_ms - start_ms).abs() < 1e-6 => calls[k].parent,
                Some(k) => Some(k as u32),
                None if e.lane == Lane::Main => None,
                None => {
                    let spawn_ms = (e.spawn_s - first_s) * 1000.0;
                    let before =
                        main_calls.partition_point(|&k| calls[k].start_ms <= spawn_ms + 1e-6);
                    before.checked_sub(1).map(|i| main_calls[i] as u32)
                }
            };
            let gap_ms = match parent {
                Some(p) => {
                    let p = &calls[p as usize];
                    (start_ms - p.end_ms.unwrap_or(p.start_ms)).max(0.0)
                }
                None => start_ms,
            };
            calls.push(TraceCall {
                start_ms,
                end_ms: e.api_time_s.map(|a| start_ms + a * 1000.0),
                parent,
                gap_ms,
                tool_ms: None,
                kind: if e.lane == Lane::Main {
                    CallKind::Main
                } else {
                    CallKind::Subagent
                },
                input_tokens: e.input,
                output_tokens: e.output,
                reasoning_tokens: None,
                cached_tokens: None,
                hash_ids: e.hash_ids.clone(),
            });
            last.insert(e.lane, calls.len() - 1);
            if e.lane == Lane::Main {
                main_calls.push(calls.len() - 1);
            }
        }
        sessions.push(TraceSession {
            id,
            start_ms: (t0_s + first_s) * 1000.0,
            calls,
        });
    }
    sessions.sort_by(|a, b| a.start_ms.total_cmp(&b.start_ms));
    Ok(AgentTrace {
        format: AgentTraceFormat::CodingAgent,
        block_tokens: block_tokens.unwrap_or(64),
        block_origin: BlockOrigin::Recorded,
        sessions,
        skipped: Vec::new(),
    })
}

fn seconds(v: &Value, path: &str) -> Result<f64, String> {
    v.as_f64()
        .filter(|t| t.is_finite() && *t >= 0.0)
        .ok_or(format!("`{path}` must be a non-negative number of seconds"))
}

fn entry(r: &Value, at: &str, offset: u64) -> Result<Entry, String> {
    let t_s = seconds(r.get("t").unwrap_or(&Value::Null), &format!("{at}.t"))?;
    let input = super::tokens_at(r.get("in"), &format!("{at}.in"))?
        .filter(|n| *n >= 1)
        .ok_or(format!("`{at}.in` must be at least 1 token"))?;
    let output = super::tokens_at(r.get("out"), &format!("{at}.out"))?
        .unwrap_or(1)
        .max(1);
    let api_time_s = match r.get("api_time") {
        None | Some(Value::Null) => None,
        Some(v) => Some(seconds(v, &format!("{at}.api_time"))?),
    };
    let hash_ids = match r.get("hash_ids") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(ids)) => ids
            .iter()
            .enumerate()
            .map(|(k, id)| {
                id.as_u64()
                    .map(|x| x.wrapping_add(offset))
                    .ok_or(format!("`{at}.hash_ids[{k}]` is not a whole number: {id}"))
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(format!("`{at}.hash_ids` must be an array, got {other}")),
    };
    Ok(Entry {
        t_s,
        spawn_s: t_s,
        lane: Lane::Main,
        input,
        output,
        api_time_s,
        hash_ids,
    })
}
