//! Experiment → Plan (pure): the matrix of runs per target × workload, stable
//! run ids, per-run seeds and an estimate of wall time: what to expect and
//! the most it can take ([`estimate`]).
//!
//! The Cr_open search cannot be expanded up front (each rate depends on the
//! last verdict), so the plan holds it as a [`OpenPlan::Search`] that the
//! runner resolves while it executes, using `analyze::search`; the runner
//! names and seeds those runs with [`run_at_rate`].
//!
//! Cards are ordered targets outer, workloads inner, in file order. Run ids
//! are stable and readable (`<target>--<workload>--c0008`,
//! `<target>--<workload>--r4.000`) because they are journal file names and
//! what `--resume` matches on. A run's seed depends on the experiment seed,
//! the workload and the load level, never on the target: every target is sent
//! the same request stream, so cards of two targets compare like with like,
//! while two levels of one sweep send different prompts (a level must not hit
//! the prefix cache warmed by the level before it).

mod bounds;
pub mod context;
mod estimate;
pub mod extension;
mod samples;
pub mod shard;
mod table;

pub use bounds::*;
pub use estimate::{
    ASSUMED_CALL_OVERHEAD_S, ASSUMED_S_PER_OUTPUT_TOKEN, PROFILE_TASKS, WallTime, WorkloadProfile,
};
pub use extension::{
    DRAIN_ALLOWANCE, EXTENSION_FACTOR, SEARCH_BUDGET_RUNS, extension_budget, extension_factor,
    planned_measured_time, planned_run_seconds, search_budget,
};
pub use samples::*;
pub use table::render_table;

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::{Arrival, Experiment, Fraction, RatePerS, RateSelection, StopRule};
use crate::hash::{hash_str, mix};

/// `schema` of `plan.json`.
pub const SCHEMA: &str = "capcard/plan/v1";

/// The whole expanded experiment (`plan.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub schema: String,
    pub experiment: String,
    pub seed: u64,
    pub cards: Vec<CardPlan>,
    /// Expected wall time of the whole plan, in seconds: the sum of its
    /// cards' (see [`CardPlan::expected_wall_time_s`]). A plan.json written
    /// before there was a bound called its one figure
    /// `estimated_wall_time_s`.
    #[serde(alias = "estimated_wall_time_s")]
    pub expected_wall_time_s: f64,
    /// The most the whole plan can take, in seconds: the sum of its cards'
    /// bounds; `None` in a plan.json written before capcard recorded one.
    #[serde(default)]
    pub bound_wall_time_s: Option<f64>,
}

/// The runs that produce one card (one target × one workload, or one
/// target × one mix at one weight setting).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CardPlan {
    pub target: String,
    /// The workload's name, or the mix card's ([`mix_card_name`]).
    pub workload: String,
    /// SLO names evaluated on the open runs. A mix card has one: its own
    /// name, the verdict "every class within its own SLO".
    pub slos: Vec<String>,
    /// A mix card: its classes at this card's weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mix: Option<MixPlan>,
    /// Closed-loop sweep, in increasing concurrency.
    pub closed: Vec<RunPlan>,
    pub open: OpenPlan,
    /// Expected wall time of the card's runs, in seconds: a search at its
    /// typical number of runs, no extensions (see `plan::estimate`).
    #[serde(alias = "estimated_wall_time_s")]
    pub expected_wall_time_s: f64,
    /// The most the card's runs can take, in seconds: a search at its
    /// maximum number of runs, each at its longest, plus the whole
    /// extension budget; `None` in a plan.json written before capcard
    /// recorded one.
    #[serde(default)]
    pub bound_wall_time_s: Option<f64>,
}

impl CardPlan {
    /// The first run the card plans (its sweep's, else its open runs'):
    /// what a preflight's call is shaped as.
    pub fn first_run(&self) -> Option<&RunPlan> {
        self.closed.first().or(match &self.open {
            OpenPlan::None => None,
            OpenPlan::Grid { runs } => runs.first(),
            OpenPlan::Search { template, .. } => Some(template),
        })
    }

    /// Expected and bound wall time; a plan.json without a bound gives its
    /// expected time for both.
    pub fn wall_time(&self) -> WallTime {
        WallTime {
            expected_s: self.expected_wall_time_s,
            bound_s: self.bound_wall_time_s.unwrap_or(self.expected_wall_time_s),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum OpenPlan {
    None,
    /// Explicit rates, all run.
    Grid {
        runs: Vec<RunPlan>,
    },
    /// Cr_open search per SLO, resolved during execution.
    Search {
        arrival: Arrival,
        min: RatePerS,
        max: RatePerS,
        precision: Fraction,
        /// Upper bound on the runs the search may take (for the estimate).
        max_runs: u32,
        /// `frontier` in `open`: upper bound on the extra rates the frontier
        /// phase may run after the search (see [`frontier_max_runs`]); 0
        /// without the setting.
        #[serde(default, skip_serializing_if = "is_zero")]
        frontier_runs: u32,
        /// The runs the search typically takes ([`search_typical_runs`]),
        /// for the expected time; 0 in a plan.json written before.
        #[serde(default)]
        typical_runs: u32,
        /// …and the frontier phase ([`frontier_typical_runs`]).
        #[serde(default, skip_serializing_if = "is_zero")]
        typical_frontier_runs: u32,
        /// Template for the runs the search creates (load is set per rate).
        template: Box<RunPlan>,
    },
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Closed or open loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Closed,
    Open,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Closed => "closed",
            Mode::Open => "open",
        }
    }
}

/// A mix at one weight setting: what a run of its card sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MixPlan {
    /// The `mix` block's name.
    pub mix: String,
    /// This card's weights, one per class in class order: the declared
    /// ones, or one `weights` setting.
    pub weights: Vec<f64>,
    /// `false` for a `weights` what-if setting.
    pub declared: bool,
    pub classes: Vec<ClassPlan>,
}

/// One class of a [`MixPlan`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClassPlan {
    pub name: String,
    pub workload: String,
    pub slo: Option<String>,
    /// Its share of arrivals (tasks): weight / sum of weights.
    pub share: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
}

impl MixPlan {
    /// `mix` at `weights` (one per class; the config checked them).
    pub fn of(mix: &crate::config::Mix, weights: &[f64], declared: bool) -> Self {
        let total: f64 = weights.iter().sum();
        MixPlan {
            mix: mix.name.clone(),
            weights: weights.to_vec(),
            declared,
            classes: mix
                .classes
                .iter()
                .zip(weights)
                .map(|(class, &weight)| ClassPlan {
                    name: class.name.clone(),
                    workload: class.workload.clone(),
                    slo: class.slo.clone(),
                    share: if total > 0.0 { weight / total } else { 0.0 },
                    model: class.model.clone(),
                    priority: class.priority,
                })
                .collect(),
        }
    }

    /// The card's name: the mix's own at its declared weights,
    /// `<mix>@60-20-20` at a `weights` setting.
    pub fn card_name(&self) -> String {
        mix_card_name(&self.mix, &self.weights, self.declared)
    }
}

