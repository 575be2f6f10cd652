//! Server telemetry: scrape a Prometheus `/metrics` endpoint at a fixed
//! interval during a run and journal every scrape as one JSON line.
//!
//! Why this shape: the scrape runs beside the load as its own tokio task so a
//! slow or dead metrics endpoint can never delay a request; a failed scrape is
//! data (`ok: false` with the reason), never an error that stops the run. The
//! journal is appended and flushed per scrape, like the request journal, so a
//! crash keeps what was scraped and [`read_series`] tolerates a torn last line.
//!
//! The text exposition format is parsed here by [`parse_exposition`], a small
//! parser of our own: the crates.io candidate (`prometheus-parse` 0.2.5) reads
//! metric names as `\w+`, so it cannot parse `vllm:`/`sglang:`/`llamacpp:`
//! names with colons, and it splits label values on `,` and `=`. Histogram
//! buckets (`le` label) and summary quantiles are dropped when journaling: the
//! client measures latency distributions itself and the buckets would make up
//! most of every line; `_sum` and `_count` are kept.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// One sample of a scrape: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct PromSample {
    pub name: String,
    /// Label pairs in the order they appeared, values unescaped.
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl PromSample {
    /// The journal key: `name` or `name{k="v",...}` with labels sorted by
    /// name, so the same series has the same key in every scrape.
    pub fn key(&self) -> String {
        if self.labels.is_empty() {
            return self.name.clone();
        }
        let mut labels = self.labels.clone();
        labels.sort();
        let inner: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", escape_label_value(v)))
            .collect();
        format!("{}{{{}}}", self.name, inner.join(","))
    }
}

/// A parsed exposition: samples plus the `# TYPE` of each family.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    pub samples: Vec<PromSample>,
    /// Family name → `"gauge"`, `"counter"`, `"histogram"`, `"summary"`, `"untyped"`.
    pub types: BTreeMap<String, String>,
}

fn escape_label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Prometheus/Go float syntax: `NaN`, `+Inf`, `-Inf` besides plain numbers.
fn parse_value(s: &str) -> Option<f64> {
    match s {
        "NaN" | "nan" => Some(f64::NAN),
        "+Inf" | "Inf" | "+inf" | "inf" => Some(f64::INFINITY),
        "-Inf" | "-inf" => Some(f64::NEG_INFINITY),
        _ => s.parse().ok(),
    }
}

/// Parses `{k="v",...}` starting after the `{`; returns the labels and the
/// rest of the line after the closing `}`.
fn parse_labels(mut rest: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix('}') {
            return Some((labels, after));
        }
        let name_len = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
        if name_len == 0 {
            return None;
        }
        let name = &rest[..name_len];
        rest = rest[name_len..].trim_start().strip_prefix('=')?;
        rest = rest.trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()? {
                    (_, 'n') => value.push('\n'),
                    (_, other) => value.push(other),
                },
                (_, c) => value.push(c),
            }
        };
        labels.push((name.to_string(), value));
        rest = rest[end + 1..].trim_start();
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if !rest.starts_with('}') {
            return None;
        }
    }
}

fn parse_sample_line(line: &str) -> Option<PromSample> {
    if !line.starts_with(is_name_start) {
        return None;
    }
    let name_len = line.find(|c: char| !is_name_char(c)).unwrap_or(line.len());
    let name = &line[..name_len];
    let mut rest = &line[name_len..];
    let mut labels = Vec::new();
    if let Some(after) = rest.trim_start().strip_prefix('{') {
        let (parsed, after_labels) = parse_labels(after)?;
        labels = parsed;
        rest = after_labels;
    }
    // A value, then an optional timestamp we do not need (scrape time is ours).
    let value = parse_value(rest.split_whitespace().next()?)?;
    Some(PromSample {
        name: name.to_string(),
        labels,
        value,
    })
}

/// Parses the Prometheus text exposition format (0.0.4). Lines that do not
/// parse are skipped: one odd line from an exporter must not cost the scrape.
pub fn parse_exposition(text: &str) -> Exposition {
    let mut out = Exposition::default();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.split_whitespace();
            if words.next() == Some("TYPE")
                && let (Some(name), Some(kind)) = (words.next(), words.next())
            {
                out.types.insert(name.to_string(), kind.to_string());
            }
            continue;
        }
        if let Some(sample) = parse_sample_line(line) {
            out.samples.push(sample);
        }
    }
    out
}

