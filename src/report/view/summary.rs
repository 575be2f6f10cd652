//! The summary card's view: one row per card, the sizing targets, and a
//! mix's what-ifs.

use serde::Serialize;

use crate::analyze::{CapacityReport, Card};

use super::*;
use crate::format::plain;

#[derive(Debug, Clone, Serialize)]
pub struct SummaryCell {
    /// The SLO or sizing target this column is for.
    pub key: String,
    /// `"reached"`, `"at_least"`, `"not_reached"`, or `"absent"` (not in this card).
    pub status: String,
    pub value: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SummaryRow {
    pub target: String,
    pub workload: String,
    pub file_name: String,
    pub modes: ModeTags,
    pub rate_unit: String,
    pub crossp: CrossPView,
    pub cr_closed: CrClosedView,
    pub cr_open: Vec<SummaryCell>,
    pub replicas: Vec<SummaryCell>,
    /// The card's prefix reuse, potential against realized; `None`
    /// without any figure.
    pub reuse: Option<crate::analyze::reuse::CardReuse>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SummaryView {
    pub experiment: String,
    pub description: Option<String>,
    pub tool_version: String,
    pub seed: u64,
    pub status: String,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    /// Column keys: every SLO with a Cr_open, every sizing target, in first-seen order.
    pub slos: Vec<String>,
    /// The header of each `slos` column: ``Cr_open `interactive` ``, or for
    /// mix cards `Cr_open, every class within its SLO`.
    pub slo_labels: Vec<String>,
    pub sizing_targets: Vec<String>,
    pub rows: Vec<SummaryRow>,
    /// Per mix and target: Cr_open at each weight setting.
    pub mixes: Vec<MixWhatIf>,
    /// Per comparison of `report.settings`, in its order: the Cr_open and
    /// the Pareto chart's file names.
    pub settings_charts: Vec<[String; 2]>,
}

/// How Cr_open moves with a mix's weights, on one target.
#[derive(Debug, Clone, Serialize)]
pub struct MixWhatIf {
    pub mix: String,
    pub target: String,
    pub classes: Vec<String>,
    /// The class with the most planned tokens per task (prompt + output).
    pub heavy: String,
    pub heavy_tokens_per_task: f64,
    /// The class whose share the settings vary most: rows are in
    /// increasing share of it.
    pub varied: String,
    pub rate_unit: String,
    pub rows: Vec<MixWhatIfRow>,
}

#[derive(Debug, Clone, Serialize)]
pub struct MixWhatIfRow {
    pub weights: String,
    pub declared: bool,
    /// Shares, in class order.
    pub shares: Vec<f64>,
    pub cr_open: SummaryCell,
    pub limited_by: Option<LimitedByView>,
    pub file_name: String,
}

/// The summary column a mix card's Cr_open goes in: one for every mix.
pub(super) const MIX_COLUMN: &str = "mix: every class within its SLO";

/// The per-mix what-if tables of the summary.
pub(super) fn mix_what_ifs(report: &CapacityReport) -> Vec<MixWhatIf> {
    let mut out: Vec<MixWhatIf> = Vec::new();
    for card in &report.cards {
        let Some(mix) = &card.mix else { continue };
        let plan = &mix.plan;
        let entry = match out
            .iter_mut()
            .position(|m| m.mix == plan.mix && m.target == card.target)
        {
            Some(i) => &mut out[i],
            None => {
                let heaviest = plan
                    .classes
                    .iter()
                    .filter_map(|c| {
                        let w = mix.workloads.iter().find(|w| w.name == c.workload)?;
                        let tokens = crate::plan::WorkloadProfile::of(w, 0).tokens_per_task();
                        Some((c.name.clone(), tokens))
                    })
                    .max_by(|a, b| a.1.total_cmp(&b.1))
                    .unwrap_or_default();
                let view = card_view(report, card);
                out.push(MixWhatIf {
                    mix: plan.mix.clone(),
                    target: card.target.clone(),
                    classes: plan.classes.iter().map(|c| c.name.clone()).collect(),
                    heavy: heaviest.0,
                    heavy_tokens_per_task: heaviest.1,
                    varied: String::new(),
                    rate_unit: view.conditions.rate_unit,
                    rows: Vec::new(),
                });
                out.last_mut().expect("just pushed")
            }
        };
        let cr = card.cr_open.first();
        entry.rows.push(MixWhatIfRow {
            weights: plan
                .weights
                .iter()
                .map(|w| plain(*w))
                .collect::<Vec<_>>()
                .join(" : "),
            declared: plan.declared,
            shares: plan.classes.iter().map(|c| c.share).collect(),
            cr_open: SummaryCell {
                key: MIX_COLUMN.to_string(),
                status: cr.map_or("absent", cr_open_status).to_string(),
                value: cr.and_then(|c| c.rps),
            },
            limited_by: cr
                .and_then(|c| c.limited_by.as_ref())
                .map(|l| LimitedByView {
                    class: l.class.clone(),
                    slo: l.slo.clone(),
                    clause: crate::report::describe::stored_clause_words(&l.clause),
                }),
            file_name: crate::report::card_file_name(card),
        });
    }
    for entry in &mut out {
        // The class the settings vary most (by share) is the one the
        // what-if is about; the heaviest class breaks a tie.
        let range = |k: usize| {
            let shares = entry.rows.iter().filter_map(|r| r.shares.get(k).copied());
            let (lo, hi) = shares.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
                (lo.min(x), hi.max(x))
            });
            hi - lo
        };
        let heaviest = entry.classes.iter().position(|c| *c == entry.heavy);
        let varied = (0..entry.classes.len()).max_by(|&a, &b| {
            range(a)
                .total_cmp(&range(b))
                .then_with(|| (Some(a) == heaviest).cmp(&(Some(b) == heaviest)))
        });
        let k = varied.or(heaviest).unwrap_or(0);
        entry.varied = entry.classes.get(k).cloned().unwrap_or_default();
        entry.rows.sort_by(|a, b| {
            let share = |r: &MixWhatIfRow| r.shares.get(k).copied().unwrap_or(0.0);
            share(a).total_cmp(&share(b))
        });
    }
    // A table needs two settings to show a move.
    out.retain(|m| m.rows.len() > 1);
    out
}

