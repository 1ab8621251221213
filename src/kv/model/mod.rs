//! Model shapes (what sizes a token's KV, the weights, and every GEMM of a layer) and the KV pool
//! a GPU leaves after the weights.
//!
//! A model is what its Hugging Face `config.json` says ([`config_json`]): the presets are such
//! files, shipped in `data/models/` ([`presets`]); `--model` also takes a user's own (a file or a
//! folder holding one). Parameters are counted from the shapes (embeddings, attention, MLP,
//! norms, biases), which gives each preset's model-card figure to three digits.
//!
//! Default pool, as vLLM sizes it: `gpus × GPU memory × gpu_memory_utilization − weights`, with the
//! GPU's memory as nvidia-smi reports it ([`crate::hw`]) and vLLM 0.33's default utilization 0.92.
//! Weights count 2 bytes per parameter (bf16/f16 checkpoints), or 1 for the linear layers under
//! fp8 weights (vLLM's `--quantization fp8`: embeddings and the LM head stay 16-bit). vLLM also
//! subtracts the activation peak of a profiling run and CUDA-graph memory; those depend on the
//! engine's batch settings and are left out, so the default pool is an upper bound of what vLLM
//! would allocate (by a few GiB).

pub mod config_json;
pub mod presets;

pub use config_json::{load, ModelError};
pub use presets::{preset, preset_names};

use super::BlockSize;
use super::Dtype;
use serde::Serialize;

/// H200 (141 GB HBM3e) memory as `nvidia-smi` reports it, in MiB.
pub const H200_MEMORY_MIB: u64 = crate::hw::H200.memory_mib;
/// vLLM's default `gpu_memory_utilization` (`CacheConfig.gpu_memory_utilization`, 0.33).
pub const VLLM_GPU_MEMORY_UTILIZATION: f64 = 0.92;

/// How the weights are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Weights {
    Bf16,
    F16,
    /// vLLM's `--quantization fp8`: the linear layers' weights in fp8 (per-tensor scales), their
    /// GEMMs on FP8 tensor cores; embeddings and the LM head in 16 bits.
    Fp8,
}

impl Weights {
    /// Bytes per parameter of a linear layer.
    pub const fn bytes(self) -> usize {
        match self {
            Weights::Bf16 | Weights::F16 => 2,
            Weights::Fp8 => 1,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            Weights::Bf16 => "bf16",
            Weights::F16 => "f16",
            Weights::Fp8 => "fp8",
        }
    }
}

impl std::fmt::Display for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelShape {
    pub name: String,
    pub layers: usize,
    /// Query heads (attention's shape; KV bytes depend only on the KV heads).
    pub num_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// How the KV cache stores K and V.
    pub dtype: Dtype,
    /// Parameters in billions (counted from the shapes; the sweep may override it).
    pub params_billion: f64,
    /// The context length vLLM takes as `max_model_len` by default (`max_position_embeddings`).
    pub context_len: usize,
    /// `architectures[0]` of its config.json.
    pub architecture: String,
    pub hidden_size: usize,
    /// The MLP's inner width (gate and up each project to it).
    pub intermediate_size: usize,
    pub vocab_size: usize,
    /// One matrix serves as the embedding and the LM head.
    pub tie_word_embeddings: bool,
    /// Biases on q, k and v (Qwen2).
    pub qkv_bias: bool,
    /// RMSNorm on q and k per head before rotary (Qwen3).
    pub qk_norm: bool,
    pub weights: Weights,
}

/// The GEMMs of one decoder layer on one of `tp` GPUs, and the LM head, each as (n, k): a GEMM of
/// `m` tokens multiplies an m × k activation by a k × n weight. vLLM's Llama-style layer: q, k and
/// v in one column-parallel GEMM (`QKVParallelLinear`), the output projection row-parallel, gate
/// and up in one column-parallel GEMM (`MergedColumnParallelLinear`), down row-parallel; the LM
/// head's vocabulary split over the GPUs (`ParallelLMHead`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerGemms {
    pub qkv: (usize, usize),
    pub o_proj: (usize, usize),
    pub gate_up: (usize, usize),
    pub down: (usize, usize),
    pub lm_head: (usize, usize),
}

