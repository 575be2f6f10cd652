//! The `target` block: one replica to measure, either a running server
//! (`endpoint`) or the built-in engine (`sim`, with its `{ knobs }`), with the
//! request options and card metadata that go with it.

use std::path::PathBuf;
use std::time::Duration;

use kdl::{KdlEntry, KdlNode, KdlValue};

use super::sweep::SweepDraft;
use super::values::found;
use super::{Decoder, Once, OneOf, children, span_of_name, value_span};
use crate::config::diag::{backticked, did_you_mean};
use crate::config::model::{
    Api, Cost, HeaderSpec, HeaderValueSpec, MetricsSource, SimFaults, SimRouter, SimServing, Sweep,
    Target, TargetKind, TokenizerSpec,
};
use crate::config::units;
use crate::config::validate as rules;

const TARGET_CHILDREN: &[&str] = &[
    "endpoint",
    "sim",
    "api",
    "model",
    "api-key-env",
    "timeout",
    "hardware",
    "runtime",
    "cost-per-hour",
    "metrics",
    "tokenizer",
    "http2",
    "force-length",
    "extra-body",
    "header",
    "max-context",
    "launch",
    "vary",
    "settings",
    "tune",
];
/// Target children that may repeat (all others at most once).
const TARGET_REPEATABLE: &[&str] = &["header", "vary"];
const APIS: &[&str] = &["chat", "completions", "responses"];
const SIM_USAGE: &str =
    "sim h100-llama3-8b [fail-rate=0.01] [cut-rate=0.01] [stall=\"2s\"] [{ knobs }]";
/// The children of `sim`, in the order of [`SimServing`]'s fields.
const SIM_KNOBS: &[&str] = &[
    "max-num-seqs",
    "max-batched-tokens",
    "kv-cache-tokens",
    "gpu-memory-utilization",
    "prefix-caching",
    "chunked-prefill",
    "tensor-parallel",
    "compute-efficiency",
    "memory-efficiency",
    "step-overhead",
    "per-seq-overhead",
    "reasoning-tokens",
    "tokens-per-event",
    "prompt-tokens-details",
    "replicas",
    "virtual",
    "network-overhead",
    "calibrated",
    "slots",
    "service",
    "cliff",
];
/// The knobs of `sim queue` alone (see [`crate::sim::queue`]).
const QUEUE_KNOBS: &[&str] = &["slots", "service", "cliff"];
/// The knobs a `sim queue` takes besides [`QUEUE_KNOBS`]: how it is run,
/// how many, and how its answers look; the batching engine's scheduler,
/// memory and cost knobs mean nothing to a queue.
const QUEUE_ALSO: &[&str] = &[
    "replicas",
    "virtual",
    "network-overhead",
    "calibrated",
    "tokens-per-event",
];
const SERVICE_USAGE: &str = "service \"exponential\" mean=\"100ms\"   // or \"deterministic\" mean=, \"lognormal\" mean= sigma=1, \"two-point\" short=\"50ms\" long=\"1s\" long-share=\"10%\"";
const CLIFF_USAGE: &str = "cliff above=8 slowdown=3   // service ×3 for calls that start while more than 8 are in service";
/// The knobs of [`SIM_KNOBS`] a setting may not vary: those whose value is
/// more than one plain value (a distribution, a block) or that choose how
/// the engine is run rather than how it serves.
const SIM_FIXED_KNOBS: &[&str] = &[
    "reasoning-tokens",
    "virtual",
    "network-overhead",
    "calibrated",
    "service",
    "cliff",
];

/// The knobs of `sim` a setting may vary (`vary`, `settings`), in the
/// order of [`SimServing`]'s fields.
pub(super) fn sim_variable_knobs() -> Vec<&'static str> {
    SIM_KNOBS
        .iter()
        .copied()
        .filter(|knob| !SIM_FIXED_KNOBS.contains(knob))
        .collect()
}

