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
//! buys on a linear one, so "what does loosening the bound by half buy"
//! reads as a step up.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::analyze::frontier::Frontier;
use crate::analyze::slo::clause_label;
use crate::analyze::{Card, LatencyStats, RunSummary};
use crate::config::{LatencyMetric, SloClause};

use super::describe::{clause_words, metric_label};
use super::format::{duration_secs, num, plain, rps};

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
    if !open_points(card).is_empty() {
        links.push((
            format!("{stem}--open.svg"),
            "open loop: TTFT and E2E vs arrival rate, SLO bounds and Cr_open marked".to_string(),
        ));
    }
    if !frontier_series(card).is_empty() {
        links.push((
            format!("{stem}{FRONTIER_SUFFIX}"),
            "SLO frontier: the largest measured rate that passes vs each latency clause's bound, declared bounds marked"
                .to_string(),
        ));
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

type DrawResult<T> = Result<T, Box<dyn std::error::Error>>;

const WIDTH: u32 = 1100;
const HEIGHT: u32 = 760;
/// The strip right of the panels that holds their legends.
const LEGEND_WIDTH: i32 = 300;
const FONT: &str = "sans-serif";

const THROUGHPUT_COLOR: RGBColor = RGBColor(31, 119, 180);
const P50_COLOR: RGBColor = RGBColor(44, 160, 44);
const P99_COLOR: RGBColor = RGBColor(214, 39, 40);
const CROSSP_FILL: RGBColor = RGBColor(255, 200, 120);
const KNEE_FILL: RGBColor = RGBColor(150, 210, 150);
/// Per SLO, in declaration order: bounds dashed, Cr_open solid.
const SLO_COLORS: [RGBColor; 4] = [
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
    RGBColor(188, 189, 34),
];

/// Per frontier curve, in results order (a curve and its declared bound
/// share one).
const FRONTIER_COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
    RGBColor(255, 127, 14),
    RGBColor(140, 86, 75),
    RGBColor(23, 190, 207),
    RGBColor(127, 127, 127),
];

/// The multiplied bounds `frontier` asked for.
const ASKED_COLOR: RGBColor = RGBColor(120, 120, 120);

