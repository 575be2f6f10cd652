//! Sizing (SPEC §3): replicas = ceil(target / (Cr × (1 − headroom))) + spares.
//!
//! Sizing is the conclusion of the card, not a measurement: it only divides.
//! The units are kept consistent by construction:
//!
//! - `rps=` targets (latency-first) divide by Cr_open of the named SLO, in
//!   requests (tasks) per second: its *promise*, the lower end of its range
//!   (what the runs support at the card's confidence), unless `cr-open
//!   "estimate"` asks for the point estimate. No Cr_open → no replica
//!   count, and the row says why; a fitted Cr_open whose range has no
//!   lower end promises nothing, so by default it gives no count either,
//!   and the row says what would give one; a Cr_open that is only a lower bound
//!   (`≥`) is used as is, with a note that the count may be higher than
//!   needed.
//! - `rps= mix=` targets divide by Cr_open of the mix at its declared
//!   weights: the highest total rate at which every class met its own SLO.
//! - `output-tokens-per-s=` targets (throughput-first) divide by Cr_closed's
//!   output tokens/s at the **lower end** of its range: the highest load the
//!   replica takes before latency starts paying for the last percent of
//!   throughput. The upper end sits at saturation, where a replica should
//!   never be planned to run.
//! - `cost_per_hour` = replicas × the target's cost per replica-hour.
//! - `cost_per_million_output_tokens` = cost per replica-hour / (Cr_closed
//!   output tokens/s at the lower end × 3600) × 10⁶: the unit cost of one
//!   replica at Cr_closed (the only regime where a per-token cost is not
//!   overestimated, see FRAMEWORK), the same on every row.
//!
//! The ceiling ignores a relative excess of 1e-9 so that a quotient like
//! 20.000000000000004 (float noise of an exact division) stays 20 replicas.

use crate::config::{Cost, CrOpenUse, SizingSpec, SizingTarget};

use super::{CrClosed, CrOpen, SizingRow};
use crate::format::significant;

/// One row per sizing target, in the order of the spec.
pub fn size(
    spec: &SizingSpec,
    cr_open: &[CrOpen],
    cr_closed: Option<&CrClosed>,
    cost: Option<&Cost>,
) -> Vec<SizingRow> {
    let headroom = spec.headroom.0;
    let tokens_per_replica = cr_closed
        .map(|c| c.output_tokens_per_s[0])
        .filter(|&x| x > 0.0);
    let cost_per_million = match (cost, tokens_per_replica) {
        (Some(cost), Some(x)) => Some(cost.per_hour / (x * 3600.0) * 1e6),
        _ => None,
    };
    spec.targets
        .iter()
        .map(|target| {
            let (target_value, uses, unit, cr, mut note) = match target {
                SizingTarget::Rps { rps, slo } => {
                    let (cr, note) = open_capacity(cr_open, slo, &format!("`{slo}`"), spec.cr_open);
                    (
                        rps.0,
                        open_uses(cr_open, slo, &format!("cr_open:{slo}"), spec.cr_open),
                        "rps",
                        cr,
                        note,
                    )
                }
                SizingTarget::MixRps { rps, mix } => {
                    let (cr, note) =
                        open_capacity(cr_open, mix, &format!("the mix `{mix}`"), spec.cr_open);
                    (
                        rps.0,
                        open_uses(cr_open, mix, &format!("cr_open:mix={mix}"), spec.cr_open),
                        "rps",
                        cr,
                        note,
                    )
                }
                SizingTarget::OutputTokensPerS { tokens_per_s } => {
                    let note = match cr_closed {
                        None => Some(
                            "no Cr_closed measured (no closed sweep): no replica count".to_string(),
                        ),
                        Some(c) if !c.saturated => Some(
                            "the closed sweep did not reach saturation: Cr_closed, and so the \
                             count, may be conservative"
                                .to_string(),
                        ),
                        Some(_) => None,
                    };
                    (
                        *tokens_per_s,
                        "cr_closed".to_string(),
                        "output tokens/s",
                        tokens_per_replica,
                        note,
                    )
                }
            };
            let replicas = cr.and_then(|cr| replicas(target_value, cr, headroom, spec.spares));
            if cr.is_some() && replicas.is_none() {
                note = Some(format!(
                    "headroom {}% leaves no usable capacity: no replica count",
                    significant(headroom * 100.0)
                ));
            }
            SizingRow {
                target: target.label(),
                uses,
                cr_per_replica: cr,
                unit: unit.to_string(),
                headroom,
                spares: spec.spares,
                replicas,
                cost_per_hour: match (replicas, cost) {
                    (Some(n), Some(cost)) => Some(f64::from(n) * cost.per_hour),
                    _ => None,
                },
                cost_per_million_output_tokens: cost_per_million,
                currency: cost.map(|c| c.currency.clone()),
                note,
            }
        })
        .collect()
}

