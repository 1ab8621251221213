//! Sixteen lanes in plain Rust, with AVX-512's shape: the same width, paired loads, passes and
//! e4m3 widening. The tests run [`super::kernels`] on it, so the sixteen-lane arithmetic of the
//! kernels (rows per run, paired loads and their tail, the passes' widths, the widening undone)
//! is checked on any CPU, AVX-512 or not; what stays unchecked without AVX-512 is only the
//! intrinsics of [`super::avx512`]'s `Lanes`.

use super::lanes::{sixteen, Lanes};
use crate::kv::KvElem;

pub(super) struct Lanes16;

type V = [f32; 16];

fn each(a: V, b: V, op: impl Fn(f32, f32) -> f32) -> V {
    std::array::from_fn(|l| op(a[l], b[l]))
}

/// x86's `max`/`min`: `b` unless `a` is strictly past it (so `b` where either is NaN).
fn x86_pick(a: f32, b: f32, a_wins: bool) -> f32 {
    if a_wins {
        a
    } else {
        b
    }
}

impl Lanes for Lanes16 {
    type V = V;
    type Accs = [V; 16];
    const LANES: usize = 16;
    const PAIRED_LOADS: bool = true;

    fn widest_pass(g: usize) -> usize {
        sixteen::widest_pass(g)
    }
    fn widening<T: KvElem>() -> f32 {
        sixteen::widening::<T>()
    }

    unsafe fn zero() -> V {
        [0.0; 16]
    }
    unsafe fn splat(x: f32) -> V {
        [x; 16]
    }
    unsafe fn load(p: *const f32) -> V {
        std::array::from_fn(|l| *p.add(l))
    }
    unsafe fn store(p: *mut f32, v: V) {
        for (l, x) in v.into_iter().enumerate() {
            *p.add(l) = x;
        }
    }
    unsafe fn add(a: V, b: V) -> V {
        each(a, b, |x, y| x + y)
    }
    unsafe fn sub(a: V, b: V) -> V {
        each(a, b, |x, y| x - y)
    }
    unsafe fn mul(a: V, b: V) -> V {
        each(a, b, |x, y| x * y)
    }
    unsafe fn max(a: V, b: V) -> V {
        each(a, b, |x, y| x86_pick(x, y, x > y))
    }
    unsafe fn min(a: V, b: V) -> V {
        each(a, b, |x, y| x86_pick(x, y, x < y))
    }
    unsafe fn fmadd(a: V, b: V, c: V) -> V {
        std::array::from_fn(|l| a[l].mul_add(b[l], c[l]))
    }
    unsafe fn fnmadd(a: V, b: V, c: V) -> V {
        std::array::from_fn(|l| (-a[l]).mul_add(b[l], c[l]))
    }
    unsafe fn round(v: V) -> V {
        v.map(f32::round_ties_even)
    }
    unsafe fn times_pow2(y: V, n: V) -> V {
        each(y, n, |y, n| (y as f64 * (n as f64).exp2()) as f32)
    }
    unsafe fn zero_below(x: V, lo: f32, y: V) -> V {
        each(x, y, |x, y| if x < lo { 0.0 } else { y })
    }
    unsafe fn hsum(v: V) -> f32 {
        v.iter().sum()
    }
    unsafe fn load_kv<T: KvElem, const NAN_CODES: bool>(p: *const T) -> V {
        std::array::from_fn(|l| (*p.add(l)).to_f32() * Self::widening::<T>())
    }
    unsafe fn load_kv2<T: KvElem, const NAN_CODES: bool>(p: *const T) -> [V; 2] {
        [
            Self::load_kv::<T, NAN_CODES>(p),
            Self::load_kv::<T, NAN_CODES>(p.add(16)),
        ]
    }
    unsafe fn zero_accs() -> [V; 16] {
        [[0.0; 16]; 16]
    }
    unsafe fn sums(a: [V; 16]) -> V {
        a.map(|v| v.iter().sum())
    }
    unsafe fn max_across_rows<const G: usize>(v: V) -> V {
        across_rows::<G>(v, |x, y| x86_pick(x, y, x > y))
    }
    unsafe fn sum_across_rows<const G: usize>(v: V) -> V {
        across_rows::<G>(v, |x, y| x + y)
    }
}

fn across_rows<const G: usize>(v: V, op: impl Fn(f32, f32) -> f32) -> V {
    std::array::from_fn(|l| {
        (l % G..16)
            .step_by(G)
            .map(|i| v[i])
            .reduce(&op)
            .expect("G <= 16")
    })
}
