//! The card's SLO frontier section: per clause, per bound, the fitted
//! crossing and its range in one short mark ("≤ 125 ms → 18.2 req/s
//! (16.9–19.0)"), with the figures beside it for a custom template. An end
//! the runs do not place stays open in the words ("≥ 16.9", "< 19.0"):
//! nothing is invented for it.

use serde::Serialize;

use crate::analyze::Card;
use crate::analyze::frontier::{FittedPoint, FrontierPoint};
use crate::format::{ms, rps};

/// One clause's fitted frontier, for the card's table.
#[derive(Debug, Clone, Serialize)]
pub struct FrontierView {
    pub slo: String,
    /// `"TTFT p95 ≤ 400 ms"`.
    pub clause: String,
    /// By rising bound.
    pub points: Vec<FrontierPointView>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FrontierPointView {
    pub bound_ms: f64,
    pub multiplier: f64,
    pub estimate: Option<f64>,
    pub range: [Option<f64>; 2],
    /// `"fit"`, `"bracket"` (a cliff: the range is the runs either side)
    /// or `"none"`.
    pub method: String,
    /// The declared bound: the point is the clause's Cr_open crossing.
    pub declared: bool,
    /// The estimate as fitted alone, when keeping the frontier monotone
    /// moved it.
    pub unadjusted: Option<f64>,
    /// `"≤ 125 ms → 18.2 req/s (16.9–19.0)"`.
    pub text: String,
}

/// The card's fitted frontiers, in results order; a clause whose frontier
/// is measured (a folder from before the fit) is left to the template's
/// measured table. `unit`: the rate's (`"req/s"`, `"tasks/s"`).
pub fn frontier_views(card: &Card, unit: &str) -> Vec<FrontierView> {
    card.frontier
        .iter()
        .filter(|f| f.is_fitted())
        .map(|f| FrontierView {
            slo: f.slo.clone(),
            clause: crate::report::describe::stored_clause_words(&f.clause),
            points: f
                .points
                .iter()
                .filter_map(|p| match p {
                    FrontierPoint::Fitted(p) => Some(point_view(p, unit)),
                    FrontierPoint::Measured(_) => None,
                })
                .collect(),
        })
        .collect()
}

fn point_view(p: &FittedPoint, unit: &str) -> FrontierPointView {
    FrontierPointView {
        bound_ms: p.bound_ms,
        multiplier: p.multiplier,
        estimate: p.estimate_rps,
        range: p.range,
        method: p.method.clone(),
        declared: (p.multiplier - 1.0).abs() < 1e-9,
        unadjusted: p.unadjusted_rps,
        text: format!("≤ {} → {}", ms(p.bound_ms), rate_words(p, unit)),
    }
}

/// The rate a bound allows, in words: the estimate and its range, or the
/// one end the runs place.
fn rate_words(p: &FittedPoint, unit: &str) -> String {
    // A bracket is the runs either side of a jump the model does not fit
    // (or of a run that could not keep up): no range of the model's.
    let bracket = p.method == "bracket";
    let estimated = p.estimate_rps.is_some();
    let range = match p.range {
        [Some(lo), Some(hi)] if bracket => {
            Some(format!("between runs at {} and {}", rps(lo), rps(hi)))
        }
        [Some(lo), Some(hi)] => Some(format!("{}–{}", rps(lo), rps(hi))),
        [Some(lo), None] => Some(format!("≥ {}", rps(lo))),
        // Beside an estimate, the range's upper end; alone, the lowest
        // rate beyond the bound, which the crossing is below.
        [None, Some(hi)] if estimated => Some(format!("≤ {}", rps(hi))),
        [None, Some(hi)] => Some(format!("< {}", rps(hi))),
        [None, None] => None,
    };
    let alone = p.unadjusted_rps.map(|u| format!("{} fitted alone", rps(u)));
    match (p.estimate_rps, range) {
        (Some(e), range) => {
            let notes: Vec<String> = range.into_iter().chain(alone).collect();
            if notes.is_empty() {
                format!("{} {unit}", rps(e))
            } else {
                format!("{} {unit} ({})", rps(e), notes.join("; "))
            }
        }
        // No estimate: the runs lie on one side of the bound, and the
        // range's one end is all they show.
        (None, Some(range)) => format!("{range} {unit}"),
        (None, None) => "not placed (no run measured it)".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(estimate: Option<f64>, range: [Option<f64>; 2], method: &str) -> FittedPoint {
        FittedPoint {
            bound_ms: 125.0,
            multiplier: 0.5,
            estimate_rps: estimate,
            range,
            method: method.to_string(),
            unadjusted_rps: None,
        }
    }

    #[test]
    fn each_point_says_what_the_runs_place_and_nothing_more() {
        let text = |p: FittedPoint| point_view(&p, "req/s").text;
        assert_eq!(
            text(point(Some(18.2), [Some(16.9), Some(19.0)], "fit")),
            "≤ 125 ms → 18.2 req/s (16.9–19.0)"
        );
        assert_eq!(
            text(point(Some(18.2), [Some(16.9), None], "fit")),
            "≤ 125 ms → 18.2 req/s (≥ 16.9)"
        );
        assert_eq!(
            text(point(Some(18.2), [None, Some(19.0)], "fit")),
            "≤ 125 ms → 18.2 req/s (≤ 19.0)"
        );
        assert_eq!(
            text(point(None, [Some(16.9), None], "fit")),
            "≤ 125 ms → ≥ 16.9 req/s"
        );
        assert_eq!(
            text(point(None, [None, Some(4.0)], "fit")),
            "≤ 125 ms → < 4.00 req/s"
        );
        assert_eq!(
            text(point(Some(5.0), [Some(4.0), Some(6.25)], "bracket")),
            "≤ 125 ms → 5.00 req/s (between runs at 4.00 and 6.25)"
        );
        assert_eq!(
            text(point(None, [None, None], "none")),
            "≤ 125 ms → not placed (no run measured it)"
        );
        let mut moved = point(Some(18.2), [Some(16.9), Some(19.0)], "fit");
        moved.unadjusted_rps = Some(17.5);
        assert_eq!(
            text(moved.clone()),
            "≤ 125 ms → 18.2 req/s (16.9–19.0; 17.5 fitted alone)"
        );
        moved.range = [None, None];
        assert_eq!(text(moved), "≤ 125 ms → 18.2 req/s (17.5 fitted alone)");
        let declared = FittedPoint {
            multiplier: 1.0,
            ..point(Some(18.2), [Some(16.9), Some(19.0)], "fit")
        };
        assert!(point_view(&declared, "req/s").declared);
    }
}
