//! llm-d's Benchmark Report v0.2.1: one JSON document per run.
//!
//! # What maps where
//!
//! - `run`: `uid` is `<eid>/<run id>` and `eid` is `<experiment>@<started
//!   at>` (the experiment's name and the results' start tell two invocations
//!   of one experiment apart; a run id is unique in its folder), so exporting
//!   a folder twice gives the same ids. `time.start` is the journal header's
//!   `started_at`, `time.end` its footer's `finished_at`, `time.duration` the
//!   two's difference as an ISO-8601 duration (`PT8.5S`); without the journal
//!   (or its footer) they are left out. They are the wall clock of the
//!   process: a run measured in virtual time says so in `capcard.clock`, and
//!   its own length is `capcard.window`. `description` is the experiment's.
//! - `scenario.load`: `standardized.tool` `"capcard"` and its version;
//!   `source` `random` (prompts drawn from a vocabulary), `sampled` (a
//!   dataset or recorded sessions) or, for a mix of both, `unknown`;
//!   `input_seq_len` and `output_seq_len` from the workload's declared law
//!   where it is `fixed`, `uniform` or `gaussian` and draws every call (one
//!   single-call workload), otherwise `other` with the run's mean planned
//!   length as its value (`output_seq_len` only when the length was
//!   enforced: the dialect forced it, or no call came back short);
//!   `multi_turn`; `rate_qps` (open runs) or `concurrency` (closed runs);
//!   `parallelism`, the load generator's shards, from the journal header.
//!   `metadata.description` is the workload's name, `native.config` the
//!   workloads as capcard declared them (a mix's classes) and the arrival.
//! - `scenario.stack[0]`: the target, as a `generic` component with the
//!   names of an inference engine's fields for what capcard knows:
//!   `model.name` (the model sent), `replicas` 1 (a card measures one
//!   replica), `role` `replica`, and `accelerator.model` when the target's
//!   `hardware` line says it. `tool` is `capcard-sim` for the simulator or
//!   the engine whose metric names the telemetry matched; `tool_version` the
//!   target's `runtime` line, verbatim. `metadata.label` is the target's
//!   name, `cfg_id` a hash (FNV-1a 64) of the standardized part.
//! - `results.request_performance.aggregate`, over the run's measured
//!   window (after warmup) as the card counts it: `requests` (`total` sent:
//!   succeeded, failed and cancelled; `failures`; `incomplete`, the
//!   cancelled; mean prompt and output lengths in `count`); `latency` with
//!   TTFT and request latency in `ms`, TPOT and ITL in `ms/token`, each with
//!   mean, p50, p90, p95, p99, max and any other percentile an SLO asked for
//!   (`p99.9` → `p99p9`); `throughput` in `tokens/s` and `queries/s`.
//! - `results.session_performance` (multi-call workloads): tasks as
//!   sessions, their duration in `ms` (capcard's task e2e).
//! - `results.observability.components[0].aggregate` (a run with server
//!   telemetry): the prefix-cache hit rate (`cache_hit_rate`) and KV-cache
//!   usage in `fraction`, running and waiting requests in `count`; its
//!   `component_label` is the stack component's label.
//!
//! Units are those llm-d's pydantic models allow per field
//! (`schema_v0_2.py`'s `check_units`; the JSON Schema itself only says
//! "one of the units"): the unit tests check them field by field.
//!
//! # The `capcard` key
//!
//! The schema sets `additionalProperties: false` on every object definition
//! but three: `Statistics` (one statistic), the `generic` stack component (a
//! component without a class of its own), and `Observability`
//! (`results.observability`, whose pydantic model says "keep permissive —
//! real reports include ad-hoc metric keys"; llm-d's own converters put a
//! harness's extra results there). Beside them only free-form slots take
//! anything: the `native` `args`/`envars`/`config` of the load and of stack
//! components (a tool's own configuration, an input) and `results.profiling`
//! (a profiler's output). The capacity quantities are results of the run
//! set, so they go in `results.observability.capcard`: the run's mode and
//! load, the SLOs and this run's verdict on each (open runs), CrossP and
//! Cr_closed, and Cr_open per SLO with its range, each with `measured_by`,
//! the mode whose runs measured it (`closed`, `open`); one the card did not
//! determine is absent. A unit test reads the open objects off the schema.
//! Every number there is `{ "units": …, "value": … }` (a range: `low`/`high`)
//! in the schema's unit names; `queries_are` says what a query counts
//! (`requests`, `conversations` or `agent-tasks`), since capcard's rates and
//! concurrencies count tasks. The block repeats in every run's document, so
//! each stands alone.
//!
//! # Left out, and why
//!
//! What capcard does not know is left out, never filled with a default:
//! `run.cid`/`pid`/`user` (no cluster, pod or user), `inference_engine`
//! components (that class requires the accelerator count and parallelism,
//! which capcard never knows), the whole stack component when the engine or
//! its `runtime` is unknown, `load.standardized.prefix` (it requires users
//! per group, not a capcard notion; the shared prefix is in `native.config`),
//! `rate_qps` and `concurrency` for multi-call workloads (they count tasks,
//! not queries; the capcard key has them), ITL when the server sent several
//! tokens per streamed event (capcard's ITL is then per event, not per
//! token), NTPOT and standard deviations (not computed), and time series.
//!
//! # Checked against the published schema
//!
//! Field names and shapes are checked by the unit tests, which validate the
//! documents of every run of `tests/data/export-fixture` against the
//! vendored schema (`tests/data/llmd/br_v0_2_1_json_schema.json`, with
//! [`crate::report::json_schema`]) and require zero violations; a test shows
//! the validator does reject a misspelled key there. Once, by hand (not a
//! test: it needs Python), the fixture's five documents were also loaded
//! with llm-d's own pydantic model (`BenchmarkReportV021` of the vendored
//! commit, pydantic 2.13): all accepted, the `capcard` key kept as an extra,
//! and a TPOT in `ms` rejected.
//!
//! Pure: no I/O and no clock; [`crate::export`] reads the folder and writes
//! the files.

