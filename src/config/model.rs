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
    /// Targets with `vary` / `settings` lines: each was expanded into one
    /// target per setting (in `targets`); this says which belong together.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sweeps: Vec<Sweep>,
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
    /// The sweep a target (by its expanded name) belongs to, if any.
    pub fn sweep_of(&self, target: &str) -> Option<&Sweep> {
        self.sweeps
            .iter()
            .find(|s| s.settings.iter().any(|t| t == target))
    }
}

/// One target's serving settings, declared with `vary` lines (crossed) or a
/// `settings { setting … }` block (listed), expanded into one target per
/// setting named `base[name=value,…]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sweep {
    /// The target's name as written (`vllm`).
    pub target: String,
    /// The varied names, in the order of the file.
    pub names: Vec<String>,
    /// The expanded targets' names, in the order of the grid (the first
    /// name varies slowest).
    pub settings: Vec<String>,
    /// Each name's values in declared order (the grid's axes), for a
    /// search that moves to neighbouring settings; empty for a `settings`
    /// list, which has no axes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub axes: Vec<Vec<String>>,
    /// `tune …`: search the settings instead of measuring all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tune: Option<Tune>,
}

/// `tune slo="interactive" budget="2h"` (or `objective="cr-closed"`/`"cost"`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Tune {
    #[serde(skip)]
    pub span: Span,
    pub objective: TuneObjective,
    /// No setting is started once this much time has been spent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "opt_duration_secs"
    )]
    pub budget: Option<Duration>,
}

/// What `tune` maximises (or, for cost, minimises).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TuneObjective {
    /// The highest Cr_open within this SLO.
    CrOpen { slo: String },
    /// The highest output tok/s at Cr_closed.
    CrClosed,
    /// The lowest cost per million output tokens at Cr_closed.
    Cost,
}

/// One expanded target's setting: which sweep, and its values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setting {
    /// The target's name as written (`vllm`).
    pub base: String,
    /// `(name, value)` in the sweep's order, values as written.
    pub values: Vec<(String, String)>,
}

impl Setting {
    /// `max-num-seqs=128,max-batched-tokens=2048`: the part of the target's
    /// name in brackets, and the name of its server log.
    pub fn label(&self) -> String {
        self.values
            .iter()
            .map(|(n, v)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// `launch "program" "arg" … { ready URL timeout=; env NAME VALUE; grace;
/// dir }`: capcard starts the engine for the target's cards and stops it
/// after them. Placeholders `{name}` are filled from the target's setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Launch {
    /// The program and its arguments, placeholders filled.
    pub argv: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env: Vec<(String, String)>,
    /// Polled until it answers 2xx; `None`: until the endpoint's port
    /// accepts connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_url: Option<String>,
    /// How long the engine may take to become ready; default 10 minutes.
    #[serde(with = "duration_secs")]
    pub ready_timeout: Duration,
    /// SIGTERM, then SIGKILL after this; default 30 s.
    #[serde(with = "duration_secs")]
    pub grace: Duration,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<PathBuf>,
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
    /// `launch …`: capcard starts and stops the engine (endpoint targets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launch: Option<Launch>,
    /// The setting this target is, when it was expanded from `vary`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setting: Option<Setting>,
}

impl Target {
    /// A target as a `target` block with only `name` and its `endpoint` or
    /// `sim` line reads: every other line at the language's default (chat,
    /// a 120 s timeout, metrics found automatically, lengths forced). The
    /// decoder starts from these defaults too.
    pub fn new(name: impl Into<String>, kind: TargetKind) -> Target {
        Target {
            name: name.into(),
            span: None,
            kind,
            api: Api::default(),
            model: None,
            api_key_env: None,
            timeout: Duration::from_secs(120),
            hardware: None,
            runtime: None,
            cost: None,
            metrics: MetricsSource::Auto,
            tokenizer: None,
            http2: false,
            headers: Vec::new(),
            force_length: true,
            extra_body: serde_json::Map::new(),
            max_context: None,
            launch: None,
            setting: None,
        }
    }

    /// [`Target::new`] of a running server at `base_url`.
    pub fn endpoint(name: impl Into<String>, base_url: impl Into<String>) -> Target {
        let base_url = base_url.into();
        Target::new(name, TargetKind::Endpoint { base_url })
    }

    /// [`Target::new`] of the built-in engine as `preset` serves it.
    pub fn sim(name: impl Into<String>, preset: impl Into<String>) -> Target {
        let kind = TargetKind::Sim {
            preset: preset.into(),
            faults: SimFaults::default(),
            serving: SimServing::default(),
        };
        Target::new(name, kind)
    }
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
    pub loaded: Option<Arc<crate::data::tokenizer::PromptTokenizer>>,
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

/// The simulator's own knobs, re-exported where the experiment model names them.
pub use crate::sim::{SimFaults, SimRouter, SimServing};

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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    /// `sessions "path"`: each task is one recorded agent session,
    /// replayed call by call ([`crate::workload::TaskSpec::Graph`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<SessionsSpec>,
}

/// `sessions "data/harness-a.jsonl" tool-time-max="30s"`: an agent trace
/// (any format [`crate::data::agent_trace::parse_agent_trace`] reads); task
/// `i` is session `i mod n`, in the trace's order.
///
/// The file is read and parsed when the experiment is loaded from disk
/// ([`crate::config::load`]); `data` holds the parsed trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SessionsSpec {
    /// As resolved against the experiment's directory.
    pub path: PathBuf,
    #[serde(skip)]
    pub span: Span,
    /// Cap on each recorded gap between a call's parent's answer and the
    /// call (tool time); `None`: as recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_time_max_s: Option<f64>,
    #[serde(skip)]
    pub data: Option<Arc<crate::data::agent_trace::AgentTrace>>,
}

impl SessionsSpec {
    pub fn tool_time_max(&self) -> Option<std::time::Duration> {
        self.tool_time_max_s
            .map(|s| std::time::Duration::from_secs_f64(s.max(0.0)))
    }
}

/// `tools "tools.json"`: an OpenAI-style array of tool definitions
/// (`{"type": "function", "function": {"name", "description", "parameters"}}`).
///
/// The file is read and checked when the experiment is loaded from disk
/// ([`crate::config::load`]); `loaded` holds it, shared by every call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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
    pub data: Option<Arc<crate::data::dataset::Dataset>>,
}

