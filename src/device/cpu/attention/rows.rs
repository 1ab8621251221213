//! Where K and V rows lie: through a block table (paged) or in a contiguous cache. The attention
//! loop asks once per step for the rows of one KV head (one table lookup per block, not per
//! token) and for the memory of the next step (all KV heads) as contiguous spans to request
//! ahead.

use super::super::simd::Span;
use crate::kv::{BlockTable, KvSpec};

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

    /// Appends to `out` contiguous spans that together hold the rows of tokens `t0..t1` of every
    /// KV head (and may hold more, never outside the buffer), in the order they are best read.
    fn spans(&self, seq: usize, t0: usize, t1: usize, out: &mut Vec<Span>);
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

    /// One table lookup per block rather than per token, and one division per call: at block
    /// size 1 a division per token cost more than the rest of the lookup. Block size 1 (a lookup
    /// per token) has a loop of its own, a multiply-add per row: the general loop's bookkeeping
    /// per block was 40 instructions a row there (callgrind).
    fn rows(&self, seq: usize, head: usize, t0: usize, out: &mut [usize]) {
        let (bs, hd) = (self.spec.block_size, self.spec.head_dim);
        let table = self.table.row(seq);
        // Row = block * block_elems + head_base + offset * hd.
        let block_elems = self.spec.elem_offset(1, 0, 0, 0);
        let head_base = self.spec.elem_offset(0, head, 0, 0);
        if bs == 1 {
            let entries = &table[t0..t0 + out.len()];
            for (r, &b) in out.iter_mut().zip(entries) {
                *r = b as usize * block_elems + head_base;
            }
            return;
        }
        let (mut entry, mut offset) = (t0 / bs, t0 % bs);
        let mut i = 0;
        while i < out.len() {
            let run = (bs - offset).min(out.len() - i);
            let base = table[entry] as usize * block_elems + head_base + offset * hd;
            for (j, r) in out[i..i + run].iter_mut().enumerate() {
                *r = base + j * hd;
            }
            (i, entry, offset) = (i + run, entry + 1, 0);
        }
    }

    /// A block the tokens fill is one span (`[num_kv_heads, block_size, head_dim]` in a row); a
    /// block they cover in part gives one span per KV head. As in [`Self::rows`], one division.
    fn spans(&self, seq: usize, t0: usize, t1: usize, out: &mut Vec<Span>) {
        let (bs, hd) = (self.spec.block_size, self.spec.head_dim);
        let table = self.table.row(seq);
        let (mut entry, mut offset) = (t0 / bs, t0 % bs);
        let mut t = t0;
        while t < t1 {
            let block = table[entry] as usize;
            let run = (bs - offset).min(t1 - t);
            if run == bs {
                out.push(Span {
                    start: self.spec.elem_offset(block, 0, 0, 0),
                    len: self.spec.num_kv_heads * bs * hd,
                });
            } else {
                out.extend((0..self.spec.num_kv_heads).map(|head| Span {
                    start: self.spec.elem_offset(block, head, offset, 0),
                    len: run * hd,
                }));
            }
            (t, entry, offset) = (t + run, entry + 1, 0);
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

    /// One span per KV head.
    fn spans(&self, seq: usize, t0: usize, t1: usize, out: &mut Vec<Span>) {
        if t1 > t0 {
            out.extend((0..self.num_kv_heads).map(|head| Span {
                start: self.row(seq, head, t0),
                len: (t1 - t0) * self.head_dim,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every row of every head of `t0..t1` lies in one span, and every span in the buffer.
    fn spans_cover_the_rows(
        rows: &impl RowLocator,
        seq: usize,
        heads: usize,
        hd: usize,
        (t0, t1): (usize, usize),
        buffer: usize,
    ) {
        let mut spans = Vec::new();
        rows.spans(seq, t0, t1, &mut spans);
        assert!(spans.iter().all(|s| s.start + s.len <= buffer));
        for head in 0..heads {
            for t in t0..t1 {
                let r = rows.row(seq, head, t);
                assert!(
                    spans
                        .iter()
                        .any(|s| s.start <= r && r + hd <= s.start + s.len),
                    "seq {seq} head {head} token {t}"
                );
            }
        }
    }

    #[test]
    fn paged_rows_and_spans_agree_with_row_by_row_lookup() {
        let spec = KvSpec::new(2, 16, 4, crate::kv::Dtype::F16).unwrap();
        let rows = vec![vec![3u32, 0, 5], vec![1, 2]];
        let table = BlockTable::from_rows(&rows, &[11, 6], 4).unwrap();
        let paged = PagedRows {
            spec: &spec,
            table: &table,
        };
        let buffer = spec.pool_elems(6).unwrap();
        for (seq, len) in [(0usize, 11usize), (1, 6)] {
            for head in 0..2 {
                for t0 in 0..len {
                    let mut got = vec![0; len - t0];
                    paged.rows(seq, head, t0, &mut got);
                    let want: Vec<usize> = (t0..len).map(|t| paged.row(seq, head, t)).collect();
                    assert_eq!(got, want);
                }
            }
            for t0 in 0..len {
                for t1 in t0..=len {
                    spans_cover_the_rows(&paged, seq, 2, 16, (t0, t1), buffer);
                }
            }
        }
        // A whole block is one span; part of one, a span per head.
        let mut spans = Vec::new();
        paged.spans(0, 4, 8, &mut spans);
        assert_eq!(spans, [Span { start: 0, len: 128 }]);
        spans.clear();
        paged.spans(0, 5, 7, &mut spans);
        assert_eq!(spans.len(), 2);
    }

    #[test]
    fn contiguous_spans_cover_the_rows() {
        let rows = ContiguousRows {
            num_kv_heads: 3,
            max_len: 10,
            head_dim: 8,
        };
        for (t0, t1) in [(0, 10), (3, 4), (9, 10), (5, 5)] {
            spans_cover_the_rows(&rows, 1, 3, 8, (t0, t1), 2 * 3 * 10 * 8);
        }
    }
}
