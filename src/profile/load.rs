//! The edge of `capcard profile`: read the log files, profile them, and
//! write the experiment, the JSON and the report where asked.

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::read::{Log, read_log};
use super::times::TimeUnit;
use super::{Profile, Samples, agent, kdl, profile, report};
use crate::data::agent_trace::{self, AgentTrace, parse_agent_trace};
use crate::data::dataset::DatasetError;

#[derive(Debug, Error, miette::Diagnostic)]
pub enum ProfileError {
    #[error("cannot read {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    #[diagnostic(help(
        "capcard profile reads Mooncake JSONL, BurstGPT CSV, request logs (one JSON object per request with a time and token counts or a prompt), ShareGPT conversations, capcard journals and agent traces (Alibaba Bailian); see \"From traffic to a capacity card\" in docs/profile.md"
    ))]
    Log(#[from] DatasetError),
    #[error("cannot write {path}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What `capcard profile` was asked for.
#[derive(Debug, Clone)]
pub struct ProfileRequest {
    pub logs: Vec<PathBuf>,
    /// Size of a Mooncake hash-id block, in tokens.
    pub block_tokens: u32,
    /// Name of the workload and experiment written.
    pub name: String,
    /// `--time-unit`: the unit of numeric timestamps, instead of the rule.
    pub time_unit: Option<TimeUnit>,
}

/// The profile and its renderings.
#[derive(Debug, Clone)]
pub struct ProfileOutput {
    pub profile: Profile,
    pub samples: Samples,
    /// The experiment file (KDL).
    pub experiment: String,
}

/// Read and profile the logs.
pub fn run(request: &ProfileRequest) -> Result<ProfileOutput, ProfileError> {
    let mut logs: Vec<Log> = Vec::with_capacity(request.logs.len());
    let mut traces: Vec<(String, AgentTrace)> = Vec::new();
    for path in &request.logs {
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
            path: path.clone(),
            source,
        })?;
        let origin = path.display().to_string();
        // Agent traces first: a Bailian trace would otherwise read as Mooncake.
        if agent_trace::detect(&text).is_some() {
            traces.push((origin.clone(), parse_agent_trace(&text, &origin)?));
        } else {
            logs.push(read_log(
                &text,
                &origin,
                request.block_tokens,
                request.time_unit,
            )?);
        }
    }
    if !traces.is_empty() && !logs.is_empty() {
        return Err(ProfileError::Log(DatasetError::Unusable {
            origin: logs[0].origin.clone(),
            message: format!(
                "is a request log, and {} an agent trace: profile agent traces apart from request logs",
                traces[0].0
            ),
        }));
    }
    let (profile, samples) = if traces.is_empty() {
        profile(&logs)
    } else {
        agent::profile_traces(&traces)
    };
    let experiment = kdl::experiment(&profile, &request.name);
    Ok(ProfileOutput {
        profile,
        samples,
        experiment,
    })
}

/// Write `contents` to `path`, creating its folder.
pub fn write(path: &Path, contents: &str) -> Result<(), ProfileError> {
    let fail = |source| ProfileError::Write {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(fail)?;
    }
    std::fs::write(path, contents).map_err(fail)
}

/// Write the report's files into `dir`; returns the markdown's path.
pub fn write_report(output: &ProfileOutput, dir: &Path) -> Result<PathBuf, ProfileError> {
    let files = report::render(&report_input(output));
    let mut markdown = dir.join("profile.md");
    for file in files {
        let path = dir.join(&file.name);
        if file.name.ends_with(".md") {
            markdown = path.clone();
        }
        write(&path, &file.contents)?;
    }
    Ok(markdown)
}

fn report_input(output: &ProfileOutput) -> report::ReportInput {
    let p = &output.profile;
    let s = &output.samples;
    let mut lengths = vec![
        series(
            "input tokens",
            "input-tokens",
            "tokens",
            &s.input_tokens,
            &p.input_tokens,
        ),
        series(
            "output tokens",
            "output-tokens",
            "tokens",
            &s.output_tokens,
            &p.output_tokens,
        ),
    ];
    if let Some(sessions) = &p.sessions {
        lengths.push(series(
            "turns per conversation",
            "turns",
            "turns",
            &s.turns,
            &sessions.turns,
        ));
        lengths.push(series(
            "think time",
            "think-time",
            "s",
            &s.think_time_s,
            &sessions.think_time,
        ));
    }
    let mut sections = Vec::new();
    if let (Some(agent), Some(a)) = (&p.agent, &s.agent) {
        lengths[0].title = "initial context (first prompt of a session)".to_string();
        lengths[1].title = "output tokens per call".to_string();
        for (title, stem, unit, values, fit) in [
            (
                "calls per task",
                "calls-per-task",
                "calls",
                &a.calls_per_task,
                &agent.calls_per_task,
            ),
            ("steps per task", "steps", "steps", &a.steps, &agent.steps),
            (
                "fan-out (calls per step)",
                "fan-out",
                "calls",
                &a.fan_out,
                &agent.fan_out,
            ),
            (
                "tool time (capped at p99)",
                "tool-time",
                "s",
                &a.tool_time_s,
                &agent.tool_time.fit,
            ),
            (
                "context growth per step",
                "context-growth",
                "tokens",
                &a.context_growth,
                &agent.context_growth.fit,
            ),
            (
                "reasoning tokens per call",
                "reasoning-tokens",
                "tokens",
                &a.reasoning_tokens,
                &agent.reasoning_tokens,
            ),
            (
                "task E2E",
                "task-e2e",
                "s",
                &a.task_e2e_s,
                &agent.task_e2e.fit,
            ),
        ] {
            if !values.is_empty() {
                lengths.push(series(title, stem, unit, values, fit));
            }
        }
        sections.push(("Agent loop".to_string(), agent_lines(agent)));
    }
    report::ReportInput {
        title: if p.agent.is_some() {
            "Agent trace profile".to_string()
        } else {
            "Traffic profile".to_string()
        },
        sources: p
            .sources
            .iter()
            .map(|src| {
                let skipped: Vec<String> = src
                    .skipped
                    .iter()
                    .map(|(n, why)| format!("{n} {why} left out"))
                    .collect();
                let mut line = format!(
                    "{} — {}, {} requests",
                    src.path,
                    src.format.label(),
                    src.requests
                );
                if !skipped.is_empty() {
                    line.push_str(&format!(" ({})", skipped.join(", ")));
                }
                if let Some(times) = src.times_statement() {
                    line.push_str(&format!("; times: {times}"));
                }
                line
            })
            .collect(),
        lengths,
        arrivals: s.arrivals_s.clone(),
        arrival_fit: p.arrival.clone(),
        sections,
        // A possible misreading of time first: every rate depends on it.
        notes: p
            .warnings()
            .into_iter()
            .map(|w| format!("**Warning**: {w}"))
            .chain(p.notes.iter().cloned())
            .collect(),
        fragment_kdl: Some(output.experiment.clone()),
    }
}

