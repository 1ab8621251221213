//! `pagedkv step-profile`: what a step profile covers (`check`), and pagedkv's own decode
//! attention merged into one (`from-attention`, as `scripts/gpu-check` does on a lent GPU).

use crate::cli::CmdResult;
use crate::hw::gpu;
use crate::kv::model::{self, Weights};
use crate::kv::Dtype;
use crate::report::Table;
use crate::sim::engine::Profile;
use crate::sim::latency::attention_rows::{merge_decode_rows, AttentionRun};
use crate::sim::latency::{
    choose, models_at, profile, step_ms, BatchShape, Measured, StepProfile, StepTimes,
};
use crate::sim::run_spec::{model_shape, Quantization};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// Which models, tensor-parallel sizes and dtypes a profile covers (every preset, or one
    /// --model), and what it lacks where it does not.
    Check(CheckArgs),
    /// How long one step takes: `--batch` requests each computing `--new-tokens` after
    /// `--context` cached ones, by the measured tables and by the roofline side by side.
    Time(TimeArgs),
    /// Merge `pagedkv attention --json` runs (one per batch × context × block size) into the
    /// shipped profile of their GPU as its decode-attention rows.
    FromAttention(FromArgs),
}

#[derive(clap::Args)]
struct CheckArgs {
    /// A profile file [default: the shipped one of --gpu].
    #[arg(long)]
    step_profile: Option<PathBuf>,
    /// h200, h100.
    #[arg(long, default_value = "h200")]
    gpu: String,
    /// One model (a preset or a config.json) [default: every preset].
    #[arg(long)]
    model: Option<String>,
}

#[derive(clap::Args)]
struct TimeArgs {
    /// A model preset or a config.json.
    #[arg(long, default_value = "llama-3.1-8b")]
    model: String,
    /// h200, h100, a100.
    #[arg(long, default_value = "h200")]
    gpu: String,
    #[arg(long, default_value_t = 1, value_parser = crate::cli::count(1..=64))]
    tp: usize,
    #[arg(long, value_enum)]
    quantization: Option<Quantization>,
    #[arg(long, value_enum, default_value_t = Dtype::F16)]
    kv_cache_dtype: Dtype,
    /// Requests in the step.
    #[arg(long, default_value_t = 1, value_parser = crate::cli::count(1..=1 << 20))]
    batch: usize,
    /// Tokens each computes (1: a decode step).
    #[arg(long, default_value_t = 1, value_parser = crate::cli::count(1..=1 << 24))]
    new_tokens: usize,
    /// Tokens each has cached (its context).
    #[arg(long, default_value_t = 2048, value_parser = crate::cli::count(0..=1 << 24))]
    context: usize,
    /// KV block size (decode attention's efficiency at it, against the table's).
    #[arg(long, default_value_t = 16, value_parser = crate::cli::count(1..=256))]
    block_size: usize,
    /// A profile file [default: the shipped one of --gpu].
    #[arg(long)]
    step_profile: Option<PathBuf>,
    /// Print the step's times as JSON.
    #[arg(long)]
    json: bool,
}

/// `step-profile time --json`: one step timed by the measured tables (when they cover it) and by
/// the roofline.
#[derive(serde::Serialize)]
struct StepTimeReport<'a> {
    model: &'a str,
    weights: String,
    kv_cache_dtype: Dtype,
    gpu: &'a str,
    tp: usize,
    batch: usize,
    new_tokens: usize,
    context: usize,
    block_size: usize,
    /// Milliseconds by the measured tables; `None` where they do not cover the step's model.
    measured_ms: Option<f64>,
    /// Which tables, or why none.
    measured_source: String,
    roofline_ms: f64,
    /// Decode attention's share of HBM bandwidth the roofline assumes at the block size.
    roofline_attention_efficiency: f64,
    efficiency_source: String,
}

#[derive(clap::Args)]
struct FromArgs {
    /// The GPU the runs were measured on: its shipped profile takes the rows.
    #[arg(long)]
    gpu: String,
    /// Where they were measured, for the profile's label.
    #[arg(long, default_value = "pagedkv attention")]
    what: String,
    /// The merged profile's file.
    #[arg(long)]
    out: PathBuf,
    /// Files of `pagedkv attention --json` reports (one per line, or one per file).
    #[arg(required = true)]
    runs: Vec<PathBuf>,
}

pub fn run(args: Args) -> CmdResult {
    match args.command {
        Command::Check(a) => check(a),
        Command::Time(a) => time(a),
        Command::FromAttention(a) => from_attention(a),
    }
}

