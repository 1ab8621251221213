//! Managed (unified) memory's first touch on the GPU against an explicit copy. The host writes a
//! buffer of managed memory, so its pages live in host memory; the first kernel that reads it
//! faults page after page and the driver migrates them to the GPU. The explicit way copies the
//! same bytes with `cuMemcpyHtoD` (from pageable and from pinned memory) and then runs the same
//! kernel; `cuMemPrefetchAsync` is the managed way to move pages before they are needed.
//!
//! The kernel is `stream_read` (kernels/stream.cu), which folds every 16-byte vector into one
//! xor per CTA: the host folds the same bytes, so every pass also checks that the GPU read what
//! the host wrote. Needs the GPU kernels built in; without a GPU (or kernels) the lab returns
//! [`LabError::Unavailable`] and the CLI reports it skipped.

use super::gpu_mem::DeviceMemory;
use super::{Check, LabError, GIB, MIB};
use crate::device::cuda::driver::{failed, DeviceBuffer, Function, PinnedBuffer};
use crate::device::cuda::CudaDevice;
use crate::device::DeviceError;
use cudarc::driver::{result, sys, LaunchConfig};
use serde::Serialize;

#[derive(Debug, Clone, Copy)]
pub struct ManagedConfig {
    pub bytes: usize,
}

impl Default for ManagedConfig {
    fn default() -> Self {
        ManagedConfig { bytes: GIB }
    }
}

/// One way of getting the bytes read by the GPU: time and effective rate.
#[derive(Debug, Clone, Serialize)]
pub struct Pass {
    pub name: &'static str,
    pub ms: f64,
    pub gbps: f64,
    /// The kernel's xor fold equals the host's fold of the bytes written.
    pub data_intact: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ManagedReport {
    pub device: String,
    pub bytes: usize,
    /// The GPU can fault on managed pages while the host runs (pages migrate on demand).
    pub concurrent_managed_access: bool,
    /// The GPU can read ordinary pageable host memory (HMM or a coherent link).
    pub pageable_memory_access: bool,
    pub copy_pageable_ms: f64,
    pub copy_pinned_ms: f64,
    /// The kernel over device memory after the copy: the bandwidth the other passes aim at.
    pub kernel_device_ms: f64,
    pub first_touch_ms: f64,
    pub second_touch_ms: f64,
    /// Prefetch to the GPU plus the kernel; null without concurrent managed access.
    pub prefetch_ms: Option<f64>,
    pub passes: Vec<Pass>,
    pub checks: Vec<Check>,
}

/// The bytes every pass moves: a 32-bit hash of each word's index, never all zeros.
fn pattern(bytes: usize) -> Vec<u8> {
    (0..bytes / 4)
        .flat_map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ 0x5bd1_e995).to_ne_bytes())
        .collect()
}

/// The xor of all 32-bit words: what `stream_read`'s per-CTA folds xor to.
fn xor_fold(bytes: &[u8]) -> u32 {
    bytes.chunks_exact(4).fold(0, |acc, w| {
        acc ^ u32::from_ne_bytes(w.try_into().expect("4 bytes"))
    })
}

