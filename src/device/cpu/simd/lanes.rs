//! What one instruction set gives the kernels of [`super::kernels`]: a vector of `LANES` f32, its
//! arithmetic, the widening loads of every KV dtype, and the few shuffles whose form depends on
//! the vector's width. AVX2 ([`super::avx2`]) and AVX-512 ([`super::avx512`]) implement it; the
//! kernels are written once over it (candle's `cpu/` kernels are the model).
//!
//! Every method is `#[inline(always)]` and carries no target features: the kernels are inlined
//! into each instruction set's entry points, which carry them, and the intrinsics inline there.
//! They are `unsafe` because the instruction set must be present.

use crate::kv::KvElem;
use std::ops::IndexMut;

pub(super) trait Lanes {
    /// A vector of `LANES` f32.
    type V: Copy;
    /// `LANES` vectors, reduced together by [`Lanes::sums`]: the scores' accumulators.
    type Accs: Copy + IndexMut<usize, Output = Self::V>;
    const LANES: usize;
    /// Whether the scores load two vectors of each row at once ([`Lanes::load_kv2`]): with 32
    /// registers the second load's conversion overlaps the first's FMAs; with 16 it would spill.
    const PAIRED_LOADS: bool;

    /// Column vectors held per head in one pass of the accumulation, for a run of `g` heads:
    /// enough accumulators to hide the FMA latency, few enough to stay in registers.
    fn widest_pass(g: usize) -> usize;
    /// What [`Lanes::load_kv`] multiplies a `T` value by (a power of two: exact); the kernels
    /// undo it in the scores' scale and the accumulators' load and store.
    fn widening<T: KvElem>() -> f32;

    unsafe fn zero() -> Self::V;
    unsafe fn splat(x: f32) -> Self::V;
    unsafe fn load(p: *const f32) -> Self::V;
    unsafe fn store(p: *mut f32, v: Self::V);
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    /// The larger of `a` and `b`; `b` where either is NaN (x86's rule).
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V;
    /// The smaller of `a` and `b`; `b` where either is NaN (x86's rule).
    unsafe fn min(a: Self::V, b: Self::V) -> Self::V;
    /// `a * b + c`, fused.
    unsafe fn fmadd(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// `c - a * b`, fused.
    unsafe fn fnmadd(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    /// Each lane to the nearest integer, ties to even.
    unsafe fn round(v: Self::V) -> Self::V;
    /// `y * 2^n` for lanes of `n` integral, within f32's exponents.
    unsafe fn times_pow2(y: Self::V, n: Self::V) -> Self::V;
    /// `y`, with 0 in the lanes where `x < lo`.
    unsafe fn zero_below(x: Self::V, lo: f32, y: Self::V) -> Self::V;
    /// The sum of the lanes.
    unsafe fn hsum(v: Self::V) -> f32;

    /// `LANES` elements at `p` widened to f32 times [`Lanes::widening`], exactly. `NAN_CODES`:
    /// whether e4m3's NaN code may occur (where a set widens it apart; without, the caller has
    /// found none).
    unsafe fn load_kv<T: KvElem, const NAN_CODES: bool>(p: *const T) -> Self::V;
    /// `2 LANES` elements at `p` as two vectors of [`Lanes::load_kv`]'s.
    unsafe fn load_kv2<T: KvElem, const NAN_CODES: bool>(p: *const T) -> [Self::V; 2];

    unsafe fn zero_accs() -> Self::Accs;
    /// Lane `i` of the result is the sum of the lanes of `a[i]`.
    unsafe fn sums(a: Self::Accs) -> Self::V;
    /// Lane `l` of the result is the maximum (or sum) over the lanes of `v` that hold the same
    /// head in the `[row][head]` layout of `G` heads: lanes `l % G`, `l % G + G`, ...
    unsafe fn max_across_rows<const G: usize>(v: Self::V) -> Self::V;
    unsafe fn sum_across_rows<const G: usize>(v: Self::V) -> Self::V;
}

/// The choices of the sixteen-lane sets: AVX-512's, and the tests' plain-Rust copy of its shape.
pub(super) mod sixteen {
    use crate::kv::{Dtype, KvElem};

    /// Sixteen accumulators for four heads, eight for fewer (enough to hide the FMA latency).
    pub fn widest_pass(g: usize) -> usize {
        if g >= 4 {
            4
        } else {
            8
        }
    }

    /// 2^-8 for e4m3 (read as an f16 that holds its bits, a power of two below its value, so
    /// exact), 1 otherwise. The kernels undo it where it costs least: in the scale of the scores,
    /// and in the accumulators' load and store.
    pub const fn widening<T: KvElem>() -> f32 {
        match T::DTYPE {
            Dtype::Fp8E4m3 => 1.0 / 256.0,
            _ => 1.0,
        }
    }
}
