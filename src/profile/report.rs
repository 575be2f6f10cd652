//! `capcard profile --report DIR` (pure): a markdown page with SVG charts
//! that lets a reader see whether each fit is good before trusting it.
//!
//! A KS statistic alone hides *where* a fit misses (the body, a tail, a
//! second mode), so every length gets a histogram of the observed counts
//! with the fitted distribution's expected count per bin drawn over it,
//! `n × (F(hi) − F(lo))` — the law before the profile's `min=`/`max=`
//! clamps, so the line shows the shape that was fitted; the share of draws
//! the clamps move onto the bounds is stated in the text. The arrival
//! process gets its rate over time, with the mean and the busiest minute
//! and 10 seconds the fit reports, so bursts and trends (which a single CV
//! summarises away) are visible.
//!
//! Like `report`'s charts, everything here is a function of the input:
//! plotters without `ttf` writes SVG `<text>` elements, so re-rendering is
//! byte-identical. [`render`] returns file names and contents; the caller
//! writes them.

use plotters::prelude::*;

use crate::config::DistKind;
use crate::format::{duration_secs, num, pct_of_fraction, plain, rps};
use crate::svg::{
    DrawResult, FONT, Swatch, TickedAxis, draw_legend, line_with_points, linear_ticks, log10_axis,
    palette,
};

use super::fit::{self, ArrivalFit, KS_CRITICAL_1PCT, LengthFit};

/// One observed length (or time) and its fit.
#[derive(Debug, Clone, PartialEq)]
pub struct LengthSeries {
    /// What the values measure, for headings and axes: `"input tokens"`.
    pub title: String,
    /// The chart's file name without `.svg`: `"input-tokens"`. Characters
    /// other than ASCII letters, digits, `-` and `_` become `-`.
    pub file_stem: String,
    /// `"s"` for times in seconds (written as durations); anything else
    /// names a count (`"tokens"`).
    pub unit: String,
    /// The observations; values that are not finite or not positive are
    /// left out, as the fit leaves them out.
    pub values: Vec<f64>,
    /// The fit of `values`, when there was one.
    pub fit: Option<LengthFit>,
}

/// Everything the report shows.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportInput {
    /// The page's heading.
    pub title: String,
    /// One line per log file, already worded; `sources[i]` is the log of
    /// `arrivals[i]` (the chart calls it "log i+1").
    pub sources: Vec<String>,
    pub lengths: Vec<LengthSeries>,
    /// Arrival timestamps in seconds, one list per log file, any origin and
    /// any order.
    pub arrivals: Vec<Vec<f64>>,
    pub arrival_fit: Option<ArrivalFit>,
    /// Sections of worded lines after the lengths (the agent loop), as
    /// `(heading, lines)`; each line becomes a bullet.
    pub sections: Vec<(String, Vec<String>)>,
    /// Extra lines for the reader, already worded.
    pub notes: Vec<String>,
    /// The KDL the command wrote (a workload fragment or a whole
    /// experiment), shown as a code block.
    pub fragment_kdl: Option<String>,
}

/// One file of the report: a name relative to the report directory and its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportFile {
    pub name: String,
    pub contents: String,
}

/// The markdown page's file name.
pub const MARKDOWN_FILE: &str = "profile.md";
/// The arrival chart's file name.
pub const ARRIVALS_FILE: &str = "arrivals.svg";

/// The report: [`MARKDOWN_FILE`] first, then one SVG per chart it links
/// to (a length's chart when it has values, [`ARRIVALS_FILE`] when some
/// log has arrivals over a time span).
pub fn render(input: &ReportInput) -> Vec<ReportFile> {
    let names = chart_names(&input.lengths);
    let mut charts = Vec::new();
    let mut sections = Vec::new();
    for (series, name) in input.lengths.iter().zip(&names) {
        let histogram = Histogram::of(&series.values, series.fit.as_ref());
        if let Some(h) = &histogram {
            charts.push(ReportFile {
                name: name.clone(),
                contents: svg_or_fallback(histogram_svg(series, h)),
            });
        }
        sections.push((series, name.as_str(), histogram));
    }
    let arrival_bins = ArrivalBins::of(&input.arrivals);
    if let Some(bins) = &arrival_bins {
        charts.push(ReportFile {
            name: ARRIVALS_FILE.to_string(),
            contents: svg_or_fallback(arrivals_svg(bins, input.arrival_fit.as_ref())),
        });
    }
    let mut files = vec![ReportFile {
        name: MARKDOWN_FILE.to_string(),
        contents: markdown(input, &sections, arrival_bins.as_ref()),
    }];
    files.extend(charts);
    files
}

/// Chart file names, one per series: sanitised stems, made unique with a
/// `-2`, `-3` suffix, never the arrival chart's name.
fn chart_names(lengths: &[LengthSeries]) -> Vec<String> {
    let mut taken = vec![ARRIVALS_FILE.to_string()];
    let mut names = Vec::new();
    for series in lengths {
        let mut stem: String = series
            .file_stem
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        if stem.is_empty() {
            stem = "length".to_string();
        }
        let mut name = format!("{stem}.svg");
        let mut k = 2;
        while taken.contains(&name) {
            name = format!("{stem}-{k}.svg");
            k += 1;
        }
        taken.push(name.clone());
        names.push(name);
    }
    names
}

// ------------------------------------------------------------ histograms

/// Above this ratio of the largest to the smallest value a linear axis
/// crushes the body of the distribution into its first bins (a lognormal
/// with σ ≈ 0.8 spans 20× between its 1st and 99th percentiles): the axis
/// is log10 and the bins geometric, equal in width on the page.
const LOG_RATIO: f64 = 20.0;
/// A fixed bin count rather than Freedman–Diaconis: FD's width follows
/// `n^(−1/3)` and often gives 60 bins or more for a few thousand values, too thin
/// to read the expected counts against; a fixed count also makes charts of
/// different logs look alike. Small samples get fewer (Rice's rule,
/// `2·∛n`) so a bin still holds a few observations.
const MAX_BINS: usize = 36;
const MIN_BINS: usize = 8;

/// How a histogram's x axis is binned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scale {
    Linear,
    Log,
}

