//! Decode attention on the CPU: the fallback without a GPU and the reference for the kernels in
//! `kernels/attention.cuh`. Same semantics: query head `h` reads KV head `h / group`; scores are
//! `q · k * scale` in f32; softmax over the sequence's tokens; a sequence of length 0 gives zeros.
//!
//! Each (sequence, KV head) task reads its K rows once and its V rows once for the whole group of
//! query heads, as the GPU kernel does, so the CPU figures measure the same traffic.

use super::simd;
use crate::kv::{BlockTable, KvElem, KvSpec};
use rayon::prelude::*;

/// The shape of one decode-attention call.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionShape {
    pub num_heads: usize,
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
}

impl AttentionShape {
    pub fn group(&self) -> usize {
        self.num_heads / self.num_kv_heads
    }
}

/// Where token `t` of sequence `seq`, KV head `head`, starts in a K or V buffer.
pub trait RowLocator: Sync {
    fn row(&self, seq: usize, head: usize, t: usize) -> usize;
}

/// Rows of a paged pool, found through the block table.
pub struct PagedRows<'a> {
    pub spec: &'a KvSpec,
    pub table: &'a BlockTable,
}

impl RowLocator for PagedRows<'_> {
    #[inline]
    fn row(&self, seq: usize, head: usize, t: usize) -> usize {
        let (block, offset) = self.table.locate(seq, t);
        self.spec.elem_offset(block, head, offset, 0)
    }
}

/// Rows of a contiguous cache `[num_seqs, num_kv_heads, max_len, head_dim]`.
pub struct ContiguousRows {
    pub num_kv_heads: usize,
    pub max_len: usize,
    pub head_dim: usize,
}

impl RowLocator for ContiguousRows {
    #[inline]
    fn row(&self, seq: usize, head: usize, t: usize) -> usize {
        ((seq * self.num_kv_heads + head) * self.max_len + t) * self.head_dim
    }
}

/// Decode attention for every sequence: `q` and `out` are `[num_seqs, num_heads, head_dim]`,
/// `lens[s]` is sequence `s`'s length, K and V rows are where `rows` says.
pub fn decode_attention<T: KvElem>(
    shape: &AttentionShape,
    q: &[T],
    k: &[T],
    v: &[T],
    lens: &[i32],
    rows: &impl RowLocator,
    out: &mut [T],
) {
    let (hd, heads) = (shape.head_dim, shape.num_heads);
    assert_eq!(q.len(), lens.len() * heads * hd, "query shape");
    assert_eq!(out.len(), q.len(), "output shape");
    let group = shape.group();
    let group_elems = group * hd;
    // One task per (sequence, KV head): it owns that group's rows of the output.
    out.par_chunks_mut(group_elems)
        .zip(q.par_chunks(group_elems))
        .enumerate()
        .for_each(|(task, (out_g, q_g))| {
            let (seq, kv_head) = (task / shape.num_kv_heads, task % shape.num_kv_heads);
            let len = lens[seq] as usize;
            let result = simd::dispatch(|| {
                attend_group(shape, q_g, k, v, len, |t| rows.row(seq, kv_head, t))
            });
            for (o, r) in out_g.iter_mut().zip(result) {
                *o = T::from_f32(r);
            }
        });
}

/// One (sequence, KV head): the outputs of its `group` query heads, `[group, head_dim]`, in f32.
#[inline(always)]
fn attend_group<T: KvElem>(
    shape: &AttentionShape,
    q_g: &[T],
    k: &[T],
    v: &[T],
    len: usize,
    row: impl Fn(usize) -> usize,
) -> Vec<f32> {
    let hd = shape.head_dim;
    let group = shape.group();
    let mut q = vec![0f32; group * hd];
    T::slice_to_f32(q_g, &mut q);
    let mut acc = vec![0f32; group * hd];
    if len == 0 {
        return acc;
    }
    let mut buf = vec![0f32; hd];
    let mut scores = vec![0f32; group * len];
    for t in 0..len {
        let r = row(t);
        T::slice_to_f32(&k[r..r + hd], &mut buf);
        for g in 0..group {
            scores[g * len + t] = simd::dot(&q[g * hd..(g + 1) * hd], &buf) * shape.scale;
        }
    }
    let mut sums = vec![0f32; group];
    for g in 0..group {
        let s = &mut scores[g * len..(g + 1) * len];
        let max = s.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0.0;
        for x in s.iter_mut() {
            *x = (*x - max).exp();
            sum += *x;
        }
        sums[g] = sum;
    }
    for t in 0..len {
        let r = row(t);
        T::slice_to_f32(&v[r..r + hd], &mut buf);
        for g in 0..group {
            simd::axpy(scores[g * len + t], &buf, &mut acc[g * hd..(g + 1) * hd]);
        }
    }
    for g in 0..group {
        let inv = 1.0 / sums[g];
        acc[g * hd..(g + 1) * hd].iter_mut().for_each(|x| *x *= inv);
    }
    acc
}
