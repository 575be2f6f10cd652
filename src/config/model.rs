//! The typed, validated experiment: what a KDL file means once every value
//! has been checked. Later stages only ever see these types, never KDL.
//!
//! Values carry their unit in their type (`Duration`, [`Fraction`],
//! [`RatePerS`], token counts as `u32`), and named items keep the span of
//! their name so later stages (plan, run) can point back into the file.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use miette::SourceSpan;
use serde::{Deserialize, Serialize};

/// One experiment file, fully decoded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Experiment {
    /// `experiment "name"`; defaults to the file stem.
    pub name: String,
    /// Free-text description for the card.
    pub description: Option<String>,
    /// Every random choice (lengths, prefixes, arrivals) derives from this.
    pub seed: u64,
    pub targets: Vec<Target>,
    pub workloads: Vec<Workload>,
    pub slos: Vec<Slo>,
    /// `mix "name" { class ... }`: request classes served together, each
    /// held to its own SLO.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mixes: Vec<Mix>,
    /// `closed { }`: the concurrency sweep (→ CrossP, Cr_closed).
    pub closed: Option<ClosedSpec>,
    /// `open { }`: the open-loop runs (→ Cr_open).
    pub open: Option<OpenSpec>,
    /// `sizing { }`: replica counts and cost.
    pub sizing: Option<SizingSpec>,
    /// Directory of the experiment file, for relative paths (datasets, traces).
    #[serde(skip)]
    pub base_dir: Option<PathBuf>,
}

impl Experiment {
    pub fn target(&self, name: &str) -> Option<&Target> {
        self.targets.iter().find(|t| t.name == name)
    }
    pub fn workload(&self, name: &str) -> Option<&Workload> {
        self.workloads.iter().find(|w| w.name == name)
    }
    pub fn slo(&self, name: &str) -> Option<&Slo> {
        self.slos.iter().find(|s| s.name == name)
    }
    /// The SLOs named in `names`, in the file's order.
    pub fn slos_named(&self, names: &[String]) -> Vec<Slo> {
        self.slos
            .iter()
            .filter(|s| names.contains(&s.name))
            .cloned()
            .collect()
    }
    pub fn mix(&self, name: &str) -> Option<&Mix> {
        self.mixes.iter().find(|m| m.name == name)
    }
}

/// A span that is absent for items built in code rather than parsed.
pub type Span = Option<SourceSpan>;

// ---------------------------------------------------------------- targets

/// One replica under test.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    pub name: String,
    #[serde(skip)]
    pub span: Span,
    pub kind: TargetKind,
    /// `api chat | completions`; default `chat`.
    pub api: Api,
    /// Model id sent in requests; `None` = first id of `GET /v1/models`.
    pub model: Option<String>,
    /// Name of the environment variable that holds the API key (never the key).
    pub api_key_env: Option<String>,
    /// Per-request timeout; default 120 s.
    #[serde(with = "duration_secs")]
    pub timeout: Duration,
    /// Card metadata, free text.
    pub hardware: Option<String>,
    pub runtime: Option<String>,
    /// `cost-per-hour 2.49 currency=EUR`, per replica.
    pub cost: Option<Cost>,
    /// `metrics "http://host:8000/metrics"` / `metrics #false`: where to
    /// scrape the server's Prometheus telemetry during runs.
    #[serde(default)]
    pub metrics: MetricsSource,
    /// `tokenizer "path/to/tokenizer.json"`: size synthetic prompt text
    /// exactly with the model's own tokenizer (needs the `tokenizer` build
    /// feature); `None` = the word approximation of [`crate::workload::prompt`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<TokenizerSpec>,
    /// `http2 #true`: let calls share HTTP/2 connections where the server
    /// offers it; default HTTP/1.1 with one connection per call in flight.
    #[serde(default)]
    pub http2: bool,
    /// `header "name" "value"` / `header "name" env=VAR`: sent with every
    /// call, the model probe and telemetry scrapes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub headers: Vec<HeaderSpec>,
    /// `force-length #false`: do not send `ignore_eos` / `min_tokens`.
    #[serde(default = "yes")]
    pub force_length: bool,
    /// `extra-body { name value ... }`: fields added to every call's body.
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub extra_body: serde_json::Map<String, serde_json::Value>,
    /// `max-context 131072`: the longest prompt + output the model accepts,
    /// in tokens. An endpoint's declared window (the server's own report
    /// wins where it gives one, and the two are compared); a `sim`'s engine
    /// window (vLLM's `--max-model-len`, see [`SimServing::max_context`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_context: Option<u32>,
}

