//! The attention and gather inner loops, written once over an instruction set's [`Lanes`] (see
//! [`super`] for the layouts). Each is `#[inline(always)]`: it becomes code only inside an
//! instruction set's entry point, which carries that set's target features.
//!
//! Rows are bounds-checked by the caller ([`super::StepRows`]); loads within a row use raw
//! pointers over the checked slices.

// Register arrays are indexed by head, row and column in lockstep with pointers.
#![allow(clippy::needless_range_loop)]

use super::exp_consts::{EXP_HI, EXP_LN2_HI, EXP_LN2_LO, EXP_LO, EXP_POLY};
use super::lanes::Lanes;
use super::{Ahead, SCORES_LEN};
use crate::kv::KvElem;

/// One step's rows of a pool: row `c` is `x[rows[c]..][..hd]`.
#[derive(Clone, Copy)]
pub struct PoolRows<'a, T> {
    pub x: &'a [T],
    pub rows: &'a [usize],
    pub hd: usize,
}

/// Scores of `rows` for `G` heads, `R = LANES / G` rows at a time: one accumulator per (row,
/// head), reduced together by [`Lanes::sums`] into `s[c * G..][..LANES]`, the `[row][head]`
/// layout. Each K row is converted once for all `G` heads; each query vector is loaded once for
/// `R` rows. Past the last row the last row is read again (its lanes are overwritten by the
/// caller).
///
/// # Safety
/// `S`'s instruction set is available; `hd % LANES == 0`; `G * R == LANES`; `q.len() >= G * hd`;
/// every row lies in `k`; `s.len() >= rows.len().div_ceil(R) * LANES`; without `NAN_CODES`, no
/// e4m3 NaN code in the rows.
#[inline(always)]
pub unsafe fn scores<S: Lanes, T: KvElem, const G: usize, const R: usize, const NAN_CODES: bool>(
    q: &[f32],
    k: PoolRows<T>,
    scale: f32,
    s: &mut [f32],
    ahead: &mut Ahead<T>,
) {
    let PoolRows { x: k, rows, hd } = k;
    let lanes = S::LANES;
    debug_assert!(G * R == lanes && hd.is_multiple_of(lanes) && q.len() >= G * hd);
    debug_assert!(s.len() >= rows.len().div_ceil(R) * lanes);
    let (q, kp, n) = (q.as_ptr(), k.as_ptr(), rows.len());
    let scale = S::splat(scale / S::widening::<T>());
    for c in (0..n).step_by(R) {
        ahead.beat();
        let mut row = [kp; R];
        for (i, p) in row.iter_mut().enumerate() {
            *p = kp.add(*rows.get_unchecked((c + i).min(n - 1)));
        }
        let mut a = S::zero_accs();
        let paired = if S::PAIRED_LOADS {
            hd - hd % (2 * lanes)
        } else {
            0
        };
        for d in (0..paired).step_by(2 * lanes) {
            let mut x = [[S::zero(); 2]; R];
            for i in 0..R {
                x[i] = S::load_kv2::<T, NAN_CODES>(row[i].add(d));
            }
            for (j, d) in [d, d + lanes].into_iter().enumerate() {
                for h in 0..G {
                    let qh = S::load(q.add(h * hd + d));
                    for i in 0..R {
                        a[i * G + h] = S::fmadd(qh, x[i][j], a[i * G + h]);
                    }
                }
            }
        }
        for d in (paired..hd).step_by(lanes) {
            let mut x = [S::zero(); R];
            for i in 0..R {
                x[i] = S::load_kv::<T, NAN_CODES>(row[i].add(d));
            }
            for h in 0..G {
                let qh = S::load(q.add(h * hd + d));
                for i in 0..R {
                    a[i * G + h] = S::fmadd(qh, x[i], a[i * G + h]);
                }
            }
        }
        S::store(s.as_mut_ptr().add(c * G), S::mul(S::sums(a), scale));
    }
}

/// The four chains of a maximum or a sum, as one.
#[inline(always)]
unsafe fn join4<S: Lanes, const MAX: bool>(a: [S::V; 4]) -> S::V {
    match MAX {
        true => S::max(S::max(a[0], a[1]), S::max(a[2], a[3])),
        false => S::add(S::add(a[0], a[1]), S::add(a[2], a[3])),
    }
}

/// A vector whose lane `l` holds `x[l % G]`: one value per head, in the `[row][head]` layout.
#[inline(always)]
unsafe fn per_lane<S: Lanes, const G: usize>(x: &[f32; G]) -> S::V {
    let lanes: [f32; MAX_LANES] = std::array::from_fn(|l| x[l % G]);
    S::load(lanes.as_ptr())
}

/// The widest vector of any instruction set.
const MAX_LANES: usize = 16;

