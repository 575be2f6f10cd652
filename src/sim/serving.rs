//! What a `sim` target changes from its preset ([`SimServing`]), how a
//! cluster of replicas routes ([`SimRouter`]) and which faults it injects
//! ([`SimFaults`]): the simulator's own types, which the experiment model
//! holds, so that the simulator never reads the configuration.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::queue::{Cliff, Service};
use crate::dist::Dist;
use crate::quantity::{Fraction, duration_secs, opt_duration_secs};

/// What a `sim` target changes from its preset, and how it is driven.
/// Every override is `None` (the preset's value) unless the file sets it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SimServing {
    /// vLLM `--max-num-seqs`.
    pub max_num_seqs: Option<u32>,
    /// vLLM `--max-num-batched-tokens`: a step's token budget.
    pub max_batched_tokens: Option<u32>,
    /// KV-cache capacity in tokens (vLLM logs it as "GPU KV cache size"),
    /// instead of the one derived from memory, weights and utilisation.
    pub kv_cache_tokens: Option<u64>,
    /// vLLM `--gpu-memory-utilization`.
    pub gpu_memory_utilization: Option<f64>,
    /// Automatic prefix caching (vLLM's default on).
    pub prefix_caching: Option<bool>,
    /// Chunked prefill (on by default): off, a prompt is prefilled whole in
    /// one step and a step holds at most `max-batched-tokens` of prompts.
    pub chunked_prefill: Option<bool>,
    /// GPUs of the tensor-parallel group.
    pub tensor_parallel: Option<u32>,
    /// Achieved / peak FLOP/s.
    pub compute_efficiency: Option<f64>,
    /// Achieved / peak memory bandwidth.
    pub memory_efficiency: Option<f64>,
    /// Fixed cost of one engine step.
    #[serde(with = "opt_duration_secs")]
    pub step_overhead: Option<Duration>,
    /// Cost per sequence in a step.
    #[serde(with = "opt_duration_secs")]
    pub per_seq_overhead: Option<Duration>,
    /// `reasoning-tokens DIST`: each request reasons this many tokens
    /// (a seeded draw per request) before its answer, within its output
    /// budget, as a model served with vLLM's `--reasoning-parser` does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<Dist>,
    /// `tokens-per-event N`: tokens the server buffers into one streamed
    /// event, as hosted APIs do (1, every token its own event, if unset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_event: Option<u32>,
    /// `prompt-tokens-details #true`: answers report
    /// `usage.prompt_tokens_details.cached_tokens`, as vLLM does with
    /// `--enable-prompt-tokens-details` (off by default, as in vLLM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<bool>,
    /// Engines behind the one endpoint (a small virtual cluster).
    pub replicas: u32,
    /// How the cluster's router picks a replica for each request.
    pub router: SimRouter,
    /// Run on the engine's own clock, in process, without HTTP (`virtual #true`).
    pub virtual_time: bool,
    /// Virtual time: the client-side network and parse cost of one call,
    /// added between its send and the engine's submission.
    #[serde(with = "duration_secs")]
    pub network_overhead: Duration,
    /// Where the knobs came from, as `capcard calibrate` writes it: the card
    /// states it (`calibrated "DIR: TTFT p50 +3%, ..."`).
    pub calibrated: Option<String>,
    /// vLLM `--max-model-len`: the engine's window in tokens, from the
    /// target's `max-context` (one place for every kind of target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_context: Option<u32>,
    /// `sim queue`: the number of slots (servers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slots: Option<u32>,
    /// `sim queue`: the service-time distribution.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<Service>,
    /// `sim queue`: a cliff (service slows beyond so many in service).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cliff: Option<Cliff>,
}

impl Default for SimServing {
    fn default() -> Self {
        SimServing {
            max_num_seqs: None,
            max_batched_tokens: None,
            kv_cache_tokens: None,
            gpu_memory_utilization: None,
            prefix_caching: None,
            chunked_prefill: None,
            tensor_parallel: None,
            compute_efficiency: None,
            memory_efficiency: None,
            step_overhead: None,
            per_seq_overhead: None,
            reasoning_tokens: None,
            tokens_per_event: None,
            prompt_tokens_details: None,
            replicas: 1,
            router: SimRouter::default(),
            virtual_time: false,
            network_overhead: Duration::ZERO,
            calibrated: None,
            max_context: None,
            slots: None,
            service: None,
            cliff: None,
        }
    }
}