/// See [`MixPlan::card_name`].
pub fn mix_card_name(mix: &str, weights: &[f64], declared: bool) -> String {
    if declared {
        return mix.to_string();
    }
    let weights: Vec<String> = weights
        .iter()
        .map(|w| crate::format::significant(*w))
        .collect();
    format!("{mix}@{}", weights.join("-"))
}

/// What drives a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Load {
    /// Closed loop: exactly this many tasks in flight.
    Concurrency { concurrency: u32 },
    /// Open loop: arrivals (of tasks) at this mean rate.
    Rate { rate: RatePerS, arrival: Arrival },
}

/// One run: fully specified, executable on its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunPlan {
    /// Stable id, also the journal file name: `<target>--<workload>--c0008`,
    /// `<target>--<workload>--r4.000`.
    pub id: String,
    pub target: String,
    pub workload: String,
    pub mode: Mode,
    pub load: Load,
    #[serde(with = "crate::config::model::duration_secs")]
    pub warmup: Duration,
    pub stop: StopRule,
    /// Seed of this run's request stream (depends on experiment seed and
    /// workload, not on the target, so every target sees the same requests).
    pub seed: u64,
    /// `repeat N`: which repetition of its level or rate this is (1-based).
    #[serde(default = "first_repetition", skip_serializing_if = "is_first")]
    pub repetition: u32,
    /// A run of a mix card: its classes (so a journal says what it sent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mix: Option<MixPlan>,
}

fn first_repetition() -> u32 {
    1
}

fn is_first(r: &u32) -> bool {
    *r == 1
}

impl RunPlan {
    /// The run the planner makes of `workload` on `target` at `load`: its
    /// id, its mode (closed for a concurrency, open for a rate) and its
    /// request stream's seed (from the experiment's seed, the workload and
    /// the level or rate, never the target), the first repetition, no mix.
    pub fn new(
        target: &str,
        workload: &str,
        load: Load,
        warmup: Duration,
        stop: StopRule,
        experiment_seed: u64,
    ) -> RunPlan {
        RunPlan {
            id: run_id(target, workload, &load),
            target: target.to_string(),
            workload: workload.to_string(),
            mode: match load {
                Load::Concurrency { .. } => Mode::Closed,
                Load::Rate { .. } => Mode::Open,
            },
            seed: run_seed(experiment_seed, workload, &load),
            load,
            warmup,
            stop,
            repetition: 1,
            mix: None,
        }
    }

    /// Repetition `r` (1-based) of this run: the first is the run itself;
    /// a later one has its own id (`<id>--rep2`) and its own request stream
    /// (the seed mixed with `r`), so a server's prefix cache never serves a
    /// repetition from the one before.
    pub fn repetition_of(&self, r: u32) -> RunPlan {
        if r <= 1 {
            return self.clone();
        }
        RunPlan {
            id: format!("{}--rep{r}", self.id),
            seed: mix(self.seed, u64::from(r)),
            repetition: r,
            ..self.clone()
        }
    }
}

impl RunPlan {
    /// The `v`-th visit of this run's rate by a Cr_open search (1-based):
    /// the first is the run itself, a later one has its own id
    /// (`<id>--v2`) and request stream, like a repetition, but stays the
    /// repetition it was (a revisit adds samples to the fit; it is not a
    /// `repeat`).
    pub fn visit_of(&self, v: u32) -> RunPlan {
        if v <= 1 {
            return self.clone();
        }
        RunPlan {
            id: format!("{}--v{v}", self.id),
            seed: mix(self.seed, VISIT_STREAM ^ u64::from(v)),
            ..self.clone()
        }
    }
}

/// Mixed into a revisit's seed (see [`RunPlan::visit_of`]).
const VISIT_STREAM: u64 = 0x5649_5349_5400; // "VISIT"

/// Every repetition of `runs`, repetition by repetition (the whole sweep or
/// grid once, then again), so drift over time shows as spread rather than
/// as a difference between levels.
fn repeated(runs: Vec<RunPlan>, times: u32) -> Vec<RunPlan> {
    (1..=times.max(1))
        .flat_map(|r| runs.iter().map(move |run| run.repetition_of(r)))
        .collect()
}

/// What one card measures: a workload, judged on `slos`, or a mix.
struct Subject {
    name: String,
    profile: WorkloadProfile,
    slos: Vec<String>,
    /// Tasks an open run needs for its verdicts ([`tasks_to_judge`]).
    samples: u64,
    mix: Option<MixPlan>,
}

/// Expand an experiment into its plan.
///
/// Cards: every workload that no mix uses, judged on every SLO; every mix
/// at its declared weights and then at each `weights` setting; and with
/// `alone #true` in a mix, each of its classes' workloads on its own,
/// judged on its classes' SLOs.
pub fn build(experiment: &Experiment) -> Plan {
    let confidence = experiment.open.as_ref().map_or(0.95, |o| o.confidence.0);
    let mut subjects: Vec<Subject> = Vec::new();
    for workload in &experiment.workloads {
        let Some(slos) = workload_slos(experiment, &workload.name) else {
            continue;
        };
        // It matters for `requests` stops and for the tasks a verdict
        // needs, and drawing it is cheap next to parsing the file.
        let profile = WorkloadProfile::of(workload, workload_seed(experiment.seed, &workload.name));
        subjects.push(Subject {
            name: workload.name.clone(),
            samples: tasks_to_judge(
                &experiment.slos_named(&slos),
                confidence,
                profile.calls_per_task,
            ),
            profile,
            slos,
            mix: None,
        });
    }
    for mix in &experiment.mixes {
        let settings = std::iter::once((mix.weights(), true))
            .chain(mix.weight_settings.iter().map(|w| (w.clone(), false)));
        for (weights, declared) in settings {
            let plan = MixPlan::of(mix, &weights, declared);
            let name = plan.card_name();
            let parts: Vec<(WorkloadProfile, f64)> = plan
                .classes
                .iter()
                .filter_map(|c| {
                    let w = experiment.workload(&c.workload)?;
                    Some((
                        WorkloadProfile::of(w, workload_seed(experiment.seed, &c.workload)),
                        c.share,
                    ))
                })
                .collect();
            subjects.push(Subject {
                profile: WorkloadProfile::blend(&parts),
                samples: mix_samples_to_judge(experiment, &plan, confidence),
                slos: if experiment.open.is_some() {
                    vec![name.clone()]
                } else {
                    Vec::new()
                },
                name,
                mix: Some(plan),
            });
        }
    }
    let mut cards = Vec::with_capacity(experiment.targets.len() * subjects.len());
    for target in &experiment.targets {
        for subject in &subjects {
            cards.push(card_plan(experiment, &target.name, subject));
        }
    }
    let total: WallTime = cards.iter().map(CardPlan::wall_time).sum();
    Plan {
        schema: SCHEMA.to_string(),
        experiment: experiment.name.clone(),
        seed: experiment.seed,
        cards,
        expected_wall_time_s: total.expected_s,
        bound_wall_time_s: Some(total.bound_s),
    }
}

