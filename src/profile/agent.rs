//! The agent loop of recorded agent sessions (pure): from
//! [`AgentTrace`]s, the figures an `agent { ... }` workload declares, each
//! fitted with [`super::fit`].
//!
//! # What is measured, and how
//!
//! - A *task* is a recorded session; **calls per task** counts its calls.
//! - A *step* is a call and its siblings: the calls waiting on the same
//!   parent's answer (a session's roots are the first step's). **Fan-out**
//!   is the size of a step. **Steps** per task is the depth of the main
//!   lane: the most generations (root = 1, a child one more than its
//!   parent) of any [`CallKind::Main`] call (of any call when the trace
//!   marks none main). Steps of the main lane are the sibling groups whose
//!   parent is a main call, or the roots; a sub-agent's own loop (children
//!   of a sub-agent call) is not a step of the main lane.
//! - **Tool time** of a step is its first call's `tool_ms` when recorded,
//!   else its `gap_ms` (the parent's answer to the step's start). Where the
//!   parent's end is not recorded the reader's gap runs from the parent's
//!   start, so it includes the answer: an upper bound, which the profile
//!   says. Values above the 99th percentile are capped at it (a tool that
//!   hung, a user away) and the cap is stated.
//! - **Context growth** of a step is what its first call appends to the
//!   parent's prompt. With blocks (`hash_ids`), the prefix *re-sent* is the
//!   leading blocks shared with the parent's prompt (× `block_tokens`, at
//!   most the prompt) and *appended* = input − re-sent; a step that shares
//!   no block with its parent starts a fresh context and is left out.
//!   Without blocks, appended = input − the parent's input, and a step whose
//!   prompt is not longer than its parent's is left out (a trimmed
//!   context). The parent's answer, when the agent re-sends it, is part of
//!   what is appended, as the language's `context-growth` is everything a
//!   step adds.
//! - **Initial context** is each session's first call's prompt: the
//!   workload's `input-tokens`.
//! - **Output tokens** and **reasoning tokens** per call (reasoning where
//!   recorded).
//! - **Session arrivals**: the sessions' starts, fitted by
//!   [`super::arrivals_of_files`] (each file its own time line).
//! - **Reuse potential**: the share of prompt tokens an unlimited prefix
//!   cache would have served, every call in start order on the trace's
//!   clock ([`ideal_cache_hit_fraction`], the hit fraction of
//!   [`super::reuse::prefix_reuse`] by binary search on chained blocks);
//!   the shared-prefix figures of the sessions' first calls (a block shared
//!   when two sessions' first prompts sent it) give `shared-prefix` as for
//!   other logs.
//! - **Task E2E**: a session's first start to its last call's end when
//!   every call of the trace records its end, else to its last call's start
//!   (a lower bound, which the profile says).

use serde::Serialize;

use super::fit::{ArrivalFit, LengthFit};
use super::reuse::{self, BlockedPrompt, PrefixReuse};
use super::{Profile, Samples, Source, SourceFormat, fit_or_constant, times};
use crate::data::agent_trace::{AgentTrace, AgentTraceFormat, BlockOrigin, CallKind};

/// Tool times above this quantile are capped at it.
pub const TOOL_TIME_CAP_QUANTILE: f64 = 0.99;

/// Tool time between steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolTime {
    /// Seconds, after the cap.
    pub fit: Option<LengthFit>,
    /// Steps measured (those with a parent).
    pub n: usize,
    /// The cap (the 99th percentile), seconds.
    pub cap_s: Option<f64>,
    /// Values above the cap, set to it.
    pub capped: usize,
    /// Steps whose time is the recorded `tool_ms`.
    pub from_tool_ms: usize,
    /// Steps whose time is the gap after the parent's answer.
    pub from_gap: usize,
    /// Of `from_gap`, those whose parent's end is not recorded: the gap
    /// includes the parent's answer.
    pub gap_includes_answer: usize,
}

/// Tokens appended per step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ContextGrowth {
    pub fit: Option<LengthFit>,
    /// Steps measured from shared leading blocks.
    pub from_blocks: usize,
    /// Steps measured as input minus the parent's input (no blocks).
    pub from_lengths: usize,
    /// Steps sharing no block with their parent (a fresh context): left out.
    pub fresh_contexts: usize,
    /// Steps without blocks whose prompt is not longer than the parent's: left out.
    pub not_longer: usize,
    /// Of the measured steps' prompt tokens, the share re-sent from the parent's prompt.
    pub resent_fraction: Option<f64>,
}

/// Where a recorded task ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum E2eSpan {
    /// First call's start to the last call's end.
    FirstStartToLastEnd,
    /// First call's start to the last call's start: ends are missing (a lower bound).
    FirstStartToLastStart,
}

