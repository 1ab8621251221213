//! Measurements behind `pagedkv sleep-wake` and the bench: sleep/wake cycles on one pool (time,
//! memory freed, offload and restore bandwidth beside the plain copy bandwidth measured in the
//! same run, address and data checks), and the chunk-size sweep.

use super::checksum::{fill_random, Checksum, FILL_BLOCK};
use super::{Backing, PoolState, SleepMode, SleepPool, VmmError};
use crate::progress::{phase, Progress};
use crate::stats::median;
use crate::timing::timed;
use serde::Serialize;
use std::time::Duration;

/// Staging buffer for filling and checking pools piece by piece.
const STAGING: usize = 64 * FILL_BLOCK;
/// The copy-bandwidth reference copies at most this much (enough to reach the plateau).
const COPY_PROBE: usize = 1 << 30;
const GIB: f64 = (1u64 << 30) as f64;

#[derive(Debug, Clone, Copy, Serialize)]
pub struct Stat {
    pub median: f64,
    pub max: f64,
}

impl Stat {
    /// Median (mean of the middle two for an even count) and maximum; zeros when empty.
    pub fn of(values: &[f64]) -> Stat {
        if values.is_empty() {
            return Stat {
                median: 0.0,
                max: 0.0,
            };
        }
        Stat {
            median: median(values),
            max: values.iter().copied().max_by(f64::total_cmp).unwrap_or(0.0),
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn gbps(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64().max(1e-12) / 1e9
}

/// Fills the pool with random bytes determined by `seed`; returns their checksum.
pub fn fill<B: Backing>(pool: &mut SleepPool<B>, seed: u64) -> Result<u64, VmmError> {
    let size = pool.size();
    let mut staging = vec![0u8; STAGING.min(size)];
    let mut sum = Checksum::default();
    for offset in (0..size).step_by(STAGING) {
        let piece = &mut staging[..STAGING.min(size - offset)];
        fill_random(piece, seed, offset);
        sum.add(offset, piece);
        pool.write(offset, piece)?;
    }
    Ok(sum.value())
}

/// Checksum of the pool's current contents.
pub fn checksum<B: Backing>(pool: &SleepPool<B>) -> Result<u64, VmmError> {
    let size = pool.size();
    let mut staging = vec![0u8; STAGING.min(size)];
    let mut sum = Checksum::default();
    for offset in (0..size).step_by(STAGING) {
        let piece = &mut staging[..STAGING.min(size - offset)];
        pool.read(offset, piece)?;
        sum.add(offset, piece);
    }
    Ok(sum.value())
}

/// Host bytes [`run_cycles`] takes on a pool of `pool_bytes` (checked before the pool is made): the
/// pool itself when it lives in host memory, the offload buffer, the copy probe's buffer.
pub fn host_bytes(pool_bytes: usize, mode: SleepMode, pool_on_host: bool) -> u64 {
    let pool = pool_bytes as u64;
    let offload = if mode == SleepMode::Offload { pool } else { 0 };
    let probe = pool_bytes.min(COPY_PROBE) as u64;
    (if pool_on_host { pool } else { 0 })
        .saturating_add(offload)
        .saturating_add(probe)
}

/// Measures the plain copy bandwidth between the pool and a ready host buffer of the backing's
/// kind (pinned on CUDA, already allocated and touched): the limit offload and restore are
/// compared with. Contents are unchanged (the bytes read are written back).
pub struct CopyProbe<B: Backing> {
    buf: B::HostBuffer,
}

impl<B: Backing> CopyProbe<B> {
    /// A probe of up to 1 GiB (enough to reach the bandwidth plateau).
    pub fn new(pool: &SleepPool<B>) -> Result<Self, VmmError> {
        let mut buf = pool.backing().alloc_host(pool.size().min(COPY_PROBE))?;
        pool.read(0, buf.as_mut())?;
        Ok(CopyProbe { buf })
    }

    /// (pool → host, host → pool) in GB/s, one copy each.
    pub fn measure(&mut self, pool: &mut SleepPool<B>) -> Result<(f64, f64), VmmError> {
        let len = self.buf.as_ref().len();
        let (read, d2h) = timed(|| pool.read(0, self.buf.as_mut()));
        read?;
        let (write, h2d) = timed(|| pool.write(0, self.buf.as_ref()));
        write?;
        Ok((gbps(len, d2h), gbps(len, h2d)))
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct CycleRecord {
    pub sleep_ms: f64,
    pub wake_ms: f64,
    /// Time spent allocating (pinning) the host buffer inside the sleep.
    pub host_alloc_ms: f64,
    pub offload_gbps: Option<f64>,
    pub restore_gbps: Option<f64>,
    /// Plain copies measured just before this cycle's sleep (see [`CopyProbe`]).
    pub copy_gbps: f64,
    pub copy_h2d_gbps: f64,
    /// Pool-kind memory in use before sleep minus after (device memory, or resident memfd pages).
    pub freed_bytes: i64,
    /// Pool-kind memory in use after wake minus while asleep.
    pub retaken_bytes: i64,
    pub address_stable: bool,
    pub data_intact: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct CycleReport {
    pub pool_bytes: usize,
    pub chunk_bytes: usize,
    pub chunks: usize,
    pub mode: SleepMode,
    pub cycles: usize,
    pub keep_host_buffer: bool,
    pub sleep_ms: Stat,
    pub wake_ms: Stat,
    pub host_alloc_ms: Stat,
    /// Median over cycles.
    pub freed_bytes: i64,
    /// Pool-kind memory in use after the last wake minus before the first sleep (0: no leak).
    pub leak_bytes: i64,
    pub address_stable: bool,
    /// Offload: the contents after every wake equal those before the sleep. Discard: after
    /// every wake the fresh memory holds a new random fill exactly.
    pub data_intact: bool,
    pub offload_gbps: Option<f64>,
    pub restore_gbps: Option<f64>,
    /// Plain pool → host copy into a ready host buffer, measured before every sleep (median).
    pub copy_gbps: f64,
    /// Plain host → pool copy from a ready host buffer, measured before every sleep (median).
    pub copy_h2d_gbps: f64,
    /// Median over cycles of offload / plain copy of the same cycle.
    pub offload_vs_copy: Option<f64>,
    /// Median over cycles of restore / plain copy of the same cycle.
    pub restore_vs_copy: Option<f64>,
    pub per_cycle: Vec<CycleRecord>,
}

/// Runs `cycles` sleep/wake cycles on `pool`. `in_use` reports the pool-kind memory the process
/// holds (device memory in use, or resident shared memory), in bytes; `progress` counts cycles.
pub fn run_cycles<B: Backing>(
    pool: &mut SleepPool<B>,
    mode: SleepMode,
    cycles: usize,
    seed: u64,
    in_use: &dyn Fn() -> Result<u64, VmmError>,
    progress: &dyn Progress,
) -> Result<CycleReport, VmmError> {
    phase(progress, "sleep-wake: cycles", cycles as u64, || {
        cycles_in_phase(pool, mode, cycles, seed, in_use, progress)
    })
}

fn cycles_in_phase<B: Backing>(
    pool: &mut SleepPool<B>,
    mode: SleepMode,
    cycles: usize,
    seed: u64,
    in_use: &dyn Fn() -> Result<u64, VmmError>,
    progress: &dyn Progress,
) -> Result<CycleReport, VmmError> {
    let mut probe = CopyProbe::new(pool)?;
    let mut sum = fill(pool, seed)?;
    let base = pool.ptr()?;
    let start = in_use()? as i64;
    let mut records = Vec::with_capacity(cycles);
    for cycle in 0..cycles {
        // The limit is measured next to each cycle, so load on a shared machine hits both alike.
        let (copy_gbps, copy_h2d_gbps) = probe.measure(pool)?;
        let before = in_use()? as i64;
        let (s, sleep) = timed(|| pool.sleep(mode));
        let s = s.map_err(|e| after_failed_sleep(pool, e, cycle, mode, sum))?;
        let asleep = in_use()? as i64;
        let (w, wake) = timed(|| pool.wake());
        let w = w.map_err(|e| after_failed_wake(pool, e, cycle, mode, sum))?;
        let awake = in_use()? as i64;
        let data_intact = match mode {
            SleepMode::Offload => checksum(pool)? == sum,
            SleepMode::Discard => {
                // Nothing to restore: check the fresh memory holds a new fill exactly.
                sum = fill(pool, seed.wrapping_add(cycle as u64 + 1))?;
                checksum(pool)? == sum
            }
        };
        records.push(CycleRecord {
            sleep_ms: ms(sleep),
            wake_ms: ms(wake),
            host_alloc_ms: ms(s.host_alloc),
            offload_gbps: (s.bytes_copied > 0).then(|| gbps(s.bytes_copied, s.copy)),
            restore_gbps: (w.bytes_restored > 0).then(|| gbps(w.bytes_restored, w.restore)),
            copy_gbps,
            copy_h2d_gbps,
            freed_bytes: before - asleep,
            retaken_bytes: awake - asleep,
            address_stable: pool.ptr()? == base,
            data_intact,
        });
        progress.advance(1);
    }
    let end = in_use()? as i64;
    let pick = |f: fn(&CycleRecord) -> f64| Stat::of(&records.iter().map(f).collect::<Vec<_>>());
    let opt = |f: fn(&CycleRecord) -> Option<f64>| {
        let v: Vec<f64> = records.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| Stat::of(&v).median)
    };
    let freed: Vec<f64> = records.iter().map(|r| r.freed_bytes as f64).collect();
    let offload_gbps = opt(|r| r.offload_gbps);
    let restore_gbps = opt(|r| r.restore_gbps);
    let offload_vs_copy = opt(|r| r.offload_gbps.map(|g| g / r.copy_gbps));
    let restore_vs_copy = opt(|r| r.restore_gbps.map(|g| g / r.copy_h2d_gbps));
    Ok(CycleReport {
        pool_bytes: pool.size(),
        chunk_bytes: pool.layout().chunk,
        chunks: pool.layout().count(),
        mode,
        cycles,
        keep_host_buffer: pool.keeps_host_buffer(),
        sleep_ms: pick(|r| r.sleep_ms),
        wake_ms: pick(|r| r.wake_ms),
        host_alloc_ms: pick(|r| r.host_alloc_ms),
        freed_bytes: Stat::of(&freed).median as i64,
        leak_bytes: end - start,
        address_stable: records.iter().all(|r| r.address_stable),
        data_intact: records.iter().all(|r| r.data_intact),
        offload_gbps,
        restore_gbps,
        copy_gbps: pick(|r| r.copy_gbps).median,
        copy_h2d_gbps: pick(|r| r.copy_h2d_gbps).median,
        offload_vs_copy,
        restore_vs_copy,
        per_cycle: records,
    })
}

/// A sleep failed. Before releasing anything it must leave the pool awake with the contents it
/// had (`sum`); while releasing, asleep with them in host memory (offload), a wake bringing them
/// back. Says which, checked, not assumed.
fn after_failed_sleep<B: Backing>(
    pool: &mut SleepPool<B>,
    e: VmmError,
    cycle: usize,
    mode: SleepMode,
    sum: u64,
) -> VmmError {
    let outcome = match (pool.state(), mode) {
        (PoolState::Awake, _) => match checksum(pool) {
            Ok(now) if now == sum => "the pool stayed awake with its contents intact".to_string(),
            Ok(_) => "the pool is awake but its contents CHANGED".into(),
            Err(check) => format!("the pool is awake but unreadable ({check})"),
        },
        (PoolState::AsleepOffloaded, _) => {
            let kept = pool
                .host_copy()
                .is_some_and(|copy| super::checksum::checksum(copy) == sum);
            match (kept, pool.wake()) {
                (false, _) => "the pool is asleep and its host copy CHANGED".into(),
                (true, Err(again)) => format!(
                    "the pool is asleep with its contents intact in host memory; a wake failed ({again})"
                ),
                (true, Ok(_)) => match checksum(pool) {
                    Ok(now) if now == sum => "the pool is asleep with its contents intact in host memory; a wake restored them \
                         intact"
                        .into(),
                    Ok(_) => "a wake from the intact host copy CHANGED the contents".into(),
                    Err(check) => format!("after a wake the pool is unreadable ({check})"),
                },
            }
        }
        (state, _) => match pool.wake() {
            Ok(_) => format!("the pool is {state:?} (as asked); a wake succeeded"),
            Err(again) => format!("the pool is {state:?} (as asked); a wake failed ({again})"),
        },
    };
    VmmError::CycleFailed {
        cycle,
        step: "sleep",
        source: Box::new(e),
        outcome,
    }
}

/// A wake failed: it must have rolled back (the pool asleep, offloaded contents still on the
/// host); a second wake is tried and, after an offload, the contents compared with `sum`.
fn after_failed_wake<B: Backing>(
    pool: &mut SleepPool<B>,
    e: VmmError,
    cycle: usize,
    mode: SleepMode,
    sum: u64,
) -> VmmError {
    let state = pool.state();
    let outcome = if state == PoolState::Awake {
        format!("it did not roll back: the pool is {state:?}")
    } else {
        match (pool.wake(), mode) {
            (Err(again), _) => format!("rolled back, but a second wake failed too ({again})"),
            (Ok(_), SleepMode::Discard) => {
                "rolled back; a second wake succeeded (discarded contents: nothing to check)".into()
            }
            (Ok(_), SleepMode::Offload) => match checksum(pool) {
                Ok(now) if now == sum => {
                    "rolled back; a second wake succeeded with the contents intact".into()
                }
                Ok(_) => "rolled back; a second wake succeeded but the contents CHANGED".into(),
                Err(check) => {
                    format!("rolled back; after a second wake the pool is unreadable ({check})")
                }
            },
        }
    };
    VmmError::CycleFailed {
        cycle,
        step: "wake",
        source: Box::new(e),
        outcome,
    }
}

/// One row of the chunk-size table: discard-sleep and wake time per GiB.
#[derive(Debug, Clone, Serialize)]
pub struct SweepRow {
    pub chunk_bytes: usize,
    pub chunks: usize,
    pub sleep_ms: f64,
    pub wake_ms: f64,
    pub sleep_ms_per_gib: f64,
    pub wake_ms_per_gib: f64,
}

/// Chunk sizes for the sweep: `smallest` × 4ᵏ below `size`, then `size` (one chunk).
pub fn sweep_chunks(size: usize, smallest: usize) -> Vec<usize> {
    let mut chunks = Vec::new();
    let mut c = smallest.max(1);
    while c < size {
        chunks.push(c);
        c = c.saturating_mul(4);
    }
    chunks.push(size);
    chunks
}

/// For each chunk size, a fresh pool from `make(chunk)`, then `reps` discard-sleep/wake pairs;
/// the median times. `progress` counts chunk sizes.
pub fn chunk_sweep<B: Backing>(
    make: &dyn Fn(usize) -> Result<SleepPool<B>, VmmError>,
    chunks: &[usize],
    reps: usize,
    progress: &dyn Progress,
) -> Result<Vec<SweepRow>, VmmError> {
    let steps = chunks.len() as u64;
    phase(progress, "sleep-wake: chunk sizes", steps, || {
        chunk_rows(make, chunks, reps, progress)
    })
}

fn chunk_rows<B: Backing>(
    make: &dyn Fn(usize) -> Result<SleepPool<B>, VmmError>,
    chunks: &[usize],
    reps: usize,
    progress: &dyn Progress,
) -> Result<Vec<SweepRow>, VmmError> {
    let mut rows = Vec::with_capacity(chunks.len());
    for &chunk in chunks {
        let mut pool = make(chunk)?;
        let (mut sleeps, mut wakes) = (Vec::new(), Vec::new());
        for _ in 0..reps.max(1) {
            let (slept, sleep) = timed(|| pool.sleep(SleepMode::Discard));
            slept?;
            sleeps.push(ms(sleep));
            let (woke, wake) = timed(|| pool.wake());
            woke?;
            wakes.push(ms(wake));
        }
        let gib = pool.size() as f64 / GIB;
        let (sleep_ms, wake_ms) = (Stat::of(&sleeps).median, Stat::of(&wakes).median);
        rows.push(SweepRow {
            chunk_bytes: pool.layout().chunk,
            chunks: pool.layout().count(),
            sleep_ms,
            wake_ms,
            sleep_ms_per_gib: sleep_ms / gib,
            wake_ms_per_gib: wake_ms / gib,
        });
        progress.advance(1);
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vmm::host::CpuPool;

    #[test]
    fn stat_is_median_and_max() {
        let s = Stat::of(&[5.0, 1.0, 3.0]);
        assert_eq!((s.median, s.max), (3.0, 5.0));
        let s = Stat::of(&[4.0, 1.0, 3.0, 2.0]);
        assert_eq!((s.median, s.max), (2.5, 4.0));
    }

    #[test]
    fn sweep_chunks_grow_by_four_up_to_the_pool() {
        assert_eq!(sweep_chunks(1 << 30, 2 << 20).len(), 6);
        assert_eq!(
            sweep_chunks(64 << 20, 2 << 20),
            vec![2 << 20, 8 << 20, 32 << 20, 64 << 20]
        );
        assert_eq!(sweep_chunks(1 << 20, 2 << 20), vec![1 << 20]);
    }

    #[test]
    fn cycles_report_intact_data_and_freed_memory() {
        let mut pool = CpuPool::create(3 << 20, Some(1 << 20)).unwrap();
        let shmem = || super::super::memstat::resident().map(|r| r.shmem);
        for mode in [SleepMode::Offload, SleepMode::Discard] {
            let r = run_cycles(&mut pool, mode, 3, 5, &shmem, &()).unwrap();
            assert!(r.address_stable && r.data_intact, "{mode:?}");
            assert_eq!(r.per_cycle.len(), 3);
            assert_eq!(r.chunks, 3);
            assert_eq!(r.offload_gbps.is_some(), mode == SleepMode::Offload);
            assert!(r.copy_gbps > 0.0);
        }
    }

    #[test]
    fn fill_and_checksum_agree_with_the_whole_buffer_checksum() {
        let size = STAGING + 3 * FILL_BLOCK + 4096;
        let mut pool = CpuPool::create(size, None).unwrap();
        let sum = fill(&mut pool, 9).unwrap();
        let mut whole = vec![0u8; size];
        fill_random(&mut whole, 9, 0);
        assert_eq!(sum, super::super::checksum::checksum(&whole));
        assert_eq!(checksum(&pool).unwrap(), sum);
        assert!(pool.as_slice().unwrap() == whole.as_slice());
    }
}