pub fn run(cfg: &ManagedConfig) -> Result<ManagedReport, LabError> {
    super::error::positive(cfg.bytes, "the buffer size")?;
    let bytes = cfg
        .bytes
        .checked_next_multiple_of(MIB)
        .ok_or_else(|| LabError::Invalid(format!("a buffer of {} bytes", cfg.bytes)))?;
    let dev = CudaDevice::open(0)?;
    let (concurrent, pageable) = capabilities(&dev, bytes)?;
    let mut host = pattern(bytes);
    if xor_fold(&host) == 0 {
        // Zeroed memory folds to 0 too: the pattern must not, or a lost copy would pass.
        host[0] ^= 1;
    }
    let expected = xor_fold(&host);
    let mut reader = Reader::new(&dev)?;
    let mut passes = Passes {
        bytes,
        expected,
        list: Vec::new(),
    };
    let explicit = explicit_passes(&dev, &mut reader, &host, &mut passes)?;
    let (first_touch_ms, second_touch_ms) = managed_passes(&dev, &mut reader, &host, &mut passes)?;
    let prefetch_ms = if concurrent {
        Some(prefetch_pass(&dev, &mut reader, &host, &mut passes)?)
    } else {
        None
    };
    let checks = checks(
        &passes,
        dev.info.emulated,
        concurrent,
        first_touch_ms,
        second_touch_ms,
    );
    Ok(ManagedReport {
        device: dev.info.name.clone(),
        bytes,
        concurrent_managed_access: concurrent,
        pageable_memory_access: pageable,
        copy_pageable_ms: explicit.copy_pageable_ms,
        copy_pinned_ms: explicit.copy_pinned_ms,
        kernel_device_ms: explicit.kernel_device_ms,
        first_touch_ms,
        second_touch_ms,
        prefetch_ms,
        passes: passes.list,
        checks,
    })
}

/// Whether the device can fault on managed pages (`concurrent`) and read pageable host memory;
/// an error when it has no managed memory or too little free for the lab's three buffers.
fn capabilities(dev: &CudaDevice, bytes: usize) -> Result<(bool, bool), LabError> {
    let gpu = &dev.gpu;
    use sys::CUdevice_attribute as A;
    if gpu.attribute(A::CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, "MANAGED_MEMORY")? == 0 {
        return Err(LabError::Unavailable(
            "the device does not support managed memory".into(),
        ));
    }
    let concurrent = gpu.attribute(
        A::CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS,
        "CONCURRENT_MANAGED_ACCESS",
    )? != 0;
    let pageable = gpu.attribute(
        A::CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS,
        "PAGEABLE_MEMORY_ACCESS",
    )? != 0;
    let (free, _) = gpu.memory_info()?;
    // Device memory and two managed buffers may all sit on the GPU at once.
    if bytes.saturating_mul(3) > free / 10 * 9 {
        return Err(LabError::Invalid(format!(
            "3 x {} needed, {} free on the GPU",
            super::machine::bytes(bytes as u64),
            super::machine::bytes(free as u64)
        )));
    }
    Ok((concurrent, pageable))
}

/// The passes so far, each checked against the host's fold.
struct Passes {
    bytes: usize,
    expected: u32,
    list: Vec<Pass>,
}

impl Passes {
    /// Records a pass of `ms` whose kernel folded to `sum`; returns `ms`.
    fn add(&mut self, name: &'static str, ms: f64, sum: u32) -> f64 {
        self.list.push(Pass {
            name,
            ms,
            gbps: self.bytes as f64 / (ms * 1e-3) / 1e9,
            data_intact: sum == self.expected,
        });
        ms
    }
}

/// The explicit way's times.
struct Explicit {
    copy_pageable_ms: f64,
    copy_pinned_ms: f64,
    kernel_device_ms: f64,
}

