//! The device's address space: allocations (`cuMemAlloc`, stream-ordered, managed, page-locked
//! host memory) in host memory at their own addresses, so a device pointer is a host address the
//! emulator can read. Freed ranges are never handed out again (their pages are given back, the
//! addresses kept inaccessible), so a stale pointer is always caught and named as freed.

use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `cuMemAlloc` / `cuMemAllocAsync`: device memory, counted against the device's total.
    Device,
    /// `cuMemAllocManaged`: reachable from host and kernels.
    Managed,
    /// `cuMemHostAlloc` / `cuMemAllocHost`: page-locked host memory; kernels may use it through
    /// `cuMemHostGetDevicePointer` (same address: unified addressing).
    PinnedHost,
}

impl Kind {
    pub fn what(self) -> &'static str {
        match self {
            Kind::Device => "device allocation",
            Kind::Managed => "managed allocation",
            Kind::PinnedHost => "page-locked host allocation",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Allocation {
    pub len: usize,
    pub kind: Kind,
}

#[derive(Default)]
pub struct AddressSpace {
    live: BTreeMap<u64, Allocation>,
    freed: BTreeMap<u64, Allocation>,
}

/// Page-aligned anonymous memory, readable and writable, at an address nothing else holds.
fn map_anonymous(len: usize) -> Option<u64> {
    // SAFETY: a fresh private mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len.max(1),
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p as u64)
}

impl AddressSpace {
    /// A new allocation of `len` bytes; `None` when the host refuses the mapping.
    pub fn allocate(&mut self, len: usize, kind: Kind) -> Option<u64> {
        let ptr = map_anonymous(len)?;
        self.live.insert(ptr, Allocation { len, kind });
        Some(ptr)
    }

    /// Frees the allocation starting exactly at `ptr` and of `kind`; its pages go back to the
    /// host, its addresses stay reserved and inaccessible.
    pub fn free(&mut self, ptr: u64, kind: Kind) -> Option<Allocation> {
        let a = *self.live.get(&ptr).filter(|a| a.kind == kind)?;
        self.live.remove(&ptr);
        // SAFETY: the range is our own mapping; nothing may use it any more.
        unsafe {
            libc::mprotect(ptr as *mut _, a.len.max(1), libc::PROT_NONE);
            libc::madvise(ptr as *mut _, a.len.max(1), libc::MADV_DONTNEED);
        }
        self.freed.insert(ptr, a);
        Some(a)
    }

    /// The live allocation holding `ptr`: its start and what it is.
    pub fn find(&self, ptr: u64) -> Option<(u64, Allocation)> {
        let (&start, a) = self.live.range(..=ptr).next_back()?;
        (ptr < start + a.len.max(1) as u64).then_some((start, *a))
    }

    /// The freed allocation that held `ptr`, for an error message.
    pub fn find_freed(&self, ptr: u64) -> Option<(u64, Allocation)> {
        let (&start, a) = self.freed.range(..=ptr).next_back()?;
        (ptr < start + a.len.max(1) as u64).then_some((start, *a))
    }

    pub fn live(&self) -> impl Iterator<Item = (u64, Allocation)> + '_ {
        self.live.iter().map(|(&p, &a)| (p, a))
    }

    /// Forgets every live allocation (their context is gone), returning them.
    pub fn take_live(&mut self) -> Vec<(u64, Allocation)> {
        let all: Vec<_> = self.live().collect();
        for &(p, a) in &all {
            self.free(p, a.kind);
        }
        all
    }
}
