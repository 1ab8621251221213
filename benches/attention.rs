//! Paged against contiguous decode attention (issue 4's shape: f16, head dim 128, 32 query / 8 KV
//! heads) at block sizes 1, 16 and 256, with `Throughput::Bytes` of the K and V read.
//!
//! CPU: context 2048, as many sequences as make K and V at least 4x the last-level cache the run
//! has (measured, `device::cpu::last_level_cache`, printed first: DRAM, not the cache) through `device::cpu::attention::decode_attention`, beside the CLI's read-only
//! stream limit over the same bytes. GPU, when `CudaDevice::open(0)` works: the batch 64,
//! context 4096, timed with CUDA events (`time_ms`) through `iter_custom`, split-K as
//! `CudaDevice::attention_plan` chooses for the device, beside the device's stream limit.
//! Figures in GB/s; after each group, GB/s and fraction of the limit per block size and a closing
//! line with block 16's fraction and the best block size (benches/common/rates.rs).

#[path = "common/rates.rs"]
mod rates;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use half::f16;
use pagedkv::attention::{AttentionShape, Problem};
use pagedkv::device::cpu::attention::{decode_attention, ContiguousRows, PagedRows};
use pagedkv::device::cpu::last_level_cache::last_level_cache;
use pagedkv::device::cpu::stream::{limit_bytes, MemoryProbe};
use pagedkv::device::cuda::{CudaDevice, Layout};
use rates::Rates;
use std::time::Duration;

const FAMILIES: &[(&str, &str)] = &[("paged", "limit_stream"), ("contiguous", "limit_stream")];

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
    const CONTEXT: usize = 2048;
    let s = shape();
    let seq_bytes = CONTEXT * s.num_kv_heads * s.head_dim * 2 * 2;
    println!("{}", last_level_cache().describe());
    let batch = limit_bytes(1).div_ceil(seq_bytes);
    let rates = Rates::default();
    let mut g = c.benchmark_group("attention_cpu");
    g.sample_size(10);
    let probe = MemoryProbe::new(batch * seq_bytes).expect("map the limits' buffer");
    let probe_bytes = probe.bytes() as u64;
    g.throughput(Throughput::BytesDecimal(probe_bytes));
    g.bench_function("limit_stream", |b| {
        rates.time(b, "limit_stream", 0, probe_bytes, || probe.stream_pass())
    });
    for bs in BLOCK_SIZES {
        let p = Problem::<f16>::new(shape(), bs, &vec![CONTEXT; batch], 1).unwrap();
        let kv = p.kv_bytes() as u64;
        g.throughput(Throughput::BytesDecimal(kv));
        let mut out = vec![f16::ZERO; p.q.len()];
        let paged = PagedRows {
            spec: &p.spec,
            table: &p.table,
        };
        g.bench_with_input(BenchmarkId::new("paged", bs), &bs, |b, _| {
            rates.time(b, "paged", bs, kv, || {
                decode_attention(&p.shape, &p.q, &p.k, &p.v, &p.lens, &paged, &mut out)
            })
        });
        let contiguous = ContiguousRows {
            num_kv_heads: p.shape.num_kv_heads,
            max_len: p.max_len,
            head_dim: p.shape.head_dim,
        };
        let (k, v) = (&p.k_contiguous, &p.v_contiguous);
        g.bench_with_input(BenchmarkId::new("contiguous", bs), &bs, |b, _| {
            rates.time(b, "contiguous", bs, kv, || {
                decode_attention(&p.shape, &p.q, k, v, &p.lens, &contiguous, &mut out)
            })
        });
    }
    g.finish();
    rates.summary("attention_cpu", FAMILIES);
}

fn gpu(c: &mut Criterion) {
    let dev = match CudaDevice::open(0) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("attention_gpu skipped: {e}");
            return;
        }
    };
    let rates = Rates::default();
    let mut g = c.benchmark_group("attention_gpu");
    g.sample_size(20);
    for bs in BLOCK_SIZES {
        let p = Problem::<f16>::new(shape(), bs, &[4096; 64], 1).unwrap();
        let kv = p.kv_bytes() as u64;
        if bs == BLOCK_SIZES[0] {
            let l = dev.memory_limits(p.kv_bytes(), 20).expect("limits");
            rates.set_limit("limit_stream", l.stream_gbps);
        }
        let plan = dev.attention_plan(&p.data()).expect("occupancy query");
        let mut dp = match dev.upload_attention(&p.data(), plan) {
            Ok(dp) => dp,
            Err(e) => {
                eprintln!("attention_gpu block size {bs} skipped: {e}");
                continue;
            }
        };
        g.throughput(Throughput::BytesDecimal(kv));
        for (name, layout) in [("paged", Layout::Paged), ("contiguous", Layout::Contiguous)] {
            g.bench_with_input(BenchmarkId::new(name, bs), &bs, |b, _| {
                b.iter_custom(|iters| {
                    let ms = dev
                        .time_total_ms(iters as usize, || dev.launch_attention(&mut dp, layout))
                        .expect("attention launch");
                    let d = Duration::from_secs_f64(ms * 1e-3);
                    rates.record(name, bs, kv, iters, d);
                    d
                })
            });
        }
    }
    g.finish();
    rates.summary("attention_gpu", FAMILIES);
}

criterion_group!(benches, cpu, gpu);
criterion_main!(benches);
