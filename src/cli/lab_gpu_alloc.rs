//! `pagedkv lab gpu-alloc`: cuMemAlloc against cuMemCreate + cuMemMap + cuMemSetAccess, ms per
//! GiB for each chunk size. Skipped, with the reason, without a GPU.

use crate::cli::lab_report::{emit, num, parse_bytes, show_bytes, skipped_or};
use crate::cli::{count, CmdResult};
use crate::lab::gpu_alloc::{self, GpuAllocConfig};
use crate::lab::machine::MachineFacts;
use crate::report::Table;

#[derive(clap::Args)]
pub struct Args {
    /// Bytes allocated each time.
    #[arg(long, default_value = "1G", value_parser = parse_bytes)]
    size: usize,
    /// Chunk sizes of the virtual-memory way (rounded up to the granularity).
    #[arg(long, value_delimiter = ',', default_value = "2M,8M,32M,128M,512M,1G", value_parser = parse_bytes)]
    chunks: Vec<usize>,
    /// Allocate/free pairs per row.
    #[arg(long, default_value_t = 5, value_parser = count(0..))]
    reps: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CmdResult {
    let facts = MachineFacts::read();
    let cfg = GpuAllocConfig {
        bytes: args.size,
        chunk_bytes: args.chunks,
        reps: args.reps,
    };
    let Some(r) = skipped_or("gpu-alloc", args.json, gpu_alloc::run(&cfg))? else {
        return Ok(());
    };
    emit(args.json, &r, &facts, &r.checks, || {
        outln!(
            "{}: {} per allocation, granularity {}; host wall clock, median of {}",
            r.device,
            show_bytes(Some(r.bytes as u64)),
            show_bytes(Some(r.granularity_bytes as u64)),
            cfg.reps
        )?;
        let mut t = Table::new([
            "method",
            "chunk",
            "chunks",
            "alloc ms",
            "free ms",
            "alloc ms/GiB",
            "free ms/GiB",
            "intact",
        ]);
        for row in &r.rows {
            t.row([
                row.method.to_string(),
                show_bytes(row.chunk_bytes.map(|c| c as u64)),
                row.chunks.to_string(),
                num(Some(row.alloc_ms.median), 2),
                num(Some(row.free_ms.median), 2),
                num(Some(row.alloc_ms_per_gib), 2),
                num(Some(row.free_ms_per_gib), 2),
                row.data_intact.to_string(),
            ]);
        }
        out!("{t}")?;
        Ok(())
    })
}