/// Observed counts and the fit's expected counts over the same bins.
#[derive(Debug, Clone, PartialEq)]
struct Histogram {
    scale: Scale,
    /// Increasing edges; bin `i` holds values in `(edges[i], edges[i+1]]`
    /// (the first bin also its lower edge), the convention of a CDF, so
    /// `n × (F(hi) − F(lo))` counts exactly what the bin counts.
    edges: Vec<f64>,
    counts: Vec<u64>,
    /// `n × (F(hi) − F(lo))` per bin, when there is a fit with a CDF.
    expected: Option<Vec<f64>>,
    /// Values counted.
    n: usize,
    /// Values left out (not finite or not positive).
    skipped: usize,
}

impl Histogram {
    /// `None` when no value is finite and positive.
    fn of(values: &[f64], fit: Option<&LengthFit>) -> Option<Histogram> {
        let mut xs: Vec<f64> = values
            .iter()
            .copied()
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        xs.sort_by(f64::total_cmp);
        let (&min, &max) = (xs.first()?, xs.last()?);
        let n = xs.len();
        let bins = ((2.0 * (n as f64).cbrt()).ceil() as usize).clamp(MIN_BINS, MAX_BINS);
        // Counts (tokens) are whole: edges then sit on half-integers, so no
        // bin is empty only because no integer falls in it, and the
        // expected count is that of the rounded draws a count gets.
        let integer = xs.iter().all(|x| x.fract() == 0.0);
        let scale = if max / min > LOG_RATIO {
            Scale::Log
        } else {
            Scale::Linear
        };
        let edges = bin_edges(min, max, bins, scale, integer);
        let mut counts = vec![0u64; edges.len() - 1];
        let last = counts.len() - 1;
        for x in &xs {
            let bin = edges.partition_point(|e| e < x).saturating_sub(1).min(last);
            counts[bin] += 1;
        }
        let expected = fit.and_then(|f| {
            edges
                .windows(2)
                .map(|w| {
                    let p = fit::cdf(&f.kind, w[1])? - fit::cdf(&f.kind, w[0])?;
                    Some(n as f64 * p.max(0.0))
                })
                .collect::<Option<Vec<f64>>>()
        });
        Some(Histogram {
            scale,
            edges,
            counts,
            expected,
            n,
            skipped: values.len() - n,
        })
    }

    /// Where a bin's marker sits: its middle on the page.
    fn center(&self, bin: usize) -> f64 {
        let (lo, hi) = (self.edges[bin], self.edges[bin + 1]);
        match self.scale {
            Scale::Linear => (lo + hi) / 2.0,
            Scale::Log => (lo * hi).sqrt(),
        }
    }

    /// The value → axis mapping (the axis of a log chart is log10).
    fn axis(&self, value: f64) -> f64 {
        match self.scale {
            Scale::Linear => value,
            Scale::Log => value.log10(),
        }
    }
}

/// Edges for `bins` bins from `min` to `max` (`0 < min ≤ max`), at least two.
fn bin_edges(min: f64, max: f64, bins: usize, scale: Scale, integer: bool) -> Vec<f64> {
    if min == max {
        return if integer {
            vec![min - 0.5, min + 0.5]
        } else {
            vec![min * 0.95, min * 1.05]
        };
    }
    let b = bins as f64;
    match (scale, integer) {
        (Scale::Linear, false) => {
            let mut edges: Vec<f64> = (0..=bins)
                .map(|i| min + (max - min) * i as f64 / b)
                .collect();
            edges[bins] = max;
            edges
        }
        (Scale::Linear, true) => {
            let values = max - min + 1.0;
            let width = (values / b).ceil().max(1.0);
            let count = (values / width).ceil() as usize;
            (0..=count).map(|i| min - 0.5 + width * i as f64).collect()
        }
        (Scale::Log, false) => {
            let mut edges: Vec<f64> = (0..=bins)
                .map(|i| min * (max / min).powf(i as f64 / b))
                .collect();
            (edges[0], edges[bins]) = (min, max);
            edges
        }
        (Scale::Log, true) => {
            // Geometric from half below the minimum to half above the
            // maximum (min ≥ 1, so the first edge is positive), interior
            // edges moved down onto a half-integer; near the minimum,
            // where geometric bins are narrower than one, several merge.
            let (lo, hi) = (min - 0.5, max + 0.5);
            let mut edges = vec![lo];
            for i in 1..bins {
                let e = (lo * (hi / lo).powf(i as f64 / b)).floor() + 0.5;
                if edges.last().is_some_and(|last| e > *last) && e < hi {
                    edges.push(e);
                }
            }
            edges.push(hi);
            edges
        }
    }
}

// ---------------------------------------------------------------- arrivals

/// The most log panels drawn one above the other; past this the chart
/// would be taller than anyone scrolls, and the page says so.
const MAX_ARRIVAL_PANELS: usize = 12;
/// The bin count the bin width aims at from above: between 60 and 120
/// bins over the longest log, since readable widths are at most 2× apart.
const MAX_ARRIVAL_BINS: f64 = 120.0;

/// Arrivals per bin of each log, over a time axis starting at the log's
/// own first arrival. Logs are stacked, one panel each, rather than laid
/// end to end: their clocks need not relate (any origin), and a gap marker
/// would suggest a continuity that is not there; stacked on one bin width
/// and one rate scale, their rates still compare at a glance.
#[derive(Debug, Clone, PartialEq)]
struct ArrivalBins {
    width_s: f64,
    /// The longest log's span.
    span_s: f64,
    /// `(log index, arrivals per bin)` for logs with a finite timestamp.
    logs: Vec<(usize, Vec<u64>)>,
}

impl ArrivalBins {
    /// `None` when no log has two distinct finite instants.
    fn of(arrivals: &[Vec<f64>]) -> Option<ArrivalBins> {
        let sorted: Vec<(usize, Vec<f64>)> = arrivals
            .iter()
            .enumerate()
            .map(|(i, ts)| {
                let mut ts: Vec<f64> = ts.iter().copied().filter(|t| t.is_finite()).collect();
                ts.sort_by(f64::total_cmp);
                (i, ts)
            })
            .filter(|(_, ts)| !ts.is_empty())
            .collect();
        let span_of = |ts: &[f64]| ts.last().zip(ts.first()).map_or(0.0, |(b, a)| b - a);
        let span_s = sorted.iter().map(|(_, ts)| span_of(ts)).fold(0.0, f64::max);
        if span_s <= 0.0 {
            return None;
        }
        let width_s = readable_width(span_s / MAX_ARRIVAL_BINS);
        let logs = sorted
            .into_iter()
            .map(|(i, ts)| {
                let bins = ((span_of(&ts) / width_s).ceil() as usize).max(1);
                let mut counts = vec![0u64; bins];
                let t0 = ts[0];
                for t in &ts {
                    let bin = (((t - t0) / width_s).floor() as usize).min(bins - 1);
                    counts[bin] += 1;
                }
                (i, counts)
            })
            .collect();
        Some(ArrivalBins {
            width_s,
            span_s,
            logs,
        })
    }
}

