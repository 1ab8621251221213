//! A random decode-attention problem: queries, a paged pool with shuffled physical blocks, its
//! block table, and the same K/V laid out contiguously for the baseline.
//!
//! K and V (both layouts) lie in memory advised for transparent huge pages where the kernel offers
//! them, as the CPU memory limit's does ([`huge_vec`]).
//!
//! Every slot no token owns — the tail of each sequence's last block, the contiguous rows past a
//! sequence's length — holds NaN, so a kernel that reads past a sequence cannot pass a check.

use super::AttentionShape;
use crate::device::cpu::pages::huge_vec;
use crate::kv::{BlockTable, KvElem, KvSpec, SpecError, TableError};
use crate::launch::AttentionData;
use rand::{seq::SliceRandom, Rng, SeedableRng};
use rayon::prelude::*;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ProblemError {
    #[error(transparent)]
    Spec(#[from] SpecError),
    #[error(transparent)]
    Table(#[from] TableError),
    #[error("{0} query heads are not a multiple of {1} KV heads")]
    Group(usize, usize),
    #[error("the batch is empty")]
    Empty,
}

pub struct Problem<T> {
    pub shape: AttentionShape,
    pub spec: KvSpec,
    pub lens: Vec<i32>,
    /// `[num_seqs, num_heads, head_dim]`
    pub q: Vec<T>,
    pub num_blocks: usize,
    /// `[num_blocks, num_kv_heads, block_size, head_dim]`
    pub k: Vec<T>,
    pub v: Vec<T>,
    pub table: BlockTable,
    /// Longest sequence: the row length of the contiguous cache.
    pub max_len: usize,
    /// `[num_seqs, num_kv_heads, max_len, head_dim]`
    pub k_contiguous: Vec<T>,
    pub v_contiguous: Vec<T>,
}

/// Uniform values in [-1, 1), in parallel, reproducible for a seed whatever the thread count.
fn random_values<T: KvElem>(n: usize, seed: u64) -> Vec<T> {
    const CHUNK: usize = 1 << 16;
    let mut v = huge_vec(n, T::default());
    v.par_chunks_mut(CHUNK).enumerate().for_each(|(i, c)| {
        let mut rng = rand::rngs::StdRng::seed_from_u64(
            seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        );
        c.iter_mut()
            .for_each(|x| *x = T::from_f32(rng.random_range(-1.0..1.0)));
    });
    v
}

impl<T: KvElem> Problem<T> {
    pub fn new(
        shape: AttentionShape,
        block_size: usize,
        lens: &[usize],
        seed: u64,
    ) -> Result<Self, ProblemError> {
        if lens.is_empty() {
            return Err(ProblemError::Empty);
        }
        if shape.num_kv_heads == 0 || !shape.num_heads.is_multiple_of(shape.num_kv_heads) {
            return Err(ProblemError::Group(shape.num_heads, shape.num_kv_heads));
        }
        let spec = KvSpec::new(shape.num_kv_heads, shape.head_dim, block_size, T::DTYPE)?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let blocks_per_seq: Vec<usize> = lens.iter().map(|&l| spec.blocks_for(l)).collect();
        let num_blocks = blocks_per_seq.iter().sum::<usize>().max(1);
        let mut physical: Vec<u32> = (0..num_blocks as u32).collect();
        physical.shuffle(&mut rng);
        let mut rows = Vec::with_capacity(lens.len());
        let mut next = 0;
        for &n in &blocks_per_seq {
            rows.push(physical[next..next + n].to_vec());
            next += n;
        }
        let table = BlockTable::from_rows(&rows, lens, block_size)?;
        let hd = shape.head_dim;
        let max_len = lens.iter().copied().max().unwrap_or(0).max(1);
        let q = random_values(lens.len() * shape.num_heads * hd, rng.random());
        let contiguous_elems = lens.len() * shape.num_kv_heads * max_len * hd;
        let mut k_contiguous = random_values::<T>(contiguous_elems, rng.random());
        let mut v_contiguous = random_values::<T>(contiguous_elems, rng.random());
        let nan = T::from_f32(f32::NAN);
        // The contiguous rows are the source of truth; the pool receives the same rows.
        let pool_elems = spec.pool_elems(num_blocks)?;
        let mut k = huge_vec(pool_elems, nan);
        let mut v = huge_vec(pool_elems, nan);
        for (seq, &len) in lens.iter().enumerate() {
            for head in 0..shape.num_kv_heads {
                let base = (seq * shape.num_kv_heads + head) * max_len;
                for t in 0..max_len {
                    let src = (base + t) * hd;
                    if t < len {
                        let (block, offset) = table.locate(seq, t);
                        let dst = spec.elem_offset(block, head, offset, 0);
                        k[dst..dst + hd].copy_from_slice(&k_contiguous[src..src + hd]);
                        v[dst..dst + hd].copy_from_slice(&v_contiguous[src..src + hd]);
                    } else {
                        k_contiguous[src..src + hd].fill(nan);
                        v_contiguous[src..src + hd].fill(nan);
                    }
                }
            }
        }
        Ok(Problem {
            shape,
            spec,
            lens: table.lens.clone(),
            q,
            num_blocks,
            k,
            v,
            table,
            max_len,
            k_contiguous,
            v_contiguous,
        })
    }

    /// The problem as the launchers take it.
    pub fn data(&self) -> AttentionData<'_, T> {
        AttentionData {
            shape: self.shape,
            spec: &self.spec,
            lens: &self.lens,
            q: &self.q,
            k: &self.k,
            v: &self.v,
            num_blocks: self.num_blocks,
            table: &self.table,
            k_contiguous: &self.k_contiguous,
            v_contiguous: &self.v_contiguous,
            max_len: self.max_len,
        }
    }

    /// Bytes of K and V that one decode step must read: every token of every sequence, once.
    pub fn kv_bytes(&self) -> usize {
        let tokens: usize = self.lens.iter().map(|&l| l as usize).sum();
        tokens * self.spec.elems_per_token() * 2 * std::mem::size_of::<T>()
    }
}
