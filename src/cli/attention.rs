//! `pagedkv attention`: paged and contiguous decode attention on one device, checked against the
//! f64 oracle, with time, bytes, bandwidth and the fractions of the limits measured in the run.

use crate::attention::{
    measure_dtype, tolerance, AttentionReport, AttentionShape, DtypeProblem, EngineChoice,
    MeasureOptions, ProblemOptions, Roofline, Scales, Values,
};
use crate::cli::{count, count_u64, CheckFailed, CmdResult};
use crate::device::{Device, DeviceChoice};
use crate::kv::Dtype;
use crate::progress::StderrProgress;
use crate::report::Table;
use crate::workload::azure::read_azure_csv;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    device: DeviceChoice,
    /// Sequences in the batch.
    #[arg(long, default_value_t = 64, value_parser = count(1..))]
    batch: usize,
    /// Tokens per sequence, every sequence the same length [default: 4096].
    #[arg(long, conflicts_with = "lens", value_parser = count(0..))]
    context: Option<usize>,
    /// Ragged lengths instead of --context, comma-separated (e.g. 17,4096,0,300).
    #[arg(long, value_delimiter = ',', value_parser = count(0..))]
    lens: Option<Vec<usize>>,
    /// Ragged lengths from a trace CSV (e.g. the Azure LLM trace): the first --batch requests'
    /// prompt + output tokens, each capped at --max-context.
    #[arg(long, conflicts_with_all = ["lens", "context"])]
    trace: Option<PathBuf>,
    /// Longest context taken from --trace.
    #[arg(long, default_value_t = 4096, requires = "trace", value_parser = count(1..))]
    max_context: usize,
    /// Query heads.
    #[arg(long, default_value_t = 32, value_parser = count(0..))]
    heads: usize,
    #[arg(long, default_value_t = 8, value_parser = count(0..))]
    kv_heads: usize,
    #[arg(long, default_value_t = 128, value_parser = count(0..))]
    head_dim: usize,
    #[arg(long, default_value_t = 16, value_parser = count(0..))]
    block_size: usize,
    /// How K and V are stored (vLLM's kv_cache_dtype): as q (f16, bf16, f32), or fp8_e4m3 /
    /// fp8_e5m2 with a scale per tensor (or per KV head) and q in --q-dtype.
    #[arg(long, value_enum, default_value_t = Dtype::F16)]
    dtype: Dtype,
    /// q and the output with an fp8 cache (f16 or bf16); otherwise they are --dtype.
    #[arg(long, value_enum, default_value_t = Dtype::F16)]
    q_dtype: Dtype,
    /// fp8 K scale (K = stored * scale); default: calibrated from the values' largest magnitude.
    #[arg(long, requires = "v_scale", value_parser = positive_scale)]
    k_scale: Option<f32>,
    /// fp8 V scale; default: calibrated.
    #[arg(long, requires = "k_scale", value_parser = positive_scale)]
    v_scale: Option<f32>,
    /// Calibrate one fp8 scale per KV head rather than one per tensor.
    #[arg(long, conflicts_with = "k_scale")]
    scale_per_head: bool,
    /// How K and V values are drawn: uniform in [-1, 1), or like activations (N(0,
    /// --activation-scale²) with --outlier-channels channels per KV head --outlier-magnitude
    /// times larger).
    #[arg(long, value_enum, default_value_t = ValuesArg::Uniform)]
    values: ValuesArg,
    #[arg(long, default_value_t = 1.0, value_parser = positive_scale)]
    activation_scale: f32,
    #[arg(long, default_value_t = 2, value_parser = count(0..))]
    outlier_channels: usize,
    #[arg(long, default_value_t = 10.0, value_parser = positive_scale)]
    outlier_magnitude: f32,
    /// Softmax scale; default 1/sqrt(head dim).
    #[arg(long, value_parser = positive_scale)]
    scale: Option<f32>,
    /// Timed runs (median reported).
    #[arg(long, value_parser = count(0..))]
    iters: Option<usize>,
    #[arg(long, default_value_t = 1, value_parser = count_u64(0..))]
    seed: u64,
    /// Skip the comparison with the f64 oracle.
    #[arg(long)]
    no_check: bool,
    /// Which GPU kernels run: the one dispatched for the shape (tensor cores for groups 4 and 8 at
    /// head dim 128, CUDA cores otherwise), one engine, or both on the same problem.
    #[arg(long, value_enum, default_value_t = EngineChoice::Auto)]
    engine: EngineChoice,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum ValuesArg {
    Uniform,
    Activations,
}