impl Decoder {
    /// The target, or one target per setting when it varies settings (see
    /// [`super::sweep`]), and the sweep that ties those together.
    pub(super) fn target(
        &mut self,
        node: &KdlNode,
        slos: &[String],
    ) -> Option<(Vec<Target>, Option<Sweep>)> {
        let name = self.item_name(node, "target");
        let mut ok = name.is_some();
        let mut once = Once::default();
        let mut engine = OneOf::default();
        let mut kind = None;
        // The defaults of every line a block leaves out.
        let defaults = Target::endpoint("", "");
        let mut api = defaults.api;
        let (mut model, mut api_key_env, mut hardware, mut runtime, mut cost) =
            (None, None, None, None, None);
        let mut metrics = defaults.metrics;
        let mut tokenizer = None;
        let mut timeout = defaults.timeout;
        let (mut http2, mut force_length) = (defaults.http2, defaults.force_length);
        let mut headers = Vec::new();
        let mut extra_body = serde_json::Map::new();
        let mut max_context = None;
        let mut launch = None;
        let mut sweep = SweepDraft::default();
        let engine_help = "a target is either an `endpoint` (a running server) or a `sim` (the built-in engine); make two targets to compare them";

        for child in children(node) {
            let child_name = child.name().value();
            if TARGET_CHILDREN.contains(&child_name)
                && !TARGET_REPEATABLE.contains(&child_name)
                && !self.once(&mut once, child)
            {
                ok = false;
                continue;
            }
            let value = match child_name {
                "endpoint" => {
                    if !self.one_of(&mut engine, child, engine_help) {
                        ok = false;
                        continue;
                    }
                    let usage = "endpoint \"http://127.0.0.1:8000/v1\"";
                    self.single(child, usage)
                        .and_then(|e| self.string(e, "endpoint", usage))
                        .filter(|url| self.issues(child, rules::check_endpoint(url)))
                        .map(|base_url| kind = Some(TargetKind::Endpoint { base_url }))
                }
                "sim" => {
                    if !self.one_of(&mut engine, child, engine_help) {
                        ok = false;
                        continue;
                    }
                    self.sim(child).map(|k| kind = Some(k))
                }
                "api" => {
                    let usage = "api chat   // or: api completions, api responses";
                    self.single(child, usage)
                        .and_then(|e| self.choice(e, "api", APIS))
                        .map(|a| {
                            api = match a {
                                "completions" => Api::Completions,
                                "responses" => Api::Responses,
                                _ => Api::Chat,
                            };
                        })
                }
                "model" => {
                    let usage = "model \"meta-llama/Llama-3.1-8B-Instruct\"";
                    self.single(child, usage)
                        .and_then(|e| self.string(e, "model", usage))
                        .map(|m| model = Some(m))
                }
                "api-key-env" => {
                    let usage = "api-key-env OPENAI_API_KEY";
                    self.single(child, usage)
                        .and_then(|e| self.string(e, "api-key-env", usage))
                        .filter(|env| self.issues(child, rules::check_api_key_env(env)))
                        .map(|env| api_key_env = Some(env))
                }
                "timeout" => {
                    let usage = "timeout \"120s\"";
                    self.single(child, usage)
                        .and_then(|e| self.duration(e, "timeout"))
                        .filter(|d| self.issues(child, rules::check_timeout(*d)))
                        .map(|d| timeout = d)
                }
                "hardware" => {
                    let usage = "hardware \"1x H100 SXM 80GB\"";
                    self.single(child, usage)
                        .and_then(|e| self.string(e, "hardware", usage))
                        .map(|h| hardware = Some(h))
                }
                "runtime" => {
                    let usage = "runtime \"vLLM 0.11 --max-num-seqs 256\"";
                    self.single(child, usage)
                        .and_then(|e| self.string(e, "runtime", usage))
                        .map(|r| runtime = Some(r))
                }
                "cost-per-hour" => self.cost(child).map(|c| cost = Some(c)),
                "metrics" => {
                    let usage = "metrics \"http://127.0.0.1:8000/metrics\"   // or: metrics #false";
                    self.single(child, usage)
                        .and_then(|e| self.metrics_source(e, usage))
                        .map(|m| metrics = m)
                }
                "tokenizer" => self.tokenizer(child).map(|t| tokenizer = Some(t)),
                "http2" => {
                    let usage = "http2 #true";
                    self.single(child, usage)
                        .and_then(|e| self.boolean(e, "http2", usage))
                        .map(|b| http2 = b)
                }
                "force-length" => {
                    let usage = "force-length #false   // send neither ignore_eos nor min_tokens";
                    self.single(child, usage)
                        .and_then(|e| self.boolean(e, "force-length", usage))
                        .map(|b| force_length = b)
                }
                // Repeatable: one line per header.
                "header" => self.header(child).map(|h| headers.push(h)),
                "extra-body" => self.extra_body(child).map(|m| extra_body = m),
                "launch" => self.launch(child).map(|l| launch = Some((l, child))),
                "vary" => {
                    sweep.vary.push(child);
                    Some(())
                }
                "settings" => {
                    sweep.settings = Some(child);
                    Some(())
                }
                "tune" => {
                    sweep.tune = Some(child);
                    Some(())
                }
                "max-context" => {
                    let usage = "max-context 131072   // prompt + output tokens the model accepts";
                    self.single(child, usage)
                        .and_then(|e| self.whole(e, "max-context", usage, u32::MAX.into()))
                        .filter(|n| self.issues(child, rules::check_sim_count("max-context", *n)))
                        .map(|n| max_context = Some(n as u32))
                }
                _ => {
                    self.unknown_node(child, Some(node), TARGET_CHILDREN);
                    None
                }
            };
            ok &= value.is_some();
        }
        if engine.given.is_none() {
            ok = false;
        }
        let engine_near_miss = self.near_miss(node, "endpoint") || self.near_miss(node, "sim");
        if engine.given.is_none() && name.is_some() && !engine_near_miss {
            self.error(
                span_of_name(node),
                "no endpoint or sim",
                format!("target `{}` has neither `endpoint` nor `sim`", name.as_deref().unwrap_or_default()),
                Some("add `endpoint \"http://127.0.0.1:8000/v1\"` for a running server, or `sim tiny` for the built-in engine".to_string()),
            );
            ok = false;
        }
        let (Some(name), Some(mut kind), true) = (name, kind, ok) else {
            return None;
        };
        // A simulated engine takes the window as vLLM's `--max-model-len`.
        if let TargetKind::Sim { serving, .. } = &mut kind {
            serving.max_context = max_context;
        }
        let target = Target {
            name,
            span: Some(
                node.entries()
                    .iter()
                    .find(|e| e.name().is_none())
                    .map_or(span_of_name(node), |e| e.span()),
            ),
            kind,
            api,
            model,
            api_key_env,
            timeout,
            hardware,
            runtime,
            cost,
            metrics,
            tokenizer,
            http2,
            headers,
            force_length,
            extra_body,
            max_context,
            launch: None,
            setting: None,
        };
        self.expand(target, launch, sweep, slos)
    }

