//! The open-loop chart of a card whose Cr_open was fitted
//! ([`crate::analyze::cr_open`]): it shows the model the card's Cr_open
//! comes from, one panel per SLO clause (SLOs in declaration order, their
//! clauses in order), stacked on one arrival-rate axis:
//!
//! - each run's showing of the clause at its realized rate: the fraction of
//!   calls beyond the bound (the mean, for a mean clause) as a dot, its
//!   interval at the card's confidence as a vertical error bar; a run with
//!   no call beyond the bound sits on the bottom edge as an open circle;
//! - the fitted model over the whole rate axis, `logit π = logit(allowed) +
//!   b·(ln λ − ln λ*)` for a fraction, `mean = bound·(λ/λ*)^b` for a mean
//!   (a clause that fell back to the bracket gets the bracket shaded
//!   instead of a curve);
//! - what the clause allows as a dashed horizontal line (`1 − q` for a
//!   percentile, the limit for the error rate, the bound for a mean);
//! - the crossing λ* as a solid vertical line and its range as a bar on the
//!   allowed line (an open end runs to the panel's edge); the binding
//!   clause's crossing is named Cr_open;
//! - the runs that could not keep up (censored: they show the rate is above
//!   the crossing, and are not fitted) as red crosses on the top edge.
//!
//! Fractions sit on a logit axis, so 0.1% and 1% are as far apart as 50%
//! and 90%, and the model is a straight line in `ln λ`; means on a log10
//! axis. The arrival rate stays linear from 0, as on the chart of a folder
//! from before the fit.

use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::analyze::cr_open::{self, ClauseCrossing, ClausePoint, DEFAULT_CONFIDENCE};
use crate::analyze::slo::clause_label;
use crate::analyze::{Card, CrOpen, RunSummary};
use crate::config::SloClause;
use crate::format::{duration_secs, pct_compact, pct_of_fraction, rps, trimmed};
use crate::svg::{DrawResult, FONT, Swatch, TickedAxis, draw_legend, palette};

use super::chart::{
    FAIL_COLOR, LEGEND_TOP, SLO_COLORS, TITLE_HEIGHT, WIDTH, log_ms_axis, ms_tick_label,
    rates_words, stacked_panels,
};
use super::describe::{clause_words, stored_clause_words};

/// Each run's showing: dot and error bar.
const POINT_COLOR: RGBColor = RGBColor(50, 50, 50);
/// The fitted model.
const MODEL_COLOR: RGBColor = palette::BLUE;
/// One panel, unless its legend needs more rows.
const FIT_PANEL_HEIGHT: u32 = 300;
/// Half the width of an error bar's caps, as a share of the rate axis.
const CAP_SHARE: f64 = 0.005;
/// The fraction axis never reaches further out than this from 0 or 1.
const FRACTION_FLOOR: f64 = 1e-6;
const FRACTION_CEILING: f64 = 0.999;
/// Room kept beyond the outermost fraction, in logit units.
const LOGIT_PAD: f64 = 0.3;
/// Points of the fitted curve across the rate axis.
const CURVE_SAMPLES: usize = 240;

/// Whether the card's Cr_open was fitted: then the open chart shows the
/// model ([`fit_chart`]); else it stays the chart of verdicts.
/// (A fit with nothing to show keeps that chart too.)
pub(super) fn is_fitted(card: &Card) -> bool {
    !fit_panels(card).is_empty()
}

/// The confidence of the fitted ranges (and of the runs' intervals).
pub(super) fn confidence(card: &Card) -> f64 {
    card.cr_open
        .iter()
        .filter(|c| !c.clauses.is_empty())
        .find_map(|c| c.confidence)
        .unwrap_or(DEFAULT_CONFIDENCE)
}

/// The chart's alt text on the card.
pub(super) fn alt_text(card: &Card) -> String {
    format!(
        "open loop, one panel per SLO clause: fraction of calls beyond the bound (the mean, for a mean clause) vs arrival rate with each run's {c} interval, fitted model, allowed level, crossing with its {c} range; the binding clause's crossing marked Cr_open",
        c = pct_of_fraction(confidence(card))
    )
}

/// What a clause's panel plots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A percentile bound: the fraction of calls beyond it, allowed `1 − q`.
    Percentile,
    /// The error rate: the fraction of calls that failed.
    ErrorRate,
    /// A mean bound (ms).
    Mean,
}

/// One panel: one clause of one SLO.
#[derive(Debug)]
struct FitPanel<'a> {
    cr_open: &'a CrOpen,
    clause: &'a ClauseCrossing,
    kind: Kind,
    /// `"TTFT p99 ≤ 1 s"`.
    words: String,
    color: RGBColor,
    /// The clause that binds the SLO: its crossing is Cr_open.
    binding: bool,
    /// `(realized rate, why)` of the SLO's runs that could not keep up.
    censored: Vec<(f64, String)>,
}