fn positive_scale(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(x) if x.is_finite() && x > 0.0 => Ok(x),
        _ => Err(format!("{s} is not a positive finite number")),
    }
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
        engines: args.engine,
    };
    let quantised = args.dtype.fp8().is_some();
    let q_dtype = if quantised { args.q_dtype } else { args.dtype };
    let options = ProblemOptions {
        values: match args.values {
            ValuesArg::Uniform => Values::Uniform,
            ValuesArg::Activations => Values::Activations {
                scale: args.activation_scale,
                channels: args.outlier_channels,
                magnitude: args.outlier_magnitude,
            },
        },
        scales: match (args.k_scale, args.v_scale, args.scale_per_head) {
            (Some(k), Some(v), _) => Scales::Fixed(k, v),
            (_, _, true) => Scales::CalibratedPerHead,
            _ => Scales::Calibrated,
        },
        // What fp8 costs is measured against K and V before quantisation.
        keep_exact: quantised && opts.check,
    };
    let problem = DtypeProblem {
        q_dtype,
        kv_dtype: args.dtype,
        shape,
        block_size: args.block_size,
        lens: &lens,
        seed: args.seed,
        options,
    };
    let report = measure_dtype(&device, &problem, opts, &StderrProgress::new())?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print_report(&report)?;
    }
    // Against the oracle over the stored values the kernels round as q's dtype does; NaN errors
    // fail too: only a finite error within the bound passes.
    let bound = tolerance(q_dtype);
    let worst = report
        .other_engines
        .iter()
        .flat_map(|o| [o.paged_rel_error, o.contiguous_rel_error])
        // NaN anywhere stays NaN (f64::max would drop it).
        .fold(report.accuracy.max_rel_error, |a, b| {
            if a.is_nan() || b.is_nan() {
                f64::NAN
            } else {
                a.max(b)
            }
        });
    let within = worst.is_finite() && worst <= bound;
    if !args.no_check && !within {
        return Err(Box::new(CheckFailed(format!(
            "relative error {worst:.3e} exceeds {bound:.0e} for {q_dtype}"
        ))));
    }
    // What the fp8 cache costs against the unquantised values, when its scale was calibrated (a
    // given scale may saturate on purpose: reported, not judged).
    let calibrated = args.k_scale.is_none();
    if quantised && !args.no_check && calibrated {
        let bound = tolerance(args.dtype);
        let e = report.storage.quantised_rel_error;
        if !(e.is_finite() && e <= bound) {
            return Err(Box::new(CheckFailed(format!(
                "{} cache: relative error {e:.3e} against the unquantised values exceeds {bound:.0e}",
                args.dtype
            ))));
        }
    }
    Ok(())
}

fn print_report(r: &AttentionReport) -> Result<(), crate::cli::stdout::StdoutFailed> {
    print_problem(r)?;
    out!("{}", kernel_table(r))?;
    outln!(
        "KV bytes read {:.1} MiB; limits in this run: copy {:.1} GB/s, read-only stream {:.1} GB/s; paged / contiguous time {:.3}",
        r.speed.kv_bytes as f64 / (1 << 20) as f64,
        r.speed.copy_gbps,
        r.speed.stream_gbps,
        r.speed.paged_over_contiguous
    )?;
    if let Some(roof) = &r.roofline {
        print_roofline(roof)?;
    }
    if r.shape.copies_rotated > 1 {
        outln!(
            "timed runs took turns over {} copies of the problem, so that they read memory, not the L2 cache",
            r.shape.copies_rotated
        )?;
    }
    Ok(())
}

/// A relative error with `digits` digits; "not checked" without the check (a checked NaN stays
/// NaN).
fn rel_error(r: &AttentionReport, e: f64, digits: usize) -> String {
    match r.accuracy.checked {
        true => format!("{e:.digits$e}"),
        false => "not checked".to_string(),
    }
}

