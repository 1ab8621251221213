//! The `pagedkv` command line: parse, call the library, print. No logic of its own lives here; each
//! subcommand is one file that turns its arguments into library calls and the results into text.
//! It lives in the library so that every front end runs the same commands: the `pagedkv` binary
//! (src/bin/pagedkv/) and `python -m pagedkv` (python/) call [`run`].

#[macro_use]
mod stdout;
mod attention;
mod info;
mod info_sass;
mod lab;
mod lab_faults;
mod lab_gpu_alloc;
mod lab_gpu_managed;
mod lab_mmap_share;
mod lab_overcommit;
mod lab_report;
mod lab_switch;
mod lab_tlb;
mod latency_unit;
mod llmd_report;
mod router_args;
mod serve;
mod sim;
mod sim_alloc;
mod sim_cache;
mod sim_client_args;
mod sim_cluster;
mod sim_cow;
mod sim_engine;
mod sim_engine_args;
mod sim_radix;
mod sim_sched;
mod sim_thrash;
mod sim_tier_args;
mod sleep_wake;
mod step_profile;
mod swap;
mod sweep;
mod translate;

use clap::builder::TypedValueParser;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use std::ops::{Bound, RangeBounds};

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
    /// Simulated vLLM replicas behind vLLM's OpenAI-compatible HTTP API, for real clients and
    /// routers.
    Serve(Box<serve::Args>),
    /// Step profiles (measured kernel times behind the step-time model): what one covers, and
    /// pagedkv's own decode attention merged into one.
    StepProfile(step_profile::Args),
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

/// The GPU objects released when the command's values were dropped, where no caller could be told
/// of a failure (`driver::teardown` recorded each as it failed): each is said, and a command that
/// otherwise succeeded fails as a check does (exit 1): it could not release what it took.
fn with_teardown(result: CmdResult) -> CmdResult {
    let failures: Vec<String> = crate::device::cuda::driver::teardown::take()
        .iter()
        .map(|e| e.to_string().replace('\n', " "))
        .collect();
    match result {
        _ if failures.is_empty() => result,
        Ok(()) => Err(CheckFailed(failures.join("; ")).into()),
        Err(e) => {
            for f in &failures {
                eprintln!("pagedkv: {f}");
            }
            Err(e)
        }
    }
}

/// The largest value of a count whose range names no end (`1..`): 2^40, a trillion. No count
/// is meaningful beyond it on one machine, and below it the bytes of one element per count never
/// overflow a size, so what a command would need meets its memory check (or the allocator's)
/// instead of a panic.
pub const MAX_COUNT: usize = 1 << 40;

/// The parser of a count option limited to `range` (`1..`, `1..=64`) and to [`MAX_COUNT`]: out
/// of it (negative numbers included), clap's error names the option and says `must be at least
/// 1`, `must be 1 to 64` or `too large`.
pub fn count<R>(range: R) -> impl TypedValueParser<Value = usize>
where
    R: RangeBounds<usize> + Clone + Send + Sync + 'static,
{
    let cap = match range.end_bound() {
        Bound::Unbounded => Some(MAX_COUNT as i128),
        _ => None,
    };
    whole_number(range, cap)
}

/// [`count`] for a `u64` option (seeds, sizes in bytes): any `u64` in `range`.
pub fn count_u64<R>(range: R) -> impl TypedValueParser<Value = u64>
where
    R: RangeBounds<u64> + Clone + Send + Sync + 'static,
{
    whole_number(range, None)
}

fn whole_number<T, R>(range: R, cap: Option<i128>) -> impl TypedValueParser<Value = T>
where
    T: TryFrom<i128> + PartialOrd + std::fmt::Display + Clone + Send + Sync + 'static,
    R: RangeBounds<T> + Clone + Send + Sync + 'static,
{
    clap::builder::StringValueParser::new().try_map(move |text| {
        let n: i128 = text
            .trim()
            .parse()
            .map_err(|_| format!("'{text}' is not a whole number"))?;
        if let Some(cap) = cap.filter(|&cap| n > cap) {
            return Err(format!("too large: at most {cap}"));
        }
        match T::try_from(n) {
            Ok(n) if range.contains(&n) => return Ok(n),
            Err(_) if n > 0 => return Err("too large".to_string()),
            _ => {}
        }
        Err(match (range.start_bound(), range.end_bound()) {
            (Bound::Included(lo), Bound::Included(hi)) => format!("must be {lo} to {hi}"),
            (Bound::Included(lo), Bound::Unbounded) => format!("must be at least {lo}"),
            _ => "out of range".to_string(),
        })
    })
}

