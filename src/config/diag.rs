//! The errors of the config stage, shaped for miette: one [`ConfigError`] per
//! file that carries *every* [`ConfigDiagnostic`] found in it, each with the
//! file as named source, labelled spans and a help line.
//!
//! Diagnostics of experiments built in code have no source and no spans; the
//! same types serve both so callers handle one error type.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use miette::{Diagnostic, LabeledSpan, NamedSource, SourceSpan};
use thiserror::Error;

/// The source text of one experiment file, shared by all its diagnostics.
pub type Source = NamedSource<Arc<str>>;

/// One problem in an experiment: what is wrong, where, and how to fix it.
#[derive(Debug, Clone, Error, Diagnostic)]
#[error("{message}")]
pub struct ConfigDiagnostic {
    message: String,
    #[source_code]
    source_code: Option<Source>,
    #[label(collection)]
    labels: Vec<LabeledSpan>,
    #[help]
    help: Option<String>,
}

impl ConfigDiagnostic {
    /// A diagnostic without a place in a file (experiments built in code).
    pub fn detached(message: impl Into<String>, help: Option<String>) -> Self {
        ConfigDiagnostic {
            message: message.into(),
            source_code: None,
            labels: Vec::new(),
            help,
        }
    }

    /// A diagnostic pointing at `span` of `source`, with `label` under it.
    pub fn at(
        source: &Source,
        span: SourceSpan,
        label: impl Into<String>,
        message: impl Into<String>,
        help: Option<String>,
    ) -> Self {
        ConfigDiagnostic {
            message: message.into(),
            source_code: Some(source.clone()),
            labels: vec![LabeledSpan::new_primary_with_span(Some(label.into()), span)],
            help,
        }
    }

    /// Adds a secondary label (e.g. "first defined here").
    pub fn with_label(mut self, span: SourceSpan, label: impl Into<String>) -> Self {
        self.labels
            .push(LabeledSpan::new_with_span(Some(label.into()), span));
        self
    }

    pub fn message(&self) -> &str {
        &self.message
    }

    pub fn help_text(&self) -> Option<&str> {
        self.help.as_deref()
    }

    /// Byte offset of the primary label, if the diagnostic points into a file.
    pub fn offset(&self) -> Option<usize> {
        self.labels.iter().find(|l| l.primary()).map(|l| l.offset())
    }
}

/// Something in a valid experiment that will not measure what it seems to
/// (a workload beyond its target's context window): shown by `check` as a
/// miette warning at its span; the file still loads.
#[derive(Debug, Clone, Error, Diagnostic)]
#[error("{message}")]
#[diagnostic(severity(Warning))]
pub struct ConfigWarning {
    message: String,
    #[source_code]
    source_code: Option<Source>,
    #[label(collection)]
    labels: Vec<LabeledSpan>,
    #[help]
    help: Option<String>,
}

impl ConfigWarning {
    /// A warning pointing at `span` of `source` when both are known.
    pub fn new(
        source: Option<&Source>,
        span: Option<SourceSpan>,
        label: impl Into<String>,
        message: impl Into<String>,
        help: Option<String>,
    ) -> Self {
        let labels = match (source, span) {
            (Some(_), Some(span)) => {
                vec![LabeledSpan::new_primary_with_span(Some(label.into()), span)]
            }
            _ => Vec::new(),
        };
        ConfigWarning {
            message: message.into(),
            source_code: source.cloned(),
            labels,
            help,
        }
    }

    /// Adds a secondary label when the span is known.
    pub fn with_label(mut self, span: Option<SourceSpan>, label: impl Into<String>) -> Self {
        if let (Some(span), Some(_)) = (span, &self.source_code) {
            self.labels
                .push(LabeledSpan::new_with_span(Some(label.into()), span));
        }
        self
    }

    pub fn message(&self) -> &str {
        &self.message
    }
}

