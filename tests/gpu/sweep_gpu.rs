//! The sweep's GPU side (ignored by a plain `cargo test`; scripts/gpu-check runs it on a GPU):
//! the CUDA launcher of kernels/paged_gather.cu against the CPU reference on random shuffled tables
//! (poisoned outputs, every block size, several geometries), its table validation, and the GPU
//! probe end to end on a small layer.

use half::f16;
use pagedkv::device::cpu::gather as reference;
use pagedkv::device::cuda::gather::GatherError;
use pagedkv::device::cuda::CudaDevice;
use pagedkv::kv::{BlockTable, Dtype, KvElem, KvSpec};
use pagedkv::launch::gather::GatherGeometry;
use pagedkv::sweep::gpu_probe::{GpuElem, GpuProbe};
use pagedkv::sweep::{AttentionBatch, BandwidthProbe, LimitSet, ProbeOptions};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

fn gpu() -> CudaDevice {
    CudaDevice::open(0).unwrap_or_else(|e| panic!("a GPU test run without a GPU: {e}"))
}

/// A shuffled table over `num_blocks` blocks, ragged lengths (one sequence empty), blocks
/// repeated across sequences as prefix sharing would.
fn random_table(rng: &mut StdRng, block_size: usize, num_blocks: usize) -> BlockTable {
    let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
    ids.shuffle(rng);
    let (mut rows, mut lens) = (Vec::new(), Vec::new());
    for s in 0..rng.random_range(2..=5) {
        let len = if s == 1 {
            0
        } else {
            rng.random_range(0..=3 * block_size + 700)
        };
        rows.push(
            (0..len.div_ceil(block_size))
                .map(|_| ids[rng.random_range(0..ids.len())])
                .collect(),
        );
        lens.push(len);
    }
    BlockTable::from_rows(&rows, &lens, block_size).unwrap()
}

fn bits<T: KvElem>(x: &[T]) -> Vec<u8> {
    bytemuck::cast_slice(x).to_vec()
}

fn check_gather<T: GpuElem>(dev: &CudaDevice, rng: &mut StdRng, block_size: usize) {
    let spec = KvSpec::new(rng.random_range(1..=3), 128, block_size, T::DTYPE).unwrap();
    let num_blocks = rng.random_range(1..=40);
    let n = spec.pool_elems(num_blocks).unwrap();
    let k: Vec<T> = (0..n)
        .map(|_| T::from_f32(rng.random_range(-1.0..1.0)))
        .collect();
    let v: Vec<T> = (0..n)
        .map(|_| T::from_f32(rng.random_range(-1.0..1.0)))
        .collect();
    let table = random_table(rng, block_size, num_blocks);
    let pool = dev.upload_gather_pool(&k, &v).unwrap();
    for geometry in [
        GatherGeometry::for_spec(&spec),
        GatherGeometry {
            threads: 32,
            tokens_per_cta: 1,
        },
        GatherGeometry {
            threads: 96,
            tokens_per_cta: rng.random_range(2..=300),
        },
    ] {
        let mut g = dev.upload_gather(&pool, &spec, &table, geometry).unwrap();
        dev.poison_gather(&mut g).unwrap();
        dev.launch_gather_copy(&pool, &mut g).unwrap();
        dev.launch_gather_sum(&pool, &mut g).unwrap();
        let (n_copy, n_sum) = (g.plan.copy_elems, g.plan.sum_elems);
        let mut want = vec![T::default(); n_copy];
        reference::gather_copy(&spec, &k, &table, &mut want);
        let got = dev.download(&g.copy_out).unwrap();
        assert_eq!(bits(&got[..n_copy]), bits(&want), "{spec:?} {geometry:?}");
        let mut want_sums = vec![0f32; n_sum];
        reference::gather_sum(&spec, &k, &v, &table, &mut want_sums);
        let sums = dev.download(&g.sums).unwrap();
        for (i, (a, b)) in sums[..n_sum].iter().zip(&want_sums).enumerate() {
            assert!(
                (a - b).abs() <= 1e-3 * (1.0 + b.abs()),
                "{spec:?} {geometry:?} sum {i}: {a} vs {b}"
            );
        }
    }
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn cuda_gathers_match_the_cpu_reference_at_every_block_size() {
    let dev = gpu();
    let mut rng = StdRng::seed_from_u64(5);
    for log_bs in 0..=8 {
        check_gather::<f16>(&dev, &mut rng, 1 << log_bs);
        check_gather::<f32>(&dev, &mut rng, 1 << log_bs);
    }
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn tables_are_validated_before_any_launch() {
    let dev = gpu();
    let spec = KvSpec::new(2, 64, 4, Dtype::F16).unwrap();
    let n = spec.pool_elems(3).unwrap();
    let k = vec![f16::ONE; n];
    let pool = dev.upload_gather_pool(&k, &k).unwrap();
    let geometry = GatherGeometry::for_spec(&spec);
    let outside = BlockTable::from_rows(&[vec![0, 3]], &[6], 4).unwrap();
    assert!(matches!(
        dev.upload_gather(&pool, &spec, &outside, geometry),
        Err(GatherError::Table(_))
    ));
    let inside = BlockTable::from_rows(&[vec![2, 0]], &[6], 4).unwrap();
    let odd = GatherGeometry {
        threads: 100,
        tokens_per_cta: 4,
    };
    assert!(matches!(
        dev.upload_gather(&pool, &spec, &inside, odd),
        Err(GatherError::Geometry(_))
    ));
    let mut g = dev.upload_gather(&pool, &spec, &inside, geometry).unwrap();
    let other = dev.upload_gather_pool(&k, &k).unwrap();
    assert!(matches!(
        dev.launch_gather_copy(&other, &mut g),
        Err(GatherError::Pool(_))
    ));
    dev.launch_gather_sum(&pool, &mut g).unwrap();
    // Six tokens of 2 heads × 64 ones, in K and V.
    assert_eq!(dev.download(&g.sums).unwrap(), vec![768.0, 768.0]);
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn the_gpu_probe_measures_checked_kernels() {
    let dev = gpu();
    // On the emulated driver the kernels run on the CPU: a small pool (a few times the small L2
    // it reports) and a small batch check the same path in seconds.
    let (pool_bytes, batch) = if dev.info.emulated {
        (16 << 20, AttentionBatch::fixed(32, 2, 300))
    } else {
        (64 << 20, AttentionBatch::fixed(32, 8, 1000))
    };
    let opts = ProbeOptions {
        pool_bytes,
        reps: 2,
        rounds: 1,
        seq_tokens: 1024,
        seed: 3,
        attention: Some(batch),
        answer_only: false,
    };
    let mut probe = GpuProbe::new(Arc::new(dev), opts);
    for bs in [1, 16, 256] {
        let spec = KvSpec::new(8, 128, bs, Dtype::F16).unwrap();
        let l = probe.limits(&spec, LimitSet::CopyAndStream).unwrap();
        let g = probe.gather(&spec).unwrap();
        let a = probe.attention_gbps(&spec).unwrap().unwrap();
        let copy = l.copy_gbps.unwrap();
        for x in [copy, l.stream_gbps, g.copy_gbps, g.read_gbps, a] {
            assert!(x.is_finite() && x > 0.0, "block size {bs}");
        }
    }
    assert!(probe.notes().iter().any(|n| n.contains("contiguous")));
}