/// Why an open run only shows that its rate is above the crossing, and the
/// rate it really offered: the fit's own rule ([`cr_open::censored_because`]).
fn censored(run: &RunSummary) -> Option<(f64, String)> {
    let why = cr_open::censored_because(run)?;
    let realized = cr_open::realized_rps(run)?;
    (realized.is_finite() && realized > 0.0).then(|| (realized, why.to_string()))
}

/// The panels: every fitted SLO's clauses that have a run or a crossing
/// to show, SLOs in the card's order.
fn fit_panels(card: &Card) -> Vec<FitPanel<'_>> {
    let mut panels = Vec::new();
    for cr_open in card.cr_open.iter().filter(|c| !c.clauses.is_empty()) {
        let slo_index = card
            .slos
            .iter()
            .position(|s| s.name == cr_open.slo)
            .unwrap_or(card.slos.len());
        let declared = card.slos.iter().find(|s| s.name == cr_open.slo);
        let judged: Vec<&RunSummary> = card
            .open
            .iter()
            .filter(|r| r.verdicts.is_empty() || r.verdict(&cr_open.slo).is_some())
            .collect();
        let highest_measured = judged
            .iter()
            .filter(|r| cr_open::censored_because(r).is_none())
            .filter_map(|r| cr_open::realized_rps(r))
            .reduce(f64::max);
        let mut censored_runs: Vec<(f64, String)> = judged
            .into_iter()
            .filter_map(censored)
            .filter(|(rate, why)| cr_open::censoring_stands(why, *rate, highest_measured))
            .collect();
        censored_runs.sort_by(|a, b| a.0.total_cmp(&b.0));
        for clause in &cr_open.clauses {
            let shows = !clause.points.is_empty()
                || clause.estimate_rps.is_some()
                || clause.range.iter().any(Option::is_some);
            if !shows {
                continue;
            }
            let declared_clause = declared
                .into_iter()
                .flat_map(|s| &s.clauses)
                .find(|c| clause_label(c) == clause.label);
            let kind = if clause.scale == "mean_ms" {
                Kind::Mean
            } else if matches!(declared_clause, Some(SloClause::ErrorRate { .. }))
                || clause.label.starts_with("error-rate")
            {
                Kind::ErrorRate
            } else {
                Kind::Percentile
            };
            panels.push(FitPanel {
                cr_open,
                clause,
                kind,
                words: declared_clause
                    .map_or_else(|| stored_clause_words(&clause.label), clause_words),
                color: SLO_COLORS[slo_index % SLO_COLORS.len()],
                binding: cr_open.bound_by.as_deref() == Some(clause.label.as_str()),
                censored: censored_runs.clone(),
            });
        }
    }
    panels
}

fn logit(p: f64) -> f64 {
    (p / (1.0 - p)).ln()
}

