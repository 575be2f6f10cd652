//! Assembling one [`Card`] from run summaries, and the [`CapacityReport`]
//! (`results.json`) from cards.
//!
//! Everything a card states is derived here from the summaries and the
//! experiment, so `capcard run` and `capcard report` (which recomputes from
//! journals) produce the same card. Where something is missing or
//! questionable the card does not stay silent: [`Card::notes`] says it in
//! plain language (a quantity not reached, an unsaturated sweep, short
//! outputs, errors, an interrupted run, a lagging generator).

use std::collections::BTreeMap;

use crate::exec::ErrorClass;

use crate::TOOL_VERSION;
use crate::config::{Experiment, RateSelection, SizingTarget, Target, TargetKind, Workload};

use super::search::cr_open_in;
use super::{
    CapacityReport, Card, CrOpen, CrossP, LevelSpread, MeasuredTokens, RepeatSpread, RunSummary,
    SloSpread, TargetInfo, crossp, knee, sizing,
};
use crate::format::significant;

/// The `schema` of `results.json`.
pub const RESULTS_SCHEMA: &str = "capcard/results/v2";

/// Relative gap between reported and requested prompt tokens worth a note.
const PROMPT_TOKEN_MISMATCH: f64 = 0.02;

/// One card for `target` × `workload`, judged on the SLOs its plan gives
/// it ([`crate::plan::workload_slos`]: every SLO, or for a workload a mix
/// measures alone, its classes'). `model` is the model id actually sent
/// (from the journals), which overrides the target's configured one.
/// `closed` and `open` may come in any order; the card sorts them.
pub fn build_card(
    experiment: &Experiment,
    target: &Target,
    workload: &Workload,
    model: Option<String>,
    closed: Vec<RunSummary>,
    open: Vec<RunSummary>,
) -> Card {
    let judged = crate::plan::workload_slos(experiment, &workload.name)
        .unwrap_or_else(|| experiment.slos.iter().map(|s| s.name.clone()).collect());
    let subject = Subject {
        name: workload.name.clone(),
        profile: workload.clone(),
        slos: experiment.slos_named(&judged),
        verdicts: judged,
        mix: None,
    };
    assemble(experiment, target, subject, model, closed, open)
}

/// One card for `target` × a mix at one weight setting (`plan`): judged on
/// the mix's verdict, every class within its own SLO ([`super::mix`]).
pub fn build_mix_card(
    experiment: &Experiment,
    target: &Target,
    plan: &crate::plan::MixPlan,
    model: Option<String>,
    closed: Vec<RunSummary>,
    open: Vec<RunSummary>,
) -> Card {
    let workloads: Vec<Workload> = plan
        .classes
        .iter()
        .filter_map(|c| experiment.workload(&c.workload).cloned())
        .collect();
    let class_slos: Vec<&str> = plan
        .classes
        .iter()
        .filter_map(|c| c.slo.as_deref())
        .collect();
    let name = plan.card_name();
    let subject = Subject {
        verdicts: if experiment.open.is_some() {
            vec![name.clone()]
        } else {
            vec![]
        },
        name,
        // The classes' workloads are in `mix`; the first stands for the
        // card's shape where one is needed (a conversation's unit words).
        profile: workloads.first().cloned().unwrap_or_else(|| Workload {
            name: plan.mix.clone(),
            span: None,
            input_tokens: crate::config::Dist::fixed(0.0),
            output_tokens: crate::config::Dist::fixed(0.0),
            shared_prefix: None,
            conversation: None,
            agent: None,
            dataset: None,
            tools: None,
            sessions: None,
        }),
        slos: experiment
            .slos
            .iter()
            .filter(|s| class_slos.contains(&s.name.as_str()))
            .cloned()
            .collect(),
        mix: Some(super::mix::MixCard {
            plan: plan.clone(),
            workloads,
            class_cr_open: vec![],
        }),
    };
    assemble(experiment, target, subject, model, closed, open)
}

/// What a card is about: a workload or a mix, and what it is judged on.
struct Subject {
    name: String,
    profile: Workload,
    /// The SLO definitions the card shows.
    slos: Vec<crate::config::Slo>,
    /// The verdicts Cr_open is found for: SLO names, or the mix card's name.
    verdicts: Vec<String>,
    mix: Option<super::mix::MixCard>,
}

