//! Recorded traffic → a workload profile (pure at its core): the step before
//! an experiment, turning logs into the lengths, arrivals, reuse and
//! conversations a `workload` and `open` block declare.
//!
//! [`read`] parses each log into requests (no prompt text kept), [`profile`]
//! pools them and fits: [`fit`] for the distributions and arrivals,
//! [`reuse`] for shared prefixes; [`times`] decides, and states, the unit
//! of every time field. [`kdl`] writes the result as a runnable
//! experiment, [`Profile::to_json`] as `capcard/profile/v1`, and [`report`]
//! as a markdown report with charts. Reading files is the caller's job
//! ([`load`], at the edge).
//!
//! Agent traces ([`crate::data::agent_trace`], detected before any log
//! format) are profiled by [`agent`] instead: the agent loop (steps,
//! fan-out, tool time, context growth, task E2E) beside the request-level
//! figures, written as an `agent` workload.
//!
//! # Sessions
//!
//! When requests carry a session (or conversation) id and some session has
//! more than one request, the traffic is multi-turn, and the language's
//! model of it is `conversation`: a task is a session, its first prompt is
//! drawn from `input-tokens` and each later turn re-sends the history plus
//! a new user message drawn from `input-tokens` too. So:
//! - arrivals are the sessions' first requests (open-loop arrivals are
//!   tasks);
//! - a later turn's new message is its prompt minus the previous prompt and
//!   answer (the history it re-sends); a prompt shorter than that history
//!   (a client that trimmed it) counts whole;
//! - think time is the gap from the end of one answer to the next request
//!   (the gap between requests when the log has no latency, which then
//!   includes the answer's time — the profile says so).

pub mod agent;
pub mod fit;
pub mod kdl;
pub mod load;
pub mod read;
pub mod report;
pub mod reuse;
pub mod times;

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::config::DistKind;
use crate::data::agent_trace::AgentTraceFormat;
use agent::{AgentProfile, AgentSamples};
use fit::{ArrivalFit, LengthFit};
use read::{Log, LogFormat};
use reuse::{BlockedPrompt, PrefixReuse};
use times::TimeField;

/// The JSON schema name of [`Profile::to_json`].
pub const SCHEMA: &str = "capcard/profile/v1";

/// Below this share of requests with a shared prefix, `shared-prefix` (which
/// gives every request one) would overstate reuse, so it is not declared.
pub const SHARED_PREFIX_MIN_FRACTION: f64 = 0.5;

/// The format of a source: a request log's, or an agent trace's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum SourceFormat {
    Log(LogFormat),
    Agent(AgentTraceFormat),
}

impl SourceFormat {
    pub fn label(self) -> &'static str {
        match self {
            SourceFormat::Log(f) => f.label(),
            SourceFormat::Agent(f) => f.label(),
        }
    }
}

/// What was read from one log file.
#[derive(Debug, Clone, PartialEq)]
pub struct Source {
    pub path: String,
    pub format: SourceFormat,
    /// Requests (calls, for an agent trace).
    pub requests: usize,
    /// `(count, why)` of records left out.
    pub skipped: Vec<(usize, String)>,
    /// How its time fields were read.
    pub times: Vec<TimeField>,
}

impl Source {
    /// `` `timestamp` in ms (why); `latency_ms` in ms (why) ``, or `None`
    /// for a log without times.
    pub fn times_statement(&self) -> Option<String> {
        (!self.times.is_empty()).then(|| {
            self.times
                .iter()
                .map(TimeField::statement)
                .collect::<Vec<_>>()
                .join("; ")
        })
    }
}

/// Multi-turn structure.
#[derive(Debug, Clone, PartialEq)]
pub struct Sessions {
    pub count: usize,
    /// Turn counts (a `fixed` law when every session has the same count).
    pub turns: Option<LengthFit>,
    /// Seconds; `None` without timestamps.
    pub think_time: Option<LengthFit>,
    /// The log had latencies, so think time excludes the answer.
    pub think_time_excludes_answer: bool,
}

