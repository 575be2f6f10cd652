//! The built-in simulated inference engine: a deterministic continuous-
//! batching core in virtual time, a roofline cost model, presets, and an
//! OpenAI-compatible HTTP server around it.
//!
//! Split so that everything worth testing is pure: [`engine`] (scheduler,
//! KV cache via [`kv`], token sampling) never reads a clock and is driven by
//! explicit time stamps; [`cost`] turns a batch into a duration;
//! [`presets`] holds the published figures; [`knobs`] applies a target's
//! serving knobs to a preset; [`cluster`] routes requests among replicas;
//! [`dialect`] decides what a server stricter than vLLM refuses, and when
//! its rate limit answers 429 (on an explicit clock); [`answer`] says what
//! an answer holds (reasoning first, text or a tool call, tokens per
//! streamed event) and [`wire`] writes it as each API streams it.
//! Only [`http`] touches the network and the wall clock, replaying the
//! engines' steps in real time.
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

pub mod answer;
pub mod cluster;
pub mod cost;
pub mod dialect;
pub mod engine;
pub mod http;
pub mod knobs;
pub mod kv;
pub mod metrics;
pub mod presets;
pub mod queue;
pub mod reference;
pub mod request;
pub mod serving;
pub mod tokenize;
pub mod wire;

use std::net::SocketAddr;

pub use answer::Answers;
pub use cluster::Router;
pub use dialect::{RateLimit, RateLimitError, SimDialect};
pub use engine::{Engine, EngineRequest, FinishReason, RequestId, StepOutput, SubmitError};
pub use http::{LatenessSummary, SimServer, serve, start};
pub use knobs::KnobError;
pub use presets::Preset;
pub use serving::{SimFaults, SimRouter, SimServing};

/// What the simulator serves and how it misbehaves.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    /// The deployment of each replica (a preset, knobs applied).
    pub preset: Preset,
    /// Injected failures, cuts and stalls (all off by default).
    pub faults: SimFaults,
    /// Seeds generated tokens, stop draws and fault draws.
    pub seed: u64,
    /// Extra model names served by the same engine, as LoRA adapters are
    /// on vLLM (`--lora-modules`): listed by `/v1/models` with the base as
    /// their parent, and accepted as `model`.
    pub adapters: Vec<String>,
    /// Engines behind the one endpoint (≥ 1), each a copy of `preset`.
    pub replicas: u32,
    /// How requests are spread over the replicas.
    pub router: SimRouter,
    /// Which fields the HTTP server refuses or ignores, and its rate limit
    /// (default: vLLM's, every field accepted, no limit). The virtual-time
    /// executor ignores it.
    pub dialect: SimDialect,
}

impl SimConfig {
    /// One replica of `preset`, no faults, seed 0.
    pub fn new(preset: &Preset) -> Self {
        SimConfig {
            preset: preset.clone(),
            faults: SimFaults::default(),
            seed: 0,
            adapters: Vec::new(),
            replicas: 1,
            router: SimRouter::default(),
            dialect: SimDialect::default(),
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

    /// A `sim` target: the preset called `preset` with the serving knobs
    /// applied ([`knobs::apply`]), and the knobs' replicas and router.
    /// Faults, seed and adapters are left to the builder methods.
    pub fn for_target(preset: &str, serving: &SimServing) -> Result<Self, SimError> {
        let base = Self::for_preset(preset)?;
        if serving.replicas == 0 {
            return Err(SimError::Knobs(KnobError::OutOfRange {
                knob: "replicas",
                expected: "at least 1",
                value: "0".into(),
            }));
        }
        let preset = resolve(preset, serving)?;
        Ok(SimConfig { preset, ..base }
            .with_replicas(serving.replicas)
            .with_router(serving.router))
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

    /// Run `replicas` engines (0 is taken as 1).
    pub fn with_replicas(mut self, replicas: u32) -> Self {
        self.replicas = replicas.max(1);
        self
    }

    pub fn with_router(mut self, router: SimRouter) -> Self {
        self.router = router;
        self
    }

    /// Answer as a reasoning model, or with several tokens per streamed
    /// event (see [`Answers`]; `capcard sim --reasoning-tokens`).
    pub fn with_answers(mut self, answers: Answers) -> Self {
        self.preset.answers = answers;
        self
    }

    /// Play a stricter server than vLLM (see [`SimDialect`]).
    pub fn with_dialect(mut self, dialect: SimDialect) -> Self {
        self.dialect = dialect;
        self
    }
}

/// The engine a `sim PRESET` target runs: the built-in preset called
/// `preset` with every knob `serving` sets. The one place a preset and its
/// knobs become an engine: `capcard run`, virtual time, the context check,
/// the card and calibration all read it from here.
pub fn resolve(preset: &str, serving: &SimServing) -> Result<Preset, SimError> {
    let base = presets::find(preset).ok_or_else(|| SimError::UnknownPreset {
        name: preset.to_string(),
        known: presets::names().join(", "),
    })?;
    Ok(knobs::apply(base, serving)?)
}

/// Why the simulator could not start or keep serving.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("unknown simulator preset `{name}` (known presets: {known})")]
    UnknownPreset { name: String, known: String },
    #[error(transparent)]
    Knobs(#[from] KnobError),
    #[error("the simulator's rate limit: {0}")]
    RateLimit(#[from] RateLimitError),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn for_target_applies_the_knobs_and_takes_replicas_and_router() {
        let serving = SimServing {
            max_num_seqs: Some(8),
            prefix_caching: Some(false),
            replicas: 3,
            router: SimRouter::PrefixAffinity,
            ..SimServing::default()
        };
        let config = SimConfig::for_target("tiny", &serving).unwrap();
        assert_eq!(config.preset.max_num_seqs, 8);
        assert!(!config.preset.prefix_caching);
        assert_eq!(config.preset.name, "tiny");
        assert_eq!(
            (config.replicas, config.router),
            (3, SimRouter::PrefixAffinity)
        );
        let plain = SimConfig::for_target("tiny", &SimServing::default()).unwrap();
        assert_eq!(plain, SimConfig::for_preset("tiny").unwrap());
        assert!(matches!(
            SimConfig::for_target("nope", &serving),
            Err(SimError::UnknownPreset { .. })
        ));
        let bad = SimServing {
            tensor_parallel: Some(3),
            ..SimServing::default()
        };
        let err = SimConfig::for_target("tiny", &bad).unwrap_err();
        assert!(matches!(
            err,
            SimError::Knobs(KnobError::TensorParallel { .. })
        ));
        let none = SimServing {
            replicas: 0,
            ..SimServing::default()
        };
        assert!(SimConfig::for_target("tiny", &none).is_err());
    }
}
