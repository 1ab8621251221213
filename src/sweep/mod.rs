//! The block-size sweep: for every block size 1, 2, 4, ..., 256, what paging costs in memory
//! (fragmentation, exact, from a trace) and in bandwidth (measured on the device in use), what the
//! two give end to end (the trace through a simulated vLLM engine whose step times use the measured
//! efficiency), and the block size recommended next to vLLM's default of 16.
//!
//! - [`model`] (re-exported from [`crate::kv::model`]): model shapes and the KV pool left by the
//!   weights;
//! - [`fragmentation`], [`replay`], [`prefix`]: the memory side;
//! - [`bandwidth`] (the [`BandwidthProbe`] trait), [`cpu_probe`], [`gpu_probe`],
//!   [`attention_probe`], [`measure`] (every probe at every block size): the bandwidth side (host buffers of a chosen page size in
//!   [`crate::device::cpu::pages`]);
//! - [`end_to_end`]: the engine simulation, at the trace's rate and at the capacity within SLOs
//!   ([`crate::sim::goodput`]) that the recommendation ([`recommend`]: one rule) rests on; [`proxy`]: the throughput
//!   proxy (a supporting column); [`text`]: the verdict, tables and key; [`output`]: CSV, JSON,
//!   plots and `index.html`;
//! - [`config`]: what a sweep is asked for ([`SweepConfig`], plain values) and its defaults;
//!   [`run`]: the whole sweep ([`run_sweep`]); [`summary`]: what it reports ([`SweepReport`]).

pub mod attention_probe;
pub mod config;
/// Model shapes live in [`crate::kv::model`] (the engine simulator shares them).
pub use crate::kv::model;
pub mod bandwidth;
pub mod cpu_probe;
pub mod end_to_end;
pub mod fragmentation;
pub mod gpu_probe;
pub mod html;
pub mod measure;
pub mod output;
pub mod plot_files;
pub mod prefix;
pub mod probe_error;
pub mod probe_memory;
pub mod probes;
pub mod proxy;
pub mod recommend;
pub mod replay;
pub mod run;
pub mod summary;
pub mod text;

pub use crate::sim::goodput::{SearchLimits, SloTargets};
pub use attention_probe::AttentionBatch;
pub use bandwidth::{BandwidthProbe, GatherRates, LimitSet, Limits, ProbeError, ProbeOptions};
pub use config::{ModelChoice, SweepConfig, WorkloadChoice, DEFAULT_TRACE};
pub use measure::{measure_bandwidth, MemoryBandwidth};
pub use model::ModelShape;
pub use probes::probes_for;
pub use replay::DurationModel;
pub use run::{run_plan, run_sweep, NoProgress, Phase, Progress, SweepPlan};
pub use summary::{
    kv_dtype_summary, limit_medians, EndToEndRuns, KvDtypeSummary, LimitMedians, SweepReport,
    SweepSetting, Verdict,
};

use crate::device::DeviceError;
use crate::kv::{BlockSize, KvSpec, SpecError, MAX_BLOCK_SIZE};
use crate::sim::engine::EngineError;
use crate::workload::azure::{Request, TraceError};
use serde::Serialize;
use thiserror::Error;

/// Every block size the sweep covers: 1, 2, 4, ..., 256.
pub fn block_sizes() -> Vec<BlockSize> {
    (0..=MAX_BLOCK_SIZE.trailing_zeros())
        .map(|i| BlockSize::of(1 << i))
        .collect()
}

#[derive(Debug, Error)]
pub enum SweepError {
    #[error("the workload holds no tokens (every request has 0 prompt and 0 output tokens)")]
    NoTokens,
    #[error("the KV pool of {pool_bytes} bytes holds less than one block of {block_size} tokens")]
    PoolTooSmall {
        pool_bytes: u64,
        block_size: BlockSize,
    },
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Probe(#[from] ProbeError),
    /// A setting out of range (the message names its CLI flag).
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(transparent)]
    Device(#[from] DeviceError),
    #[error(transparent)]
    Engine(#[from] EngineError),
}

/// The memory side's inputs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MemoryConfig {
    pub model: ModelShape,
    pub pool_bytes: u64,
    pub durations: DurationModel,
    /// Turns per conversation of the multi-turn workload (prefix sharing).
    pub turns: usize,
    /// System-prompt tokens every request of the multi-turn workload shares.
    pub system_prompt_tokens: u64,
}

/// One block size's figures, by concern; each group is flattened, so the JSON is one flat object
/// in this order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepRow {
    pub block_size: BlockSize,
    pub pool_blocks: u64,
    #[serde(flatten)]
    pub pool: PoolUse,
    /// The first probe's figures (the table's main columns), repeated from `memory[0]`.
    #[serde(flatten)]
    pub first_probe: FirstProbe,
    /// Every probe's figures: one per memory setting (CPU: `thp`, `4k`).
    pub memory: Vec<MemoryBandwidth>,
    /// The throughput proxy, normalised to the best row (see [`proxy`]).
    pub proxy: f64,
    #[serde(flatten)]
    pub at_trace_rate: AtTraceRate,
    #[serde(flatten)]
    pub capacity: SloCapacityFigures,
}

