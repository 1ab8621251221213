//! What a sweep reports ([`SweepReport`], also the JSON), and the sentences and figures the text
//! report derives from it.

use super::{
    end_to_end, recommend, MemoryBandwidth, MemoryConfig, ModelShape, ProbeOptions, SweepRow,
};
use crate::device::cpu::last_level_cache::LastLevelCache;
use crate::kv::BlockSize;
use crate::sim::engine::config::VLLM_BLOCK_SIZE;
use serde::Serialize;

/// Everything a sweep reports, by concern; each group is flattened, so the JSON is one flat
/// object in this order.
#[derive(Debug, Clone, Serialize)]
pub struct SweepReport {
    pub device: String,
    /// Measured on the emulated CUDA driver: its timings are the CPU's, so nothing is
    /// recommended from them.
    pub emulated: bool,
    #[serde(flatten)]
    pub verdict: Verdict,
    #[serde(flatten)]
    pub setting: SweepSetting,
    pub probe: Option<ProbeOptions>,
    pub proxy: String,
    #[serde(flatten)]
    pub e2e: EndToEndRuns,
    pub notes: Vec<String>,
    /// The last-level cache the CPU probes' buffers were sized by, and how it was found (`None`
    /// on a GPU or without bandwidth probes).
    pub cpu_last_level_cache: Option<LastLevelCache>,
    pub rows: Vec<SweepRow>,
}

/// The block size recommended, by which rule, against vLLM's.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    /// The recommendation ([`recommend::pick`]) over [`Verdict::basis`].
    pub recommended_block_size: Option<BlockSize>,
    pub recommendation: Option<recommend::Pick>,
    /// The figure the recommendation rests on: "SLO capacity" (end to end) or "throughput proxy"
    /// (end to end skipped).
    pub basis: String,
    /// The rule in words ([`recommend::rule`]), and the resolution it uses.
    pub rule: String,
    pub resolution: f64,
    pub vllm_default_block_size: BlockSize,
    /// The bandwidth measurement's typical noise across rounds, relative (at least 1%).
    pub noise_tolerance: f64,
}

/// What was swept: the model, its pool, the GPU the engine runs are timed on, the workload.
#[derive(Debug, Clone, Serialize)]
pub struct SweepSetting {
    pub model: ModelShape,
    pub pool_bytes: u64,
    /// How the pool size was chosen.
    pub pool_source: String,
    /// The GPU preset the engine runs size their step times by.
    pub engine_gpu: String,
    pub workload: String,
    pub requests: usize,
    /// The workload's mean prompt and output tokens (the text report's; not in the JSON, whose
    /// keys stay as they were).
    #[serde(skip)]
    pub mean_prompt_tokens: f64,
    #[serde(skip)]
    pub mean_output_tokens: f64,
    pub config: MemoryConfig,
}

/// The end-to-end engine runs (empty when skipped) and how they were set up.
#[derive(Debug, Clone, Default, Serialize)]
pub struct EndToEndRuns {
    pub end_to_end: Vec<end_to_end::EndToEnd>,
    /// Their SLOs, search limits and the workload's own rate.
    pub end_to_end_settings: Option<end_to_end::Setup>,
    /// What the end-to-end runs simulated, and where their efficiency came from.
    pub end_to_end_setup: Option<String>,
    /// The end-to-end runs' step-time model (measured tables or the roofline) and why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step_times: Option<crate::sim::latency::Choice>,
}

/// One memory setting's limits over the sweep: the middle value (the upper middle for an even
/// count) of the measurements taken next to each block size's gathers; `None` when none.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitMedians {
    pub memory: String,
    pub copy_gbps: Option<f64>,
    pub stream_gbps: Option<f64>,
    pub convert_stream_gbps: Option<f64>,
}

/// The limits of every memory setting the first row measured, in its order.
pub fn limit_medians(report: &SweepReport) -> Vec<LimitMedians> {
    let labels: Vec<String> = report
        .rows
        .first()
        .map(|r| r.memory.iter().map(|x| x.memory.clone()).collect())
        .unwrap_or_default();
    labels
        .into_iter()
        .enumerate()
        .map(|(i, memory)| {
            let middle = |f: &dyn Fn(&MemoryBandwidth) -> Option<f64>| {
                let mut v: Vec<f64> = report
                    .rows
                    .iter()
                    .filter_map(|r| r.memory.get(i).and_then(f))
                    .collect();
                v.sort_by(f64::total_cmp);
                (!v.is_empty()).then(|| v[v.len() / 2])
            };
            LimitMedians {
                memory,
                copy_gbps: middle(&|m| m.copy_gbps),
                stream_gbps: middle(&|m| Some(m.stream_gbps)),
                convert_stream_gbps: middle(&|m| m.convert_stream_gbps),
            }
        })
        .collect()
}

/// What changes from one KV cache dtype to the next (`sweep --kv-dtype f16,fp8_e4m3`).
#[derive(Debug, Clone, Serialize)]
pub struct KvDtypeSummary {
    /// Per dtype: the recommended block size and the concurrent requests at vLLM's 16.
    pub per_dtype: Vec<KvDtypeRow>,
    /// Whether any dtype's recommendation differs from the first's.
    pub recommendation_moves: bool,
    /// The sentence the text report ends with.
    pub line: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct KvDtypeRow {
    pub kv_dtype: crate::kv::Dtype,
    pub kv_bytes_per_token: u64,
    pub recommended_block_size: Option<BlockSize>,
    pub concurrent_requests_at_16: Option<f64>,
}

/// The summary of one sweep per KV dtype, the first the reference.
pub fn kv_dtype_summary(reports: &[SweepReport]) -> KvDtypeSummary {
    let per_dtype: Vec<KvDtypeRow> = reports
        .iter()
        .map(|r| KvDtypeRow {
            kv_dtype: r.setting.model.dtype,
            kv_bytes_per_token: r.setting.model.kv_bytes_per_token(),
            recommended_block_size: r.verdict.recommended_block_size,
            concurrent_requests_at_16: r
                .rows
                .iter()
                .find(|row| row.block_size == VLLM_BLOCK_SIZE)
                .map(|row| row.pool.concurrent_requests),
        })
        .collect();
    let first = per_dtype.first().and_then(|r| r.recommended_block_size);
    let moves = per_dtype.iter().any(|r| r.recommended_block_size != first);
    let parts: Vec<String> = per_dtype
        .iter()
        .map(|r| {
            let block = r
                .recommended_block_size
                .map_or("none".to_string(), |b| b.to_string());
            let conc = r.concurrent_requests_at_16.map_or(String::new(), |c| {
                format!(", {c:.0} concurrent requests at 16")
            });
            format!(
                "{} → {block} ({} KiB per token{conc})",
                r.kv_dtype,
                r.kv_bytes_per_token / 1024
            )
        })
        .collect();
    let verdict = if moves {
        "the recommended block size moves"
    } else {
        "the recommended block size does not move"
    };
    KvDtypeSummary {
        line: format!("per KV cache dtype: {}; {verdict}", parts.join("; ")),
        per_dtype,
        recommendation_moves: moves,
    }
}
