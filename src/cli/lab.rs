//! `pagedkv lab <name>`: measured OS experiments, one subcommand each, each in its own file
//! (src/cli/lab_<name>.rs); what they share is in lab_report.rs.

use crate::cli::{
    lab_faults, lab_gpu_alloc, lab_gpu_managed, lab_mmap_share, lab_overcommit, lab_switch,
    lab_tlb, CmdResult,
};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: LabCommand,
}

#[derive(clap::Subcommand)]
enum LabCommand {
    /// Round trips between threads and processes against a function call; copy-on-write.
    Switch(lab_switch::Args),
    /// Page faults: 4 KiB pages, huge pages, MAP_POPULATE, second touch, a file cold and warm.
    Faults(lab_faults::Args),
    /// Reserve far more than the machine has; RSS follows the writes; what each mode refuses.
    Overcommit(lab_overcommit::Args),
    /// Pointer chase over growing working sets: cache and TLB steps, 4 KiB vs 2 MiB pages.
    Tlb(lab_tlb::Args),
    /// Processes mapping one file: per-process RSS, page cache, each page held once.
    MmapShare(lab_mmap_share::Args),
    /// GPU: cuMemAlloc against cuMemCreate + cuMemMap + cuMemSetAccess per chunk size.
    GpuAlloc(lab_gpu_alloc::Args),
    /// GPU: managed memory's first touch against an explicit copy.
    GpuManaged(lab_gpu_managed::Args),
}

pub fn run(args: Args) -> CmdResult {
    match args.command {
        LabCommand::Switch(a) => lab_switch::run(a),
        LabCommand::Faults(a) => lab_faults::run(a),
        LabCommand::Overcommit(a) => lab_overcommit::run(a),
        LabCommand::Tlb(a) => lab_tlb::run(a),
        LabCommand::MmapShare(a) => lab_mmap_share::run(a),
        LabCommand::GpuAlloc(a) => lab_gpu_alloc::run(a),
        LabCommand::GpuManaged(a) => lab_gpu_managed::run(a),
    }
}
