//! AVX-512 F, BW and VL: the [`Lanes`] of [`kernels`] (16 f32 lanes, 32 registers: half the
//! instructions of [`super::avx2`]'s for the same work, and a core with two 512-bit FMA units
//! does twice the lane-FMAs per cycle), the kernels' entry points on them, and the scan for
//! e4m3's NaN code that lets the widening skip it.
//!
//! Scores take four rows of a run of four heads at a time (sixteen accumulators), so each query
//! vector loaded serves four rows and each converted K vector four heads; the sixteen dot
//! products are reduced together ([`sum16`]). Accumulation keeps up to eight column vectors of
//! every head in registers while the step's rows pass ([`Lanes::widest_pass`]).
//!
//! As in [`super::avx2`]: the entry points and helpers carry their target features; rows are
//! bounds-checked by the caller, loads within a row use raw pointers.

use super::kernels::{self, PoolRows};
use super::lanes::{sixteen, Lanes};
use super::Ahead;
use crate::kv::{Dtype, KvElem};
use std::arch::x86_64::*;

/// Whether this CPU can run the functions of this module (they also use AVX2, FMA and F16C
/// instructions on 256-bit halves).
pub fn available() -> bool {
    super::avx2::available()
        && std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512bw")
        && std::is_x86_feature_detected!("avx512vl")
}

/// Sixteen elements at `p` widened to f32 times [`sixteen::widening`], exactly. `NAN_CODES`: whether the
/// elements may hold e4m3's NaN code (S 1111 111), which costs three more instructions to turn
/// into a NaN; without it [`e4m3_nan_in_rows`] must have found none (the code would read 1.875).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(super) unsafe fn load16<T: KvElem, const NAN_CODES: bool>(p: *const T) -> __m512 {
    // `T::DTYPE` is a constant: the match folds away in each instance.
    match T::DTYPE {
        Dtype::F16 => _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())),
        Dtype::Bf16 => {
            let wide = _mm512_cvtepu16_epi32(_mm256_loadu_si256(p.cast()));
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(wide))
        }
        Dtype::F32 => _mm512_loadu_ps(p.cast()),
        // e5m2 is the high byte of an f16: one byte shuffle of the sixteen codes (loaded into
        // both 128-bit halves, which the shuffle cannot cross) puts each above a zero byte.
        Dtype::Fp8E5m2 => {
            let codes = _mm256_broadcastsi128_si256(_mm_loadu_si128(p.cast()));
            let z = -128; // a shuffle index with the top bit set gives a zero byte
            let to_high = _mm256_setr_epi8(
                z, 0, z, 1, z, 2, z, 3, z, 4, z, 5, z, 6, z, 7, //
                z, 8, z, 9, z, 10, z, 11, z, 12, z, 13, z, 14, z, 15,
            );
            _mm512_cvtph_ps(_mm256_shuffle_epi8(codes, to_high))
        }
        // e4m3 (S EEEE MMM, bias 7) as the f16 S 0EEEE MMM0000000 is the value / 2^8, the
        // subnormals included: the code sign-extended and shifted by 7 has S at bit 15 (and 14,
        // cleared by the mask) and EEEE MMM at bits 13..7. S 1111 111, e4m3's only NaN, would
        // read 1.875: with `NAN_CODES` it becomes an f16 NaN.
        Dtype::Fp8E4m3 => {
            let wide = _mm256_cvtepi8_epi16(_mm_loadu_si128(p.cast()));
            let bits = _mm256_set1_epi16(0xbf80_u16 as i16);
            let half = _mm256_and_si256(_mm256_slli_epi16::<7>(wide), bits);
            if !NAN_CODES {
                return _mm512_cvtph_ps(half);
            }
            let sign = _mm256_set1_epi16(0x8000_u16 as i16);
            let nan = _mm256_cmpeq_epi16_mask(_mm256_or_si256(half, sign), bits);
            _mm512_cvtph_ps(_mm256_mask_mov_epi16(half, nan, _mm256_set1_epi16(0x7e00)))
        }
    }
}

/// Thirty-two elements at `p` as two vectors of [`load16`]'s. e4m3 is widened on 512 bits (its
/// three integer steps once per 32 elements: 8 instructions where two [`load16`]s take 10); the
/// other dtypes are two [`load16`]s.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub(super) unsafe fn load32<T: KvElem, const NAN_CODES: bool>(p: *const T) -> [__m512; 2] {
    if T::DTYPE != Dtype::Fp8E4m3 {
        return [load16::<T, NAN_CODES>(p), load16::<T, NAN_CODES>(p.add(16))];
    }
    // As in `load16`, thirty-two codes at once.
    let wide = _mm512_cvtepi8_epi16(_mm256_loadu_si256(p.cast()));
    let bits = _mm512_set1_epi16(0xbf80_u16 as i16);
    let mut half = _mm512_and_si512(_mm512_slli_epi16::<7>(wide), bits);
    if NAN_CODES {
        let sign = _mm512_set1_epi16(0x8000_u16 as i16);
        let nan = _mm512_cmpeq_epi16_mask(_mm512_or_si512(half, sign), bits);
        half = _mm512_mask_mov_epi16(half, nan, _mm512_set1_epi16(0x7e00));
    }
    [
        _mm512_cvtph_ps(_mm512_castsi512_si256(half)),
        _mm512_cvtph_ps(_mm512_extracti64x4_epi64::<1>(half)),
    ]
}