/// A fitted profile of recorded traffic.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    pub sources: Vec<Source>,
    pub requests: usize,
    pub input_tokens: Option<LengthFit>,
    pub output_tokens: Option<LengthFit>,
    /// Arrivals of tasks: requests, or sessions' first requests.
    pub arrival: Option<ArrivalFit>,
    pub prefix: Option<PrefixReuse>,
    /// Where the prefix blocks came from.
    pub prefix_source: Option<&'static str>,
    pub sessions: Option<Sessions>,
    /// The agent loop, when the input is agent traces.
    pub agent: Option<AgentProfile>,
    /// Why a quantity is missing, and other caveats, in words.
    pub notes: Vec<String>,
}

/// The samples behind the fits, for the report's charts.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Samples {
    pub input_tokens: Vec<f64>,
    pub output_tokens: Vec<f64>,
    pub turns: Vec<f64>,
    pub think_time_s: Vec<f64>,
    /// Task arrival times (seconds), one list per log file.
    pub arrivals_s: Vec<Vec<f64>>,
    /// The agent loop's samples, for agent traces.
    pub agent: Option<AgentSamples>,
}

/// Pool the logs and fit every quantity the language has.
pub fn profile(logs: &[Log]) -> (Profile, Samples) {
    let mut samples = Samples::default();
    let mut notes = Vec::new();
    // Sessions, keyed within their file; a record without one is its own.
    let mut sessions: BTreeMap<(usize, String), Vec<&read::LogRecord>> = BTreeMap::new();
    for (f, log) in logs.iter().enumerate() {
        for (i, record) in log.records.iter().enumerate() {
            let key = match &record.session {
                Some(s) => format!("s:{s}"),
                None => format!("r:{i}"),
            };
            sessions.entry((f, key)).or_default().push(record);
        }
    }
    for turns in sessions.values_mut() {
        // Stable: without timestamps, file order stands.
        turns.sort_by(|a, b| {
            a.timestamp_s
                .unwrap_or(0.0)
                .total_cmp(&b.timestamp_s.unwrap_or(0.0))
        });
    }
    let multi_turn = sessions.values().any(|t| t.len() > 1);
    let mut think_excludes_answer = true;
    let mut arrivals: Vec<Vec<f64>> = vec![Vec::new(); logs.len()];
    for ((file, _), turns) in &sessions {
        if multi_turn {
            samples.turns.push(turns.len() as f64);
            if let Some(t) = turns[0].timestamp_s {
                arrivals[*file].push(t);
            }
        } else if let Some(t) = turns[0].timestamp_s {
            arrivals[*file].push(t);
        }
        for (k, record) in turns.iter().enumerate() {
            if let Some(out) = record.output_tokens {
                samples.output_tokens.push(f64::from(out));
            }
            let previous = k.checked_sub(1).map(|p| turns[p]);
            let input = match previous {
                Some(prev) if multi_turn => {
                    let history =
                        u64::from(prev.input_tokens) + u64::from(prev.output_tokens.unwrap_or(0));
                    match u64::from(record.input_tokens).checked_sub(history) {
                        Some(new) if new > 0 => new as f64,
                        _ => f64::from(record.input_tokens),
                    }
                }
                _ => f64::from(record.input_tokens),
            };
            samples.input_tokens.push(input);
            if let (Some(prev), true) = (previous, multi_turn) {
                if let (Some(t0), Some(t1)) = (prev.timestamp_s, record.timestamp_s) {
                    let answer = prev.latency_s.unwrap_or_else(|| {
                        think_excludes_answer = false;
                        0.0
                    });
                    let think = t1 - t0 - answer;
                    if think >= 0.0 {
                        samples.think_time_s.push(think);
                    }
                }
            }
        }
    }
    if !multi_turn {
        // One request per task: arrivals are the requests, in file order.
        for (f, log) in logs.iter().enumerate() {
            arrivals[f] = log.records.iter().filter_map(|r| r.timestamp_s).collect();
        }
    }
    samples.arrivals_s = arrivals;

    let input_tokens = fit_or_constant(&samples.input_tokens);
    if input_tokens.is_none() {
        notes.push("input lengths: none above zero, nothing to fit".to_string());
    }
    let output_tokens = fit_or_constant(&samples.output_tokens);
    if output_tokens.is_none() {
        notes.push(if samples.output_tokens.is_empty() {
            "output lengths: the log records none (no usage, no answer text)".to_string()
        } else {
            "output lengths: none above zero, nothing to fit".to_string()
        });
    }
    let arrival = arrivals_of_files(&samples.arrivals_s);
    if arrival.is_none() {
        notes.push(
            "arrivals: the log has no usable timestamps (at least 3 per file, not all equal)"
                .to_string(),
        );
    }

    // Reuse: the first prompt of every session against all prompts.
    let names: Vec<String> = sessions
        .keys()
        .map(|(file, key)| format!("{file}/{key}"))
        .collect();
    let mut first: Vec<BlockedPrompt> = Vec::new();
    let mut all: Vec<BlockedPrompt> = Vec::new();
    for (name, turns) in names.iter().zip(sessions.values()) {
        for (k, record) in turns.iter().enumerate() {
            let prompt = BlockedPrompt {
                session: name,
                blocks: &record.prefix_blocks,
                tokens_per_block: record.tokens_per_block,
                input_tokens: record.input_tokens,
            };
            if k == 0 {
                first.push(prompt);
            }
            all.push(prompt);
        }
    }
    let prefix = reuse::prefix_reuse(&first, &all);
    let prefix_source = prefix.as_ref().map(|_| {
        if logs
            .iter()
            .flat_map(|l| &l.records)
            .any(|r| r.blocks_are_hash_ids)
        {
            "hash ids"
        } else {
            "prompt text (16-word blocks)"
        }
    });
    if prefix.is_none() {
        notes.push(
            "prefix reuse: the log has neither hash ids nor prompt text, so reuse is unknown"
                .to_string(),
        );
    }

    let sessions_out = multi_turn.then(|| {
        let turns = fit_or_constant(&samples.turns);
        Sessions {
            count: sessions.len(),
            turns,
            think_time: fit_or_constant(&samples.think_time_s),
            think_time_excludes_answer: think_excludes_answer,
        }
    });
    if let Some(s) = &sessions_out {
        if s.think_time.is_none() {
            notes.push(
                "think time: the log has no timestamps within sessions, so it is not measured"
                    .to_string(),
            );
        } else if !s.think_time_excludes_answer {
            notes.push(
                "think time: the log has no latencies, so the gap between a session's requests includes the answer's own time (an upper bound)"
                    .to_string(),
            );
        }
    }
    let profile = Profile {
        sources: logs
            .iter()
            .map(|l| Source {
                path: l.origin.clone(),
                format: SourceFormat::Log(l.format),
                requests: l.records.len(),
                skipped: l
                    .skipped
                    .iter()
                    .map(|(n, why)| (*n, (*why).to_string()))
                    .collect(),
                times: l.times.clone(),
            })
            .collect(),
        requests: logs.iter().map(|l| l.records.len()).sum(),
        input_tokens,
        output_tokens,
        arrival,
        prefix,
        prefix_source,
        sessions: sessions_out,
        agent: None,
        notes,
    };
    (profile, samples)
}

