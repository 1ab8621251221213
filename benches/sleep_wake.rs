//! Sleep/wake pairs on the CPU twin, and on the CUDA pool when a GPU is usable: discard (release
//! and re-create the physical memory) and offload (plus the copy out and back), with one chunk
//! and with 2 MiB chunks. Throughput is the pool size per sleep/wake pair, in GB/s.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use pagedkv::vmm::cuda::{open_context, CudaPool};
use pagedkv::vmm::host::CpuPool;
use pagedkv::vmm::{Backing, SleepMode, SleepPool};
use std::time::Duration;

const MIB: usize = 1 << 20;

fn pairs<B: Backing>(c: &mut Criterion, group: &str, make: &dyn Fn(Option<usize>) -> SleepPool<B>) {
    let mut g = c.benchmark_group(group);
    g.sample_size(10).measurement_time(Duration::from_secs(3));
    for chunk in [None, Some(2 * MIB)] {
        let mut pool = make(chunk);
        g.throughput(Throughput::BytesDecimal(pool.size() as u64));
        let label = format!("{}x{}MiB", pool.layout().count(), pool.layout().chunk / MIB);
        for mode in [SleepMode::Discard, SleepMode::Offload] {
            for keep in [false, true] {
                if mode == SleepMode::Discard && keep {
                    continue;
                }
                pool.keep_host_buffer(keep);
                let name = match (mode, keep) {
                    (SleepMode::Discard, _) => "discard".to_string(),
                    (_, false) => "offload".to_string(),
                    (_, true) => "offload_kept_buffer".to_string(),
                };
                g.bench_function(BenchmarkId::new(name, &label), |b| {
                    b.iter(|| {
                        pool.sleep(mode).expect("sleep");
                        pool.wake().expect("wake");
                    })
                });
            }
        }
    }
    g.finish();
}

fn cpu(c: &mut Criterion) {
    pairs(c, "sleep_wake_cpu_64MiB", &|chunk| {
        CpuPool::create(64 * MIB, chunk).expect("CPU pool")
    });
}

fn cuda(c: &mut Criterion) {
    let ctx = match open_context(0) {
        Ok(ctx) => ctx,
        Err(e) => {
            eprintln!("sleep_wake_cuda skipped: {e}");
            return;
        }
    };
    pairs(c, "sleep_wake_cuda_1GiB", &|chunk| {
        CudaPool::create(&ctx, 1024 * MIB, chunk).expect("CUDA pool")
    });
}

criterion_group!(benches, cpu, cuda);
criterion_main!(benches);
