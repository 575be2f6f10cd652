//! Rules on mixes: class names, workloads and SLOs they name, weights.

use super::*;
use crate::config::diag::{backticked, did_you_mean};
use crate::config::model::*;

// ------------------------------------------------------------ mixes

const WEIGHT_HELP: &str = "weights are relative: a class's share of arrivals is its weight over the sum of the mix's weights (70 20 10 = 70%, 20%, 10%); leave a class out instead of giving it weight 0";

/// `workload=NAME` of a mix class naming no workload of the experiment.
pub(crate) fn unknown_workload_issue(name: &str, known: &[&str]) -> Issue {
    let help = if known.is_empty() {
        "this experiment defines no `workload`; a class draws its requests from one".to_string()
    } else {
        match did_you_mean(name, known) {
            Some(near) => format!(
                "did you mean `{near}`? workloads defined: {}",
                backticked(known)
            ),
            None => format!("workloads defined: {}", backticked(known)),
        }
    };
    Issue::new(
        prop("workload"),
        format!("there is no workload named `{name}`"),
    )
    .help(help)
}

/// `mix=NAME` of a sizing target naming no mix of the experiment.
pub(crate) fn unknown_mix_issue(name: &str, known: &[&str]) -> Issue {
    let help = if known.is_empty() {
        "this experiment defines no `mix`; add one, e.g. `mix \"production\" { class \"chat\" workload=\"chat\" slo=\"interactive\" weight=1 }`".to_string()
    } else {
        match did_you_mean(name, known) {
            Some(near) => format!(
                "did you mean `{near}`? mixes defined: {}",
                backticked(known)
            ),
            None => format!("mixes defined: {}", backticked(known)),
        }
    };
    Issue::new(prop("mix"), format!("there is no mix named `{name}`")).help(help)
}

/// A class's weight, on its `class` line or in a `weights` setting: > 0.
pub(crate) fn check_class_weight(at: At, weight: f64) -> Vec<Issue> {
    if weight.is_finite() && weight > 0.0 {
        Vec::new()
    } else {
        vec![
            Issue::new(at, format!("a class's weight must be > 0, got {weight}")).help(WEIGHT_HELP),
        ]
    }
}

/// `model="..."` of a class: the model id its calls send, never empty.
pub(crate) fn check_class_model(model: &str) -> Vec<Issue> {
    if model.trim().is_empty() {
        vec![
            Issue::new(prop("model"), "a class's `model` must not be empty")
                .help("give the model id its calls send, e.g. a LoRA adapter's name; leave `model=` out to send the target's model"),
        ]
    } else {
        Vec::new()
    }
}

/// One `class` line against the experiment's workloads and SLOs: its name,
/// the workload and SLO it names, its weight and model.
pub(crate) fn check_mix_class(class: &MixClass, workloads: &[&str], slos: &[&str]) -> Vec<Issue> {
    let mut issues = check_name("class", &class.name);
    if !workloads.contains(&class.workload.as_str()) {
        issues.push(unknown_workload_issue(&class.workload, workloads));
    }
    if let Some(slo) = &class.slo {
        if !slos.contains(&slo.as_str()) {
            issues.push(unknown_slo_issue(slo, slos));
        }
    }
    issues.extend(check_class_weight(prop("weight"), class.weight));
    if let Some(model) = &class.model {
        issues.extend(check_class_model(model));
    }
    issues
}

/// A `weights` line: exactly one number per class (in class order), each > 0.
pub(crate) fn check_weight_setting(weights: &[f64], classes: &[&str]) -> Vec<Issue> {
    let mut issues = Vec::new();
    if weights.len() != classes.len() {
        let count =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        issues.push(
            Issue::new(
                At::Node,
                format!(
                    "`weights` gives {} but the mix has {}",
                    count(weights.len(), "weight", "weights"),
                    count(classes.len(), "class", "classes"),
                ),
            )
            .help(format!(
                "a weight setting lists one weight per class, in class order: {}",
                backticked(classes)
            )),
        );
    }
    for (i, weight) in weights.iter().enumerate() {
        issues.extend(check_class_weight(At::Arg(i), *weight));
    }
    issues
}

/// A mix without a single `class`.
pub(crate) fn mix_without_classes(mix: &str) -> Issue {
    Issue::new(At::Node, format!("mix `{mix}` has no `class`")).help(
        "a mix serves its classes together; add at least one, e.g. `class \"chat\" workload=\"chat\" slo=\"interactive\" weight=70`",
    )
}

/// A mix named like a workload: both cards would write the same run ids.
pub(crate) fn mix_named_like_a_workload(mix: &str) -> Issue {
    Issue::new(
        At::Arg(0),
        format!("mix `{mix}` has the same name as a workload"),
    )
    .help(format!(
        "a mix's card and a workload's card share run ids (`<target>--{mix}--c0008`); give the mix its own name, e.g. `{mix}-mix`"
    ))
}

/// Why a class needs its own SLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SloNeed<'a> {
    /// The experiment has an `open` block: Cr_open of the mix is measured.
    Open,
    /// A sizing target sizes this mix, from its Cr_open.
    Sizing { mix: &'a str },
}

/// A class without `slo=` where Cr_open of its mix is needed.
pub(crate) fn class_needs_slo(class: &str, need: SloNeed<'_>, slos: &[&str]) -> Issue {
    let message = match need {
        SloNeed::Open => {
            format!("class `{class}` has no `slo=`: Cr_open of a mix needs every class's own SLO")
        }
        SloNeed::Sizing { mix } => format!(
            "class `{class}` has no `slo=`: sizing with mix `{mix}` uses its Cr_open, which needs every class's own SLO"
        ),
    };
    let why = match need {
        SloNeed::Open => {
            "the `open` block measures the highest rate at which every class meets its SLO"
        }
        SloNeed::Sizing { .. } => {
            "a mix is sized from the highest rate at which every class meets its SLO"
        }
    };
    let help = if slos.is_empty() {
        format!("{why}; define an `slo` and name it with `slo=` on the class")
    } else {
        format!(
            "{why}; add `slo=` to the class, one of {}",
            backticked(slos)
        )
    };
    Issue::new(At::Arg(0), message).help(help)
}

/// A mix in an experiment whose `open` block replays an arrival trace.
pub(crate) fn mix_with_trace(mix: &str) -> Issue {
    Issue::new(
        At::Arg(0),
        format!("mix `{mix}` cannot be measured with `arrival trace`: a trace brings its own requests"),
    )
    .help("a mix draws each arrival's class from its weights, a trace replays recorded requests; use `arrival poisson` (or `constant`, `gamma cv=`) with the mix, or replay the trace in an experiment without mixes")
}

/// A mix in an experiment whose `open` block asks for the SLO frontier.
pub(crate) fn mix_with_frontier(mix: &str) -> Issue {
    Issue::new(
        At::Arg(0),
        format!("mix `{mix}` cannot be measured with `frontier` in `open`: the SLO frontier is not supported for mixes yet"),
    )
    .help("remove `frontier` from `open`, or measure the frontier of each workload in an experiment without mixes")
}