/// The command line's parser: every command takes negative numbers as values, so that `--batch -4`
/// meets the option's range rather than passing for an unknown flag.
fn command() -> clap::Command {
    fn negative_numbers(c: clap::Command) -> clap::Command {
        c.mut_args(|a| match a.get_action().takes_values() {
            true => a.allow_negative_numbers(true),
            false => a,
        })
        .mut_subcommands(negative_numbers)
    }
    negative_numbers(Cli::command())
}

/// Why a command line did not run to the end.
#[derive(Debug)]
pub enum Failure {
    /// Clap's whole text: what is missing, "did you mean", the usage line; or the help and
    /// --version, which are not failures (exit code 0).
    Usage(clap::Error),
    /// The command's own one-line error; exit code 1 (a failed check, lost output) or 2 (bad
    /// input).
    Failed { code: u8, message: String },
}

impl Failure {
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Usage(e) => e.exit_code().clamp(0, 255) as u8,
            Failure::Failed { code, .. } => *code,
        }
    }
}

/// Runs the command line `args` (the program's name first).
pub fn execute<I, T>(args: I) -> Result<(), Failure>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = command()
        .try_get_matches_from(args)
        .and_then(|m| Cli::from_arg_matches(&m))
        .map_err(Failure::Usage)?;
    // Settings read from the environment are input too: refused before any command starts.
    let llc = crate::device::cpu::last_level_cache::llc_override().map(|_| ());
    let kernels = crate::device::cpu::kernels_cap().map(|_| ());
    if let Err(e) = llc.and(kernels) {
        return Err(Failure::Failed {
            code: 2,
            message: e.to_string(),
        });
    }
    let result = match cli.command {
        Command::Info(args) => info::run(args),
        Command::Attention(args) => attention::run(args),
        Command::Sim(args) => sim::run(args),
        Command::StepProfile(args) => step_profile::run(args),
        Command::Translate(args) => translate::run(args),
        Command::SleepWake(args) => sleep_wake::run(args),
        Command::Swap(args) => swap::run(args),
        Command::Sweep(args) => sweep::run(*args),
        Command::Lab(args) => lab::run(args),
        Command::Serve(args) => serve::run(*args),
    };
    with_teardown(result)
        .and_then(|()| Ok(stdout::flush()?))
        .map_err(|e| Failure::Failed {
            message: crate::quote::clip(&e.to_string().replace('\n', " ")),
            // Output lost is a failure of the run, like a failed check; the rest is bad input.
            code: if e.is::<CheckFailed>() || e.is::<stdout::StdoutFailed>() {
                1
            } else {
                2
            },
        })
}

/// Runs the command line `args` (the program's name first) and returns its exit code: 0 done, 1
/// a failed check or lost output, 2 bad input. Errors are said on stderr in one line (clap's
/// usage errors in clap's whole text).
pub fn run<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    match execute(args) {
        Ok(()) => 0,
        Err(f) => {
            match &f {
                Failure::Usage(e) => {
                    let _ = e.print();
                }
                Failure::Failed { message, .. } => eprintln!("pagedkv: {message}"),
            }
            f.exit_code()
        }
    }
}

