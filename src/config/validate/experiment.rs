//! The whole experiment, for one built in code: every rule a file obeys,
//! reported all at once with its context instead of a span.

use std::collections::HashMap;

use super::*;
use crate::config::diag::{ConfigDiagnostic, ConfigError, backticked, did_you_mean};
use crate::config::model::*;

// ------------------------------------------------------------ whole experiments

/// Semantic validation of an experiment built in code (no spans): every rule
/// the parser applies to a file, reported all at once.
pub fn validate(experiment: &Experiment) -> Result<(), ConfigError> {
    let mut problems = Problems::default();
    required_sections(experiment, &mut problems);
    unique_names(experiment, &mut problems);
    targets(experiment, &mut problems);
    workloads(experiment, &mut problems);
    slos(experiment, &mut problems);
    mixes(experiment, &mut problems);
    loops(experiment, &mut problems);
    sizing(experiment, &mut problems);
    if problems.0.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Invalid {
            origin: format!("experiment \"{}\"", experiment.name),
            diagnostics: problems.0,
        })
    }
}

/// The broken rules found so far, each with the context it was found in.
#[derive(Default)]
struct Problems(Vec<ConfigDiagnostic>);

impl Problems {
    fn report(&mut self, context: String, issues: Vec<Issue>) {
        for issue in issues {
            self.0.push(ConfigDiagnostic::detached(
                format!("{context}: {}", issue.message),
                issue.help,
            ));
        }
    }
}

/// A target, a workload, and something to measure.
fn required_sections(experiment: &Experiment, problems: &mut Problems) {
    let mut report = |context, issues| problems.report(context, issues);

    if experiment.targets.is_empty() {
        report(
            "experiment".into(),
            vec![
                Issue::new(At::Node, "no `target`: there is nothing to measure against")
                    .help("add a target with an `endpoint` or a `sim` preset"),
            ],
        );
    }
    if experiment.workloads.is_empty() {
        report(
            "experiment".into(),
            vec![
                Issue::new(At::Node, "no `workload`: there are no requests to send")
                    .help("add a workload with `input-tokens` and `output-tokens` distributions"),
            ],
        );
    }
    if experiment.closed.is_none() && experiment.open.is_none() {
        report(
            "experiment".into(),
            vec![
                Issue::new(
                    At::Node,
                    "neither `closed` nor `open`: there is nothing to measure",
                )
                .help("add a closed sweep (CrossP, Cr_closed) and/or open-loop runs (Cr_open)"),
            ],
        );
    }
}

/// Names: unique per kind, and fit to be file names.
fn unique_names(experiment: &Experiment, problems: &mut Problems) {
    let mut report = |context, issues| problems.report(context, issues);
    for (kind, names) in [
        (
            "target",
            experiment
                .targets
                .iter()
                .map(|t| t.name.as_str())
                .collect::<Vec<_>>(),
        ),
        (
            "workload",
            experiment
                .workloads
                .iter()
                .map(|w| w.name.as_str())
                .collect(),
        ),
        (
            "slo",
            experiment.slos.iter().map(|s| s.name.as_str()).collect(),
        ),
        (
            "mix",
            experiment.mixes.iter().map(|m| m.name.as_str()).collect(),
        ),
    ] {
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for name in names {
            *seen.entry(name).or_default() += 1;
            if seen[name] == 2 {
                report(
                    format!("{kind} `{name}`"),
                    vec![
                        Issue::new(
                            At::Arg(0),
                            format!("there is more than one {kind} named `{name}`"),
                        )
                        .help(format!(
                            "every {kind} needs its own name; rename one of them"
                        )),
                    ],
                );
            }
            report(format!("{kind} `{name}`"), check_name(kind, name));
        }
    }
}

/// Targets: an endpoint's URL, a sim's preset and knobs, keys, timeouts, cost.
fn targets(experiment: &Experiment, problems: &mut Problems) {
    let mut report = |context, issues| problems.report(context, issues);
    for target in &experiment.targets {
        let cx = format!("target `{}`", target.name);
        match &target.kind {
            TargetKind::Endpoint { base_url } => report(cx.clone(), check_endpoint(base_url)),
            TargetKind::Sim {
                preset,
                faults,
                serving,
            } => {
                report(cx.clone(), check_preset(preset));
                report(
                    cx.clone(),
                    check_fraction(prop("fail-rate"), "`fail-rate`", faults.fail_rate),
                );
                report(
                    cx.clone(),
                    check_fraction(prop("cut-rate"), "`cut-rate`", faults.cut_rate),
                );
                report(format!("{cx}, sim"), check_sim_serving(serving));
            }
        }
        if let Some(env) = &target.api_key_env {
            report(format!("{cx}, api-key-env"), check_api_key_env(env));
        }
        report(cx.clone(), check_timeout(target.timeout));
        if let Some(cost) = &target.cost {
            if !(cost.per_hour.is_finite() && cost.per_hour >= 0.0) {
                report(
                    cx.clone(),
                    vec![
                        Issue::new(
                            At::Value,
                            format!("`cost-per-hour` must be 0 or more, got {}", cost.per_hour),
                        )
                        .help("the price of one replica per hour"),
                    ],
                );
            }
        }
    }
}

