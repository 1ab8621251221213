//! The cache operations on a real GPU against the CPU reference: slot writes into a NaN-poisoned
//! pool, block copies device to device, device to mapped pinned host memory and back (one launch,
//! and one memcpy per block), more pairs than one launch's grid holds, and bad pairs refused.
//! Ignored by a plain `cargo test`; scripts/gpu-check runs them with `--include-ignored` on a GPU.

use half::f16;
use pagedkv::device::cpu::cache_ops;
use pagedkv::device::cuda::cache_ops::BlockMemory;
use pagedkv::device::cuda::CudaDevice;
use pagedkv::kv::{Dtype, KvSpec};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

fn gpu() -> CudaDevice {
    CudaDevice::open(0).unwrap_or_else(|e| panic!("a GPU test run without a GPU: {e}"))
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn gpu_slot_writes_match_the_cpu() {
    let dev = gpu();
    let mut rng = rand::rngs::StdRng::seed_from_u64(3);
    for bs in [1, 16, 256] {
        let spec = KvSpec::new(4, 64, bs, Dtype::F16).unwrap();
        let num_blocks = 9;
        let slots_total = (num_blocks * bs) as i64;
        let mut slots: Vec<i64> = (0..slots_total).collect();
        slots.shuffle(&mut rng);
        slots.truncate(slots_total.min(40) as usize);
        slots.push(-1); // padding: skipped
        let tokens = slots.len();
        let new_k: Vec<f16> = (0..tokens * spec.elems_per_token())
            .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
            .collect();
        let new_v: Vec<f16> = new_k.iter().map(|x| -*x).collect();
        let pool_elems = num_blocks * spec.elems_per_block();
        let mut want_k = vec![f16::NAN; pool_elems];
        let mut want_v = vec![f16::NAN; pool_elems];
        cache_ops::write_slots(&spec, &mut want_k, &new_k, &slots).unwrap();
        cache_ops::write_slots(&spec, &mut want_v, &new_v, &slots).unwrap();
        let st = &dev.stream;
        let mut k = st.upload("K", &vec![f16::NAN; pool_elems]).unwrap();
        let mut v = st.upload("V", &vec![f16::NAN; pool_elems]).unwrap();
        let (dk, dv) = (
            st.upload("new K", &new_k).unwrap(),
            st.upload("new V", &new_v).unwrap(),
        );
        dev.write_kv_slots(&spec, num_blocks, &mut k, &mut v, &dk, &dv, &slots)
            .unwrap();
        let bits = |x: Vec<f16>| x.iter().map(|e| e.to_bits()).collect::<Vec<_>>();
        assert_eq!(
            bits(st.download(&k).unwrap()),
            bits(want_k),
            "K, block size {bs}"
        );
        assert_eq!(
            bits(st.download(&v).unwrap()),
            bits(want_v),
            "V, block size {bs}"
        );
        // A slot past the pool is refused before any launch.
        let mut bad = slots.clone();
        bad[0] = slots_total;
        assert!(dev
            .write_kv_slots(&spec, num_blocks, &mut k, &mut v, &dk, &dv, &bad)
            .is_err());
        // So is a slot written twice (two CTAs would race for it).
        let mut twice = slots.clone();
        twice[1] = twice[0];
        let err = dev
            .write_kv_slots(&spec, num_blocks, &mut k, &mut v, &dk, &dv, &twice)
            .unwrap_err();
        assert!(err.to_string().contains("both write slot"), "{err}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn gpu_block_copies_match_the_cpu_in_every_direction() {
    let dev = gpu();
    let mut rng = rand::rngs::StdRng::seed_from_u64(4);
    // The last case has more pairs than one launch's grid rows (65,535).
    for (block_bytes, blocks, pairs_n) in [(16, 5, 3), (4096, 300, 200), (16, 70_000, 70_000)] {
        let src_bytes: Vec<u8> = (0..blocks * block_bytes).map(|_| rng.random()).collect();
        let mut dsts: Vec<i32> = (0..blocks as i32).collect();
        dsts.shuffle(&mut rng);
        let pairs: Vec<[i32; 2]> = dsts[..pairs_n]
            .iter()
            .map(|&d| [rng.random_range(0..blocks as i32), d])
            .collect();
        let poison = vec![0x5Au8; blocks * block_bytes];
        let mut want = poison.clone();
        cache_ops::copy_blocks(block_bytes, &src_bytes, &mut want, &pairs).unwrap();
        for (from, to) in [
            (BlockMemory::Device, BlockMemory::Device),
            (BlockMemory::Device, BlockMemory::PinnedHost),
            (BlockMemory::PinnedHost, BlockMemory::Device),
        ] {
            let mut src = dev.alloc_blocks(blocks, block_bytes, from).unwrap();
            dev.upload_blocks(&mut src, &src_bytes).unwrap();
            let mut dst = dev.alloc_blocks(blocks, block_bytes, to).unwrap();
            for per_memcpy in [false, true] {
                if per_memcpy && pairs_n > 1000 {
                    continue; // 70,000 single memcpys prove nothing more
                }
                dev.upload_blocks(&mut dst, &poison).unwrap();
                if per_memcpy {
                    dev.copy_blocks_per_memcpy(&src, &mut dst, &pairs).unwrap();
                } else {
                    dev.copy_blocks(&src, &mut dst, &pairs).unwrap();
                }
                let got = dev.download_blocks(&dst).unwrap();
                assert!(
                    got == want,
                    "{from:?} -> {to:?}, {block_bytes} B × {pairs_n} pairs, per memcpy {per_memcpy}"
                );
            }
            assert!(dev
                .copy_blocks(&src, &mut dst, &[[blocks as i32, 0]])
                .is_err());
            assert!(dev.copy_blocks(&src, &mut dst, &[[0, -1]]).is_err());
            let err = dev
                .copy_blocks(&src, &mut dst, &[[0, 1], [1, 1]])
                .unwrap_err();
            assert!(err.to_string().contains("both write block 1"), "{err}");
        }
    }
    assert!(dev.alloc_blocks(4, 24, BlockMemory::Device).is_err());
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn gpu_swap_round_trips_intact() {
    let dev = gpu();
    let device = pagedkv::device::Device::Cuda(std::sync::Arc::new(dev));
    let opts = pagedkv::swap::SwapOptions {
        block_bytes: 32 * 1024,
        pool_blocks: 512,
        swap_blocks: 128,
        iters: 2,
        seed: 5,
    };
    let r = pagedkv::swap::measure(&device, &opts).unwrap();
    assert!(r.data_intact);
    assert!(r.swap_out.batched_gbps > 0.0 && r.swap_in.limit_gbps > 0.0);
}

/// New K/V in f16, bf16 and f32 quantised into fp8 pools on the GPU: bit for bit what the CPU
/// reference writes (the GPU's cvt instructions against cuda_fp8.h's rounding, as
/// tests/suite/fp8_reference.rs pins the reference), values far past the largest code saturating.
#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn gpu_quantised_slot_writes_match_the_cpu() {
    use half::bf16;
    use pagedkv::kv::{Fp8E4m3, Fp8E5m2, KvElem};
    fn one<T, KV>(dev: &CudaDevice, rng: &mut rand::rngs::StdRng)
    where
        T: KvElem + cudarc::driver::DeviceRepr,
        KV: KvElem + cudarc::driver::DeviceRepr + cudarc::driver::ValidAsZeroBits,
    {
        let spec = KvSpec::new(4, 128, 16, KV::DTYPE).unwrap();
        let num_blocks = 7;
        let mut slots: Vec<i64> = (0..(num_blocks * 16) as i64).collect();
        slots.shuffle(rng);
        slots.truncate(50);
        slots.push(-1);
        let n = slots.len() * spec.elems_per_token();
        let new: Vec<T> = (0..n)
            .map(|i| {
                let x: f32 = rng.random_range(-1.0..1.0);
                T::from_f32(if i % 101 == 0 { x * 1e6 } else { x })
            })
            .collect();
        let scale = [0.003f32, 1.0 / 448.0, 0.5, 1e-4];
        let mut want = vec![KV::default(); spec.pool_elems(num_blocks).unwrap()];
        cache_ops::write_slots_quantised(&spec, &mut want, &new, &scale, &slots).unwrap();
        let st = &dev.stream;
        let (mut k, mut v) = (
            st.alloc_zeros::<KV>("K", want.len()).unwrap(),
            st.alloc_zeros::<KV>("V", want.len()).unwrap(),
        );
        let new_dev = st.upload("new K/V", &new).unwrap();
        let scale_dev = st.upload("scales", &scale).unwrap();
        dev.quantize_kv_slots(
            &spec,
            num_blocks,
            &mut k,
            &mut v,
            &new_dev,
            &new_dev,
            &slots,
            (&scale_dev, &scale_dev),
        )
        .unwrap();
        let got_k = st.download(&k).unwrap();
        let got_v = st.download(&v).unwrap();
        let what = format!("{:?} -> {:?}", T::DTYPE, KV::DTYPE);
        let bytes = |x: &[KV]| bytemuck::cast_slice::<KV, u8>(x).to_vec();
        assert!(bytes(&got_k) == bytes(&want), "{what}: K");
        assert!(bytes(&got_v) == bytes(&want), "{what}: V");
    }
    let dev = gpu();
    let mut rng = rand::rngs::StdRng::seed_from_u64(6);
    one::<f16, Fp8E4m3>(&dev, &mut rng);
    one::<bf16, Fp8E4m3>(&dev, &mut rng);
    one::<f32, Fp8E4m3>(&dev, &mut rng);
    one::<f16, Fp8E5m2>(&dev, &mut rng);
    one::<bf16, Fp8E5m2>(&dev, &mut rng);
    one::<f32, Fp8E5m2>(&dev, &mut rng);
}