/// Runs the command line `args` as [`execute`] does, with what it writes to standard output kept
/// and returned instead (this thread's writes: a command writes its report from the thread that
/// runs it). For front ends that read a command's `--json` report in memory (python/).
pub fn capture<I, T>(args: I) -> (String, Result<(), Failure>)
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let _kept = stdout::Capture::start();
    let result = execute(args);
    (stdout::Capture::take(), result)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{Arg, Command};

    fn parse(args: &[&str]) -> Result<clap::ArgMatches, clap::Error> {
        Command::new("t")
            .arg(
                Arg::new("tp")
                    .long("tp")
                    .allow_negative_numbers(true)
                    .value_parser(count(1..=64)),
            )
            .arg(
                Arg::new("reps")
                    .long("reps")
                    .allow_negative_numbers(true)
                    .value_parser(count(1..)),
            )
            .arg(
                Arg::new("dtype")
                    .long("dtype")
                    .value_parser(clap::value_parser!(crate::kv::Dtype)),
            )
            .try_get_matches_from(args)
    }

    #[test]
    fn counts_and_choices_fail_with_the_range_or_the_choices() {
        let err = |args: &[&str]| parse(args).unwrap_err().to_string();
        let first = |args: &[&str]| err(args).lines().next().unwrap_or_default().to_string();
        assert_eq!(
            first(&["t", "--tp", "65"]),
            "error: invalid value '65' for '--tp <tp>': must be 1 to 64"
        );
        assert_eq!(
            first(&["t", "--reps", "0"]),
            "error: invalid value '0' for '--reps <reps>': must be at least 1"
        );
        assert_eq!(
            first(&["t", "--reps", "-4"]),
            "error: invalid value '-4' for '--reps <reps>': must be at least 1"
        );
        assert_eq!(
            first(&["t", "--tp", "-99999999999999999999"]),
            "error: invalid value '-99999999999999999999' for '--tp <tp>': must be 1 to 64"
        );
        assert_eq!(
            first(&["t", "--reps", "99999999999999999999"]),
            "error: invalid value '99999999999999999999' for '--reps <reps>': too large: at most 1099511627776"
        );
        // Counts whose range names no end stop at 2^40; the others at their own end.
        assert_eq!(
            first(&["t", "--reps", "1099511627777"]),
            "error: invalid value '1099511627777' for '--reps <reps>': too large: at most 1099511627776"
        );
        let m = parse(&["t", "--reps", "1099511627776"]).unwrap();
        assert_eq!(m.get_one::<usize>("reps"), Some(&MAX_COUNT));
        assert_eq!(
            first(&["t", "--reps", "1.5"]),
            "error: invalid value '1.5' for '--reps <reps>': '1.5' is not a whole number"
        );
        let dtype = err(&["t", "--dtype", "f8"]);
        assert!(
            dtype.contains("[possible values: f16, bf16, f32, fp8_e4m3, fp8_e5m2]"),
            "{dtype}"
        );
        let m = parse(&["t", "--tp", "64", "--reps", "1000000"]).unwrap();
        assert_eq!(m.get_one::<usize>("tp"), Some(&64));
        assert_eq!(m.get_one::<usize>("reps"), Some(&1_000_000));
    }

    #[test]
    fn every_command_takes_negative_numbers_as_values() {
        fn check(c: &clap::Command) -> usize {
            for a in c.get_arguments().filter(|a| a.get_action().takes_values()) {
                assert!(
                    a.is_allow_negative_numbers_set(),
                    "{} {}",
                    c.get_name(),
                    a.get_id()
                );
            }
            c.get_arguments().count() + c.get_subcommands().map(check).sum::<usize>()
        }
        assert!(
            check(&command()) > 100,
            "every argument of every command was checked"
        );
    }

    #[test]
    fn a_negative_number_for_any_option_meets_a_range_not_a_parse_error() {
        fn walk(c: &clap::Command, path: &mut Vec<String>, tried: &mut usize) {
            for a in c.get_arguments() {
                let Some(long) = a.get_long() else { continue };
                if !a.get_action().takes_values() {
                    continue;
                }
                let mut argv = vec!["pagedkv".to_string()];
                argv.extend(path.iter().cloned());
                argv.extend([format!("--{long}"), "-4".to_string()]);
                *tried += 1;
                if let Err(e) = command().try_get_matches_from(&argv) {
                    let text = e.to_string();
                    assert!(
                        e.kind() != clap::error::ErrorKind::UnknownArgument
                            && !text.contains("invalid digit"),
                        "{argv:?}: {text}"
                    );
                }
            }
            for sub in c.get_subcommands() {
                path.push(sub.get_name().to_string());
                walk(sub, path, tried);
                path.pop();
            }
        }
        let mut tried = 0;
        walk(&command(), &mut Vec::new(), &mut tried);
        assert!(tried > 100, "{tried}");
    }
}
