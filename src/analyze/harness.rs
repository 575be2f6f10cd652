//! Harnesses compared (pure): two or more agent workloads measured on one
//! target, side by side — Cr_open in tasks/s with its range, the calls and
//! prompt tokens each task cost, the task's own latency unloaded, and
//! whether the measurements tell the harnesses apart.
//!
//! The framework's claim is that the harness is a condition of Cr_open:
//! two harnesses with the same success rate can give different capacity on
//! the same replica, through the calls they make and the prefixes they let
//! the server reuse. This table is that claim as a measurement. "Within
//! noise" uses the same rule as the settings comparison
//! ([`super::settings::best_of`]): the runner-up's range reaches the best's.

use serde::{Deserialize, Serialize};

use super::settings::{BestSetting, SettingCrOpen, best_of, cr_open_cells};
use super::{Card, RunSummary};

/// The agent workloads of one target, side by side.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HarnessComparison {
    pub target: String,
    pub rows: Vec<HarnessRow>,
    /// Per SLO every row has: the harness with the highest Cr_open, and
    /// whether the runner-up is within noise.
    pub best: Vec<BestSetting>,
}

/// One agent workload (harness) on the target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct HarnessRow {
    pub workload: String,
    /// Tasks/s, one per SLO of the card.
    pub cr_open: Vec<SettingCrOpen>,
    /// Calls per task, pooled over the card's measured runs.
    pub calls_per_task: Option<f64>,
    /// Prompt tokens sent per task (as planned), pooled likewise.
    pub prompt_tokens_per_task: Option<f64>,
    /// Output tokens per task, as counted.
    pub output_tokens_per_task: Option<f64>,
    /// Task E2E at the lightest load measured (`[p50, p90]`, ms), and which
    /// run that was.
    pub task_e2e_ms: Option<[f64; 2]>,
    pub task_e2e_at: Option<String>,
    /// Share of tasks that completed without a failed call, over all runs.
    pub task_success_fraction: Option<f64>,
    /// The reuse the harness offered (an ideal prefix cache over what was
    /// sent) against what the server realized, over the card's runs.
    #[serde(default)]
    pub reuse: Option<super::reuse::CardReuse>,
}

/// Whether a card's workload is an agent loop (a harness): an `agent`
/// loop or recorded `sessions`.
fn is_agent_loop(card: &Card) -> bool {
    card.workload_profile.unit() == crate::config::ArrivalUnit::AgentTask
}

/// Every target with at least two agent workloads, in card order.
pub fn compare(cards: &[Card]) -> Vec<HarnessComparison> {
    let mut targets: Vec<&str> = Vec::new();
    for card in cards.iter().filter(|c| is_agent_loop(c)) {
        if !targets.contains(&card.target.as_str()) {
            targets.push(&card.target);
        }
    }
    targets
        .into_iter()
        .filter_map(|target| {
            let of_target: Vec<&Card> = cards
                .iter()
                .filter(|c| c.target == target && is_agent_loop(c))
                .collect();
            if of_target.len() < 2 || of_target.iter().all(|c| runs(c).next().is_none()) {
                return None;
            }
            let rows: Vec<HarnessRow> = of_target.iter().map(|c| row(c)).collect();
            let slos: Vec<String> = rows
                .first()
                .map(|r| r.cr_open.iter().map(|c| c.slo.clone()).collect())
                .unwrap_or_default();
            let best = slos
                .iter()
                .filter(|slo| {
                    rows.iter()
                        .all(|r| r.cr_open.iter().any(|c| &c.slo == *slo))
                })
                .filter_map(|slo| {
                    best_of(
                        slo,
                        rows.iter().filter_map(|r| {
                            Some((
                                r.workload.as_str(),
                                r.cr_open.iter().find(|c| &c.slo == slo)?,
                            ))
                        }),
                    )
                })
                .collect();
            Some(HarnessComparison {
                target: target.to_string(),
                rows,
                best,
            })
        })
        .collect()
}

fn runs(card: &Card) -> impl Iterator<Item = &RunSummary> {
    card.closed.iter().chain(&card.open)
}

