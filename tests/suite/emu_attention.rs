//! The decode-attention kernels on the emulator: every instance (dtype x head dim x GQA group) on
//! CUDA cores and every tensor-core instance, block sizes 1..256, ragged lengths including 0,
//! shuffled block tables, one partition and split-K with the merge kernel, several fiber schedules. Outputs start as NaN; every slot no
//! token owns holds NaN, so a kernel reading past a sequence or missing an output fails.

use half::{bf16, f16};
use pagedkv::attention::{
    attention_f64, relative_error, tolerance, AttentionShape, Problem, SplitPlan, CHUNK,
};
use pagedkv::device::cpu::attention::{decode_attention_scaled as cpu_attention, PagedRows};
use pagedkv::emu::attention::{decode_attention_on, decode_attention_with, Layout};
use pagedkv::emu::{EmuElem, EmuError, Schedule};
use pagedkv::kv::{Dtype, Fp8E4m3, Fp8E5m2, KvElem};
use pagedkv::launch::attention::has_instance;
use pagedkv::launch::instances::attention_instances;
use pagedkv::launch::Engine;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const SCHEDULES: [Schedule; 3] = [Schedule::Forward, Schedule::Reverse, Schedule::Shuffled(7)];

fn bits<T: KvElem>(x: &[T]) -> &[u8] {
    bytemuck::cast_slice(x)
}

/// One instance: a random problem, run paged and contiguous, whole and split; q of `T`, K and V
/// stored as `KV` (fp8 with calibrated scales, or `T`).
fn check_instance<T: KvElem + EmuElem, KV: KvElem + EmuElem>(
    engine: Engine,
    head_dim: usize,
    group: usize,
    block_size: usize,
    rng: &mut StdRng,
    bound: f64,
) {
    let kv_heads = rng.random_range(1..=2);
    let lens: Vec<usize> = (0..rng.random_range(2..=3))
        .map(|i| {
            if i == 1 {
                0
            } else {
                rng.random_range(1..=2 * CHUNK + 40)
            }
        })
        .collect();
    let shape = AttentionShape {
        num_heads: kv_heads * group,
        num_kv_heads: kv_heads,
        head_dim,
        scale: rng.random_range(0.05..0.3),
    };
    let p = Problem::<T, KV>::new(shape, block_size, &lens, rng.random()).unwrap();
    let reference = attention_f64(&p);
    let schedule = SCHEDULES[rng.random_range(0..SCHEDULES.len())];
    let whole = SplitPlan {
        num_partitions: 1,
        partition_size: p.max_len,
    };
    let split = SplitPlan {
        num_partitions: p.max_len.div_ceil(CHUNK),
        partition_size: CHUNK,
    };
    let what = format!(
        "{engine}: q {:?}, K/V {:?}, d{head_dim} g{group} bs{block_size} lens {lens:?}",
        T::DTYPE,
        KV::DTYPE
    );
    let decode_attention =
        |layout, plan, schedule| decode_attention_on(engine, &p.data(), layout, plan, schedule);

    let paged = decode_attention(Layout::Paged, whole, schedule).unwrap();
    let err = relative_error(&paged, &reference);
    assert!(err <= bound, "{what}: paged error {err:.2e}");
    let contiguous = decode_attention(Layout::Contiguous, whole, schedule).unwrap();
    assert_eq!(
        bits(&paged),
        bits(&contiguous),
        "{what}: paged and contiguous differ"
    );

    let paged_split = decode_attention(Layout::Paged, split, schedule).unwrap();
    let err = relative_error(&paged_split, &reference);
    assert!(err <= bound, "{what}: split paged error {err:.2e}");
    let contiguous_split = decode_attention(Layout::Contiguous, split, schedule).unwrap();
    assert_eq!(
        bits(&paged_split),
        bits(&contiguous_split),
        "{what}: split paged and contiguous differ"
    );

    // The kernel and the CPU implementation agree more closely than either meets the bound.
    let mut cpu = vec![T::from_f32(f32::NAN); p.q.len()];
    cpu_attention(
        &shape,
        &p.q,
        &p.k,
        &p.v,
        &p.k_scale,
        &p.v_scale,
        &p.lens,
        &PagedRows {
            spec: &p.spec,
            table: &p.table,
        },
        &mut cpu,
    );
    let cpu_f64: Vec<f64> = cpu.iter().map(|x| x.to_f32() as f64).collect();
    let err = relative_error(&paged, &cpu_f64);
    assert!(
        err <= bound,
        "{what}: kernel vs CPU implementation {err:.2e}"
    );
}

