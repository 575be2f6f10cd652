//! Replaying recorded agent sessions (pure): each task is one session of an
//! [`AgentTrace`], its calls kept as a graph ([`TaskSpec::Graph`]) so that a
//! call leaves when its parent's answer arrives plus the recorded gap.
//!
//! Prompts are the calls' `hash_ids` rendered as blocks of the trace's
//! `block_tokens`, exactly as a Mooncake trace replay renders them
//! ([`super::trace`]): equal ids are byte-identical tokens within a run and
//! content nonce, different ones across runs; the rest of a call's prompt is
//! unique to the call.

use std::time::Duration;

use crate::data::agent_trace::{AgentTrace, TraceSession};

use super::trace::{block_segments, block_stream};
use super::{CallSpec, GraphCall, Message, Role, Task, TaskSpec, mix};

/// Domain tag of a session call's own (unshared) tail.
const SESSION_TAIL: u64 = 0x0053_4553_5441_494C; // "SESTAIL"

/// Task `index` = session `index` (modulo the session count, for runs that
/// outlast the trace). `tool_time_max` caps each non-root gap (a root keeps
/// its start offset in the session).
///
/// Each pass through the trace renders its blocks afresh: sessions of one
/// pass share what the trace says they share, but pass 2 does not find
/// pass 1's prompts in a prefix cache. Otherwise a replay that outlasts the
/// trace would realize reuse no recorded harness offered (a harness whose
/// every prompt is new would hit on its own repeats).
pub fn session_task(
    trace: &AgentTrace,
    index: u64,
    seed: u64,
    content_nonce: u64,
    tool_time_max: Option<Duration>,
) -> Task {
    let sessions = trace.sessions.len() as u64;
    let session = &trace.sessions[(index % sessions) as usize];
    let pass = index / sessions;
    Task {
        index,
        spec: graph_of(
            session,
            trace.block_tokens,
            index,
            if pass == 0 { seed } else { mix(seed, pass) },
            content_nonce,
            tool_time_max,
        ),
        class: None,
    }
}

/// A session's calls as a [`TaskSpec::Graph`].
pub fn graph_of(
    session: &TraceSession,
    block_tokens: u32,
    index: u64,
    seed: u64,
    content_nonce: u64,
    tool_time_max: Option<Duration>,
) -> TaskSpec {
    let blocks = block_stream(seed, content_nonce);
    let tails = mix(mix(mix(mix(seed, content_nonce), SESSION_TAIL), index), 0);
    let calls = session
        .calls
        .iter()
        .enumerate()
        .map(|(k, c)| {
            let segments = block_segments(
                &c.hash_ids,
                c.input_tokens,
                block_tokens,
                blocks,
                mix(tails, k as u64),
            );
            let recorded = Duration::from_secs_f64(c.gap_ms.max(0.0) / 1e3);
            let gap = match (c.parent, tool_time_max) {
                (Some(_), Some(max)) => recorded.min(max),
                _ => recorded,
            };
            GraphCall {
                call: CallSpec {
                    messages: vec![Message {
                        role: Role::User,
                        segments,
                    }],
                    input_tokens: c.input_tokens,
                    output_tokens: c.output_tokens.max(1),
                    tools: None,
                    answer_in_words: false,
                },
                parent: c.parent,
                gap,
            }
        })
        .collect();
    TaskSpec::Graph { calls }
}

/// A graph's critical path: the most calls along one chain of parents,
/// and the gaps along the chain that waits longest.
pub fn critical_path(calls: &[GraphCall]) -> (usize, Duration) {
    let mut depth = vec![0usize; calls.len()];
    let mut pause = vec![Duration::ZERO; calls.len()];
    for (k, c) in calls.iter().enumerate() {
        let (d, p) = c
            .parent
            .and_then(|p| depth.get(p as usize).map(|d| (*d, pause[p as usize])))
            .unwrap_or((0, Duration::ZERO));
        depth[k] = d + 1;
        pause[k] = p + c.gap;
    }
    let deepest = depth.iter().copied().max().unwrap_or(0);
    let longest = pause.iter().copied().max().unwrap_or(Duration::ZERO);
    (deepest, longest)
}