/// The smallest readable bin width of at least `raw_s` seconds: 1-2-3-5
/// steps below a minute, then whole minutes, hours and days people say.
fn readable_width(raw_s: f64) -> f64 {
    const MINUTE: f64 = 60.0;
    const HOUR: f64 = 3600.0;
    const DAY: f64 = 86_400.0;
    let steps = [1.0, 2.0, 3.0, 5.0];
    let mut ladder: Vec<f64> = (-3..=0)
        .flat_map(|k| steps.map(|m| m * 10f64.powi(k)))
        .collect();
    ladder.extend([10.0, 20.0, 30.0]);
    ladder.extend([1.0, 2.0, 3.0, 5.0, 10.0, 15.0, 20.0, 30.0].map(|m| m * MINUTE));
    ladder.extend([1.0, 2.0, 3.0, 6.0, 12.0].map(|h| h * HOUR));
    ladder.extend((0..=3).flat_map(|k| steps.map(|m| m * 10f64.powi(k) * DAY)));
    ladder
        .into_iter()
        .find(|w| *w >= raw_s)
        .unwrap_or_else(|| raw_s.ceil())
}

/// A bin width in words: `"500 ms"`, `"10 s"`, `"5 min"`, `"1 h"`, `"2 d"`.
fn width_words(width_s: f64) -> String {
    if width_s < 60.0 {
        duration_secs(width_s)
    } else if width_s < 3600.0 {
        format!("{} min", plain(width_s / 60.0))
    } else if width_s < 86_400.0 {
        format!("{} h", plain(width_s / 3600.0))
    } else {
        format!("{} d", plain(width_s / 86_400.0))
    }
}

/// The time axis's unit for a span: seconds, minutes, hours or days.
fn time_unit(span_s: f64) -> (f64, &'static str) {
    if span_s < 300.0 {
        (1.0, "s")
    } else if span_s < 3.0 * 3600.0 {
        (60.0, "min")
    } else if span_s < 3.0 * 86_400.0 {
        (3600.0, "h")
    } else {
        (86_400.0, "d")
    }
}

// ------------------------------------------------------------------ words

/// Whether a series measures seconds.
fn is_seconds(unit: &str) -> bool {
    unit == "s"
}

/// A parameter as the language writes it: a bare number for counts and
/// shapes, a quoted duration for seconds (`"600ms"`, `"4.2s"`).
fn param(value: f64, seconds: bool) -> String {
    let value = if value.abs() >= 1000.0 {
        value.round()
    } else {
        crate::format::round_3_sig(value)
    };
    if seconds {
        format!("\"{}\"", crate::format::duration_literal(value))
    } else {
        format!("{value}")
    }
}

/// A distribution in the language's terms, without clamps:
/// `lognormal median=600 sigma=0.6`.
fn kind_words(kind: &DistKind, seconds: bool) -> String {
    let p = |v: f64| param(v, seconds);
    let bare = |v: f64| param(v, false);
    match kind {
        DistKind::Fixed { value } => format!("fixed value={}", p(*value)),
        DistKind::Uniform { min, max } => format!("uniform min={} max={}", p(*min), p(*max)),
        DistKind::Normal { mean, stddev } => {
            format!("normal mean={} stddev={}", p(*mean), p(*stddev))
        }
        DistKind::LogNormal { median, sigma } => {
            format!("lognormal median={} sigma={}", p(*median), bare(*sigma))
        }
        DistKind::Exponential { mean } => format!("exponential mean={}", p(*mean)),
        DistKind::Gamma { shape, scale } => {
            format!("gamma shape={} scale={}", bare(*shape), p(*scale))
        }
        DistKind::Empirical { points } => format!("empirical table of {} points", points.len()),
    }
}

/// An observed amount: `"612"`, `"45.7"` tokens, `"612 ms"`.
fn amount(value: f64, seconds: bool) -> String {
    if seconds {
        duration_secs(crate::format::round_3_sig(value))
    } else if value.fract() == 0.0 || value.abs() >= 100.0 {
        num(value, 0)
    } else {
        num(value, 1)
    }
}

fn ks_words(value: f64) -> String {
    format!("{value:.4}")
}

fn critical_value(n: usize) -> f64 {
    KS_CRITICAL_1PCT / (n as f64).sqrt()
}

// ----------------------------------------------------------------- markdown

fn markdown(
    input: &ReportInput,
    sections: &[(&LengthSeries, &str, Option<Histogram>)],
    arrivals: Option<&ArrivalBins>,
) -> String {
    let mut md = format!("# {}\n\n", input.title.trim());
    if input.sources.is_empty() {
        md.push_str("No log files were read.\n\n");
    } else {
        md.push_str("Recorded traffic:\n\n");
        for (i, source) in input.sources.iter().enumerate() {
            md.push_str(&format!("{}. {}\n", i + 1, source.trim()));
        }
        md.push('\n');
    }
    md.push_str(
        "How to read the charts: the bars are the observed counts; the line with dots is \
         the count the fitted distribution expects in each bin, n × (F(hi) − F(lo)). Where \
         the dots follow the bars, the fit describes the traffic. Each fit is checked with \
         the Kolmogorov–Smirnov statistic D, the largest gap between the observed and the \
         fitted cumulative distribution, against its 1% critical value 1.63 / √n. The \
         parameters come from the same data, so the test rejects less often than 1% would \
         suggest: look at the chart as well.\n\n",
    );

    md.push_str("## Lengths\n\n");
    if sections.is_empty() {
        md.push_str("No lengths were profiled.\n\n");
    }
    for (series, chart, histogram) in sections {
        length_section(&mut md, series, chart, histogram.as_ref());
    }

    for (heading, lines) in &input.sections {
        md.push_str(&format!("## {}\n\n", heading.trim()));
        for line in lines {
            md.push_str(&format!("- {}\n", line.trim()));
        }
        md.push('\n');
    }

    md.push_str("## Arrivals\n\n");
    arrival_section(&mut md, input, arrivals);

    if !input.notes.is_empty() {
        md.push_str("## Notes\n\n");
        for note in &input.notes {
            md.push_str(&format!("- {}\n", note.trim()));
        }
        md.push('\n');
    }
    if let Some(kdl) = &input.fragment_kdl {
        md.push_str("## The profile in KDL\n\n```kdl\n");
        md.push_str(kdl.trim_end());
        md.push_str("\n```\n");
    }
    while md.ends_with("\n\n") {
        md.pop();
    }
    md
}