fn row(card: &Card) -> HarnessRow {
    let (mut calls, mut tasks, mut prompt, mut output) = (0.0, 0.0, 0.0, 0.0);
    let (mut done, mut failed) = (0u64, 0u64);
    for run in runs(card) {
        let run_calls = (run.requests + run.errors) as f64;
        calls += run_calls;
        tasks += (run.tasks + run.tasks_failed) as f64;
        prompt += run.prompt_tokens_requested_mean * run_calls;
        output += run.output_tokens_mean * run.requests as f64;
        done += run.tasks;
        failed += run.tasks_failed;
    }
    let per_task = |x: f64| (tasks > 0.0).then(|| x / tasks);
    // The lightest load: the lowest closed level, else the lowest open rate.
    let lightest = card
        .closed
        .iter()
        .filter(|r| r.task_e2e_ms.as_ref().is_some_and(|s| s.count > 0))
        .min_by_key(|r| r.concurrency.unwrap_or(u32::MAX))
        .map(|r| {
            (
                r,
                format!("closed loop, {} in flight", r.concurrency.unwrap_or(0)),
            )
        })
        .or_else(|| {
            card.open
                .iter()
                .filter(|r| r.task_e2e_ms.as_ref().is_some_and(|s| s.count > 0))
                .min_by(|a, b| {
                    a.rate_rps
                        .unwrap_or(f64::MAX)
                        .total_cmp(&b.rate_rps.unwrap_or(f64::MAX))
                })
                .map(|r| {
                    (
                        r,
                        format!(
                            "open loop, {} tasks/s",
                            crate::format::plain(r.rate_rps.unwrap_or(0.0))
                        ),
                    )
                })
        });
    HarnessRow {
        workload: card.workload.clone(),
        cr_open: cr_open_cells(card),
        calls_per_task: per_task(calls),
        prompt_tokens_per_task: per_task(prompt),
        output_tokens_per_task: per_task(output),
        task_e2e_ms: lightest
            .as_ref()
            .and_then(|(r, _)| r.task_e2e_ms.as_ref().map(|s| [s.p50, s.p90])),
        task_e2e_at: lightest.map(|(_, at)| at),
        task_success_fraction: (done + failed > 0).then(|| done as f64 / (done + failed) as f64),
        reuse: card.reuse.clone(),
    }
}

/// Cards for tests here and in the report's.
#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use crate::analyze::CapacityReport;
    use crate::config::{Agent, Dist};

    /// Two agent cards on one target from the fixture's first card, with
    /// Cr_open `a` and `b` (estimate, range) for `interactive`.
    pub(crate) fn two_harnesses(a: (f64, [f64; 2]), b: (f64, [f64; 2])) -> Vec<Card> {
        let report: CapacityReport =
            serde_json::from_str(include_str!("../../tests/data/results-fixture.json"))
                .expect("the fixture reads");
        let mut base = report.cards[0].clone();
        base.workload_profile.agent = Some(Agent {
            steps: Dist::fixed(3.0),
            fan_out: Dist::fixed(2.0),
            tool_time: Dist::fixed(0.5),
            context_growth: Dist::fixed(300.0),
        });
        let with = |name: &str, (rps, range): (f64, [f64; 2])| {
            let mut card = base.clone();
            card.workload = name.to_string();
            for c in &mut card.cr_open {
                if c.slo == "interactive" {
                    c.rps = Some(rps);
                    c.range = [Some(range[0]), Some(range[1])];
                    c.at_least = false;
                }
            }
            card
        };
        vec![with("harness-a", a), with("harness-b", b)]
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::two_harnesses;
    use super::*;

    #[test]
    fn harnesses_apart_and_within_noise() {
        let apart = compare(&two_harnesses((2.0, [1.8, 2.2]), (1.0, [0.9, 1.1])));
        assert_eq!(apart.len(), 1);
        let best = apart[0]
            .best
            .iter()
            .find(|b| b.slo == "interactive")
            .expect("a best for interactive");
        assert_eq!(best.target, "harness-a");
        assert!(!best.within_noise);
        let row = &apart[0].rows[0];
        assert!(row.calls_per_task.is_some_and(|c| c >= 1.0));
        assert!(row.prompt_tokens_per_task.is_some());

        let close = compare(&two_harnesses((2.0, [1.6, 2.3]), (1.8, [1.5, 2.1])));
        let best = close[0]
            .best
            .iter()
            .find(|b| b.slo == "interactive")
            .unwrap();
        assert!(
            best.within_noise,
            "the runner-up's range reaches the best's"
        );
    }

    #[test]
    fn one_agent_workload_or_none_is_no_comparison() {
        let mut cards = two_harnesses((2.0, [1.8, 2.2]), (1.0, [0.9, 1.1]));
        cards[1].workload_profile.agent = None;
        assert!(compare(&cards).is_empty());
        cards[1].target = "other".into();
        assert!(compare(&cards).is_empty());
    }
}
