//! The edge of `capcard profile`: read the log files, profile them, and
//! write the experiment, the JSON and the report where asked.

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::read::{Log, read_log};
use super::times::TimeUnit;
use super::{Profile, Samples, kdl, profile, report};
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
        "capcard profile reads Mooncake JSONL, BurstGPT CSV, request logs (one JSON object per request with a time and token counts or a prompt), ShareGPT conversations and capcard journals; see \"From traffic to a capacity card\" in docs/profile.md"
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
    for path in &request.logs {
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
            path: path.clone(),
            source,
        })?;
        logs.push(read_log(
            &text,
            &path.display().to_string(),
            request.block_tokens,
            request.time_unit,
        )?);
    }
    let (profile, samples) = profile(&logs);
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
    report::ReportInput {
        title: "Traffic profile".to_string(),
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