    /// `header "name" "value"` or `header "name" env=VAR`.
    fn header(&mut self, node: &KdlNode) -> Option<HeaderSpec> {
        let usage = "header \"x-org\" \"my-org\"   // or: header \"x-api-key\" env=MY_KEY";
        let mut positional = node.entries().iter().filter(|e| e.name().is_none());
        let env = node
            .entries()
            .iter()
            .find(|e| e.name().is_some_and(|n| n.value() == "env"));
        let bad_prop = node
            .entries()
            .iter()
            .find(|e| e.name().is_some_and(|n| n.value() != "env"));
        if let Some(entry) = bad_prop {
            self.error(
                entry.span(),
                "unknown property",
                "`header` takes a name and a value, or a name and `env=`".to_string(),
                Some(format!("write it as `{usage}`")),
            );
            return None;
        }
        let name_entry = positional.next();
        let value_entry = positional.next();
        let Some(name_entry) = name_entry else {
            self.error(
                span_of_name(node),
                "missing header name",
                "`header` needs the header's name".to_string(),
                Some(format!("write it as `{usage}`")),
            );
            return None;
        };
        let name = self.string(name_entry, "header", usage)?;
        if !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_!#$%&'*+.^`|~".contains(&b))
            || name.is_empty()
        {
            self.error(
                value_span(name_entry),
                "not a header name",
                format!("`{name}` is not a valid HTTP header name"),
                Some("header names are letters, digits and `-`, like `x-api-key`".to_string()),
            );
            return None;
        }
        let value = match (value_entry, env) {
            (Some(v), None) => HeaderValueSpec::Literal(self.string(v, "header", usage)?),
            (None, Some(e)) => HeaderValueSpec::Env(self.string(e, "header", usage)?),
            (Some(v), Some(_)) => {
                self.error(
                    value_span(v),
                    "value given twice",
                    "`header` takes a value or `env=`, not both".to_string(),
                    Some(format!("write it as `{usage}`")),
                );
                return None;
            }
            (None, None) => {
                self.error(
                    span_of_name(node),
                    "missing header value",
                    format!("header `{name}` has no value"),
                    Some(format!("write it as `{usage}`")),
                );
                return None;
            }
        };
        Some(HeaderSpec { name, value })
    }

