//! `pagedkv sim cache`: hit ratios of eviction policies over a key workload, per capacity, with
//! OPT's hit ratio beside each row; `--out DIR` adds miss-ratio curves (SVG and JSON).

use crate::cli::{count, count_u64, CheckFailed, CmdResult};
use crate::host_memory;
use crate::report::{line_plot, Axis, Series, Table};
use crate::sim::cache::next_uses;
use crate::sim::cache::{
    capacity_grid, least_sweep_bytes, miss_ratio_curves, parse_capacities, sweep, CacheRow, Costs,
    CurvePoints, Policy, SweepSpec,
};
use crate::value_names::list_or_all;
use crate::workload::cache_trace::{write_oracle, TraceFormat, TraceReadOptions};
use crate::workload::key_gen::{key_trace, KeyGenParams};
use crate::workload::keys::{KeyTrace, KeyWorkload};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// Policies (comma-separated), or all.
    #[arg(long, value_parser = list_or_all::<Policy>("policy"))]
    policy: std::vec::Vec<Policy>,
    /// zipf|loop|scan|drift|seq:LIST|trace:FILE.
    #[arg(long)]
    workload: String,
    /// Trace file format; guessed from the file name if omitted.
    #[arg(long, value_enum)]
    format: Option<TraceFormat>,
    /// libCacheSim trace parameters for csv/txt, e.g. "obj-id-col=2, delimiter=,, has-header=true".
    #[arg(long)]
    trace_params: Option<String>,
    /// Zipf exponent of zipf, scan and drift (0 = uniform).
    #[arg(long, default_value_t = 1.0)]
    alpha: f64,
    /// Number of keys of the generated workloads.
    #[arg(long, default_value_t = 10_000)]
    keys: u32,
    /// Hot-set size of scan and drift [default: keys / 10].
    #[arg(long)]
    hot: Option<u32>,
    /// Requests to generate, or to read from a trace [default: 1000000, or the whole trace].
    #[arg(long, value_parser = count(0..))]
    requests: Option<usize>,
    /// Capacities in entries, or percentages of the distinct keys: 100,1000 or 1%,10%.
    #[arg(long)]
    capacity: String,
    #[arg(long, default_value_t = 0, value_parser = count_u64(0..))]
    seed: u64,
    /// Cost of a hit, for the average access cost.
    #[arg(long, default_value_t = 1.0)]
    hit_cost: f64,
    /// Cost of a miss, for the average access cost.
    #[arg(long, default_value_t = 100.0)]
    miss_cost: f64,
    /// Write miss-ratio curves to DIR (cache_mrc.svg, cache_mrc.json).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Capacities on each curve (spread geometrically up to the largest --capacity).
    #[arg(long, default_value_t = 24, value_parser = count(0..))]
    curve_points: usize,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Leave out OPT's run at each capacity (and the "of OPT" column): a policy alone, for timing.
    #[arg(long)]
    no_opt: bool,
    /// Time each run's policy loop alone (its thread's CPU time and the wall clock; reading the
    /// trace and setting up the tables are outside it): core_time in the JSON.
    #[arg(long)]
    time_core: bool,
    /// Write the requests simulated to FILE as an oracleGeneral trace (libCacheSim's binary
    /// format: time = request index, id = key, size 1, next access), for other simulators.
    #[arg(long, value_name = "FILE")]
    write_trace: Option<PathBuf>,
}

fn build_trace(
    args: &Args,
    workload: &KeyWorkload,
) -> Result<KeyTrace, Box<dyn std::error::Error>> {
    let is_file = matches!(workload, KeyWorkload::Trace(_));
    let params = KeyGenParams {
        keys: args.keys,
        alpha: args.alpha,
        requests: args
            .requests
            .unwrap_or(if is_file { usize::MAX } else { 1_000_000 }),
        hot: args.hot,
        seed: args.seed,
    };
    if !is_file {
        let what = format!("sim cache with {} requests", params.requests);
        host_memory::ensure_fits(least_sweep_bytes(params.requests), &what)?;
    }
    let mut read = TraceReadOptions::default();
    if let Some(p) = &args.trace_params {
        read.params = p.parse()?;
    }
    Ok(key_trace(workload, &params, args.format, &read)?)
}

