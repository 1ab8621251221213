//! Runs of the engine on a model and a GPU: a vLLM preset's settings, the pool the GPU leaves at
//! each block size, the step-time model with that block size's attention efficiency; several block
//! sizes in parallel.

use super::clients::{ClientReport, Clients};
use super::config::EngineConfig;
use super::driver::drive_clients;
use super::engine::{Clock, Engine, EngineError, Recording, TimelinePoint};
use super::host_tier::{HostTier, TierStats};
use super::metrics::{EngineReport, Slo};
use super::model_len::accepted;
use super::profile::Profile;
use super::setup::prepare;
use super::step_time::{num_gpu_blocks, StepModel};
use crate::hw::Gpu;
use crate::kv::model::ModelShape;
use crate::kv::BlockSize;
use crate::sim::latency::{models_at, step_ms, BatchShape, Choice, Latency};
use crate::workload::serving::ServingRequest;
use rayon::prelude::*;
use serde::Serialize;
use std::io::Write;

/// Everything but the block size and the workload.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSettings {
    /// Every field but `block_size` and `num_gpu_blocks` (set per run).
    pub engine: EngineConfig,
    /// vLLM's `--num-gpu-blocks-override`: the pool, whatever the block size.
    pub num_gpu_blocks_override: Option<usize>,
    pub gpu_memory_utilization: f64,
    pub model: ModelShape,
    pub gpu: Gpu,
    pub tp: usize,
    /// Attention efficiency per block size (how the block size enters the step times).
    pub profile: Profile,
    /// Multiplies the profile's efficiency (the sweep's noise band); 1 for the profile as is.
    pub efficiency_scale: f64,
    /// The step-time model ([`crate::sim::latency::choose`]).
    pub step_times: Choice,
    pub cpu_overhead_s: f64,
    pub swap_gbps: Option<f64>,
    /// Count time in steps instead of the model's seconds.
    pub clock_steps: bool,
    pub slo: Slo,
    /// How the requests are sent: at their arrivals, or by N clients in a closed loop.
    pub clients: Clients,
}

/// One block size's run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    pub block_size: BlockSize,
    pub num_gpu_blocks: usize,
    /// Attention efficiency the step-time model used.
    pub efficiency: f64,
    #[serde(flatten)]
    pub report: EngineReport,
    /// The host tier's counts, with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<TierReport>,
    /// A closed loop's clients: what they saw.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clients: Option<ClientReport>,
    #[serde(skip)]
    pub timeline: Vec<TimelinePoint>,
}

/// A host tier's counts, with the bytes they moved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct TierReport {
    #[serde(flatten)]
    pub stats: TierStats,
    /// Over every GPU of the replica.
    pub stored_bytes: u64,
    pub loaded_bytes: u64,
}

/// CPU time per step (scheduling, output processing) a run assumes unless told, milliseconds.
pub const STEP_OVERHEAD_MS: f64 = 0.5;

impl RunSettings {
    /// The one constructor: `model` on one `gpu` with vLLM's default engine settings and memory
    /// share, the built-in H200 efficiency, [`STEP_OVERHEAD_MS`], seconds, no pool override, swap,
    /// SLO or clients. A run that wants more sets the fields (`..RunSettings::new(..)`); flags,
    /// presets and scenarios go through `sim::run_spec::resolve`.
    pub fn new(model: ModelShape, gpu: Gpu, step_times: Choice) -> RunSettings {
        RunSettings {
            engine: EngineConfig::default(),
            num_gpu_blocks_override: None,
            gpu_memory_utilization: crate::kv::model::VLLM_GPU_MEMORY_UTILIZATION,
            model,
            gpu,
            tp: 1,
            profile: Profile::h200_assumed(),
            efficiency_scale: 1.0,
            step_times,
            cpu_overhead_s: STEP_OVERHEAD_MS / 1e3,
            swap_gbps: None,
            clock_steps: false,
            slo: Slo::default(),
            clients: Clients::default(),
        }
    }

    /// Bytes of KV one block of `block_size` tokens holds over all of a replica's GPUs.
    pub fn block_bytes(&self, block_size: BlockSize) -> u64 {
        super::step_time::kv_bytes_per_token_per_gpu(&self.model, self.tp)
            * (block_size.get() * self.tp) as u64
    }

    /// `stats` with the bytes they moved at `block_size`.
    pub fn tier_report(&self, stats: TierStats, block_size: BlockSize) -> TierReport {
        let b = self.block_bytes(block_size);
        TierReport {
            stats,
            stored_bytes: stats.stored_blocks * b,
            loaded_bytes: stats.loaded_blocks * b,
        }
    }

    /// The same settings without the host KV tier: the runs a tier's effect is measured against.
    pub fn without_host_tier(&self) -> RunSettings {
        let mut plain = self.clone();
        plain.engine.cpu_offload = None;
        plain
    }

