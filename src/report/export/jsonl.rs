//! JSONL: every call's record, one per line, labelled with its run.
//!
//! Each line is the journal's [`RequestRecord`] as `capcard run` wrote it
//! (the field list is in docs/results.md, "requests.jsonl"), with the run's
//! label in front: `run_id`, `target`, `workload`, `mode`, `concurrency`
//! or `rate_offered_per_s`, `repetition`, and `warmup` (scheduled before
//! the end of warmup: no card figure counts it). The journal's own `kind`
//! tag is dropped: every line is a request. Tools that ingest AIPerf's or
//! GuideLLM's per-request exports read it with a field mapping, and the ITL
//! gaps are all there (`itl_ms`), unlike in the CSV.

use std::io::{self, Write};

use serde::Serialize;

use super::RunLabel;
use crate::exec::record::RequestRecord;

/// `requests.jsonl`.
pub const REQUESTS_FILE: &str = "requests.jsonl";

#[derive(Serialize)]
struct Line<'a> {
    run_id: &'a str,
    target: &'a str,
    workload: &'a str,
    mode: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    concurrency: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rate_offered_per_s: Option<f64>,
    repetition: u32,
    warmup: bool,
    #[serde(flatten)]
    record: &'a RequestRecord,
}

/// One call of the run `label` as a line of `requests.jsonl`.
pub fn write_request(
    label: &RunLabel,
    record: &RequestRecord,
    out: &mut impl Write,
) -> io::Result<()> {
    let line = Line {
        run_id: &label.run_id,
        target: &label.target,
        workload: &label.workload,
        mode: label.mode,
        concurrency: label.concurrency,
        rate_offered_per_s: label.rate_per_s,
        repetition: label.repetition,
        warmup: label.is_warmup(record.scheduled_ms),
        record,
    };
    serde_json::to_writer(&mut *out, &line).map_err(io::Error::other)?;
    out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_is_the_record_with_its_run_in_front() {
        let label = RunLabel {
            run_id: "t--w--c0004".into(),
            target: "t".into(),
            workload: "w".into(),
            mode: "closed",
            concurrency: Some(4),
            rate_per_s: None,
            repetition: 1,
            measure_from_ms: 0.0,
            started_at: String::new(),
        };
        let record = RequestRecord::succeeded(7, 100.0, 25.0, vec![5.0, 6.0]);
        let mut out = Vec::new();
        write_request(&label, &record, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(text.ends_with('\n') && text.lines().count() == 1);
        assert!(text.starts_with(r#"{"run_id":"t--w--c0004","target":"t","workload":"w","mode":"closed","concurrency":4,"repetition":1,"warmup":false,"task":7,"#), "{text}");
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert!(value.get("rate_offered_per_s").is_none());
        assert_eq!(value["ttft_ms"], 25.0);
        assert_eq!(value["itl_ms"], serde_json::json!([5.0, 6.0]));
        // The record reads back as the journal's type: the label is extra.
        let back: RequestRecord = serde_json::from_value(value).unwrap();
        assert_eq!(back, record);
    }
}
