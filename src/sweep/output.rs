//! Sweep output files: `sweep.csv`, `sweep.json`, the SVG plots (`waste_concurrency.svg`,
//! `bandwidth.svg`, `end_to_end.svg`) and the attention efficiency profile the engine simulator
//! reads (`attention_profile.json`), all from a [`SweepReport`].

use super::{SweepReport, SweepRow};
use crate::report::{line_plot, Axis, Series};
use std::path::Path;

type BoxError = Box<dyn std::error::Error>;

fn cell<T: ToString>(x: Option<T>) -> String {
    x.map(|v| v.to_string()).unwrap_or_default()
}

/// The CSV: one row per block size; empty cells where a figure was not measured. Columns of every
/// probe after the first carry its memory label as a suffix (`gather_gbps_4k`).
pub fn csv(report: &SweepReport) -> String {
    let mut header: Vec<String> = [
        "block_size",
        "pool_blocks",
        "internal_waste_pct",
        "concurrent_requests",
        "tw_concurrent_requests",
        "peak_blocks_in_use",
        "peak_headroom",
        "prefix_share_lost_pct",
        "block_table_bytes_per_request",
        "block_table_bytes_pool",
        "block_table_bytes_padded",
        "gather_gbps",
        "gather_copy_gbps",
        "copy_gbps",
        "stream_gbps",
        "convert_stream_gbps",
        "gather_frac_of_stream",
        "gather_copy_frac_of_copy",
        "attention_gbps",
        "attention_frac_of_stream",
        "efficiency_noise",
        "proxy",
        "e2e_output_tokens_per_s",
        "e2e_p99_ttft_s",
        "e2e_p99_tpot_s",
        "e2e_preemptions",
    ]
    .map(String::from)
    .to_vec();
    let extra: Vec<String> = report
        .rows
        .first()
        .map(|r| r.memory.iter().skip(1).map(|m| m.memory.clone()).collect())
        .unwrap_or_default();
    for label in &extra {
        for name in [
            "gather_gbps",
            "gather_copy_gbps",
            "copy_gbps",
            "stream_gbps",
            "convert_stream_gbps",
            "gather_frac_of_stream",
            "gather_copy_frac_of_copy",
            "attention_gbps",
            "attention_frac_of_stream",
        ] {
            header.push(format!("{name}_{label}"));
        }
    }
    let mut out = header.join(",") + "\n";
    for r in &report.rows {
        let mut cells = vec![
            r.block_size.to_string(),
            r.pool_blocks.to_string(),
            r.internal_waste_pct.to_string(),
            r.concurrent_requests.to_string(),
            cell(r.tw_concurrent_requests),
            cell(r.peak_blocks_in_use),
            cell(r.peak_headroom),
            cell(r.prefix_share_lost_pct),
            r.block_table_bytes_per_request.to_string(),
            r.block_table_bytes_pool.to_string(),
            r.block_table_bytes_padded.to_string(),
            cell(r.gather_gbps),
            cell(r.gather_copy_gbps),
            cell(r.copy_gbps),
            cell(r.stream_gbps),
            cell(r.convert_stream_gbps),
            cell(r.gather_frac_of_stream),
            cell(r.gather_copy_frac_of_copy),
            cell(r.attention_gbps),
            cell(r.attention_frac_of_stream),
            cell(r.efficiency_noise),
            r.proxy.to_string(),
            cell(r.e2e_output_tokens_per_s),
            cell(r.e2e_p99_ttft_s),
            cell(r.e2e_p99_tpot_s),
            cell(r.e2e_preemptions),
        ];
        for m in r.memory.iter().skip(1) {
            cells.extend([
                m.gather_gbps.to_string(),
                m.gather_copy_gbps.to_string(),
                m.copy_gbps.to_string(),
                m.stream_gbps.to_string(),
                cell(m.convert_stream_gbps),
                m.gather_frac_of_stream.to_string(),
                m.gather_copy_frac_of_copy.to_string(),
                cell(m.attention_gbps),
                cell(m.attention_frac_of_stream),
            ]);
        }
        out += &(cells.join(",") + "\n");
    }
    out
}

fn series(name: &str, rows: &[SweepRow], y: impl Fn(&SweepRow) -> Option<f64>) -> Series {
    Series {
        name: name.into(),
        points: rows
            .iter()
            .filter_map(|r| y(r).map(|v| (r.block_size as f64, v)))
            .collect(),
    }
}