/// The pool on the trace: fragmentation, the replay's concurrency, prefix sharing, block tables.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolUse {
    pub internal_waste_pct: f64,
    pub concurrent_requests: f64,
    pub tw_concurrent_requests: Option<f64>,
    pub peak_blocks_in_use: Option<u64>,
    pub peak_headroom: Option<f64>,
    pub prefix_share_lost_pct: Option<f64>,
    pub block_table_bytes_per_request: f64,
    pub block_table_bytes_pool: u64,
    pub block_table_bytes_padded: u64,
}

/// The first memory setting's bandwidth figures ([`MemoryBandwidth`]); empty until measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct FirstProbe {
    pub gather_gbps: Option<f64>,
    pub gather_copy_gbps: Option<f64>,
    pub copy_gbps: Option<f64>,
    pub stream_gbps: Option<f64>,
    pub convert_stream_gbps: Option<f64>,
    pub gather_frac_of_stream: Option<f64>,
    pub gather_copy_frac_of_copy: Option<f64>,
    pub attention_gbps: Option<f64>,
    pub attention_frac_of_stream: Option<f64>,
    pub efficiency_noise: Option<f64>,
}

impl From<&MemoryBandwidth> for FirstProbe {
    fn from(m: &MemoryBandwidth) -> Self {
        FirstProbe {
            gather_gbps: m.gather_gbps,
            gather_copy_gbps: m.gather_copy_gbps,
            copy_gbps: m.copy_gbps,
            stream_gbps: Some(m.stream_gbps),
            convert_stream_gbps: m.convert_stream_gbps,
            gather_frac_of_stream: m.gather_frac_of_stream,
            gather_copy_frac_of_copy: m.gather_copy_frac_of_copy,
            attention_gbps: m.attention_gbps,
            attention_frac_of_stream: m.attention_frac_of_stream,
            efficiency_noise: m.efficiency_noise,
        }
    }
}

/// End to end at the trace's own rate ([`end_to_end`], nominal efficiency): output tokens per
/// second, p99 time to first token and per output token (seconds), preemptions, peak KV use
/// (fraction of the pool), p99 of Mooncake's TBT (seconds), and the share of all requests
/// within the SLOs by their rule.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct AtTraceRate {
    pub e2e_output_tokens_per_s: Option<f64>,
    pub e2e_p99_ttft_s: Option<f64>,
    pub e2e_p99_tpot_s: Option<f64>,
    pub e2e_preemptions: Option<u64>,
    pub e2e_kv_peak: Option<f64>,
    pub e2e_p99_tbt_s: Option<f64>,
    pub e2e_slo_attainment: Option<f64>,
}

/// The SLO capacity ([`crate::sim::goodput`], nominal efficiency): requests per second and the
/// trace's rate scale; the band's low and high ends (requests per second); at the capacity:
/// goodput (requests per second within the SLOs), peak KV use (fraction of the pool),
/// preemptions.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SloCapacityFigures {
    pub slo_capacity_rps: Option<f64>,
    pub slo_capacity_rate_scale: Option<f64>,
    pub slo_capacity_low_rps: Option<f64>,
    pub slo_capacity_high_rps: Option<f64>,
    pub goodput_at_capacity_rps: Option<f64>,
    pub kv_peak_at_capacity: Option<f64>,
    pub preemptions_at_capacity: Option<u64>,
}

impl SweepRow {
    /// The efficiency the throughput proxy uses (see [`MemoryBandwidth::efficiency`]); `None`
    /// before bandwidth is measured.
    pub fn efficiency(&self) -> Option<f64> {
        self.first_probe
            .attention_frac_of_stream
            .or(self.first_probe.gather_frac_of_stream)
    }
}

