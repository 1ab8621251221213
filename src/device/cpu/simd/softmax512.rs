//! The online-softmax step of [`super::Kernels::softmax`] on sixteen lanes, for the AVX-512
//! kernels: half the instructions of AVX2's, and the maximum and the sum over a step's vectors
//! taken by four independent chains rather than one (a chain of 8 to 16 dependent operations
//! per step and KV head was latency the core could not hide: the accumulation waits on it).

use super::exp_consts::{EXP_HI, EXP_LN2_HI, EXP_LN2_LO, EXP_LO, EXP_POLY};
use std::arch::x86_64::*;

/// Lane `l` of the result is `op` over the lanes of `v` that hold the same head as `l`: lanes
/// `l % G`, `l % G + G`, ... in the `[row][head]` layout.
#[inline]
#[target_feature(enable = "avx512f")]
fn across_rows<const G: usize>(v: __m512, op: impl Fn(__m512, __m512) -> __m512) -> __m512 {
    let v = op(v, _mm512_shuffle_f32x4::<0b01_00_11_10>(v, v));
    let mut v = op(v, _mm512_shuffle_f32x4::<0b10_11_00_01>(v, v));
    if G <= 2 {
        v = op(v, _mm512_permute_ps::<0b01_00_11_10>(v));
    }
    if G == 1 {
        v = op(v, _mm512_permute_ps::<0b10_11_00_01>(v));
    }
    v
}

/// `op` over `x`'s vectors by four chains, then the four together (`x` not empty).
#[inline]
#[target_feature(enable = "avx512f")]
fn fold4(x: &[__m512], init: __m512, op: impl Fn(__m512, __m512) -> __m512) -> __m512 {
    let mut acc = [init; 4];
    for (i, &v) in x.iter().enumerate() {
        acc[i % 4] = op(acc[i % 4], v);
    }
    op(op(acc[0], acc[1]), op(acc[2], acc[3]))
}

/// `e^x` for sixteen lanes: the range reduction and degree-6 polynomial of Cephes' `expf` (as
/// [`super::avx2`]'s `exp8`), the power of two applied by `scalef`. Lanes below -87.3 (-inf
/// included) give 0.
#[inline]
#[target_feature(enable = "avx512f")]
fn exp16(x: __m512) -> __m512 {
    let underflow = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(EXP_LO));
    let x = _mm512_min_ps(
        _mm512_max_ps(x, _mm512_set1_ps(EXP_LO)),
        _mm512_set1_ps(EXP_HI),
    );
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
        _mm512_mul_ps(x, _mm512_set1_ps(std::f32::consts::LOG2_E)),
    );
    // r = x - n ln 2, with ln 2 split in two so the product is exact.
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_HI), x);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(EXP_LN2_LO), r);
    let mut p = _mm512_set1_ps(EXP_POLY[0]);
    for c in &EXP_POLY[1..] {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(*c));
    }
    let r2 = _mm512_mul_ps(r, r);
    let y = _mm512_add_ps(_mm512_fmadd_ps(p, r2, r), _mm512_set1_ps(1.0));
    _mm512_maskz_mov_ps(!underflow, _mm512_scalef_ps(y, n))
}

/// A vector whose lane `l` holds `x[l % G]`.
#[inline]
#[target_feature(enable = "avx512f")]
fn per_lane<const G: usize>(x: &[f32; G]) -> __m512 {
    let lanes: [f32; 16] = std::array::from_fn(|l| x[l % G]);
    // SAFETY: sixteen f32 from a local array.
    unsafe { _mm512_loadu_ps(lanes.as_ptr()) }
}

/// The most 16-lane vectors of one step's scores ([`super::SCORES_LEN`] lanes).
const MAX_VECTORS: usize = super::SCORES_LEN / 16;

/// [`super::Kernels::softmax`] over whole 16-lane vectors of `[row][head]` scores (padding lanes
/// -inf).
///
/// # Safety
/// AVX-512 F must be available; `s.len() % 16 == 0`, `0 < s.len() <= SCORES_LEN`; `G` one of 1,
/// 2, 4.
#[target_feature(enable = "avx512f")]
pub unsafe fn softmax<const G: usize>(
    s: &mut [f32],
    maxs: &mut [f32; G],
    sums: &mut [f32; G],
) -> [f32; 4] {
    debug_assert!(s.len().is_multiple_of(16) && !s.is_empty() && s.len() <= super::SCORES_LEN);
    let mut v = [_mm512_setzero_ps(); MAX_VECTORS];
    let v = &mut v[..s.len() / 16];
    for (x, c) in v.iter_mut().zip(s.chunks_exact(16)) {
        *x = _mm512_loadu_ps(c.as_ptr());
    }
    let lowest = _mm512_set1_ps(f32::NEG_INFINITY);
    let m = fold4(v, lowest, |a, b| _mm512_max_ps(a, b));
    let old = per_lane(maxs);
    let new = _mm512_max_ps(across_rows::<G>(m, |a, b| _mm512_max_ps(a, b)), old);
    // 0 on the first step (max was -inf), when the sums and accumulators are still 0.
    let rescale = exp16(_mm512_sub_ps(old, new));
    for (x, c) in v.iter_mut().zip(s.chunks_exact_mut(16)) {
        *x = exp16(_mm512_sub_ps(*x, new));
        _mm512_storeu_ps(c.as_mut_ptr(), *x);
    }
    let sum = fold4(v, _mm512_setzero_ps(), |a, b| _mm512_add_ps(a, b));
    let sum = across_rows::<G>(sum, |a, b| _mm512_add_ps(a, b));
    let (mut new_l, mut rescale_l, mut sum_l) = ([0f32; 16], [0f32; 16], [0f32; 16]);
    _mm512_storeu_ps(new_l.as_mut_ptr(), new);
    _mm512_storeu_ps(rescale_l.as_mut_ptr(), rescale);
    _mm512_storeu_ps(sum_l.as_mut_ptr(), sum);
    for h in 0..G {
        maxs[h] = new_l[h];
        sums[h] = sums[h] * rescale_l[h] + sum_l[h];
    }
    std::array::from_fn(|h| rescale_l[h])
}
