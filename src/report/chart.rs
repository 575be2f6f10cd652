//! SVG charts for a card, drawn with plotters' SVG backend.
//!
//! plotters is built without `ttf`: the SVG backend writes `<text>` elements
//! and leaves glyphs to the viewer, so axis labels and captions need no font
//! files and the output depends only on the input (byte-identical re-renders).
//!
//! Axes are chosen for what the framework asks the reader to see:
//! concurrency on a log2 axis with a tick at every sweep level (levels are
//! usually doubling); latencies on a log10 axis, since CrossP compares
//! *relative* changes and SLO bounds often span orders of magnitude;
//! throughput on a linear axis so saturation shows as a plateau. The SLO
//! frontier puts the clause's bound on the same log10 axis, and the rate it
//! allows on a linear one, so "what does loosening the bound by half buy"
//! reads as a rise: each bound's fitted crossing with its range (a folder
//! from before the fit: the largest measured rate that passes, as steps).
//!
//! The open-loop chart shows what the SLOs judge, so that it says which
//! clause decided Cr_open and not only that latency grew: one panel per
//! latency metric the card's SLOs bound (derived from their clauses, in the
//! order the SLOs first name them, stacked and each as tall as its legend
//! needs), the run's value of each clause's own statistic vs arrival rate
//! (rate linear, latency log10), each clause's bound a dashed horizontal
//! line in its SLO's colour, a red disc under every point whose run failed
//! the clause conclusively and a red ring where its verdict was
//! inconclusive (the legend names the rates: the inconclusive ones are why
//! Cr_open can be a range), and each Cr_open a solid vertical line. Clauses of several SLOs on one statistic share its
//! line: the statistic is the run's, only the bound is the SLO's. Points are
//! the statistic over successful calls (`RunSummary::latency`), while a
//! verdict counts failed calls beyond every bound and judges a confidence
//! interval: a point over its bound may be ringed only (inconclusive) and a
//! failed point may sit under it (failed calls). Error-rate clauses are no
//! latency and are left out; the card's tables give their verdicts. A card
//! whose SLOs bound no latency keeps TTFT and E2E p50/p99. That is the
//! chart of a folder from before the fit: when the card's Cr_open was
//! fitted, the same file shows the model instead, one panel per SLO clause
//! (`report::fit_chart`).

use plotters::coord::ranged1d::Ranged;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::analyze::frontier::{Frontier, FrontierPoint};
use crate::analyze::slo::clause_label;
use crate::analyze::{Card, LatencyStats, RunSummary, Verdict};
use crate::config::{LatencyMetric, SloClause, Stat};
use crate::svg::{
    DrawResult, FONT, Swatch, TickedAxis, draw_legend, line_with_points, log10_axis, palette,
};

use super::describe::{clause_words, metric_label, stat_label};
use super::fit_chart;
use crate::format::{duration_secs, num, plain, rps};

/// One chart: a file name relative to the card and its SVG text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chart {
    pub file_name: String,
    pub svg: String,
}

/// Which charts a card has, and their file names: the same rule decides
/// what [`charts`] draws and what the card links to.
pub(crate) fn chart_links(card: &Card) -> Vec<(String, String)> {
    let stem = super::card_stem(card);
    let mut links = Vec::new();
    if !closed_points(card).is_empty() {
        links.push((
            format!("{stem}--closed.svg"),
            "closed loop: output tok/s and TTFT vs concurrency, CrossP zone and Cr_closed marked"
                .to_string(),
        ));
    }
    if fit_chart::is_fitted(card) {
        links.push((format!("{stem}--open.svg"), fit_chart::alt_text(card)));
    } else if !open_runs(card).is_empty() {
        let what = if has_latency_clause(card) {
            "open loop: each SLO latency clause's statistic vs arrival rate, its bound and the rates that failed it marked, Cr_open marked"
        } else {
            "open loop: TTFT and E2E p50/p99 vs arrival rate, Cr_open marked"
        };
        links.push((format!("{stem}--open.svg"), what.to_string()));
    }
    if !frontier_series(card).is_empty() {
        links.push((format!("{stem}{FRONTIER_SUFFIX}"), frontier_alt(card)));
    }
    links
}

/// The frontier chart's file name ends so: the card's SLO frontier section
/// links it.
pub(crate) const FRONTIER_SUFFIX: &str = "--frontier.svg";

/// The card's charts: closed loop (when a sweep was measured), open loop
/// (when open runs were measured) and the SLO frontier (when it has points).
pub fn charts(card: &Card) -> Vec<Chart> {
    chart_links(card)
        .into_iter()
        .map(|(file_name, _)| {
            let drawn = if file_name.ends_with("--closed.svg") {
                closed_chart(card)
            } else if file_name.ends_with(FRONTIER_SUFFIX) {
                frontier_chart(card)
            } else if fit_chart::is_fitted(card) {
                fit_chart::fit_chart(card)
            } else {
                open_chart(card)
            };
            // Drawing into a String cannot fail on I/O; if plotters still
            // reports an error, the link in the card must not dangle.
            let svg = drawn.unwrap_or_else(|err| fallback_svg(&err.to_string()));
            Chart { file_name, svg }
        })
        .collect()
}

pub(super) const WIDTH: u32 = 1100;
const HEIGHT: u32 = 760;
/// The strip right of the panels that holds their legends.
const LEGEND_WIDTH: i32 = 300;

const THROUGHPUT_COLOR: RGBColor = palette::BLUE;
const P50_COLOR: RGBColor = palette::GREEN;
const P99_COLOR: RGBColor = palette::RED;
const CROSSP_FILL: RGBColor = RGBColor(255, 200, 120);
const KNEE_FILL: RGBColor = RGBColor(150, 210, 150);
/// Per SLO, in declaration order: bounds dashed, Cr_open solid.
pub(super) const SLO_COLORS: [RGBColor; 4] = [
    palette::PURPLE,
    palette::BROWN,
    palette::CYAN,
    palette::OLIVE,
];

/// Per statistic of an open-loop panel, in the order the SLOs name them:
/// apart from the SLO colours (bounds) and from the failure red.
const STAT_COLORS: [RGBColor; 5] = [
    palette::BLUE,
    palette::ORANGE,
    palette::GREEN,
    palette::PINK,
    palette::GREY,
];

/// A run that failed a clause, on the open chart.
pub(super) const FAIL_COLOR: RGBColor = palette::RED;

/// Per frontier curve, in results order (a curve and its declared bound
/// share one).
const FRONTIER_COLORS: [RGBColor; 8] = [
    palette::BLUE,
    palette::RED,
    palette::GREEN,
    palette::PURPLE,
    palette::ORANGE,
    palette::BROWN,
    palette::CYAN,
    palette::GREY,
];

/// The multiplied bounds `frontier` asked for.
const ASKED_COLOR: RGBColor = RGBColor(120, 120, 120);

fn fallback_svg(message: &str) -> String {
    crate::svg::fallback(WIDTH, message)
}

