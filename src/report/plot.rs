//! SVG line plots: one or more named series of (x, y) points, linear or log2 x axis; optional
//! noise bands and marked x positions ([`line_plot_with`]). The legend sits in its own panel to
//! the right of the chart, never on the data; the y axis is zoomed to the data (log10 when the
//! data is positive and spans two decades or more).

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::Path;

#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

#[derive(Debug, Clone)]
pub struct Axis {
    pub label: String,
    /// Plot log2(x) and label ticks with x itself (block sizes 1, 2, 4, ...).
    pub log2: bool,
}

impl Axis {
    pub fn linear(label: &str) -> Self {
        Axis {
            label: label.into(),
            log2: false,
        }
    }
    pub fn log2(label: &str) -> Self {
        Axis {
            label: label.into(),
            log2: true,
        }
    }
}

/// A noise band around series `series` (its index): (x, low, high) points, shaded in its colour.
#[derive(Debug, Clone)]
pub struct Band {
    pub series: usize,
    pub points: Vec<(f64, f64, f64)>,
}

/// A marked x position (a dashed vertical line with a label at the top).
#[derive(Debug, Clone)]
pub struct Mark {
    pub x: f64,
    pub label: String,
}

/// Tableau's ten colours: distinct on white and for most colour-blind readers (plotters'
/// default palette puts a pale yellow third).
const PALETTE: [(u8, u8, u8); 10] = [
    (0x4e, 0x79, 0xa7),
    (0xf2, 0x8e, 0x2b),
    (0xe1, 0x57, 0x59),
    (0x59, 0xa1, 0x4f),
    (0xb0, 0x7a, 0xa1),
    (0x76, 0xb7, 0xb2),
    (0x9c, 0x75, 0x5f),
    (0xed, 0xc9, 0x48),
    (0xff, 0x9d, 0xa7),
    (0x79, 0x70, 0x6e),
];

/// What [`line_plot_with`] adds to the lines.
#[derive(Debug, Clone, Default)]
pub struct Extras {
    pub bands: Vec<Band>,
    pub marks: Vec<Mark>,
    /// Keep 0 on the y axis (for shares that read against 0); otherwise the axis is zoomed.
    pub include_zero: bool,
}

/// Writes an SVG of the series to `path`. Points with non-finite coordinates are skipped.
pub fn line_plot(
    path: &Path,
    title: &str,
    x: &Axis,
    y_label: &str,
    series: &[Series],
) -> Result<(), Box<dyn std::error::Error>> {
    line_plot_with(path, title, x, y_label, series, &Extras::default())
}

/// The y range to draw: the data's, padded by 8% of its span (at least 0 with `include_zero`),
/// and whether to draw it as log10 (positive data spanning 100× or more).
fn y_range(ys: &[f64], include_zero: bool) -> (f64, f64, bool) {
    let (lo, hi) = ys
        .iter()
        .filter(|y| y.is_finite())
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &y| {
            (l.min(y), h.max(y))
        });
    if lo > hi {
        return (0.0, 1.0, false);
    }
    if !include_zero && lo > 0.0 && hi / lo >= 100.0 {
        let (a, b) = (lo.log10(), hi.log10());
        let pad = 0.05 * (b - a);
        return (a - pad, b + pad, true);
    }
    let (lo, hi) = if include_zero {
        (lo.min(0.0), hi.max(0.0))
    } else {
        (lo, hi)
    };
    let span = if hi - lo > 1e-12 {
        hi - lo
    } else {
        hi.abs().max(1.0) * 0.1
    };
    let pad = 0.08 * span;
    // Non-negative data never shows negative space below it.
    let floor = if lo >= 0.0 && (include_zero || lo - pad < 0.0) {
        0.0
    } else {
        lo - pad
    };
    (floor, hi + pad, false)
}