    /// `extra-body { temperature 0.7; priority 1 }`: one child per field,
    /// each with one value (string, number, bool or null).
    fn extra_body(&mut self, node: &KdlNode) -> Option<serde_json::Map<String, serde_json::Value>> {
        let mut map = serde_json::Map::new();
        let mut ok = true;
        for child in children(node) {
            let usage = "extra-body { priority 1; chat_template_kwargs_enable_thinking #false }";
            let Some(entry) = self.single(child, usage) else {
                ok = false;
                continue;
            };
            let value = match entry.value() {
                KdlValue::String(s) => serde_json::Value::String(s.clone()),
                KdlValue::Integer(i) => match i64::try_from(*i) {
                    Ok(i) => serde_json::Value::from(i),
                    Err(_) => serde_json::Value::from(*i as f64),
                },
                KdlValue::Float(f) => match serde_json::Number::from_f64(*f) {
                    Some(n) => serde_json::Value::Number(n),
                    None => {
                        self.error(
                            value_span(entry),
                            "not a JSON number",
                            "infinities and NaN cannot be sent in JSON".to_string(),
                            None,
                        );
                        ok = false;
                        continue;
                    }
                },
                KdlValue::Bool(b) => serde_json::Value::Bool(*b),
                KdlValue::Null => serde_json::Value::Null,
            };
            map.insert(child.name().value().to_string(), value);
        }
        ok.then_some(map)
    }

    /// `tokenizer "tokenizer.json"`; the file is read by [`crate::config::data`].
    fn tokenizer(&mut self, node: &KdlNode) -> Option<TokenizerSpec> {
        let usage = "tokenizer \"models/llama/tokenizer.json\"";
        let entry = self.single(node, usage)?;
        let path = self.string(entry, "tokenizer", usage)?;
        if !cfg!(feature = "tokenizer") {
            self.error(
                value_span(entry),
                "not in this build",
                "this capcard was built without the `tokenizer` feature".to_string(),
                Some("rebuild with `cargo install capcard --features tokenizer`, or remove the line: prompts are then sized by the word approximation and the server's reported usage is recorded as the truth".to_string()),
            );
            return None;
        }
        Some(TokenizerSpec {
            path: PathBuf::from(path),
            span: Some(value_span(entry)),
            loaded: None,
        })
    }

    fn metrics_source(&mut self, entry: &KdlEntry, usage: &str) -> Option<MetricsSource> {
        match entry.value() {
            KdlValue::Bool(false) => Some(MetricsSource::Off),
            KdlValue::Bool(true) => Some(MetricsSource::Auto),
            KdlValue::String(url) => {
                if url.starts_with("http://") || url.starts_with("https://") {
                    Some(MetricsSource::Url { url: url.clone() })
                } else {
                    self.error(
                        value_span(entry),
                        "not an http(s) URL",
                        format!("`metrics` expects an http(s) URL, found `{url}`"),
                        Some(format!("usage: {usage}")),
                    );
                    None
                }
            }
            other => {
                self.error(
                    value_span(entry),
                    "expected a URL or #false",
                    format!(
                        "`metrics` expects a URL string or #false, found {}",
                        found(other)
                    ),
                    Some(format!("usage: {usage}")),
                );
                None
            }
        }
    }

    fn sim(&mut self, node: &KdlNode) -> Option<TargetKind> {
        let usage = SIM_USAGE;
        let entries = self.entries(node, 1, &["fail-rate", "cut-rate", "stall"], usage);
        let mut ok = true;
        let preset = match entries.args.first() {
            Some(entry) => self
                .string(entry, "sim", usage)
                .filter(|p| self.issues(node, rules::check_preset(p))),
            None => {
                self.error(
                    span_of_name(node),
                    "preset missing",
                    "`sim` needs a preset name",
                    Some(format!(
                        "known presets: {}",
                        backticked(&crate::sim::presets::names())
                    )),
                );
                None
            }
        };
        let mut faults = SimFaults::default();
        if let Some(entry) = entries.prop("fail-rate") {
            match self.fraction(entry, "fail-rate") {
                Some(f) => faults.fail_rate = f,
                None => ok = false,
            }
        }
        if let Some(entry) = entries.prop("cut-rate") {
            match self.fraction(entry, "cut-rate") {
                Some(f) => faults.cut_rate = f,
                None => ok = false,
            }
        }
        if let Some(entry) = entries.prop("stall") {
            match self.duration(entry, "stall") {
                Some(d) => faults.stall = Some(d),
                None => ok = false,
            }
        }
        let serving = self.sim_serving(node);
        if let Some(p) = &preset {
            ok &= self.sim_knobs_fit_engine(node, p == "queue");
        }
        let (preset, serving) = (preset?, serving?);
        ok.then_some(TargetKind::Sim {
            preset,
            faults,
            serving,
        })
    }

