//! The K and V values of a random problem, and the scales they are stored with.
//!
//! Values are drawn chunk by chunk, each chunk from its own seed, so they are reproducible for a
//! seed whatever the thread count, and can be drawn twice (once to find the largest magnitude a
//! scale is calibrated from, once to store) without holding them in f32.

use crate::device::cpu::pages::huge_vec;
use crate::kv::{Dtype, KvElem};
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Normal};
use rayon::prelude::*;

const CHUNK: usize = 1 << 16;

/// How K and V values are distributed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Values {
    /// Uniform in [-1, 1): what the kernels' correctness tests use.
    Uniform,
    /// Like real activations: N(0, scale²) per channel, and in `channels` channels of each KV
    /// head (fixed for a seed) `magnitude` times larger, as the outlier channels of LLM keys and
    /// values (Dettmers et al. 2022; KIVI, Liu et al. 2024).
    Activations {
        scale: f32,
        channels: usize,
        magnitude: f32,
    },
}

/// How the scales of a quantised (fp8) cache are chosen; f16, bf16 and f32 caches are unscaled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scales {
    /// The largest magnitude over the tensor / the format's largest finite value (vLLM's
    /// calibration): nothing saturates.
    Calibrated,
    /// The same, per KV head.
    CalibratedPerHead,
    /// Given: (k_scale, v_scale) for every KV head.
    Fixed(f32, f32),
}

/// Draws the values of elements `first..` (one chunk) of a tensor.
fn draw_chunk(
    values: Values,
    seed: u64,
    chunk: usize,
    first: usize,
    out: &mut [f32],
    outliers: &dyn Fn(usize) -> bool,
) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(
        seed ^ (chunk as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15),
    );
    match values {
        Values::Uniform => out
            .iter_mut()
            .for_each(|x| *x = rng.random_range(-1.0..1.0)),
        Values::Activations {
            scale, magnitude, ..
        } => {
            let normal = Normal::new(0.0f32, 1.0).expect("unit normal");
            for (j, x) in out.iter_mut().enumerate() {
                let m = if outliers(first + j) { magnitude } else { 1.0 };
                *x = normal.sample(&mut rng) * scale * m;
            }
        }
    }
}

/// A tensor `[num_seqs, num_kv_heads, max_len, head_dim]` of values, drawn chunk by chunk.
pub struct Tensor {
    pub values: Values,
    pub seed: u64,
    pub num_kv_heads: usize,
    pub max_len: usize,
    pub head_dim: usize,
    pub elems: usize,
}

impl Tensor {
    fn head_of(&self, i: usize) -> usize {
        i / (self.max_len * self.head_dim) % self.num_kv_heads
    }

    /// Whether element `i` lies in an outlier channel of its KV head.
    fn outlier(&self, i: usize) -> bool {
        match self.values {
            Values::Uniform => false,
            Values::Activations { channels, .. } => {
                let (head, d) = (self.head_of(i), i % self.head_dim);
                // `channels` channels per head, spread by a hash of (seed, head).
                let mut h = self.seed ^ (head as u64 + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                (0..channels).any(|_| {
                    h = h
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (h >> 33) as usize % self.head_dim == d
                })
            }
        }
    }

    fn chunks(&self) -> impl IndexedParallelIterator<Item = (usize, std::ops::Range<usize>)> + '_ {
        (0..self.elems.div_ceil(CHUNK))
            .into_par_iter()
            .map(move |c| (c, c * CHUNK..((c + 1) * CHUNK).min(self.elems)))
    }

    /// The largest magnitude per KV head.
    pub fn amax_per_head(&self) -> Vec<f32> {
        self.chunks()
            .map(|(c, range)| {
                let mut buf = vec![0f32; range.len()];
                let first = range.start;
                draw_chunk(self.values, self.seed, c, first, &mut buf, &|i| {
                    self.outlier(i)
                });
                let mut amax = vec![0f32; self.num_kv_heads];
                for (j, x) in buf.iter().enumerate() {
                    let h = self.head_of(first + j);
                    amax[h] = amax[h].max(x.abs());
                }
                amax
            })
            .reduce(
                || vec![0f32; self.num_kv_heads],
                |a, b| a.iter().zip(&b).map(|(x, y)| x.max(*y)).collect(),
            )
    }

    /// The values stored as `E`: `E::from_f32(x / scale[head])`.
    pub fn store<E: KvElem>(&self, scale: &[f32]) -> Vec<E> {
        // Huge pages, as the paged pools have: a contiguous cache on 4 KiB pages walked the page
        // tables every 4 KiB and read at 0.52 of the stream limit where paged read at 0.72.
        let mut out = huge_vec(self.elems, E::default());
        out.par_chunks_mut(CHUNK).enumerate().for_each(|(c, o)| {
            let first = c * CHUNK;
            let mut buf = vec![0f32; o.len()];
            draw_chunk(self.values, self.seed, c, first, &mut buf, &|i| {
                self.outlier(i)
            });
            for (j, (dst, x)) in o.iter_mut().zip(&buf).enumerate() {
                *dst = E::from_f32(x / scale[self.head_of(first + j)]);
            }
        });
        out
    }

    /// The values in f32, unquantised (for the accuracy of a quantised cache).
    pub fn exact(&self) -> Vec<f32> {
        self.store::<f32>(&vec![1.0; self.num_kv_heads])
    }
}

/// Per-KV-head scales for a cache of `dtype` holding `tensor`: all 1 unless `dtype` is fp8.
pub fn scales_for(dtype: Dtype, tensor: &Tensor, scales: Scales, fixed: f32) -> Vec<f32> {
    let heads = tensor.num_kv_heads;
    let Some(format) = dtype.fp8() else {
        return vec![1.0; heads];
    };
    let max = format.max_finite();
    let floor = f32::MIN_POSITIVE; // an all-zero tensor still gets a usable scale
    match scales {
        Scales::Fixed(..) => vec![fixed; heads],
        Scales::Calibrated => {
            let amax = tensor.amax_per_head().into_iter().fold(0f32, f32::max);
            vec![(amax / max).max(floor); heads]
        }
        Scales::CalibratedPerHead => tensor
            .amax_per_head()
            .into_iter()
            .map(|a| (a / max).max(floor))
            .collect(),
    }
}
