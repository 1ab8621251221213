//! `pagedkv sim <name>`: the CPU simulators, one subcommand each.

use crate::CmdResult;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: SimCommand,
}

#[derive(clap::Subcommand)]
enum SimCommand {
    /// Contiguous first/best/worst fit and max-length reservation against paging at each page size.
    Alloc(crate::sim_alloc::Args),
    /// Copy-on-write for parallel sampling and beam search against copying every fork.
    Cow(crate::sim_cow::Args),
    /// Demand paging with LRU: fault rate and access time against memory size; the knee.
    Thrash(crate::sim_thrash::Args),
}

pub fn run(args: Args) -> CmdResult {
    match args.command {
        SimCommand::Alloc(a) => crate::sim_alloc::run(a),
        SimCommand::Cow(a) => crate::sim_cow::run(a),
        SimCommand::Thrash(a) => crate::sim_thrash::run(a),
    }
}
