//! `pagedkv sim alloc`: requests from a trace or a synthetic stream replayed against contiguous
//! allocation (first, best, worst fit; max-length reservation) and paging at each page size.

use crate::cli::{count, count_u64, CmdResult};
use crate::report::{line_plot, Axis, Series, Table};
use crate::sim::alloc::{self, AllocRow, ReplayConfig, SyntheticRequests};
use crate::workload::azure::read_azure_csv;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Azure LLM trace CSV (TIMESTAMP,ContextTokens,GeneratedTokens); synthetic requests if absent.
    #[arg(long)]
    trace: Option<PathBuf>,
    /// Replay only the first N requests of the trace.
    #[arg(long, value_parser = count(0..))]
    limit: Option<usize>,
    /// Memory capacity in tokens (a whole number of pages of every page size).
    #[arg(long, default_value_t = 65536, value_parser = count_u64(0..))]
    capacity: u64,
    /// Milliseconds per decode step: each running request writes one token per step.
    #[arg(long, default_value_t = 50.0)]
    step_ms: f64,
    /// Page sizes (tokens) for paging.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1,2,4,8,16,32,64,128,256",
        value_parser = count(0..)
    )]
    page_sizes: Vec<usize>,
    /// Tokens reserved per request by the max-length policy (longer requests are rejected).
    #[arg(long, default_value_t = 4096, value_parser = count_u64(0..))]
    reserve_len: u64,
    /// Synthetic: number of requests.
    #[arg(long, default_value_t = 5000, value_parser = count(0..))]
    requests: usize,
    /// Synthetic: mean arrivals per second (Poisson).
    #[arg(long, default_value_t = 5.0)]
    rate: f64,
    /// Synthetic: mean prompt length (log-normal).
    #[arg(long, default_value_t = 1000.0)]
    prompt_mean: f64,
    /// Synthetic: standard deviation of ln(prompt length).
    #[arg(long, default_value_t = 0.8)]
    prompt_sigma: f64,
    /// Synthetic: mean output length (exponential).
    #[arg(long, default_value_t = 200.0)]
    output_mean: f64,
    #[arg(long, default_value_t = 1, value_parser = count_u64(0..))]
    seed: u64,
    /// Check the allocators' bookkeeping after every step (slow).
    #[arg(long)]
    check: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Write SVG plots (rejections and data share against page size) into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

fn pct(part: f64) -> String {
    format!("{:.1}%", 100.0 * part)
}

fn plots(dir: &std::path::Path, rows: &[AllocRow]) -> CmdResult {
    std::fs::create_dir_all(dir)?;
    let pages: Vec<&AllocRow> = rows.iter().filter(|r| r.page_size.is_some()).collect();
    let (lo, hi) = pages
        .iter()
        .filter_map(|r| r.page_size)
        .fold((usize::MAX, 0), |(lo, hi), p| (lo.min(p), hi.max(p)));
    let series = |value: &dyn Fn(&AllocRow) -> f64| -> Vec<Series> {
        let mut s = vec![Series {
            name: "paged".into(),
            points: pages
                .iter()
                .map(|r| (r.page_size.unwrap_or(1) as f64, value(r)))
                .collect(),
        }];
        // Contiguous policies have no page size: flat lines across the same range.
        s.extend(
            rows.iter()
                .filter(|r| r.page_size.is_none())
                .map(|r| Series {
                    name: r.policy.clone(),
                    points: vec![(lo as f64, value(r)), (hi as f64, value(r))],
                }),
        );
        s
    };
    let share = |n: u64, r: &AllocRow| 100.0 * n as f64 / r.requests.max(1) as f64;
    line_plot(
        &dir.join("alloc_rejections.svg"),
        "Requests not completed (rejected + preempted) against page size",
        &Axis::log2("page size (tokens)"),
        "% of requests",
        &series(&|r| share(r.failed(), r)),
    )?;
    line_plot(
        &dir.join("alloc_data_share.svg"),
        "Share of memory holding KV data against page size",
        &Axis::log2("page size (tokens)"),
        "% of capacity (mean over busy steps)",
        &series(&|r| 100.0 * r.data_share),
    )?;
    Ok(())
}

pub fn run(args: Args) -> CmdResult {
    if args.page_sizes.is_empty() {
        return Err("give at least one page size".into());
    }
    let mut requests = match &args.trace {
        Some(path) => read_azure_csv(path)?,
        None => SyntheticRequests {
            requests: args.requests,
            rate_per_s: args.rate,
            prompt_mean: args.prompt_mean,
            prompt_sigma: args.prompt_sigma,
            output_mean: args.output_mean,
            seed: args.seed,
        }
        .generate()?,
    };
    if let Some(n) = args.limit {
        requests.truncate(n);
    }
    let cfg = ReplayConfig {
        capacity: args.capacity,
        step_s: args.step_ms / 1000.0,
        check: args.check,
    };
    let policies = alloc::policies(&args.page_sizes, args.reserve_len);
    let rows = alloc::compare(&requests, &policies, &cfg)?;
    if let Some(dir) = &args.out {
        plots(dir, &rows)?;
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&rows)?)?;
        return Ok(());
    }
    let source = args
        .trace
        .as_ref()
        .map_or("synthetic".to_string(), |p| p.display().to_string());
    outln!(
        "{} requests from {source}; capacity {} tokens; {} ms per decode step",
        requests.len(),
        args.capacity,
        args.step_ms
    )?;
    let mut t = Table::new([
        "policy",
        "served",
        "rejected",
        "frag-rej",
        "too-long",
        "preempted",
        "failed",
        "data",
        "reserved",
        "internal",
        "free",
        "ext-frag",
        "peak-run",
    ]);
    for r in &rows {
        t.row([
            r.policy.clone(),
            r.served.to_string(),
            r.rejected.to_string(),
            r.rejected_fragmentation.to_string(),
            r.too_long.to_string(),
            r.preempted.to_string(),
            pct(r.failed() as f64 / r.requests.max(1) as f64),
            pct(r.data_share),
            pct(r.reserved_share),
            pct(r.internal_share),
            pct(r.free_share),
            pct(r.external_fragmentation),
            r.peak_running.to_string(),
        ]);
    }
    out!("{t}")?;
    outln!(
        "frag-rej: rejected with enough free memory in total but no hole large enough. \
         data/reserved/internal/free: shares of capacity (mean over busy steps): written KV, \
         allocated for tokens still to come, allocated and never written, unallocated. \
         ext-frag: share of free memory outside the largest hole."
    )?;
    Ok(())
}
