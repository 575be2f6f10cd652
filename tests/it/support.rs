//! Helpers shared by the topic modules of this test binary.

use capcard::config::{ConfigError, SimFaults};
use capcard::sim::{SimConfig, SimServer, presets, start};
use serde_json::json;

/// Renders a config error the way `capcard check` shows it, without colour
/// and at a fixed width so snapshots are stable.
pub fn render(err: &ConfigError) -> String {
    let mut out = String::new();
    miette::GraphicalReportHandler::new_themed(miette::GraphicalTheme::unicode_nocolor())
        .with_width(100)
        .render_report(&mut out, err)
        .expect("rendering into a String cannot fail");
    out
}

/// The `tiny` simulated engine on an ephemeral loopback port.
pub async fn tiny_sim(faults: SimFaults) -> SimServer {
    let preset = presets::find("tiny").expect("tiny preset");
    let config = SimConfig::new(preset).with_faults(faults).with_seed(3);
    start(config, "127.0.0.1:0".parse().expect("addr"))
        .await
        .expect("sim starts")
}

/// `n` distinct words (one token each on the simulator), tagged by `tag`.
pub fn words(n: usize, tag: &str) -> String {
    (0..n)
        .map(|i| format!("{tag}{i}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// 48 long streams on the tiny engine's 32 seats: 16 of them must wait.
/// The responses are returned open; dropping them disconnects.
pub async fn overload_tiny(client: &reqwest::Client, server: &SimServer) -> Vec<reqwest::Response> {
    let mut streams = Vec::new();
    for i in 0..48 {
        let resp = client
            .post(format!("{}/completions", server.base_url()))
            .json(&json!({"prompt": words(32, &format!("r{i}-")), "max_tokens": 1500, "ignore_eos": true, "stream": true}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        streams.push(resp);
    }
    streams
}
