//! Step times from a roofline over the step's bytes and FLOPs, per GPU, with datasheet peaks
//! ([`crate::hw`]): the fallback where no measured table covers a run, and the figure printed
//! beside the measured one.
//!
//! ```text
//! memory  = (weight bytes + KV bytes read / attention efficiency(block size)) / HBM bandwidth
//! compute = (2 × parameters × tokens + 4 × layers × heads × head dim × attended pairs) / peak
//! step    = max(memory, compute) + tensor-parallel all-reduces
//! ```
//!
//! - Weights are read once per step (2 bytes per parameter, 1 for fp8 linear layers) whatever
//!   the batch; KV is read for every scheduled request's context and new tokens; both split over
//!   `tp` GPUs (KV heads are split, and replicated when there are fewer than GPUs).
//! - Under fp8 weights the linear layers' FLOPs run at the FP8 peak (on GPUs that have one; an
//!   A100 runs them at its BF16 peak, as vLLM's weight-only fp8 kernels do).
//! - Attended pairs: a chunk of `n` new tokens after `c` computed ones attends `n × c + n(n+1)/2`
//!   (query, key) pairs, so long prefills grow compute-bound.
//! - All-reduces: two per layer over `tokens × hidden × 2` bytes, ring traffic `2(tp-1)/tp` of it
//!   over NVLink, plus a fixed latency each.
//!
//! Where it is wrong: no kernel reaches the datasheet peaks (real decode reads weights at ~85-90%
//! of HBM bandwidth, prefill GEMMs at 72-87% of peak: AIConfigurator's tables say so), so absolute
//! times are optimistic by 7-31% (docs/step-times.md); memory and compute of one step never
//! overlap perfectly (the max is a lower bound); the efficiency profile is measured for decode
//! attention and also applied to prefill chunks; norms, activations, sampling and CUDA-graph
//! padding are not modelled. It ranks block sizes by what differs between them (KV read
//! efficiency and the batches memory allows), which it captures.

use super::batch::BatchShape;
use crate::hw::Gpu;
use crate::kv::model::{ModelShape, Weights};

/// Latency of one all-reduce between GPUs of a node (an assumption: custom all-reduce kernels
/// take a few microseconds for decode-sized messages).
pub const ALLREDUCE_LATENCY_S: f64 = 5e-6;

/// KV bytes of one token on one of `tp` GPUs.
pub fn kv_bytes_per_token_per_gpu(model: &ModelShape, tp: usize) -> u64 {
    (model.layers * model.kv_heads_per_gpu(tp) * model.head_dim * model.dtype.bytes() * 2) as u64
}

#[derive(Debug, Clone, PartialEq)]
pub struct Roofline {
    pub model: ModelShape,
    pub gpu: Gpu,
    pub tp: usize,
    /// Attention's fraction of the stream limit at this block size.
    pub efficiency: f64,
}

impl Roofline {
    /// The step's GPU time, seconds: (compute or memory, whichever binds; communication).
    pub fn forward(&self, b: &BatchShape) -> (f64, f64) {
        let m = &self.model;
        let tp = self.tp.max(1) as f64;
        let new_tokens = b.tokens as f64;
        let kv_per_token = kv_bytes_per_token_per_gpu(m, self.tp) as f64;
        let memory = (m.weight_bytes() / tp + b.kv_tokens * kv_per_token / self.efficiency)
            / (self.gpu.hbm_gbps * 1e9);
        let bf16 = self.gpu.peak_tflops * 1e12;
        let attention = 4.0 * (m.layers * m.num_heads * m.head_dim) as f64 * b.pairs / tp;
        let params = m.params_billion * 1e9;
        let compute = match (m.weights, self.gpu.fp8_tflops) {
            (Weights::Fp8, Some(fp8)) => {
                let linear = (params - m.embedding_params()).max(0.0);
                let gemm = 2.0 * new_tokens / tp;
                gemm * linear / (fp8 * 1e12) + (gemm * (params - linear) + attention) / bf16
            }
            _ => (2.0 * params * new_tokens / tp + attention) / bf16,
        };
        let comm = if self.tp > 1 {
            let bytes = new_tokens * m.hidden_size as f64 * 2.0 * 2.0 * (tp - 1.0) / tp;
            2.0 * m.layers as f64 * (ALLREDUCE_LATENCY_S + bytes / (self.gpu.nvlink_gbps * 1e9))
        } else {
            0.0
        };
        (memory.max(compute), comm)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::model::preset;

    fn roof(tp: usize) -> Roofline {
        Roofline {
            model: preset("llama-3-8b").unwrap(),
            gpu: crate::hw::H200,
            tp,
            efficiency: 0.5,
        }
    }

    #[test]
    fn decode_is_weights_plus_kv_over_bandwidth_and_prefill_is_flops_over_peak() {
        let params = 8_030_261_248.0;
        // 8 decodes over 1000-token contexts: memory-bound.
        let (d, c) = roof(1).forward(&BatchShape::of([(1, 999); 8]));
        let kv = 8.0 * 1000.0 * 131_072.0 / 0.5;
        assert!((d - (params * 2.0 + kv) / 4.8e12).abs() < 1e-12, "{d}");
        assert_eq!(c, 0.0);
        // One 8192-token prefill: compute-bound.
        let (p, _) = roof(1).forward(&BatchShape::of([(8192, 0)]));
        let pairs = 8192.0 * 8193.0 / 2.0;
        let flops = 2.0 * params * 8192.0 + 4.0 * 32.0 * 32.0 * 128.0 * pairs;
        assert!((p - flops / 989e12).abs() < 1e-12);
        // Two-way tensor parallelism halves weights and KV, and pays all-reduces.
        let (t, comm) = roof(2).forward(&BatchShape::of([(1, 999); 8]));
        assert!((t - d / 2.0).abs() < 1e-12);
        let want = 64.0 * (ALLREDUCE_LATENCY_S + 8.0 * 4096.0 * 2.0 * 2.0 * 0.5 / 450e9);
        assert!((comm - want).abs() < 1e-15);
    }

    #[test]
    fn fp8_weights_read_half_the_linear_bytes_and_compute_at_the_fp8_peak() {
        let mut r = roof(1);
        r.model.weights = Weights::Fp8;
        let (d, _) = r.forward(&BatchShape::of([(1, 999)]));
        let emb = 2.0 * 128_256.0 * 4096.0;
        let weights = (8_030_261_248.0 - emb) + emb * 2.0;
        assert!((d - (weights + 1000.0 * 131_072.0 / 0.5) / 4.8e12).abs() < 1e-12);
        let (p, _) = r.forward(&BatchShape::of([(8192, 0)]));
        let (p16, _) = roof(1).forward(&BatchShape::of([(8192, 0)]));
        let saved = 2.0 * 8192.0 * (8_030_261_248.0 - emb) * (1.0 / 989e12 - 1.0 / 1979e12);
        assert!((p16 - p - saved).abs() < 1e-12);
        // An A100 has no FP8 tensor cores: the same FLOPs at its BF16 peak.
        r.gpu = crate::hw::A100;
        let a = r.forward(&BatchShape::of([(8192, 0)])).0;
        let a16 = Roofline {
            gpu: crate::hw::A100,
            ..roof(1)
        }
        .forward(&BatchShape::of([(8192, 0)]))
        .0;
        assert_eq!(a, a16);
    }
}
