//! One partition of one sequence, every KV head: the step loop of CPU decode attention.
//!
//! Steps of [`STEP`] tokens, and within a step KV head after KV head, so a paged block
//! (`[num_kv_heads, block_size, head_dim]`) is read part after part in address order. Per step:
//! - the block table is read once: the memory of the next step (of the next task after the last),
//!   every KV head, becomes a few contiguous spans (a whole block is one), requested into L2 a few
//!   lines at a time while this step computes (see [`super::super::simd::Ahead`]); then, per KV
//!   head, the step's row offsets (one lookup per block);
//! - per run of up to four query heads of the GQA group: the scores of every row (each K row
//!   loaded and converted once for the run), one online-softmax update, and the V rows
//!   accumulated with the old accumulators' rescaling folded in.

use super::super::simd::{group_runs, Ahead, Kernels, Span, StepRows, SCORES_LEN};
use super::{AttentionShape, RowLocator, Task};
use crate::kv::KvElem;

/// Tokens per step: two of vLLM's default blocks of 16 tokens, 8 KiB of K per KV head at head dim
/// 128, f16. The per-step work (the softmax update, the accumulators' loads, rescaling and stores)
/// costs about 10 cycles a token at 16 and half that at 32; longer steps only crowd L1.
pub const STEP: usize = 32;

/// For each KV head, writes `[acc | max | sum]` into its part of `partial`, where
/// `acc[g] = Σ_t e^(s_gt - max_g) v_t` and `sum_g = Σ_t e^(s_gt - max_g)` over the task's tokens.
/// During its last step the first step of `next_task` is requested: a thread that takes the
/// tasks in order (as rayon's split of a range does) starts the next one without a wait.
#[allow(clippy::too_many_arguments)]
pub(super) fn attend_partition<T: KvElem, KV: KvElem>(
    kernels: Kernels,
    shape: &AttentionShape,
    q_s: &[T],
    k: &[KV],
    v: &[KV],
    k_scale: &[f32],
    rows: &impl RowLocator,
    task: &Task,
    next_task: Option<&Task>,
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
    let mut walk = Walk {
        kernels,
        shape,
        q: &q,
        k,
        v,
        k_scale,
        seq: task.seq,
        step_rows: [0; STEP],
        s: [0f32; SCORES_LEN],
        partial,
    };
    let mut spans = Vec::new();
    for t0 in (task.start..task.end).step_by(STEP) {
        let n = STEP.min(task.end - t0);
        next_step_spans(rows, task, t0, next_task, &mut spans);
        let mut ahead = Ahead::new(k, v, &spans, kv_heads * kernels.beats(group, n));
        for head in 0..kv_heads {
            walk.head_step(rows, head, t0, n, &mut ahead);
        }
    }
}

/// Into `spans` (cleared first), the memory of the step after the one at `t0` of `task`: its
/// next step, or the first step of `next_task` after the last.
pub(super) fn next_step_spans(
    rows: &impl RowLocator,
    task: &Task,
    t0: usize,
    next_task: Option<&Task>,
    spans: &mut Vec<Span>,
) {
    spans.clear();
    let next = t0 + STEP;
    if next < task.end {
        rows.spans(task.seq, next, (next + STEP).min(task.end), spans);
    } else if let Some(t) = next_task {
        rows.spans(t.seq, t.start, (t.start + STEP).min(t.end), spans);
    }
}

/// One task's state while it walks its steps.
struct Walk<'a, KV> {
    kernels: Kernels,
    shape: &'a AttentionShape,
    /// The sequence's query, `[num_heads, head_dim]`, in f32.
    q: &'a [f32],
    k: &'a [KV],
    v: &'a [KV],
    k_scale: &'a [f32],
    seq: usize,
    step_rows: [usize; STEP],
    s: [f32; SCORES_LEN],
    /// `[num_kv_heads][acc | max | sum]`
    partial: &'a mut [f32],
}

impl<KV: KvElem> Walk<'_, KV> {
    /// Tokens `t0..t0 + n` of KV head `head`: per run of its query heads, scores, one softmax
    /// update and the V rows accumulated.
    fn head_step(
        &mut self,
        rows: &impl RowLocator,
        head: usize,
        t0: usize,
        n: usize,
        ahead: &mut Ahead<KV>,
    ) {
        let (hd, group) = (self.shape.head_dim, self.shape.group());
        let here = &mut self.step_rows[..n];
        rows.rows(self.seq, head, t0, here);
        let here = StepRows::new(here, hd);
        let kernels = self.kernels.for_rows(self.k, self.v, here);
        let partial_len = group * hd + 2 * group;
        let (acc, stats) =
            self.partial[head * partial_len..(head + 1) * partial_len].split_at_mut(group * hd);
        let (maxs, sums) = stats.split_at_mut(group);
        let scale = self.shape.scale * self.k_scale[head];
        for (g0, g) in group_runs(group) {
            let q_run = &self.q[(head * group + g0) * hd..(head * group + g0 + g) * hd];
            let s = &mut self.s;
            kernels.scores(q_run, g, self.k, here, scale, s, ahead);
            let rescale = kernels.softmax(s, g, n, &mut maxs[g0..g0 + g], &mut sums[g0..g0 + g]);
            let acc_run = &mut acc[g0 * hd..(g0 + g) * hd];
            kernels.accumulate(s, g, self.v, here, &rescale, acc_run, ahead);
        }
    }
}