/// The memory side of every block size: fragmentation, replay and prefix sharing. Bandwidth
/// fields stay empty until [`measure_bandwidth`].
pub fn memory_rows(
    requests: &[Request],
    config: &MemoryConfig,
) -> Result<Vec<SweepRow>, SweepError> {
    let prefixes =
        prefix::shared_prefixes(requests, config.turns.max(1), config.system_prompt_tokens);
    block_sizes()
        .into_iter()
        .map(|block_size| {
            let bs = block_size.get();
            KvSpec::new(
                config.model.kv_heads,
                config.model.head_dim,
                bs,
                config.model.dtype,
            )?;
            let pool_blocks = model::pool_blocks(&config.model, config.pool_bytes, block_size);
            if pool_blocks == 0 {
                return Err(SweepError::PoolTooSmall {
                    pool_bytes: config.pool_bytes,
                    block_size,
                });
            }
            let f = fragmentation::fragmentation(requests, block_size, pool_blocks)
                .ok_or(SweepError::NoTokens)?;
            let r = replay::replay(requests, block_size, pool_blocks, &config.durations);
            Ok(SweepRow {
                block_size,
                pool_blocks,
                pool: PoolUse {
                    internal_waste_pct: f.internal_waste_pct,
                    concurrent_requests: f.concurrent_requests,
                    tw_concurrent_requests: r.map(|r| r.tw_concurrent_requests),
                    peak_blocks_in_use: r.map(|r| r.peak_blocks_in_use),
                    peak_headroom: r.map(|r| r.peak_headroom),
                    prefix_share_lost_pct: prefix::prefix_share_lost_pct(&prefixes, block_size),
                    block_table_bytes_per_request: f.block_table_bytes_per_request,
                    block_table_bytes_pool: f.block_table_bytes_pool,
                    block_table_bytes_padded: f.block_table_bytes_padded,
                },
                first_probe: FirstProbe::default(),
                memory: Vec::new(),
                proxy: 0.0,
                at_trace_rate: AtTraceRate::default(),
                capacity: SloCapacityFigures::default(),
            })
        })
        .collect()
}

/// Fills each row's proxy and returns the run's noise band ([`proxy::tie_tolerance`]).
pub fn apply_proxy(rows: &mut [SweepRow]) -> f64 {
    let inputs: Vec<proxy::ProxyInput> = rows
        .iter()
        .map(|r| proxy::ProxyInput {
            block_size: r.block_size,
            concurrent_requests: r.pool.concurrent_requests,
            efficiency: r.efficiency(),
        })
        .collect();
    for (row, p) in rows.iter_mut().zip(proxy::proxy(&inputs)) {
        row.proxy = p;
    }
    let noise: Vec<Option<f64>> = rows
        .iter()
        .map(|r| r.first_probe.efficiency_noise)
        .collect();
    proxy::tie_tolerance(&noise)
}

/// The proxy with its band (`proxy × (1 ± noise)`, each row's own noise, at least `noise`): the
/// recommendation's figure when end to end is skipped.
pub fn proxy_banded(rows: &[SweepRow], noise: f64) -> Vec<recommend::Banded> {
    rows.iter()
        .map(|r| {
            let band = noise.max(r.first_probe.efficiency_noise.unwrap_or(0.0));
            recommend::Banded {
                block_size: r.block_size,
                nominal: r.proxy,
                low: r.proxy * (1.0 - band),
                high: r.proxy * (1.0 + band),
            }
        })
        .collect()
}

/// Copies each block size's end-to-end figures into its row (`base_rps`: rate scale 1 in
/// requests per second).
pub fn apply_end_to_end(rows: &mut [SweepRow], e2e: &[end_to_end::EndToEnd], base_rps: f64) {
    for row in rows {
        if let Some(e) = e2e.iter().find(|e| e.block_size == row.block_size) {
            row.at_trace_rate.e2e_output_tokens_per_s = Some(e.natural.output_tokens_per_s);
            row.at_trace_rate.e2e_p99_ttft_s = Some(e.natural.p99_ttft_s);
            row.at_trace_rate.e2e_p99_tpot_s = Some(e.natural.p99_tpot_s);
            row.at_trace_rate.e2e_preemptions = Some(e.natural.preemptions);
            row.at_trace_rate.e2e_kv_peak = Some(e.natural.kv_peak);
            row.at_trace_rate.e2e_p99_tbt_s = Some(e.natural.p99_tbt_s);
            row.at_trace_rate.e2e_slo_attainment = Some(e.natural.attainment);
            row.capacity.slo_capacity_rps = Some(e.capacity.rate_scale * base_rps);
            row.capacity.slo_capacity_rate_scale = Some(e.capacity.rate_scale);
            let band = e.banded();
            row.capacity.slo_capacity_low_rps = Some(band.low * base_rps);
            row.capacity.slo_capacity_high_rps = Some(band.high * base_rps);
            let at = e.capacity.at.as_ref();
            row.capacity.goodput_at_capacity_rps = at.map(|a| a.goodput_rps);
            row.capacity.kv_peak_at_capacity = at.map(|a| a.kv_peak);
            row.capacity.preemptions_at_capacity = at.map(|a| a.preemptions);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_every_power_of_two_to_256() {
        let tokens: Vec<usize> = block_sizes().into_iter().map(BlockSize::get).collect();
        assert_eq!(tokens, vec![1, 2, 4, 8, 16, 32, 64, 128, 256]);
    }
}
