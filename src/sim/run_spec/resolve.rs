//! The one way a [`RunSpec`] becomes a run: the preset's numbers, then a scenario's engine
//! settings, then the spec's own values, checked as vLLM checks them.

use super::choices::{Clock, Quantization};
use super::error::SpecError;
use super::spec::RunSpec;
use super::tier;
use crate::hw::{gpu, gpu_names};
use crate::kv::model::{self, ModelError, ModelShape, Weights};
use crate::kv::BlockSize;
use crate::sim::engine::config::{preset, preset_names, Prediction, Preemption, Preset};
use crate::sim::engine::{
    load_profile, EngineConfig, Profile, ResolvedSlo, RunSettings, SloError, SloFlags, SloPreset,
};
use crate::sim::latency::{choose, Choice, StepProfile, StepTimesError};
use crate::workload::scenario::EngineFields;
use std::sync::Arc;

/// A run's settings and what they were resolved from, for the report.
#[derive(Debug, Clone)]
pub struct ResolvedRun {
    pub settings: RunSettings,
    /// The block size the spec, the scenario or the preset gives.
    pub block_size: BlockSize,
    pub preset_name: String,
    /// Where max_model_len comes from.
    pub max_model_len_source: String,
    /// Where the host tier's bandwidth comes from.
    pub offload_source: Option<String>,
    /// The SLOs the runs are judged by, when any.
    pub slo: Option<ResolvedSlo>,
}

/// The model `name` names (a preset or a config.json), with `quantization` applied.
pub fn model_shape(
    name: &str,
    quantization: Option<Quantization>,
) -> Result<ModelShape, ModelError> {
    let mut m = model::load(name)?;
    if quantization == Some(Quantization::Fp8) {
        m.weights = Weights::Fp8;
    }
    Ok(m)
}

/// `sim engine`'s and `sim cluster`'s SLOs: none without a value; the values alone without a
/// preset.
pub fn run_slo(flags: &SloFlags, params_billion: f64) -> Result<Option<ResolvedSlo>, SloError> {
    if flags.is_empty() {
        return Ok(None);
    }
    flags
        .resolve(
            (SloPreset::Custom, "the --slo-* flags"),
            params_billion,
            false,
        )
        .map(Some)
}

/// The engine's settings: what `resolve` takes before the block size and the host tier.
struct Engine {
    config: EngineConfig,
    num_gpu_blocks_override: Option<usize>,
    /// A scenario's block size, when it fixes one.
    fixed_block: Option<usize>,
    max_model_len_source: String,
}

/// The preset's batch limits, the scenario's settings over them, the spec's over both.
fn engine(
    spec: &RunSpec,
    p: &Preset,
    fields: Option<&EngineFields>,
    seed: u64,
    model: &ModelShape,
) -> Result<Engine, SpecError> {
    let mut e = EngineConfig {
        max_num_seqs: p.max_num_seqs,
        max_num_batched_tokens: p.max_num_batched_tokens,
        ..EngineConfig::default()
    };
    let mut override_blocks = None;
    if let Some(f) = fields {
        e.apply(f)?;
        if f.num_gpu_blocks.is_some() {
            override_blocks = Some(e.num_gpu_blocks);
        }
    }
    let fixed_block = fields
        .and_then(|f| f.block_size)
        .map(|_| e.block_size.get());
    let take = |slot: &mut usize, v: Option<usize>| *slot = v.unwrap_or(*slot);
    take(&mut e.max_num_seqs, spec.max_num_seqs);
    take(&mut e.max_num_batched_tokens, spec.max_num_batched_tokens);
    let flag = |slot: &mut bool, v: Option<bool>| *slot = v.unwrap_or(*slot);
    flag(&mut e.enable_prefix_caching, spec.enable_prefix_caching);
    flag(&mut e.enable_chunked_prefill, spec.enable_chunked_prefill);
    take(
        &mut e.long_prefill_token_threshold,
        spec.long_prefill_token_threshold,
    );
    e.scheduling_policy = spec.scheduling_policy.unwrap_or(e.scheduling_policy);
    // A scenario's own length stands unless the spec overrides it; else the model's context.
    let max_model_len_source = if let Some(v) = spec.max_model_len {
        e.max_model_len = v;
        "--max-model-len".to_string()
    } else if fields.is_some_and(|f| f.max_model_len.is_some()) {
        "the scenario".to_string()
    } else if fields.is_some() {
        "unlimited (a scenario without max_model_len)".to_string()
    } else {
        e.max_model_len = model.context_len;
        format!("{}'s context length", model.name)
    };
    e.watermark = spec.watermark.unwrap_or(e.watermark);
    e.async_scheduling = spec.async_scheduling;
    e.prediction = Prediction {
        sigma: spec.predict_sigma,
        seed,
    };
    e.aging_delay = spec.aging_delay;
    if spec.swap_preemption {
        let gib = spec.swap_space_gib;
        if !(gib.is_finite() && gib >= 0.0) {
            return Err(SpecError::SwapSpace(gib));
        }
        e.preemption = Preemption::Swap {
            gbps: spec.swap_gbps,
            host_bytes: (gib * (1u64 << 30) as f64) as u64,
        };
    }
    Ok(Engine {
        config: e,
        num_gpu_blocks_override: spec.num_gpu_blocks_override.or(override_blocks),
        fixed_block,
        max_model_len_source,
    })
}