fn assemble(
    experiment: &Experiment,
    target: &Target,
    subject: Subject,
    model: Option<String>,
    closed: Vec<RunSummary>,
    open: Vec<RunSummary>,
) -> Card {
    let mut closed = closed;
    closed.sort_by_key(|s| s.concurrency);
    let mut open = open;
    open.sort_by(|a, b| {
        a.rate_rps
            .unwrap_or(0.0)
            .total_cmp(&b.rate_rps.unwrap_or(0.0))
    });

    let crossp_spec = experiment.closed.as_ref().map(|c| c.crossp);
    let knee_spec = experiment.closed.as_ref().map(|c| c.knee);
    let (max_rps, precision, confidence) = match experiment.open.as_ref().map(|o| &o.rates) {
        Some(RateSelection::Search {
            max,
            precision,
            confidence,
            ..
        }) => (Some(max.0), Some(precision.0), confidence.0),
        _ => (None, None, super::cr_open::DEFAULT_CONFIDENCE),
    };
    let decide_closed = |runs: &[RunSummary]| {
        // Invalid runs (most calls failed) measured the failure, not the
        // replica, and a run whose latency was still rising had not reached
        // the steady state a sweep compares: only stable, valid levels decide.
        let valid: Vec<RunSummary> = runs
            .iter()
            .filter(|s| s.measures_replica() && s.state == super::RunState::Stable)
            .cloned()
            .collect();
        (
            crossp::crossp(&valid, &crossp_spec.unwrap_or_default()),
            knee::cr_closed(&valid, &knee_spec.unwrap_or_default()),
        )
    };
    // A mix's arrivals are requests of its classes; a workload's are its own.
    let rate_unit = note_rate_unit(subject.profile.unit());
    let decide_open = |runs: &[RunSummary]| -> Vec<CrOpen> {
        if runs.is_empty() {
            return vec![];
        }
        subject
            .verdicts
            .iter()
            .map(|name| {
                let mut found = cr_open_in(runs, (name, rate_unit), max_rps, precision, confidence);
                if subject.mix.is_some() {
                    found.limited_by = found
                        .failed_run_id
                        .as_ref()
                        .and_then(|id| runs.iter().find(|r| &r.run_id == id))
                        .and_then(super::mix::limited_by);
                }
                found
            })
            .collect()
    };
    let (crossp, cr_closed) = decide_closed(&median_per_level(&closed));
    // Every run is a point of the fit: revisits, repetitions, extensions.
    let cr_open = decide_open(&open);
    // Fitted like Cr_open, from every run, at its confidence: the point at
    // each declared bound is the clause's Cr_open crossing.
    let frontier = super::frontier::frontiers(&open, confidence);
    let repetitions = closed
        .iter()
        .chain(&open)
        .map(|s| s.repetition.0)
        .max()
        .unwrap_or(1);
    let repeat = (repetitions > 1).then(|| {
        let of = |runs: &[RunSummary], r: u32| -> Vec<RunSummary> {
            runs.iter()
                .filter(|s| s.repetition.0 == r)
                .cloned()
                .collect()
        };
        let sweeps: Vec<_> = (1..=repetitions)
            .map(|r| decide_closed(&of(&closed, r)))
            .collect();
        let opens: Vec<Vec<CrOpen>> = (1..=repetitions)
            .map(|r| decide_open(&of(&open, r)))
            .collect();
        RepeatSpread {
            repetitions,
            levels: level_spread(&closed),
            crossp: sweeps
                .iter()
                .map(|(c, _)| c.as_ref().map(|c| c.concurrency))
                .collect(),
            cr_closed: sweeps
                .iter()
                .map(|(_, k)| k.as_ref().map(|k| k.range))
                .collect(),
            cr_open: subject
                .verdicts
                .iter()
                .map(|name| SloSpread {
                    slo: name.clone(),
                    rps: opens
                        .iter()
                        .map(|crs| crs.iter().find(|c| &c.slo == name).and_then(|c| c.rps))
                        .collect(),
                })
                .collect(),
        }
    });
    // The targets this card sizes: an SLO's on the cards judged on it, a
    // mix's on its card at the declared weights, throughput on every card.
    let sizing = experiment
        .sizing
        .as_ref()
        .map(|spec| {
            let spec = crate::config::SizingSpec {
                targets: spec
                    .targets
                    .iter()
                    .filter(|t| match t {
                        SizingTarget::Rps { slo, .. } => {
                            subject.mix.is_none() && subject.verdicts.contains(slo)
                        }
                        SizingTarget::MixRps { mix, .. } => subject
                            .mix
                            .as_ref()
                            .is_some_and(|m| m.plan.declared && &m.plan.mix == mix),
                        SizingTarget::OutputTokensPerS { .. } => true,
                    })
                    .cloned()
                    .collect(),
                ..spec.clone()
            };
            sizing::size(&spec, &cr_open, cr_closed.as_ref(), target.cost.as_ref())
        })
        .unwrap_or_default();
    let mix = subject.mix.map(|mut m| {
        m.class_cr_open = super::mix::class_cr_open(&open, &m.plan, max_rps, precision, confidence);
        m
    });

    let mut card = Card {
        target: target.name.clone(),
        workload: subject.name,
        target_info: target_info(target, model),
        workload_profile: subject.profile,
        measured_tokens: measured_tokens(closed.iter().chain(&open)),
        slos: subject.slos,
        arrival: experiment.open.as_ref().map(|o| o.arrival.label()),
        closed,
        crossp_spec,
        knee_spec,
        crossp,
        cr_closed,
        open,
        cr_open,
        sizing,
        repeat,
        frontier,
        mix,
        frontier_multipliers: match experiment.open.as_ref() {
            Some(o) if matches!(o.rates, RateSelection::Search { .. }) => o.frontier.clone(),
            _ => vec![],
        },
        notes: vec![],
        telemetry_notes: vec![],
        limits: Default::default(),
        reuse: None,
        // The results folder knows the plan and the journals' times.
        wall_time: None,
    };
    card.notes = notes(experiment, &card);
    // Server-side readings, when the runs scraped any telemetry.
    let max_num_seqs = sim_preset(target).map(|p| p.max_num_seqs);
    super::telemetry::annotate_card(&mut card, max_num_seqs);
    let routing = routing(target);
    card.reuse =
        super::reuse::annotate_runs(card.closed.iter_mut().chain(&mut card.open), &routing);
    card
}

/// What the target says about replicas behind its endpoint (a `sim`
/// target's `replicas` and router; nothing for an endpoint).
fn routing(target: &Target) -> super::reuse::Routing {
    match &target.kind {
        TargetKind::Sim { serving, .. } => super::reuse::Routing {
            replicas: Some(serving.replicas),
            router: (serving.replicas > 1).then(|| serving.router.as_str().to_string()),
        },
        TargetKind::Endpoint { .. } => super::reuse::Routing::default(),
    }
}

/// Closed runs grouped by concurrency, ascending.
fn by_level(closed: &[RunSummary]) -> BTreeMap<u32, Vec<&RunSummary>> {
    let mut levels: BTreeMap<u32, Vec<&RunSummary>> = BTreeMap::new();
    for run in closed {
        levels
            .entry(run.concurrency.unwrap_or(0))
            .or_default()
            .push(run);
    }
    levels
}

/// The unit of rates in the card's notes: what arrives, `rps` for requests
/// (as the notes have always written it), else `tasks/s`, `conversations/s`.
fn note_rate_unit(arrival: crate::config::ArrivalUnit) -> &'static str {
    match arrival {
        crate::config::ArrivalUnit::Request => "rps",
        other => other.per_s(),
    }
}

/// Where a run was measured, for a note: `"c=8"`, `"4 rps"`, `"0.2 tasks/s"`.
fn level_label(s: &RunSummary, rate_unit: &str) -> String {
    match (s.concurrency, s.rate_rps) {
        (Some(c), _) => format!("c={c}"),
        (_, Some(r)) => format!("{} {rate_unit}", significant(r)),
        _ => s.run_id.clone(),
    }
}

