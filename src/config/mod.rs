//! KDL experiment file → typed, validated [`Experiment`].
//!
//! The stage is split by concern: [`units`] parses the small value languages
//! (durations, percentages, percentiles), `decode` walks the KDL document
//! and places every mistake at its span, `validate` holds the semantic rules
//! shared by files and experiments built in code, and `diag` shapes the
//! errors for miette. Every mistake in a file is collected, not just the
//! first, so one `capcard check` shows the whole list.

pub mod data;
mod decode;
mod diag;
pub use diag::did_you_mean;
pub mod model;
pub mod units;
mod validate;
pub mod write;

use std::path::Path;

pub use diag::{ConfigDiagnostic, ConfigError, ConfigWarning, Source, source_for};
pub use model::*;
pub use validate::{check_sim_knobs, validate};

/// Parse and validate an experiment from source text; `path` names the file
/// in diagnostics and gives `base_dir`.
pub fn parse(source: &str, path: &Path) -> Result<Experiment, ConfigError> {
    let named = diag::source_for(path, source);
    let origin = path.display().to_string();
    let document = match source.parse::<kdl::KdlDocument>() {
        Ok(document) => document,
        Err(err) => {
            return Err(ConfigError::Invalid {
                origin,
                diagnostics: decode::parse_error(&err, &named),
            });
        }
    };
    decode::decode(&document, &named, path).map_err(|diagnostics| ConfigError::Invalid {
        origin,
        diagnostics,
    })
}

/// [`parse`], then read the datasets and traces it names ([`data`]):
/// relative paths resolve against the experiment's directory.
pub fn parse_with_data(source: &str, path: &Path) -> Result<Experiment, ConfigError> {
    let mut experiment = parse(source, path)?;
    data::attach(&mut experiment, &diag::source_for(path, source))?;
    Ok(experiment)
}

/// Read a file and parse it, with its data files. Read errors are [`ConfigError::Read`].
pub fn load(path: &Path) -> Result<Experiment, ConfigError> {
    let source = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    parse_with_data(&source, path)
}

/// One-line summary for `capcard check`, e.g.
/// `experiments/chat.kdl: ok — experiment "support-chat": 1 target, 2 workloads, 2 SLOs, closed 8 levels, open search 0.5..64 rps`.
pub fn summary_line(path: &Path, experiment: &Experiment) -> String {
    fn count(n: usize, one: &str, many: &str) -> String {
        format!("{n} {}", if n == 1 { one } else { many })
    }
    let mut parts = vec![
        count(experiment.targets.len(), "target", "targets"),
        count(experiment.workloads.len(), "workload", "workloads"),
        count(experiment.slos.len(), "SLO", "SLOs"),
    ];
    if !experiment.mixes.is_empty() {
        parts.push(count(experiment.mixes.len(), "mix", "mixes"));
    }
    if let Some(closed) = &experiment.closed {
        parts.push(format!(
            "closed {}",
            count(closed.levels.len(), "level", "levels")
        ));
    }
    if let Some(open) = &experiment.open {
        parts.push(match &open.rates {
            RateSelection::Search { min, max, .. } => {
                format!("open search {}..{} rps", min.0, max.0)
            }
            RateSelection::Grid { rates } => {
                format!("open grid {}", count(rates.len(), "rate", "rates"))
            }
        });
    }
    if let Some(sizing) = &experiment.sizing {
        parts.push(format!(
            "sizing {}",
            count(sizing.targets.len(), "target", "targets")
        ));
    }
    format!(
        "{}: ok — experiment \"{}\": {}",
        path.display(),
        experiment.name,
        parts.join(", ")
    )
}
