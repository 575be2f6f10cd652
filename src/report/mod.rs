//! CapacityReport → bytes: `results.json`, markdown cards (minijinja) and SVG
//! charts. Writing files is the caller's job.
//!
//! Why this shape: a card is re-rendered by `capcard report` long after the
//! runs, so everything here is a pure function of the report (no clock, no
//! environment) and re-rendering is byte-identical. Templates only lay out;
//! the Rust side (`view/`: the card in `mod.rs`, its status boxes in `status.rs`, the summary in `summary.rs`) decides what each figure means, which mode
//! measured it and what to say when it is missing, so a custom template
//! cannot accidentally turn "not measured" into 0.

pub(crate) mod chart;
pub mod describe;
pub mod export;
mod fit_chart;
pub mod json_schema;
mod render;
pub mod schema;
pub mod settings_chart;
mod view;

use std::path::PathBuf;

use serde::Deserialize;

use crate::analyze::{CapacityReport, Card};

pub use chart::{Chart, charts};
pub use render::{
    CARD_TEMPLATE_NAME, SUMMARY_TEMPLATE_NAME, Templates, render_card, render_summary,
};
pub use view::{merged_details, quote};

/// The `schema` value this version reads and writes.
pub const RESULTS_SCHEMA: &str = "capcard/results/v1";

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("results.json is not valid JSON for {RESULTS_SCHEMA}: {0}")]
    Json(#[from] serde_json::Error),
    #[error("results.json has schema {found:?}; this capcard reads {RESULTS_SCHEMA:?}")]
    Schema { found: String },
    #[error("cannot read template {}: {source}", path.display())]
    TemplateRead {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A template that does not compile or fails to render; `source` names
    /// the file and line (`in PATH:LINE`).
    #[error("template {origin}: {source}")]
    Template {
        origin: String,
        source: minijinja::Error,
    },
}

/// `results.json`: pretty JSON in the model's field order, maps sorted by
/// key, with a trailing newline. Same report → same bytes.
pub fn results_json(report: &CapacityReport) -> String {
    // Serialising plain data structs and BTreeMaps into a String cannot fail
    // (no non-string map keys, no I/O); the fallback keeps the signature total.
    let mut text = serde_json::to_string_pretty(report).unwrap_or_else(|err| {
        format!(
            "{{\"schema\": {RESULTS_SCHEMA:?}, \"error\": {:?}}}",
            err.to_string()
        )
    });
    text.push('\n');
    text
}

/// Reads `results.json`, checking the schema first so a file from another
/// version says so instead of failing on a field.
pub fn parse_results_json(text: &str) -> Result<CapacityReport, ReportError> {
    #[derive(Deserialize)]
    struct SchemaOnly {
        schema: Option<String>,
    }
    let head: SchemaOnly = serde_json::from_str(text)?;
    match head.schema.as_deref() {
        Some(RESULTS_SCHEMA) => {}
        Some(other) => {
            return Err(ReportError::Schema {
                found: other.to_string(),
            });
        }
        None => {
            return Err(ReportError::Schema {
                found: "(missing)".to_string(),
            });
        }
    }
    Ok(serde_json::from_str(text)?)
}

/// `"<target>--<workload>"`, made safe as a file name: anything outside
/// `[A-Za-z0-9._-]` becomes `_` (names are free strings in the KDL file).
pub(crate) fn card_stem(card: &Card) -> String {
    format!(
        "{}--{}",
        sanitize_file_part(&card.target),
        sanitize_file_part(&card.workload)
    )
}

/// A name made safe as part of a file name: anything outside
/// `[A-Za-z0-9._-]` becomes `_`.
pub(crate) fn sanitize_file_part(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    // A name of only dots would be a path component ("..").
    if cleaned.chars().all(|c| c == '.') {
        cleaned.replace('.', "_")
    } else {
        cleaned
    }
}

/// The card's file name in the results folder: `"<target>--<workload>.md"`.
pub fn card_file_name(card: &Card) -> String {
    format!("{}.md", card_stem(card))
}

/// The summary card's file name, written when a report has more than one card.
pub const SUMMARY_FILE_NAME: &str = "summary.md";