/// Order in which dataset records become tasks.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Sample {
    /// Task `i` = record `π(i mod n)` for a permutation `π` seeded by the run's seed.
    #[default]
    Shuffle,
    /// Task `i` = record `i mod n`.
    Sequential,
}

impl Workload {
    /// Single requests of `input_tokens` prompt and `output_tokens` output
    /// tokens: a `workload` block with only its two length lines.
    pub fn new(name: impl Into<String>, input_tokens: Dist, output_tokens: Dist) -> Workload {
        Workload {
            name: name.into(),
            span: None,
            input_tokens,
            output_tokens,
            shared_prefix: None,
            conversation: None,
            agent: None,
            dataset: None,
            tools: None,
            sessions: None,
        }
    }

    /// What one open-loop arrival is: a request, a conversation or an agent task.
    pub fn unit(&self) -> ArrivalUnit {
        if self.agent.is_some() || self.sessions.is_some() {
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

impl ArrivalUnit {
    /// The open-loop rate's unit: `req/s`, `conversations/s`, `tasks/s`.
    pub fn per_s(self) -> &'static str {
        match self {
            ArrivalUnit::Request => "req/s",
            ArrivalUnit::Conversation => "conversations/s",
            ArrivalUnit::AgentTask => "tasks/s",
        }
    }

    /// What arrives, counted: `calls`, `conversations`, `tasks`.
    pub fn plural(self) -> &'static str {
        match self {
            ArrivalUnit::Request => "calls",
            ArrivalUnit::Conversation => "conversations",
            ArrivalUnit::AgentTask => "tasks",
        }
    }
}

/// `shared-prefix tokens=400 groups=4`: the first `tokens` of every prompt are
/// one of `groups` fixed prefixes (system prompts), chosen uniformly per task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SharedPrefix {
    pub tokens: u32,
    pub groups: u32,
}

/// `conversation { turns ...; think-time ... }`: multi-turn chat. Each turn
/// re-sends the whole history (previous prompts and answers) plus a new user
/// message whose length is drawn from `input-tokens`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Conversation {
    /// Number of turns (rounded, at least 1).
    pub turns: Dist,
    /// Pause between an answer and the next user message (seconds).
    pub think_time: Dist,
}

/// `agent { ... }`: one task = a loop of LLM calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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

pub use crate::dist::{Dist, DistKind};

// ---------------------------------------------------------------- SLOs

/// `slo "name" { ... }`: every clause must hold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Slo {
    pub name: String,
    #[serde(skip)]
    pub span: Span,
    pub clauses: Vec<SloClause>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "clause", rename_all = "kebab-case")]
pub enum SloClause {
    /// e.g. `ttft p99="1s"` → Latency { Ttft, Percentile(99), 1s }.
    Latency {
        metric: LatencyMetric,
        stat: Stat,
        #[serde(with = "duration_secs")]
        #[schemars(with = "f64")]
        limit: Duration,
    },
    /// `error-rate max="0.5%"`.
    ErrorRate { max: Fraction },
}

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
)]
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

/// A statistic of a latency distribution: the stats leaf's own type.
pub use crate::stats::Stat;

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

