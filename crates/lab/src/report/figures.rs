//! The figures, in the studies' forms, drawn as SVG with plotters (SVG
//! text needs no fonts on the machine that draws it; the browser renders
//! the text).
//!
//! - percentile bars: per configuration, median/p90/p99/p99.9/p99.99 on a
//!   logarithmic latency axis, each with its 95% confidence interval as a
//!   whisker;
//! - lines against a swept value: latency (p50 solid, p99 dashed) or
//!   throughput per configuration;
//! - throughput bars per configuration.
//!
//! Each figure may carry the studies' reference values as dashed
//! horizontal lines (see [`Mark`]).

use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
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
    /// Their 95% confidence intervals, drawn as whiskers; none where the
    /// samples were too few.
    pub ci_us: [Option<(f64, f64)>; 5],
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

/// A study's reference value drawn across a figure.
pub struct Mark {
    /// Legend label ("study: switch-adds-latency (switch p50)"); empty:
    /// no legend entry (the other end of a range).
    pub label: String,
    /// Its value on the figure's y axis.
    pub y: f64,
}

/// The colour of the studies' marks: apart from the series' and the
/// percentiles' colours.
const MARK_COLOUR: RGBColor = RGBColor(178, 24, 43);

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

/// A chart's frame: caption, axes, mesh and labels. Every figure is drawn
/// in one, so they all look alike.
struct Frame<'t> {
    title: &'t str,
    x_desc: Option<&'t str>,
    y_desc: &'t str,
    /// One label per integer x (bars centred on 0, 1, ...); `None`: a
    /// numeric x axis.
    categories: Option<&'t [String]>,
    y_label: &'t dyn Fn(&f64) -> String,
}

type Chart<'a, 'b, Y> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, Y>>;

impl Frame<'_> {
    /// Builds the chart over `x` and `y` and draws its mesh.
    fn build<'a, 'b, Y>(
        &self,
        root: &'a Area<'b>,
        x: std::ops::Range<f64>,
        y: Y,
    ) -> Result<Chart<'a, 'b, Y::CoordDescType>, Box<dyn std::error::Error>>
    where
        Y: AsRangedCoord<Value = f64>,
        Y::CoordDescType: ValueFormatter<f64>,
    {
        let mut chart = ChartBuilder::on(root)
            .caption(self.title, ("sans-serif", 16))
            .margin(10)
            .x_label_area_size(if self.categories.is_some() { 36 } else { 40 })
            .y_label_area_size(70)
            .build_cartesian_2d(x, y)?;
        let category = |x: &f64| {
            let i = x.round();
            match self.categories {
                Some(labels) if (x - i).abs() < 0.05 && i >= 0.0 => {
                    labels.get(i as usize).cloned().unwrap_or_default()
                }
                Some(_) => String::new(),
                None => trim(*x),
            }
        };
        let mut mesh = chart.configure_mesh();
        if let Some(labels) = self.categories {
            mesh.disable_x_mesh().x_labels(labels.len().max(1));
        }
        if let Some(d) = self.x_desc {
            mesh.x_desc(d);
        }
        mesh.x_label_formatter(&category)
            .y_desc(self.y_desc)
            .y_label_formatter(self.y_label)
            .draw()?;
        Ok(chart)
    }
}

/// The x range of `n` categories centred on 0 .. n-1.
fn category_range(n: usize) -> std::ops::Range<f64> {
    -0.5f64..(n.max(1) as f64 - 0.5)
}