/// A tick value with three significant digits, without trailing zeros.
fn tick(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return "0".into();
    }
    let digits = (2 - v.abs().log10().floor() as i32).max(0) as usize;
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// [`line_plot`] with noise bands, marks and the y axis's zero kept or not.
pub fn line_plot_with(
    path: &Path,
    title: &str,
    x: &Axis,
    y_label: &str,
    series: &[Series],
    extras: &Extras,
) -> Result<(), Box<dyn std::error::Error>> {
    let log2 = x.log2;
    let ok = |a: f64| a.is_finite() && (!log2 || a > 0.0);
    let tx = |v: f64| if log2 { v.log2() } else { v };
    let xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .chain(extras.marks.iter().map(|m| m.x))
        .filter(|&a| ok(a))
        .map(tx)
        .collect();
    let (x0, x1) = x_range(&xs);
    let xpad = 0.03 * (x1 - x0);
    let ys: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().filter(|p| ok(p.0)).map(|p| p.1))
        .chain(
            extras
                .bands
                .iter()
                .flat_map(|b| b.points.iter().filter(|p| ok(p.0)).flat_map(|p| [p.1, p.2])),
        )
        .collect();
    let (y0, y1, ylog) = y_range(&ys, extras.include_zero);
    let ty = move |v: f64| if ylog { v.log10() } else { v };
    let yok = move |v: f64| v.is_finite() && (!ylog || v > 0.0);

    let data: Vec<Vec<(f64, f64)>> = series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .filter(|(a, b)| ok(*a) && yok(*b))
                .map(|&(a, b)| (tx(a), ty(b)))
                .collect()
        })
        .collect();
    let same_as = same_as_earlier(&data, y1 - y0);
    let names = legend_names(series, &same_as);
    let longest = names.iter().map(|n| n.chars().count()).max().unwrap_or(0);
    let legend_w = (longest as u32 * 7 + 60).clamp(160, 640);
    let (w, h) = (900 + legend_w, 560u32);
    let root = SVGBackend::new(path, (w, h)).into_drawing_area();
    root.fill(&WHITE)?;
    let (plot_area, legend_area) = root.split_horizontally(w - legend_w);
    let mut chart = ChartBuilder::on(&plot_area)
        .caption(title, ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(70)
        .build_cartesian_2d((x0 - xpad)..(x1 + xpad), y0..y1)?;
    draw_mesh(&mut chart, x, y_label, ylog, x1 - x0)?;
    for band in &extras.bands {
        let c = color(band.series);
        let pts: Vec<(f64, f64, f64)> = band
            .points
            .iter()
            .filter(|p| ok(p.0) && yok(p.1) && yok(p.2))
            .map(|&(a, l, u)| (tx(a), ty(l), ty(u)))
            .collect();
        if pts.len() < 2 {
            continue;
        }
        let mut poly: Vec<(f64, f64)> = pts.iter().map(|p| (p.0, p.2)).collect();
        poly.extend(pts.iter().rev().map(|p| (p.0, p.1)));
        chart.draw_series(std::iter::once(Polygon::new(poly, c.mix(0.18).filled())))?;
    }
    for m in &extras.marks {
        if !ok(m.x) {
            continue;
        }
        let xm = tx(m.x);
        chart.draw_series(DashedLineSeries::new(
            [(xm, y0), (xm, y1)],
            6,
            4,
            RGBColor(90, 90, 90).stroke_width(1),
        ))?;
    }
    for (i, d) in data.iter().enumerate() {
        let c = color(i);
        if same_as[i].is_some() {
            chart.draw_series(DashedLineSeries::new(d.clone(), 8, 6, c.stroke_width(2)))?;
        } else {
            chart.draw_series(LineSeries::new(d.clone(), c.stroke_width(2)))?;
        }
        chart.draw_series(d.iter().map(|&p| Circle::new(p, 3, c.filled())))?;
    }
    draw_mark_labels(&chart, &plot_area, &extras.marks, ok, tx, y1)?;
    draw_legend(&legend_area, series, &names, &same_as, extras)?;
    root.present()?;
    Ok(())
}