fn yes() -> bool {
    true
}

/// One `header` line of a target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeaderSpec {
    pub name: String,
    pub value: HeaderValueSpec,
}

/// Where a header's value comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HeaderValueSpec {
    /// Written in the file.
    Literal(String),
    /// Read from this environment variable at run time (never journaled).
    Env(String),
}

/// `tokenizer "tokenizer.json"` on a target.
///
/// The file is read and parsed when the experiment is loaded from disk
/// ([`crate::config::load`]); `loaded` holds it, shared by every run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenizerSpec {
    /// As resolved against the experiment's directory.
    pub path: PathBuf,
    #[serde(skip)]
    pub span: Span,
    #[serde(skip)]
    pub loaded: Option<Arc<crate::workload::tokenize::PromptTokenizer>>,
}

/// Where server telemetry comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum MetricsSource {
    /// The endpoint's own `/metrics` (the base URL without `/v1`), if it
    /// answers when the run starts.
    #[default]
    Auto,
    /// `metrics #false`: no scraping.
    Off,
    /// `metrics "URL"`: scrape this URL; failures are recorded, not fatal.
    Url { url: String },
}

// A handful of targets per experiment, matched on everywhere: boxing the
// sim's knobs would cost more reading than the bytes it saves.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TargetKind {
    /// `endpoint "http://127.0.0.1:8000/v1"`: an OpenAI-compatible base URL.
    Endpoint { base_url: String },
    /// `sim PRESET [fail-rate=] [cut-rate=] [stall=] { knobs }`: the built-in
    /// engine, started in-process (or run on its own clock: `virtual`).
    Sim {
        preset: String,
        faults: SimFaults,
        /// The `sim` block's children: serving parameters that override the
        /// preset's, replicas, virtual time.
        #[serde(default)]
        serving: SimServing,
    },
}

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
            replicas: 1,
            router: SimRouter::default(),
            virtual_time: false,
            network_overhead: Duration::ZERO,
            calibrated: None,
            max_context: None,
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
            && self.replicas == 1
    }

    /// The knobs that are set, one line each as the `sim { }` block writes
    /// them (`max-num-seqs 512`, `replicas 2 router=least-loaded`,
    /// `prefix-caching #false`), in declaration order; empty for a preset
    /// run as it is. For cards. The target's `max-context` is not among them:
    /// it is a line of the target, and the card gives the window its own row.
    pub fn describe(&self) -> Vec<String> {
        fn secs(d: Duration) -> String {
            format!("\"{}\"", super::units::format_secs(d.as_secs_f64()))
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
mod sim_serving_tests {
    use super::*;

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
            replicas: 2,
            router: SimRouter::default(),
            virtual_time: false,
            network_overhead: Duration::ZERO,
            calibrated: None,
            max_context: Some(4096),
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
                "replicas 2",
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

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    /// `POST /v1/chat/completions`
    #[default]
    Chat,
    /// `POST /v1/completions`
    Completions,
    /// `POST /v1/responses`: the Responses API (typed stream events).
    Responses,
}

impl Api {
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Chat => "chat",
            Api::Completions => "completions",
            Api::Responses => "responses",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cost {
    pub per_hour: f64,
    /// ISO-ish currency label, free text; default "USD".
    pub currency: String,
}

// ---------------------------------------------------------------- workloads

/// A data profile: how requests look.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    pub name: String,
    #[serde(skip)]
    pub span: Span,
    /// Prompt length (tokens) of a single request, or of the first turn / initial task context.
    pub input_tokens: Dist,
    /// Output length (tokens) of each call.
    pub output_tokens: Dist,
    pub shared_prefix: Option<SharedPrefix>,
    pub conversation: Option<Conversation>,
    pub agent: Option<Agent>,
    /// `dataset "path"`: requests come from recorded prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dataset: Option<DatasetSpec>,
    /// `tools "tools.json"`: tool definitions sent with every call; an
    /// agent's steps then talk as agents do (tool calls and their results).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<ToolsSpec>,
}

/// `tools "tools.json"`: an OpenAI-style array of tool definitions
/// (`{"type": "function", "function": {"name", "description", "parameters"}}`).
///
/// The file is read and checked when the experiment is loaded from disk
/// ([`crate::config::load`]); `loaded` holds it, shared by every call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolsSpec {
    /// As resolved against the experiment's directory.
    pub path: PathBuf,
    #[serde(skip)]
    pub span: Span,
    /// The tools, as sent; `None` until loaded.
    #[serde(skip)]
    pub loaded: Option<std::sync::Arc<serde_json::Value>>,
    /// The first tool's name: what an agent's synthetic tool calls name.
    #[serde(skip)]
    pub first_name: Option<String>,
}

/// `dataset "data/prompts.jsonl" sample="shuffle" max-input-tokens=4096`.
///
/// The file is read and parsed when the experiment is loaded from disk
/// ([`crate::config::load`]); `data` holds the parsed records (filtered by
/// `max_input_tokens`), shared by every task generator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetSpec {
    /// As resolved against the experiment's directory.
    pub path: PathBuf,
    #[serde(skip)]
    pub span: Span,
    pub sample: Sample,
    /// Records with longer prompts (word approximation) are left out.
    pub max_input_tokens: Option<u32>,
    /// `input-tokens` was not given: it is the dataset's measured distribution.
    #[serde(default)]
    pub input_from_data: bool,
    /// `output-tokens` was not given: every record carries its output length.
    #[serde(default)]
    pub output_from_data: bool,
    #[serde(skip)]
    pub data: Option<Arc<crate::workload::dataset::Dataset>>,
}

