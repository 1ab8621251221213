//! `pagedkv sim <name>`: the CPU simulators, one subcommand each, each in its own file.

use crate::CmdResult;

#[path = "sim_radix.rs"]
mod sim_radix;
#[path = "sim_sched.rs"]
mod sim_sched;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: SimCommand,
}

#[derive(clap::Subcommand)]
enum SimCommand {
    /// One server, a stream of jobs, the classic scheduling policies compared.
    Sched(sim_sched::Args),
    /// Radix-tree prefix cache (RadixAttention) against a whole-prompt cache: hit ratios, dedup.
    Radix(Box<sim_radix::Args>),
}

pub fn run(args: Args) -> CmdResult {
    match args.command {
        SimCommand::Sched(a) => sim_sched::run(a),
        SimCommand::Radix(a) => sim_radix::run(*a),
    }
}