impl ModelShape {
    /// K and V bytes of one token over all layers.
    pub fn kv_bytes_per_token(&self) -> u64 {
        (self.layers * self.kv_heads * self.head_dim * self.dtype.bytes() * 2) as u64
    }

    /// KV heads on each of `tp` GPUs (replicated when there are fewer than GPUs).
    pub fn kv_heads_per_gpu(&self, tp: usize) -> usize {
        self.kv_heads.div_ceil(tp.max(1))
    }

    /// Embedding and LM head parameters (one matrix when tied).
    pub fn embedding_params(&self) -> f64 {
        let one = (self.vocab_size * self.hidden_size) as f64;
        if self.tie_word_embeddings {
            one
        } else {
            2.0 * one
        }
    }

    /// Parameters counted from the shapes: per layer q, k, v (with Qwen2's biases), o, gate, up,
    /// down, two RMSNorms (and Qwen3's q/k norms); the embeddings and the final norm.
    pub fn counted_params(&self) -> f64 {
        let (h, d) = (self.hidden_size as f64, self.head_dim as f64);
        let (q, kv) = (self.num_heads as f64 * d, self.kv_heads as f64 * d);
        let mut layer = h * (q + 2.0 * kv) + q * h + 3.0 * h * self.intermediate_size as f64;
        layer += 2.0 * h;
        if self.qkv_bias {
            layer += q + 2.0 * kv;
        }
        if self.qk_norm {
            layer += 2.0 * d;
        }
        self.layers as f64 * layer + self.embedding_params() + h
    }

    /// Bytes of the weights: 2 per parameter, 1 for the linear layers' under fp8.
    pub fn weight_bytes(&self) -> f64 {
        let params = self.params_billion * 1e9;
        let linear = (params - self.embedding_params()).max(0.0);
        params * 2.0 - linear * (2 - self.weights.bytes()) as f64
    }

    /// The GEMM shapes of one layer on one of `tp` GPUs.
    pub fn layer_gemms(&self, tp: usize) -> LayerGemms {
        let tp = tp.max(1);
        let (h, d) = (self.hidden_size, self.head_dim);
        let q = self.num_heads / tp * d;
        let kv = self.kv_heads_per_gpu(tp) * d;
        let inter = self.intermediate_size / tp;
        LayerGemms {
            qkv: (q + 2 * kv, h),
            o_proj: (h, q),
            gate_up: (2 * inter, h),
            down: (h, inter),
            lm_head: (self.vocab_size / tp, h),
        }
    }

    /// vLLM's checks of a tensor-parallel size: the attention heads split evenly
    /// (`ModelConfig.verify_with_parallel_config`), and the KV heads split evenly or, with more
    /// GPUs than KV heads, are replicated evenly (`QKVParallelLinear`).
    pub fn check_tp(&self, tp: usize) -> Result<(), TensorParallelError> {
        if tp == 0 || !self.num_heads.is_multiple_of(tp) {
            return Err(TensorParallelError::Heads {
                tp,
                heads: self.num_heads,
                model: self.name.clone(),
            });
        }
        let kv_ok = if tp >= self.kv_heads {
            tp.is_multiple_of(self.kv_heads)
        } else {
            self.kv_heads.is_multiple_of(tp)
        };
        if !kv_ok {
            return Err(TensorParallelError::KvHeads {
                tp,
                kv_heads: self.kv_heads,
                model: self.name.clone(),
            });
        }
        Ok(())
    }
}

/// Why a model's heads do not split over a tensor-parallel size, as vLLM refuses it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TensorParallelError {
    #[error(
        "--tp {tp}: vLLM needs the {heads} attention heads of {model} divisible by the \
         tensor-parallel size"
    )]
    Heads {
        tp: usize,
        heads: usize,
        model: String,
    },
    #[error(
        "--tp {tp}: vLLM needs the {kv_heads} KV heads of {model} and the tensor-parallel size to \
         divide one another"
    )]
    KvHeads {
        tp: usize,
        kv_heads: usize,
        model: String,
    },
}

/// The KV pool vLLM would leave: `gpus × memory_mib × utilization − weights`, in bytes; `None`
/// when the weights do not fit.
pub fn default_pool_bytes(
    model: &ModelShape,
    memory_mib: u64,
    utilization: f64,
    gpus: usize,
) -> Option<u64> {
    let usable = gpus as f64 * memory_mib as f64 * (1u64 << 20) as f64 * utilization;
    let pool = usable - model.weight_bytes();
    (pool >= 1.0).then_some(pool as u64)
}

