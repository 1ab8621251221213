//! The `pagedkv` command line: parse, call the library, print. No logic of its own lives here; each
//! subcommand is one file that turns its arguments into library calls and the results into text.

mod attention;
mod info;
mod lab;
mod lab_faults;
mod lab_gpu_alloc;
mod lab_gpu_managed;
mod lab_mmap_share;
mod lab_overcommit;
mod lab_switch;
mod lab_tlb;
mod sim;
mod sim_alloc;
mod sim_cache;
mod sim_cluster;
mod sim_cow;
mod sim_engine;
mod sim_engine_args;
mod sim_radix;
mod sim_sched;
mod sim_thrash;
mod sleep_wake;
mod swap;
mod sweep;
mod translate;

use clap::builder::{RangedU64ValueParser, TypedValueParser};
use clap::{Parser, Subcommand};
use std::ops::{Bound, RangeBounds};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "pagedkv",
    version,
    about = "A reference harness for paged KV caches"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Devices, kernels built, nvcc version, per-kernel resources, CPU cores and memory.
    Info(info::Args),
    /// Paged and contiguous decode attention, checked and measured against the memory limits.
    Attention(attention::Args),
    /// CPU simulators: scheduling, cache eviction, prefix caching, memory.
    Sim(sim::Args),
    /// Address translation: page table, KV block table, x86-64 four-level paging.
    Translate(translate::Args),
    /// Sleep and wake a pool (CUDA virtual memory or its CPU twin): time, memory freed, bandwidth.
    SleepWake(sleep_wake::Args),
    /// Swap KV blocks to host memory and back: one batched operation vs one copy per block.
    Swap(swap::Args),
    /// Block-size sweep: fragmentation (from a trace) against bandwidth (measured), vs vLLM's 16.
    Sweep(Box<sweep::Args>),
    /// Measured OS labs: context switches, page faults, overcommit, the TLB, shared page cache,
    /// and their GPU counterparts.
    Lab(lab::Args),
}

/// A failed check (data not intact, result wrong): exit code 1, unlike bad input (exit code 2).
#[derive(Debug)]
pub struct CheckFailed(pub String);

impl std::fmt::Display for CheckFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CheckFailed {}

pub type CmdResult = Result<(), Box<dyn std::error::Error>>;

/// The parser of a count option limited to `range` (`1..`, `1..=64`): out of it, clap's one-line
/// error names the option and says `must be at least 1` or `must be 1 to 64`.
pub fn count<R>(range: R) -> impl TypedValueParser<Value = usize>
where
    R: RangeBounds<usize> + Clone + Send + Sync + 'static,
{
    RangedU64ValueParser::<usize>::new().try_map(move |n| {
        if range.contains(&n) {
            return Ok(n);
        }
        Err(match (range.start_bound(), range.end_bound()) {
            (Bound::Included(lo), Bound::Included(hi)) => format!("must be {lo} to {hi}"),
            (Bound::Included(lo), Bound::Unbounded) => format!("must be at least {lo}"),
            _ => "out of range".to_string(),
        })
    })
}

/// Clap's error on one line: its first, and the list of possible values when it gives one.
fn one_line(e: &clap::Error) -> String {
    let text = e.to_string();
    let mut lines = text.lines().map(str::trim);
    let first = lines.next().unwrap_or("invalid arguments");
    let first = first.trim_start_matches("error: ");
    match lines.find(|l| l.starts_with("[possible values:")) {
        Some(values) => format!("{first} {values}"),
        None => first.to_string(),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line, not clap's usage block.
            eprintln!("pagedkv: {}", one_line(&e));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Info(args) => info::run(args),
        Command::Attention(args) => attention::run(args),
        Command::Sim(args) => sim::run(args),
        Command::Translate(args) => translate::run(args),
        Command::SleepWake(args) => sleep_wake::run(args),
        Command::Swap(args) => swap::run(args),
        Command::Sweep(args) => sweep::run(*args),
        Command::Lab(args) => lab::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let msg = e.to_string().replace('\n', " ");
            eprintln!("pagedkv: {msg}");
            if e.is::<CheckFailed>() {
                ExitCode::from(1)
            } else {
                ExitCode::from(2)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, Command};

    fn parse(args: &[&str]) -> Result<clap::ArgMatches, clap::Error> {
        Command::new("t")
            .arg(Arg::new("tp").long("tp").value_parser(count(1..=64)))
            .arg(Arg::new("reps").long("reps").value_parser(count(1..)))
            .arg(
                Arg::new("dtype")
                    .long("dtype")
                    .value_parser(clap::value_parser!(pagedkv::kv::Dtype)),
            )
            .try_get_matches_from(args)
    }

    #[test]
    fn counts_and_choices_fail_in_one_clear_line() {
        let err = |args: &[&str]| one_line(&parse(args).unwrap_err());
        assert_eq!(
            err(&["t", "--tp", "65"]),
            "invalid value '65' for '--tp <tp>': must be 1 to 64"
        );
        assert_eq!(
            err(&["t", "--reps", "0"]),
            "invalid value '0' for '--reps <reps>': must be at least 1"
        );
        assert_eq!(
            err(&["t", "--dtype", "f8"]),
            "invalid value 'f8' for '--dtype <dtype>' [possible values: f16, bf16, f32, fp8_e4m3, fp8_e5m2]"
        );
        let m = parse(&["t", "--tp", "64", "--reps", "1000000"]).unwrap();
        assert_eq!(m.get_one::<usize>("tp"), Some(&64));
        assert_eq!(m.get_one::<usize>("reps"), Some(&1_000_000));
    }
}