fn fallback_svg(message: &str) -> String {
    let escaped = message
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    format!(
        "<svg width=\"{WIDTH}\" height=\"80\" viewBox=\"0 0 {WIDTH} 80\" xmlns=\"http://www.w3.org/2000/svg\">\n<text x=\"10\" y=\"40\" font-family=\"{FONT}\" font-size=\"14\">chart could not be drawn: {escaped}</text>\n</svg>\n"
    )
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

struct OpenPoint {
    rate_rps: f64,
    ttft_p50_ms: Option<f64>,
    ttft_p99_ms: Option<f64>,
    e2e_p50_ms: Option<f64>,
    e2e_p99_ms: Option<f64>,
}

fn open_points(card: &Card) -> Vec<OpenPoint> {
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
    runs.into_iter()
        .filter_map(|r| {
            Some(OpenPoint {
                rate_rps: r.rate_rps?,
                ttft_p50_ms: stat_of(&r.ttft_ms, |s| s.p50),
                ttft_p99_ms: stat_of(&r.ttft_ms, |s| s.p99),
                e2e_p50_ms: stat_of(&r.e2e_ms, |s| s.p50),
                e2e_p99_ms: stat_of(&r.e2e_ms, |s| s.p99),
            })
        })
        .collect()
}

/// A linear f64 axis with ticks exactly where we ask (sweep levels, 1-2-5
/// decades). plotters' own `with_key_points` wrapper drops the value
/// formatter of `f64` ranges, so label formatting would not compile.
#[derive(Debug, Clone)]
pub(crate) struct TickedAxis {
    pub(crate) lo: f64,
    pub(crate) hi: f64,
    pub(crate) ticks: Vec<f64>,
}

impl Ranged for TickedAxis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        if self.hi == self.lo {
            return (limit.0 + limit.1) / 2;
        }
        let fraction = (value - self.lo) / (self.hi - self.lo);
        limit.0 + (f64::from(limit.1 - limit.0) * fraction).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, _hint: Hint) -> Vec<f64> {
        self.ticks.clone()
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

/// Log10 axis over milliseconds with ticks at 1-2-5 of each decade.
fn log_ms_axis(values: impl Iterator<Item = f64>) -> TickedAxis {
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

/// An axis over `[lo_log, hi_log]` (log10 units) with ticks at 1-2-5 of
/// each decade, or denser round values when the range is under a decade.
pub(crate) fn log10_axis(lo_log: f64, hi_log: f64) -> TickedAxis {
    let ticks_with = |mantissas: &[f64]| -> Vec<f64> {
        let mut ticks = Vec::new();
        for decade in (lo_log.floor() as i32)..=(hi_log.ceil() as i32) {
            for mantissa in mantissas {
                let t = (mantissa * 10f64.powi(decade)).log10();
                if t >= lo_log && t <= hi_log {
                    ticks.push(t);
                }
            }
        }
        ticks
    };
    let mut ticks = ticks_with(&[1.0, 2.0, 5.0]);
    if ticks.len() < 3 {
        // A narrow range (less than a decade): denser round values.
        ticks = ticks_with(&[1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]);
    }
    if ticks.len() < 2 {
        ticks = vec![lo_log, hi_log];
    }
    TickedAxis {
        lo: lo_log,
        hi: hi_log,
        ticks,
    }
}

/// Tick labels sit on round 1-2-5 values: written like SLO bounds ("500 ms", "2 s").
fn ms_tick_label(log_ms: &f64) -> String {
    duration_secs(10f64.powf(*log_ms) / 1000.0)
}

/// How an entry is drawn in a legend.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Swatch {
    /// A histogram bar.
    Bar(RGBColor),
    /// A line with a dot: a series drawn with its points.
    LineWithDot(RGBColor),
    /// A line of text under the entry above it.
    Text,
    Line(RGBColor),
    Dashed(RGBColor),
    VerticalLine(RGBColor),
    /// A vertical dashed line: a bound on the x axis.
    VerticalDashed(RGBColor),
    Band(RGBColor),
    /// A hollow point: an inconclusive run.
    Hollow(RGBColor),
}

/// Where a card chart's legend starts, below its title.
const LEGEND_TOP: i32 = 52;

/// Legends sit in a strip right of the panels, so they never cover data;
/// the first entry is `top` pixels down.
pub(crate) fn draw_legend<DB>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    entries: &[(Swatch, String)],
    top: i32,
) -> DrawResult<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
{
    const ROW: i32 = 22;
    for (i, (swatch, label)) in entries.iter().enumerate() {
        let y = top + ROW * i as i32;
        let (x0, x1) = (8, 34);
        match *swatch {
            Swatch::Bar(c) => area.draw(&Rectangle::new(
                [(x0, y - 6), (x1, y + 6)],
                c.mix(0.55).filled(),
            ))?,
            Swatch::LineWithDot(c) => {
                area.draw(&PathElement::new(vec![(x0, y), (x1, y)], c.stroke_width(2)))?;
                area.draw(&Circle::new(((x0 + x1) / 2, y), 3, c.filled()))?;
            }
            Swatch::Text => {}
            Swatch::Line(c) => {
                area.draw(&PathElement::new(vec![(x0, y), (x1, y)], c.stroke_width(2)))?
            }
            Swatch::Dashed(c) => {
                area.draw(&PathElement::new(
                    vec![(x0, y), (x0 + 10, y)],
                    c.stroke_width(2),
                ))?;
                area.draw(&PathElement::new(
                    vec![(x0 + 16, y), (x1, y)],
                    c.stroke_width(2),
                ))?;
            }
            Swatch::VerticalLine(c) => area.draw(&PathElement::new(
                vec![(x0 + 13, y - 7), (x0 + 13, y + 7)],
                c.stroke_width(2),
            ))?,
            Swatch::VerticalDashed(c) => {
                area.draw(&PathElement::new(
                    vec![(x0 + 13, y - 8), (x0 + 13, y - 2)],
                    c.stroke_width(2),
                ))?;
                area.draw(&PathElement::new(
                    vec![(x0 + 13, y + 2), (x0 + 13, y + 8)],
                    c.stroke_width(2),
                ))?;
            }
            Swatch::Band(c) => area.draw(&Rectangle::new(
                [(x0, y - 6), (x1, y + 6)],
                c.mix(0.45).filled(),
            ))?,
            Swatch::Hollow(c) => {
                area.draw(&Circle::new((x0 + 13, y), 4, WHITE.filled()))?;
                area.draw(&Circle::new((x0 + 13, y), 4, c.stroke_width(2)))?;
            }
        }
        area.draw(&Text::new(
            label.clone(),
            (x1 + 8, y),
            (FONT, 14)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center)),
        ))?;
    }
    Ok(())
}

