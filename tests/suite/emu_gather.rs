//! kernels/paged_gather.cu on the emulator against the CPU reference (src/device/cpu/gather.rs):
//! every dtype, every block size 1..256, head dims 16..256, ragged lengths including 0, shuffled
//! block tables with repeated blocks, several thread counts, chunk sizes and fiber schedules.

use half::{bf16, f16};
use pagedkv::device::cpu::gather as reference;
use pagedkv::emu::gather::{gather_copy, gather_sum};
use pagedkv::emu::{EmuElem, EmuError, Schedule};
use pagedkv::kv::{BlockTable, Dtype, KvElem, KvSpec};
use pagedkv::launch::gather::GatherGeometry;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const HEAD_DIMS: [usize; 6] = [16, 32, 48, 80, 128, 256];

/// A shuffled table over `num_blocks` blocks: some sequences empty, blocks repeated across and
/// within sequences (as prefix sharing would), rows of different lengths (so padding exists).
fn random_table(rng: &mut StdRng, block_size: usize, num_blocks: usize) -> BlockTable {
    let seqs = rng.random_range(1..=4);
    let mut ids: Vec<u32> = (0..num_blocks as u32).collect();
    ids.shuffle(rng);
    let mut rows = Vec::new();
    let mut lens = Vec::new();
    for s in 0..seqs {
        let len = if s == 1 {
            0
        } else {
            rng.random_range(0..=2 * block_size + 3)
        };
        let row: Vec<u32> = (0..len.div_ceil(block_size))
            .map(|_| ids[rng.random_range(0..ids.len())])
            .collect();
        rows.push(row);
        lens.push(len);
    }
    BlockTable::from_rows(&rows, &lens, block_size).unwrap()
}

fn random_pool<T: KvElem>(rng: &mut StdRng, n: usize) -> Vec<T> {
    (0..n)
        .map(|_| T::from_f32(rng.random_range(-1.0f32..1.0)))
        .collect()
}

/// Multiples of 1/16 in [-1, 1]: every partial sum of up to 2^20 of them is exact in f32, so the
/// kernel's summation order cannot matter and sums compare exactly.
fn dyadic_pool<T: KvElem>(rng: &mut StdRng, n: usize) -> Vec<T> {
    (0..n)
        .map(|_| T::from_f32(rng.random_range(-16i32..=16) as f32 / 16.0))
        .collect()
}

fn bits<T: KvElem>(x: &[T]) -> Vec<u8> {
    bytemuck::cast_slice(x).to_vec()
}

struct Case {
    spec: KvSpec,
    num_blocks: usize,
    table: BlockTable,
    copy: GatherGeometry,
    sum: GatherGeometry,
    schedule: Schedule,
}

fn random_case(rng: &mut StdRng, dtype: Dtype, block_size: usize, head_dim: usize) -> Case {
    let spec = KvSpec::new(rng.random_range(1..=3), head_dim, block_size, dtype).unwrap();
    let num_blocks = rng.random_range(1..=6);
    let table = random_table(rng, block_size, num_blocks);
    let max_len = table.lens.iter().copied().max().unwrap_or(0) as usize;
    // Chunks from one token to longer than any sequence, and the GPU default.
    let tokens = if rng.random_bool(0.25) {
        GatherGeometry::for_spec(&spec).tokens_per_cta
    } else {
        rng.random_range(1..=max_len + 2)
    };
    let copy_threads = [1, 7, 32, 96, 128, 256][rng.random_range(0..6)];
    let sum_threads = [32, 64, 128, 256][rng.random_range(0..4)];
    let schedule = match rng.random_range(0..3) {
        0 => Schedule::Forward,
        1 => Schedule::Reverse,
        _ => Schedule::Shuffled(rng.random()),
    };
    Case {
        spec,
        num_blocks,
        table,
        copy: GatherGeometry {
            threads: copy_threads,
            tokens_per_cta: tokens,
        },
        sum: GatherGeometry {
            threads: sum_threads,
            tokens_per_cta: tokens,
        },
        schedule,
    }
}

