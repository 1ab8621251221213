//! The GPU's memory limits: the driver's device-to-device copy and a read-only streaming
//! reduction (kernels/stream.cu), over the bytes of the measurement they are compared with, but
//! never fewer than four times the L2 cache: a limit measured inside L2 would be the cache's.

use super::{CudaDevice, DeviceError};
use crate::device::Limits;
use cudarc::driver::LaunchConfig;

/// A measurement of memory bandwidth streams at least this many times the L2 cache.
pub const WORKING_SET_OVER_L2: usize = 4;

impl CudaDevice {
    /// The fewest bytes a bandwidth measurement may stream: [`WORKING_SET_OVER_L2`] x the L2.
    pub fn min_working_set(&self) -> usize {
        WORKING_SET_OVER_L2 * self.info.l2_cache_bytes
    }

    /// Copy (bytes read + written per second) and read-only stream bandwidth over `bytes` bytes
    /// (at least [`CudaDevice::min_working_set`]).
    pub fn memory_limits(&self, bytes: usize, iters: usize) -> Result<Limits, DeviceError> {
        let bytes = bytes.max(self.min_working_set());
        let n = bytes.div_ceil(16).max(1);
        let src = self
            .stream
            .alloc_zeros::<u8>("the limits' source", n * 16)?;
        let mut dst = self
            .stream
            .alloc_zeros::<u8>("the limits' destination", n * 16)?;
        let copy = self.time_ms(2, iters, || self.stream.copy(&src, &mut dst))?;
        let read = self.function("stream", "stream_read")?;
        let sms = self.info.multiprocessors.max(1) as u32;
        let cfg = LaunchConfig {
            grid_dim: (sms * 8, 1, 1),
            block_dim: (256, 1, 1),
            shared_mem_bytes: 0,
        };
        let out = self
            .stream
            .alloc_zeros::<u32>("stream_read's folds", cfg.grid_dim.0 as usize)?;
        let n_vecs = n as i64;
        let stream = self.time_ms(2, iters, || {
            let mut b = read.launch(&self.stream);
            b.arg(&out).arg(&src).arg(&n_vecs);
            // SAFETY: src holds n 16-byte vectors; out one u32 per CTA.
            unsafe { b.launch(cfg) }
        })?;
        let gbps = |ms: f64, moved: f64| moved / (ms * 1e-3) / 1e9;
        Ok(Limits {
            copy_gbps: gbps(crate::stats::median(&copy), 2.0 * (n * 16) as f64),
            stream_gbps: gbps(crate::stats::median(&stream), (n * 16) as f64),
        })
    }
}
