//! Decode attention on the CPU: the fallback without a GPU and the reference for the kernels in
//! `kernels/attention.cuh`. Same semantics: query head `h` reads KV head `h / group`; scores are
//! `q · k * scale` in f32; softmax over the sequence's tokens; a sequence of length 0 gives zeros.
//!
//! Work is split as the GPU kernel splits it: each sequence is cut into partitions of
//! [`PARTITION`] tokens, one rayon task each (all KV heads), so a batch of one long sequence still
//! fills every core. A task reads each K row and each V row once for the whole group of query
//! heads, chunk by chunk ([`CHUNK`] tokens) with an online softmax; the partitions are merged by
//! log-sum-exp. The
//! split depends only on the lengths, never on the thread count or the layout, so a result is the
//! same on every machine with the same kernels, and paged and contiguous agree bit for bit.

use super::simd::{Ahead, Kernels};
use crate::kv::{BlockTable, KvElem, KvSpec};
use rayon::prelude::*;

/// Tokens per partition (one task). 256 f16 tokens of 8 KV heads of head dim 128 are 1 MiB of K
/// and V: long enough that task overhead is noise, short enough that 512 tokens make two tasks.
pub const PARTITION: usize = 256;
/// Tokens per online-softmax step: a chunk's K rows (16 KiB at head dim 128, f16) stay in L1 for
/// the second pass a group of more than four heads needs.
pub const CHUNK: usize = 64;

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

    /// The rows of tokens `t0..t0 + out.len()`, into `out`. Must agree with [`Self::row`];
    /// implementations may skip its per-token work.
    fn rows(&self, seq: usize, head: usize, t0: usize, out: &mut [usize]) {
        for (i, r) in out.iter_mut().enumerate() {
            *r = self.row(seq, head, t0 + i);
        }
    }
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

    /// One table lookup per block rather than per token.
    fn rows(&self, seq: usize, head: usize, t0: usize, out: &mut [usize]) {
        let hd = self.spec.head_dim;
        let mut i = 0;
        while i < out.len() {
            let (block, offset) = self.table.locate(seq, t0 + i);
            let run = (self.spec.block_size - offset).min(out.len() - i);
            let base = self.spec.elem_offset(block, head, offset, 0);
            for (j, r) in out[i..i + run].iter_mut().enumerate() {
                *r = base + j * hd;
            }
            i += run;
        }
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

/// One task: tokens `start..end` of sequence `seq`, for every KV head.
#[derive(Debug, Clone, Copy)]
struct Task {
    seq: usize,
    start: usize,
    end: usize,
}

/// The tasks of a call in (sequence, partition) order, and where each sequence starts in that
/// list (one extra entry at the end).
fn plan(lens: &[i32]) -> (Vec<Task>, Vec<usize>) {
    let mut tasks = Vec::new();
    let mut first = Vec::with_capacity(lens.len() + 1);
    for (seq, &len) in lens.iter().enumerate() {
        let len = len.max(0) as usize;
        first.push(tasks.len());
        tasks.extend((0..len).step_by(PARTITION).map(|start| Task {
            seq,
            start,
            end: (start + PARTITION).min(len),
        }));
    }
    first.push(tasks.len());
    (tasks, first)
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
    let (hd, heads, kv_heads) = (shape.head_dim, shape.num_heads, shape.num_kv_heads);
    assert_eq!(q.len(), lens.len() * heads * hd, "query shape");
    assert_eq!(out.len(), q.len(), "output shape");
    let group = shape.group();
    let group_elems = group * hd;
    if group_elems == 0 {
        return;
    }
    let kernels = Kernels::detect(hd);
    let (tasks, first) = plan(lens);
    // Per task and KV head: the unnormalised output `[group, hd]`, then the max and sum per head.
    let partial_len = group_elems + 2 * group;
    let task_len = kv_heads * partial_len;
    let mut partials = vec![0f32; tasks.len() * task_len];
    partials
        .par_chunks_mut(task_len)
        .zip(tasks.par_iter())
        .for_each(|(partial, task)| {
            let q_s = &q[task.seq * heads * hd..(task.seq + 1) * heads * hd];
            attend_partition(kernels, shape, q_s, k, v, rows, task, partial);
        });
    out.par_chunks_mut(group_elems)
        .enumerate()
        .for_each(|(pair, out_g)| {
            let (seq, head) = (pair / kv_heads, pair % kv_heads);
            let parts = (first[seq]..first[seq + 1])
                .map(|t| &partials[t * task_len + head * partial_len..][..partial_len]);
            merge(parts, group, hd, out_g);
        });
}

/// One partition of one sequence, every KV head: for each, writes `[acc | max | sum]` into its
/// part of `partial`, where `acc[g] = Σ_t e^(s_gt - max_g) v_t` and `sum_g = Σ_t e^(s_gt - max_g)`.
///
/// Steps go chunk by chunk and, within a chunk, KV head by KV head, so the parts of a paged block
/// (`[num_kv_heads, block_size, head_dim]`) are read one after the other: a block of size 1 is
/// read as one contiguous run rather than as scattered 256-byte rows.
#[allow(clippy::too_many_arguments)]
fn attend_partition<T: KvElem>(
    kernels: Kernels,
    shape: &AttentionShape,
    q_s: &[T],
    k: &[T],
    v: &[T],
    rows: &impl RowLocator,
    task: &Task,
    partial: &mut [f32],
) {
    let (hd, group, kv_heads) = (shape.head_dim, shape.group(), shape.num_kv_heads);
    let mut q = vec![0f32; q_s.len()];
    T::slice_to_f32(q_s, &mut q);
    let partial_len = group * hd + 2 * group;
    for p in partial.chunks_exact_mut(partial_len) {
        let (acc, stats) = p.split_at_mut(group * hd);
        acc.fill(0.0);
        stats[..group].fill(f32::NEG_INFINITY);
        stats[group..].fill(0.0);
    }
    // Rows of this step and of the next, whose K rows are requested while this step's V rows are
    // summed, as this step's V rows are while its K rows are scored.
    let mut cur = [0usize; CHUNK];
    let mut next = [0usize; CHUNK];
    let chunk_len = |start: usize| CHUNK.min(task.end.saturating_sub(start));
    let (mut start, mut head) = (task.start, 0);
    rows.rows(task.seq, head, start, &mut cur[..chunk_len(start)]);
    // Scores, then weights, of the step: `[group, CHUNK]`.
    let mut s = vec![0f32; group * CHUNK];
    loop {
        let n = chunk_len(start);
        let (next_start, next_head) = if head + 1 < kv_heads {
            (start, head + 1)
        } else {
            (start + CHUNK, 0)
        };
        let n_next = chunk_len(next_start);
        rows.rows(task.seq, next_head, next_start, &mut next[..n_next]);
        let (here, after) = (&cur[..n], &next[..n_next]);
        let q_g = &q[head * group * hd..(head + 1) * group * hd];
        let (acc, stats) =
            partial[head * partial_len..(head + 1) * partial_len].split_at_mut(group * hd);
        let (maxs, sums) = stats.split_at_mut(group);
        let v_ahead = Ahead { buf: v, rows: here };
        kernels.scores(q_g, group, k, here, shape.scale, &mut s, CHUNK, v_ahead);
        for g in 0..group {
            let sg = &mut s[g * CHUNK..g * CHUNK + n];
            let new_max = sg.iter().copied().fold(maxs[g], f32::max);
            // 0 on the first chunk (max was -inf), when `acc` and `sum` are still 0.
            let rescale = (maxs[g] - new_max).exp();
            sums[g] = sums[g] * rescale + kernels.exp_shifted(sg, new_max);
            if rescale != 1.0 {
                acc[g * hd..(g + 1) * hd]
                    .iter_mut()
                    .for_each(|x| *x *= rescale);
            }
            maxs[g] = new_max;
        }
        let k_ahead = Ahead {
            buf: k,
            rows: after,
        };
        kernels.accumulate(&s, CHUNK, group, v, here, acc, k_ahead);
        if n_next == 0 {
            break;
        }
        std::mem::swap(&mut cur, &mut next);
        (start, head) = (next_start, next_head);
    }
}

/// Log-sum-exp merge of a (sequence, KV head)'s partitions (each `[acc | max | sum]`) into its
/// output `[group, hd]`; no partitions (an empty sequence) gives zeros.
fn merge<'a, T: KvElem>(
    parts: impl Iterator<Item = &'a [f32]> + Clone,
    group: usize,
    hd: usize,
    out_g: &mut [T],
) {
    let mut row = vec![0f32; hd];
    for g in 0..group {
        let stat = |p: &[f32], i: usize| p[group * hd + i * group + g];
        let max = parts
            .clone()
            .map(|p| stat(p, 0))
            .fold(f32::NEG_INFINITY, f32::max);
        row.fill(0.0);
        let mut sum = 0.0;
        for p in parts.clone() {
            let w = (stat(p, 0) - max).exp();
            sum += stat(p, 1) * w;
            for (r, a) in row.iter_mut().zip(&p[g * hd..(g + 1) * hd]) {
                *r += a * w;
            }
        }
        let inv = if sum > 0.0 { 1.0 / sum } else { 0.0 };
        for (o, r) in out_g[g * hd..(g + 1) * hd].iter_mut().zip(&row) {
            *o = T::from_f32(r * inv);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plan_covers_every_token_once_in_partitions() {
        let lens = [0, 1, PARTITION as i32, 2 * PARTITION as i32 + 7];
        let (tasks, first) = plan(&lens);
        assert_eq!(first.len(), lens.len() + 1);
        for (seq, &len) in lens.iter().enumerate() {
            let mut next = 0;
            for t in &tasks[first[seq]..first[seq + 1]] {
                assert_eq!((t.seq, t.start), (seq, next));
                assert!(t.end > t.start && t.end - t.start <= PARTITION);
                next = t.end;
            }
            assert_eq!(next, len as usize);
        }
    }

    #[test]
    fn paged_rows_agree_with_row_by_row_lookup() {
        let spec = KvSpec::new(2, 16, 4, crate::kv::Dtype::F16).unwrap();
        let rows = vec![vec![3u32, 0, 5], vec![1, 2]];
        let table = BlockTable::from_rows(&rows, &[11, 6], 4).unwrap();
        let paged = PagedRows {
            spec: &spec,
            table: &table,
        };
        for (seq, len) in [(0usize, 11usize), (1, 6)] {
            for head in 0..2 {
                for t0 in 0..len {
                    let mut got = vec![0; len - t0];
                    paged.rows(seq, head, t0, &mut got);
                    let want: Vec<usize> = (t0..len).map(|t| paged.row(seq, head, t)).collect();
                    assert_eq!(got, want);
                }
            }
        }
    }
}