impl E2eSpan {
    pub fn words(self) -> &'static str {
        match self {
            E2eSpan::FirstStartToLastEnd => "first call's start to the last call's end",
            E2eSpan::FirstStartToLastStart => {
                "first call's start to the last call's start (ends are not recorded: a lower bound)"
            }
        }
    }
}

/// The recorded tasks' end-to-end times.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskE2e {
    /// Seconds.
    pub fit: Option<LengthFit>,
    pub span: E2eSpan,
    /// The recorded 90th percentile, seconds.
    pub p90_s: Option<f64>,
}

/// The agent loop fitted from agent traces.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentProfile {
    /// The first trace's format (each source states its own).
    pub format: AgentTraceFormat,
    /// The least direct origin of the traces' blocks.
    pub block_origin: BlockOrigin,
    pub block_tokens: u32,
    pub sessions: usize,
    pub calls: usize,
    pub calls_per_task: Option<LengthFit>,
    pub steps: Option<LengthFit>,
    pub fan_out: Option<LengthFit>,
    pub tool_time: ToolTime,
    pub context_growth: ContextGrowth,
    pub initial_context: Option<LengthFit>,
    pub output_tokens: Option<LengthFit>,
    pub reasoning_tokens: Option<LengthFit>,
    /// Session arrivals.
    pub arrival: Option<ArrivalFit>,
    /// Prefix reuse, every call in start order; `hit_fraction` is the reuse potential.
    pub reuse: Option<PrefixReuse>,
    /// Share of prompt tokens the recorded server served from its cache,
    /// over the calls that record it.
    pub recorded_cache_fraction: Option<f64>,
    pub task_e2e: TaskE2e,
}

/// The samples behind the agent fits, for the report.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AgentSamples {
    pub calls_per_task: Vec<f64>,
    pub steps: Vec<f64>,
    pub fan_out: Vec<f64>,
    /// Seconds, capped.
    pub tool_time_s: Vec<f64>,
    pub context_growth: Vec<f64>,
    pub initial_context: Vec<f64>,
    pub output_tokens: Vec<f64>,
    pub reasoning_tokens: Vec<f64>,
    pub task_e2e_s: Vec<f64>,
    /// Session starts, seconds, one list per trace.
    pub arrivals_s: Vec<Vec<f64>>,
}

