//! Several replicas read as one server: their metrics summed (counters,
//! histograms, running/waiting) and their KV-cache usage averaged.

use std::sync::mpsc as std_mpsc;

use tokio::sync::oneshot;

use crate::sim::metrics::EngineMetrics;

use super::*;

pub(super) async fn replica_metrics<'a>(
    commands: impl Iterator<Item = &'a std_mpsc::Sender<Command>>,
) -> Option<Vec<EngineMetrics>> {
    let mut replies = Vec::new();
    for c in commands {
        let (tx, rx) = oneshot::channel();
        c.send(Command::Metrics(tx)).ok()?;
        replies.push(rx);
    }
    let mut out = Vec::with_capacity(replies.len());
    for rx in replies {
        out.push(rx.await.ok()?);
    }
    Some(out)
}

/// Counters and gauges summed, KV usage averaged; histograms of the first
/// (`EngineMetrics` offers no way to add histograms: [`merge_rendered`]
/// sums them in the exposition text).
pub(super) fn sum_metrics(all: &[EngineMetrics]) -> EngineMetrics {
    let Some((first, rest)) = all.split_first() else {
        return EngineMetrics::default();
    };
    let mut m = first.clone();
    for r in rest {
        m.requests_running += r.requests_running;
        m.requests_waiting += r.requests_waiting;
        m.kv_cache_usage += r.kv_cache_usage;
        m.prefix_cache_queries += r.prefix_cache_queries;
        m.prefix_cache_hits += r.prefix_cache_hits;
        m.preemptions += r.preemptions;
        m.prompt_tokens += r.prompt_tokens;
        m.generation_tokens += r.generation_tokens;
        m.finished_stop += r.finished_stop;
        m.finished_length += r.finished_length;
        m.finished_abort += r.finished_abort;
    }
    m.kv_cache_usage /= all.len() as f64;
    m
}

/// Gauges averaged rather than summed across replicas.
pub(super) const AVERAGED: [&str; 2] = ["vllm:kv_cache_usage_perc{", "vllm:gpu_cache_usage_perc{"];

/// The replicas' expositions (each from [`render`], so line for line alike)
/// as one: every sample summed, histogram buckets included, except the KV
/// usage gauges, averaged.
pub(crate) fn merge_rendered(texts: &[String]) -> String {
    let Some(first) = texts.first() else {
        return String::new();
    };
    let mut lines: Vec<std::str::Lines<'_>> = texts[1..].iter().map(|t| t.lines()).collect();
    let mut out = String::with_capacity(first.len());
    for line in first.lines() {
        let others: Vec<&str> = lines.iter_mut().filter_map(Iterator::next).collect();
        let sample = line
            .rsplit_once(' ')
            .filter(|_| !line.starts_with('#'))
            .and_then(|(key, v)| Some((key, v.parse::<f64>().ok()?)));
        let Some((key, value)) = sample else {
            out.push_str(line);
            out.push('\n');
            continue;
        };
        let mut total = value;
        for other in &others {
            if let Some((k, v)) = other.rsplit_once(' ') {
                if k == key {
                    total += v.parse::<f64>().unwrap_or(0.0);
                }
            }
        }
        if AVERAGED.iter().any(|a| key.starts_with(a)) {
            total /= texts.len() as f64;
        }
        out.push_str(key);
        out.push(' ');
        out.push_str(&total.to_string());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::metrics::render;

    #[test]
    fn merged_metrics_sum_samples_and_average_kv_usage() {
        let mut a = EngineMetrics {
            requests_running: 3,
            kv_cache_usage: 0.5,
            generation_tokens: 100,
            finished_length: 2,
            ..EngineMetrics::default()
        };
        a.ttft_s.observe(0.003);
        let mut b = EngineMetrics {
            requests_running: 1,
            kv_cache_usage: 0.25,
            generation_tokens: 50,
            finished_length: 1,
            ..EngineMetrics::default()
        };
        b.ttft_s.observe(0.2);
        b.ttft_s.observe(0.3);
        let text = merge_rendered(&[render("m", &a), render("m", &b)]);
        use crate::sim::metrics::sample;
        assert_eq!(sample(&text, "vllm:num_requests_running"), Some(4.0));
        assert_eq!(sample(&text, "vllm:kv_cache_usage_perc"), Some(0.375));
        assert_eq!(sample(&text, "vllm:gpu_cache_usage_perc"), Some(0.375));
        assert_eq!(sample(&text, "vllm:generation_tokens_total"), Some(150.0));
        assert_eq!(
            sample(&text, "vllm:time_to_first_token_seconds_count"),
            Some(3.0)
        );
        assert!(text.contains(
            "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.005\"} 1\n"
        ));
        assert!(
            text.contains(
                "vllm:time_to_first_token_seconds_bucket{model_name=\"m\",le=\"0.5\"} 3\n"
            )
        );
        assert!(text.contains(
            "vllm:request_success_total{model_name=\"m\",finished_reason=\"length\"} 3\n"
        ));
        // One exposition merges to itself.
        assert_eq!(merge_rendered(&[render("m", &a)]), render("m", &a));
        let summed = sum_metrics(&[a, b]);
        assert_eq!(summed.generation_tokens, 150);
        assert_eq!(summed.kv_cache_usage, 0.375);
    }
}
