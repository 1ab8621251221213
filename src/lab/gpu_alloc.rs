//! GPU memory the plain way against the virtual-memory way: `cuMemAlloc`/`cuMemFree` against
//! `cuMemCreate` + `cuMemMap` + `cuMemSetAccess` per chunk (and `cuMemUnmap` + `cuMemRelease`
//! back), in ms per GiB for each chunk size. The second way is what lets a KV pool sleep and wake
//! at unchanged addresses ([`crate::vmm`]); its price is one driver round per chunk.
//!
//! The virtual-memory side is the pool's own backing ([`crate::vmm::cuda::CudaBacking`]), so the
//! lab times the code the pools run. Nothing here calls the driver before
//! [`crate::vmm::cuda::open_context`] has checked that libcuda is present. Without a GPU the lab
//! returns [`LabError::Unavailable`] and the CLI reports it skipped.

use super::gpu_mem::DeviceMemory;
use super::{Check, LabError, Spread, GIB, MIB};
use crate::device::cuda::driver::failed;
use crate::device::cuda::Gpu;
use crate::vmm::cuda::{self as vcuda, CudaBacking};
use crate::vmm::{Backing, VmmError};
use cudarc::driver::result;
use serde::Serialize;
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct GpuAllocConfig {
    pub bytes: usize,
    /// Chunk sizes for the virtual-memory way (rounded up to the granularity).
    pub chunk_bytes: Vec<usize>,
    pub reps: usize,
}

