//! How long a step takes: a roofline over the step's bytes and FLOPs, per GPU.
//!
//! ```text
//! memory  = (weight bytes + KV bytes read / attention efficiency(block size)) / HBM bandwidth
//! compute = (2 × parameters × tokens + 4 × layers × heads × head dim × attended pairs) / peak
//! step    = max(memory, compute, host-tier stores) + tensor-parallel all-reduces + swap copies
//!           + host-tier loads + CPU overhead
//! ```
//!
//! - Weights are read once per step (2 bytes per parameter) whatever the batch; KV is read for every
//!   scheduled request's context and new tokens; both split over `tp` GPUs (KV heads are split,
//!   and replicated when there are fewer than GPUs).
//! - Attended pairs: a chunk of `n` new tokens after `c` computed ones attends `n × c + n(n+1)/2`
//!   (query, key) pairs, so long prefills grow compute-bound.
//! - All-reduces: two per layer over `tokens × hidden × 2` bytes, ring traffic `2(tp-1)/tp` of it
//!   over NVLink, plus a fixed latency each.
//! - CPU overhead (scheduling, output processing) adds to every step in the synchronous loop; with
//!   async scheduling it overlaps the GPU and only shows when a step is shorter than it.
//! - Host-tier copies count here for the store-on-evict tier only (its loads precede the compute
//!   that reads them, its stores run beside it); the native tier's copies run on their own
//!   streams and are timed apart ([`super::host_tier::transfer`]).
//!
//! Where it is wrong: no kernel reaches the datasheet peaks it uses for weights and FLOPs (real
//! decode reads weights at ~85-90% of HBM bandwidth, prefill GEMMs at ~50-70% of peak), so absolute
//! times are optimistic; memory and compute of one step never overlap perfectly (the max is a lower
//! bound); the efficiency profile is measured for decode attention and also applied to prefill
//! chunks; activations, the LM head's vocabulary GEMM beyond its parameters, sampling, CUDA-graph
//! padding of batch sizes and MoE routing are not modelled. The model ranks block sizes by what
//! differs between them (KV read efficiency and the batches memory allows), which it captures.

use super::scheduler::Plan;
use crate::kv::model::ModelShape;
use serde::Serialize;

/// A GPU's datasheet figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Gpu {
    pub name: &'static str,
    /// HBM bandwidth, GB/s.
    pub hbm_gbps: f64,
    /// Dense BF16 tensor throughput, TFLOP/s.
    pub peak_tflops: f64,
    /// Memory as nvidia-smi reports it, MiB.
    pub memory_mib: u64,
    /// NVLink bandwidth per direction, GB/s.
    pub nvlink_gbps: f64,
}

/// H200 SXM, H100 SXM, A100 SXM 80 GB: NVIDIA's datasheets (dense BF16; NVLink 900/900/600 GB/s
/// total, half per direction).
pub const GPUS: &[Gpu] = &[
    Gpu {
        name: "h200",
        hbm_gbps: 4800.0,
        peak_tflops: 989.0,
        memory_mib: crate::kv::model::H200_MEMORY_MIB,
        nvlink_gbps: 450.0,
    },
    Gpu {
        name: "h100",
        hbm_gbps: 3350.0,
        peak_tflops: 989.0,
        memory_mib: 81_559,
        nvlink_gbps: 450.0,
    },
    Gpu {
        name: "a100",
        hbm_gbps: 2039.0,
        peak_tflops: 312.0,
        memory_mib: 81_920,
        nvlink_gbps: 300.0,
    },
];

pub fn gpu(name: &str) -> Option<Gpu> {
    let name = name.to_ascii_lowercase();
    GPUS.iter().find(|g| g.name == name).cloned()
}

/// Latency of one all-reduce between GPUs of a node (an assumption: custom all-reduce kernels
/// take a few microseconds for decode-sized messages).
pub const ALLREDUCE_LATENCY_S: f64 = 5e-6;

/// KV bytes of one token on one of `tp` GPUs.
pub fn kv_bytes_per_token_per_gpu(model: &ModelShape, tp: usize) -> u64 {
    let heads = model.kv_heads.div_ceil(tp.max(1));
    (model.layers * heads * model.head_dim * model.dtype.bytes() * 2) as u64
}