/// The agent loop's figures, one line each.
fn agent_lines(a: &super::agent::AgentProfile) -> Vec<String> {
    use crate::format::{ms, pct_of_fraction, significant};
    let counts = |f: &Option<super::fit::LengthFit>| match f {
        Some(f) => format!(
            "mean {}, p50 {}, p99 {} ({}, n = {})",
            significant(f.mean),
            significant(f.p50),
            significant(f.p99),
            f.family.label(),
            f.n
        ),
        None => "not measured".to_string(),
    };
    let seconds = |f: &Option<super::fit::LengthFit>| match f {
        Some(f) => format!(
            "mean {}, p50 {}, p99 {} ({}, n = {})",
            ms(f.mean * 1000.0),
            ms(f.p50 * 1000.0),
            ms(f.p99 * 1000.0),
            f.family.label(),
            f.n
        ),
        None => "not measured".to_string(),
    };
    let mut lines = vec![
        format!(
            "{}: {} sessions, {} calls; blocks {} ({} tokens each)",
            a.format.label(),
            a.sessions,
            a.calls,
            match a.block_origin {
                crate::data::agent_trace::BlockOrigin::Recorded => "recorded",
                crate::data::agent_trace::BlockOrigin::FromPrefixTokens =>
                    "derived from prefix tokens",
                crate::data::agent_trace::BlockOrigin::AssumedGrowingContext =>
                    "assumed from a growing context",
            },
            a.block_tokens
        ),
        format!("Calls per task: {}", counts(&a.calls_per_task)),
        format!(
            "Steps per task (the main lane's depth): {}",
            counts(&a.steps)
        ),
        format!("Fan-out (calls per step): {}", counts(&a.fan_out)),
        format!(
            "Tool time: {}; {} of {} steps above the 99th percentile ({}) capped at it",
            seconds(&a.tool_time.fit),
            a.tool_time.capped,
            a.tool_time.n,
            a.tool_time
                .cap_s
                .map_or("-".to_string(), |c| ms(c * 1000.0))
        ),
        format!(
            "Context growth per step (tokens appended): {}; {} of the measured prompts re-sent",
            counts(&a.context_growth.fit),
            a.context_growth
                .resent_fraction
                .map_or("-".to_string(), pct_of_fraction)
        ),
        format!("Initial context (tokens): {}", counts(&a.initial_context)),
        format!("Output tokens per call: {}", counts(&a.output_tokens)),
        format!(
            "Reasoning tokens per call: {}",
            if a.reasoning_tokens.is_some() {
                counts(&a.reasoning_tokens)
            } else {
                "not recorded".to_string()
            }
        ),
        format!(
            "Session arrivals: {}",
            a.arrival
                .as_ref()
                .map_or("not measured".to_string(), |r| format!(
                    "{}/s on average, gap CV {:.2}: `arrival {}`",
                    significant(r.mean_rps),
                    r.cv,
                    r.process
                ))
        ),
        format!(
            "Reuse potential (an unlimited prefix cache, calls in start order): {}",
            a.reuse
                .as_ref()
                .map_or("unknown (no blocks)".to_string(), |r| pct_of_fraction(
                    r.hit_fraction
                ))
        ),
        format!(
            "Task E2E ({}): {}{}",
            a.task_e2e.span.words(),
            seconds(&a.task_e2e.fit),
            a.task_e2e
                .p90_s
                .map_or(String::new(), |p| format!("; p90 {}", ms(p * 1000.0)))
        ),
    ];
    if let Some(c) = a.recorded_cache_fraction {
        lines.push(format!(
            "The recorded server served {} of prompt tokens from its cache",
            pct_of_fraction(c)
        ));
    }
    lines
}

fn series(
    title: &str,
    stem: &str,
    unit: &str,
    values: &[f64],
    fit: &Option<super::fit::LengthFit>,
) -> report::LengthSeries {
    report::LengthSeries {
        title: title.to_string(),
        file_stem: stem.to_string(),
        unit: unit.to_string(),
        values: values.to_vec(),
        fit: fit.clone(),
    }
}
