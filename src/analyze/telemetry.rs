//! Server telemetry → signals (pure): maps the Prometheus metrics of vLLM,
//! SGLang, TGI and llama.cpp to common names, reduces them over a run's
//! measured window, reads the likely limit in one line and checks the
//! server's request and token counts against the client's.
//!
//! Why this shape: engines name the same thing differently and change names
//! between versions, so one table ([`SIGNAL_SOURCES`]) lists, per common
//! signal, the families that carry it, most specific first; the first one
//! present in a series wins. Gauges are averaged over the scrapes inside the
//! window; counters are differenced between values interpolated at the
//! window's edges (with counter resets undone), so a 1 s scrape interval does
//! not add a second of traffic to either end of a 60 s window.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::exec::telemetry::{ScrapeRecord, TelemetrySeries};

use super::{Card, RunSummary};

/// How a family's samples reduce to one value per scrape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reduce {
    /// Counts (requests, tokens): series add up (several engines, label sets).
    Sum,
    /// Fractions (cache usage, hit rate): series average.
    Mean,
}

/// A common signal and the engine families that carry it.
#[derive(Debug, Clone, Copy)]
pub struct SignalSource {
    pub signal: &'static str,
    /// Family names, in order of preference.
    pub families: &'static [&'static str],
    pub counter: bool,
    reduce: Reduce,
}

const fn gauge(
    signal: &'static str,
    families: &'static [&'static str],
    reduce: Reduce,
) -> SignalSource {
    SignalSource {
        signal,
        families,
        counter: false,
        reduce,
    }
}

const fn counter(signal: &'static str, families: &'static [&'static str]) -> SignalSource {
    SignalSource {
        signal,
        families,
        counter: true,
        reduce: Reduce::Sum,
    }
}

/// Every metric family capcard understands, by common signal.
pub const SIGNAL_SOURCES: &[SignalSource] = &[
    gauge(
        "requests_running",
        &[
            "vllm:num_requests_running",
            "sglang:num_running_reqs",
            "tgi_batch_current_size",
            "llamacpp:requests_processing",
        ],
        Reduce::Sum,
    ),
    gauge(
        "requests_waiting",
        &[
            "vllm:num_requests_waiting",
            "sglang:num_queue_reqs",
            "tgi_queue_size",
            "llamacpp:requests_deferred",
        ],
        Reduce::Sum,
    ),
    // All 0–1 fractions despite vLLM's "_perc" suffix.
    gauge(
        "kv_cache_usage",
        &[
            "vllm:kv_cache_usage_perc",
            "vllm:gpu_cache_usage_perc",
            "sglang:token_usage",
            "llamacpp:kv_cache_usage_ratio",
        ],
        Reduce::Mean,
    ),
    // Token-weighted hit rate from counters (vLLM v1) ...
    counter(
        "prefix_cache_hits",
        &[
            "vllm:prefix_cache_hits_total",
            "vllm:gpu_prefix_cache_hits_total",
        ],
    ),
    counter(
        "prefix_cache_queries",
        &[
            "vllm:prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_queries_total",
        ],
    ),
    // ... or the engine's own rate gauge where that is all there is.
    gauge(
        "prefix_cache_hit_rate",
        &["sglang:cache_hit_rate", "vllm:gpu_prefix_cache_hit_rate"],
        Reduce::Mean,
    ),
    counter("preemptions", &["vllm:num_preemptions_total"]),
    counter(
        "prompt_tokens",
        &[
            "vllm:prompt_tokens_total",
            "sglang:prompt_tokens_total",
            "llamacpp:prompt_tokens_total",
            "tgi_request_input_length_sum",
        ],
    ),
    counter(
        "generation_tokens",
        &[
            "vllm:generation_tokens_total",
            "sglang:generation_tokens_total",
            "llamacpp:tokens_predicted_total",
            "tgi_request_generated_tokens_sum",
        ],
    ),
    counter(
        "server_requests",
        &[
            "vllm:request_success_total",
            "sglang:num_requests_total",
            "tgi_request_success",
        ],
    ),
];

/// Relative difference within which server and client counts agree.
pub const AGREEMENT_TOLERANCE: f64 = 0.05;

/// KV-cache usage (max over the window) from which the cache counts as full.
const KV_FULL: f64 = 0.9;
/// Mean waiting requests from which the server counts as queueing.
const QUEUEING: f64 = 1.0;
/// Mean/max running from which the batch counts as flat (held at a ceiling).
const FLAT: f64 = 0.9;

/// What the server reported over one run's measured window. Every field is
/// `None` when the engine does not expose it or no scrape succeeded.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct ServerSignals {
    /// `"vllm"`, `"sglang"`, `"tgi"` or `"llamacpp"`: whose names matched.
    #[serde(default)]
    pub engine: Option<String>,
    /// Scrapes attempted inside the window, and how many failed.
    pub scrapes: u64,
    pub failed_scrapes: u64,
    #[serde(default)]
    pub requests_running_mean: Option<f64>,
    #[serde(default)]
    pub requests_running_max: Option<f64>,
    #[serde(default)]
    pub requests_waiting_mean: Option<f64>,
    #[serde(default)]
    pub requests_waiting_max: Option<f64>,
    /// Least-squares slope of waiting requests over the window: > 0 is a
    /// growing queue.
    #[serde(default)]
    pub requests_waiting_trend_per_s: Option<f64>,
    /// KV-cache usage, fraction 0–1.
    #[serde(default)]
    pub kv_cache_usage_mean: Option<f64>,
    #[serde(default)]
    pub kv_cache_usage_max: Option<f64>,
    /// Fraction 0–1 of prompt tokens served from the prefix cache.
    #[serde(default)]
    pub prefix_cache_hit_rate: Option<f64>,
    /// Prompt tokens found in the prefix cache during the window (vLLM's
    /// `prefix_cache_hits` counter's increase); `None`: not exposed.
    #[serde(default)]
    pub prefix_cache_hit_tokens: Option<f64>,
    /// Prompt tokens looked up in it (`prefix_cache_queries`' increase).
    #[serde(default)]
    pub prefix_cache_query_tokens: Option<f64>,
    /// Preemptions during the window.
    #[serde(default)]
    pub preemptions: Option<f64>,
    #[serde(default)]
    pub prompt_tokens_per_s: Option<f64>,
    #[serde(default)]
    pub generation_tokens_per_s: Option<f64>,
    /// Requests the server finished during the window.
    #[serde(default)]
    pub server_requests: Option<f64>,
    /// Output tokens the server generated during the window.
    #[serde(default)]
    pub server_generation_tokens: Option<f64>,
    /// Means of gauges capcard does not map, by series key.
    #[serde(default)]
    pub raw: BTreeMap<String, f64>,
}

