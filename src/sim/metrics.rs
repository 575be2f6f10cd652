//! The engine's counters and histograms, rendered as vLLM's Prometheus text.
//!
//! Dashboards and capcard's own probes read vLLM's metric names, so the
//! simulator exposes the same names, types and units (seconds, token counts,
//! a 0–1 usage fraction), labelled `model_name`. Values are recorded in the
//! engine's virtual time; rendering is pure so it can be unit-tested.

use std::fmt::Write as _;

/// vLLM's bucket boundaries for `vllm:time_to_first_token_seconds`.
pub const TTFT_BUCKETS_S: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/// vLLM's bucket boundaries for `vllm:inter_token_latency_seconds`.
pub const ITL_BUCKETS_S: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
/// vLLM's bucket boundaries for `vllm:e2e_request_latency_seconds`.
pub const E2E_BUCKETS_S: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];

/// A cumulative-on-render Prometheus histogram.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// Per-bucket (not cumulative) counts; the last is +Inf.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        Histogram {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
            count: 0,
        }
    }

    pub fn observe(&mut self, value: f64) {
        let i = self.bounds.partition_point(|&b| b < value);
        self.counts[i] += 1;
        self.sum += value;
        self.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum(&self) -> f64 {
        self.sum
    }
}

/// Everything `/metrics` shows, as recorded by the engine.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineMetrics {
    pub requests_running: u64,
    pub requests_waiting: u64,
    /// Fraction of KV blocks owned by sequences, 0–1.
    pub kv_cache_usage: f64,
    /// Prompt tokens looked up in the prefix cache.
    pub prefix_cache_queries: u64,
    /// Of those, tokens found cached.
    pub prefix_cache_hits: u64,
    pub preemptions: u64,
    pub prompt_tokens: u64,
    pub generation_tokens: u64,
    pub finished_stop: u64,
    pub finished_length: u64,
    pub finished_abort: u64,
    pub ttft_s: Histogram,
    pub itl_s: Histogram,
    pub e2e_s: Histogram,
}

impl Default for EngineMetrics {
    fn default() -> Self {
        EngineMetrics {
            requests_running: 0,
            requests_waiting: 0,
            kv_cache_usage: 0.0,
            prefix_cache_queries: 0,
            prefix_cache_hits: 0,
            preemptions: 0,
            prompt_tokens: 0,
            generation_tokens: 0,
            finished_stop: 0,
            finished_length: 0,
            finished_abort: 0,
            ttft_s: Histogram::new(TTFT_BUCKETS_S),
            itl_s: Histogram::new(ITL_BUCKETS_S),
            e2e_s: Histogram::new(E2E_BUCKETS_S),
        }
    }
}

/// Escapes a label value per the Prometheus text format.
fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn scalar(out: &mut String, name: &str, kind: &str, help: &str, labels: &str, value: f64) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    let _ = writeln!(out, "{name}{{{labels}}} {value}");
}

fn histogram(out: &mut String, name: &str, help: &str, labels: &str, h: &Histogram) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} histogram");
    let mut cumulative = 0;
    for (bound, count) in h.bounds.iter().zip(&h.counts) {
        cumulative += count;
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels},le=\"{bound:?}\"}} {cumulative}"
        );
    }
    let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

