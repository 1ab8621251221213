//! A random decode-attention problem: queries, a paged pool with shuffled physical blocks, its
//! block table, and the same K/V laid out contiguously for the baseline.
//!
//! `Problem<T>` stores K and V as q is (f16, bf16, f32); `Problem<T, KV>` with an fp8 `KV`
//! (`Fp8E4m3`, `Fp8E5m2`) stores them quantised with per-KV-head scales (vLLM's convention:
//! stored = fp8(x / scale), read = float(code) * scale), chosen by [`ProblemOptions::scales`].
//!
//! K and V (both layouts) lie in memory advised for transparent huge pages where the kernel offers
//! them, as the CPU memory limit's does ([`huge_vec`]).
//!
//! Every slot no token owns — the tail of each sequence's last block, the contiguous rows past a
//! sequence's length — holds NaN (the NaN code in fp8), so a kernel that reads past a sequence
//! cannot pass a check.

use super::values::{scales_for, Scales, Tensor, Values};
use super::AttentionShape;
use crate::device::cpu::attention::{decode_attention_scaled, ContiguousRows, PagedRows};
use crate::device::cpu::pages::huge_vec;
use crate::host_memory::{self, elems_bytes};
use crate::kv::{BlockTable, KvElem, KvSpec, SpecError, TableError};
use crate::launch::{AttentionData, Layout};
use rand::{seq::SliceRandom, Rng, SeedableRng};
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
    #[error("queries are {0}: q and the output must be f16, bf16 or f32 (only K and V are fp8)")]
    QueryDtype(crate::kv::Dtype),
    #[error("scale {0} is not a positive finite number")]
    Scale(f32),
    #[error("{what} {value} is not a positive finite number")]
    NotPositive { what: &'static str, value: f32 },
    #[error(transparent)]
    TooLarge(#[from] crate::host_memory::TooLarge),
}

/// How a problem's K and V are drawn and stored.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProblemOptions {
    pub values: Values,
    /// Scales of an fp8 cache (ignored otherwise).
    pub scales: Scales,
    /// Keep K and V unquantised too (contiguous, f32), for the accuracy of a quantised cache.
    pub keep_exact: bool,
}

impl Default for ProblemOptions {
    fn default() -> Self {
        ProblemOptions {
            values: Values::Uniform,
            scales: Scales::Calibrated,
            keep_exact: false,
        }
    }
}

/// The block table: each sequence's blocks drawn from a random permutation of the pool, so
/// that neighbouring blocks of a sequence are not neighbours in memory.
fn shuffled_table(
    blocks_per_seq: &[usize],
    num_blocks: usize,
    lens: &[usize],
    block_size: usize,
    rng: &mut rand::rngs::StdRng,
) -> Result<BlockTable, ProblemError> {
    let mut physical: Vec<u32> = (0..num_blocks as u32).collect();
    physical.shuffle(rng);
    let mut rows = Vec::with_capacity(lens.len());
    let mut next = 0;
    for &n in blocks_per_seq {
        rows.push(physical[next..next + n].to_vec());
        next += n;
    }
    let table = BlockTable::from_rows(&rows, lens, block_size)?;
    Ok(table)
}

pub struct Problem<T, KV = T> {
    pub shape: AttentionShape,
    pub spec: KvSpec,
    pub lens: Vec<i32>,
    /// `[num_seqs, num_heads, head_dim]`
    pub q: Vec<T>,
    pub num_blocks: usize,
    /// `[num_blocks, num_kv_heads, block_size, head_dim]`
    pub k: Vec<KV>,
    pub v: Vec<KV>,
    pub table: BlockTable,
    /// Longest sequence: the row length of the contiguous cache.
    pub max_len: usize,
    /// `[num_seqs, num_kv_heads, max_len, head_dim]`
    pub k_contiguous: Vec<KV>,
    pub v_contiguous: Vec<KV>,
    /// `[num_kv_heads]`: K = stored * k_scale (all 1 unless KV is fp8).
    pub k_scale: Vec<f32>,
    pub v_scale: Vec<f32>,
    /// K and V before quantisation, `[num_seqs, num_kv_heads, max_len, head_dim]`, when kept.
    pub exact: Option<(Vec<f32>, Vec<f32>)>,
}