/// Fit the agent loop of `traces` (each its own time line). Notes say what
/// is missing or bounded, in words.
pub fn fit_agent(traces: &[&AgentTrace]) -> (AgentProfile, AgentSamples, Vec<String>) {
    let mut s = AgentSamples::default();
    let mut notes = Vec::new();
    let mut tool_time = ToolTime {
        fit: None,
        n: 0,
        cap_s: None,
        capped: 0,
        from_tool_ms: 0,
        from_gap: 0,
        gap_includes_answer: 0,
    };
    let mut growth = ContextGrowth {
        fit: None,
        from_blocks: 0,
        from_lengths: 0,
        fresh_contexts: 0,
        not_longer: 0,
        resent_fraction: None,
    };
    let (mut resent_tokens, mut measured_tokens) = (0.0, 0.0);
    let (mut cached, mut cache_judged) = (0.0, 0.0);
    let every_end = traces
        .iter()
        .flat_map(|t| &t.sessions)
        .flat_map(|s| &s.calls)
        .all(|c| c.end_ms.is_some());
    let span = if every_end {
        E2eSpan::FirstStartToLastEnd
    } else {
        E2eSpan::FirstStartToLastStart
    };
    let mut names: Vec<String> = Vec::new();
    let mut generation: Vec<u32> = Vec::new();
    // First call of each sibling group, by parent (index + 1; 0 = roots).
    let mut group_size: Vec<u32> = Vec::new();
    let mut group_first: Vec<u32> = Vec::new();
    for (f, trace) in traces.iter().enumerate() {
        let mut arrivals = Vec::with_capacity(trace.sessions.len());
        let block_tokens = f64::from(trace.block_tokens);
        for session in &trace.sessions {
            names.push(format!("{f}/{}", session.id));
            let calls = &session.calls;
            if calls.is_empty() {
                continue;
            }
            arrivals.push(session.start_ms / 1000.0);
            s.calls_per_task.push(calls.len() as f64);
            s.initial_context.push(f64::from(calls[0].input_tokens));
            let any_main = calls.iter().any(|c| c.kind == CallKind::Main);
            let is_main = |i: usize| !any_main || calls[i].kind == CallKind::Main;
            generation.clear();
            group_size.clear();
            group_size.resize(calls.len() + 1, 0);
            group_first.clear();
            group_first.resize(calls.len() + 1, u32::MAX);
            let mut depth = 0;
            for (i, call) in calls.iter().enumerate() {
                let g = match call.parent {
                    Some(p) if (p as usize) < i => generation[p as usize] + 1,
                    _ => 1,
                };
                generation.push(g);
                if is_main(i) {
                    depth = depth.max(g);
                }
                let key = call.parent.map_or(0, |p| p as usize + 1).min(calls.len());
                group_size[key] += 1;
                if group_first[key] == u32::MAX {
                    group_first[key] = i as u32;
                }
                if let Some(r) = call.reasoning_tokens {
                    s.reasoning_tokens.push(f64::from(r));
                }
                s.output_tokens.push(f64::from(call.output_tokens));
                if let Some(c) = call.cached_tokens {
                    cached += f64::from(c.min(call.input_tokens));
                    cache_judged += f64::from(call.input_tokens);
                }
            }
            s.steps.push(f64::from(depth.max(1)));
            for key in 0..group_size.len() {
                if group_size[key] == 0 {
                    continue;
                }
                // Steps of the main lane: the roots, or a main call's children.
                if key > 0 && !is_main(key - 1) {
                    continue;
                }
                s.fan_out.push(f64::from(group_size[key]));
                if key == 0 {
                    continue;
                }
                let parent = &calls[key - 1];
                let first = &calls[group_first[key] as usize];
                tool_time.n += 1;
                let seconds = match first.tool_ms {
                    Some(ms) => {
                        tool_time.from_tool_ms += 1;
                        ms / 1000.0
                    }
                    None => {
                        tool_time.from_gap += 1;
                        if parent.end_ms.is_none() {
                            tool_time.gap_includes_answer += 1;
                        }
                        first.gap_ms / 1000.0
                    }
                };
                s.tool_time_s.push(seconds.max(0.0));
                let input = f64::from(first.input_tokens);
                if !first.hash_ids.is_empty() && !parent.hash_ids.is_empty() {
                    let shared = first
                        .hash_ids
                        .iter()
                        .zip(&parent.hash_ids)
                        .take_while(|(a, b)| a == b)
                        .count();
                    if shared == 0 {
                        growth.fresh_contexts += 1;
                        continue;
                    }
                    let resent = (shared as f64 * block_tokens).min(input);
                    growth.from_blocks += 1;
                    resent_tokens += resent;
                    measured_tokens += input;
                    s.context_growth.push(input - resent);
                } else if first.input_tokens > parent.input_tokens {
                    growth.from_lengths += 1;
                    resent_tokens += f64::from(parent.input_tokens);
                    measured_tokens += input;
                    s.context_growth
                        .push(f64::from(first.input_tokens - parent.input_tokens));
                } else {
                    growth.not_longer += 1;
                }
            }
            let first_start = calls
                .iter()
                .map(|c| c.start_ms)
                .fold(f64::INFINITY, f64::min);
            let last = calls
                .iter()
                .map(|c| match span {
                    E2eSpan::FirstStartToLastEnd => c.end_ms.unwrap_or(c.start_ms),
                    E2eSpan::FirstStartToLastStart => c.start_ms,
                })
                .fold(f64::NEG_INFINITY, f64::max);
            s.task_e2e_s.push(((last - first_start) / 1000.0).max(0.0));
        }
        s.arrivals_s.push(arrivals);
    }

    // Cap tool times at their 99th percentile.
    if !s.tool_time_s.is_empty() {
        let mut sorted = s.tool_time_s.clone();
        sorted.sort_by(f64::total_cmp);
        let cap = quantile(&sorted, TOOL_TIME_CAP_QUANTILE);
        for t in &mut s.tool_time_s {
            if *t > cap {
                *t = cap;
                tool_time.capped += 1;
            }
        }
        tool_time.cap_s = Some(cap);
    }
    tool_time.fit = fit_or_constant(&s.tool_time_s);
    growth.fit = fit_or_constant(&s.context_growth);
    growth.resent_fraction = (measured_tokens > 0.0).then(|| resent_tokens / measured_tokens);

    // Reuse: every call in start order on its trace's clock.
    let mut order: Vec<(usize, f64, usize, usize)> = Vec::new();
    let mut session_index = 0usize;
    let mut session_base: Vec<usize> = Vec::with_capacity(traces.len());
    for (f, trace) in traces.iter().enumerate() {
        session_base.push(session_index);
        for (k, session) in trace.sessions.iter().enumerate() {
            for (i, call) in session.calls.iter().enumerate() {
                order.push((f, session.start_ms + call.start_ms, k, i));
            }
        }
        session_index += trace.sessions.len();
    }
    order.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let prompt = |f: usize, k: usize, i: usize| {
        let call = &traces[f].sessions[k].calls[i];
        BlockedPrompt {
            session: &names[session_base[f] + k],
            blocks: &call.hash_ids,
            tokens_per_block: f64::from(traces[f].block_tokens),
            input_tokens: call.input_tokens,
        }
    };
    let all: Vec<BlockedPrompt> = order.iter().map(|&(f, _, k, i)| prompt(f, k, i)).collect();
    let first: Vec<BlockedPrompt> = traces
        .iter()
        .enumerate()
        .flat_map(|(f, t)| {
            t.sessions
                .iter()
                .enumerate()
                .filter(|(_, s)| !s.calls.is_empty())
                .map(move |(k, _)| (f, k))
        })
        .map(|(f, k)| prompt(f, k, 0))
        .collect();
    // Shared prefixes are judged among the sessions' first prompts (what
    // `shared-prefix` models); the reuse potential over every call.
    let reuse = reuse::prefix_reuse(&first, &first).map(|mut r| {
        r.hit_fraction = ideal_cache_hit_fraction(&all);
        r
    });

    let block_origin = traces
        .iter()
        .map(|t| t.block_origin)
        .max_by_key(|o| match o {
            BlockOrigin::Recorded => 0,
            BlockOrigin::FromPrefixTokens => 1,
            BlockOrigin::AssumedGrowingContext => 2,
        })
        .unwrap_or(BlockOrigin::Recorded);
    let mut e2e_sorted = s.task_e2e_s.clone();
    e2e_sorted.sort_by(f64::total_cmp);
    let task_e2e = TaskE2e {
        fit: fit_or_constant(&s.task_e2e_s),
        span,
        p90_s: (!e2e_sorted.is_empty()).then(|| quantile(&e2e_sorted, 0.9)),
    };
    let profile = AgentProfile {
        format: traces
            .first()
            .map_or(AgentTraceFormat::Bailian, |t| t.format),
        block_origin,
        block_tokens: traces.first().map_or(16, |t| t.block_tokens),
        sessions: s.calls_per_task.len(),
        calls: s.output_tokens.len(),
        calls_per_task: fit_or_constant(&s.calls_per_task),
        steps: fit_or_constant(&s.steps),
        fan_out: fit_or_constant(&s.fan_out),
        tool_time,
        context_growth: growth,
        initial_context: fit_or_constant(&s.initial_context),
        output_tokens: fit_or_constant(&s.output_tokens),
        reasoning_tokens: fit_or_constant(&s.reasoning_tokens),
        arrival: super::arrivals_of_files(&s.arrivals_s),
        reuse,
        recorded_cache_fraction: (cache_judged > 0.0).then(|| cached / cache_judged),
        task_e2e,
    };
    notes.extend(agent_notes(&profile));
    (profile, s, notes)
}

