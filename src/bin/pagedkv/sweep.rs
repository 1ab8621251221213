//! `pagedkv sweep`: which block size should an engine use? Fragmentation from a trace against
//! bandwidth measured on the device, every block size from 1 to 256, both put together end to end
//! by a simulated vLLM engine on the trace, next to vLLM's default of 16.

use crate::CmdResult;
use indicatif::{ProgressBar, ProgressStyle};
use pagedkv::device::{Device, DeviceChoice};
use pagedkv::kv::Dtype;
use pagedkv::report::Table;
use pagedkv::sweep::{
    self, model, output, probes_for, AttentionBatch, DurationModel, ModelShape, ProbeOptions,
    SweepConfig, SweepReport, SweepRow,
};
use pagedkv::workload::azure::{read_azure_csv, with_rate, Request};
use pagedkv::workload::synthetic::{synthetic_requests, SizeDist};
use std::path::PathBuf;

const DEFAULT_TRACE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/azure_llm_2023_conv.csv");

#[derive(clap::Args)]
pub struct Args {
    /// Device whose bandwidth is measured.
    #[arg(long, value_enum, default_value_t = DeviceChoice::Auto)]
    device: DeviceChoice,
    /// Model preset: llama-3-8b, llama-3-70b, llama-2-7b, mistral-7b, qwen2.5-7b, qwen2-72b.
    #[arg(long, default_value = "llama-3-8b")]
    model: String,
    /// Override the preset's number of layers.
    #[arg(long)]
    layers: Option<usize>,
    /// Override the preset's number of query heads (attention's shape).
    #[arg(long)]
    heads: Option<usize>,
    /// Override the preset's number of KV heads.
    #[arg(long)]
    kv_heads: Option<usize>,
    /// Override the preset's head dimension.
    #[arg(long)]
    head_dim: Option<usize>,
    /// KV cache element type.
    #[arg(long, value_enum)]
    dtype: Option<Dtype>,
    /// Override the preset's parameter count, in billions (weights take 2 bytes each).
    #[arg(long)]
    params_b: Option<f64>,
    /// KV pool in GiB (all layers); default: what the GPUs leave after the weights.
    #[arg(long)]
    pool_gib: Option<f64>,
    /// GPU memory in MiB for the default pool (H200 as nvidia-smi reports it).
    #[arg(long, default_value_t = model::H200_MEMORY_MIB)]
    gpu_mib: u64,
    /// vLLM's gpu_memory_utilization for the default pool.
    #[arg(long, default_value_t = model::VLLM_GPU_MEMORY_UTILIZATION)]
    gpu_util: f64,
    /// GPUs the model and pool are spread over (tensor parallel).
    #[arg(long, default_value_t = 1)]
    gpus: usize,
    /// Trace CSV with prompt and output token columns (default: the Azure 2023 conversation trace).
    #[arg(long, conflicts_with = "synthetic")]
    trace: Option<PathBuf>,
    /// Synthetic prompt sizes instead of a trace: fixed:N, uniform:LO,HI or lognormal:MEAN,SD.
    #[arg(long)]
    synthetic: Option<SizeDist>,
    /// Synthetic output sizes (same forms).
    #[arg(long, default_value = "fixed:0", requires = "synthetic")]
    synthetic_output: SizeDist,
    /// Synthetic: number of requests; trace: use only its first N requests.
    #[arg(long)]
    requests: Option<usize>,
    /// Space arrivals evenly at this many requests per second (replaces the trace's timestamps).
    #[arg(long)]
    rate: Option<f64>,
    /// Seed of synthetic sizes and of the probes' block tables.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Turns per conversation of the multi-turn workload (prefix sharing).
    #[arg(long, default_value_t = 4)]
    turns: usize,
    /// System-prompt tokens shared by every request of the multi-turn workload.
    #[arg(long, default_value_t = 0)]
    system_prompt: u64,
    /// Replay: decode time per output token, in milliseconds.
    #[arg(long, default_value_t = 20.0)]
    decode_ms: f64,
    /// Replay: prefill time per prompt token, in milliseconds (0: prefill is instant).
    #[arg(long, default_value_t = 0.0)]
    prefill_ms_per_token: f64,
    /// A smaller probe pool and decode batch (under a minute on 2 cores).
    #[arg(long)]
    quick: bool,
    /// Probe pool in MiB, K and V together (default 256, --quick 64; on the CPU at least 4x the
    /// last-level cache, so that the gathers read DRAM as the stream limit does).
    #[arg(long)]
    probe_mib: Option<usize>,
    /// Timed repetitions per measurement, after a warm-up (default 2).
    #[arg(long)]
    reps: Option<usize>,
    /// Passes over every block size; each figure is the median over them, and their spread sets
    /// the recommendation's tie tolerance (default 3).
    #[arg(long)]
    rounds: Option<usize>,
    /// Skip the bandwidth side: fragmentation only.
    #[arg(long)]
    no_bandwidth: bool,
    /// Skip paged attention (the gathers are still measured).
    #[arg(long)]
    no_attention: bool,
    /// Skip the end-to-end engine simulation (the proxy then recommends).
    #[arg(long)]
    no_end_to_end: bool,
    /// Sequences in attention's decode batch (default: CPU 8, --quick 4; GPU 64, --quick 32).
    #[arg(long)]
    attention_batch: Option<usize>,
    /// Tokens per sequence of attention's batch; with --attention-trace-context, the cap
    /// (default: CPU 2048, --quick 1024; GPU 4096, --quick 2048).
    #[arg(long)]
    attention_context: Option<usize>,
    /// Attention's contexts from the workload: its first requests' prompt + output tokens, each
    /// capped at --attention-context (a ragged batch).
    #[arg(long)]
    attention_trace_context: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Write sweep.csv, sweep.json and SVG plots into this directory.
    #[arg(long)]
    out: Option<PathBuf>,
}

