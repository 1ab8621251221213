//! How many partitions of the context each (sequence, KV head) is split into (split-K).
//!
//! One CTA per (sequence, KV head) reads its KV once. When the batch alone gives too few CTAs to
//! keep every SM streaming from memory, the context is cut into partitions, one CTA each, and a
//! merge kernel combines them. The heuristic: aim for at least `CTAS_PER_SM` CTAs per SM (a 128-
//! thread CTA alone cannot cover HBM latency); partitions are whole chunks (128 tokens) so no CTA
//! is left with a sliver, and never more partitions than chunks.

use serde::Serialize;

/// Tokens a CTA scores per pass (`attn::kChunk` in kernels/attention.cuh).
pub const CHUNK: usize = 128;
/// CTAs per SM the split aims for.
pub const CTAS_PER_SM: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SplitPlan {
    pub num_partitions: usize,
    /// Tokens per partition (a multiple of [`CHUNK`] when split).
    pub partition_size: usize,
}

pub fn split_plan(num_seqs: usize, num_kv_heads: usize, max_len: usize, sms: usize) -> SplitPlan {
    let ctas = num_seqs * num_kv_heads;
    let target = CTAS_PER_SM * sms.max(1);
    let single = SplitPlan {
        num_partitions: 1,
        partition_size: max_len.max(1),
    };
    if ctas == 0 || ctas >= target || max_len <= CHUNK {
        return single;
    }
    let wanted = target.div_ceil(ctas);
    let size = max_len.div_ceil(wanted).div_ceil(CHUNK) * CHUNK;
    let parts = max_len.div_ceil(size);
    if parts <= 1 {
        return single;
    }
    SplitPlan {
        num_partitions: parts,
        partition_size: size,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_batch_is_not_split() {
        // 64 sequences x 8 KV heads = 512 CTAs >= 4 x 100 SMs.
        assert_eq!(split_plan(64, 8, 4096, 100).num_partitions, 1);
    }

    #[test]
    fn a_small_batch_is_split_into_whole_chunks_covering_the_context() {
        let p = split_plan(1, 8, 4096, 132);
        // 528 CTAs wanted / 8 = 66 partitions of 62.06 tokens -> 128-token partitions, 32 of them.
        assert_eq!(
            p,
            SplitPlan {
                num_partitions: 32,
                partition_size: 128
            }
        );
        let p = split_plan(64, 8, 4096, 132);
        assert_eq!(
            p,
            SplitPlan {
                num_partitions: 2,
                partition_size: 2048
            }
        );
        for (seqs, len) in [(1, 1000), (3, 5000), (2, 129)] {
            let p = split_plan(seqs, 4, len, 132);
            assert!(p.num_partitions * p.partition_size >= len);
            assert!((p.num_partitions - 1) * p.partition_size < len);
            assert_eq!(p.partition_size % CHUNK, 0);
        }
    }

    #[test]
    fn short_contexts_are_not_split() {
        assert_eq!(split_plan(1, 1, 100, 132).num_partitions, 1);
    }
}