/// Order in which dataset records become tasks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sample {
    /// Task `i` = record `π(i mod n)` for a permutation `π` seeded by the run's seed.
    #[default]
    Shuffle,
    /// Task `i` = record `i mod n`.
    Sequential,
}

impl Workload {
    /// What one open-loop arrival is: a request, a conversation or an agent task.
    pub fn unit(&self) -> ArrivalUnit {
        if self.agent.is_some() {
            ArrivalUnit::AgentTask
        } else if self.conversation.is_some() {
            ArrivalUnit::Conversation
        } else {
            ArrivalUnit::Request
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ArrivalUnit {
    Request,
    Conversation,
    AgentTask,
}

/// `shared-prefix tokens=400 groups=4`: the first `tokens` of every prompt are
/// one of `groups` fixed prefixes (system prompts), chosen uniformly per task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SharedPrefix {
    pub tokens: u32,
    pub groups: u32,
}

/// `conversation { turns ...; think-time ... }`: multi-turn chat. Each turn
/// re-sends the whole history (previous prompts and answers) plus a new user
/// message whose length is drawn from `input-tokens`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Conversation {
    /// Number of turns (rounded, at least 1).
    pub turns: Dist,
    /// Pause between an answer and the next user message (seconds).
    pub think_time: Dist,
}

/// `agent { ... }`: one task = a loop of LLM calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Agent {
    /// Sequential steps per task (rounded, at least 1).
    pub steps: Dist,
    /// Parallel calls per step (rounded, at least 1).
    pub fan_out: Dist,
    /// Pause between steps (seconds), for tool execution.
    pub tool_time: Dist,
    /// Tokens appended to the shared context after each step.
    pub context_growth: Dist,
}

/// A probability distribution over token counts or times.
///
/// Values are in the base unit of the quantity: tokens, or seconds for
/// times (`mean="4s"` is stored as 4.0). `min`/`max` clamp every draw.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dist {
    pub kind: DistKind,
    pub min: Option<f64>,
    pub max: Option<f64>,
}

