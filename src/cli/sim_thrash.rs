//! `pagedkv sim thrash`: a phased working set with random accesses replayed against memories of
//! several sizes under LRU; fault rate, mean access time, and the knee at the working-set size.

use crate::cli::{count, count_u64, CmdResult};
use crate::report::{line_plot, Axis, Series, Table};
use crate::sim::thrash::{self, Costs, Pattern, PhasedWorkload, ThrashRow};
use serde::Serialize;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Pages that exist (random accesses land anywhere among them).
    #[arg(long, default_value_t = 65536, value_parser = count_u64(0..))]
    universe: u64,
    /// Pages each phase touches.
    #[arg(long, default_value_t = 1024, value_parser = count_u64(0..))]
    working_set: u64,
    #[arg(long, default_value_t = 8, value_parser = count(0..))]
    phases: usize,
    /// Accesses per phase.
    #[arg(long, default_value_t = 20000, value_parser = count(0..))]
    phase_len: usize,
    /// Probability that an access goes to a random page instead of the working set.
    #[arg(long, default_value_t = 0.01)]
    random_share: f64,
    /// How a phase walks its working set.
    #[arg(long, value_enum, default_value = "uniform")]
    pattern: Pattern,
    /// Memory sizes in pages (default: W/8 to 4W, dense near W).
    #[arg(long, value_delimiter = ',', value_parser = count_u64(0..))]
    frames: Vec<u64>,
    /// Cost of an access that hits, in ns.
    #[arg(long, default_value_t = 100.0)]
    hit_ns: f64,
    /// Cost of an access that faults (bring the page in), in ns.
    #[arg(long, default_value_t = 100_000.0)]
    fault_ns: f64,
    /// Knee: the first size whose fault rate is within this share of the total drop above the floor.
    #[arg(long, default_value_t = 0.05)]
    knee_band: f64,
    #[arg(long, default_value_t = 1, value_parser = count_u64(0..))]
    seed: u64,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Write SVG plots (fault rate and access time against memory size) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Serialize)]
struct Report {
    workload: PhasedWorkload,
    costs: Costs,
    knee_frames: Option<u64>,
    rows: Vec<ThrashRow>,
}

fn plots(dir: &std::path::Path, rows: &[ThrashRow], working_set: u64) -> CmdResult {
    std::fs::create_dir_all(dir)?;
    let pts = |f: &dyn Fn(&ThrashRow) -> f64| -> Vec<(f64, f64)> {
        rows.iter().map(|r| (r.frames as f64, f(r))).collect()
    };
    let peak = rows.iter().map(|r| r.fault_rate).fold(0.0, f64::max);
    let ws_line = Series {
        name: format!("working set ({working_set} pages)"),
        points: vec![
            (working_set as f64, 0.0),
            (working_set as f64, 100.0 * peak),
        ],
    };
    line_plot(
        &dir.join("thrash_fault_rate.svg"),
        "Fault rate against memory size (LRU)",
        &Axis::linear("memory (pages)"),
        "fault rate (%)",
        &[
            Series {
                name: "measured".into(),
                points: pts(&|r| 100.0 * r.fault_rate),
            },
            Series {
                name: "estimate".into(),
                points: pts(&|r| 100.0 * r.estimate),
            },
            ws_line,
        ],
    )?;
    line_plot(
        &dir.join("thrash_access_time.svg"),
        "Mean access time against memory size (LRU)",
        &Axis::linear("memory (pages)"),
        "mean access time (ns)",
        &[Series {
            name: "measured".into(),
            points: pts(&|r| r.avg_access_ns),
        }],
    )?;
    Ok(())
}

pub fn run(args: Args) -> CmdResult {
    if !(0.0..=1.0).contains(&args.knee_band) {
        return Err(format!("knee band must lie in [0, 1], got {}", args.knee_band).into());
    }
    let workload = PhasedWorkload {
        universe: args.universe,
        working_set: args.working_set,
        phases: args.phases,
        phase_len: args.phase_len,
        random_share: args.random_share,
        pattern: args.pattern,
        seed: args.seed,
    };
    let frames = if args.frames.is_empty() {
        thrash::default_frames(args.working_set)
    } else {
        args.frames.clone()
    };
    let costs = Costs {
        hit_ns: args.hit_ns,
        fault_ns: args.fault_ns,
    };
    let rows = thrash::sweep(&workload, &frames, costs)?;
    let knee = thrash::knee(&rows, args.knee_band);
    if let Some(dir) = &args.out {
        plots(dir, &rows, args.working_set)?;
    }
    if args.json {
        let report = Report {
            workload,
            costs,
            knee_frames: knee,
            rows,
        };
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(());
    }
    outln!(
        "{} phases × {} accesses, working set {} of {} pages, {:.1}% random, {:?}; hit {} ns, \
         fault {} ns",
        args.phases,
        args.phase_len,
        args.working_set,
        args.universe,
        100.0 * args.random_share,
        args.pattern,
        args.hit_ns,
        args.fault_ns
    )?;
    let mut t = Table::new([
        "frames",
        "× W",
        "faults",
        "fault rate",
        "estimate",
        "mean ns",
        "slowdown",
    ]);
    for r in &rows {
        t.row([
            r.frames.to_string(),
            format!("{:.3}", r.memory_ratio),
            r.faults.to_string(),
            format!("{:.2}%", 100.0 * r.fault_rate),
            format!("{:.2}%", 100.0 * r.estimate),
            format!("{:.0}", r.avg_access_ns),
            format!("{:.1}x", r.slowdown),
        ]);
    }
    out!("{t}")?;
    match knee {
        Some(k) => outln!(
            "knee: {k} frames ({:.3} × the working set of {}): the first size within {:.0}% of \
             the floor",
            k as f64 / args.working_set as f64,
            args.working_set,
            100.0 * args.knee_band
        )?,
        None => outln!("knee: none (fault rate does not fall across these sizes)")?,
    }
    Ok(())
}