/// Sessions started per second over the trace's span (first to last
/// session start); `None` for a single session or a zero span.
pub fn session_rate_per_s(trace: &AgentTrace) -> Option<f64> {
    trace.session_rate_per_s()
}

/// `arrival recorded`: session `i`'s start at `speedup` × the recorded
/// pace, for every task index `i` of a run. A run that outlasts the trace
/// starts it over one mean gap after its last session, so task `i` is
/// always session `i mod n` at its recorded place in the pattern. `None`
/// without a rate (one session, or all starting at once).
pub fn recorded_arrivals(
    trace: &AgentTrace,
    speedup: f64,
) -> Option<impl Iterator<Item = Duration> + Send + 'static> {
    let rate = session_rate_per_s(trace)?;
    let first = trace.sessions.first()?.start_ms;
    let offsets_s: Vec<f64> = trace
        .sessions
        .iter()
        .map(|s| (s.start_ms - first) / 1e3)
        .collect();
    // One pass lasts its span plus the mean gap, the gap before the next
    // pass's first session.
    let period_s = offsets_s.last().copied().unwrap_or(0.0) + 1.0 / rate;
    let speedup = speedup.max(1e-9);
    Some((0u64..).map(move |i| {
        let n = offsets_s.len() as u64;
        let at_s = (i / n) as f64 * period_s + offsets_s[(i % n) as usize];
        Duration::from_secs_f64((at_s / speedup).max(0.0))
    }))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::data::agent_trace::{
        AgentTraceFormat, BlockOrigin, CallKind, TraceCall, parse_agent_trace,
    };
    use crate::workload::prompt::render_text;

    pub(crate) fn call(
        start_ms: f64,
        parent: Option<u32>,
        gap_ms: f64,
        input: u32,
        hash_ids: Vec<u64>,
    ) -> TraceCall {
        TraceCall {
            start_ms,
            end_ms: None,
            parent,
            gap_ms,
            tool_ms: None,
            kind: CallKind::Main,
            input_tokens: input,
            output_tokens: 4,
            reasoning_tokens: None,
            cached_tokens: None,
            hash_ids,
        }
    }

    /// root → fan-out of 3 → join → a child.
    pub(crate) fn fan_out_trace() -> AgentTrace {
        AgentTrace {
            format: AgentTraceFormat::Bailian,
            block_tokens: 16,
            block_origin: BlockOrigin::Recorded,
            sessions: vec![TraceSession {
                id: "s".into(),
                start_ms: 0.0,
                calls: vec![
                    call(0.0, None, 0.0, 40, vec![1, 2]),
                    call(100.0, Some(0), 50.0, 40, vec![1, 2, 3]),
                    call(100.0, Some(0), 50.0, 40, vec![1, 2, 4]),
                    call(100.0, Some(0), 50.0, 40, vec![1, 2, 5]),
                    call(300.0, Some(3), 80_000.0, 50, vec![1, 2, 3, 6]),
                    call(400.0, Some(4), 20.0, 30, vec![]),
                ],
            }],
            skipped: vec![],
        }
    }

    fn graph(spec: &TaskSpec) -> &[GraphCall] {
        match spec {
            TaskSpec::Graph { calls } => calls,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn graph_keeps_parents_and_caps_gaps() {
        let trace = fan_out_trace();
        let task = session_task(&trace, 0, 7, 0, Some(Duration::from_secs(30)));
        let calls = graph(&task.spec);
        assert_eq!(calls.len(), 6);
        assert_eq!(task.spec.calls(), 6);
        let parents: Vec<_> = calls.iter().map(|c| c.parent).collect();
        assert_eq!(
            parents,
            vec![None, Some(0), Some(0), Some(0), Some(3), Some(4)]
        );
        assert_eq!(calls[1].gap, Duration::from_millis(50));
        // 80 s of recorded tool time capped at 30 s.
        assert_eq!(calls[4].gap, Duration::from_secs(30));
        let uncapped = session_task(&trace, 0, 7, 0, None);
        assert_eq!(graph(&uncapped.spec)[4].gap, Duration::from_secs(80));
        assert_eq!(calls[0].gap, Duration::ZERO);
        assert_eq!(calls[4].call.input_tokens, 50);
        assert_eq!(calls[4].call.output_tokens, 4);
    }

    #[test]
    fn equal_hash_ids_render_equal_blocks() {
        let trace = fan_out_trace();
        let text = |seed: u64, nonce: u64, k: usize| {
            let task = session_task(&trace, 0, seed, nonce, None);
            render_text(&graph(&task.spec)[k].call.messages[0].segments)
        };
        let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        let (root, a, b) = (
            words(&text(7, 0, 0)),
            words(&text(7, 0, 1)),
            words(&text(7, 0, 2)),
        );
        assert_eq!(root.len(), 40);
        // Blocks 1 and 2 (32 tokens) shared; block 3 vs 4 differ.
        assert_eq!(root[..32], a[..32]);
        assert_eq!(a[..32], b[..32]);
        assert_ne!(a[32..], b[32..]);
        // The root's 8-token tail is its own.
        assert_ne!(root[32..], a[32..]);
        // The join re-sends blocks 1, 2, 3 of the first sibling.
        let join = words(&text(7, 0, 4));
        assert_eq!(join[..40], a[..40]);
        // Another run (seed) or nonce: different bytes.
        assert_ne!(words(&text(8, 0, 0))[..16], root[..16]);
        assert_ne!(words(&text(7, 1, 0))[..16], root[..16]);
        // No blocks: all unique, sized as recorded.
        assert_eq!(words(&text(7, 0, 5)).len(), 30);
        // The next pass through the trace (task = sessions + 0) is the same
        // session in new words: its own repeats are no prefix-cache hits.
        let sessions = trace.sessions.len() as u64;
        let again = session_task(&trace, sessions, 7, 0, None);
        let again = words(&render_text(
            &graph(&again.spec)[0].call.messages[0].segments,
        ));
        assert_eq!(again.len(), root.len());
        assert_ne!(again[..16], root[..16]);
    }

    #[test]
    fn bailian_sessions_and_rate() {
        let text = r#"{"chat_id": 1, "parent_chat_id": -1, "timestamp": 10.0, "input_length": 40, "output_length": 5, "hash_ids": [1, 2, 3]}
{"chat_id": 2, "parent_chat_id": -1, "timestamp": 12.0, "input_length": 20, "output_length": 7, "hash_ids": [9, 10]}
{"chat_id": 3, "parent_chat_id": 1, "timestamp": 13.0, "input_length": 60, "output_length": 3, "hash_ids": [1, 2, 3, 4]}
"#;
        let trace = parse_agent_trace(text, "b.jsonl").unwrap();
        assert_eq!(session_rate_per_s(&trace), Some(0.5));
        // Two sessions 2 s apart, at twice the pace: 0 and 1 s, then the
        // pattern again one mean gap after its last session.
        let offsets: Vec<_> = recorded_arrivals(&trace, 2.0).unwrap().take(5).collect();
        let secs = |s: f64| Duration::from_secs_f64(s);
        assert_eq!(
            offsets,
            vec![secs(0.0), secs(1.0), secs(2.0), secs(3.0), secs(4.0)]
        );
        let task = session_task(&trace, 2, 1, 0, None);
        let calls = graph(&task.spec);
        assert_eq!(calls.len(), 2);
        assert_eq!(calls[1].parent, Some(0));
        assert_eq!(calls[1].gap, Duration::from_secs(3));
    }
}
