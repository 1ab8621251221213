//! Sweep output files: `sweep.csv`, `sweep.json`, the SVG plots (`waste_concurrency.svg`,
//! `bandwidth.svg`, `end_to_end.svg`: the SLO capacity), the attention efficiency profile the
//! engine simulator reads (`attention_profile.json`) and `index.html` ([`super::html`]), all from a
//! [`SweepReport`].

use super::{MemoryBandwidth, SweepReport, SweepRow};
use crate::report::{line_plot_with, Axis, Band, Extras, Mark, Series};

/// The report to open in a browser.
pub const INDEX_HTML: &str = "index.html";
use serde::Serialize;
use std::path::Path;

type BoxError = Box<dyn std::error::Error>;

/// The CSV's own columns: one row's figures, empty cells where a figure was not measured.
#[derive(Serialize, Default)]
struct RowCells {
    block_size: usize,
    pool_blocks: u64,
    internal_waste_pct: f64,
    concurrent_requests: f64,
    tw_concurrent_requests: Option<f64>,
    peak_blocks_in_use: Option<u64>,
    peak_headroom: Option<f64>,
    prefix_share_lost_pct: Option<f64>,
    block_table_bytes_per_request: f64,
    block_table_bytes_pool: u64,
    block_table_bytes_padded: u64,
    gather_gbps: Option<f64>,
    gather_copy_gbps: Option<f64>,
    copy_gbps: Option<f64>,
    stream_gbps: Option<f64>,
    convert_stream_gbps: Option<f64>,
    gather_frac_of_stream: Option<f64>,
    gather_copy_frac_of_copy: Option<f64>,
    attention_gbps: Option<f64>,
    attention_frac_of_stream: Option<f64>,
    efficiency_noise: Option<f64>,
    proxy: f64,
    e2e_output_tokens_per_s: Option<f64>,
    e2e_p99_ttft_s: Option<f64>,
    e2e_p99_tpot_s: Option<f64>,
    e2e_preemptions: Option<u64>,
    e2e_kv_peak: Option<f64>,
    slo_capacity_rps: Option<f64>,
    slo_capacity_rate_scale: Option<f64>,
    slo_capacity_low_rps: Option<f64>,
    slo_capacity_high_rps: Option<f64>,
    goodput_at_capacity_rps: Option<f64>,
    kv_peak_at_capacity: Option<f64>,
    preemptions_at_capacity: Option<u64>,
    e2e_p99_tbt_s: Option<f64>,
    e2e_slo_attainment: Option<f64>,
}

/// The columns of each probe after the first, suffixed with its memory label (`gather_gbps_4k`).
#[derive(Serialize, Default)]
struct ProbeCells {
    gather_gbps: Option<f64>,
    gather_copy_gbps: Option<f64>,
    copy_gbps: Option<f64>,
    stream_gbps: f64,
    convert_stream_gbps: Option<f64>,
    gather_frac_of_stream: Option<f64>,
    gather_copy_frac_of_copy: Option<f64>,
    attention_gbps: Option<f64>,
    attention_frac_of_stream: Option<f64>,
}

