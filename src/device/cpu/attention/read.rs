//! K and V read in decode attention's order with no arithmetic: the same tasks, steps and
//! requests ahead as [`super::decode_attention`], each row summed as 64-bit words. Its time is
//! what reading the layout costs on this machine, the kernel aside: at block size 1 a step's rows
//! lie in 32 small blocks of each pool scattered over it, which read slower than a contiguous run
//! with or without a kernel, so the paged kernel is measured against this as well as the stream.

use super::partition::{next_step_spans, STEP};
use super::{plan, AttentionShape, RowLocator, Task};
use crate::device::cpu::simd::Ahead;
use crate::kv::KvElem;
use rayon::prelude::*;

/// Rows read between two requests ahead (the kernels beat once every few rows too).
const ROWS_PER_BEAT: usize = 4;

/// The wrapping sum, as little-endian 64-bit words (a tail of fewer bytes as one word), of every
/// K and V row decode attention reads: every token of every sequence (`lens`), every KV head,
/// where `rows` says; split into the same tasks as [`super::decode_attention`].
pub fn read_rows<KV: KvElem>(
    shape: &AttentionShape,
    k: &[KV],
    v: &[KV],
    lens: &[i32],
    rows: &impl RowLocator,
) -> u64 {
    let (tasks, _) = plan(lens);
    (0..tasks.len())
        .into_par_iter()
        .map(|i| read_task(shape, k, v, rows, &tasks[i], tasks.get(i + 1)))
        .reduce(|| 0, u64::wrapping_add)
}

fn read_task<KV: KvElem>(
    shape: &AttentionShape,
    k: &[KV],
    v: &[KV],
    rows: &impl RowLocator,
    task: &Task,
    next_task: Option<&Task>,
) -> u64 {
    let (hd, kv_heads) = (shape.head_dim, shape.num_kv_heads);
    let (mut step_rows, mut spans, mut sum) = ([0usize; STEP], Vec::new(), 0u64);
    for t0 in (task.start..task.end).step_by(STEP) {
        let n = STEP.min(task.end - t0);
        next_step_spans(rows, task, t0, next_task, &mut spans);
        let mut ahead = Ahead::new(k, v, &spans, kv_heads * n.div_ceil(ROWS_PER_BEAT));
        for head in 0..kv_heads {
            let here = &mut step_rows[..n];
            rows.rows(task.seq, head, t0, here);
            for group in here.chunks(ROWS_PER_BEAT) {
                ahead.beat();
                for &r in group {
                    sum = sum
                        .wrapping_add(row_words(&k[r..r + hd]))
                        .wrapping_add(row_words(&v[r..r + hd]));
                }
            }
        }
    }
    sum
}

/// The wrapping sum of `row`'s bytes as little-endian 64-bit words, a tail of fewer as one word.
fn row_words<KV: KvElem>(row: &[KV]) -> u64 {
    let bytes: &[u8] = bytemuck::cast_slice(row);
    let words = bytes.chunks_exact(8);
    let tail = words
        .remainder()
        .iter()
        .rev()
        .fold(0u64, |w, &b| w << 8 | b as u64);
    words
        .map(|w| u64::from_le_bytes(w.try_into().expect("eight bytes")))
        .fold(tail, u64::wrapping_add)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::attention::Problem;
    use crate::device::cpu::attention::{ContiguousRows, PagedRows};
    use crate::kv::Fp8E4m3;
    use half::f16;

    /// Every row read once, whatever the layout: the sum equals one taken token by token through
    /// `RowLocator::row`, and the paged and contiguous copies of the same K and V agree.
    fn reads_every_row_once<KV: KvElem>(block_size: usize, lens: &[usize], seed: u64) {
        let shape = AttentionShape {
            num_heads: 8,
            num_kv_heads: 2,
            head_dim: 32,
            scale: 0.2,
        };
        let p = Problem::<f16, KV>::new(shape, block_size, lens, seed).unwrap();
        let paged = PagedRows {
            spec: &p.spec,
            table: &p.table,
        };
        let contiguous = ContiguousRows {
            num_kv_heads: 2,
            max_len: p.max_len,
            head_dim: 32,
        };
        let by_token = |k: &[KV], v: &[KV], rows: &dyn Fn(usize, usize, usize) -> usize| {
            let mut sum = 0u64;
            for (seq, &len) in lens.iter().enumerate() {
                for head in 0..2 {
                    for t in 0..len {
                        let r = rows(seq, head, t);
                        sum = sum
                            .wrapping_add(row_words(&k[r..r + 32]))
                            .wrapping_add(row_words(&v[r..r + 32]));
                    }
                }
            }
            sum
        };
        let want = by_token(&p.k, &p.v, &|s, h, t| paged.row(s, h, t));
        let got = read_rows(&shape, &p.k, &p.v, &p.lens, &paged);
        assert_eq!(got, want, "paged, block size {block_size}, lens {lens:?}");
        let (kc, vc) = (&p.k_contiguous, &p.v_contiguous);
        let want_c = by_token(kc, vc, &|s, h, t| contiguous.row(s, h, t));
        assert_eq!(read_rows(&shape, kc, vc, &p.lens, &contiguous), want_c);
        assert_eq!(want_c, want, "the same rows in either layout");
    }

    #[test]
    fn the_read_walk_reads_every_row_once() {
        for (bs, seed) in [(1, 1), (16, 2), (4, 3)] {
            let lens = [300, 0, 1, 513, 33];
            reads_every_row_once::<f16>(bs, &lens, seed);
            reads_every_row_once::<Fp8E4m3>(bs, &lens, seed + 10);
        }
    }

    #[test]
    fn row_words_add_little_endian_words_and_a_tail() {
        let row: Vec<Fp8E4m3> = (1..=11).map(Fp8E4m3).collect();
        let want = u64::from_le_bytes([1, 2, 3, 4, 5, 6, 7, 8])
            + u64::from_le_bytes([9, 10, 11, 0, 0, 0, 0, 0]);
        assert_eq!(row_words(&row), want);
    }
}
