//! Serving settings compared: one row per setting of a swept target (its
//! Cr_open per SLO with range, Cr_closed and its tok/s, CrossP, cost per
//! million tokens, replicas, startup time), the best setting per SLO, and
//! whether the best is told apart from the runner-up by the measurements'
//! own ranges. Also the record of a launched engine (startup, failure).

use serde::{Deserialize, Serialize};

use super::Card;
use crate::config::Experiment;

/// What happened to an engine capcard launched for a target
/// (`servers/<target>.json` in the results folder).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ServerRecord {
    /// The command, as run (placeholders filled).
    pub command: Vec<String>,
    pub status: ServerStatus,
    /// Launch → the readiness check answered, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_s: Option<f64>,
    /// Launch → the first successful call (the preflight): the cold start
    /// an autoscaler must cover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub startup_s: Option<f64>,
    /// Why it failed or died, in a sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The last lines of its log, when it failed or died.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_tail: Option<String>,
    /// Its stdout and stderr, relative to the results folder.
    pub log: String,
}

/// How a launched engine fared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ServerStatus {
    /// Started; its cards are being measured.
    Running,
    /// Started, measured, stopped.
    Stopped,
    /// Exited, or never became ready, before its first successful call.
    FailedToStart,
    /// Exited while its cards were measured.
    Died,
    /// Stopped by an interrupt before its cards were done (`--resume`
    /// launches it again).
    Interrupted,
}

impl ServerStatus {
    /// How the card and the settings table say it.
    pub fn words(self) -> &'static str {
        match self {
            ServerStatus::Running => "running",
            ServerStatus::Stopped => "measured",
            ServerStatus::FailedToStart => "failed to start",
            ServerStatus::Died => "died",
            ServerStatus::Interrupted => "interrupted",
        }
    }
}

/// The settings of one swept target on one workload, side by side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SettingsComparison {
    /// The target as written (`vllm`).
    pub target: String,
    pub workload: String,
    /// The varied names (the table's first columns).
    pub names: Vec<String>,
    pub rows: Vec<SettingRow>,
    /// Per SLO of the card: the setting with the highest Cr_open.
    pub best: Vec<BestSetting>,
}

/// One setting's card, in a line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SettingRow {
    /// The expanded target (`vllm[max-num-seqs=128]`).
    pub target: String,
    /// The values, in the order of `names`.
    pub values: Vec<String>,
    /// `"measured"`, `"failed to start"`, `"died"`, `"pruned"`, `"not run"`.
    pub status: String,
    /// Cr_open per SLO of the card, in the card's SLO order.
    pub cr_open: Vec<SettingCrOpen>,
    /// Cr_closed's concurrency range and output tok/s at its lower end.
    pub cr_closed: Option<[u32; 2]>,
    pub cr_closed_tokens_per_s: Option<f64>,
    pub crossp: Option<u32>,
    /// Per replica at Cr_closed's lower end, from the target's cost.
    pub cost_per_million_output_tokens: Option<f64>,
    pub currency: Option<String>,
    /// Per sizing target: replicas needed (`None`: not measured).
    pub replicas: Vec<(String, Option<u32>)>,
    /// Launch → first successful call, for a launched engine.
    pub startup_s: Option<f64>,
    /// Output tok/s per user and per replica at each closed level (the
    /// Pareto view across settings).
    pub per_user_vs_replica: Vec<[f64; 2]>,
    /// Why it was not (fully) measured: `tune`'s reason, or the server's
    /// failure.
    #[serde(default)]
    pub note: Option<String>,
}

/// Cr_open of one setting for one SLO.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct SettingCrOpen {
    pub slo: String,
    pub rps: Option<f64>,
    pub range: [Option<f64>; 2],
    pub at_least: bool,
}

/// The best setting for one SLO, and whether the runner-up is within noise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BestSetting {
    pub slo: String,
    pub target: String,
    pub rps: f64,
    /// The runner-up, when there is one with a Cr_open.
    pub runner_up: Option<String>,
    pub runner_up_rps: Option<f64>,
    /// The runner-up's range reaches the best's: the measurements do not
    /// tell them apart ("within noise: measure longer or repeat").
    pub within_noise: bool,
}