    /// The `{ knobs }` block of `sim`: serving parameters that override the
    /// preset's, replicas behind one endpoint, and virtual time.
    fn sim_serving(&mut self, node: &KdlNode) -> Option<SimServing> {
        let mut serving = SimServing::default();
        let mut once = Once::default();
        let mut ok = true;
        // `network-overhead` is checked against `virtual` once both are read;
        // a broken `virtual` line is reported on its own, not again here.
        let (mut network_overhead, mut virtual_broken) = (None, false);
        for child in children(node) {
            let knob = child.name().value();
            if !SIM_KNOBS.contains(&knob) {
                self.unknown_knob(child);
                ok = false;
                continue;
            }
            if !self.once(&mut once, child) {
                ok = false;
                continue;
            }
            let value = match knob {
                "virtual" => {
                    let flag =
                        self.sim_flag(child, "virtual #true   // run on the engine's own clock");
                    virtual_broken = flag.is_none();
                    flag.map(|b| serving.virtual_time = b)
                }
                "network-overhead" => self
                    .sim_duration(child, "network-overhead \"0.3ms\"   // with virtual #true")
                    .map(|d| {
                        serving.network_overhead = d;
                        network_overhead = Some(child);
                    }),
                _ => self.sim_knob(child, &mut serving),
            };
            ok &= value.is_some();
        }
        if let Some(child) = network_overhead
            && !serving.virtual_time
            && !virtual_broken
        {
            self.issues(child, vec![rules::network_overhead_without_virtual()]);
            ok = false;
        }
        ok.then_some(serving)
    }

    /// One knob of `sim` other than `virtual` and `network-overhead` (which
    /// are read together), into `serving`: a line of the block, or a value
    /// of a `vary` line given as such a line.
    pub(super) fn sim_knob(&mut self, child: &KdlNode, serving: &mut SimServing) -> Option<()> {
        match child.name().value() {
            "max-num-seqs" => self
                .sim_count(child, "max-num-seqs 256", u32::MAX.into())
                .map(|n| serving.max_num_seqs = Some(n as u32)),
            "max-batched-tokens" => self
                .sim_count(child, "max-batched-tokens 8192", u32::MAX.into())
                .map(|n| serving.max_batched_tokens = Some(n as u32)),
            "kv-cache-tokens" => self
                .sim_count(child, "kv-cache-tokens 400000", u64::MAX)
                .map(|n| serving.kv_cache_tokens = Some(n)),
            "tensor-parallel" => self
                .sim_count(child, "tensor-parallel 2", u32::MAX.into())
                .map(|n| serving.tensor_parallel = Some(n as u32)),
            "gpu-memory-utilization" => self
                .sim_share(child, "gpu-memory-utilization 0.9")
                .map(|f| serving.gpu_memory_utilization = Some(f)),
            "compute-efficiency" => self
                .sim_share(child, "compute-efficiency 0.55")
                .map(|f| serving.compute_efficiency = Some(f)),
            "memory-efficiency" => self
                .sim_share(child, "memory-efficiency 0.75")
                .map(|f| serving.memory_efficiency = Some(f)),
            "prefix-caching" => self
                .sim_flag(child, "prefix-caching #false")
                .map(|b| serving.prefix_caching = Some(b)),
            "prompt-tokens-details" => self
                .sim_flag(child, "prompt-tokens-details #true")
                .map(|b| serving.prompt_tokens_details = Some(b)),
            "chunked-prefill" => self
                .sim_flag(child, "chunked-prefill #false")
                .map(|b| serving.chunked_prefill = Some(b)),
            "step-overhead" => self
                .sim_duration(child, "step-overhead \"1.2ms\"")
                .map(|d| serving.step_overhead = Some(d)),
            "per-seq-overhead" => self
                .sim_duration(child, "per-seq-overhead \"12us\"")
                .map(|d| serving.per_seq_overhead = Some(d)),
            "reasoning-tokens" => self
                .dist(child, rules::Quantity::Tokens)
                .map(|d| serving.reasoning_tokens = Some(d)),
            "tokens-per-event" => self
                .sim_count(child, "tokens-per-event 4", u32::MAX.into())
                .map(|n| serving.tokens_per_event = Some(n as u32)),
            "slots" => self
                .sim_count(child, "slots 4", u32::MAX.into())
                .map(|n| serving.slots = Some(n as u32)),
            "service" => self.sim_service(child).map(|s| serving.service = Some(s)),
            "cliff" => self.sim_cliff(child).map(|c| serving.cliff = Some(c)),
            "replicas" => self.sim_replicas(child).map(|(replicas, router)| {
                serving.replicas = replicas;
                serving.router = router;
            }),
            "calibrated" => {
                let usage = "calibrated \"runs/lv: TTFT p50 +3%, ITL p50 -2%\"";
                self.single(child, usage)
                    .and_then(|e| self.string(e, "calibrated", usage))
                    .map(|c| serving.calibrated = Some(c))
            }
            other => unreachable!("`{other}` is no knob of SIM_KNOBS decoded here"),
        }
    }