impl ServerSignals {
    /// At least one scrape in the window succeeded.
    pub fn has_data(&self) -> bool {
        self.scrapes > self.failed_scrapes
    }
}

/// The family part of a series key `name{labels}`.
fn family_of(key: &str) -> &str {
    key.split_once('{').map_or(key, |(name, _)| name)
}

fn engine_of(family: &str) -> Option<&'static str> {
    [
        ("vllm:", "vllm"),
        ("sglang:", "sglang"),
        ("tgi_", "tgi"),
        ("llamacpp:", "llamacpp"),
    ]
    .into_iter()
    .find(|(prefix, _)| family.starts_with(prefix))
    .map(|(_, engine)| engine)
}

/// One value per scrape for `family`, or `None` if absent from that scrape.
fn scrape_value(scrape: &ScrapeRecord, family: &str, reduce: Reduce) -> Option<f64> {
    let values: Vec<f64> = scrape
        .samples
        .iter()
        .filter(|(k, _)| family_of(k) == family)
        .map(|(_, v)| *v)
        .collect();
    if values.is_empty() {
        return None;
    }
    let sum: f64 = values.iter().sum();
    Some(match reduce {
        Reduce::Sum => sum,
        Reduce::Mean => sum / values.len() as f64,
    })
}

/// The first family of `source` that appears in any successful scrape.
fn present_family(ok: &[&ScrapeRecord], source: &SignalSource) -> Option<&'static str> {
    source.families.iter().copied().find(|family| {
        ok.iter()
            .any(|s| s.samples.keys().any(|k| family_of(k) == *family))
    })
}

fn source(signal: &str) -> &'static SignalSource {
    SIGNAL_SOURCES
        .iter()
        .find(|s| s.signal == signal)
        .expect("every signal named in this module is in SIGNAL_SOURCES")
}

struct GaugeStats {
    mean: f64,
    max: f64,
    trend_per_s: Option<f64>,
}