/// One summary per closed level: with repetitions, the level's median run
/// by output tok/s among its stable, valid runs (any run if none is).
fn median_per_level(closed: &[RunSummary]) -> Vec<RunSummary> {
    let levels = by_level(closed);
    levels
        .into_values()
        .filter_map(|runs| {
            let mut pool: Vec<&RunSummary> = runs
                .iter()
                .copied()
                .filter(|s| s.measures_replica() && s.state == super::RunState::Stable)
                .collect();
            if pool.is_empty() {
                pool = runs;
            }
            // Fastest first, so that with an even number of runs the
            // slower of the two middle ones stands for the level: a
            // capacity is never overstated on a tie.
            pool.sort_by(|a, b| b.output_tokens_per_s.total_cmp(&a.output_tokens_per_s));
            crate::stats::median_of_sorted(&pool).map(|s| (*s).clone())
        })
        .collect()
}

/// One summary per open rate: with repetitions, the first repetition's,
/// judged by all of them — per SLO a failure if any repetition failed, a
/// pass only if every one passed, else inconclusive (with the reasons of a
/// repetition that gave that verdict). A grid run beside its extension
/// (`<id>--ext`) is read by the extension: it was extended because its own
/// verdict was inconclusive, and the longer run is that rate's verdict
/// (both stay points of the Cr_open fit).
pub fn combined_per_rate(open: &[RunSummary]) -> Vec<RunSummary> {
    let mut rates: Vec<(f64, Vec<&RunSummary>)> = Vec::new();
    let extended = |run: &RunSummary| {
        let ext = format!("{}--ext", run.run_id);
        open.iter()
            .any(|s| s.run_id == ext && s.repetition == run.repetition)
    };
    for run in open.iter().filter(|r| !extended(r)) {
        let rate = run.rate_rps.unwrap_or(0.0);
        match rates.iter_mut().find(|(r, _)| *r == rate) {
            Some((_, runs)) => runs.push(run),
            None => rates.push((rate, vec![run])),
        }
    }
    rates
        .into_iter()
        .filter_map(|(_, runs)| {
            let mut first = (*runs.iter().min_by_key(|s| s.repetition)?).clone();
            for verdict in &mut first.verdicts {
                let all: Vec<&super::SloVerdict> = runs
                    .iter()
                    .filter_map(|s| s.verdict(&verdict.slo))
                    .collect();
                let combined = super::Verdict::all(all.iter().map(|v| v.verdict));
                if let Some(example) = all.iter().find(|v| v.verdict == combined) {
                    *verdict = (*example).clone();
                }
            }
            Some(first)
        })
        .collect()
}

fn level_spread(closed: &[RunSummary]) -> Vec<LevelSpread> {
    let levels = by_level(closed);
    let spread = |mut v: Vec<f64>| -> [f64; 3] {
        v.sort_by(f64::total_cmp);
        match (v.first(), v.last()) {
            (Some(&lo), Some(&hi)) => [lo, v[(v.len() - 1) / 2], hi],
            _ => [0.0; 3],
        }
    };
    levels
        .into_iter()
        .map(|(concurrency, runs)| LevelSpread {
            concurrency,
            runs: runs.len() as u32,
            output_tokens_per_s: spread(runs.iter().map(|s| s.output_tokens_per_s).collect()),
            requests_per_s: spread(runs.iter().map(|s| s.requests_per_s).collect()),
            ttft_p50_ms: spread(runs.iter().map(|s| s.ttft_ms.p50).collect()),
        })
        .collect()
}

/// The `results.json` model. `status` is `"complete"`, `"interrupted"` or
/// `"partial"`; timestamps are RFC 3339 strings from the runner.
pub fn build_report(
    experiment: &Experiment,
    cards: Vec<Card>,
    status: &str,
    started_at: Option<String>,
    finished_at: Option<String>,
) -> CapacityReport {
    CapacityReport {
        schema: RESULTS_SCHEMA.to_string(),
        experiment: experiment.name.clone(),
        description: experiment.description.clone(),
        tool_version: TOOL_VERSION.to_string(),
        seed: experiment.seed,
        status: status.to_string(),
        started_at,
        finished_at,
        content_nonce: None,
        settings: super::settings::compare(experiment, &cards),
        harnesses: super::harness::compare(&cards),
        cards,
    }
}

/// A `sim` target's preset with its knobs applied (`None` if they cannot
/// serve, which `capcard run` refuses before anything is measured).
fn sim_preset(target: &Target) -> Option<crate::sim::Preset> {
    let TargetKind::Sim {
        preset, serving, ..
    } = &target.kind
    else {
        return None;
    };
    crate::sim::resolve(preset, serving).ok()
}

fn target_info(target: &Target, model: Option<String>) -> TargetInfo {
    TargetInfo {
        setting: target
            .setting
            .as_ref()
            .map(|s| s.values.clone())
            .unwrap_or_default(),
        server: None,
        pruned: None,
        kind: match &target.kind {
            TargetKind::Endpoint { base_url } => format!("endpoint {base_url}"),
            // The knobs that differ from the preset, as the file sets them.
            TargetKind::Sim {
                preset, serving, ..
            } => {
                let knobs: Vec<String> = serving
                    .describe()
                    .into_iter()
                    .filter(|k| !k.starts_with("calibrated"))
                    .collect();
                if knobs.is_empty() {
                    format!("sim {preset}")
                } else {
                    format!("sim {preset} {{ {} }}", knobs.join("; "))
                }
            }
        },
        api: target.api.as_str().to_string(),
        model: model.or_else(|| target.model.clone()),
        // A simulated target's hardware is the preset's: say so rather
        // than leave the card's conditions blank.
        hardware: target.hardware.clone().or_else(|| match &target.kind {
            TargetKind::Sim { .. } => sim_preset(target).map(|p| {
                format!(
                    "simulated: {}{} (preset `{}`)",
                    if p.tensor_parallel > 1 {
                        format!("{}× ", p.tensor_parallel)
                    } else {
                        String::new()
                    },
                    p.hardware.name,
                    p.name
                )
            }),
            TargetKind::Endpoint { .. } => None,
        }),
        runtime: target.runtime.clone().or_else(|| match &target.kind {
            TargetKind::Sim { serving, .. } => Some(format!(
                "capcard {} built-in engine (continuous batching, roofline cost model){}",
                crate::TOOL_VERSION,
                match &serving.calibrated {
                    Some(from) => format!("; calibrated to {from}"),
                    None => String::new(),
                }
            )),
            TargetKind::Endpoint { .. } => None,
        }),
        cost_per_hour: target.cost.as_ref().map(|c| c.per_hour),
        currency: target.cost.as_ref().map(|c| c.currency.clone()),
        prompt_sizing: None,
        prefix_cache_reset: None,
        telemetry_off: None,
        clock: None,
        load_generator: None,
        load_generator_warning: None,
        context_window: None,
        context_fit: None,
        dialect: None,
    }
}

