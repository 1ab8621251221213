//! `sim engine --out DIR`: the report as JSON and SVG plots.

use super::metrics::EngineReport;
use super::run::Outcome;
use crate::report::{line_plot, Axis, Series};
use serde::Serialize;
use std::path::Path;

type BoxError = Box<dyn std::error::Error>;

/// Every `k`-th point, at most about `max` of them.
fn thin<T: Copy>(v: &[T], max: usize) -> Vec<T> {
    let k = v.len().div_ceil(max.max(1)).max(1);
    v.iter().step_by(k).copied().collect()
}

/// Writes `engine.json` (`json`) and the plots: for one run `kv_utilization.svg` and `batch.svg`
/// over time (with its timeline recorded), for several `throughput.svg` and `latency.svg` per
/// block size.
pub fn write_all(dir: &Path, json: &impl Serialize, outcomes: &[Outcome]) -> Result<(), BoxError> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("engine.json");
    std::fs::write(&path, serde_json::to_string_pretty(json)? + "\n")
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let unit = outcomes[0].report.time_unit;
    if let [o] = outcomes {
        let pts = thin(&o.timeline, 2000);
        let usable = o.num_gpu_blocks.saturating_sub(1).max(1) as f64;
        line_plot(
            &dir.join("kv_utilization.svg"),
            &format!("KV blocks in use, block size {}", o.block_size),
            &Axis::linear(&format!("time ({unit})")),
            "% of the pool",
            &[Series {
                name: "KV utilisation %".into(),
                points: pts
                    .iter()
                    .map(|p| (p.time, 100.0 * f64::from(p.used_blocks) / usable))
                    .collect(),
            }],
        )?;
        line_plot(
            &dir.join("batch.svg"),
            &format!("Requests running and waiting, block size {}", o.block_size),
            &Axis::linear(&format!("time ({unit})")),
            "requests",
            &[
                Series {
                    name: "running".into(),
                    points: pts.iter().map(|p| (p.time, f64::from(p.running))).collect(),
                },
                Series {
                    name: "waiting".into(),
                    points: pts.iter().map(|p| (p.time, f64::from(p.waiting))).collect(),
                },
            ],
        )?;
    } else {
        let series = |name: &str, f: &dyn Fn(&EngineReport) -> Option<f64>| Series {
            name: name.into(),
            points: outcomes
                .iter()
                .filter_map(|o| f(&o.report).map(|y| (o.block_size.get() as f64, y)))
                .collect(),
        };
        let x = Axis::log2("block size (tokens)");
        line_plot(
            &dir.join("throughput.svg"),
            "Throughput per block size",
            &x,
            &format!("output tokens / {unit}"),
            &[series("output tokens", &|r| {
                Some(r.throughput.output_tokens_per_time)
            })],
        )?;
        line_plot(
            &dir.join("latency.svg"),
            "p99 latencies per block size",
            &x,
            &unit.to_string(),
            &[
                series("p99 TTFT", &|r| r.latency.ttft.map(|d| d.p99)),
                series("p99 TPOT", &|r| r.latency.tpot.map(|d| d.p99)),
            ],
        )?;
    }
    Ok(())
}