impl Default for GpuAllocConfig {
    fn default() -> Self {
        GpuAllocConfig {
            bytes: GIB,
            chunk_bytes: vec![2 * MIB, 8 * MIB, 32 * MIB, 128 * MIB, 512 * MIB, GIB],
            reps: 5,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct AllocRow {
    /// `cuMemAlloc` or `cuMemCreate+cuMemMap+cuMemSetAccess`.
    pub method: &'static str,
    /// Chunk size of the virtual-memory way; null for `cuMemAlloc`.
    pub chunk_bytes: Option<usize>,
    pub chunks: usize,
    pub alloc_ms: Spread,
    pub free_ms: Spread,
    pub alloc_ms_per_gib: f64,
    pub free_ms_per_gib: f64,
    /// A probe written at the first and last byte of the memory read back intact.
    pub data_intact: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct GpuAllocReport {
    pub device: String,
    pub bytes: usize,
    pub granularity_bytes: usize,
    pub rows: Vec<AllocRow>,
    pub checks: Vec<Check>,
}

/// No GPU is a skip; any other failure is one.
pub(crate) fn vmm_error(e: VmmError) -> LabError {
    match e {
        VmmError::Device(d) => d.into(),
        e => LabError::Vmm(e),
    }
}

pub fn run(cfg: &GpuAllocConfig) -> Result<GpuAllocReport, LabError> {
    super::error::positive(cfg.bytes, "the allocation size")?;
    super::error::positive(cfg.reps, "the repetitions")?;
    if cfg.chunk_bytes.contains(&0) {
        return Err(LabError::Invalid("chunk sizes must be positive".into()));
    }
    let gpu = Gpu::open(0)?;
    let granularity = vcuda::granularity(&gpu).map_err(vmm_error)?;
    let (free, _) = gpu.memory_info()?;
    if cfg.bytes > free / 10 * 9 {
        return Err(LabError::Invalid(format!(
            "{} asked for, {} free on the GPU",
            super::machine::bytes(cfg.bytes as u64),
            super::machine::bytes(free as u64)
        )));
    }
    let mut rows = vec![plain(&gpu, cfg)?];
    let mut chunks: Vec<usize> = cfg
        .chunk_bytes
        .iter()
        .map(|c| {
            c.next_multiple_of(granularity)
                .min(cfg.bytes.next_multiple_of(granularity))
        })
        .collect();
    chunks.sort_unstable();
    chunks.dedup();
    for chunk in chunks {
        rows.push(mapped(&gpu, cfg, chunk)?);
    }
    let broken: Vec<String> = rows
        .iter()
        .filter(|r| !r.data_intact)
        .map(|r| format!("{} {:?}", r.method, r.chunk_bytes))
        .collect();
    let checks = vec![Check::verdict(
        "every allocation holds what was written to it",
        broken.is_empty(),
        if broken.is_empty() {
            format!("{} allocations probed at both ends", rows.len())
        } else {
            format!("lost: {}", broken.join(", "))
        },
    )];
    Ok(GpuAllocReport {
        device: gpu.name()?,
        bytes: cfg.bytes,
        granularity_bytes: granularity,
        rows,
        checks,
    })
}

const PROBE: [u8; 16] = *b"pagedkv-lab-gpu!";

/// Where the probe goes: the first and the last bytes of `len`.
fn probe_offsets(len: usize) -> [usize; 2] {
    [0, len.saturating_sub(PROBE.len())]
}

/// `cuMemAlloc` then `cuMemFree`, `reps` times, host wall clock (both calls are synchronous).
fn plain(gpu: &Arc<Gpu>, cfg: &GpuAllocConfig) -> Result<AllocRow, LabError> {
    let (mut alloc, mut free) = (Vec::new(), Vec::new());
    let mut intact = true;
    for _ in 0..cfg.reps {
        gpu.synchronize(|| "before timing cuMemAlloc".into())?;
        let t = Instant::now();
        let mem = DeviceMemory::alloc(gpu, cfg.bytes)?;
        alloc.push(t.elapsed().as_secs_f64() * 1e3);
        for off in probe_offsets(cfg.bytes) {
            let doing = || format!("writing the probe at byte {off}");
            // SAFETY: `off + PROBE.len() <= bytes`, inside the allocation.
            unsafe { result::memcpy_htod_sync(mem.ptr + off as u64, &PROBE) }
                .map_err(failed("cuMemcpyHtoD", doing))?;
        }
        for off in probe_offsets(cfg.bytes) {
            let mut back = [0u8; PROBE.len()];
            let doing = || format!("reading the probe at byte {off}");
            // SAFETY: as above.
            unsafe { result::memcpy_dtoh_sync(&mut back, mem.ptr + off as u64) }
                .map_err(failed("cuMemcpyDtoH", doing))?;
            intact &= back == PROBE;
        }
        let t = Instant::now();
        mem.free()?;
        free.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(row("cuMemAlloc", None, 1, &alloc, &free, cfg.bytes, intact))
}

/// Every chunk created, mapped and opened, then unmapped and released, `reps` times over one
/// reservation (the backing releases everything on drop, error paths included).
fn mapped(gpu: &Arc<Gpu>, cfg: &GpuAllocConfig, chunk: usize) -> Result<AllocRow, LabError> {
    let mut backing = CudaBacking::reserve(gpu, cfg.bytes, Some(chunk)).map_err(vmm_error)?;
    let layout = *backing.layout();
    let count = layout.count();
    let (mut alloc, mut free) = (Vec::new(), Vec::new());
    let mut intact = true;
    for _ in 0..cfg.reps {
        let t = Instant::now();
        for i in 0..count {
            backing.map_chunk(i).map_err(vmm_error)?;
        }
        alloc.push(t.elapsed().as_secs_f64() * 1e3);
        for off in probe_offsets(layout.size) {
            backing.copy_from_host(off, &PROBE).map_err(vmm_error)?;
        }
        for off in probe_offsets(layout.size) {
            let mut back = [0u8; PROBE.len()];
            backing.copy_to_host(off, &mut back).map_err(vmm_error)?;
            intact &= back == PROBE;
        }
        let t = Instant::now();
        for i in 0..count {
            backing.unmap_chunk(i).map_err(vmm_error)?;
        }
        free.push(t.elapsed().as_secs_f64() * 1e3);
    }
    Ok(row(
        "cuMemCreate+cuMemMap+cuMemSetAccess",
        Some(layout.chunk),
        count,
        &alloc,
        &free,
        layout.size,
        intact,
    ))
}

fn row(
    method: &'static str,
    chunk: Option<usize>,
    chunks: usize,
    alloc: &[f64],
    free: &[f64],
    bytes: usize,
    data_intact: bool,
) -> AllocRow {
    let (alloc, free) = (Spread::of(alloc), Spread::of(free));
    let gib = bytes as f64 / GIB as f64;
    AllocRow {
        method,
        chunk_bytes: chunk,
        chunks,
        alloc_ms_per_gib: alloc.median / gib,
        free_ms_per_gib: free.median / gib,
        alloc_ms: alloc,
        free_ms: free,
        data_intact,
    }
}