/// Token counts over every measured call of the card, each run weighted by
/// its successful calls. `None` when no call succeeded.
fn measured_tokens<'a>(runs: impl Iterator<Item = &'a RunSummary>) -> Option<MeasuredTokens> {
    let runs: Vec<&RunSummary> = runs.filter(|s| s.requests > 0).collect();
    let calls: u64 = runs.iter().map(|s| s.requests).sum();
    if calls == 0 {
        return None;
    }
    let weighted = |f: fn(&RunSummary) -> f64| {
        runs.iter().map(|s| f(s) * s.requests as f64).sum::<f64>() / calls as f64
    };
    let reported: Vec<(f64, f64)> = runs
        .iter()
        .filter_map(|s| {
            s.prompt_tokens_reported_mean
                .map(|m| (m, s.requests as f64))
        })
        .collect();
    let reported_calls: f64 = reported.iter().map(|&(_, n)| n).sum();
    Some(MeasuredTokens {
        calls,
        prompt_tokens_requested_mean: weighted(|s| s.prompt_tokens_requested_mean),
        prompt_tokens_reported_mean: (reported_calls > 0.0)
            .then(|| reported.iter().map(|&(m, n)| m * n).sum::<f64>() / reported_calls),
        output_tokens_requested_mean: weighted(|s| s.output_tokens_requested_mean),
        output_tokens_mean: weighted(|s| s.output_tokens_mean),
        short_outputs: runs.iter().map(|s| s.short_outputs).sum(),
    })
}

/// The card's plain-language notes, most important first.
fn notes(experiment: &Experiment, card: &Card) -> Vec<String> {
    let mut notes = vec![];
    closed_notes(experiment, card, &mut notes);
    open_notes(experiment, card, &mut notes);
    condition_notes(card, &mut notes);
    open_run_notes(experiment, card, &mut notes);
    notes
}

/// CrossP and Cr_closed: why either is missing or questionable.
fn closed_notes(experiment: &Experiment, card: &Card, notes: &mut Vec<String>) {
    let crossp_spec = card.crossp_spec.unwrap_or_default();
    let levels: Vec<u32> = card.closed.iter().filter_map(|s| s.concurrency).collect();

    // Closed loop: CrossP and Cr_closed.
    if card.closed.is_empty() {
        if experiment.closed.is_some() {
            notes.push("no closed runs measured: CrossP and Cr_closed are unavailable".to_string());
        }
    } else if card.crossp.is_none() {
        let what = format!("{} {}", crossp_spec.metric.as_str(), crossp_spec.stat.key());
        notes.push(match levels.as_slice() {
            [only] => format!("CrossP needs at least two sweep levels; only c={only} was measured"),
            _ if !crossp::has_statistic(&card.closed, &crossp_spec) => {
                format!("CrossP unavailable: {what} was not computed for the sweep")
            }
            [first, .., last] => format!(
                "CrossP not reached in sweep ({first}..{last}): {what} never grew faster than output tokens/s"
            ),
            [] => "CrossP unavailable: no closed level has a concurrency".to_string(),
        });
    }
    if let Some(CrossP {
        delta_throughput_pct,
        concurrency,
        ..
    }) = &card.crossp
    {
        if *delta_throughput_pct < 0.0 {
            notes.push(format!(
                "CrossP at c={concurrency} comes from a throughput drop ({}%): check the sweep for noise",
                significant(*delta_throughput_pct)
            ));
        }
    }
    match &card.cr_closed {
        Some(knee) if !knee.saturated => {
            let gain = knee::last_gain_pct(&card.closed)
                .map(|(prev, last, pct)| format!(" (c={last}: {:+.0}% over c={prev})", pct))
                .unwrap_or_default();
            notes.push(format!(
                "Cr_closed: throughput still rising at the largest level{gain} — saturation not \
                 reached; extend the sweep"
            ));
        }
        None if !card.closed.is_empty() => {
            notes.push("Cr_closed unavailable: no closed level produced output tokens".to_string());
        }
        _ => {}
    }
}

/// Cr_open per SLO, and an open loop's warmup against its latencies.
fn open_notes(experiment: &Experiment, card: &Card, notes: &mut Vec<String>) {
    // Open loop: Cr_open per SLO.
    if card.open.is_empty() {
        if experiment.open.is_some() && !experiment.slos.is_empty() {
            notes.push("no open runs measured: Cr_open is unavailable".to_string());
        }
    } else if experiment.slos.is_empty() {
        notes.push("open runs measured but no SLO declared: Cr_open needs an SLO".to_string());
    }
    for c in &card.cr_open {
        match (&c.rps, &c.note) {
            (None, Some(note)) => notes.push(format!("Cr_open for {} not reached: {note}", c.slo)),
            (Some(_), Some(note)) => notes.push(format!("Cr_open for {}: {note}", c.slo)),
            _ => {}
        }
    }

    // An open run reaches steady state only after about one latency: with a
    // shorter warmup the window holds the ramp-up, which looks like a
    // growing backlog and lowers achieved throughput.
    if let Some(open) = &experiment.open {
        let warmup_ms = open.warmup.as_secs_f64() * 1000.0;
        let short: Vec<String> = card
            .open
            .iter()
            .filter_map(|s| {
                let latency = s.task_e2e_ms.as_ref().unwrap_or(&s.e2e_ms);
                (latency.count > 0 && latency.p50 > warmup_ms)
                    .then(|| format!("{} (E2E p50 {:.1} s)", s.run_id, latency.p50 / 1000.0))
            })
            .collect();
        if !short.is_empty() {
            notes.push(format!(
                "open-loop warmup ({:.1} s) is shorter than the median latency of {}: those \
                 windows start before steady state, which reads as not keeping up; \
                 raise `warmup` in `open`",
                warmup_ms / 1000.0,
                short.join(", ")
            ));
        }
    }
}