use serde_json::{Map, Value, json};

use crate::analyze::{CapacityReport, Card, LatencyStats, RunSummary};
use crate::config::{ArrivalUnit, Dist, DistKind, SloClause, Workload};
use crate::exec::record::Journal;
use crate::plan::Mode;

/// The Benchmark Report version written.
pub const VERSION: &str = "0.2.1";

/// The report's file name for a run.
pub fn file_name(run_id: &str) -> String {
    format!(
        "benchmark_report_{}.json",
        crate::report::sanitize_file_part(run_id)
    )
}

/// One run as a Benchmark Report document. `ends` is the run's journal
/// header and footer (no records), when its journal is in the folder.
pub fn benchmark_report(
    report: &CapacityReport,
    card: &Card,
    run: &RunSummary,
    ends: Option<&Journal>,
) -> Value {
    let stack = stack_component(card, run, ends);
    let label = stack.as_ref().map(|_| card.target.as_str());
    object([
        ("version", text(VERSION)),
        ("run", Some(run_section(report, run, ends))),
        (
            "scenario",
            Some(object([
                ("stack", stack.map(|c| Value::Array(vec![c]))),
                ("load", Some(load_section(report, card, run, ends))),
            ])),
        ),
        ("results", Some(results_section(report, card, run, label))),
    ])
}

// ------------------------------------------------------------------ run

fn run_section(report: &CapacityReport, run: &RunSummary, ends: Option<&Journal>) -> Value {
    let eid = match &report.started_at {
        Some(at) => format!("{}@{at}", report.experiment),
        None => report.experiment.clone(),
    };
    let start = ends.and_then(|j| j.header.as_ref()).map(|h| &h.started_at);
    let end = ends.and_then(|j| j.footer.as_ref()).map(|f| &f.finished_at);
    let duration = start
        .zip(end)
        .and_then(|(s, e)| {
            Some(crate::time::rfc3339_seconds(e)? - crate::time::rfc3339_seconds(s)?)
        })
        .filter(|s| *s >= 0.0)
        .map(iso_duration);
    let time = (start.is_some() || end.is_some()).then(|| {
        object([
            ("start", start.map(|s| json!(s))),
            ("end", end.map(|e| json!(e))),
            ("duration", duration.map(Value::String)),
        ])
    });
    object([
        ("uid", Some(json!(format!("{eid}/{}", run.run_id)))),
        ("eid", Some(json!(eid))),
        ("time", time),
        ("description", report.description.as_deref().and_then(text)),
    ])
}

/// `PT8.5S`: seconds to the millisecond, trailing zeros dropped.
fn iso_duration(seconds: f64) -> String {
    let fixed = format!("{seconds:.3}");
    let trimmed = fixed.trim_end_matches('0').trim_end_matches('.');
    format!("PT{trimmed}S")
}

// ------------------------------------------------------------------ load

fn mode_of(run: &RunSummary) -> Mode {
    match run.mode {
        Some(mode) => mode,
        None if run.rate_rps.is_some() => Mode::Open,
        None => Mode::Closed,
    }
}

fn load_section(
    report: &CapacityReport,
    card: &Card,
    run: &RunSummary,
    ends: Option<&Journal>,
) -> Value {
    let drawn = Drawn::of(card);
    let single_call = drawn.single_call();
    let sampled = |w: &Workload| w.dataset.is_some() || w.sessions.is_some();
    let source = if drawn.workloads.iter().all(|w| sampled(w)) {
        "sampled"
    } else if drawn.workloads.iter().any(|w| sampled(w)) {
        // A mix of drawn and recorded prompts has no one source.
        "unknown"
    } else {
        "random"
    };
    let input = sequence_length(
        drawn.one_law(|w| &w.input_tokens),
        run.prompt_tokens_requested_mean,
    );
    let force_length = ends
        .and_then(|j| j.header.as_ref())
        .and_then(|h| h.dialect.as_ref())
        .or(card.target_info.dialect.as_ref())
        .is_some_and(|d| d.force_length);
    let enforced = force_length || (run.requests > 0 && run.short_outputs == 0);
    let output = enforced.then(|| {
        sequence_length(
            drawn.one_law(|w| &w.output_tokens),
            run.output_tokens_requested_mean,
        )
    });
    let multi_turn = if single_call {
        json!({ "enabled": false })
    } else {
        let turns = match drawn.workloads[..] {
            [one] => one
                .conversation
                .as_ref()
                .and_then(|c| declared_length(&c.turns)),
            _ => None,
        };
        object([("enabled", Some(json!(true))), ("max_turns", turns)])
    };
    // A rate or a concurrency of tasks is not one of queries: only
    // single-call workloads fill the standardized fields.
    let (rate_qps, concurrency) = match mode_of(run) {
        Mode::Open => (run.rate_rps.filter(|r| *r > 0.0 && single_call), None),
        Mode::Closed => (None, run.concurrency.filter(|c| *c >= 1 && single_call)),
    };
    let shards = ends
        .and_then(|j| j.header.as_ref())
        .map(|h| h.shards.len().max(1));
    let standardized = object([
        ("tool", text("capcard")),
        ("tool_version", Some(json!(report.tool_version))),
        ("parallelism", shards.map(|n| json!(n))),
        ("source", text(source)),
        ("input_seq_len", Some(input)),
        ("output_seq_len", output),
        ("multi_turn", Some(multi_turn)),
        ("rate_qps", rate_qps.and_then(num)),
        ("concurrency", concurrency.map(|c| json!(c))),
    ]);
    let native = object([
        ("workloads", serde_json::to_value(&drawn.workloads).ok()),
        ("arrival", card.arrival.as_deref().and_then(text)),
    ]);
    object([
        ("metadata", Some(json!({ "description": card.workload }))),
        ("standardized", Some(standardized)),
        ("native", Some(json!({ "config": native }))),
    ])
}

