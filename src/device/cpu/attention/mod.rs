//! Decode attention on the CPU: the fallback without a GPU and the reference for the kernels in
//! `kernels/attention.cuh`. Same semantics: query head `h` reads KV head `h / group`; scores are
//! `q · k * scale` in f32; softmax over the sequence's tokens; a sequence of length 0 gives zeros.
//!
//! Work is split as the GPU kernel splits it: each sequence is cut into partitions of
//! [`PARTITION`] tokens, one rayon task each (all KV heads), so a batch of one long sequence still
//! fills every core; the partitions are merged by log-sum-exp. A task walks its partition in
//! steps ([`partition`]): row offsets once per block, the next step's K and V requested while the
//! present one is computed, each K and V row loaded once for the group of query heads. The split
//! depends only on the lengths, never on the thread count or the layout, so a result is the same
//! on every machine with the same kernels, and paged and contiguous agree bit for bit.

mod partition;
mod read;
mod rows;

pub use read::read_rows;
pub use rows::{ContiguousRows, PagedRows, RowLocator};

use super::simd::Kernels;
use crate::kv::KvElem;
use rayon::prelude::*;

/// Tokens per partition (one task). 256 f16 tokens of 8 KV heads of head dim 128 are 1 MiB of K
/// and V: long enough that task overhead is noise, short enough that 512 tokens make two tasks.
pub const PARTITION: usize = 256;

/// The shape of one decode-attention call (defined with the launches, which share it).
pub use crate::launch::AttentionShape;

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
    let ones = vec![1.0; shape.num_kv_heads];
    decode_attention_scaled(shape, q, k, v, &ones, &ones, lens, rows, out);
}

/// [`decode_attention`] over K and V stored as `KV` (fp8, say) with per-KV-head scales: K is
/// stored times `k_scale[head]`, V stored times `v_scale[head]`. The K scale folds into the score scale, the V
/// scale into the output, as the kernels do.
#[allow(clippy::too_many_arguments)]
pub fn decode_attention_scaled<T: KvElem, KV: KvElem>(
    shape: &AttentionShape,
    q: &[T],
    k: &[KV],
    v: &[KV],
    k_scale: &[f32],
    v_scale: &[f32],
    lens: &[i32],
    rows: &impl RowLocator,
    out: &mut [T],
) {
    let (hd, heads, kv_heads) = (shape.head_dim, shape.num_heads, shape.num_kv_heads);
    assert!(
        k_scale.len() == kv_heads && v_scale.len() == kv_heads,
        "one K and one V scale per KV head"
    );
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
    let mut partials = PARTIALS.take();
    if partials.len() < tasks.len() * task_len {
        partials.resize(tasks.len() * task_len, 0.0);
    }
    partials[..tasks.len() * task_len]
        .par_chunks_mut(task_len)
        .enumerate()
        .for_each(|(i, partial)| {
            let task = &tasks[i];
            let q_s = &q[task.seq * heads * hd..(task.seq + 1) * heads * hd];
            // A thread of the pool takes tasks in order, so the next task is most often its own.
            let next = tasks.get(i + 1);
            partition::attend_partition(
                kernels, shape, q_s, k, v, k_scale, rows, task, next, partial,
            );
        });
    out.par_chunks_mut(group_elems)
        .enumerate()
        .for_each(|(pair, out_g)| {
            let (seq, head) = (pair / kv_heads, pair % kv_heads);
            let parts = (first[seq]..first[seq + 1])
                .map(|t| &partials[t * task_len + head * partial_len..][..partial_len]);
            merge(parts, group, hd, v_scale[head], out_g);
        });
    PARTIALS.set(partials);
}

thread_local! {
    /// The partial results of the calling thread's last call, kept for the next: allocated
    /// afresh, 2 MiB (batch 8 x 4096) cost 50-800 us of page faults a call, 1-15% of the call
    /// (as an engine keeps its workspace between steps). Every task writes its part before use.
    static PARTIALS: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Log-sum-exp merge of a (sequence, KV head)'s partitions (each `[acc | max | sum]`) into its
/// output `[group, hd]`; no partitions (an empty sequence) gives zeros.
fn merge<'a, T: KvElem>(
    parts: impl Iterator<Item = &'a [f32]> + Clone,
    group: usize,
    hd: usize,
    v_scale: f32,
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
        let inv = if sum > 0.0 { v_scale / sum } else { 0.0 };
        row.iter_mut().for_each(|r| *r *= inv);
        T::slice_from_f32(&row, &mut out_g[g * hd..(g + 1) * hd]);
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
}
