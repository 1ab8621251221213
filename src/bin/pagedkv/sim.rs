//! `pagedkv sim <name>`: the CPU simulators, one subcommand each.

use crate::sim_sched;
use crate::CmdResult;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: SimCommand,
}

#[derive(clap::Subcommand)]
enum SimCommand {
    /// One server, a stream of jobs, the classic scheduling policies compared.
    Sched(sim_sched::Args),
}

pub fn run(args: Args) -> CmdResult {
    match args.command {
        SimCommand::Sched(a) => sim_sched::run(a),
    }
}
