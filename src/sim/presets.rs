//! Simulated hardware × model presets, with the published figures they use.

/// Names accepted by `sim PRESET` and `capcard sim --preset`.
pub fn names() -> Vec<&'static str> {
    vec!["h100-llama3-8b", "h200-llama3-70b-tp2", "a100-llama3-8b", "l4-llama3-8b", "tiny"]
}