/// The workloads a run draws its calls from: a mix's classes, or the card's
/// one workload.
struct Drawn<'a> {
    workloads: Vec<&'a Workload>,
}

impl<'a> Drawn<'a> {
    fn of(card: &'a Card) -> Drawn<'a> {
        let workloads = match &card.mix {
            Some(mix) if !mix.workloads.is_empty() => mix.workloads.iter().collect(),
            _ => vec![&card.workload_profile],
        };
        Drawn { workloads }
    }

    /// Every task is one call: a rate or concurrency of tasks is one of
    /// queries.
    fn single_call(&self) -> bool {
        self.workloads
            .iter()
            .all(|w| w.unit() == ArrivalUnit::Request)
    }

    /// The law of every call's length, when one law draws them all: one
    /// single-call workload (a call of a conversation carries its history,
    /// and a mix draws from several laws).
    fn one_law(&self, law: impl Fn(&Workload) -> &Dist) -> Option<&'a Dist> {
        match self.workloads[..] {
            [one] if one.unit() == ArrivalUnit::Request => Some(law(one)),
            _ => None,
        }
    }

    /// What one task is, as `capcard.queries_are` names it.
    fn task_name(&self) -> &'static str {
        let name = |w: &Workload| match w.unit() {
            ArrivalUnit::Request => "requests",
            ArrivalUnit::Conversation => "conversations",
            ArrivalUnit::AgentTask => "agent-tasks",
        };
        let first = self.workloads.first().map_or("requests", |w| name(w));
        if self.workloads.iter().all(|w| name(w) == first) {
            first
        } else {
            "tasks"
        }
    }
}

/// A length as a `SequenceLength`: its law's, when one law the schema names
/// draws every call; otherwise `other`, with `run_mean` (the run's mean
/// planned length) as its value and the law's clamps, if one law.
fn sequence_length(law: Option<&Dist>, run_mean: f64) -> Value {
    if let Some(declared) = law.and_then(declared_length) {
        return declared;
    }
    object([
        ("distribution", text("other")),
        ("value", num(run_mean.max(0.0)).or(Some(json!(0)))),
        ("min", law.and_then(|l| whole(l.min, 0))),
        ("max", law.and_then(|l| whole(l.upper_bound(), 1))),
    ])
}

/// A law the schema names (`fixed`, `uniform`, `gaussian`), with its clamps.
fn declared_length(law: &Dist) -> Option<Value> {
    let (distribution, value, std_dev, low) = match law.kind {
        DistKind::Fixed { value } => ("fixed", value, None, None),
        DistKind::Uniform { min, max } => ("uniform", (min + max) / 2.0, None, Some(min)),
        DistKind::Normal { mean, stddev } => ("gaussian", mean, Some(stddev), None),
        _ => return None,
    };
    let low = match (low, law.min) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    Some(object([
        ("distribution", text(distribution)),
        ("value", num(value.max(0.0))),
        ("std_dev", std_dev.filter(|s| *s >= 0.0).and_then(num)),
        ("min", whole(low, 0)),
        ("max", whole(law.upper_bound(), 1)),
    ]))
}

/// A whole number of tokens at least `least`, when known.
fn whole(x: Option<f64>, least: u64) -> Option<Value> {
    let x = x.filter(|x| x.is_finite())?.round();
    (x >= least as f64).then(|| json!(x as u64))
}

// ------------------------------------------------------------------ stack

fn stack_component(card: &Card, run: &RunSummary, ends: Option<&Journal>) -> Option<Value> {
    let info = &card.target_info;
    // The simulator answers with vLLM's metric names: its kind says what it is.
    let tool = if info.kind.starts_with("sim ") {
        Some("capcard-sim".to_string())
    } else {
        run.server.as_ref().and_then(|s| s.engine.clone())
    }?;
    let tool_version = info.runtime.clone()?;
    let model = ends
        .and_then(|j| j.header.as_ref())
        .map(|h| h.model.clone())
        .or_else(|| info.model.clone());
    let standardized = object([
        ("kind", text("generic")),
        ("tool", Some(json!(tool))),
        ("tool_version", Some(json!(tool_version))),
        ("role", text("replica")),
        ("replicas", Some(json!(1))),
        ("model", model.map(|m| json!({ "name": m }))),
        (
            "accelerator",
            info.hardware.as_ref().map(|h| json!({ "model": h })),
        ),
    ]);
    let settings: Map<String, Value> = info
        .setting
        .iter()
        .map(|(name, value)| (name.clone(), json!(value)))
        .collect();
    Some(object([
        (
            "metadata",
            Some(object([
                ("label", Some(json!(card.target))),
                ("cfg_id", Some(json!(cfg_id(&standardized)))),
                ("description", text(&info.kind)),
            ])),
        ),
        ("standardized", Some(standardized)),
        (
            "native",
            Some(object([(
                "config",
                (!settings.is_empty()).then(|| json!({ "setting": settings })),
            )])),
        ),
    ]))
}

/// FNV-1a (64 bit) of the JSON text: stable across builds and platforms,
/// unlike std's hasher.
fn cfg_id(value: &Value) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in value.to_string().bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

// ------------------------------------------------------------------ results