/// [`super::Kernels::softmax`] over whole vectors of `[row][head]` scores (padding lanes -inf),
/// in two passes over them (in L1): their maximum, then their weights and the weights' sum.
///
/// # Safety
/// `S`'s instruction set is available; `s.len() % LANES == 0`, `0 < s.len() <= SCORES_LEN`; `G`
/// one of 1, 2, 4.
#[inline(always)]
pub unsafe fn softmax<S: Lanes, const G: usize>(
    s: &mut [f32],
    maxs: &mut [f32; G],
    sums: &mut [f32; G],
) -> [f32; 4] {
    let lanes = S::LANES;
    debug_assert!(s.len().is_multiple_of(lanes) && !s.is_empty() && s.len() <= SCORES_LEN);
    // Each pass in four independent chains (one would wait on each operation's latency),
    // unrolled so that each chain has a register (no closures: one not inlined into the
    // instruction set's entry point would call its intrinsics).
    let (p, n) = (s.as_mut_ptr(), s.len() / lanes);
    let whole = n - n % 4;
    let mut m = [S::splat(f32::NEG_INFINITY); 4];
    for i in (0..whole).step_by(4) {
        for (j, m) in m.iter_mut().enumerate() {
            *m = S::max(*m, S::load(p.add((i + j) * lanes)));
        }
    }
    for i in whole..n {
        m[0] = S::max(m[0], S::load(p.add(i * lanes)));
    }
    let m = join4::<S, true>(m);
    let old = per_lane::<S, G>(maxs);
    let new = S::max(S::max_across_rows::<G>(m), old);
    // 0 on the first step (max was -inf), when the sums and accumulators are still 0.
    let rescale = exp::<S>(S::sub(old, new));
    let mut sum = [S::zero(); 4];
    for i in (0..whole).step_by(4) {
        for (j, sum) in sum.iter_mut().enumerate() {
            let at = p.add((i + j) * lanes);
            let w = exp::<S>(S::sub(S::load(at), new));
            S::store(at, w);
            *sum = S::add(*sum, w);
        }
    }
    for i in whole..n {
        let at = p.add(i * lanes);
        let w = exp::<S>(S::sub(S::load(at), new));
        S::store(at, w);
        sum[0] = S::add(sum[0], w);
    }
    let sum = S::sum_across_rows::<G>(join4::<S, false>(sum));
    let (mut new_l, mut rescale_l, mut sum_l) =
        ([0f32; MAX_LANES], [0f32; MAX_LANES], [0f32; MAX_LANES]);
    S::store(new_l.as_mut_ptr(), new);
    S::store(rescale_l.as_mut_ptr(), rescale);
    S::store(sum_l.as_mut_ptr(), sum);
    for h in 0..G {
        maxs[h] = new_l[h];
        sums[h] = sums[h] * rescale_l[h] + sum_l[h];
    }
    std::array::from_fn(|h| rescale_l[h])
}

/// `e^x` for every lane (Cephes' `expf`: range reduction by ln 2, degree-6 polynomial; about 2
/// ulp). Lanes below -87.3 (including -inf) give 0.
#[inline(always)]
pub unsafe fn exp<S: Lanes>(x: S::V) -> S::V {
    let x_in = S::min(S::max(x, S::splat(EXP_LO)), S::splat(EXP_HI));
    let n = S::round(S::mul(x_in, S::splat(std::f32::consts::LOG2_E)));
    // r = x - n ln 2, with ln 2 split in two so the product is exact.
    let r = S::fnmadd(n, S::splat(EXP_LN2_HI), x_in);
    let r = S::fnmadd(n, S::splat(EXP_LN2_LO), r);
    let mut p = S::splat(EXP_POLY[0]);
    for c in &EXP_POLY[1..] {
        p = S::fmadd(p, r, S::splat(*c));
    }
    let r2 = S::mul(r, r);
    let y = S::add(S::fmadd(p, r2, r), S::splat(1.0));
    S::zero_below(x, EXP_LO, S::times_pow2(y, n))
}

/// The passes of [`accumulate`] over `hd` columns for `g` heads: `(first column, vectors)`, the
/// widest first, at most `S::widest_pass(g)` vectors of `LANES` columns each.
pub fn column_passes(
    lanes: usize,
    widest: usize,
    hd: usize,
) -> impl Iterator<Item = (usize, usize)> {
    let mut d = 0;
    std::iter::from_fn(move || {
        let left = (hd - d) / lanes;
        if left == 0 {
            return None;
        }
        let w = [8, 4, 2, 1]
            .into_iter()
            .find(|&w| w <= widest && w <= left)
            .expect("1 fits");
        d += lanes * w;
        Some((d - lanes * w, w))
    })
}