pub(super) fn push_unique(list: &mut Vec<String>, item: &str) {
    if !list.iter().any(|x| x == item) {
        list.push(item.to_string());
    }
}

pub fn summary_view(report: &CapacityReport) -> SummaryView {
    let mut slos = Vec::new();
    let mut sizing_targets = Vec::new();
    // A mix card's Cr_open is named after the card; they share one column.
    let column = |card: &Card, slo: &str| -> String {
        if card.mix.is_some() {
            MIX_COLUMN.to_string()
        } else {
            slo.to_string()
        }
    };
    for card in &report.cards {
        for cr in &card.cr_open {
            push_unique(&mut slos, &column(card, &cr.slo));
        }
        for row in &card.sizing {
            push_unique(&mut sizing_targets, &row.target);
        }
    }
    let rows = report
        .cards
        .iter()
        .map(|card| {
            let view = card_view(report, card);
            let cr_open = slos
                .iter()
                .map(
                    |slo| match card.cr_open.iter().find(|c| &column(card, &c.slo) == slo) {
                        Some(cr) => SummaryCell {
                            key: slo.clone(),
                            status: cr_open_status(cr).to_string(),
                            value: cr.rps,
                        },
                        None => SummaryCell {
                            key: slo.clone(),
                            status: "absent".to_string(),
                            value: None,
                        },
                    },
                )
                .collect();
            let replicas = sizing_targets
                .iter()
                .map(|t| match card.sizing.iter().find(|r| &r.target == t) {
                    Some(row) => SummaryCell {
                        key: t.clone(),
                        status: if row.replicas.is_some() {
                            "reached"
                        } else {
                            "not_reached"
                        }
                        .to_string(),
                        value: row.replicas.map(f64::from),
                    },
                    None => SummaryCell {
                        key: t.clone(),
                        status: "absent".to_string(),
                        value: None,
                    },
                })
                .collect();
            SummaryRow {
                target: card.target.clone(),
                workload: card.workload.clone(),
                file_name: view.file_name,
                modes: view.modes,
                rate_unit: view.conditions.rate_unit,
                crossp: view.crossp,
                cr_closed: view.cr_closed,
                cr_open,
                replicas,
                reuse: card.reuse.clone(),
            }
        })
        .collect();
    SummaryView {
        settings_charts: report
            .settings
            .iter()
            .map(crate::report::settings_chart::file_names)
            .collect(),
        experiment: report.experiment.clone(),
        description: report.description.clone(),
        tool_version: report.tool_version.clone(),
        seed: report.seed,
        status: report.status.clone(),
        started_at: report.started_at.clone(),
        finished_at: report.finished_at.clone(),
        slo_labels: slos
            .iter()
            .map(|s| {
                if s == MIX_COLUMN {
                    "Cr_open of the mix, every class within its own SLO".to_string()
                } else {
                    format!("Cr_open `{s}`")
                }
            })
            .collect(),
        slos,
        sizing_targets,
        rows,
        mixes: mix_what_ifs(report),
    }
}
