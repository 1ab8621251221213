//! The virtual-memory API with the driver's rules: a reservation is address space only; a
//! `cuMemCreate` handle is physical memory (a memfd here); `cuMemMap` puts a handle's memory at
//! an address inside a reservation, inaccessible until `cuMemSetAccess`; `cuMemUnmap` takes it
//! away again (the addresses stay reserved), and a released handle's memory is gone once its last
//! mapping is. Sizes, addresses and offsets are multiples of the granularity; maps may not overlap.

use crate::device::GRANULARITY;
use cudarc::driver::sys::CUresult;
use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

type R<T> = Result<T, CUresult>;
const INVALID: CUresult = CUresult::CUDA_ERROR_INVALID_VALUE;

pub struct Handle {
    memory: OwnedFd,
    pub size: usize,
    pub released: bool,
    pub mappings: u32,
}

#[derive(Debug, Clone, Copy)]
pub struct Mapping {
    pub len: usize,
    pub handle: u64,
    pub accessible: bool,
}

#[derive(Default)]
pub struct Vmm {
    pub reservations: BTreeMap<u64, usize>,
    pub mappings: BTreeMap<u64, Mapping>,
    pub handles: HashMap<u64, Handle>,
    /// Unmapped ranges of live reservations, for error messages.
    pub gone: BTreeMap<u64, (usize, &'static str)>,
    next_handle: u64,
}

fn aligned(x: usize) -> bool {
    x.is_multiple_of(GRANULARITY)
}

/// Inaccessible, unbacked address space at `at` (fixed) or anywhere.
fn reserve_pages(at: Option<u64>, len: usize) -> Option<u64> {
    let fixed = at.map_or(0, |_| libc::MAP_FIXED);
    // SAFETY: PROT_NONE anonymous memory; with MAP_FIXED only over our own reservation.
    let p = unsafe {
        libc::mmap(
            at.unwrap_or(0) as *mut _,
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | fixed,
            -1,
            0,
        )
    };
    (p != libc::MAP_FAILED).then_some(p as u64)
}

impl Vmm {
    pub fn reserve(&mut self, size: usize, alignment: usize) -> R<u64> {
        if size == 0 || !aligned(size) || (alignment != 0 && !alignment.is_power_of_two()) {
            return Err(INVALID);
        }
        let align = alignment.max(GRANULARITY);
        let raw = reserve_pages(None, size + align).ok_or(CUresult::CUDA_ERROR_OUT_OF_MEMORY)?;
        let start = raw.next_multiple_of(align as u64);
        // SAFETY: trimming our own fresh reservation to the aligned range.
        unsafe {
            if start > raw {
                libc::munmap(raw as *mut _, (start - raw) as usize);
            }
            let end = start + size as u64;
            let raw_end = raw + (size + align) as u64;
            if raw_end > end {
                libc::munmap(end as *mut _, (raw_end - end) as usize);
            }
        }
        self.reservations.insert(start, size);
        Ok(start)
    }

    fn mappings_in(&self, ptr: u64, size: usize) -> impl Iterator<Item = (u64, Mapping)> + '_ {
        let end = ptr + size as u64;
        // A mapping starting before `ptr` may reach into the range.
        let first = self
            .mappings
            .range(..ptr)
            .next_back()
            .filter(|(&s, m)| s + m.len as u64 > ptr)
            .map(|(&s, _)| s)
            .unwrap_or(ptr);
        self.mappings.range(first..end).map(|(&s, &m)| (s, m))
    }

    pub fn address_free(&mut self, ptr: u64, size: usize) -> R<()> {
        if self.reservations.get(&ptr) != Some(&size) {
            return Err(INVALID);
        }
        if self.mappings_in(ptr, size).next().is_some() {
            // The driver leaves a mapped range's fate undefined; refusing shows the bug.
            return Err(INVALID);
        }
        self.reservations.remove(&ptr);
        // SAFETY: our reservation, with nothing mapped in it.
        unsafe { libc::munmap(ptr as *mut _, size) };
        // The addresses go back to the host, which may reuse them for its own memory: forget
        // them, or a host buffer there would pass for device memory.
        let end = ptr + size as u64;
        self.gone.retain(|&s, _| s < ptr || s >= end);
        Ok(())
    }