/// The family a sample belongs to, by the `# TYPE` lines: `x_bucket` of a
/// histogram `x` belongs to `x`.
fn is_distribution_detail(sample: &PromSample, types: &BTreeMap<String, String>) -> bool {
    let has = |label: &str| sample.labels.iter().any(|(k, _)| k == label);
    if let Some(family) = sample.name.strip_suffix("_bucket")
        && types.get(family).map(String::as_str) == Some("histogram")
    {
        return true;
    }
    types.get(&sample.name).map(String::as_str) == Some("summary") && has("quantile")
}

/// One scrape as journaled: one line of `telemetry/<run-id>.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScrapeRecord {
    /// Milliseconds since the scraper's start instant (the run's t0 when
    /// started with [`Scraper::start_at`]), midway through the request.
    pub t_ms: f64,
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `# TYPE` of each family, written on the first successful scrape and
    /// whenever the set of families changes (not on every line).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub types: BTreeMap<String, String>,
    /// Series key (`name{labels}`) → value. Non-finite values are left out
    /// (JSON has no NaN) and so are histogram buckets and summary quantiles.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub samples: BTreeMap<String, f64>,
}

/// Every scrape of one run, in time order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TelemetrySeries {
    pub scrapes: Vec<ScrapeRecord>,
    /// Union of the `# TYPE` lines seen.
    pub types: BTreeMap<String, String>,
    /// The journal could not be written (the series in memory is complete).
    pub write_error: Option<String>,
}