impl From<&SweepRow> for RowCells {
    fn from(r: &SweepRow) -> Self {
        RowCells {
            block_size: r.block_size.get(),
            pool_blocks: r.pool_blocks,
            internal_waste_pct: r.pool.internal_waste_pct,
            concurrent_requests: r.pool.concurrent_requests,
            tw_concurrent_requests: r.pool.tw_concurrent_requests,
            peak_blocks_in_use: r.pool.peak_blocks_in_use,
            peak_headroom: r.pool.peak_headroom,
            prefix_share_lost_pct: r.pool.prefix_share_lost_pct,
            block_table_bytes_per_request: r.pool.block_table_bytes_per_request,
            block_table_bytes_pool: r.pool.block_table_bytes_pool,
            block_table_bytes_padded: r.pool.block_table_bytes_padded,
            gather_gbps: r.first_probe.gather_gbps,
            gather_copy_gbps: r.first_probe.gather_copy_gbps,
            copy_gbps: r.first_probe.copy_gbps,
            stream_gbps: r.first_probe.stream_gbps,
            convert_stream_gbps: r.first_probe.convert_stream_gbps,
            gather_frac_of_stream: r.first_probe.gather_frac_of_stream,
            gather_copy_frac_of_copy: r.first_probe.gather_copy_frac_of_copy,
            attention_gbps: r.first_probe.attention_gbps,
            attention_frac_of_stream: r.first_probe.attention_frac_of_stream,
            efficiency_noise: r.first_probe.efficiency_noise,
            proxy: r.proxy,
            e2e_output_tokens_per_s: r.at_trace_rate.e2e_output_tokens_per_s,
            e2e_p99_ttft_s: r.at_trace_rate.e2e_p99_ttft_s,
            e2e_p99_tpot_s: r.at_trace_rate.e2e_p99_tpot_s,
            e2e_preemptions: r.at_trace_rate.e2e_preemptions,
            e2e_kv_peak: r.at_trace_rate.e2e_kv_peak,
            slo_capacity_rps: r.capacity.slo_capacity_rps,
            slo_capacity_rate_scale: r.capacity.slo_capacity_rate_scale,
            slo_capacity_low_rps: r.capacity.slo_capacity_low_rps,
            slo_capacity_high_rps: r.capacity.slo_capacity_high_rps,
            goodput_at_capacity_rps: r.capacity.goodput_at_capacity_rps,
            kv_peak_at_capacity: r.capacity.kv_peak_at_capacity,
            preemptions_at_capacity: r.capacity.preemptions_at_capacity,
            e2e_p99_tbt_s: r.at_trace_rate.e2e_p99_tbt_s,
            e2e_slo_attainment: r.at_trace_rate.e2e_slo_attainment,
        }
    }
}

impl From<&MemoryBandwidth> for ProbeCells {
    fn from(m: &MemoryBandwidth) -> Self {
        ProbeCells {
            gather_gbps: m.gather_gbps,
            gather_copy_gbps: m.gather_copy_gbps,
            copy_gbps: m.copy_gbps,
            stream_gbps: m.stream_gbps,
            convert_stream_gbps: m.convert_stream_gbps,
            gather_frac_of_stream: m.gather_frac_of_stream,
            gather_copy_frac_of_copy: m.gather_copy_frac_of_copy,
            attention_gbps: m.attention_gbps,
            attention_frac_of_stream: m.attention_frac_of_stream,
        }
    }
}

/// The column names csv gives a flat record type: its serde field names.
fn columns<T: Serialize + Default>() -> Result<Vec<String>, BoxError> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.serialize(T::default())?;
    let text = w.into_inner().map_err(|e| e.to_string())?;
    let mut r = csv::Reader::from_reader(&text[..]);
    Ok(r.headers()?.iter().map(String::from).collect())
}

/// The CSV: one row per block size (a [`RowCells`], then a [`ProbeCells`] per further probe).
/// Numbers are written as sweep.json writes them: the shortest text that reads back exactly.
pub fn csv(rows: &[SweepRow]) -> Result<String, BoxError> {
    let mut header = columns::<RowCells>()?;
    let probe_columns = columns::<ProbeCells>()?;
    if let Some(first) = rows.first() {
        for m in first.memory.iter().skip(1) {
            header.extend(probe_columns.iter().map(|c| format!("{c}_{}", m.memory)));
        }
    }
    // Not flexible: a row with another number of probes than the first is an error.
    let mut w = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(Vec::new());
    w.write_record(&header)?;
    for r in rows {
        let probes: Vec<ProbeCells> = r.memory.iter().skip(1).map(ProbeCells::from).collect();
        w.serialize((RowCells::from(r), probes))?;
    }
    Ok(String::from_utf8(
        w.into_inner().map_err(|e| e.to_string())?,
    )?)
}

fn series(name: &str, rows: &[SweepRow], y: impl Fn(&SweepRow) -> Option<f64>) -> Series {
    Series {
        name: name.into(),
        points: rows
            .iter()
            .filter_map(|r| y(r).map(|v| (r.block_size.get() as f64, v)))
            .collect(),
    }
}