/// The x range the (transformed) points span, never empty or a single point.
fn x_range(xs: &[f64]) -> (f64, f64) {
    let (mut x0, mut x1) = xs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), &v| {
            (l.min(v), h.max(v))
        });
    if x0 > x1 {
        (x0, x1) = (0.0, 1.0);
    }
    if x1 - x0 < 1e-12 {
        x1 = x0 + 1.0;
    }
    (x0, x1)
}

/// Series `i`'s colour.
fn color(i: usize) -> RGBAColor {
    let (r, g, b) = PALETTE[i % PALETTE.len()];
    RGBColor(r, g, b).to_rgba()
}

/// For each series, the earlier one it matches (within 1% of the axis's `y_span`): it is drawn
/// dashed, so the earlier one shows through and the legend says so.
fn same_as_earlier(data: &[Vec<(f64, f64)>], y_span: f64) -> Vec<Option<usize>> {
    (0..data.len())
        .map(|i| {
            (0..i).find(|&j| {
                !data[i].is_empty()
                    && data[i].len() == data[j].len()
                    && data[i].iter().zip(&data[j]).all(|(p, q)| {
                        (p.0 - q.0).abs() < 1e-9 && (p.1 - q.1).abs() <= 0.01 * y_span
                    })
            })
        })
        .collect()
}

