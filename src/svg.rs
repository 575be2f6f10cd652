//! The SVG kit every chart is drawn with (the card's charts in
//! `report::chart`, the profile's in `profile::report`): plotters' SVG
//! backend without `ttf`, so text is `<text>` elements and a chart depends
//! only on its input (byte-identical re-renders); one font, one palette,
//! axes with ticks exactly where we ask, legends in a strip beside the plot,
//! and a one-line SVG in place of a chart that could not be drawn, so a
//! link never dangles.
//!
//! A leaf: it imports nothing of the crate.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// What drawing a chart returns: plotters' errors are boxed.
pub type DrawResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Every chart's font: the viewer's sans-serif.
pub const FONT: &str = "sans-serif";

/// The palette (matplotlib's "tab10", by name), so charts agree on colours.
pub mod palette {
    use plotters::style::RGBColor;

    pub const BLUE: RGBColor = RGBColor(31, 119, 180);
    pub const ORANGE: RGBColor = RGBColor(255, 127, 14);
    pub const GREEN: RGBColor = RGBColor(44, 160, 44);
    pub const RED: RGBColor = RGBColor(214, 39, 40);
    pub const PURPLE: RGBColor = RGBColor(148, 103, 189);
    pub const BROWN: RGBColor = RGBColor(140, 86, 75);
    pub const PINK: RGBColor = RGBColor(227, 119, 194);
    pub const GREY: RGBColor = RGBColor(127, 127, 127);
    pub const OLIVE: RGBColor = RGBColor(188, 189, 34);
    pub const CYAN: RGBColor = RGBColor(23, 190, 207);
}

/// A chart `width` pixels wide that says why it could not be drawn.
pub fn fallback(width: u32, message: &str) -> String {
    let escaped = message
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;");
    format!(
        "<svg width=\"{width}\" height=\"80\" viewBox=\"0 0 {width} 80\" xmlns=\"http://www.w3.org/2000/svg\">\n<text x=\"10\" y=\"40\" font-family=\"{FONT}\" font-size=\"14\">chart could not be drawn: {escaped}</text>\n</svg>\n"
    )
}

/// The drawn chart, or the [`fallback`] saying why not. Drawing into a
/// String cannot fail on I/O; if plotters still reports an error, the link
/// to the chart must not dangle.
pub fn or_fallback(width: u32, drawn: DrawResult<String>) -> String {
    drawn.unwrap_or_else(|err| fallback(width, &err.to_string()))
}

/// A linear f64 axis with ticks exactly where we ask (sweep levels, 1-2-5
/// decades). plotters' own `with_key_points` wrapper drops the value
/// formatter of `f64` ranges, so label formatting would not compile.
#[derive(Debug, Clone)]
pub struct TickedAxis {
    pub lo: f64,
    pub hi: f64,
    pub ticks: Vec<f64>,
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

/// An axis over `[lo_log, hi_log]` (log10 units) with ticks at 1-2-5 of
/// each decade, or denser round values when the range is under a decade.
pub fn log10_axis(lo_log: f64, hi_log: f64) -> TickedAxis {
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

/// Round ticks (steps of 1, 2 or 5 × 10^k) over `[lo, hi]`, about `target` of them.
pub fn linear_ticks(lo: f64, hi: f64, target: f64) -> Vec<f64> {
    if !lo.is_finite() || !hi.is_finite() || hi <= lo {
        return vec![lo];
    }
    let raw = (hi - lo) / target;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step).floor() as i64;
    (first..=last).map(|k| k as f64 * step).collect()
}

/// How an entry is drawn in a legend.
#[derive(Debug, Clone, Copy)]
pub enum Swatch {
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
    /// A large filled disc: a run that failed a clause.
    Failed(RGBColor),
    /// A large ring: a run inconclusive on a clause.
    Unsure(RGBColor),
}

/// Legends sit in a strip right of the panels, so they never cover data;
/// the first entry is `top` pixels down.
pub fn draw_legend<DB>(
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
            Swatch::Failed(c) => area.draw(&Circle::new((x0 + 13, y), 7, c.filled()))?,
            Swatch::Unsure(c) => area.draw(&Circle::new((x0 + 13, y), 7, c.stroke_width(2)))?,
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
pub fn line_with_points<DB, X, Y>(
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