/// Prometheus text exposition (format 0.0.4) of `m` for `model_name`.
pub fn render(model_name: &str, m: &EngineMetrics) -> String {
    let labels = format!("model_name=\"{}\"", escape_label(model_name));
    let l = labels.as_str();
    let mut out = String::with_capacity(8 * 1024);
    scalar(
        &mut out,
        "vllm:num_requests_running",
        "gauge",
        "Number of requests in model execution batches.",
        l,
        m.requests_running as f64,
    );
    scalar(
        &mut out,
        "vllm:num_requests_waiting",
        "gauge",
        "Number of requests waiting to be processed.",
        l,
        m.requests_waiting as f64,
    );
    scalar(
        &mut out,
        "vllm:kv_cache_usage_perc",
        "gauge",
        "KV-cache usage. 1 means 100 percent usage.",
        l,
        m.kv_cache_usage,
    );
    scalar(
        &mut out,
        "vllm:gpu_cache_usage_perc",
        "gauge",
        "GPU KV-cache usage. 1 means 100 percent usage (deprecated name of vllm:kv_cache_usage_perc).",
        l,
        m.kv_cache_usage,
    );
    scalar(
        &mut out,
        "vllm:prefix_cache_queries_total",
        "counter",
        "Prefix cache queries, in terms of number of queried tokens.",
        l,
        m.prefix_cache_queries as f64,
    );
    scalar(
        &mut out,
        "vllm:prefix_cache_hits_total",
        "counter",
        "Prefix cache hits, in terms of number of cached tokens.",
        l,
        m.prefix_cache_hits as f64,
    );
    scalar(
        &mut out,
        "vllm:num_preemptions_total",
        "counter",
        "Cumulative number of preemptions from the engine.",
        l,
        m.preemptions as f64,
    );
    scalar(
        &mut out,
        "vllm:prompt_tokens_total",
        "counter",
        "Number of prefill tokens processed.",
        l,
        m.prompt_tokens as f64,
    );
    scalar(
        &mut out,
        "vllm:generation_tokens_total",
        "counter",
        "Number of generation tokens processed.",
        l,
        m.generation_tokens as f64,
    );
    let _ = writeln!(
        out,
        "# HELP vllm:request_success_total Count of successfully processed requests."
    );
    let _ = writeln!(out, "# TYPE vllm:request_success_total counter");
    for (reason, n) in [
        ("stop", m.finished_stop),
        ("length", m.finished_length),
        ("abort", m.finished_abort),
    ] {
        let _ = writeln!(
            out,
            "vllm:request_success_total{{{l},finished_reason=\"{reason}\"}} {n}"
        );
    }
    histogram(
        &mut out,
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        l,
        &m.ttft_s,
    );
    histogram(
        &mut out,
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        l,
        &m.itl_s,
    );
    histogram(
        &mut out,
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        l,
        &m.e2e_s,
    );
    out
}

/// Reads one unlabelled-by-le sample (`name{...} value`) back from text made
/// by [`render`]; for tests and for clients that scrape the simulator.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find(|line| line.starts_with(name) && line[name.len()..].starts_with('{'))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_when_rendered() {
        let mut m = EngineMetrics::default();
        m.ttft_s.observe(0.003);
        m.ttft_s.observe(0.003);
        m.ttft_s.observe(0.2);
        m.ttft_s.observe(5000.0);
        let text = render("sim/tiny", &m);
        assert!(text.contains(
            "vllm:time_to_first_token_seconds_bucket{model_name=\"sim/tiny\",le=\"0.001\"} 0\n"
        ));
        assert!(text.contains(
            "vllm:time_to_first_token_seconds_bucket{model_name=\"sim/tiny\",le=\"0.005\"} 2\n"
        ));
        assert!(text.contains(
            "vllm:time_to_first_token_seconds_bucket{model_name=\"sim/tiny\",le=\"0.25\"} 3\n"
        ));
        assert!(text.contains(
            "vllm:time_to_first_token_seconds_bucket{model_name=\"sim/tiny\",le=\"2560.0\"} 3\n"
        ));
        assert!(text.contains(
            "vllm:time_to_first_token_seconds_bucket{model_name=\"sim/tiny\",le=\"+Inf\"} 4\n"
        ));
        assert!(
            text.contains("vllm:time_to_first_token_seconds_count{model_name=\"sim/tiny\"} 4\n")
        );
    }

    #[test]
    fn gauges_and_counters_read_back() {
        let m = EngineMetrics {
            requests_running: 3,
            requests_waiting: 7,
            kv_cache_usage: 0.25,
            prefix_cache_hits: 160,
            ..EngineMetrics::default()
        };
        let text = render("sim/llama-3-8b", &m);
        assert_eq!(sample(&text, "vllm:num_requests_running"), Some(3.0));
        assert_eq!(sample(&text, "vllm:num_requests_waiting"), Some(7.0));
        assert_eq!(sample(&text, "vllm:kv_cache_usage_perc"), Some(0.25));
        assert_eq!(sample(&text, "vllm:gpu_cache_usage_perc"), Some(0.25));
        assert_eq!(sample(&text, "vllm:prefix_cache_hits_total"), Some(160.0));
        assert_eq!(sample(&text, "vllm:num_preemptions_total"), Some(0.0));
        assert_eq!(sample(&text, "vllm:nope"), None);
        // Every sample line carries the model label.
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            assert!(line.contains("model_name=\"sim/llama-3-8b\""), "{line}");
        }
    }
}
