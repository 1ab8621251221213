//! Tagged pools put to sleep together, as vLLM's `CuMemAllocator` does: `sleep` offloads the
//! pools whose tag is listed and discards the others; `wake` wakes the pools with the given tags
//! (all when none are given). Levels: 1 offloads "weights" and discards the KV cache; 2 discards
//! both.
//!
//! Unlike vLLM's allocator, a wake maps every selected pool before restoring any of them, so a
//! mapping failure rolls every pool back to sleep with its host copy intact (vLLM drops a pool's
//! host copy as soon as it is restored, so its rollback loses data).

use super::{Backing, PoolState, SleepMode, SleepPool, SleepReport, VmmError, WakeReport};

/// The tag vLLM gives model weights.
pub const WEIGHTS: &str = "weights";
/// The tag vLLM gives the KV cache.
pub const KV_CACHE: &str = "kv_cache";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SleepLevel {
    /// Offload weights, discard the KV cache: cheap to resume the same model.
    One,
    /// Discard everything: the weights will be reloaded or replaced.
    Two,
}

impl TryFrom<u8> for SleepLevel {
    type Error = VmmError;
    fn try_from(level: u8) -> Result<Self, VmmError> {
        match level {
            1 => Ok(SleepLevel::One),
            2 => Ok(SleepLevel::Two),
            l => Err(VmmError::BadLevel(l)),
        }
    }
}

impl SleepLevel {
    /// The tags whose pools are offloaded at this level.
    pub fn offload_tags(self) -> &'static [&'static str] {
        match self {
            SleepLevel::One => &[WEIGHTS],
            SleepLevel::Two => &[],
        }
    }
}

pub struct PoolSet<B: Backing> {
    pools: Vec<(String, SleepPool<B>)>,
}

impl<B: Backing> Default for PoolSet<B> {
    fn default() -> Self {
        PoolSet { pools: Vec::new() }
    }
}

impl<B: Backing> PoolSet<B> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, tag: &str, pool: SleepPool<B>) -> Result<(), VmmError> {
        if self.pools.iter().any(|(t, _)| t == tag) {
            return Err(VmmError::DuplicateTag(tag.to_string()));
        }
        self.pools.push((tag.to_string(), pool));
        Ok(())
    }

    pub fn get(&self, tag: &str) -> Result<&SleepPool<B>, VmmError> {
        self.pools
            .iter()
            .find(|(t, _)| t == tag)
            .map(|(_, p)| p)
            .ok_or_else(|| VmmError::UnknownTag(tag.to_string()))
    }

    pub fn get_mut(&mut self, tag: &str) -> Result<&mut SleepPool<B>, VmmError> {
        self.pools
            .iter_mut()
            .find(|(t, _)| t == tag)
            .map(|(_, p)| p)
            .ok_or_else(|| VmmError::UnknownTag(tag.to_string()))
    }

    pub fn tags(&self) -> impl Iterator<Item = &str> {
        self.pools.iter().map(|(t, _)| t.as_str())
    }

    pub fn sleep_level(&mut self, level: SleepLevel) -> Result<Vec<SleepReport>, VmmError> {
        self.sleep(level.offload_tags())
    }

    /// Puts every pool to sleep: offloads those tagged with one of `offload_tags`, discards the
    /// rest. Refused without change unless every pool is awake. All offload copies are made
    /// before any memory is released, so a failed copy leaves every pool awake.
    pub fn sleep(&mut self, offload_tags: &[&str]) -> Result<Vec<SleepReport>, VmmError> {
        for (tag, pool) in &self.pools {
            if pool.state() != PoolState::Awake {
                return Err(VmmError::AlreadyAsleep(pool.state()).in_pool(tag));
            }
        }
        let modes: Vec<SleepMode> = self
            .pools
            .iter()
            .map(|(tag, _)| {
                if offload_tags.contains(&tag.as_str()) {
                    SleepMode::Offload
                } else {
                    SleepMode::Discard
                }
            })
            .collect();
        // Copy every offloaded pool out before releasing any: a failed copy (host memory
        // short, say) leaves the whole set awake.
        let mut prepared = Vec::with_capacity(self.pools.len());
        for (i, (tag, pool)) in self.pools.iter_mut().enumerate() {
            match pool.sleep_prepare(modes[i]) {
                Ok(r) => prepared.push(r),
                Err(e) => {
                    let e = e.in_pool(tag);
                    for (_, p) in &mut self.pools[..i] {
                        p.sleep_abort();
                    }
                    return Err(e);
                }
            }
        }
        // Every pool goes to sleep even when one cannot release a chunk (it says which): the
        // first such error is returned once all are asleep.
        let mut reports = Vec::with_capacity(self.pools.len());
        let mut first = None;
        for (i, (tag, pool)) in self.pools.iter_mut().enumerate() {
            match pool.sleep_release(modes[i], prepared[i]) {
                Ok(r) => reports.push(r),
                Err(e) => {
                    first.get_or_insert(e.in_pool(tag));
                }
            }
        }
        first.map_or(Ok(reports), Err)
    }

    /// Wakes the pools tagged with one of `tags` (every pool when `None`). Refused without change
    /// when a tag is unknown or a selected pool is awake. All selected pools are mapped before any
    /// is restored; a failure unmaps them all again, leaving each asleep and intact.
    pub fn wake(&mut self, tags: Option<&[&str]>) -> Result<Vec<WakeReport>, VmmError> {
        if let Some(tags) = tags {
            for t in tags {
                self.get(t)?;
            }
        }
        let selected: Vec<usize> = (0..self.pools.len())
            .filter(|&i| tags.is_none_or(|ts| ts.contains(&self.pools[i].0.as_str())))
            .collect();
        for &i in &selected {
            let (tag, pool) = &self.pools[i];
            if pool.state() == PoolState::Awake {
                return Err(VmmError::NotAsleep.in_pool(tag));
            }
        }
        let mut map_times = Vec::with_capacity(selected.len());
        for (n, &i) in selected.iter().enumerate() {
            let (tag, pool) = &mut self.pools[i];
            match pool.wake_map() {
                Ok(t) => map_times.push(t),
                Err(e) => {
                    let e = e.in_pool(tag);
                    for &j in &selected[..n] {
                        self.pools[j].1.wake_unmap();
                    }
                    return Err(e);
                }
            }
        }
        let mut reports = Vec::with_capacity(selected.len());
        for (n, &i) in selected.iter().enumerate() {
            let (tag, pool) = &mut self.pools[i];
            match pool.wake_restore() {
                Ok(mut r) => {
                    r.map = map_times[n];
                    reports.push(r);
                }
                Err(e) => {
                    // This pool rolled itself back; those not yet restored are mapped: unmap them.
                    let e = e.in_pool(tag);
                    for &j in &selected[n + 1..] {
                        self.pools[j].1.wake_unmap();
                    }
                    return Err(e);
                }
            }
        }
        Ok(reports)
    }
}