fn results_section(
    report: &CapacityReport,
    card: &Card,
    run: &RunSummary,
    component_label: Option<&str>,
) -> Value {
    let per_token_itl = run
        .tokens_per_event
        .is_some_and(|t| t <= MAX_TOKENS_PER_EVENT_FOR_PER_TOKEN_ITL);
    let latency = object([
        ("time_to_first_token", statistics(&run.ttft_ms, "ms")),
        (
            "time_per_output_token",
            statistics(&run.tpot_ms, "ms/token"),
        ),
        (
            "inter_token_latency",
            statistics(&run.itl_ms, "ms/token").filter(|_| per_token_itl),
        ),
        ("request_latency", statistics(&run.e2e_ms, "ms")),
    ]);
    let measured = run.requests > 0;
    let requests = object([
        (
            "total",
            Some(json!(run.requests + run.errors + run.cancelled)),
        ),
        ("failures", Some(json!(run.errors))),
        ("incomplete", Some(json!(run.cancelled))),
        (
            "input_length",
            // The server's count (usage) when it gave one: the truth.
            mean_of(
                run.prompt_tokens_reported_mean
                    .unwrap_or(run.prompt_tokens_requested_mean),
                "count",
            )
            .filter(|_| measured),
        ),
        (
            "output_length",
            mean_of(run.output_tokens_mean, "count").filter(|_| measured),
        ),
    ]);
    let timed = run.window_s > 0.0;
    let input_tokens_per_s = run.total_tokens_per_s - run.output_tokens_per_s;
    let throughput = timed.then(|| {
        object([
            (
                "input_token_rate",
                mean_of(input_tokens_per_s, "tokens/s").filter(|_| input_tokens_per_s >= 0.0),
            ),
            (
                "output_token_rate",
                mean_of(run.output_tokens_per_s, "tokens/s"),
            ),
            (
                "total_token_rate",
                mean_of(run.total_tokens_per_s, "tokens/s"),
            ),
            ("request_rate", mean_of(run.requests_per_s, "queries/s")),
        ])
    });
    let aggregate = object([
        ("requests", Some(requests)),
        ("latency", Some(latency)),
        ("throughput", throughput),
    ]);
    let sessions = (!Drawn::of(card).single_call()).then(|| {
        json!({ "sessions": object([
            ("total", Some(json!(run.tasks + run.tasks_failed))),
            ("succeeded", Some(json!(run.tasks))),
            ("failed", Some(json!(run.tasks_failed))),
            ("session_duration", run.task_e2e_ms.as_ref().and_then(|s| statistics(s, "ms"))),
        ]) })
    });
    let components = component_label
        .and_then(|label| server_metrics(run).map(|m| (label, m)))
        .map(|(label, aggregate)| json!([{ "component_label": label, "aggregate": aggregate }]));
    let observability = object([
        ("components", components),
        ("capcard", Some(capcard_block(report, card, run))),
    ]);
    object([
        (
            "request_performance",
            Some(json!({ "aggregate": aggregate })),
        ),
        ("session_performance", sessions),
        ("observability", Some(observability)),
    ])
}

/// capcard's ITL is the gap between streamed events; the schema's is per
/// token (`ms/token`). They agree when each event carries one token; a
/// server that batches tokens into events (mean above this) has no ITL in
/// the schema's terms. The margin covers a final event with usage only.
const MAX_TOKENS_PER_EVENT_FOR_PER_TOKEN_ITL: f64 = 1.01;

/// What the server's own metrics said over the window, as `ResourceMetrics`.
fn server_metrics(run: &RunSummary) -> Option<Value> {
    let server = run.server.as_ref().filter(|s| s.has_data())?;
    let gauge = |mean: Option<f64>, max: Option<f64>, units: &str| {
        let mean = num(mean?)?;
        Some(object([
            ("units", text(units)),
            ("mean", Some(mean)),
            ("max", max.and_then(num)),
        ]))
    };
    let metrics = object([
        (
            "cache_hit_rate",
            gauge(server.prefix_cache_hit_rate, None, "fraction"),
        ),
        (
            "kv_cache_usage",
            gauge(
                server.kv_cache_usage_mean,
                server.kv_cache_usage_max,
                "fraction",
            ),
        ),
        (
            "running_requests",
            gauge(
                server.requests_running_mean,
                server.requests_running_max,
                "count",
            ),
        ),
        (
            "waiting_requests",
            gauge(
                server.requests_waiting_mean,
                server.requests_waiting_max,
                "count",
            ),
        ),
    ]);
    metrics
        .as_object()
        .is_some_and(|m| !m.is_empty())
        .then_some(metrics)
}

/// Statistics keys the schema names, by capcard's percentile key.
const PERCENTILES: &[(&str, &str)] = &[
    ("p0.1", "p0p1"),
    ("p1", "p1"),
    ("p5", "p5"),
    ("p10", "p10"),
    ("p25", "p25"),
    ("p75", "p75"),
    ("p99.9", "p99p9"),
];

/// A latency distribution as `Statistics`; `None` when nothing was measured.
fn statistics(stats: &LatencyStats, units: &str) -> Option<Value> {
    if stats.count == 0 {
        return None;
    }
    let mut out = Map::new();
    out.insert("units".into(), json!(units));
    out.insert("mean".into(), num(stats.mean)?);
    for (key, value) in [
        ("p50", stats.p50),
        ("p90", stats.p90),
        ("p95", stats.p95),
        ("p99", stats.p99),
        ("max", stats.max),
    ] {
        if let Some(v) = num(value) {
            out.insert(key.into(), v);
        }
    }
    for (ours, theirs) in PERCENTILES {
        if let Some(v) = stats.extra.get(*ours).copied().and_then(num) {
            out.insert((*theirs).into(), v);
        }
    }
    Some(Value::Object(out))
}

fn mean_of(mean: f64, units: &str) -> Option<Value> {
    Some(json!({ "units": units, "mean": num(mean)? }))
}

// ------------------------------------------------------------------ capcard