/// What the figures cannot say, in words.
fn agent_notes(p: &AgentProfile) -> Vec<String> {
    let mut notes = Vec::new();
    let t = &p.tool_time;
    if t.n == 0 {
        notes.push(
            "tool time: no call waits on another's answer, so there is none to measure".to_string(),
        );
    } else if t.gap_includes_answer > 0 {
        notes.push(format!(
            "tool time: for {} of {} steps the trace does not record the parent's end, so the gap runs from its start and includes its answer (an upper bound)",
            t.gap_includes_answer, t.n
        ));
    }
    if let Some(cap) = t.cap_s.filter(|_| t.capped > 0) {
        notes.push(format!(
            "tool time: {} of {} values above the 99th percentile ({}) are capped at it",
            t.capped,
            t.n,
            crate::format::ms(cap * 1000.0)
        ));
    }
    let g = &p.context_growth;
    if g.fresh_contexts > 0 {
        notes.push(format!(
            "context growth: {} steps share no block with their parent's prompt (a fresh context) and are left out",
            g.fresh_contexts
        ));
    }
    if g.not_longer > 0 {
        notes.push(format!(
            "context growth: {} steps without blocks have a prompt no longer than their parent's (a trimmed context) and are left out",
            g.not_longer
        ));
    }
    if g.fit.is_none() {
        notes.push("context growth: no step appends to its parent's prompt".to_string());
    }
    if p.block_origin == BlockOrigin::AssumedGrowingContext {
        notes.push("prefix blocks: the trace records none; they are assumed from a growing context, so reuse is an upper bound".to_string());
    } else if p.block_origin == BlockOrigin::FromPrefixTokens {
        notes.push(
            "prefix blocks: derived from the re-sent prefix and appended tokens the trace records"
                .to_string(),
        );
    }
    if p.task_e2e.span == E2eSpan::FirstStartToLastStart {
        notes.push("task E2E: the trace records no call ends, so a task runs from its first call's start to its last call's start (a lower bound)".to_string());
    }
    if p.arrival.is_none() {
        notes.push("arrivals: fewer than 3 sessions with distinct starts in any trace".to_string());
    }
    // The model draws steps and fan-out independently: say when the trace's
    // calls per task disagree with what they imply.
    if let (Some(calls), Some(steps), Some(fan)) = (&p.calls_per_task, &p.steps, &p.fan_out) {
        let implied = steps.mean * fan.mean;
        if (implied - calls.mean).abs() > 0.1 * calls.mean {
            notes.push(format!(
                "calls per task: the trace has {} on average, steps x fan-out imply {} (calls branch off other calls than the main lane's, or sub-agents run loops of their own)",
                crate::format::significant(calls.mean),
                crate::format::significant(implied)
            ));
        }
    }
    notes
}