/// The pool vLLM would size on each of `tp` GPUs: `memory × utilization − weights / tp` (the
/// activation peak and CUDA graphs left out, as in [`crate::kv::model`]), in blocks of
/// `block_size` tokens; `None` when the weights do not fit.
pub fn num_gpu_blocks(
    model: &ModelShape,
    gpu: &Gpu,
    utilization: f64,
    tp: usize,
    block_size: usize,
) -> Option<usize> {
    let usable = gpu.memory_mib as f64 * (1u64 << 20) as f64 * utilization;
    let pool = usable - model.weight_bytes() / tp as f64;
    let per_block = kv_bytes_per_token_per_gpu(model, tp) as f64 * block_size as f64;
    (pool >= per_block).then(|| (pool / per_block) as usize)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepModel {
    pub model: ModelShape,
    pub gpu: Gpu,
    pub tp: usize,
    /// Attention's fraction of the stream limit at this block size.
    pub efficiency: f64,
    pub cpu_overhead_s: f64,
    /// Async scheduling: the CPU overhead overlaps the GPU's work.
    pub overlap_cpu: bool,
    /// Host link for swap preemption, GB/s (per GPU, each moving its shard).
    pub swap_gbps: Option<f64>,
    /// Host link for the KV host tier, GB/s per GPU (store-on-evict copies count in
    /// [`StepModel::step_seconds`]; the native tier times its own, [`super::host_tier::transfer`]).
    pub offload_gbps: Option<f64>,
}

impl StepModel {
    /// Seconds `plan`'s step takes.
    pub fn step_seconds(&self, plan: &Plan) -> f64 {
        let m = &self.model;
        let tp = self.tp.max(1) as f64;
        let (mut kv_tokens, mut new_tokens, mut pairs) = (0f64, 0f64, 0f64);
        for s in &plan.scheduled {
            let (n, c) = (f64::from(s.tokens), f64::from(s.context));
            kv_tokens += c + n;
            new_tokens += n;
            pairs += n * c + n * (n + 1.0) / 2.0;
        }
        let kv_per_token = kv_bytes_per_token_per_gpu(m, self.tp) as f64;
        let memory = (m.weight_bytes() / tp + kv_tokens * kv_per_token / self.efficiency)
            / (self.gpu.hbm_gbps * 1e9);
        let hidden = (m.num_heads * m.head_dim) as f64;
        let flops = 2.0 * m.params_billion * 1e9 * new_tokens / tp
            + 4.0 * (m.layers * m.num_heads * m.head_dim) as f64 * pairs / tp;
        let compute = flops / (self.gpu.peak_tflops * 1e12);
        let comm = if self.tp > 1 {
            let bytes = new_tokens * hidden * 2.0 * 2.0 * (tp - 1.0) / tp;
            2.0 * m.layers as f64 * (ALLREDUCE_LATENCY_S + bytes / (self.gpu.nvlink_gbps * 1e9))
        } else {
            0.0
        };
        let swap = self.swap_gbps.map_or(0.0, |g| {
            (plan.swap_in_tokens + plan.swap_out_tokens) as f64 * kv_per_token / (g * 1e9)
        });
        // Store-on-evict tier: blocks loaded for admissions precede the compute that reads them;
        // evicted blocks are copied out by the copy engine while the step computes.
        let (load, store) = self.offload_gbps.map_or((0.0, 0.0), |g| {
            let per_token = kv_per_token / (g * 1e9);
            (
                plan.offload_load_tokens as f64 * per_token,
                plan.offload_store_tokens as f64 * per_token,
            )
        });
        let gpu_time = memory.max(compute).max(store) + comm + swap + load;
        if self.overlap_cpu {
            gpu_time.max(self.cpu_overhead_s)
        } else {
            gpu_time + self.cpu_overhead_s
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::engine::scheduler::Scheduled;

    fn plan(entries: &[(u32, u32)]) -> Plan {
        Plan {
            scheduled: entries
                .iter()
                .map(|&(tokens, context)| Scheduled {
                    req: 0,
                    tokens,
                    context,
                    samples: true,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn decode_is_weights_plus_kv_over_bandwidth_and_prefill_is_flops_over_peak() {
        let m = crate::kv::model::preset("llama-3-8b").unwrap();
        let sm = StepModel {
            model: m.clone(),
            gpu: gpu("h200").unwrap(),
            tp: 1,
            efficiency: 0.5,
            cpu_overhead_s: 1e-3,
            overlap_cpu: false,
            swap_gbps: None,
            offload_gbps: None,
        };
        // 8 decodes over 1000-token contexts: memory-bound.
        let d = sm.step_seconds(&plan(&[(1, 999); 8]));
        let kv = 8.0 * 1000.0 * 131_072.0 / 0.5;
        let want = (8.03e9 * 2.0 + kv) / 4.8e12 + 1e-3;
        assert!((d - want).abs() < 1e-12, "{d} vs {want}");
        // One 8192-token prefill: compute-bound.
        let p = sm.step_seconds(&plan(&[(8192, 0)]));
        let pairs = 8192.0 * 8193.0 / 2.0;
        let flops = 2.0 * 8.03e9 * 8192.0 + 4.0 * 32.0 * 32.0 * 128.0 * pairs;
        assert!((p - (flops / 989e12 + 1e-3)).abs() < 1e-12);
        // Async: the CPU overhead hides behind the GPU.
        let a = StepModel {
            overlap_cpu: true,
            ..sm.clone()
        };
        assert!((a.step_seconds(&plan(&[(1, 999); 8])) - (want - 1e-3)).abs() < 1e-12);
        // Two-way tensor parallelism halves weights and KV, and pays all-reduces.
        let t = StepModel { tp: 2, ..sm };
        let comm = 64.0 * (ALLREDUCE_LATENCY_S + 8.0 * 4096.0 * 2.0 * 2.0 * 0.5 / 450e9);
        assert!(
            (t.step_seconds(&plan(&[(1, 999); 8])) - ((want - 1e-3) / 2.0 + comm + 1e-3)).abs()
                < 1e-12
        );
    }

    #[test]
    fn host_tier_loads_add_and_stores_overlap_the_step() {
        let sm = StepModel {
            model: crate::kv::model::preset("llama-3-8b").unwrap(),
            gpu: gpu("h200").unwrap(),
            tp: 1,
            efficiency: 0.5,
            cpu_overhead_s: 0.0,
            overlap_cpu: false,
            swap_gbps: None,
            offload_gbps: Some(50.0),
        };
        let base = plan(&[(1, 999); 8]);
        let t0 = sm.step_seconds(&base);
        let per_token = 131_072.0 / 50e9;
        let with = |load: u64, store: u64| {
            sm.step_seconds(&Plan {
                offload_load_tokens: load,
                offload_store_tokens: store,
                ..base.clone()
            })
        };
        assert!((with(1000, 0) - (t0 + 1000.0 * per_token)).abs() < 1e-12);
        // A small store hides under the step; a large one is the step.
        assert_eq!(with(0, 10), t0);
        assert!((with(0, 1_000_000) - 1e6 * per_token).abs() < 1e-12);
        let none = StepModel {
            offload_gbps: None,
            ..sm
        };
        assert_eq!(none.step_seconds(&base), t0);
    }

    #[test]
    fn pool_blocks_follow_memory_utilisation_and_tp() {
        let m = crate::kv::model::preset("llama-3-8b").unwrap();
        let g = gpu("H200").unwrap();
        let n = num_gpu_blocks(&m, &g, 0.92, 1, 16).unwrap();
        let want = (143_771.0 * 1_048_576.0 * 0.92 - 16.06e9) / (131_072.0 * 16.0);
        assert_eq!(n, want as usize);
        // 8 KV heads over 16 GPUs: replicated, one head each.
        assert_eq!(kv_bytes_per_token_per_gpu(&m, 16), 32 * 128 * 2 * 2);
        let big = crate::kv::model::preset("llama-3-70b").unwrap();
        assert!(num_gpu_blocks(&big, &g, 0.92, 1, 16).is_none());
        assert!(num_gpu_blocks(&big, &g, 0.92, 2, 16).is_some());
        assert!(gpu("v100").is_none());
    }
}
