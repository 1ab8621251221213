//! The bandwidth side of the block-size sweep, per block size, for one Llama-3-8B layer (32 query
//! / 8 KV heads, head dim 128, f16): the read-only and copy-out paged gathers through a shuffled
//! block table, and paged decode attention, next to the contiguous limits (and, on the GPU, the
//! contiguous attention baseline).
//!
//! On a machine with a usable GPU everything runs there, timed with CUDA events through
//! `iter_custom`; elsewhere on the CPU.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use half::f16;
use pagedkv::device::cpu::attention::{decode_attention, PagedRows};
use pagedkv::device::cpu::gather::{gather_copy, gather_sum};
use pagedkv::device::cuda::{CudaDevice, Layout};
use pagedkv::kv::{Dtype, KvSpec};
use pagedkv::launch::gather::GatherGeometry;
use pagedkv::sweep::block_sizes;
use pagedkv::sweep::cpu_probe::shuffled_table;
use pagedkv::sweep::AttentionBatch;
use rayon::prelude::*;
use std::time::Duration;

const CPU_POOL_BYTES: usize = 32 << 20;
/// Large against a GPU's L2 cache (50 MB and more), so HBM is what is measured.
const GPU_POOL_BYTES: usize = 512 << 20;

fn pool(bytes: usize, seed: u32) -> Vec<f16> {
    (0..bytes / 2)
        .map(|i| {
            f16::from_f32(
                ((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5,
            )
        })
        .collect()
}

fn spec(bs: usize) -> KvSpec {
    KvSpec::new(8, 128, bs, Dtype::F16).unwrap()
}

fn bench_cpu(c: &mut Criterion) {
    let (k, v) = (pool(CPU_POOL_BYTES, 1), pool(CPU_POOL_BYTES, 2));
    let mut out = vec![f16::ZERO; k.len()];
    let mut g = c.benchmark_group("block_size_sweep_cpu");
    g.sample_size(10);
    g.throughput(Throughput::Bytes(2 * CPU_POOL_BYTES as u64));
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
    let batch = AttentionBatch::fixed(32, 4, 1024);
    for bs in block_sizes() {
        let spec = spec(bs);
        let table = shuffled_table(&spec, CPU_POOL_BYTES, 1024, 7).unwrap();
        let tokens: usize = table.lens.iter().map(|&l| l as usize).sum();
        let elems = tokens * spec.elems_per_token();
        let bytes = (elems * 2) as u64;
        let mut sums = vec![0.0f32; table.num_seqs() * 8];
        g.throughput(Throughput::Bytes(2 * bytes));
        g.bench_with_input(BenchmarkId::new("gather_read", bs), &bs, |b, _| {
            b.iter(|| gather_sum(&spec, &k[..elems], &v[..elems], &table, &mut sums))
        });
        g.bench_with_input(BenchmarkId::new("gather_copy", bs), &bs, |b, _| {
            b.iter(|| gather_copy(&spec, &k[..elems], &table, &mut out[..elems]))
        });
        let p = batch.problem::<f16, f16>(&spec, 7).unwrap();
        let rows = PagedRows {
            spec: &p.spec,
            table: &p.table,
        };
        let mut att = vec![f16::ZERO; p.q.len()];
        g.throughput(Throughput::Bytes(p.kv_bytes() as u64));
        g.bench_with_input(BenchmarkId::new("attention", bs), &bs, |b, _| {
            b.iter(|| decode_attention(&p.shape, &p.q, &p.k, &p.v, &p.lens, &rows, &mut att))
        });
    }
    g.finish();
}

/// Criterion's time for `iters` back-to-back runs, between one pair of CUDA events.
fn event_time(dev: &CudaDevice, iters: u64, mut launch: impl FnMut()) -> Duration {
    let ms = dev
        .time_total_ms(iters as usize, || {
            launch();
            Ok(())
        })
        .expect("CUDA event timing");
    Duration::from_secs_f64(ms * 1e-3)
}

fn bench_gpu(c: &mut Criterion, dev: &CudaDevice) {
    let half = GPU_POOL_BYTES / 2;
    let pools = dev
        .upload_gather_pool(&pool(half, 1), &pool(half, 2))
        .expect("upload the pools");
    let mut g = c.benchmark_group("block_size_sweep_gpu");
    g.sample_size(20);
    g.throughput(Throughput::Bytes(half as u64));
    g.bench_function("limit_stream_and_copy", |b| {
        // memory_limits times with events itself; criterion sees its stream time per byte.
        b.iter_custom(|iters| {
            let l = dev.memory_limits(half, iters as usize).expect("limits");
            Duration::from_secs_f64(iters as f64 * half as f64 / (l.stream_gbps * 1e9))
        })
    });
    let batch = AttentionBatch::fixed(32, 32, 2048);
    for bs in block_sizes() {
        let spec = spec(bs);
        let table = shuffled_table(&spec, half, 1024, 7).unwrap();
        let mut gather = dev
            .upload_gather(&pools, &spec, &table, GatherGeometry::for_spec(&spec))
            .expect("upload the table");
        let bytes = (gather.plan.copy_elems * 2) as u64;
        g.throughput(Throughput::Bytes(2 * bytes));
        g.bench_with_input(BenchmarkId::new("gather_read", bs), &bs, |b, _| {
            b.iter_custom(|iters| {
                event_time(dev, iters, || {
                    dev.launch_gather_sum(&pools, &mut gather).expect("launch")
                })
            })
        });
        g.bench_with_input(BenchmarkId::new("gather_copy", bs), &bs, |b, _| {
            b.iter_custom(|iters| {
                event_time(dev, iters, || {
                    dev.launch_gather_copy(&pools, &mut gather).expect("launch")
                })
            })
        });
        let p = batch.problem::<f16, f16>(&spec, 7).unwrap();
        let plan = dev.attention_plan(&p.data()).expect("occupancy query");
        let mut dp = dev
            .upload_attention(&p.data(), plan)
            .expect("upload attention");
        g.throughput(Throughput::Bytes(p.kv_bytes() as u64));
        let mut layouts = vec![Layout::Paged];
        if bs == 1 {
            // The contiguous baseline does not depend on the block size: once.
            layouts.push(Layout::Contiguous);
        }
        for layout in layouts {
            let name = format!("attention_{layout:?}").to_lowercase();
            g.bench_with_input(BenchmarkId::new(name, bs), &bs, |b, _| {
                b.iter_custom(|iters| {
                    event_time(dev, iters, || {
                        dev.launch_attention(&mut dp, layout).expect("launch")
                    })
                })
            });
        }
    }
    g.finish();
}

fn bench(c: &mut Criterion) {
    match CudaDevice::open(0) {
        Ok(dev) => bench_gpu(c, &dev),
        Err(e) => {
            eprintln!("block_size_sweep: no GPU ({e}); measuring the CPU");
            bench_cpu(c)
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