fn table(rows: &[CacheRow]) -> Table {
    let timed = rows.iter().any(|r| r.core_time.is_some());
    let mut head = vec![
        "policy",
        "capacity",
        "requests",
        "hits",
        "misses",
        "hit ratio",
        "avg cost",
        "of OPT",
    ];
    if timed {
        head.extend(["core CPU ms", "core wall ms"]);
    }
    let mut t = Table::new(head);
    for r in rows {
        let of_opt = match r.opt_hit_ratio {
            Some(opt) if opt > 0.0 => format!("{:.1}%", 100.0 * r.hit_ratio / opt),
            _ => "-".into(),
        };
        let mut row = vec![
            r.policy.to_string(),
            r.capacity.to_string(),
            r.requests.to_string(),
            r.hits.to_string(),
            r.misses.to_string(),
            format!("{:.4}", r.hit_ratio),
            format!("{:.3}", r.avg_cost),
            of_opt,
        ];
        if let Some(c) = r.core_time {
            row.extend([
                format!("{:.1}", c.cpu_s * 1e3),
                format!("{:.1}", c.wall_s * 1e3),
            ]);
        }
        t.row(row);
    }
    t
}

fn write_trace(path: &Path, trace: &KeyTrace) -> CmdResult {
    let fail = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    let file = std::fs::File::create(path).map_err(fail)?;
    let next = next_uses(trace.keys(), trace.key_space());
    write_oracle(std::io::BufWriter::new(file), trace.keys(), &next).map_err(fail)?;
    Ok(())
}

/// The one-pass curves of LRU and OPT must agree with the direct runs of the table.
fn cross_check(rows: &[CacheRow], curves: &[CurvePoints]) -> CmdResult {
    for c in curves.iter().filter(|c| c.one_pass) {
        for r in rows.iter().filter(|r| r.policy == c.policy) {
            if let Some(&(_, miss)) = c.points.iter().find(|(cap, _)| *cap == r.capacity) {
                if (miss - (1.0 - r.hit_ratio)).abs() > 1e-12 {
                    return Err(Box::new(CheckFailed(format!(
                        "{} one-pass curve gives miss ratio {miss} at {}, the simulation {}",
                        c.policy,
                        r.capacity,
                        1.0 - r.hit_ratio
                    ))));
                }
            }
        }
    }
    Ok(())
}

fn write_curves(dir: &Path, title: &str, curves: &[CurvePoints]) -> CmdResult {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let series: Vec<Series> = curves
        .iter()
        .map(|c| Series {
            name: if c.one_pass {
                format!("{} (one pass)", c.policy)
            } else {
                c.policy.to_string()
            },
            points: c.points.iter().map(|&(x, y)| (x as f64, y)).collect(),
        })
        .collect();
    line_plot(
        &dir.join("cache_mrc.svg"),
        title,
        &Axis::log2("capacity (entries)"),
        "miss ratio",
        &series,
    )?;
    std::fs::write(
        dir.join("cache_mrc.json"),
        serde_json::to_string_pretty(curves)?,
    )?;
    Ok(())
}

pub fn run(args: Args) -> CmdResult {
    let policies = args.policy.clone();
    let workload: KeyWorkload = args.workload.parse()?;
    let costs = Costs::new(args.hit_cost, args.miss_cost)?;
    let trace = build_trace(&args, &workload)?;
    let what = format!("sim cache on {} requests", trace.len());
    host_memory::ensure_fits(least_sweep_bytes(trace.len()), &what)?;
    if let Some(path) = &args.write_trace {
        write_trace(path, &trace)?;
    }
    let distinct = trace.distinct();
    let capacities = parse_capacities(&args.capacity, distinct)?;
    let spec = SweepSpec {
        policies: policies.clone(),
        capacities: capacities.clone(),
        costs,
        with_opt: !args.no_opt,
        time_core: args.time_core,
    };
    let rows = sweep(&trace, &spec)?;
    let summary = format!(
        "{}: {} requests, {} distinct keys",
        args.workload,
        trace.len(),
        distinct
    );
    if let Some(dir) = &args.out {
        let max = *capacities.iter().max().expect("at least one capacity");
        let mut grid = capacity_grid(max, args.curve_points);
        grid.extend(&capacities);
        grid.sort_unstable();
        grid.dedup();
        let curves = miss_ratio_curves(&trace, &policies, &grid)?;
        cross_check(&rows, &curves)?;
        write_curves(dir, &summary, &curves)?;
        let note = format!("wrote {}", dir.join("cache_mrc.svg").display());
        if args.json {
            eprintln!("{note}");
        } else {
            outln!("{note}")?;
        }
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(());
    }
    outln!("{summary}")?;
    outln!(
        "avg cost = hit ratio x {} + miss ratio x {}; of OPT = hit ratio / OPT's at the same capacity",
        costs.hit, costs.miss
    )?;
    out!("{}", table(&rows))?;
    Ok(())
}
