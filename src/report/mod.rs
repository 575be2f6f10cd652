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
pub mod html;
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

/// The `schema` value this version writes (set where the report is built).
pub use crate::analyze::card::RESULTS_SCHEMA;

/// The version every capcard wrote before the schema was published. It
/// still reads: see [`read_results_json`].
pub const RESULTS_SCHEMA_V1: &str = "capcard/results/v1";

/// Every `schema` value this capcard reads, oldest first.
pub const READABLE_SCHEMAS: &[&str] = &[RESULTS_SCHEMA_V1, RESULTS_SCHEMA];

#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("results.json is not valid JSON for {RESULTS_SCHEMA}: {0}")]
    Json(#[from] serde_json::Error),
    #[error(
        "results.json has schema {found:?}; this capcard reads {}",
        READABLE_SCHEMAS.join(" and ")
    )]
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

/// A `results.json` as read: the report, the version the file says it is,
/// and what it lacks against the version this capcard writes.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedResults {
    pub report: CapacityReport,
    /// The file's `schema`, one of [`READABLE_SCHEMAS`].
    pub schema_version: String,
    /// The fields the schema of [`RESULTS_SCHEMA`] requires that the file
    /// does not have, as paths with array indices collapsed
    /// (`cards[].reuse`, `cards[].open[].state`), sorted, each once. The
    /// report holds them as their empty value (`null`, `[]`, `0`, the
    /// default state), which for a v1 file may not be what was measured:
    /// v1 left a field out both when it was empty and when the capcard that
    /// wrote it did not have it yet. Empty for a file this capcard wrote.
    pub lacks: Vec<String>,
}

/// Reads `results.json` of any version in [`READABLE_SCHEMAS`], checking
/// the schema first so a file from another version says so instead of
/// failing on a field.
///
/// Why v1 reads and what `lacks` is for: v1, unpublished, omitted a field
/// when it was empty (`skip_serializing_if`), so a reader could not tell
/// "nothing" from "not known to the writer". v2 is the first published
/// schema (`docs/results.schema.json`): the report, its cards and runs and
/// the small objects they hold write every field, `null` / `[]` / `{}`
/// where there is nothing, and every field is `required`. The types are
/// the same in both (v2 only adds what v1 omitted), so one deserializer
/// reads both, with serde's defaults standing for an omitted field; the
/// fields a v1 file omitted are the `required` properties the v2 schema
/// finds missing, which the strict validator ([`json_schema`]) reports with
/// their place.
pub fn read_results_json(text: &str) -> Result<ParsedResults, ReportError> {
    #[derive(Deserialize)]
    struct SchemaOnly {
        schema: Option<String>,
    }
    let head: SchemaOnly = serde_json::from_str(text)?;
    let schema_version = match head.schema {
        Some(found) if READABLE_SCHEMAS.contains(&found.as_str()) => found,
        Some(found) => return Err(ReportError::Schema { found }),
        None => {
            return Err(ReportError::Schema {
                found: "(missing)".to_string(),
            });
        }
    };
    let document: serde_json::Value = serde_json::from_str(text)?;
    let lacks = schema::missing_fields(&document);
    let mut report: CapacityReport = serde_json::from_value(document)?;
    // The report as read is this version's model (v1's omitted fields at
    // their empty value): written again, it is a file of this version.
    report.schema = RESULTS_SCHEMA.to_string();
    Ok(ParsedResults {
        report,
        schema_version,
        lacks,
    })
}

/// [`read_results_json`]'s report alone, for callers that recompute or only
/// compare figures.
pub fn parse_results_json(text: &str) -> Result<CapacityReport, ReportError> {
    read_results_json(text).map(|parsed| parsed.report)
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
