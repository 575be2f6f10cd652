//! Recorded arrival traces (pure): text of a trace file → [`Trace`], and its
//! arrival offsets at a speedup. The prompt of each row is the workload's
//! (`workload::trace`).
//!
//! Two layouts, detected by content:
//! - Mooncake JSONL: `{"timestamp": ms, "input_length": N, "output_length": M,
//!   "hash_ids": [...]}`. Each hash id is one KV block of `block_tokens`
//!   tokens (Mooncake publishes 512); equal ids mean equal blocks, so a block
//!   is rendered from its id alone (a unique segment keyed by the id) and two
//!   rows sharing ids send byte-identical prompt prefixes, letting a prefix
//!   cache hit exactly as in the recorded system. The last block is cut to
//!   `input_length`; input beyond the listed blocks is unique to the row.
//! - BurstGPT CSV: a header row, then rows. Columns are found by header name,
//!   leniently (case and punctuation ignored): the timestamp column is the
//!   first whose name contains `timestamp` or `time` (seconds), request
//!   tokens the first containing `request`+`token` (or `input`), response
//!   tokens the first containing `response`+`token` (or `output`). Rows with
//!   a zero response (failed requests in BurstGPT) keep one output token.
//!
//! Rows are replayed in timestamp order (a stable sort, so equal timestamps
//! keep file order). Offsets are relative to the first row and divided by
//! the speedup; the mean rate of a trace is `(rows − 1) / span`, the rate of
//! its inter-arrival gaps, so replaying at speedup `s` offers `s ×` that.

use std::time::Duration;

use serde_json::Value;

use super::dataset::DatasetError;

/// Mooncake's block size, the default of `block-tokens=`.
pub const DEFAULT_BLOCK_TOKENS: u32 = 512;

/// A parsed trace, rows in arrival order.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub rows: Vec<TraceRow>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TraceRow {
    /// Arrival time as recorded, in milliseconds (any origin).
    pub timestamp_ms: f64,
    pub input_tokens: u32,
    pub output_tokens: u32,
    /// Mooncake prefix blocks; empty for layouts without them.
    pub hash_ids: Vec<u64>,
}

/// Errors reuse the dataset error: both name the file and the first bad line.
pub type TraceError = DatasetError;

/// Parse a trace file's text; `origin` names it in errors.
pub fn parse_trace(text: &str, origin: &str) -> Result<Trace, TraceError> {
    let bad = |line: usize, message: String| DatasetError::BadRecord {
        origin: origin.to_string(),
        line,
        message,
    };
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    let mut rows = if first.trim_start().starts_with('{') {
        mooncake(text).map_err(|(line, m)| bad(line, m))?
    } else {
        csv(text).map_err(|(line, m)| bad(line, m))?
    };
    if rows.len() < 2 {
        return Err(DatasetError::Unusable {
            origin: origin.to_string(),
            message: "a trace needs at least two rows to have a rate".to_string(),
        });
    }
    rows.sort_by(|a, b| a.timestamp_ms.total_cmp(&b.timestamp_ms));
    let trace = Trace { rows };
    if trace.span_s() <= 0.0 {
        return Err(DatasetError::Unusable {
            origin: origin.to_string(),
            message: "all rows have the same timestamp, so the trace has no rate".to_string(),
        });
    }
    Ok(trace)
}

fn mooncake(text: &str) -> Result<Vec<TraceRow>, (usize, String)> {
    let mut rows = Vec::new();
    for (number, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = number + 1;
        let value: Value =
            serde_json::from_str(line).map_err(|e| (at, format!("not a JSON object: {e}")))?;
        let field = |name: &str| value.get(name).ok_or((at, format!("no `{name}`")));
        let timestamp_ms = field("timestamp")?
            .as_f64()
            .filter(|t| t.is_finite() && *t >= 0.0)
            .ok_or((
                at,
                "`timestamp` must be a non-negative number of ms".to_string(),
            ))?;
        let input_tokens = whole(field("input_length")?, "input_length").map_err(|m| (at, m))?;
        let output_tokens = whole(field("output_length")?, "output_length").map_err(|m| (at, m))?;
        let hash_ids = hash_ids(&value, at)?;
        if input_tokens == 0 {
            return Err((at, "`input_length` must be at least 1".to_string()));
        }
        rows.push(TraceRow {
            timestamp_ms,
            input_tokens,
            output_tokens: output_tokens.max(1),
            hash_ids,
        });
    }
    Ok(rows)
}

