//! Racecheck-lite over the streams' queues: each item queued is placed in the happens-before
//! order (`order.rs`) with the device memory it uses, and a free or unmap that nothing orders
//! with a use of the same memory on another stream is reported when its second half is queued,
//! whichever of the two the emulator would have run first. A race becomes the context's sticky
//! error (`CUDA_ERROR_ILLEGAL_ADDRESS`, what the bad order gives on a GPU).

use crate::memory::Kind;
use crate::order::{Item, Race};
use crate::state::{State, NULL_STREAM};
use crate::streams::{ArgValue, Op};
use cudarc::driver::sys::CUresult;
use pagedkv::emu::ParamKind;

/// A stream as messages name it.
pub fn stream_name(stream: u64) -> String {
    if stream == NULL_STREAM {
        "the legacy default stream".into()
    } else {
        format!("stream {stream:#x}")
    }
}

impl State {
    /// Places item `seq` of `stream` in the order, and reports its races.
    pub fn track(&mut self, stream: u64, seq: u64, op: &Op) {
        let clock = self.order.item(stream, seq);
        let item = Item { stream, seq };
        let on = stream_name(stream);
        let races = match op {
            Op::Record { event } => {
                if let Some(e) = self.events.get_mut(event) {
                    e.clock = clock;
                }
                return;
            }
            Op::Wait { clock: after, .. } => {
                self.order.stream_waits(stream, after);
                return;
            }
            Op::Free { ptr } => {
                let what = format!("cuMemFreeAsync on {on}");
                self.order.free(item, &clock, *ptr, &what)
            }
            _ => {
                let mut races = Vec::new();
                for (ptr, len, what) in self.memory_used(op) {
                    let regions = self.regions(ptr, len);
                    let what = format!("{what} on {on}");
                    races.extend(self.order.uses(item, &clock, &regions, &what));
                }
                races
            }
        };
        self.report(races);
    }

    /// The host unmaps `regions` (mapping starts) now: reports the uses it has not waited for.
    pub fn track_unmap(&mut self, regions: &[u64]) {
        let races = self.order.host_unmaps(regions, "cuMemUnmap (by the host)");
        self.report(races);
    }

    fn report(&mut self, races: Vec<Race>) {
        for race in races {
            let region = self.describe_region(race.region);
            self.fail_work(
                CUresult::CUDA_ERROR_ILLEGAL_ADDRESS,
                format!(
                    "race: {} and {} use {region} with nothing ordering them (no event wait or \
                     synchronisation between them): on a GPU either may run first",
                    race.release, race.user
                ),
            );
        }
    }

    /// The device memory `op` reads or writes: each range with what uses it.
    fn memory_used(&self, op: &Op) -> Vec<(u64, usize, String)> {
        match op {
            Op::Kernel(k) => k
                .kernel
                .params
                .iter()
                .zip(&k.args)
                .filter_map(|(param, arg)| match (param.kind, *arg) {
                    (ParamKind::Buf(..), ArgValue::Pointer(ptr)) if ptr != 0 => {
                        let end = self.device_extent(ptr).ok()?;
                        Some((
                            ptr,
                            (end - ptr) as usize,
                            format!("kernel {} (argument {})", k.kernel.name, param.name),
                        ))
                    }
                    _ => None,
                })
                .collect(),
            Op::HostToDevice { dst, bytes } => vec![(*dst, bytes.len(), "a copy to it".into())],
            Op::DeviceToHost { src, len, .. } => vec![(*src, *len, "a copy from it".into())],
            Op::DeviceToDevice { dst, src, len } => vec![
                (*src, *len, "a copy from it".into()),
                (*dst, *len, "a copy to it".into()),
            ],
            Op::Memset { dst, len, .. } => vec![(*dst, *len, "a memset of it".into())],
            Op::Record { .. } | Op::Wait { .. } | Op::Free { .. } => Vec::new(),
        }
    }

    /// The regions `[ptr, ptr + len)` lies in that a free or an unmap can take away: its device
    /// allocation, or the mappings it spans. (Managed and page-locked memory are freed only by
    /// calls that synchronise first.)
    fn regions(&self, ptr: u64, len: usize) -> Vec<u64> {
        match self.memory.find(ptr) {
            Some((start, a)) if a.kind == Kind::Device => vec![start],
            Some(_) => Vec::new(),
            None => self.vmm.mapping_starts(ptr, ptr.saturating_add(len as u64)),
        }
    }

    fn describe_region(&self, region: u64) -> String {
        let allocation = self
            .memory
            .find(region)
            .or_else(|| self.memory.find_freed(region));
        if let Some((start, a)) = allocation {
            return format!("the {} of {} bytes at {start:#x}", a.kind.what(), a.len);
        }
        match self.vmm.mapping_of(region) {
            Some((start, m)) => format!("the mapping of {} bytes at {start:#x}", m.len),
            None => format!("the mapping at {region:#x}"),
        }
    }
}
