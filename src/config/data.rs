//! Loading the data files an experiment names (datasets, arrival traces,
//! targets' tokenizers):
//! the one place of the config stage that reads files besides the
//! experiment itself.
//!
//! Kept apart from `decode` so [`super::parse`] stays pure (tests and tools
//! parse experiments that name files they do not have), while
//! [`super::load`] — what `check`, `plan`, `run` and `report` use — reads
//! every data file once, parses it with [`crate::data::dataset`] /
//! [`crate::data::trace`], and stores the result in an `Arc` in the
//! model, so every task generator of every run shares it. A missing or
//! malformed file is a diagnostic at the path string in the experiment,
//! with the file's first bad line in the message.

use std::path::Path;
use std::sync::Arc;

use super::diag::{ConfigDiagnostic, ConfigError, Source};
use super::model::{Dist, DistKind, Experiment, RatePerS, RateSelection, Span};
use crate::data::dataset::{self, Dataset};
use crate::data::tokenizer::PromptTokenizer;
use crate::data::trace;

const TOOLS_HELP: &str = "a tools file is a JSON array of OpenAI tool definitions: [{\"type\": \"function\", \"function\": {\"name\": \"search\", \"parameters\": {...}}}]";

/// A tools file: a non-empty JSON array whose every entry names a function
/// (`function.name`, or `name` as the Responses API writes it). The array
/// as sent, and the first tool's name.
pub fn parse_tools(text: &str) -> Result<(serde_json::Value, String), String> {
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("not JSON ({e})"))?;
    let tools = value
        .as_array()
        .ok_or_else(|| "not a JSON array of tools".to_string())?;
    let mut first = None;
    for (i, tool) in tools.iter().enumerate() {
        let name = tool
            .get("function")
            .and_then(|f| f.get("name"))
            .or_else(|| tool.get("name"))
            .and_then(|n| n.as_str())
            .filter(|n| !n.is_empty())
            .ok_or_else(|| format!("tool {i} has no `function.name`"))?;
        first.get_or_insert_with(|| name.to_string());
    }
    let first = first.ok_or_else(|| "the array is empty".to_string())?;
    Ok((value, first))
}

/// Every data file `experiment` names (tools, datasets, sessions, traces,
/// tokenizers), as its model holds the path: as written in the file before
/// [`attach`], resolved after.
pub fn named_files(experiment: &Experiment) -> Vec<std::path::PathBuf> {
    let mut paths = Vec::new();
    for workload in &experiment.workloads {
        paths.extend(workload.tools.as_ref().map(|s| s.path.clone()));
        paths.extend(workload.dataset.as_ref().map(|s| s.path.clone()));
        paths.extend(workload.sessions.as_ref().map(|s| s.path.clone()));
    }
    for target in &experiment.targets {
        paths.extend(target.tokenizer.as_ref().map(|s| s.path.clone()));
    }
    if let Some(trace) = experiment.open.as_ref().and_then(|o| o.trace.as_ref()) {
        paths.push(trace.path.clone());
    }
    paths.sort();
    paths.dedup();
    paths
}

/// At most this many points describe a measured length distribution
/// (quantiles of the records), so plan.json stays small for big datasets.
const MAX_EMPIRICAL_POINTS: usize = 100;

