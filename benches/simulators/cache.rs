//! Requests per second of each eviction policy on one core, over a Zipf trace generated before
//! timing (1M keys, alpha 1, 2M requests, capacity 100k = 10% of the keys); and of the one-pass
//! LRU and OPT miss-ratio curves (100k keys, 1M requests; OPT's stack cut at 10k entries). Targets: LRU ≥ 20 M requests/s, every policy ≥ 5 M.
//!
//! Each policy is timed twice: by the wall clock, and by the CPU time of the benchmark thread
//! (`CLOCK_THREAD_CPUTIME_ID`), which is what "on one core" means when other processes share the
//! cores and the wall clock counts their turns too.

use clap::ValueEnum;
use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{BenchmarkId, Criterion, Throughput};
use pagedkv::sim::cache::{lru_curve, opt_curve, simulate, Policy};
use pagedkv::workload::key_gen::zipf;
use std::hint::black_box;
use std::time::Duration;

const KEYS: u32 = 1_000_000;
const REQUESTS: usize = 2_000_000;
const CAPACITY: usize = 100_000;

/// CPU time consumed by the calling thread, in nanoseconds.
pub struct ThreadCpuTime;

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "CLOCK_THREAD_CPUTIME_ID is unavailable");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

static NANOSECONDS: WallTime = WallTime;

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns() - start
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        // Values are nanoseconds, as the wall clock's are.
        NANOSECONDS.formatter()
    }
}

fn policies_on_zipf<M: Measurement>(c: &mut Criterion<M>, clock: &str) {
    let trace = zipf(KEYS, 1.0, REQUESTS, 42);
    let mut g = c.benchmark_group(format!("cache_policy_{clock}_zipf1.0_1Mkeys_cap100k"));
    g.throughput(Throughput::Elements(trace.len() as u64));
    g.sample_size(10);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(4));
    for &p in Policy::value_variants() {
        g.bench_with_input(BenchmarkId::from_parameter(p), &p, |b, &p| {
            b.iter(|| simulate(p, black_box(&trace), CAPACITY).expect("valid capacity"))
        });
    }
    g.finish();
}

pub fn policies_wall_clock(c: &mut Criterion) {
    policies_on_zipf(c, "wall");
}

pub fn policies_thread_cpu(c: &mut Criterion<ThreadCpuTime>) {
    policies_on_zipf(c, "cpu");
}

pub fn one_pass_curves(c: &mut Criterion) {
    let trace = zipf(100_000, 1.0, 1_000_000, 43);
    let mut g = c.benchmark_group("cache_curve_wall_zipf1.0_100kkeys");
    g.throughput(Throughput::Elements(trace.len() as u64));
    g.sample_size(10);
    g.warm_up_time(Duration::from_secs(1));
    g.measurement_time(Duration::from_secs(4));
    g.bench_function("lru_one_pass", |b| {
        b.iter(|| lru_curve(black_box(trace.keys()), trace.key_space()))
    });
    g.bench_function("opt_one_pass", |b| {
        b.iter(|| opt_curve(black_box(trace.keys()), trace.key_space(), 10_000))
    });
    g.finish();
}