/// The router of a multi-replica `sim` (`replicas 2 router=least-loaded`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SimRouter {
    /// Each request to the next replica in turn.
    #[default]
    RoundRobin,
    /// To the replica with the fewest requests running and waiting.
    LeastLoaded,
    /// To the replica holding the longest cached prefix of the prompt
    /// (ties: least loaded), as llm-d's and SGLang's routers do.
    PrefixAffinity,
}

impl SimServing {
    /// True when no knob that changes the engine is set: the preset serves
    /// as it is, on one replica (the target's `max-context` aside: the card
    /// gives the window a row of its own). `virtual`, `network-overhead` (how the
    /// engine is driven) and `calibrated` (a note) do not count, nor does
    /// `router=` of a single replica, which has nothing to route between.
    pub fn is_default_serving(&self) -> bool {
        self.max_num_seqs.is_none()
            && self.max_batched_tokens.is_none()
            && self.kv_cache_tokens.is_none()
            && self.gpu_memory_utilization.is_none()
            && self.prefix_caching.is_none()
            && self.chunked_prefill.is_none()
            && self.tensor_parallel.is_none()
            && self.compute_efficiency.is_none()
            && self.memory_efficiency.is_none()
            && self.step_overhead.is_none()
            && self.per_seq_overhead.is_none()
            && self.reasoning_tokens.is_none()
            && self.tokens_per_event.is_none()
            && self.prompt_tokens_details.is_none()
            && self.slots.is_none()
            && self.service.is_none()
            && self.cliff.is_none()
            && self.replicas == 1
    }

    /// The knobs that are set, one line each as the `sim { }` block writes
    /// them (`max-num-seqs 512`, `replicas 2 router=least-loaded`,
    /// `prefix-caching #false`), in declaration order; empty for a preset
    /// run as it is. For cards. The target's `max-context` is not among them:
    /// it is a line of the target, and the card gives the window its own row.
    pub fn describe(&self) -> Vec<String> {
        fn secs(d: Duration) -> String {
            format!("\"{}\"", crate::format::duration_literal(d.as_secs_f64()))
        }
        let mut lines = Vec::new();
        let mut line = |knob: &str, value: Option<String>| {
            if let Some(value) = value {
                lines.push(format!("{knob} {value}"));
            }
        };
        let flag = |b: bool| format!("#{b}");
        line("max-num-seqs", self.max_num_seqs.map(|n| n.to_string()));
        line(
            "max-batched-tokens",
            self.max_batched_tokens.map(|n| n.to_string()),
        );
        line(
            "kv-cache-tokens",
            self.kv_cache_tokens.map(|n| n.to_string()),
        );
        line(
            "gpu-memory-utilization",
            self.gpu_memory_utilization.map(|f| f.to_string()),
        );
        line("prefix-caching", self.prefix_caching.map(flag));
        line("chunked-prefill", self.chunked_prefill.map(flag));
        line(
            "tensor-parallel",
            self.tensor_parallel.map(|n| n.to_string()),
        );
        line(
            "compute-efficiency",
            self.compute_efficiency.map(|f| f.to_string()),
        );
        line(
            "memory-efficiency",
            self.memory_efficiency.map(|f| f.to_string()),
        );
        line("step-overhead", self.step_overhead.map(secs));
        line("per-seq-overhead", self.per_seq_overhead.map(secs));
        line(
            "reasoning-tokens",
            self.reasoning_tokens.as_ref().map(Dist::kdl_words),
        );
        line(
            "tokens-per-event",
            self.tokens_per_event.map(|n| n.to_string()),
        );
        line(
            "prompt-tokens-details",
            self.prompt_tokens_details.map(flag),
        );
        let router = if self.router == SimRouter::default() {
            String::new()
        } else {
            format!(" router={}", self.router.as_str())
        };
        line(
            "replicas",
            (self.replicas != 1 || !router.is_empty())
                .then(|| format!("{}{router}", self.replicas)),
        );
        line("virtual", self.virtual_time.then(|| flag(true)));
        line(
            "network-overhead",
            (!self.network_overhead.is_zero()).then(|| secs(self.network_overhead)),
        );
        line(
            "calibrated",
            self.calibrated.as_ref().map(|c| format!("{c:?}")),
        );
        line("slots", self.slots.map(|n| n.to_string()));
        line("service", self.service.as_ref().map(Service::kdl_words));
        line("cliff", self.cliff.as_ref().map(Cliff::kdl_words));
        lines
    }
}