/// Read and attach every dataset and trace `experiment` names. Relative
/// paths are resolved against the experiment's directory.
pub fn attach(experiment: &mut Experiment, source: &Source) -> Result<(), ConfigError> {
    let base = experiment.base_dir.clone().unwrap_or_else(|| ".".into());
    let mut diagnostics = Vec::new();
    let mut problem = |span: Span, message: String, help: &str| {
        let help = Some(help.to_string());
        diagnostics.push(match span {
            Some(span) => ConfigDiagnostic::at(source, span, "this file", message, help),
            None => ConfigDiagnostic::detached(message, help),
        });
    };
    for workload in &mut experiment.workloads {
        let Some(spec) = workload.tools.as_mut() else {
            continue;
        };
        spec.path = base.join(&spec.path);
        let text = match read(&spec.path) {
            Ok(text) => text,
            Err(message) => {
                problem(
                    spec.span,
                    message,
                    "tools paths are relative to the experiment file",
                );
                continue;
            }
        };
        match parse_tools(&text) {
            Ok((tools, first)) => {
                spec.loaded = Some(Arc::new(tools));
                spec.first_name = Some(first);
            }
            Err(message) => problem(
                spec.span,
                format!("tools {}: {message}", spec.path.display()),
                TOOLS_HELP,
            ),
        }
    }
    for workload in &mut experiment.workloads {
        let Some(spec) = workload.dataset.as_mut() else {
            continue;
        };
        spec.path = base.join(&spec.path);
        let text = match read(&spec.path) {
            Ok(text) => text,
            Err(message) => {
                problem(
                    spec.span,
                    message,
                    "dataset paths are relative to the experiment file",
                );
                continue;
            }
        };
        let origin = spec.path.display().to_string();
        let data = match dataset::parse_dataset(&text, &origin) {
            Ok(data) => data.filtered(spec.max_input_tokens),
            Err(e) => {
                problem(spec.span, format!("dataset {e}"), DATASET_HELP);
                continue;
            }
        };
        if data.entries.is_empty() {
            problem(
                spec.span,
                format!(
                    "dataset {origin}: no record has at most {} input tokens",
                    spec.max_input_tokens.unwrap_or(0)
                ),
                "raise `max-input-tokens`, or remove it",
            );
            continue;
        }
        if spec.output_from_data && !data.has_all_outputs() {
            problem(
                spec.span,
                format!(
                    "dataset {origin}: some records have no output length and workload `{}` has no `output-tokens`",
                    workload.name
                ),
                "add `output-tokens ...` to the workload as the length of answers the records do not give",
            );
            continue;
        }
        if spec.input_from_data {
            workload.input_tokens = measured(&data.input_lengths());
        }
        if spec.output_from_data {
            workload.output_tokens = measured(&data.output_lengths());
        }
        spec.data = Some(Arc::new(data));
    }
    for workload in &mut experiment.workloads {
        let Some(spec) = workload.sessions.as_mut() else {
            continue;
        };
        spec.path = base.join(&spec.path);
        let text = match read(&spec.path) {
            Ok(text) => text,
            Err(message) => {
                problem(
                    spec.span,
                    message,
                    "sessions paths are relative to the experiment file",
                );
                continue;
            }
        };
        let origin = spec.path.display().to_string();
        match crate::data::agent_trace::parse_agent_trace(&text, &origin) {
            Ok(trace) => {
                let calls = |f: &dyn Fn(&crate::data::agent_trace::TraceCall) -> u32| {
                    trace
                        .sessions
                        .iter()
                        .flat_map(|s| &s.calls)
                        .map(f)
                        .collect::<Vec<u32>>()
                };
                // What the card and plan say of the workload's lengths:
                // the recorded calls'.
                workload.input_tokens = measured(&calls(&|c| c.input_tokens));
                workload.output_tokens = measured(&calls(&|c| c.output_tokens));
                spec.data = Some(Arc::new(trace));
            }
            Err(e) => problem(spec.span, format!("sessions {e}"), SESSIONS_HELP),
        }
    }
    // `arrival recorded` replays the sessions' recorded start times: every
    // workload (and no mix) must bring them, with a rate to scale.
    if experiment
        .open
        .as_ref()
        .is_some_and(|o| o.arrival == super::Arrival::Recorded)
    {
        for workload in &experiment.workloads {
            match &workload.sessions {
                None => problem(
                    workload.span,
                    format!(
                        "`arrival recorded` replays recorded session start times, and workload `{}` has no `sessions`",
                        workload.name
                    ),
                    "give the workload `sessions \"trace.jsonl\"`, or use `arrival poisson` (or `constant`, `gamma cv=`): tasks then arrive at each run's rate",
                ),
                Some(spec) => {
                    if spec
                        .data
                        .as_deref()
                        .is_some_and(|t| t.session_rate_per_s().is_none())
                    {
                        problem(
                            spec.span,
                            "`arrival recorded`: these sessions have no rate to replay (one session, or all starting at once)".to_string(),
                            "use `arrival poisson` (or `constant`, `gamma cv=`): sessions then arrive at each run's rate",
                        );
                    }
                }
            }
        }
        for mix in &experiment.mixes {
            problem(
                mix.span,
                format!(
                    "mix `{}` cannot be measured with `arrival recorded`: its arrivals are drawn from its weights",
                    mix.name
                ),
                "use `arrival poisson` (or `constant`, `gamma cv=`) with the mix",
            );
        }
    }
    for target in &mut experiment.targets {
        let Some(spec) = target.tokenizer.as_mut() else {
            continue;
        };
        spec.path = base.join(&spec.path);
        match PromptTokenizer::load(&spec.path) {
            Ok(loaded) => spec.loaded = Some(Arc::new(loaded)),
            Err(e) => problem(
                spec.span,
                format!("tokenizer {e}"),
                "give the model's tokenizer.json (as shipped with it on Hugging Face); paths are relative to the experiment file",
            ),
        }
    }
    if let Some(open) = experiment.open.as_mut() {
        if let Some(spec) = open.trace.as_mut() {
            spec.path = base.join(&spec.path);
            match read(&spec.path) {
                Err(message) => problem(
                    spec.span,
                    message,
                    "trace paths are relative to the experiment file",
                ),
                Ok(text) => match trace::parse_trace(&text, &spec.path.display().to_string()) {
                    Err(e) => problem(spec.span, format!("trace {e}"), TRACE_HELP),
                    Ok(data) => {
                        if let RateSelection::Grid { rates } = &mut open.rates {
                            if rates.is_empty() {
                                let speedup = spec.speedup.unwrap_or(1.0);
                                rates.push(RatePerS(data.mean_rate_per_s() * speedup));
                            }
                        }
                        spec.data = Some(Arc::new(data));
                    }
                },
            }
        }
    }
    if diagnostics.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            origin: source.name().to_string(),
            diagnostics,
        })
    }
}