impl Dist {
    /// The largest value a draw can take, when the distribution is bounded
    /// (a `max=` clamp, or a fixed, uniform or empirical law); `None` for an
    /// unbounded tail.
    pub fn upper_bound(&self) -> Option<f64> {
        let law = match &self.kind {
            DistKind::Fixed { value } => Some(*value),
            DistKind::Uniform { max, .. } => Some(*max),
            DistKind::Empirical { points } => points.iter().map(|p| p.0).reduce(f64::max),
            _ => None,
        };
        match (law, self.max) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    pub fn fixed(v: f64) -> Self {
        Dist {
            kind: DistKind::Fixed { value: v },
            min: None,
            max: None,
        }
    }

    /// The distribution of a token count as a file writes it after the
    /// node's name, clamps included (`lognormal median=200 sigma=0.5
    /// max=2000`), so that the decoder reads it back as it is. For cards.
    pub fn kdl_words(&self) -> String {
        let mut words = match &self.kind {
            DistKind::Fixed { value } => format!("fixed {value}"),
            DistKind::Uniform { min, max } => format!("uniform min={min} max={max}"),
            DistKind::Normal { mean, stddev } => format!("normal mean={mean} stddev={stddev}"),
            DistKind::LogNormal { median, sigma } => {
                format!("lognormal median={median} sigma={sigma}")
            }
            DistKind::Exponential { mean } => format!("exponential mean={mean}"),
            DistKind::Gamma { shape, scale } => format!("gamma shape={shape} scale={scale}"),
            DistKind::Empirical { points } => {
                let values: Vec<String> = points
                    .iter()
                    .map(|(value, weight)| format!("value {value} weight={weight}"))
                    .collect();
                format!("empirical {{ {} }}", values.join("; "))
            }
        };
        // A uniform's bounds are its parameters, not clamps.
        if !matches!(self.kind, DistKind::Uniform { .. }) {
            for (name, bound) in [("min", self.min), ("max", self.max)] {
                if let Some(bound) = bound {
                    words.push_str(&format!(" {name}={bound}"));
                }
            }
        }
        words
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "dist", rename_all = "kebab-case")]
pub enum DistKind {
    Fixed {
        value: f64,
    },
    Uniform {
        min: f64,
        max: f64,
    },
    Normal {
        mean: f64,
        stddev: f64,
    },
    /// Parameterised by the median (= e^mu) and sigma of the underlying
    /// normal; `mean=`/`stddev=` in the file are converted to these.
    LogNormal {
        median: f64,
        sigma: f64,
    },
    Exponential {
        mean: f64,
    },
    Gamma {
        shape: f64,
        scale: f64,
    },
    /// `(value, weight)` pairs; weights need not sum to 1.
    Empirical {
        points: Vec<(f64, f64)>,
    },
}

// ---------------------------------------------------------------- SLOs

/// `slo "name" { ... }`: every clause must hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Slo {
    pub name: String,
    #[serde(skip)]
    pub span: Span,
    pub clauses: Vec<SloClause>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "clause", rename_all = "kebab-case")]
pub enum SloClause {
    /// e.g. `ttft p99="1s"` → Latency { Ttft, Percentile(99), 1s }.
    Latency {
        metric: LatencyMetric,
        stat: Stat,
        #[serde(with = "duration_secs")]
        limit: Duration,
    },
    /// `error-rate max="0.5%"`.
    ErrorRate { max: Fraction },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LatencyMetric {
    /// Time to the first generated token (reasoning, content or tool call).
    Ttft,
    /// Time to the first output token (content or tool call, after any
    /// reasoning): when the answer starts.
    Ttfo,
    /// Inter-token (inter-chunk) latency.
    Itl,
    /// Time per output token after the first: (E2E − TTFT)/(tokens − 1).
    Tpot,
    /// Request start → end of stream.
    E2e,
    /// Whole conversation / agent task, start → last call done.
    TaskE2e,
}

impl LatencyMetric {
    pub fn as_str(self) -> &'static str {
        match self {
            LatencyMetric::Ttft => "ttft",
            LatencyMetric::Ttfo => "ttfo",
            LatencyMetric::Itl => "itl",
            LatencyMetric::Tpot => "tpot",
            LatencyMetric::E2e => "e2e",
            LatencyMetric::TaskE2e => "task-e2e",
        }
    }
}

/// A statistic of a latency distribution.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stat {
    Mean,
    /// Percentile in (0, 100), e.g. 99.0 or 99.9.
    Percentile(f64),
}

impl Stat {
    /// `"mean"`, `"p50"`, `"p99.9"`: the key used in summaries and JSON.
    pub fn key(self) -> String {
        match self {
            Stat::Mean => "mean".to_string(),
            Stat::Percentile(p) => {
                if p.fract() == 0.0 {
                    format!("p{}", p as u32)
                } else {
                    format!("p{p}")
                }
            }
        }
    }
}

// ---------------------------------------------------------------- mixes

/// `mix "production" { class "chat" workload="chat" slo="interactive" weight=70 ... }`:
/// several request classes on one replica. In open loop one arrival process
/// drives the mix and each arrival draws its class from the seeded weights;
/// in closed loop each slot draws the class of every task it starts, so the
/// c slots are shared by the weights. Cr_open of a mix is the highest total
/// rate at which every class meets its own SLO.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Mix {
    pub name: String,
    #[serde(skip)]
    pub span: Span,
    /// In file order; at least one.
    pub classes: Vec<MixClass>,
    /// `weights 60 20 20`: further weight settings (one weight per class, in
    /// class order), each measured as its own card: "what if the mix
    /// changes?".
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub weight_settings: Vec<Vec<f64>>,
    /// `alone #true`: also measure each class's workload on its own, judged
    /// on its class's SLO, for comparison with the mix.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub alone: bool,
}