/// `acc[h] = acc[h] * rescale[h] + Σ_c w[c * G + h] * v[rows[c]]` for `G` heads (`acc` is
/// `[G, hd]`), in the passes of [`column_passes`]: each head's columns stay in registers while
/// every row passes (the step's rows are in L1 after the first pass).
///
/// # Safety
/// `S`'s instruction set is available; `hd % LANES == 0`; `acc.len() == G * hd`; every row lies
/// in `v`; `w.len() >= v.rows.len() * G`; without `NAN_CODES`, no e4m3 NaN code in the rows.
#[inline(always)]
pub unsafe fn accumulate<S: Lanes, T: KvElem, const G: usize, const NAN_CODES: bool>(
    w: &[f32],
    v: PoolRows<T>,
    rescale: &[f32; 4],
    acc: &mut [f32],
    ahead: &mut Ahead<T>,
) {
    let hd = v.hd;
    debug_assert!(
        hd.is_multiple_of(S::LANES) && acc.len() == G * hd && w.len() >= v.rows.len() * G
    );
    for (d, width) in column_passes(S::LANES, S::widest_pass(G), hd) {
        ahead.beat();
        let pass = Pass { w, v, rescale, d };
        match width {
            8 => columns::<S, T, G, 8, NAN_CODES>(pass, acc),
            4 => columns::<S, T, G, 4, NAN_CODES>(pass, acc),
            2 => columns::<S, T, G, 2, NAN_CODES>(pass, acc),
            _ => columns::<S, T, G, 1, NAN_CODES>(pass, acc),
        }
    }
}

/// What one pass of [`accumulate`] reads: the weights, the rows of `v`, and its first column.
#[derive(Clone, Copy)]
struct Pass<'a, T> {
    w: &'a [f32],
    v: PoolRows<'a, T>,
    rescale: &'a [f32; 4],
    d: usize,
}

/// Columns `d..d + W LANES` of [`accumulate`].
#[inline(always)]
unsafe fn columns<S: Lanes, T: KvElem, const G: usize, const W: usize, const NAN_CODES: bool>(
    pass: Pass<T>,
    acc: &mut [f32],
) {
    let Pass { w, v, rescale, d } = pass;
    let PoolRows { x: v, rows, hd } = v;
    let lanes = S::LANES;
    let (vp, ap, wp) = (v.as_ptr(), acc.as_mut_ptr(), w.as_ptr());
    // The accumulators hold the sums times `widening` while the rows pass.
    let widening = S::widening::<T>();
    let mut a = [[S::zero(); W]; G];
    for h in 0..G {
        let r = S::splat(rescale[h] * widening);
        for j in 0..W {
            a[h][j] = S::mul(r, S::load(ap.add(h * hd + d + lanes * j)));
        }
    }
    for (c, &r) in rows.iter().enumerate() {
        let mut x = [S::zero(); W];
        if W == 1 {
            x[0] = S::load_kv::<T, NAN_CODES>(vp.add(r + d));
        } else {
            for j in (0..W).step_by(2) {
                [x[j], x[j + 1]] = S::load_kv2::<T, NAN_CODES>(vp.add(r + d + lanes * j));
            }
        }
        for h in 0..G {
            let wh = S::splat(*wp.add(c * G + h));
            for j in 0..W {
                a[h][j] = S::fmadd(wh, x[j], a[h][j]);
            }
        }
    }
    for h in 0..G {
        for j in 0..W {
            let out = match widening == 1.0 {
                true => a[h][j],
                false => S::mul(a[h][j], S::splat(1.0 / widening)),
            };
            S::store(ap.add(h * hd + d + lanes * j), out);
        }
    }
}

/// The f32 sum of `x` (any length), four vector accumulators wide.
///
/// # Safety
/// `S`'s instruction set is available.
#[inline(always)]
pub unsafe fn sum<S: Lanes, T: KvElem>(x: &[T]) -> f32 {
    let lanes = S::LANES;
    let mut acc = [S::zero(); 4];
    let mut chunks = x.chunks_exact(4 * lanes);
    for c in &mut chunks {
        let p = c.as_ptr();
        for (j, a) in acc.iter_mut().enumerate() {
            *a = S::add(*a, S::load_kv::<T, true>(p.add(lanes * j)));
        }
    }
    let mut rest = chunks.remainder().chunks_exact(lanes);
    for c in &mut rest {
        acc[0] = S::add(acc[0], S::load_kv::<T, true>(c.as_ptr()));
    }
    let total = S::add(S::add(acc[0], acc[1]), S::add(acc[2], acc[3]));
    S::hsum(total) / S::widening::<T>() + rest.remainder().iter().map(|e| e.to_f32()).sum::<f32>()
}