fn positive(name: &str, x: f64) -> Result<f64, String> {
    if x.is_finite() && x > 0.0 {
        Ok(x)
    } else {
        Err(format!("--{name} must be a positive number, got {x}"))
    }
}

fn model_shape(args: &Args) -> Result<ModelShape, String> {
    let mut m = model::preset(&args.model).ok_or_else(|| {
        format!(
            "unknown model {:?} (presets: {})",
            args.model,
            model::preset_names().join(", ")
        )
    })?;
    m.layers = args.layers.unwrap_or(m.layers);
    m.num_heads = args.heads.unwrap_or(m.num_heads);
    m.kv_heads = args.kv_heads.unwrap_or(m.kv_heads);
    m.head_dim = args.head_dim.unwrap_or(m.head_dim);
    m.dtype = args.dtype.unwrap_or(m.dtype);
    m.params_billion = args.params_b.unwrap_or(m.params_billion);
    if !(1..=10_000).contains(&m.layers) {
        return Err(format!("--layers must be 1 to 10000, got {}", m.layers));
    }
    if !(1..=1024).contains(&m.kv_heads) {
        return Err(format!("--kv-heads must be 1 to 1024, got {}", m.kv_heads));
    }
    if m.num_heads == 0 || !m.num_heads.is_multiple_of(m.kv_heads) {
        return Err(format!(
            "{} query heads are not a whole multiple of {} KV heads (use --heads)",
            m.num_heads, m.kv_heads
        ));
    }
    if !(m.params_billion.is_finite() && m.params_billion >= 0.0) {
        return Err(format!(
            "--params-b must be non-negative, got {}",
            m.params_billion
        ));
    }
    Ok(m)
}

fn pool(args: &Args, m: &ModelShape) -> Result<(u64, String), String> {
    if let Some(gib) = args.pool_gib {
        let gib = positive("pool-gib", gib)?;
        return Ok((
            (gib * (1u64 << 30) as f64) as u64,
            format!("--pool-gib {gib}"),
        ));
    }
    let util = positive("gpu-util", args.gpu_util)?;
    if util > 1.0 || args.gpus == 0 || args.gpu_mib == 0 {
        return Err("--gpu-util must be in (0, 1], --gpus and --gpu-mib at least 1".into());
    }
    let bytes = model::default_pool_bytes(m, args.gpu_mib, util, args.gpus).ok_or_else(|| {
        format!(
            "{}'s weights ({:.1} GiB) leave no KV pool on {} × {} MiB at utilization {util}; use --gpus or --pool-gib",
            m.name,
            m.weight_bytes() / (1u64 << 30) as f64,
            args.gpus,
            args.gpu_mib
        )
    })?;
    Ok((
        bytes,
        format!(
            "{} × {} MiB × {util} − {:.2} GB weights ({} B params × 2 bytes)",
            args.gpus,
            args.gpu_mib,
            m.weight_bytes() / 1e9,
            m.params_billion
        ),
    ))
}

