//! How long a step takes: the GPU's forward pass from the run's step-time model
//! ([`crate::sim::latency`]: measured kernel tables or the roofline), plus what the engine adds
//! around it, per GPU:
//!
//! ```text
//! step = max(forward compute, host-tier stores) + forward communication + swap copies
//!        + host-tier loads + CPU overhead
//! ```
//!
//! - CPU overhead (scheduling, output processing) adds to every step in the synchronous loop; with
//!   async scheduling it overlaps the GPU and only shows when a step is shorter than it.
//! - Host-tier copies count here for the store-on-evict tier only (its loads precede the compute
//!   that reads them, its stores run beside it); the native tier's copies run on their own
//!   streams and are timed apart ([`super::host_tier::transfer`]).
//! - Swaps (beyond vLLM: swap preemption) copy a preempted request's KV over the host link.

use super::scheduler::Plan;
use crate::hw::Gpu;
use crate::kv::model::ModelShape;
use crate::kv::BlockSize;
use crate::sim::latency::{BatchShape, Latency, Roofline, StepLatency};

pub use crate::sim::latency::{kv_bytes_per_token_per_gpu, ALLREDUCE_LATENCY_S};

/// The pool vLLM would size on each of `tp` GPUs: `memory × utilization − weights / tp` (the
/// activation peak and CUDA graphs left out, as in [`crate::kv::model`]), in blocks of
/// `block_size` tokens; `None` when the weights do not fit.
pub fn num_gpu_blocks(
    model: &ModelShape,
    gpu: &Gpu,
    utilization: f64,
    tp: usize,
    block_size: BlockSize,
) -> Option<usize> {
    let usable = gpu.memory_mib as f64 * (1u64 << 20) as f64 * utilization;
    let pool = usable - model.weight_bytes() / tp as f64;
    let per_block = kv_bytes_per_token_per_gpu(model, tp) as f64 * f64::from(block_size.tokens());
    (pool >= per_block).then(|| (pool / per_block) as usize)
}

#[derive(Debug, Clone, PartialEq)]
pub struct StepModel {
    pub model: ModelShape,
    pub tp: usize,
    /// The GPU's forward pass.
    pub latency: Latency,
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
    /// The roofline at attention efficiency `efficiency`, with no CPU overhead and no host links
    /// (fields to set after).
    pub fn roofline(model: ModelShape, gpu: Gpu, tp: usize, efficiency: f64) -> StepModel {
        StepModel {
            latency: Latency::Roofline(Box::new(Roofline {
                model: model.clone(),
                gpu,
                tp,
                efficiency,
            })),
            model,
            tp,
            cpu_overhead_s: 0.0,
            overlap_cpu: false,
            swap_gbps: None,
            offload_gbps: None,
        }
    }

    /// Seconds `plan`'s step takes.
    pub fn step_seconds(&self, plan: &Plan) -> f64 {
        let batch = BatchShape::of(plan.scheduled.iter().map(|s| (s.tokens, s.context)));
        let (compute, comm) = self.latency.forward(&batch);
        let kv_per_token = kv_bytes_per_token_per_gpu(&self.model, self.tp) as f64;
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
        let gpu_time = compute.max(store) + comm + swap + load;
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

    fn roof(efficiency: f64) -> StepModel {
        let m = crate::kv::model::preset("llama-3-8b").unwrap();
        StepModel::roofline(m, crate::hw::H200, 1, efficiency)
    }

    #[test]
    fn the_cpu_overhead_adds_in_the_synchronous_loop_and_hides_under_async() {
        let base = roof(0.5);
        let gpu = base.step_seconds(&plan(&[(1, 999); 8]));
        let sync = StepModel {
            cpu_overhead_s: 1e-3,
            ..base.clone()
        };
        assert!((sync.step_seconds(&plan(&[(1, 999); 8])) - (gpu + 1e-3)).abs() < 1e-15);
        let overlapped = StepModel {
            overlap_cpu: true,
            ..sync.clone()
        };
        assert_eq!(overlapped.step_seconds(&plan(&[(1, 999); 8])), gpu);
        // A step shorter than the CPU's share waits for it.
        let slow_cpu = StepModel {
            cpu_overhead_s: 1.0,
            ..overlapped
        };
        assert_eq!(slow_cpu.step_seconds(&plan(&[(1, 999); 8])), 1.0);
    }

    #[test]
    fn host_tier_loads_add_and_stores_overlap_the_step() {
        let sm = StepModel {
            offload_gbps: Some(50.0),
            ..roof(0.5)
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
        let g = crate::hw::gpu("H200").unwrap();
        let n = num_gpu_blocks(&m, &g, 0.92, 1, BlockSize::of(16)).unwrap();
        let want = (143_771.0 * 1_048_576.0 * 0.92 - 8_030_261_248.0 * 2.0) / (131_072.0 * 16.0);
        assert_eq!(n, want as usize);
        // 8 KV heads over 16 GPUs: replicated, one head each.
        assert_eq!(kv_bytes_per_token_per_gpu(&m, 16), 32 * 128 * 2 * 2);
        let big = crate::kv::model::preset("llama-3-70b").unwrap();
        assert!(num_gpu_blocks(&big, &g, 0.92, 1, BlockSize::of(16)).is_none());
        assert!(num_gpu_blocks(&big, &g, 0.92, 2, BlockSize::of(16)).is_some());
    }
}
