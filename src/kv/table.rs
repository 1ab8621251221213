//! Block tables: each sequence's logical → physical block list, flattened into one i32 array with a
//! fixed row stride (`[num_seqs, stride]`) as the kernels read it, plus each sequence's length.

use super::{BlockAllocator, SeqId};
use thiserror::Error;

/// Padding past a sequence's last block: never read by a correct kernel, and out of range for any
/// pool, so a wrong read cannot go unnoticed.
pub const PAD: i32 = -1;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum TableError {
    #[error("sequence {seq}: {tokens} tokens need {needed} blocks, the row has {have}")]
    ShortRow {
        seq: usize,
        tokens: usize,
        needed: usize,
        have: usize,
    },
    #[error("sequence {seq}, logical block {index}: physical block {block} outside the pool of {num_blocks}")]
    OutOfRange {
        seq: usize,
        index: usize,
        block: i64,
        num_blocks: usize,
    },
    #[error("{0} does not fit the i32 entries of a block table")]
    TooLarge(String),
    #[error(transparent)]
    Alloc(#[from] super::AllocError),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockTable {
    pub block_size: usize,
    /// Entries per row: the most blocks any sequence holds.
    pub stride: usize,
    /// `[num_seqs, stride]`, padded with [`PAD`].
    pub entries: Vec<i32>,
    /// Tokens per sequence.
    pub lens: Vec<i32>,
}

impl BlockTable {
    /// Where each sequence starts when every sequence's tokens are laid end to end (the copy-out
    /// gather's output), and the total.
    pub fn token_offsets(&self) -> (Vec<usize>, usize) {
        let mut offsets = Vec::with_capacity(self.num_seqs());
        let mut total = 0;
        for &len in &self.lens {
            offsets.push(total);
            total += len.max(0) as usize;
        }
        (offsets, total)
    }

    /// Builds a table from explicit rows; each row must hold enough blocks for its length.
    pub fn from_rows(
        rows: &[Vec<u32>],
        lens: &[usize],
        block_size: usize,
    ) -> Result<Self, TableError> {
        assert_eq!(rows.len(), lens.len(), "one length per row");
        let stride = rows.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let mut entries = vec![PAD; rows.len() * stride];
        for (seq, (row, &tokens)) in rows.iter().zip(lens).enumerate() {
            let needed = tokens.div_ceil(block_size);
            if row.len() < needed {
                return Err(TableError::ShortRow {
                    seq,
                    tokens,
                    needed,
                    have: row.len(),
                });
            }
            for (i, &b) in row.iter().enumerate() {
                entries[seq * stride + i] =
                    i32::try_from(b).map_err(|_| TableError::TooLarge(format!("block {b}")))?;
            }
        }
        let lens = lens
            .iter()
            .map(|&l| i32::try_from(l).map_err(|_| TableError::TooLarge(format!("length {l}"))))
            .collect::<Result<_, _>>()?;
        Ok(BlockTable {
            block_size,
            stride,
            entries,
            lens,
        })
    }

    /// The table of the given sequences of an allocator, in the order given.
    pub fn from_allocator(alloc: &BlockAllocator, seqs: &[SeqId]) -> Result<Self, TableError> {
        let mut rows = Vec::with_capacity(seqs.len());
        let mut lens = Vec::with_capacity(seqs.len());
        for &s in seqs {
            rows.push(alloc.blocks(s)?.to_vec());
            lens.push(alloc.len(s)?);
        }
        Self::from_rows(&rows, &lens, alloc.block_size())
    }

    pub fn num_seqs(&self) -> usize {
        self.lens.len()
    }

    pub fn row(&self, seq: usize) -> &[i32] {
        &self.entries[seq * self.stride..(seq + 1) * self.stride]
    }

    /// Physical block and offset of token `t` of sequence `seq`: `block_table[t / B]`, `t % B`.
    #[inline]
    pub fn locate(&self, seq: usize, t: usize) -> (usize, usize) {
        let b = self.entries[seq * self.stride + t / self.block_size];
        (b as usize, t % self.block_size)
    }

    /// Every entry a kernel will read (those covering each sequence's tokens) lies in the pool.
    pub fn validate(&self, num_blocks: usize) -> Result<(), TableError> {
        for seq in 0..self.num_seqs() {
            let tokens = self.lens[seq] as usize;
            let needed = tokens.div_ceil(self.block_size);
            if needed > self.stride {
                return Err(TableError::ShortRow {
                    seq,
                    tokens,
                    needed,
                    have: self.stride,
                });
            }
            for (index, &b) in self.row(seq)[..needed].iter().enumerate() {
                if b < 0 || b as usize >= num_blocks {
                    return Err(TableError::OutOfRange {
                        seq,
                        index,
                        block: b as i64,
                        num_blocks,
                    });
                }
            }
        }
        Ok(())
    }

    /// Bytes of the flattened table as a device holds it (entries and lengths).
    pub fn device_bytes(&self) -> usize {
        (self.entries.len() + self.lens.len()) * std::mem::size_of::<i32>()
    }
}

/// The slot (`block * block_size + offset`) of each appended token, as cache-write kernels take it.
pub fn slot_mapping(appends: &[super::Append]) -> Vec<i64> {
    appends.iter().map(|a| a.slot as i64).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flattens_with_padding_and_validates() {
        let t = BlockTable::from_rows(&[vec![3, 1], vec![2]], &[5, 1], 4).unwrap();
        assert_eq!(t.stride, 2);
        assert_eq!(t.entries, vec![3, 1, 2, PAD]);
        assert_eq!(t.locate(0, 4), (1, 0));
        assert_eq!(t.locate(0, 3), (3, 3));
        assert!(t.validate(4).is_ok());
        assert_eq!(
            t.validate(3),
            Err(TableError::OutOfRange {
                seq: 0,
                index: 0,
                block: 3,
                num_blocks: 3
            })
        );
    }

    #[test]
    fn short_rows_are_errors() {
        assert!(matches!(
            BlockTable::from_rows(&[vec![0]], &[5], 4),
            Err(TableError::ShortRow {
                needed: 2,
                have: 1,
                ..
            })
        ));
    }

    #[test]
    fn from_allocator_matches_the_slots_appended() {
        let mut a = BlockAllocator::new(8, 2);
        let s0 = a.new_sequence();
        let s1 = a.new_sequence();
        let w0 = a.append_tokens(s0, 3).unwrap();
        let w1 = a.append_tokens(s1, 2).unwrap();
        let t = BlockTable::from_allocator(&a, &[s0, s1]).unwrap();
        for (seq, writes) in [w0, w1].iter().enumerate() {
            for (i, w) in slot_mapping(writes).into_iter().enumerate() {
                let (b, off) = t.locate(seq, i);
                assert_eq!(w as usize, b * 2 + off);
            }
        }
    }
}