/// Conditions of the measurement: failures by kind, refusals, reconnects,
/// cancelled calls and the tokens that were really sent and generated.
fn condition_notes(card: &Card, notes: &mut Vec<String>) {
    // Conditions of the measurement.
    let runs: Vec<&RunSummary> = card.closed.iter().chain(&card.open).collect();
    for s in &runs {
        if s.incomplete {
            notes.push(format!("run {} is incomplete (interrupted)", s.run_id));
        }
    }
    for s in &runs {
        if s.generator_lagging {
            notes.push(format!(
                "generator fell behind its schedule in run {}: its latencies include client lag",
                s.run_id
            ));
        }
    }
    let errors: u64 = runs.iter().map(|s| s.errors).sum();
    let calls: u64 = runs.iter().map(|s| s.requests + s.errors).sum();
    if errors > 0 {
        let mut by_class: BTreeMap<&str, u64> = BTreeMap::new();
        for s in &runs {
            for (class, n) in &s.errors_by_class {
                *by_class.entry(class.as_str()).or_insert(0) += n;
            }
        }
        let classes: Vec<String> = by_class.iter().map(|(c, n)| format!("{c} {n}")).collect();
        let in_runs: Vec<&str> = runs
            .iter()
            .filter(|s| s.errors > 0)
            .map(|s| s.run_id.as_str())
            .collect();
        notes.push(format!(
            "{errors} of {calls} measured calls failed ({}), in {}",
            classes.join(", "),
            if in_runs.len() == 1 {
                format!("run {}", in_runs[0])
            } else {
                format!("{} runs: {}", in_runs.len(), in_runs.join(", "))
            }
        ));
    }
    let context_rejected: u64 = runs
        .iter()
        .filter_map(|s| s.errors_by_class.get(ErrorClass::ContextLength.as_str()))
        .sum();
    if context_rejected > 0 {
        let window = card.target_info.context_window.as_ref().map_or_else(
            || "the model's window".to_string(),
            |w| format!("the {}-token window ({})", w.tokens, w.source),
        );
        notes.push(format!(
            "{context_rejected} measured calls were refused for context length: prompt + output \
             beyond {window}. That is the workload not fitting the target, not its capacity: \
             they are left out of every SLO verdict (error rate, percentiles, task E2E), so every \
             figure here describes only the calls that fit, the shorter ones. Give the target a \
             longer window (`max-context`, a longer-context model) or bound the workload"
        ));
    }
    let client_limit: u64 = runs
        .iter()
        .filter_map(|s| s.errors_by_class.get(ErrorClass::ClientLimit.as_str()))
        .sum();
    if client_limit > 0 {
        notes.push(format!(
            "{client_limit} calls never reached the server because the client ran out of its \
             own resources (file descriptors or ports): these runs measured the client; raise \
             `ulimit -n` or lower the load"
        ));
    }
    let reconnects: u64 = runs.iter().map(|s| s.reconnects).sum();
    if reconnects > 0 {
        let per_run: Vec<String> = runs
            .iter()
            .filter(|s| s.reconnects > 0)
            .map(|s| format!("{} {}", s.run_id, s.reconnects))
            .collect();
        notes.push(format!(
            "transport: {reconnects} measured calls found their kept-alive connection already \
             closed by the server and were sent once more on a fresh connection ({}); the \
             server never read the first send, so these are not errors and not extra requests",
            per_run.join(", ")
        ));
    }
    let cancelled: u64 = runs.iter().map(|s| s.cancelled).sum();
    if cancelled > 0 {
        notes.push(format!(
            "{cancelled} measured calls were cancelled by the client (interruption or drain \
             deadline); they are not counted as endpoint errors"
        ));
    }
    if let Some(tokens) = &card.measured_tokens {
        if tokens.short_outputs > 0 {
            notes.push(format!(
                "{} of {} calls returned fewer tokens than requested",
                tokens.short_outputs, tokens.calls
            ));
        }
        if let Some(reported) = tokens.prompt_tokens_reported_mean {
            let requested = tokens.prompt_tokens_requested_mean;
            if requested > 0.0 && ((reported - requested) / requested).abs() > PROMPT_TOKEN_MISMATCH
            {
                notes.push(format!(
                    "the server counted {} prompt tokens per call on average vs {} requested ({:+.1}%)",
                    significant(reported),
                    significant(requested),
                    100.0 * (reported - requested) / requested
                ));
            }
        }
    }
}