/// A latency statistic that was measured (no samples → `None`, never 0).
fn stat_of(stats: &LatencyStats, pick: fn(&LatencyStats) -> f64) -> Option<f64> {
    (stats.count > 0)
        .then(|| pick(stats))
        .filter(|v| v.is_finite() && *v > 0.0)
}

struct ClosedPoint {
    concurrency: u32,
    output_tokens_per_s: f64,
    ttft_p50_ms: Option<f64>,
    ttft_p99_ms: Option<f64>,
}

fn closed_points(card: &Card) -> Vec<ClosedPoint> {
    let mut runs: Vec<&RunSummary> = card
        .closed
        .iter()
        .filter(|r| r.concurrency.is_some())
        .collect();
    runs.sort_by(|a, b| {
        a.concurrency
            .cmp(&b.concurrency)
            .then_with(|| a.run_id.cmp(&b.run_id))
    });
    runs.into_iter()
        .filter_map(|r| {
            Some(ClosedPoint {
                concurrency: r.concurrency?,
                output_tokens_per_s: r.output_tokens_per_s,
                ttft_p50_ms: stat_of(&r.ttft_ms, |s| s.p50),
                ttft_p99_ms: stat_of(&r.ttft_ms, |s| s.p99),
            })
        })
        .filter(|p| p.concurrency > 0)
        .collect()
}

/// The open runs the chart plots: by rising rate (repetitions of a rate by
/// run id), each with a rate to put it at.
fn open_runs(card: &Card) -> Vec<&RunSummary> {
    let mut runs: Vec<&RunSummary> = card
        .open
        .iter()
        .filter(|r| r.rate_rps.is_some_and(|x| x.is_finite() && x > 0.0))
        .collect();
    runs.sort_by(|a, b| {
        a.rate_rps
            .partial_cmp(&b.rate_rps)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.run_id.cmp(&b.run_id))
    });
    runs
}

/// Whether an SLO of the card bounds a latency: then the open chart shows
/// the clauses, else TTFT and E2E p50/p99.
fn has_latency_clause(card: &Card) -> bool {
    card.slos
        .iter()
        .flat_map(|s| &s.clauses)
        .any(|c| matches!(c, SloClause::Latency { .. }))
}

/// One line of an open-loop panel: one statistic of the panel's metric.
#[derive(Debug, Clone, PartialEq)]
struct OpenSeries {
    stat: Stat,
    /// `"TTFT p95"`.
    label: String,
    color: RGBColor,
    /// `(rate, ms)`, by rising rate; a run that did not measure it is left out.
    points: Vec<(f64, f64)>,
}

/// One SLO clause on its metric's panel.
#[derive(Debug, Clone, PartialEq)]
struct OpenBound {
    /// `"interactive: TTFT p95 ≤ 400 ms"`, as the frontier chart names it.
    label: String,
    /// `"p95 ≤ 400 ms"`, beside the line.
    short: String,
    limit_ms: f64,
    color: RGBColor,
    /// The rates whose run failed the clause conclusively, and the run's
    /// value of the statistic (`None`: not measured, marked at the top).
    failed: Vec<(f64, Option<f64>)>,
    /// The same for the runs whose verdict on the clause was inconclusive.
    inconclusive: Vec<(f64, Option<f64>)>,
}

/// One panel of the open chart: one latency metric.
#[derive(Debug, Clone, PartialEq)]
struct OpenPanel {
    metric: LatencyMetric,
    series: Vec<OpenSeries>,
    bounds: Vec<OpenBound>,
}

/// A statistic a run measured, drawable on a log axis (no samples, or a
/// percentile nobody asked for → `None`, never 0).
fn run_stat(run: &RunSummary, metric: LatencyMetric, stat: Stat) -> Option<f64> {
    run.latency(metric)
        .get(stat)
        .filter(|v| v.is_finite() && *v > 0.0)
}

/// The panels of the open chart. With latency clauses: one panel per
/// metric an SLO bounds (in the order the SLOs first name them), each
/// clause's statistic a series shared by the SLOs that bound it, each
/// clause a bound in its SLO's colour with the rates that failed it.
/// Without: TTFT and E2E p50/p99, as before there were clauses to show.
fn open_panels(card: &Card) -> Vec<OpenPanel> {
    let runs = open_runs(card);
    let series_of = |metric: LatencyMetric, stat: Stat, color: RGBColor| OpenSeries {
        stat,
        label: format!("{} {}", metric_label(metric), stat_label(stat)),
        color,
        points: runs
            .iter()
            .filter_map(|r| Some((r.rate_rps?, run_stat(r, metric, stat)?)))
            .collect(),
    };
    if !has_latency_clause(card) {
        return [LatencyMetric::Ttft, LatencyMetric::E2e]
            .into_iter()
            .map(|metric| OpenPanel {
                metric,
                series: vec![
                    series_of(metric, Stat::Percentile(50.0), P50_COLOR),
                    series_of(metric, Stat::Percentile(99.0), P99_COLOR),
                ],
                bounds: Vec::new(),
            })
            .collect();
    }
    let mut panels: Vec<OpenPanel> = Vec::new();
    for (slo_index, slo) in card.slos.iter().enumerate() {
        for (clause_index, clause) in slo.clauses.iter().enumerate() {
            let SloClause::Latency {
                metric,
                stat,
                limit,
            } = clause
            else {
                continue; // the error rate is no latency: the card's tables judge it
            };
            if !panels.iter().any(|p| p.metric == *metric) {
                panels.push(OpenPanel {
                    metric: *metric,
                    series: Vec::new(),
                    bounds: Vec::new(),
                });
            }
            let Some(panel) = panels.iter_mut().find(|p| p.metric == *metric) else {
                continue;
            };
            if !panel.series.iter().any(|s| s.stat == *stat) {
                let color = STAT_COLORS[panel.series.len() % STAT_COLORS.len()];
                panel.series.push(series_of(*metric, *stat, color));
            }
            let label = clause_label(clause);
            let judged_as = |wanted: Verdict| -> Vec<(f64, Option<f64>)> {
                runs.iter()
                    .filter_map(|run| {
                        let verdict = run.verdict(&slo.name)?;
                        // A verdict lists the SLO's clauses in order; the
                        // label guards against an SLO edited since the run.
                        let judged = verdict
                            .clauses
                            .get(clause_index)
                            .filter(|c| c.label == label)
                            .or_else(|| verdict.clauses.iter().find(|c| c.label == label))?;
                        if judged.verdict() != wanted {
                            return None;
                        }
                        Some((run.rate_rps?, run_stat(run, *metric, *stat)))
                    })
                    .collect()
            };
            let limit_ms = limit.as_secs_f64() * 1000.0;
            panel.bounds.push(OpenBound {
                label: format!("{}: {}", slo.name, clause_words(clause)),
                short: format!(
                    "{} ≤ {}",
                    stat_label(*stat),
                    duration_secs(limit_ms / 1000.0)
                ),
                limit_ms,
                color: SLO_COLORS[slo_index % SLO_COLORS.len()],
                failed: judged_as(Verdict::Fail),
                inconclusive: judged_as(Verdict::Inconclusive),
            });
        }
    }
    panels
}