fn workload(args: &Args) -> Result<(Vec<Request>, String), Box<dyn std::error::Error>> {
    let (mut requests, mut name) = match args.synthetic {
        Some(prompt) => {
            let n = args.requests.unwrap_or(10_000).min(10_000_001);
            let r = synthetic_requests(prompt, args.synthetic_output, n, args.seed);
            (
                r,
                format!(
                    "synthetic prompt {prompt:?}, output {:?}, seed {}",
                    args.synthetic_output, args.seed
                ),
            )
        }
        None => {
            let path = args.trace.clone().unwrap_or_else(|| DEFAULT_TRACE.into());
            let mut r = read_azure_csv(&path)?;
            if let Some(n) = args.requests {
                r.truncate(n);
            }
            let file = path.file_name().map_or_else(
                || path.display().to_string(),
                |f| f.to_string_lossy().into(),
            );
            (r, file)
        }
    };
    if requests.is_empty() || args.requests.is_some_and(|n| n > 10_000_000) {
        return Err("--requests must be 1 to 10000000".into());
    }
    if let Some(rate) = args.rate {
        with_rate(&mut requests, positive("rate", rate)?);
        name += &format!(", arrivals at {rate}/s");
    }
    Ok((requests, name))
}

/// Attention's decode batch: a fixed context, or the workload's first requests' contexts.
fn attention_batch(
    args: &Args,
    m: &ModelShape,
    requests: &[Request],
    gpu: bool,
) -> Result<Option<AttentionBatch>, String> {
    if args.no_attention {
        return Ok(None);
    }
    let (batch, context) = match (gpu, args.quick) {
        // The CPU sizes keep --quick under a minute and the default under five on 2 cores.
        (false, true) => (4, 1024),
        (false, false) => (8, 2048),
        (true, true) => (32, 2048),
        (true, false) => (64, 4096),
    };
    let batch = args.attention_batch.unwrap_or(batch);
    let context = args.attention_context.unwrap_or(context);
    if !(1..=65_536).contains(&batch) || !(1..=1 << 20).contains(&context) {
        return Err(
            "--attention-batch must be 1 to 65536 and --attention-context 1 to 1048576".into(),
        );
    }
    if !args.attention_trace_context {
        return Ok(Some(AttentionBatch::fixed(m.num_heads, batch, context)));
    }
    let lens: Vec<usize> = requests
        .iter()
        .take(batch)
        .map(|r| (r.peak_tokens() as usize).clamp(1, context))
        .collect();
    Ok(Some(AttentionBatch {
        num_heads: m.num_heads,
        source: format!(
            "the workload's first {} requests (prompt + output tokens, capped at {context})",
            lens.len()
        ),
        lens,
    }))
}

