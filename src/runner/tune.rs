//! `tune`: a sweep's settings measured in the order [`analyze::tune`]
//! chooses, each card's Cr_open search raced against the best so far, and
//! what was pruned or never measured written down (`tune.json`) with why.

use std::io::Write;
use std::time::Instant;

use tokio_util::sync::CancellationToken;

use super::launched::{self, Turn};
use super::*;
use crate::analyze::tune::{Goal, Outcome, Tuner};
use crate::config::{Experiment, Sweep, TuneObjective};
use crate::format::significant;
use crate::plan::Plan;

pub(super) async fn run(
    sweep: &Sweep,
    (experiment, full_plan, selected, folder): (&Experiment, &Plan, &Plan, &ResultsFolder),
    invocation: Invocation<'_>,
    request: &RunRequest,
    cancel: &CancellationToken,
    log: &mut (dyn Write + Send),
) -> Result<(), RunError> {
    let Some(tune) = &sweep.tune else {
        return Ok(());
    };
    let templates = Templates::builtin();
    let goal = match tune.objective {
        TuneObjective::Cost => Goal::Minimize,
        TuneObjective::CrOpen { .. } | TuneObjective::CrClosed => Goal::Maximize,
    };
    let shape: Vec<usize> = sweep.axes.iter().map(Vec::len).collect();
    let mut tuner = Tuner::new(&shape, sweep.settings.len(), goal);
    let started = Instant::now();
    let _ = writeln!(
        log,
        "tune {}: {} settings, {}",
        sweep.target,
        sweep.settings.len(),
        objective_words(&tune.objective)
    );
    let mut budget_spent = false;
    while let Some(index) = tuner.next() {
        if cancel.is_cancelled() {
            return Ok(());
        }
        if tune.budget.is_some_and(|b| started.elapsed() >= b) {
            budget_spent = true;
            break;
        }
        let Some(target) = sweep
            .settings
            .get(index)
            .and_then(|name| experiment.target(name))
        else {
            break;
        };
        let threshold = match &tune.objective {
            TuneObjective::CrOpen { slo } => tuner.prune_at_or_below().map(|t| (slo.as_str(), t)),
            _ => None,
        };
        let best_name = tuner.best().and_then(|i| sweep.settings.get(i)).cloned();
        let turn = launched::take_turn(
            target,
            experiment,
            full_plan,
            selected,
            folder,
            Invocation {
                prune_at_or_below: threshold,
                ..invocation
            },
            request,
            cancel,
            log,
        )
        .await?;
        refresh(folder, experiment, full_plan, &templates)?;
        if matches!(turn, Turn::Interrupted) {
            return Ok(());
        }
        let report = folder::recompute(folder, experiment, full_plan, Some("running"))?;
        let outcome = report
            .cards
            .iter()
            .find(|c| c.target == target.name)
            .map(|card| outcome_of(card, &tune.objective))
            .unwrap_or_default();
        if let (Some((slo, best_low)), Some(high)) = (threshold, outcome.high)
            && high <= best_low
        {
            let why = format!(
                "Cr_open for {slo} is below {} req/s (a rate failed conclusively there), at or below the {} req/s {} passed conclusively: it cannot be the best",
                significant(high),
                significant(best_low),
                best_name.as_deref().unwrap_or("the best setting")
            );
            folder.write_pruned(&target.name, &why)?;
        }
        tuner.record(index, outcome);
    }
    // What the search never measured, and why.
    let measured: Vec<usize> = tuner.measured().map(|(i, _)| i).collect();
    for (i, name) in sweep.settings.iter().enumerate() {
        if measured.contains(&i) {
            continue;
        }
        let why = if budget_spent {
            format!(
                "not measured: the tune budget of {} was spent",
                crate::format::duration_words(tune.budget.map_or(0.0, |b| b.as_secs_f64()))
            )
        } else {
            "not measured: neither a coarse setting nor next to the best in the grid".to_string()
        };
        folder.write_pruned(name, &why)?;
    }
    refresh(folder, experiment, full_plan, &templates)?;
    let best = tuner.best().and_then(|i| sweep.settings.get(i));
    let _ = writeln!(
        log,
        "tune {}: best {} after {} of {} settings",
        sweep.target,
        best.map_or("none (no setting reached the objective)", String::as_str),
        measured.len(),
        sweep.settings.len()
    );
    Ok(())
}

fn objective_words(objective: &TuneObjective) -> String {
    match objective {
        TuneObjective::CrOpen { slo } => format!("the highest Cr_open within `{slo}`"),
        TuneObjective::CrClosed => "the highest output tok/s at Cr_closed".to_string(),
        TuneObjective::Cost => "the lowest cost per million output tokens".to_string(),
    }
}

/// The objective's value on a card, with Cr_open's conclusive range.
fn outcome_of(card: &crate::analyze::Card, objective: &TuneObjective) -> Outcome {
    let tokens_per_s = card
        .cr_closed
        .as_ref()
        .map(|k| k.output_tokens_per_s[0])
        .filter(|x| *x > 0.0);
    match objective {
        TuneObjective::CrOpen { slo } => card
            .cr_open
            .iter()
            .find(|c| c.slo == *slo)
            .map(|c| Outcome {
                value: c.rps,
                low: c.range[0],
                high: c.range[1],
            })
            .unwrap_or_default(),
        TuneObjective::CrClosed => Outcome {
            value: tokens_per_s,
            ..Outcome::default()
        },
        TuneObjective::Cost => Outcome {
            value: card
                .target_info
                .cost_per_hour
                .zip(tokens_per_s)
                .map(|(cost, x)| cost / (x * 3600.0) * 1e6),
            ..Outcome::default()
        },
    }
}
