//! Real-time fidelity of the simulator under load: how late the engine
//! driver wakes for each step's scheduled end while serving many concurrent
//! SSE streams over loopback HTTP. Not a test: it prints figures for
//! BENCHMARKS.md.
//!
//! ```text
//! cargo bench --bench sim_fidelity                       # 1,000 streams, 256 tokens each
//! SIM_FIDELITY_STREAMS=2000 SIM_FIDELITY_TOKENS=128 cargo bench --bench sim_fidelity
//! ```
//! The client runs in the same process (same cores) as the server, as it
//! does when capcard drives a `sim` target.

use std::time::{Duration, Instant};

use capcard::sim::{SimConfig, presets, start};
use serde_json::json;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let streams = env_usize("SIM_FIDELITY_STREAMS", 1000);
    let tokens = env_usize("SIM_FIDELITY_TOKENS", 256);
    let workers = env_usize("SIM_FIDELITY_WORKERS", 2);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()?;
    runtime.block_on(run(streams, tokens, workers))
}

async fn run(
    streams: usize,
    tokens: usize,
    workers: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    let preset = presets::find("h100-llama3-8b").ok_or("missing preset")?;
    let server = start(SimConfig::new(preset), "127.0.0.1:0".parse()?).await?;
    let url = format!("{}/completions", server.base_url());
    let client = capcard::exec::HttpClient::new(Duration::from_secs(600));

    let started = Instant::now();
    let mut tasks = Vec::with_capacity(streams);
    for i in 0..streams {
        let client = client.clone();
        let url = url.clone();
        // 256 distinct prompt tokens per stream (no prefix sharing).
        let prompt: Vec<u32> = (0..256u32)
            .map(|t| (i as u32 * 7919 + t * 104_729) % 128_000)
            .collect();
        tasks.push(tokio::spawn(async move {
            let body =
                json!({"prompt": prompt, "max_tokens": tokens, "ignore_eos": true, "stream": true});
            let content_type = [(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            )];
            let mut resp = client
                .open(
                    http::Method::POST,
                    &url,
                    &content_type,
                    body.to_string().into(),
                )
                .await?;
            let mut events = 0usize;
            let mut first: Option<Duration> = None;
            let t0 = Instant::now();
            while let Some(chunk) = resp.chunk().await? {
                events += chunk.windows(6).filter(|w| w == b"data: ").count();
                if first.is_none() {
                    first = Some(t0.elapsed());
                }
            }
            Ok::<_, capcard::exec::HttpError>((events, first))
        }));
    }
    let mut delivered = 0usize;
    let mut failed = 0usize;
    for t in tasks {
        match t.await? {
            Ok((events, _)) => delivered += events.saturating_sub(1), // minus [DONE]
            Err(_) => failed += 1,
        }
    }
    let wall = started.elapsed();
    let lateness = server.step_lateness().await.ok_or("engine stopped")?;
    let metrics = server.metrics().await.ok_or("engine stopped")?;
    server.shutdown().await;

    println!(
        "sim_fidelity: h100-llama3-8b, {streams} concurrent streams × {tokens} tokens, {workers} tokio workers"
    );
    println!("  wall time            {:.1} s", wall.as_secs_f64());
    println!(
        "  tokens delivered     {delivered} ({:.0} tok/s), failed streams {failed}",
        delivered as f64 / wall.as_secs_f64()
    );
    println!("  engine steps         {}", lateness.steps);
    println!(
        "  TTFT histogram mean  {:.1} ms (virtual time)",
        1e3 * metrics.ttft_s.sum() / metrics.ttft_s.count().max(1) as f64
    );
    println!(
        "  step lateness        p50 {} µs, p99 {} µs, max {} µs, mean {:.1} µs",
        lateness.p50_us, lateness.p99_us, lateness.max_us, lateness.mean_us
    );
    Ok(())
}
