//! Decode attention on a real GPU against the f64 oracle: every dtype, head dims, GQA groups, on
//! CUDA cores and (the shapes built for them) tensor cores, block sizes 1..256, ragged lengths, one
//! partition and split-K. Ignored by a plain `cargo test`
//! (`cargo test` lists them as ignored); `scripts/gpu-check` runs them with `--include-ignored` on
//! a GPU, where a missing GPU is a failure, never a pass.

use half::{bf16, f16};
use pagedkv::attention::{
    attention_f64, relative_error, tolerance, AttentionShape, Problem, SplitPlan, CHUNK,
};
use pagedkv::device::cuda::{CudaDevice, Layout};
use pagedkv::kv::{Fp8E4m3, Fp8E5m2, KvElem};
use pagedkv::launch::attention::has_instance;
use pagedkv::launch::instances::{attention_instances, AttentionInstance};
use pagedkv::launch::Engine;
use rand::{Rng, SeedableRng};

fn gpu() -> CudaDevice {
    CudaDevice::open(0).unwrap_or_else(|e| panic!("a GPU test run without a GPU: {e}"))
}

fn run<T, KV>(
    dev: &CudaDevice,
    engine: Engine,
    p: &Problem<T, KV>,
    plan: SplitPlan,
    layout: Layout,
) -> Vec<T>
where
    T: KvElem + cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits,
    KV: KvElem + cudarc::driver::DeviceRepr,
{
    let mut dp = dev.upload_attention_on(engine, &p.data(), plan).unwrap();
    dev.poison_output(&mut dp).unwrap();
    dev.launch_attention(&mut dp, layout).unwrap();
    dev.download(&dp.out).unwrap()
}

/// Every instance kernels/attention.cuh builds for q `T` and K/V `KV` (the list build.rs reads
/// from it); against the oracle over the stored K and V the bound is q's dtype's.
fn check<T, KV>(dev: &CudaDevice, seed: u64)
where
    T: KvElem + cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits,
    KV: KvElem + cudarc::driver::DeviceRepr,
{
    let bound = tolerance(T::DTYPE);
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // The emulated driver runs kernels on the CPU: contexts of a few chunks (still split into
    // several partitions) keep the same coverage in seconds.
    let max_len = if dev.info.emulated {
        2 * CHUNK + 40
    } else {
        3000
    };
    let ours = |i: &AttentionInstance| i.dtype == T::DTYPE && i.kv_dtype == KV::DTYPE;
    let engines = |i: &AttentionInstance| {
        [Engine::CudaCores, Engine::TensorCores]
            .into_iter()
            .filter(|&e| has_instance(e, i.dtype, i.kv_dtype, i.head_dim, i.group))
            .collect::<Vec<_>>()
    };
    for i in attention_instances().into_iter().filter(ours) {
        let (hd, group) = (i.head_dim, i.group);
        for engine in engines(&i) {
            for log_bs in [0, 4, 8, rng.random_range(0..=8)] {
                let kv_heads = rng.random_range(1..=4);
                let lens: Vec<usize> = (0..rng.random_range(1..=6))
                    .map(|_| rng.random_range(0..max_len))
                    .collect();
                let shape = AttentionShape {
                    num_heads: kv_heads * group,
                    num_kv_heads: kv_heads,
                    head_dim: hd,
                    scale: 0.1,
                };
                let p = Problem::<T, KV>::new(shape, 1 << log_bs, &lens, rng.random()).unwrap();
                let reference = attention_f64(&p);
                let auto = dev.attention_plan_on(engine, &p.data()).unwrap();
                let forced = SplitPlan {
                    num_partitions: p.max_len.div_ceil(CHUNK),
                    partition_size: CHUNK,
                };
                let whole = SplitPlan {
                    num_partitions: 1,
                    partition_size: p.max_len,
                };
                for plan in [whole, auto, forced] {
                    let paged = run(dev, engine, &p, plan, Layout::Paged);
                    let contiguous = run(dev, engine, &p, plan, Layout::Contiguous);
                    let what = format!(
                        "{engine}: q {:?}, K/V {:?} d{hd} g{group} bs{} {plan:?}",
                        T::DTYPE,
                        KV::DTYPE,
                        1 << log_bs
                    );
                    let e = relative_error(&paged, &reference);
                    assert!(e <= bound, "{what}: error {e:.2e}");
                    assert_eq!(
                        bytemuck::cast_slice::<T, u8>(&paged),
                        bytemuck::cast_slice::<T, u8>(&contiguous),
                        "{what}: paged and contiguous differ"
                    );
                }
            }
        }
    }
}

// One test per q and K/V dtype pair: they run side by side (on the emulated driver, minutes of
// CPU in one test otherwise).
#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn gpu_attention_matches_the_oracle_f16() {
    check::<f16, f16>(&gpu(), 1);
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn gpu_attention_matches_the_oracle_bf16() {
    check::<bf16, bf16>(&gpu(), 2);
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn gpu_attention_matches_the_oracle_f32() {
    check::<f32, f32>(&gpu(), 3);
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn gpu_attention_matches_the_oracle_f16_fp8e4m3() {
    check::<f16, Fp8E4m3>(&gpu(), 4);
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn gpu_attention_matches_the_oracle_bf16_fp8e4m3() {
    check::<bf16, Fp8E4m3>(&gpu(), 5);
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn gpu_attention_matches_the_oracle_f16_fp8e5m2() {
    check::<f16, Fp8E5m2>(&gpu(), 6);
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn gpu_attention_matches_the_oracle_bf16_fp8e5m2() {
    check::<bf16, Fp8E5m2>(&gpu(), 7);
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn gpu_rejects_a_table_entry_outside_the_pool() {
    let dev = gpu();
    let shape = AttentionShape {
        num_heads: 8,
        num_kv_heads: 2,
        head_dim: 128,
        scale: 0.1,
    };
    let mut p = Problem::<f16>::new(shape, 16, &[40, 7], 5).unwrap();
    p.table.entries[1] = p.num_blocks as i32;
    let plan = SplitPlan {
        num_partitions: 1,
        partition_size: 40,
    };
    assert!(dev.upload_attention(&p.data(), plan).is_err());
}
