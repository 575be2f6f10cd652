//! The card's status boxes and failures table: the server's words quoted
//! per class, runs stopped early or rate limited, invalid runs, context
//! refusals, reasoning and tokens per event, unexplained cache hits.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::analyze::{Card, RunSummary};

#[derive(Debug, Clone, Serialize)]
pub struct ErrorClassRow {
    pub mode: String,
    pub class: String,
    pub count: u64,
    /// The most frequent messages of this class, in the server's words:
    /// `HTTP 400 ×26,256: "Unrecognized request argument supplied: …"`.
    pub quotes: Vec<String>,
}

/// What the card's calls spent reasoning before their answers.
#[derive(Debug, Clone, Serialize)]
pub struct ReasoningView {
    /// Mean reasoning tokens per successful call (over the runs that
    /// reasoned, weighted by their calls).
    pub tokens_mean: f64,
    /// Where the count came from: `"the server's usage"`, or the streamed
    /// reasoning counted.
    pub source: String,
}

/// Events per token above which ITL is called per event on the card: a
/// server that sends one token per event still has the odd event with two
/// (a detokenizer holding back a partial character), and that is not worth
/// a warning.
pub const PER_EVENT_TOKENS: f64 = 1.25;

/// Runs the early-stop rule ended: their first calls all failed alike.
#[derive(Debug, Clone, Serialize)]
pub struct StoppedEarlyView {
    pub run_ids: Vec<String>,
    /// The first such run's stop, in words: `the first 20 calls all failed
    /// with http-status 400: "…"`.
    pub first: String,
    pub rule: String,
}

/// Runs capped by a provider's rate limit.
#[derive(Debug, Clone, Serialize)]
pub struct RateLimitedView {
    pub run_ids: Vec<String>,
    /// Refused calls (429) and all measured calls of those runs.
    pub refused_calls: u64,
    pub calls: u64,
    /// The most frequent refusal, quoted.
    pub quote: Option<String>,
}

/// A count of failed calls of one error class.
#[derive(Debug, Clone, Serialize)]
pub struct ClassCount {
    pub class: String,
    pub count: u64,
}

/// Runs where most calls failed: they measured the failure, not the replica.
#[derive(Debug, Clone, Serialize)]
pub struct InvalidRunsView {
    /// The invalid runs, closed loop first, in the card's order.
    pub run_ids: Vec<String>,
    /// All runs of the card, valid or not.
    pub runs: usize,
    /// Failed and all measured calls, over the invalid runs only.
    pub failed_calls: u64,
    pub calls: u64,
    /// Their failures by class, in class order.
    pub errors_by_class: Vec<ClassCount>,
}

/// Calls refused because prompt + output exceed the model's window: the
/// workload does not fit the target, and the card says so before any figure.
#[derive(Debug, Clone, Serialize)]
pub struct ContextRejectionsView {
    pub calls: u64,
    /// Every measured call of the card (served, failed or refused).
    pub measured_calls: u64,
    pub share: f64,
    /// `"the 8192-token window (sim preset ...)"`, or the model's window.
    pub window: String,
}

/// A run whose server served prompt tokens from its prefix cache.
#[derive(Debug, Clone, Serialize)]
pub struct CacheHitRun {
    pub run_id: String,
    /// Fraction of prompt tokens served from the cache.
    pub hit_rate: f64,
}

/// How many messages the card quotes per class and mode.
pub(super) const QUOTES_PER_CLASS: usize = 3;

pub(super) fn error_rows(card: &Card) -> Vec<ErrorClassRow> {
    let mut rows = Vec::new();
    for (mode, runs) in [("closed", &card.closed), ("open", &card.open)] {
        let mut by_class: BTreeMap<&str, u64> = BTreeMap::new();
        for run in runs {
            for (class, count) in &run.errors_by_class {
                *by_class.entry(class.as_str()).or_default() += count;
            }
        }
        let details = merged_details(runs);
        rows.extend(
            by_class
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .map(|(class, count)| ErrorClassRow {
                    mode: mode.to_string(),
                    class: class.to_string(),
                    count,
                    quotes: details
                        .iter()
                        .filter(|d| d.class == class)
                        .take(QUOTES_PER_CLASS)
                        .map(quote)
                        .collect(),
                }),
        );
    }
    rows
}