pub fn run(args: Args) -> CmdResult {
    let m = model_shape(&args)?;
    let (pool_bytes, pool_source) = pool(&args, &m)?;
    let (requests, workload_name) = workload(&args)?;
    if args.turns == 0 {
        return Err("--turns must be at least 1".into());
    }
    let ms = |name: &str, x: f64| {
        if x.is_finite() && x >= 0.0 {
            Ok(x / 1e3)
        } else {
            Err(format!("--{name} must be a non-negative number, got {x}"))
        }
    };
    let config = SweepConfig {
        model: m.clone(),
        pool_bytes,
        durations: DurationModel {
            prefill_s_per_token: ms("prefill-ms-per-token", args.prefill_ms_per_token)?,
            decode_s_per_token: ms("decode-ms", args.decode_ms)?,
        },
        turns: args.turns,
        system_prompt_tokens: args.system_prompt,
    };
    let mut rows = sweep::memory_rows(&requests, &config)?;

    let device = Device::detect(args.device)?;
    let gpu = device.is_cuda();
    // A GPU's pool must dwarf its L2 cache (50 MB and more), a CPU's its last-level cache.
    let cpu_floor = pagedkv::device::cpu::stream::limit_bytes(1) >> 20;
    let probe_mib = args.probe_mib.unwrap_or(match (gpu, args.quick) {
        (false, true) => cpu_floor.max(64),
        (false, false) => cpu_floor.max(256),
        (true, true) => 512,
        (true, false) => 2048,
    });
    let reps = args.reps.unwrap_or(2);
    let rounds = args.rounds.unwrap_or(3);
    if probe_mib == 0 || probe_mib > 65_536 || reps == 0 || reps > 1000 {
        return Err("--probe-mib must be 1 to 65536 and --reps 1 to 1000".into());
    }
    if rounds == 0 || rounds > 100 {
        return Err(format!("--rounds must be 1 to 100, got {rounds}").into());
    }
    let opts = ProbeOptions {
        pool_bytes: probe_mib << 20,
        reps,
        rounds,
        seq_tokens: 1024,
        seed: args.seed,
        attention: attention_batch(&args, &m, &requests, gpu)?,
    };
    let mut notes = Vec::new();
    let mut probe = None;
    if args.no_bandwidth {
        notes
            .push("bandwidth not measured (--no-bandwidth): the proxy is concurrency alone".into());
    } else {
        let (probes, probe_notes) = probes_for(&device, &opts)?;
        notes.extend(probe_notes);
        let bar = ProgressBar::new((rounds * probes.len() * rows.len()) as u64);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed}]")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let measured = sweep::measure_bandwidth(&mut rows, probes, &m, rounds, |label| {
            bar.set_message(label.to_string());
            bar.inc(1);
        });
        bar.finish_and_clear();
        notes.extend(measured?);
        match &opts.attention {
            Some(a) if rows.iter().any(|r| r.attention_gbps.is_some()) => notes.push(format!(
                "attention: one layer, {} query / {} KV heads, head dim {}, {}; batch: {}",
                m.num_heads, m.kv_heads, m.head_dim, m.dtype, a.source
            )),
            _ => notes.push(
                "attention not measured (column -): the proxy uses the read-only gather".into(),
            ),
        }
        probe = Some(opts);
    }
    let rec = sweep::apply_recommendation(&mut rows);
    let (mut e2e, mut pick, mut setup) = (Vec::new(), None, None);
    if !args.no_end_to_end {
        let profile = sweep::end_to_end::profile(&rows, &device.name());
        let bar = ProgressBar::new(3 * rows.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("{bar:30} {pos}/{len} engine runs [{elapsed}]")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        e2e = sweep::end_to_end::run(
            &rows,
            &requests,
            &m,
            args.gpus,
            &profile,
            rec.noise_tolerance,
            &|| bar.inc(1),
        )?;
        bar.finish_and_clear();
        sweep::apply_end_to_end(&mut rows, &e2e);
        pick = sweep::end_to_end::pick(&e2e);
        setup = Some(format!(
            "the workload's arrivals through a simulated vLLM 0.33 engine (H200 online preset: max_num_seqs 1024, max_num_batched_tokens 8192, prefix caching, synchronous loop; {} GPU(s), step overhead {} ms); the pool above at each block size; attention efficiency from {} ({}){}; each block size also run at efficiency × (1 ± {:.0}%)",
            args.gpus.max(1),
            sweep::end_to_end::STEP_OVERHEAD_S * 1e3,
            profile.device,
            profile.source,
            if profile.measured { "" } else { ", an assumption: bandwidth was not measured" },
            100.0 * rec.noise_tolerance,
        ));
    }
    let report = SweepReport {
        device: device.name(),
        recommended_block_size: pick.as_ref().map(|p| p.block_size).or(rec.block_size),
        proxy_recommended_block_size: rec.block_size,
        vllm_default_block_size: sweep::VLLM_DEFAULT_BLOCK_SIZE,
        noise_tolerance: rec.noise_tolerance,
        within_noise_block_sizes: rec.within_noise,
        model: m,
        pool_bytes,
        pool_source,
        workload: workload_name,
        requests: requests.len(),
        config,
        probe,
        proxy: "concurrent_requests × min(1, attention (else read-only gather) fraction of stream), normalised to the best; recommended = largest block size within 1% of the best".into(),
        end_to_end: e2e,
        end_to_end_pick: pick,
        end_to_end_setup: setup,
        notes,
        rows,
    };
    if let Some(dir) = &args.out {
        output::write_all(&report, dir)?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_text(&report, &requests, args.out.as_ref());
    }
    Ok(())
}

fn opt(x: Option<f64>, digits: usize) -> String {
    x.map_or_else(|| "-".into(), |v| format!("{v:.digits$}"))
}