impl ClosedSpec {
    /// A sweep of `levels`, each run warmed for `warmup` then measured
    /// until `stop`; CrossP, the knee and repetitions at the language's
    /// defaults.
    pub fn new(levels: Vec<u32>, stop: StopRule, warmup: Duration) -> ClosedSpec {
        ClosedSpec {
            levels,
            stop,
            warmup,
            crossp: CrossPSpec::default(),
            knee: KneeSpec::default(),
            repeat: 1,
        }
    }
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

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
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

fn default_early_stop() -> bool {
    true
}

/// The confidence of a Cr_open range unless `search ... confidence=` says.
pub fn default_range_confidence() -> Fraction {
    Fraction(0.9)
}

fn default_confidence() -> Fraction {
    Fraction(crate::stats::interval::DEFAULT_CONFIDENCE)
}

impl OpenSpec {
    /// Poisson arrivals at `rates`, each run warmed for `warmup` then
    /// measured until `stop`; confidence, budget, repetitions and frontier
    /// at the language's defaults.
    pub fn new(rates: RateSelection, stop: StopRule, warmup: Duration) -> OpenSpec {
        OpenSpec {
            arrival: Arrival::Poisson,
            rates,
            stop,
            warmup,
            trace: None,
            confidence: default_confidence(),
            budget: None,
            repeat: 1,
            frontier: Vec::new(),
        }
    }

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
    pub data: Option<Arc<crate::data::trace::Trace>>,
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
    /// `arrival recorded`: each `sessions` workload's sessions start at
    /// their recorded times; the rate sets the speedup (rate / the trace's
    /// session rate), and the recorded pattern repeats when a run outlasts it.
    Recorded,
}

impl Arrival {
    pub fn label(&self) -> String {
        match self {
            Arrival::Constant => "constant".into(),
            Arrival::Poisson => "poisson".into(),
            Arrival::Gamma { cv } => format!("gamma cv={cv}"),
            Arrival::Trace => "trace".into(),
            Arrival::Recorded => "recorded".into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum RateSelection {
    /// `search min=0.5 max=64 precision="5%"`: find Cr_open per SLO, to
    /// within ±precision of the estimate, its range at `confidence`
    /// (`confidence="90%"`, the default).
    Search {
        min: RatePerS,
        max: RatePerS,
        precision: Fraction,
        #[serde(default = "default_range_confidence")]
        confidence: Fraction,
        /// `early-stop=#false`: every run lasts its planned length. By
        /// default a run decisively beyond every SLO of its card ends early
        /// (a sequential one-sided binomial test, `analyze::decisive`).
        #[serde(default = "default_early_stop")]
        early_stop: bool,
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
    /// `cr-open "estimate"`: size `rps=` targets on Cr_open's estimate
    /// instead of its promise (the range's lower end, the default).
    #[serde(default, skip_serializing_if = "CrOpenUse::is_promise")]
    pub cr_open: CrOpenUse,
}

/// Which figure of Cr_open sizes a fleet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CrOpenUse {
    /// The range's lower end: what the runs support at the card's confidence.
    #[default]
    Promise,
    /// The point estimate: as likely above the truth as below.
    Estimate,
}

impl CrOpenUse {
    pub fn is_promise(&self) -> bool {
        *self == CrOpenUse::Promise
    }
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

pub use crate::quantity::{Fraction, RatePerS, duration_secs, opt_duration_secs};

#[cfg(test)]
mod tests {
    use super::*;

    /// The constructors are the blocks with only their required lines, as
    /// the decoder reads them: one set of defaults.
    #[test]
    fn constructors_give_what_minimal_blocks_decode_to() {
        let text = r#"
target "e" { endpoint "http://127.0.0.1:8000/v1"; }
target "s" { sim tiny; }
workload "w" { input-tokens fixed 100; output-tokens fixed 50; }
closed { concurrency 1 2; duration "30s"; }
open { rates 1 2; duration "60s"; }
"#;
        let experiment = crate::config::parse(text, std::path::Path::new("x.kdl")).expect("valid");
        let unspanned = |t: &Target| Target {
            span: None,
            ..t.clone()
        };
        assert_eq!(
            unspanned(&experiment.targets[0]),
            Target::endpoint("e", "http://127.0.0.1:8000/v1")
        );
        assert_eq!(unspanned(&experiment.targets[1]), Target::sim("s", "tiny"));
        assert_eq!(
            Workload {
                span: None,
                ..experiment.workloads[0].clone()
            },
            Workload::new("w", Dist::fixed(100.0), Dist::fixed(50.0))
        );
        assert_eq!(
            experiment.closed,
            Some(ClosedSpec::new(
                vec![1, 2],
                StopRule::Duration(Duration::from_secs(30)),
                Duration::ZERO
            ))
        );
        let rates = RateSelection::Grid {
            rates: vec![RatePerS(1.0), RatePerS(2.0)],
        };
        assert_eq!(
            experiment.open,
            Some(OpenSpec::new(
                rates,
                StopRule::Duration(Duration::from_secs(60)),
                Duration::ZERO
            ))
        );
    }
}