/// Whether any of `rows` (`hd` codes each, `hd % 16 == 0`) of `k` or `v` holds e4m3's NaN code
/// S 1111 111: the largest code magnitude of the rows, 64 codes at a time, is 0x7f. Two
/// instructions per 64 codes, against three per 16 in [`load16`] with `NAN_CODES`.
///
/// # Safety
/// [`available`]; every row lies in `k` and in `v`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl")]
pub unsafe fn e4m3_nan_in_rows(k: &[u8], v: &[u8], rows: &[usize], hd: usize) -> bool {
    let magnitude = _mm512_set1_epi8(0x7f);
    // Four chains of maxima: one would make the scan wait on each maximum's latency.
    let mut most = [_mm512_setzero_si512(); 4];
    for (i, &r) in rows.iter().enumerate() {
        for d in (0..hd).step_by(64) {
            for (j, x) in [k.as_ptr().add(r + d), v.as_ptr().add(r + d)]
                .into_iter()
                .enumerate()
            {
                let codes = match hd - d {
                    64.. => _mm512_loadu_si512(x.cast()),
                    // Past the row's end the mask keeps the load from touching memory.
                    left => _mm512_maskz_loadu_epi8((1 << left) - 1, x.cast()),
                };
                let chain = &mut most[(2 * i + j) % 4];
                *chain = _mm512_max_epu8(*chain, _mm512_and_si512(codes, magnitude));
            }
        }
    }
    let most = _mm512_max_epu8(
        _mm512_max_epu8(most[0], most[1]),
        _mm512_max_epu8(most[2], most[3]),
    );
    _mm512_cmpeq_epi8_mask(most, magnitude) != 0
}

/// `a`'s and `b`'s 128-bit quarters paired by `LO`/`HI` (`_mm512_shuffle_f32x4` selectors) and
/// added: one level of [`sum16`]'s reduction tree.
#[inline]
#[target_feature(enable = "avx512f")]
fn fold_quarters<const LO: i32, const HI: i32>(a: __m512, b: __m512) -> __m512 {
    _mm512_add_ps(
        _mm512_shuffle_f32x4::<LO>(a, b),
        _mm512_shuffle_f32x4::<HI>(a, b),
    )
}

/// `a`'s and `b`'s lanes paired within 128-bit quarters by `LO`/`HI` (`_mm512_shuffle_ps`
/// selectors) and added: a horizontal add of pairs, as `hadd` does on 256 bits.
#[inline]
#[target_feature(enable = "avx512f")]
fn fold_pairs<const LO: i32, const HI: i32>(a: __m512, b: __m512) -> __m512 {
    _mm512_add_ps(_mm512_shuffle_ps::<LO>(a, b), _mm512_shuffle_ps::<HI>(a, b))
}

/// `out[i]` = the sum of the lanes of `v[i]`, in 45 instructions for the sixteen. Quarter `j` of
/// the output holds `v[4j..4j + 4]`'s sums: the first two levels bring the four partial sums of
/// `v[4j + e]` into quarter `j` of vector `e`, the last two add within quarters.
#[inline]
#[target_feature(enable = "avx512f")]
fn sum16(v: [__m512; 16]) -> __m512 {
    // Halves: w[e] = [v[e] | v[4 + e]], w[4 + e] = [v[8 + e] | v[12 + e]], each as two quarters.
    let w: [__m512; 8] = std::array::from_fn(|i| {
        let (e, base) = (i % 4, 8 * (i / 4));
        fold_quarters::<0b01_00_01_00, 0b11_10_11_10>(v[base + e], v[base + 4 + e])
    });
    // Quarters: x[e] = [v[e], v[4 + e], v[8 + e], v[12 + e]], four partial sums each.
    let x: [__m512; 4] =
        std::array::from_fn(|e| fold_quarters::<0b10_00_10_00, 0b11_01_11_01>(w[e], w[4 + e]));
    let y0 = fold_pairs::<0b10_00_10_00, 0b11_01_11_01>(x[0], x[1]);
    let y1 = fold_pairs::<0b10_00_10_00, 0b11_01_11_01>(x[2], x[3]);
    fold_pairs::<0b10_00_10_00, 0b11_01_11_01>(y0, y1)
}

/// AVX-512's lanes: 16 f32, 32 registers.
pub(super) struct Avx512;

impl Lanes for Avx512 {
    type V = __m512;
    type Accs = [__m512; 16];
    const LANES: usize = 16;
    const PAIRED_LOADS: bool = true;

