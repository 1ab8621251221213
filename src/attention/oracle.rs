//! The oracle: naive decode attention in f64 over K/V gathered token by token through
//! `block_table[t / B]`, `t % B`. Slow and obviously correct; independent of the CPU
//! implementation (no shared row helper, no online softmax, no f32).

use super::Problem;
use crate::kv::{Dtype, KvElem};
use rayon::prelude::*;

/// `[num_seqs, num_heads, head_dim]` in f64, over K and V as stored (dequantised with the
/// problem's scales).
pub fn attention_f64<T: KvElem, KV: KvElem>(p: &Problem<T, KV>) -> Vec<f64> {
    let paged = |buf: &[KV], scale: &[f32], at: usize, head: usize| {
        buf[at].to_f32() as f64 * scale[head] as f64
    };
    oracle(
        p,
        &|at, head| paged(&p.k, &p.k_scale, at, head),
        &|at, head| paged(&p.v, &p.v_scale, at, head),
    )
}

/// The same over K and V before quantisation: what an fp8 cache's output is compared with to
/// measure its accuracy. None when the problem did not keep them ([`super::ProblemOptions`]).
pub fn attention_f64_exact<T: KvElem, KV: KvElem>(p: &Problem<T, KV>) -> Option<Vec<f64>> {
    let (k, v) = p.exact.as_ref()?;
    // The exact values are contiguous; the oracle walks the pool's offsets, so map each pool
    // offset back to its (sequence, head, token) row of the contiguous tensor.
    let s = &p.shape;
    let (hd, bs) = (s.head_dim, p.spec.block_size);
    let mut row_of = vec![usize::MAX; p.k.len() / hd];
    for (seq, &len) in p.lens.iter().enumerate() {
        for head in 0..s.num_kv_heads {
            for t in 0..len as usize {
                let block = p.table.entries[seq * p.table.stride + t / bs] as usize;
                let pool_row = (block * s.num_kv_heads + head) * bs + t % bs;
                row_of[pool_row] = (seq * s.num_kv_heads + head) * p.max_len + t;
            }
        }
    }
    let exact = |buf: &[f32], at: usize| buf[row_of[at / hd] * hd + at % hd] as f64;
    Some(oracle(p, &|at, _| exact(k, at), &|at, _| exact(v, at)))
}

/// The naive attention, with K and V read through `k(at, kv_head)` and `v(at, kv_head)` at pool
/// element offsets.
fn oracle<T: KvElem, KV: KvElem>(
    p: &Problem<T, KV>,
    k_at: &(dyn Fn(usize, usize) -> f64 + Sync),
    v_at: &(dyn Fn(usize, usize) -> f64 + Sync),
) -> Vec<f64> {
    let s = &p.shape;
    let (hd, group) = (s.head_dim, s.num_heads / s.num_kv_heads);
    let bs = p.spec.block_size;
    let mut out = vec![0f64; p.q.len()];
    out.par_chunks_mut(hd).enumerate().for_each(|(i, o)| {
        let (seq, head) = (i / s.num_heads, i % s.num_heads);
        let kv_head = head / group;
        let len = p.lens[seq] as usize;
        if len == 0 {
            return;
        }
        let q: Vec<f64> = p.q[i * hd..(i + 1) * hd]
            .iter()
            .map(|x| x.to_f32() as f64)
            .collect();
        let at = |t: usize, d: usize| {
            let block = p.table.entries[seq * p.table.stride + t / bs] as usize;
            (((block * s.num_kv_heads + kv_head) * bs) + t % bs) * hd + d
        };
        let scores: Vec<f64> = (0..len)
            .map(|t| (0..hd).map(|d| q[d] * k_at(at(t, d), kv_head)).sum::<f64>() * s.scale as f64)
            .collect();
        let max = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let weights: Vec<f64> = scores.iter().map(|x| (x - max).exp()).collect();
        let total: f64 = weights.iter().sum();
        for (d, od) in o.iter_mut().enumerate() {
            *od = (0..len)
                .map(|t| weights[t] * v_at(at(t, d), kv_head))
                .sum::<f64>()
                / total;
        }
    });
    out
}

/// The largest [`relative_error`] decode attention with K, V, Q and output in `dtype` may have
/// against the oracle; also the bound between two implementations (a kernel and the CPU's),
/// which round the same f32 computation. The oracle reads the same rounded inputs, so what is left
/// is the output's rounding to `dtype` and the f32 arithmetic (dot products, softmax sums, the
/// weighted sum of V over thousands of tokens, the kernels' fast `exp`):
/// - f16 (11 significant bits): one rounding is at most 2^-11 ≈ 4.9e-4; 2e-3 is about four;
/// - bf16 (8 bits): one rounding is at most 2^-8 ≈ 3.9e-3; 1e-2 is between two and three;
/// - f32: the output is not rounded again, so the f32 accumulation alone (2^-24 ≈ 6e-8 per
///   operation, growing with the context) sets the bound.
///
/// With K and V stored in fp8 the output is still q's dtype, and against the oracle over the
/// stored (dequantised) K and V the bound is q's. What fp8 costs is measured against the oracle
/// over K and V before quantisation ([`super::attention_f64_exact`]), with scales calibrated
/// from the values' largest magnitude; the bound for that is one unit roundoff of the format:
/// - fp8 e4m3 (4 significant bits): 2^-4 = 6.25e-2;
/// - fp8 e5m2 (3 significant bits): 2^-3 = 1.25e-1.
///
/// Each element errs by up to half that, and the output mixes many elements whose errors partly
/// cancel: tests/suite/attention_fp8.rs measures 0.4-0.65 of the bound for e4m3 and 0.4-0.75 for e5m2
/// on uniform values and on activations with outlier channels, and 12 times it for an unscaled
/// e4m3 cache of activations past 448.
pub fn tolerance(dtype: Dtype) -> f64 {
    match dtype {
        Dtype::F16 => 2e-3,
        Dtype::Bf16 => 1e-2,
        Dtype::F32 => 1e-5,
        Dtype::Fp8E4m3 => 0.0625,
        Dtype::Fp8E5m2 => 0.125,
    }
}

/// ‖out − ref‖ / ‖ref‖; NaN anywhere in `out` gives infinity, so NaN never passes.
pub fn relative_error<T: KvElem>(out: &[T], reference: &[f64]) -> f64 {
    let mut num = 0.0;
    let mut den = 0.0;
    for (o, r) in out.iter().zip(reference) {
        let o = o.to_f32() as f64;
        if !o.is_finite() {
            return f64::INFINITY;
        }
        num += (o - r) * (o - r);
        den += r * r;
    }
    if den == 0.0 {
        return if num == 0.0 { 0.0 } else { f64::INFINITY };
    }
    (num / den).sqrt()
}
