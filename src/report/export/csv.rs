//! CSV: `runs.csv`, one row per run with every figure the card's tables
//! show, and `requests.csv`, one row per call, written as the journals are
//! streamed.
//!
//! Spreadsheet-first: a header row, RFC 4180 quoting, `.` decimals, empty
//! cells for what was not measured (never 0), and every column that holds a
//! quantity says its unit in its name (`_ms`, `_per_s`, `_fraction`,
//! `_tokens`). Columns that depend on the folder (error classes seen, SLO
//! names, extra percentiles an SLO asked for) follow the fixed ones, sorted,
//! so two exports of the same folder are byte-identical.

use std::collections::BTreeSet;
use std::io::{self, Write};

use super::RunLabel;
use crate::analyze::{CapacityReport, Card, RunSummary};
use crate::exec::record::RequestRecord;
use crate::stats::LatencyStats;

/// `runs.csv` and `requests.csv`.
pub const RUNS_FILE: &str = "runs.csv";
pub const REQUESTS_FILE: &str = "requests.csv";

/// One CSV cell, quoted when it holds a separator, a quote, a line break or
/// edge spaces (RFC 4180), and with a leading `=`, `+`, `-` or `@` of text
/// kept as text: a server's error message is never a spreadsheet formula.
fn cell(text: &str) -> String {
    let formula = text.starts_with(['=', '+', '@'])
        || (text.starts_with('-') && text.parse::<f64>().is_err());
    let needs_quotes = formula
        || text.contains([',', '"', '\n', '\r'])
        || text.starts_with(' ')
        || text.ends_with(' ');
    if !needs_quotes {
        return text.to_string();
    }
    let body = text.replace('"', "\"\"");
    if formula {
        format!("\"'{body}\"")
    } else {
        format!("\"{body}\"")
    }
}

/// A number as a cell, to at most six decimals (trailing zeros dropped);
/// empty when absent or not finite.
fn num(value: Option<f64>) -> String {
    fixed(value, 6)
}

/// Milliseconds, to the microsecond: the journal's resolution. More digits
/// would be noise (an ITL gap is stored as an f32).
fn ms(value: Option<f64>) -> String {
    fixed(value, 3)
}

fn fixed(value: Option<f64>, decimals: usize) -> String {
    match value {
        Some(v) if v.is_finite() => {
            let text = format!("{v:.decimals$}");
            let text = if text.contains('.') {
                text.trim_end_matches('0').trim_end_matches('.')
            } else {
                &text
            };
            // -0.000 rounds to "-0".
            if text == "-0" {
                "0".to_string()
            } else {
                text.to_string()
            }
        }
        _ => String::new(),
    }
}

fn int(value: Option<u64>) -> String {
    value.map(|v| v.to_string()).unwrap_or_default()
}

fn flag(value: Option<bool>) -> String {
    value.map(|b| b.to_string()).unwrap_or_default()
}

fn write_row(out: &mut impl Write, cells: &[String]) -> io::Result<()> {
    let line: Vec<String> = cells.iter().map(|c| cell(c)).collect();
    out.write_all(line.join(",").as_bytes())?;
    out.write_all(b"\r\n")
}