/// The SLOs a workload's own card is judged on, or `None` when it has no
/// card of its own: every SLO for a workload that no mix uses; for one a
/// mix uses, the SLOs of its classes in mixes that say `alone #true`
/// (none: no card).
pub fn workload_slos(experiment: &Experiment, workload: &str) -> Option<Vec<String>> {
    let uses: Vec<(&crate::config::Mix, &crate::config::MixClass)> = experiment
        .mixes
        .iter()
        .flat_map(|m| m.classes.iter().map(move |c| (m, c)))
        .filter(|(_, c)| c.workload == workload)
        .collect();
    if uses.is_empty() {
        let all = match &experiment.open {
            Some(_) => experiment.slos.iter().map(|s| s.name.clone()).collect(),
            None => Vec::new(),
        };
        return Some(all);
    }
    if !uses.iter().any(|(m, _)| m.alone) {
        return None;
    }
    if experiment.open.is_none() {
        return Some(Vec::new());
    }
    // In the file's SLO order.
    let named: Vec<&str> = uses
        .iter()
        .filter(|(m, _)| m.alone)
        .filter_map(|(_, c)| c.slo.as_deref())
        .collect();
    Some(
        experiment
            .slos
            .iter()
            .filter(|s| named.contains(&s.name.as_str()))
            .map(|s| s.name.clone())
            .collect(),
    )
}

/// Stable id of a run, also its journal file name: `<target>--<workload>--c0008`
/// (concurrency, at least 4 digits) or `<target>--<workload>--r4.000` (rate,
/// 3 decimals).
pub fn run_id(target: &str, workload: &str, load: &Load) -> String {
    match load {
        Load::Concurrency { concurrency } => format!("{target}--{workload}--c{concurrency:04}"),
        Load::Rate { rate, .. } => format!("{target}--{workload}--r{}", rate_label(rate.0)),
    }
}

/// A rate as it appears in a run id: three decimals when they hold it
/// exactly (`r4.000`, `r0.250`), else six, so two rates a search visits never
/// share an id (and a journal) because they round alike.
fn rate_label(rate: f64) -> String {
    let three = format!("{rate:.3}");
    if three
        .parse::<f64>()
        .is_ok_and(|r| (r - rate).abs() <= 1e-9 * rate.abs().max(1.0))
    {
        three
    } else {
        format!("{rate:.6}")
    }
}

/// Seed of a run's request stream: `mix(mix(experiment seed, hash(workload)),
/// level)`, where the level is the concurrency or the rate's bits. Not
/// dependent on the target (see the module doc).
pub fn run_seed(experiment_seed: u64, workload: &str, load: &Load) -> u64 {
    let level = match load {
        Load::Concurrency { concurrency } => u64::from(*concurrency),
        Load::Rate { rate, .. } => rate.0.to_bits(),
    };
    mix(workload_seed(experiment_seed, workload), level)
}

/// The run a Cr_open search makes at `rate`, from the search's template; a
/// trace replay that lasts the trace (`open` has no `duration`) gets the
/// duration of the replay at that rate.
pub fn run_at_rate_of(template: &RunPlan, rate: RatePerS, experiment: &Experiment) -> RunPlan {
    let mut run = run_at_rate(template, rate, experiment.seed);
    if let Some(open) = &experiment.open {
        run.stop = open_stop(open, rate.0, samples_for_run(experiment, &run));
    }
    run
}

/// `template` at `rate`, with its id and seed.
pub fn run_at_rate(template: &RunPlan, rate: RatePerS, experiment_seed: u64) -> RunPlan {
    let arrival = match template.load {
        Load::Rate { arrival, .. } => arrival,
        Load::Concurrency { .. } => Arrival::Poisson,
    };
    let load = Load::Rate { rate, arrival };
    RunPlan {
        id: run_id(&template.target, &template.workload, &load),
        seed: run_seed(experiment_seed, &template.workload, &load),
        mode: Mode::Open,
        load,
        ..template.clone()
    }
}

pub(crate) fn workload_seed(experiment_seed: u64, workload: &str) -> u64 {
    mix(experiment_seed, hash_str(workload))
}

fn card_plan(experiment: &Experiment, target: &str, subject: &Subject) -> CardPlan {
    let profile = &subject.profile;
    let run = |load: Load, warmup: Duration, stop: StopRule| RunPlan {
        mix: subject.mix.clone(),
        ..RunPlan::new(target, &subject.name, load, warmup, stop, experiment.seed)
    };

    let closed: Vec<RunPlan> = experiment.closed.as_ref().map_or_else(Vec::new, |spec| {
        spec.levels
            .iter()
            .map(|&concurrency| run(Load::Concurrency { concurrency }, spec.warmup, spec.stop))
            .collect()
    });
    let closed = repeated(closed, experiment.closed.as_ref().map_or(1, |c| c.repeat));

    let slos = subject.slos.clone();
    let open = match &experiment.open {
        None => OpenPlan::None,
        Some(spec) => {
            let open_run = |rate: RatePerS| {
                run(
                    Load::Rate {
                        rate,
                        arrival: spec.arrival,
                    },
                    spec.warmup,
                    open_stop(spec, rate.0, subject.samples),
                )
            };
            match &spec.rates {
                RateSelection::Grid { rates } => {
                    let runs: Vec<RunPlan> = repeated(
                        rates.iter().map(|&rate| open_run(rate)).collect(),
                        spec.repeat,
                    );
                    OpenPlan::Grid { runs }
                }
                RateSelection::Search {
                    min,
                    max,
                    precision,
                    ..
                } => {
                    let max_runs = search_max_runs(*min, *max, *precision, slos.len());
                    let bounds = frontier_bounds(experiment);
                    // The runner starts the search from the closed sweep
                    // when the card has one.
                    let typical_runs =
                        search_typical_runs(*min, *max, *precision, slos.len(), !closed.is_empty());
                    OpenPlan::Search {
                        arrival: spec.arrival,
                        min: *min,
                        max: *max,
                        precision: *precision,
                        max_runs,
                        frontier_runs: frontier_max_runs(bounds),
                        typical_runs,
                        typical_frontier_runs: frontier_typical_runs(bounds),
                        // The declared length: each rate's run is sized
                        // for samples when it is made (run_at_rate_of).
                        template: Box::new(run(
                            Load::Rate {
                                rate: *min,
                                arrival: spec.arrival,
                            },
                            spec.warmup,
                            spec.stop_at(min.0),
                        )),
                    }
                }
            }
        }
    };

    let time = estimate::card_wall_time(experiment, &closed, &open, profile);
    CardPlan {
        target: target.to_string(),
        workload: subject.name.clone(),
        slos,
        mix: subject.mix.clone(),
        closed,
        open,
        expected_wall_time_s: time.expected_s,
        bound_wall_time_s: Some(time.bound_s),
    }
}

#[cfg(test)]
mod trace_stop_tests {
    use std::sync::Arc;
    use std::time::Duration;

    use crate::config::{Arrival, OpenSpec, RatePerS, RateSelection, StopRule, TraceSpec};

