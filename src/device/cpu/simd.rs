//! The inner loops of CPU attention and gathers, over rows of `hd` elements: the vector kernels of
//! [`kernels`], written once over an instruction set's [`lanes::Lanes`], on AVX-512 ([`avx512`])
//! where the CPU has it and `hd` is a multiple of 16, on AVX2 + FMA + F16C ([`avx2`]) where `hd`
//! is a multiple of 8; portable loops otherwise. The choice is made once per call
//! ([`Kernels::detect`]); all give the same results up to f32 rounding, and a given choice is
//! deterministic.
//!
//! Attention kernels work on one step (up to [`MAX_STEP_ROWS`] rows of one KV head) for a run of
//! `g` query heads of its GQA group, `g` one of 1, 2, 4 ([`group_runs`]): each K and V row is
//! loaded once for the run. Scores are laid out `[row][g]`, so the `L` lanes of a vector hold
//! `L / g` rows of every head, and the lanes past the last row hold -inf (weight 0).

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
mod kernels;
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
mod lanes;
#[cfg(test)]
mod lanes16;
mod prefetch;

use lanes::Lanes;
pub use prefetch::{Ahead, Span};

/// Cephes' `expf`, the vector `e^x` of [`kernels::exp`]: inputs clamped to `EXP_LO..=EXP_HI`
/// (below `EXP_LO` the result is 0), `n = round(x log2 e)`, `r = x - n ln 2` with ln 2 split in
/// two so the product is exact, then `e^r = 1 + r + r² p(r)`, `p` of degree 5 by Horner from
/// `EXP_POLY[0]`.
mod exp_consts {
    pub const EXP_LO: f32 = -87.336_55;
    pub const EXP_HI: f32 = 88.376_26;
    pub const EXP_LN2_HI: f32 = 0.693_359_4;
    pub const EXP_LN2_LO: f32 = -2.121_944_4e-4;
    pub const EXP_POLY: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        0.5,
    ];
}

use super::env_setting::{self, EnvSettingError};
use crate::kv::KvElem;

/// The most rows one step may hold.
pub const MAX_STEP_ROWS: usize = 64;
/// Scores of one step and run: `[row][g]`, padded to whole vectors.
pub const SCORES_LEN: usize = MAX_STEP_ROWS * 4;

/// The kernels chosen for one call, for rows of `hd` elements, and what [`Kernels::for_rows`]
/// found of one step's rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kernels {
    isa: Isa,
    hd: usize,
    /// The rows hold no e4m3 NaN code: the AVX-512 widening may skip turning it into a NaN.
    nan_free: bool,
}

/// One step's row offsets (each the first of `hd` elements) and where the furthest row ends,
/// found once for the step's kernels: each kernel checks the end against its pool in one
/// comparison (a search of the rows per kernel call was 5% of the instructions, callgrind).
#[derive(Debug, Clone, Copy)]
pub struct StepRows<'a> {
    rows: &'a [usize],
    hd: usize,
    end: usize,
}

impl<'a> StepRows<'a> {
    pub fn new(rows: &'a [usize], hd: usize) -> Self {
        StepRows {
            rows,
            hd,
            end: last_row_end(rows, hd),
        }
    }

    /// The rows, for kernels of rows of `hd` elements over a pool of `len` elements.
    fn within(&self, hd: usize, len: usize) -> &'a [usize] {
        assert_eq!(self.hd, hd, "rows found for another row length");
        assert!(self.end <= len, "row out of range");
        self.rows
    }
}

/// The instruction sets of the kernel sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Isa {
    Portable,
    Avx2,
    Avx512,
    /// AVX-512's shape in plain Rust ([`lanes16`]): the tests' check of the sixteen-lane kernels.
    #[cfg(test)]
    Lanes16,
}

/// Whether this CPU runs the AVX2 kernels (AVX2, FMA, F16C).
#[cfg(target_arch = "x86_64")]
pub fn avx2_available() -> bool {
    avx2::available()
}

/// Whether this CPU runs the AVX-512 kernels (F, BW, VL, with AVX2's).
#[cfg(target_arch = "x86_64")]
pub fn avx512_available() -> bool {
    avx512::available()
}

/// A group of query heads in runs of 4, 2 and 1 (`(first head, heads)`): four heads' score
/// accumulators fill the registers with two rows; more heads read each row again, from L1.
pub fn group_runs(group: usize) -> impl Iterator<Item = (usize, usize)> {
    let mut g0 = 0;
    std::iter::from_fn(move || {
        let n = match group - g0 {
            0 => return None,
            1 => 1,
            2 | 3 => 2,
            _ => 4,
        };
        g0 += n;
        Some((g0 - n, n))
    })
}

