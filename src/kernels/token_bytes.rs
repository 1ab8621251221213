//! Bytes one token of one KV head costs a decode-attention kernel (its K row and its V row:
//! 2 x head dim x the stored element's size), from what the kernel's name says
//! (`kernels::names::parse_kernel`), stated here once for the static report.

use crate::kv::Dtype;

/// What a name says about the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionStream {
    pub kv_dtype: Dtype,
    pub head_dim: u32,
    pub group: u32,
}

impl AttentionStream {
    pub fn bytes_per_token(&self) -> u32 {
        2 * self.head_dim * self.kv_dtype.bytes() as u32
    }
}

/// The stream of an attention kernel called `kernel`; `None` for any other kernel. The name is
/// read by `kernels::names::parse_kernel`, the one reader of attention kernel names.
pub fn attention_stream(kernel: &str) -> Option<AttentionStream> {
    let (_, _, i) = super::names::parse_kernel(kernel)?;
    Some(AttentionStream {
        kv_dtype: i.kv_dtype,
        head_dim: u32::try_from(i.head_dim).ok()?,
        group: u32::try_from(i.group).ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_give_the_bytes_of_a_k_row_and_a_v_row() {
        let bytes = |k: &str| attention_stream(k).map(|s| s.bytes_per_token());
        assert_eq!(bytes("paged_attention_f16_d128_g4"), Some(512));
        assert_eq!(bytes("contiguous_attention_bf16_d64_g1"), Some(256));
        assert_eq!(bytes("paged_attention_f32_d128_g8"), Some(1024));
        assert_eq!(bytes("paged_attention_f16_kvfp8_e4m3_d128_g4"), Some(256));
        assert_eq!(
            bytes("contiguous_attention_bf16_kvfp8_e5m2_d256_g2"),
            Some(512)
        );
        assert_eq!(bytes("paged_attention_tc_bf16_d128_g8"), Some(512));
        assert_eq!(
            attention_stream("paged_attention_f16_d128_g8").map(|s| s.group),
            Some(8)
        );
        for other in [
            "merge_partitions_f16_d128",
            "paged_gather_copy_f16",
            "stream_read",
            "paged_attention_f8_d128_g4",
            "paged_attention_f16_d128",
        ] {
            assert_eq!(attention_stream(other), None, "{other}");
        }
    }
}
