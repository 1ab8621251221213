//! The device's address space: allocations (`cuMemAlloc`, stream-ordered, managed, page-locked
//! host memory) in host memory at their own addresses, so a device pointer is a host address the
//! emulator can read. Device memory is mapped inaccessible: host code that dereferences a device
//! pointer faults, as on a GPU, and the driver opens the pages only while it copies or runs a
//! kernel (`access.rs`). Freed ranges are never handed out again (their pages are given back, the
//! addresses kept inaccessible), so a stale pointer is always caught and named as freed.

use std::collections::BTreeMap;
use std::fmt;

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

    /// Whether host code may touch it directly: managed and page-locked memory are the host's
    /// too; device memory is reachable only through the driver.
    pub fn host_accessible(self) -> bool {
        self != Kind::Device
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Allocation {
    pub len: usize,
    pub kind: Kind,
    /// initcheck (`PAGEDKV_EMU_INITCHECK=1` when it was allocated): one byte per byte of the
    /// allocation, non-zero once written.
    pub shadow: Option<u64>,
    /// The stream whose queued `cuMemFreeAsync` frees it.
    pub free_queued: Option<u64>,
}

/// Why a pointer reaches no memory a kernel or a copy may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreachable {
    Freed {
        kind: Kind,
        start: u64,
        len: usize,
    },
    Unmapped,
    NotOpened,
    ReservedOnly,
    /// Not the driver's memory at all: host memory, for a copy.
    Foreign,
}

impl fmt::Display for Unreachable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Unreachable::Freed { kind, start, len } => write!(
                f,
                "lies in a freed {} ({len} bytes at {start:#x})",
                kind.what()
            ),
            Unreachable::Unmapped => f.write_str("lies in an unmapped range"),
            Unreachable::NotOpened => f.write_str("is mapped, but cuMemSetAccess never opened it"),
            Unreachable::ReservedOnly => {
                f.write_str("lies in a reservation where nothing is mapped")
            }
            Unreachable::Foreign => f.write_str("is not in any allocation or mapping"),
        }
    }
}

#[derive(Default)]
pub struct AddressSpace {
    live: BTreeMap<u64, Allocation>,
    freed: BTreeMap<u64, Allocation>,
}

/// Page-aligned anonymous memory at an address nothing else holds, zero-filled.
pub fn map_anonymous(len: usize, prot: libc::c_int) -> Option<u64> {
    // SAFETY: a fresh private mapping; no existing memory is touched.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len.max(1),
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p as u64)
}

impl AddressSpace {
    /// A new allocation of `len` bytes, with initcheck's shadow when `initcheck` and it is device
    /// memory; `None` when the host refuses the mapping.
    pub fn allocate(&mut self, len: usize, kind: Kind, initcheck: bool) -> Option<u64> {
        let prot = if kind.host_accessible() {
            libc::PROT_READ | libc::PROT_WRITE
        } else {
            libc::PROT_NONE
        };
        let ptr = map_anonymous(len, prot)?;
        let shadow = if initcheck && kind == Kind::Device {
            let Some(s) = map_anonymous(len, libc::PROT_READ | libc::PROT_WRITE) else {
                // SAFETY: the mapping made just above; nothing refers to it yet.
                unsafe { libc::munmap(ptr as *mut _, len.max(1)) };
                return None;
            };
            Some(s)
        } else {
            None
        };
        self.live.insert(
            ptr,
            Allocation {
                len,
                kind,
                shadow,
                free_queued: None,
            },
        );
        Some(ptr)
    }

    /// Frees the allocation starting exactly at `ptr` and of `kind`; its pages go back to the
    /// host, its addresses stay reserved and inaccessible.
    pub fn free(&mut self, ptr: u64, kind: Kind) -> Option<Allocation> {
        let a = *self.live.get(&ptr).filter(|a| a.kind == kind)?;
        self.live.remove(&ptr);
        // SAFETY: the ranges are our own mappings; nothing may use them any more.
        unsafe {
            libc::mprotect(ptr as *mut _, a.len.max(1), libc::PROT_NONE);
            libc::madvise(ptr as *mut _, a.len.max(1), libc::MADV_DONTNEED);
            if let Some(s) = a.shadow {
                libc::munmap(s as *mut _, a.len.max(1));
            }
        }
        self.freed.insert(ptr, a);
        Some(a)
    }

    /// Marks the allocation at `ptr` as freed by a `cuMemFreeAsync` queued on `stream`.
    pub fn queue_free(&mut self, ptr: u64, stream: u64) {
        if let Some(a) = self.live.get_mut(&ptr) {
            a.free_queued = Some(stream);
        }
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