impl Mix {
    /// The declared weights, in class order.
    pub fn weights(&self) -> Vec<f64> {
        self.classes.iter().map(|c| c.weight).collect()
    }
}

/// One `class` of a mix.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MixClass {
    pub name: String,
    #[serde(skip)]
    pub span: Span,
    /// The workload its requests are drawn from.
    pub workload: String,
    /// The SLO it is held to; needed for open loop and sizing.
    pub slo: Option<String>,
    /// Relative weight (> 0): its share of arrivals is weight / sum.
    pub weight: f64,
    /// `model="adapter"`: the model id its calls send (e.g. a LoRA adapter
    /// on the same endpoint); default the target's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `priority=0`: sent as the request's `priority` field (vLLM's
    /// priority scheduling: lower is served first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
}

// ---------------------------------------------------------------- closed / open

/// `closed { }`: the closed-loop concurrency sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClosedSpec {
    /// Strictly increasing, non-empty.
    pub levels: Vec<u32>,
    pub stop: StopRule,
    #[serde(with = "duration_secs")]
    pub warmup: Duration,
    /// `crossp metric=ttft stat=p50` (default ttft p50).
    pub crossp: CrossPSpec,
    /// `knee fraction=0.9 upper=0.97` (defaults 0.9 and 0.97).
    pub knee: KneeSpec,
    /// `repeat 3`: each level is run this many times (default 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub repeat: u32,
}

fn one() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// When a measured run ends (after warmup).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopRule {
    #[serde(with = "duration_secs")]
    Duration(Duration),
    /// Number of measured requests (calls) to complete.
    Requests(u64),
    /// Open loop on an arrival trace without `duration`/`requests`: the run
    /// lasts the trace. Only in [`OpenSpec::stop`]; the plan turns it into
    /// the duration of each replay ([`OpenSpec::stop_at`]).
    TraceEnd,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CrossPSpec {
    pub metric: LatencyMetric,
    pub stat: Stat,
}

impl Default for CrossPSpec {
    fn default() -> Self {
        CrossPSpec {
            metric: LatencyMetric::Ttft,
            stat: Stat::Percentile(50.0),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KneeSpec {
    /// Lower end of Cr_closed: smallest level with X ≥ lower·X_max.
    pub lower: f64,
    /// Upper end of Cr_closed: smallest level with X ≥ upper·X_max.
    pub upper: f64,
}

impl Default for KneeSpec {
    fn default() -> Self {
        KneeSpec {
            lower: 0.9,
            upper: 0.97,
        }
    }
}

/// `open { }`: open-loop runs at fixed arrival rates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpenSpec {
    pub arrival: Arrival,
    pub rates: RateSelection,
    pub stop: StopRule,
    #[serde(with = "duration_secs")]
    pub warmup: Duration,
    /// `arrival trace "path"`: arrivals and requests replayed from a file
    /// (then `arrival` is [`Arrival::Trace`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceSpec>,
    /// `confidence "95%"`: of the intervals behind every verdict.
    #[serde(default = "default_confidence")]
    pub confidence: Fraction,
    /// `budget "20m"`: measured time the open runs of one card may add by
    /// extending inconclusive rates (default: 4 × the longest run the search
    /// or grid makes).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "opt_duration_secs"
    )]
    pub budget: Option<Duration>,
    /// `repeat 3`: each rate is run this many times (default 1).
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub repeat: u32,
    /// `frontier 0.5 1.5`: multipliers of each latency clause's bound at
    /// which, after the search, extra rates resolve the SLO frontier (see
    /// `analyze::frontier::FrontierPhase`). Empty: no frontier phase; a
    /// results folder from before the setting reads as empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frontier: Vec<f64>,
}

fn default_confidence() -> Fraction {
    Fraction(0.95)
}