fn time(a: TimeArgs) -> CmdResult {
    let g = gpu(&a.gpu).ok_or_else(|| format!("unknown GPU {:?}", a.gpu))?;
    let m = model::ModelShape {
        dtype: a.kv_cache_dtype,
        ..model_shape(&a.model, a.quantization)?
    };
    m.check_tp(a.tp)?;
    let own = match &a.step_profile {
        Some(p) => Some(std::sync::Arc::new(StepProfile::read(p)?)),
        None => None,
    };
    let choice = choose(StepTimes::Auto, own, &m, &g, a.tp)?;
    let efficiency = Profile::h200_assumed();
    let batch = BatchShape::of((0..a.batch).map(|_| (a.new_tokens as u32, a.context as u32)));
    let (measured, roofline) =
        models_at(choice.profile.as_deref(), &m, &g, a.tp, a.block_size, |b| {
            efficiency.at(b)
        })?;
    if a.json {
        let measured_ms = match (&measured, &choice.profile) {
            (Some(l), Some(_)) => Some(step_ms(l, &batch)),
            _ => None,
        };
        let report = StepTimeReport {
            model: &m.name,
            weights: m.weights.to_string(),
            kv_cache_dtype: m.dtype,
            gpu: g.name,
            tp: a.tp,
            batch: a.batch,
            new_tokens: a.new_tokens,
            context: a.context,
            block_size: a.block_size,
            measured_ms,
            measured_source: match &choice.profile {
                Some(p) if measured_ms.is_some() => p.label.clone(),
                _ => choice.line.clone(),
            },
            roofline_ms: step_ms(&roofline, &batch),
            roofline_attention_efficiency: efficiency.at(a.block_size),
            efficiency_source: efficiency.device.clone(),
        };
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(());
    }
    outln!(
        "{} requests × {} new tokens after {} cached, {} ({} weights, KV {}) on {} × {}, block size {}:",
        a.batch,
        a.new_tokens,
        a.context,
        m.name,
        m.weights,
        m.dtype,
        a.tp,
        g.name,
        a.block_size
    )?;
    match (&measured, &choice.profile) {
        (Some(l), Some(p)) => outln!("  measured: {:.3} ms ({})", step_ms(l, &batch), p.label)?,
        _ => outln!("  measured: none ({})", choice.line)?,
    }
    outln!(
        "  roofline: {:.3} ms (datasheet peaks; attention at {:.2} of HBM bandwidth: {})",
        step_ms(&roofline, &batch),
        efficiency.at(a.block_size),
        efficiency.device
    )?;
    Ok(())
}

fn shipped_text(name: &str) -> Result<&'static str, String> {
    let g = gpu(name).ok_or_else(|| format!("unknown GPU {name:?}"))?;
    profile::SHIPPED
        .iter()
        .find(|(n, _)| *n == g.name)
        .map(|(_, t)| *t)
        .ok_or_else(|| format!("no shipped profile for {} (h100, h200)", g.name))
}

fn check(a: CheckArgs) -> CmdResult {
    let p = match &a.step_profile {
        Some(path) => StepProfile::read(path)?,
        None => StepProfile::parse(shipped_text(&a.gpu)?, "shipped profile")?,
    };
    outln!("{}: {} (block size {})", p.label, p.source, p.block_size)?;
    let models: Vec<String> = match &a.model {
        Some(m) => vec![m.clone()],
        None => model::preset_names()
            .iter()
            .map(|s| s.to_string())
            .collect(),
    };
    let mut t = Table::new(vec!["model", "tp", "weights", "KV", "covered"]);
    for name in &models {
        let base = model_shape(name, None)?;
        for tp in [1, 2, 4, 8] {
            if base.check_tp(tp).is_err() {
                continue;
            }
            for (w, kv) in [
                (None, Dtype::F16),
                (Some(Quantization::Fp8), Dtype::F16),
                (Some(Quantization::Fp8), Dtype::Fp8E4m3),
            ] {
                let m = model::ModelShape {
                    weights: w.map_or(base.weights, |_| Weights::Fp8),
                    dtype: kv,
                    ..base.clone()
                };
                let covered = match Measured::new(&p, &m, tp) {
                    Ok(_) => "yes".to_string(),
                    Err(why) => format!("no: has no {}", why.what),
                };
                t.row(vec![
                    m.name.clone(),
                    tp.to_string(),
                    m.weights.to_string(),
                    m.dtype.to_string(),
                    covered,
                ]);
            }
        }
    }
    outln!("{t}")?;
    Ok(())
}

fn from_attention(a: FromArgs) -> CmdResult {
    let mut doc: serde_json::Value = serde_json::from_str(shipped_text(&a.gpu)?)?;
    let mut runs = Vec::new();
    for path in &a.runs {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let values = crate::workload::strict_json::values(&text)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        for v in values {
            runs.push(
                AttentionRun::from_report(&v).map_err(|e| format!("{}: {e}", path.display()))?,
            );
        }
    }
    merge_decode_rows(&mut doc, &runs, &a.what)?;
    let text = serde_json::to_string(&doc)?;
    // What it writes must load.
    StepProfile::parse(&text, &a.out.display().to_string())?;
    std::fs::write(&a.out, text + "\n").map_err(|e| format!("{}: {e}", a.out.display()))?;
    outln!(
        "wrote {}: {} runs as decode-attention rows of {}",
        a.out.display(),
        runs.len(),
        doc["label"].as_str().unwrap_or_default()
    )?;
    Ok(())
}