/// `"failed at 4.40, 8.00 RPS"` (`what` = `"failed"`); many rates as their
/// range, to fit the legend.
pub(super) fn rates_words(what: &str, rates: &[f64]) -> String {
    match rates {
        [] => String::new(),
        [_, _, _, _, ..] => {
            let lo = rates.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = rates.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            format!(
                "{what} at {} runs, {}–{} RPS",
                rates.len(),
                rps(lo),
                rps(hi)
            )
        }
        _ => {
            let listed: Vec<String> = rates.iter().map(|r| rps(*r)).collect();
            format!("{what} at {} RPS", listed.join(", "))
        }
    }
}

/// Log10 axis over milliseconds with ticks at 1-2-5 of each decade.
pub(super) fn log_ms_axis(values: impl Iterator<Item = f64>) -> TickedAxis {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in values.filter(|v| v.is_finite() && *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        (lo, hi) = (1.0, 1000.0);
    }
    log10_axis(lo.log10() - 0.1, hi.log10() + 0.1)
}

/// Tick labels sit on round 1-2-5 values: written like SLO bounds ("500 ms", "2 s").
pub(super) fn ms_tick_label(log_ms: &f64) -> String {
    duration_secs(10f64.powf(*log_ms) / 1000.0)
}

/// Where a card chart's legend starts, below its title.
pub(super) const LEGEND_TOP: i32 = 52;

/// Splits the titled root into two stacked panels and their legend strips.
pub(super) type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
fn panels<'a>(root: &Area<'a>) -> [(Area<'a>, Area<'a>); 2] {
    let (plots, legends) = root.split_horizontally(WIDTH as i32 - LEGEND_WIDTH);
    let half = (HEIGHT - TITLE_HEIGHT) as i32 / 2;
    let (top, bottom) = plots.split_vertically(half);
    let (legend_top, legend_bottom) = legends.split_vertically(half);
    [(top, legend_top), (bottom, legend_bottom)]
}

fn closed_chart(card: &Card) -> DrawResult<String> {
    let points = closed_points(card);
    let log2 = |c: u32| f64::from(c.max(1)).log2();
    let (x_lo, x_hi) = match (points.first(), points.last()) {
        (Some(first), Some(last)) => (log2(first.concurrency) - 0.3, log2(last.concurrency) + 0.3),
        _ => (-1.0, 1.0),
    };
    let x_ticks: Vec<f64> = points.iter().map(|p| log2(p.concurrency)).collect();
    let x_axis = || TickedAxis {
        lo: x_lo,
        hi: x_hi,
        ticks: x_ticks.clone(),
    };
    let x_label = |x: &f64| format!("{}", 2f64.powf(*x).round());

    let max_tps = points
        .iter()
        .map(|p| p.output_tokens_per_s)
        .fold(0.0, f64::max);
    let y_tps_hi = if max_tps > 0.0 { max_tps * 1.1 } else { 1.0 };
    let ttft_axis = log_ms_axis(
        points
            .iter()
            .flat_map(|p| [p.ttft_p50_ms, p.ttft_p99_ms])
            .flatten(),
    );
    let ttft_range = ttft_axis.range();

    // CrossP zone and Cr_closed range, shaded on both panels.
    let band = |lo: u32, hi: u32| {
        let (a, b) = (log2(lo), log2(hi));
        // A one-level range (lower = upper) still needs visible width.
        if (b - a).abs() < 1e-9 {
            (a - 0.05, b + 0.05)
        } else {
            (a, b)
        }
    };
    let mut bands: Vec<((f64, f64), RGBColor, String)> = Vec::new();
    if let Some(crossp) = &card.crossp {
        bands.push((
            band(crossp.zone[0], crossp.zone[1]),
            CROSSP_FILL,
            format!(
                "CrossP {} (zone {}–{})",
                crossp.concurrency, crossp.zone[0], crossp.zone[1]
            ),
        ));
    }
    if let Some(knee) = &card.cr_closed {
        let label = if knee.range[0] == knee.range[1] {
            format!("Cr_closed {} concurrent", knee.range[0])
        } else {
            format!("Cr_closed {}–{} concurrent", knee.range[0], knee.range[1])
        };
        bands.push((band(knee.range[0], knee.range[1]), KNEE_FILL, label));
    }
    let band_legend = bands
        .iter()
        .map(|(_, color, label)| (Swatch::Band(*color), label.clone()));

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let title = format!(
            "{} × {} — closed loop (fixed concurrency)",
            card.target, card.workload
        );
        let root = root.titled(&title, (FONT, 22))?;
        let [(top, top_legend), (bottom, bottom_legend)] = panels(&root);

        // Top panel: output throughput.
        let mut chart = ChartBuilder::on(&top)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(76)
            .caption("output tokens/s vs concurrency (closed loop)", (FONT, 17))
            .build_cartesian_2d(x_axis(), 0f64..y_tps_hi)?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .x_desc("concurrency (log2)")
            .y_desc("output tok/s")
            .x_label_formatter(&x_label)
            .y_label_formatter(&|y| num(*y, 0))
            .draw()?;
        for ((a, b), color, _) in &bands {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(*a, 0.0), (*b, y_tps_hi)],
                color.mix(0.45).filled(),
            )))?;
        }
        let tps_points = points
            .iter()
            .map(|p| (log2(p.concurrency), p.output_tokens_per_s))
            .collect();
        line_with_points(&mut chart, tps_points, THROUGHPUT_COLOR)?;
        let mut legend = vec![(Swatch::Line(THROUGHPUT_COLOR), "output tok/s".to_string())];
        legend.extend(band_legend.clone());
        draw_legend(&top_legend, &legend, LEGEND_TOP)?;

        // Bottom panel: TTFT percentiles.
        let mut chart = ChartBuilder::on(&bottom)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(76)
            .caption(
                "TTFT p50 / p99 vs concurrency (closed loop, log scale)",
                (FONT, 17),
            )
            .build_cartesian_2d(x_axis(), ttft_axis)?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .x_desc("concurrency (log2)")
            .y_desc("TTFT")
            .x_label_formatter(&x_label)
            .y_label_formatter(&ms_tick_label)
            .draw()?;
        for ((a, b), color, _) in &bands {
            chart.draw_series(std::iter::once(Rectangle::new(
                [(*a, ttft_range.start), (*b, ttft_range.end)],
                color.mix(0.45).filled(),
            )))?;
        }
        let series = |pick: fn(&ClosedPoint) -> Option<f64>| -> Vec<(f64, f64)> {
            points
                .iter()
                .filter_map(|p| Some((log2(p.concurrency), pick(p)?.log10())))
                .collect()
        };
        line_with_points(&mut chart, series(|p| p.ttft_p50_ms), P50_COLOR)?;
        line_with_points(&mut chart, series(|p| p.ttft_p99_ms), P99_COLOR)?;
        let mut legend = vec![
            (Swatch::Line(P50_COLOR), "TTFT p50".to_string()),
            (Swatch::Line(P99_COLOR), "TTFT p99".to_string()),
        ];
        legend.extend(band_legend);
        draw_legend(&bottom_legend, &legend, LEGEND_TOP)?;
        root.present()?;
    }
    Ok(svg)
}

