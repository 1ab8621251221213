//! The kernels compiled from kernels/*.cu, as build.rs found them in the sources (the emulator
//! compiles the same files, so the list exists with or without nvcc), and the decode-attention
//! instances among them. The instances are stated once, in kernels/attention.cuh; nothing here
//! repeats them. Their names' grammar is `kernels::names`.

use crate::kernels::names::{Engine, Layout};
use crate::kernels::COMPILED_KERNELS;
use crate::kv::Dtype;

pub use crate::kernels::names::{parse_kernel, AttentionInstance};

/// Whether a kernel called `name` was compiled (module `module`).
pub fn compiled(module: &str, name: &str) -> bool {
    COMPILED_KERNELS
        .iter()
        .any(|k| k.module == module && k.name == name)
}

/// Every decode-attention instance, from the names of the paged kernels
/// (`paged_attention_{dtype}[_kv{kv_dtype}]_d{head_dim}_g{group}`), sorted.
pub fn attention_instances() -> Vec<AttentionInstance> {
    let mut v: Vec<AttentionInstance> = COMPILED_KERNELS
        .iter()
        .filter(|k| k.module.starts_with("paged_attention"))
        .filter_map(|k| parse_attention(k.name))
        .collect();
    v.sort();
    v
}

fn parse_attention(name: &str) -> Option<AttentionInstance> {
    match parse_kernel(name)? {
        (Layout::Paged, Engine::CudaCores, i) => Some(i),
        _ => None,
    }
}

/// The head dims and groups built for q `dtype` and K/V `kv_dtype`, for messages: "head dims 64,
/// 128; groups 1, 2".
pub fn describe(dtype: Dtype, kv_dtype: Dtype) -> String {
    let all: Vec<AttentionInstance> = attention_instances()
        .into_iter()
        .filter(|i| i.dtype == dtype && i.kv_dtype == kv_dtype)
        .collect();
    let mut dims: Vec<usize> = all.iter().map(|i| i.head_dim).collect();
    dims.dedup();
    let mut groups: Vec<usize> = all.iter().map(|i| i.group).collect();
    groups.sort();
    groups.dedup();
    let list = |v: &[usize]| {
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!("head dims {}; groups {}", list(&dims), list(&groups))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_into_instances_and_nothing_else_does() {
        assert_eq!(
            parse_attention("paged_attention_bf16_d256_g8"),
            Some(AttentionInstance {
                dtype: Dtype::Bf16,
                kv_dtype: Dtype::Bf16,
                head_dim: 256,
                group: 8
            })
        );
        assert_eq!(
            parse_attention("paged_attention_f16_kvfp8_e5m2_d64_g2"),
            Some(AttentionInstance {
                dtype: Dtype::F16,
                kv_dtype: Dtype::Fp8E5m2,
                head_dim: 64,
                group: 2
            })
        );
        assert_eq!(parse_attention("paged_attention_tc_f16_d128_g8"), None);
        for bad in [
            "merge_partitions_f16_d128",
            "paged_attention_f16_d128",
            "paged_attention_f16_d128_g4_x",
            "paged_attention_f8_d128_g4",
            "paged_attention_f16_kvf8_d128_g4",
        ] {
            assert_eq!(parse_attention(bad), None, "{bad}");
        }
    }

    #[test]
    fn every_instance_has_its_contiguous_twin_and_its_merge() {
        let all = attention_instances();
        assert!(!all.is_empty());
        for i in &all {
            let (d, hd, g) = (i.dtype.name(), i.head_dim, i.group);
            let kv = if i.kv_dtype == i.dtype {
                String::new()
            } else {
                format!("_kv{}", i.kv_dtype.name())
            };
            let module = if kv.is_empty() {
                "contiguous_attention"
            } else {
                "contiguous_attention_fp8"
            };
            assert!(compiled(
                module,
                &format!("contiguous_attention_{d}{kv}_d{hd}_g{g}")
            ));
            assert!(compiled(
                "paged_attention",
                &format!("merge_partitions_{d}_d{hd}")
            ));
        }
    }
}