fn gauge_stats(in_window: &[&ScrapeRecord], family: &str, reduce: Reduce) -> Option<GaugeStats> {
    let points: Vec<(f64, f64)> = in_window
        .iter()
        .filter_map(|s| scrape_value(s, family, reduce).map(|v| (s.t_ms, v)))
        .collect();
    if points.is_empty() {
        return None;
    }
    let n = points.len() as f64;
    let mean = points.iter().map(|p| p.1).sum::<f64>() / n;
    let max = points.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
    let t_mean = points.iter().map(|p| p.0).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - t_mean).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - t_mean) * (p.1 - mean)).sum();
    let trend_per_s = (points.len() >= 3 && sxx > 0.0).then(|| sxy / sxx * 1000.0);
    Some(GaugeStats {
        mean,
        max,
        trend_per_s,
    })
}

/// A counter's increase over `[from_ms, to_ms]` and the span actually
/// covered by scrapes. A missing series in a successful scrape counts as 0
/// (clients create labelled counters on first increment); a decrease is a
/// restart, after which counting resumes from the new value.
fn counter_delta(
    ok: &[&ScrapeRecord],
    family: &str,
    from_ms: f64,
    to_ms: f64,
) -> Option<(f64, f64)> {
    let mut points: Vec<(f64, f64)> = Vec::with_capacity(ok.len());
    let mut offset = 0.0;
    let mut previous: Option<f64> = None;
    for s in ok {
        let raw = scrape_value(s, family, Reduce::Sum).unwrap_or(0.0);
        if let Some(p) = previous
            && raw < p
        {
            offset += p;
        }
        previous = Some(raw);
        points.push((s.t_ms, raw + offset));
    }
    let (first, last) = (points.first()?.0, points.last()?.0);
    let from = from_ms.clamp(first, last);
    let to = to_ms.clamp(first, last);
    if to <= from {
        return None;
    }
    let at = |t: f64| -> f64 {
        let i = points.partition_point(|p| p.0 < t);
        match (i.checked_sub(1).map(|j| points[j]), points.get(i)) {
            (_, Some(b)) if b.0 == t => b.1,
            (Some(a), Some(b)) => a.1 + (b.1 - a.1) * (t - a.0) / (b.0 - a.0),
            (Some(a), None) => a.1,
            (None, Some(b)) => b.1,
            (None, None) => 0.0,
        }
    };
    Some((at(to) - at(from), to - from))
}

