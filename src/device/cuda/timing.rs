//! Timing on the GPU with CUDA events: the median of several runs after a warm-up.

use super::{CudaDevice, DeviceError};
use cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT;

impl CudaDevice {
    /// Runs `work` `warmup` times untimed, then `iters` times, each between two events; returns
    /// the per-run times in milliseconds.
    pub fn time_ms(
        &self,
        warmup: usize,
        iters: usize,
        mut work: impl FnMut() -> Result<(), DeviceError>,
    ) -> Result<Vec<f64>, DeviceError> {
        for _ in 0..warmup {
            work()?;
        }
        let mut times = Vec::with_capacity(iters);
        for _ in 0..iters {
            // cudarc's default event has timing disabled; elapsed time needs CU_EVENT_DEFAULT.
            let start = self.ctx.new_event(Some(CU_EVENT_DEFAULT))?;
            let end = self.ctx.new_event(Some(CU_EVENT_DEFAULT))?;
            start.record(&self.stream)?;
            work()?;
            end.record(&self.stream)?;
            end.synchronize()?;
            times.push(start.elapsed_ms(&end)? as f64);
        }
        Ok(times)
    }
}