/// Why an experiment could not be loaded.
#[derive(Debug, Error, Diagnostic)]
pub enum ConfigError {
    /// The file could not be read at all.
    #[error("cannot read experiment file {}: {source}", path.display())]
    #[diagnostic(help(
        "check the path; experiment files are KDL text files, e.g. experiments/quickstart.kdl"
    ))]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file was read but has mistakes; all of them are in `diagnostics`.
    #[error("{} in {origin}", count_errors(diagnostics.len()))]
    Invalid {
        /// The file path, or `experiment "name"` for experiments built in code.
        origin: String,
        #[related]
        diagnostics: Vec<ConfigDiagnostic>,
    },
}

impl ConfigError {
    /// Every diagnostic carried (none for read errors).
    pub fn diagnostics(&self) -> &[ConfigDiagnostic] {
        match self {
            ConfigError::Read { .. } => &[],
            ConfigError::Invalid { diagnostics, .. } => diagnostics,
        }
    }
}

fn count_errors(n: usize) -> String {
    if n == 1 {
        "1 error".to_string()
    } else {
        format!("{n} errors")
    }
}

/// The source handle for a file's text, named by its path as the user gave it.
pub fn source_for(path: &Path, text: &str) -> Source {
    NamedSource::new(path.display().to_string(), Arc::from(text)).with_language("kdl")
}

/// The closest of `candidates` to `input`, if it is near enough to be a typo
/// (Jaro-Winkler ≥ 0.8, which catches `concurency` and `ttf` but not
/// unrelated words). On a tie the earlier candidate wins: lists put the
/// common name first (`ttf` is `ttft`, not `ttfo`).
pub fn did_you_mean<'c>(input: &str, candidates: &[&'c str]) -> Option<&'c str> {
    let mut best: Option<(f64, &'c str)> = None;
    for candidate in candidates {
        let score = strsim::jaro_winkler(input, candidate);
        if score >= 0.8 && best.is_none_or(|(top, _)| score > top) {
            best = Some((score, candidate));
        }
    }
    best.map(|(_, c)| c)
}

/// The help line for an unknown name: the near miss if there is one, the list
/// of valid names otherwise.
pub fn suggestion_help(input: &str, candidates: &[&str]) -> String {
    match did_you_mean(input, candidates) {
        Some(near) => format!("did you mean `{near}`?"),
        None => format!("expected one of: {}", backticked(candidates)),
    }
}

/// `a`, `b`, `c` → "`a`, `b`, `c`".
pub fn backticked(names: &[&str]) -> String {
    names
        .iter()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn near_misses_are_suggested() {
        let closed = [
            "concurrency",
            "duration",
            "requests",
            "warmup",
            "crossp",
            "knee",
        ];
        assert_eq!(did_you_mean("concurency", &closed), Some("concurrency"));
        assert_eq!(did_you_mean("warmpu", &closed), Some("warmup"));
        let metrics = [
            "ttft",
            "ttfo",
            "itl",
            "tpot",
            "e2e",
            "task-e2e",
            "error-rate",
        ];
        // `ttf` is as near `ttfo` as `ttft`: the first listed wins.
        assert_eq!(did_you_mean("ttf", &metrics), Some("ttft"));
        assert_eq!(did_you_mean("erorr-rate", &metrics), Some("error-rate"));
    }

    #[test]
    fn unrelated_words_are_not_suggested() {
        let closed = [
            "concurrency",
            "duration",
            "requests",
            "warmup",
            "crossp",
            "knee",
        ];
        assert_eq!(did_you_mean("banana", &closed), None);
        assert_eq!(
            suggestion_help("banana", &["a", "b"]),
            "expected one of: `a`, `b`",
        );
        assert_eq!(
            suggestion_help("concurency", &closed),
            "did you mean `concurrency`?"
        );
    }

    #[test]
    fn error_counts_read_naturally() {
        let one = ConfigError::Invalid {
            origin: "x.kdl".into(),
            diagnostics: vec![ConfigDiagnostic::detached("a", None)],
        };
        assert_eq!(one.to_string(), "1 error in x.kdl");
        let two = ConfigError::Invalid {
            origin: "x.kdl".into(),
            diagnostics: vec![ConfigDiagnostic::detached("a", None); 2],
        };
        assert_eq!(two.to_string(), "2 errors in x.kdl");
        assert_eq!(two.diagnostics().len(), 2);
    }
}
