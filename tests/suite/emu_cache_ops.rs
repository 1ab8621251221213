//! kernels/cache_ops.cu and kernels/stream.cu on the emulator against the CPU reference
//! (src/device/cpu/cache_ops.rs, src/device/cpu/stream.rs): slot writes through an allocator's
//! slot mapping with skipped (negative) slots, block copies, and the stream probes.

use half::{bf16, f16};
use pagedkv::device::cpu::{cache_ops, stream};
use pagedkv::emu::{EmuElem, Launch};
use pagedkv::kv::{BlockAllocator, Dtype, KvElem, KvSpec};
use pagedkv::launch::cache_ops::SlotWrites;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

fn random<T: KvElem>(rng: &mut StdRng, n: usize) -> Vec<T> {
    (0..n)
        .map(|_| T::from_f32(rng.random_range(-1.0..1.0)))
        .collect()
}

fn bits<T: bytemuck::Pod>(x: &[T]) -> &[u8] {
    bytemuck::cast_slice(x)
}

fn write_slots<T: KvElem + EmuElem>(rng: &mut StdRng) {
    for log_bs in 0..=8 {
        let bs = 1 << log_bs;
        let head_dim = [16, 64, 128][rng.random_range(0..3)];
        let spec = KvSpec::new(rng.random_range(1..=3), head_dim, bs, T::DTYPE).unwrap();
        let num_blocks = 600usize.div_ceil(bs).max(3);
        let mut alloc = BlockAllocator::new(num_blocks, bs);
        // Two sequences interleaved, so consecutive tokens land in different blocks.
        let (a, b) = (alloc.new_sequence(), alloc.new_sequence());
        let mut slots = Vec::new();
        for i in 0..rng.random_range(1..40) {
            let seq = if i % 2 == 0 { a } else { b };
            slots.push(alloc.append_token(seq).unwrap().slot as i64);
            if rng.random_bool(0.2) {
                slots.push(-1);
            }
        }
        let n = slots.len() * spec.elems_per_token();
        let (k_new, v_new) = (random::<T>(rng, n), random::<T>(rng, n));
        let pool_elems = spec.pool_elems(num_blocks).unwrap();
        let start = random::<T>(rng, pool_elems);
        let (mut k_want, mut v_want) = (start.clone(), start.clone());
        cache_ops::write_slots(&spec, &mut k_want, &k_new, &slots).unwrap();
        cache_ops::write_slots(&spec, &mut v_want, &v_new, &slots).unwrap();
        let (mut k, mut v) = (start.clone(), start);
        Launch::new(&format!("write_kv_slots_{}", T::DTYPE))
            .grid(slots.len() as u32)
            .block(rng.random_range(1..=4) * 32)
            .buf_mut(&mut k)
            .buf_mut(&mut v)
            .buf(&k_new)
            .buf(&v_new)
            .buf(&slots)
            .i32s(
                &SlotWrites::new(&spec, T::DTYPE, slots.len())
                    .unwrap()
                    .scalars,
            )
            .run()
            .unwrap();
        assert_eq!(bits(&k), bits(&k_want), "{:?} block size {bs}: K", T::DTYPE);
        assert_eq!(bits(&v), bits(&v_want), "{:?} block size {bs}: V", T::DTYPE);
    }
}

#[test]
fn slot_writes_match_the_reference_in_every_dtype() {
    let mut rng = StdRng::seed_from_u64(11);
    write_slots::<f16>(&mut rng);
    write_slots::<bf16>(&mut rng);
    write_slots::<f32>(&mut rng);
}

#[test]
fn an_out_of_range_slot_is_reported_not_written() {
    let spec = KvSpec::new(1, 16, 4, Dtype::F32).unwrap();
    let mut k = vec![0f32; spec.pool_elems(2).unwrap()];
    let mut v = k.clone();
    let new = vec![1f32; 16];
    let err = Launch::new("write_kv_slots_f32")
        .grid(1)
        .block(32)
        .buf_mut(&mut k)
        .buf_mut(&mut v)
        .buf(&new)
        .buf(&new)
        .buf(&[8i64])
        .i32s(&SlotWrites::new(&spec, Dtype::F32, 1).unwrap().scalars)
        .run()
        .unwrap_err();
    assert!(err.to_string().contains("write_kv_slots_f32"), "{err}");
}