    /// A queue takes only its own knobs and the few that drive any engine;
    /// the batching engine takes none of the queue's. `false` after
    /// reporting a knob given to the wrong engine.
    fn sim_knobs_fit_engine(&mut self, node: &KdlNode, queue: bool) -> bool {
        let mut ok = true;
        for child in children(node) {
            let knob = child.name().value();
            if !SIM_KNOBS.contains(&knob) {
                continue;
            }
            if queue && !QUEUE_KNOBS.contains(&knob) && !QUEUE_ALSO.contains(&knob) {
                self.error(
                    span_of_name(child),
                    "not a queue knob",
                    format!("`{knob}` is a knob of the batching engine, not of `sim queue`"),
                    Some(format!(
                        "a queue is its slots and service time: {}; it also takes {}",
                        backticked(QUEUE_KNOBS),
                        backticked(QUEUE_ALSO)
                    )),
                );
                ok = false;
            } else if !queue && QUEUE_KNOBS.contains(&knob) {
                self.error(
                    span_of_name(child),
                    "a queue knob",
                    format!("`{knob}` is a knob of `sim queue`, not of this preset"),
                    Some(
                        "use `sim queue { slots 4; service \"exponential\" mean=\"100ms\" }` \
                         for a queue with a known answer (docs/audit.md)"
                            .to_string(),
                    ),
                );
                ok = false;
            }
        }
        ok
    }