/// Draws a series as a line with points.
fn line_with_points<DB, X, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>,
    points: Vec<(f64, f64)>,
    color: RGBColor,
) -> DrawResult<()>
where
    DB: DrawingBackend,
    DB::ErrorType: 'static,
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    if points.is_empty() {
        return Ok(());
    }
    chart.draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?;
    chart.draw_series(
        points
            .into_iter()
            .map(|p| Circle::new(p, 3, color.filled())),
    )?;
    Ok(())
}

/// Splits the titled root into two stacked panels and their legend strips.
type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
fn panels<'a>(root: &Area<'a>) -> [(Area<'a>, Area<'a>); 2] {
    let (plots, legends) = root.split_horizontally(WIDTH as i32 - LEGEND_WIDTH);
    let half = (HEIGHT as i32 - 30) / 2;
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

fn open_chart(card: &Card) -> DrawResult<String> {
    let points = open_points(card);
    let max_rate = points.iter().map(|p| p.rate_rps).fold(0.0, f64::max);
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

    // SLO bounds drawable on a panel of this metric.
    let bounds = |metric: LatencyMetric| -> Vec<(String, f64, RGBColor)> {
        card.slos
            .iter()
            .flat_map(|slo| {
                slo.clauses.iter().filter_map(move |clause| match clause {
                    SloClause::Latency {
                        metric: m, limit, ..
                    } if *m == metric => Some((
                        format!("{}: {}", slo.name, clause_words(clause)),
                        limit.as_secs_f64() * 1000.0,
                        slo_color(&slo.name),
                    )),
                    _ => None,
                })
            })
            .collect()
    };

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let arrival = card.arrival.as_deref().unwrap_or("unknown arrivals");
        let title = format!(
            "{} × {} — open loop ({arrival})",
            card.target, card.workload
        );
        let root = root.titled(&title, (FONT, 22))?;

        type Pick = fn(&OpenPoint) -> Option<f64>;
        let metrics: [(LatencyMetric, Pick, Pick); 2] = [
            (LatencyMetric::Ttft, |p| p.ttft_p50_ms, |p| p.ttft_p99_ms),
            (LatencyMetric::E2e, |p| p.e2e_p50_ms, |p| p.e2e_p99_ms),
        ];
        for ((area, legend_area), (metric, pick_p50, pick_p99)) in
            panels(&root).into_iter().zip(metrics)
        {
            let name = metric_label(metric);
            let slo_bounds = bounds(metric);
            let y_axis = log_ms_axis(
                points
                    .iter()
                    .flat_map(|p| [pick_p50(p), pick_p99(p)])
                    .flatten()
                    .chain(slo_bounds.iter().map(|(_, v, _)| *v)),
            );
            let y_range = y_axis.range();
            let mut chart = ChartBuilder::on(&area)
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(76)
                .caption(
                    format!("{name} p50 / p99 vs arrival rate (open loop, log scale)"),
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
            let mut legend = vec![
                (Swatch::Line(P50_COLOR), format!("{name} p50")),
                (Swatch::Line(P99_COLOR), format!("{name} p99")),
            ];
            for (label, limit_ms, color) in &slo_bounds {
                let y = limit_ms.log10();
                chart.draw_series(DashedLineSeries::new(
                    vec![(0.0, y), (x_hi, y)],
                    8,
                    5,
                    color.stroke_width(2),
                ))?;
                legend.push((Swatch::Dashed(*color), label.clone()));
            }
            for (label, rate, color) in &marks {
                chart.draw_series(LineSeries::new(
                    vec![(*rate, y_range.start), (*rate, y_range.end)],
                    color.stroke_width(2),
                ))?;
                legend.push((Swatch::VerticalLine(*color), label.clone()));
            }
            let series = |pick: Pick| -> Vec<(f64, f64)> {
                points
                    .iter()
                    .filter_map(|p| Some((p.rate_rps, pick(p)?.log10())))
                    .collect()
            };
            line_with_points(&mut chart, series(pick_p50), P50_COLOR)?;
            line_with_points(&mut chart, series(pick_p99), P99_COLOR)?;
            draw_legend(&legend_area, &legend, LEGEND_TOP)?;
        }
        root.present()?;
    }
    Ok(svg)
}

/// One curve of the frontier chart.
struct FrontierSeries<'a> {
    frontier: &'a Frontier,
    /// `"interactive: TTFT p99 ≤ 1 s"`, as the open chart names bounds.
    label: String,
    /// The SLO's own bound on the clause, when the card still has it.
    declared_ms: Option<f64>,
    /// `frontier` in `open`: `(multiplier, bound)` where the search made
    /// the curve dense.
    asked_ms: Vec<(f64, f64)>,
    color: RGBColor,
}