#[test]
fn block_copies_match_the_reference_between_and_within_pools() {
    let mut rng = StdRng::seed_from_u64(12);
    for block_bytes in [32usize, 64, 4096, 65536] {
        let (src_blocks, dst_blocks) = (rng.random_range(2..9), rng.random_range(2..9));
        let src: Vec<u8> = (0..src_blocks * block_bytes)
            .map(|_| rng.random())
            .collect();
        let dst_start: Vec<u8> = (0..dst_blocks * block_bytes)
            .map(|_| rng.random())
            .collect();
        let mut dst_ids: Vec<i32> = (0..dst_blocks as i32).collect();
        dst_ids.shuffle(&mut rng);
        let pairs: Vec<[i32; 2]> = dst_ids
            .iter()
            .take(rng.random_range(1..=dst_blocks))
            .map(|&d| [rng.random_range(0..src_blocks as i32), d])
            .collect();
        let mut want = dst_start.clone();
        cache_ops::copy_blocks(block_bytes, &src, &mut want, &pairs).unwrap();
        let mut got = dst_start;
        let flat: Vec<i32> = pairs.iter().flatten().copied().collect();
        Launch::new("copy_blocks")
            .grid((rng.random_range(1..4), pairs.len() as u32))
            .block(64)
            .buf_mut(&mut got)
            .buf(&src)
            .buf(&flat)
            .i64((block_bytes / 16) as i64)
            .run()
            .unwrap();
        assert_eq!(got, want, "block of {block_bytes} bytes");
    }
}

#[test]
fn stream_probes_copy_and_fold_every_byte() {
    let mut rng = StdRng::seed_from_u64(13);
    let n = 1000usize;
    let src: Vec<u8> = (0..n * 16).map(|_| rng.random()).collect();
    let mut dst = vec![0u8; n * 16];
    Launch::new("stream_copy")
        .grid(3)
        .block(64)
        .buf_mut(&mut dst)
        .buf(&src)
        .i64(n as i64)
        .run()
        .unwrap();
    assert_eq!(dst, src);
    let mut folds = vec![0u32; 5];
    Launch::new("stream_read")
        .grid(5)
        .block(96)
        .buf_mut(&mut folds)
        .buf(&src)
        .i64(n as i64)
        .run()
        .unwrap();
    let words: &[u32] = bytemuck::cast_slice(&src);
    let want = words.iter().fold(0u32, |a, &w| a ^ w);
    assert_eq!(folds.iter().fold(0u32, |a, &w| a ^ w), want);
    // The CPU read-only sum is an independent fold over the same bytes.
    let as_u64: &[u64] = bytemuck::cast_slice(&src);
    assert_eq!(
        stream::read_only_sum(as_u64),
        as_u64.iter().fold(0u64, |a, &w| a.wrapping_add(w))
    );
}

/// The emulated launchers bound to the plans (`emu::cache_ops`): the same results as the
/// reference, and a slot or destination written twice refused before anything runs.
#[test]
fn planned_launchers_match_the_reference_and_refuse_double_writes() {
    let mut rng = StdRng::seed_from_u64(14);
    let spec = KvSpec::new(2, 32, 8, Dtype::F16).unwrap();
    let num_blocks = 6;
    let n = spec.pool_elems(num_blocks).unwrap();
    let start: Vec<f16> = (0..n)
        .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
        .collect();
    let mut slots: Vec<i64> = (0..(num_blocks * 8) as i64).collect();
    slots.shuffle(&mut rng);
    slots.truncate(13);
    slots.push(-1);
    let new: Vec<f16> = (0..slots.len() * spec.elems_per_token())
        .map(|_| f16::from_f32(rng.random_range(-1.0..1.0)))
        .collect();
    let mut want = start.clone();
    cache_ops::write_slots(&spec, &mut want, &new, &slots).unwrap();
    let (mut k, mut v) = (start.clone(), start.clone());
    pagedkv::emu::cache_ops::write_kv_slots(&spec, &mut k, &mut v, &new, &new, &slots).unwrap();
    assert_eq!(bits(&k), bits(&want));
    assert_eq!(bits(&v), bits(&want));
    let mut twice = slots.clone();
    twice[1] = twice[0];
    let err = pagedkv::emu::cache_ops::write_kv_slots(&spec, &mut k, &mut v, &new, &new, &twice)
        .unwrap_err();
    assert!(err.to_string().contains("both write slot"), "{err}");

    let src: Vec<u8> = (0..8 * 64).map(|_| rng.random()).collect();
    let mut dst = vec![0u8; 8 * 64];
    let pairs = [[3, 0], [3, 7], [0, 2]];
    let mut want = dst.clone();
    cache_ops::copy_blocks(64, &src, &mut want, &pairs).unwrap();
    pagedkv::emu::cache_ops::copy_blocks(64, &src, &mut dst, &pairs).unwrap();
    assert_eq!(dst, want);
    let err =
        pagedkv::emu::cache_ops::copy_blocks(64, &src, &mut dst, &[[1, 2], [0, 2]]).unwrap_err();
    assert!(err.to_string().contains("both write block 2"), "{err}");
}