/// Room for the title above the panels.
pub(super) const TITLE_HEIGHT: u32 = 30;
/// One open-loop panel, as tall as each of the closed chart's two; taller
/// when its legend needs the rows.
const PANEL_HEIGHT: u32 = (HEIGHT - TITLE_HEIGHT) / 2;

/// Splits the titled root into stacked panels of `heights` (the last one
/// takes what is left) and their legend strips.
pub(super) fn stacked_panels<'a>(root: &Area<'a>, heights: &[u32]) -> Vec<(Area<'a>, Area<'a>)> {
    let (mut plots, mut legends) = root.split_horizontally(WIDTH as i32 - LEGEND_WIDTH);
    let mut out = Vec::new();
    for (i, h) in heights.iter().enumerate() {
        if i + 1 == heights.len() {
            out.push((plots, legends));
            break;
        }
        let (plot, rest) = plots.split_vertically(*h);
        let (legend, legend_rest) = legends.split_vertically(*h);
        out.push((plot, legend));
        (plots, legends) = (rest, legend_rest);
    }
    out
}

fn open_chart(card: &Card) -> DrawResult<String> {
    let panels = open_panels(card);
    let runs = open_runs(card);
    let max_rate = runs.iter().filter_map(|r| r.rate_rps).fold(0.0, f64::max);
    // Each SLO keeps one color: its bounds dashed, its Cr_open solid.
    let slo_color = |name: &str| {
        let index = card
            .slos
            .iter()
            .position(|s| s.name == name)
            .unwrap_or(card.slos.len());
        SLO_COLORS[index % SLO_COLORS.len()]
    };
    let marks: Vec<(String, f64, RGBColor)> = card
        .cr_open
        .iter()
        .filter_map(|c| {
            let r = c.rps?;
            let bound = if c.at_least { "≥ " } else { "" };
            Some((
                format!("Cr_open {}: {bound}{} RPS", c.slo, rps(r)),
                r,
                slo_color(&c.slo),
            ))
        })
        .collect();
    let x_hi = marks.iter().map(|(_, r, _)| *r).fold(max_rate, f64::max) * 1.1;
    let x_hi = if x_hi > 0.0 { x_hi } else { 1.0 };

    let legends: Vec<Vec<(Swatch, String)>> = panels
        .iter()
        .map(|panel| {
            let mut legend: Vec<(Swatch, String)> = panel
                .series
                .iter()
                .map(|s| (Swatch::LineWithDot(s.color), s.label.clone()))
                .collect();
            for bound in &panel.bounds {
                legend.push((Swatch::Dashed(bound.color), bound.label.clone()));
                for (what, runs) in [
                    ("failed", &bound.failed),
                    ("inconclusive", &bound.inconclusive),
                ] {
                    if !runs.is_empty() {
                        let rates: Vec<f64> = runs.iter().map(|f| f.0).collect();
                        legend.push((Swatch::Text, rates_words(what, &rates)));
                    }
                }
            }
            for (label, _, color) in &marks {
                legend.push((Swatch::VerticalLine(*color), label.clone()));
            }
            if panel.bounds.iter().any(|b| !b.failed.is_empty()) {
                legend.push((
                    Swatch::Failed(FAIL_COLOR),
                    "run failed the clause".to_string(),
                ));
            }
            if panel.bounds.iter().any(|b| !b.inconclusive.is_empty()) {
                legend.push((
                    Swatch::Unsure(FAIL_COLOR),
                    "run inconclusive on the clause".to_string(),
                ));
            }
            legend
        })
        .collect();
    let heights: Vec<u32> = legends
        .iter()
        .map(|l| PANEL_HEIGHT.max(LEGEND_TOP as u32 + 22 * l.len() as u32 + 20))
        .collect();
    let height = TITLE_HEIGHT + heights.iter().sum::<u32>();

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let arrival = card.arrival.as_deref().unwrap_or("unknown arrivals");
        let title = format!(
            "{} × {} — open loop ({arrival})",
            card.target, card.workload
        );
        let root = root.titled(&title, (FONT, 22))?;
        for (((area, legend_area), panel), legend) in stacked_panels(&root, &heights)
            .into_iter()
            .zip(&panels)
            .zip(&legends)
        {
            let name = metric_label(panel.metric);
            let y_axis = log_ms_axis(
                panel
                    .series
                    .iter()
                    .flat_map(|s| s.points.iter().map(|p| p.1))
                    .chain(panel.bounds.iter().map(|b| b.limit_ms)),
            );
            let y_range = y_axis.range();
            let stats: Vec<String> = panel.series.iter().map(|s| stat_label(s.stat)).collect();
            let mut chart = ChartBuilder::on(&area)
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(76)
                .caption(
                    format!(
                        "{name} {} vs arrival rate (open loop, log scale)",
                        stats.join(" / ")
                    ),
                    (FONT, 17),
                )
                .build_cartesian_2d(0f64..x_hi, y_axis)?;
            chart
                .configure_mesh()
                .light_line_style(TRANSPARENT)
                .label_style((FONT, 13))
                .axis_desc_style((FONT, 14))
                .x_desc("arrival rate (RPS)")
                .y_desc(name)
                .x_label_formatter(&|x| plain(*x))
                .y_label_formatter(&ms_tick_label)
                .draw()?;
            for bound in &panel.bounds {
                let y = bound.limit_ms.log10();
                chart.draw_series(DashedLineSeries::new(
                    vec![(0.0, y), (x_hi, y)],
                    8,
                    5,
                    bound.color.stroke_width(2),
                ))?;
                // Named on the line too: one SLO's bounds share a colour.
                chart.draw_series(std::iter::once(
                    EmptyElement::at((0.0, y))
                        + Text::new(
                            bound.short.clone(),
                            (6, -15),
                            (FONT, 12).into_font().color(&bound.color),
                        ),
                ))?;
            }
            for (_, rate, color) in &marks {
                chart.draw_series(LineSeries::new(
                    vec![(*rate, y_range.start), (*rate, y_range.end)],
                    color.stroke_width(2),
                ))?;
            }
            // Under the series' own dots, so a failed point reads as a red
            // halo around it and an inconclusive one as a red ring; not
            // measured → at the top edge.
            for bound in &panel.bounds {
                let at = |value: &Option<f64>| value.map_or(y_range.end, f64::log10);
                for (rate, value) in &bound.failed {
                    chart.draw_series(std::iter::once(Circle::new(
                        (*rate, at(value)),
                        7,
                        FAIL_COLOR.filled(),
                    )))?;
                }
                for (rate, value) in &bound.inconclusive {
                    chart.draw_series(std::iter::once(Circle::new(
                        (*rate, at(value)),
                        7,
                        FAIL_COLOR.stroke_width(2),
                    )))?;
                }
            }
            for s in &panel.series {
                let points: Vec<(f64, f64)> =
                    s.points.iter().map(|&(r, v)| (r, v.log10())).collect();
                if let Some(&last) = points.last() {
                    chart.draw_series(std::iter::once(
                        EmptyElement::at(last)
                            + Text::new(
                                stat_label(s.stat),
                                (8, 0),
                                (FONT, 12)
                                    .into_font()
                                    .color(&s.color)
                                    .pos(Pos::new(HPos::Left, VPos::Center)),
                            ),
                    ))?;
                }
                line_with_points(&mut chart, points, s.color)?;
            }
            draw_legend(&legend_area, legend, LEGEND_TOP)?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// One curve of the frontier chart.
struct FrontierSeries {
    /// `"interactive: TTFT p99 ≤ 1 s"`, as the open chart names bounds.
    label: String,
    /// The SLO's own bound on the clause, when the card still has it.
    declared_ms: Option<f64>,
    /// `frontier` in `open`: `(multiplier, bound)` where the search made
    /// the curve dense.
    asked_ms: Vec<(f64, f64)>,
    color: RGBColor,
    /// What is drawn, by rising bound.
    points: Vec<FrontierMark>,
}

/// One point of a frontier curve as drawn: at `log10(bound)`, a rate (the
/// fitted estimate, or the measured rate that passes) and, for a fitted
/// point, its range (an end no run bounds is `None`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct FrontierMark {
    x: f64,
    rps: Option<f64>,
    range: [Option<f64>; 2],
    /// A measured point whose run was inconclusive.
    hollow: bool,
    /// The declared bound: the clause's Cr_open crossing.
    declared: bool,
}

fn finite_rps(r: Option<f64>) -> Option<f64> {
    r.filter(|r| r.is_finite() && *r > 0.0)
}

/// The drawable points of `frontier`: a bound on the log axis and at least
/// a rate or a range end.
fn frontier_marks(frontier: &Frontier) -> Vec<FrontierMark> {
    frontier
        .points
        .iter()
        .filter(|p| p.bound_ms().is_finite() && p.bound_ms() > 0.0)
        .map(|p| match p {
            FrontierPoint::Fitted(f) => FrontierMark {
                x: f.bound_ms.log10(),
                rps: finite_rps(f.estimate_rps),
                range: [finite_rps(f.range[0]), finite_rps(f.range[1])],
                hollow: false,
                declared: (f.multiplier - 1.0).abs() < 1e-9,
            },
            FrontierPoint::Measured(m) => FrontierMark {
                x: m.bound_ms.log10(),
                rps: m.rps.is_finite().then_some(m.rps),
                range: [None, None],
                hollow: m.inconclusive,
                declared: false,
            },
        })
        .filter(|m| m.rps.is_some() || m.range.iter().any(Option::is_some))
        .collect()
}

/// Whether the card's frontier is fitted (else measured, a folder from
/// before the fit): the chart draws estimates with ranges, not steps.
fn frontier_fitted(card: &Card) -> bool {
    card.frontier.iter().any(Frontier::is_fitted)
}

/// The frontier curves with at least one drawable point.
fn frontier_series(card: &Card) -> Vec<FrontierSeries> {
    card.frontier
        .iter()
        .map(|f| (f, frontier_marks(f)))
        .filter(|(_, marks)| !marks.is_empty())
        .enumerate()
        .map(|(i, (frontier, points))| {
            let clause = declared_clause(card, &frontier.slo, &frontier.clause);
            let declared_ms = match clause {
                Some(SloClause::Latency { limit, .. }) => Some(limit.as_secs_f64() * 1000.0),
                _ => declared_in_verdicts(card, &frontier.slo, &frontier.clause),
            };
            let words = clause.map_or_else(|| frontier.clause.clone(), clause_words);
            let asked_ms = declared_ms.map_or_else(Vec::new, |ms| {
                card.frontier_multipliers
                    .iter()
                    .map(|m| (*m, m * ms))
                    .filter(|(_, b)| b.is_finite() && *b > 0.0)
                    .collect()
            });
            FrontierSeries {
                label: format!("{}: {words}", frontier.slo),
                declared_ms,
                asked_ms,
                color: FRONTIER_COLORS[i % FRONTIER_COLORS.len()],
                points,
            }
        })
        .collect()
}

/// The SLO clause a frontier was computed for, found by its label (the
/// frontier names its clause as the verdicts do).
fn declared_clause<'a>(card: &'a Card, slo: &str, label: &str) -> Option<&'a SloClause> {
    card.slos
        .iter()
        .filter(|s| s.name == slo)
        .flat_map(|s| &s.clauses)
        .find(|c| matches!(c, SloClause::Latency { .. }) && clause_label(c) == label)
}