/// The frontier curves with at least one drawable point.
fn frontier_series(card: &Card) -> Vec<FrontierSeries<'_>> {
    card.frontier
        .iter()
        .filter(|f| {
            f.points
                .iter()
                .any(|p| p.bound_ms.is_finite() && p.bound_ms > 0.0 && p.rps.is_finite())
        })
        .enumerate()
        .map(|(i, frontier)| {
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
                frontier,
                label: format!("{}: {words}", frontier.slo),
                declared_ms,
                asked_ms,
                color: FRONTIER_COLORS[i % FRONTIER_COLORS.len()],
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

/// One panel: x the bound on each clause (log10 ms), y the largest measured
/// rate that passes it, as steps (the rate holds until the next bound buys
/// more); hollow points were inconclusive; each clause's declared bound a
/// dashed vertical line.
fn frontier_chart(card: &Card) -> DrawResult<String> {
    let series = frontier_series(card);
    let points = |s: &FrontierSeries<'_>| -> Vec<(f64, f64, bool)> {
        s.frontier
            .points
            .iter()
            .filter(|p| p.bound_ms.is_finite() && p.bound_ms > 0.0 && p.rps.is_finite())
            .map(|p| (p.bound_ms.log10(), p.rps, p.inconclusive))
            .collect()
    };
    let x_axis = log_ms_axis(
        series
            .iter()
            .flat_map(|s| s.frontier.points.iter().map(|p| p.bound_ms))
            .chain(series.iter().filter_map(|s| s.declared_ms))
            .chain(series.iter().flat_map(|s| s.asked_ms.iter().map(|a| a.1))),
    );
    let x_range = x_axis.range();
    let max_rps = series
        .iter()
        .flat_map(|s| s.frontier.points.iter().map(|p| p.rps))
        .filter(|r| r.is_finite())
        .fold(0.0, f64::max);
    let y_hi = if max_rps > 0.0 { max_rps * 1.15 } else { 1.0 };
    let mut legend: Vec<(Swatch, String)> = Vec::new();
    for s in &series {
        legend.push((Swatch::Line(s.color), s.label.clone()));
        if let Some(ms) = s.declared_ms {
            legend.push((
                Swatch::VerticalDashed(s.color),
                format!("declared {}", duration_secs(ms / 1000.0)),
            ));
        }
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
    if series
        .iter()
        .any(|s| s.frontier.points.iter().any(|p| p.inconclusive))
    {
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
        let mut chart = ChartBuilder::on(&area)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(76)
            .caption(
                "largest measured rate that passes vs the clause's bound (log scale)",
                (FONT, 17),
            )
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
                let right = (x - x_range.start) / (x_range.end - x_range.start) > 0.75;
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
            let pts = points(s);
            // Steps: a rate holds from its bound until the next bound buys
            // more, and beyond the last one (no higher rate passed at any bound).
            let mut path: Vec<(f64, f64)> = Vec::new();
            for (j, &(x, r, _)) in pts.iter().enumerate() {
                path.push((x, r));
                let next_x = pts.get(j + 1).map_or(x_range.end, |p| p.0);
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
        }
        draw_legend(&legend_area, &legend, LEGEND_TOP)?;
        root.present()?;
    }
    Ok(svg)
}