/// `uses` of a row sized on Cr_open: `cr_open:interactive`, with
/// `:promise` or `:estimate` when the card's Cr_open has a range to choose
/// from (a folder from before the fit has one figure).
fn open_uses(cr_open: &[CrOpen], key: &str, base: &str, using: CrOpenUse) -> String {
    let fitted = cr_open
        .iter()
        .find(|c| c.slo == key)
        .is_some_and(|c| c.confidence.is_some());
    match (fitted, using) {
        (false, _) => base.to_string(),
        (true, CrOpenUse::Promise) => format!("{base}:promise"),
        (true, CrOpenUse::Estimate) => format!("{base}:estimate"),
    }
}

/// Cr_open of `key` (an SLO, or a mix's card) as `using` picks it (the
/// promise, or the estimate), and why it cannot size or only bounds a
/// count; `what` names it in the note.
fn open_capacity(
    cr_open: &[CrOpen],
    key: &str,
    what: &str,
    using: CrOpenUse,
) -> (Option<f64>, Option<String>) {
    let found = cr_open.iter().find(|c| c.slo == key);
    let figure = |c: &CrOpen| match using {
        CrOpenUse::Promise => c.promise(),
        CrOpenUse::Estimate => c.rps,
    };
    let note = match found {
        None => Some(format!("no Cr_open measured for {what}: no replica count")),
        Some(c) if matches!(using, CrOpenUse::Promise) && c.estimate_without_promise() => {
            Some(format!(
                "Cr_open for {what} promises nothing yet: its range has no lower end (the runs \
                 do not bound it from below; a lower `min` for the search, or a longer `budget` \
                 or `duration`, would give one), and sizing uses the promise: no replica count \
                 (`cr-open \"estimate\"` sizes from the estimate, {} rps, with no confidence \
                 that the replica holds it)",
                c.rps.map(significant).unwrap_or_default()
            ))
        }
        Some(c) if figure(c).is_none() => Some(format!(
            "Cr_open for {what} was not reached{}: no replica count",
            c.note
                .as_ref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default()
        )),
        Some(c) if c.at_least => Some(format!(
            "Cr_open for {what} is only a lower bound (≥ {} rps): \
             the count may be higher than needed",
            figure(c).map(significant).unwrap_or_default()
        )),
        Some(_) => None,
    };
    (found.and_then(figure), note)
}