fn length_section(md: &mut String, series: &LengthSeries, chart: &str, h: Option<&Histogram>) {
    let seconds = is_seconds(&series.unit);
    md.push_str(&format!("### {}\n\n", series.title.trim()));
    match h {
        Some(h) => {
            let fitted = match &series.fit {
                Some(f) => format!(" and the {} fit", f.family.label()),
                None => String::new(),
            };
            md.push_str(&format!(
                "![{}: observed histogram{fitted}]({chart})\n\n",
                series.title.trim()
            ));
            if h.skipped > 0 {
                md.push_str(&format!(
                    "{} of {} values are not positive or not finite; they are not drawn, \
                     and the fit leaves them out too.\n\n",
                    num(h.skipped as f64, 0),
                    num((h.n + h.skipped) as f64, 0)
                ));
            }
        }
        None => md.push_str("No values were recorded, so there is no chart.\n\n"),
    }
    let Some(fit) = &series.fit else {
        if h.is_some() {
            md.push_str(
                "Not fitted: a fit needs at least two distinct positive values, so the \
                 profile has no distribution for this length.\n\n",
            );
        }
        return;
    };
    let critical = critical_value(fit.n);
    let words = kind_words(&fit.kind, seconds);
    let (parameters, clamps) = match &fit.kind {
        DistKind::Empirical { points } => {
            // No thousands separators: the list is itself comma-separated.
            let value = |v: f64| {
                if seconds {
                    amount(v, true)
                } else {
                    param(v, false)
                }
            };
            let equal = points.windows(2).all(|w| w[0].1 == w[1].1);
            let total: f64 = points.iter().map(|p| p.1).sum();
            let values: Vec<String> = points
                .iter()
                .map(|(v, w)| {
                    if equal || total <= 0.0 {
                        value(*v)
                    } else {
                        format!("{} ({})", value(*v), pct_of_fraction(w / total))
                    }
                })
                .collect();
            let weights = if equal { ", equal weights" } else { "" };
            (format!("{words}{weights}: {}", values.join(", ")), None)
        }
        _ => (
            format!("`{words}`"),
            Some(format!(
                "`min={} max={}` (the observed range)",
                param(fit.min, seconds),
                param(fit.max, seconds)
            )),
        ),
    };
    let mut rows = vec![
        ("family", fit.family.label().to_string()),
        ("parameters", parameters),
    ];
    rows.extend(clamps.map(|c| ("clamps", c)));
    rows.extend([
        ("KS D", ks_words(fit.ks_statistic)),
        (
            "1% critical value",
            format!("{} (1.63 / √{})", ks_words(critical), num(fit.n as f64, 0)),
        ),
        (
            "accepted",
            if fit.accepted { "yes" } else { "no" }.to_string(),
        ),
        ("n", num(fit.n as f64, 0)),
        ("mean", amount(fit.mean, seconds)),
        ("p50", amount(fit.p50, seconds)),
        ("p99", amount(fit.p99, seconds)),
        ("min", amount(fit.min, seconds)),
        ("max", amount(fit.max, seconds)),
    ]);
    md.push_str("| statistic | value |\n|---|---|\n");
    for (name, value) in rows {
        md.push_str(&format!("| {name} | {value} |\n"));
    }
    md.push('\n');
    if fit.accepted {
        md.push_str(&format!(
            "The {} fit passes the KS test at 1% (D = {} ≤ {}); the profile uses it.",
            fit.family.label(),
            ks_words(fit.ks_statistic),
            ks_words(critical)
        ));
        let drawn = h.and_then(|h| Some((h.n, h.expected.as_ref()?.iter().sum::<f64>())));
        if let Some((n, inside)) = drawn {
            let outside = 1.0 - inside / n as f64;
            if outside >= 0.001 {
                md.push_str(&format!(
                    " It puts {} of draws outside the observed {} to {}; the `min=`/`max=` \
                     clamps turn them into exactly the minimum or the maximum.",
                    pct_of_fraction(outside),
                    amount(fit.min, seconds),
                    amount(fit.max, seconds)
                ));
            }
        }
        md.push_str("\n\n");
    } else {
        md.push_str(&format!(
            "No family passes the KS test at 1% (the best has D = {} > {}), so the profile \
             uses the empirical table above instead; the chart draws that table.\n\n",
            ks_words(fit.ks_statistic),
            ks_words(critical),
        ));
    }
}

fn arrival_section(md: &mut String, input: &ReportInput, bins: Option<&ArrivalBins>) {
    match bins {
        Some(bins) => {
            md.push_str(&format!(
                "![arrivals per second over time]({ARRIVALS_FILE})\n\n"
            ));
            let drawn = bins.logs.len().min(MAX_ARRIVAL_PANELS);
            md.push_str(&format!(
                "Arrivals per second in bins of {}, each log from its own first arrival{}. \
                 The last bin of a log can read low: the log ends inside it.",
                width_words(bins.width_s),
                if bins.logs.len() > 1 {
                    " (one panel per log)"
                } else {
                    ""
                },
            ));
            if drawn < bins.logs.len() {
                md.push_str(&format!(
                    " Only the first {drawn} of {} logs with arrivals are drawn.",
                    bins.logs.len()
                ));
            }
            md.push_str("\n\n");
        }
        None => md.push_str(
            "No log has arrivals spread over time (no timestamps, or all at one instant), \
             so there is no chart.\n\n",
        ),
    }
    let Some(fit) = &input.arrival_fit else {
        md.push_str(
            "Not fitted: an arrival fit needs at least three timestamps spread over time.\n\n",
        );
        return;
    };
    let rows = [
        ("arrivals", num(fit.n as f64, 0)),
        ("mean rate", format!("{} arrivals/s", rps(fit.mean_rps))),
        (
            "busiest minute",
            format!("{} arrivals/s", rps(fit.peak_rps_1m)),
        ),
        (
            "busiest 10 s",
            format!("{} arrivals/s", rps(fit.peak_rps_10s)),
        ),
        ("CV of the gaps", format!("{:.2}", fit.cv)),
        ("recommended", format!("`arrival {}`", fit.process)),
    ];
    md.push_str("| statistic | value |\n|---|---|\n");
    for (name, value) in rows {
        md.push_str(&format!("| {name} | {value} |\n"));
    }
    md.push_str(
        "\nA Poisson process has gaps with CV 1: `poisson` is recommended for a CV within \
         0.8–1.25, else `gamma` with the measured CV (bursty above 1, regular below). The \
         busiest windows are what an open-loop search must reach to cover the peaks, not \
         only the mean.\n\n",
    );
}