fn print_text(report: &SweepReport, requests: &[Request], out: Option<&PathBuf>) {
    let m = &report.model;
    let n = requests.len() as f64;
    let mean = |f: fn(&Request) -> u32| requests.iter().map(|r| f(r) as f64).sum::<f64>() / n;
    println!("device: {}", report.device);
    println!(
        "model: {} ({} layers, {} KV heads, head dim {}, {}; {} KiB of KV per token)",
        m.name,
        m.layers,
        m.kv_heads,
        m.head_dim,
        m.dtype,
        m.kv_bytes_per_token() / 1024
    );
    println!(
        "pool: {:.2} GiB = {}",
        report.pool_bytes as f64 / (1u64 << 30) as f64,
        report.pool_source
    );
    println!(
        "workload: {} — {} requests, mean prompt {:.0}, mean output {:.0} tokens; prefix sharing over {} turns per conversation",
        report.workload,
        requests.len(),
        mean(|r| r.prompt_tokens),
        mean(|r| r.output_tokens),
        report.config.turns
    );
    let labels: Vec<String> = report
        .rows
        .first()
        .map(|r| r.memory.iter().map(|x| x.memory.clone()).collect())
        .unwrap_or_default();
    let mut header: Vec<String> = [
        "block",
        "waste %",
        "concurrent",
        "tw concurrent",
        "prefix lost %",
        "table B/req",
    ]
    .map(String::from)
    .to_vec();
    for l in &labels {
        header.push(format!("gather GB/s {l}"));
        header.push(format!("of stream {l}"));
        header.push(format!("copy-out of copy {l}"));
    }
    header.extend(["attention GB/s", "of stream", "± noise", "proxy"].map(String::from));
    if !report.end_to_end.is_empty() {
        header.extend(["e2e out tok/s", "p99 TTFT ms", "p99 TPOT ms"].map(String::from));
    }
    header.push(String::new());
    let mut t = Table::new(header);
    for r in &report.rows {
        let mut cells = vec![
            r.block_size.to_string(),
            format!("{:.2}", r.internal_waste_pct),
            format!("{:.1}", r.concurrent_requests),
            opt(r.tw_concurrent_requests, 1),
            opt(r.prefix_share_lost_pct, 2),
            format!("{:.0}", r.block_table_bytes_per_request),
        ];
        for x in &r.memory {
            cells.push(format!("{:.2}", x.gather_gbps));
            cells.push(format!("{:.2}", x.gather_frac_of_stream));
            cells.push(format!("{:.2}", x.gather_copy_frac_of_copy));
        }
        cells.push(opt(r.attention_gbps, 2));
        cells.push(opt(r.attention_frac_of_stream, 2));
        cells.push(
            r.efficiency_noise
                .map_or("-".into(), |n| format!("{:.0}%", 100.0 * n)),
        );
        cells.push(format!("{:.3}", r.proxy));
        if !report.end_to_end.is_empty() {
            cells.push(opt(r.e2e_output_tokens_per_s, 0));
            cells.push(opt(r.e2e_p99_ttft_s.map(|x| 1e3 * x), 1));
            cells.push(opt(r.e2e_p99_tpot_s.map(|x| 1e3 * x), 2));
        }
        cells.push(marks(report, r));
        t.row(cells);
    }
    print!("{t}");
    for (i, label) in labels.iter().enumerate() {
        let median = |f: &dyn Fn(&sweep::MemoryBandwidth) -> Option<f64>| {
            let mut v: Vec<f64> = report
                .rows
                .iter()
                .filter_map(|r| r.memory.get(i).and_then(f))
                .collect();
            v.sort_by(f64::total_cmp);
            (!v.is_empty()).then(|| v[v.len() / 2])
        };
        println!(
            "limits ({label}, median of the per-block-size measurements): copy {} GB/s (read + write), read-only stream {} GB/s (raw words), scalar f16-to-f32 pass {} GB/s (element by element, for reference)",
            opt(median(&|m| Some(m.copy_gbps)), 2),
            opt(median(&|m| Some(m.stream_gbps)), 2),
            opt(median(&|m| m.convert_stream_gbps), 2),
        );
    }
    for note in &report.notes {
        println!("note: {note}");
    }
    println!("proxy: {}", report.proxy);
    if let Some(setup) = &report.end_to_end_setup {
        println!("end to end: {setup}");
    }
    if let Some(line) = sweep::end_to_end_line(report) {
        println!("{line}");
    }
    println!("{}", sweep::comparison_line(report));
    if let Some(dir) = out {
        println!(
            "wrote {}",
            dir.join("sweep.{csv,json}, waste_concurrency.svg, bandwidth.svg, end_to_end.svg, attention_profile.json")
                .display()
        );
    }
}

fn marks(report: &SweepReport, r: &SweepRow) -> String {
    let mut m = Vec::new();
    if r.block_size == report.vllm_default_block_size {
        m.push("<- vLLM default");
    }
    if Some(r.block_size) == report.recommended_block_size {
        m.push("<- recommended");
    }
    m.join(" ")
}
