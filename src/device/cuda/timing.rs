//! Timing on the GPU with CUDA events.
//!
//! A kernel of a few microseconds must not be timed alone between two events: the start event is
//! stamped as soon as it is recorded on the idle stream, before the host has even queued the
//! launch, so the host's launch overhead would be what gets measured. Runs are therefore timed in
//! back-to-back batches of at least [`MIN_BATCH_MS`], and each sample is a batch's time divided by
//! its runs.

use super::driver::Event;
use super::{CudaDevice, DeviceError};

/// The shortest batch of runs timed between one pair of events.
pub const MIN_BATCH_MS: f64 = 2.0;
const MAX_BATCH_RUNS: usize = 1000;

impl CudaDevice {
    /// Runs `work` `warmup` times untimed, then takes `iters` samples, each the time of one run
    /// in milliseconds, averaged over a batch of back-to-back runs lasting at least
    /// [`MIN_BATCH_MS`] (one run when a run is that long by itself, or on the emulated GPU).
    pub fn time_ms(
        &self,
        warmup: usize,
        iters: usize,
        mut work: impl FnMut() -> Result<(), DeviceError>,
    ) -> Result<Vec<f64>, DeviceError> {
        for _ in 0..warmup {
            work()?;
        }
        let (start, end) = self.timing_events()?;
        let once = self.batch_ms(&start, &end, 1, &mut work)?;
        // The emulated driver has no launch overhead to hide (its times are the CPU's, never a
        // measurement): one run per batch, so a run makes the same driver calls whatever the
        // machine's speed, and a fault sweep (tests/fault_sweep.rs) can aim at any of them.
        let runs = if self.info.emulated {
            1
        } else if once > 0.0 {
            ((MIN_BATCH_MS / once).ceil() as usize).clamp(1, MAX_BATCH_RUNS)
        } else {
            MAX_BATCH_RUNS
        };
        (0..iters)
            .map(|_| Ok(self.batch_ms(&start, &end, runs, &mut work)? / runs as f64))
            .collect()
    }

    /// The time in milliseconds of `runs` back-to-back runs of `work` between one pair of events
    /// (for criterion's `iter_custom`, which asks for the total of a number of runs).
    pub fn time_total_ms(
        &self,
        runs: usize,
        mut work: impl FnMut() -> Result<(), DeviceError>,
    ) -> Result<f64, DeviceError> {
        let (start, end) = self.timing_events()?;
        self.batch_ms(&start, &end, runs, &mut work)
    }

    fn timing_events(&self) -> Result<(Event, Event), DeviceError> {
        Ok((Event::timing(&self.gpu)?, Event::timing(&self.gpu)?))
    }

    fn batch_ms(
        &self,
        start: &Event,
        end: &Event,
        runs: usize,
        work: &mut impl FnMut() -> Result<(), DeviceError>,
    ) -> Result<f64, DeviceError> {
        start.record(&self.stream)?;
        for _ in 0..runs {
            work()?;
        }
        end.record(&self.stream)?;
        end.synchronize()?;
        Ok(start.elapsed_ms(end)? as f64)
    }
}
