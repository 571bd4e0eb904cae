//! Training curves (loss, held-out PSNR, splat count) as SVG line charts with labelled axes,
//! drawn with `plotters`' SVG backend.
//!
//! The SVG backend writes labels as `<text>` elements that the browser lays out, so no font file
//! is needed at run time (plotters' built-in size estimate places the ticks).

use plotters::prelude::*;

use super::PageError;

/// Chart size in pixels (width, height).
pub const CHART_SIZE_PX: (u32, u32) = (440, 280);

/// The y axis mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YScale {
    /// Values as they are.
    Linear,
    /// log10 axis (e.g. a loss spanning decades); values ≤ 0 are dropped.
    Log10,
}

/// Titles and axis labels of one chart.
#[derive(Debug, Clone, PartialEq)]
pub struct ChartSpec<'a> {
    /// Caption above the plot.
    pub title: &'a str,
    /// x axis label (with unit).
    pub x_label: &'a str,
    /// y axis label (with unit).
    pub y_label: &'a str,
    /// y axis mapping.
    pub y_scale: YScale,
}

/// A line chart of `points` (`(x, y)`, drawn in the given order) as a standalone SVG document of
/// [`CHART_SIZE_PX`], with ticks and labels on both axes. The series is one `<polyline>` with one
/// vertex per plotted point. Non-finite points (and y ≤ 0 on a log axis) are dropped; an empty
/// series still gives a chart with axes.
///
/// # Errors
/// [`PageError::Chart`] when plotters fails to draw (into a string, so only on a plotters bug).
pub fn line_chart_svg(spec: &ChartSpec<'_>, points: &[(f64, f64)]) -> Result<String, PageError> {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .copied()
        .filter(|(x, y)| x.is_finite() && y.is_finite())
        .filter(|(_, y)| spec.y_scale == YScale::Linear || *y > 0.0)
        .collect();
    let (x0, x1) = padded_range(pts.iter().map(|p| p.0), 0.0);
    let mut svg = String::new();
    let err = |e: &dyn std::fmt::Display| PageError::Chart {
        title: spec.title.to_string(),
        source: e.to_string().into(),
    };
    {
        let root = SVGBackend::with_string(&mut svg, CHART_SIZE_PX).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        // A log axis is drawn as log10(y) on a linear axis with 10^v tick labels: plotters' own
        // log axis places no ticks when the data spans less than a decade (a typical loss).
        let plotted: Vec<(f64, f64)> = match spec.y_scale {
            YScale::Linear => pts.clone(),
            YScale::Log10 => pts.iter().map(|&(x, y)| (x, y.log10())).collect(),
        };
        let (y0, y1) = padded_range(plotted.iter().map(|p| p.1), 0.05);
        let y_label = |v: &f64| match spec.y_scale {
            YScale::Linear => short_number(*v),
            YScale::Log10 => short_number(10f64.powf(*v)),
        };
        let mut chart = ChartBuilder::on(&root)
            .caption(spec.title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(x0..x1, y0..y1)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc(spec.x_label)
            .y_desc(spec.y_label)
            .x_labels(6)
            .y_labels(6)
            .label_style(("sans-serif", 13))
            .axis_desc_style(("sans-serif", 14))
            .light_line_style(RGBColor(238, 238, 238))
            .y_label_formatter(&y_label)
            .x_label_formatter(&|v| short_number(*v))
            .draw()
            .map_err(|e| err(&e))?;
        let line = ShapeStyle::from(&RGBColor(31, 119, 180)).stroke_width(2);
        chart
            .draw_series(LineSeries::new(plotted, line))
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

/// `(min, max)` of `values` widened by `pad` of the span on each side; a single value or an
/// empty series gets a unit-wide range so the axis is drawable.
fn padded_range(values: impl Iterator<Item = f64>, pad: f64) -> (f64, f64) {
    let (lo, hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
        (lo.min(v), hi.max(v))
    });
    if !lo.is_finite() || !hi.is_finite() {
        return (0.0, 1.0);
    }
    if hi - lo < 1e-12 {
        return (lo - 0.5, hi + 0.5);
    }
    let d = (hi - lo) * pad;
    (lo - d, hi + d)
}

/// A tick label: integers as such (with k/M for thousands/millions), otherwise 3 significant
/// digits.
fn short_number(v: f64) -> String {
    let a = v.abs();
    if a >= 1e6 {
        format!("{:.1}M", v / 1e6)
    } else if a >= 1e4 {
        format!("{:.0}k", v / 1e3)
    } else if (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vertices of every series `<polyline>` (the series colour; grid lines are polylines too).
    fn polyline_vertex_counts(svg: &str) -> Vec<usize> {
        svg.split("<polyline")
            .skip(1)
            .filter(|el| el.contains("stroke=\"#1F77B4\""))
            .map(|el| {
                let pts = el.split("points=\"").nth(1).unwrap_or("");
                let pts = &pts[..pts.find('"').unwrap_or(0)];
                pts.split_whitespace().count()
            })
            .collect()
    }

    /// Trimmed contents of every `<text>` element.
    fn texts(svg: &str) -> Vec<String> {
        svg.split("<text")
            .skip(1)
            .filter_map(|el| {
                let body = &el[el.find('>')? + 1..];
                Some(body[..body.find("</text>")?].trim().to_string())
            })
            .collect()
    }

    fn spec(y_scale: YScale) -> ChartSpec<'static> {
        ChartSpec {
            title: "loss",
            x_label: "step",
            y_label: "loss",
            y_scale,
        }
    }

    #[test]
    fn chart_has_one_polyline_vertex_per_point_and_labelled_axes() {
        let pts: Vec<(f64, f64)> = (1..=37)
            .map(|i| (i as f64 * 10.0, 1.0 / i as f64))
            .collect();
        for scale in [YScale::Linear, YScale::Log10] {
            let svg = line_chart_svg(&spec(scale), &pts).unwrap();
            assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
            assert_eq!(polyline_vertex_counts(&svg), vec![37], "{scale:?}");
            let texts = texts(&svg);
            assert!(texts.iter().any(|t| t == "step"), "x label in {texts:?}");
            assert!(
                texts.iter().any(|t| t == "loss"),
                "y label / title in {texts:?}"
            );
            assert!(texts.len() >= 8, "tick labels: {texts:?}");
        }
    }

    #[test]
    fn non_finite_and_non_positive_log_points_are_dropped() {
        let pts = [(1.0, 0.5), (2.0, f64::NAN), (3.0, 0.0), (4.0, 0.25)];
        let svg = line_chart_svg(&spec(YScale::Log10), &pts).unwrap();
        assert_eq!(polyline_vertex_counts(&svg), vec![2]);
        let svg = line_chart_svg(&spec(YScale::Linear), &pts).unwrap();
        assert_eq!(polyline_vertex_counts(&svg), vec![3]);
    }

    #[test]
    fn empty_and_single_point_series_still_draw_axes() {
        assert!(line_chart_svg(&spec(YScale::Linear), &[]).is_ok());
        assert!(line_chart_svg(&spec(YScale::Log10), &[]).is_ok());
        assert!(line_chart_svg(&spec(YScale::Linear), &[(5.0, 5.0)]).is_ok());
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(short_number(52841.0), "53k");
        assert_eq!(short_number(3000.0), "3000");
        assert_eq!(short_number(28.44), "28.4");
        assert_eq!(short_number(0.0412), "0.041");
    }
}
