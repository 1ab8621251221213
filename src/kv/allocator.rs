//! The block allocator: a free list of physical blocks, a refcount per block, and sequences that
//! own lists of blocks. Forking shares every block; the first write into a shared last block copies
//! it (copy-on-write) and says which copy the device must perform.
//!
//! Only a sequence's last block can be partly filled, and it is written only while one sequence
//! holds it, so a block's fill count is one number that every holder agrees on.

use serde::Serialize;
use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct SeqId(pub u32);

impl std::fmt::Display for SeqId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "seq{}", self.0)
    }
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum AllocError {
    #[error("out of blocks: {needed} needed, {free} free")]
    OutOfBlocks { needed: usize, free: usize },
    #[error("unknown sequence {0}")]
    UnknownSequence(SeqId),
    #[error("block {0} is not held outside a sequence")]
    NotHeld(u32),
}

/// A copy the device must perform before writing: the first `tokens` slots of `src` into `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BlockCopy {
    pub src: u32,
    pub dst: u32,
    pub tokens: usize,
}

/// What appending one token did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Append {
    /// Where the token's K/V goes: `block * block_size + offset`.
    pub slot: usize,
    /// A fresh block taken from the free list for this token, if any.
    pub new_block: Option<u32>,
    /// The copy-on-write this token required, if its block was shared.
    pub copy: Option<BlockCopy>,
}

