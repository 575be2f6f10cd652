//! Mixed traffic (pure): the per-class summaries of a mix run, the mix's
//! verdict, and what limits the mix's Cr_open.
//!
//! A run of a mix is summarised as a whole (its throughput, latencies,
//! steady state) and class by class: each class's calls are a summary of
//! their own, judged on the class's own SLO over the same measured window
//! (`classes[]`). The run's verdict for the mix — the one the Cr_open
//! search and the card read, named after the mix's card — passes only when
//! every class passes its own SLO, fails when any class fails, and is
//! otherwise inconclusive; what the run as a whole shows (overloaded,
//! backlogged, invalid) overrules it like any SLO's. Its clauses are every
//! class's, labelled `class: clause`.
//!
//! The class that **limits** the mix is the one that fails at the lowest
//! failing rate (the first to fail as the rate rises): of the classes that
//! failed there, the one whose failing clause is furthest beyond its bound
//! (observed / bound), and that clause. A rate that failed only as a whole
//! (overloaded, with no class failing its clauses) is limited by the class
//! that did not keep up, with the clause `keep-up`.

use serde::{Deserialize, Serialize};

use crate::config::Workload;
use crate::plan::{ClassPlan, MixPlan};
use crate::stats::LatencyStats;

use super::search::cr_open;
use super::slo::{ClauseVerdict, SloVerdict, apply_run_state};
use super::{CrOpen, RunState, RunSummary};
use crate::stats::interval::Verdict;

/// One class of a mix run (`closed[].classes[]`, `open[].classes[]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClassSummary {
    pub class: String,
    pub workload: String,
    #[serde(default)]
    pub slo: Option<String>,
    /// Planned share of arrivals (tasks).
    pub share: f64,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub priority: Option<i64>,
    /// Open loop: this class's arrivals scheduled in the window, and their
    /// rate over it (tasks/s).
    #[serde(default)]
    pub offered: Option<u64>,
    #[serde(default)]
    pub rate_rps: Option<f64>,
    /// Measured calls that succeeded, and those that failed.
    pub requests: u64,
    pub errors: u64,
    pub tasks: u64,
    /// Completed calls/s and output tokens/s of this class.
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub ttft_ms: LatencyStats,
    pub itl_ms: LatencyStats,
    pub tpot_ms: LatencyStats,
    pub e2e_ms: LatencyStats,
    #[serde(default)]
    pub task_e2e_ms: Option<LatencyStats>,
    /// Open loop: the class's own SLO on its own calls.
    #[serde(default)]
    pub verdict: Option<SloVerdict>,
    /// Calls/s of this class that met its own SLO.
    #[serde(default)]
    pub goodput_rps: Option<f64>,
    /// The class's own keep-up (its arrivals and completions), with the
    /// whole run's backlog test.
    #[serde(default)]
    pub state: RunState,
    #[serde(default)]
    pub state_reason: Option<String>,
}

/// What a mix card adds to a card (`cards[].mix`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct MixCard {
    /// The mix and this card's weights.
    pub plan: MixPlan,
    /// Each class's workload, in class order.
    pub workloads: Vec<Workload>,
    /// Each class's own SLO on the mix's runs: the highest total rate at
    /// which that class passed (`slo` holds the class's name).
    pub class_cr_open: Vec<CrOpen>,
}

/// What limits a mix's Cr_open (`cards[].cr_open[].limited_by`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct LimitedBy {
    pub class: String,
    pub slo: Option<String>,
    /// `"ttft p99"`, `"error-rate"`, or `"keep-up"`.
    pub clause: String,
}

