//! The figures, in the studies' forms, drawn as SVG with plotters (SVG
//! text needs no fonts on the machine that draws it; the browser renders
//! the text).
//!
//! - percentile bars: per configuration, median/p90/p99/p99.9/p99.99 on a
//!   logarithmic latency axis;
//! - lines against a swept value: latency (p50 solid, p99 dashed) or
//!   throughput per configuration;
//! - throughput bars per configuration.

use plotters::coord::Shift;
use plotters::prelude::*;

const WIDTH: u32 = 760;
const HEIGHT: u32 = 380;

/// Percentile colours, light to dark: a sequential palette so the order of
/// the bars reads at a glance.
const PCT_COLOURS: [RGBColor; 5] = [
    RGBColor(158, 202, 225),
    RGBColor(107, 174, 214),
    RGBColor(49, 130, 189),
    RGBColor(8, 81, 156),
    RGBColor(8, 48, 107),
];
/// The percentiles drawn, with their labels.
pub const PERCENTILES: [&str; 5] = ["p50", "p90", "p99", "p99.9", "p99.99"];

/// Colours told apart by configuration.
const SERIES_COLOURS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// The colour of series `i`.
pub fn series_colour(i: usize) -> RGBColor {
    SERIES_COLOURS[i % SERIES_COLOURS.len()]
}

/// One group of bars: a label and its five percentiles in microseconds.
pub struct PercentileGroup {
    /// Configuration (and sweep value) label.
    pub label: String,
    /// p50, p90, p99, p99.9, p99.99 in microseconds.
    pub us: [f64; 5],
}

/// One line of a sweep figure.
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Colour index.
    pub colour: usize,
    /// Dashed (p99) or solid (p50, throughput).
    pub dashed: bool,
    /// (sweep value, y) points in sweep order.
    pub points: Vec<(f64, f64)>,
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

fn draw<F>(title: &str, f: F) -> String
where
    F: FnOnce(&Area<'_>) -> Result<(), Box<dyn std::error::Error>>,
{
    let mut svg = String::new();
    let result = {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, HEIGHT)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| e.to_string().into())
            .and_then(|()| f(&root))
            .and_then(|()| root.present().map_err(|e| e.to_string().into()))
    };
    match result {
        Ok(()) => svg,
        // A figure that cannot be drawn says so in place instead of
        // breaking the page.
        Err(e) => format!(
            "<p class=\"error\">figure {} could not be drawn: {}</p>",
            super::escape(title),
            super::escape(&e.to_string())
        ),
    }
}

/// Bounds of a log axis covering `values` with some air.
fn log_bounds(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (lo, hi) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::INFINITY, 0.0f64), |(lo, hi), v| {
            (lo.min(v), hi.max(v))
        });
    if !lo.is_finite() {
        return (1.0, 10.0);
    }
    let lo = 10f64.powf(lo.log10().floor()).min(lo / 1.5);
    let hi = 10f64.powf(hi.log10().ceil()).max(hi * 1.5);
    (lo, hi)
}

/// Latency labels: "3 µs", "250 µs", "1.5 ms".
fn us_label(v: &f64) -> String {
    if *v >= 1000.0 {
        format!("{} ms", trim(*v / 1000.0))
    } else {
        format!("{} µs", trim(*v))
    }
}

