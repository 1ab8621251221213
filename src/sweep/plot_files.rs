//! The sweep's SVG plots by file name: what `--out` writes and `index.html` shows.

use super::SweepReport;

/// The SVG plots [`super::output::write_all`] writes: (file name, what it shows).
pub fn plots(report: &SweepReport) -> Vec<(&'static str, &'static str)> {
    let mut p = vec![
        ("waste_concurrency.svg", "memory side"),
        ("bandwidth.svg", "bandwidth fractions"),
    ];
    if !report.e2e.end_to_end.is_empty() {
        p.insert(0, ("end_to_end.svg", "SLO capacity"));
    }
    p
}