/// The plots' marks: vLLM's 16 and the recommended block size.
fn marks(report: &SweepReport) -> Vec<Mark> {
    let mut m = vec![Mark {
        x: report.verdict.vllm_default_block_size.get() as f64,
        label: format!("{}: vLLM's default", report.verdict.vllm_default_block_size),
    }];
    if let Some(r) = report.verdict.recommended_block_size {
        m.push(Mark {
            x: r.get() as f64,
            label: format!("{r}: recommended"),
        });
    }
    m
}

/// Writes `sweep.csv`, `sweep.json`, `waste_concurrency.svg`, `bandwidth.svg`, with bandwidth
/// measured `attention_profile.json`, with end-to-end runs `end_to_end.svg`, and `index.html`
/// into `dir` (created if missing); returns the paths written.
pub fn write_all(report: &SweepReport, dir: &Path) -> Result<Vec<String>, BoxError> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut written = Vec::new();
    let mut write = |name: &str, text: String| -> Result<(), BoxError> {
        let path = dir.join(name);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        written.push(path.display().to_string());
        Ok(())
    };
    write("sweep.csv", csv(&report.rows)?)?;
    write("sweep.json", serde_json::to_string_pretty(report)? + "\n")?;
    let profile = super::end_to_end::profile(&report.rows, &report.device);
    if profile.measured {
        write(
            "attention_profile.json",
            serde_json::to_string_pretty(&profile)? + "\n",
        )?;
    }
    write(INDEX_HTML, super::html::index(report))?;

    let x = Axis::log2("block size (tokens)");
    let marks = marks(report);
    let path = dir.join("waste_concurrency.svg");
    plot_memory_side(report, &path, &x, marks.clone())?;
    written.push(path.display().to_string());
    let path = dir.join("bandwidth.svg");
    plot_bandwidth(report, &path, &x, marks.clone())?;
    written.push(path.display().to_string());
    if !report.e2e.end_to_end.is_empty() {
        let path = dir.join("end_to_end.svg");
        plot_end_to_end(report, &path, &x, marks)?;
        written.push(path.display().to_string());
    }
    Ok(written)
}

/// `waste_concurrency.svg`: the memory side's three losses on one axis.
fn plot_memory_side(
    report: &SweepReport,
    path: &Path,
    x: &Axis,
    marks: Vec<Mark>,
) -> Result<(), BoxError> {
    let rows = &report.rows;
    // Concurrency lost against the best row, in %, so all three are losses on one axis.
    let best = rows
        .iter()
        .map(|r| r.pool.concurrent_requests)
        .fold(0.0, f64::max);
    line_plot_with(
        path,
        &format!(
            "{}: memory side ({})",
            report.setting.model.name, report.setting.workload
        ),
        x,
        "% lost (each series its own measure)",
        &[
            series("internal waste, % of slots", rows, |r| {
                Some(r.pool.internal_waste_pct)
            }),
            series("concurrent requests lost vs the best size, %", rows, |r| {
                (best > 0.0).then(|| 100.0 * (1.0 - r.pool.concurrent_requests / best))
            }),
            series("prefix tokens lost, %", rows, |r| {
                r.pool.prefix_share_lost_pct
            }),
        ],
        &Extras {
            marks,
            include_zero: true,
            ..Extras::default()
        },
    )
}

