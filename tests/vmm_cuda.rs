//! The CUDA pool: the same checks as the CPU twin, plus paged decode attention (the project's
//! kernel, reading K/V and the block table from inside the pool) run before sleep and after wake,
//! directly and as a captured CUDA graph. Every test is ignored by a plain
//! `cargo test`; scripts/gpu-check runs them with `--include-ignored` on a GPU.

use cudarc::driver::{result, sys, CudaContext, CudaStream, LaunchConfig};
use half::f16;
use pagedkv::attention::{
    attention_f64, relative_error, tolerance, AttentionShape, Problem, SplitPlan, CHUNK,
};
use pagedkv::device::cuda::driver::Function;
use pagedkv::device::cuda::{CudaDevice, Gpu};
use pagedkv::device::DeviceError;
use pagedkv::kv::Dtype;
use pagedkv::launch::{AttentionLaunch, KernelLaunch, Layout, Scalar};
use pagedkv::vmm::checksum::fill_random;
use pagedkv::vmm::cuda::{device_memory, open_context, CudaPool};
use pagedkv::vmm::{
    PoolSet, PoolState, SleepLevel, SleepMode, VmmError, WakeFault, KV_CACHE, WEIGHTS,
};
use rand::{Rng, SeedableRng};
use std::ffi::c_void;
use std::sync::{Arc, Mutex, MutexGuard};

const MIB: usize = 1 << 20;

/// One GPU test at a time: they measure device memory, and one of them takes all of it.
static GPU_LOCK: Mutex<()> = Mutex::new(());

fn gpu(test: &str) -> (MutexGuard<'static, ()>, Arc<Gpu>) {
    let guard = GPU_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    match open_context(0) {
        Ok(ctx) => (guard, ctx),
        Err(e) => panic!("{test}: a GPU test run without a GPU: {e}"),
    }
}

fn in_use(ctx: &Gpu) -> i64 {
    let (free, total) = device_memory(ctx).unwrap();
    (total - free) as i64
}

fn random_pool(ctx: &Arc<Gpu>, size: usize, chunk: usize, seed: u64) -> (CudaPool, Vec<u8>) {
    let mut pool = CudaPool::create(ctx, size, Some(chunk)).unwrap();
    let mut expected = vec![0u8; pool.size()];
    fill_random(&mut expected, seed, 0);
    pool.write(0, &expected).unwrap();
    (pool, expected)
}

