//! CPU decode attention against the f64 oracle: random problems across dtypes, head dims, GQA
//! groups, every block size, ragged lengths (including 0), shuffled block tables. Unused slots of
//! the pool hold NaN, so reading past a sequence fails the check.

use half::{bf16, f16};
use pagedkv::attention::{
    attention_f64, relative_error, tolerance, AttentionShape, Problem, ProblemOptions, Scales,
};
use pagedkv::device::cpu::attention::{decode_attention, ContiguousRows, PagedRows};
use pagedkv::kv::{Dtype, Fp8E4m3, Fp8E5m2, KvElem};
use pagedkv::launch::Layout;
use rand::{Rng, SeedableRng};

fn check<T: KvElem>(
    shape: AttentionShape,
    block_size: usize,
    lens: &[usize],
    seed: u64,
    bound: f64,
) {
    let p = Problem::<T>::new(shape, block_size, lens, seed).unwrap();
    let reference = attention_f64(&p);
    let nan = T::from_f32(f32::NAN);
    let mut paged = vec![nan; p.q.len()];
    decode_attention(
        &shape,
        &p.q,
        &p.k,
        &p.v,
        &p.lens,
        &PagedRows {
            spec: &p.spec,
            table: &p.table,
        },
        &mut paged,
    );
    let mut contiguous = vec![nan; p.q.len()];
    let rows = ContiguousRows {
        num_kv_heads: shape.num_kv_heads,
        max_len: p.max_len,
        head_dim: shape.head_dim,
    };
    decode_attention(
        &shape,
        &p.q,
        &p.k_contiguous,
        &p.v_contiguous,
        &p.lens,
        &rows,
        &mut contiguous,
    );
    let e = relative_error(&paged, &reference);
    assert!(
        e <= bound,
        "{:?} bs {block_size} lens {lens:?}: paged error {e}",
        T::DTYPE
    );
    // Same math, same order: the two layouts agree exactly.
    assert_eq!(
        bytemuck::cast_slice::<T, u8>(&paged),
        bytemuck::cast_slice::<T, u8>(&contiguous),
        "paged and contiguous differ"
    );
}

/// An fp8 cache (one scale per KV head) with f16 q: against the oracle over the values as stored
/// (dequantised), so the bound is f16's, not the format's; paged and contiguous agree exactly.
fn check_fp8<KV: KvElem>(shape: AttentionShape, block_size: usize, lens: &[usize], seed: u64) {
    let opts = ProblemOptions {
        scales: Scales::CalibratedPerHead,
        ..ProblemOptions::default()
    };
    let p = Problem::<f16, KV>::with_options(shape, block_size, lens, seed, opts).unwrap();
    let reference = attention_f64(&p);
    let [mut paged, mut contiguous] = [0, 1].map(|_| vec![f16::from_f32(f32::NAN); p.q.len()]);
    p.attend_cpu(Layout::Paged, &mut paged);
    p.attend_cpu(Layout::Contiguous, &mut contiguous);
    let e = relative_error(&paged, &reference);
    assert!(
        e <= tolerance(Dtype::F16),
        "{:?} bs {block_size} lens {lens:?}: paged error {e}",
        KV::DTYPE
    );
    assert_eq!(
        bytemuck::cast_slice::<f16, u8>(&paged),
        bytemuck::cast_slice::<f16, u8>(&contiguous),
        "paged and contiguous differ"
    );
}

fn random_case(rng: &mut impl Rng) -> (AttentionShape, usize, Vec<usize>) {
    let head_dim = [16, 64, 128, 256][rng.random_range(0..4)];
    let kv_heads = rng.random_range(1..=3);
    let group = [1, 2, 4, 8][rng.random_range(0..4)];
    let block_size = 1 << rng.random_range(0..=8);
    let lens: Vec<usize> = (0..rng.random_range(1..5))
        .map(|_| rng.random_range(0..300))
        .collect();
    let shape = AttentionShape {
        num_heads: kv_heads * group,
        num_kv_heads: kv_heads,
        head_dim,
        scale: rng.random_range(0.05..0.5),
    };
    (shape, block_size, lens)
}

#[test]
fn every_dtype_and_block_size_matches_the_oracle() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    for log_bs in 0..=8 {
        for _ in 0..2 {
            let (shape, _, lens) = random_case(&mut rng);
            let seed = rng.random();
            check::<f16>(shape, 1 << log_bs, &lens, seed, tolerance(Dtype::F16));
            check::<bf16>(shape, 1 << log_bs, &lens, seed, tolerance(Dtype::Bf16));
            check::<f32>(shape, 1 << log_bs, &lens, seed, tolerance(Dtype::F32));
            check_fp8::<Fp8E4m3>(shape, 1 << log_bs, &lens, seed);
            check_fp8::<Fp8E5m2>(shape, 1 << log_bs, &lens, seed);
        }
    }
}

#[test]
fn a_wrong_answer_is_caught() {
    // The check itself must be able to fail: perturb one output element.
    let shape = AttentionShape {
        num_heads: 4,
        num_kv_heads: 2,
        head_dim: 64,
        scale: 0.125,
    };
    let p = Problem::<f32>::new(shape, 16, &[50, 70], 3).unwrap();
    let reference = attention_f64(&p);
    let mut out = vec![0f32; p.q.len()];
    decode_attention(
        &shape,
        &p.q,
        &p.k,
        &p.v,
        &p.lens,
        &PagedRows {
            spec: &p.spec,
            table: &p.table,
        },
        &mut out,
    );
    assert!(relative_error(&out, &reference) < tolerance(Dtype::F32));
    out[17] += 0.05;
    assert!(relative_error(&out, &reference) > 1e-3);
    out[17] = f32::NAN;
    assert_eq!(relative_error(&out, &reference), f64::INFINITY);
}

#[test]
fn empty_sequences_give_zeros_and_unused_slots_are_poisoned() {
    let shape = AttentionShape {
        num_heads: 2,
        num_kv_heads: 1,
        head_dim: 32,
        scale: 0.2,
    };
    let p = Problem::<f32>::new(shape, 8, &[0, 5], 9).unwrap();
    // Slots 5..8 of the second sequence's block are NaN: the kernel must stop at the length.
    let (block, _) = p.table.locate(1, 0);
    assert!(p.k[p.spec.elem_offset(block, 0, 5, 0)].is_nan());
    let mut out = vec![f32::NAN; p.q.len()];
    decode_attention(
        &shape,
        &p.q,
        &p.k,
        &p.v,
        &p.lens,
        &PagedRows {
            spec: &p.spec,
            table: &p.table,
        },
        &mut out,
    );
    assert!(out[..64].iter().all(|&x| x == 0.0));
    assert!(out[64..].iter().all(|x| x.is_finite()));
}