/// The capacity quantities: `results.observability.capcard`.
fn capcard_block(report: &CapacityReport, card: &Card, run: &RunSummary) -> Value {
    let mode = mode_of(run);
    let queries_are = Drawn::of(card).task_name();
    let slos: Vec<Value> = card
        .slos
        .iter()
        .map(|slo| {
            let clauses: Vec<Value> = slo
                .clauses
                .iter()
                .map(|clause| {
                    let (metric, stat, limit) = match clause {
                        SloClause::Latency {
                            metric,
                            stat,
                            limit,
                        } => (
                            metric.as_str(),
                            Some(stat.key()),
                            quantity(limit.as_secs_f64() * 1000.0, "ms"),
                        ),
                        SloClause::ErrorRate { max } => {
                            ("error-rate", None, quantity(max.0, "fraction"))
                        }
                    };
                    object([
                        (
                            "label",
                            Some(json!(crate::analyze::slo::clause_label(clause))),
                        ),
                        ("metric", text(metric)),
                        ("stat", stat.map(Value::String)),
                        ("limit", limit),
                    ])
                })
                .collect();
            json!({ "name": slo.name, "clauses": clauses })
        })
        .collect();
    let verdicts: Vec<Value> = run
        .verdicts
        .iter()
        .map(|v| {
            let clauses: Vec<Value> = v
                .clauses
                .iter()
                .map(|c| {
                    let observed = match (c.observed_ms, c.observed_fraction) {
                        (Some(ms), _) => quantity(ms, "ms"),
                        (None, Some(f)) => quantity(f, "fraction"),
                        (None, None) => None,
                    };
                    object([
                        ("label", Some(json!(c.label))),
                        ("verdict", c.verdict.map(|v| json!(v.as_str()))),
                        ("observed", observed),
                        ("samples", quantity(c.samples as f64, "count")),
                    ])
                })
                .collect();
            object([
                ("slo", Some(json!(v.slo))),
                ("verdict", text(v.verdict.as_str())),
                ("confidence", quantity(v.confidence, "fraction")),
                ("clauses", Some(Value::Array(clauses))),
                ("reasons", (!v.reasons.is_empty()).then(|| json!(v.reasons))),
            ])
        })
        .collect();
    let crossp = card.crossp.as_ref().map(|c| {
        object([
            ("measured_by", text(Mode::Closed.as_str())),
            ("concurrency", quantity(f64::from(c.concurrency), "count")),
            (
                "zone",
                range(
                    Some(f64::from(c.zone[0])),
                    Some(f64::from(c.zone[1])),
                    "count",
                ),
            ),
            ("metric", Some(json!(c.metric))),
            ("stat", Some(json!(c.stat))),
            ("delta_latency", quantity(c.delta_latency_pct, "percent")),
            (
                "delta_throughput",
                quantity(c.delta_throughput_pct, "percent"),
            ),
        ])
    });
    let cr_closed = card.cr_closed.as_ref().map(|c| {
        let pair = |p: [f64; 2], units: &str| range(Some(p[0]), Some(p[1]), units);
        object([
            ("measured_by", text(Mode::Closed.as_str())),
            (
                "range",
                pair([f64::from(c.range[0]), f64::from(c.range[1])], "count"),
            ),
            ("output_token_rate", pair(c.output_tokens_per_s, "tokens/s")),
            ("request_rate", pair(c.requests_per_s, "queries/s")),
            ("ttft_p50", pair(c.ttft_p50_ms, "ms")),
            ("ttft_p99", pair(c.ttft_p99_ms, "ms")),
            ("e2e_p50", pair(c.e2e_p50_ms, "ms")),
            (
                "max_output_token_rate",
                quantity(c.max_output_tokens_per_s, "tokens/s"),
            ),
            (
                "max_at_concurrency",
                quantity(f64::from(c.max_at_concurrency), "count"),
            ),
            ("fractions", pair(c.fractions, "fraction")),
            ("saturated", Some(json!(c.saturated))),
        ])
    });
    let cr_open: Vec<Value> = card
        .cr_open
        .iter()
        .map(|c| {
            object([
                ("slo", Some(json!(c.slo))),
                ("measured_by", text(Mode::Open.as_str())),
                ("estimate", c.rps.and_then(|r| quantity(r, "queries/s"))),
                ("range", range(c.range[0], c.range[1], "queries/s")),
                (
                    "promise",
                    c.promise().and_then(|r| quantity(r, "queries/s")),
                ),
                (
                    "confidence",
                    c.confidence.and_then(|x| quantity(x, "fraction")),
                ),
                ("method", c.method.as_deref().and_then(text)),
                ("bound_by", c.bound_by.as_deref().and_then(text)),
                ("at_least", Some(json!(c.at_least))),
                (
                    "failed_at",
                    c.failed_at_rps.and_then(|r| quantity(r, "queries/s")),
                ),
                ("run_id", c.run_id.as_deref().and_then(text)),
                ("failed_run_id", c.failed_run_id.as_deref().and_then(text)),
                ("note", c.note.as_deref().and_then(text)),
            ])
        })
        .collect();
    let load = match mode {
        Mode::Open => object([
            ("rate", run.rate_rps.and_then(|r| quantity(r, "queries/s"))),
            (
                "achieved_rate",
                run.achieved_rps.and_then(|r| quantity(r, "queries/s")),
            ),
        ]),
        Mode::Closed => object([(
            "concurrency",
            run.concurrency
                .and_then(|c| quantity(f64::from(c), "count")),
        )]),
    };
    object([
        ("tool_version", Some(json!(report.tool_version))),
        ("experiment", Some(json!(report.experiment))),
        ("target", Some(json!(card.target))),
        ("workload", Some(json!(card.workload))),
        ("run_id", Some(json!(run.run_id))),
        ("mode", text(mode.as_str())),
        ("queries_are", text(queries_are)),
        ("load", Some(load)),
        ("window", quantity(run.window_s, "s")),
        ("state", text(run.state.as_str())),
        ("state_reason", run.state_reason.as_deref().and_then(text)),
        ("clock", card.target_info.clock.as_deref().and_then(text)),
        ("slos", Some(Value::Array(slos))),
        (
            "verdicts",
            (!verdicts.is_empty()).then_some(Value::Array(verdicts)),
        ),
        ("crossp", crossp),
        ("cr_closed", cr_closed),
        (
            "cr_open",
            (!cr_open.is_empty()).then_some(Value::Array(cr_open)),
        ),
    ])
}

/// `{ "units": …, "value": … }`.
fn quantity(value: f64, units: &str) -> Option<Value> {
    Some(json!({ "units": units, "value": num(value)? }))
}

/// `{ "units": …, "low": …, "high": … }`; an unknown end is left out.
fn range(low: Option<f64>, high: Option<f64>, units: &str) -> Option<Value> {
    let (low, high) = (low.and_then(num), high.and_then(num));
    (low.is_some() || high.is_some())
        .then(|| object([("units", text(units)), ("low", low), ("high", high)]))
}

