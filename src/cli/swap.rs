//! `pagedkv swap`: KV blocks swapped out of the pool into host memory and back, per block size:
//! one batched operation against one copy per block (vLLM's way), both against the contiguous copy
//! of the same bytes measured in the same run; every round trip checked bit for bit.

use crate::cli::{count, count_u64, CheckFailed, CmdResult};
use crate::device::{Device, DeviceChoice};
use crate::kv::{Dtype, KvSpec};
use crate::progress::Bar;
use crate::report::Table;
use crate::swap::{measure, SwapOptions, SwapReport};
use serde::Serialize;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    device: DeviceChoice,
    /// Block sizes in tokens, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16,64,256", value_parser = count(0..))]
    block_sizes: Vec<usize>,
    #[arg(long, default_value_t = 8, value_parser = count(0..))]
    kv_heads: usize,
    #[arg(long, default_value_t = 128, value_parser = count(0..))]
    head_dim: usize,
    #[arg(long, value_enum, default_value_t = Dtype::F16)]
    dtype: Dtype,
    /// MiB swapped per block size (one K pool of one layer) [default: CPU 16, GPU 256].
    #[arg(long, value_parser = count(1..=16_384))]
    swap_mib: Option<usize>,
    /// The pool holds this many times the swapped blocks; they are drawn from all over it.
    #[arg(long, default_value_t = 4, value_parser = count(1..=64))]
    pool_factor: usize,
    /// Timed runs per figure (median reported).
    #[arg(long, default_value_t = 5, value_parser = count(1..=1000))]
    iters: usize,
    #[arg(long, default_value_t = 1, value_parser = count_u64(0..))]
    seed: u64,
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Output {
    device: String,
    kv_heads: usize,
    head_dim: usize,
    dtype: Dtype,
    rows: Vec<Row>,
}

#[derive(Serialize)]
struct Row {
    block_size: usize,
    #[serde(flatten)]
    report: SwapReport,
}

pub fn run(args: Args) -> CmdResult {
    if args.block_sizes.is_empty() {
        return Err("--block-sizes must list at least one size".into());
    }
    let device = Device::detect(args.device)?;
    let swap_mib = args
        .swap_mib
        .unwrap_or(if device.is_cuda() { 256 } else { 16 });
    let mut rows = Vec::new();
    let bar = Bar::new("swap: block sizes", args.block_sizes.len() as u64);
    for &bs in &args.block_sizes {
        bar.set_message(&format!("block size {bs}"));
        let spec = KvSpec::new(args.kv_heads, args.head_dim, bs, args.dtype)?;
        let block_bytes = spec.block_bytes()?;
        let swap_blocks = ((swap_mib << 20) / block_bytes).max(1);
        let opts = SwapOptions {
            block_bytes,
            pool_blocks: swap_blocks * args.pool_factor,
            swap_blocks,
            iters: args.iters,
            seed: args.seed,
        };
        rows.push(Row {
            block_size: bs,
            report: measure(&device, &opts)?,
        });
        bar.inc(1);
    }
    drop(bar);
    let out = Output {
        device: device.name(),
        kv_heads: args.kv_heads,
        head_dim: args.head_dim,
        dtype: args.dtype,
        rows,
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&out)?)?;
    } else {
        print_text(&out)?;
    }
    match out.rows.iter().find(|r| !r.report.data_intact) {
        Some(r) => Err(Box::new(CheckFailed(format!(
            "block size {}: swapped blocks did not come back intact",
            r.block_size
        )))),
        None => Ok(()),
    }
}

fn print_text(out: &Output) -> Result<(), crate::cli::stdout::StdoutFailed> {
    outln!(
        "{}: one K pool, {} KV heads × head dim {}, {}; out = pool → host, in = host → pool",
        out.device,
        out.kv_heads,
        out.head_dim,
        out.dtype
    )?;
    let mut t = Table::new(
        [
            "block",
            "block bytes",
            "blocks",
            "out batched GB/s",
            "of limit",
            "out per-block GB/s",
            "of limit",
            "out limit GB/s",
            "in batched GB/s",
            "of limit",
            "in per-block GB/s",
            "of limit",
            "in limit GB/s",
            "batched speedup out/in",
            "intact",
        ]
        .map(String::from)
        .to_vec(),
    );
    for r in &out.rows {
        let (o, i) = (&r.report.swap_out, &r.report.swap_in);
        t.row(vec![
            r.block_size.to_string(),
            r.report.block_bytes.to_string(),
            r.report.swap_blocks.to_string(),
            format!("{:.2}", o.batched_gbps),
            format!("{:.2}", o.batched_frac_of_limit),
            format!("{:.2}", o.per_block_gbps),
            format!("{:.2}", o.per_block_frac_of_limit),
            format!("{:.2}", o.limit_gbps),
            format!("{:.2}", i.batched_gbps),
            format!("{:.2}", i.batched_frac_of_limit),
            format!("{:.2}", i.per_block_gbps),
            format!("{:.2}", i.per_block_frac_of_limit),
            format!("{:.2}", i.limit_gbps),
            format!("{:.2} / {:.2}", o.batched_speedup, i.batched_speedup),
            r.report.data_intact.to_string(),
        ]);
    }
    out!("{t}")?;
    outln!(
        "limit: one contiguous copy of the same bytes between the same memories, same run; \
         batched = every block in one operation (GPU: one copy_blocks launch into mapped pinned \
         memory; CPU: all cores), per-block = one copy per block (GPU: cuMemcpyAsync each, as \
         vLLM's swap_blocks)"
    )?;
    Ok(())
}