/// [`fit::fit_lengths`], or a `fixed` law when every value is the same (a
/// workload with forced lengths, say): nothing to fit, and nothing lost.
fn fit_or_constant(values: &[f64]) -> Option<LengthFit> {
    if let Some(fit) = fit::fit_lengths(values) {
        return Some(fit);
    }
    let positive: Vec<f64> = values
        .iter()
        .copied()
        .filter(|v| v.is_finite() && *v > 0.0)
        .collect();
    let value = *positive.first()?;
    Some(LengthFit {
        family: fit::Family::Empirical,
        kind: DistKind::Fixed { value },
        ks_statistic: 0.0,
        accepted: true,
        n: positive.len(),
        mean: value,
        p50: value,
        p99: value,
        min: value,
        max: value,
    })
}

/// Arrivals over several files: each file's gaps are its own (files may
/// overlap or be days apart), so the rate is pooled arrivals over pooled
/// spans, the CV that of the pooled gaps, and a peak the busiest window of
/// any file.
pub fn arrivals_of_files(files: &[Vec<f64>]) -> Option<ArrivalFit> {
    let fits: Vec<ArrivalFit> = files.iter().filter_map(|f| fit::fit_arrivals(f)).collect();
    if fits.len() <= 1 {
        return fits.into_iter().next();
    }
    let mut gaps: Vec<f64> = Vec::new();
    for file in files {
        let mut ts: Vec<f64> = file.iter().copied().filter(|t| t.is_finite()).collect();
        ts.sort_by(f64::total_cmp);
        if ts.len() >= 3 && ts[ts.len() - 1] > ts[0] {
            gaps.extend(ts.windows(2).map(|w| w[1] - w[0]));
        }
    }
    let span: f64 = gaps.iter().sum();
    let mean_gap = span / gaps.len() as f64;
    let var = gaps.iter().map(|g| (g - mean_gap).powi(2)).sum::<f64>() / gaps.len() as f64;
    let cv = if mean_gap > 0.0 {
        var.sqrt() / mean_gap
    } else {
        0.0
    };
    Some(ArrivalFit {
        n: fits.iter().map(|f| f.n).sum(),
        mean_rps: gaps.len() as f64 / span,
        peak_rps_1m: fits.iter().map(|f| f.peak_rps_1m).fold(0.0, f64::max),
        peak_rps_10s: fits.iter().map(|f| f.peak_rps_10s).fold(0.0, f64::max),
        cv,
        process: fit::recommended_process(cv),
    })
}