/// The share of prompt tokens an unlimited prefix cache would serve,
/// prompts in the order given (those without blocks left out): what
/// [`reuse::prefix_reuse`] gives as `hit_fraction`, in far fewer lookups.
/// Blocks are chained, so the blocks of a prompt already sent form a
/// leading run (block `j` sent means some earlier prompt had blocks
/// `0..=j`): the run is found by binary search, and only the blocks after
/// it, new by the same argument, are inserted.
pub fn ideal_cache_hit_fraction(prompts: &[BlockedPrompt]) -> f64 {
    let mut sent: std::collections::HashSet<u64> = std::collections::HashSet::new();
    let (mut hit_tokens, mut total_tokens) = (0.0, 0.0);
    for prompt in prompts.iter().filter(|p| !p.blocks.is_empty()) {
        total_tokens += f64::from(prompt.input_tokens);
        let hits = prompt.blocks.partition_point(|b| sent.contains(b));
        sent.extend(&prompt.blocks[hits..]);
        hit_tokens += (hits as f64 * prompt.tokens_per_block).min(f64::from(prompt.input_tokens));
    }
    if total_tokens > 0.0 {
        hit_tokens / total_tokens
    } else {
        0.0
    }
}

/// The `q` quantile of sorted values (nearest rank).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let n = sorted.len();
    sorted[(((q * n as f64).ceil() as usize).max(1) - 1).min(n - 1)]
}

