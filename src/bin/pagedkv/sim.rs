//! `pagedkv sim <name>`: the CPU simulators, one subcommand each.

#[path = "sim_cache.rs"]
mod sim_cache;

use crate::CmdResult;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: SimCommand,
}

#[derive(clap::Subcommand)]
enum SimCommand {
    /// Cache eviction: FIFO, LRU, LFU, CLOCK, ARC, OPT, S3-FIFO, SIEVE over key traces.
    Cache(sim_cache::Args),
}

pub fn run(args: Args) -> CmdResult {
    match args.command {
        SimCommand::Cache(a) => sim_cache::run(a),
    }
}