/// New K/V in f16, bf16 or f32 quantised into fp8 pools on the emulator: bit for bit what the
/// reference writes (fp8(x / scale), round to nearest even, saturating), scales per KV head,
/// including values far past the largest code (saturated, not wrapped or NaN).
fn quantised_writes<T: KvElem + EmuElem, KV: KvElem + EmuElem>(rng: &mut StdRng) {
    for bs in [1usize, 16, 64] {
        let spec = KvSpec::new(2, 32, bs, KV::DTYPE).unwrap();
        let num_blocks = 5;
        let mut slots: Vec<i64> = (0..(num_blocks * bs) as i64).collect();
        slots.shuffle(rng);
        slots.truncate(11.min(slots.len()));
        slots.push(-1);
        let n = slots.len() * spec.elems_per_token();
        // Mostly within the scaled range, a few far beyond it, to saturate.
        let values = |rng: &mut StdRng| -> Vec<T> {
            (0..n)
                .map(|i| {
                    let x: f32 = rng.random_range(-1.0..1.0);
                    T::from_f32(if i % 97 == 0 { x * 1e6 } else { x })
                })
                .collect()
        };
        let (k_new, v_new) = (values(rng), values(rng));
        let k_scale = [0.0021f32, 1.0 / 448.0];
        let v_scale = [0.5f32, 0.013];
        let start: Vec<KV> = (0..spec.pool_elems(num_blocks).unwrap())
            .map(|_| KV::from_f32(rng.random_range(-1.0..1.0)))
            .collect();
        let (mut k_want, mut v_want) = (start.clone(), start.clone());
        cache_ops::write_slots_quantised(&spec, &mut k_want, &k_new, &k_scale, &slots).unwrap();
        cache_ops::write_slots_quantised(&spec, &mut v_want, &v_new, &v_scale, &slots).unwrap();
        let (mut k, mut v) = (start.clone(), start);
        pagedkv::emu::cache_ops::quantize_kv_slots(
            &spec, &mut k, &mut v, &k_new, &v_new, &slots, &k_scale, &v_scale,
        )
        .unwrap();
        let what = format!("{:?} -> {:?}, block size {bs}", T::DTYPE, KV::DTYPE);
        assert_eq!(bits(&k), bits(&k_want), "{what}: K");
        assert_eq!(bits(&v), bits(&v_want), "{what}: V");
        assert!(
            k.iter().all(|x| x.to_f32().is_finite()),
            "{what}: a saturating write gave a non-finite code"
        );
    }
}

#[test]
fn quantised_slot_writes_match_the_reference() {
    use pagedkv::kv::{Fp8E4m3, Fp8E5m2};
    let mut rng = StdRng::seed_from_u64(15);
    quantised_writes::<f16, Fp8E4m3>(&mut rng);
    quantised_writes::<bf16, Fp8E4m3>(&mut rng);
    quantised_writes::<f32, Fp8E4m3>(&mut rng);
    quantised_writes::<f16, Fp8E5m2>(&mut rng);
    quantised_writes::<bf16, Fp8E5m2>(&mut rng);
    quantised_writes::<f32, Fp8E5m2>(&mut rng);
}