/// Put a mix run's classes into its summary: `classes[]`, and in open
/// loop the mix's verdict (named `name`, the mix card's) and goodput.
pub fn join_classes(summary: &mut RunSummary, name: &str, classes: &[(&ClassPlan, RunSummary)]) {
    summary.classes = classes
        .iter()
        .map(|(plan, s)| ClassSummary {
            class: plan.name.clone(),
            workload: plan.workload.clone(),
            slo: plan.slo.clone(),
            share: plan.share,
            model: plan.model.clone(),
            priority: plan.priority,
            offered: s.offered,
            rate_rps: s
                .offered
                .filter(|_| s.window_s > 0.0)
                .map(|n| n as f64 / s.window_s),
            requests: s.requests,
            errors: s.errors,
            tasks: s.tasks,
            requests_per_s: s.requests_per_s,
            output_tokens_per_s: s.output_tokens_per_s,
            ttft_ms: s.ttft_ms.clone(),
            itl_ms: s.itl_ms.clone(),
            tpot_ms: s.tpot_ms.clone(),
            e2e_ms: s.e2e_ms.clone(),
            task_e2e_ms: s.task_e2e_ms.clone(),
            verdict: s.verdicts.first().cloned(),
            goodput_rps: s.goodput_rps.values().next().copied(),
            state: s.state,
            state_reason: s.state_reason.clone(),
        })
        .collect();
    if summary.mode != Some(crate::plan::Mode::Open) {
        return;
    }
    let judged: Vec<(&str, &SloVerdict)> = summary
        .classes
        .iter()
        .filter_map(|c| Some((c.class.as_str(), c.verdict.as_ref()?)))
        .collect();
    let mut verdict = SloVerdict {
        slo: name.to_string(),
        // No class judged (none has an SLO): nothing shows a pass.
        verdict: if judged.is_empty() {
            Verdict::Inconclusive
        } else {
            Verdict::all(judged.iter().map(|(_, v)| v.verdict))
        },
        confidence: judged.first().map_or(0.95, |(_, v)| v.confidence),
        clauses: judged
            .iter()
            .flat_map(|(class, v)| {
                v.clauses.iter().map(move |c| ClauseVerdict {
                    label: format!("{class}: {}", c.label),
                    ..c.clone()
                })
            })
            .collect(),
        reasons: judged
            .iter()
            .flat_map(|(class, v)| v.reasons.iter().map(move |r| format!("{class}: {r}")))
            .collect(),
    };
    apply_run_state(&mut verdict, summary);
    let goodput: f64 = summary.classes.iter().filter_map(|c| c.goodput_rps).sum();
    summary.verdicts = vec![verdict];
    summary.goodput_rps = [(name.to_string(), goodput)].into_iter().collect();
}

/// How far a failing clause is beyond its bound (observed / bound; a rank
/// on failed calls is infinitely far).
fn excess(clause: &ClauseVerdict) -> f64 {
    match (clause.limit_ms, clause.limit_fraction) {
        (Some(limit), _) => clause
            .observed_ms
            .map_or(f64::INFINITY, |o| o / limit.max(f64::MIN_POSITIVE)),
        (_, Some(limit)) => clause
            .observed_fraction
            .map_or(f64::INFINITY, |o| o / limit.max(1e-12)),
        _ => 0.0,
    }
}

/// The class and clause that failed `run` (the mix's lowest failing rate);
/// `None` when no class can be blamed.
pub fn limited_by(run: &RunSummary) -> Option<LimitedBy> {
    let worst = run
        .classes
        .iter()
        .filter_map(|c| {
            let v = c.verdict.as_ref()?;
            let clause = v
                .clauses
                .iter()
                .filter(|k| k.verdict() == Verdict::Fail)
                .max_by(|a, b| excess(a).total_cmp(&excess(b)))?;
            Some((c, clause.name(), excess(clause)))
        })
        .max_by(|a, b| a.2.total_cmp(&b.2));
    if let Some((class, clause, _)) = worst {
        return Some(LimitedBy {
            class: class.class.clone(),
            slo: class.slo.clone(),
            clause,
        });
    }
    run.classes
        .iter()
        .find(|c| c.state == RunState::Overloaded)
        .map(|c| LimitedBy {
            class: c.class.clone(),
            slo: c.slo.clone(),
            clause: "keep-up".to_string(),
        })
}

/// Each class's own Cr_open inside the mix: the mix's runs judged on that
/// class's verdict alone (its name is the `slo` of the result).
pub fn class_cr_open(
    runs: &[RunSummary],
    plan: &MixPlan,
    max_rps: Option<f64>,
    precision: Option<f64>,
    confidence: f64,
) -> Vec<CrOpen> {
    plan.classes
        .iter()
        .filter(|c| c.slo.is_some())
        .map(|class| {
            let views: Vec<RunSummary> = runs
                .iter()
                .map(|run| {
                    let mut view = run.clone();
                    view.verdicts = run
                        .classes
                        .iter()
                        .filter(|c| c.class == class.name)
                        .filter_map(|c| c.verdict.clone())
                        .map(|mut v| {
                            v.slo = class.name.clone();
                            apply_run_state(&mut v, run);
                            v
                        })
                        .collect();
                    view
                })
                .collect();
            cr_open(&views, &class.name, max_rps, precision, confidence)
        })
        .collect()
}
