//! The CUDA pool: the same checks as the CPU twin, plus a paged gather (a kernel, or per-block
//! copies when NVRTC is missing) run before sleep and after wake, directly and as a captured CUDA
//! graph. Every test skips, saying why, when no GPU is usable.

use cudarc::driver::{
    result, sys, CudaContext, CudaFunction, CudaStream, LaunchConfig, PushKernelArg,
};
use pagedkv::vmm::checksum::fill_random;
use pagedkv::vmm::cuda::{device_memory, open_context, CudaPool};
use pagedkv::vmm::{
    PoolSet, PoolState, SleepLevel, SleepMode, VmmError, WakeFault, KV_CACHE, WEIGHTS,
};
use rand::{Rng, SeedableRng};
use std::sync::{Arc, Mutex, MutexGuard};

const MIB: usize = 1 << 20;

/// One GPU test at a time: they measure device memory, and one of them takes all of it.
static GPU_LOCK: Mutex<()> = Mutex::new(());

fn gpu(test: &str) -> Option<(MutexGuard<'static, ()>, Arc<CudaContext>)> {
    let guard = GPU_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    match open_context(0) {
        Ok(ctx) => Some((guard, ctx)),
        Err(e) => {
            println!("skipping {test}: {e}");
            None
        }
    }
}

fn in_use(ctx: &CudaContext) -> i64 {
    let (free, total) = device_memory(ctx).unwrap();
    (total - free) as i64
}

