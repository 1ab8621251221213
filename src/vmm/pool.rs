//! The sleep/wake state machine, written once over any [`Backing`].
//!
//! ```text
//!            sleep(Offload)                 wake (map, restore)
//!   Awake ──────────────────▶ AsleepOffloaded ──────────────────▶ Awake
//!   Awake ──────────────────▶ AsleepDiscarded ──────────────────▶ Awake (contents undefined)
//!            sleep(Discard)                 wake (map)
//! ```
//! Sleeping twice, waking while awake and touching a sleeping pool are errors. A wake that fails
//! half-way unmaps what it mapped and leaves the pool asleep with its host copy intact. A sleep
//! that cannot release a chunk still puts the pool to sleep (its contents are in host memory, or
//! discarded as asked) and says which chunks it kept; a later wake maps only what is missing. No
//! failure of the driver loses an offloaded pool's contents: the host copy stays readable
//! ([`SleepPool::host_copy`]) until a wake has restored it.

use super::{Backing, VmmError};
use crate::device::cuda::driver::teardown;
use serde::Serialize;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum SleepMode {
    /// Copy the contents to host memory first; wake restores them.
    Offload,
    /// Drop the contents; wake gives fresh memory.
    Discard,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PoolState {
    Awake,
    AsleepOffloaded,
    AsleepDiscarded,
}

/// Where an injected wake failure strikes (tests of the rollback path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WakeFault {
    /// Before mapping chunk `k`, with chunks `0..k` already mapped (never fires when `k` is
    /// past the last chunk).
    MapChunk(usize),
    /// After every chunk is mapped, instead of restoring the contents.
    Restore,
}

/// Where the time of one sleep went.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct SleepReport {
    pub sync: Duration,
    /// Allocating (on CUDA: pinning) the host buffer, when none was kept from an earlier cycle.
    pub host_alloc: Duration,
    /// Copy to host memory (offload only).
    pub copy: Duration,
    pub release: Duration,
    pub bytes_copied: usize,
}

/// Where the time of one wake went.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct WakeReport {
    pub map: Duration,
    pub restore: Duration,
    pub bytes_restored: usize,
}

pub struct SleepPool<B: Backing> {
    backing: B,
    state: PoolState,
    /// The offloaded contents while `AsleepOffloaded`.
    backup: Option<B::HostBuffer>,
    /// A host buffer kept across cycles when `keep_host_buffer` is set (saves allocating and
    /// pinning it at every sleep, at the price of holding the host memory while awake).
    spare: Option<B::HostBuffer>,
    keep_host_buffer: bool,
    fault: Option<WakeFault>,
}

impl<B: Backing> SleepPool<B> {
    /// Maps every chunk of `backing` (all or nothing) and returns the pool awake.
    pub fn new(mut backing: B) -> Result<Self, VmmError> {
        map_all(&mut backing, None)?;
        Ok(SleepPool {
            backing,
            state: PoolState::Awake,
            backup: None,
            spare: None,
            keep_host_buffer: false,
            fault: None,
        })
    }

    /// Keep the offload buffer after wake, to reuse it at the next sleep.
    pub fn keep_host_buffer(&mut self, keep: bool) {
        self.keep_host_buffer = keep;
        if !keep {
            self.spare = None;
        }
    }

    pub fn keeps_host_buffer(&self) -> bool {
        self.keep_host_buffer
    }

    /// Makes the next wake fail at `fault` (once).
    pub fn inject_wake_fault(&mut self, fault: WakeFault) {
        self.fault = Some(fault);
    }

    pub fn state(&self) -> PoolState {
        self.state
    }

    pub fn size(&self) -> usize {
        self.backing.layout().size
    }

    pub fn layout(&self) -> &super::ChunkLayout {
        self.backing.layout()
    }

    /// Start of the reservation, awake or asleep (for checking that it never moves).
    pub fn base_address(&self) -> u64 {
        self.backing.base_address()
    }

    /// The pool's address for kernels and copies: only while awake.
    pub fn ptr(&self) -> Result<u64, VmmError> {
        self.require_awake()?;
        Ok(self.backing.base_address())
    }

    pub fn backing(&self) -> &B {
        &self.backing
    }

    /// The backing, for direct access; only while awake.
    pub fn backing_mut(&mut self) -> Result<&mut B, VmmError> {
        self.require_awake()?;
        Ok(&mut self.backing)
    }

    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<(), VmmError> {
        self.require_awake()?;
        self.check_range(offset, dst.len())?;
        self.backing.copy_to_host(offset, dst)
    }

    /// The offloaded contents while the pool sleeps offloaded: what a wake will restore.
    pub fn host_copy(&self) -> Option<&[u8]> {
        match self.state {
            PoolState::AsleepOffloaded => self.backup.as_ref().map(AsRef::as_ref),
            _ => None,
        }
    }

    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result<(), VmmError> {
        self.require_awake()?;
        self.check_range(offset, src.len())?;
        self.backing.copy_from_host(offset, src)
    }

    pub fn sleep(&mut self, mode: SleepMode) -> Result<SleepReport, VmmError> {
        let report = self.sleep_prepare(mode)?;
        self.sleep_release(mode, report)
    }