/// A profile of agent traces `(origin, trace)`: the pooled request-level
/// figures (input = initial context, output per call, arrivals = sessions,
/// prefix reuse) and the agent loop.
pub fn profile_traces(traces: &[(String, AgentTrace)]) -> (Profile, Samples) {
    let refs: Vec<&AgentTrace> = traces.iter().map(|(_, t)| t).collect();
    let (agent, agent_samples, notes) = fit_agent(&refs);
    let sources = traces
        .iter()
        .map(|(origin, t)| Source {
            path: origin.clone(),
            format: SourceFormat::Agent(t.format),
            requests: t.sessions.iter().map(|s| s.calls.len()).sum(),
            skipped: t.skipped.clone(),
            times: match t.format {
                AgentTraceFormat::Bailian => vec![times::TimeField::by_format(
                    "timestamp",
                    times::TimeRole::Arrival,
                    times::TimeUnit::S,
                    "Alibaba Bailian traces give seconds",
                )],
                _ => Vec::new(),
            },
        })
        .collect();
    let samples = Samples {
        input_tokens: agent_samples.initial_context.clone(),
        output_tokens: agent_samples.output_tokens.clone(),
        turns: Vec::new(),
        think_time_s: Vec::new(),
        arrivals_s: agent_samples.arrivals_s.clone(),
        agent: Some(agent_samples),
    };
    let profile = Profile {
        sources,
        requests: agent.calls,
        input_tokens: agent.initial_context.clone(),
        output_tokens: agent.output_tokens.clone(),
        arrival: agent.arrival.clone(),
        prefix: agent.reuse.clone(),
        prefix_source: agent.reuse.as_ref().map(|_| match agent.block_origin {
            BlockOrigin::Recorded => "hash ids",
            BlockOrigin::FromPrefixTokens => "hash ids derived from prefix tokens",
            BlockOrigin::AssumedGrowingContext => "hash ids assumed from a growing context",
        }),
        sessions: None,
        agent: Some(agent),
        notes,
    };
    (profile, samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::DistKind;
    use crate::data::agent_trace::{TraceCall, TraceSession};
    use rand::{RngExt, SeedableRng};
    use rand_distr::{Distribution, Exp, LogNormal};

    type Rng = rand::rngs::Xoshiro256PlusPlus;

    const BLOCK: u32 = 16;
    /// Tokens of each of the two system prompts.
    const SYSTEM: u32 = 1024;

    /// Chained blocks of a context of `tokens` in session `k` whose first
    /// `SYSTEM` tokens are system prompt `g`: a full block's id names its
    /// position and content, so a context that grows keeps its full blocks'
    /// ids and changes its last, partial one's.
    fn blocks(k: usize, g: u64, tokens: u32) -> Vec<u64> {
        (0..tokens.div_ceil(BLOCK))
            .map(|j| {
                let fill = (tokens - j * BLOCK).min(BLOCK);
                if (j + 1) * BLOCK <= SYSTEM {
                    (g << 20) | (u64::from(j) << 8) | u64::from(fill)
                } else {
                    ((k as u64 + 1) << 32) | (u64::from(j) << 8) | u64::from(fill)
                }
            })
            .collect()
    }

    /// A trace of `sessions` agent tasks with known laws: Poisson session
    /// arrivals at 0.5/s; steps uniform 3-8; fan-out uniform 1-3; tool time
    /// lognormal (median 600 ms, sigma 0.5) after the step's last answer;
    /// context growth uniform 200-1000 tokens per step; initial context one
    /// of two 1,024-token system prompts plus a lognormal task (median 1,000);
    /// answers lognormal (median 150) taking 200 ms + 10 ms a token, a third
    /// of them reasoning. The next step continues from the step's last answer.
    fn generate(sessions: usize, seed: u64) -> AgentTrace {
        let mut rng = Rng::seed_from_u64(seed);
        let tool = LogNormal::new(600f64.ln(), 0.5).unwrap();
        let answers = LogNormal::new(150f64.ln(), 0.6).unwrap();
        let tasks = LogNormal::new(1000f64.ln(), 0.4).unwrap();
        let arrivals = Exp::new(0.5).unwrap();
        let mut t = 0.0;
        let mut out = Vec::with_capacity(sessions);
        for k in 0..sessions {
            t += arrivals.sample(&mut rng) * 1000.0;
            let g = (k % 2) as u64;
            let steps: u32 = rng.random_range(3..=8);
            let mut context = SYSTEM + tasks.sample(&mut rng).round().max(1.0) as u32;
            let mut calls: Vec<TraceCall> = Vec::new();
            let (mut parent, mut leave, mut gap) = (None, 0.0, 0.0);
            for step in 0..steps {
                let fan: u32 = rng.random_range(1..=3);
                let mut last: (f64, u32) = (f64::NEG_INFINITY, 0);
                for _ in 0..fan {
                    let output = answers.sample(&mut rng).round().max(1.0) as u32;
                    let end = leave + 200.0 + 10.0 * f64::from(output);
                    if end > last.0 {
                        last = (end, calls.len() as u32);
                    }
                    calls.push(TraceCall {
                        start_ms: leave,
                        end_ms: Some(end),
                        parent,
                        gap_ms: gap,
                        tool_ms: None,
                        kind: CallKind::Main,
                        input_tokens: context,
                        output_tokens: output,
                        reasoning_tokens: Some(output / 3),
                        cached_tokens: None,
                        hash_ids: blocks(k, g, context),
                    });
                }
                if step + 1 < steps {
                    gap = tool.sample(&mut rng);
                    parent = Some(last.1);
                    leave = last.0 + gap;
                    context += rng.random_range(200..=1000u32);
                }
            }
            out.push(TraceSession {
                id: format!("s{k}"),
                start_ms: t,
                calls,
            });
        }
        AgentTrace {
            format: AgentTraceFormat::Bailian,
            block_tokens: BLOCK,
            block_origin: BlockOrigin::Recorded,
            sessions: out,
            skipped: Vec::new(),
        }
    }

    fn within(got: f64, want: f64, tolerance: f64) -> bool {
        (got - want).abs() <= tolerance * want.abs()
    }

    #[test]
    fn profile_agent_round_trip_recovers_the_known_loop() {
        let trace = generate(300, 36);
        let (p, s, notes) = fit_agent(&[&trace]);
        assert_eq!(p.sessions, 300);
        let fan = p.fan_out.as_ref().unwrap();
        assert!(within(fan.mean, 2.0, 0.1), "fan-out mean {}", fan.mean);
        let steps = p.steps.as_ref().unwrap();
        assert!(within(steps.mean, 5.5, 0.1), "steps mean {}", steps.mean);
        let calls = p.calls_per_task.as_ref().unwrap();
        assert!(
            within(calls.mean, 11.0, 0.1),
            "calls per task {}",
            calls.mean
        );
        let tool = p.tool_time.fit.as_ref().unwrap();
        assert!(within(tool.p50, 0.6, 0.1), "tool time p50 {}", tool.p50);
        if let DistKind::LogNormal { median, .. } = tool.kind {
            assert!(within(median, 0.6, 0.1), "tool time median {median}");
        }
        assert_eq!(p.tool_time.from_gap, p.tool_time.n);
        assert_eq!(p.tool_time.gap_includes_answer, 0);
        assert!(p.tool_time.capped > 0 && p.tool_time.capped <= p.tool_time.n / 50);
        let growth = p.context_growth.fit.as_ref().unwrap();
        assert!(
            within(growth.mean, 600.0, 0.1),
            "growth mean {}",
            growth.mean
        );
        assert_eq!(p.context_growth.from_blocks, s.context_growth.len());
        assert_eq!(p.context_growth.fresh_contexts, 0);
        let initial = p.initial_context.as_ref().unwrap();
        assert!(
            within(initial.p50, 2024.0, 0.1),
            "initial p50 {}",
            initial.p50
        );
        let reasoning = p.reasoning_tokens.as_ref().unwrap();
        assert!(
            within(reasoning.p50, 50.0, 0.1),
            "reasoning p50 {}",
            reasoning.p50
        );
        let arrival = p.arrival.as_ref().unwrap();
        assert!(
            within(arrival.mean_rps, 0.5, 0.15),
            "rate {}",
            arrival.mean_rps
        );
        assert_eq!(arrival.process, "poisson");
        assert_eq!(p.task_e2e.span, E2eSpan::FirstStartToLastEnd);
        let reuse = p.reuse.as_ref().unwrap();
        // Two system prompts shared by every session; later steps re-send
        // most of their prompt.
        assert_eq!(reuse.shared_tokens, SYSTEM);
        assert_eq!(reuse.groups, 2);
        assert!(reuse.hit_fraction > 0.7, "reuse {}", reuse.hit_fraction);
        assert!(notes.iter().any(|n| n.contains("capped")), "{notes:?}");
        assert!(
            !notes.iter().any(|n| n.contains("calls per task")),
            "{notes:?}"
        );
    }

    fn call(parent: Option<u32>, start_ms: f64, input: u32) -> TraceCall {
        TraceCall {
            start_ms,
            end_ms: None,
            parent,
            gap_ms: 100.0,
            tool_ms: None,
            kind: CallKind::Main,
            input_tokens: input,
            output_tokens: 10,
            reasoning_tokens: None,
            cached_tokens: Some(input / 2),
            hash_ids: Vec::new(),
        }
    }

    #[test]
    fn profile_agent_steps_fan_out_tool_time_and_growth_as_defined() {
        // 0 → {1, 2 (sub-agent)}; 1 → 3 (tool_ms recorded, shorter prompt);
        // 2 → 4 (the sub-agent's own loop: not a main-lane step); 3 → 5
        // with blocks sharing 2 of its parent's.
        let mut calls = vec![
            call(None, 0.0, 100),
            call(Some(0), 1000.0, 300),
            call(Some(0), 1000.0, 50),
            call(Some(1), 2000.0, 250),
            call(Some(2), 2000.0, 80),
            call(Some(3), 3000.0, 400),
        ];
        calls[2].kind = CallKind::Subagent;
        calls[4].kind = CallKind::Subagent;
        calls[3].tool_ms = Some(40.0);
        calls[3].hash_ids = vec![1, 2, 3];
        calls[5].hash_ids = vec![1, 2, 9, 10];
        calls[5].end_ms = Some(3500.0);
        let trace = AgentTrace {
            format: AgentTraceFormat::Bailian,
            block_tokens: 16,
            block_origin: BlockOrigin::Recorded,
            sessions: vec![TraceSession {
                id: "a".to_string(),
                start_ms: 0.0,
                calls,
            }],
            skipped: Vec::new(),
        };
        let (p, s, notes) = fit_agent(&[&trace]);
        assert_eq!(s.calls_per_task, vec![6.0]);
        // Main calls 0, 1, 3, 5: four generations.
        assert_eq!(s.steps, vec![4.0]);
        // Roots {0}, children of 0 {1, 2}, of 1 {3}, of 3 {5}; 2's child is not.
        assert_eq!(s.fan_out, vec![1.0, 2.0, 1.0, 1.0]);
        assert_eq!(p.tool_time.n, 3);
        assert_eq!(p.tool_time.from_tool_ms, 1);
        assert_eq!(p.tool_time.gap_includes_answer, 2);
        // Step {1,2}: 300 − 100 = 200 appended; step {3}: shorter, left
        // out; step {5}: 400 − 2 × 16 re-sent = 368.
        assert_eq!(s.context_growth, vec![200.0, 368.0]);
        assert_eq!(p.context_growth.not_longer, 1);
        assert_eq!(p.context_growth.from_blocks, 1);
        assert_eq!(p.context_growth.from_lengths, 1);
        // Not every end is recorded: the task ends at the last start.
        assert_eq!(p.task_e2e.span, E2eSpan::FirstStartToLastStart);
        assert_eq!(s.task_e2e_s, vec![3.0]);
        assert!(p.recorded_cache_fraction.unwrap() > 0.49);
        assert!(notes.iter().any(|n| n.contains("upper bound")), "{notes:?}");
        assert!(notes.iter().any(|n| n.contains("lower bound")), "{notes:?}");
    }

    #[test]
    fn profile_agent_experiment_is_a_valid_file_with_the_agent_loop() {
        let trace = generate(120, 7);
        let (profile, _) = profile_traces(&[("trace.jsonl".to_string(), trace)]);
        let text = super::super::kdl::experiment(&profile, "agent-trace");
        let experiment = crate::config::parse(&text, std::path::Path::new("x.kdl"))
            .unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        let workload = &experiment.workloads[0];
        assert!(workload.agent.is_some(), "{text}");
        assert!(workload.shared_prefix.is_some(), "{text}");
        for needle in [
            "agent {",
            "steps ",
            "fan-out ",
            "tool-time ",
            "context-growth ",
            "reasoning-tokens ",
            "task-e2e p90=",
            "// sessions \"trace.jsonl\"",
            "Alibaba Bailian trace",
            "arrival poisson",
        ] {
            assert!(text.contains(needle), "{needle}\n{text}");
        }
        let json = profile.to_json();
        assert_eq!(json["agent"]["format"], "bailian");
        assert_eq!(json["sources"][0]["format"], "bailian");
        assert_eq!(json["arrival"]["unit"], "agent tasks");
        for key in [
            "sessions",
            "calls_per_task",
            "steps",
            "fan_out",
            "tool_time",
            "context_growth",
            "initial_context",
            "output_tokens",
            "reasoning_tokens",
            "reuse_potential",
            "task_e2e",
            "block_origin",
        ] {
            assert!(!json["agent"][key].is_null(), "agent.{key}");
        }
    }

    #[test]
    fn profile_agent_reuse_potential_is_the_ideal_cache_of_prefix_reuse() {
        let trace = generate(150, 3);
        let names: Vec<String> = trace.sessions.iter().map(|s| s.id.clone()).collect();
        let mut order: Vec<(f64, usize, usize)> = Vec::new();
        for (k, session) in trace.sessions.iter().enumerate() {
            for (i, call) in session.calls.iter().enumerate() {
                order.push((session.start_ms + call.start_ms, k, i));
            }
        }
        order.sort_by(|a, b| a.0.total_cmp(&b.0));
        let all: Vec<BlockedPrompt> = order
            .iter()
            .map(|&(_, k, i)| {
                let call = &trace.sessions[k].calls[i];
                BlockedPrompt {
                    session: &names[k],
                    blocks: &call.hash_ids,
                    tokens_per_block: f64::from(BLOCK),
                    input_tokens: call.input_tokens,
                }
            })
            .collect();
        let slow = reuse::prefix_reuse(&all, &all).unwrap().hit_fraction;
        let fast = ideal_cache_hit_fraction(&all);
        assert!((slow - fast).abs() < 1e-12, "{slow} vs {fast}");
        let (p, _, _) = fit_agent(&[&trace]);
        assert!((p.reuse.unwrap().hit_fraction - fast).abs() < 1e-12);
    }

    #[test]
    fn profile_agent_of_single_calls_still_writes_a_valid_file() {
        // Sessions of one call each: no step waits on another, nothing grows.
        let sessions = (0..5)
            .map(|k| TraceSession {
                id: format!("{k}"),
                start_ms: f64::from(k) * 1000.0 + f64::from(k * k) * 10.0,
                calls: vec![call(None, 0.0, 100 + k as u32)],
            })
            .collect();
        let trace = AgentTrace {
            format: AgentTraceFormat::Bailian,
            block_tokens: 16,
            block_origin: BlockOrigin::Recorded,
            sessions,
            skipped: Vec::new(),
        };
        let (profile, _) = profile_traces(&[("one.jsonl".to_string(), trace)]);
        let text = super::super::kdl::experiment(&profile, "single");
        crate::config::parse(&text, std::path::Path::new("x.kdl"))
            .unwrap_or_else(|e| panic!("{e:?}\n{text}"));
        assert!(text.contains("steps fixed 1"), "{text}");
        assert!(text.contains("PLACEHOLDER: no call waits"), "{text}");
        assert!(!text.contains("task-e2e"), "{text}");
    }

    /// `cargo test --lib profile_agent_100k -- --ignored --nocapture`
    #[test]
    #[ignore = "a timing, not a check: run by hand"]
    fn profile_agent_100k_calls_timing() {
        let mut sessions = 9_000;
        let trace = loop {
            let trace = generate(sessions, 100);
            let calls: usize = trace.sessions.iter().map(|s| s.calls.len()).sum();
            if calls >= 100_000 {
                break trace;
            }
            sessions += 500;
        };
        let calls: usize = trace.sessions.iter().map(|s| s.calls.len()).sum();
        let started = std::time::Instant::now();
        let (profile, _) = profile_traces(&[("big.jsonl".to_string(), trace)]);
        let fitted = started.elapsed();
        let text = super::super::kdl::experiment(&profile, "big");
        println!(
            "profiled {calls} calls in {} sessions: {:.2} s (experiment {} bytes)",
            profile.agent.as_ref().unwrap().sessions,
            fitted.as_secs_f64(),
            text.len()
        );
    }
}