fn expit(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// A panel's value axis: logit of a fraction, or log10 of milliseconds.
struct ValueAxis {
    axis: TickedAxis,
    logit: bool,
}

impl ValueAxis {
    fn of(panel: &FitPanel<'_>) -> ValueAxis {
        let clause = panel.clause;
        let values = || {
            clause
                .points
                .iter()
                .flat_map(|p| [p.value, p.low, p.high])
                .chain(std::iter::once(clause.allowed))
                .filter(|v| v.is_finite())
        };
        if panel.kind == Kind::Mean {
            let axis = log_ms_axis(values());
            return ValueAxis { axis, logit: false };
        }
        let allowed = clause.allowed.clamp(FRACTION_FLOOR, FRACTION_CEILING);
        let smallest = values()
            .filter(|v| *v > 0.0)
            .fold(0.1 * allowed, f64::min)
            .max(FRACTION_FLOOR);
        let largest = values()
            .filter(|v| *v < 1.0)
            .fold(allowed, f64::max)
            .max(if clause.points.iter().any(|p| p.high >= 1.0) {
                FRACTION_CEILING
            } else {
                0.0
            })
            .min(FRACTION_CEILING);
        let lo = logit(smallest) - LOGIT_PAD;
        // Room above the allowed line for the curve to leave it.
        let hi = (logit(largest) + LOGIT_PAD).max(logit(allowed) + 1.5);
        ValueAxis {
            axis: logit_axis(lo, hi),
            logit: true,
        }
    }

    /// A value in axis units: 0 (and below) to the bottom edge, 1 (and
    /// above, for a fraction) to the top one.
    fn at(&self, value: f64) -> f64 {
        let y = if self.logit {
            if value <= 0.0 {
                f64::NEG_INFINITY
            } else if value >= 1.0 {
                f64::INFINITY
            } else {
                logit(value)
            }
        } else if value <= 0.0 {
            f64::NEG_INFINITY
        } else {
            value.log10()
        };
        if y.is_nan() {
            self.axis.lo
        } else {
            y.clamp(self.axis.lo, self.axis.hi)
        }
    }

    fn label(&self, y: &f64) -> String {
        if self.logit {
            pct_compact(expit(*y))
        } else {
            ms_tick_label(y)
        }
    }
}

/// Ticks at round fractions, kept to the decades (and 50%) when the
/// round values would crowd the axis.
fn logit_axis(lo: f64, hi: f64) -> TickedAxis {
    const ROUND: [f64; 20] = [
        1e-6, 1e-5, 1e-4, 1e-3, 2e-3, 5e-3, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.8, 0.9,
        0.95, 0.98, 0.99, 0.999,
    ];
    const DECADES: [f64; 10] = [1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 0.5, 0.9, 0.99, 0.999];
    let within = |set: &[f64]| -> Vec<f64> {
        set.iter()
            .map(|p| logit(*p))
            .filter(|y| *y >= lo && *y <= hi)
            .collect()
    };
    let mut ticks = within(&ROUND);
    if ticks.len() > 10 {
        ticks = within(&DECADES);
    }
    TickedAxis { lo, hi, ticks }
}

/// The model across `[0, x_hi]` in the panel's axis units, cut to the
/// axis: nothing unless the clause was fitted.
fn model_curve(clause: &ClauseCrossing, axis: &ValueAxis, x_hi: f64) -> Vec<Vec<(f64, f64)>> {
    let Some(estimate) = clause.estimate_rps.filter(|e| e.is_finite() && *e > 0.0) else {
        return Vec::new();
    };
    if clause.method != "fit" || !clause.slope.is_finite() || clause.allowed <= 0.0 {
        return Vec::new();
    }
    let at = |rate: f64| -> f64 {
        let run = clause.slope * (rate.ln() - estimate.ln());
        if axis.logit {
            logit(clause.allowed.clamp(FRACTION_FLOOR, FRACTION_CEILING)) + run
        } else {
            clause.allowed.log10() + run / std::f64::consts::LN_10
        }
    };
    let samples: Vec<(f64, f64)> = (1..=CURVE_SAMPLES)
        .map(|i| {
            let rate = x_hi * i as f64 / CURVE_SAMPLES as f64;
            (rate, at(rate))
        })
        .collect();
    clip(&samples, axis.axis.lo, axis.axis.hi)
}

/// A polyline cut to `lo ≤ y ≤ hi`: the pieces inside, each ending where
/// it leaves the band.
fn clip(points: &[(f64, f64)], lo: f64, hi: f64) -> Vec<Vec<(f64, f64)>> {
    let mut pieces: Vec<Vec<(f64, f64)>> = Vec::new();
    let mut current: Vec<(f64, f64)> = Vec::new();
    let mut flush = |current: &mut Vec<(f64, f64)>| {
        if current.len() > 1 {
            pieces.push(std::mem::take(current));
        }
        current.clear();
    };
    for pair in points.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        if !a.1.is_finite() || !b.1.is_finite() {
            flush(&mut current);
            continue;
        }
        // The part of the segment inside the band: t in [enter, leave].
        let dy = b.1 - a.1;
        let (enter, leave) = if dy == 0.0 {
            if a.1 < lo || a.1 > hi {
                flush(&mut current);
                continue;
            }
            (0.0, 1.0)
        } else {
            let (ta, tb) = ((lo - a.1) / dy, (hi - a.1) / dy);
            (ta.min(tb).max(0.0), ta.max(tb).min(1.0))
        };
        if enter > leave {
            flush(&mut current);
            continue;
        }
        let at = |t: f64| (a.0 + t * (b.0 - a.0), a.1 + t * dy);
        if enter > 0.0 || current.is_empty() {
            flush(&mut current);
            current.push(at(enter));
        }
        current.push(at(leave));
        if leave < 1.0 {
            flush(&mut current);
        }
    }
    flush(&mut current);
    pieces
}

/// `"3.90–4.40 RPS"`, `"≥ 3.90 RPS"`, `"≤ 4.40 RPS"`.
fn range_words(range: &[Option<f64>; 2]) -> Option<String> {
    match *range {
        [Some(lo), Some(hi)] => Some(format!("{}–{} RPS", rps(lo), rps(hi))),
        [Some(lo), None] => Some(format!("≥ {} RPS", rps(lo))),
        [None, Some(hi)] => Some(format!("≤ {} RPS", rps(hi))),
        [None, None] => None,
    }
}

/// A legend row the kit has no swatch for: drawn over a [`Swatch::Text`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Glyph {
    /// A dot with its error bar: a run.
    ErrorBar,
    /// A red cross: a run that could not keep up.
    Censored,
}