const DATASET_HELP: &str = "records are JSONL lines of {\"prompt\": ...}, {\"input_tokens\": N}, {\"messages\": [...]} (each with optional \"output_tokens\"), or a ShareGPT JSON array of {\"conversations\": [...]}";
const SESSIONS_HELP: &str = "sessions are an agent trace: Alibaba Bailian JSONL ({\"chat_id\", \"parent_chat_id\", \"timestamp\": s, \"input_length\", \"output_length\", \"hash_ids\"}), OpenTelemetry GenAI spans, a Weka/SemiAnalysis coding-agent trace or TraceLab rounds";
const TRACE_HELP: &str = "traces are Mooncake JSONL ({\"timestamp\": ms, \"input_length\": N, \"output_length\": M, \"hash_ids\": [...]}) or BurstGPT CSV (Timestamp, Request tokens, Response tokens)";

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

/// The empirical distribution of measured lengths: every value when there
/// are few, else [`MAX_EMPIRICAL_POINTS`] evenly spaced quantiles.
fn measured(values: &[u32]) -> Dist {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let picks: Vec<u32> = if sorted.len() <= MAX_EMPIRICAL_POINTS {
        sorted
    } else {
        (0..MAX_EMPIRICAL_POINTS)
            .map(|k| sorted[(k * 2 + 1) * sorted.len() / (2 * MAX_EMPIRICAL_POINTS)])
            .collect()
    };
    let mut points: Vec<(f64, f64)> = Vec::new();
    for v in picks {
        match points.last_mut() {
            Some((value, weight)) if *value == f64::from(v) => *weight += 1.0,
            _ => points.push((f64::from(v), 1.0)),
        }
    }
    Dist {
        kind: DistKind::Empirical { points },
        min: None,
        max: None,
    }
}

/// The dataset of one workload, for tools that hold only the model.
pub fn dataset_of(workload: &super::Workload) -> Option<&Dataset> {
    workload.dataset.as_ref()?.data.as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_files_name_their_functions() {
        let (tools, first) = parse_tools(r#"[{"type":"function","function":{"name":"search"}},{"type":"function","name":"open"}]"#).unwrap();
        assert_eq!(
            (tools.as_array().unwrap().len(), first.as_str()),
            (2, "search")
        );
        assert_eq!(parse_tools("[]").unwrap_err(), "the array is empty");
        assert_eq!(
            parse_tools(r#"{"tools":[]}"#).unwrap_err(),
            "not a JSON array of tools"
        );
        assert_eq!(
            parse_tools(r#"[{"type":"function"}]"#).unwrap_err(),
            "tool 0 has no `function.name`"
        );
        assert!(parse_tools("[").unwrap_err().starts_with("not JSON"));
    }

    #[test]
    fn measured_lengths_merge_duplicates_and_cap_points() {
        let dist = measured(&[3, 1, 3, 2]);
        assert_eq!(
            dist.kind,
            DistKind::Empirical {
                points: vec![(1.0, 1.0), (2.0, 1.0), (3.0, 2.0)]
            }
        );
        let many: Vec<u32> = (1..=1000).collect();
        let DistKind::Empirical { points } = measured(&many).kind else {
            unreachable!()
        };
        assert_eq!(points.len(), MAX_EMPIRICAL_POINTS);
        assert_eq!(points[0].0, 6.0);
        assert_eq!(points[99].0, 996.0);
    }
}