/// The runs' failure messages, the same message of several runs added up,
/// most frequent first.
pub fn merged_details<'a>(
    runs: impl IntoIterator<Item = &'a RunSummary>,
) -> Vec<crate::analyze::ErrorDetail> {
    let mut merged: Vec<crate::analyze::ErrorDetail> = Vec::new();
    for run in runs {
        for d in &run.error_details {
            match merged.iter_mut().find(|m| {
                m.class == d.class && m.http_status == d.http_status && m.detail == d.detail
            }) {
                Some(m) => m.count += d.count,
                None => merged.push(d.clone()),
            }
        }
    }
    merged.sort_by_key(|d| std::cmp::Reverse(d.count));
    merged
}

/// `http-status 400 ×26,256: "Unrecognized request argument supplied: …"`.
pub fn quote(d: &crate::analyze::ErrorDetail) -> String {
    let detail = d
        .detail
        .strip_prefix("HTTP ")
        .and_then(|rest| rest.split_once(": "))
        .map_or(d.detail.as_str(), |(_, message)| message);
    format!(
        "{}{} ×{}: \"{}\"",
        d.class,
        d.http_status
            .filter(|s| *s != 200)
            .map(|s| format!(" {s}"))
            .unwrap_or_default(),
        crate::format::num(d.count as f64, 0),
        // Quoted inside markdown tables: a pipe would end the cell.
        detail.replace('|', "\\|").replace('\n', " ")
    )
}

pub(super) fn reasoning(card: &Card) -> Option<ReasoningView> {
    let runs: Vec<&RunSummary> = card
        .closed
        .iter()
        .chain(&card.open)
        .filter(|r| r.reasoning_tokens_mean.is_some())
        .collect();
    let calls: u64 = runs.iter().map(|r| r.requests).sum();
    if calls == 0 {
        return None;
    }
    let tokens: f64 = runs
        .iter()
        .map(|r| r.reasoning_tokens_mean.unwrap_or(0.0) * r.requests as f64)
        .sum();
    Some(ReasoningView {
        tokens_mean: tokens / calls as f64,
        source: "the server's usage where it reports `reasoning_tokens`, else the streamed reasoning counted".into(),
    })
}

/// Output tokens per streamed event over the card's runs, weighted by calls.
pub(super) fn tokens_per_event(card: &Card) -> Option<f64> {
    let (weighted, calls) = card
        .closed
        .iter()
        .chain(&card.open)
        .filter_map(|r| {
            r.tokens_per_event
                .map(|t| (t * r.requests as f64, r.requests))
        })
        .fold((0.0, 0u64), |(w, c), (tw, tc)| (w + tw, c + tc));
    (calls > 0).then(|| weighted / calls as f64)
}

pub(super) fn stopped_early(card: &Card) -> Option<StoppedEarlyView> {
    let runs: Vec<&RunSummary> = card
        .closed
        .iter()
        .chain(&card.open)
        .filter(|s| s.stopped_early.is_some())
        .collect();
    let stop = runs.first()?.stopped_early.as_ref()?;
    Some(StoppedEarlyView {
        run_ids: runs.iter().map(|s| s.run_id.clone()).collect(),
        first: format!(
            "its first {} calls all failed with {}{}{}",
            stop.calls,
            stop.class.as_str(),
            stop.http_status
                .map(|s| format!(" {s}"))
                .unwrap_or_default(),
            stop.detail
                .as_ref()
                .map(|d| format!(": \"{d}\""))
                .unwrap_or_default()
        ),
        rule: stop.rule.clone(),
    })
}

