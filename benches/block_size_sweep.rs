//! The bandwidth side of the block-size sweep, per block size, for one Llama-3-8B layer (32 query
//! / 8 KV heads, head dim 128, f16): the read-only and copy-out paged gathers through a shuffled
//! block table, and paged decode attention, next to the contiguous limits (and, on the GPU, the
//! contiguous attention baseline).
//!
//! On a machine with a usable GPU everything runs there, timed with CUDA events through
//! `iter_custom`; elsewhere on the CPU. Figures in GB/s; after the group, each family's GB/s and
//! fraction of the limit per block size, and a closing line with the fraction at block 16 and the
//! best block size (benches/common/rates.rs).

#[path = "common/rates.rs"]
mod rates;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use half::f16;
use pagedkv::device::cpu::attention::{decode_attention, PagedRows};
use pagedkv::device::cpu::gather::{gather_copy, gather_sum};
use pagedkv::device::cpu::last_level_cache::last_level_cache;
use pagedkv::device::cpu::pages::{thp_available, HostBuf, Pages};
use pagedkv::device::cpu::stream::{limit_bytes, MemoryProbe};
use pagedkv::device::cuda::{CudaDevice, Layout};
use pagedkv::kv::{BlockSize, Dtype, KvSpec};
use pagedkv::launch::gather::GatherGeometry;
use pagedkv::sweep::block_sizes;
use pagedkv::sweep::cpu_probe::shuffled_table;
use pagedkv::sweep::AttentionBatch;
use rates::Rates;
use std::time::Duration;

/// Each of K and V on the CPU: the sweep's default probe (128 MiB for both), and never under 4x
/// the last-level cache the run has (measured: `device::cpu::last_level_cache`), so that DRAM is
/// measured and not the cache.
fn cpu_pool_bytes() -> usize {
    limit_bytes(64 << 20)
}
/// Large against a GPU's L2 cache (50 MB and more), so HBM is what is measured.
const GPU_POOL_BYTES: usize = 512 << 20;
/// Tokens per sequence of the gathers' tables (the sweep's probe uses the same order of size).
const SEQ_TOKENS: usize = 1024;

/// Deterministic values in [-0.5, 0.5) for a pool.
fn value(i: usize, seed: u32) -> f16 {
    f16::from_f32(((i as u32).wrapping_mul(2_654_435_761) ^ seed) as f32 / u32::MAX as f32 - 0.5)
}

fn pool(bytes: usize, seed: u32) -> Vec<f16> {
    (0..bytes / 2).map(|i| value(i, seed)).collect()
}

/// A pool in huge pages where the kernel offers them, as the sweep's CPU probe and the limits.
fn host_pool(bytes: usize, seed: u32) -> HostBuf {
    let pages = if thp_available() {
        Pages::Huge
    } else {
        Pages::Small
    };
    let mut buf = HostBuf::new(bytes, pages).expect("map a pool");
    for (i, x) in buf.as_mut_slice::<f16>().iter_mut().enumerate() {
        *x = value(i, seed);
    }
    buf
}

fn spec(bs: usize) -> KvSpec {
    KvSpec::new(8, 128, bs, Dtype::F16).unwrap()
}

/// Families of the summary and the limit each is a fraction of.
const FAMILIES: &[(&str, &str)] = &[
    ("gather_read", "limit_stream"),
    ("gather_copy", "limit_copy"),
    ("attention", "limit_stream"),
];

fn bench_cpu(c: &mut Criterion) {
    println!("{}", last_level_cache().describe());
    let half = cpu_pool_bytes();
    let (k, v) = (host_pool(half, 1), host_pool(half, 2));
    let mut out = host_pool(half, 3);
    let (k, v) = (k.as_slice::<f16>(), v.as_slice::<f16>());
    let out = out.as_mut_slice::<f16>();
    // The CLI's limits over the bytes a read-only gather reads (K and V).
    let mut probe = MemoryProbe::new(2 * half).expect("map the limits' buffer");
    let rates = Rates::default();
    let mut g = c.benchmark_group("block_size_sweep_cpu");
    g.sample_size(10);
    let probe_bytes = probe.bytes() as u64;
    g.throughput(Throughput::BytesDecimal(probe_bytes));
    g.bench_function("limit_stream", |b| {
        rates.time(b, "limit_stream", 0, probe_bytes, || probe.stream_pass())
    });
    g.bench_function("limit_copy", |b| {
        rates.time(b, "limit_copy", 0, probe_bytes, || probe.copy_pass())
    });
    // Sequences of SEQ_TOKENS tokens, 1024 bytes per token of each of K and V.
    let token_bytes = spec(1).elems_per_token() * 2 * 2;
    let batch = AttentionBatch::fixed(
        32,
        (2 * half).div_ceil(SEQ_TOKENS * token_bytes),
        SEQ_TOKENS,
    );
    for bs in block_sizes().into_iter().map(BlockSize::get) {
        let spec = spec(bs);
        let table = shuffled_table(&spec, half, SEQ_TOKENS, 7).unwrap();
        let tokens: usize = table.lens.iter().map(|&l| l as usize).sum();
        let elems = tokens * spec.elems_per_token();
        // Read-only: K and V; copy-out: K read and written out (as the copy limit counts).
        let bytes = (2 * elems * 2) as u64;
        let mut sums = vec![0.0f32; table.num_seqs() * 8];
        g.throughput(Throughput::BytesDecimal(bytes));
        g.bench_with_input(BenchmarkId::new("gather_read", bs), &bs, |b, _| {
            rates.time(b, "gather_read", bs, bytes, || {
                gather_sum(&spec, &k[..elems], &v[..elems], &table, &mut sums)
            })
        });
        g.bench_with_input(BenchmarkId::new("gather_copy", bs), &bs, |b, _| {
            rates.time(b, "gather_copy", bs, bytes, || {
                gather_copy(&spec, &k[..elems], &table, &mut out[..elems])
            })
        });
        let p = batch.problem::<f16, f16>(&spec, 7).unwrap();
        let rows = PagedRows {
            spec: &p.spec,
            table: &p.table,
        };
        let mut att = vec![f16::ZERO; p.q.len()];
        let kv = p.kv_bytes() as u64;
        g.throughput(Throughput::BytesDecimal(kv));
        g.bench_with_input(BenchmarkId::new("attention", bs), &bs, |b, _| {
            rates.time(b, "attention", bs, kv, || {
                decode_attention(&p.shape, &p.q, &p.k, &p.v, &p.lens, &rows, &mut att)
            })
        });
    }
    g.finish();
    rates.summary("block_size_sweep_cpu", FAMILIES);
}

