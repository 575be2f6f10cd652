//! A results folder in the formats other tools ingest: llm-d's Benchmark
//! Report ([`llmd`]), CSV ([`csv`]: one row per run, and one per request)
//! and JSONL ([`jsonl`]: one request per line).
//!
//! Pure converters: each takes the report and what a journal says of one
//! run, and writes into any [`std::io::Write`]; reading the folder and
//! writing files is [`crate::export`]'s. Per-request formats are written a
//! record at a time as the journal is streamed, so memory does not grow with
//! the folder.

pub mod csv;
pub mod jsonl;
pub mod llmd;

use crate::exec::record::RunHeader;

/// `capcard export --format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportFormat {
    /// llm-d Benchmark Report v0.2.1: one JSON document per run.
    Llmd,
    /// `runs.csv` (one row per run) and `requests.csv` (one row per call).
    Csv,
    /// `requests.jsonl`: every call's record, one per line.
    Jsonl,
}

impl ExportFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            ExportFormat::Llmd => "llmd",
            ExportFormat::Csv => "csv",
            ExportFormat::Jsonl => "jsonl",
        }
    }
}

/// Which run a request belongs to, as the per-request formats label every
/// row: from the journal's header.
#[derive(Debug, Clone, PartialEq)]
pub struct RunLabel {
    pub run_id: String,
    pub target: String,
    pub workload: String,
    /// `"closed"` or `"open"`.
    pub mode: &'static str,
    /// Closed loop: tasks in flight.
    pub concurrency: Option<u32>,
    /// Open loop: the offered arrival rate, tasks/s.
    pub rate_per_s: Option<f64>,
    pub repetition: u32,
    /// End of warmup, ms since the run's start: calls scheduled before it
    /// are warmup, and no card figure counts them.
    pub measure_from_ms: f64,
    /// Wall-clock start of the run, RFC 3339 UTC.
    pub started_at: String,
}

impl RunLabel {
    pub fn of(header: &RunHeader) -> RunLabel {
        use crate::plan::Load;
        let (mode, concurrency, rate_per_s) = match header.run.load {
            Load::Concurrency { concurrency } => ("closed", Some(concurrency), None),
            Load::Rate { rate, .. } => ("open", None, Some(rate.0)),
        };
        RunLabel {
            run_id: header.run.id.clone(),
            target: header.run.target.clone(),
            workload: header.run.workload.clone(),
            mode,
            concurrency,
            rate_per_s,
            repetition: header.run.repetition,
            measure_from_ms: header.measure_from_ms,
            started_at: header.started_at.clone(),
        }
    }

    /// A call scheduled before the end of warmup.
    pub fn is_warmup(&self, scheduled_ms: f64) -> bool {
        scheduled_ms < self.measure_from_ms
    }
}