fn trim(v: f64) -> String {
    if v >= 10.0 || (v - v.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Percentile bars per group on a logarithmic axis.
pub fn percentile_bars(title: &str, groups: &[PercentileGroup]) -> String {
    draw(title, |root| {
        let n = groups.len().max(1);
        let (lo, hi) = log_bounds(groups.iter().flat_map(|g| g.us));
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), (lo..hi).log_scale())?;
        let labels: Vec<String> = groups.iter().map(|g| g.label.clone()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 0.05 && i >= 0.0 {
                    labels.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc("round trip (log scale)")
            .y_label_formatter(&us_label)
            .draw()?;
        let width = 0.8 / PERCENTILES.len() as f64;
        for (j, name) in PERCENTILES.iter().enumerate() {
            let colour = PCT_COLOURS[j];
            chart
                .draw_series(
                    groups
                        .iter()
                        .enumerate()
                        .filter(|(_, g)| g.us[j] > 0.0)
                        .map(|(i, g)| {
                            let x0 = i as f64 - 0.4 + j as f64 * width;
                            Rectangle::new([(x0, lo), (x0 + width * 0.9, g.us[j])], colour.filled())
                        }),
                )?
                .label(*name)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()?;
        Ok(())
    })
}

/// Lines against a swept value; `log_y` for latency.
pub fn sweep_lines(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    log_y: bool,
    series: &[Series],
) -> String {
    draw(title, |root| {
        let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
        let (x0, x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
        let (x0, x1) = if x0.is_finite() && x1 > x0 {
            let pad = (x1 - x0) * 0.05;
            (x0 - pad, x1 + pad)
        } else if x0.is_finite() {
            (x0 - 1.0, x0 + 1.0)
        } else {
            (0.0, 1.0)
        };
        let ys = || series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
        let caption = (title, ("sans-serif", 16));
        if log_y {
            let (lo, hi) = log_bounds(ys());
            let mut chart = ChartBuilder::on(root)
                .caption(caption.0, caption.1)
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d(x0..x1, (lo..hi).log_scale())?;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .x_label_formatter(&|x| trim(*x))
                .y_label_formatter(&us_label)
                .draw()?;
            for s in series {
                draw_line(&mut chart, s)?;
            }
            legend(&mut chart)?;
        } else {
            let hi = ys().fold(0.0f64, f64::max).max(1e-9) * 1.15;
            let mut chart = ChartBuilder::on(root)
                .caption(caption.0, caption.1)
                .margin(10)
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d(x0..x1, 0.0..hi)?;
            chart
                .configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .x_label_formatter(&|x| trim(*x))
                .y_label_formatter(&|y| trim(*y))
                .draw()?;
            for s in series {
                draw_line(&mut chart, s)?;
            }
            legend(&mut chart)?;
        }
        Ok(())
    })
}

fn draw_line<'a, Y>(
    chart: &mut ChartContext<
        'a,
        SVGBackend<'a>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, Y>,
    >,
    s: &Series,
) -> Result<(), Box<dyn std::error::Error>>
where
    Y: Ranged<ValueType = f64>,
{
    let colour = series_colour(s.colour);
    let style = colour.stroke_width(2);
    let pts: Vec<(f64, f64)> = s.points.iter().copied().filter(|p| p.1 > 0.0).collect();
    if s.dashed {
        chart
            .draw_series(DashedLineSeries::new(pts.clone(), 6, 4, style))?
            .label(&s.label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(1)));
    } else {
        chart
            .draw_series(LineSeries::new(pts.clone(), style))?
            .label(&s.label)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(3)));
    }
    chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, colour.filled())))?;
    Ok(())
}

fn legend<'a, Y>(
    chart: &mut ChartContext<
        'a,
        SVGBackend<'a>,
        Cartesian2d<plotters::coord::types::RangedCoordf64, Y>,
    >,
) -> Result<(), Box<dyn std::error::Error>>
where
    Y: Ranged<ValueType = f64>,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK.mix(0.3))
        .draw()?;
    Ok(())
}

/// Plain bars (throughput per configuration), linear axis.
pub fn bars(title: &str, y_desc: &str, groups: &[(String, f64)]) -> String {
    draw(title, |root| {
        let n = groups.len().max(1);
        let hi = groups.iter().map(|g| g.1).fold(0.0f64, f64::max).max(1e-9) * 1.15;
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), 0.0..hi)?;
        let labels: Vec<String> = groups.iter().map(|g| g.0.clone()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 0.05 && i >= 0.0 {
                    labels.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc(y_desc)
            .y_label_formatter(&|y| trim(*y))
            .draw()?;
        chart.draw_series(groups.iter().enumerate().map(|(i, g)| {
            Rectangle::new(
                [(i as f64 - 0.3, 0.0), (i as f64 + 0.3, g.1)],
                series_colour(i).filled(),
            )
        }))?;
        Ok(())
    })
}

/// Two runs side by side: per label, bars A and B for p50 and p99.
pub fn compare_bars(
    title: &str,
    labels: &[String],
    a: &[[f64; 2]],
    b: &[[f64; 2]],
    names: [&str; 2],
) -> String {
    draw(title, |root| {
        let n = labels.len().max(1);
        let (lo, hi) = log_bounds(a.iter().chain(b).flat_map(|v| *v));
        let mut chart = ChartBuilder::on(root)
            .caption(title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(70)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), (lo..hi).log_scale())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 0.05 && i >= 0.0 {
                    labels.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc("round trip (log scale)")
            .y_label_formatter(&us_label)
            .draw()?;
        let bars = [
            (
                format!("{} p50", names[0]),
                RGBColor(158, 202, 225),
                0usize,
                a,
            ),
            (format!("{} p50", names[1]), RGBColor(253, 174, 107), 0, b),
            (format!("{} p99", names[0]), RGBColor(49, 130, 189), 1, a),
            (format!("{} p99", names[1]), RGBColor(230, 85, 13), 1, b),
        ];
        for (j, (label, colour, which, values)) in bars.into_iter().enumerate() {
            chart
                .draw_series(
                    values
                        .iter()
                        .enumerate()
                        .filter(|(_, v)| v[which] > 0.0)
                        .map(|(i, v)| {
                            let x0 = i as f64 - 0.4 + j as f64 * 0.2;
                            Rectangle::new([(x0, lo), (x0 + 0.18, v[which])], colour.filled())
                        }),
                )?
                .label(label)
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled())
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()?;
        Ok(())
    })
}