// ------------------------------------------------------------------ charts

const WIDTH: u32 = 1100;
const HISTOGRAM_HEIGHT: u32 = 560;
const TITLE_HEIGHT: u32 = 40;
const PANEL_HEIGHT: u32 = 240;
/// The strip right of the plot that holds its legend.
const LEGEND_WIDTH: i32 = 340;

const BAR_COLOR: RGBColor = palette::BLUE;
const FIT_COLOR: RGBColor = palette::RED;
const MEAN_COLOR: RGBColor = palette::GREEN;
const PEAK_1M_COLOR: RGBColor = palette::ORANGE;
const PEAK_10S_COLOR: RGBColor = palette::PURPLE;

fn svg_or_fallback(drawn: DrawResult<String>) -> String {
    crate::svg::or_fallback(WIDTH, drawn)
}

/// A log10 axis over `[lo, hi]` (positive) with ticks at 1-2-5 of each
/// decade, or denser round values when the range is under a decade.
fn log_axis(lo: f64, hi: f64) -> TickedAxis {
    let pad = 0.02 * (hi.log10() - lo.log10()).max(0.1);
    log10_axis(lo.log10() - pad, hi.log10() + pad)
}

/// Where a profile chart's legend starts (higher than a card's: no panel
/// titles here).
const LEGEND_TOP: i32 = 40;

fn histogram_svg(series: &LengthSeries, h: &Histogram) -> DrawResult<String> {
    let seconds = is_seconds(&series.unit);
    let (first, last) = (h.edges[0], h.edges[h.edges.len() - 1]);
    let x_axis = match h.scale {
        Scale::Log => log_axis(first, last),
        Scale::Linear => {
            let pad = 0.02 * (last - first);
            let (lo, hi) = (first - pad, last + pad);
            TickedAxis {
                lo,
                hi,
                ticks: linear_ticks(lo, hi, 8.0),
            }
        }
    };
    let scale = h.scale;
    let x_label = move |x: &f64| {
        let value = match scale {
            Scale::Linear => *x,
            Scale::Log => 10f64.powf(*x),
        };
        if seconds {
            duration_secs(crate::format::round_3_sig(value))
        } else {
            plain(crate::format::round_3_sig(value))
        }
    };
    let highest = h
        .counts
        .iter()
        .map(|c| *c as f64)
        .chain(h.expected.iter().flatten().copied())
        .fold(0.0, f64::max);
    let y_hi = if highest > 0.0 { highest * 1.1 } else { 1.0 };
    let unit = if seconds {
        "seconds".to_string()
    } else {
        series.unit.clone()
    };
    let x_desc = match h.scale {
        Scale::Log => format!("{unit} (log scale, geometric bins)"),
        Scale::Linear => unit,
    };

    let mut legend = vec![(
        Swatch::Bar(BAR_COLOR),
        format!(
            "observed: {} values, {} bins",
            num(h.n as f64, 0),
            h.counts.len()
        ),
    )];
    match (&series.fit, &h.expected) {
        (Some(fit), Some(_)) => {
            legend.push((
                Swatch::LineWithDot(FIT_COLOR),
                kind_words(&fit.kind, seconds),
            ));
            legend.push((Swatch::Text, "expected count per bin".to_string()));
            let who = if fit.accepted { "" } else { "best family's " };
            legend.push((
                Swatch::Text,
                format!(
                    "{who}KS D = {} (1% critical {})",
                    ks_words(fit.ks_statistic),
                    ks_words(critical_value(fit.n))
                ),
            ));
            legend.push((
                Swatch::Text,
                if fit.accepted {
                    "accepted".to_string()
                } else {
                    "rejected → empirical table".to_string()
                },
            ));
        }
        (Some(_), None) => legend.push((Swatch::Text, "fit has no curve to draw".to_string())),
        (None, _) => legend.push((
            Swatch::Text,
            "not fitted (fewer than 2 distinct values)".to_string(),
        )),
    }

    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HISTOGRAM_HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let title = format!(
            "{}: observed counts and the fitted distribution",
            series.title
        );
        let root = root.titled(&title, (FONT, 22))?;
        let (plot, legend_area) = root.split_horizontally(WIDTH as i32 - LEGEND_WIDTH);
        let mut chart = ChartBuilder::on(&plot)
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(76)
            .build_cartesian_2d(x_axis, 0f64..y_hi)?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .label_style((FONT, 13))
            .axis_desc_style((FONT, 14))
            .x_desc(x_desc)
            .y_desc("count per bin")
            .x_label_formatter(&x_label)
            .y_label_formatter(&|y| plain(crate::format::round_3_sig(*y)))
            .draw()?;
        chart.draw_series(
            h.counts
                .iter()
                .enumerate()
                .filter(|(_, c)| **c > 0)
                .map(|(i, c)| {
                    Rectangle::new(
                        [
                            (h.axis(h.edges[i]), 0.0),
                            (h.axis(h.edges[i + 1]), *c as f64),
                        ],
                        BAR_COLOR.mix(0.55).filled(),
                    )
                }),
        )?;
        if let Some(expected) = &h.expected {
            let points: Vec<(f64, f64)> = expected
                .iter()
                .enumerate()
                .map(|(i, e)| (h.axis(h.center(i)), *e))
                .collect();
            line_with_points(&mut chart, points, FIT_COLOR)?;
        }
        draw_legend(&legend_area, &legend, LEGEND_TOP)?;
        root.present()?;
    }
    Ok(svg)
}