/// Per memory, the bandwidth shares measured beside each row, with the noise band on the one
/// the recommendation uses.
fn bandwidth_series(rows: &[SweepRow]) -> (Vec<Series>, Vec<Band>) {
    let mut bw = Vec::new();
    let mut bands = Vec::new();
    let labels: Vec<String> = rows
        .first()
        .map(|r| r.memory.iter().map(|m| m.memory.clone()).collect())
        .unwrap_or_default();
    for (i, label) in labels.iter().enumerate() {
        let at = |r: &SweepRow| r.memory.get(i).cloned();
        // The efficiency the recommendation uses carries the measured noise band.
        let attention = rows
            .iter()
            .any(|r| at(r).and_then(|m| m.attention_frac_of_stream).is_some());
        let band = |f: fn(&MemoryBandwidth) -> Option<f64>| Band {
            series: 0,
            points: rows
                .iter()
                .filter_map(|r| {
                    let m = at(r)?;
                    let (v, n) = (f(&m)?, m.efficiency_noise?);
                    Some((
                        r.block_size.get() as f64,
                        (v * (1.0 - n)).max(0.0),
                        v * (1.0 + n),
                    ))
                })
                .collect(),
        };
        let mut push = |s: Series, b: Option<Band>| {
            if s.points.is_empty() {
                return;
            }
            if let Some(mut b) = b {
                b.series = bw.len();
                bands.push(b);
            }
            bw.push(s);
        };
        push(
            series(&format!("attention / stream ({label})"), rows, |r| {
                at(r).and_then(|m| m.attention_frac_of_stream)
            }),
            attention.then(|| band(|m| m.attention_frac_of_stream)),
        );
        push(
            series(&format!("gather / stream ({label})"), rows, |r| {
                at(r).and_then(|m| m.gather_frac_of_stream)
            }),
            (!attention).then(|| band(|m| m.gather_frac_of_stream)),
        );
        push(
            series(&format!("gather copy / copy ({label})"), rows, |r| {
                at(r).and_then(|m| m.gather_copy_frac_of_copy)
            }),
            None,
        );
    }
    (bw, bands)
}

/// `bandwidth.svg`: the bandwidth shares against block size.
fn plot_bandwidth(
    report: &SweepReport,
    path: &Path,
    x: &Axis,
    marks: Vec<Mark>,
) -> Result<(), BoxError> {
    let rows = &report.rows;
    let (bw, bands) = bandwidth_series(rows);
    line_plot_with(
        path,
        &format!(
            "{}: bandwidth as a fraction of the limit measured beside it, {}",
            report.setting.model.name, report.device
        ),
        x,
        "fraction of the limit",
        &bw,
        &Extras {
            bands,
            marks,
            include_zero: false,
        },
    )
}

