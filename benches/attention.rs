//! Paged against contiguous decode attention (issue 4's shape: f16, head dim 128, 32 query / 8 KV
//! heads) at block sizes 1, 16 and 256, with `Throughput::Bytes` of the K and V read.
//!
//! CPU: batch 4, context 2048 (32 MiB of KV, past the L2 caches) through
//! `device::cpu::attention::decode_attention`. GPU, when `CudaDevice::open(0)` works: the issue's
//! batch 64, context 4096, timed with CUDA events (`time_ms`) through `iter_custom`, split-K as
//! `CudaDevice::attention_plan` chooses for the device.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use half::f16;
use pagedkv::attention::{AttentionShape, Problem};
use pagedkv::device::cpu::attention::{decode_attention, ContiguousRows, PagedRows};
use pagedkv::device::cuda::{CudaDevice, Layout};
use std::time::Duration;

const BLOCK_SIZES: [usize; 3] = [1, 16, 256];

fn shape() -> AttentionShape {
    AttentionShape {
        num_heads: 32,
        num_kv_heads: 8,
        head_dim: 128,
        scale: 1.0 / (128f32).sqrt(),
    }
}

fn cpu(c: &mut Criterion) {
    let mut g = c.benchmark_group("attention_cpu");
    g.sample_size(10);
    for bs in BLOCK_SIZES {
        let p = Problem::<f16>::new(shape(), bs, &[2048; 4], 1).unwrap();
        g.throughput(Throughput::Bytes(p.kv_bytes() as u64));
        let mut out = vec![f16::ZERO; p.q.len()];
        let paged = PagedRows {
            spec: &p.spec,
            table: &p.table,
        };
        g.bench_with_input(BenchmarkId::new("paged", bs), &bs, |b, _| {
            b.iter(|| decode_attention(&p.shape, &p.q, &p.k, &p.v, &p.lens, &paged, &mut out))
        });
        let contiguous = ContiguousRows {
            num_kv_heads: p.shape.num_kv_heads,
            max_len: p.max_len,
            head_dim: p.shape.head_dim,
        };
        let (k, v) = (&p.k_contiguous, &p.v_contiguous);
        g.bench_with_input(BenchmarkId::new("contiguous", bs), &bs, |b, _| {
            b.iter(|| decode_attention(&p.shape, &p.q, k, v, &p.lens, &contiguous, &mut out))
        });
    }
    g.finish();
}

fn gpu(c: &mut Criterion) {
    let dev = match CudaDevice::open(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("attention_gpu skipped: {e}");
            return;
        }
    };
    let mut g = c.benchmark_group("attention_gpu");
    g.sample_size(20);
    for bs in BLOCK_SIZES {
        let p = Problem::<f16>::new(shape(), bs, &[4096; 64], 1).unwrap();
        let plan = dev.attention_plan(&p.data()).expect("occupancy query");
        let mut dp = match dev.upload_attention(&p.data(), plan) {
            Ok(dp) => dp,
            Err(e) => {
                eprintln!("attention_gpu block size {bs} skipped: {e}");
                continue;
            }
        };
        g.throughput(Throughput::Bytes(p.kv_bytes() as u64));
        for (name, layout) in [("paged", Layout::Paged), ("contiguous", Layout::Contiguous)] {
            g.bench_with_input(BenchmarkId::new(name, bs), &bs, |b, _| {
                b.iter_custom(|iters| {
                    let ms = dev
                        .time_total_ms(iters as usize, || dev.launch_attention(&mut dp, layout))
                        .expect("attention launch");
                    Duration::from_secs_f64(ms * 1e-3)
                })
            });
        }
    }
    g.finish();
}

criterion_group!(benches, cpu, gpu);
criterion_main!(benches);