/// The clause's bound as the runs' verdicts recorded it, for a card whose
/// SLO no longer declares it.
fn declared_in_verdicts(card: &Card, slo: &str, label: &str) -> Option<f64> {
    card.open
        .iter()
        .filter_map(|r| r.verdict(slo))
        .flat_map(|v| &v.clauses)
        .find(|c| c.label == label)
        .and_then(|c| c.limit_ms)
}

/// The frontier chart's alt text on the card.
fn frontier_alt(card: &Card) -> String {
    if frontier_fitted(card) {
        format!(
            "SLO frontier: each latency clause's fitted Cr_open crossing vs its bound, with its {} range, declared bounds marked",
            crate::format::pct_of_fraction(fit_chart::confidence(card))
        )
    } else {
        "SLO frontier: the largest measured rate that passes vs each latency clause's bound, declared bounds marked"
            .to_string()
    }
}

/// One panel: x the bound on each clause (log10 ms), y the rate it allows;
/// each clause's declared bound a dashed vertical line. Fitted: each
/// bound's estimate, joined, with its range as a bar (an end no run bounds
/// dashed to the edge); the declared bound's point, the clause's Cr_open
/// crossing, larger. Measured (a folder from before the fit): the largest
/// measured rate that passes, as steps (the rate holds until the next
/// bound buys more), inconclusive points hollow.
fn frontier_chart(card: &Card) -> DrawResult<String> {
    let series = frontier_series(card);
    let fitted = frontier_fitted(card);
    let x_axis = log_ms_axis(
        series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| 10f64.powf(p.x)))
            .chain(series.iter().filter_map(|s| s.declared_ms))
            .chain(series.iter().flat_map(|s| s.asked_ms.iter().map(|a| a.1))),
    );
    let x_range = x_axis.range();
    // A range end far beyond the estimates does not stretch the axis: its
    // bar runs to the edge.
    let base = series
        .iter()
        .flat_map(|s| s.points.iter())
        .flat_map(|p| p.rps.into_iter().chain(p.range[0]))
        .fold(0.0, f64::max);
    let max_rps = series
        .iter()
        .flat_map(|s| s.points.iter())
        .flat_map(|p| p.rps.into_iter().chain(p.range.iter().flatten().copied()))
        .filter(|r| base <= 0.0 || *r <= 1.5 * base)
        .fold(base, f64::max);
    let y_hi = if max_rps > 0.0 { max_rps * 1.15 } else { 1.0 };
    let confidence = crate::format::pct_of_fraction(fit_chart::confidence(card));
    let mut legend: Vec<(Swatch, String)> = Vec::new();
    for s in &series {
        legend.push((
            if fitted {
                Swatch::LineWithDot(s.color)
            } else {
                Swatch::Line(s.color)
            },
            s.label.clone(),
        ));
        if let Some(ms) = s.declared_ms {
            legend.push((
                Swatch::VerticalDashed(s.color),
                format!("declared {}", duration_secs(ms / 1000.0)),
            ));
        }
    }
    if fitted {
        legend.push((
            Swatch::VerticalLine(BLACK),
            format!("{confidence} range (dashed: no run bounds that end)"),
        ));
    }
    if let Some(first) = series.iter().find(|s| !s.asked_ms.is_empty()) {
        let listed: Vec<String> = first
            .asked_ms
            .iter()
            .map(|(m, _)| format!("{}×", plain(*m)))
            .collect();
        legend.push((
            Swatch::VerticalDashed(ASKED_COLOR),
            format!("frontier asked at {}", listed.join(", ")),
        ));
    }
    if series.iter().any(|s| s.points.iter().any(|p| p.hollow)) {
        legend.push((Swatch::Hollow(BLACK), "inconclusive run".to_string()));
    }
    // Room for every legend row under the title.
    let height = (HEIGHT / 4 * 3).max(52 + 22 * legend.len() as u32 + 60);

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let title = format!(
            "{} × {} — SLO frontier (open loop)",
            card.target, card.workload
        );
        let root = root.titled(&title, (FONT, 22))?;
        let (area, legend_area) = root.split_horizontally(WIDTH as i32 - LEGEND_WIDTH);
        let caption = if fitted {
            format!(
                "Cr_open of the clause at each bound, fitted over all runs, {confidence} range (log scale)"
            )
        } else {
            "largest measured rate that passes vs the clause's bound (log scale)".to_string()
        };
        let mut chart = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(76)
            .caption(caption, (FONT, 17))
            .build_cartesian_2d(x_axis, 0f64..y_hi)?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .x_desc("bound on the clause")
            .y_desc("arrival rate (RPS)")
            .x_label_formatter(&ms_tick_label)
            .y_label_formatter(&|y| plain(*y))
            .draw()?;
        let width = x_range.end - x_range.start;
        for (i, s) in series.iter().enumerate() {
            // Staggered by curve, so marks and labels of clauses declared
            // alike stay readable.
            let stagger = 0.05 * (i % 8) as f64;
            // Where `frontier` asked for density: short marks in the
            // curve's colour at the foot of the panel, with their multiplier.
            for (m, ms) in &s.asked_ms {
                let x = ms.log10();
                let top = y_hi * (0.07 + stagger);
                chart.draw_series(DashedLineSeries::new(
                    vec![(x, 0.0), (x, top)],
                    3,
                    3,
                    s.color.mix(0.7).stroke_width(2),
                ))?;
                chart.draw_series(std::iter::once(
                    EmptyElement::at((x, top))
                        + Text::new(
                            format!("{}×", plain(*m)),
                            (4, -8),
                            (FONT, 12).into_font().color(&s.color),
                        ),
                ))?;
            }
            if let Some(ms) = s.declared_ms {
                let x = ms.log10();
                chart.draw_series(DashedLineSeries::new(
                    vec![(x, 0.0), (x, y_hi)],
                    8,
                    5,
                    s.color.stroke_width(2),
                ))?;
                let y = y_hi * (0.97 - stagger);
                // Near the right edge the label goes left of its line.
                let right = (x - x_range.start) / width > 0.75;
                let (dx, h) = if right {
                    (-5, HPos::Right)
                } else {
                    (5, HPos::Left)
                };
                chart.draw_series(std::iter::once(
                    EmptyElement::at((x, y))
                        + Text::new(
                            format!("declared {}", duration_secs(ms / 1000.0)),
                            (dx, 0),
                            (FONT, 13)
                                .into_font()
                                .color(&s.color)
                                .pos(Pos::new(h, VPos::Center)),
                        ),
                ))?;
            }
            if fitted {
                draw_fitted_curve(&mut chart, s, i, series.len(), width, y_hi)?;
            } else {
                draw_measured_steps(&mut chart, s, x_range.end)?;
            }
        }
        draw_legend(&legend_area, &legend, LEGEND_TOP)?;
        root.present()?;
    }
    Ok(svg)
}