    /// `service "lognormal" mean="500ms" sigma=1`: a service-time
    /// distribution of `sim queue`.
    fn sim_service(&mut self, child: &KdlNode) -> Option<crate::sim::queue::Service> {
        use crate::sim::queue::Service;
        let usage = SERVICE_USAGE;
        self.no_children(child, usage);
        let entries = self.entries(
            child,
            1,
            &["mean", "sigma", "short", "long", "long-share"],
            usage,
        );
        let Some(kind_entry) = entries.args.first() else {
            self.missing_value(child, usage);
            return None;
        };
        let kind = self.string(kind_entry, "service", usage)?;
        let seconds = |this: &mut Self, name: &str| -> Option<f64> {
            match entries.prop(name) {
                Some(e) => {
                    let d = this.duration(e, name)?;
                    if d.is_zero() {
                        this.error(
                            value_span(e),
                            "zero",
                            format!("`{name}` must be longer than zero"),
                            Some(format!("usage: {usage}")),
                        );
                        return None;
                    }
                    Some(d.as_secs_f64())
                }
                None => {
                    this.error(
                        span_of_name(child),
                        "missing property",
                        format!("`service \"{kind}\"` needs `{name}=`"),
                        Some(format!("usage: {usage}")),
                    );
                    None
                }
            }
        };
        let extra = |this: &mut Self, allowed: &[&str]| -> bool {
            let mut ok = true;
            for name in ["mean", "sigma", "short", "long", "long-share"] {
                if !allowed.contains(&name)
                    && let Some(e) = entries.prop(name)
                {
                    this.error(
                        e.span(),
                        "not for this distribution",
                        format!("`{name}=` does not apply to `service \"{kind}\"`"),
                        Some(format!("usage: {usage}")),
                    );
                    ok = false;
                }
            }
            ok
        };
        match kind.as_str() {
            "exponential" => {
                let ok = extra(self, &["mean"]);
                let mean_s = seconds(self, "mean")?;
                ok.then_some(Service::Exponential { mean_s })
            }
            "deterministic" => {
                let ok = extra(self, &["mean"]);
                let mean_s = seconds(self, "mean")?;
                ok.then_some(Service::Deterministic { mean_s })
            }
            "lognormal" => {
                let ok = extra(self, &["mean", "sigma"]);
                let mean_s = seconds(self, "mean");
                let sigma = match entries.prop("sigma") {
                    Some(e) => self.number(e, "sigma", usage).filter(|s| {
                        let fine = *s > 0.0 && *s <= 4.0;
                        if !fine {
                            self.error(
                                value_span(e),
                                "out of range",
                                format!("`sigma` must be above 0 and at most 4, got {s}"),
                                Some("σ is the spread of the log of the service time: 0.5 is moderate, 1 heavy-tailed (p99 ≈ 6× the median)".to_string()),
                            );
                        }
                        fine
                    }),
                    None => {
                        self.error(
                            span_of_name(child),
                            "missing property",
                            "`service \"lognormal\"` needs `sigma=`",
                            Some(format!("usage: {usage}")),
                        );
                        None
                    }
                };
                let (mean_s, sigma) = (mean_s?, sigma?);
                ok.then_some(Service::Lognormal { mean_s, sigma })
            }
            "two-point" => {
                let ok = extra(self, &["short", "long", "long-share"]);
                let short_s = seconds(self, "short");
                let long_s = seconds(self, "long");
                let share = match entries.prop("long-share") {
                    Some(e) => self.fraction(e, "long-share").map(|f| f.0),
                    None => {
                        self.error(
                            span_of_name(child),
                            "missing property",
                            "`service \"two-point\"` needs `long-share=`",
                            Some(format!("usage: {usage}")),
                        );
                        None
                    }
                };
                let (short_s, long_s, long_share) = (short_s?, long_s?, share?);
                ok.then_some(Service::TwoPoint {
                    short_s,
                    long_s,
                    long_share,
                })
            }
            other => {
                let kinds = ["exponential", "deterministic", "lognormal", "two-point"];
                let help = match did_you_mean(other, &kinds) {
                    Some(near) => format!("did you mean `{near}`? usage: {usage}"),
                    None => format!("the distributions: {}; usage: {usage}", backticked(&kinds)),
                };
                self.error(
                    value_span(kind_entry),
                    "unknown distribution",
                    format!("unknown service distribution `{other}`"),
                    Some(help),
                );
                None
            }
        }
    }

    /// `cliff above=8 slowdown=3`.
    fn sim_cliff(&mut self, child: &KdlNode) -> Option<crate::sim::queue::Cliff> {
        let usage = CLIFF_USAGE;
        self.no_children(child, usage);
        let entries = self.entries(child, 0, &["above", "slowdown"], usage);
        let above = match entries.prop("above") {
            Some(e) => self.whole(e, "above", usage, u32::MAX.into()),
            None => {
                self.error(
                    span_of_name(child),
                    "missing property",
                    "`cliff` needs `above=`",
                    Some(format!("usage: {usage}")),
                );
                None
            }
        };
        let slowdown = match entries.prop("slowdown") {
            Some(e) => self.number(e, "slowdown", usage).filter(|f| {
                let fine = *f > 1.0 && *f <= 100.0;
                if !fine {
                    self.error(
                        value_span(e),
                        "out of range",
                        format!("`slowdown` must be above 1 and at most 100, got {f}"),
                        Some(
                            "the factor a call's service is multiplied by beyond the cliff"
                                .to_string(),
                        ),
                    );
                }
                fine
            }),
            None => {
                self.error(
                    span_of_name(child),
                    "missing property",
                    "`cliff` needs `slowdown=`",
                    Some(format!("usage: {usage}")),
                );
                None
            }
        };
        Some(crate::sim::queue::Cliff {
            above: above? as u32,
            slowdown: slowdown?,
        })
    }