/// Reduces a run's telemetry to its measured window `[from, to]` (ms since
/// t0). `None` when no scrape was attempted inside the window.
pub fn signals(series: &TelemetrySeries, window_ms: [f64; 2]) -> Option<ServerSignals> {
    let [from, to] = window_ms;
    let in_window: Vec<&ScrapeRecord> = series
        .scrapes
        .iter()
        .filter(|s| s.t_ms >= from && s.t_ms <= to)
        .collect();
    if in_window.is_empty() {
        return None;
    }
    let mut out = ServerSignals {
        scrapes: in_window.len() as u64,
        failed_scrapes: in_window.iter().filter(|s| !s.ok).count() as u64,
        ..ServerSignals::default()
    };
    let ok_in_window: Vec<&ScrapeRecord> = in_window.iter().copied().filter(|s| s.ok).collect();
    // Counters may use the scrapes just outside the window to interpolate its edges.
    let mut ok_all: Vec<&ScrapeRecord> = series.scrapes.iter().filter(|s| s.ok).collect();
    ok_all.sort_by(|a, b| a.t_ms.total_cmp(&b.t_ms));
    if ok_in_window.is_empty() {
        return Some(out);
    }

    let mut known: Vec<&str> = Vec::new();
    let mut gauge_of = |signal: &str| -> Option<GaugeStats> {
        let src = source(signal);
        let family = present_family(&ok_in_window, src)?;
        known.push(family);
        gauge_stats(&ok_in_window, family, src.reduce)
    };
    let running = gauge_of("requests_running");
    let waiting = gauge_of("requests_waiting");
    let kv = gauge_of("kv_cache_usage");
    let hit_rate_gauge = gauge_of("prefix_cache_hit_rate");
    out.requests_running_mean = running.as_ref().map(|g| g.mean);
    out.requests_running_max = running.as_ref().map(|g| g.max);
    out.requests_waiting_mean = waiting.as_ref().map(|g| g.mean);
    out.requests_waiting_max = waiting.as_ref().map(|g| g.max);
    out.requests_waiting_trend_per_s = waiting.as_ref().and_then(|g| g.trend_per_s);
    out.kv_cache_usage_mean = kv.as_ref().map(|g| g.mean);
    out.kv_cache_usage_max = kv.as_ref().map(|g| g.max);

    let mut delta_of = |signal: &str| -> Option<(f64, f64)> {
        let family = present_family(&ok_all, source(signal))?;
        known.push(family);
        counter_delta(&ok_all, family, from, to)
    };
    let hits = delta_of("prefix_cache_hits");
    let queries = delta_of("prefix_cache_queries");
    let preemptions = delta_of("preemptions");
    let prompt = delta_of("prompt_tokens");
    let generation = delta_of("generation_tokens");
    let requests = delta_of("server_requests");
    let per_s = |d: Option<(f64, f64)>| d.map(|(v, span_ms)| v / (span_ms / 1000.0));
    out.prefix_cache_hit_rate = match (hits, queries) {
        (Some((h, _)), Some((q, _))) if q > 0.0 => Some(h / q),
        _ => hit_rate_gauge.map(|g| g.mean),
    };
    out.prefix_cache_hit_tokens = hits.map(|d| d.0);
    out.prefix_cache_query_tokens = queries.map(|d| d.0);
    out.preemptions = preemptions.map(|d| d.0);
    out.prompt_tokens_per_s = per_s(prompt);
    out.generation_tokens_per_s = per_s(generation);
    out.server_requests = requests.map(|d| d.0);
    out.server_generation_tokens = generation.map(|d| d.0);
    out.engine = known
        .first()
        .and_then(|family| engine_of(family))
        .map(str::to_string);

    // Unknown gauges, kept raw. Families a known signal uses are excluded
    // even when another name of the same signal won (both vLLM KV names).
    let all_known: Vec<&str> = SIGNAL_SOURCES
        .iter()
        .flat_map(|s| s.families.iter().copied())
        .collect();
    let mut sums: BTreeMap<&str, (f64, u32)> = BTreeMap::new();
    for s in &ok_in_window {
        for (key, value) in &s.samples {
            let family = family_of(key);
            if series.types.get(family).map(String::as_str) == Some("gauge")
                && !all_known.contains(&family)
            {
                let e = sums.entry(key.as_str()).or_default();
                e.0 += value;
                e.1 += 1;
            }
        }
    }
    out.raw = sums
        .into_iter()
        .map(|(k, (sum, n))| (k.to_string(), sum / f64::from(n)))
        .collect();
    Some(out)
}

fn count(value: f64) -> String {
    if (value - value.round()).abs() < 0.05 {
        format!("{:.0}", value)
    } else {
        format!("{value:.1}")
    }
}

/// One line on what most likely limits the server in this run, from its own
/// signals: KV capacity, a full batch, compute behind a queue, or no server
/// queue at all (then client-side latency is not queueing at the server).
pub fn likely_limit(signals: &ServerSignals, max_num_seqs_hint: Option<u32>) -> String {
    if !signals.has_data() {
        return format!(
            "no server telemetry: all {} scrapes failed",
            signals.scrapes
        );
    }
    let (Some(running), Some(waiting)) =
        (signals.requests_running_mean, signals.requests_waiting_mean)
    else {
        return "the server exposes no known running/waiting metrics: the limit cannot be read"
            .to_string();
    };
    let running_max = signals.requests_running_max.unwrap_or(running);
    let waiting_max = signals.requests_waiting_max.unwrap_or(waiting);
    let kv_max = signals.kv_cache_usage_max;
    let preemptions = signals.preemptions.unwrap_or(0.0);
    let growing = signals
        .requests_waiting_trend_per_s
        .is_some_and(|t| t > 0.1);
    let queue = if growing {
        "queue growing"
    } else {
        "queue steady"
    };
    let kv_text = kv_max.map_or(String::new(), |k| {
        format!(", KV cache {}", crate::format::pct_of_fraction(k))
    });
    let queueing = waiting >= QUEUEING;

    if let Some(kv) = kv_max
        && kv >= KV_FULL
        && (queueing || preemptions > 0.0)
    {
        return format!(
            "KV cache {}, {} waiting, {} preemptions: memory-bound by KV capacity",
            crate::format::pct_of_fraction(kv),
            count(waiting),
            count(preemptions)
        );
    }
    if let Some(n) = max_num_seqs_hint
        && running_max >= f64::from(n)
        && queueing
    {
        return format!(
            "batch full at max-num-seqs {n} (running {}, {} waiting, {queue}{kv_text}): bound by the batch-size limit",
            count(running),
            count(waiting)
        );
    }
    if queueing && running_max > 0.0 && running >= FLAT * running_max {
        return format!(
            "batch full (running flat at {}, {} waiting, {queue}{kv_text}): bound by the scheduler's batch limit",
            count(running_max),
            count(waiting)
        );
    }
    if queueing {
        return format!(
            "server queue ({} waiting, {queue}) with a batch that is neither full nor flat (running {}{kv_text}): compute-bound, likely prefill",
            count(waiting),
            count(running)
        );
    }
    if waiting_max >= 1.0 {
        return format!(
            "short server queues only (mean {} waiting, max {}; running {}{kv_text}): near the limit",
            count(waiting),
            count(waiting_max),
            count(running)
        );
    }
    format!(
        "no server queue (running {}{kv_text}): the client-side latency is compute per request, network or tokenizer, not queueing",
        count(running)
    )
}