/// The explicit way: copy into cuMemAlloc'd memory (from pageable, then pinned memory), then
/// read it there.
fn explicit_passes(
    dev: &CudaDevice,
    reader: &mut Reader,
    host: &[u8],
    passes: &mut Passes,
) -> Result<Explicit, LabError> {
    let gpu = &dev.gpu;
    let bytes = passes.bytes;
    let device = DeviceMemory::alloc(gpu, bytes)?;
    // Each copy lands on zeroed memory, so a copy that did nothing fails the fold.
    let poison = || -> Result<(), DeviceError> {
        let doing = || "zeroing the device copy's destination".to_string();
        gpu.bind(doing)?;
        // SAFETY: `device` holds `bytes` bytes; the memset is ordered before the timed copy on
        // the same stream.
        unsafe { result::memset_d8_async(device.ptr, 0, bytes, dev.stream.raw()) }
            .map_err(failed("cuMemsetD8Async", doing))
    };
    poison()?;
    // SAFETY (both copies): `device` holds `bytes` bytes; the source lives until the copy is
    // synchronised (time_total_ms waits for its end event).
    let copy = |src: &[u8], what: &'static str| {
        dev.time_total_ms(1, || {
            let doing = || format!("copying {what} to the device");
            gpu.bind(doing)?;
            unsafe { result::memcpy_htod_async(device.ptr, src, dev.stream.raw()) }
                .map_err(failed("cuMemcpyHtoDAsync", doing))
        })
    };
    let copy_pageable_ms = copy(host, "pageable memory")?;
    let (ms, sum) = reader.read(device.ptr, bytes)?;
    let kernel_device_ms = passes.add("kernel over device memory (after the copy)", ms, sum);
    passes.add("copy from pageable memory", copy_pageable_ms, sum);
    let mut pinned = PinnedBuffer::new(gpu, "the pinned copy source", bytes)?;
    pinned.as_mut().copy_from_slice(host);
    poison()?;
    let copy_pinned_ms = copy(pinned.as_ref(), "pinned memory")?;
    let (_, sum_pinned) = reader.read(device.ptr, bytes)?;
    passes.add("copy from pinned memory", copy_pinned_ms, sum_pinned);
    drop(pinned);
    device.free()?;
    Ok(Explicit {
        copy_pageable_ms,
        copy_pinned_ms,
        kernel_device_ms,
    })
}

/// The managed way: the host writes (pages on the host), the GPU's first read migrates them,
/// the second finds them resident. Returns both reads' ms.
fn managed_passes(
    dev: &CudaDevice,
    reader: &mut Reader,
    host: &[u8],
    passes: &mut Passes,
) -> Result<(f64, f64), LabError> {
    let bytes = passes.bytes;
    let mut managed = DeviceMemory::managed(&dev.gpu, bytes)?;
    // SAFETY: managed memory, no GPU work uses it yet.
    unsafe { managed.host_mut() }?.copy_from_slice(host);
    let (first_touch_ms, first_sum) = reader.read(managed.ptr, bytes)?;
    passes.add(
        "managed: first GPU touch (faults, migration)",
        first_touch_ms,
        first_sum,
    );
    let (second_touch_ms, second_sum) = reader.read(managed.ptr, bytes)?;
    passes.add(
        "managed: second GPU touch (resident)",
        second_touch_ms,
        second_sum,
    );
    managed.free()?;
    Ok((first_touch_ms, second_touch_ms))
}

/// The managed way ahead of need: `cuMemPrefetchAsync` to the GPU, then the read, timed together.
fn prefetch_pass(
    dev: &CudaDevice,
    reader: &mut Reader,
    host: &[u8],
    passes: &mut Passes,
) -> Result<f64, LabError> {
    let gpu = &dev.gpu;
    let bytes = passes.bytes;
    let mut managed = DeviceMemory::managed(gpu, bytes)?;
    // SAFETY: managed memory, no GPU work uses it yet.
    unsafe { managed.host_mut() }?.copy_from_slice(host);
    let location = sys::CUmemLocation {
        type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE,
        id: gpu.cu_device(),
    };
    let (ms, sum) = reader.read_after(managed.ptr, bytes, || {
        let doing = || "prefetching the managed memory to the GPU".to_string();
        gpu.bind(doing)?;
        // SAFETY: the whole managed range, to this context's device, on the reader's stream.
        unsafe { result::mem_prefetch_async(managed.ptr, bytes, location, dev.stream.raw()) }
            .map_err(failed("cuMemPrefetchAsync", doing))
    })?;
    managed.free()?;
    Ok(passes.add("managed: prefetch then read", ms, sum))
}