/// Criterion's time for `iters` back-to-back runs, between one pair of CUDA events, kept in
/// `rates` under (`family`, `block`).
#[allow(clippy::too_many_arguments)]
fn event_time(
    dev: &CudaDevice,
    rates: &Rates,
    family: &str,
    block: usize,
    bytes: u64,
    iters: u64,
    mut launch: impl FnMut(),
) -> Duration {
    let ms = dev
        .time_total_ms(iters as usize, || {
            launch();
            Ok(())
        })
        .expect("CUDA event timing");
    let d = Duration::from_secs_f64(ms * 1e-3);
    rates.record(family, block, bytes, iters, d);
    d
}

fn bench_gpu(c: &mut Criterion, dev: &CudaDevice) {
    let half = GPU_POOL_BYTES / 2;
    let pools = dev
        .upload_gather_pool(&pool(half, 1), &pool(half, 2))
        .expect("upload the pools");
    let rates = Rates::default();
    // The sweep's limits: the device's copy and read-only stream over one pool's bytes.
    let l = dev.memory_limits(half, 20).expect("limits");
    rates.set_limit("limit_stream", l.stream_gbps);
    rates.set_limit("limit_copy", l.copy_gbps);
    let mut g = c.benchmark_group("block_size_sweep_gpu");
    g.sample_size(20);
    g.throughput(Throughput::BytesDecimal(half as u64));
    g.bench_function("limit_stream", |b| {
        // memory_limits times with events itself; criterion sees its stream time per byte.
        b.iter_custom(|iters| {
            let l = dev.memory_limits(half, iters as usize).expect("limits");
            Duration::from_secs_f64(iters as f64 * half as f64 / (l.stream_gbps * 1e9))
        })
    });
    let batch = AttentionBatch::fixed(32, 32, 2048);
    for bs in block_sizes().into_iter().map(BlockSize::get) {
        let spec = spec(bs);
        let table = shuffled_table(&spec, half, SEQ_TOKENS, 7).unwrap();
        let mut gather = dev
            .upload_gather(&pools, &spec, &table, GatherGeometry::for_spec(&spec))
            .expect("upload the table");
        let bytes = (gather.plan.copy_elems * 2 * 2) as u64;
        g.throughput(Throughput::BytesDecimal(bytes));
        g.bench_with_input(BenchmarkId::new("gather_read", bs), &bs, |b, _| {
            b.iter_custom(|iters| {
                event_time(dev, &rates, "gather_read", bs, bytes, iters, || {
                    dev.launch_gather_sum(&pools, &mut gather).expect("launch")
                })
            })
        });
        g.bench_with_input(BenchmarkId::new("gather_copy", bs), &bs, |b, _| {
            b.iter_custom(|iters| {
                event_time(dev, &rates, "gather_copy", bs, bytes, iters, || {
                    dev.launch_gather_copy(&pools, &mut gather).expect("launch")
                })
            })
        });
        let p = batch.problem::<f16, f16>(&spec, 7).unwrap();
        let plan = dev.attention_plan(&p.data()).expect("occupancy query");
        let mut dp = dev
            .upload_attention(&p.data(), plan)
            .expect("upload attention");
        let kv = p.kv_bytes() as u64;
        g.throughput(Throughput::BytesDecimal(kv));
        let mut layouts = vec![Layout::Paged];
        if bs == 1 {
            // The contiguous baseline does not depend on the block size: once.
            layouts.push(Layout::Contiguous);
        }
        for layout in layouts {
            let name = format!("attention_{layout:?}").to_lowercase();
            let family = if layout == Layout::Paged {
                "attention"
            } else {
                "attention_contiguous"
            };
            g.bench_with_input(BenchmarkId::new(name, bs), &bs, |b, _| {
                b.iter_custom(|iters| {
                    event_time(dev, &rates, family, bs, kv, iters, || {
                        dev.launch_attention(&mut dp, layout).expect("launch")
                    })
                })
            });
        }
    }
    g.finish();
    rates.summary(
        "block_size_sweep_gpu",
        &[FAMILIES, &[("attention_contiguous", "limit_stream")]].concat(),
    );
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
