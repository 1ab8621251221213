//! `pagedkv sim sched`: run scheduling policies over a Poisson workload or a jobs file, print a
//! table (or JSON), and with `--out` plot mean response against load for every policy.

use crate::cli::{count, count_u64, CmdResult};
use crate::report::{line_plot, Axis, Series, Table};
use crate::sim::sched::{run_policy, Metrics, PolicyKind, PolicyReport, SchedParams};
use crate::value_names::list_or_all;
use crate::workload::jobs::{
    offered_load, parse_jobs_csv, poisson_jobs, Job, JobsError, PoissonWorkload, SizeDist,
};
use rayon::prelude::*;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum DistArg {
    Exp,
    Bimodal,
    Pareto,
    Lognormal,
    /// Every job of size 1 (M/D/1).
    Det,
}

#[derive(clap::Args)]
pub struct Args {
    /// Policies to simulate (comma-separated), or all.
    #[arg(long, value_parser = list_or_all::<PolicyKind>("policy"), default_value = "all")]
    policy: std::vec::Vec<PolicyKind>,
    /// Job-size distribution (mean 1).
    #[arg(long, value_enum, default_value = "exp")]
    dist: DistArg,
    /// Offered load ρ (arrival rate × mean size), below 1.
    #[arg(long, default_value_t = 0.8)]
    load: f64,
    /// Number of jobs.
    #[arg(long, default_value_t = 100_000, value_parser = count(1..=MAX_JOBS))]
    jobs: usize,
    #[arg(long, default_value_t = 1, value_parser = count_u64(0..))]
    seed: u64,
    /// Round-robin quantum; MLFQ's top-level allotment (doubling per level).
    #[arg(long, default_value_t = 0.1)]
    quantum: f64,
    /// Server time lost per preemption that hands the server to another job.
    #[arg(long, default_value_t = 0.0)]
    switch_cost: f64,
    /// srpt-pred: predicted size = size × e^N(0, sigma²).
    #[arg(long, default_value_t = 0.5)]
    sigma: f64,
    /// MLFQ levels.
    #[arg(long, default_value_t = 4)]
    levels: u8,
    /// MLFQ: boost every job back to the top level every this many time units.
    #[arg(long)]
    boost: Option<f64>,
    /// Aging: a batch job ranks like an interactive job arriving this much later.
    #[arg(long, default_value_t = 10.0)]
    aging: f64,
    /// Fraction of generated jobs that are interactive (the rest are batch).
    #[arg(long, default_value_t = 0.5)]
    interactive_fraction: f64,
    /// bimodal: probability of a large job.
    #[arg(long, default_value_t = 0.1)]
    bimodal_p: f64,
    /// bimodal: large size / small size.
    #[arg(long, default_value_t = 10.0)]
    bimodal_ratio: f64,
    /// pareto: shape (> 1; infinite variance at or below 2).
    #[arg(long, default_value_t = 1.5)]
    pareto_alpha: f64,
    /// lognormal: standard deviation of log size.
    #[arg(long, default_value_t = 1.0)]
    lognormal_sigma: f64,
    /// Jobs from a CSV file, lines `arrival,size[,class]`, instead of a generated workload.
    #[arg(long, conflicts_with_all = ["dist", "load", "jobs", "interactive_fraction"])]
    jobs_file: Option<PathBuf>,
    /// Table rows per class for every policy (default: only for prio and aging).
    #[arg(long)]
    per_class: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Write an SVG of mean response against load, one line per policy, into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

/// Job indices leave room for the engine's two sentinels.
const MAX_JOBS: usize = (u32::MAX - 2) as usize;

#[derive(Debug, thiserror::Error)]
enum ArgError {
    #[error("--load {0} must lie in (0, 1): at or above 1 the queue grows without bound and every mean grows with --jobs")]
    Unstable(f64),
    #[error("the jobs file holds {0} jobs, more than {MAX_JOBS}")]
    JobCount(usize),
    #[error("--out sweeps the load of a generated workload; it cannot be used with --jobs-file")]
    OutWithFile,
    #[error("cannot read jobs file {path}: {err}")]
    Read { path: String, err: std::io::Error },
}

impl Args {
    fn sizes(&self) -> SizeDist {
        match self.dist {
            DistArg::Exp => SizeDist::Exponential,
            DistArg::Bimodal => SizeDist::Bimodal {
                p_large: self.bimodal_p,
                ratio: self.bimodal_ratio,
            },
            DistArg::Pareto => SizeDist::Pareto {
                alpha: self.pareto_alpha,
            },
            DistArg::Lognormal => SizeDist::Lognormal {
                sigma: self.lognormal_sigma,
            },
            DistArg::Det => SizeDist::Deterministic,
        }
    }

    fn params(&self) -> SchedParams {
        SchedParams {
            quantum: self.quantum,
            switch_cost: self.switch_cost,
            levels: self.levels,
            boost: self.boost,
            aging_delay: self.aging,
            sigma: self.sigma,
            prediction_seed: self.seed,
        }
    }