fn random_pool(
    ctx: &Arc<CudaContext>,
    size: usize,
    chunk: usize,
    seed: u64,
) -> (CudaPool, Vec<u8>) {
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
fn cuda_offload_cycles_keep_contents_and_address_and_free_memory() {
    let Some((_gpu, ctx)) = gpu("cuda_offload_cycles") else {
        return;
    };
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
fn cuda_cycles_do_not_leak_device_memory() {
    let Some((_gpu, ctx)) = gpu("cuda_cycles_do_not_leak") else {
        return;
    };
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
fn cuda_illegal_transitions_are_typed_errors() {
    let Some((_gpu, ctx)) = gpu("cuda_illegal_transitions") else {
        return;
    };
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
fn cuda_failed_wakes_roll_back_and_a_later_wake_restores() {
    let Some((_gpu, ctx)) = gpu("cuda_failed_wakes_roll_back") else {
        return;
    };
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
fn cuda_wake_that_runs_out_of_memory_rolls_back() {
    let Some((_gpu, ctx)) = gpu("cuda_wake_out_of_memory") else {
        return;
    };
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
            assert!(matches!(e.root(), VmmError::Driver { .. }));
            assert_eq!(pool.state(), PoolState::AsleepOffloaded);
            pool.wake().unwrap();
        }
    }
    assert!(contents(&pool) == expected);
}

#[test]
fn cuda_levels_and_tags() {
    let Some((_gpu, ctx)) = gpu("cuda_levels_and_tags") else {
        return;
    };
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

// --- A paged gather through a block table that lives inside the pool -------------------------

/// `out[b, i] = pool[table[b], i] * 2 + 1`, one CUDA block per output block.
const GATHER_SRC: &str = r#"
extern "C" __global__ void gather_scale(
    const float* pool,   // [num_pool_blocks, block_elems]
    const int* table,    // [num_out_blocks]
    float* out,          // [num_out_blocks, block_elems]
    int block_elems)
{
    const long src = (long)table[blockIdx.x] * block_elems;
    const long dst = (long)blockIdx.x * block_elems;
    for (int i = threadIdx.x; i < block_elems; i += blockDim.x)
        out[dst + i] = pool[src + i] * 2.0f + 1.0f;
}
"#;

const BLOCK_ELEMS: usize = 1024;
const POOL_BLOCKS: usize = 1536; // 6 MiB of f32 blocks, then the table
const OUT_BLOCKS: usize = 512;

enum Gather {
    Kernel(CudaFunction),
    /// NVRTC missing or unable to build: per-block device-to-device copies (no scaling).
    Copies,
}

fn gather_op(ctx: &Arc<CudaContext>) -> Gather {
    // SAFETY: only tries to load the NVRTC library.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        println!("NVRTC missing: the gather runs as per-block copies");
        return Gather::Copies;
    }
    let built = cudarc::nvrtc::compile_ptx(GATHER_SRC)
        .map_err(|e| e.to_string())
        .and_then(|ptx| ctx.load_module(ptx).map_err(|e| e.to_string()))
        .and_then(|m| m.load_function("gather_scale").map_err(|e| e.to_string()));
    match built {
        Ok(f) => Gather::Kernel(f),
        Err(e) => {
            println!("NVRTC kernel unavailable ({e}): the gather runs as per-block copies");
            Gather::Copies
        }
    }
}

/// Enqueues the gather on `stream` (capturable: no host synchronisation inside).
fn enqueue_gather(op: &Gather, stream: &CudaStream, pool: u64, table: &[i32], out: u64) {
    let table_ptr = pool + (POOL_BLOCKS * BLOCK_ELEMS * 4) as u64;
    match op {
        Gather::Kernel(f) => {
            let block_elems = BLOCK_ELEMS as i32;
            let cfg = LaunchConfig {
                grid_dim: (OUT_BLOCKS as u32, 1, 1),
                block_dim: (256, 1, 1),
                shared_mem_bytes: 0,
            };
            let mut launch = stream.launch_builder(f);
            launch
                .arg(&pool)
                .arg(&table_ptr)
                .arg(&out)
                .arg(&block_elems);
            // SAFETY: the pointers address mapped pools of the sizes in the kernel's comments.
            unsafe { launch.launch(cfg) }.unwrap();
        }
        Gather::Copies => {
            let bytes = BLOCK_ELEMS * 4;
            for (b, &src) in table.iter().enumerate() {
                // SAFETY: both ranges lie inside mapped pools.
                unsafe {
                    result::memcpy_dtod_async(
                        out + (b * bytes) as u64,
                        pool + (src as usize * bytes) as u64,
                        bytes,
                        stream.cu_stream(),
                    )
                }
                .unwrap();
            }
        }
    }
}

/// The host's own gather: the oracle.
fn gather_on_host(op: &Gather, values: &[f32], table: &[i32]) -> Vec<f32> {
    let scale = matches!(op, Gather::Kernel(_));
    table
        .iter()
        .flat_map(|&b| values[b as usize * BLOCK_ELEMS..][..BLOCK_ELEMS].iter())
        .map(|&x| if scale { x * 2.0 + 1.0 } else { x })
        .collect()
}

fn read_out(out: &CudaPool) -> Vec<f32> {
    let mut bytes = vec![0u8; OUT_BLOCKS * BLOCK_ELEMS * 4];
    out.read(0, &mut bytes).unwrap();
    bytemuck::cast_slice(&bytes).to_vec()
}

#[test]
fn cuda_gather_gives_identical_output_before_sleep_and_after_wake() {
    let Some((_gpu, ctx)) = gpu("cuda_gather_across_sleep") else {
        return;
    };
    let op = gather_op(&ctx);
    let stream = ctx.new_stream().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(9);
    let values: Vec<f32> = (0..POOL_BLOCKS * BLOCK_ELEMS)
        .map(|_| rng.random_range(-1.0..1.0))
        .collect();
    let table: Vec<i32> = (0..OUT_BLOCKS)
        .map(|_| rng.random_range(0..POOL_BLOCKS as i32))
        .collect();
    let mut pool = CudaPool::create(&ctx, 8 * MIB, Some(2 * MIB)).unwrap();
    pool.write(0, bytemuck::cast_slice(&values)).unwrap();
    pool.write(POOL_BLOCKS * BLOCK_ELEMS * 4, bytemuck::cast_slice(&table))
        .unwrap();
    let mut out = CudaPool::create(&ctx, OUT_BLOCKS * BLOCK_ELEMS * 4, None).unwrap();
    let (pool_ptr, out_ptr) = (pool.ptr().unwrap(), out.ptr().unwrap());
    let expected = gather_on_host(&op, &values, &table);

    // Before sleep: direct, then captured into a graph.
    enqueue_gather(&op, &stream, pool_ptr, &table, out_ptr);
    stream.synchronize().unwrap();
    let before = read_out(&out);
    assert!(
        before == expected,
        "the gather disagrees with the host before sleep"
    );
    stream
        .begin_capture(sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
        .unwrap();
    enqueue_gather(&op, &stream, pool_ptr, &table, out_ptr);
    let graph = stream
        .end_capture(sys::CUgraphInstantiate_flags(0))
        .unwrap()
        .expect("a captured graph");

    for mode_cycle in 0..3 {
        // Poison the output so a gather that does nothing fails.
        out.write(0, &vec![0xFFu8; OUT_BLOCKS * BLOCK_ELEMS * 4])
            .unwrap();
        pool.sleep(SleepMode::Offload).unwrap();
        pool.wake().unwrap();
        assert_eq!(pool.ptr().unwrap(), pool_ptr);
        if mode_cycle % 2 == 0 {
            enqueue_gather(&op, &stream, pool_ptr, &table, out_ptr);
        } else {
            graph.launch().unwrap();
        }
        stream.synchronize().unwrap();
        assert!(
            read_out(&out) == before,
            "cycle {mode_cycle}: output changed across sleep/wake"
        );
    }
    // The output pool can sleep too: the graph's pointers stay valid for it as well.
    out.sleep(SleepMode::Discard).unwrap();
    out.wake().unwrap();
    graph.launch().unwrap();
    stream.synchronize().unwrap();
    assert!(read_out(&out) == before);
}