fn arrivals_svg(bins: &ArrivalBins, fit: Option<&ArrivalFit>) -> DrawResult<String> {
    let logs = &bins.logs[..bins.logs.len().min(MAX_ARRIVAL_PANELS)];
    let width_s = bins.width_s;
    let (unit_s, unit) = time_unit(bins.span_s);
    // The x axis reaches the end of the longest log's last bin.
    let longest = logs.iter().map(|(_, c)| c.len()).max().unwrap_or(1);
    let x_hi = longest as f64 * width_s / unit_s;
    let x_axis = || TickedAxis {
        lo: 0.0,
        hi: x_hi,
        ticks: linear_ticks(0.0, x_hi, 10.0),
    };
    let lines: Vec<(Swatch, String, f64)> = fit
        .map(|f| {
            vec![
                (
                    Swatch::Line(MEAN_COLOR),
                    format!("mean {} arrivals/s", rps(f.mean_rps)),
                    f.mean_rps,
                ),
                (
                    Swatch::Dashed(PEAK_1M_COLOR),
                    format!("busiest minute {} arrivals/s", rps(f.peak_rps_1m)),
                    f.peak_rps_1m,
                ),
                (
                    Swatch::Dashed(PEAK_10S_COLOR),
                    format!("busiest 10 s {} arrivals/s", rps(f.peak_rps_10s)),
                    f.peak_rps_10s,
                ),
            ]
        })
        .unwrap_or_default();
    let highest = logs
        .iter()
        .flat_map(|(_, c)| c.iter().map(|n| *n as f64 / width_s))
        .chain(lines.iter().map(|l| l.2).filter(|r| r.is_finite()))
        .fold(0.0, f64::max);
    let y_hi = if highest > 0.0 { highest * 1.1 } else { 1.0 };
    let mut legend = vec![(
        Swatch::Bar(BAR_COLOR),
        format!("arrivals/s per {} bin", width_words(width_s)),
    )];
    legend.extend(lines.iter().map(|(s, label, _)| (*s, label.clone())));
    if fit.is_none() {
        legend.push((Swatch::Text, "no arrival fit".to_string()));
    }

    let height = TITLE_HEIGHT + PANEL_HEIGHT * logs.len() as u32;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE)?;
        let root = root.titled("arrival rate over time", (FONT, 22))?;
        let (plots, legends) = root.split_horizontally(WIDTH as i32 - LEGEND_WIDTH);
        let panels = plots.split_evenly((logs.len(), 1));
        for (k, ((log, counts), area)) in logs.iter().zip(panels).enumerate() {
            let mut chart = ChartBuilder::on(&area)
                .margin(10)
                .x_label_area_size(36)
                .y_label_area_size(76)
                .caption(format!("log {}", log + 1), (FONT, 16))
                .build_cartesian_2d(x_axis(), 0f64..y_hi)?;
            chart
                .configure_mesh()
                .light_line_style(TRANSPARENT)
                .label_style((FONT, 13))
                .axis_desc_style((FONT, 14))
                .x_desc(format!("{unit} since the log's first arrival"))
                .y_desc("arrivals/s")
                .x_label_formatter(&|x| plain(*x))
                .y_label_formatter(&|y| plain(crate::format::round_3_sig(*y)))
                .draw()?;
            chart.draw_series(counts.iter().enumerate().filter(|(_, c)| **c > 0).map(
                |(i, c)| {
                    let x0 = i as f64 * width_s / unit_s;
                    Rectangle::new(
                        [(x0, 0.0), (x0 + width_s / unit_s, *c as f64 / width_s)],
                        BAR_COLOR.mix(0.55).filled(),
                    )
                },
            ))?;
            for (swatch, _, rate) in &lines {
                let points = vec![(0.0, *rate), (x_hi, *rate)];
                match *swatch {
                    Swatch::Dashed(c) => {
                        chart.draw_series(DashedLineSeries::new(
                            points,
                            8,
                            5,
                            c.stroke_width(2),
                        ))?;
                    }
                    Swatch::Line(c) => {
                        chart.draw_series(LineSeries::new(points, c.stroke_width(2)))?;
                    }
                    _ => {}
                }
            }
            if k == 0 {
                draw_legend(&legends, &legend, LEGEND_TOP)?;
            }
        }
        root.present()?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_distr::{Distribution, Exp, LogNormal, Normal};

    use super::*;
    use crate::profile::fit::{fit_arrivals, fit_lengths};

    type Rng = rand::rngs::Xoshiro256PlusPlus;

    fn draw(d: impl Distribution<f64>, n: usize, seed: u64) -> Vec<f64> {
        let mut rng = Rng::seed_from_u64(seed);
        (0..n).map(|_| d.sample(&mut rng)).collect()
    }

    fn series(title: &str, stem: &str, unit: &str, values: Vec<f64>) -> LengthSeries {
        LengthSeries {
            title: title.to_string(),
            file_stem: stem.to_string(),
            unit: unit.to_string(),
            fit: fit_lengths(&values),
            values,
        }
    }

    /// Poisson arrivals at `rate` per second from `start`.
    fn poisson(rate: f64, n: usize, start: f64, seed: u64) -> Vec<f64> {
        draw(Exp::new(rate).unwrap(), n, seed)
            .into_iter()
            .scan(start, |t, g| {
                *t += g;
                Some(*t)
            })
            .collect()
    }

    fn sample_input() -> ReportInput {
        // Token counts are whole numbers, as logs record them.
        let input: Vec<f64> = draw(LogNormal::new(600f64.ln(), 0.6).unwrap(), 3000, 1)
            .into_iter()
            .map(f64::round)
            .collect();
        let output: Vec<f64> = draw(Normal::new(220.0, 30.0).unwrap(), 3000, 2)
            .into_iter()
            .map(f64::round)
            .collect();
        let think = draw(Exp::new(1.0 / 4.0).unwrap(), 800, 3);
        let arrivals = vec![poisson(4.0, 2000, 1000.0, 4), poisson(2.0, 500, -3.0, 5)];
        ReportInput {
            title: "Profile of two logs".to_string(),
            sources: vec![
                "a.jsonl: 2,000 requests (request log)".to_string(),
                "b.jsonl: 500 requests (request log)".to_string(),
            ],
            lengths: vec![
                series("input tokens", "input-tokens", "tokens", input),
                series("output tokens", "output-tokens", "tokens", output),
                series("think time", "think-time", "s", think),
            ],
            arrival_fit: fit_arrivals(&arrivals[0]),
            arrivals,
            sections: vec![],
            notes: vec!["sessions were found in a.jsonl only".to_string()],
            fragment_kdl: Some(
                "workload \"profiled\" {\n    input-tokens lognormal median=600 sigma=0.6\n}\n"
                    .to_string(),
            ),
        }
    }

    /// Checks that tags nest: every opened element is closed in order.
    fn assert_balanced(svg: &str) {
        let mut stack: Vec<String> = Vec::new();
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            let end = rest[start..].find('>').expect("unterminated tag") + start;
            let tag = &rest[start + 1..end];
            rest = &rest[end + 1..];
            if tag.starts_with('?') || tag.starts_with('!') || tag.ends_with('/') {
                continue;
            }
            let name = tag
                .trim_start_matches('/')
                .split_whitespace()
                .next()
                .unwrap();
            if tag.starts_with('/') {
                assert_eq!(stack.pop().as_deref(), Some(name), "in {svg:.200}");
            } else {
                stack.push(name.to_string());
            }
        }
        assert!(stack.is_empty(), "unclosed: {stack:?}");
    }

    /// Rectangles in the bar color: the bars and the legend's swatch.
    fn bar_rects(svg: &str) -> usize {
        svg.split("<rect")
            .skip(1)
            .filter(|r| {
                r.split("/>")
                    .next()
                    .is_some_and(|r| r.contains("fill=\"#1F77B4\""))
            })
            .count()
    }

    fn file<'a>(files: &'a [ReportFile], name: &str) -> &'a str {
        &files
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| {
                panic!(
                    "no {name} in {:?}",
                    files.iter().map(|f| &f.name).collect::<Vec<_>>()
                )
            })
            .contents
    }

    #[test]
    fn renders_deterministically_one_svg_per_chart() {
        let input = sample_input();
        let files = render(&input);
        assert_eq!(files, render(&input));
        let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "profile.md",
                "input-tokens.svg",
                "output-tokens.svg",
                "think-time.svg",
                "arrivals.svg"
            ]
        );
        for f in &files[1..] {
            assert!(f.contents.starts_with("<svg"), "{}", f.name);
            assert!(f.contents.trim_end().ends_with("</svg>"), "{}", f.name);
            assert_balanced(&f.contents);
        }
    }

    #[test]
    fn histogram_svg_has_a_bar_per_nonempty_bin_and_the_fitted_curve() {
        let input = sample_input();
        let files = render(&input);
        for s in &input.lengths {
            let h = Histogram::of(&s.values, s.fit.as_ref()).unwrap();
            let svg = file(&files, &format!("{}.svg", s.file_stem));
            let filled = h.counts.iter().filter(|c| **c > 0).count();
            assert_eq!(bar_rects(svg), filled + 1, "{}", s.title);
            // The expected counts: a line through every bin and the legend's
            // swatch, in the fit's color; a dot per bin plus the legend's.
            let fit_lines: Vec<usize> = svg
                .split("<polyline")
                .skip(1)
                .filter(|l| l.contains("stroke=\"#D62728\""))
                .map(|l| l.split("/>").next().unwrap_or("").matches(',').count())
                .collect();
            assert_eq!(fit_lines, [h.counts.len(), 2], "{}", s.title);
            assert_eq!(svg.matches("<circle").count(), h.counts.len() + 1);
        }
    }

    #[test]
    fn expected_counts_of_a_good_fit_sum_to_about_n() {
        let input = sample_input();
        for s in &input.lengths {
            let fit = s.fit.as_ref().unwrap();
            assert!(fit.accepted, "{}: {fit:?}", s.title);
            let h = Histogram::of(&s.values, Some(fit)).unwrap();
            let expected = h.expected.as_ref().unwrap();
            let total: f64 = expected.iter().sum();
            assert!(
                (total - h.n as f64).abs() <= 0.03 * h.n as f64,
                "{}: {total} vs {}",
                s.title,
                h.n
            );
            // And bin by bin the curve follows the bars, within the noise of
            // a count (Poisson: sd = √expected).
            for (i, (c, e)) in h.counts.iter().zip(expected).enumerate() {
                let gap = (*c as f64 - e).abs();
                assert!(
                    gap <= 4.0 * e.sqrt() + 2.0,
                    "{} bin {i}: {c} vs {e}",
                    s.title
                );
            }
        }
    }

    #[test]
    fn log_bins_for_wide_ranges_linear_for_narrow_ones() {
        let wide = Histogram::of(&[1.0, 10.0, 100.0, 1000.0, 5000.0], None).unwrap();
        assert_eq!(wide.scale, Scale::Log);
        // Half-integer edges, each bin wider than the last (geometric).
        assert!(
            wide.edges.iter().all(|e| e.fract() == 0.5),
            "{:?}",
            wide.edges
        );
        let widths: Vec<f64> = wide.edges.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(widths.windows(2).all(|w| w[1] >= w[0]), "{widths:?}");
        assert_eq!(wide.counts.iter().sum::<u64>(), 5);

        let narrow = Histogram::of(&[100.0, 150.0, 400.0, 1900.0], None).unwrap();
        assert_eq!(narrow.scale, Scale::Linear);
        let widths: Vec<f64> = narrow.edges.windows(2).map(|w| w[1] - w[0]).collect();
        assert!(widths.iter().all(|w| *w == widths[0]) && widths[0] >= 1.0);
        assert_eq!(narrow.edges[0], 99.5);

        // Times in seconds (not whole): geometric edges from min to max.
        let times = Histogram::of(&[0.05, 0.3, 2.5, 7.25], None).unwrap();
        assert_eq!(times.scale, Scale::Log);
        assert_eq!((times.edges[0], *times.edges.last().unwrap()), (0.05, 7.25));
        assert_eq!(times.counts.len(), MIN_BINS);
        assert_eq!(times.counts.iter().sum::<u64>(), 4);

        // Every value lands in a bin, the extremes included; 6,001 values
        // get the full bin count, 100 get Rice's 2·∛n.
        let many: Vec<f64> = (1000..=7000).map(f64::from).collect();
        let h = Histogram::of(&many, None).unwrap();
        assert_eq!(h.scale, Scale::Linear);
        assert_eq!(
            (h.counts.iter().sum::<u64>(), h.counts.len()),
            (6001, MAX_BINS)
        );
        assert!(h.counts.iter().all(|c| *c > 0));
        let few: Vec<f64> = (1..=100).map(|i| f64::from(i) * 1.5).collect();
        let h = Histogram::of(&few, None).unwrap();
        assert_eq!((h.counts.iter().sum::<u64>(), h.counts.len()), (100, 10));
    }

    #[test]
    fn readable_bin_widths() {
        // 60–120 bins over the span.
        for span in [7.0, 59.0, 600.0, 3600.0, 5000.0, 86_400.0, 30.0 * 86_400.0] {
            let w = readable_width(span / MAX_ARRIVAL_BINS);
            let bins = span / w;
            assert!((60.0..=120.0).contains(&bins), "{span}: {w} → {bins}");
        }
        assert_eq!(readable_width(0.9), 1.0);
        assert_eq!(readable_width(45.0), 60.0);
        assert_eq!(readable_width(4.0), 5.0);
        assert_eq!(width_words(10.0), "10 s");
        assert_eq!(width_words(300.0), "5 min");
        assert_eq!(width_words(0.5), "500 ms");
    }

    #[test]
    fn arrivals_are_binned_per_log_and_drawn_in_stacked_panels() {
        let input = sample_input();
        let bins = ArrivalBins::of(&input.arrivals).unwrap();
        assert_eq!(bins.logs.len(), 2);
        for ((_, counts), ts) in bins.logs.iter().zip(&input.arrivals) {
            assert_eq!(counts.iter().sum::<u64>() as usize, ts.len());
            assert!(counts.len() <= MAX_ARRIVAL_BINS as usize);
        }
        let files = render(&input);
        let svg = file(&files, ARRIVALS_FILE);
        let filled: usize = bins
            .logs
            .iter()
            .map(|(_, c)| c.iter().filter(|n| **n > 0).count())
            .sum();
        assert_eq!(bar_rects(svg), filled + 1);
        assert!(svg.contains(">\nlog 1\n<") && svg.contains(">\nlog 2\n<"));
        // Per panel a solid mean line and two dashed peaks; one legend.
        let fit = input.arrival_fit.as_ref().unwrap();
        assert!(svg.contains(&format!("mean {} arrivals/s", rps(fit.mean_rps))));
        assert!(svg.contains("busiest minute") && svg.contains("busiest 10 s"));
        assert_eq!(svg.matches("\nmean ").count(), 1);
    }

    #[test]
    fn empty_inputs_do_not_panic_and_say_why() {
        let input = ReportInput {
            title: "Nothing".to_string(),
            sources: vec![],
            lengths: vec![
                series("input tokens", "input-tokens", "tokens", vec![]),
                series("output tokens", "output-tokens", "tokens", vec![7.0, 7.0]),
                series("think time", "think-time", "s", vec![f64::NAN, -1.0, 0.0]),
            ],
            arrivals: vec![vec![], vec![5.0], vec![f64::NAN]],
            arrival_fit: None,
            sections: vec![],
            notes: vec![],
            fragment_kdl: None,
        };
        let files = render(&input);
        let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        // A constant length still has a one-bin chart; nothing else does.
        assert_eq!(names, ["profile.md", "output-tokens.svg"]);
        let md = &files[0].contents;
        assert!(md.contains("No log files were read."));
        assert!(md.contains("No values were recorded, so there is no chart."));
        assert!(md.contains("Not fitted: a fit needs at least two distinct positive values,"));
        assert!(md.contains("No log has arrivals spread over time"));
        assert!(md.contains("Not fitted: an arrival fit needs"));
        assert!(!md.contains("```kdl"));
        assert_balanced(&files[1].contents);

        let bare = render(&ReportInput {
            title: String::new(),
            sources: vec![],
            lengths: vec![],
            arrivals: vec![],
            arrival_fit: None,
            sections: vec![],
            notes: vec![],
            fragment_kdl: None,
        });
        assert_eq!(bare.len(), 1);
        assert!(bare[0].contents.contains("No lengths were profiled."));
    }

    #[test]
    fn markdown_states_each_fit_and_links_its_chart() {
        let mut input = sample_input();
        // A mixture no family fits: the page says the empirical table is used.
        let mut mixture = draw(Normal::new(100.0, 5.0).unwrap(), 2000, 6);
        mixture.extend(draw(Normal::new(2000.0, 50.0).unwrap(), 2000, 7));
        let mixture: Vec<f64> = mixture.into_iter().map(f64::round).collect();
        input
            .lengths
            .push(series("output tokens", "output-tokens", "tokens", mixture));
        let files = render(&input);
        let md = &files[0].contents;
        for link in [
            "(input-tokens.svg)",
            "(output-tokens.svg)",
            "(think-time.svg)",
            "(output-tokens-2.svg)",
            "(arrivals.svg)",
        ] {
            assert!(md.contains(link), "{link}");
        }
        assert!(md.contains("| family | lognormal |"));
        assert!(md.contains("`lognormal median="));
        assert!(md.contains("| family | normal |"));
        assert!(md.contains("`exponential mean=\""), "{md}");
        assert!(md.contains("so the profile uses the empirical table above instead"));
        assert!(md.contains("| parameters | empirical table of "));
        assert!(md.contains("| accepted | no |"));
        assert!(md.contains("1. a.jsonl: 2,000 requests (request log)"));
        assert!(md.contains("- sessions were found in a.jsonl only"));
        assert!(md.contains("```kdl\nworkload \"profiled\" {"));
        assert!(md.contains("`arrival "));
        assert!(md.ends_with("```\n"));
    }

    #[test]
    fn parameters_read_as_the_language_writes_them() {
        let ln = DistKind::LogNormal {
            median: 612.3456,
            sigma: 0.61234,
        };
        assert_eq!(kind_words(&ln, false), "lognormal median=612 sigma=0.612");
        let exp = DistKind::Exponential { mean: 0.61234 };
        assert_eq!(kind_words(&exp, true), "exponential mean=\"612ms\"");
        let g = DistKind::Gamma {
            shape: 2.5,
            scale: 4.123,
        };
        assert_eq!(kind_words(&g, true), "gamma shape=2.5 scale=\"4.12s\"");
        assert_eq!(param(61_234.4, false), "61234");
        assert_eq!(
            chart_names(&[series("x", "../a b", "tokens", vec![])]),
            ["---a-b.svg"]
        );
    }
}