/// Workloads: their distributions, and a conversation or an agent, not both.
fn workloads(experiment: &Experiment, problems: &mut Problems) {
    let mut report = |context, issues| problems.report(context, issues);
    for workload in &experiment.workloads {
        let cx = format!("workload `{}`", workload.name);
        report(
            format!("{cx}, input-tokens"),
            check_dist(&workload.input_tokens, Quantity::Tokens),
        );
        report(
            format!("{cx}, output-tokens"),
            check_dist(&workload.output_tokens, Quantity::Tokens),
        );
        if let Some(prefix) = &workload.shared_prefix {
            report(format!("{cx}, shared-prefix"), check_shared_prefix(prefix));
        }
        if let Some(conversation) = &workload.conversation {
            report(
                format!("{cx}, conversation turns"),
                check_dist(&conversation.turns, Quantity::Count),
            );
            report(
                format!("{cx}, conversation think-time"),
                check_dist(&conversation.think_time, Quantity::Seconds),
            );
        }
        if let Some(agent) = &workload.agent {
            report(
                format!("{cx}, agent steps"),
                check_dist(&agent.steps, Quantity::Count),
            );
            report(
                format!("{cx}, agent fan-out"),
                check_dist(&agent.fan_out, Quantity::Count),
            );
            report(
                format!("{cx}, agent tool-time"),
                check_dist(&agent.tool_time, Quantity::Seconds),
            );
            report(
                format!("{cx}, agent context-growth"),
                check_dist(&agent.context_growth, Quantity::Tokens),
            );
        }
        if workload.conversation.is_some() && workload.agent.is_some() {
            report(
                cx.clone(),
                vec![
                    Issue::new(
                        At::Node,
                        "a workload is either a `conversation` or an `agent`, not both",
                    )
                    .help("make two workloads to measure both"),
                ],
            );
        }
    }
}

/// SLOs: at least one clause each, every clause in its domain.
fn slos(experiment: &Experiment, problems: &mut Problems) {
    let mut report = |context, issues| problems.report(context, issues);
    for slo in &experiment.slos {
        let cx = format!("slo `{}`", slo.name);
        if slo.clauses.is_empty() {
            report(
                cx.clone(),
                vec![
                    Issue::new(At::Node, "an SLO needs at least one clause")
                        .help("e.g. `ttft p99=\"1s\"`"),
                ],
            );
        }
        for clause in &slo.clauses {
            match clause {
                SloClause::Latency {
                    metric,
                    stat,
                    limit,
                } => {
                    let cx = format!("{cx}, {}", metric.as_str());
                    report(cx.clone(), check_stat(At::Node, *stat));
                    report(cx, check_latency_limit(At::Node, *limit));
                }
                SloClause::ErrorRate { max } => {
                    report(
                        cx.clone(),
                        check_fraction(prop("max"), "`error-rate max`", *max),
                    );
                }
            }
        }
    }
}

/// Mixes: their classes name workloads and SLOs that exist.
fn mixes(experiment: &Experiment, problems: &mut Problems) {
    let mut report = |context, issues| problems.report(context, issues);
    let workload_names: Vec<&str> = experiment
        .workloads
        .iter()
        .map(|w| w.name.as_str())
        .collect();
    let slo_names: Vec<&str> = experiment.slos.iter().map(|s| s.name.as_str()).collect();
    let sized_mixes: Vec<&str> = experiment
        .sizing
        .iter()
        .flat_map(|s| &s.targets)
        .filter_map(|t| match t {
            SizingTarget::MixRps { mix, .. } => Some(mix.as_str()),
            _ => None,
        })
        .collect();
    let open = experiment.open.as_ref();
    for mix in &experiment.mixes {
        let cx = format!("mix `{}`", mix.name);
        if workload_names.contains(&mix.name.as_str()) {
            report(cx.clone(), vec![mix_named_like_a_workload(&mix.name)]);
        }
        if mix.classes.is_empty() {
            report(cx.clone(), vec![mix_without_classes(&mix.name)]);
        }
        if open.is_some_and(|o| o.trace.is_some() || o.arrival == Arrival::Trace) {
            report(cx.clone(), vec![mix_with_trace(&mix.name)]);
        }
        if open.is_some_and(|o| !o.frontier.is_empty()) {
            report(cx.clone(), vec![mix_with_frontier(&mix.name)]);
        }
        let need = if open.is_some() {
            Some(SloNeed::Open)
        } else if sized_mixes.contains(&mix.name.as_str()) {
            Some(SloNeed::Sizing { mix: &mix.name })
        } else {
            None
        };
        let mut seen: HashMap<&str, usize> = HashMap::new();
        for class in &mix.classes {
            let class_cx = format!("{cx}, class `{}`", class.name);
            *seen.entry(class.name.as_str()).or_default() += 1;
            if seen[class.name.as_str()] == 2 {
                report(
                    class_cx.clone(),
                    vec![
                        Issue::new(
                            At::Arg(0),
                            format!("there is more than one class named `{}`", class.name),
                        )
                        .help("every class of a mix needs its own name; rename one of them"),
                    ],
                );
            }
            report(
                class_cx.clone(),
                check_mix_class(class, &workload_names, &slo_names),
            );
            if let (None, Some(need)) = (&class.slo, need) {
                report(
                    class_cx,
                    vec![class_needs_slo(&class.name, need, &slo_names)],
                );
            }
        }
        let class_names: Vec<&str> = mix.classes.iter().map(|c| c.name.as_str()).collect();
        for (i, setting) in mix.weight_settings.iter().enumerate() {
            report(
                format!("{cx}, weights #{}", i + 1),
                check_weight_setting(setting, &class_names),
            );
        }
    }
}

