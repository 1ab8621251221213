//! A timing event: recorded on a stream, it is stamped when the stream reaches it.

use super::{failed, teardown, Gpu, Stream};
use crate::device::DeviceError;
use cudarc::driver::{result, sys};
use std::sync::Arc;

#[derive(Debug)]
pub struct Event {
    gpu: Arc<Gpu>,
    raw: sys::CUevent,
}

impl Event {
    /// An event that records time (`CU_EVENT_DEFAULT`).
    pub fn timing(gpu: &Arc<Gpu>) -> Result<Event, DeviceError> {
        let doing = || "creating a timing event".to_string();
        gpu.bind(doing)?;
        let raw = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(failed("cuEventCreate", doing))?;
        Ok(Event {
            gpu: gpu.clone(),
            raw,
        })
    }

    pub fn record(&self, stream: &Stream) -> Result<(), DeviceError> {
        let doing = || "recording a timing event".to_string();
        self.gpu.bind(doing)?;
        // SAFETY: a live event and stream of the current context.
        unsafe { result::event::record(self.raw, stream.raw()) }
            .map_err(failed("cuEventRecord", doing))
    }

    pub fn synchronize(&self) -> Result<(), DeviceError> {
        let doing = || "waiting for a timing event".to_string();
        self.gpu.bind(doing)?;
        // SAFETY: a live event.
        unsafe { result::event::synchronize(self.raw) }.map_err(failed("cuEventSynchronize", doing))
    }

    /// Milliseconds from `self` to `end`, both completed.
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32, DeviceError> {
        let doing = || "reading the time between two events".to_string();
        self.gpu.bind(doing)?;
        // SAFETY: two live events of the current context.
        unsafe { result::event::elapsed(self.raw, end.raw) }
            .map_err(failed("cuEventElapsedTime", doing))
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        let doing = || "destroying a timing event".to_string();
        teardown::record_err(self.gpu.bind(doing));
        // SAFETY: created in `timing`, destroyed once.
        teardown::record_err(
            unsafe { result::event::destroy(self.raw) }.map_err(failed("cuEventDestroy", doing)),
        );
    }
}
