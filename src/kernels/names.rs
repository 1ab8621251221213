//! The names of the decode-attention kernels, stated once below everything that reads or builds
//! them: `{paged|contiguous}_attention_[tc_]{dtype}[_kv{kv_dtype}]_d{head_dim}_g{group}`. The
//! launch plans (`launch::attention`) build names with [`kernel_name`]; the launch plans' list of
//! instances (`launch::instances`), the static report (`kernels::token_bytes`) and `pagedkv info`
//! read them with [`parse_kernel`]. The kernels themselves are named by the macros of
//! kernels/attention.cuh and kernels/attention_tc.cuh.

use super::{ATTENTION_SMEM_BYTES, ATTENTION_TC_SMEM_BYTES};
use crate::kv::Dtype;

/// Which cache a kernel reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `[num_blocks, num_kv_heads, block_size, head_dim]` through a block table.
    Paged,
    /// `[num_seqs, num_kv_heads, max_len, head_dim]`.
    Contiguous,
}

/// What computes a decode-attention kernel's products: f32 FMAs on the CUDA cores
/// (kernels/attention.cuh, every shape) or mma.sync on the tensor cores (kernels/attention_tc.cuh,
/// the shapes `PAGEDKV_FOR_EACH_TC_ATTENTION` lists: grouped heads at head dim 128).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    CudaCores,
    TensorCores,
}

impl Engine {
    pub fn name(self) -> &'static str {
        match self {
            Engine::CudaCores => "cuda-cores",
            Engine::TensorCores => "tensor-cores",
        }
    }

    /// Dynamic shared memory every launch of this engine's kernels passes (their cp.async rings).
    pub fn smem_bytes(self) -> u32 {
        match self {
            Engine::CudaCores => ATTENTION_SMEM_BYTES,
            Engine::TensorCores => ATTENTION_TC_SMEM_BYTES,
        }
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One (q dtype, K/V storage, head dim, GQA group) decode attention is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct AttentionInstance {
    pub dtype: Dtype,
    pub kv_dtype: Dtype,
    pub head_dim: usize,
    pub group: usize,
}

/// The instance name of decode attention for `layout` on `engine` with q of `dtype` and K/V stored
/// as `kv_dtype`: `paged_attention_f16_d128_g4`, `paged_attention_f16_kvfp8_e4m3_d128_g4`, and on
/// tensor cores `paged_attention_tc_f16_d128_g4`.
pub fn kernel_name(
    layout: Layout,
    engine: Engine,
    dtype: Dtype,
    kv_dtype: Dtype,
    head_dim: usize,
    group: usize,
) -> String {
    let prefix = match layout {
        Layout::Paged => "paged",
        Layout::Contiguous => "contiguous",
    };
    let tc = match engine {
        Engine::CudaCores => "",
        Engine::TensorCores => "tc_",
    };
    let kv = if kv_dtype == dtype {
        String::new()
    } else {
        format!("_kv{}", kv_dtype.name())
    };
    format!(
        "{prefix}_attention_{tc}{}{kv}_d{head_dim}_g{group}",
        dtype.name()
    )
}

fn dtype_named(name: &str) -> Option<Dtype> {
    <Dtype as clap::ValueEnum>::value_variants()
        .iter()
        .copied()
        .find(|d| d.name() == name)
}

/// What a decode-attention kernel's name says, the inverse of [`kernel_name`]; `None` for any
/// other name.
pub fn parse_kernel(name: &str) -> Option<(Layout, Engine, AttentionInstance)> {
    let (layout, rest) = if let Some(rest) = name.strip_prefix("paged_attention_") {
        (Layout::Paged, rest)
    } else {
        (
            Layout::Contiguous,
            name.strip_prefix("contiguous_attention_")?,
        )
    };
    let (engine, rest) = match rest.strip_prefix("tc_") {
        Some(rest) => (Engine::TensorCores, rest),
        None => (Engine::CudaCores, rest),
    };
    let (types, shape) = rest.split_at(rest.rfind("_d")?);
    let (dtype, kv_dtype) = match types.split_once("_kv") {
        Some((q, kv)) => (dtype_named(q)?, dtype_named(kv)?),
        None => (dtype_named(types)?, dtype_named(types)?),
    };
    let (d, g) = shape.strip_prefix("_d")?.split_once("_g")?;
    let instance = AttentionInstance {
        dtype,
        kv_dtype,
        head_dim: d.parse().ok()?,
        group: g.parse().ok()?,
    };
    Some((layout, engine, instance))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::COMPILED_KERNELS;

    #[test]
    fn names_parse_back_into_their_parts_and_nothing_else_does() {
        assert_eq!(
            parse_kernel("paged_attention_tc_bf16_kvfp8_e5m2_d128_g8"),
            Some((
                Layout::Paged,
                Engine::TensorCores,
                AttentionInstance {
                    dtype: Dtype::Bf16,
                    kv_dtype: Dtype::Fp8E5m2,
                    head_dim: 128,
                    group: 8
                }
            ))
        );
        // Every kernel name the launchers build parses back into its parts.
        for k in COMPILED_KERNELS
            .iter()
            .filter(|k| k.name.contains("_attention_"))
        {
            let (layout, engine, i) = parse_kernel(k.name).expect(k.name);
            let name = kernel_name(layout, engine, i.dtype, i.kv_dtype, i.head_dim, i.group);
            assert_eq!(name, k.name);
        }
        for bad in [
            "merge_partitions_f16_d128",
            "paged_attention_f16_d128",
            "paged_attention_f16_d128_g4_x",
            "paged_attention_f8_d128_g4",
            "paged_attention_f16_kvf8_d128_g4",
            "decode_attention_f16_d128_g4",
        ] {
            assert_eq!(parse_kernel(bad), None, "{bad}");
        }
    }
}
