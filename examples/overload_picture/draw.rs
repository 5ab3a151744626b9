//! The overload picture: two panels stacked, the queue depth over time above and the
//! oldest job's age below, one line per policy (a plotters `LineSeries`, so one SVG
//! `<polyline>` per line and panel, with a point per sample), and the 70 % and 90 %
//! marks as dashed lines in the depth panel.

use std::error::Error;
use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::simulation::{Point, Series, MARK_70, MARK_90, SECONDS};

/// The colour of the `i`-th series' lines (cycled).
pub const COLORS: [RGBColor; 5] = [
    RGBColor(214, 39, 40),   // red
    RGBColor(31, 119, 180),  // blue
    RGBColor(255, 127, 14),  // orange
    RGBColor(44, 160, 44),   // green
    RGBColor(148, 103, 189), // purple
];

/// The picture's size in pixels.
pub const SIZE: (u32, u32) = (1_000, 860);

const MARK_COLOR: RGBColor = RGBColor(110, 110, 110);

/// Draw `series` into an SVG file at `path`.
pub fn draw(series: &[Series], path: &Path) -> Result<(), Box<dyn Error>> {
    let root = SVGBackend::new(path, SIZE).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "Image service: 600 jobs/s arrive, 350/s served, 10,000 slots (virtual time)",
        ("sans-serif", 20),
    )?;
    let (top, bottom) = root.split_vertically(SIZE.1 / 2 - 15);
    let marks = [(MARK_70, "70 %"), (MARK_90, "90 %")];
    let depth_max = series
        .iter()
        .flat_map(|s| &s.points)
        .map(|p| p.depth)
        .max()
        .unwrap_or(0)
        .max(MARK_90);
    panel(
        &top,
        series,
        "queue depth (jobs)",
        round_up(depth_max as f64 * 1.05, 1_000.0),
        |p| p.depth as f64,
        &marks,
    )?;
    let age_max = series
        .iter()
        .flat_map(|s| &s.points)
        .map(|p| p.oldest_age_secs)
        .fold(1.0, f64::max);
    panel(
        &bottom,
        series,
        "oldest job's age (s)",
        round_up(age_max * 1.05, 5.0),
        |p| p.oldest_age_secs,
        &[],
    )?;
    root.present()?;
    Ok(())
}

/// One panel: a line per series of `value` over time, and dashed horizontal `marks`.
fn panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    series: &[Series],
    y_desc: &str,
    y_max: f64,
    value: fn(&Point) -> f64,
    marks: &[(usize, &str)],
) -> Result<(), Box<dyn Error>> {
    let x_max = SECONDS as f64;
    let mut chart = ChartBuilder::on(area)
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(80)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("time (s)")
        .y_desc(y_desc)
        .label_style(("sans-serif", 15))
        .axis_desc_style(("sans-serif", 17))
        .x_labels(13)
        .x_label_formatter(&|t| format!("{t:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;
    for &(mark, label) in marks {
        let y = mark as f64;
        chart.draw_series(DashedLineSeries::new(
            [(0.0, y), (x_max, y)],
            8,
            5,
            MARK_COLOR.stroke_width(1),
        ))?;
        let style = TextStyle::from(("sans-serif", 16).into_font())
            .color(&MARK_COLOR)
            .pos(Pos::new(HPos::Left, VPos::Bottom));
        chart.draw_series(std::iter::once(Text::new(
            label.to_owned(),
            (1.0, y),
            style,
        )))?;
    }
    for (i, s) in series.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                s.points.iter().map(|p| (p.t_secs, value(p))),
                color.stroke_width(2),
            ))?
            .label(s.policy)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(2)));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.4))
        .label_font(("sans-serif", 16))
        .draw()?;
    Ok(())
}

fn round_up(value: f64, step: f64) -> f64 {
    (value / step).ceil() * step
}
