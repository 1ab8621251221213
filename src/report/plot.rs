//! SVG line plots: one or more named series of (x, y) points, linear or log2 x axis.

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

/// Writes an SVG of the series to `path`. Points with non-finite coordinates are skipped.
pub fn line_plot(
    path: &Path,
    title: &str,
    x: &Axis,
    y_label: &str,
    series: &[Series],
) -> Result<(), Box<dyn std::error::Error>> {
    let tx = |v: f64| if x.log2 { v.log2() } else { v };
    let pts = || {
        series
            .iter()
            .flat_map(|s| s.points.iter().copied())
            .filter(|(a, b)| a.is_finite() && b.is_finite() && (!x.log2 || *a > 0.0))
    };
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for (a, b) in pts() {
        x0 = x0.min(tx(a));
        x1 = x1.max(tx(a));
        y0 = y0.min(b);
        y1 = y1.max(b);
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if x1 - x0 < 1e-12 {
        x1 = x0 + 1.0;
    }
    y0 = y0.min(0.0);
    if y1 - y0 < 1e-12 {
        y1 = y0 + 1.0;
    }
    let root = SVGBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(64)
        .build_cartesian_2d(x0..x1, y0..y1 * 1.05)?;
    let log2 = x.log2;
    let fmt_x = move |v: &f64| {
        if log2 {
            format!("{}", 2f64.powf(*v).round())
        } else {
            format!("{v:.3}")
        }
    };
    chart
        .configure_mesh()
        .x_desc(x.label.as_str())
        .y_desc(y_label)
        .x_label_formatter(&fmt_x)
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let data: Vec<(f64, f64)> = s
            .points
            .iter()
            .filter(|(a, b)| a.is_finite() && b.is_finite() && (!log2 || *a > 0.0))
            .map(|&(a, b)| (tx(a), b))
            .collect();
        chart
            .draw_series(LineSeries::new(data.clone(), color.stroke_width(2)))?
            .label(s.name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart.draw_series(data.iter().map(|&p| Circle::new(p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
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
        std::fs::remove_dir_all(dir).unwrap();
    }
}