/// The problem's line, and the fp8 scales with what quantising cost.
fn print_problem(r: &AttentionReport) -> Result<(), crate::cli::stdout::StdoutFailed> {
    let kv = if r.storage.kv_dtype == r.storage.dtype {
        String::new()
    } else {
        format!(", K/V {}", r.storage.kv_dtype)
    };
    outln!(
        "{}: batch {}, {} query / {} KV heads, head dim {}, {}{kv}, block size {}, longest context {}, {} partition(s)",
        r.device, r.shape.batch, r.shape.num_heads, r.shape.num_kv_heads, r.shape.head_dim, r.storage.dtype, r.shape.block_size, r.shape.max_context, r.shape.partitions
    )?;
    if r.emulated {
        outln!("emulated GPU: the kernels ran on the CPU; times are not measurements of a GPU")?;
    }
    if r.storage.kv_dtype.fp8().is_some() {
        let range = |s: &[f32]| {
            let (lo, hi) = s
                .iter()
                .fold((f32::MAX, 0f32), |(a, b), &x| (a.min(x), b.max(x)));
            if lo == hi {
                format!("{lo:.4e}")
            } else {
                format!("{lo:.4e} .. {hi:.4e}")
            }
        };
        outln!(
            "K scale {}, V scale {}; relative error against the unquantised values {}",
            range(&r.storage.k_scale),
            range(&r.storage.v_scale),
            rel_error(r, r.storage.quantised_rel_error, 3)
        )?;
    }
    Ok(())
}

/// Paged and contiguous, on each engine run: time, bandwidth, fractions of the limits, error.
fn kernel_table(r: &AttentionReport) -> Table {
    let mut t = Table::new([
        "kernel",
        "time us",
        "GB/s",
        "of stream",
        "of copy",
        "rel error",
    ]);
    let on = |e: Option<crate::launch::Engine>| e.map_or(String::new(), |e| format!(" ({e})"));
    t.row([
        format!("paged{}", on(r.engine)),
        format!("{:.1}", r.speed.paged_us),
        format!("{:.1}", r.speed.paged_gbps),
        format!("{:.3}", r.speed.paged_frac_of_stream),
        format!("{:.3}", r.speed.paged_frac_of_copy),
        rel_error(r, r.accuracy.paged_rel_error, 2),
    ]);
    t.row([
        format!("contiguous{}", on(r.engine)),
        format!("{:.1}", r.speed.contiguous_us),
        format!("{:.1}", r.speed.contiguous_gbps),
        format!("{:.3}", r.speed.contiguous_frac_of_stream),
        format!("{:.3}", r.speed.contiguous_gbps / r.speed.copy_gbps),
        rel_error(r, r.accuracy.contiguous_rel_error, 2),
    ]);
    for o in &r.other_engines {
        let gbps = |us: f64| r.speed.kv_bytes as f64 / us / 1e3;
        for (layout, us, err) in [
            ("paged", o.paged_us, o.paged_rel_error),
            ("contiguous", o.contiguous_us, o.contiguous_rel_error),
        ] {
            t.row([
                format!("{layout}{}", on(Some(o.engine))),
                format!("{us:.1}"),
                format!("{:.1}", gbps(us)),
                format!("{:.3}", gbps(us) / r.speed.stream_gbps),
                format!("{:.3}", gbps(us) / r.speed.copy_gbps),
                rel_error(r, err, 2),
            ]);
        }
    }
    t
}

/// The CPU's roofline: the kernel's own read, the stream and FMA limits, which binds.
fn print_roofline(roof: &Roofline) -> Result<(), crate::cli::stdout::StdoutFailed> {
    let of_stream = |us: f64| roof.memory_us / us;
    outln!(
        "K/V read in the kernel's order with no arithmetic: paged {:.1} us ({:.3} of the \
         stream),\n  contiguous {:.1} us ({:.3}); the paged kernel at {:.3} of the paged read",
        roof.paged_read_us,
        of_stream(roof.paged_read_us),
        roof.contiguous_read_us,
        of_stream(roof.contiguous_read_us),
        roof.paged_frac_of_read
    )?;
    outln!(
        "roofline: K/V at the read-only stream {:.1} us; {:.0} M lane-FMAs at the FMA limit \
         ({:.1} G/s, {} threads x {} lanes) {:.1} us; the paged kernel with K/V in cache \
         {:.1} us (all measured in this run): {} binds; paged time at {:.3} of the bound",
        roof.memory_us,
        roof.lane_fmas / 1e6,
        roof.fma.lane_fmas_per_s / 1e9,
        roof.fma.threads,
        roof.fma.lanes,
        roof.fma_us,
        roof.in_cache_us,
        roof.binds,
        roof.paged_frac_of_bound
    )?;
    Ok(())
}