/// Every instance kernels/attention.cuh builds for q `T` and K/V `KV` (the list build.rs reads
/// from it), on CUDA cores and, for the shapes that have one, on tensor cores; against the oracle
/// over the stored K and V the bound is q's dtype's.
fn every_instance<T: KvElem + EmuElem, KV: KvElem + EmuElem>(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut block_sizes = (0..=8).map(|l| 1usize << l).cycle();
    let instances: Vec<_> = attention_instances()
        .into_iter()
        .filter(|i| i.dtype == T::DTYPE && i.kv_dtype == KV::DTYPE)
        .collect();
    assert!(
        !instances.is_empty(),
        "no {:?}/{:?} instance built",
        T::DTYPE,
        KV::DTYPE
    );
    for i in instances {
        for engine in [Engine::CudaCores, Engine::TensorCores] {
            if has_instance(engine, i.dtype, i.kv_dtype, i.head_dim, i.group) {
                let bs = block_sizes.next().unwrap();
                let bound = tolerance(T::DTYPE);
                check_instance::<T, KV>(engine, i.head_dim, i.group, bs, &mut rng, bound);
            }
        }
    }
}

#[test]
fn f16_instances_match_the_oracle() {
    every_instance::<f16, f16>(1);
}

#[test]
fn bf16_instances_match_the_oracle() {
    every_instance::<bf16, bf16>(2);
}

#[test]
fn f32_instances_match_the_oracle() {
    every_instance::<f32, f32>(3);
}

#[test]
fn fp8_e4m3_instances_match_the_oracle() {
    every_instance::<f16, Fp8E4m3>(5);
    every_instance::<bf16, Fp8E4m3>(6);
}

#[test]
fn fp8_e5m2_instances_match_the_oracle() {
    every_instance::<f16, Fp8E5m2>(7);
    every_instance::<bf16, Fp8E5m2>(8);
}

#[test]
fn every_block_size_reads_through_the_table() {
    let mut rng = StdRng::seed_from_u64(4);
    let bound = tolerance(Dtype::F16);
    for log_bs in 0..=8 {
        for engine in [Engine::CudaCores, Engine::TensorCores] {
            check_instance::<f16, f16>(engine, 128, 4, 1 << log_bs, &mut rng, bound);
            check_instance::<f16, Fp8E4m3>(engine, 128, 8, 1 << log_bs, &mut rng, bound);
        }
    }
}

/// The ring's cp.async wait matters, and the emulator shows it: a copy's destination holds poison
/// until its group is waited for, so the kernel with its wait removed, or waiting for one group too
/// few, reads poison and fails, while the real kernel passes the same problem (on either engine:
/// the two kernels share the ring). The poison shows either in the block-table words (a row offset
/// from a poisoned word leaves the pool: the launch fails) or in K and V (NaN reaches the output).
#[test]
fn a_kernel_with_a_bad_pipeline_wait_fails() {
    for (engine, group, name) in [
        (Engine::CudaCores, 4, "paged_attention_f16_d128_g4"),
        (Engine::TensorCores, 8, "paged_attention_tc_f16_d128_g8"),
    ] {
        let shape = AttentionShape {
            num_heads: group,
            num_kv_heads: 1,
            head_dim: 128,
            scale: 0.1,
        };
        let p = Problem::<f16>::new(shape, 16, &[300, 77], 9).unwrap();
        let reference = attention_f64(&p);
        let whole = SplitPlan {
            num_partitions: 1,
            partition_size: p.max_len,
        };
        let good = decode_attention_on(engine, &p.data(), Layout::Paged, whole, Schedule::Forward)
            .unwrap();
        assert!(relative_error(&good, &reference) <= tolerance(Dtype::F16));
        for mutant in ["no_wait", "short_wait"] {
            let kernel = format!("mutant_{mutant}_{name}");
            let data = p.data();
            match decode_attention_with(
                engine,
                &data,
                Layout::Paged,
                &kernel,
                whole,
                Schedule::Forward,
            ) {
                Err(e) => assert!(
                    matches!(e, EmuError::OutOfBounds(_)),
                    "{kernel}: unexpected failure {e}"
                ),
                Ok(out) => {
                    let err = relative_error(&out, &reference);
                    assert!(
                        err.is_infinite(),
                        "{kernel}: error {err:.2e}: the poison it read should reach the output as \
                         NaN"
                    );
                }
            }
        }
    }
}
