//! A stream of the GPU: work queued on it runs in order. Non-blocking, so it does not wait for the
//! legacy default stream (as cudarc's streams).

use super::{failed, teardown, Gpu};
use crate::device::DeviceError;
use cudarc::driver::{result, sys};
use std::sync::Arc;

#[derive(Debug)]
pub struct Stream {
    gpu: Arc<Gpu>,
    raw: sys::CUstream,
}

// SAFETY: a stream handle may be used from any thread with its context current (`Gpu::bind`).
unsafe impl Send for Stream {}
// SAFETY: as above; the struct itself is never mutated.
unsafe impl Sync for Stream {}

impl Stream {
    pub fn new(gpu: &Arc<Gpu>) -> Result<Arc<Stream>, DeviceError> {
        let doing = || "creating a stream".to_string();
        gpu.bind(doing)?;
        let raw = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(failed("cuStreamCreate", doing))?;
        Ok(Arc::new(Stream {
            gpu: gpu.clone(),
            raw,
        }))
    }

    pub fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// Waits until the work queued so far has run; `doing` says what waits.
    pub fn synchronize(&self, doing: impl Fn() -> String) -> Result<(), DeviceError> {
        self.gpu.bind(&doing)?;
        // SAFETY: a live stream of the current context.
        unsafe { result::stream::synchronize(self.raw) }
            .map_err(failed("cuStreamSynchronize", || {
                format!("waiting for the stream ({})", doing())
            }))
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let doing = || "destroying a stream".to_string();
        teardown::record_err(self.gpu.bind(doing));
        // SAFETY: created in `new`, destroyed once; the driver lets queued work finish first.
        teardown::record_err(
            unsafe { result::stream::destroy(self.raw) }.map_err(failed("cuStreamDestroy", doing)),
        );
    }
}