/// The environment variable that caps the kernel sets [`Kernels::detect`] picks from:
/// `portable`, `avx2` or `avx512` (one build compared with itself on another instruction set).
pub const KERNELS_ENV: &str = "PAGEDKV_CPU_KERNELS";

/// The widest kernel set [`KERNELS_ENV`] allows: `None` when unset, an error naming it when it
/// names no set. The CLI checks it before any command runs.
pub fn kernels_cap() -> Result<Option<Isa>, EnvSettingError> {
    env_setting::read(KERNELS_ENV, "portable, avx2 or avx512", |text| match text {
        "portable" => Some(Isa::Portable),
        "avx2" => Some(Isa::Avx2),
        "avx512" => Some(Isa::Avx512),
        _ => None,
    })
}

impl Isa {
    /// Whether [`KERNELS_ENV`] lets this set run (it caps the sets, narrowest first).
    pub fn allowed(self) -> bool {
        self.within(kernels_cap().ok().flatten())
    }

    /// Whether this set is no wider than `cap` (any set without one).
    fn within(self, cap: Option<Isa>) -> bool {
        cap.is_none_or(|cap| self.rank() <= cap.rank())
    }

    fn rank(self) -> u8 {
        match self {
            Isa::Portable => 0,
            Isa::Avx2 => 1,
            Isa::Avx512 => 2,
            #[cfg(test)]
            Isa::Lanes16 => 3,
        }
    }
}

impl Kernels {
    /// The fastest kernels this CPU runs for rows of `hd` elements, no wider than
    /// [`KERNELS_ENV`] allows.
    pub fn detect(hd: usize) -> Self {
        // The environment read once a call, not once a set.
        let cap = kernels_cap().ok().flatten();
        Self::available(hd)
            .into_iter()
            .rfind(|k| k.isa.within(cap))
            .expect("the portable loops run anywhere")
    }

    /// Every kernel set this CPU runs for rows of `hd` elements, narrowest first.
    pub fn available(hd: usize) -> Vec<Self> {
        let mut sets = vec![Self::portable(hd)];
        #[cfg(target_arch = "x86_64")]
        if hd.is_multiple_of(8) && avx2::available() {
            sets.push(Kernels {
                isa: Isa::Avx2,
                ..Self::portable(hd)
            });
            if hd.is_multiple_of(16) && avx512::available() {
                sets.push(Kernels {
                    isa: Isa::Avx512,
                    ..Self::portable(hd)
                });
            }
        }
        sets
    }

    /// The kernels on sixteen lanes of plain Rust, for rows of `hd` elements (a multiple of 16).
    #[cfg(test)]
    pub fn lanes16(hd: usize) -> Self {
        assert!(hd.is_multiple_of(16));
        Kernels {
            isa: Isa::Lanes16,
            ..Self::portable(hd)
        }
    }

    /// The portable loops, whatever the CPU.
    pub fn portable(hd: usize) -> Self {
        Kernels {
            isa: Isa::Portable,
            hd,
            nan_free: false,
        }
    }

    /// These kernels for one step's `rows` of `k` and `v`: with the AVX-512 kernels and an e4m3
    /// cache, whether the rows hold e4m3's NaN code (the widening without it is 5 instructions a
    /// vector of 16 rather than 8, the scan half an instruction a vector).
    pub fn for_rows<T: KvElem>(self, k: &[T], v: &[T], rows: StepRows) -> Self {
        // Once a step: only the sixteen-lane sets widen without the NaN fix-up.
        if T::DTYPE != crate::kv::Dtype::Fp8E4m3 || self.lanes() != 16 {
            return self;
        }
        let hd = self.hd;
        let rows = rows.within(hd, k.len().min(v.len()));
        // SAFETY: an e4m3 element is one byte.
        let bytes =
            |x: &[T]| unsafe { std::slice::from_raw_parts(x.as_ptr().cast::<u8>(), x.len()) };
        let nan_free = match self.isa {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `available` found the features and `hd % 16 == 0`; rows checked.
            Isa::Avx512 => unsafe { !avx512::e4m3_nan_in_rows(bytes(k), bytes(v), rows, hd) },
            #[cfg(test)]
            Isa::Lanes16 => !rows.iter().any(|&r| {
                let nan = |x: &[u8]| x[r..r + hd].iter().any(|c| c & 0x7f == 0x7f);
                nan(bytes(k)) || nan(bytes(v))
            }),
            _ => return self,
        };
        Kernels { nan_free, ..self }
    }

