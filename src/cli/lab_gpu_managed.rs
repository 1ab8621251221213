//! `pagedkv lab gpu-managed`: the first GPU touch of managed memory (page faults migrating it)
//! against an explicit copy and a prefetch. Skipped, with the reason, without a GPU.

use crate::cli::lab_report::{emit, num, parse_bytes, show_bytes, skipped_or};
use crate::cli::CmdResult;
use crate::lab::gpu_managed::{self, ManagedConfig};
use crate::lab::machine::MachineFacts;
use crate::report::Table;

#[derive(clap::Args)]
pub struct Args {
    /// Bytes read by the GPU in each pass.
    #[arg(long, default_value = "1G", value_parser = parse_bytes)]
    size: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: Args) -> CmdResult {
    let facts = MachineFacts::read();
    let cfg = ManagedConfig { bytes: args.size };
    let Some(r) = skipped_or("gpu-managed", args.json, gpu_managed::run(&cfg))? else {
        return Ok(());
    };
    emit(args.json, &r, &facts, &r.checks, || {
        outln!(
            "{}: {} per pass; concurrent managed access: {}, pageable memory access: {}",
            r.device,
            show_bytes(Some(r.bytes as u64)),
            r.concurrent_managed_access,
            r.pageable_memory_access
        )?;
        let mut t = Table::new(["pass", "ms", "GB/s", "intact"]);
        for p in &r.passes {
            t.row([
                p.name.to_string(),
                num(Some(p.ms), 2),
                num(Some(p.gbps), 1),
                p.data_intact.to_string(),
            ]);
        }
        out!("{t}")?;
        outln!(
            "explicit: copy {} ms (pageable) / {} ms (pinned) + read {} ms, against managed: \
             first touch {} ms, prefetch + read {} ms",
            num(Some(r.copy_pageable_ms), 2),
            num(Some(r.copy_pinned_ms), 2),
            num(Some(r.kernel_device_ms), 2),
            num(Some(r.first_touch_ms), 2),
            num(r.prefetch_ms, 2)
        )?;
        Ok(())
    })
}
