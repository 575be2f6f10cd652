//! Server telemetry against the simulator's vLLM-named `/metrics`: the
//! scraper journals what it sees, and the mapped signals follow the load
//! (waiting > 0 past saturation, prefix-cache hits on a repeated prefix).

use std::time::Duration;

use capcard::analyze::telemetry::{likely_limit, signals};
use capcard::exec::telemetry::{Scraper, TelemetrySeries, read_series, record_from_text};
use capcard::sim::SimServer;
use serde_json::json;

use super::support::{overload_tiny, words};

async fn tiny() -> SimServer {
    super::support::tiny_sim(Default::default()).await
}

fn max_of(series: &TelemetrySeries, family: &str) -> f64 {
    series
        .scrapes
        .iter()
        .flat_map(|s| s.samples.iter())
        .filter(|(k, _)| k.starts_with(&format!("{family}{{")))
        .map(|(_, v)| *v)
        .fold(0.0, f64::max)
}

#[tokio::test]
async fn scraped_signals_follow_an_overload() {
    let server = tiny().await;
    let client = crate::support::web::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("telemetry.jsonl");
    let scraper = Scraper::start(
        format!("http://{}/metrics", server.addr),
        Duration::from_millis(20),
        journal.clone(),
        client.inner(),
    );

    // 48 long streams on a 32-seat engine: 16 must wait.
    let streams = overload_tiny(&client, &server).await;
    // Wait (bounded) until the scraper has journaled the full batch twice.
    let mut loaded_scrapes = 0;
    for _ in 0..500 {
        let seen = read_series(&journal).unwrap_or_default();
        loaded_scrapes = seen
            .scrapes
            .iter()
            .filter(|s| {
                s.samples
                    .iter()
                    .any(|(k, v)| k.starts_with("vllm:num_requests_running{") && *v == 32.0)
            })
            .count();
        if loaded_scrapes >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(loaded_scrapes >= 2, "the scraper saw the full batch");
    let series = scraper.stop().await;
    drop(streams);
    server.shutdown().await;

    assert_eq!(series.write_error, None);
    assert!(series.scrapes.iter().all(|s| s.ok));
    assert_eq!(series.types["vllm:num_requests_running"], "gauge");
    assert_eq!(max_of(&series, "vllm:num_requests_running"), 32.0);
    // 16 wait once the batch is full; more wait while it fills.
    assert!(max_of(&series, "vllm:num_requests_waiting") >= 16.0);
    // What stop() returned is what the journal holds.
    // (Floats are compared by key set and count: JSON round trips may move the last bit.)
    let journaled = read_series(&journal).unwrap();
    assert_eq!(journaled.scrapes.len(), series.scrapes.len());
    assert_eq!(journaled.types, series.types);
    for (j, s) in journaled.scrapes.iter().zip(&series.scrapes) {
        assert!(j.samples.keys().eq(s.samples.keys()));
    }

    let last = series.scrapes.last().unwrap().t_ms;
    let s = signals(&series, [0.0, last]).unwrap();
    assert_eq!(s.engine.as_deref(), Some("vllm"));
    assert_eq!(s.failed_scrapes, 0);
    assert!(s.requests_waiting_max.unwrap() >= 16.0);
    assert_eq!(s.requests_running_max, Some(32.0));
    assert!(s.requests_waiting_mean.unwrap() > 0.0);
    assert!(s.kv_cache_usage_max.unwrap() > 0.0);
    assert!(s.generation_tokens_per_s.unwrap() > 0.0);
    let reading = likely_limit(&s, Some(32));
    assert!(
        reading.starts_with("batch full at max-num-seqs 32") || reading.starts_with("KV cache"),
        "{reading}"
    );
}

#[tokio::test]
async fn a_repeated_prefix_shows_as_prefix_cache_hits() {
    let server = tiny().await;
    let client = crate::support::web::Client::new();
    let metrics = format!("http://{}/metrics", server.addr);
    let scrape = |t_ms: f64| {
        let client = client.clone();
        let metrics = metrics.clone();
        async move {
            let text = client
                .get(metrics)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            record_from_text(t_ms, &text)
        }
    };
    let mut series = TelemetrySeries::default();
    series.push(scrape(0.0).await);
    let prefix = words(256, "system");
    for i in 0..2 {
        let resp = client
            .post(format!("{}/completions", server.base_url()))
            .json(&json!({"prompt": format!("{prefix} {}", words(8, &format!("q{i}-"))), "max_tokens": 4, "ignore_eos": true}))
            .send()
            .await
            .unwrap();
        let _ = resp.text().await.unwrap();
    }
    series.push(scrape(1000.0).await);
    server.shutdown().await;

    let s = signals(&series, [0.0, 1000.0]).unwrap();
    // 2 prompts of 264 tokens, the second finds the 256-token prefix cached.
    assert_eq!(s.prefix_cache_hit_rate, Some(256.0 / 528.0));
    assert_eq!(s.server_requests, Some(2.0));
    assert_eq!(s.server_generation_tokens, Some(8.0));
    assert_eq!(s.prompt_tokens_per_s, Some(528.0));
    assert_eq!(s.requests_waiting_max, Some(0.0));
}

#[tokio::test]
async fn failed_scrapes_are_journaled_and_scraping_goes_on() {
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], crate::support::free_port()));
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("t.jsonl");
    let scraper = Scraper::start(
        format!("http://{addr}/metrics"),
        Duration::from_millis(10),
        journal.clone(),
        capcard::exec::HttpClient::new(Duration::from_secs(2)),
    );
    for _ in 0..500 {
        if read_series(&journal).map(|s| s.scrapes.len()).unwrap_or(0) >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let series = scraper.stop().await;
    assert!(series.scrapes.len() >= 4, "kept scraping after failures");
    assert!(series.scrapes.iter().all(|s| !s.ok && s.error.is_some()));
    let last = series.scrapes.last().unwrap().t_ms;
    let s = signals(&series, [0.0, last]).unwrap();
    assert_eq!(s.failed_scrapes, s.scrapes);
    assert!(!s.has_data());
}

/// The report fixture's `limits` and `telemetry_notes` are what
/// `annotate_card` makes of its `server` blocks.
#[test]
fn annotate_card_reproduces_the_fixture() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/results-fixture.json");
    let report =
        capcard::report::parse_results_json(&std::fs::read_to_string(path).unwrap()).unwrap();
    for card in &report.cards {
        let mut fresh = card.clone();
        fresh.limits.clear();
        fresh.telemetry_notes.clear();
        capcard::analyze::telemetry::annotate_card(&mut fresh, None);
        if std::env::var_os("PRINT_ANNOTATIONS").is_some() {
            println!(
                "{}",
                serde_json::to_string_pretty(&(&fresh.limits, &fresh.telemetry_notes)).unwrap()
            );
        }
        assert_eq!(fresh.limits, card.limits);
        assert_eq!(fresh.telemetry_notes, card.telemetry_notes);
    }
}