    fn widest_pass(g: usize) -> usize {
        sixteen::widest_pass(g)
    }
    fn widening<T: KvElem>() -> f32 {
        sixteen::widening::<T>()
    }

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        _mm512_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        _mm512_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        _mm512_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        _mm512_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: __m512, b: __m512) -> __m512 {
        _mm512_sub_ps(a, b)
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        _mm512_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn max(a: __m512, b: __m512) -> __m512 {
        _mm512_max_ps(a, b)
    }
    #[inline(always)]
    unsafe fn min(a: __m512, b: __m512) -> __m512 {
        _mm512_min_ps(a, b)
    }
    #[inline(always)]
    unsafe fn fmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn fnmadd(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fnmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn round(v: __m512) -> __m512 {
        _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(v)
    }
    #[inline(always)]
    unsafe fn times_pow2(y: __m512, n: __m512) -> __m512 {
        _mm512_scalef_ps(y, n)
    }
    #[inline(always)]
    unsafe fn zero_below(x: __m512, lo: f32, y: __m512) -> __m512 {
        let below = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(x, _mm512_set1_ps(lo));
        _mm512_maskz_mov_ps(!below, y)
    }
    #[inline(always)]
    unsafe fn hsum(v: __m512) -> f32 {
        _mm512_reduce_add_ps(v)
    }
    #[inline(always)]
    unsafe fn load_kv<T: KvElem, const NAN_CODES: bool>(p: *const T) -> __m512 {
        load16::<T, NAN_CODES>(p)
    }
    #[inline(always)]
    unsafe fn load_kv2<T: KvElem, const NAN_CODES: bool>(p: *const T) -> [__m512; 2] {
        load32::<T, NAN_CODES>(p)
    }
    #[inline(always)]
    unsafe fn zero_accs() -> [__m512; 16] {
        [_mm512_setzero_ps(); 16]
    }
    #[inline(always)]
    unsafe fn sums(a: [__m512; 16]) -> __m512 {
        sum16(a)
    }
    #[inline(always)]
    unsafe fn max_across_rows<const G: usize>(v: __m512) -> __m512 {
        across_rows::<G>(v, |a, b| _mm512_max_ps(a, b))
    }
    #[inline(always)]
    unsafe fn sum_across_rows<const G: usize>(v: __m512) -> __m512 {
        across_rows::<G>(v, |a, b| _mm512_add_ps(a, b))
    }
}

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

/// [`kernels::scores`] on AVX-512, `R = 16 / G` rows at a time.
///
/// # Safety
/// [`available`]; as [`kernels::scores`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub unsafe fn scores<T: KvElem, const G: usize, const R: usize, const NAN_CODES: bool>(
    q: &[f32],
    k: PoolRows<T>,
    scale: f32,
    s: &mut [f32],
    ahead: &mut Ahead<T>,
) {
    kernels::scores::<Avx512, T, G, R, NAN_CODES>(q, k, scale, s, ahead)
}

/// [`kernels::softmax`] on AVX-512.
///
/// # Safety
/// [`available`]; as [`kernels::softmax`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub unsafe fn softmax<const G: usize>(
    s: &mut [f32],
    maxs: &mut [f32; G],
    sums: &mut [f32; G],
) -> [f32; 4] {
    kernels::softmax::<Avx512, G>(s, maxs, sums)
}

/// [`kernels::accumulate`] on AVX-512.
///
/// # Safety
/// [`available`]; as [`kernels::accumulate`].
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub unsafe fn accumulate<T: KvElem, const G: usize, const NAN_CODES: bool>(
    w: &[f32],
    v: PoolRows<T>,
    rescale: &[f32; 4],
    acc: &mut [f32],
    ahead: &mut Ahead<T>,
) {
    kernels::accumulate::<Avx512, T, G, NAN_CODES>(w, v, rescale, acc, ahead)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sixteen_sums_at_once_are_the_sixteen_sums() {
        if !available() {
            eprintln!("skipped: no AVX-512");
            return;
        }
        // Small integers: exact in any order; every lane of every vector distinct.
        let v: [[f32; 16]; 16] =
            std::array::from_fn(|i| std::array::from_fn(|l| (i * 16 + l * l) as f32));
        let mut got = [0f32; 16];
        unsafe {
            let vecs = v.map(|x| _mm512_loadu_ps(x.as_ptr()));
            _mm512_storeu_ps(got.as_mut_ptr(), sum16(vecs));
        }
        for i in 0..16 {
            assert_eq!(got[i], v[i].iter().sum::<f32>(), "sum {i}");
        }
    }

    fn passes(g: usize, hd: usize) -> impl Iterator<Item = (usize, usize)> {
        kernels::column_passes(16, Avx512::widest_pass(g), hd)
    }

    #[test]
    fn column_passes_cover_the_row_once_widest_first() {
        for g in [1, 2, 4] {
            for hd in (16..=512).step_by(16) {
                let mut next = 0;
                for (d, w) in passes(g, hd) {
                    assert_eq!(d, next);
                    assert!(w <= Avx512::widest_pass(g) && w.is_power_of_two());
                    next += 16 * w;
                }
                assert_eq!(next, hd, "g {g} hd {hd}");
            }
        }
        assert_eq!(passes(4, 128).count(), 2);
        assert_eq!(passes(2, 128).count(), 1);
    }
}
