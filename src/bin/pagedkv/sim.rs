//! `pagedkv sim <name>`: the CPU simulators, one subcommand each.

use crate::CmdResult;

#[path = "sim_radix.rs"]
mod sim_radix;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: SimCommand,
}

#[derive(clap::Subcommand)]
enum SimCommand {
    /// Radix-tree prefix cache (RadixAttention) against a whole-prompt cache: hit ratios, dedup.
    Radix(Box<sim_radix::Args>),
}

pub fn run(args: Args) -> CmdResult {
    match args.command {
        SimCommand::Radix(a) => sim_radix::run(*a),
    }
}