/// The latency metrics of a run, in the card's order, with their column stem.
fn metrics(run: &RunSummary) -> [(&'static str, Option<&LatencyStats>); 7] {
    [
        ("ttft", Some(&run.ttft_ms)),
        ("ttfo", run.ttfo_ms.as_ref()),
        ("itl", Some(&run.itl_ms)),
        ("tpot", Some(&run.tpot_ms)),
        ("e2e", Some(&run.e2e_ms)),
        ("task_e2e", run.task_e2e_ms.as_ref()),
        ("schedule_lag", run.schedule_lag_ms.as_ref()),
    ]
}

const STATS: [&str; 6] = ["mean", "p50", "p90", "p95", "p99", "max"];

fn stat(stats: &LatencyStats, name: &str) -> f64 {
    match name {
        "mean" => stats.mean,
        "p50" => stats.p50,
        "p90" => stats.p90,
        "p95" => stats.p95,
        "p99" => stats.p99,
        _ => stats.max,
    }
}

/// The folder-dependent columns: error classes, extra percentiles per
/// metric, and SLO names, each sorted.
struct Dynamic {
    error_classes: BTreeSet<String>,
    /// `(metric, "p99.9")`.
    extra_percentiles: BTreeSet<(&'static str, String)>,
    slos: BTreeSet<String>,
}

fn runs_of(card: &Card) -> impl Iterator<Item = &RunSummary> {
    card.closed.iter().chain(&card.open)
}

fn dynamic(report: &CapacityReport) -> Dynamic {
    let mut d = Dynamic {
        error_classes: BTreeSet::new(),
        extra_percentiles: BTreeSet::new(),
        slos: BTreeSet::new(),
    };
    for card in &report.cards {
        d.slos.extend(card.slos.iter().map(|s| s.name.clone()));
        for run in runs_of(card) {
            d.error_classes.extend(run.errors_by_class.keys().cloned());
            for (metric, stats) in metrics(run) {
                if let Some(stats) = stats {
                    d.extra_percentiles
                        .extend(stats.extra.keys().map(|k| (metric, k.clone())));
                }
            }
            d.slos.extend(run.verdicts.iter().map(|v| v.slo.clone()));
        }
    }
    d
}

/// The fixed columns of `runs.csv`, before the metrics.
const RUN_COLUMNS: &[&str] = &[
    "target",
    "workload",
    "run_id",
    "repetition",
    "mode",
    "concurrency",
    "rate_offered_per_s",
    "arrival",
    "state",
    "state_reason",
    "invalid",
    "incomplete",
    "window_s",
    "requests",
    "errors",
    "cancelled",
    "rate_limited_calls",
    "tasks",
    "tasks_failed",
    "task_success_fraction",
    "achieved_tasks_per_s",
    "requests_per_s",
    "output_tokens_per_s",
    "total_tokens_per_s",
    "calls_in_flight_mean",
    "completed_fraction",
    "kept_up",
    "backlog_growing",
    "generator_lagging",
    "prompt_tokens_requested_mean",
    "prompt_tokens_reported_mean",
    "output_tokens_requested_mean",
    "output_tokens_mean",
    "reasoning_tokens_mean",
    "short_outputs",
    "reuse_potential_fraction",
    "reuse_realized_fraction",
    "server_prefix_cache_hit_fraction",
    "server_kv_cache_usage_mean_fraction",
    "server_requests_waiting_mean",
    "server_preemptions",
];

/// `runs.csv` of `report`: one row per run of every card, closed runs
/// first, in the card's order.
pub fn write_runs(report: &CapacityReport, out: &mut impl Write) -> io::Result<()> {
    let d = dynamic(report);
    let mut header: Vec<String> = RUN_COLUMNS.iter().map(|c| c.to_string()).collect();
    for (metric, _) in metrics(&RunSummary::default()) {
        header.push(format!("{metric}_count"));
        header.extend(STATS.iter().map(|s| format!("{metric}_{s}_ms")));
    }
    header.extend(
        d.extra_percentiles
            .iter()
            .map(|(m, p)| format!("{m}_{p}_ms")),
    );
    header.extend(d.error_classes.iter().map(|c| format!("errors_{c}")));
    for slo in &d.slos {
        header.push(format!("verdict_{slo}"));
        header.push(format!("verdict_{slo}_reasons"));
        header.push(format!("goodput_{slo}_per_s"));
    }
    write_row(out, &header)?;
    for card in &report.cards {
        for run in runs_of(card) {
            write_row(out, &run_row(card, run, &d))?;
        }
    }
    Ok(())
}

fn run_row(card: &Card, run: &RunSummary, d: &Dynamic) -> Vec<String> {
    let server = run.server.as_ref();
    let reuse = run.reuse.as_ref();
    let mut row = vec![
        card.target.clone(),
        card.workload.clone(),
        run.run_id.clone(),
        run.repetition.0.to_string(),
        run.mode.map(|m| m.as_str().to_string()).unwrap_or_default(),
        int(run.concurrency.map(u64::from)),
        num(run.rate_rps),
        if run.rate_rps.is_some() {
            card.arrival.clone().unwrap_or_default()
        } else {
            String::new()
        },
        run.state.as_str().to_string(),
        run.state_reason.clone().unwrap_or_default(),
        run.invalid.to_string(),
        run.incomplete.to_string(),
        num(Some(run.window_s)),
        run.requests.to_string(),
        run.errors.to_string(),
        run.cancelled.to_string(),
        run.rate_limited_calls.to_string(),
        run.tasks.to_string(),
        run.tasks_failed.to_string(),
        num(run.task_success_fraction),
        num(run.achieved_rps),
        num(Some(run.requests_per_s)),
        num(Some(run.output_tokens_per_s)),
        num(Some(run.total_tokens_per_s)),
        num(run.calls_in_flight_mean.or(run.mean_inflight)),
        num(run.completed_fraction),
        flag(run.kept_up),
        flag(run.backlog_growing),
        run.generator_lagging.to_string(),
        num(Some(run.prompt_tokens_requested_mean)),
        num(run.prompt_tokens_reported_mean),
        num(Some(run.output_tokens_requested_mean)),
        num(Some(run.output_tokens_mean)),
        num(run.reasoning_tokens_mean),
        run.short_outputs.to_string(),
        num(reuse.and_then(|r| r.potential)),
        num(reuse.and_then(|r| r.realized)),
        num(server.and_then(|s| s.prefix_cache_hit_rate)),
        num(server.and_then(|s| s.kv_cache_usage_mean)),
        num(server.and_then(|s| s.requests_waiting_mean)),
        num(server.and_then(|s| s.preemptions)),
    ];
    for (_, stats) in metrics(run) {
        // A metric with no sample has no figure: empty cells, not zeros.
        let stats = stats.filter(|s| s.count > 0);
        row.push(int(stats.map(|s| s.count)));
        row.extend(STATS.iter().map(|name| ms(stats.map(|s| stat(s, name)))));
    }
    for (metric, key) in &d.extra_percentiles {
        let value = metrics(run)
            .into_iter()
            .find(|(m, _)| m == metric)
            .and_then(|(_, s)| s)
            .filter(|s| s.count > 0)
            .and_then(|s| s.extra.get(key).copied());
        row.push(ms(value));
    }
    for class in &d.error_classes {
        row.push(
            run.errors_by_class
                .get(class)
                .copied()
                .unwrap_or(0)
                .to_string(),
        );
    }
    for slo in &d.slos {
        let verdict = run.verdicts.iter().find(|v| &v.slo == slo);
        row.push(
            verdict
                .map(|v| v.verdict.as_str().to_string())
                .unwrap_or_default(),
        );
        row.push(verdict.map(|v| v.reasons.join("; ")).unwrap_or_default());
        row.push(num(run.goodput_rps.get(slo).copied()));
    }
    row
}

/// The columns of `requests.csv`. Latencies are from the call's scheduled
/// time (no coordinated omission); times are ms since the run's start.
pub const REQUEST_COLUMNS: &[&str] = &[
    "run_id",
    "target",
    "workload",
    "mode",
    "concurrency",
    "rate_offered_per_s",
    "repetition",
    "warmup",
    "task",
    "call",
    "class",
    "scheduled_ms",
    "sent_ms",
    "schedule_lag_ms",
    "completed_ms",
    "ttft_ms",
    "ttfo_ms",
    "e2e_ms",
    "tpot_ms",
    "itl_mean_ms",
    "itl_max_ms",
    "prompt_tokens_requested",
    "prompt_tokens_reported",
    "cached_tokens",
    "output_tokens_requested",
    "output_tokens",
    "output_tokens_source",
    "reasoning_tokens",
    "tool_calls",
    "finish_reason",
    "error",
    "http_status",
    "error_detail",
    "retry_after_ms",
    "reconnects",
];

/// `requests.csv`, a row at a time: the header first, then
/// [`write_request`] for every call of every journal.
pub fn write_requests_header(out: &mut impl Write) -> io::Result<()> {
    let header: Vec<String> = REQUEST_COLUMNS.iter().map(|c| c.to_string()).collect();
    write_row(out, &header)
}

/// One call of the run `label` as a row of `requests.csv`.
pub fn write_request(
    label: &RunLabel,
    record: &RequestRecord,
    out: &mut impl Write,
) -> io::Result<()> {
    let itl_mean = (!record.itl_ms.is_empty()).then(|| {
        record.itl_ms.iter().map(|&g| f64::from(g)).sum::<f64>() / record.itl_ms.len() as f64
    });
    let itl_max = record.itl_ms.iter().map(|&g| f64::from(g)).reduce(f64::max);
    let row = [
        label.run_id.clone(),
        label.target.clone(),
        label.workload.clone(),
        label.mode.to_string(),
        int(label.concurrency.map(u64::from)),
        num(label.rate_per_s),
        label.repetition.to_string(),
        label.is_warmup(record.scheduled_ms).to_string(),
        record.task.to_string(),
        record.call.to_string(),
        record.class.clone().unwrap_or_default(),
        ms(Some(record.scheduled_ms)),
        ms(Some(record.sent_ms)),
        ms(Some(record.schedule_lag_ms)),
        ms(Some(record.completed_ms)),
        ms(record.ttft_ms),
        ms(record.ttfo()),
        ms(record.e2e_ms),
        ms(record.tpot_ms()),
        ms(itl_mean),
        ms(itl_max),
        record.prompt_tokens_requested.to_string(),
        int(record.prompt_tokens_reported.map(u64::from)),
        int(record.cached_tokens.map(u64::from)),
        record.output_tokens_requested.to_string(),
        record.output_tokens.to_string(),
        token_source(record),
        record.reasoning_tokens.to_string(),
        record.tool_calls.to_string(),
        record.finish_reason.clone().unwrap_or_default(),
        record
            .error
            .map(|e| e.as_str().to_string())
            .unwrap_or_default(),
        int(record.http_status.map(u64::from)),
        record.error_detail.clone().unwrap_or_default(),
        ms(record.retry_after_ms),
        record.reconnects.to_string(),
    ];
    write_row(out, &row)
}

fn token_source(record: &RequestRecord) -> String {
    // The journal's own spelling of the source (`usage`, `chunks`, ...).
    serde_json::to_value(record.output_tokens_source)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_are_quoted_as_rfc_4180_and_never_formulas() {
        assert_eq!(cell("plain"), "plain");
        assert_eq!(cell("a,b"), "\"a,b\"");
        assert_eq!(cell("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(cell("two\nlines"), "\"two\nlines\"");
        assert_eq!(cell("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(cell("-1.5"), "-1.5", "a negative number stays a number");
        assert_eq!(cell("-oops"), "\"'-oops\"");
    }

    #[test]
    fn numbers_are_shortest_and_absent_is_empty_not_zero() {
        assert_eq!(num(Some(3.0)), "3");
        assert_eq!(num(Some(0.125)), "0.125");
        assert_eq!(num(Some(139.4516129032258)), "139.451613");
        assert_eq!(ms(Some(f64::from(82.376_f32))), "82.376");
        assert_eq!(ms(Some(-0.0001)), "0");
        assert_eq!(num(None), "");
        assert_eq!(num(Some(f64::NAN)), "");
        assert_eq!(int(None), "");
    }

    fn fixture() -> CapacityReport {
        crate::report::parse_results_json(include_str!(
            "../../../tests/data/export-fixture/results.json"
        ))
        .expect("the fixture parses")
    }

    #[test]
    fn runs_csv_has_a_row_per_run_and_a_column_per_figure() {
        let report = fixture();
        let mut out = Vec::new();
        write_runs(&report, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let rows: Vec<&str> = text.split("\r\n").filter(|l| !l.is_empty()).collect();
        let runs: usize = report
            .cards
            .iter()
            .map(|c| c.closed.len() + c.open.len())
            .sum();
        assert_eq!(rows.len(), runs + 1);
        let header: Vec<&str> = rows[0].split(',').collect();
        for column in [
            "ttft_p50_ms",
            "e2e_p99_ms",
            "schedule_lag_p99_ms",
            "verdict_interactive",
            "verdict_batch",
            "goodput_interactive_per_s",
            "rate_offered_per_s",
        ] {
            assert!(header.contains(&column), "{column} missing from {header:?}");
        }
        // Every row has as many cells as the header (no cell holds a comma
        // unquoted, and the fixture's reasons do).
        let width = header.len();
        for row in &rows[1..] {
            assert_eq!(split_csv(row).len(), width, "{row}");
        }
        // A closed run has no rate, no verdict and no schedule lag: empty cells.
        let closed = split_csv(rows[1]);
        let at = |name: &str| header.iter().position(|c| *c == name).unwrap();
        assert_eq!(closed[at("mode")], "closed");
        assert_eq!(closed[at("rate_offered_per_s")], "");
        assert_eq!(closed[at("verdict_interactive")], "");
        assert_eq!(closed[at("schedule_lag_p99_ms")], "");
        let open = split_csv(rows.last().unwrap());
        assert_eq!(open[at("mode")], "open");
        assert!(open[at("rate_offered_per_s")].parse::<f64>().unwrap() > 0.0);
        assert!(
            ["pass", "fail", "inconclusive"].contains(&open[at("verdict_interactive")].as_str())
        );
    }

    /// Splits one CSV line of quoted cells (no line breaks inside, as in the fixture).
    fn split_csv(line: &str) -> Vec<String> {
        let mut cells = vec![String::new()];
        let mut quoted = false;
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    chars.next();
                    cells.last_mut().unwrap().push('"');
                }
                ('"', _) => quoted = !quoted,
                (',', false) => cells.push(String::new()),
                (c, _) => cells.last_mut().unwrap().push(c),
            }
        }
        cells
    }

    #[test]
    fn a_request_row_matches_the_header_and_keeps_absent_as_empty() {
        let header = RunLabel {
            run_id: "t--w--r2.000".into(),
            target: "t".into(),
            workload: "w".into(),
            mode: "open",
            concurrency: None,
            rate_per_s: Some(2.0),
            repetition: 1,
            measure_from_ms: 1000.0,
            started_at: "2026-12-04T00:00:00Z".into(),
        };
        let ok = RequestRecord::succeeded(0, 1500.0, 40.0, vec![10.0, 20.0]);
        let failed = RequestRecord {
            http_status: Some(503),
            error_detail: Some("overloaded, retry".into()),
            ..RequestRecord::failed(1, 500.0, 900.0, crate::exec::record::ErrorClass::Overloaded)
        };
        let mut out = Vec::new();
        write_requests_header(&mut out).unwrap();
        write_request(&header, &ok, &mut out).unwrap();
        write_request(&header, &failed, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let rows: Vec<Vec<String>> = text
            .split("\r\n")
            .filter(|l| !l.is_empty())
            .map(split_csv)
            .collect();
        let at = |name: &str| REQUEST_COLUMNS.iter().position(|c| *c == name).unwrap();
        assert!(rows.iter().all(|r| r.len() == REQUEST_COLUMNS.len()));
        assert_eq!(rows[1][at("ttft_ms")], "40");
        assert_eq!(rows[1][at("itl_mean_ms")], "15");
        assert_eq!(rows[1][at("warmup")], "false");
        assert_eq!(rows[2][at("warmup")], "true");
        assert_eq!(
            rows[2][at("ttft_ms")],
            "",
            "a failed call has no TTFT, not 0"
        );
        assert_eq!(rows[2][at("http_status")], "503");
        assert_eq!(rows[2][at("error_detail")], "overloaded, retry");
    }
}