/// A record's `hash_ids` (Mooncake's, Bailian's): absent or null is none.
pub(crate) fn hash_ids(value: &Value, at: usize) -> Result<Vec<u64>, (usize, String)> {
    match value.get("hash_ids") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(ids)) => ids
            .iter()
            .map(|id| {
                id.as_u64()
                    .ok_or((at, format!("hash id {id} is not a whole number")))
            })
            .collect(),
        Some(other) => Err((at, format!("`hash_ids` must be an array, got {other}"))),
    }
}

fn whole(value: &Value, field: &str) -> Result<u32, String> {
    value
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| format!("`{field}` must be a whole number of tokens, got {value}"))
}

fn csv(text: &str) -> Result<Vec<TraceRow>, (usize, String)> {
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((header_index, header)) = lines.next() else {
        return Ok(Vec::new());
    };
    let names: Vec<String> = header
        .split(',')
        .map(|h| {
            h.chars()
                .filter(char::is_ascii_alphanumeric)
                .collect::<String>()
                .to_ascii_lowercase()
        })
        .collect();
    let find = |wanted: &[&[&str]]| {
        wanted.iter().find_map(|all| {
            names
                .iter()
                .position(|n| all.iter().all(|part| n.contains(part)))
        })
    };
    let header_error = |what: &str| {
        (
            header_index + 1,
            format!(
                "the CSV header has no {what} column (expected BurstGPT's `Timestamp`, `Request tokens`, `Response tokens`)"
            ),
        )
    };
    let time = find(&[&["timestamp"], &["time"]]).ok_or_else(|| header_error("timestamp"))?;
    let request =
        find(&[&["request", "token"], &["input"]]).ok_or_else(|| header_error("request tokens"))?;
    let response = find(&[&["response", "token"], &["output"]])
        .ok_or_else(|| header_error("response tokens"))?;
    let mut rows = Vec::new();
    for (index, line) in lines {
        let at = index + 1;
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        let cell = |column: usize, what: &str| {
            cells
                .get(column)
                .copied()
                .ok_or((at, format!("row has no {what} column")))
        };
        let seconds: f64 = cell(time, "timestamp")?
            .parse()
            .ok()
            .filter(|t: &f64| t.is_finite() && *t >= 0.0)
            .ok_or((
                at,
                "the timestamp must be a non-negative number of seconds".to_string(),
            ))?;
        let tokens = |column: usize, what: &str| -> Result<u32, (usize, String)> {
            cell(column, what)?
                .parse::<u32>()
                .map_err(|_| (at, format!("{what} must be a whole number")))
        };
        let input_tokens = tokens(request, "request tokens")?;
        let output_tokens = tokens(response, "response tokens")?;
        if input_tokens == 0 {
            return Err((at, "request tokens must be at least 1".to_string()));
        }
        rows.push(TraceRow {
            timestamp_ms: seconds * 1000.0,
            input_tokens,
            output_tokens: output_tokens.max(1),
            hash_ids: Vec::new(),
        });
    }
    Ok(rows)
}

impl Trace {
    /// Seconds from the first to the last arrival.
    pub fn span_s(&self) -> f64 {
        match (self.rows.first(), self.rows.last()) {
            (Some(a), Some(b)) => (b.timestamp_ms - a.timestamp_ms) / 1000.0,
            _ => 0.0,
        }
    }

    /// Arrivals per second when replayed at speedup 1: `(rows − 1) / span`.
    pub fn mean_rate_per_s(&self) -> f64 {
        (self.rows.len().saturating_sub(1)) as f64 / self.span_s()
    }

    /// The speedup that replays this trace at `rate_per_s` on average.
    pub fn speedup_for_rate(&self, rate_per_s: f64) -> f64 {
        rate_per_s / self.mean_rate_per_s()
    }

    /// Arrival offsets from the first row, divided by `speedup` (> 0).
    pub fn offsets(&self, speedup: f64) -> impl Iterator<Item = Duration> + Send + 'static {
        let origin = self.rows.first().map_or(0.0, |r| r.timestamp_ms);
        let offsets: Vec<Duration> = self
            .rows
            .iter()
            .map(|r| {
                Duration::from_secs_f64(((r.timestamp_ms - origin) / 1000.0 / speedup).max(0.0))
            })
            .collect();
        offsets.into_iter()
    }
}