/// The legend's names: a dashed series says which one it lies on.
fn legend_names(series: &[Series], same_as: &[Option<usize>]) -> Vec<String> {
    series
        .iter()
        .zip(same_as)
        .map(|(s, same)| match same {
            Some(j) => format!("{} (dashed: on {})", s.name, series[*j].name),
            None => s.name.clone(),
        })
        .collect()
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// The axes, their labels and the grid; ticks read in data units on log axes.
fn draw_mesh(
    chart: &mut Chart,
    x: &Axis,
    y_label: &str,
    ylog: bool,
    x_span: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    let log2 = x.log2;
    let fmt_x = move |v: &f64| {
        if log2 {
            tick(2f64.powf(*v))
        } else {
            tick(*v)
        }
    };
    let fmt_y = move |v: &f64| if ylog { tick(10f64.powf(*v)) } else { tick(*v) };
    let y_desc = if ylog {
        format!("{y_label} (log scale)")
    } else {
        y_label.to_string()
    };
    let mut mesh = chart.configure_mesh();
    mesh.x_desc(x.label.as_str())
        .y_desc(y_desc)
        .x_label_formatter(&fmt_x)
        .y_label_formatter(&fmt_y)
        .light_line_style(RGBColor(235, 235, 235));
    if log2 {
        // One tick per power of two within the range.
        let n = (x_span.round() as usize + 1).clamp(2, 20);
        mesh.x_labels(n);
    }
    mesh.draw()?;
    Ok(())
}

/// Mark labels along the top edge of the plot, inside it, stacked when marks share an x.
fn draw_mark_labels(
    chart: &Chart,
    plot_area: &DrawingArea<SVGBackend, Shift>,
    marks: &[Mark],
    ok: impl Fn(f64) -> bool,
    tx: impl Fn(f64) -> f64,
    y1: f64,
) -> Result<(), Box<dyn std::error::Error>> {
    for (k, m) in marks.iter().enumerate() {
        if !ok(m.x) {
            continue;
        }
        let (mx, my) = chart.backend_coord(&(tx(m.x), y1));
        let row = marks[..k]
            .iter()
            .filter(|o| (tx(o.x) - tx(m.x)).abs() < 1e-9)
            .count() as i32;
        plot_area.draw(&Text::new(
            m.label.clone(),
            (mx + 4, my + 4 + 16 * row),
            ("sans-serif", 14).into_font().color(&RGBColor(60, 60, 60)),
        ))?;
    }
    Ok(())
}

/// The legend panel: one line per series, then what the shading and dashes mean.
fn draw_legend(
    legend_area: &DrawingArea<SVGBackend, Shift>,
    series: &[Series],
    names: &[String],
    same_as: &[Option<usize>],
    extras: &Extras,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut y = 40;
    for i in 0..series.len() {
        let c = color(i);
        let shaded = extras.bands.iter().any(|b| b.series == i);
        if shaded {
            legend_area.draw(&Rectangle::new(
                [(8, y - 7), (36, y + 7)],
                c.mix(0.18).filled(),
            ))?;
        }
        let segments: &[(i32, i32)] = if same_as[i].is_some() {
            &[(8, 16), (22, 30)]
        } else {
            &[(8, 36)]
        };
        for &(a, b) in segments {
            legend_area.draw(&PathElement::new(vec![(a, y), (b, y)], c.stroke_width(2)))?;
        }
        legend_area.draw(&Text::new(
            names[i].clone(),
            (44, y - 7),
            ("sans-serif", 14).into_font(),
        ))?;
        y += 24;
    }
    if !extras.bands.is_empty() {
        y += 8;
        legend_area.draw(&Text::new(
            "shaded: noise band",
            (8, y - 7),
            ("sans-serif", 13).into_font().color(&RGBColor(80, 80, 80)),
        ))?;
        y += 20;
    }
    if !extras.marks.is_empty() {
        legend_area.draw(&Text::new(
            "dashed: marked block sizes",
            (8, y - 7),
            ("sans-serif", 13).into_font().color(&RGBColor(80, 80, 80)),
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_svg_with_every_series_name() {
        let dir = std::env::temp_dir().join(format!("pagedkv-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.svg");
        let s = [
            Series {
                name: "waste".into(),
                points: vec![(1.0, 0.0), (16.0, 3.5), (256.0, 40.0)],
            },
            Series {
                name: "concurrency".into(),
                points: vec![(1.0, 9.0), (256.0, 5.0)],
            },
        ];
        line_plot(&path, "t", &Axis::log2("block size"), "y", &s).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("waste") && svg.contains("concurrency"));
        let extras = Extras {
            bands: vec![Band {
                series: 0,
                points: vec![(1.0, -1.0, 1.0), (16.0, 3.0, 4.0)],
            }],
            marks: vec![Mark {
                x: 16.0,
                label: "16: vLLM's default".into(),
            }],
            include_zero: false,
        };
        line_plot_with(&path, "t", &Axis::log2("block size"), "y", &s, &extras).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(
            svg.contains("16: vLLM") && svg.contains("noise band"),
            "{svg}"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_y_axis_zooms_to_the_data_and_goes_log_over_two_decades() {
        // 95..105 drawn from 94.2 to 105.8, not from 0.
        let (a, b, log) = y_range(&[95.0, 100.0, 105.0], false);
        assert!(!log && (a - 94.2).abs() < 1e-9 && (b - 105.8).abs() < 1e-9);
        // Shares keep 0 when asked; non-negative data never dips below 0.
        assert_eq!(y_range(&[0.2, 0.5], true).0, 0.0);
        assert_eq!(y_range(&[0.0, 1.0, 5.0], false).0, 0.0);
        // 0.001 .. 1: log10, -3 .. 0 padded by 5%.
        let (a, b, log) = y_range(&[0.001, 0.01, 1.0], false);
        assert!(log && (a + 3.15).abs() < 1e-9 && (b - 0.15).abs() < 1e-9);
        // A flat line still has a range.
        let (a, b, _) = y_range(&[100.0, 100.0], false);
        assert!(a < 100.0 && b > 100.0);
        assert_eq!(
            (tick(0.25), tick(1024.0), tick(3.0)),
            ("0.25".into(), "1024".into(), "3".into())
        );
    }
}
