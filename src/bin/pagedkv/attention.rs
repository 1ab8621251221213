//! `pagedkv attention`: paged and contiguous decode attention on one device, checked against the
//! f64 oracle, with time, bytes, bandwidth and the fractions of the limits measured in the run.

use crate::{count, CheckFailed, CmdResult};
use pagedkv::attention::{
    measure_dtype, tolerance, AttentionReport, AttentionShape, MeasureOptions,
};
use pagedkv::device::{Device, DeviceChoice};
use pagedkv::kv::Dtype;
use pagedkv::report::Table;
use pagedkv::workload::azure::read_azure_csv;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    device: DeviceChoice,
    /// Sequences in the batch.
    #[arg(long, default_value_t = 64, value_parser = count(1..))]
    batch: usize,
    /// Tokens per sequence, every sequence the same length [default: 4096].
    #[arg(long, conflicts_with = "lens")]
    context: Option<usize>,
    /// Ragged lengths instead of --context, comma-separated (e.g. 17,4096,0,300).
    #[arg(long, value_delimiter = ',')]
    lens: Option<Vec<usize>>,
    /// Ragged lengths from a trace CSV (e.g. the Azure LLM trace): the first --batch requests'
    /// prompt + output tokens, each capped at --max-context.
    #[arg(long, conflicts_with_all = ["lens", "context"])]
    trace: Option<PathBuf>,
    /// Longest context taken from --trace.
    #[arg(long, default_value_t = 4096, requires = "trace", value_parser = count(1..))]
    max_context: usize,
    /// Query heads.
    #[arg(long, default_value_t = 32)]
    heads: usize,
    #[arg(long, default_value_t = 8)]
    kv_heads: usize,
    #[arg(long, default_value_t = 128)]
    head_dim: usize,
    #[arg(long, default_value_t = 16)]
    block_size: usize,
    #[arg(long, value_enum, default_value_t = Dtype::F16)]
    dtype: Dtype,
    /// Softmax scale; default 1/sqrt(head dim).
    #[arg(long)]
    scale: Option<f32>,
    /// Timed runs (median reported).
    #[arg(long)]
    iters: Option<usize>,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Skip the comparison with the f64 oracle.
    #[arg(long)]
    no_check: bool,
    #[arg(long)]
    json: bool,
}

/// The first `batch` requests' contexts (prompt + output tokens), each capped at `max_context`.
fn trace_lens(
    path: &PathBuf,
    batch: usize,
    max_context: usize,
) -> Result<Vec<usize>, Box<dyn std::error::Error>> {
    Ok(read_azure_csv(path)?
        .iter()
        .take(batch)
        .map(|r| (r.peak_tokens() as usize).min(max_context))
        .collect())
}

pub fn run(args: Args) -> CmdResult {
    if args.kv_heads == 0 || !args.heads.is_multiple_of(args.kv_heads) {
        return Err(format!(
            "--heads {} is not a multiple of --kv-heads {}",
            args.heads, args.kv_heads
        )
        .into());
    }
    let lens = match &args.lens {
        Some(l) if l.is_empty() => return Err("--lens is empty".into()),
        Some(l) => l.clone(),
        None => match &args.trace {
            Some(path) => trace_lens(path, args.batch, args.max_context)?,
            None => vec![args.context.unwrap_or(4096); args.batch],
        },
    };
    let device = Device::detect(args.device)?;
    let shape = AttentionShape {
        num_heads: args.heads,
        num_kv_heads: args.kv_heads,
        head_dim: args.head_dim,
        scale: args.scale.unwrap_or(1.0 / (args.head_dim as f32).sqrt()),
    };
    let iters = args.iters.unwrap_or(if device.is_cuda() { 20 } else { 3 });
    let opts = MeasureOptions {
        iters,
        check: !args.no_check,
    };
    let report = measure_dtype(
        &device,
        args.dtype,
        shape,
        args.block_size,
        &lens,
        args.seed,
        opts,
    )?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_report(&report);
    }
    let bound = tolerance(args.dtype);
    // NaN errors fail too: only a finite error within the bound passes.
    let within = report.max_rel_error.is_finite() && report.max_rel_error <= bound;
    if !args.no_check && !within {
        return Err(Box::new(CheckFailed(format!(
            "relative error {:.3e} exceeds {bound:.0e} for {}",
            report.max_rel_error, args.dtype
        ))));
    }
    Ok(())
}

fn print_report(r: &AttentionReport) {
    println!(
        "{}: batch {}, {} query / {} KV heads, head dim {}, {}, block size {}, longest context {}, {} partition(s)",
        r.device, r.batch, r.num_heads, r.num_kv_heads, r.head_dim, r.dtype, r.block_size, r.max_context, r.partitions
    );
    let mut t = Table::new([
        "kernel",
        "time us",
        "GB/s",
        "of stream",
        "of copy",
        "rel error",
    ]);
    t.row([
        "paged".to_string(),
        format!("{:.1}", r.paged_us),
        format!("{:.1}", r.paged_gbps),
        format!("{:.3}", r.paged_frac_of_stream),
        format!("{:.3}", r.paged_frac_of_copy),
        format!("{:.2e}", r.paged_rel_error),
    ]);
    t.row([
        "contiguous".to_string(),
        format!("{:.1}", r.contiguous_us),
        format!("{:.1}", r.contiguous_gbps),
        format!("{:.3}", r.contiguous_frac_of_stream),
        format!("{:.3}", r.contiguous_gbps / r.copy_gbps),
        format!("{:.2e}", r.contiguous_rel_error),
    ]);
    print!("{t}");
    println!(
        "KV bytes read {:.1} MiB; limits in this run: copy {:.1} GB/s, read-only stream {:.1} GB/s; paged / contiguous time {:.3}",
        r.kv_bytes as f64 / (1 << 20) as f64,
        r.copy_gbps,
        r.stream_gbps,
        r.paged_over_contiguous
    );
    if r.copies_rotated > 1 {
        println!(
            "timed runs took turns over {} copies of the problem, so that they read memory, not the L2 cache",
            r.copies_rotated
        );
    }
}