/// Every sweep of the experiment, per workload, from the cards.
pub fn compare(experiment: &Experiment, cards: &[Card]) -> Vec<SettingsComparison> {
    let mut out = Vec::new();
    for sweep in &experiment.sweeps {
        let mut workloads: Vec<&str> = Vec::new();
        for card in cards.iter().filter(|c| sweep.settings.contains(&c.target)) {
            if !workloads.contains(&card.workload.as_str()) {
                workloads.push(&card.workload);
            }
        }
        for workload in workloads {
            let rows: Vec<SettingRow> = sweep
                .settings
                .iter()
                .filter_map(|target| {
                    let card = cards
                        .iter()
                        .find(|c| c.target == *target && c.workload == workload)?;
                    Some(row(experiment, card))
                })
                .collect();
            // A sweep this invocation did not select (`--target`): no table.
            if rows.iter().all(|r| r.status == "not run") {
                continue;
            }
            let slos: Vec<String> = rows
                .first()
                .map(|r| r.cr_open.iter().map(|c| c.slo.clone()).collect())
                .unwrap_or_default();
            let best = slos.iter().filter_map(|slo| best_for(&rows, slo)).collect();
            out.push(SettingsComparison {
                target: sweep.target.clone(),
                workload: workload.to_string(),
                names: sweep.names.clone(),
                rows,
                best,
            });
        }
    }
    out
}

fn row(experiment: &Experiment, card: &Card) -> SettingRow {
    let target = experiment.target(&card.target);
    let values = target
        .and_then(|t| t.setting.as_ref())
        .map(|s| s.values.iter().map(|(_, v)| v.clone()).collect())
        .unwrap_or_default();
    let server = card.target_info.server.as_ref();
    let measured = !card.closed.is_empty() || !card.open.is_empty();
    let status = match (server.map(|s| s.status), &card.target_info.pruned) {
        (Some(s @ (ServerStatus::FailedToStart | ServerStatus::Died)), _) => s.words().to_string(),
        (_, Some(why)) if why.starts_with("not measured") => "not measured".to_string(),
        (_, Some(_)) => "pruned".to_string(),
        _ if measured => "measured".to_string(),
        _ => "not run".to_string(),
    };
    let note = card.target_info.pruned.clone().or_else(|| {
        server
            .filter(|s| matches!(s.status, ServerStatus::FailedToStart | ServerStatus::Died))
            .and_then(|s| s.message.clone())
    });
    let tokens_per_s = card
        .cr_closed
        .as_ref()
        .map(|k| k.output_tokens_per_s[0])
        .filter(|x| *x > 0.0);
    let cost = target.and_then(|t| t.cost.as_ref());
    SettingRow {
        target: card.target.clone(),
        values,
        status,
        cr_open: cr_open_cells(card),
        cr_closed: card.cr_closed.as_ref().map(|k| k.range),
        cr_closed_tokens_per_s: tokens_per_s,
        crossp: card.crossp.as_ref().map(|c| c.concurrency),
        cost_per_million_output_tokens: match (cost, tokens_per_s) {
            (Some(cost), Some(x)) => Some(cost.per_hour / (x * 3600.0) * 1e6),
            _ => None,
        },
        currency: cost.map(|c| c.currency.clone()),
        replicas: card
            .sizing
            .iter()
            .map(|s| (s.target.clone(), s.replicas))
            .collect(),
        startup_s: server.and_then(|s| s.startup_s),
        per_user_vs_replica: card
            .closed
            .iter()
            .filter_map(|run| {
                let users = f64::from(run.concurrency?);
                (users > 0.0).then(|| [run.output_tokens_per_s / users, run.output_tokens_per_s])
            })
            .collect(),
        note,
    }
}

