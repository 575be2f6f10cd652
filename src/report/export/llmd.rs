//! llm-d's Benchmark Report v0.2.1 (placeholder: filled in by the llmd work).

use crate::analyze::{CapacityReport, Card, RunSummary};
use crate::exec::record::Journal;

/// The Benchmark Report version written.
pub const VERSION: &str = "0.2.1";

/// The report's file name for a run.
pub fn file_name(run_id: &str) -> String {
    format!(
        "benchmark_report_{}.json",
        crate::report::sanitize_file_part(run_id)
    )
}

/// One run as a Benchmark Report document. `ends` is the run's journal
/// header and footer (no records), when its journal is in the folder.
pub fn benchmark_report(
    _report: &CapacityReport,
    _card: &Card,
    _run: &RunSummary,
    _ends: Option<&Journal>,
) -> serde_json::Value {
    serde_json::json!({ "version": VERSION })
}