pub(super) fn rate_limited(card: &Card) -> Option<RateLimitedView> {
    let runs: Vec<&RunSummary> = card
        .closed
        .iter()
        .chain(&card.open)
        .filter(|s| s.rate_limited_calls > 0)
        .collect();
    if runs.is_empty() {
        return None;
    }
    Some(RateLimitedView {
        run_ids: runs.iter().map(|s| s.run_id.clone()).collect(),
        refused_calls: runs.iter().map(|s| s.rate_limited_calls).sum(),
        calls: runs.iter().map(|s| s.requests + s.errors).sum(),
        quote: merged_details(runs.iter().copied())
            .iter()
            .find(|d| d.class == "rate-limited")
            .map(quote),
    })
}

/// Hit rates above this in a workload that declares no reuse are flagged.
pub(super) const UNEXPLAINED_HIT_RATE: f64 = 0.02;

/// Runs with prefix-cache hits the workload does not explain: it declares no
/// shared prefix, conversation, agent context, dataset or trace, so every
/// prompt is new and a hit means the server had seen it (an earlier run with
/// the same nonce, or other traffic): their latencies are optimistic.
pub(super) fn unexplained_cache_hits(card: &Card) -> Vec<CacheHitRun> {
    let reuses = |w: &crate::config::Workload| {
        w.shared_prefix.is_some()
            || w.conversation.is_some()
            || w.agent.is_some()
            || w.dataset.is_some()
            || w.sessions.is_some()
    };
    let declares_reuse = match &card.mix {
        Some(mix) => mix.workloads.iter().any(reuses),
        None => reuses(&card.workload_profile),
    } || card.arrival.as_deref() == Some("trace");
    if declares_reuse {
        return Vec::new();
    }
    card.closed
        .iter()
        .chain(&card.open)
        .filter_map(|r| {
            let rate = r.server.as_ref()?.prefix_cache_hit_rate?;
            (rate > UNEXPLAINED_HIT_RATE).then(|| CacheHitRun {
                run_id: r.run_id.clone(),
                hit_rate: rate,
            })
        })
        .collect()
}

/// The runs where most calls failed, with their failures; `None` when every
/// run is valid.
pub(super) fn invalid_runs(card: &Card) -> Option<InvalidRunsView> {
    let runs: Vec<&RunSummary> = card.closed.iter().chain(&card.open).collect();
    let invalid: Vec<&RunSummary> = runs.iter().copied().filter(|s| s.invalid).collect();
    if invalid.is_empty() {
        return None;
    }
    let mut by_class: BTreeMap<&str, u64> = BTreeMap::new();
    let (mut failed_calls, mut calls) = (0, 0);
    for run in &invalid {
        failed_calls += run.errors;
        calls += run.errors + run.requests;
        for (class, n) in &run.errors_by_class {
            *by_class.entry(class.as_str()).or_default() += n;
        }
    }
    Some(InvalidRunsView {
        run_ids: invalid.iter().map(|s| s.run_id.clone()).collect(),
        runs: runs.len(),
        failed_calls,
        calls,
        errors_by_class: by_class
            .into_iter()
            .map(|(class, count)| ClassCount {
                class: class.to_string(),
                count,
            })
            .collect(),
    })
}

pub(super) fn context_rejections(card: &Card) -> Option<ContextRejectionsView> {
    let runs: Vec<&RunSummary> = card.closed.iter().chain(&card.open).collect();
    let calls: u64 = runs
        .iter()
        .filter_map(|s| s.errors_by_class.get("context-length"))
        .sum();
    if calls == 0 {
        return None;
    }
    let measured_calls: u64 = runs.iter().map(|s| s.requests + s.errors).sum();
    Some(ContextRejectionsView {
        calls,
        measured_calls,
        share: calls as f64 / measured_calls.max(1) as f64,
        window: card.target_info.context_window.as_ref().map_or_else(
            || "the model's window".to_string(),
            |w| format!("the {}-token window ({})", w.tokens, w.source),
        ),
    })
}