/// One Cr_open per SLO of the card, measured or not, so rows line up.
pub(crate) fn cr_open_cells(card: &Card) -> Vec<SettingCrOpen> {
    card.slos
        .iter()
        .map(
            |slo| match card.cr_open.iter().find(|c| c.slo == slo.name) {
                Some(c) => SettingCrOpen {
                    slo: c.slo.clone(),
                    rps: c.rps,
                    range: c.range,
                    at_least: c.at_least,
                },
                None => SettingCrOpen {
                    slo: slo.name.clone(),
                    rps: None,
                    range: [None, None],
                    at_least: false,
                },
            },
        )
        .collect()
}

/// The highest Cr_open for `slo` among the settings.
fn best_for(rows: &[SettingRow], slo: &str) -> Option<BestSetting> {
    best_of(
        slo,
        rows.iter().filter_map(|r| {
            let c = r.cr_open.iter().find(|c| c.slo == slo)?;
            Some((r.target.as_str(), c))
        }),
    )
}

/// The highest Cr_open for `slo` among named candidates, and whether the
/// runner-up's range reaches it: the runner-up's true capacity lies below
/// its range's upper end (`range[1]`, unbounded when no run bounds it), the
/// best's above its range's lower end (`range[0]`), each at the card's
/// confidence. Shared by the settings and the harness comparisons.
pub(crate) fn best_of<'a>(
    slo: &str,
    candidates: impl Iterator<Item = (&'a str, &'a SettingCrOpen)>,
) -> Option<BestSetting> {
    let mut ranked: Vec<(&str, &SettingCrOpen)> =
        candidates.filter(|(_, c)| c.rps.is_some()).collect();
    ranked.sort_by(|a, b| b.1.rps.unwrap_or(0.0).total_cmp(&a.1.rps.unwrap_or(0.0)));
    let (best_name, best) = ranked.first()?;
    let runner = ranked.get(1);
    let within_noise = runner.is_some_and(|(_, r)| {
        let best_low = best.range[0].or(best.rps).unwrap_or(0.0);
        match r.range[1] {
            Some(high) => high > best_low,
            None => true,
        }
    });
    Some(BestSetting {
        slo: slo.to_string(),
        target: best_name.to_string(),
        rps: best.rps.unwrap_or(0.0),
        runner_up: runner.map(|(r, _)| r.to_string()),
        runner_up_rps: runner.and_then(|(_, c)| c.rps),
        within_noise,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, rps: f64, range: [Option<f64>; 2]) -> SettingRow {
        SettingRow {
            target: name.into(),
            values: vec![],
            status: "measured".into(),
            cr_open: vec![SettingCrOpen {
                slo: "chat".into(),
                rps: Some(rps),
                range,
                at_least: range[1].is_none(),
            }],
            cr_closed: None,
            cr_closed_tokens_per_s: None,
            crossp: None,
            cost_per_million_output_tokens: None,
            currency: None,
            replicas: vec![],
            startup_s: None,
            per_user_vs_replica: vec![],
            note: None,
        }
    }

    #[test]
    fn the_best_is_told_apart_only_when_the_ranges_do_not_meet() {
        let apart = [
            row("a", 10.0, [Some(10.0), Some(12.0)]),
            row("b", 20.0, [Some(20.0), Some(24.0)]),
        ];
        let best = best_for(&apart, "chat").unwrap();
        assert_eq!((best.target.as_str(), best.within_noise), ("b", false));
        assert_eq!(best.runner_up.as_deref(), Some("a"));

        // The runner-up failed only above the best's highest pass.
        let close = [
            row("a", 19.0, [Some(19.0), Some(22.0)]),
            row("b", 20.0, [Some(20.0), Some(24.0)]),
        ];
        assert!(best_for(&close, "chat").unwrap().within_noise);
        // A runner-up that never failed may be as good.
        let open_ended = [
            row("a", 15.0, [Some(15.0), None]),
            row("b", 20.0, [Some(20.0), Some(30.0)]),
        ];
        assert!(best_for(&open_ended, "chat").unwrap().within_noise);
        // Alone: nothing to compare.
        let alone = [row("b", 20.0, [Some(20.0), Some(24.0)])];
        let best = best_for(&alone, "chat").unwrap();
        assert!(!best.within_noise && best.runner_up.is_none());
    }
}