/// Writes `sweep.csv`, `sweep.json`, `waste_concurrency.svg`, `bandwidth.svg`, and with bandwidth
/// measured `attention_profile.json`, with end-to-end runs `end_to_end.svg`, into `dir` (created if
/// missing); returns the paths written.
pub fn write_all(report: &SweepReport, dir: &Path) -> Result<Vec<String>, BoxError> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut written = Vec::new();
    let mut write = |name: &str, text: String| -> Result<(), BoxError> {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path.display().to_string());
        Ok(())
    };
    write("sweep.csv", csv(report))?;
    write("sweep.json", serde_json::to_string_pretty(report)? + "\n")?;
    let profile = super::end_to_end::profile(&report.rows, &report.device);
    if profile.measured {
        write(
            "attention_profile.json",
            serde_json::to_string_pretty(&profile)? + "\n",
        )?;
    }

    let rows = &report.rows;
    let x = Axis::log2("block size (tokens)");
    // Concurrency as % of the best row, so it shares an axis with waste and prefix loss.
    let best = rows
        .iter()
        .map(|r| r.concurrent_requests)
        .fold(0.0, f64::max);
    let path = dir.join("waste_concurrency.svg");
    line_plot(
        &path,
        &format!("{}: memory side ({})", report.model.name, report.workload),
        &x,
        "%",
        &[
            series("internal waste %", rows, |r| Some(r.internal_waste_pct)),
            series("concurrent requests, % of best", rows, |r| {
                (best > 0.0).then(|| 100.0 * r.concurrent_requests / best)
            }),
            series("prefix share lost %", rows, |r| r.prefix_share_lost_pct),
        ],
    )?;
    written.push(path.display().to_string());

    let path = dir.join("bandwidth.svg");
    let mut bw = Vec::new();
    let labels: Vec<String> = rows
        .first()
        .map(|r| r.memory.iter().map(|m| m.memory.clone()).collect())
        .unwrap_or_default();
    for (i, label) in labels.iter().enumerate() {
        let at = |r: &SweepRow| r.memory.get(i).cloned();
        bw.push(series(&format!("gather / stream ({label})"), rows, |r| {
            at(r).map(|m| m.gather_frac_of_stream)
        }));
        bw.push(series(
            &format!("gather copy / copy ({label})"),
            rows,
            |r| at(r).map(|m| m.gather_copy_frac_of_copy),
        ));
        bw.push(series(
            &format!("attention / stream ({label})"),
            rows,
            |r| at(r).and_then(|m| m.attention_frac_of_stream),
        ));
    }
    bw.retain(|s| !s.points.is_empty());
    if !report.end_to_end.is_empty() {
        let path = dir.join("end_to_end.svg");
        let e2e = &report.end_to_end;
        let pts = |f: &dyn Fn(&super::end_to_end::EndToEnd) -> f64| -> Vec<(f64, f64)> {
            e2e.iter().map(|e| (e.block_size as f64, f(e))).collect()
        };
        let def = e2e
            .iter()
            .find(|e| e.block_size == super::VLLM_DEFAULT_BLOCK_SIZE);
        let rel = |f: fn(&super::end_to_end::Figures) -> f64| {
            let base = def.map_or(f64::NAN, |d| f(&d.nominal));
            pts(&move |e| 100.0 * f(&e.nominal) / base)
        };
        line_plot(
            &path,
            &format!(
                "{}: end to end, % of block size 16 ({})",
                report.model.name, report.workload
            ),
            &x,
            "% of block size 16",
            &[
                Series {
                    name: "output tokens/s".into(),
                    points: rel(|f| f.output_tokens_per_s),
                },
                Series {
                    name: "p99 TTFT".into(),
                    points: rel(|f| f.p99_ttft_s),
                },
                Series {
                    name: "p99 TPOT".into(),
                    points: rel(|f| f.p99_tpot_s),
                },
            ],
        )?;
        written.push(path.display().to_string());
    }
    line_plot(
        &path,
        &format!(
            "{}: bandwidth fraction on {}",
            report.model.name, report.device
        ),
        &x,
        "fraction of the limit",
        &bw,
    )?;
    written.push(path.display().to_string());
    Ok(written)
}