    #[cfg(test)]
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Lanes of the score vectors: [`Self::scores`] pads its scores to a multiple of this.
    fn lanes(self) -> usize {
        match self.isa {
            Isa::Portable | Isa::Avx2 => 8,
            _ => 16,
        }
    }

    /// How often [`Self::scores`] and [`Self::accumulate`] together call [`Ahead::beat`] for a
    /// step of `rows` rows and a whole group of `group` heads.
    pub fn beats(self, group: usize, rows: usize) -> usize {
        let vector = |lanes: usize, widest: usize, g: usize| {
            rows.div_ceil(lanes / g) + kernels::column_passes(lanes, widest, self.hd).count()
        };
        group_runs(group)
            .map(|(_, g)| match self.isa {
                Isa::Portable => 2 * rows,
                #[cfg(target_arch = "x86_64")]
                Isa::Avx2 => vector(8, avx2::Avx2::widest_pass(g), g),
                #[cfg(target_arch = "x86_64")]
                Isa::Avx512 => vector(16, avx512::Avx512::widest_pass(g), g),
                #[cfg(test)]
                Isa::Lanes16 => vector(16, lanes16::Lanes16::widest_pass(g), g),
                #[allow(unreachable_patterns)]
                _ => unreachable!("no vector kernels on this architecture"),
            })
            .sum()
    }

    /// `s[c * g + h] = scale * q[h] · k[rows[c]..][..hd]` for the `g` heads of `q` (`[g, hd]`,
    /// `g` one of 1, 2, 4); lanes `rows.len() * g` up to the next multiple of the kernels' lanes
    /// (8 or 16) get -inf.
    #[allow(clippy::too_many_arguments)]
    pub fn scores<T: KvElem>(
        self,
        q: &[f32],
        g: usize,
        k: &[T],
        rows: StepRows,
        scale: f32,
        s: &mut [f32],
        ahead: &mut Ahead<T>,
    ) {
        let hd = self.hd;
        let rows = rows.within(hd, k.len());
        assert!(matches!(g, 1 | 2 | 4) && q.len() >= g * hd);
        assert!(!rows.is_empty() && rows.len() <= MAX_STEP_ROWS && s.len() >= SCORES_LEN);
        let lanes = self.lanes();
        let (n, padded) = (rows.len() * g, (rows.len() * g).div_ceil(lanes) * lanes);
        let kr = kernels::PoolRows { x: k, rows, hd };
        #[cfg(target_arch = "x86_64")]
        match self.isa {
            // SAFETY: `available` found the features and `hd % 16 == 0`; rows and lengths
            // checked.
            Isa::Avx512 => unsafe {
                use avx512::scores as sc;
                match (g, self.nan_free) {
                    (1, true) => sc::<T, 1, 16, false>(q, kr, scale, s, ahead),
                    (2, true) => sc::<T, 2, 8, false>(q, kr, scale, s, ahead),
                    (_, true) => sc::<T, 4, 4, false>(q, kr, scale, s, ahead),
                    (1, false) => sc::<T, 1, 16, true>(q, kr, scale, s, ahead),
                    (2, false) => sc::<T, 2, 8, true>(q, kr, scale, s, ahead),
                    (_, false) => sc::<T, 4, 4, true>(q, kr, scale, s, ahead),
                }
                s[n..padded].fill(f32::NEG_INFINITY);
                return;
            },
            // SAFETY: `available` found the features and `hd % 8 == 0`; rows and lengths checked.
            Isa::Avx2 => unsafe {
                match g {
                    1 => avx2::scores::<T, 1, 8>(q, kr, scale, s, ahead),
                    2 => avx2::scores::<T, 2, 4>(q, kr, scale, s, ahead),
                    _ => avx2::scores::<T, 4, 2>(q, kr, scale, s, ahead),
                }
                s[n..padded].fill(f32::NEG_INFINITY);
                return;
            },
            _ => {}
        }
        #[cfg(test)]
        if self.isa == Isa::Lanes16 {
            use kernels::scores as sc;
            use lanes16::Lanes16 as L;
            // SAFETY: plain Rust; `hd % 16 == 0`; rows and lengths checked.
            unsafe {
                match (g, self.nan_free) {
                    (1, true) => sc::<L, T, 1, 16, false>(q, kr, scale, s, ahead),
                    (2, true) => sc::<L, T, 2, 8, false>(q, kr, scale, s, ahead),
                    (_, true) => sc::<L, T, 4, 4, false>(q, kr, scale, s, ahead),
                    (1, false) => sc::<L, T, 1, 16, true>(q, kr, scale, s, ahead),
                    (2, false) => sc::<L, T, 2, 8, true>(q, kr, scale, s, ahead),
                    (_, false) => sc::<L, T, 4, 4, true>(q, kr, scale, s, ahead),
                }
            }
            s[n..padded].fill(f32::NEG_INFINITY);
            return;
        }
        let mut buf = vec![0f32; hd];
        for (c, &r) in rows.iter().enumerate() {
            ahead.beat();
            T::slice_to_f32(&k[r..r + hd], &mut buf);
            for h in 0..g {
                s[c * g + h] = dot(&q[h * hd..(h + 1) * hd], &buf) * scale;
            }
        }
        s[n..padded].fill(f32::NEG_INFINITY);
    }