    #[test]
    fn a_replay_without_duration_lasts_the_trace_at_its_speed() {
        let rows: String = (0..11)
            .map(|i| format!("{{\"timestamp\": {}, \"input_length\": 10, \"output_length\": 2, \"hash_ids\": []}}\n", i * 1000))
            .collect();
        let trace = crate::data::trace::parse_trace(&rows, "t").unwrap();
        assert_eq!(trace.span_s(), 10.0);
        let open = OpenSpec {
            arrival: Arrival::Trace,
            rates: RateSelection::Grid {
                rates: vec![RatePerS(1.1)],
            },
            stop: StopRule::TraceEnd,
            warmup: Duration::from_secs(2),
            trace: Some(TraceSpec {
                path: "t".into(),
                span: None,
                speedup: None,
                speedup_span: None,
                block_tokens: 16,
                data: Some(Arc::new(trace.clone())),
            }),
            confidence: crate::config::Fraction(0.95),
            budget: None,
            repeat: 1,
            frontier: vec![],
        };
        let mean = trace.mean_rate_per_s();
        // Speedup 1: 10 s of trace, 2 of them warmup.
        assert_eq!(
            open.stop_at(mean),
            StopRule::Duration(Duration::from_secs(8))
        );
        // Speedup 2: 5 s, 3 measured.
        assert_eq!(
            open.stop_at(2.0 * mean),
            StopRule::Duration(Duration::from_secs(3))
        );
        // A declared duration is kept.
        let fixed = OpenSpec {
            stop: StopRule::Duration(Duration::from_secs(30)),
            ..open
        };
        assert_eq!(
            fixed.stop_at(mean),
            StopRule::Duration(Duration::from_secs(30))
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{
        ClosedSpec, Conversation, Dist, DistKind, LatencyMetric, OpenSpec, SharedPrefix, Slo,
        SloClause, Stat, Target, Workload,
    };

    fn target(name: &str) -> Target {
        Target::sim(name, "h100-llama3-8b")
    }

    fn workload(name: &str) -> Workload {
        let input_tokens = Dist::lognormal(600.0, 0.6, 16.0, 8192.0);
        Workload {
            shared_prefix: Some(SharedPrefix {
                tokens: 400,
                groups: 4,
            }),
            ..Workload::new(name, input_tokens, Dist::fixed(200.0))
        }
    }

    fn latency(metric: LatencyMetric, p: f64, limit_ms: u64) -> SloClause {
        SloClause::Latency {
            metric,
            stat: Stat::Percentile(p),
            limit: Duration::from_millis(limit_ms),
        }
    }

    fn experiment() -> Experiment {
        Experiment {
            name: "support-chat".into(),
            description: Some("Support chat".into()),
            seed: 7,
            targets: vec![target("h100-vllm"), target("what-if")],
            workloads: vec![
                workload("chat"),
                Workload {
                    conversation: Some(Conversation {
                        turns: Dist {
                            kind: DistKind::Uniform { min: 1.0, max: 6.0 },
                            min: None,
                            max: None,
                        },
                        think_time: Dist {
                            kind: DistKind::Exponential { mean: 4.0 },
                            min: None,
                            max: None,
                        },
                    }),
                    ..workload("multi-turn")
                },
            ],
            slos: vec![
                Slo {
                    name: "interactive".into(),
                    span: None,
                    clauses: vec![
                        latency(LatencyMetric::Ttft, 50.0, 300),
                        latency(LatencyMetric::Itl, 95.0, 60),
                        latency(LatencyMetric::Ttft, 99.0, 1000),
                        SloClause::ErrorRate {
                            max: Fraction(0.005),
                        },
                    ],
                },
                Slo {
                    name: "batch".into(),
                    span: None,
                    clauses: vec![latency(LatencyMetric::E2e, 95.0, 120_000)],
                },
            ],
            mixes: vec![],
            closed: Some(ClosedSpec::new(
                vec![1, 2, 4, 8, 16, 32, 64, 128],
                StopRule::Duration(Duration::from_secs(60)),
                Duration::from_secs(10),
            )),
            open: Some(OpenSpec::new(
                RateSelection::Search {
                    min: RatePerS(0.5),
                    max: RatePerS(64.0),
                    precision: Fraction(0.05),
                    confidence: Fraction(0.9),
                    early_stop: true,
                },
                StopRule::Duration(Duration::from_secs(120)),
                Duration::from_secs(15),
            )),
            sizing: None,
            sweeps: Vec::new(),
            base_dir: None,
        }
    }

    fn grid_experiment(rates: &[f64], stop: StopRule) -> Experiment {
        let mut e = experiment();
        if let Some(open) = e.open.as_mut() {
            open.rates = RateSelection::Grid {
                rates: rates.iter().map(|r| RatePerS(*r)).collect(),
            };
            open.stop = stop;
        }
        e
    }

    fn with_mix(alone: bool) -> Experiment {
        let mut e = experiment();
        e.targets.truncate(1);
        e.mixes = vec![crate::config::Mix {
            name: "prod".into(),
            span: None,
            classes: vec![
                crate::config::MixClass {
                    name: "talk".into(),
                    span: None,
                    workload: "chat".into(),
                    slo: Some("interactive".into()),
                    weight: 90.0,
                    model: Some("lora-a".into()),
                    priority: Some(0),
                },
                crate::config::MixClass {
                    name: "bulk".into(),
                    span: None,
                    workload: "multi-turn".into(),
                    slo: Some("batch".into()),
                    weight: 10.0,
                    model: None,
                    priority: None,
                },
            ],
            weight_settings: vec![vec![50.0, 50.0]],
            alone,
        }];
        e
    }

    #[test]
    fn a_mix_has_a_card_per_weight_setting_and_its_workloads_none_alone_unless_asked() {
        let plan = build(&with_mix(false));
        let cards: Vec<(&str, &[String])> = plan
            .cards
            .iter()
            .map(|c| (c.workload.as_str(), c.slos.as_slice()))
            .collect();
        assert_eq!(
            cards,
            [
                ("prod", &["prod".to_string()][..]),
                ("prod@50-50", &["prod@50-50".to_string()][..])
            ]
        );
        let mix = plan.cards[0].mix.as_ref().unwrap();
        assert_eq!(mix.classes[0].share, 0.9);
        assert_eq!(mix.classes[0].model.as_deref(), Some("lora-a"));
        assert_eq!(plan.cards[1].mix.as_ref().unwrap().classes[1].share, 0.5);
        // Every run says what it sends; runs of the two settings differ.
        let OpenPlan::Search { template, .. } = &plan.cards[0].open else {
            panic!("search");
        };
        assert_eq!(template.mix.as_ref(), Some(mix));
        assert!(
            plan.cards[0]
                .closed
                .iter()
                .all(|r| r.mix.as_ref() == Some(mix))
        );
        assert_ne!(plan.cards[0].closed[0].seed, plan.cards[1].closed[0].seed);
        // `alone #true`: each class's workload on its own, judged on its
        // class's SLO only.
        let plan = build(&with_mix(true));
        let cards: Vec<(&str, Vec<&str>)> = plan
            .cards
            .iter()
            .map(|c| {
                (
                    c.workload.as_str(),
                    c.slos.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            cards,
            [
                ("chat", vec!["interactive"]),
                ("multi-turn", vec!["batch"]),
                ("prod", vec!["prod"]),
                ("prod@50-50", vec!["prod@50-50"]),
            ]
        );
    }

    #[test]
    fn a_rare_class_lengthens_the_mixs_runs_for_its_samples() {
        let e = with_mix(false);
        let plan = build(&e);
        let mix = plan.cards[0].mix.as_ref().unwrap();
        // `batch` (10%, multi-turn) is judged on an e2e p95: 3 × 59 calls
        // of its own, so many conversations of its turns, and ten times as
        // many arrivals; `interactive` (90%, a call a task) on a p99:
        // 3 × 368 / 0.9.
        let turns = WorkloadProfile::of(
            e.workload("multi-turn").unwrap(),
            workload_seed(e.seed, "multi-turn"),
        )
        .calls_per_task;
        let batch = tasks_to_judge(std::slice::from_ref(e.slo("batch").unwrap()), 0.95, turns);
        let batch_calls = samples_to_judge(std::slice::from_ref(e.slo("batch").unwrap()), 0.95);
        assert!(
            batch < batch_calls,
            "{batch} conversations, {batch_calls} calls"
        );
        assert_eq!(batch, (batch_calls as f64 / turns).ceil() as u64);
        let interactive =
            samples_to_judge(std::slice::from_ref(e.slo("interactive").unwrap()), 0.95);
        let want =
            ((batch as f64 / 0.1).ceil() as u64).max((interactive as f64 / 0.9).ceil() as u64);
        assert_eq!(mix_samples_to_judge(&e, mix, 0.95), want);
        assert_eq!(card_samples(&e, "prod", Some(mix)), want);
    }

    #[test]
    fn cards_are_targets_outer_workloads_inner() {
        let plan = build(&experiment());
        let order: Vec<(&str, &str)> = plan
            .cards
            .iter()
            .map(|c| (c.target.as_str(), c.workload.as_str()))
            .collect();
        assert_eq!(
            order,
            [
                ("h100-vllm", "chat"),
                ("h100-vllm", "multi-turn"),
                ("what-if", "chat"),
                ("what-if", "multi-turn")
            ]
        );
        assert_eq!(plan.schema, "capcard/plan/v1");
        assert_eq!((plan.experiment.as_str(), plan.seed), ("support-chat", 7));
        assert_eq!(plan.cards[0].slos, ["interactive", "batch"]);
    }

    #[test]
    fn closed_runs_have_stable_ids_and_specs() {
        let plan = build(&experiment());
        let card = &plan.cards[0];
        let ids: Vec<&str> = card.closed.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids.len(), 8);
        assert_eq!(ids[0], "h100-vllm--chat--c0001");
        assert_eq!(ids[3], "h100-vllm--chat--c0008");
        assert_eq!(ids[7], "h100-vllm--chat--c0128");
        let run = &card.closed[3];
        assert_eq!(run.mode, Mode::Closed);
        assert_eq!(run.load, Load::Concurrency { concurrency: 8 });
        assert_eq!(run.warmup, Duration::from_secs(10));
        assert_eq!(run.stop, StopRule::Duration(Duration::from_secs(60)));
        assert_eq!(
            (run.target.as_str(), run.workload.as_str()),
            ("h100-vllm", "chat")
        );
    }

    #[test]
    fn run_ids_pad_and_format_rates() {
        let rate = |r| Load::Rate {
            rate: RatePerS(r),
            arrival: Arrival::Poisson,
        };
        assert_eq!(
            run_id("t", "w", &Load::Concurrency { concurrency: 12345 }),
            "t--w--c12345"
        );
        assert_eq!(run_id("t", "w", &rate(4.0)), "t--w--r4.000");
        assert_eq!(run_id("t", "w", &rate(0.5)), "t--w--r0.500");
        assert_eq!(run_id("t", "w", &rate(12.3456)), "t--w--r12.345600");
        // Low rates a fine search visits no longer collide at 3 decimals.
        assert_ne!(
            run_id("t", "w", &rate(0.12341)),
            run_id("t", "w", &rate(0.12344))
        );
        assert_eq!(run_id("t", "w", &rate(0.12341)), "t--w--r0.123410");
    }

    #[test]
    fn seeds_depend_on_workload_and_level_not_target() {
        let plan = build(&experiment());
        let (a, b) = (&plan.cards[0], &plan.cards[2]); // same workload, two targets
        assert_eq!(a.workload, b.workload);
        assert_ne!(a.target, b.target);
        let seeds = |c: &CardPlan| c.closed.iter().map(|r| r.seed).collect::<Vec<_>>();
        assert_eq!(seeds(a), seeds(b));
        let distinct: std::collections::HashSet<u64> = seeds(a).into_iter().collect();
        assert_eq!(distinct.len(), 8, "every level has its own stream");
        assert_ne!(
            seeds(a),
            seeds(&plan.cards[1]),
            "workloads have their own streams"
        );
        let expected = mix(mix(7, hash_str("chat")), 8);
        assert_eq!(a.closed[3].seed, expected);
        let other_seed = build(&Experiment {
            seed: 8,
            ..experiment()
        });
        assert_ne!(other_seed.cards[0].closed[3].seed, expected);
    }

    #[test]
    fn grid_runs_one_per_rate() {
        let plan = build(&grid_experiment(
            &[1.0, 2.0, 4.5],
            StopRule::Duration(Duration::from_secs(30)),
        ));
        let OpenPlan::Grid { runs } = &plan.cards[0].open else {
            panic!("expected a grid")
        };
        let ids: Vec<&str> = runs.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(
            ids,
            [
                "h100-vllm--chat--r1.000",
                "h100-vllm--chat--r2.000",
                "h100-vllm--chat--r4.500"
            ]
        );
        assert!(
            runs.iter()
                .all(|r| r.mode == Mode::Open && r.warmup == Duration::from_secs(15))
        );
        assert_eq!(
            runs[2].load,
            Load::Rate {
                rate: RatePerS(4.5),
                arrival: Arrival::Poisson
            }
        );
        assert_eq!(
            runs[2].seed,
            mix(mix(7, hash_str("chat")), 4.5f64.to_bits())
        );
        let OpenPlan::Grid { runs: other } = &plan.cards[2].open else {
            panic!("expected a grid")
        };
        assert_eq!(runs[1].seed, other[1].seed, "same stream on every target");
    }

    #[test]
    fn search_holds_bounds_template_and_run_bound() {
        let plan = build(&experiment());
        let OpenPlan::Search {
            arrival,
            min,
            max,
            precision,
            max_runs,
            frontier_runs,
            typical_runs,
            typical_frontier_runs,
            template,
        } = &plan.cards[0].open
        else {
            panic!("expected a search");
        };
        assert_eq!(*frontier_runs, 0, "no `frontier`, no frontier phase");
        assert_eq!(*typical_frontier_runs, 0);
        // From the closed sweep: 2 bracketing runs, then log2(20) ≈ 4.3
        // bisections for each of the 2 SLOs.
        assert_eq!(*typical_runs, 11);
        assert_eq!(
            (*arrival, *min, *max, *precision),
            (
                Arrival::Poisson,
                RatePerS(0.5),
                RatePerS(64.0),
                Fraction(0.05)
            )
        );
        // Bracketing: ⌈log2(128)⌉ + 2 = 9; bisection: ⌈log2(20)⌉ + 1 = 6 per
        // SLO, twice over (inconclusive gaps), 2 SLOs.
        assert_eq!(*max_runs, 9 + 2 * 2 * 6);
        assert_eq!(template.id, "h100-vllm--chat--r0.500");
        assert_eq!(
            template.load,
            Load::Rate {
                rate: RatePerS(0.5),
                arrival: Arrival::Poisson
            }
        );
        let run = run_at_rate(template, RatePerS(6.25), 7);
        assert_eq!(run.id, "h100-vllm--chat--r6.250");
        assert_eq!(run.seed, run_seed(7, "chat", &run.load));
        assert_eq!(run.mode, Mode::Open);
        assert_eq!((run.warmup, run.stop), (template.warmup, template.stop));
    }

    #[test]
    fn search_run_bounds() {
        let bound =
            |min, max, p, slos| search_max_runs(RatePerS(min), RatePerS(max), Fraction(p), slos);
        assert_eq!(bound(1.0, 2.0, 0.5, 1), 3 + 2 * 2);
        assert_eq!(bound(1.0, 3.0, 0.1, 1), 4 + 2 * 5);
        assert_eq!(
            bound(1.0, 64.0, 0.05, 0),
            8 + 2 * 6,
            "no SLO still counts one search"
        );
        assert_eq!(
            bound(4.0, 4.0, 0.05, 1),
            2 + 2 * 6,
            "degenerate range: the bracketing runs"
        );
        assert_eq!(
            bound(1.0, 2.0, 0.0, 1),
            3 + 2 * 15,
            "precision floored at 1e-4"
        );
    }

    #[test]
    fn an_agent_run_holds_the_tasks_its_clauses_count_not_calls_as_tasks() {
        let e = crate::config::parse(
            include_str!("../../experiments/agentic.kdl"),
            std::path::Path::new("experiments/agentic.kdl"),
        )
        .expect("the shipped agentic experiment parses");
        // task-e2e p90 counts tasks: 3 × 36. ttft p99 counts calls: 3 × 368
        // = 1,104 calls, a task making some 19 of them; error-rate 1%: 299
        // calls. The tasks a run needs are the task clause's.
        let calls_per_task =
            WorkloadProfile::of(&e.workloads[0], workload_seed(e.seed, "agent")).calls_per_task;
        assert!(calls_per_task > 10.0, "{calls_per_task}");
        assert_eq!(samples_to_judge(&e.slos, 0.95), 1104, "as calls");
        assert_eq!(tasks_to_judge(&e.slos, 0.95, calls_per_task), 108);
        assert_eq!(card_samples(&e, "agent", None), 108);
        // Without the task clause, the per-call clauses in tasks.
        let per_call: Vec<Slo> = e
            .slos
            .iter()
            .map(|slo| Slo {
                clauses: slo.clauses[1..].to_vec(),
                ..slo.clone()
            })
            .collect();
        assert_eq!(
            tasks_to_judge(&per_call, 0.95, calls_per_task),
            (1104.0 / calls_per_task).ceil() as u64
        );
        assert_eq!(tasks_to_judge(&per_call, 0.95, 4.0), 276);
        // A nonsense mean (below one call a task) counts calls as tasks.
        assert_eq!(tasks_to_judge(&per_call, 0.95, 0.0), 1104);
        assert_eq!(tasks_to_judge(&per_call, 0.95, f64::NAN), 1104);
        // The runner's run at a rate is lengthened to 108 tasks, not 1,104:
        // at 1 task/s the declared 5 min hold them.
        let plan = build(&e);
        let OpenPlan::Search { template, .. } = &plan.cards[0].open else {
            panic!("a search");
        };
        let run = run_at_rate_of(template, RatePerS(1.0), &e);
        assert_eq!(run.stop, StopRule::Duration(Duration::from_secs(300)));
        let slow = run_at_rate_of(template, RatePerS(0.25), &e);
        assert_eq!(slow.stop, StopRule::Duration(Duration::from_secs(432)));
    }

    #[test]
    fn open_runs_are_lengthened_to_hold_the_samples_their_slos_need() {
        let e = experiment();
        let open = e.open.clone().unwrap();
        // The SLOs' top percentile is a p99: 3 × 368 calls.
        assert_eq!(samples_to_judge(&e.slos, 0.95), 1104);
        let needed = samples_to_judge(&e.slos, 0.95);
        let secs = |rate: f64| match open_stop(&open, rate, needed) {
            StopRule::Duration(d) => d.as_secs_f64(),
            other => panic!("{other:?}"),
        };
        assert_eq!(secs(20.0), 120.0, "enough calls in the declared 2 min");
        assert_eq!(secs(5.0), 221.0, "1,104 calls at 5/s, to a whole second");
        assert_eq!(secs(0.5), 480.0, "at most 4× the declared length");
        // A p90-only SLO needs 108 calls; a mean-only SLO none.
        let p90 = vec![Slo {
            name: "p90".into(),
            span: None,
            clauses: vec![latency(LatencyMetric::E2e, 90.0, 4000)],
        }];
        assert_eq!(samples_to_judge(&p90, 0.95), 108);
        let mean = vec![Slo {
            name: "mean".into(),
            span: None,
            clauses: vec![SloClause::Latency {
                metric: LatencyMetric::Ttft,
                stat: crate::config::Stat::Mean,
                limit: Duration::from_millis(200),
            }],
        }];
        assert_eq!(samples_to_judge(&mean, 0.95), 0);
        // An error rate of at most 0.5% passes from 765 calls without a failure.
        let errors = vec![Slo {
            name: "errors".into(),
            span: None,
            clauses: vec![
                latency(LatencyMetric::E2e, 90.0, 4000),
                SloClause::ErrorRate {
                    max: Fraction(0.005),
                },
            ],
        }];
        assert_eq!(samples_to_judge(&errors, 0.95), 765);
        assert_eq!(
            open_stop(&open, 0.5, samples_to_judge(&mean, 0.95)),
            open.stop
        );
        // A request count grows the same way.
        let requests = OpenSpec {
            stop: StopRule::Requests(500),
            ..open.clone()
        };
        assert_eq!(open_stop(&requests, 1.0, needed), StopRule::Requests(1104));
        // The run the runner makes at a rate carries the sized stop; the
        // plan's template keeps the declared one.
        let plan = build(&e);
        let OpenPlan::Search { template, .. } = &plan.cards[0].open else {
            panic!("a search");
        };
        assert_eq!(template.stop, open.stop);
        let run = run_at_rate_of(template, RatePerS(5.0), &e);
        assert_eq!(run.stop, StopRule::Duration(Duration::from_secs(221)));
    }

    #[test]
    fn estimate_sums_duration_runs() {
        let plan = build(&experiment());
        // Closed: 8 × (10 + 60 + 2). Open, expected: the typical 11 runs ×
        // (15 + 196 + 2), since at the typical rate √(0.5 · 64) ≈ 5.66 rps
        // the 1,104 calls a p99 is judged on take 196 s, not the declared
        // 120; no extensions.
        let closed_s = 8.0 * 72.0;
        let expected_s = closed_s + 11.0 * 213.0;
        // Bound: the search's default budget, 12 runs at the middle rate
        // (15 + 196 s), and the drains of the runs it can hold at most (19
        // of the shortest, at `max`: 15 + 120 s).
        let bound_s = closed_s + 12.0 * 211.0 + 19.0 * 2.0;
        // multi-turn, judged on the same SLOs, needs those 1,104 calls as
        // 329 conversations of 3.4 turns: at the typical rate (5.66/s) the
        // declared 2 min hold them, so its runs are not lengthened: 11 ×
        // (15 + 120 + 2); bound, 12 × (15 + 120) and 12 drains.
        let multi_expected_s = closed_s + 11.0 * 137.0;
        let multi_bound_s = closed_s + 12.0 * 135.0 + 12.0 * 2.0;
        for card in &plan.cards {
            let (expected, bound_want) = if card.workload == "chat" {
                (expected_s, bound_s)
            } else {
                (multi_expected_s, multi_bound_s)
            };
            assert!(
                (card.expected_wall_time_s - expected).abs() < 1e-9,
                "{}: {}",
                card.workload,
                card.expected_wall_time_s
            );
            let bound = card.bound_wall_time_s.expect("a bound");
            assert!(
                (bound - bound_want).abs() < 1e-9,
                "{}: {bound}",
                card.workload
            );
        }
        let both = |a: f64, b: f64| 2.0 * a + 2.0 * b;
        assert!((plan.expected_wall_time_s - both(expected_s, multi_expected_s)).abs() < 1e-6);
        assert!(
            (plan.bound_wall_time_s.unwrap_or(0.0) - both(bound_s, multi_bound_s)).abs() < 1e-6
        );

        let grid = build(&grid_experiment(
            &[1.0, 2.0],
            StopRule::Duration(Duration::from_secs(30)),
        ));
        // 1 and 2 rps would need 1,104 s and 552 s: lengthened 4×, to 120 s.
        let grid_s = 8.0 * 72.0 + 2.0 * 137.0;
        assert!((grid.cards[0].expected_wall_time_s - grid_s).abs() < 1e-9);
        // Grid runs are extended too: a budget of 4 × 120 s buys one
        // extension (each needs 2 × 120 s + 15 s of it).
        let bound = grid.cards[0].bound_wall_time_s.unwrap_or(0.0);
        assert!(
            (bound - (grid_s + 480.0 + 15.0 + 2.0)).abs() < 1e-9,
            "{bound}"
        );
    }

    #[test]
    fn the_bound_holds_the_search_budget() {
        let bound = |budget: Option<Duration>| {
            let mut e = experiment();
            if let Some(open) = e.open.as_mut() {
                open.budget = budget;
            }
            let plan = build(&e);
            (
                plan.cards[0].expected_wall_time_s,
                plan.cards[0].bound_wall_time_s.unwrap_or(0.0),
            )
        };
        // No budget: the one run a search always makes, at its longest
        // (at `min`, 15 + 480 s), and its drain.
        let (expected, none) = bound(Some(Duration::ZERO));
        assert!((none - (8.0 * 72.0 + 495.0 + 2.0)).abs() < 1e-9, "{none}");
        assert!(expected <= none);
        // 20 minutes: the budget and the drains of the 9 shortest runs it holds.
        let (expected, twenty) = bound(Some(Duration::from_secs(1200)));
        assert!(
            (twenty - (8.0 * 72.0 + 1200.0 + 9.0 * 2.0)).abs() < 1e-9,
            "{twenty}"
        );
        assert!(expected <= twenty);
    }

    #[test]
    fn the_runner_and_the_bound_count_the_budget_from_the_same_run() {
        let e = experiment();
        let plan = build(&e);
        let card = &plan.cards[0];
        let OpenPlan::Search { template, min, .. } = &card.open else {
            panic!("a search");
        };
        // The search's longest run is at `min`, lengthened for samples.
        let longest = extension::longest_open_run(&card.open, &e).expect("a run");
        assert_eq!(longest, run_at_rate_of(template, *min, &e));
        assert_eq!(longest.stop, StopRule::Duration(Duration::from_secs(480)));
        assert_eq!(
            extension_budget(&e, &card.open),
            Duration::from_secs(4 * 480)
        );
        // A declared budget wins.
        let mut declared = experiment();
        if let Some(open) = declared.open.as_mut() {
            open.budget = Some(Duration::from_secs(90));
        }
        assert_eq!(
            extension_budget(&declared, &card.open),
            Duration::from_secs(90)
        );
        // A grid's: its longest run's; no open runs, no budget.
        let g = grid_experiment(&[1.0, 40.0], StopRule::Duration(Duration::from_secs(30)));
        let grid = build(&g);
        assert_eq!(
            extension_budget(&g, &grid.cards[0].open),
            Duration::from_secs(4 * 120)
        );
        assert_eq!(extension_budget(&e, &OpenPlan::None), Duration::ZERO);
    }

    /// Every shipped example: the expected time is within the bound, per
    /// card, and the plan's figures are its cards' sums.
    #[test]
    fn expected_is_within_the_bound_for_every_example() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).expect("experiments/") {
            let path = entry.expect("an entry").path();
            if path.extension().is_none_or(|x| x != "kdl") {
                continue;
            }
            let e = crate::config::load(&path).expect("every example is valid");
            let plan = build(&e);
            for card in &plan.cards {
                let bound = card.bound_wall_time_s.expect("a bound");
                assert!(
                    card.expected_wall_time_s > 0.0 && card.expected_wall_time_s <= bound,
                    "{}: {} × {}: {} > {bound}",
                    path.display(),
                    card.target,
                    card.workload,
                    card.expected_wall_time_s
                );
                if let OpenPlan::Search {
                    typical_runs,
                    max_runs,
                    ..
                } = card.open
                {
                    assert!((1..=max_runs).contains(&typical_runs));
                }
            }
            let total: WallTime = plan.cards.iter().map(CardPlan::wall_time).sum();
            assert!((plan.expected_wall_time_s - total.expected_s).abs() < 1e-6);
            assert!((plan.bound_wall_time_s.unwrap_or(0.0) - total.bound_s).abs() < 1e-6);
            checked += 1;
        }
        assert!(checked >= 10, "only {checked} examples");
    }

    #[test]
    fn frontier_adds_its_worst_case_to_the_search_bound() {
        let with = |multipliers: &[f64]| {
            let mut e = experiment();
            if let Some(open) = e.open.as_mut() {
                open.frontier = multipliers.to_vec();
            }
            let plan = build(&e);
            let OpenPlan::Search {
                max_runs,
                frontier_runs,
                ..
            } = plan.cards[0].open
            else {
                panic!("expected a search");
            };
            (max_runs, frontier_runs, plan.cards[0].wall_time())
        };
        let (search, none, base) = with(&[]);
        assert_eq!(none, 0);
        // 4 latency clauses (the error rate has none) × 1 multiplier × 3 runs.
        let (same, one, with_one) = with(&[1.5]);
        assert_eq!((same, one), (search, 12));
        // Expected: one run per bound at the typical rate (15 + 196 + 2 s);
        // at most: each of the 12 at the longest (15 + 480 + 2 s).
        assert!((with_one.expected_s - base.expected_s - 4.0 * 213.0).abs() < 1e-9);
        assert!((with_one.bound_s - base.bound_s - 12.0 * 497.0).abs() < 1e-9);
        // `capcard plan` shows both, in one bound.
        let mut e = experiment();
        if let Some(open) = e.open.as_mut() {
            open.frontier = vec![1.5];
        }
        let table = render_table(&build(&e), &e);
        assert!(
            table.contains("then up to 12 runs of the frontier of up to")
                && table.contains("then the frontier at 1.5× of each bound (~4, ≤ 12 of the runs)"),
            "{table}"
        );
        // 4 × 3 × 3 = 36, capped per card.
        let (_, capped, _) = with(&[0.5, 1.5, 2.0]);
        assert_eq!(capped, FRONTIER_MAX_RUNS);
        assert_eq!(frontier_max_runs(0), 0);
    }

    #[test]
    fn estimate_for_requests_stops_uses_the_assumed_call_time() {
        let mut e = grid_experiment(&[4.0], StopRule::Requests(100));
        e.closed = None;
        e.workloads.truncate(1);
        let plan = build(&e);
        // 100 calls lengthened 4× for the p99 (1,104 wanted): 400 calls at
        // 4 req/s = 100 s, + 15 s warmup + 2 s drain.
        assert!((plan.cards[0].expected_wall_time_s - 117.0).abs() < 1e-9);
        // At most one extension, 4 × 100 s + 15 s warmup + 2 s drain.
        let bound = plan.cards[0].bound_wall_time_s.unwrap_or(0.0);
        assert!((bound - (117.0 + 417.0)).abs() < 1e-9, "{bound}");

        let mut e = experiment();
        e.open = None;
        e.workloads.truncate(1);
        if let Some(closed) = e.closed.as_mut() {
            closed.levels = vec![2];
            closed.stop = StopRule::Requests(100);
        }
        let plan = build(&e);
        // Call = 0.5 s + 200 × 30 ms = 6.5 s; 2 in flight → 100 calls take 325 s.
        assert!((plan.cards[0].expected_wall_time_s - (10.0 + 325.0 + 2.0)).abs() < 1e-9);
        // Closed runs are never extended: the bound is the same.
        assert_eq!(
            plan.cards[0].bound_wall_time_s,
            Some(plan.cards[0].expected_wall_time_s)
        );
        assert!(
            plan.cards[0].slos.is_empty(),
            "no open runs, no SLO evaluated"
        );
        assert_eq!(plan.cards[0].open, OpenPlan::None);
    }

    #[test]
    fn plan_round_trips_through_json() {
        let plan = build(&experiment());
        let json = serde_json::to_string(&plan).expect("serialize");
        let back: Plan = serde_json::from_str(&json).expect("deserialize");
        assert_eq!(back, plan);
    }

    /// A plan.json from before the bound: its one figure is read as the
    /// expected time, with no bound and no typical count.
    #[test]
    fn an_old_plan_json_still_loads() {
        let plan = build(&experiment());
        let mut json = serde_json::to_value(&plan).expect("serialize");
        let rename = |object: &mut serde_json::Value| {
            let map = object.as_object_mut().expect("an object");
            map.remove("bound_wall_time_s");
            let figure = map.remove("expected_wall_time_s").expect("a figure");
            map.insert("estimated_wall_time_s".into(), figure);
        };
        rename(&mut json);
        for card in json["cards"].as_array_mut().expect("cards") {
            rename(card);
            if let Some(open) = card["open"].as_object_mut() {
                open.remove("typical_runs");
            }
        }
        let old: Plan = serde_json::from_value(json).expect("an old plan.json loads");
        assert_eq!(old.expected_wall_time_s, plan.expected_wall_time_s);
        assert_eq!(old.bound_wall_time_s, None);
        let card = &old.cards[0];
        assert_eq!(card.bound_wall_time_s, None);
        assert_eq!(card.wall_time().bound_s, card.expected_wall_time_s);
        assert!(matches!(
            card.open,
            OpenPlan::Search {
                typical_runs: 0,
                ..
            }
        ));
    }

    #[test]
    fn table_shows_runs_slos_and_estimates() {
        let e = experiment();
        let table = render_table(&build(&e), &e);
        for needle in [
            "experiment \"support-chat\"  seed 7",
            "h100-vllm × chat  (est. 48 min 39 s, at most 52 min 26 s)",
            "what-if × multi-turn",
            "concurrency 1 2 4 8 16 32 64 128",
            "warmup 10 s + 1 min per level",
            "search 0.5–64 req/s, poisson, precision 5%",
            "search 0.5–64 conversations/s, poisson, precision 5%",
            "warmup 15 s + 2 min per rate",
            "longer below 9.2 req/s, up to 4×: 1104 calls to judge the SLOs",
            "at most: the search's budget, 42 min 12 s of runs (12 runs at the middle rate, the default): ≤ 42 min 50 s",
            "interactive  ttft p50≤300 ms p99≤1 s, itl p95≤60 ms, error-rate≤0.5%",
            "batch        e2e p95≤2 min",
            "4 cards (2 targets × 2 workloads), 32 closed runs, ~44 (up to 132) open runs",
            "estimated wall time 2 h 47 min, at most 2 h 59 min",
            // Counted in conversations: 1,104 calls of 3.4 turns each.
            "longer below 2.742 conversations/s, up to 4×: 329 conversations to judge the SLOs",
            "at most = each search's budget (its runs, warmups included) and the frontier phase, plus each grid's whole extension budget",
        ] {
            assert!(table.contains(needle), "missing {needle:?} in\n{table}");
        }
        // Closed line: label, runs, time, levels aligned in columns.
        let closed_line = table
            .lines()
            .find(|l| l.contains("concurrency"))
            .expect("closed line");
        let open_line = table
            .lines()
            .find(|l| l.contains("search 0.5"))
            .expect("open line");
        let column = |line: &str, word: &str| line.find(word).map(|i| line[..i].chars().count());
        assert_eq!(
            column(closed_line, "concurrency"),
            column(open_line, "search")
        );
        assert_eq!(column(closed_line, "runs"), column(open_line, "runs"));
        assert!(closed_line.contains("9 min 36 s"), "{closed_line}");
        assert!(
            open_line.contains("~11 runs") && open_line.contains("39 min 3 s"),
            "{open_line}"
        );
        assert!(!table.contains("requests` stops"));
    }

    #[test]
    fn table_shows_grid_and_missing_blocks() {
        let mut e = grid_experiment(&[1.0, 2.5], StopRule::Requests(50));
        e.closed = None;
        e.slos.clear();
        let table = render_table(&build(&e), &e);
        for needle in [
            "no closed sweep",
            "rates 1 2.5 req/s, poisson",
            "warmup 15 s + 50 requests per rate",
            "none defined",
            "`requests` stops assume 500 ms + 30 ms per output token per call",
            "0 closed runs, 8 open runs",
        ] {
            assert!(table.contains(needle), "missing {needle:?} in\n{table}");
        }
    }
}