    fn generated(&self, load: f64) -> Result<Vec<Job>, JobsError> {
        poisson_jobs(&PoissonWorkload {
            jobs: self.jobs,
            load,
            sizes: self.sizes(),
            interactive_fraction: self.interactive_fraction,
            seed: self.seed,
        })
    }
}

pub fn run(args: Args) -> CmdResult {
    let params = args.params();
    params.validate()?;
    let (jobs, source) = match &args.jobs_file {
        Some(path) => {
            if args.out.is_some() {
                return Err(ArgError::OutWithFile.into());
            }
            let text = std::fs::read_to_string(path).map_err(|err| ArgError::Read {
                path: path.display().to_string(),
                err,
            })?;
            let jobs = parse_jobs_csv(&text)?;
            if jobs.len() > MAX_JOBS {
                return Err(ArgError::JobCount(jobs.len()).into());
            }
            (jobs, path.display().to_string())
        }
        None => {
            if !(args.load > 0.0 && args.load < 1.0) {
                return Err(ArgError::Unstable(args.load).into());
            }
            args.sizes().validate()?;
            let jobs = args.generated(args.load)?;
            (
                jobs,
                format!("{:?} sizes, seed {}", args.sizes(), args.seed),
            )
        }
    };
    // Refused before any policy runs, not after the first ones have printed.
    for &kind in &args.policy {
        crate::sim::sched::check_event_count(&jobs, kind, &args.params())?;
    }
    let measured_load = offered_load(&jobs);
    if args.jobs_file.is_some() && measured_load >= 1.0 {
        eprintln!(
            "pagedkv: warning: the jobs file offers load {measured_load:.3} >= 1: the queue grows \
             over the run and means depend on its length"
        );
    }

    let policies = &args.policy;
    let runs: Vec<(PolicyReport, f64)> = policies
        .par_iter()
        .map(|&kind| {
            let start = Instant::now();
            run_policy(&jobs, kind, &params).map(|r| (r, start.elapsed().as_secs_f64()))
        })
        .collect::<Result<_, _>>()?;

    if let Some(dir) = &args.out {
        plot_load_sweep(&args, policies, &params, dir)?;
    }
    if args.json {
        let rows: Vec<&PolicyReport> = runs.iter().map(|(r, _)| r).collect();
        outln!("{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(());
    }
    outln!(
        "{} jobs ({source}), offered load {measured_load:.3}",
        jobs.len()
    )?;
    out!("{}", table(&runs, args.per_class))?;
    if args.jobs_file.is_none() {
        let m2 = args.sizes().second_moment();
        let l = args.load;
        outln!(
            "M/G/1 theory at this load: FCFS mean response {:.4} (Pollaczek–Khinchine), \
             processor sharing (RR as quantum → 0) {:.4}",
            1.0 + l * m2 / (2.0 * (1.0 - l)),
            1.0 / (1.0 - l)
        )?;
    }
    if let Some(dir) = &args.out {
        outln!("plot: {}", dir.join(PLOT_FILE).display())?;
    }
    Ok(())
}

const PLOT_FILE: &str = "sched_mean_response_vs_load.svg";

fn table(runs: &[(PolicyReport, f64)], per_class: bool) -> Table {
    let mut t = Table::new([
        "policy",
        "class",
        "mean resp",
        "p99 resp",
        "mean slowdown",
        "slowdown top 1%",
        "max first wait",
        "switch time",
        "wall s",
    ]);
    let cells = |m: &Metrics| {
        [
            format!("{:.4}", m.mean_response),
            format!("{:.4}", m.p99_response),
            format!("{:.4}", m.mean_slowdown),
            format!("{:.4}", m.large_slowdown),
            format!("{:.4}", m.max_first_wait),
        ]
    };
    for (r, secs) in runs {
        let mut row = vec![r.policy.to_string(), "all".into()];
        row.extend(cells(&r.all));
        row.push(format!("{:.4}", r.switch_time));
        // Simulation and metrics, policies running in parallel: see the criterion bench for speed.
        row.push(format!("{secs:.3}"));
        t.row(row);
        if per_class || r.policy.uses_classes() {
            for c in &r.per_class {
                let mut row = vec![String::new(), c.class.to_string()];
                row.extend(cells(&c.metrics));
                t.row(row);
            }
        }
    }
    t
}

/// Mean response against load for every policy, on the same sizes and seed; FCFS's
/// Pollaczek–Khinchine curve beside it when the second moment is finite.
fn plot_load_sweep(
    args: &Args,
    policies: &[PolicyKind],
    params: &SchedParams,
    dir: &std::path::Path,
) -> CmdResult {
    let loads: Vec<f64> = (1..=9).map(|i| i as f64 / 10.0).chain([0.95]).collect();
    let workloads: Vec<Vec<Job>> = loads
        .par_iter()
        .map(|&l| args.generated(l))
        .collect::<Result<_, _>>()?;
    let mut series = Vec::new();
    for &kind in policies {
        let points: Vec<(f64, f64)> = loads
            .par_iter()
            .zip(&workloads)
            .map(|(&l, jobs)| run_policy(jobs, kind, params).map(|r| (l, r.all.mean_response)))
            .collect::<Result<_, _>>()?;
        series.push(Series {
            name: kind.to_string(),
            points,
        });
    }
    let m2 = args.sizes().second_moment();
    if m2.is_finite() {
        series.push(Series {
            name: "fcfs theory (P-K)".into(),
            points: loads
                .iter()
                .map(|&l| (l, 1.0 + l * m2 / (2.0 * (1.0 - l))))
                .collect(),
        });
    }
    std::fs::create_dir_all(dir)?;
    let title = format!(
        "Mean response vs load ({:?} sizes, {} jobs, seed {})",
        args.sizes(),
        args.jobs,
        args.seed
    );
    line_plot(
        &dir.join(PLOT_FILE),
        &title,
        &Axis::linear("load ρ"),
        "mean response time (mean size = 1)",
        &series,
    )?;
    Ok(())
}
