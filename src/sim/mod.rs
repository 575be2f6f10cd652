//! The built-in simulated inference engine: a deterministic continuous-
//! batching core in virtual time, a roofline cost model, presets, and an
//! OpenAI-compatible HTTP server around it.
//!
//! Split so that everything worth testing is pure: [`engine`] (scheduler,
//! KV cache via [`kv`], token sampling) never reads a clock and is driven by
//! explicit time stamps; [`cost`] turns a batch into a duration;
//! [`presets`] holds the published figures. Only [`http`] touches the
//! network and the wall clock, replaying the engine's steps in real time.
//!
//! Embedding it (see `examples/embed_sim.rs`):
//! ```no_run
//! # async fn demo() -> Result<(), capcard::sim::SimError> {
//! use capcard::sim::{SimConfig, presets, start};
//! let preset = presets::find("tiny").expect("a built-in preset");
//! let server = start(SimConfig::new(preset), "127.0.0.1:0".parse().expect("an address")).await?;
//! println!("OpenAI base URL: {}", server.base_url());
//! server.shutdown().await;
//! # Ok(()) }
//! ```

pub mod cost;
pub mod engine;
pub mod http;
pub mod kv;
pub mod metrics;
pub mod presets;
pub mod request;
pub mod tokenize;

use std::net::SocketAddr;

pub use engine::{Engine, EngineRequest, FinishReason, RequestId, StepOutput, SubmitError};
pub use http::{LatenessSummary, SimServer, serve, start};
pub use presets::Preset;

use crate::config::SimFaults;

/// What the simulator serves and how it misbehaves.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    pub preset: &'static Preset,
    /// Injected failures, cuts and stalls (all off by default).
    pub faults: SimFaults,
    /// Seeds generated tokens, stop draws and fault draws.
    pub seed: u64,
    /// Extra model names served by the same engine, as LoRA adapters are
    /// on vLLM (`--lora-modules`): listed by `/v1/models` with the base as
    /// their parent, and accepted as `model`.
    pub adapters: Vec<String>,
}

impl SimConfig {
    /// No faults, seed 0.
    pub fn new(preset: &'static Preset) -> Self {
        SimConfig {
            preset,
            faults: SimFaults::default(),
            seed: 0,
            adapters: Vec::new(),
        }
    }

    /// The preset called `name`, or [`SimError::UnknownPreset`].
    pub fn for_preset(name: &str) -> Result<Self, SimError> {
        presets::find(name)
            .map(SimConfig::new)
            .ok_or_else(|| SimError::UnknownPreset {
                name: name.to_string(),
                known: presets::names().join(", "),
            })
    }

    pub fn with_faults(mut self, faults: SimFaults) -> Self {
        self.faults = faults;
        self
    }

    /// Serve these adapter names besides the base model.
    pub fn with_adapters(mut self, adapters: Vec<String>) -> Self {
        self.adapters = adapters;
        self
    }

    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
}

/// Why the simulator could not start or keep serving.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("unknown simulator preset `{name}` (known presets: {known})")]
    UnknownPreset { name: String, known: String },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start the simulator's engine thread: {0}")]
    EngineThread(std::io::Error),
    #[error("the simulator's HTTP server failed: {0}")]
    Serve(std::io::Error),
}