impl SimRouter {
    /// Every router, in the order the language lists them.
    pub const ALL: [SimRouter; 3] = [
        SimRouter::RoundRobin,
        SimRouter::LeastLoaded,
        SimRouter::PrefixAffinity,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SimRouter::RoundRobin => "round-robin",
            SimRouter::LeastLoaded => "least-loaded",
            SimRouter::PrefixAffinity => "prefix-affinity",
        }
    }

    /// The router written `name` in a file (`router=least-loaded`).
    pub fn from_name(name: &str) -> Option<SimRouter> {
        SimRouter::ALL.into_iter().find(|r| r.as_str() == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist::DistKind;

    #[test]
    fn a_preset_as_it_is_describes_nothing() {
        let serving = SimServing::default();
        assert!(serving.is_default_serving());
        assert!(serving.describe().is_empty());
    }

    #[test]
    fn how_the_engine_is_driven_is_not_a_serving_change() {
        let serving = SimServing {
            virtual_time: true,
            network_overhead: Duration::from_micros(300),
            calibrated: Some("runs/lv: TTFT p50 +3%".into()),
            router: SimRouter::LeastLoaded,
            ..SimServing::default()
        };
        assert!(serving.is_default_serving());
        assert_eq!(
            serving.describe(),
            [
                "replicas 1 router=least-loaded",
                "virtual #true",
                "network-overhead \"300us\"",
                "calibrated \"runs/lv: TTFT p50 +3%\"",
            ]
        );
        for changed in [
            SimServing {
                replicas: 2,
                ..SimServing::default()
            },
            SimServing {
                prefix_caching: Some(true),
                ..SimServing::default()
            },
            SimServing {
                per_seq_overhead: Some(Duration::ZERO),
                ..SimServing::default()
            },
        ] {
            assert!(!changed.is_default_serving(), "{changed:?}");
        }
    }

    #[test]
    fn every_knob_is_described_in_declaration_order() {
        let serving = SimServing {
            max_num_seqs: Some(512),
            max_batched_tokens: Some(16384),
            kv_cache_tokens: Some(400_000),
            gpu_memory_utilization: Some(0.95),
            prefix_caching: Some(false),
            chunked_prefill: Some(false),
            tensor_parallel: Some(2),
            compute_efficiency: Some(0.55),
            memory_efficiency: Some(0.75),
            step_overhead: Some(Duration::from_micros(1200)),
            per_seq_overhead: Some(Duration::from_micros(12)),
            reasoning_tokens: Some(Dist {
                kind: DistKind::LogNormal {
                    median: 200.0,
                    sigma: 0.5,
                },
                min: None,
                max: Some(2000.0),
            }),
            tokens_per_event: Some(4),
            prompt_tokens_details: Some(true),
            replicas: 2,
            router: SimRouter::default(),
            virtual_time: false,
            network_overhead: Duration::ZERO,
            calibrated: None,
            max_context: Some(4096),
            slots: Some(4),
            service: Some(Service::Lognormal {
                mean_s: 0.5,
                sigma: 1.0,
            }),
            cliff: Some(Cliff {
                above: 8,
                slowdown: 4.0,
            }),
        };
        assert!(!serving.is_default_serving());
        assert_eq!(
            serving.describe(),
            [
                "max-num-seqs 512",
                "max-batched-tokens 16384",
                "kv-cache-tokens 400000",
                "gpu-memory-utilization 0.95",
                "prefix-caching #false",
                "chunked-prefill #false",
                "tensor-parallel 2",
                "compute-efficiency 0.55",
                "memory-efficiency 0.75",
                "step-overhead \"1.2ms\"",
                "per-seq-overhead \"12us\"",
                "reasoning-tokens lognormal median=200 sigma=0.5 max=2000",
                "tokens-per-event 4",
                "prompt-tokens-details #true",
                "replicas 2",
                "slots 4",
                "service \"lognormal\" mean=\"500ms\" sigma=1",
                "cliff above=8 slowdown=4",
            ]
        );
    }

    #[test]
    fn routers_by_name() {
        for router in SimRouter::ALL {
            assert_eq!(SimRouter::from_name(router.as_str()), Some(router));
        }
        assert_eq!(SimRouter::from_name("least_loaded"), None);
    }
}

/// Fault injection for the simulated engine (tests of clients).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SimFaults {
    /// Fraction of requests answered with HTTP 500.
    pub fail_rate: Fraction,
    /// Fraction of streams cut mid-way (connection dropped, no `[DONE]`).
    pub cut_rate: Fraction,
    /// A pause inserted once mid-stream in every response, if set.
    #[serde(with = "opt_duration_secs")]
    pub stall: Option<Duration>,
}