/// The legend of one panel: its rows and the glyphs to draw over some.
fn legend_of(panel: &FitPanel<'_>, confidence: &str) -> Vec<(Swatch, String, Option<Glyph>)> {
    let clause = panel.clause;
    let row = |swatch: Swatch, text: String| (swatch, text, None);
    let mut legend = Vec::new();
    let what = match panel.kind {
        Kind::Percentile => "run: fraction beyond the bound",
        Kind::ErrorRate => "run: fraction of calls failed",
        Kind::Mean => "run: mean",
    };
    legend.push((Swatch::Text, what.to_string(), Some(Glyph::ErrorBar)));
    legend.push(row(Swatch::Text, format!("with its {confidence} interval")));
    if panel.kind != Kind::Mean && clause.points.iter().any(|p| p.value <= 0.0) {
        legend.push(row(
            Swatch::Hollow(POINT_COLOR),
            "run with none (0), at the foot".to_string(),
        ));
    }
    let fitted = clause.method == "fit" && clause.estimate_rps.is_some();
    if fitted {
        legend.push(row(
            Swatch::Line(MODEL_COLOR),
            format!("fitted model (slope {})", trimmed(clause.slope, 2)),
        ));
    }
    let allowed = match panel.kind {
        Kind::Percentile => format!(
            "allowed: {} beyond (1 − q)",
            pct_of_fraction(clause.allowed)
        ),
        Kind::ErrorRate => format!("allowed: {} failed", pct_of_fraction(clause.allowed)),
        Kind::Mean => format!("bound: {}", duration_secs(clause.allowed / 1000.0)),
    };
    legend.push(row(Swatch::Dashed(panel.color), allowed));
    if clause.method == "bracket"
        && let Some(bracket) = range_words(&clause.range)
    {
        legend.push(row(Swatch::Band(panel.color), format!("bracket {bracket}")));
        legend.push(row(
            Swatch::Text,
            "(a cliff, or a run that could not keep up below the fit)".to_string(),
        ));
    }
    let name = if panel.binding {
        format!("Cr_open {}", panel.cr_open.slo)
    } else {
        "crossing".to_string()
    };
    let (estimate, range) = if panel.binding {
        (panel.cr_open.rps, panel.cr_open.range)
    } else {
        (clause.estimate_rps, clause.range)
    };
    match (estimate, range_words(&range)) {
        (Some(e), range) => {
            legend.push(row(
                Swatch::VerticalLine(panel.color),
                format!("{name}: {} RPS", rps(e)),
            ));
            // A bracket is the runs either side, named above: no range at
            // a confidence.
            if let Some(range) = range.filter(|_| clause.method != "bracket") {
                legend.push(row(Swatch::Text, format!("{confidence} range {range}")));
            }
        }
        (None, Some(range)) => legend.push(row(
            Swatch::Line(panel.color),
            format!("{name}: {range} ({confidence})"),
        )),
        (None, None) => legend.push(row(Swatch::Text, format!("{name}: not placed"))),
    }
    if !panel.censored.is_empty() {
        let rates: Vec<f64> = panel.censored.iter().map(|c| c.0).collect();
        legend.push((
            Swatch::Text,
            rates_words("could not keep up", &rates),
            Some(Glyph::Censored),
        ));
        legend.push(row(
            Swatch::Text,
            "(above the crossing, not fitted)".to_string(),
        ));
    }
    legend
}

