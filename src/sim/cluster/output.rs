//! `sim cluster --out DIR`: the report as JSON and SVG plots — requests in each replica over time
//! (one plot per run), and the prefix-cache hit ratio of each router against the replica count.

use super::outcome::ClusterOutcome;
use crate::report::{line_plot, Axis, Series};
use crate::sim::engine::TimeUnit;
use serde::Serialize;
use std::path::Path;

type BoxError = Box<dyn std::error::Error>;

/// Every `k`-th point, at most about `max` of them.
fn thin<T: Copy>(v: &[T], max: usize) -> Vec<T> {
    let k = v.len().div_ceil(max.max(1)).max(1);
    v.iter().step_by(k).copied().collect()
}

/// Writes `cluster.json` (`json`), `load_<router>_<replicas>.svg` per run (with timelines) and
/// `hit_ratio.svg`.
pub fn write_all(
    dir: &Path,
    json: &impl Serialize,
    outcomes: &[ClusterOutcome],
) -> Result<(), BoxError> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let path = dir.join("cluster.json");
    std::fs::write(&path, serde_json::to_string_pretty(json)? + "\n")
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let unit = outcomes
        .first()
        .map_or(TimeUnit::Seconds, |o| o.total.time_unit);
    for o in outcomes {
        let series: Vec<Series> = o
            .timelines
            .iter()
            .enumerate()
            .map(|(rep, t)| Series {
                name: format!("replica {rep}"),
                points: thin(t, 1500)
                    .iter()
                    .map(|p| (p.time, f64::from(p.running + p.waiting)))
                    .collect(),
            })
            .collect();
        line_plot(
            &dir.join(format!("load_{}_{}.svg", o.router, o.replicas)),
            &format!(
                "Requests in each replica (running + waiting), {} router, {} replicas",
                o.router, o.replicas
            ),
            &Axis::linear(&format!("time ({unit})")),
            "requests",
            &series,
        )?;
    }
    let mut routers: Vec<_> = outcomes.iter().map(|o| o.router).collect();
    routers.dedup();
    routers.sort_by_key(|r| *r as u8);
    routers.dedup();
    let hit: Vec<Series> = routers
        .iter()
        .map(|&r| Series {
            name: r.to_string(),
            points: outcomes
                .iter()
                .filter(|o| o.router == r)
                .map(|o| {
                    (
                        o.replicas as f64,
                        100.0 * o.total.prefix_cache.prefix_cache_hit_ratio.unwrap_or(0.0),
                    )
                })
                .collect(),
        })
        .collect();
    line_plot(
        &dir.join("hit_ratio.svg"),
        "GPU prefix-cache hit ratio per router",
        &Axis::log2("replicas"),
        "% of prompt tokens looked up",
        &hit,
    )?;
    Ok(())
}