    /// First half of sleep: synchronises and, when offloading, copies the contents to host
    /// memory. Nothing is released; on failure the pool is awake and whole.
    pub(crate) fn sleep_prepare(&mut self, mode: SleepMode) -> Result<SleepReport, VmmError> {
        if self.state != PoolState::Awake {
            return Err(VmmError::AlreadyAsleep(self.state));
        }
        let mut report = SleepReport::default();
        let t = Instant::now();
        self.backing.synchronize()?;
        report.sync = t.elapsed();
        if mode == SleepMode::Offload {
            let t = Instant::now();
            let size = self.size();
            let mut buffer = match self.spare.take() {
                Some(b) => b,
                None => self.backing.alloc_host(size)?,
            };
            report.host_alloc = t.elapsed();
            let t = Instant::now();
            if let Err(e) = self.backing.copy_to_host(0, buffer.as_mut()) {
                self.spare = self.keep_host_buffer.then_some(buffer);
                return Err(e);
            }
            report.copy = t.elapsed();
            report.bytes_copied = size;
            self.backup = Some(buffer);
        }
        Ok(report)
    }

    /// Undoes [`Self::sleep_prepare`] when another pool of a set fails to prepare.
    pub(crate) fn sleep_abort(&mut self) {
        if let Some(b) = self.backup.take() {
            if self.keep_host_buffer {
                self.spare = Some(b);
            }
        }
    }

    /// Second half of sleep: releases every chunk, keeping the reservation. The pool is asleep
    /// afterwards even when a chunk could not be released: the error names those kept.
    pub(crate) fn sleep_release(
        &mut self,
        mode: SleepMode,
        mut report: SleepReport,
    ) -> Result<SleepReport, VmmError> {
        let t = Instant::now();
        let count = self.backing.layout().count();
        let mut kept = Vec::new();
        let mut first = None;
        for i in 0..count {
            if let Err(e) = self.backing.unmap_chunk(i) {
                kept.push(i);
                first.get_or_insert(e);
            }
        }
        report.release = t.elapsed();
        self.state = match mode {
            SleepMode::Offload => PoolState::AsleepOffloaded,
            SleepMode::Discard => PoolState::AsleepDiscarded,
        };
        match first {
            None => Ok(report),
            Some(e) => Err(VmmError::NotReleased {
                chunks: kept,
                count,
                source: Box::new(e),
                contents: match mode {
                    SleepMode::Offload => "its contents safe in host memory",
                    SleepMode::Discard => "its contents discarded as asked",
                },
            }),
        }
    }

    pub fn wake(&mut self) -> Result<WakeReport, VmmError> {
        let map = self.wake_map()?;
        let mut report = self.wake_restore()?;
        report.map = map;
        Ok(report)
    }

    /// First half of wake: maps every chunk, all or nothing; the state stays asleep.
    pub(crate) fn wake_map(&mut self) -> Result<Duration, VmmError> {
        if self.state == PoolState::Awake {
            return Err(VmmError::NotAsleep);
        }
        let t = Instant::now();
        let fault = match self.fault {
            Some(WakeFault::MapChunk(k)) => self.fault.take().map(|_| k),
            _ => None,
        };
        map_all(&mut self.backing, fault)?;
        Ok(t.elapsed())
    }

    /// Undoes [`Self::wake_map`] when a later step of a wake fails. A chunk that cannot be
    /// unmapped stays mapped, which a later wake keeps: the pool stays asleep with its host copy
    /// either way. The error returned is the wake's, so an unmap's own goes to the teardown log.
    pub(crate) fn wake_unmap(&mut self) {
        for i in 0..self.backing.layout().count() {
            teardown::record_err(self.backing.unmap_chunk(i));
        }
    }

    /// Second half of wake (after [`Self::wake_map`]): restores the contents, then the pool is
    /// awake. On failure it unmaps again and stays asleep with its host copy.
    pub(crate) fn wake_restore(&mut self) -> Result<WakeReport, VmmError> {
        let t = Instant::now();
        let restored = if self.fault == Some(WakeFault::Restore) {
            self.fault = None;
            Err(VmmError::Injected(WakeFault::Restore))
        } else if let Some(backup) = &self.backup {
            let bytes = backup.as_ref().len();
            self.backing
                .copy_from_host(0, backup.as_ref())
                .map(|_| bytes)
        } else {
            Ok(0)
        };
        match restored {
            Ok(bytes_restored) => {
                let backup = self.backup.take();
                if self.keep_host_buffer {
                    self.spare = self.spare.take().or(backup);
                }
                self.state = PoolState::Awake;
                Ok(WakeReport {
                    map: Duration::ZERO,
                    restore: t.elapsed(),
                    bytes_restored,
                })
            }
            Err(e) => {
                self.wake_unmap();
                Err(e)
            }
        }
    }

    fn require_awake(&self) -> Result<(), VmmError> {
        match self.state {
            PoolState::Awake => Ok(()),
            asleep => Err(VmmError::Asleep(asleep)),
        }
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<(), VmmError> {
        self.backing.layout().chunks_of(offset, len).map(|_| ())
    }
}

/// Maps chunks in order; on a failure (real, or injected before chunk `fail_at`) unmaps those
/// already mapped so nothing is left half-backed.
fn map_all<B: Backing>(backing: &mut B, fail_at: Option<usize>) -> Result<(), VmmError> {
    let count = backing.layout().count();
    for i in 0..count {
        let result = if fail_at == Some(i) {
            Err(VmmError::Injected(WakeFault::MapChunk(i)))
        } else {
            backing.map_chunk(i)
        };
        if let Err(e) = result {
            for j in (0..i).rev() {
                // A chunk that cannot be unmapped stays mapped (a later wake keeps it); the error
                // returned is the map's, so the unmap's goes to the teardown log.
                teardown::record_err(backing.unmap_chunk(j));
            }
            return Err(e);
        }
    }
    Ok(())
}