/// The step-time model for `model` on `gpu`, as the spec asks.
fn step_times(
    spec: &RunSpec,
    model: &ModelShape,
    gpu: &crate::hw::Gpu,
) -> Result<Choice, StepTimesError> {
    if spec.clock == Clock::Steps {
        return Ok(Choice::roofline("unused: --clock steps"));
    }
    let own = match &spec.step_profile {
        Some(path) => Some(Arc::new(StepProfile::read(path)?)),
        None => None,
    };
    choose(spec.step_times, own, model, gpu, spec.tp)
}

/// Preset, then the scenario's engine settings (`fields`), then the spec; checked as vLLM checks
/// them. `seed` seeds predicted output lengths.
pub fn resolve(
    spec: &RunSpec,
    fields: Option<&EngineFields>,
    seed: u64,
) -> Result<ResolvedRun, SpecError> {
    let p = preset(&spec.preset).ok_or_else(|| SpecError::UnknownPreset {
        name: spec.preset.clone(),
        known: preset_names().join(", "),
    })?;
    let model = ModelShape {
        dtype: spec.kv_cache_dtype,
        ..model_shape(&spec.model, spec.quantization)?
    };
    model.check_tp(spec.tp)?;
    let Engine {
        config: mut e,
        num_gpu_blocks_override,
        fixed_block,
        max_model_len_source,
    } = engine(spec, &p, fields, seed, &model)?;
    let block_size = match spec.block_size.or(fixed_block) {
        Some(b) => BlockSize::new(b as u64)?,
        None => p.block_size,
    };
    let tier = tier::resolve(&spec.tier, &model, spec.tp, block_size)?;
    let offload_source = tier.map(|(o, source)| {
        e.cpu_offload = Some(o);
        source
    });
    e.validate()?;
    e.check_as_vllm()?;
    let util = spec
        .gpu_memory_utilization
        .unwrap_or(p.gpu_memory_utilization);
    if !(util > 0.0 && util <= 1.0) {
        return Err(SpecError::GpuMemoryUtilization(util));
    }
    let gpu_name = spec.gpu.clone().unwrap_or_else(|| p.gpu.to_string());
    let g = gpu(&gpu_name).ok_or_else(|| SpecError::UnknownGpu {
        name: gpu_name,
        known: gpu_names().join(", "),
    })?;
    let step_times = step_times(spec, &model, &g)?;
    let profile = match &spec.profile {
        Some(path) => load_profile(path)?,
        None => Profile::h200_assumed(),
    };
    let overhead = spec.step_overhead_ms;
    if !(overhead.is_finite() && overhead >= 0.0) {
        return Err(SpecError::StepOverhead(overhead));
    }
    let slo = run_slo(&spec.slo, model.params_billion)?;
    let settings = RunSettings {
        engine: e,
        num_gpu_blocks_override,
        gpu_memory_utilization: util,
        tp: spec.tp,
        profile,
        cpu_overhead_s: overhead / 1e3,
        swap_gbps: spec.swap_preemption.then_some(spec.swap_gbps),
        clock_steps: spec.clock == Clock::Steps,
        slo: slo.as_ref().map(|s| s.targets.slo()).unwrap_or_default(),
        ..RunSettings::new(model, g, step_times)
    };
    Ok(ResolvedRun {
        settings,
        block_size,
        preset_name: p.name.to_string(),
        max_model_len_source,
        offload_source,
        slo,
    })
}