fn contents(pool: &CudaPool) -> Vec<u8> {
    let mut out = vec![0u8; pool.size()];
    pool.read(0, &mut out).unwrap();
    out
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn cuda_offload_cycles_keep_contents_and_address_and_free_memory() {
    let (_gpu, ctx) = gpu("cuda_offload_cycles");
    let (mut pool, expected) = random_pool(&ctx, 64 * MIB, 16 * MIB, 1);
    assert_eq!(pool.layout().count(), 64 * MIB / pool.layout().chunk);
    let base = pool.ptr().unwrap();
    for cycle in 0..20 {
        let awake = in_use(&ctx);
        pool.sleep(SleepMode::Offload).unwrap();
        let freed = awake - in_use(&ctx);
        println!("cycle {cycle}: freed {freed} bytes of {}", pool.size());
        assert!(
            freed as f64 >= 0.9 * pool.size() as f64,
            "sleep freed only {freed} bytes"
        );
        pool.wake().unwrap();
        assert_eq!(pool.ptr().unwrap(), base);
        assert!(contents(&pool) == expected, "data lost in cycle {cycle}");
    }
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn cuda_cycles_do_not_leak_device_memory() {
    let (_gpu, ctx) = gpu("cuda_cycles_do_not_leak");
    let (mut pool, _) = random_pool(&ctx, 8 * MIB, 2 * MIB, 2);
    let granularity = pool.layout().granularity as i64;
    pool.sleep(SleepMode::Offload).unwrap();
    pool.wake().unwrap();
    let awake = in_use(&ctx);
    pool.sleep(SleepMode::Discard).unwrap();
    let asleep = in_use(&ctx);
    pool.wake().unwrap();
    for cycle in 0..200 {
        let mode = if cycle % 2 == 0 {
            SleepMode::Offload
        } else {
            SleepMode::Discard
        };
        pool.sleep(mode).unwrap();
        assert!(
            (in_use(&ctx) - asleep).abs() <= granularity,
            "cycle {cycle} asleep"
        );
        if cycle % 50 == 0 {
            pool.inject_wake_fault(WakeFault::MapChunk(2));
            pool.wake().unwrap_err();
            assert!(
                (in_use(&ctx) - asleep).abs() <= granularity,
                "rollback {cycle}"
            );
        }
        pool.wake().unwrap();
        assert!(
            (in_use(&ctx) - awake).abs() <= granularity,
            "cycle {cycle} awake"
        );
    }
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn cuda_illegal_transitions_are_typed_errors() {
    let (_gpu, ctx) = gpu("cuda_illegal_transitions");
    let (mut pool, expected) = random_pool(&ctx, 4 * MIB, 2 * MIB, 3);
    let mut buf = vec![0u8; 64];
    assert!(matches!(pool.wake(), Err(VmmError::NotAsleep)));
    pool.sleep(SleepMode::Offload).unwrap();
    assert!(matches!(
        pool.sleep(SleepMode::Discard),
        Err(VmmError::AlreadyAsleep(_))
    ));
    assert!(matches!(pool.read(0, &mut buf), Err(VmmError::Asleep(_))));
    assert!(matches!(pool.write(0, &buf), Err(VmmError::Asleep(_))));
    assert!(matches!(pool.ptr(), Err(VmmError::Asleep(_))));
    pool.wake().unwrap();
    assert!(matches!(pool.wake(), Err(VmmError::NotAsleep)));
    assert!(matches!(
        pool.read(4 * MIB - 8, &mut buf),
        Err(VmmError::OutOfRange { .. })
    ));
    assert!(contents(&pool) == expected);
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn cuda_failed_wakes_roll_back_and_a_later_wake_restores() {
    let (_gpu, ctx) = gpu("cuda_failed_wakes_roll_back");
    let (mut pool, expected) = random_pool(&ctx, 16 * MIB, 4 * MIB, 4);
    let base = pool.base_address();
    pool.sleep(SleepMode::Offload).unwrap();
    let asleep = in_use(&ctx);
    for fault in (0..pool.layout().count())
        .map(WakeFault::MapChunk)
        .chain([WakeFault::Restore])
    {
        pool.inject_wake_fault(fault);
        assert!(matches!(pool.wake(), Err(VmmError::Injected(f)) if f == fault));
        assert_eq!(pool.state(), PoolState::AsleepOffloaded);
        assert!((in_use(&ctx) - asleep).abs() <= pool.layout().granularity as i64);
    }
    pool.wake().unwrap();
    assert_eq!(pool.ptr().unwrap(), base);
    assert!(contents(&pool) == expected);
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn cuda_wake_that_runs_out_of_memory_rolls_back() {
    let (_gpu, ctx) = gpu("cuda_wake_out_of_memory");
    let (mut pool, expected) = random_pool(&ctx, 64 * MIB, 16 * MIB, 5);
    pool.sleep(SleepMode::Offload).unwrap();
    // Take all free memory but 40 MiB: two chunks fit, the third must fail for real.
    let (free, _) = device_memory(&ctx).unwrap();
    let hog_bytes = free.saturating_sub(40 * MIB);
    // SAFETY: a plain allocation, freed below.
    let hog = match unsafe { result::malloc_sync(hog_bytes) } {
        Ok(p) => p,
        Err(e) => {
            println!("skipping the out-of-memory wake: could not take {hog_bytes} bytes ({e})");
            return;
        }
    };
    let woke = pool.wake();
    // SAFETY: freeing the allocation made above, once.
    unsafe { result::memory_free(hog) }.unwrap();
    match woke {
        Ok(_) => println!("the driver found room for the pool after all: rollback not provoked"),
        Err(e) => {
            println!("wake failed as provoked: {e}");
            assert!(matches!(
                e.root(),
                VmmError::Device(DeviceError::Driver { .. })
            ));
            assert_eq!(pool.state(), PoolState::AsleepOffloaded);
            pool.wake().unwrap();
        }
    }
    assert!(contents(&pool) == expected);
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn cuda_levels_and_tags() {
    let (_gpu, ctx) = gpu("cuda_levels_and_tags");
    let (weights, w) = random_pool(&ctx, 8 * MIB, 2 * MIB, 6);
    let (kv, _) = random_pool(&ctx, 16 * MIB, 4 * MIB, 7);
    let mut set = PoolSet::new();
    set.insert(WEIGHTS, weights).unwrap();
    set.insert(KV_CACHE, kv).unwrap();
    let before = in_use(&ctx);
    set.sleep_level(SleepLevel::One).unwrap();
    assert!(before - in_use(&ctx) >= (24 * MIB) as i64 * 9 / 10);
    assert_eq!(
        set.get(WEIGHTS).unwrap().state(),
        PoolState::AsleepOffloaded
    );
    assert_eq!(
        set.get(KV_CACHE).unwrap().state(),
        PoolState::AsleepDiscarded
    );
    set.wake(Some(&[WEIGHTS])).unwrap();
    assert!(contents(set.get(WEIGHTS).unwrap()) == w);
    assert_eq!(
        set.get(KV_CACHE).unwrap().state(),
        PoolState::AsleepDiscarded
    );
    set.wake(Some(&[KV_CACHE])).unwrap();
    // Fresh KV memory works: write and read back.
    let mut fresh = vec![0u8; 16 * MIB];
    fill_random(&mut fresh, 8, 0);
    set.get_mut(KV_CACHE).unwrap().write(0, &fresh).unwrap();
    assert!(contents(set.get(KV_CACHE).unwrap()) == fresh);
    set.sleep_level(SleepLevel::Two).unwrap();
    assert_eq!(
        set.get(WEIGHTS).unwrap().state(),
        PoolState::AsleepDiscarded
    );
    set.wake(None).unwrap();
}

// --- Paged decode attention over K/V and a block table that live inside the pool -----------

/// Byte offsets of the problem's pieces inside the KV pool and the output pool.
struct Placement {
    q: usize,
    k: usize,
    v: usize,
    k_scale: usize,
    v_scale: usize,
    table: usize,
    lens: usize,
    kv_size: usize,
    out: usize,
    part_out: usize,
    part_max: usize,
    part_sum: usize,
    out_size: usize,
}

/// Packs pieces of the given byte lengths one after another, 256-byte aligned.
fn pack(lens: &[usize]) -> (Vec<usize>, usize) {
    let mut at = 0;
    let offsets = lens
        .iter()
        .map(|&l| {
            let here = at;
            at = (at + l).next_multiple_of(256);
            here
        })
        .collect();
    (offsets, at.max(256))
}

fn place(p: &Problem<f16>, plan: SplitPlan) -> Placement {
    let (kv, kv_size) = pack(&[
        p.q.len() * 2,
        p.k.len() * 2,
        p.v.len() * 2,
        p.k_scale.len() * 4,
        p.v_scale.len() * 4,
        p.table.entries.len() * 4,
        p.lens.len() * 4,
    ]);
    let partials = p.lens.len() * p.shape.num_heads * plan.num_partitions;
    let (out, out_size) = pack(&[
        p.q.len() * 2,
        partials * p.shape.head_dim * 4,
        partials * 4,
        partials * 4,
    ]);
    Placement {
        q: kv[0],
        k: kv[1],
        v: kv[2],
        k_scale: kv[3],
        v_scale: kv[4],
        table: kv[5],
        lens: kv[6],
        kv_size,
        out: out[0],
        part_out: out[1],
        part_max: out[2],
        part_sum: out[3],
        out_size,
    }
}

/// Enqueues paged attention (and the split-K merge) on `stream` with raw pool addresses; no
/// host synchronisation inside, so it can be captured into a graph. Kernel, grid and scalars come
/// from the library's launch plan; the buffers follow the signature in kernels/attention.cuh.
fn enqueue_attention(
    dev: &CudaDevice,
    stream: &CudaStream,
    p: &Problem<f16>,
    plan: SplitPlan,
    at: &Placement,
    kv: u64,
    out: u64,
) {
    let launch =
        AttentionLaunch::new(Dtype::F16, Dtype::F16, &p.data(), Layout::Paged, plan).unwrap();
    let outputs = [
        out + at.out as u64,
        out + at.part_out as u64,
        out + at.part_max as u64,
        out + at.part_sum as u64,
    ];
    let inputs = [
        kv + at.q as u64,
        kv + at.k as u64,
        kv + at.v as u64,
        kv + at.k_scale as u64,
        kv + at.v_scale as u64,
        kv + at.table as u64,
        kv + at.lens as u64,
    ];
    let a = &launch.attention;
    let f = dev.attention_function(a).unwrap();
    let mut params: Vec<*mut c_void> = outputs.iter().chain(&inputs).map(param).collect();
    params.extend(a.scalars.iter().map(scalar));
    // SAFETY: the argument list matches paged_attention_*'s signature (kernels/attention.cuh);
    // every address lies inside a mapped pool of the placed size, and the table was validated
    // against the pool's blocks.
    unsafe { launch_on(&f, stream, config(a), &mut params) };
    if let Some(m) = &launch.merge {
        let merge = dev.function(m.module, &m.kernel).unwrap();
        let mut params: Vec<*mut c_void> = outputs.iter().map(param).collect();
        params.extend(m.scalars.iter().map(scalar));
        // SAFETY: merge_partitions_*'s signature; the partial buffers hold num_seqs * num_heads *
        // num_partitions entries.
        unsafe { launch_on(&merge, stream, config(m), &mut params) };
    }
}

/// A kernel of the library's module launched on a stream of cudarc's (which can capture graphs).
///
/// # Safety
/// `params` point at the kernel's arguments, in order, alive until the launch returns.
unsafe fn launch_on(
    f: &Function,
    stream: &CudaStream,
    cfg: LaunchConfig,
    params: &mut [*mut c_void],
) {
    // SAFETY: per the caller.
    unsafe {
        result::launch_kernel(
            f.cu_function(),
            cfg.grid_dim,
            cfg.block_dim,
            cfg.shared_mem_bytes,
            stream.cu_stream(),
            params,
        )
    }
    .unwrap();
}

fn param(ptr: &u64) -> *mut c_void {
    (ptr as *const u64).cast_mut().cast()
}

fn scalar(s: &Scalar) -> *mut c_void {
    match s {
        Scalar::I32(v) => (v as *const i32).cast_mut().cast(),
        Scalar::F32(v) => (v as *const f32).cast_mut().cast(),
    }
}

fn config(k: &KernelLaunch) -> LaunchConfig {
    LaunchConfig {
        grid_dim: k.grid,
        block_dim: (k.threads, 1, 1),
        shared_mem_bytes: k.smem_bytes,
    }
}

fn read_out(out: &CudaPool, at: &Placement, elems: usize) -> Vec<f16> {
    let mut bytes = vec![0u8; elems * 2];
    out.read(at.out, &mut bytes).unwrap();
    bytemuck::cast_slice(&bytes).to_vec()
}

fn poison(out: &mut CudaPool, at: &Placement) {
    out.write(0, &vec![0xFFu8; at.out_size]).unwrap();
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn cuda_paged_attention_gives_identical_output_before_sleep_and_after_wake() {
    let (_gpu, _ctx) = gpu("cuda_attention_across_sleep");
    let dev = CudaDevice::open(0).expect("a usable CUDA GPU");
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let shape = AttentionShape {
        num_heads: 16,
        num_kv_heads: 4,
        head_dim: 128,
        scale: 0.09,
    };
    let lens: Vec<usize> = (0..6).map(|_| rng.random_range(1..900)).collect();
    let p = Problem::<f16>::new(shape, 16, &lens, rng.random()).unwrap();
    p.table.validate(p.num_blocks).unwrap();
    let reference = attention_f64(&p);
    // Split-K, so the captured graph holds the attention kernel and the merge.
    let plan = SplitPlan {
        num_partitions: p.max_len.div_ceil(2 * CHUNK),
        partition_size: 2 * CHUNK,
    };
    let at = place(&p, plan);
    // The graph is captured on a stream of cudarc's own (the same primary context).
    let stream = CudaContext::new(0).unwrap().new_stream().unwrap();
    let mut kv = CudaPool::create(&dev.gpu, at.kv_size, Some(2 * MIB)).unwrap();
    kv.write(at.q, bytemuck::cast_slice(&p.q)).unwrap();
    kv.write(at.k, bytemuck::cast_slice(&p.k)).unwrap();
    kv.write(at.v, bytemuck::cast_slice(&p.v)).unwrap();
    kv.write(at.k_scale, bytemuck::cast_slice(&p.k_scale))
        .unwrap();
    kv.write(at.v_scale, bytemuck::cast_slice(&p.v_scale))
        .unwrap();
    kv.write(at.table, bytemuck::cast_slice(&p.table.entries))
        .unwrap();
    kv.write(at.lens, bytemuck::cast_slice(&p.lens)).unwrap();
    let mut out = CudaPool::create(&dev.gpu, at.out_size, None).unwrap();
    let (kv_ptr, out_ptr) = (kv.ptr().unwrap(), out.ptr().unwrap());
    let elems = p.q.len();

    // Before sleep: direct (checked against the f64 oracle), then captured into a graph.
    poison(&mut out, &at);
    enqueue_attention(&dev, &stream, &p, plan, &at, kv_ptr, out_ptr);
    stream.synchronize().unwrap();
    let before = read_out(&out, &at, elems);
    let e = relative_error(&before, &reference);
    assert!(
        e <= tolerance(Dtype::F16),
        "attention before sleep: relative error {e:.2e}"
    );
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .unwrap();
    enqueue_attention(&dev, &stream, &p, plan, &at, kv_ptr, out_ptr);
    let graph = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a captured graph");

    let same = |a: &[f16], b: &[f16]| {
        bytemuck::cast_slice::<f16, u8>(a) == bytemuck::cast_slice::<f16, u8>(b)
    };
    for cycle in 0..4 {
        // Poison the output so a launch that does nothing fails.
        poison(&mut out, &at);
        kv.sleep(SleepMode::Offload).unwrap();
        kv.wake().unwrap();
        assert_eq!(kv.ptr().unwrap(), kv_ptr);
        if cycle % 2 == 0 {
            enqueue_attention(&dev, &stream, &p, plan, &at, kv_ptr, out_ptr);
        } else {
            graph.launch().unwrap();
        }
        stream.synchronize().unwrap();
        assert!(
            same(&read_out(&out, &at, elems), &before),
            "cycle {cycle}: output changed across sleep/wake"
        );
    }
    // The output pool can sleep too (discarded: the graph rewrites it), pointers unchanged.
    out.sleep(SleepMode::Discard).unwrap();
    out.wake().unwrap();
    assert_eq!(out.ptr().unwrap(), out_ptr);
    poison(&mut out, &at);
    graph.launch().unwrap();
    stream.synchronize().unwrap();
    assert!(same(&read_out(&out, &at, elems), &before));
}
