//! The attention inner loops with AVX-512 (16 lanes, 32 registers): half the instructions of
//! [`super::avx2`]'s for the same work, and a core with two 512-bit FMA units does twice the
//! lane-FMAs per cycle. Layouts as in [`super`]; the softmax between the two is AVX2's (a few
//! vectors per step).
//!
//! Scores take four rows of a run of four heads at a time (sixteen accumulators), so each query
//! vector loaded serves four rows and each converted K vector four heads; the sixteen dot
//! products are reduced together ([`sum16`]). Accumulation keeps `16 / G` (at most eight)
//! column vectors of every head in registers while the step's rows pass, the weight broadcast
//! from memory into the FMA.
//!
//! As in [`super::avx2`]: every function carries its target features; rows are bounds-checked by
//! the caller, loads within a row use raw pointers.

// Register arrays are indexed by head, row and column in lockstep with pointers.
#![allow(clippy::needless_range_loop)]

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

/// What [`load16`] multiplies a `T` value by: 2^-8 for e4m3 (read as an f16 that holds its bits,
/// a power of two below its value, so exact), 1 otherwise. The kernels undo it where it costs
/// least: in the scale of the scores, and in the accumulators' load and store.
pub(super) const fn widening<T: KvElem>() -> f32 {
    match T::DTYPE {
        Dtype::Fp8E4m3 => 1.0 / 256.0,
        _ => 1.0,
    }
}

/// Sixteen elements at `p` widened to f32 times [`widening`], exactly. `NAN_CODES`: whether the
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

/// Scores of `rows` for `G` heads, `R = 16 / G` rows at a time: one accumulator per (row, head),
/// reduced together by [`sum16`] into `s[c * G..][..16]`, the `[row][head]` layout. Past the last
/// row the last row is read again (its lanes are overwritten by the caller).
///
/// # Safety
/// [`available`]; `hd % 16 == 0`; `G * R == 16`; `q.len() >= G * hd`; every row lies in `k`;
/// `s.len() >= rows.len().div_ceil(R) * 16`; without `NAN_CODES`, no e4m3 NaN code in the rows.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub unsafe fn scores<T: KvElem, const G: usize, const R: usize, const NAN_CODES: bool>(
    q: &[f32],
    k: &[T],
    rows: &[usize],
    hd: usize,
    scale: f32,
    s: &mut [f32],
    ahead: &mut Ahead<T>,
) {
    debug_assert!(G * R == 16 && hd.is_multiple_of(16) && q.len() >= G * hd);
    debug_assert!(s.len() >= rows.len().div_ceil(R) * 16);
    let (q, kp, n) = (q.as_ptr(), k.as_ptr(), rows.len());
    let scale = _mm512_set1_ps(scale / widening::<T>());
    for c in (0..n).step_by(R) {
        ahead.beat();
        let mut row = [kp; R];
        for (i, p) in row.iter_mut().enumerate() {
            *p = kp.add(*rows.get_unchecked((c + i).min(n - 1)));
        }
        let mut a = [_mm512_setzero_ps(); 16];
        let pairs = hd - hd % 32;
        for d in (0..pairs).step_by(32) {
            let mut x = [[_mm512_setzero_ps(); 2]; R];
            for i in 0..R {
                x[i] = load32::<T, NAN_CODES>(row[i].add(d));
            }
            for (j, d) in [d, d + 16].into_iter().enumerate() {
                for h in 0..G {
                    let qh = _mm512_loadu_ps(q.add(h * hd + d));
                    for i in 0..R {
                        a[i * G + h] = _mm512_fmadd_ps(qh, x[i][j], a[i * G + h]);
                    }
                }
            }
        }
        if pairs < hd {
            let d = pairs;
            let mut x = [_mm512_setzero_ps(); R];
            for i in 0..R {
                x[i] = load16::<T, NAN_CODES>(row[i].add(d));
            }
            for h in 0..G {
                let qh = _mm512_loadu_ps(q.add(h * hd + d));
                for i in 0..R {
                    a[i * G + h] = _mm512_fmadd_ps(qh, x[i], a[i * G + h]);
                }
            }
        }
        _mm512_storeu_ps(s.as_mut_ptr().add(c * G), _mm512_mul_ps(sum16(a), scale));
    }
}

/// Column vectors of 16 held per head in one pass of [`accumulate`] over the rows: sixteen
/// accumulators for four heads, eight for fewer (enough to hide the FMA latency).
const fn columns_per_pass(g: usize) -> usize {
    if g >= 4 {
        4
    } else {
        8
    }
}

