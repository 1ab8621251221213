//! The bandwidth side of the block-size sweep, per block size, on the CPU: the read-only and the
//! copy-out paged gathers of one Llama-3-8B layer (8 KV heads, head dim 128, f16) through a
//! shuffled block table over a 64 MiB pool (K and V), next to the contiguous limits.
//! The GPU variant joins when the GPU probe exists.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use half::f16;
use pagedkv::device::cpu::gather::{gather_copy, gather_sum};
use pagedkv::kv::{Dtype, KvSpec};
use pagedkv::sweep::block_sizes;
use pagedkv::sweep::cpu_probe::shuffled_table;
use rayon::prelude::*;

const POOL_BYTES: usize = 32 << 20;

fn pool(seed: u32) -> Vec<f16> {
    (0..POOL_BYTES / 2)
        .map(|i| {
            f16::from_f32(
                ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5,
            )
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let (k, v) = (pool(1), pool(2));
    let mut out = vec![f16::ZERO; k.len()];
    let mut g = c.benchmark_group("block_size_sweep_cpu");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(2 * POOL_BYTES as u64));
    g.bench_function("limit_stream_sum", |b| {
        b.iter(|| {
            [&k, &v]
                .into_par_iter()
                .flat_map(|p| p.par_chunks(1 << 16))
                .map(|c| c.iter().map(|x| x.to_f32()).sum::<f32>())
                .sum::<f32>()
        })
    });
    g.bench_function("limit_copy", |b| {
        b.iter(|| {
            out.par_chunks_mut(1 << 16)
                .zip(k.par_chunks(1 << 16))
                .for_each(|(d, s)| d.copy_from_slice(s))
        })
    });
    for bs in block_sizes() {
        let spec = KvSpec::new(8, 128, bs, Dtype::F16).unwrap();
        let table = shuffled_table(&spec, POOL_BYTES, 1024, 7).unwrap();
        let tokens: usize = table.lens.iter().map(|&l| l as usize).sum();
        let elems = tokens * spec.elems_per_token();
        let mut sums = vec![0.0f32; table.num_seqs() * 8];
        g.bench_with_input(BenchmarkId::new("gather_read", bs), &bs, |b, _| {
            b.iter(|| gather_sum(&spec, &k[..elems], &v[..elems], &table, &mut sums))
        });
        g.bench_with_input(BenchmarkId::new("gather_copy", bs), &bs, |b, _| {
            b.iter(|| gather_copy(&spec, &k[..elems], &table, &mut out[..elems]))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