/// ceil(target / (cr × (1 − headroom))) + spares; `None` when the usable
/// capacity per replica is not positive.
pub fn replicas(target: f64, cr: f64, headroom: f64, spares: u32) -> Option<u32> {
    let usable = cr * (1.0 - headroom);
    if usable.is_nan() || usable <= 0.0 || !target.is_finite() {
        return None;
    }
    let needed = (target / usable * (1.0 - 1e-9)).ceil().max(0.0);
    // Saturating cast: a target beyond u32 replicas is not a plan anyway.
    Some((needed as u32).saturating_add(spares))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Fraction, RatePerS};

    fn knee(lower_tokens: f64, saturated: bool) -> CrClosed {
        CrClosed {
            range: [16, 32],
            output_tokens_per_s: [lower_tokens, 2050.0],
            requests_per_s: [8.0, 9.0],
            ttft_p50_ms: [100.0, 200.0],
            ttft_p99_ms: [300.0, 600.0],
            e2e_p50_ms: [2000.0, 4000.0],
            max_output_tokens_per_s: 2100.0,
            max_at_concurrency: 64,
            fractions: [0.9, 0.97],
            saturated,
        }
    }

    fn open(slo: &str, rps: Option<f64>, at_least: bool) -> CrOpen {
        CrOpen {
            slo: slo.into(),
            rps,
            range: [rps, None],
            failed_at_rps: None,
            at_least,
            inconclusive_rps: vec![],
            precision_reached: None,
            note: rps
                .is_none()
                .then(|| "even 0.5 rps, the lowest rate tested, failed".into()),
            run_id: None,
            failed_run_id: None,
            failed_clauses: vec![],
            limited_by: None,
            ..CrOpen::default()
        }
    }

    fn spec(targets: Vec<SizingTarget>, headroom: f64, spares: u32) -> SizingSpec {
        SizingSpec {
            targets,
            headroom: Fraction(headroom),
            spares,
            cr_open: CrOpenUse::Promise,
        }
    }

    #[test]
    fn replica_formula() {
        // 150 / (4 × 0.7) = 53.57 → 54, + 1 spare.
        assert_eq!(replicas(150.0, 4.0, 0.3, 1), Some(55));
        // Exact division stays exact: 100 / (10 × 0.5) = 20.
        assert_eq!(replicas(100.0, 10.0, 0.5, 0), Some(20));
        assert_eq!(replicas(14.0, 2.0, 0.3, 0), Some(10)); // 14 / 1.4 = 10 (float: 10.000000000000002)
        assert_eq!(replicas(0.0, 4.0, 0.3, 2), Some(2));
        assert_eq!(replicas(10.0, 4.0, 1.0, 0), None);
        assert_eq!(replicas(10.0, 0.0, 0.3, 0), None);
    }

    #[test]
    fn rps_and_tokens_targets_with_cost() {
        let spec = spec(
            vec![
                SizingTarget::Rps {
                    rps: RatePerS(150.0),
                    slo: "interactive".into(),
                },
                SizingTarget::OutputTokensPerS {
                    tokens_per_s: 500_000.0,
                },
            ],
            0.3,
            1,
        );
        let cost = Cost {
            per_hour: 2.5,
            currency: "EUR".into(),
        };
        let rows = size(
            &spec,
            &[open("interactive", Some(4.0), false)],
            Some(&knee(1800.0, true)),
            Some(&cost),
        );
        assert_eq!(rows.len(), 2);

        let rps = &rows[0];
        assert_eq!(rps.target, "rps=150");
        assert_eq!(rps.uses, "cr_open:interactive");
        assert_eq!(rps.unit, "rps");
        assert_eq!(rps.cr_per_replica, Some(4.0));
        assert_eq!(rps.replicas, Some(55));
        assert_eq!(rps.cost_per_hour, Some(137.5));
        assert_eq!(rps.currency.as_deref(), Some("EUR"));
        assert_eq!(rps.note, None);

        let tokens = &rows[1];
        assert_eq!(tokens.uses, "cr_closed");
        assert_eq!(tokens.cr_per_replica, Some(1800.0));
        // 500000 / (1800 × 0.7) = 396.8 → 397, + 1.
        assert_eq!(tokens.replicas, Some(398));
        assert_eq!(tokens.cost_per_hour, Some(995.0));
        // 2.5 / (1800 × 3600) × 1e6 = 0.385802…
        let per_million = tokens.cost_per_million_output_tokens.unwrap();
        assert!((per_million - 2.5 / 6.48).abs() < 1e-12, "{per_million}");
        assert_eq!(rps.cost_per_million_output_tokens, Some(per_million));
    }

    #[test]
    fn missing_capacity_gives_no_count() {
        let spec = spec(
            vec![
                SizingTarget::Rps {
                    rps: RatePerS(10.0),
                    slo: "interactive".into(),
                },
                SizingTarget::Rps {
                    rps: RatePerS(10.0),
                    slo: "batch".into(),
                },
                SizingTarget::OutputTokensPerS {
                    tokens_per_s: 1000.0,
                },
            ],
            0.3,
            0,
        );
        let rows = size(&spec, &[open("interactive", None, false)], None, None);
        assert!(
            rows.iter()
                .all(|r| r.replicas.is_none() && r.cost_per_hour.is_none())
        );
        assert_eq!(
            rows[0].note.as_deref(),
            Some(
                "Cr_open for `interactive` was not reached (even 0.5 rps, the lowest rate tested, failed): no replica count"
            )
        );
        assert_eq!(
            rows[1].note.as_deref(),
            Some("no Cr_open measured for `batch`: no replica count")
        );
        assert!(
            rows[2]
                .note
                .as_deref()
                .unwrap()
                .starts_with("no Cr_closed measured")
        );
        assert_eq!(rows[2].cost_per_million_output_tokens, None);
    }

    /// A fitted Cr_open whose range has no lower end: an estimate, and no
    /// promise. By the promise (the default) no replica count, and the row
    /// says why and what would give one; by the estimate, a count.
    #[test]
    fn a_fitted_cr_open_without_a_lower_end_sizes_only_by_its_estimate() {
        let cr = CrOpen {
            slo: "s".into(),
            rps: Some(39.0),
            range: [None, Some(45.0)],
            confidence: Some(0.9),
            method: Some("fit".into()),
            note: Some("the runs do not bound Cr_open from below".into()),
            ..CrOpen::default()
        };
        assert_eq!(cr.promise(), None);
        assert!(cr.estimate_without_promise());
        let mut by = spec(
            vec![SizingTarget::Rps {
                rps: RatePerS(100.0),
                slo: "s".into(),
            }],
            0.0,
            0,
        );
        let rows = size(&by, std::slice::from_ref(&cr), None, None);
        assert_eq!(rows[0].uses, "cr_open:s:promise");
        assert_eq!(rows[0].cr_per_replica, None);
        assert_eq!(rows[0].replicas, None);
        let note = rows[0].note.as_deref().unwrap();
        assert!(note.contains("promises nothing yet"), "{note}");
        assert!(note.contains("a lower `min`"), "{note}");
        assert!(note.contains("`cr-open \"estimate\"`"), "{note}");
        by.cr_open = CrOpenUse::Estimate;
        let rows = size(&by, std::slice::from_ref(&cr), None, None);
        assert_eq!(rows[0].cr_per_replica, Some(39.0));
        assert_eq!(rows[0].replicas, Some(3));
        // A folder from before the fit (no confidence) promises its figure.
        let before = CrOpen {
            range: [None, Some(45.0)],
            confidence: None,
            method: Some("verdicts".into()),
            ..cr
        };
        assert_eq!(before.promise(), Some(39.0));
        assert!(!before.estimate_without_promise());
    }

    #[test]
    fn lower_bounds_and_unsaturated_sweeps_are_flagged() {
        let spec = spec(
            vec![
                SizingTarget::Rps {
                    rps: RatePerS(100.0),
                    slo: "s".into(),
                },
                SizingTarget::OutputTokensPerS {
                    tokens_per_s: 1000.0,
                },
            ],
            0.0,
            0,
        );
        let rows = size(
            &spec,
            &[open("s", Some(64.0), true)],
            Some(&knee(500.0, false)),
            None,
        );
        assert_eq!(rows[0].replicas, Some(2));
        assert!(
            rows[0]
                .note
                .as_deref()
                .unwrap()
                .contains("lower bound (≥ 64 rps)")
        );
        assert_eq!(rows[1].replicas, Some(2));
        assert!(
            rows[1]
                .note
                .as_deref()
                .unwrap()
                .contains("did not reach saturation")
        );
        assert_eq!(rows[1].currency, None);
    }
}