/// The closed sweep and the open runs.
fn loops(experiment: &Experiment, problems: &mut Problems) {
    let mut report = |context, issues| problems.report(context, issues);
    if let Some(closed) = &experiment.closed {
        report("closed, concurrency".into(), check_levels(&closed.levels));
        report("closed".into(), check_stop(&closed.stop));
        report(
            "closed, crossp".into(),
            check_stat(prop("stat"), closed.crossp.stat),
        );
        report("closed, knee".into(), check_knee(&closed.knee));
    }
    if let Some(open) = &experiment.open {
        report("open, arrival".into(), check_arrival(&open.arrival));
        match &open.rates {
            RateSelection::Search {
                min,
                max,
                precision,
                confidence,
                ..
            } => report(
                "open, search".into(),
                check_search(*min, *max, *precision, *confidence),
            ),
            RateSelection::Grid { rates } => report("open, rates".into(), check_rate_grid(rates)),
        }
        report("open".into(), check_stop(&open.stop));
        if !open.frontier.is_empty() {
            report("open, frontier".into(), check_frontier(&open.frontier));
            if matches!(open.rates, RateSelection::Grid { .. }) {
                report("open, frontier".into(), vec![frontier_needs_search()]);
            }
        }
    }
}

/// Sizing: at least one target, each naming what exists, and the headroom.
fn sizing(experiment: &Experiment, problems: &mut Problems) {
    let mut report = |context, issues| problems.report(context, issues);
    if let Some(sizing) = &experiment.sizing {
        if sizing.targets.is_empty() {
            report(
                "sizing".into(),
                vec![
                    Issue::new(At::Node, "`sizing` needs at least one `target`").help(
                        "e.g. a target of 150 requests/s under an SLO, or 500000 output tokens/s",
                    ),
                ],
            );
        }
        for target in &sizing.targets {
            match target {
                SizingTarget::Rps { rps, slo } => {
                    report(
                        "sizing, target".into(),
                        check_positive(prop("rps"), "`rps`", rps.0),
                    );
                    if experiment.slo(slo).is_none() {
                        let names: Vec<&str> =
                            experiment.slos.iter().map(|s| s.name.as_str()).collect();
                        report(
                            "sizing, target".into(),
                            vec![unknown_slo_issue(slo, &names)],
                        );
                    }
                }
                SizingTarget::MixRps { rps, mix } => {
                    report(
                        "sizing, target".into(),
                        check_positive(prop("rps"), "`rps`", rps.0),
                    );
                    if experiment.mix(mix).is_none() {
                        let names: Vec<&str> =
                            experiment.mixes.iter().map(|m| m.name.as_str()).collect();
                        report(
                            "sizing, target".into(),
                            vec![unknown_mix_issue(mix, &names)],
                        );
                    }
                }
                SizingTarget::OutputTokensPerS { tokens_per_s } => report(
                    "sizing, target".into(),
                    check_positive(
                        prop("output-tokens-per-s"),
                        "`output-tokens-per-s`",
                        *tokens_per_s,
                    ),
                ),
            }
        }
        report("sizing".into(), check_headroom(sizing.headroom));
    }
}

/// `slo=NAME` naming no SLO of the experiment.
pub(crate) fn unknown_slo_issue(name: &str, known: &[&str]) -> Issue {
    let help = if known.is_empty() {
        "this experiment defines no `slo`; add one, e.g. `slo \"interactive\" { ttft p99=\"1s\" }`"
            .to_string()
    } else {
        match did_you_mean(name, known) {
            Some(near) => format!("did you mean `{near}`? SLOs defined: {}", backticked(known)),
            None => format!("SLOs defined: {}", backticked(known)),
        }
    };
    Issue::new(prop("slo"), format!("there is no SLO named `{name}`")).help(help)
}