/// Slot accounting over the whole pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Usage {
    pub total_blocks: usize,
    pub free_blocks: usize,
    pub used_blocks: usize,
    /// Blocks held by more than one holder.
    pub shared_blocks: usize,
    /// Slots holding a token, counted once per physical block.
    pub filled_slots: usize,
    /// Slots allocated but not holding a token (internal fragmentation).
    pub wasted_slots: usize,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Sequence {
    blocks: Vec<u32>,
    len: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockAllocator {
    block_size: usize,
    /// Free blocks, used as a stack: the most recently freed block is reused first.
    free: Vec<u32>,
    refcount: Vec<u32>,
    /// Tokens written into each block.
    filled: Vec<u32>,
    /// References held outside sequences (see [`BlockAllocator::allocate_blocks`]).
    raw_refs: Vec<u32>,
    seqs: Vec<Option<Sequence>>,
    free_ids: Vec<u32>,
}

impl BlockAllocator {
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        assert!(block_size > 0, "block size must be positive");
        assert!(
            num_blocks <= u32::MAX as usize,
            "too many blocks for u32 ids"
        );
        BlockAllocator {
            block_size,
            free: (0..num_blocks as u32).rev().collect(),
            refcount: vec![0; num_blocks],
            filled: vec![0; num_blocks],
            raw_refs: vec![0; num_blocks],
            seqs: Vec::new(),
            free_ids: Vec::new(),
        }
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_blocks(&self) -> usize {
        self.refcount.len()
    }

    pub fn free_blocks(&self) -> usize {
        self.free.len()
    }

    pub fn refcount(&self, block: u32) -> u32 {
        self.refcount[block as usize]
    }

    /// A new, empty sequence.
    pub fn new_sequence(&mut self) -> SeqId {
        match self.free_ids.pop() {
            Some(id) => {
                self.seqs[id as usize] = Some(Sequence::default());
                SeqId(id)
            }
            None => {
                self.seqs.push(Some(Sequence::default()));
                SeqId(self.seqs.len() as u32 - 1)
            }
        }
    }

    fn seq(&self, id: SeqId) -> Result<&Sequence, AllocError> {
        self.seqs
            .get(id.0 as usize)
            .and_then(Option::as_ref)
            .ok_or(AllocError::UnknownSequence(id))
    }

    pub fn blocks(&self, id: SeqId) -> Result<&[u32], AllocError> {
        self.seq(id).map(|s| s.blocks.as_slice())
    }

    pub fn len(&self, id: SeqId) -> Result<usize, AllocError> {
        self.seq(id).map(|s| s.len)
    }

    /// Live sequences, in id order.
    pub fn sequences(&self) -> impl Iterator<Item = SeqId> + '_ {
        self.seqs
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
            .map(|(i, _)| SeqId(i as u32))
    }

    /// Blocks that appending `n` tokens to `id` would take from the free list.
    pub fn blocks_needed(&self, id: SeqId, n: usize) -> Result<usize, AllocError> {
        let seq = self.seq(id)?;
        let in_last = seq.len % self.block_size;
        let last_shared = in_last != 0
            && seq
                .blocks
                .last()
                .is_some_and(|&b| self.refcount[b as usize] > 1);
        let fresh = (seq.len + n).div_ceil(self.block_size) - seq.len.div_ceil(self.block_size);
        Ok(fresh + usize::from(last_shared && n > 0))
    }

    /// Appends `n` tokens; all or nothing: when blocks run out, nothing changes.
    pub fn append_tokens(&mut self, id: SeqId, n: usize) -> Result<Vec<Append>, AllocError> {
        let needed = self.blocks_needed(id, n)?;
        if needed > self.free.len() {
            return Err(AllocError::OutOfBlocks {
                needed,
                free: self.free.len(),
            });
        }
        Ok((0..n)
            .map(|_| self.append_token(id).expect("capacity checked above"))
            .collect())
    }

    /// Appends one token, taking a fresh block or copying a shared last block when needed.
    pub fn append_token(&mut self, id: SeqId) -> Result<Append, AllocError> {
        let needed = self.blocks_needed(id, 1)?;
        if needed > self.free.len() {
            return Err(AllocError::OutOfBlocks {
                needed,
                free: self.free.len(),
            });
        }
        let bs = self.block_size;
        let seq = self.seqs[id.0 as usize].as_mut().expect("checked above");
        let offset = seq.len % bs;
        let mut new_block = None;
        let mut copy = None;
        if offset == 0 {
            let b = self.free.pop().expect("capacity checked");
            self.refcount[b as usize] = 1;
            self.filled[b as usize] = 0;
            seq.blocks.push(b);
            new_block = Some(b);
        } else {
            let last = *seq.blocks.last().expect("partly filled block exists");
            if self.refcount[last as usize] > 1 {
                let b = self.free.pop().expect("capacity checked");
                self.refcount[last as usize] -= 1;
                self.refcount[b as usize] = 1;
                self.filled[b as usize] = offset as u32;
                *seq.blocks.last_mut().unwrap() = b;
                new_block = Some(b);
                copy = Some(BlockCopy {
                    src: last,
                    dst: b,
                    tokens: offset,
                });
            }
        }
        let block = *seq.blocks.last().unwrap();
        self.filled[block as usize] += 1;
        seq.len += 1;
        Ok(Append {
            slot: block as usize * bs + offset,
            new_block,
            copy,
        })
    }

    /// A child that shares every block of `parent`. No block is copied until one is written.
    pub fn fork(&mut self, parent: SeqId) -> Result<SeqId, AllocError> {
        let seq = self.seq(parent)?.clone();
        for &b in &seq.blocks {
            self.refcount[b as usize] += 1;
        }
        let child = self.new_sequence();
        self.seqs[child.0 as usize] = Some(seq);
        Ok(child)
    }

    /// Frees the sequence; its blocks return to the free list once no one else holds them.
    pub fn free_sequence(&mut self, id: SeqId) -> Result<(), AllocError> {
        self.seq(id)?;
        let seq = self.seqs[id.0 as usize].take().unwrap();
        for b in seq.blocks.into_iter().rev() {
            self.release(b);
        }
        self.free_ids.push(id.0);
        Ok(())
    }

    fn release(&mut self, b: u32) {
        let rc = &mut self.refcount[b as usize];
        *rc -= 1;
        if *rc == 0 {
            self.filled[b as usize] = 0;
            self.free.push(b);
        }
    }

    /// Takes `n` whole blocks for a holder outside the sequence API (a prefix cache, say), marked
    /// full. All or nothing.
    pub fn allocate_blocks(&mut self, n: usize) -> Result<Vec<u32>, AllocError> {
        if n > self.free.len() {
            return Err(AllocError::OutOfBlocks {
                needed: n,
                free: self.free.len(),
            });
        }
        let taken = self.free.split_off(self.free.len() - n);
        for &b in &taken {
            self.refcount[b as usize] = 1;
            self.raw_refs[b as usize] = 1;
            self.filled[b as usize] = self.block_size as u32;
        }
        Ok(taken)
    }

    /// One more outside reference to a block already in use.
    pub fn retain_block(&mut self, b: u32) -> Result<(), AllocError> {
        if self.refcount.get(b as usize).is_none_or(|&rc| rc == 0) {
            return Err(AllocError::NotHeld(b));
        }
        self.refcount[b as usize] += 1;
        self.raw_refs[b as usize] += 1;
        Ok(())
    }

    /// Drops an outside reference taken by [`Self::allocate_blocks`] or [`Self::retain_block`].
    pub fn release_block(&mut self, b: u32) -> Result<(), AllocError> {
        if self.raw_refs.get(b as usize).is_none_or(|&r| r == 0) {
            return Err(AllocError::NotHeld(b));
        }
        self.raw_refs[b as usize] -= 1;
        self.release(b);
        Ok(())
    }

    pub fn usage(&self) -> Usage {
        let total = self.num_blocks();
        let used = total - self.free.len();
        let filled: usize = (0..total)
            .filter(|&b| self.refcount[b] > 0)
            .map(|b| self.filled[b] as usize)
            .sum();
        Usage {
            total_blocks: total,
            free_blocks: self.free.len(),
            used_blocks: used,
            shared_blocks: self.refcount.iter().filter(|&&rc| rc > 1).count(),
            filled_slots: filled,
            wasted_slots: used * self.block_size - filled,
        }
    }

    /// Checks every invariant; used by the property tests. Returns the first violation found.
    pub fn check_invariants(&self) -> Result<(), String> {
        let n = self.num_blocks();
        let mut holders = self.raw_refs.clone();
        for (i, seq) in self.seqs.iter().enumerate() {
            let Some(seq) = seq else { continue };
            if seq.blocks.len() != seq.len.div_ceil(self.block_size) {
                return Err(format!(
                    "seq{i}: {} blocks for {} tokens",
                    seq.blocks.len(),
                    seq.len
                ));
            }
            for (j, &b) in seq.blocks.iter().enumerate() {
                holders[b as usize] += 1;
                let expect = if j + 1 < seq.blocks.len() || seq.len % self.block_size == 0 {
                    self.block_size
                } else {
                    seq.len % self.block_size
                };
                if self.filled[b as usize] as usize != expect {
                    return Err(format!(
                        "seq{i}: block {b} filled {} but holds {expect} tokens",
                        self.filled[b as usize]
                    ));
                }
            }
        }
        let mut is_free = vec![false; n];
        for &b in &self.free {
            if std::mem::replace(&mut is_free[b as usize], true) {
                return Err(format!("block {b} twice on the free list"));
            }
        }
        for b in 0..n {
            if holders[b] != self.refcount[b] {
                return Err(format!(
                    "block {b}: refcount {} but {} holders",
                    self.refcount[b], holders[b]
                ));
            }
            if is_free[b] == (self.refcount[b] > 0) {
                return Err(format!(
                    "block {b}: free {} with refcount {}",
                    is_free[b], self.refcount[b]
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_fills_blocks_in_order() {
        let mut a = BlockAllocator::new(4, 2);
        let s = a.new_sequence();
        let slots: Vec<usize> = a
            .append_tokens(s, 3)
            .unwrap()
            .iter()
            .map(|x| x.slot)
            .collect();
        // The free list hands out block 0 first, then 1.
        assert_eq!(slots, vec![0, 1, 2]);
        assert_eq!(a.blocks(s).unwrap(), &[0, 1]);
        let u = a.usage();
        assert_eq!((u.used_blocks, u.filled_slots, u.wasted_slots), (2, 3, 1));
    }

    #[test]
    fn fork_then_write_copies_only_the_shared_partial_block() {
        let mut a = BlockAllocator::new(8, 4);
        let p = a.new_sequence();
        a.append_tokens(p, 6).unwrap(); // blocks 0 (full), 1 (2 of 4)
        let c = a.fork(p).unwrap();
        assert_eq!(a.usage().shared_blocks, 2);
        let w = a.append_token(c).unwrap();
        assert_eq!(
            w.copy,
            Some(BlockCopy {
                src: 1,
                dst: 2,
                tokens: 2
            })
        );
        assert_eq!(w.slot, 2 * 4 + 2);
        // The parent now holds block 1 alone and writes in place.
        let w = a.append_token(p).unwrap();
        assert_eq!((w.copy, w.slot), (None, 4 + 2));
        assert_eq!(a.blocks(c).unwrap(), &[0, 2]);
        assert_eq!(a.refcount(0), 2);
        a.check_invariants().unwrap();
    }

    #[test]
    fn out_of_blocks_changes_nothing() {
        let mut a = BlockAllocator::new(2, 4);
        let s = a.new_sequence();
        a.append_tokens(s, 5).unwrap();
        let before = format!("{:?}", a);
        assert_eq!(
            a.append_tokens(s, 4),
            Err(AllocError::OutOfBlocks { needed: 1, free: 0 })
        );
        assert_eq!(format!("{:?}", a), before);
        a.free_sequence(s).unwrap();
        assert_eq!(a.free_blocks(), 2);
        assert_eq!(a.free_sequence(s), Err(AllocError::UnknownSequence(s)));
    }

    #[test]
    fn raw_blocks_count_as_holders() {
        let mut a = BlockAllocator::new(3, 4);
        let got = a.allocate_blocks(2).unwrap();
        a.retain_block(got[0]).unwrap();
        a.check_invariants().unwrap();
        a.release_block(got[0]).unwrap();
        a.release_block(got[0]).unwrap();
        assert_eq!(a.release_block(got[0]), Err(AllocError::NotHeld(got[0])));
        assert_eq!(a.free_blocks(), 2);
        a.check_invariants().unwrap();
    }
}