/// Bars of `values` (one per category, skipping empty ones), each at
/// `offset` from its category's centre and `width` wide, under one legend
/// entry (or none).
fn bar_series<Y>(
    chart: &mut Chart<'_, '_, Y>,
    values: impl Iterator<Item = f64>,
    base: f64,
    offset: f64,
    width: f64,
    colour: RGBColor,
    legend: Option<String>,
) -> Result<(), Box<dyn std::error::Error>>
where
    Y: Ranged<ValueType = f64>,
{
    let bars = values.enumerate().filter(|(_, v)| *v > 0.0).map(|(i, v)| {
        let x0 = i as f64 + offset;
        Rectangle::new([(x0, base), (x0 + width, v)], colour.filled())
    });
    let drawn = chart.draw_series(bars)?;
    if let Some(label) = legend {
        drawn
            .label(label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
    }
    Ok(())
}

/// Percentile bars per group on a logarithmic axis.
pub fn percentile_bars(title: &str, groups: &[PercentileGroup], marks: &[Mark]) -> String {
    draw(title, |root| {
        let (lo, hi) = log_bounds(
            groups
                .iter()
                .flat_map(|g| g.us)
                .chain(
                    groups
                        .iter()
                        .flat_map(|g| g.ci_us.iter().flatten().map(|c| c.1)),
                )
                .chain(marks.iter().map(|m| m.y)),
        );
        let labels: Vec<String> = groups.iter().map(|g| g.label.clone()).collect();
        let frame = Frame {
            title,
            x_desc: None,
            y_desc: "round trip (log scale)",
            categories: Some(&labels),
            y_label: &us_label,
        };
        let mut chart = frame.build(root, category_range(groups.len()), (lo..hi).log_scale())?;
        let width = 0.8 / PERCENTILES.len() as f64;
        for (j, name) in PERCENTILES.iter().enumerate() {
            bar_series(
                &mut chart,
                groups.iter().map(|g| g.us[j]),
                lo,
                -0.4 + j as f64 * width,
                width * 0.9,
                PCT_COLOURS[j],
                Some((*name).to_owned()),
            )?;
            // The interval as a whisker through the bar's middle.
            let x = -0.4 + j as f64 * width + width * 0.45;
            let whiskers = groups.iter().enumerate().filter_map(|(i, g)| {
                let (l, h) = g.ci_us[j]?;
                Some((i as f64 + x, l.max(lo), h.min(hi)))
            });
            for (x, l, h) in whiskers {
                let cap = width * 0.25;
                chart.draw_series([
                    PathElement::new(vec![(x, l), (x, h)], BLACK.stroke_width(1)),
                    PathElement::new(vec![(x - cap, l), (x + cap, l)], BLACK.stroke_width(1)),
                    PathElement::new(vec![(x - cap, h), (x + cap, h)], BLACK.stroke_width(1)),
                ])?;
            }
        }
        draw_marks(&mut chart, category_range(groups.len()), marks)?;
        legend(&mut chart)
    })
}

/// Lines against a swept value; `log_y` for latency.
pub fn sweep_lines(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    log_y: bool,
    series: &[Series],
    marks: &[Mark],
) -> String {
    draw(title, |root| {
        let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
        let (x0, x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
            (a.min(x), b.max(x))
        });
        let x = if x0.is_finite() && x1 > x0 {
            let pad = (x1 - x0) * 0.05;
            (x0 - pad)..(x1 + pad)
        } else if x0.is_finite() {
            (x0 - 1.0)..(x0 + 1.0)
        } else {
            0.0..1.0
        };
        let ys = || {
            series
                .iter()
                .flat_map(|s| s.points.iter().map(|p| p.1))
                .chain(marks.iter().map(|m| m.y))
        };
        let linear_label = |y: &f64| trim(*y);
        let frame = Frame {
            title,
            x_desc: Some(x_desc),
            y_desc,
            categories: None,
            y_label: if log_y { &us_label } else { &linear_label },
        };
        if log_y {
            let (lo, hi) = log_bounds(ys());
            let mut chart = frame.build(root, x.clone(), (lo..hi).log_scale())?;
            draw_marks(&mut chart, x, marks)?;
            lines(&mut chart, series)
        } else {
            let hi = ys().fold(0.0f64, f64::max).max(1e-9) * 1.15;
            let mut chart = frame.build(root, x.clone(), 0.0..hi)?;
            draw_marks(&mut chart, x, marks)?;
            lines(&mut chart, series)
        }
    })
}