/// Server-side counts vs what the client counted over the same window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agreement {
    pub client_requests: u64,
    pub server_requests: Option<f64>,
    /// (server − client) / client.
    pub requests_difference: Option<f64>,
    pub client_output_tokens: u64,
    pub server_output_tokens: Option<f64>,
    pub output_tokens_difference: Option<f64>,
    /// Every available difference is within [`AGREEMENT_TOLERANCE`];
    /// `None` when the server reported neither count.
    pub ok: Option<bool>,
}

fn relative(server: Option<f64>, client: u64) -> Option<f64> {
    let server = server?;
    if client == 0 {
        return (server == 0.0).then_some(0.0);
    }
    Some((server - client as f64) / client as f64)
}

pub fn agreement(
    signals: &ServerSignals,
    client_requests: u64,
    client_output_tokens: u64,
) -> Agreement {
    let requests_difference = relative(signals.server_requests, client_requests);
    let output_tokens_difference = relative(signals.server_generation_tokens, client_output_tokens);
    let diffs: Vec<f64> = [requests_difference, output_tokens_difference]
        .into_iter()
        .flatten()
        .collect();
    let reported = signals.server_requests.is_some() || signals.server_generation_tokens.is_some();
    Agreement {
        client_requests,
        server_requests: signals.server_requests,
        requests_difference,
        client_output_tokens,
        server_output_tokens: signals.server_generation_tokens,
        output_tokens_difference,
        ok: reported.then(|| {
            // A count the server reported against a client count of 0 cannot
            // be a ratio: it disagrees unless both are 0.
            diffs.len()
                == usize::from(signals.server_requests.is_some())
                    + usize::from(signals.server_generation_tokens.is_some())
                && diffs.iter().all(|d| d.abs() <= AGREEMENT_TOLERANCE)
        }),
    }
}

/// The agreement check of one run, with the client's counts from its summary.
pub fn run_agreement(run: &RunSummary) -> Option<Agreement> {
    let signals = run.server.as_ref()?;
    signals.has_data().then(|| {
        let output_tokens = (run.output_tokens_mean * run.requests as f64).round() as u64;
        agreement(signals, run.requests, output_tokens)
    })
}

fn run_label(run: &RunSummary) -> String {
    match (run.concurrency, run.rate_rps) {
        (Some(c), _) => format!("closed loop at {c} concurrent (`{}`)", run.run_id),
        (None, Some(r)) => format!("open loop at {r} /s (`{}`)", run.run_id),
        (None, None) => format!("`{}`", run.run_id),
    }
}