    pub fn create(&mut self, size: usize) -> R<u64> {
        if size == 0 || !aligned(size) {
            return Err(INVALID);
        }
        // SAFETY: memfd_create with a constant name; the fd is owned below.
        let fd =
            unsafe { libc::memfd_create(c"pagedkv-emu-device-memory".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        }
        // SAFETY: a fresh descriptor we own.
        let memory = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sizing our own memfd.
        if unsafe { libc::ftruncate(memory.as_raw_fd(), size as libc::off_t) } != 0 {
            return Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        }
        self.next_handle += 1;
        let id = 0x4a4e_0000_0000 + self.next_handle;
        self.handles.insert(
            id,
            Handle {
                memory,
                size,
                released: false,
                mappings: 0,
            },
        );
        Ok(id)
    }

    /// Releases a handle; the bytes whose memory is gone now (none while it is still mapped).
    pub fn release(&mut self, handle: u64) -> R<usize> {
        let h = self
            .handles
            .get_mut(&handle)
            .filter(|h| !h.released)
            .ok_or(INVALID)?;
        h.released = true;
        Ok(self.drop_if_unused(handle))
    }

    fn drop_if_unused(&mut self, handle: u64) -> usize {
        match self.handles.get(&handle) {
            Some(h) if h.released && h.mappings == 0 => {
                let size = h.size;
                self.handles.remove(&handle);
                size
            }
            _ => 0,
        }
    }

    pub fn map(&mut self, ptr: u64, size: usize, offset: usize, handle: u64) -> R<()> {
        if size == 0 || !aligned(size) || !aligned(offset) || !aligned(ptr as usize) {
            return Err(INVALID);
        }
        let h = self
            .handles
            .get(&handle)
            .filter(|h| !h.released)
            .ok_or(INVALID)?;
        if offset.checked_add(size).is_none_or(|e| e > h.size) {
            return Err(INVALID);
        }
        let inside = self
            .reservations
            .range(..=ptr)
            .next_back()
            .is_some_and(|(&s, &len)| ptr + size as u64 <= s + len as u64);
        if !inside {
            return Err(INVALID);
        }
        if self.mappings_in(ptr, size).next().is_some() {
            return Err(CUresult::CUDA_ERROR_ALREADY_MAPPED);
        }
        // SAFETY: replaces part of our own PROT_NONE reservation with the handle's memory, still
        // inaccessible until cuMemSetAccess.
        let p = unsafe {
            libc::mmap(
                ptr as *mut _,
                size,
                libc::PROT_NONE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                h.memory.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        }
        self.handles.get_mut(&handle).expect("checked").mappings += 1;
        self.mappings.insert(
            ptr,
            Mapping {
                len: size,
                handle,
                accessible: false,
            },
        );
        self.gone.remove(&ptr);
        Ok(())
    }

    /// Grants read-write access to every mapping in the range, which must be mapped throughout.
    pub fn set_access(&mut self, ptr: u64, size: usize) -> R<()> {
        let mut at = ptr;
        let end = ptr + size as u64;
        let mut starts = Vec::new();
        for (s, m) in self.mappings_in(ptr, size) {
            if s > at {
                return Err(INVALID); // a hole
            }
            starts.push(s);
            at = at.max(s + m.len as u64);
        }
        if size == 0 || at < end {
            return Err(INVALID);
        }
        // SAFETY: the range lies in our own mappings (checked above).
        if unsafe { libc::mprotect(ptr as *mut _, size, libc::PROT_READ | libc::PROT_WRITE) } != 0 {
            return Err(INVALID);
        }
        for s in starts {
            self.mappings.get_mut(&s).expect("found above").accessible = true;
        }
        Ok(())
    }

    /// Unmaps the whole mappings that make up the range; the bytes whose memory is gone now.
    pub fn unmap(&mut self, ptr: u64, size: usize) -> R<usize> {
        let found: Vec<(u64, Mapping)> = self.mappings_in(ptr, size).collect();
        let end = ptr + size as u64;
        let exact = !found.is_empty()
            && found[0].0 == ptr
            && found
                .windows(2)
                .all(|w| w[0].0 + w[0].1.len as u64 == w[1].0)
            && found.last().is_some_and(|(s, m)| s + m.len as u64 == end);
        if !exact {
            return Err(INVALID);
        }
        reserve_pages(Some(ptr), size).ok_or(CUresult::CUDA_ERROR_UNKNOWN)?;
        let mut freed = 0;
        for (s, m) in found {
            self.mappings.remove(&s);
            self.gone.insert(s, (m.len, "an unmapped range"));
            if let Some(h) = self.handles.get_mut(&m.handle) {
                h.mappings -= 1;
            }
            freed += self.drop_if_unused(m.handle);
        }
        Ok(freed)
    }

    /// The end of the accessible mapped run holding `ptr` (adjacent accessible mappings join),
    /// or why there is none.
    pub fn extent(&self, ptr: u64) -> Result<u64, String> {
        let Some((&start, m)) = self.mappings.range(..=ptr).next_back() else {
            return Err(self.why_not(ptr));
        };
        if ptr >= start + m.len as u64 {
            return Err(self.why_not(ptr));
        }
        if !m.accessible {
            return Err("is mapped, but cuMemSetAccess never opened it".into());
        }
        let mut end = start + m.len as u64;
        while let Some(next) = self.mappings.get(&end).filter(|n| n.accessible) {
            end += next.len as u64;
        }
        Ok(end)
    }

    fn why_not(&self, ptr: u64) -> String {
        if let Some((&s, &(len, what))) = self.gone.range(..=ptr).next_back() {
            if ptr < s + len as u64 {
                return format!("lies in {what}");
            }
        }
        let reserved = self
            .reservations
            .range(..=ptr)
            .next_back()
            .is_some_and(|(&s, &len)| ptr < s + len as u64);
        if reserved {
            "lies in a reservation where nothing is mapped".into()
        } else {
            "is not in any allocation or mapping".into()
        }
    }

    /// Physical bytes held by handles (released or not) that still exist.
    pub fn physical_bytes(&self) -> usize {
        self.handles.values().map(|h| h.size).sum()
    }
}
