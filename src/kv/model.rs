//! Model shapes (what sizes a token's KV) and the KV pool a GPU leaves after the weights.
//!
//! Default pool, as vLLM sizes it: `gpus × GPU memory × gpu_memory_utilization − weights`, with the
//! H200's memory as nvidia-smi reports it (143,771 MiB) and vLLM 0.33's default utilization 0.92.
//! Weights count 2 bytes per parameter (bf16/f16 checkpoints). vLLM also subtracts the activation
//! peak of a profiling run and CUDA-graph memory; those depend on the engine's batch settings and
//! are left out, so the default pool is an upper bound of what vLLM would allocate (by a few GiB).

use super::Dtype;
use serde::Serialize;

/// H200 (141 GB HBM3e) memory as `nvidia-smi` reports it, in MiB.
pub const H200_MEMORY_MIB: u64 = 143_771;
/// vLLM's default `gpu_memory_utilization` (`CacheConfig.gpu_memory_utilization`, 0.33).
pub const VLLM_GPU_MEMORY_UTILIZATION: f64 = 0.92;
/// Bytes per weight parameter (bf16/f16).
pub const WEIGHT_BYTES_PER_PARAM: f64 = 2.0;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ModelShape {
    pub name: String,
    pub layers: usize,
    /// Query heads (attention's shape; KV bytes depend only on the KV heads).
    pub num_heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub dtype: Dtype,
    /// Parameters in billions (for the weights' share of GPU memory).
    pub params_billion: f64,
    /// The context length vLLM takes as `max_model_len` by default (`max_position_embeddings`).
    pub context_len: usize,
}

/// (name, layers, query heads, KV heads, head dim, parameters in billions, context length), from
/// each model's Hugging Face `config.json` (`num_hidden_layers`, `num_attention_heads`,
/// `num_key_value_heads`, `hidden_size / num_attention_heads`, `max_position_embeddings`) and
/// model card. Llama 3.1 is Llama 3's shape with a 128k context; Qwen2.5-7B-Instruct-1M is
/// Qwen2.5-7B's shape with a million-token context.
const PRESETS: &[(&str, usize, usize, usize, usize, f64, usize)] = &[
    ("llama-3-8b", 32, 32, 8, 128, 8.03, 8_192),
    ("llama-3-70b", 80, 64, 8, 128, 70.6, 8_192),
    ("llama-3.1-8b", 32, 32, 8, 128, 8.03, 131_072),
    ("llama-3.1-70b", 80, 64, 8, 128, 70.6, 131_072),
    ("llama-2-7b", 32, 32, 32, 128, 6.74, 4_096),
    ("mistral-7b", 32, 32, 8, 128, 7.24, 32_768),
    ("qwen2.5-7b", 28, 28, 4, 128, 7.61, 32_768),
    ("qwen2.5-7b-1m", 28, 28, 4, 128, 7.61, 1_010_000),
    ("qwen2-72b", 80, 64, 8, 128, 72.7, 32_768),
];

/// The preset names, for help texts and errors.
pub fn preset_names() -> Vec<&'static str> {
    PRESETS.iter().map(|p| p.0).collect()
}

/// The preset called `name` (case-insensitive), KV in f16.
pub fn preset(name: &str) -> Option<ModelShape> {
    let name = name.to_ascii_lowercase();
    PRESETS.iter().find(|p| p.0 == name).map(
        |&(name, layers, num_heads, kv_heads, head_dim, params_billion, context_len)| ModelShape {
            name: name.into(),
            layers,
            num_heads,
            kv_heads,
            head_dim,
            dtype: Dtype::F16,
            params_billion,
            context_len,
        },
    )
}

impl ModelShape {
    /// K and V bytes of one token over all layers.
    pub fn kv_bytes_per_token(&self) -> u64 {
        (self.layers * self.kv_heads * self.head_dim * self.dtype.bytes() * 2) as u64
    }

    pub fn weight_bytes(&self) -> f64 {
        self.params_billion * 1e9 * WEIGHT_BYTES_PER_PARAM
    }

    /// vLLM's checks of a tensor-parallel size: the attention heads split evenly
    /// (`ModelConfig.verify_with_parallel_config`), and the KV heads split evenly or, with more
    /// GPUs than KV heads, are replicated evenly (`QKVParallelLinear`).
    pub fn check_tp(&self, tp: usize) -> Result<(), String> {
        if tp == 0 || !self.num_heads.is_multiple_of(tp) {
            return Err(format!(
                "--tp {tp}: vLLM needs the {} attention heads of {} divisible by the tensor-parallel size",
                self.num_heads, self.name
            ));
        }
        let kv_ok = if tp >= self.kv_heads {
            tp.is_multiple_of(self.kv_heads)
        } else {
            self.kv_heads.is_multiple_of(tp)
        };
        if !kv_ok {
            return Err(format!(
                "--tp {tp}: vLLM needs the {} KV heads of {} and the tensor-parallel size to divide one another",
                self.kv_heads, self.name
            ));
        }
        Ok(())
    }
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
pub fn pool_blocks(model: &ModelShape, pool_bytes: u64, block_size: usize) -> u64 {
    pool_bytes / (model.kv_bytes_per_token() * block_size as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama3_8b_on_an_h200() {
        let m = preset("Llama-3-8B").unwrap();
        assert_eq!(m.kv_bytes_per_token(), 32 * 8 * 128 * 2 * 2);
        let pool = default_pool_bytes(&m, H200_MEMORY_MIB, 0.9, 1).unwrap();
        // 143771 MiB × 0.9 = 129393.9 MiB; minus 8.03e9 × 2 bytes.
        let want = 143_771.0 * 1_048_576.0 * 0.9 - 16.06e9;
        assert!((pool as f64 - want).abs() < 2.0);
        assert_eq!(pool_blocks(&m, pool, 16), pool / (131_072 * 16));
        assert_eq!(pool_blocks(&m, 131_072 * 16 * 3 - 1, 16), 2);
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
        assert!(l.check_tp(3).unwrap_err().contains("32 attention heads"));
        let q = preset("qwen2.5-7b").unwrap(); // 28 heads, 4 KV heads
        q.check_tp(2).unwrap();
        assert!(q.check_tp(7).unwrap_err().contains("KV heads"));
        // GQA: every preset's query heads are a whole multiple of its KV heads.
        for name in preset_names() {
            let m = preset(name).unwrap();
            assert_eq!(m.num_heads % m.kv_heads, 0, "{name}");
        }
        assert_eq!(preset("llama-3-8b").unwrap().num_heads, 32);
        assert_eq!(preset_names().len(), PRESETS.len());
    }
}