impl<T: KvElem, KV: KvElem> Problem<T, KV> {
    pub fn new(
        shape: AttentionShape,
        block_size: usize,
        lens: &[usize],
        seed: u64,
    ) -> Result<Self, ProblemError> {
        Self::with_options(shape, block_size, lens, seed, ProblemOptions::default())
    }

    pub fn with_options(
        shape: AttentionShape,
        block_size: usize,
        lens: &[usize],
        seed: u64,
        opts: ProblemOptions,
    ) -> Result<Self, ProblemError> {
        Self::check(shape, lens, &opts)?;
        let spec = KvSpec::new(shape.num_kv_heads, shape.head_dim, block_size, KV::DTYPE)?;
        let need = host_bytes(shape, block_size, lens, KV::DTYPE, opts);
        host_memory::ensure_fits(need, &describe(lens, "an attention problem"))?;
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let blocks_per_seq: Vec<usize> = lens.iter().map(|&l| spec.blocks_for(l)).collect();
        let num_blocks = blocks_per_seq.iter().sum::<usize>().max(1);
        let table = shuffled_table(&blocks_per_seq, num_blocks, lens, block_size, &mut rng)?;
        let hd = shape.head_dim;
        let max_len = lens.iter().copied().max().unwrap_or(0).max(1);
        let q_tensor = Tensor {
            values: Values::Uniform,
            seed: rng.random(),
            num_kv_heads: 1,
            max_len: 1,
            head_dim: 1,
            elems: lens.len() * shape.num_heads * hd,
        };
        let q = q_tensor.store::<T>(&[1.0]);
        let tensor = |seed| Tensor {
            values: opts.values,
            seed,
            num_kv_heads: shape.num_kv_heads,
            max_len,
            head_dim: hd,
            elems: lens.len() * shape.num_kv_heads * max_len * hd,
        };
        let (k_tensor, v_tensor) = (tensor(rng.random()), tensor(rng.random()));
        let (fixed_k, fixed_v) = match opts.scales {
            Scales::Fixed(k, v) => (k, v),
            _ => (1.0, 1.0),
        };
        let k_scale = scales_for(KV::DTYPE, &k_tensor, opts.scales, fixed_k);
        let v_scale = scales_for(KV::DTYPE, &v_tensor, opts.scales, fixed_v);
        let k_contiguous = k_tensor.store::<KV>(&k_scale);
        let v_contiguous = v_tensor.store::<KV>(&v_scale);
        let exact = opts
            .keep_exact
            .then(|| (k_tensor.exact(), v_tensor.exact()));
        let nan = KV::from_f32(f32::NAN);
        // The contiguous rows are the source of truth; the pool receives the same rows.
        let pool_elems = spec.pool_elems(num_blocks)?;
        let k = huge_vec(pool_elems, nan);
        let v = huge_vec(pool_elems, nan);
        let mut p = Problem {
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
            k_scale,
            v_scale,
            exact,
        };
        p.fill_pool(lens);
        Ok(p)
    }

    /// The settings a problem needs: sequences, whole query-head groups, a query dtype that is
    /// not fp8, positive scales and magnitudes.
    fn check(
        shape: AttentionShape,
        lens: &[usize],
        opts: &ProblemOptions,
    ) -> Result<(), ProblemError> {
        if lens.is_empty() {
            return Err(ProblemError::Empty);
        }
        if shape.num_kv_heads == 0 || !shape.num_heads.is_multiple_of(shape.num_kv_heads) {
            return Err(ProblemError::Group(shape.num_heads, shape.num_kv_heads));
        }
        if T::DTYPE.fp8().is_some() {
            return Err(ProblemError::QueryDtype(T::DTYPE));
        }
        let positive = |what, value: f32| match value.is_finite() && value > 0.0 {
            true => Ok(()),
            false => Err(ProblemError::NotPositive { what, value }),
        };
        positive("the softmax scale", shape.scale)?;
        if let Values::Activations {
            scale, magnitude, ..
        } = opts.values
        {
            positive("the activation scale", scale)?;
            positive("the outlier magnitude", magnitude)?;
        }
        if let Scales::Fixed(k, v) = opts.scales {
            if let Some(bad) = [k, v].into_iter().find(|s| !(s.is_finite() && *s > 0.0)) {
                return Err(ProblemError::Scale(bad));
            }
        }
        Ok(())
    }