/// Fills `card.limits` (the likely limit at CrossP, the upper end of
/// Cr_closed and each Cr_open) and `card.telemetry_notes` (runs without
/// telemetry, failed scrapes, server/client disagreement) from the runs'
/// `server` signals. Cr_open is read at the first failing rate when there is
/// one (that is where the limit shows), else at the passing rate.
pub fn annotate_card(card: &mut Card, max_num_seqs_hint: Option<u32>) {
    let closed_at = |c: u32| card.closed.iter().find(|r| r.concurrency == Some(c));
    let open_by_id = |id: &Option<String>| {
        id.as_deref()
            .and_then(|id| card.open.iter().find(|r| r.run_id == id))
    };
    let reading = |run: Option<&RunSummary>| {
        let run = run?;
        let signals = run.server.as_ref()?;
        // In closed loop the client caps the batch: a server running about
        // all `c` requests with next to nothing waiting is not the limit,
        // whatever its batch looks like.
        if let (Some(c), Some(running), Some(waiting)) = (
            run.concurrency,
            signals.requests_running_mean,
            signals.requests_waiting_mean,
        ) && signals.has_data()
            && running >= FLAT * f64::from(c)
            && waiting < 0.1 * f64::from(c)
            && signals.preemptions.unwrap_or(0.0) == 0.0
        {
            let kv = signals.kv_cache_usage_max.map_or(String::new(), |k| {
                format!(", KV cache {}", crate::format::pct_of_fraction(k))
            });
            return Some(format!(
                "no server-side limit at {c} concurrent: it runs all {c} requests ({} waiting{kv}); \
                 the sweep's concurrency bounds the batch",
                count(waiting)
            ));
        }
        Some(likely_limit(signals, max_num_seqs_hint))
    };
    let mut limits = BTreeMap::new();
    if let Some(text) = reading(card.crossp.as_ref().and_then(|x| closed_at(x.concurrency))) {
        limits.insert("crossp".to_string(), text);
    }
    if let Some(text) = reading(card.cr_closed.as_ref().and_then(|k| closed_at(k.range[1]))) {
        limits.insert("cr_closed".to_string(), text);
    }
    for cr in &card.cr_open {
        let run = open_by_id(&cr.failed_run_id).or_else(|| open_by_id(&cr.run_id));
        if let Some(text) = reading(run) {
            limits.insert(format!("cr_open:{}", cr.slo), text);
        }
    }

    let runs: Vec<&RunSummary> = card.closed.iter().chain(&card.open).collect();
    let mut notes = Vec::new();
    if runs.iter().any(|r| r.server.is_some()) {
        let missing: Vec<String> = runs
            .iter()
            .filter(|r| !r.server.as_ref().is_some_and(ServerSignals::has_data))
            .map(|r| run_label(r))
            .collect();
        if !missing.is_empty() {
            notes.push(format!("No server telemetry for: {}.", missing.join(", ")));
        }
        for run in &runs {
            if let Some(s) = &run.server
                && s.failed_scrapes > 0
                && s.has_data()
            {
                notes.push(format!(
                    "{}: {} of {} scrapes failed; its server means come from the rest.",
                    run_label(run),
                    s.failed_scrapes,
                    s.scrapes
                ));
            }
            if let Some(a) = run_agreement(run)
                && a.ok == Some(false)
            {
                notes.push(format!(
                    "{}: server and client counts differ by more than {:.0}% (requests {} vs {}, output tokens {} vs {}, server vs client).",
                    run_label(run),
                    AGREEMENT_TOLERANCE * 100.0,
                    a.server_requests.map_or("—".to_string(), count),
                    a.client_requests,
                    a.server_output_tokens.map_or("—".to_string(), count),
                    a.client_output_tokens
                ));
            }
        }
    }
    card.limits = limits;
    card.telemetry_notes = notes;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scrape(t_ms: f64, samples: &[(&str, f64)]) -> ScrapeRecord {
        ScrapeRecord {
            t_ms,
            ok: true,
            error: None,
            types: BTreeMap::new(),
            samples: samples.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    fn failed(t_ms: f64) -> ScrapeRecord {
        ScrapeRecord {
            t_ms,
            ok: false,
            error: Some("timeout".into()),
            types: BTreeMap::new(),
            samples: BTreeMap::new(),
        }
    }

    fn series(scrapes: Vec<ScrapeRecord>) -> TelemetrySeries {
        let mut s = TelemetrySeries::default();
        for r in scrapes {
            s.push(r);
        }
        s
    }

    /// vLLM under a load that fills the KV cache: 10 scrapes 1 s apart.
    fn kv_bound() -> TelemetrySeries {
        series(
            (0..10)
                .map(|i| {
                    let t = f64::from(i) * 1000.0;
                    let i = f64::from(i);
                    scrape(
                        t,
                        &[
                            ("vllm:num_requests_running{model_name=\"m\"}", 30.0),
                            ("vllm:num_requests_waiting{model_name=\"m\"}", 10.0 + i),
                            ("vllm:kv_cache_usage_perc{model_name=\"m\"}", 0.97),
                            ("vllm:gpu_cache_usage_perc{model_name=\"m\"}", 0.97),
                            ("vllm:num_preemptions_total{model_name=\"m\"}", 5.0 * i),
                            ("vllm:prompt_tokens_total{model_name=\"m\"}", 1000.0 * i),
                            ("vllm:generation_tokens_total{model_name=\"m\"}", 500.0 * i),
                            ("vllm:prefix_cache_queries_total{model_name=\"m\"}", 1000.0 * i),
                            ("vllm:prefix_cache_hits_total{model_name=\"m\"}", 250.0 * i),
                            (
                                "vllm:request_success_total{finished_reason=\"stop\",model_name=\"m\"}",
                                4.0 * i,
                            ),
                            (
                                "vllm:request_success_total{finished_reason=\"length\",model_name=\"m\"}",
                                1.0 * i,
                            ),
                        ],
                    )
                })
                .collect(),
        )
    }

    #[test]
    fn vllm_signals_over_a_window() {
        let s = signals(&kv_bound(), [2000.0, 8000.0]).unwrap();
        assert_eq!(s.engine.as_deref(), Some("vllm"));
        assert_eq!(s.scrapes, 7);
        assert_eq!(s.failed_scrapes, 0);
        assert_eq!(s.requests_running_mean, Some(30.0));
        assert_eq!(s.requests_waiting_mean, Some(15.0));
        assert_eq!(s.requests_waiting_max, Some(18.0));
        assert!((s.requests_waiting_trend_per_s.unwrap() - 1.0).abs() < 1e-9);
        assert_eq!(s.kv_cache_usage_max, Some(0.97));
        assert_eq!(s.prefix_cache_hit_rate, Some(0.25));
        assert_eq!(s.preemptions, Some(30.0));
        assert_eq!(s.prompt_tokens_per_s, Some(1000.0));
        assert_eq!(s.generation_tokens_per_s, Some(500.0));
        assert_eq!(
            s.server_requests,
            Some(30.0),
            "both finished reasons add up"
        );
        assert_eq!(s.server_generation_tokens, Some(3000.0));
        assert!(s.raw.is_empty());
    }

    #[test]
    fn counters_interpolate_window_edges_between_scrapes() {
        // Window edges fall midway between scrapes.
        let s = signals(&kv_bound(), [2500.0, 6500.0]).unwrap();
        assert_eq!(s.server_requests, Some(20.0));
        assert_eq!(s.scrapes, 4);
    }

    #[test]
    fn counter_reset_is_undone() {
        let points = series(vec![
            scrape(0.0, &[("vllm:generation_tokens_total", 900.0)]),
            scrape(1000.0, &[("vllm:generation_tokens_total", 1000.0)]),
            // The server restarted.
            scrape(2000.0, &[("vllm:generation_tokens_total", 50.0)]),
            scrape(3000.0, &[("vllm:generation_tokens_total", 150.0)]),
        ]);
        let s = signals(&points, [0.0, 3000.0]).unwrap();
        assert_eq!(s.server_generation_tokens, Some(100.0 + 50.0 + 100.0));
    }

    #[test]
    fn failed_scrapes_are_counted_and_skipped() {
        let mut scrapes = kv_bound().scrapes;
        scrapes[3] = failed(3000.0);
        let s = signals(&series(scrapes), [2000.0, 8000.0]).unwrap();
        assert_eq!((s.scrapes, s.failed_scrapes), (7, 1));
        assert_eq!(s.server_requests, Some(30.0));

        let all_failed = series((0..3).map(|i| failed(f64::from(i) * 1000.0)).collect());
        let s = signals(&all_failed, [0.0, 2000.0]).unwrap();
        assert!(!s.has_data());
        assert_eq!(s.requests_running_mean, None);
        assert_eq!(
            likely_limit(&s, None),
            "no server telemetry: all 3 scrapes failed"
        );
        assert_eq!(signals(&all_failed, [5000.0, 9000.0]), None);
    }

    #[test]
    fn sglang_and_unknown_gauges() {
        let mut s = series(vec![
            scrape(
                0.0,
                &[
                    ("sglang:num_running_reqs", 8.0),
                    ("sglang:num_queue_reqs", 0.0),
                    ("sglang:token_usage", 0.4),
                    ("sglang:cache_hit_rate", 0.5),
                    ("sglang:generation_tokens_total", 0.0),
                    ("my_gauge{x=\"1\"}", 2.0),
                ],
            ),
            scrape(
                2000.0,
                &[
                    ("sglang:num_running_reqs", 8.0),
                    ("sglang:num_queue_reqs", 0.0),
                    ("sglang:token_usage", 0.6),
                    ("sglang:cache_hit_rate", 0.7),
                    ("sglang:generation_tokens_total", 800.0),
                    ("my_gauge{x=\"1\"}", 4.0),
                ],
            ),
        ]);
        s.types.insert("my_gauge".into(), "gauge".into());
        s.types.insert("sglang:token_usage".into(), "gauge".into());
        let sig = signals(&s, [0.0, 2000.0]).unwrap();
        assert_eq!(sig.engine.as_deref(), Some("sglang"));
        assert_eq!(sig.kv_cache_usage_mean, Some(0.5));
        assert!((sig.prefix_cache_hit_rate.unwrap() - 0.6).abs() < 1e-12);
        assert_eq!(sig.generation_tokens_per_s, Some(400.0));
        assert_eq!(sig.server_requests, None);
        assert_eq!(
            sig.raw,
            BTreeMap::from([("my_gauge{x=\"1\"}".to_string(), 3.0)])
        );
        assert_eq!(
            likely_limit(&sig, None),
            "no server queue (running 8, KV cache 60%): the client-side latency is compute per request, network or tokenizer, not queueing"
        );
    }

    fn flat(running: f64, waiting: f64, kv: f64, trend: f64) -> ServerSignals {
        ServerSignals {
            scrapes: 10,
            requests_running_mean: Some(running),
            requests_running_max: Some(running),
            requests_waiting_mean: Some(waiting),
            requests_waiting_max: Some(waiting + 2.0),
            requests_waiting_trend_per_s: Some(trend),
            kv_cache_usage_mean: Some(kv),
            kv_cache_usage_max: Some(kv),
            preemptions: Some(0.0),
            ..ServerSignals::default()
        }
    }

    #[test]
    fn limit_readings() {
        let kv = signals(&kv_bound(), [0.0, 9000.0]).unwrap();
        assert_eq!(
            likely_limit(&kv, None),
            "KV cache 97%, 14.5 waiting, 45 preemptions: memory-bound by KV capacity"
        );
        assert_eq!(
            likely_limit(&flat(256.0, 12.0, 0.5, 2.0), Some(256)),
            "batch full at max-num-seqs 256 (running 256, 12 waiting, queue growing, KV cache 50%): bound by the batch-size limit"
        );
        assert_eq!(
            likely_limit(&flat(64.0, 12.0, 0.5, 0.0), None),
            "batch full (running flat at 64, 12 waiting, queue steady, KV cache 50%): bound by the scheduler's batch limit"
        );
        let mut compute = flat(20.0, 5.0, 0.3, 0.0);
        compute.requests_running_max = Some(40.0);
        assert!(likely_limit(&compute, None).ends_with("compute-bound, likely prefill"));
        let mut idle = flat(4.0, 0.0, 0.1, 0.0);
        idle.requests_waiting_max = Some(0.0);
        assert!(likely_limit(&idle, None).starts_with("no server queue (running 4"));
        idle.requests_waiting_max = Some(3.0);
        assert!(likely_limit(&idle, None).starts_with("short server queues only"));
        let bare = ServerSignals {
            scrapes: 3,
            ..ServerSignals::default()
        };
        assert!(likely_limit(&bare, None).contains("no known running/waiting metrics"));
    }

    #[test]
    fn agreement_within_and_beyond_tolerance() {
        let s = ServerSignals {
            scrapes: 5,
            server_requests: Some(102.0),
            server_generation_tokens: Some(12_000.0),
            ..ServerSignals::default()
        };
        let a = agreement(&s, 100, 10_000);
        assert_eq!(a.requests_difference, Some(0.02));
        assert_eq!(a.output_tokens_difference, Some(0.2));
        assert_eq!(a.ok, Some(false));
        assert_eq!(agreement(&s, 100, 11_900).ok, Some(true));
        assert_eq!(agreement(&s, 0, 11_900).ok, Some(false));
        assert_eq!(agreement(&ServerSignals::default(), 100, 10).ok, None);
    }
}