// ------------------------------------------------------------------ JSON

/// An object of the entries whose value is known (serde_json's map sorts
/// the keys).
fn object<const N: usize>(entries: [(&str, Option<Value>); N]) -> Value {
    Value::Object(
        entries
            .into_iter()
            .filter_map(|(key, value)| Some((key.to_string(), value?)))
            .collect(),
    )
}

fn text(s: &str) -> Option<Value> {
    Some(Value::String(s.to_string()))
}

/// A number JSON can carry: NaN and infinities are unknown, not `null`.
fn num(x: f64) -> Option<Value> {
    x.is_finite().then(|| json!(x))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::json_schema::{ViolationKind, validate};

    const SCHEMA: &str = include_str!("../../../tests/data/llmd/br_v0_2_1_json_schema.json");
    const RESULTS: &str = include_str!("../../../tests/data/export-fixture/results.json");
    const OPEN_JOURNAL: &[u8] =
        include_bytes!("../../../tests/data/export-fixture/runs/tiny--chat--r19.700.jsonl");

    fn schema() -> Value {
        serde_json::from_str(SCHEMA).unwrap()
    }

    fn fixture() -> CapacityReport {
        crate::report::parse_results_json(RESULTS).unwrap()
    }

    fn open_journal() -> Journal {
        let mut journal = crate::exec::journal::parse_journal(OPEN_JOURNAL).unwrap();
        // What `capcard export` passes: the ends only.
        journal.requests.clear();
        journal.tasks.clear();
        journal
    }

    fn document(run_id: &str, ends: Option<&Journal>) -> Value {
        let report = fixture();
        let card = &report.cards[0];
        let run = card
            .closed
            .iter()
            .chain(&card.open)
            .find(|r| r.run_id == run_id)
            .unwrap();
        benchmark_report(&report, card, run, ends)
    }

    fn violations(doc: &Value) -> Vec<String> {
        validate(&schema(), doc)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// The units llm-d's pydantic models allow per statistic
    /// (`schema_v0_2.py`'s `check_units`), which the JSON Schema does not
    /// carry: by the statistic's key.
    fn allowed_units(key: &str) -> Option<&'static [&'static str]> {
        Some(match key {
            "time_to_first_token" | "request_latency" | "session_duration" => &["ms", "s"],
            "time_per_output_token"
            | "inter_token_latency"
            | "normalized_time_per_output_token" => &["ms/token", "s/token"],
            "input_token_rate" | "output_token_rate" | "total_token_rate" => &["tokens/s"],
            "request_rate" | "session_rate" => &["queries/s"],
            "input_length" | "output_length" | "running_requests" | "waiting_requests" => {
                &["count", "pixels"]
            }
            "cache_hit_rate" | "kv_cache_usage" => &["percent", "fraction"],
            _ => return None,
        })
    }

    /// Every statistic outside the capcard key in a unit its field allows,
    /// and every unit inside it one of the schema's `Units`.
    fn unit_errors(doc: &Value) -> Vec<String> {
        let schema = schema();
        let units: Vec<&str> = schema["$defs"]["Units"]["enum"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let mut errors = Vec::new();
        fn walk(
            at: &str,
            key: &str,
            value: &Value,
            in_capcard: bool,
            units: &[&str],
            errors: &mut Vec<String>,
        ) {
            match value {
                Value::Object(map) => {
                    if let Some(unit) = map.get("units").and_then(Value::as_str) {
                        if in_capcard {
                            if !units.contains(&unit) {
                                errors.push(format!("{at}: {unit} is not a schema unit"));
                            }
                        } else {
                            match allowed_units(key) {
                                Some(allowed) if allowed.contains(&unit) => {}
                                Some(_) => errors.push(format!("{at}: {unit} not allowed")),
                                None => errors.push(format!("{at}: no unit rule for {key}")),
                            }
                        }
                    }
                    for (k, v) in map {
                        let inside = in_capcard || k == "capcard";
                        walk(&format!("{at}/{k}"), k, v, inside, units, errors);
                    }
                }
                Value::Array(items) => {
                    for (i, v) in items.iter().enumerate() {
                        walk(&format!("{at}/{i}"), key, v, in_capcard, units, errors);
                    }
                }
                _ => {}
            }
        }
        walk("", "", doc, false, &units, &mut errors);
        errors
    }

    #[test]
    fn every_fixture_run_validates_against_the_published_schema() {
        let report = fixture();
        let card = &report.cards[0];
        let journal = open_journal();
        let mut runs = 0;
        for run in card.closed.iter().chain(&card.open) {
            for ends in [None, Some(&journal)] {
                let doc = benchmark_report(&report, card, run, ends);
                assert_eq!(violations(&doc), Vec::<String>::new(), "{}", run.run_id);
                assert_eq!(unit_errors(&doc), Vec::<String>::new(), "{}", run.run_id);
                // `format: date-time` is an annotation the validator does not
                // assert (as JSON Schema 2020-12 says); llm-d parses it.
                for end in ["start", "end"] {
                    if let Some(at) = doc["run"]["time"].get(end) {
                        let at = at.as_str().unwrap();
                        assert!(crate::time::rfc3339_seconds(at).is_some(), "{at}");
                    }
                }
            }
            runs += 1;
        }
        assert_eq!(runs, 5);
    }

    #[test]
    fn observability_is_the_one_open_results_object() {
        let schema = schema();
        let open: Vec<&str> = schema["$defs"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, def)| def["type"] == json!("object"))
            .filter(|(_, def)| def.get("additionalProperties") != Some(&json!(false)))
            .map(|(name, _)| name.as_str())
            .collect();
        assert_eq!(open, ["Generic", "Observability", "Statistics"]);
        assert_eq!(
            schema["$defs"]["Results"]["properties"]["observability"]["anyOf"][0]["$ref"],
            json!("#/$defs/Observability")
        );
    }

    #[test]
    fn the_validator_rejects_a_misspelled_key_in_a_closed_object() {
        let mut doc = document("tiny--chat--r19.700", None);
        assert!(violations(&doc).is_empty());
        let latency = doc["results"]["request_performance"]["aggregate"]["latency"]
            .as_object_mut()
            .unwrap();
        let ttft = latency.remove("time_to_first_token").unwrap();
        latency.insert("time_to_first_tokens".into(), ttft);
        let found = validate(&schema(), &doc);
        assert!(
            found.iter().any(|v| v.kind
                == ViolationKind::Unexpected("time_to_first_tokens".into())
                && v.at == "/results/request_performance/aggregate/latency"),
            "{found:?}"
        );
        // A unit outside the schema's enum, and a required key missing.
        let mut doc = document("tiny--chat--r19.700", None);
        doc["results"]["request_performance"]["aggregate"]["latency"]["time_to_first_token"]["units"] =
            json!("msec");
        doc["scenario"]["load"]["standardized"]
            .as_object_mut()
            .unwrap()
            .remove("source");
        assert_eq!(violations(&doc).len(), 2, "{:?}", violations(&doc));
        // The unit rules the JSON Schema cannot say: TPOT per token.
        let mut doc = document("tiny--chat--r19.700", None);
        doc["results"]["request_performance"]["aggregate"]["latency"]["time_per_output_token"]["units"] =
            json!("ms");
        assert_eq!(unit_errors(&doc).len(), 1);
    }

    #[test]
    fn an_open_run_has_its_rate_and_latencies_in_the_schemas_units() {
        let journal = open_journal();
        let doc = document("tiny--chat--r19.700", Some(&journal));
        let load = &doc["scenario"]["load"]["standardized"];
        assert_eq!(load["rate_qps"], json!(19.7));
        assert!(load.get("concurrency").is_none());
        assert_eq!(load["tool"], json!("capcard"));
        assert_eq!(load["source"], json!("random"));
        assert_eq!(load["input_seq_len"]["distribution"], json!("other"));
        assert_eq!(load["input_seq_len"]["min"], json!(16));
        assert_eq!(load["output_seq_len"]["distribution"], json!("gaussian"));
        assert_eq!(load["output_seq_len"]["value"], json!(32.0));
        let latency = &doc["results"]["request_performance"]["aggregate"]["latency"];
        let ttft = &latency["time_to_first_token"];
        assert_eq!(ttft["units"], json!("ms"));
        assert_eq!(ttft["p50"], json!(33.951));
        assert_eq!(ttft["p99"], json!(126.207));
        assert_eq!(latency["time_per_output_token"]["units"], json!("ms/token"));
        assert_eq!(latency["inter_token_latency"]["units"], json!("ms/token"));
        let requests = &doc["results"]["request_performance"]["aggregate"]["requests"];
        assert_eq!(requests["total"], json!(153));
        let throughput = &doc["results"]["request_performance"]["aggregate"]["throughput"];
        assert_eq!(
            throughput["request_rate"],
            json!({ "units": "queries/s", "mean": 18.0 })
        );
        let run = &doc["run"];
        assert_eq!(run["eid"], json!("export-fixture@2026-12-04T21:25:23.821Z"));
        assert_eq!(
            run["uid"],
            json!("export-fixture@2026-12-04T21:25:23.821Z/tiny--chat--r19.700")
        );
        assert_eq!(run["time"]["start"], json!("2026-12-04T21:25:23.854Z"));
        assert_eq!(run["time"]["end"], json!("2026-12-04T21:25:23.861Z"));
        assert_eq!(run["time"]["duration"], json!("PT0.007S"));
        let stack = &doc["scenario"]["stack"][0];
        assert_eq!(stack["standardized"]["kind"], json!("generic"));
        assert_eq!(stack["standardized"]["model"]["name"], json!("sim/tiny"));
        assert_eq!(stack["standardized"]["replicas"], json!(1));
        let server = &doc["results"]["observability"]["components"][0];
        assert_eq!(server["component_label"], json!("tiny"));
        assert_eq!(
            server["aggregate"]["cache_hit_rate"],
            json!({ "units": "fraction", "mean": 0.0 })
        );
    }

    #[test]
    fn a_closed_run_has_its_concurrency_and_no_rate() {
        let doc = document("tiny--chat--c0016", None);
        let load = &doc["scenario"]["load"]["standardized"];
        assert_eq!(load["concurrency"], json!(16));
        assert!(load.get("rate_qps").is_none());
        let capcard = &doc["results"]["observability"]["capcard"];
        assert_eq!(capcard["mode"], json!("closed"));
        assert_eq!(
            capcard["load"]["concurrency"],
            json!({ "units": "count", "value": 16.0 })
        );
        assert!(capcard.get("verdicts").is_none());
    }

    #[test]
    fn a_run_without_its_journal_has_no_times() {
        let doc = document("tiny--chat--r19.700", None);
        assert!(doc["run"].get("time").is_none());
        assert!(
            doc["scenario"]["load"]["standardized"]
                .get("parallelism")
                .is_none()
        );
        // The model still comes from the target's information.
        assert_eq!(
            doc["scenario"]["stack"][0]["standardized"]["model"]["name"],
            json!("sim/tiny")
        );
    }

    #[test]
    fn the_capacity_quantities_live_under_observability_with_units() {
        let doc = document("tiny--chat--r39.400", None);
        let capcard = &doc["results"]["observability"]["capcard"];
        assert_eq!(capcard["queries_are"], json!("requests"));
        let interactive = &capcard["cr_open"][0];
        assert_eq!(interactive["slo"], json!("interactive"));
        assert_eq!(interactive["measured_by"], json!("open"));
        assert_eq!(
            interactive["range"],
            json!({ "units": "queries/s", "low": 25.125, "high": 39.84375 })
        );
        assert_eq!(capcard["cr_closed"]["measured_by"], json!("closed"));
        assert_eq!(
            capcard["cr_closed"]["range"],
            json!({ "units": "count", "low": 16.0, "high": 16.0 })
        );
        assert_eq!(
            capcard["slos"][1]["clauses"][1]["limit"]["units"],
            json!("fraction")
        );
        let verdicts = capcard["verdicts"].as_array().unwrap();
        assert_eq!(verdicts.len(), 2);
        assert_eq!(verdicts[0]["confidence"]["units"], json!("fraction"));
        // Overloaded: it failed its SLOs.
        assert_eq!(capcard["state"], json!("overloaded"));
        assert_eq!(verdicts[0]["verdict"], json!("fail"));
    }

    #[test]
    fn unknown_engines_and_multi_call_rates_are_left_out() {
        let mut report = fixture();
        let card = &mut report.cards[0];
        card.target_info.kind = "endpoint http://127.0.0.1:8000".into();
        card.target_info.runtime = None;
        let run = card.open[0].clone();
        let doc = benchmark_report(&report, &report.cards[0], &run, None);
        assert!(doc["scenario"].get("stack").is_none());
        assert!(doc["results"]["observability"].get("components").is_none());
        assert!(violations(&doc).is_empty(), "{:?}", violations(&doc));

        let card = &mut report.cards[0];
        card.workload_profile.conversation = Some(crate::config::Conversation {
            turns: Dist::fixed(4.0),
            think_time: Dist::fixed(1.0),
        });
        let doc = benchmark_report(&report, &report.cards[0], &run, None);
        let load = &doc["scenario"]["load"]["standardized"];
        assert!(load.get("rate_qps").is_none());
        assert_eq!(
            load["multi_turn"],
            json!({
                "enabled": true,
                "max_turns": { "distribution": "fixed", "value": 4.0, "max": 4 }
            })
        );
        let capcard = &doc["results"]["observability"]["capcard"];
        assert_eq!(capcard["queries_are"], json!("conversations"));
        assert_eq!(capcard["load"]["rate"]["value"], json!(19.7));
        assert!(violations(&doc).is_empty(), "{:?}", violations(&doc));
        assert!(unit_errors(&doc).is_empty(), "{:?}", unit_errors(&doc));
    }

    #[test]
    fn a_multi_call_closed_run_counts_tasks_as_sessions_not_queries() {
        let mut report = fixture();
        report.cards[0].workload_profile.agent = Some(crate::config::Agent {
            steps: Dist::fixed(3.0),
            fan_out: Dist::fixed(2.0),
            tool_time: Dist::fixed(0.5),
            context_growth: Dist::fixed(100.0),
        });
        let mut run = report.cards[0].closed[0].clone();
        run.tasks = 10;
        run.tasks_failed = 1;
        run.task_e2e_ms = Some(run.e2e_ms.clone());
        let doc = benchmark_report(&report, &report.cards[0], &run, None);
        let load = &doc["scenario"]["load"]["standardized"];
        assert!(load.get("concurrency").is_none());
        assert_eq!(load["multi_turn"], json!({ "enabled": true }));
        let sessions = &doc["results"]["session_performance"]["sessions"];
        assert_eq!(sessions["total"], json!(11));
        assert_eq!(sessions["failed"], json!(1));
        assert_eq!(sessions["session_duration"]["units"], json!("ms"));
        let capcard = &doc["results"]["observability"]["capcard"];
        assert_eq!(capcard["queries_are"], json!("agent-tasks"));
        assert_eq!(capcard["load"]["concurrency"]["value"], json!(2.0));
        assert!(violations(&doc).is_empty(), "{:?}", violations(&doc));
        assert!(unit_errors(&doc).is_empty(), "{:?}", unit_errors(&doc));
    }

    #[test]
    fn a_mix_has_no_one_length_law() {
        let mut report = fixture();
        let card = &mut report.cards[0];
        let chat = card.workload_profile.clone();
        let mut long = chat.clone();
        long.name = "long".into();
        long.input_tokens = Dist::fixed(2000.0);
        card.mix = Some(crate::analyze::mix::MixCard {
            plan: crate::plan::MixPlan {
                mix: "production".into(),
                weights: vec![1.0, 1.0],
                declared: true,
                classes: vec![],
            },
            workloads: vec![long, chat],
            class_cr_open: vec![],
        });
        let run = report.cards[0].open[0].clone();
        let doc = benchmark_report(&report, &report.cards[0], &run, None);
        let load = &doc["scenario"]["load"]["standardized"];
        // Not the first class's `fixed 2000`: the run's mean, and no clamps.
        assert_eq!(
            load["input_seq_len"],
            json!({ "distribution": "other", "value": run.prompt_tokens_requested_mean })
        );
        assert_eq!(load["rate_qps"], json!(19.7));
        let workloads = &doc["scenario"]["load"]["native"]["config"]["workloads"];
        assert_eq!(workloads.as_array().unwrap().len(), 2);
        assert!(violations(&doc).is_empty(), "{:?}", violations(&doc));
    }

    #[test]
    fn itl_per_event_is_not_itl_per_token() {
        let report = fixture();
        let mut run = report.cards[0].open[0].clone();
        run.tokens_per_event = Some(4.0);
        let doc = benchmark_report(&report, &report.cards[0], &run, None);
        let latency = &doc["results"]["request_performance"]["aggregate"]["latency"];
        assert!(latency.get("inter_token_latency").is_none());
        assert!(latency.get("time_per_output_token").is_some());
    }

    #[test]
    fn iso_durations_and_ids_are_stable() {
        assert_eq!(iso_duration(8.5), "PT8.5S");
        assert_eq!(iso_duration(120.0), "PT120S");
        assert_eq!(iso_duration(0.0071), "PT0.007S");
        assert_eq!(cfg_id(&json!({})), cfg_id(&json!({})));
        assert_ne!(cfg_id(&json!({ "a": 1 })), cfg_id(&json!({ "a": 2 })));
        assert_eq!(
            file_name("tiny--chat--r19.700"),
            "benchmark_report_tiny--chat--r19.700.json"
        );
    }
}