/// The passes of [`accumulate`] over `hd` columns for `g` heads: `(first column, vectors)`, the
/// widest first.
pub fn column_passes(g: usize, hd: usize) -> impl Iterator<Item = (usize, usize)> {
    let widest = columns_per_pass(g);
    let mut d = 0;
    std::iter::from_fn(move || {
        let left = (hd - d) / 16;
        if left == 0 {
            return None;
        }
        let w = [8, 4, 2, 1]
            .into_iter()
            .find(|&w| w <= widest && w <= left)
            .expect("1 fits");
        d += 16 * w;
        Some((d - 16 * w, w))
    })
}

/// `acc[h] = acc[h] * rescale[h] + Σ_c w[c * G + h] * v[rows[c]]` for `G` heads (`acc` is
/// `[G, hd]`), in the passes of [`column_passes`]: each head's columns stay in registers while
/// every row passes (the step's rows are in L1 after the first pass).
///
/// # Safety
/// [`available`]; `hd % 16 == 0`; `acc.len() == G * hd`; every row lies in `v`;
/// `w.len() >= rows.len() * G`; without `NAN_CODES`, no e4m3 NaN code in the rows.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
pub unsafe fn accumulate<T: KvElem, const G: usize, const NAN_CODES: bool>(
    w: &[f32],
    v: &[T],
    rows: &[usize],
    hd: usize,
    rescale: &[f32; 4],
    acc: &mut [f32],
    ahead: &mut Ahead<T>,
) {
    debug_assert!(hd.is_multiple_of(16) && acc.len() == G * hd && w.len() >= rows.len() * G);
    for (d, width) in column_passes(G, hd) {
        ahead.beat();
        match width {
            8 => columns::<T, G, 8, NAN_CODES>(w, v, rows, hd, rescale, acc, d),
            4 => columns::<T, G, 4, NAN_CODES>(w, v, rows, hd, rescale, acc, d),
            2 => columns::<T, G, 2, NAN_CODES>(w, v, rows, hd, rescale, acc, d),
            _ => columns::<T, G, 1, NAN_CODES>(w, v, rows, hd, rescale, acc, d),
        }
    }
}

/// Columns `d..d + 16 W` of [`accumulate`].
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn columns<T: KvElem, const G: usize, const W: usize, const NAN_CODES: bool>(
    w: &[f32],
    v: &[T],
    rows: &[usize],
    hd: usize,
    rescale: &[f32; 4],
    acc: &mut [f32],
    d: usize,
) {
    let (vp, ap, wp) = (v.as_ptr(), acc.as_mut_ptr(), w.as_ptr());
    // The accumulators hold the sums times `widening` while the rows pass.
    let mut a = [[_mm512_setzero_ps(); W]; G];
    for h in 0..G {
        let r = _mm512_set1_ps(rescale[h] * widening::<T>());
        for j in 0..W {
            a[h][j] = _mm512_mul_ps(r, _mm512_loadu_ps(ap.add(h * hd + d + 16 * j)));
        }
    }
    for (c, &r) in rows.iter().enumerate() {
        let mut x = [_mm512_setzero_ps(); W];
        if W == 1 {
            x[0] = load16::<T, NAN_CODES>(vp.add(r + d));
        } else {
            for j in (0..W).step_by(2) {
                [x[j], x[j + 1]] = load32::<T, NAN_CODES>(vp.add(r + d + 16 * j));
            }
        }
        for h in 0..G {
            let wh = _mm512_set1_ps(*wp.add(c * G + h));
            for j in 0..W {
                a[h][j] = _mm512_fmadd_ps(wh, x[j], a[h][j]);
            }
        }
    }
    let unwiden = _mm512_set1_ps(1.0 / widening::<T>());
    for h in 0..G {
        for j in 0..W {
            _mm512_storeu_ps(ap.add(h * hd + d + 16 * j), _mm512_mul_ps(a[h][j], unwiden));
        }
    }
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

    #[test]
    fn column_passes_cover_the_row_once_widest_first() {
        for g in [1, 2, 4] {
            for hd in (16..=512).step_by(16) {
                let mut next = 0;
                for (d, w) in column_passes(g, hd) {
                    assert_eq!(d, next);
                    assert!(w <= columns_per_pass(g) && w.is_power_of_two());
                    next += 16 * w;
                }
                assert_eq!(next, hd, "g {g} hd {hd}");
            }
        }
        assert_eq!(column_passes(4, 128).count(), 2);
        assert_eq!(column_passes(2, 128).count(), 1);
    }
}