impl TelemetrySeries {
    pub fn push(&mut self, scrape: ScrapeRecord) {
        for (k, v) in &scrape.types {
            self.types.insert(k.clone(), v.clone());
        }
        self.scrapes.push(scrape);
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("cannot read telemetry journal {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("telemetry journal {}, line {line}: {source}", path.display())]
    Line {
        path: PathBuf,
        line: usize,
        source: serde_json::Error,
    },
}

/// Builds the journal record of a successful scrape body.
pub fn record_from_text(t_ms: f64, text: &str) -> ScrapeRecord {
    let exposition = parse_exposition(text);
    let samples = exposition
        .samples
        .iter()
        .filter(|s| s.value.is_finite() && !is_distribution_detail(s, &exposition.types))
        .map(|s| (s.key(), s.value))
        .collect();
    ScrapeRecord {
        t_ms,
        ok: true,
        error: None,
        types: exposition.types,
        samples,
    }
}

/// Reads a telemetry journal back. A last line that does not parse is a
/// write torn by a crash and is dropped; a bad line elsewhere is an error.
pub fn read_series(path: &Path) -> Result<TelemetrySeries, TelemetryError> {
    let text = std::fs::read_to_string(path).map_err(|source| TelemetryError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    series_from_journal_text(&text).map_err(|(line, source)| TelemetryError::Line {
        path: path.to_path_buf(),
        line,
        source,
    })
}

fn series_from_journal_text(text: &str) -> Result<TelemetrySeries, (usize, serde_json::Error)> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .collect();
    let mut series = TelemetrySeries::default();
    for (i, (number, line)) in lines.iter().enumerate() {
        match serde_json::from_str::<ScrapeRecord>(line) {
            Ok(scrape) => series.push(scrape),
            Err(_) if i + 1 == lines.len() => break,
            Err(err) => return Err((number + 1, err)),
        }
    }
    Ok(series)
}

/// A running scrape loop; [`Scraper::stop`] ends it and returns the series.
#[derive(Debug)]
pub struct Scraper {
    stop_tx: oneshot::Sender<()>,
    task: JoinHandle<TelemetrySeries>,
    journal_path: PathBuf,
}

impl Scraper {
    /// Starts scraping `url` now; `t_ms` counts from this call.
    pub fn start(
        url: String,
        interval: Duration,
        journal_path: PathBuf,
        client: super::transport::HttpClient,
    ) -> Scraper {
        Self::start_at(url, interval, journal_path, client, Instant::now())
    }

    /// Starts scraping `url` with `t_ms` measured from `t0`; pass the run's
    /// t0 so scrape times share the request journal's clock and a measured
    /// window can be cut from both. The first scrape is immediate; a scrape
    /// slower than `interval` delays the next one instead of piling up.
    pub fn start_at(
        url: String,
        interval: Duration,
        journal_path: PathBuf,
        client: super::transport::HttpClient,
        t0: Instant,
    ) -> Scraper {
        let (stop_tx, stop_rx) = oneshot::channel();
        let interval = interval.max(Duration::from_millis(10));
        let path = journal_path.clone();
        let task = tokio::spawn(scrape_loop(url, interval, path, client, t0, stop_rx));
        Scraper {
            stop_tx,
            task,
            journal_path,
        }
    }

    /// Stops after one last scrape (so counters cover the end of the run)
    /// and returns everything scraped.
    pub async fn stop(self) -> TelemetrySeries {
        // The loop may already have ended; then the send has no receiver.
        let _ = self.stop_tx.send(());
        match self.task.await {
            Ok(series) => series,
            // The task panicked or was cancelled: what reached the journal
            // is still the record of the run.
            Err(join_err) => {
                read_series(&self.journal_path).unwrap_or_else(|read_err| TelemetrySeries {
                    write_error: Some(format!(
                        "scrape task failed ({join_err}); journal unreadable ({read_err})"
                    )),
                    ..TelemetrySeries::default()
                })
            }
        }
    }
}

/// Appends JSON lines, remembering the first failure instead of failing.
struct JournalWriter {
    path: PathBuf,
    file: Option<tokio::fs::File>,
    error: Option<String>,
}

impl JournalWriter {
    async fn open(path: PathBuf) -> Self {
        let opened = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .await;
        match opened {
            Ok(file) => JournalWriter {
                path,
                file: Some(file),
                error: None,
            },
            Err(err) => JournalWriter {
                error: Some(format!("cannot open {}: {err}", path.display())),
                path,
                file: None,
            },
        }
    }

    async fn append(&mut self, record: &ScrapeRecord) {
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let mut line = match serde_json::to_string(record) {
            Ok(line) => line,
            Err(err) => {
                self.error.get_or_insert_with(|| err.to_string());
                return;
            }
        };
        line.push('\n');
        let written = async {
            file.write_all(line.as_bytes()).await?;
            file.flush().await
        }
        .await;
        if let Err(err) = written {
            self.error = Some(format!("cannot write {}: {err}", self.path.display()));
            self.file = None;
        }
    }
}

async fn scrape_once(
    client: &super::transport::HttpClient,
    url: &str,
    timeout: Duration,
) -> Result<String, String> {
    let reply = client
        .with_timeout(timeout)
        .get(url)
        .await
        .map_err(|e| e.to_string())?;
    if !reply.is_success() {
        return Err(format!("HTTP {}", reply.status));
    }
    Ok(reply.text())
}

async fn scrape_loop(
    url: String,
    interval: Duration,
    journal_path: PathBuf,
    client: super::transport::HttpClient,
    t0: Instant,
    mut stop_rx: oneshot::Receiver<()>,
) -> TelemetrySeries {
    let mut writer = JournalWriter::open(journal_path).await;
    let mut series = TelemetrySeries::default();
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // A scrape may take up to one interval, but never less than a second:
    // a loaded server answers /metrics late, and a late answer is still data.
    let timeout = interval.max(Duration::from_secs(1));
    let mut last_types: Option<BTreeMap<String, String>> = None;
    let mut stopping = false;
    loop {
        if !stopping {
            tokio::select! {
                _ = ticker.tick() => {}
                _ = &mut stop_rx => stopping = true,
            }
        }
        let sent = t0.elapsed();
        let result = scrape_once(&client, &url, timeout).await;
        let t_ms = ((sent + t0.elapsed()).as_secs_f64() / 2.0) * 1000.0;
        let mut record = match result {
            Ok(text) => record_from_text(t_ms, &text),
            Err(error) => ScrapeRecord {
                t_ms,
                ok: false,
                error: Some(error),
                types: BTreeMap::new(),
                samples: BTreeMap::new(),
            },
        };
        if record.ok {
            if last_types.as_ref() == Some(&record.types) {
                record.types.clear();
            } else {
                last_types = Some(record.types.clone());
            }
        }
        writer.append(&record).await;
        series.push(record);
        if stopping {
            break;
        }
    }
    series.write_error = writer.error;
    series
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = r#"# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="sim/tiny"} 4
# TYPE vllm:request_success_total counter
vllm:request_success_total{model_name="sim/tiny",finished_reason="stop"} 12
vllm:request_success_total{finished_reason="length", model_name="sim/tiny"} 3 1700000000000
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{model_name="sim/tiny",le="0.3"} 1
vllm:e2e_request_latency_seconds_bucket{model_name="sim/tiny",le="+Inf"} 15
vllm:e2e_request_latency_seconds_sum{model_name="sim/tiny"} 7.5
vllm:e2e_request_latency_seconds_count{model_name="sim/tiny"} 15
tgi_queue_size 2
odd{label="a \"quoted\", with=comma\\"} NaN
this line is not a sample
"#;

    #[test]
    fn parses_names_with_colons_labels_and_special_values() {
        let e = parse_exposition(SAMPLE);
        assert_eq!(e.types["vllm:num_requests_running"], "gauge");
        assert_eq!(e.types["vllm:e2e_request_latency_seconds"], "histogram");
        let running = &e.samples[0];
        assert_eq!(running.name, "vllm:num_requests_running");
        assert_eq!(
            running.labels,
            vec![("model_name".into(), "sim/tiny".into())]
        );
        assert_eq!(running.value, 4.0);
        let odd = e.samples.iter().find(|s| s.name == "odd").unwrap();
        assert_eq!(odd.labels[0].1, "a \"quoted\", with=comma\\");
        assert!(odd.value.is_nan());
        let tgi = e
            .samples
            .iter()
            .find(|s| s.name == "tgi_queue_size")
            .unwrap();
        assert!(tgi.labels.is_empty());
        assert_eq!(tgi.value, 2.0);
        // "this line is not a sample" is skipped, nothing else is.
        assert_eq!(e.samples.len(), 9);
    }

    #[test]
    fn keys_sort_labels_so_series_match_across_scrapes() {
        let e = parse_exposition(SAMPLE);
        let length = e
            .samples
            .iter()
            .find(|s| s.labels.iter().any(|(_, v)| v == "length"))
            .unwrap();
        assert_eq!(
            length.key(),
            r#"vllm:request_success_total{finished_reason="length",model_name="sim/tiny"}"#
        );
    }

    #[test]
    fn records_drop_buckets_and_non_finite_values() {
        let r = record_from_text(1500.0, SAMPLE);
        assert!(r.ok);
        assert!(r.samples.keys().all(|k| !k.contains("_bucket")));
        assert!(!r.samples.keys().any(|k| k.starts_with("odd")));
        assert_eq!(
            r.samples[r#"vllm:e2e_request_latency_seconds_count{model_name="sim/tiny"}"#],
            15.0
        );
        assert_eq!(r.samples["tgi_queue_size"], 2.0);
        assert_eq!(r.samples.len(), 6);
    }

    #[test]
    fn malformed_labels_skip_only_that_line() {
        let e = parse_exposition("a{x=1} 3\nb{x=\"1\" 4\nc{x=\"1\"} 5\n");
        assert_eq!(e.samples.len(), 1);
        assert_eq!(e.samples[0].name, "c");
    }

    #[test]
    fn journal_round_trip_tolerates_a_torn_last_line() {
        let ok = record_from_text(0.0, "m 1\n");
        let failed = ScrapeRecord {
            t_ms: 1000.0,
            ok: false,
            error: Some("connection refused".into()),
            types: BTreeMap::new(),
            samples: BTreeMap::new(),
        };
        let mut text = String::new();
        for r in [&ok, &failed] {
            text.push_str(&serde_json::to_string(r).unwrap());
            text.push('\n');
        }
        text.push_str("{\"t_ms\": 2000, \"ok\": tr");
        let series = series_from_journal_text(&text).unwrap();
        assert_eq!(series.scrapes, vec![ok, failed.clone()]);

        let broken_middle = format!("not json\n{}\n", serde_json::to_string(&failed).unwrap());
        assert_eq!(series_from_journal_text(&broken_middle).unwrap_err().0, 1);
    }
}