    /// The engine settings and clock at `block_size`.
    pub fn at(&self, block_size: BlockSize) -> Result<(EngineConfig, Clock, f64), EngineError> {
        let mut cfg = self.engine.clone();
        cfg.block_size = block_size;
        cfg.num_gpu_blocks = match self.num_gpu_blocks_override {
            Some(n) => n,
            None => num_gpu_blocks(
                &self.model,
                &self.gpu,
                self.gpu_memory_utilization,
                self.tp,
                block_size,
            )
            .ok_or_else(|| super::config::ConfigError::NoPoolLeft {
                model: self.model.name.clone(),
                tp: self.tp,
                gpu: self.gpu.name,
                utilization: self.gpu_memory_utilization,
            })?,
        };
        cfg.validate()?;
        let efficiency =
            (self.profile.at(block_size.get()) * self.efficiency_scale).clamp(1e-6, 1.0);
        let clock = if self.clock_steps {
            Clock::Steps
        } else {
            Clock::Seconds(Box::new(StepModel {
                model: self.model.clone(),
                tp: self.tp,
                latency: self.latency(block_size, efficiency)?,
                cpu_overhead_s: self.cpu_overhead_s,
                overlap_cpu: cfg.async_scheduling,
                swap_gbps: self.swap_gbps,
                offload_gbps: cfg.cpu_offload.map(|o| o.gbps),
            }))
        };
        Ok((cfg, clock, efficiency))
    }

    /// The run's two step-time models at `block_size` ([`models_at`]): measured (under measured
    /// step times) and the roofline. `efficiency`: attention's at `block_size` (the sweep's noise
    /// band included); at other block sizes the profile's.
    fn models(
        &self,
        block_size: BlockSize,
        efficiency: f64,
    ) -> Result<(Option<Latency>, Latency), EngineError> {
        let at = |b: usize| {
            if b == block_size.get() {
                efficiency
            } else {
                self.profile.at(b)
            }
        };
        let profile = self.step_times.profile.as_deref();
        models_at(
            profile,
            &self.model,
            &self.gpu,
            self.tp,
            block_size.get(),
            at,
        )
        .map_err(|e| super::config::ConfigError::StepTimes(e).into())
    }

    /// The GPU's step times at `block_size`: the measured model under measured step times, else
    /// the roofline.
    fn latency(&self, block_size: BlockSize, efficiency: f64) -> Result<Latency, EngineError> {
        let (measured, roofline) = self.models(block_size, efficiency)?;
        Ok(measured.unwrap_or(roofline))
    }

    /// Under measured step times, two reference steps timed by them and by the roofline at
    /// `block_size` (a decode step of 64 requests at 2k tokens of context, one 2k-token prefill);
    /// `None` under the roofline or a step clock.
    pub fn beside_roofline(&self, block_size: BlockSize) -> Option<String> {
        if self.clock_steps {
            return None;
        }
        let efficiency =
            (self.profile.at(block_size.get()) * self.efficiency_scale).clamp(1e-6, 1.0);
        let (measured, roofline) = self.models(block_size, efficiency).ok()?;
        let measured = measured?;
        let decode = BatchShape::of([(1, 2048); 64]);
        let prefill = BatchShape::of([(2048, 0)]);
        Some(format!(
            "beside the roofline at block size {block_size}: a decode step of 64 × 2k {:.2} ms (roofline {:.2}), a 2k-token prefill {:.1} ms ({:.1})",
            step_ms(&measured, &decode),
            step_ms(&roofline, &decode),
            step_ms(&measured, &prefill),
            step_ms(&roofline, &prefill),
        ))
    }

    /// Runs `requests` at `block_size`, keeping the timeline if asked and writing every step's
    /// record to `step_log` if given; `progress(finished, total)` as [`Engine::run`].
    pub fn run(
        &self,
        block_size: BlockSize,
        requests: &[ServingRequest],
        timeline: bool,
        step_log: Option<&mut dyn Write>,
        progress: impl FnMut(usize, usize),
    ) -> Result<Outcome, EngineError> {
        let (cfg, clock, efficiency) = self.at(block_size)?;
        let num_gpu_blocks = cfg.num_gpu_blocks;
        let rec = Recording {
            steps: step_log.is_some(),
            timeline,
        };
        // What vLLM's server passes on: some requests refused, some with max_tokens lowered.
        let served = accepted(requests, cfg.max_model_len)?;
        let requests = &served.requests[..];
        let prepared = prepare(&cfg, requests)?;
        let mut e = Engine::open(cfg, clock, rec, self.slo)?;
        if let Some(o) = &e.scheduler().cfg.cpu_offload {
            let tier = HostTier::new(o)?;
            e.attach_tier(tier);
        }
        let mut out = step_log;
        let clients = drive_clients(
            &mut e,
            &prepared,
            self.clients,
            &mut |_, r| match out.as_deref_mut() {
                Some(w) => {
                    writeln!(w, "{}", r.to_line()).map_err(|err| EngineError::Output(err.into()))
                }
                None => Ok(()),
            },
            progress,
        )?;
        let mut report = e.report();
        report.refused = served.counts;
        Ok(Outcome {
            block_size,
            num_gpu_blocks,
            efficiency,
            report,
            tier: e.tier_stats().map(|t| self.tier_report(t, block_size)),
            clients,
            timeline: e.timeline().to_vec(),
        })
    }

    /// Every block size in parallel, in the order given.
    pub fn run_all(
        &self,
        block_sizes: &[BlockSize],
        requests: &[ServingRequest],
        progress: &(dyn Fn(usize) + Sync),
    ) -> Result<Vec<Outcome>, EngineError> {
        block_sizes
            .par_iter()
            .map(|&b| {
                let mut last = 0;
                self.run(b, requests, false, None, |done, _| {
                    progress(done - last);
                    last = done;
                })
            })
            .collect()
    }
}