type FrontierChart<'a, 'b> = ChartContext<
    'a,
    SVGBackend<'b>,
    Cartesian2d<TickedAxis, plotters::coord::types::RangedCoordf64>,
>;

/// A fitted curve: estimates joined, each range a bar with caps at its
/// closed ends, an open end dashed to the panel's edge. Curves are offset
/// a little along x so bars at one bound do not hide each other.
fn draw_fitted_curve(
    chart: &mut FrontierChart<'_, '_>,
    s: &FrontierSeries,
    index: usize,
    curves: usize,
    width: f64,
    y_hi: f64,
) -> DrawResult<()> {
    let offset = width * 0.006 * (index as f64 - (curves as f64 - 1.0) / 2.0);
    let line: Vec<(f64, f64)> = s
        .points
        .iter()
        .filter_map(|p| Some((p.x + offset, p.rps?)))
        .collect();
    chart.draw_series(LineSeries::new(line, s.color.stroke_width(2)))?;
    for p in &s.points {
        let x = p.x + offset;
        let lo = p.range[0].unwrap_or(0.0).min(y_hi);
        let hi = p.range[1].unwrap_or(y_hi).min(y_hi);
        if p.range.iter().any(Option::is_some) {
            // The part the runs bound is solid; an open end is dashed.
            let solid_from = p.range[0].map_or(p.rps.unwrap_or(hi), |l| l.min(y_hi));
            let solid_to = p.range[1].map_or(p.rps.unwrap_or(lo), |h| h.min(y_hi));
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(x, solid_from), (x, solid_to)],
                s.color.mix(0.6).stroke_width(3),
            )))?;
            if p.range[0].is_none() {
                chart.draw_series(DashedLineSeries::new(
                    vec![(x, 0.0), (x, solid_from)],
                    4,
                    4,
                    s.color.mix(0.6).stroke_width(2),
                ))?;
            }
            if p.range[1].is_none() {
                chart.draw_series(DashedLineSeries::new(
                    vec![(x, solid_to), (x, y_hi)],
                    4,
                    4,
                    s.color.mix(0.6).stroke_width(2),
                ))?;
            }
            for end in p.range.iter().flatten() {
                chart.draw_series(std::iter::once(
                    EmptyElement::at((x, end.min(y_hi)))
                        + PathElement::new(vec![(-6, 0), (6, 0)], s.color.stroke_width(2)),
                ))?;
            }
        }
        if let Some(r) = p.rps {
            let radius = if p.declared { 6 } else { 4 };
            chart.draw_series(std::iter::once(Circle::new(
                (x, r),
                radius,
                s.color.filled(),
            )))?;
        }
    }
    Ok(())
}