impl Profile {
    /// What an open-loop arrival is in this profile.
    pub fn arrival_unit(&self) -> &'static str {
        if self.agent.is_some() {
            "agent tasks"
        } else if self.sessions.is_some() {
            "conversations"
        } else {
            "requests"
        }
    }

    /// Every time field that may be misread, as `path: warning`.
    pub fn warnings(&self) -> Vec<String> {
        self.sources
            .iter()
            .flat_map(|s| {
                s.times
                    .iter()
                    .filter_map(move |t| t.warning.as_ref().map(|w| format!("{}: {w}", s.path)))
            })
            .collect()
    }

    /// The profile as `capcard/profile/v1` JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "schema": SCHEMA,
            "sources": self.sources.iter().map(|s| json!({
                "path": s.path,
                "format": s.format,
                "requests": s.requests,
                "skipped": s.skipped.iter().map(|(n, why)| json!({"count": n, "why": why})).collect::<Vec<_>>(),
                "times": s.times,
            })).collect::<Vec<_>>(),
            "requests": self.requests,
            "input_tokens": self.input_tokens.as_ref().map(length_json),
            "output_tokens": self.output_tokens.as_ref().map(length_json),
            "arrival": self.arrival.as_ref().map(|a| json!({
                "unit": self.arrival_unit(),
                "n": a.n,
                "mean_rps": a.mean_rps,
                "peak_rps_1m": a.peak_rps_1m,
                "peak_rps_10s": a.peak_rps_10s,
                "cv": a.cv,
                "process": a.process,
            })),
            "prefix": self.prefix.as_ref().map(|p| json!({
                "shared_tokens": p.shared_tokens,
                "groups": p.groups,
                "hit_fraction": p.hit_fraction,
                "sharing_fraction": p.sharing_fraction,
                "distinct_prefixes": p.distinct_prefixes,
                "n": p.n,
                "source": self.prefix_source,
                "declared": p.sharing_fraction >= SHARED_PREFIX_MIN_FRACTION && p.shared_tokens > 0,
            })),
            "sessions": self.sessions.as_ref().map(|s| json!({
                "count": s.count,
                "turns": s.turns.as_ref().map(length_json),
                "think_time": s.think_time.as_ref().map(length_json),
                "think_time_excludes_answer": s.think_time_excludes_answer,
            })),
            "agent": self.agent.as_ref().map(agent_json),
            "notes": self.notes,
            "warnings": self.warnings(),
        })
    }
}

