//! The card's "Prefix reuse" section: per run, the reuse potential of what
//! was sent beside what the server realized, and the card's totals.

use serde::Serialize;

use super::{ModeTags, sorted_closed, sorted_open};
use crate::analyze::reuse::SHORTFALL_POINTS;
use crate::analyze::{Card, RunSummary};

/// One run's potential against realized reuse.
#[derive(Debug, Clone, Serialize)]
pub struct ReuseRow {
    pub mode: String,
    pub concurrency: Option<u32>,
    pub rate_rps: Option<f64>,
    pub run_id: String,
    /// Measured prompt tokens the potential is over; `None`: not computed.
    pub prompt_tokens: Option<u64>,
    /// Fractions 0–1; `None`: not computed / not reported.
    pub potential: Option<f64>,
    /// Of it, what earlier calls had prefilled by each call's send.
    pub potential_in_time: Option<f64>,
    pub realized_usage: Option<f64>,
    pub realized_server: Option<f64>,
    pub server_source: Option<String>,
    /// Potential − realized, in points.
    pub gap_points: Option<f64>,
    /// The gap is beyond ±[`SHORTFALL_POINTS`].
    pub flagged: bool,
}

/// The card's reuse section; `None` when no run has a figure.
#[derive(Debug, Clone, Serialize)]
pub struct ReuseView {
    pub potential: Option<f64>,
    pub potential_in_time: Option<f64>,
    pub realized_usage: Option<f64>,
    pub realized_server: Option<f64>,
    pub server_source: Option<String>,
    pub rows: Vec<ReuseRow>,
    /// Runs whose realized share is more than the threshold from the
    /// potential, and why (from their telemetry).
    pub short_runs: Vec<String>,
    pub reasons: Vec<String>,
    /// Whether any flagged run realized *more* than its potential.
    pub above: bool,
    pub threshold_points: f64,
}

pub(super) fn reuse_view(card: &Card, modes: &ModeTags) -> Option<ReuseView> {
    let totals = card.reuse.as_ref()?;
    let row = |mode: &str, r: &RunSummary| -> Option<ReuseRow> {
        let reuse = r.reuse.as_ref()?;
        Some(ReuseRow {
            mode: mode.to_string(),
            concurrency: r.concurrency,
            rate_rps: r.rate_rps,
            run_id: r.run_id.clone(),
            prompt_tokens: reuse.prompt_tokens,
            potential: reuse.potential,
            potential_in_time: reuse.potential_in_time,
            realized_usage: reuse.realized_usage,
            realized_server: reuse.realized_server,
            server_source: reuse.server_source.clone(),
            gap_points: reuse.shortfall_points,
            flagged: reuse
                .shortfall_points
                .is_some_and(|g| g.abs() > SHORTFALL_POINTS),
        })
    };
    let mut rows: Vec<ReuseRow> = sorted_closed(card)
        .into_iter()
        .filter_map(|r| row(&modes.closed, r))
        .collect();
    rows.extend(
        sorted_open(card)
            .into_iter()
            .filter_map(|r| row(&modes.open, r)),
    );
    let above = rows
        .iter()
        .any(|r| r.gap_points.is_some_and(|g| g < -SHORTFALL_POINTS));
    Some(ReuseView {
        potential: totals.potential,
        potential_in_time: totals.potential_in_time,
        realized_usage: totals.realized_usage,
        realized_server: totals.realized_server,
        server_source: totals.server_source.clone(),
        rows,
        short_runs: totals.short_runs.clone(),
        reasons: totals.reasons.clone(),
        above,
        threshold_points: SHORTFALL_POINTS,
    })
}