fn check_case<T: KvElem + EmuElem>(rng: &mut StdRng, c: &Case) {
    let n = c.spec.pool_elems(c.num_blocks).unwrap();
    let what = format!(
        "{:?}, {} blocks, lens {:?}, table {:?}, copy {:?}, sum {:?}, {:?}",
        c.spec, c.num_blocks, c.table.lens, c.table.entries, c.copy, c.sum, c.schedule
    );

    // Copy-out, on random values: bit-exact, every output element written (poisoned with NaN).
    let pool: Vec<T> = random_pool(rng, n);
    let (_, total) = c.table.token_offsets();
    let out_len = c.spec.num_kv_heads * total * c.spec.head_dim;
    let mut want = vec![T::from_f32(f32::NAN); out_len];
    reference::gather_copy(&c.spec, &pool, &c.table, &mut want);
    assert!(
        want.iter().all(|x| !x.to_f32().is_nan()),
        "reference left holes: {what}"
    );
    let mut got = vec![T::from_f32(f32::NAN); out_len];
    gather_copy(&c.spec, &pool, &c.table, &mut got, c.copy, c.schedule)
        .unwrap_or_else(|e| panic!("{e}\n{what}"));
    assert!(bits(&got) == bits(&want), "copy differs: {what}");

    // Read-only sums, on values whose sums are exact in any order.
    let k: Vec<T> = dyadic_pool(rng, n);
    let v: Vec<T> = dyadic_pool(rng, n);
    let pairs = c.table.num_seqs() * c.spec.num_kv_heads;
    let mut want = vec![f32::NAN; pairs];
    reference::gather_sum(&c.spec, &k, &v, &c.table, &mut want);
    let mut got = vec![f32::NAN; pairs];
    gather_sum(&c.spec, &k, &v, &c.table, &mut got, c.sum, c.schedule)
        .unwrap_or_else(|e| panic!("{e}\n{what}"));
    assert_eq!(got, want, "sums differ: {what}");
}

fn sweep<T: KvElem + EmuElem>(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    for log_bs in 0..=8 {
        for _ in 0..2 {
            let head_dim = HEAD_DIMS[rng.random_range(0..HEAD_DIMS.len())];
            let case = random_case(&mut rng, T::DTYPE, 1 << log_bs, head_dim);
            check_case::<T>(&mut rng, &case);
        }
    }
    // Every head dim at least once.
    for head_dim in HEAD_DIMS {
        let bs = 1 << rng.random_range(0..=8);
        let case = random_case(&mut rng, T::DTYPE, bs, head_dim);
        check_case::<T>(&mut rng, &case);
    }
}

#[test]
fn gather_f16_matches_the_cpu_reference() {
    sweep::<f16>(1);
}

#[test]
fn gather_bf16_matches_the_cpu_reference() {
    sweep::<bf16>(2);
}

#[test]
fn gather_f32_matches_the_cpu_reference() {
    sweep::<f32>(3);
}

#[test]
fn gather_fp8_matches_the_cpu_reference() {
    // Copies move the codes; sums add the decoded (unscaled) values.
    sweep::<pagedkv::kv::Fp8E4m3>(4);
    sweep::<pagedkv::kv::Fp8E5m2>(5);
}

#[test]
fn a_block_table_entry_outside_the_pool_is_an_out_of_bounds_error() {
    let spec = KvSpec::new(2, 16, 4, Dtype::F16).unwrap();
    let table = BlockTable::from_rows(&[vec![0, 3]], &[6], 4).unwrap();
    let pool = vec![f16::ZERO; spec.pool_elems(3).unwrap()];
    let mut out = vec![f16::ZERO; 2 * 6 * 16];
    let geometry = GatherGeometry::for_spec(&spec);
    let err = gather_copy(&spec, &pool, &table, &mut out, geometry, Schedule::Forward).unwrap_err();
    let EmuError::OutOfBounds(msg) = err else {
        panic!("expected an out-of-bounds error, got {err:?}")
    };
    assert!(
        msg.contains("paged_gather_copy_f16") && msg.contains("'pool'"),
        "{msg}"
    );
}