    /// One online-softmax step for `g` heads over the scores of `rows` rows (`s` as
    /// [`Self::scores`] leaves it): `maxs[h]` becomes the running maximum, the scores become the
    /// weights `e^(s - max)`, `sums[h]` the rescaled running sum plus the new weights. Returns,
    /// per head, the factor `e^(old max - new max)` the running accumulators must be scaled by.
    pub fn softmax(
        self,
        s: &mut [f32],
        g: usize,
        rows: usize,
        maxs: &mut [f32],
        sums: &mut [f32],
    ) -> [f32; 4] {
        assert!(matches!(g, 1 | 2 | 4) && maxs.len() == g && sums.len() == g);
        assert!((1..=MAX_STEP_ROWS).contains(&rows));
        let whole = |lanes: usize| (rows * g).div_ceil(lanes) * lanes;
        // SAFETY (each arm): `available` found the features; `s` holds whole padded vectors of
        // at most SCORES_LEN lanes.
        match self.isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => unsafe {
                let s = &mut s[..whole(16)];
                return match g {
                    1 => avx512::softmax::<1>(s, as_array(maxs), as_array(sums)),
                    2 => avx512::softmax::<2>(s, as_array(maxs), as_array(sums)),
                    _ => avx512::softmax::<4>(s, as_array(maxs), as_array(sums)),
                };
            },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => unsafe {
                let s = &mut s[..whole(8)];
                return match g {
                    1 => avx2::softmax::<1>(s, as_array(maxs), as_array(sums)),
                    2 => avx2::softmax::<2>(s, as_array(maxs), as_array(sums)),
                    _ => avx2::softmax::<4>(s, as_array(maxs), as_array(sums)),
                };
            },
            #[cfg(test)]
            Isa::Lanes16 => unsafe {
                use lanes16::Lanes16 as L;
                let s = &mut s[..whole(16)];
                return match g {
                    1 => kernels::softmax::<L, 1>(s, as_array(maxs), as_array(sums)),
                    2 => kernels::softmax::<L, 2>(s, as_array(maxs), as_array(sums)),
                    _ => kernels::softmax::<L, 4>(s, as_array(maxs), as_array(sums)),
                };
            },
            _ => {}
        }
        let mut rescale = [0f32; 4];
        for h in 0..g {
            let new_max = (0..rows).map(|c| s[c * g + h]).fold(maxs[h], f32::max);
            // 0 on the first step (max was -inf), when the sum and accumulators are still 0.
            rescale[h] = (maxs[h] - new_max).exp();
            let mut sum = 0.0;
            for c in 0..rows {
                let w = (s[c * g + h] - new_max).exp();
                s[c * g + h] = w;
                sum += w;
            }
            sums[h] = sums[h] * rescale[h] + sum;
            maxs[h] = new_max;
        }
        rescale
    }

    /// `acc[h] = acc[h] * rescale[h] + Σ_c s[c * g + h] * v[rows[c]..][..hd]` for `g` heads
    /// (`acc` is `[g, hd]`, `s` the weights [`Self::softmax`] leaves).
    #[allow(clippy::too_many_arguments)]
    pub fn accumulate<T: KvElem>(
        self,
        s: &[f32],
        g: usize,
        v: &[T],
        rows: StepRows,
        rescale: &[f32; 4],
        acc: &mut [f32],
        ahead: &mut Ahead<T>,
    ) {
        let hd = self.hd;
        let rows = rows.within(hd, v.len());
        assert!(matches!(g, 1 | 2 | 4) && acc.len() == g * hd);
        assert!(rows.len() <= MAX_STEP_ROWS && s.len() >= rows.len() * g);
        let vr = kernels::PoolRows { x: v, rows, hd };
        #[cfg(target_arch = "x86_64")]
        match self.isa {
            // SAFETY: as in `scores`.
            Isa::Avx512 => unsafe {
                use avx512::accumulate as ac;
                match (g, self.nan_free) {
                    (1, true) => ac::<T, 1, false>(s, vr, rescale, acc, ahead),
                    (2, true) => ac::<T, 2, false>(s, vr, rescale, acc, ahead),
                    (_, true) => ac::<T, 4, false>(s, vr, rescale, acc, ahead),
                    (1, false) => ac::<T, 1, true>(s, vr, rescale, acc, ahead),
                    (2, false) => ac::<T, 2, true>(s, vr, rescale, acc, ahead),
                    (_, false) => ac::<T, 4, true>(s, vr, rescale, acc, ahead),
                }
                return;
            },
            // SAFETY: as in `scores`.
            Isa::Avx2 => unsafe {
                match g {
                    1 => avx2::accumulate::<T, 1>(s, vr, rescale, acc, ahead),
                    2 => avx2::accumulate::<T, 2>(s, vr, rescale, acc, ahead),
                    _ => avx2::accumulate::<T, 4>(s, vr, rescale, acc, ahead),
                }
                return;
            },
            _ => {}
        }
        #[cfg(test)]
        if self.isa == Isa::Lanes16 {
            use kernels::accumulate as ac;
            use lanes16::Lanes16 as L;
            // SAFETY: as in `scores`.
            unsafe {
                match (g, self.nan_free) {
                    (1, true) => ac::<L, T, 1, false>(s, vr, rescale, acc, ahead),
                    (2, true) => ac::<L, T, 2, false>(s, vr, rescale, acc, ahead),
                    (_, true) => ac::<L, T, 4, false>(s, vr, rescale, acc, ahead),
                    (1, false) => ac::<L, T, 1, true>(s, vr, rescale, acc, ahead),
                    (2, false) => ac::<L, T, 2, true>(s, vr, rescale, acc, ahead),
                    (_, false) => ac::<L, T, 4, true>(s, vr, rescale, acc, ahead),
                }
            }
            return;
        }
        for (h, a) in acc.chunks_exact_mut(hd).enumerate() {
            a.iter_mut().for_each(|x| *x *= rescale[h]);
        }
        let mut buf = vec![0f32; hd];
        for (c, &r) in rows.iter().enumerate() {
            ahead.beat();
            T::slice_to_f32(&v[r..r + hd], &mut buf);
            for (h, a) in acc.chunks_exact_mut(hd).enumerate() {
                axpy(s[c * g + h], &buf, a);
            }
        }
    }

    /// The f32 sum of `x` (any length).
    pub fn sum<T: KvElem>(self, x: &[T]) -> f32 {
        #[cfg(target_arch = "x86_64")]
        if matches!(self.isa, Isa::Avx2 | Isa::Avx512) {
            // SAFETY: `available` found the features (AVX-512's include AVX2's).
            return unsafe { avx2::sum(x) };
        }
        x.iter().map(|e| e.to_f32()).sum()
    }
}

/// Where the furthest of `rows` ends (a maximum, which vectorises where a search for an
/// offender would not).
fn last_row_end(rows: &[usize], hd: usize) -> usize {
    rows.iter().fold(0, |m, &r| m.max(r)).saturating_add(hd)
}

/// A slice of known length as an array.
#[cfg_attr(not(any(test, target_arch = "x86_64")), allow(dead_code))]
fn as_array<const N: usize>(x: &mut [f32]) -> &mut [f32; N] {
    x.try_into().expect("length checked by the caller")
}

/// Dot product with eight independent partial sums, so the loop vectorises.
#[inline(always)]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            // Not `mul_add`: without FMA in the target that is a call to software `fmaf`.
            acc[i] += x[i] * y[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// `y += a * x`.
#[inline(always)]
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    for (yi, xi) in y.iter_mut().zip(x) {
        *yi += a * xi;
    }
}

#[cfg(test)]
mod tests;