/// The open chart of a fitted card: one panel per SLO clause.
pub(super) fn fit_chart(card: &Card) -> DrawResult<String> {
    let panels = fit_panels(card);
    let confidence = pct_of_fraction(confidence(card));
    let base = panels
        .iter()
        .flat_map(|p| {
            p.clause
                .points
                .iter()
                .map(|q| q.rate_rps)
                .chain(p.clause.estimate_rps)
                .chain(p.cr_open.rps)
                .chain(p.censored.iter().map(|c| c.0))
        })
        .filter(|r| r.is_finite())
        .fold(0.0, f64::max);
    // A range end far beyond the runs does not stretch the axis: its bar
    // runs to the edge.
    let reach = panels
        .iter()
        .flat_map(|p| p.clause.range.iter().flatten().copied())
        .filter(|r| r.is_finite() && *r <= 1.5 * base)
        .fold(base, f64::max);
    let x_hi = if reach > 0.0 { reach * 1.1 } else { 1.0 };
    let cap = x_hi * CAP_SHARE;

    let legends: Vec<_> = panels.iter().map(|p| legend_of(p, &confidence)).collect();
    let heights: Vec<u32> = legends
        .iter()
        .map(|l| FIT_PANEL_HEIGHT.max(LEGEND_TOP as u32 + 22 * l.len() as u32 + 20))
        .collect();
    let height = TITLE_HEIGHT + heights.iter().sum::<u32>().max(FIT_PANEL_HEIGHT);

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let arrival = card.arrival.as_deref().unwrap_or("unknown arrivals");
        let title = format!(
            "{} × {} — open loop ({arrival}), fitted model per SLO clause",
            card.target, card.workload
        );
        let root = root.titled(&title, (FONT, 22))?;
        for (((area, legend_area), panel), legend) in stacked_panels(&root, &heights)
            .into_iter()
            .zip(&panels)
            .zip(&legends)
        {
            let clause = panel.clause;
            let axis = ValueAxis::of(panel);
            let (y_lo, y_hi) = (axis.axis.lo, axis.axis.hi);
            let (what, scale, y_desc) = match panel.kind {
                Kind::Percentile => (
                    "fraction of calls beyond the bound",
                    "logit scale",
                    "beyond the bound",
                ),
                Kind::ErrorRate => ("fraction of calls failed", "logit scale", "failed"),
                Kind::Mean => ("mean", "log scale", "mean"),
            };
            let mut chart = ChartBuilder::on(&area)
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(76)
                .caption(
                    format!(
                        "{}: {} — {what} vs arrival rate ({scale})",
                        panel.cr_open.slo, panel.words
                    ),
                    (FONT, 17),
                )
                .build_cartesian_2d(0f64..x_hi, axis.axis.clone())?;
            chart
                .configure_mesh()
                .light_line_style(TRANSPARENT)
                .label_style((FONT, 13))
                .axis_desc_style((FONT, 14))
                .x_desc("arrival rate (RPS), as realized")
                .y_desc(y_desc)
                .x_label_formatter(&|x| crate::format::plain(*x))
                .y_label_formatter(&|y| axis.label(y))
                .draw()?;
            let in_x = |r: f64| r.clamp(0.0, x_hi);

            // The bracket, shaded: where a cliff leaves the model nothing to say.
            if clause.method == "bracket" && clause.range.iter().any(Option::is_some) {
                let lo = in_x(clause.range[0].unwrap_or(0.0));
                let hi = in_x(clause.range[1].unwrap_or(x_hi));
                chart.draw_series(std::iter::once(Rectangle::new(
                    [(lo, y_lo), (hi, y_hi)],
                    panel.color.mix(0.2).filled(),
                )))?;
            }

            // What the clause allows, named on the line.
            let allowed_y = axis.at(clause.allowed);
            chart.draw_series(DashedLineSeries::new(
                vec![(0.0, allowed_y), (x_hi, allowed_y)],
                8,
                5,
                panel.color.stroke_width(2),
            ))?;
            let allowed_words = match panel.kind {
                Kind::Mean => format!("bound {}", duration_secs(clause.allowed / 1000.0)),
                _ => format!("allowed {}", pct_of_fraction(clause.allowed)),
            };
            chart.draw_series(std::iter::once(
                EmptyElement::at((0.0, allowed_y))
                    + Text::new(
                        allowed_words,
                        (6, -15),
                        (FONT, 12).into_font().color(&panel.color),
                    ),
            ))?;

            // The crossing's range, a bar on the allowed line; a closed
            // end has a cap.
            if clause.method != "bracket" && clause.range.iter().any(Option::is_some) {
                let lo = in_x(clause.range[0].unwrap_or(0.0));
                let hi = in_x(clause.range[1].unwrap_or(x_hi));
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(lo, allowed_y), (hi, allowed_y)],
                    panel.color.mix(0.55).stroke_width(6),
                )))?;
                for end in clause.range.iter().flatten() {
                    chart.draw_series(std::iter::once(
                        EmptyElement::at((in_x(*end), allowed_y))
                            + PathElement::new(vec![(0, -8), (0, 8)], panel.color.stroke_width(2)),
                    ))?;
                }
            }

            for piece in model_curve(clause, &axis, x_hi) {
                chart.draw_series(LineSeries::new(piece, MODEL_COLOR.stroke_width(2)))?;
            }

            // Each run: its interval, then its value (none beyond: open, at the foot).
            for point in &clause.points {
                draw_point(&mut chart, &axis, point, cap)?;
            }

            // The crossing, named at the top of its line.
            if let Some(estimate) = clause.estimate_rps.filter(|e| e.is_finite()) {
                let x = in_x(estimate);
                chart.draw_series(LineSeries::new(
                    vec![(x, y_lo), (x, y_hi)],
                    panel.color.stroke_width(2),
                ))?;
                let name = if panel.binding { "Cr_open" } else { "crossing" };
                let right = x / x_hi > 0.75;
                let (dx, h) = if right {
                    (-5, HPos::Right)
                } else {
                    (5, HPos::Left)
                };
                chart.draw_series(std::iter::once(
                    EmptyElement::at((x, y_hi))
                        + Text::new(
                            format!("{name} {} RPS", rps(estimate)),
                            (dx, 10),
                            (FONT, 13)
                                .into_font()
                                .color(&panel.color)
                                .pos(Pos::new(h, VPos::Center)),
                        ),
                ))?;
            }

            // Runs that could not keep up: above the crossing, on the top edge.
            for (rate, _) in &panel.censored {
                chart.draw_series(std::iter::once(Cross::new(
                    (in_x(*rate), y_hi),
                    6,
                    FAIL_COLOR.stroke_width(2),
                )))?;
            }

            let rows: Vec<(Swatch, String)> = legend
                .iter()
                .map(|(swatch, text, _)| (*swatch, text.clone()))
                .collect();
            draw_legend(&legend_area, &rows, LEGEND_TOP)?;
            for (i, (_, _, glyph)) in legend.iter().enumerate() {
                let (x, y) = (21, LEGEND_TOP + 22 * i as i32);
                match glyph {
                    Some(Glyph::ErrorBar) => {
                        legend_area.draw(&PathElement::new(
                            vec![
                                (x - 4, y - 8),
                                (x + 4, y - 8),
                                (x, y - 8),
                                (x, y + 8),
                                (x - 4, y + 8),
                                (x + 4, y + 8),
                            ],
                            POINT_COLOR.stroke_width(1),
                        ))?;
                        legend_area.draw(&Circle::new((x, y), 3, POINT_COLOR.filled()))?;
                    }
                    Some(Glyph::Censored) => {
                        legend_area.draw(&Cross::new((x, y), 6, FAIL_COLOR.stroke_width(2)))?
                    }
                    None => {}
                }
            }
        }
        root.present()?;
    }
    Ok(svg)
}