    /// Copies each sequence's contiguous rows into its blocks of the pool; rows past a
    /// sequence's length become NaN in the contiguous cache (and the exact copy), so a reader
    /// that strays there shows it.
    fn fill_pool(&mut self, lens: &[usize]) {
        let (shape, spec, table, max_len) = (&self.shape, &self.spec, &self.table, self.max_len);
        let hd = shape.head_dim;
        let nan = KV::from_f32(f32::NAN);
        let (k, v) = (&mut self.k, &mut self.v);
        let (k_contiguous, v_contiguous) = (&mut self.k_contiguous, &mut self.v_contiguous);
        let exact = &mut self.exact;
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
                        if let Some((ek, ev)) = exact.as_mut() {
                            ek[src..src + hd].fill(f32::NAN);
                            ev[src..src + hd].fill(f32::NAN);
                        }
                    }
                }
            }
        }
    }

    /// The problem as the launchers take it.
    pub fn data(&self) -> AttentionData<'_, T, KV> {
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
            k_scale: &self.k_scale,
            v_scale: &self.v_scale,
        }
    }

    /// The CPU implementation's decode attention over this problem's paged or contiguous cache,
    /// into `out` (`[num_seqs, num_heads, head_dim]`).
    pub fn attend_cpu(&self, layout: Layout, out: &mut [T]) {
        let (shape, ks, vs) = (&self.shape, &self.k_scale, &self.v_scale);
        match layout {
            Layout::Paged => {
                let rows = PagedRows {
                    spec: &self.spec,
                    table: &self.table,
                };
                decode_attention_scaled(
                    shape, &self.q, &self.k, &self.v, ks, vs, &self.lens, &rows, out,
                )
            }
            Layout::Contiguous => {
                let rows = ContiguousRows {
                    num_kv_heads: shape.num_kv_heads,
                    max_len: self.max_len,
                    head_dim: shape.head_dim,
                };
                let (k, v) = (&self.k_contiguous, &self.v_contiguous);
                decode_attention_scaled(shape, &self.q, k, v, ks, vs, &self.lens, &rows, out)
            }
        }
    }

    /// Bytes of K and V that one decode step must read: every token of every sequence, once.
    pub fn kv_bytes(&self) -> usize {
        let tokens: usize = self.lens.iter().map(|&l| l as usize).sum();
        tokens * self.spec.elems_per_token() * 2 * std::mem::size_of::<KV>()
    }
}

/// Host bytes of the problem [`Problem::with_options`] builds from `lens` with K and V stored as
/// `kv` (checked before anything is allocated): q, K and V paged and contiguous, and the
/// unquantised copy when kept.
pub fn host_bytes(
    shape: AttentionShape,
    block_size: usize,
    lens: &[usize],
    kv: crate::kv::Dtype,
    opts: ProblemOptions,
) -> u64 {
    let max_len = lens.iter().copied().max().unwrap_or(0).max(1);
    let rows = lens.len().saturating_mul(shape.num_kv_heads);
    let contiguous = elems_bytes(rows.saturating_mul(max_len), shape.head_dim);
    let blocks = lens
        .iter()
        .fold(0usize, |n, &l| {
            n.saturating_add(l.div_ceil(block_size.max(1)))
        })
        .max(1);
    let pool = elems_bytes(blocks, block_size)
        .saturating_mul(shape.num_kv_heads as u64)
        .saturating_mul(shape.head_dim as u64);
    let exact = if opts.keep_exact { 4 } else { 0 };
    let q =
        elems_bytes(lens.len().saturating_mul(shape.num_heads), shape.head_dim).saturating_mul(4);
    [
        q,
        contiguous.saturating_mul(2 * (kv.bytes() + exact) as u64),
        pool.saturating_mul(2 * kv.bytes() as u64),
    ]
    .into_iter()
    .fold(0u64, u64::saturating_add)
}

/// `what` with the batch and the longest context: "attention (batch 64, longest context 4096)".
pub fn describe(lens: &[usize], what: &str) -> String {
    let longest = lens.iter().copied().max().unwrap_or(0);
    format!("{what} (batch {}, longest context {longest})", lens.len())
}