/// A measured curve (a folder from before the fit): steps, as a rate holds
/// from its bound until the next bound buys more, and beyond the last one
/// (no higher rate passed at any bound); inconclusive points hollow.
fn draw_measured_steps(
    chart: &mut FrontierChart<'_, '_>,
    s: &FrontierSeries,
    x_end: f64,
) -> DrawResult<()> {
    let pts: Vec<(f64, f64, bool)> = s
        .points
        .iter()
        .filter_map(|p| Some((p.x, p.rps?, p.hollow)))
        .collect();
    let mut path: Vec<(f64, f64)> = Vec::new();
    for (j, &(x, r, _)) in pts.iter().enumerate() {
        path.push((x, r));
        let next_x = pts.get(j + 1).map_or(x_end, |p| p.0);
        path.push((next_x, r));
    }
    chart.draw_series(LineSeries::new(path, s.color.stroke_width(2)))?;
    for &(x, r, inconclusive) in &pts {
        if inconclusive {
            chart.draw_series(std::iter::once(Circle::new((x, r), 4, WHITE.filled())))?;
            chart.draw_series(std::iter::once(Circle::new(
                (x, r),
                4,
                s.color.stroke_width(2),
            )))?;
        } else {
            chart.draw_series(std::iter::once(Circle::new((x, r), 4, s.color.filled())))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analyze::slo::ClauseVerdict;

    /// The chat card of the report fixture, whose open runs' verdicts carry
    /// one clause verdict per clause: a fail where the run's statistic is
    /// over the bound, else a pass. Its SLOs: `interactive` (TTFT p50 ≤
    /// 300 ms, TTFT p99 ≤ 1 s, ITL p95 ≤ 60 ms, E2E p99 ≤ 20 s, an error
    /// rate) and `batch` (E2E p95 ≤ 120 s).
    fn chat_card() -> Card {
        let text = include_str!("../../tests/data/results-fixture.json");
        let report = crate::report::parse_results_json(text).expect("fixture parses");
        let mut card = report.cards[0].clone();
        let slos = card.slos.clone();
        for run in &mut card.open {
            let judged: Vec<(String, Vec<ClauseVerdict>)> = slos
                .iter()
                .map(|slo| {
                    let clauses = slo
                        .clauses
                        .iter()
                        .map(|clause| {
                            let verdict = match clause {
                                SloClause::Latency {
                                    metric,
                                    stat,
                                    limit,
                                } => match run_stat(run, *metric, *stat) {
                                    Some(v) if v > limit.as_secs_f64() * 1000.0 => Verdict::Fail,
                                    _ => Verdict::Pass,
                                },
                                SloClause::ErrorRate { .. } => Verdict::Fail,
                            };
                            ClauseVerdict {
                                label: clause_label(clause),
                                verdict: Some(verdict),
                                ..ClauseVerdict::default()
                            }
                        })
                        .collect();
                    (slo.name.clone(), clauses)
                })
                .collect();
            for (slo, clauses) in judged {
                if let Some(v) = run.verdicts.iter_mut().find(|v| v.slo == slo) {
                    v.clauses = clauses;
                }
            }
        }
        card
    }

    fn failed_rates(bound: &OpenBound) -> Vec<f64> {
        bound.failed.iter().map(|f| f.0).collect()
    }

    #[test]
    fn one_panel_per_latency_metric_the_slos_bound() {
        let panels = open_panels(&chat_card());
        let metrics: Vec<LatencyMetric> = panels.iter().map(|p| p.metric).collect();
        assert_eq!(
            metrics,
            [LatencyMetric::Ttft, LatencyMetric::Itl, LatencyMetric::E2e],
            "in the order the SLOs name them; the error rate has none"
        );
        let stats = |i: usize| -> Vec<String> {
            panels[i].series.iter().map(|s| s.label.clone()).collect()
        };
        assert_eq!(stats(0), ["TTFT p50", "TTFT p99"]);
        assert_eq!(stats(1), ["ITL p95"]);
        // E2E p99 from interactive, E2E p95 from batch: one panel.
        assert_eq!(stats(2), ["E2E p99", "E2E p95"]);

        let itl = &panels[1];
        assert_eq!(itl.series[0].points.len(), 6, "one point per open run");
        assert_eq!(itl.series[0].points[0], (2.0, 16.24));
        let [bound] = itl.bounds.as_slice() else {
            panic!("one ITL clause: {:?}", itl.bounds);
        };
        assert_eq!(bound.label, "interactive: ITL p95 ≤ 60 ms");
        assert_eq!(bound.short, "p95 ≤ 60 ms");
        assert_eq!(bound.limit_ms, 60.0);
        assert_eq!(bound.failed, [(9.5, Some(84.1))]);

        let ttft = &panels[0];
        assert_eq!(failed_rates(&ttft.bounds[0]), [8.0, 9.5], "p50 ≤ 300 ms");
        assert_eq!(
            failed_rates(&ttft.bounds[1]),
            [4.4, 4.8, 8.0, 9.5],
            "p99 ≤ 1 s"
        );
        let e2e = &panels[2];
        let labels: Vec<&str> = e2e.bounds.iter().map(|b| b.label.as_str()).collect();
        assert_eq!(
            labels,
            ["interactive: E2E p99 ≤ 20 s", "batch: E2E p95 ≤ 120 s"]
        );
        assert_ne!(
            e2e.bounds[0].color, e2e.bounds[1].color,
            "one colour per SLO"
        );
        // Batch failed at 9.5 RPS for the overload, not on its E2E clause.
        assert!(e2e.bounds[1].failed.is_empty(), "{:?}", e2e.bounds[1]);
    }

    #[test]
    fn an_inconclusive_clause_is_ringed_not_failed() {
        let mut card = chat_card();
        for run in &mut card.open {
            for verdict in &mut run.verdicts {
                for clause in &mut verdict.clauses {
                    if clause.verdict == Some(Verdict::Fail) && clause.label.starts_with("itl") {
                        clause.verdict = Some(Verdict::Inconclusive);
                    }
                }
            }
        }
        let itl = &open_panels(&card)[1].bounds[0];
        assert!(itl.failed.is_empty());
        assert_eq!(itl.inconclusive, [(9.5, Some(84.1))], "ringed instead");
        // A verdict that lost its clauses (an older results.json) marks nothing.
        for run in &mut card.open {
            for verdict in &mut run.verdicts {
                verdict.clauses.clear();
            }
        }
        assert!(open_panels(&card).iter().all(|p| {
            p.bounds
                .iter()
                .all(|b| b.failed.is_empty() && b.inconclusive.is_empty())
        }));
    }

    #[test]
    fn the_svg_shows_clauses_bounds_and_failures() {
        let card = chat_card();
        let svg = open_chart(&card).expect("drawn");
        assert_eq!(
            svg.matches(" vs arrival rate (open loop, log scale)")
                .count(),
            3,
            "three panels"
        );
        for text in [
            "TTFT p50 / p99 vs arrival rate",
            "ITL p95 vs arrival rate",
            "E2E p99 / p95 vs arrival rate",
            "interactive: ITL p95 ≤ 60 ms",
            "p95 ≤ 60 ms",
            "batch: E2E p95 ≤ 120 s",
            "failed at 9.50 RPS",
            "failed at 8.00, 9.50 RPS",
            "failed at 4 runs, 4.40–9.50 RPS",
            "run failed the clause",
            "Cr_open interactive: 4.00 RPS",
        ] {
            assert!(svg.contains(text), "open chart lacks {text:?}");
        }
        assert!(!svg.contains("error rate"), "the error rate is no latency");
        // A red disc per failing (run, clause): TTFT 2 + 4, ITL 1, E2E 1;
        // and one per panel's legend.
        let discs = svg
            .matches("r=\"7\" opacity=\"1\" fill=\"#D62728\"")
            .count();
        assert_eq!(discs, 8 + 3, "{svg}");
        // Three panels, each at least as tall as one of the closed chart's.
        assert!(svg.starts_with(&format!(
            "<svg width=\"{WIDTH}\" height=\"{}\"",
            TITLE_HEIGHT + 3 * PANEL_HEIGHT
        )));
        assert_eq!(svg, open_chart(&card).expect("drawn"), "deterministic");
        assert!(
            !svg.contains("inconclusive"),
            "no inconclusive clause, no ring"
        );

        // An inconclusive clause: a red ring and its rates in the legend.
        let mut unsure = card.clone();
        if let Some(clause) = unsure
            .open
            .iter_mut()
            .find(|r| r.rate_rps == Some(8.0))
            .and_then(|r| r.verdicts.iter_mut().find(|v| v.slo == "interactive"))
            .and_then(|v| v.clauses.iter_mut().find(|c| c.label.starts_with("itl")))
        {
            clause.verdict = Some(Verdict::Inconclusive);
        }
        let svg = open_chart(&unsure).expect("drawn");
        assert!(svg.contains("inconclusive at 8.00 RPS"), "{svg}");
        assert!(svg.contains("run inconclusive on the clause"));
        let rings = svg
            .matches("r=\"7\" opacity=\"1\" fill=\"none\" stroke=\"#D62728\"")
            .count();
        assert_eq!(rings, 2, "the run's and the legend's: {svg}");
    }

    #[test]
    fn without_latency_clauses_ttft_and_e2e_p50_p99() {
        let mut card = chat_card();
        for slo in &mut card.slos {
            slo.clauses
                .retain(|c| matches!(c, SloClause::ErrorRate { .. }));
        }
        let fallback = |card: &Card| -> Vec<(LatencyMetric, Vec<String>)> {
            open_panels(card)
                .into_iter()
                .map(|p| {
                    assert!(p.bounds.is_empty());
                    (p.metric, p.series.into_iter().map(|s| s.label).collect())
                })
                .collect()
        };
        let expected = vec![
            (
                LatencyMetric::Ttft,
                vec!["TTFT p50".to_string(), "TTFT p99".to_string()],
            ),
            (
                LatencyMetric::E2e,
                vec!["E2E p50".to_string(), "E2E p99".to_string()],
            ),
        ];
        assert_eq!(fallback(&card), expected);
        let svg = open_chart(&card).expect("drawn");
        assert!(svg.contains("TTFT p50 / p99 vs arrival rate"));
        assert!(svg.starts_with(&format!("<svg width=\"{WIDTH}\" height=\"{HEIGHT}\"")));
        let links = chart_links(&card);
        assert!(
            links
                .iter()
                .any(|(_, alt)| alt.starts_with("open loop: TTFT and E2E")),
            "{links:?}"
        );
        card.slos.clear();
        assert_eq!(fallback(&card), expected);
        // With clauses, the alt text says what the chart now shows.
        assert!(
            chart_links(&chat_card())
                .iter()
                .any(|(_, alt)| alt.contains("SLO latency clause"))
        );
    }

    #[test]
    fn a_fitted_card_draws_the_model_under_the_same_file_name() {
        let fitted = super::super::fit_chart::tests::fitted_card();
        let mut before = fitted.clone();
        for c in &mut before.cr_open {
            c.clauses.clear();
        }
        let names = |card: &Card| -> Vec<String> {
            charts(card).into_iter().map(|c| c.file_name).collect()
        };
        assert_eq!(names(&fitted), names(&before), "same files, same places");
        let open = |card: &Card| -> String {
            charts(card)
                .into_iter()
                .find(|c| c.file_name.ends_with("--open.svg"))
                .expect("an open chart")
                .svg
        };
        let svg = open(&fitted);
        assert!(svg.contains("fitted model per SLO clause"), "{svg}");
        assert!(svg.contains("Cr_open interactive: 4.15 RPS"));
        assert!(!svg.contains("run failed the clause"), "no verdict marks");
        let links = chart_links(&fitted);
        let (_, alt) = links
            .iter()
            .find(|(name, _)| name.ends_with("--open.svg"))
            .expect("linked");
        assert!(
            alt.contains("fraction of calls beyond the bound") && alt.contains("90% range"),
            "{alt}"
        );

        // Without clauses (a folder from before the fit): today's chart.
        let old = open(&before);
        assert_eq!(old, open_chart(&before).expect("drawn"));
        assert!(old.contains(" vs arrival rate (open loop, log scale)"));
        assert!(!old.contains("fitted model"));
        assert!(
            chart_links(&before)
                .iter()
                .any(|(_, alt)| alt.contains("SLO latency clause"))
        );
    }

    #[test]
    fn rates_in_words() {
        assert_eq!(rates_words("failed", &[9.5]), "failed at 9.50 RPS");
        assert_eq!(
            rates_words("failed", &[4.4, 8.0, 9.5]),
            "failed at 4.40, 8.00, 9.50 RPS"
        );
        assert_eq!(
            rates_words("inconclusive", &[4.4, 4.8, 8.0, 9.5]),
            "inconclusive at 4 runs, 4.40–9.50 RPS"
        );
    }
}