/// The agent loop in JSON: every fitted figure as a length (seconds for
/// times, tokens or counts otherwise) with how it was measured.
fn agent_json(a: &AgentProfile) -> Value {
    let fit = |f: &Option<LengthFit>| f.as_ref().map(length_json);
    json!({
        "format": a.format,
        "sessions": a.sessions,
        "calls": a.calls,
        "calls_per_task": fit(&a.calls_per_task),
        "steps": fit(&a.steps),
        "fan_out": fit(&a.fan_out),
        "tool_time": {
            "fit": fit(&a.tool_time.fit),
            "unit": "s",
            "n": a.tool_time.n,
            "cap_s": a.tool_time.cap_s,
            "cap_quantile": agent::TOOL_TIME_CAP_QUANTILE,
            "capped": a.tool_time.capped,
            "from_tool_ms": a.tool_time.from_tool_ms,
            "from_gap": a.tool_time.from_gap,
            "gap_includes_answer": a.tool_time.gap_includes_answer,
        },
        "context_growth": {
            "fit": fit(&a.context_growth.fit),
            "from_blocks": a.context_growth.from_blocks,
            "from_lengths": a.context_growth.from_lengths,
            "fresh_contexts": a.context_growth.fresh_contexts,
            "not_longer": a.context_growth.not_longer,
            "resent_fraction": a.context_growth.resent_fraction,
        },
        "initial_context": fit(&a.initial_context),
        "output_tokens": fit(&a.output_tokens),
        "reasoning_tokens": fit(&a.reasoning_tokens),
        "arrival": a.arrival.as_ref().map(|r| json!({
            "unit": "sessions",
            "n": r.n,
            "mean_rps": r.mean_rps,
            "peak_rps_1m": r.peak_rps_1m,
            "peak_rps_10s": r.peak_rps_10s,
            "cv": r.cv,
            "process": r.process,
        })),
        "reuse_potential": a.reuse.as_ref().map(|r| r.hit_fraction),
        "recorded_cache_fraction": a.recorded_cache_fraction,
        "task_e2e": {
            "fit": fit(&a.task_e2e.fit),
            "unit": "s",
            "span": a.task_e2e.span,
            "p90_s": a.task_e2e.p90_s,
        },
        "block_origin": a.block_origin,
        "block_tokens": a.block_tokens,
    })
}

/// A fitted length in JSON: the family, its parameters in the language's
/// terms, and the goodness of fit.
fn length_json(fit: &LengthFit) -> Value {
    let family = match fit.kind {
        DistKind::Fixed { .. } => json!("fixed"),
        _ => json!(fit.family),
    };
    json!({
        "family": family,
        "params": params_json(&fit.kind),
        "ks_statistic": fit.ks_statistic,
        "ks_critical": fit::KS_CRITICAL_1PCT / (fit.n as f64).sqrt(),
        "accepted": fit.accepted,
        "n": fit.n,
        "mean": fit.mean,
        "p50": fit.p50,
        "p99": fit.p99,
        "min": fit.min,
        "max": fit.max,
    })
}