/// Blocks of `block_size` tokens (all layers) that fit in `pool_bytes`.
pub fn pool_blocks(model: &ModelShape, pool_bytes: u64, block_size: BlockSize) -> u64 {
    pool_bytes / (model.kv_bytes_per_token() * u64::from(block_size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_8b_on_an_h200() {
        let m = preset("Llama-3-8B").unwrap();
        assert_eq!(m.kv_bytes_per_token(), 32 * 8 * 128 * 2 * 2);
        let pool = default_pool_bytes(&m, H200_MEMORY_MIB, 0.9, 1).unwrap();
        // 143771 MiB × 0.9 = 129393.9 MiB; minus 8,030,261,248 parameters × 2 bytes.
        let want = 143_771.0 * 1_048_576.0 * 0.9 - 8_030_261_248.0 * 2.0;
        assert!((pool as f64 - want).abs() < 2.0);
        assert_eq!(
            pool_blocks(&m, pool, BlockSize::of(16)),
            pool / (131_072 * 16)
        );
        assert_eq!(pool_blocks(&m, 131_072 * 16 * 3 - 1, BlockSize::of(16)), 2);
    }

    #[test]
    fn fp8_weights_halve_the_linear_layers_only() {
        let m = preset("llama-3.1-8b").unwrap();
        let f = ModelShape {
            weights: Weights::Fp8,
            ..m.clone()
        };
        // 2 × 128256 × 4096 embedding and LM head parameters stay at 2 bytes.
        let emb = 2.0 * 128_256.0 * 4096.0;
        let want = (8_030_261_248.0 - emb) + emb * 2.0;
        assert!(
            (f.weight_bytes() - want).abs() < 1.0,
            "{}",
            f.weight_bytes()
        );
        assert_eq!(m.weight_bytes(), 8_030_261_248.0 * 2.0);
    }

    #[test]
    fn gemm_shapes_split_over_tensor_parallel_gpus() {
        let m = preset("llama-3.1-8b").unwrap();
        let g = m.layer_gemms(2);
        // 16 query heads and 4 KV heads of 128 per GPU; gate and up fused.
        assert_eq!(g.qkv, (3072, 4096));
        assert_eq!(g.o_proj, (4096, 2048));
        assert_eq!(g.gate_up, (14336, 4096));
        assert_eq!(g.down, (4096, 7168));
        assert_eq!(g.lm_head, (64128, 4096));
        // 8 KV heads over 16 GPUs: one each, replicated.
        assert_eq!(m.layer_gemms(16).qkv, (2 * 128 + 2 * 128, 4096));
    }

    #[test]
    fn a_70b_model_does_not_fit_one_h200() {
        let m = preset("llama-3-70b").unwrap();
        assert_eq!(default_pool_bytes(&m, H200_MEMORY_MIB, 0.9, 1), None);
        assert!(default_pool_bytes(&m, H200_MEMORY_MIB, 0.9, 2).is_some());
        assert!(preset("gpt-9").is_none());
        let l = preset("llama-3-8b").unwrap();
        assert_eq!(l.context_len, 8_192);
        assert_eq!(preset("llama-3.1-8b").unwrap().context_len, 131_072);
        l.check_tp(1).unwrap();
        l.check_tp(8).unwrap();
        l.check_tp(16).unwrap(); // 8 KV heads replicated twice over 16 GPUs
        assert!(l
            .check_tp(3)
            .unwrap_err()
            .to_string()
            .contains("32 attention heads"));
        let q = preset("qwen2.5-7b").unwrap(); // 28 heads, 4 KV heads
        q.check_tp(2).unwrap();
        assert!(matches!(
            q.check_tp(7),
            Err(TensorParallelError::KvHeads { tp: 7, .. })
        ));
        // GQA: every preset's query heads are a whole multiple of its KV heads.
        for name in preset_names() {
            let m = preset(name).unwrap();
            assert_eq!(m.num_heads % m.kv_heads, 0, "{name}");
        }
        assert_eq!(preset("llama-3-8b").unwrap().num_heads, 32);
    }
}