    /// A child of `sim` that is no knob: the near name if there is one, and
    /// always the list, since the knobs are many and look alike.
    fn unknown_knob(&mut self, child: &KdlNode) {
        let name = child.name().value();
        let known = format!("the knobs of `sim`: {}", backticked(SIM_KNOBS));
        let help = if name == "router" {
            "the router is a property of `replicas`: `replicas 2 router=least-loaded`".to_string()
        } else {
            match did_you_mean(name, SIM_KNOBS) {
                Some(near) => format!("did you mean `{near}`? {known}"),
                None => known,
            }
        };
        self.error(
            span_of_name(child),
            "unknown knob",
            format!("unknown node `{name}` in `sim`"),
            Some(help),
        );
    }

    /// `max-num-seqs 256`: a whole number of at least 1.
    fn sim_count(&mut self, child: &KdlNode, usage: &str, max: u64) -> Option<u64> {
        let knob = child.name().value();
        self.single(child, usage)
            .and_then(|e| self.whole(e, knob, usage, max))
            .filter(|n| self.issues(child, rules::check_sim_count(knob, *n)))
    }

    /// `compute-efficiency 0.55` (or `"55%"`): a share in (0, 1].
    fn sim_share(&mut self, child: &KdlNode, usage: &str) -> Option<f64> {
        let knob = child.name().value();
        let entry = self.single(child, usage)?;
        let value = match entry.value() {
            KdlValue::String(s) if s.trim_end().ends_with('%') => match units::parse_percent(s) {
                Ok(f) => f,
                Err(e) => {
                    self.error(
                        value_span(entry),
                        "invalid percentage",
                        format!("invalid percentage for `{knob}`: {}", e.message),
                        Some(e.help),
                    );
                    return None;
                }
            },
            _ => self.number(entry, knob, usage)?,
        };
        self.issues(child, rules::check_sim_share(knob, value))
            .then_some(value)
    }

    fn sim_flag(&mut self, child: &KdlNode, usage: &str) -> Option<bool> {
        let knob = child.name().value();
        self.single(child, usage)
            .and_then(|e| self.boolean(e, knob, usage))
    }

    fn sim_duration(&mut self, child: &KdlNode, usage: &str) -> Option<Duration> {
        let knob = child.name().value();
        self.single(child, usage)
            .and_then(|e| self.duration(e, knob))
    }

    /// `replicas 2 [router=least-loaded]`.
    fn sim_replicas(&mut self, child: &KdlNode) -> Option<(u32, SimRouter)> {
        let usage = "replicas 2 router=least-loaded   // router: round-robin (default) | least-loaded | prefix-affinity";
        self.no_children(child, usage);
        let entries = self.entries(child, 1, &["router"], usage);
        let replicas = match entries.args.first() {
            Some(entry) => self
                .whole(entry, "replicas", usage, u64::MAX)
                .filter(|n| self.issues(child, rules::check_sim_replicas(*n))),
            None => {
                self.missing_value(child, usage);
                None
            }
        };
        let router = match entries.prop("router") {
            Some(entry) => self.string(entry, "router", usage).and_then(|name| {
                let router = SimRouter::from_name(&name);
                if router.is_none() {
                    self.issues(child, vec![rules::unknown_router_issue(&name)]);
                }
                router
            }),
            None => Some(SimRouter::default()),
        };
        // At most MAX_SIM_REPLICAS, checked above.
        Some((replicas? as u32, router?))
    }

    fn cost(&mut self, node: &KdlNode) -> Option<Cost> {
        let usage = "cost-per-hour 2.49 currency=EUR";
        self.no_children(node, usage);
        let entries = self.entries(node, 1, &["currency"], usage);
        let Some(entry) = entries.args.first() else {
            self.missing_value(node, usage);
            return None;
        };
        let per_hour = self.number(entry, "cost-per-hour", usage)?;
        if per_hour < 0.0 {
            self.error(
                value_span(entry),
                "negative",
                "`cost-per-hour` must be 0 or more",
                Some(format!("usage: {usage}")),
            );
            return None;
        }
        let currency = match entries.prop("currency") {
            Some(entry) => self.string(entry, "currency", usage)?,
            None => "USD".to_string(),
        };
        Some(Cost { per_hour, currency })
    }
}