fn params_json(kind: &DistKind) -> Value {
    match kind {
        DistKind::Fixed { value } => json!({"value": value}),
        DistKind::Uniform { min, max } => json!({"min": min, "max": max}),
        DistKind::Normal { mean, stddev } => json!({"mean": mean, "stddev": stddev}),
        DistKind::LogNormal { median, sigma } => json!({"median": median, "sigma": sigma}),
        DistKind::Exponential { mean } => json!({"mean": mean}),
        DistKind::Gamma { shape, scale } => json!({"shape": shape, "scale": scale}),
        DistKind::Empirical { points } => {
            json!({"points": points.iter().map(|(v, w)| json!([v, w])).collect::<Vec<_>>()})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::read::LogRecord;
    use super::*;

    fn log(records: Vec<LogRecord>) -> Log {
        Log {
            origin: "test.jsonl".to_string(),
            format: LogFormat::RequestLog,
            records,
            skipped: Vec::new(),
            times: Vec::new(),
        }
    }

    #[test]
    fn conversations_are_tasks_with_new_messages_and_think_times() {
        // Two sessions of three turns: 100-token messages, 50-token
        // answers, 1 s answers and 4 s of thought between turns.
        let mut records = Vec::new();
        for s in 0..2u32 {
            let start = f64::from(s) * 100.0;
            let mut history = 0;
            for k in 0..3u32 {
                let input = history + 100 + s;
                records.push(LogRecord {
                    timestamp_s: Some(start + f64::from(k) * 5.0),
                    input_tokens: input,
                    output_tokens: Some(50 + k),
                    session: Some(format!("s{s}")),
                    latency_s: Some(1.0),
                    ..LogRecord::default()
                });
                history = input + 50 + k;
            }
        }
        let (profile, samples) = profile(&[log(records)]);
        let sessions = profile.sessions.clone().unwrap();
        assert_eq!(sessions.count, 2);
        assert_eq!(
            sessions.turns.map(|t| t.kind),
            Some(DistKind::Fixed { value: 3.0 })
        );
        assert!(sessions.think_time_excludes_answer);
        assert!(samples.think_time_s.iter().all(|t| (t - 4.0).abs() < 1e-9));
        assert_eq!(samples.input_tokens.len(), 6);
        assert!(
            samples
                .input_tokens
                .iter()
                .all(|&x| x == 100.0 || x == 101.0)
        );
        // Arrivals are the sessions' first requests.
        assert_eq!(samples.arrivals_s, vec![vec![0.0, 100.0]]);
        assert_eq!(profile.arrival_unit(), "conversations");
    }

    #[test]
    fn arrivals_of_several_files_pool_gaps_not_the_time_between_files() {
        let a: Vec<f64> = (0..11).map(f64::from).collect(); // 1 rps
        let b: Vec<f64> = (0..11).map(|i| 1e6 + f64::from(i)).collect();
        let fit = arrivals_of_files(&[a, b]).unwrap();
        assert!((fit.mean_rps - 1.0).abs() < 1e-9);
        assert!(fit.cv < 1e-9);
        assert_eq!(fit.n, 22);
    }

    #[test]
    fn json_has_the_schema_fields() {
        let records: Vec<LogRecord> = (0..50u32)
            .map(|i| LogRecord {
                timestamp_s: Some(f64::from(i) * 0.5 + f64::from(i % 3) * 0.1),
                input_tokens: 100 + i * 7,
                output_tokens: Some(20 + i % 9),
                ..LogRecord::default()
            })
            .collect();
        let (profile, _) = profile(&[log(records)]);
        let json = profile.to_json();
        assert_eq!(json["schema"], SCHEMA);
        for key in [
            "family",
            "params",
            "ks_statistic",
            "n",
            "mean",
            "p50",
            "p99",
        ] {
            assert!(!json["input_tokens"][key].is_null(), "input_tokens.{key}");
            assert!(!json["output_tokens"][key].is_null(), "output_tokens.{key}");
        }
        for key in ["mean_rps", "peak_rps_1m", "peak_rps_10s", "cv", "process"] {
            assert!(!json["arrival"][key].is_null(), "arrival.{key}");
        }
        assert!(json["sessions"].is_null());
        assert!(json["prefix"].is_null(), "no blocks: reuse unknown");
        assert_eq!(json["sources"][0]["times"], json!([]));
        assert_eq!(json["warnings"], json!([]));
    }

    #[test]
    fn time_units_and_their_warnings_are_in_the_json_and_named_by_file() {
        let mut read = log(Vec::new());
        let stamps: Vec<f64> = (0..100).map(|i| f64::from(i) * 250.0).collect();
        read.times = vec![
            times::arrival_field("timestamp", &stamps, None),
            times::TimeField::latency("latency_ms"),
        ];
        let (profile, _) = profile(&[read]);
        let json = profile.to_json();
        let time = &json["sources"][0]["times"][0];
        assert_eq!(time["field"], "timestamp");
        assert_eq!(time["role"], "arrival");
        assert_eq!(time["unit"], "ms");
        assert_eq!(time["rule"], "relative");
        assert_eq!(time["readings"][1]["unit"], "ms");
        assert_eq!(time["readings"][1]["mean_rps"], 4.0);
        assert!(
            time["why"]
                .as_str()
                .unwrap()
                .starts_with("relative whole numbers")
        );
        assert_eq!(json["sources"][0]["times"][1]["rule"], "key");
        assert!(json["sources"][0]["times"][1]["warning"].is_null());
        let warnings = profile.warnings();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].starts_with("test.jsonl: `timestamp` names no unit"));
        assert_eq!(json["warnings"][0], warnings[0].as_str());
        assert_eq!(
            profile.sources[0].times_statement().unwrap(),
            format!(
                "{}; `latency_ms` in ms (the key ends in `_ms`)",
                profile.sources[0].times[0].statement()
            )
        );
    }
}
