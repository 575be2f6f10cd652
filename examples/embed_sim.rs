//! Embedding the simulated engine in another Rust program: start it on an
//! ephemeral loopback port, stream one completion from it over its
//! OpenAI-compatible API, and print every token with its arrival time.
//!
//! ```text
//! cargo run --example embed_sim                  # the h100-llama3-8b preset
//! cargo run --example embed_sim -- tiny          # any preset from `capcard sim --list`
//! ```

use std::time::Instant;

use capcard::exec::HttpClient;
use capcard::exec::sse::SseDecoder;
use capcard::sim::{SimConfig, start};
use serde_json::{Value, json};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let preset_name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "h100-llama3-8b".to_string());
    let config = SimConfig::for_preset(&preset_name)?.with_seed(1);
    let model = config.preset.model.served_name;
    let server = start(config, "127.0.0.1:0".parse()?).await?;
    println!(
        "simulated {preset_name} serving {model} at {}",
        server.base_url()
    );

    // A 512-word prompt: on the simulator one word is one token.
    let prompt = (0..512)
        .map(|i| format!("word{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    let started = Instant::now();
    let body = json!({
        "model": model,
        "prompt": prompt,
        "max_tokens": 24,
        "ignore_eos": true,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let content_type = [(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    )];
    let mut response = HttpClient::new(std::time::Duration::from_secs(10))
        .open(
            http::Method::POST,
            &format!("{}/completions", server.base_url()),
            &content_type,
            body.to_string().into(),
        )
        .await?;
    if response.status() != 200 {
        return Err(format!("HTTP {}", response.status()).into());
    }

    let mut decoder = SseDecoder::new();
    let mut events = Vec::new();
    let mut previous = None;
    'stream: while let Some(bytes) = response.chunk().await? {
        decoder.push(&bytes);
        while let Some(event) = decoder.next_event() {
            events.push(event);
        }
        for event in events.drain(..) {
            if event.data == "[DONE]" {
                break 'stream;
            }
            let chunk: Value = serde_json::from_str(&event.data)?;
            let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
            if let Some(text) = chunk["choices"][0]["text"].as_str() {
                let gap = previous.map_or_else(
                    || "TTFT".to_string(),
                    |p: f64| format!("+{:.1} ms", elapsed_ms - p),
                );
                println!("{elapsed_ms:8.1} ms  {gap:>10}  {text:?}");
                previous = Some(elapsed_ms);
            }
            if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
                println!(
                    "usage: {} prompt + {} completion tokens in {:.1} ms",
                    usage["prompt_tokens"],
                    usage["completion_tokens"],
                    started.elapsed().as_secs_f64() * 1e3
                );
            }
        }
    }
    server.shutdown().await;
    Ok(())
}