/// `end_to_end.svg`: the SLO capacity (with its band) and the goodput at it.
fn plot_end_to_end(
    report: &SweepReport,
    path: &Path,
    x: &Axis,
    marks: Vec<Mark>,
) -> Result<(), BoxError> {
    let rows = &report.rows;
    let slo = report
        .e2e
        .end_to_end_settings
        .as_ref()
        .map(|s| s.slo.targets)
        .unwrap_or_default();
    let capacity = series("SLO capacity, req/s", rows, |r| r.capacity.slo_capacity_rps);
    let goodput = series("goodput at capacity, req/s", rows, |r| {
        r.capacity.goodput_at_capacity_rps
    });
    let band = Band {
        series: 0,
        points: rows
            .iter()
            .filter_map(|r| {
                Some((
                    r.block_size.get() as f64,
                    r.capacity.slo_capacity_low_rps?,
                    r.capacity.slo_capacity_high_rps?,
                ))
            })
            .collect(),
    };
    line_plot_with(
        path,
        &format!(
            "{}: SLO capacity ({}), simulated {}",
            report.setting.model.name,
            slo.describe(),
            report.setting.engine_gpu
        ),
        x,
        "requests per second",
        &[capacity, goodput],
        &Extras {
            bands: vec![band],
            marks,
            include_zero: false,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::{AtTraceRate, FirstProbe, PoolUse, SloCapacityFigures};

    fn probe(memory: &str, gather_gbps: f64) -> MemoryBandwidth {
        MemoryBandwidth {
            memory: memory.into(),
            copy_gbps: Some(20.0),
            stream_gbps: 40.0,
            convert_stream_gbps: None,
            gather_gbps: Some(gather_gbps),
            gather_frac_of_stream: Some(gather_gbps / 40.0),
            gather_copy_gbps: Some(10.0),
            gather_copy_frac_of_copy: Some(0.5),
            attention_gbps: Some(0.1),
            attention_frac_of_stream: None,
            efficiency_noise: None,
        }
    }

    fn row(block_size: u32, memory: Vec<MemoryBandwidth>) -> SweepRow {
        SweepRow {
            block_size: crate::kv::BlockSize::of(block_size),
            pool_blocks: 1000 / u64::from(block_size),
            pool: PoolUse {
                internal_waste_pct: 12.5,
                concurrent_requests: 3.0,
                tw_concurrent_requests: None,
                peak_blocks_in_use: Some(7),
                peak_headroom: None,
                prefix_share_lost_pct: None,
                block_table_bytes_per_request: 1e-7,
                block_table_bytes_pool: 4096,
                block_table_bytes_padded: 8192,
            },
            first_probe: FirstProbe {
                gather_gbps: memory[0].gather_gbps,
                ..FirstProbe::default()
            },
            memory,
            proxy: 0.75,
            at_trace_rate: AtTraceRate {
                e2e_preemptions: Some(2),
                e2e_slo_attainment: Some(0.5),
                ..AtTraceRate::default()
            },
            capacity: SloCapacityFigures {
                slo_capacity_rps: Some(31.5),
                slo_capacity_rate_scale: Some(5.0),
                kv_peak_at_capacity: Some(0.25),
                preemptions_at_capacity: Some(0),
                ..SloCapacityFigures::default()
            },
        }
    }

    #[test]
    fn csv_has_a_column_per_figure_and_per_further_probe() {
        let rows = [
            row(16, vec![probe("thp", 30.0), probe("4k", 25.5)]),
            row(32, vec![probe("thp", 31.0), probe("4k", 26.0)]),
        ];
        let text = csv(&rows).unwrap();
        let mut r = csv::Reader::from_reader(text.as_bytes());
        let header: Vec<String> = r.headers().unwrap().iter().map(String::from).collect();
        assert_eq!(header.len(), 36 + 9);
        assert_eq!(header[0], "block_size");
        assert_eq!(header[21], "proxy");
        assert_eq!(header[25], "e2e_preemptions");
        assert_eq!(header[33], "preemptions_at_capacity");
        assert_eq!(header[35], "e2e_slo_attainment");
        assert_eq!(header[36], "gather_gbps_4k");
        assert_eq!(header[44], "attention_frac_of_stream_4k");
        let records: Vec<csv::StringRecord> = r.records().map(Result::unwrap).collect();
        assert_eq!(records.len(), 2);
        let cell = |i: usize, name: &str| {
            let col = header.iter().position(|h| h == name).unwrap();
            records[i][col].to_string()
        };
        assert_eq!(cell(0, "block_size"), "16");
        assert_eq!(cell(1, "pool_blocks"), "31");
        assert_eq!(
            cell(0, "tw_concurrent_requests"),
            "",
            "None is an empty cell"
        );
        assert_eq!(cell(0, "peak_blocks_in_use"), "7");
        assert_eq!(cell(0, "gather_gbps"), "30.0");
        assert_eq!(cell(1, "gather_gbps_4k"), "26.0");
        assert_eq!(
            cell(0, "gather_frac_of_stream_4k"),
            (25.5 / 40.0).to_string()
        );
        assert_eq!(cell(0, "attention_gbps_4k"), "0.1");
        assert_eq!(cell(0, "convert_stream_gbps_4k"), "");
        let tiny: f64 = cell(0, "block_table_bytes_per_request").parse().unwrap();
        assert_eq!(tiny, 1e-7);
        assert_eq!(cell(1, "e2e_preemptions"), "2");
        assert_eq!(cell(0, "slo_capacity_rps"), "31.5");
        assert_eq!(cell(0, "kv_peak_at_capacity"), "0.25");
        // No rows: the header alone. Rows with different probes: an error, not a ragged file.
        assert_eq!(csv(&[]).unwrap().lines().count(), 1);
        let ragged = [
            row(16, vec![probe("thp", 1.0), probe("4k", 1.0)]),
            row(32, vec![probe("thp", 1.0)]),
        ];
        assert!(csv(&ragged).is_err());
    }
}
