//! The kernels compiled from kernels/*.cu, as build.rs found them in the sources (the emulator
//! compiles the same files, so the list exists with or without nvcc), and the decode-attention
//! instances among them. The instances are stated once, in kernels/attention.cuh; nothing here
//! repeats them.

use crate::kernels::COMPILED_KERNELS;
use crate::kv::Dtype;

/// Whether a kernel called `name` was compiled (module `module`).
pub fn compiled(module: &str, name: &str) -> bool {
    COMPILED_KERNELS
        .iter()
        .any(|k| k.module == module && k.name == name)
}

/// One (dtype, head dim, GQA group) decode attention is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct AttentionInstance {
    pub dtype: Dtype,
    pub head_dim: usize,
    pub group: usize,
}

/// Every decode-attention instance, from the names of the paged kernels
/// (`paged_attention_{dtype}_d{head_dim}_g{group}`), sorted.
pub fn attention_instances() -> Vec<AttentionInstance> {
    let mut v: Vec<AttentionInstance> = COMPILED_KERNELS
        .iter()
        .filter(|k| k.module == "paged_attention")
        .filter_map(|k| parse_attention(k.name))
        .collect();
    v.sort();
    v
}

fn parse_attention(name: &str) -> Option<AttentionInstance> {
    let rest = name.strip_prefix("paged_attention_")?;
    let mut parts = rest.split('_');
    let dtype_name = parts.next()?;
    let dtype = *<Dtype as clap::ValueEnum>::value_variants()
        .iter()
        .find(|d| d.name() == dtype_name)?;
    let head_dim = parts.next()?.strip_prefix('d')?.parse().ok()?;
    let group = parts.next()?.strip_prefix('g')?.parse().ok()?;
    parts.next().is_none().then_some(AttentionInstance {
        dtype,
        head_dim,
        group,
    })
}

/// The head dims and groups built for `dtype`, for messages: "head dims 64, 128; groups 1, 2".
pub fn describe(dtype: Dtype) -> String {
    let all = attention_instances();
    let mut dims: Vec<usize> = all
        .iter()
        .filter(|i| i.dtype == dtype)
        .map(|i| i.head_dim)
        .collect();
    dims.dedup();
    let mut groups: Vec<usize> = all
        .iter()
        .filter(|i| i.dtype == dtype)
        .map(|i| i.group)
        .collect();
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
                head_dim: 256,
                group: 8
            })
        );
        for bad in [
            "merge_partitions_f16_d128",
            "paged_attention_f16_d128",
            "paged_attention_f16_d128_g4_x",
            "paged_attention_f8_d128_g4",
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
            assert!(compiled(
                "contiguous_attention",
                &format!("contiguous_attention_{d}_d{hd}_g{g}")
            ));
            assert!(compiled(
                "paged_attention",
                &format!("merge_partitions_{d}_d{hd}")
            ));
        }
    }
}