/// The lab's checks: every pass read the host's bytes; the first touch of managed pages costs
/// more than the second (a timing: not on the emulated driver, and only with on-demand faults).
fn checks(
    passes: &Passes,
    emulated: bool,
    concurrent: bool,
    first_touch_ms: f64,
    second_touch_ms: f64,
) -> Vec<Check> {
    let expected = passes.expected;
    let lost: Vec<&str> = passes
        .list
        .iter()
        .filter(|p| !p.data_intact)
        .map(|p| p.name)
        .collect();
    let mut checks = vec![Check::verdict(
        "every pass read exactly the bytes the host wrote (xor fold)",
        lost.is_empty(),
        if lost.is_empty() {
            format!("{} passes, fold {expected:#010x}", passes.list.len())
        } else {
            format!("wrong: {}", lost.join(", "))
        },
    )];
    let expectation = "the first GPU touch of host-resident managed pages pays for migrating them";
    checks.push(if emulated {
        // A timing fact: on the emulated driver there is no migration to time.
        Check::skipped(
            expectation,
            "emulated GPU: times are the CPU's, not a measurement",
        )
    } else if concurrent {
        Check::verdict(
            expectation,
            first_touch_ms > second_touch_ms,
            format!("first touch {first_touch_ms:.2} ms, second {second_touch_ms:.2} ms"),
        )
    } else {
        Check::skipped(
            expectation,
            "no concurrent managed access: pages move at kernel launch, not on faults",
        )
    });
    checks
}

/// `stream_read` over raw device addresses, timed with events on the device's stream.
struct Reader<'a> {
    dev: &'a CudaDevice,
    function: Function,
    out: DeviceBuffer<u32>,
    cfg: LaunchConfig,
}

impl<'a> Reader<'a> {
    fn new(dev: &'a CudaDevice) -> Result<Self, LabError> {
        let function = dev.function("stream", "stream_read")?;
        let cfg = LaunchConfig {
            grid_dim: (dev.info.multiprocessors.max(1) as u32 * 8, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let out = dev
            .stream
            .alloc_zeros::<u32>("stream_read's folds", cfg.grid_dim.0 as usize)?;
        Ok(Reader {
            dev,
            function,
            out,
            cfg,
        })
    }

    /// ms of one kernel reading `bytes` at `src`, and the xor of what it read.
    fn read(&mut self, src: u64, bytes: usize) -> Result<(f64, u32), LabError> {
        self.read_after(src, bytes, || Ok(()))
    }

    /// The same with `before` enqueued first inside the timed interval.
    fn read_after(
        &mut self,
        src: u64,
        bytes: usize,
        before: impl Fn() -> Result<(), DeviceError>,
    ) -> Result<(f64, u32), LabError> {
        let vectors = (bytes / 16) as i64;
        let Reader {
            dev,
            function,
            out,
            cfg,
        } = self;
        // Zeroed first: a kernel that did not run leaves a fold of 0, not the last one.
        dev.stream.memset(out, 0)?;
        let ms = dev.time_total_ms(1, || {
            before()?;
            let mut b = function.launch(&dev.stream);
            b.arg(&*out).arg(&src).arg(&vectors);
            // SAFETY: stream_read(out [grid], src [vectors * 16 bytes], n): `src` holds `bytes`
            // readable bytes on this device (device or managed memory) and `out` one u32 per CTA.
            unsafe { b.launch(*cfg) }
        })?;
        let folds = dev.stream.download(out)?;
        Ok((ms, folds.iter().fold(0, |a, &f| a ^ f)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fold_sees_every_word() {
        let mut bytes = pattern(4096);
        assert_ne!(xor_fold(&bytes), 0);
        let before = xor_fold(&bytes);
        bytes[4095] ^= 0x80;
        assert_ne!(xor_fold(&bytes), before);
    }

    #[test]
    fn without_a_gpu_the_lab_is_unavailable_not_failed() {
        if crate::device::cuda::driver_present() {
            return; // A machine with libcuda runs the lab itself (scripts/gpu-check).
        }
        let r = run(&ManagedConfig { bytes: MIB });
        assert!(matches!(r, Err(LabError::Unavailable(_))), "{r:?}");
        let r = super::super::gpu_alloc::run(&Default::default());
        assert!(matches!(r, Err(LabError::Unavailable(_))), "{r:?}");
    }
}