fn lines<'a, 'b: 'a, Y>(
    chart: &mut Chart<'a, 'b, Y>,
    series: &[Series],
) -> Result<(), Box<dyn std::error::Error>>
where
    Y: Ranged<ValueType = f64>,
{
    for s in series {
        let colour = series_colour(s.colour);
        let style = colour.stroke_width(2);
        let pts: Vec<(f64, f64)> = s.points.iter().copied().filter(|p| p.1 > 0.0).collect();
        if s.dashed {
            chart
                .draw_series(DashedLineSeries::new(pts.clone(), 6, 4, style))?
                .label(&s.label)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(1))
                });
        } else {
            chart
                .draw_series(LineSeries::new(pts.clone(), style))?
                .label(&s.label)
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 16, y)], colour.stroke_width(3))
                });
        }
        chart.draw_series(pts.into_iter().map(|p| Circle::new(p, 3, colour.filled())))?;
    }
    legend(chart)
}

/// The marks as dashed lines across `x`, each under its legend entry.
fn draw_marks<'a, 'b: 'a, Y>(
    chart: &mut Chart<'a, 'b, Y>,
    x: std::ops::Range<f64>,
    marks: &[Mark],
) -> Result<(), Box<dyn std::error::Error>>
where
    Y: Ranged<ValueType = f64>,
{
    for m in marks.iter().filter(|m| m.y.is_finite()) {
        let line = vec![(x.start, m.y), (x.end, m.y)];
        let drawn = chart.draw_series(DashedLineSeries::new(
            line,
            3,
            3,
            MARK_COLOUR.stroke_width(2),
        ))?;
        // The second end of a range shares the first's legend entry.
        if !m.label.is_empty() {
            drawn.label(&m.label).legend(|(x, y)| {
                PathElement::new([(x, y), (x + 16, y)], MARK_COLOUR.stroke_width(2))
            });
        }
    }
    Ok(())
}

fn legend<'a, 'b: 'a, Y>(chart: &mut Chart<'a, 'b, Y>) -> Result<(), Box<dyn std::error::Error>>
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
pub fn bars(title: &str, y_desc: &str, groups: &[(String, f64)], marks: &[Mark]) -> String {
    draw(title, |root| {
        let hi = groups
            .iter()
            .map(|g| g.1)
            .chain(marks.iter().map(|m| m.y))
            .fold(0.0f64, f64::max)
            .max(1e-9)
            * 1.15;
        let labels: Vec<String> = groups.iter().map(|g| g.0.clone()).collect();
        let frame = Frame {
            title,
            x_desc: None,
            y_desc,
            categories: Some(&labels),
            y_label: &|y| trim(*y),
        };
        let mut chart = frame.build(root, category_range(groups.len()), 0.0..hi)?;
        // One colour per configuration, as in the line figures.
        for (i, g) in groups.iter().enumerate() {
            let only = (0..groups.len()).map(|k| if k == i { g.1 } else { 0.0 });
            bar_series(&mut chart, only, 0.0, -0.3, 0.6, series_colour(i), None)?;
        }
        draw_marks(&mut chart, category_range(groups.len()), marks)?;
        if !marks.is_empty() {
            legend(&mut chart)?;
        }
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
        let (lo, hi) = log_bounds(a.iter().chain(b).flat_map(|v| *v));
        let frame = Frame {
            title,
            x_desc: None,
            y_desc: "round trip (log scale)",
            categories: Some(labels),
            y_label: &us_label,
        };
        let mut chart = frame.build(root, category_range(labels.len()), (lo..hi).log_scale())?;
        let sets = [
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
        for (j, (label, colour, which, values)) in sets.into_iter().enumerate() {
            bar_series(
                &mut chart,
                values.iter().map(|v| v[which]),
                lo,
                -0.4 + j as f64 * 0.2,
                0.18,
                colour,
                Some(label),
            )?;
        }
        legend(&mut chart)
    })
}