impl OpenSpec {
    /// How a run at `rate` stops. A trace replay without `duration` or
    /// `requests` lasts the trace: its span at the run's speedup, less the
    /// warmup (which the trace's first part fills), at least one second.
    pub fn stop_at(&self, rate: f64) -> StopRule {
        match (&self.stop, &self.trace) {
            (
                StopRule::TraceEnd,
                Some(TraceSpec {
                    data: Some(trace), ..
                }),
            ) => {
                let span_s = trace.span_s() / trace.speedup_for_rate(rate).max(1e-9);
                let measured = (span_s - self.warmup.as_secs_f64()).max(1.0);
                StopRule::Duration(Duration::from_secs_f64(measured.ceil()))
            }
            (stop, _) => *stop,
        }
    }
}

/// `arrival trace "data/trace.jsonl" speedup=2 block-tokens=512`.
///
/// A rate in the plan (grid or search) is replayed as the speedup
/// `rate / trace mean rate`; without `rates`/`search` the one run is at
/// `speedup` (filled in as a one-rate grid when the file is loaded).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceSpec {
    /// As resolved against the experiment's directory.
    pub path: PathBuf,
    #[serde(skip)]
    pub span: Span,
    /// Replay speed when the file gives the rate (no `rates`/`search`).
    pub speedup: Option<f64>,
    #[serde(skip)]
    pub speedup_span: Span,
    /// Tokens per Mooncake `hash_ids` block (default 512).
    pub block_tokens: u32,
    #[serde(skip)]
    pub data: Option<Arc<crate::workload::trace::Trace>>,
}

/// The arrival process of open-loop runs (of tasks, for agents/conversations).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "process", rename_all = "kebab-case")]
pub enum Arrival {
    /// Evenly spaced arrivals.
    Constant,
    /// Exponential inter-arrival gaps (CV 1).
    Poisson,
    /// Gamma inter-arrival gaps with the given coefficient of variation (>1 = bursty).
    Gamma { cv: f64 },
    /// Recorded arrivals (`OpenSpec::trace`); the rate sets the speedup.
    Trace,
}

impl Arrival {
    pub fn label(&self) -> String {
        match self {
            Arrival::Constant => "constant".into(),
            Arrival::Poisson => "poisson".into(),
            Arrival::Gamma { cv } => format!("gamma cv={cv}"),
            Arrival::Trace => "trace".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum RateSelection {
    /// `search min=0.5 max=64 precision="5%"`: find Cr_open per SLO.
    Search {
        min: RatePerS,
        max: RatePerS,
        precision: Fraction,
    },
    /// `rates 1 2 4 8`: an explicit grid (Cr_open = best passing grid rate).
    Grid { rates: Vec<RatePerS> },
}

// ---------------------------------------------------------------- sizing

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SizingSpec {
    pub targets: Vec<SizingTarget>,
    /// Fraction of Cr kept in reserve; default 30%.
    pub headroom: Fraction,
    /// Extra replicas for failover / rolling updates; default 0.
    pub spares: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum SizingTarget {
    /// `target rps=150 slo=interactive`: latency-first, uses Cr_open of that SLO.
    Rps { rps: RatePerS, slo: String },
    /// `target output-tokens-per-s=500000`: throughput-first, uses Cr_closed.
    OutputTokensPerS { tokens_per_s: f64 },
    /// `target rps=150 mix=production`: uses Cr_open of the mix (every class
    /// within its own SLO), at the mix's declared weights.
    MixRps { rps: RatePerS, mix: String },
}

impl SizingTarget {
    /// `"rps=150"` / `"output-tokens-per-s=500000"`: the label used in results.
    pub fn label(&self) -> String {
        match self {
            SizingTarget::Rps { rps, .. } => format!("rps={}", rps.0),
            SizingTarget::MixRps { rps, mix } => format!("rps={} mix={mix}", rps.0),
            SizingTarget::OutputTokensPerS { tokens_per_s } => {
                format!("output-tokens-per-s={tokens_per_s}")
            }
        }
    }
}

// ---------------------------------------------------------------- units

/// A fraction in [0, 1] (written `"5%"` or `0.05`).
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Fraction(pub f64);

/// A rate in requests (or tasks) per second.
#[derive(Debug, Clone, Copy, Default, PartialEq, PartialOrd, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RatePerS(pub f64);

/// Serialize `Duration` as fractional seconds (plan.json, results.json).
pub mod duration_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}

/// Serialize `Option<Duration>` as fractional seconds or null.
pub mod opt_duration_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        let secs = Option::<f64>::deserialize(d)?;
        secs.map(|s| Duration::try_from_secs_f64(s).map_err(serde::de::Error::custom))
            .transpose()
    }
}
