//! `KvSpec`: the shape of one layer's paged KV cache, and the one place its layout is defined.
//!
//! Layout of each of the K and V pools (the same for both):
//! `[num_blocks, num_kv_heads, block_size, head_dim]`, row-major. A (block, head) pair is one
//! contiguous run of `block_size * head_dim` elements, so even block size 1 reads whole rows of
//! `head_dim` elements. Kernels, the CPU reference and the host launch code all use
//! [`KvSpec::elem_offset`] or the same formula written next to the kernel pointer.

use super::Dtype;
use serde::Serialize;
use thiserror::Error;

pub const MAX_BLOCK_SIZE: usize = 256;
pub const MAX_HEAD_DIM: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KvSpec {
    pub num_kv_heads: usize,
    pub head_dim: usize,
    pub block_size: usize,
    pub dtype: Dtype,
}

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SpecError {
    #[error("block size {0} is not a power of two from 1 to {MAX_BLOCK_SIZE}")]
    BlockSize(usize),
    #[error("head dim {0} is not a multiple of 16 from 16 to {MAX_HEAD_DIM}")]
    HeadDim(usize),
    #[error("number of KV heads must be at least 1")]
    NoHeads,
    #[error("number of blocks must be at least 1")]
    NoBlocks,
    #[error("{what} overflows: {detail}")]
    Overflow { what: &'static str, detail: String },
}

impl KvSpec {
    pub fn new(
        num_kv_heads: usize,
        head_dim: usize,
        block_size: usize,
        dtype: Dtype,
    ) -> Result<Self, SpecError> {
        if num_kv_heads == 0 {
            return Err(SpecError::NoHeads);
        }
        if head_dim == 0 || !head_dim.is_multiple_of(16) || head_dim > MAX_HEAD_DIM {
            return Err(SpecError::HeadDim(head_dim));
        }
        if !block_size.is_power_of_two() || block_size > MAX_BLOCK_SIZE {
            return Err(SpecError::BlockSize(block_size));
        }
        let spec = KvSpec {
            num_kv_heads,
            head_dim,
            block_size,
            dtype,
        };
        spec.block_bytes()?;
        Ok(spec)
    }

    /// Elements of one token in one pool (K or V): every KV head's vector.
    pub fn elems_per_token(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }

    /// Bytes of one token in K and V together.
    pub fn kv_bytes_per_token(&self) -> Result<usize, SpecError> {
        self.elems_per_token()
            .checked_mul(self.dtype.bytes() * 2)
            .ok_or_else(|| overflow("bytes per token", self))
    }

    /// Elements of one block in one pool.
    pub fn elems_per_block(&self) -> usize {
        self.block_size * self.elems_per_token()
    }

    /// Bytes of one block in one pool (K or V).
    pub fn block_bytes(&self) -> Result<usize, SpecError> {
        self.num_kv_heads
            .checked_mul(self.head_dim)
            .and_then(|e| e.checked_mul(self.block_size))
            .and_then(|e| e.checked_mul(self.dtype.bytes()))
            .ok_or_else(|| overflow("bytes per block", self))
    }

    /// Elements of a whole pool (K or V) of `num_blocks` blocks.
    pub fn pool_elems(&self, num_blocks: usize) -> Result<usize, SpecError> {
        if num_blocks == 0 {
            return Err(SpecError::NoBlocks);
        }
        self.elems_per_block()
            .checked_mul(num_blocks)
            .filter(|e| e.checked_mul(self.dtype.bytes()).is_some())
            .ok_or_else(|| overflow("pool size", self))
    }

    /// Offset in elements of (block, head, token within block, dim) in a pool:
    /// `((block * num_kv_heads + head) * block_size + token) * head_dim + dim`.
    #[inline]
    pub fn elem_offset(&self, block: usize, head: usize, token: usize, dim: usize) -> usize {
        ((block * self.num_kv_heads + head) * self.block_size + token) * self.head_dim + dim
    }

    /// Blocks needed to hold `tokens` tokens.
    pub fn blocks_for(&self, tokens: usize) -> usize {
        tokens.div_ceil(self.block_size)
    }
}

fn overflow(what: &'static str, spec: &KvSpec) -> SpecError {
    SpecError::Overflow {
        what,
        detail: format!("{spec:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates_every_field() {
        assert!(KvSpec::new(8, 128, 16, Dtype::F16).is_ok());
        for bs in [0, 3, 12, 512] {
            assert_eq!(
                KvSpec::new(8, 128, bs, Dtype::F16),
                Err(SpecError::BlockSize(bs))
            );
        }
        for hd in [0, 8, 100, 272] {
            assert_eq!(
                KvSpec::new(8, hd, 16, Dtype::F16),
                Err(SpecError::HeadDim(hd))
            );
        }
        assert_eq!(KvSpec::new(0, 128, 16, Dtype::F16), Err(SpecError::NoHeads));
        assert!(matches!(
            KvSpec::new(usize::MAX / 64, 128, 16, Dtype::F16),
            Err(SpecError::Overflow { .. })
        ));
    }

    #[test]
    fn sizes_for_llama3_8b() {
        let s = KvSpec::new(8, 128, 16, Dtype::F16).unwrap();
        assert_eq!(s.kv_bytes_per_token().unwrap(), 8 * 128 * 2 * 2);
        assert_eq!(s.block_bytes().unwrap(), 16 * 8 * 128 * 2);
        assert_eq!(s.blocks_for(0), 0);
        assert_eq!(s.blocks_for(16), 1);
        assert_eq!(s.blocks_for(17), 2);
        assert_eq!(s.pool_elems(0), Err(SpecError::NoBlocks));
    }

    #[test]
    fn offsets_are_dense_and_distinct() {
        let s = KvSpec::new(2, 16, 4, Dtype::F32).unwrap();
        let mut seen = vec![false; s.pool_elems(3).unwrap()];
        for b in 0..3 {
            for h in 0..2 {
                for t in 0..4 {
                    for d in 0..16 {
                        let o = s.elem_offset(b, h, t, d);
                        assert!(!seen[o]);
                        seen[o] = true;
                    }
                }
            }
        }
        assert!(seen.iter().all(|&x| x));
    }
}