/// Open runs that did not hold: the generator behind, no steady state,
/// failed tasks, and runs lengthened for samples.
fn open_run_notes(experiment: &Experiment, card: &Card, notes: &mut Vec<String>) {
    let arrival = experiment
        .workload(&card.workload)
        .map_or(crate::config::ArrivalUnit::Request, |w| w.unit());
    let rate_unit = note_rate_unit(arrival);
    if let Some(open) = &experiment.open {
        if let crate::config::StopRule::Duration(declared) = open.stop {
            let declared_s = declared.as_secs_f64();
            let lengthened: Vec<String> = card
                .open
                .iter()
                .filter(|s| !s.run_id.ends_with("--ext") && s.window_s > declared_s * 1.05)
                .filter_map(|s| s.rate_rps.map(significant))
                .collect();
            if !lengthened.is_empty() && open.trace.is_none() {
                notes.push(format!(
                    "open runs at {} {} were lengthened beyond the declared {}s to gather the {} {} the SLOs are judged on (at most {}×)",
                    lengthened.join(", "),
                    arrival.per_s(),
                    significant(declared_s),
                    crate::plan::card_samples(
                        experiment,
                        &card.workload,
                        card.mix.as_ref().map(|m| &m.plan)
                    ),
                    arrival.plural(),
                    crate::plan::MAX_SAMPLE_LENGTHENING
                ));
            }
        }
    }
    let not_kept_up: Vec<String> = card
        .open
        .iter()
        .filter(|s| s.kept_up == Some(false))
        .map(|s| {
            let rate = s.rate_rps.map(significant).unwrap_or_default();
            match s.completed_fraction {
                Some(f) => format!(
                    "{rate} {rate_unit} ({} finished)",
                    crate::format::pct_compact(f)
                ),
                None => format!("{rate} {rate_unit}"),
            }
        })
        .collect();
    if !not_kept_up.is_empty() {
        notes.push(format!(
            "the replica did not keep up with the arrivals at {} (overloaded: each fails every SLO)",
            not_kept_up.join(", ")
        ));
    }
    let unsteady: Vec<String> = card
        .closed
        .iter()
        .chain(&card.open)
        .filter(|s| s.state == super::RunState::Backlogged)
        .map(|s| {
            let at = level_label(s, rate_unit);
            match &s.state_reason {
                Some(why) => format!("{at} ({why})"),
                None => at,
            }
        })
        .collect();
    if !unsteady.is_empty() {
        notes.push(format!(
            "backlogged, not yet steady: {} — a closed level like this decides neither CrossP \
             nor Cr_closed, and an open rate cannot pass",
            unsteady.join(", ")
        ));
    }
    let tasks_failed: Vec<String> = card
        .closed
        .iter()
        .chain(&card.open)
        .filter(|s| s.tasks_failed > 0)
        .map(|s| {
            let at = level_label(s, rate_unit);
            format!(
                "{at}: {} of {} succeeded",
                s.tasks,
                s.tasks + s.tasks_failed
            )
        })
        .collect();
    if !tasks_failed.is_empty() {
        notes.push(format!(
            "tasks failed by one of their calls (each counts beyond every task-e2e bound): {}",
            tasks_failed.join(", ")
        ));
    }
    let extended: Vec<String> = card
        .closed
        .iter()
        .chain(&card.open)
        .filter_map(|s| Some(format!("`{}` by {:.1} s", s.run_id, s.warmup_extended_s?)))
        .collect();
    if !extended.is_empty() {
        notes.push(format!(
            "warmup extended past an unsteady start: {}",
            extended.join(", ")
        ));
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::analyze::crossp::tests::level;
    use crate::analyze::slo::SloVerdict;
    use crate::config::{
        ClosedSpec, Cost, Dist, Fraction, LatencyMetric, OpenSpec, RatePerS, SizingSpec,
        SizingTarget, Slo, SloClause, Stat, StopRule,
    };

    fn experiment() -> Experiment {
        Experiment {
            name: "support-chat".into(),
            description: Some("Support chat".into()),
            seed: 7,
            targets: vec![target()],
            workloads: vec![workload()],
            slos: vec![Slo {
                name: "interactive".into(),
                span: None,
                clauses: vec![SloClause::Latency {
                    metric: LatencyMetric::Ttft,
                    stat: Stat::Percentile(99.0),
                    limit: Duration::from_secs(1),
                }],
            }],
            mixes: vec![],
            closed: Some(ClosedSpec::new(
                vec![1, 2, 4, 8],
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
            sizing: Some(SizingSpec {
                targets: vec![
                    SizingTarget::Rps {
                        rps: RatePerS(150.0),
                        slo: "interactive".into(),
                    },
                    SizingTarget::OutputTokensPerS {
                        tokens_per_s: 500_000.0,
                    },
                ],
                headroom: Fraction(0.3),
                spares: 1,
                cr_open: crate::config::CrOpenUse::Promise,
            }),
            sweeps: Vec::new(),
            base_dir: None,
        }
    }

    fn target() -> Target {
        Target {
            hardware: Some("1x H100 SXM 80GB".into()),
            cost: Some(Cost {
                per_hour: 2.0,
                currency: "EUR".into(),
            }),
            ..Target::sim("what-if", "h100-llama3-8b")
        }
    }

    fn workload() -> Workload {
        Workload {
            name: "chat".into(),
            span: None,
            input_tokens: Dist::fixed(600.0),
            output_tokens: Dist::fixed(200.0),
            shared_prefix: None,
            conversation: None,
            agent: None,
            dataset: None,
            tools: None,
            sessions: None,
        }
    }

    fn closed_sweep() -> Vec<RunSummary> {
        let mut sweep = vec![
            level(8, 40.0, 1900.0),
            level(1, 20.0, 400.0),
            level(4, 25.0, 1500.0),
            level(2, 21.0, 790.0),
        ];
        for s in &mut sweep {
            s.prompt_tokens_requested_mean = 600.0;
            s.prompt_tokens_reported_mean = Some(600.0);
            s.output_tokens_requested_mean = 200.0;
            s.output_tokens_mean = 200.0;
        }
        sweep
    }

    fn open_run(rate: f64, pass: bool) -> RunSummary {
        RunSummary {
            run_id: format!("what-if--chat--r{rate:.3}"),
            rate_rps: Some(rate),
            requests: 600,
            kept_up: Some(pass),
            completed_fraction: Some(if pass { 1.0 } else { 0.8 }),
            verdicts: vec![SloVerdict {
                slo: "interactive".into(),
                verdict: if pass {
                    crate::analyze::Verdict::Pass
                } else {
                    crate::analyze::Verdict::Fail
                },
                ..SloVerdict::default()
            }],
            prompt_tokens_requested_mean: 600.0,
            prompt_tokens_reported_mean: Some(600.0),
            output_tokens_requested_mean: 200.0,
            output_tokens_mean: 200.0,
            ..RunSummary::default()
        }
    }

    #[test]
    fn full_card() {
        let exp = experiment();
        let open = vec![
            open_run(8.0, false),
            open_run(4.0, true),
            open_run(6.0, true),
            open_run(7.0, false),
        ];
        let card = build_card(
            &exp,
            &target(),
            &workload(),
            Some("llama".into()),
            closed_sweep(),
            open,
        );

        assert_eq!(card.target_info.kind, "sim h100-llama3-8b");
        assert_eq!(card.target_info.api, "chat");
        assert_eq!(card.target_info.model.as_deref(), Some("llama"));
        assert_eq!(card.target_info.cost_per_hour, Some(2.0));
        assert_eq!(card.arrival.as_deref(), Some("poisson"));
        let levels: Vec<u32> = card.closed.iter().filter_map(|s| s.concurrency).collect();
        assert_eq!(levels, vec![1, 2, 4, 8]);
        let rates: Vec<f64> = card.open.iter().filter_map(|s| s.rate_rps).collect();
        assert_eq!(rates, vec![4.0, 6.0, 7.0, 8.0]);

        // 4 → 8: TTFT +60% > tokens/s +26.7%.
        assert_eq!(card.crossp.as_ref().unwrap().zone, [4, 8]);
        let knee = card.cr_closed.as_ref().unwrap();
        assert_eq!(knee.range, [8, 8]);
        assert!(!knee.saturated);

        assert_eq!(card.cr_open.len(), 1);
        assert_eq!(card.cr_open[0].rps, Some(6.0));
        assert_eq!(card.cr_open[0].failed_at_rps, Some(7.0));

        // 150 / (6 × 0.7) = 35.7 → 36 + 1; 500000 / (1900 × 0.7) = 375.9 → 376 + 1.
        assert_eq!(card.sizing[0].replicas, Some(37));
        assert_eq!(card.sizing[0].cost_per_hour, Some(74.0));
        assert_eq!(card.sizing[1].replicas, Some(377));

        let tokens = card.measured_tokens.as_ref().unwrap();
        assert_eq!(tokens.calls, 4 * 100 + 4 * 600);
        assert_eq!(tokens.prompt_tokens_reported_mean, Some(600.0));

        assert_eq!(
            card.notes,
            vec![
                "Cr_closed: throughput still rising at the largest level (c=8: +27% over c=4) — \
                 saturation not reached; extend the sweep"
                    .to_string(),
                "Cr_open for interactive: the precision asked for was not reached within the \
                 search's runs: Cr_open lies between 6 and 7 rps"
                    .to_string(),
                "the replica did not keep up with the arrivals at 7 rps (80% finished), 8 rps (80% finished) \
                 (overloaded: each fails every SLO)"
                    .to_string(),
            ]
        );
    }

    #[test]
    fn notes_for_missing_and_questionable_data() {
        let exp = experiment();
        let mut sweep = vec![
            level(1, 20.0, 100.0),
            level(2, 21.0, 200.0),
            level(4, 22.0, 400.0),
        ];
        sweep[1].short_outputs = 3;
        sweep[1].errors = 12;
        sweep[1].errors_by_class =
            BTreeMap::from([("timeout".into(), 10), ("http-status".into(), 2)]);
        sweep[2].incomplete = true;
        sweep[2].cancelled = 4;
        for s in &mut sweep {
            s.prompt_tokens_requested_mean = 600.0;
            s.prompt_tokens_reported_mean = Some(600.0);
        }
        let mut open = vec![open_run(0.5, false), open_run(1.0, false)];
        open[1].generator_lagging = true;
        for s in &mut open {
            s.prompt_tokens_reported_mean = Some(660.0);
        }
        let card = build_card(&exp, &target(), &workload(), None, sweep, open);

        let notes = card.notes.join("\n");
        for expected in [
            "CrossP not reached in sweep (1..4): ttft p50 never grew faster than output tokens/s",
            "Cr_closed: throughput still rising at the largest level (c=4: +100% over c=2)",
            "Cr_open for interactive not reached: even 0.5 rps, the lowest rate tested, failed",
            "run t--w--c0004 is incomplete (interrupted)",
            "generator fell behind its schedule in run what-if--chat--r1.000",
            "12 of 1512 measured calls failed (http-status 2, timeout 10), in run t--w--c0002",
            "4 measured calls were cancelled by the client",
            "3 of 1500 calls returned fewer tokens than requested",
            "the server counted 648 prompt tokens per call on average vs 600 requested (+8.0%)",
        ] {
            assert!(
                notes.contains(expected),
                "missing {expected:?} in:\n{notes}"
            );
        }
        assert_eq!(card.sizing[0].replicas, None);
        assert_eq!(card.target_info.model, None);
    }

    #[test]
    fn warmup_shorter_than_latency_is_noted() {
        let exp = experiment(); // open warmup 15 s
        let mut slow = open_run(4.0, true);
        slow.e2e_ms = crate::analyze::LatencyStats {
            count: 100,
            p50: 20_000.0,
            ..crate::analyze::LatencyStats::default()
        };
        let fast = open_run(2.0, true);
        let card = build_card(
            &exp,
            &target(),
            &workload(),
            None,
            vec![],
            vec![slow.clone(), fast],
        );
        let note = card
            .notes
            .iter()
            .find(|n| n.contains("warmup"))
            .expect("a warmup note");
        assert!(
            note.contains(&slow.run_id) && note.contains("20.0 s"),
            "{note}"
        );
        assert!(!note.contains("r2.000"), "{note}");
    }

    #[test]
    fn repetitions_take_the_median_level_and_all_verdicts() {
        let exp = experiment();
        let mut sweep = closed_sweep();
        // A second repetition of every level, 10% faster; a third, 10% slower.
        for (r, factor) in [(2, 1.1), (3, 0.9)] {
            for level in closed_sweep() {
                sweep.push(RunSummary {
                    repetition: crate::analyze::Repetition(r),
                    output_tokens_per_s: level.output_tokens_per_s * factor,
                    ..level
                });
            }
        }
        let mut failing_rep = open_run(4.0, false);
        failing_rep.repetition = crate::analyze::Repetition(2);
        let open = vec![open_run(2.0, true), open_run(4.0, true), failing_rep];
        let card = build_card(&exp, &target(), &workload(), None, sweep, open);
        let single = build_card(&exp, &target(), &workload(), None, closed_sweep(), vec![]);
        // The median run of each level is the first repetition's.
        assert_eq!(card.cr_closed, single.cr_closed);
        // 4 rps passed once and failed once: it fails.
        assert_eq!(card.cr_open[0].rps, Some(2.0));
        assert_eq!(card.cr_open[0].failed_at_rps, Some(4.0));
        let spread = card.repeat.as_ref().expect("spread");
        assert_eq!(spread.repetitions, 3);
        let top = spread.levels.last().unwrap();
        assert_eq!(top.runs, 3);
        let x = single.closed.last().unwrap().output_tokens_per_s;
        assert!((top.output_tokens_per_s[0] - 0.9 * x).abs() < 1e-9);
        assert!((top.output_tokens_per_s[1] - x).abs() < 1e-9);
        assert!((top.output_tokens_per_s[2] - 1.1 * x).abs() < 1e-9);
        assert_eq!(spread.cr_closed.len(), 3);
        // Alone: rep 1 passed 2 and 4; rep 2 ran only the failing 4; rep 3 no rate.
        assert_eq!(spread.cr_open[0].rps, vec![Some(4.0), None, None]);
        assert!(single.repeat.is_none());
    }

    /// A grid run extended because it was inconclusive, beside its
    /// extension: the rate's verdict is the extension's, and a revisit or a
    /// repetition still combines with it.
    #[test]
    fn an_extension_decides_its_rates_verdict_and_a_repetition_still_counts() {
        let mut inconclusive = open_run(4.0, true);
        inconclusive.verdicts[0].verdict = crate::analyze::Verdict::Inconclusive;
        let mut ext = open_run(4.0, true);
        ext.run_id.push_str("--ext");
        let per_rate = combined_per_rate(&[inconclusive.clone(), ext.clone()]);
        assert_eq!(per_rate.len(), 1);
        assert_eq!(
            per_rate[0].verdicts[0].verdict,
            crate::analyze::Verdict::Pass
        );
        let mut failing = open_run(4.0, false);
        failing.repetition = crate::analyze::Repetition(2);
        failing.run_id.push_str("--rep2");
        let per_rate = combined_per_rate(&[inconclusive, ext, failing]);
        assert_eq!(
            per_rate[0].verdicts[0].verdict,
            crate::analyze::Verdict::Fail
        );
    }

    #[test]
    fn runs_lengthened_for_samples_are_named() {
        let exp = experiment();
        let Some(crate::config::StopRule::Duration(declared)) = exp.open.as_ref().map(|o| o.stop)
        else {
            panic!("the test experiment's open runs have a duration");
        };
        let mut slow = open_run(0.5, true);
        slow.window_s = declared.as_secs_f64() * 3.0;
        let mut ext = open_run(0.5, true);
        ext.run_id.push_str("--ext");
        ext.window_s = declared.as_secs_f64() * 4.0;
        let mut fast = open_run(4.0, true);
        fast.window_s = declared.as_secs_f64();
        let card = build_card(
            &exp,
            &target(),
            &workload(),
            None,
            vec![],
            vec![slow, ext, fast],
        );
        let lengthened: Vec<&String> = card
            .notes
            .iter()
            .filter(|n| n.contains("lengthened beyond the declared"))
            .collect();
        assert_eq!(lengthened.len(), 1, "{:?}", card.notes);
        assert!(
            lengthened[0].starts_with("open runs at 0.5 req/s ")
                && lengthened[0].contains("the 1104 calls the SLOs are judged on"),
            "{}",
            lengthened[0]
        );
    }

    #[test]
    fn failed_tasks_are_noted() {
        let mut run = open_run(2.0, true);
        run.tasks = 90;
        run.tasks_failed = 10;
        let card = build_card(
            &experiment(),
            &target(),
            &workload(),
            None,
            vec![],
            vec![run],
        );
        assert!(
            card.notes
                .iter()
                .any(|n| n.contains("tasks failed") && n.contains("2 rps: 90 of 100 succeeded")),
            "{:?}",
            card.notes
        );
    }

    #[test]
    fn no_runs_and_single_level() {
        let exp = experiment();
        let card = build_card(&exp, &target(), &workload(), None, vec![], vec![]);
        assert_eq!(card.measured_tokens, None);
        assert!(card.cr_open.is_empty());
        assert_eq!(
            card.notes,
            vec![
                "no closed runs measured: CrossP and Cr_closed are unavailable".to_string(),
                "no open runs measured: Cr_open is unavailable".to_string(),
            ]
        );
        let card = build_card(
            &exp,
            &target(),
            &workload(),
            None,
            vec![level(8, 20.0, 100.0)],
            vec![],
        );
        assert!(card.notes[0].starts_with("CrossP needs at least two sweep levels; only c=8"));
    }

    #[test]
    fn report_envelope() {
        let exp = experiment();
        let report = build_report(
            &exp,
            vec![],
            "complete",
            Some("2026-01-01T00:00:00Z".into()),
            None,
        );
        assert_eq!(report.schema, "capcard/results/v2");
        assert_eq!(report.experiment, "support-chat");
        assert_eq!(report.description.as_deref(), Some("Support chat"));
        assert_eq!(report.tool_version, TOOL_VERSION);
        assert_eq!(report.seed, 7);
        assert_eq!(report.status, "complete");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["schema"], "capcard/results/v2");
    }

    #[test]
    fn results_json_round_trips() {
        // `capcard report` reads results.json back: every card field must survive.
        let exp = experiment();
        let open = vec![open_run(0.5, false), open_run(1.0, false)];
        let card = build_card(&exp, &target(), &workload(), None, closed_sweep(), open);
        let report = build_report(&exp, vec![card], "partial", None, None);
        let text = serde_json::to_string_pretty(&report).unwrap();
        let back: CapacityReport = serde_json::from_str(&text).unwrap();
        assert_eq!(back, report);
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        let card = &json["cards"][0];
        assert_eq!(card["crossp"]["zone"], serde_json::json!([4, 8]));
        assert_eq!(card["cr_open"][0]["rps"], serde_json::Value::Null);
        assert_eq!(card["cr_open"][0]["failed_at_rps"], 0.5);
        assert_eq!(card["sizing"][0]["replicas"], serde_json::Value::Null);
        assert_eq!(card["open"][0]["verdicts"][0]["slo"], "interactive");
        assert_eq!(card["open"][0]["verdicts"][0]["verdict"], "fail");
        assert_eq!(card["cr_open"][0]["range"], serde_json::json!([null, 0.5]));
    }
}
