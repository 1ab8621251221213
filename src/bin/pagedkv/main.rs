//! The `pagedkv` command line: parse, call the library, print. No logic of its own lives here; each
//! subcommand is one file that turns its arguments into library calls and the results into text.

mod info;
mod sim;

use clap::{Parser, Subcommand};
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
    /// CPU simulators: cache eviction policies over key traces.
    Sim(sim::Args),
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

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if !e.use_stderr() => {
            // --help and --version.
            let _ = e.print();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // One line, not clap's usage block: the first line of its message.
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            eprintln!("pagedkv: {}", first.trim_start_matches("error: "));
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Command::Info(args) => info::run(args),
        Command::Sim(args) => sim::run(args),
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
