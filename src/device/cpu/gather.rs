//! Paged gather, the CPU reference of `kernels/paged_gather.cu`.
//!
//! - Copy-out: every token of every sequence, read through the block table, written contiguously
//!   per KV head: `out[head][cu_len[seq] + t][dim]`, shape `[num_kv_heads, total_tokens, head_dim]`,
//!   where `cu_len[seq]` is the number of tokens of the sequences before `seq`.
//! - Read-only: for each (sequence, KV head), the f32 sum of all its K and V elements, shape
//!   `[num_seqs, num_kv_heads]`. Only reads count, so it measures read bandwidth.

use super::simd::Kernels;
use crate::kv::{BlockTable, KvElem, KvSpec};
use rayon::prelude::*;

/// Copy-out gather of one pool (K or V) into `out` (`[num_kv_heads, total_tokens, head_dim]`).
/// The table must have been validated against the pool.
pub fn gather_copy<T: KvElem>(spec: &KvSpec, pool: &[T], table: &BlockTable, out: &mut [T]) {
    let (offsets, total) = table.token_offsets();
    let hd = spec.head_dim;
    assert_eq!(out.len(), spec.num_kv_heads * total * hd, "output size");
    // One task per KV head: each writes its own contiguous plane of the output.
    out.par_chunks_mut((total * hd).max(1))
        .enumerate()
        .for_each(|(head, plane)| {
            for (seq, &start) in offsets.iter().enumerate() {
                let len = table.lens[seq] as usize;
                let mut t = 0;
                while t < len {
                    let (block, off) = table.locate(seq, t);
                    let run = (spec.block_size - off).min(len - t);
                    let src = spec.elem_offset(block, head, off, 0);
                    let dst = (start + t) * hd;
                    plane[dst..dst + run * hd].copy_from_slice(&pool[src..src + run * hd]);
                    t += run;
                }
            }
        });
}

/// Read-only gather: per (sequence, KV head), the sum of its K and V elements, into `out`
/// (`[num_seqs, num_kv_heads]`). Sums run with the vector kernels (F16C conversion, four AVX2
/// accumulators) so the loop is bound by memory, not by converting halves one at a time.
pub fn gather_sum<T: KvElem>(spec: &KvSpec, k: &[T], v: &[T], table: &BlockTable, out: &mut [f32]) {
    let heads = spec.num_kv_heads;
    assert_eq!(out.len(), table.num_seqs() * heads, "output size");
    let kernels = Kernels::detect(spec.head_dim);
    out.par_iter_mut().enumerate().for_each(|(i, sum)| {
        let (seq, head) = (i / heads, i % heads);
        let len = table.lens[seq] as usize;
        let mut acc = 0.0f32;
        let mut t = 0;
        while t < len {
            let (block, off) = table.locate(seq, t);
            let run = (spec.block_size - off).min(len - t);
            let src = spec.elem_offset(block, head, off, 0);
            let n = run * spec.head_dim;
            acc += kernels.sum(&k[src..src + n]);
            acc += kernels.sum(&v[src..src + n]);
            t += run;
        }
        *sum = acc;
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{Dtype, HostPool, PoolData};
    use half::f16;
    use rand::{seq::SliceRandom, Rng, SeedableRng};

    /// A random table over `num_blocks` blocks: shuffled, with some blocks repeated across sequences
    /// as prefix sharing would.
    fn random_table(rng: &mut impl Rng, block_size: usize, num_blocks: usize) -> BlockTable {
        let seqs = rng.random_range(1..5);
        let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
        ids.shuffle(rng);
        let mut rows = Vec::new();
        let mut lens = Vec::new();
        for _ in 0..seqs {
            let len = rng.random_range(0..=3 * block_size + 1);
            let row: Vec<u32> = (0..len.div_ceil(block_size))
                .map(|_| ids[rng.random_range(0..ids.len())])
                .collect();
            rows.push(row);
            lens.push(len);
        }
        BlockTable::from_rows(&rows, &lens, block_size).unwrap()
    }

    /// The obviously-correct gather: one element at a time through `block_table[t / B]`, `t % B`.
    fn naive_copy(spec: &KvSpec, pool: &PoolData, table: &BlockTable) -> Vec<f32> {
        let (offsets, total) = table.token_offsets();
        let mut out = vec![f32::NAN; spec.num_kv_heads * total * spec.head_dim];
        for seq in 0..table.num_seqs() {
            for t in 0..table.lens[seq] as usize {
                let block = table.entries[seq * table.stride + t / spec.block_size] as usize;
                for h in 0..spec.num_kv_heads {
                    for d in 0..spec.head_dim {
                        let src = spec.elem_offset(block, h, t % spec.block_size, d);
                        out[(h * total + offsets[seq] + t) * spec.head_dim + d] = pool.get_f32(src);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn copy_and_sum_match_a_token_by_token_gather_for_every_block_size() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for log_bs in 0..=8 {
            let bs = 1 << log_bs;
            let spec = KvSpec::new(2, 16, bs, Dtype::F16).unwrap();
            let num_blocks = 12;
            let pool = HostPool::random(spec, num_blocks, rng.random()).unwrap();
            let table = random_table(&mut rng, bs, num_blocks);
            table.validate(num_blocks).unwrap();
            let (PoolData::F16(k), PoolData::F16(v)) = (&pool.k, &pool.v) else {
                unreachable!()
            };
            let (_, total) = table.token_offsets();
            let mut out = vec![f16::NAN; 2 * total * 16];
            gather_copy(&spec, k, &table, &mut out);
            let want = naive_copy(&spec, &pool.k, &table);
            let got: Vec<f32> = out.iter().map(|x| x.to_f32()).collect();
            assert_eq!(got, want, "block size {bs}");

            let mut sums = vec![f32::NAN; table.num_seqs() * 2];
            gather_sum(&spec, k, v, &table, &mut sums);
            let want_v = naive_copy(&spec, &pool.v, &table);
            for seq in 0..table.num_seqs() {
                for h in 0..2 {
                    let (offsets, total) = table.token_offsets();
                    let range = (h * total + offsets[seq]) * 16
                        ..(h * total + offsets[seq] + table.lens[seq] as usize) * 16;
                    let expect: f64 = want[range.clone()]
                        .iter()
                        .chain(&want_v[range])
                        .map(|&x| x as f64)
                        .sum();
                    let got = sums[seq * 2 + h] as f64;
                    assert!(
                        (got - expect).abs() < 1e-3 * (1.0 + expect.abs()),
                        "bs {bs}: {got} vs {expect}"
                    );
                }
            }
        }
    }
}