/// One run: its interval as a capped vertical bar, its value as a dot
/// (open, on the foot, when no call was beyond the bound).
fn draw_point<DB>(
    chart: &mut ChartContext<
        '_,
        DB,
        Cartesian2d<plotters::coord::types::RangedCoordf64, TickedAxis>,
    >,
    axis: &ValueAxis,
    point: &ClausePoint,
    cap: f64,
) -> DrawResult<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
{
    let x = point.rate_rps;
    if !x.is_finite() {
        return Ok(());
    }
    let (low, high) = (axis.at(point.low), axis.at(point.high));
    chart.draw_series(std::iter::once(PathElement::new(
        vec![
            (x - cap, high),
            (x + cap, high),
            (x, high),
            (x, low),
            (x - cap, low),
            (x + cap, low),
        ],
        POINT_COLOR.stroke_width(1),
    )))?;
    let y = axis.at(point.value);
    if point.value <= 0.0 {
        chart.draw_series(std::iter::once(Circle::new((x, y), 4, WHITE.filled())))?;
        chart.draw_series(std::iter::once(Circle::new(
            (x, y),
            4,
            POINT_COLOR.stroke_width(2),
        )))?;
    } else {
        chart.draw_series(std::iter::once(Circle::new(
            (x, y),
            4,
            POINT_COLOR.filled(),
        )))?;
    }
    Ok(())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    fn point(rate: f64, value: f64, low: f64, high: f64) -> ClausePoint {
        ClausePoint {
            run_id: format!("r{rate}"),
            rate_rps: rate,
            value,
            low,
            high,
            effective_samples: 400.0,
        }
    }

    fn crossing(
        label: &str,
        method: &str,
        estimate: Option<f64>,
        range: [Option<f64>; 2],
        slope: f64,
        (scale, allowed): (&str, f64),
        points: Vec<ClausePoint>,
    ) -> ClauseCrossing {
        ClauseCrossing {
            label: label.to_string(),
            estimate_rps: estimate,
            range,
            method: method.to_string(),
            slope,
            dispersion: 1.0,
            isotonic_rps: None,
            settling_skipped: 0.0,
            scale: scale.to_string(),
            allowed,
            points,
        }
    }

    /// The chat card of the report fixture with a fitted Cr_open:
    /// `interactive` bound by TTFT p99 ≤ 1 s (fitted, 4.15 RPS, 3.95–4.36),
    /// its TTFT p50 ≤ 300 ms a bracket (a cliff between 4.8 and 8 RPS) and
    /// its error rate within the bound at every run (no estimate, ≥ 8
    /// RPS); `batch` bound by a mean clause. The fixture's 9.5 RPS run is
    /// overloaded: censored.
    pub(in crate::report) fn fitted_card() -> Card {
        let text = include_str!("../../tests/data/results-fixture.json");
        let report = crate::report::parse_results_json(text).expect("fixture parses");
        let mut card = report.cards[0].clone();
        let label = |slo: &str, pick: fn(&SloClause) -> bool| -> String {
            card.slos
                .iter()
                .find(|s| s.name == slo)
                .and_then(|s| s.clauses.iter().find(|c| pick(c)))
                .map(clause_label)
                .expect("the fixture declares it")
        };
        let p99 = label(
            "interactive",
            |c| matches!(c, SloClause::Latency { metric: crate::config::LatencyMetric::Ttft, stat, .. } if stat.key() == "p99"),
        );
        let p50 = label(
            "interactive",
            |c| matches!(c, SloClause::Latency { metric: crate::config::LatencyMetric::Ttft, stat, .. } if stat.key() == "p50"),
        );
        let errors = label("interactive", |c| matches!(c, SloClause::ErrorRate { .. }));
        let rates = [2.0, 4.0, 4.4, 4.8, 8.0];
        let interactive = vec![
            crossing(
                &p99,
                "fit",
                Some(4.15),
                [Some(3.95), Some(4.36)],
                6.0,
                ("fraction", 0.01),
                vec![
                    point(rates[0], 0.0, 0.0, 0.004),
                    point(rates[1], 0.008, 0.004, 0.015),
                    point(rates[2], 0.014, 0.008, 0.024),
                    point(rates[3], 0.03, 0.02, 0.045),
                    point(rates[4], 0.35, 0.3, 0.4),
                ],
            ),
            crossing(
                &p50,
                "bracket",
                Some((4.8f64 * 8.0).sqrt()),
                [Some(4.8), Some(8.0)],
                1000.0,
                ("fraction", 0.5),
                [0.05, 0.1, 0.12, 0.15, 0.97]
                    .iter()
                    .zip(rates)
                    .map(|(&v, r)| point(r, v, v * 0.8, (v * 1.2).min(1.0)))
                    .collect(),
            ),
            crossing(
                &errors,
                "fit",
                None,
                [Some(8.0), None],
                0.0,
                ("fraction", 0.005),
                [0.0, 0.0, 0.001, 0.0, 0.002]
                    .iter()
                    .zip(rates)
                    .map(|(&v, r)| point(r, v, 0.0, v + 0.003))
                    .collect(),
            ),
        ];
        let batch = vec![crossing(
            "e2e mean ≤ 60s",
            "fit",
            Some(9.0),
            [Some(8.2), None],
            2.0,
            ("mean_ms", 60_000.0),
            [12_000.0, 18_000.0, 20_000.0, 22_000.0, 48_000.0]
                .iter()
                .zip(rates)
                .map(|(&v, r)| point(r, v, v * 0.9, v * 1.1))
                .collect(),
        )];
        for c in &mut card.cr_open {
            let (clauses, bound_by, rps, range) = match c.slo.as_str() {
                "interactive" => (
                    interactive.clone(),
                    p99.clone(),
                    4.15,
                    [Some(3.95), Some(4.36)],
                ),
                _ => (
                    batch.clone(),
                    "e2e mean ≤ 60s".to_string(),
                    9.0,
                    [Some(8.2), None],
                ),
            };
            c.clauses = clauses;
            c.bound_by = Some(bound_by);
            c.rps = Some(rps);
            c.range = range;
            c.method = Some("fit".to_string());
            c.confidence = Some(0.9);
        }
        card
    }

    fn svg_color(c: RGBColor) -> String {
        format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
    }

    #[test]
    fn one_panel_per_clause_the_binding_one_named() {
        let card = fitted_card();
        assert!(is_fitted(&card));
        let panels = fit_panels(&card);
        let shown: Vec<(&str, Kind, bool)> = panels
            .iter()
            .map(|p| (p.words.as_str(), p.kind, p.binding))
            .collect();
        assert_eq!(
            shown,
            [
                ("TTFT p99 ≤ 1 s", Kind::Percentile, true),
                ("TTFT p50 ≤ 300 ms", Kind::Percentile, false),
                ("error rate ≤ 0.5%", Kind::ErrorRate, false),
                ("E2E mean ≤ 60 s", Kind::Mean, true),
            ]
        );
        assert_ne!(panels[0].color, panels[3].color, "one colour per SLO");
        let censored: Vec<(f64, String)> = panels[0].censored.clone();
        assert_eq!(censored.len(), 1, "{censored:?}");
        assert_eq!(censored[0].1, "overloaded");
    }

    #[test]
    fn the_curve_meets_the_allowed_line_at_the_estimate() {
        let card = fitted_card();
        let panels = fit_panels(&card);
        let axis = ValueAxis::of(&panels[0]);
        let pieces = model_curve(panels[0].clause, &axis, 10.0);
        assert_eq!(pieces.len(), 1, "a rising curve leaves the axis once");
        let curve = &pieces[0];
        assert!(curve.len() > 100);
        assert!(curve.windows(2).all(|w| w[1].1 >= w[0].1), "monotone");
        // At the estimate the model is at the allowed fraction.
        let near = curve
            .iter()
            .min_by(|a, b| (a.0 - 4.15).abs().total_cmp(&(b.0 - 4.15).abs()))
            .expect("samples");
        assert!((expit(near.1) - 0.01).abs() < 0.001, "{near:?}");
        // Inside the axis, ending on its edges.
        assert!(
            curve
                .iter()
                .all(|p| p.1 >= axis.axis.lo && p.1 <= axis.axis.hi)
        );
        let last = curve.last().expect("samples");
        assert!(
            (last.1 - axis.axis.hi).abs() < 1e-9,
            "leaves at the top: {last:?}"
        );

        // The mean clause: a power law, bound at the estimate.
        let axis = ValueAxis::of(&panels[3]);
        let mean = model_curve(panels[3].clause, &axis, 10.0);
        let at_9 = mean[0]
            .iter()
            .find(|p| (p.0 - 9.0).abs() < 1e-9)
            .expect("a sample at 9 RPS");
        assert!((10f64.powf(at_9.1) - 60_000.0).abs() < 1.0, "{at_9:?}");

        // No curve for a bracket, nor without an estimate.
        for panel in &panels[1..3] {
            let axis = ValueAxis::of(panel);
            assert!(model_curve(panel.clause, &axis, 10.0).is_empty());
        }
    }

    #[test]
    fn the_fraction_axis_is_logit_and_reaches_below_the_allowed_level() {
        let card = fitted_card();
        let panels = fit_panels(&card);
        let axis = ValueAxis::of(&panels[0]);
        assert!(axis.logit);
        assert!(expit(axis.axis.lo) < 0.001, "below 0.1 × 1% allowed");
        assert!(expit(axis.axis.hi) > 0.4, "above the largest point");
        let labels: Vec<String> = axis.axis.ticks.iter().map(|t| axis.label(t)).collect();
        for wanted in ["0.1%", "1%", "10%"] {
            assert!(labels.iter().any(|l| l == wanted), "{labels:?}");
        }
        // A run with none beyond sits on the foot; a fraction of 1 on the top.
        assert_eq!(axis.at(0.0), axis.axis.lo);
        assert_eq!(axis.at(1.0), axis.axis.hi);
        assert!(!ValueAxis::of(&panels[3]).logit, "means on a log axis");
    }

    #[test]
    fn clip_keeps_what_is_inside() {
        let line = [(0.0, -2.0), (1.0, 0.0), (2.0, 2.0), (3.0, 4.0)];
        assert_eq!(
            clip(&line, -1.0, 3.0),
            [vec![(0.5, -1.0), (1.0, 0.0), (2.0, 2.0), (2.5, 3.0)]]
        );
        assert!(clip(&line, 10.0, 11.0).is_empty());
        let dip = [(0.0, 2.0), (1.0, -2.0), (2.0, 2.0)];
        assert_eq!(
            clip(&dip, 0.0, 3.0),
            [vec![(0.0, 2.0), (0.5, 0.0)], vec![(1.5, 0.0), (2.0, 2.0)]]
        );
    }

    #[test]
    fn the_svg_shows_runs_model_allowed_line_and_crossing() {
        let card = fitted_card();
        let svg = fit_chart(&card).expect("drawn");
        assert!(svg.starts_with("<svg"), "{svg}");
        assert_eq!(svg, fit_chart(&card).expect("drawn"), "deterministic");
        assert_eq!(
            svg.matches(" vs arrival rate (logit scale)").count(),
            3,
            "three fraction panels"
        );
        for text in [
            "fitted model per SLO clause",
            "interactive: TTFT p99 ≤ 1 s — fraction of calls beyond the bound vs arrival rate (logit scale)",
            "interactive: error rate ≤ 0.5% — fraction of calls failed vs arrival rate (logit scale)",
            "batch: E2E mean ≤ 60 s — mean vs arrival rate (log scale)",
            "run: fraction beyond the bound",
            "with its 90% interval",
            "fitted model (slope 6)",
            "allowed: 1% beyond (1 − q)",
            "allowed 1%",
            "bound 60 s",
            "Cr_open 4.15 RPS",
            "Cr_open interactive: 4.15 RPS",
            "90% range 3.95–4.36 RPS",
            "Cr_open batch: 9.00 RPS",
            "90% range ≥ 8.20 RPS",
            "crossing 6.20 RPS",
            "crossing: 6.20 RPS",
            "bracket 4.80–8.00 RPS",
            "(a cliff, or a run that could not keep up below the fit)",
            "crossing: ≥ 8.00 RPS (90%)",
            "run with none (0), at the foot",
            "could not keep up at 9.50 RPS",
        ] {
            assert!(svg.contains(text), "fitted chart lacks {text:?}");
        }
        assert!(!svg.contains("range 4.80–8.00"), "a bracket is no range");
        // The curve: a polyline in the model's colour with many points, on
        // the two fitted panels (p99 and the mean).
        let model = format!(
            "stroke=\"{}\" stroke-width=\"2\" points=\"",
            svg_color(MODEL_COLOR)
        );
        let curves = svg
            .split("<polyline")
            .filter(|p| p.contains(&model))
            .filter(|p| p.split(' ').count() > 100)
            .count();
        assert_eq!(curves, 2, "{svg}");
        // One error bar per run on each panel, and one in each legend.
        let bar = format!(
            "stroke=\"{}\" stroke-width=\"1\" points=\"",
            svg_color(POINT_COLOR)
        );
        let bars = svg.split("<polyline").filter(|p| p.contains(&bar)).count();
        assert_eq!(bars, 4 * 5 + 4, "{svg}");
        // The allowed line: dashed in the SLO's colour on every panel.
        let purple = format!("stroke=\"{}\" stroke-width=\"2\"", svg_color(SLO_COLORS[0]));
        assert!(svg.matches(&purple).count() > 10, "dashes");
    }

    #[test]
    fn alt_text_says_what_is_drawn() {
        assert_eq!(
            alt_text(&fitted_card()),
            "open loop, one panel per SLO clause: fraction of calls beyond the bound (the mean, for a mean clause) vs arrival rate with each run's 90% interval, fitted model, allowed level, crossing with its 90% range; the binding clause's crossing marked Cr_open"
        );
    }
}
