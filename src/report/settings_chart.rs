//! The summary's charts of a sweep's settings: Cr_open per setting with
//! its range (highest conclusive pass to lowest conclusive failure; an
//! arrow where no rate failed), one colour per SLO; and the Pareto view
//! vLLM plots, output tok/s per user against tok/s per replica at every
//! closed level, one line per setting.

use plotters::prelude::*;

use crate::analyze::settings::SettingsComparison;
use crate::svg::{DrawResult, FONT, Swatch, draw_legend, line_with_points, or_fallback, palette};

use super::chart::Chart;

const WIDTH: u32 = 1000;
const HEIGHT: u32 = 560;
const LEGEND_WIDTH: i32 = 280;
const COLORS: [RGBColor; 8] = [
    palette::BLUE,
    palette::ORANGE,
    palette::GREEN,
    palette::PURPLE,
    palette::BROWN,
    palette::PINK,
    palette::CYAN,
    palette::GREY,
];

/// `settings--<target>--<workload>--cr-open.svg` and `…--pareto.svg`.
pub fn file_names(s: &SettingsComparison) -> [String; 2] {
    let stem = format!(
        "settings--{}--{}",
        super::sanitize_file_part(&s.target),
        super::sanitize_file_part(&s.workload)
    );
    [
        format!("{stem}--cr-open.svg"),
        format!("{stem}--pareto.svg"),
    ]
}

/// Both charts of one comparison.
pub fn charts(s: &SettingsComparison) -> Vec<Chart> {
    let [cr_open, pareto] = file_names(s);
    vec![
        Chart {
            file_name: cr_open,
            svg: or_fallback(WIDTH, cr_open_chart(s)),
        },
        Chart {
            file_name: pareto,
            svg: or_fallback(WIDTH, pareto_chart(s)),
        },
    ]
}

fn label(s: &SettingsComparison, i: usize) -> String {
    s.rows
        .get(i)
        .map(|r| r.values.join(", "))
        .unwrap_or_default()
}

fn cr_open_chart(s: &SettingsComparison) -> DrawResult<String> {
    let slos: Vec<String> = s
        .rows
        .first()
        .map(|r| r.cr_open.iter().map(|c| c.slo.clone()).collect())
        .unwrap_or_default();
    let top = s
        .rows
        .iter()
        .flat_map(|r| &r.cr_open)
        .flat_map(|c| [c.rps, c.range[0], c.range[1]])
        .flatten()
        .fold(0.0, f64::max);
    let y_hi = if top > 0.0 { top * 1.15 } else { 1.0 };
    let n = s.rows.len().max(1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let (plot, legend) = root.split_horizontally(WIDTH as i32 - LEGEND_WIDTH);
        let title = format!(
            "{} × {}: Cr_open per setting ({}), open loop",
            s.target,
            s.workload,
            s.names.join(", ")
        );
        let mut chart = ChartBuilder::on(&plot)
            .caption(title, (FONT, 18))
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(60)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0f64..y_hi)?;
        chart
            .configure_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    label(s, i as usize)
                } else {
                    String::new()
                }
            })
            .x_desc(s.names.join(", "))
            .y_desc("Cr_open (req/s)")
            .label_style((FONT, 13))
            .draw()?;
        let mut legend_items = Vec::new();
        for (k, slo) in slos.iter().enumerate() {
            let color = COLORS[k % COLORS.len()];
            // Side by side when several SLOs share a setting.
            let offset = (k as f64 - (slos.len() as f64 - 1.0) / 2.0) * 0.08;
            for (i, row) in s.rows.iter().enumerate() {
                let Some(c) = row.cr_open.iter().find(|c| c.slo == *slo) else {
                    continue;
                };
                let x = i as f64 + offset;
                let low = c.range[0].or(c.rps).unwrap_or(0.0);
                let high = c.range[1].unwrap_or(y_hi);
                chart.draw_series(std::iter::once(PathElement::new(
                    vec![(x, low), (x, high)],
                    color.stroke_width(2),
                )))?;
                if c.range[1].is_none() {
                    // No rate failed: the range is open upwards.
                    chart.draw_series(std::iter::once(TriangleMarker::new(
                        (x, high),
                        6,
                        color.filled(),
                    )))?;
                }
                if let Some(rps) = c.rps {
                    chart.draw_series(std::iter::once(Circle::new((x, rps), 5, color.filled())))?;
                }
            }
            legend_items.push((
                Swatch::LineWithDot(color),
                format!("`{slo}`: Cr_open, range"),
            ));
        }
        draw_legend(&legend, &legend_items, 40)?;
        root.present()?;
    }
    Ok(svg)
}

fn pareto_chart(s: &SettingsComparison) -> DrawResult<String> {
    let points: Vec<&[f64; 2]> = s.rows.iter().flat_map(|r| &r.per_user_vs_replica).collect();
    let x_hi = points.iter().map(|p| p[0]).fold(0.0, f64::max).max(1.0) * 1.1;
    let y_hi = points.iter().map(|p| p[1]).fold(0.0, f64::max).max(1.0) * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)?;
        let (plot, legend) = root.split_horizontally(WIDTH as i32 - LEGEND_WIDTH);
        let title = format!(
            "{} × {}: output tok/s per user vs per replica, closed loop",
            s.target, s.workload
        );
        let mut chart = ChartBuilder::on(&plot)
            .caption(title, (FONT, 18))
            .margin(12)
            .x_label_area_size(50)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..x_hi, 0f64..y_hi)?;
        chart
            .configure_mesh()
            .x_desc("output tok/s per user (interactivity)")
            .y_desc("output tok/s per replica (throughput)")
            .label_style((FONT, 13))
            .draw()?;
        let mut legend_items = Vec::new();
        for (i, row) in s.rows.iter().enumerate() {
            if row.per_user_vs_replica.is_empty() {
                continue;
            }
            let color = COLORS[i % COLORS.len()];
            let series = row
                .per_user_vs_replica
                .iter()
                .map(|p| (p[0], p[1]))
                .collect();
            line_with_points(&mut chart, series, color)?;
            legend_items.push((Swatch::LineWithDot(color), label(s, i)));
        }
        draw_legend(&legend, &legend_items, 40)?;
        root.present()?;
    }
    Ok(svg)
}
