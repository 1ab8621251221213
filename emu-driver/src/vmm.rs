//! The virtual-memory API with the driver's rules: a reservation is address space only; a
//! `cuMemCreate` handle is physical memory (a memfd here); `cuMemMap` puts a handle's memory at
//! an address inside a reservation, inaccessible until `cuMemSetAccess`; `cuMemUnmap` takes it
//! away again (the addresses stay reserved), and a released handle's memory is gone once its last
//! mapping is. Sizes, addresses and offsets are multiples of the granularity; maps may not overlap;
//! `cuMemSetAccess` and `cuMemUnmap` take whole mappings ("The range must be a fully mapped address
//! range containing all allocations created by cuMemMap / cuMemCreate", "cuMemUnmap cannot unmap a
//! sub-range of an address range mapped by cuMemCreate / cuMemMap": the driver API reference).
//! Mapped memory stays inaccessible to host code even after `cuMemSetAccess`, as device memory
//! is on a GPU: the driver opens it only while it copies or runs a kernel (`access.rs`).
//!
//! initcheck: a reservation made while `PAGEDKV_EMU_INITCHECK=1` has a shadow reservation of the
//! same size, and a handle created then a shadow memfd (one byte per byte, non-zero once
//! written); mapping a handle maps its shadow at the same offset of the shadow reservation, so a
//! run of adjacent mappings has one contiguous shadow, and two mappings of one handle share it.

use crate::device::GRANULARITY;
use crate::errors::{Failure, R};
use crate::memory::Unreachable;
use cudarc::driver::sys::CUresult;
use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub struct Handle {
    memory: OwnedFd,
    shadow: Option<OwnedFd>,
    pub size: usize,
    pub released: bool,
    pub mappings: u32,
}

pub struct Reservation {
    pub len: usize,
    shadow: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
pub struct Mapping {
    pub len: usize,
    pub handle: u64,
    pub accessible: bool,
    /// Its shadow is mapped (both the reservation and the handle have one).
    tracked: bool,
}

#[derive(Default)]
pub struct Vmm {
    pub reservations: BTreeMap<u64, Reservation>,
    pub mappings: BTreeMap<u64, Mapping>,
    pub handles: HashMap<u64, Handle>,
    /// Unmapped ranges of live reservations, for error messages.
    gone: BTreeMap<u64, usize>,
    next_handle: u64,
}

fn aligned(x: u64) -> bool {
    x.is_multiple_of(GRANULARITY as u64)
}

fn mib(bytes: usize) -> String {
    format!("{} MiB", bytes >> 20)
}

/// `[ptr, ptr + size)`'s end, or a refusal when it wraps around the address space.
fn end_of(ptr: u64, size: usize) -> R<u64> {
    ptr.checked_add(size as u64).ok_or_else(|| {
        Failure::invalid(format!(
            "{ptr:#x} + {size} bytes runs past the end of the address space"
        ))
    })
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

/// `len` bytes of `fd` from `offset`, at the fixed address `at`, with `prot`.
fn map_fd(at: u64, len: usize, prot: libc::c_int, fd: &OwnedFd, offset: usize) -> bool {
    // SAFETY: replaces part of our own reservation with the memfd's pages.
    let p = unsafe {
        libc::mmap(
            at as *mut _,
            len,
            prot,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd.as_raw_fd(),
            offset as libc::off_t,
        )
    };
    p != libc::MAP_FAILED
}

/// A fresh memfd of `size` zero bytes.
fn memfd(size: usize) -> Option<OwnedFd> {
    // SAFETY: memfd_create with a constant name; the fd is owned below.
    let fd =
        unsafe { libc::memfd_create(c"pagedkv-emu-device-memory".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    // SAFETY: a fresh descriptor we own.
    let memory = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: sizing our own memfd.
    (unsafe { libc::ftruncate(memory.as_raw_fd(), size as libc::off_t) } == 0).then_some(memory)
}

/// Inaccessible address space of `size` bytes aligned to `align` (a power of two).
fn reserve_aligned(size: usize, align: usize) -> Option<u64> {
    let padded = size.checked_add(align)?;
    let raw = reserve_pages(None, padded)?;
    let start = raw.next_multiple_of(align as u64);
    let end = start + size as u64;
    let raw_end = raw + padded as u64;
    // SAFETY: trimming our own fresh reservation to the aligned range.
    unsafe {
        if start > raw {
            libc::munmap(raw as *mut _, (start - raw) as usize);
        }
        if raw_end > end {
            libc::munmap(end as *mut _, (raw_end - end) as usize);
        }
    }
    Some(start)
}

impl Vmm {
    pub fn reserve(&mut self, size: usize, alignment: usize, initcheck: bool) -> R<u64> {
        if size == 0 || !aligned(size as u64) {
            return Err(Failure::invalid(format!(
                "size {size} is not a positive multiple of the granularity ({})",
                mib(GRANULARITY)
            )));
        }
        if alignment != 0 && !alignment.is_power_of_two() {
            return Err(Failure::invalid(format!(
                "alignment {alignment} is not a power of two"
            )));
        }
        let out_of_memory = || {
            Failure::new(
                CUresult::CUDA_ERROR_OUT_OF_MEMORY,
                format!("the host has no {size} bytes of address space to reserve"),
            )
        };
        let start = reserve_aligned(size, alignment.max(GRANULARITY)).ok_or_else(out_of_memory)?;
        let shadow = if initcheck {
            let Some(s) = reserve_pages(None, size) else {
                // SAFETY: the reservation made just above.
                unsafe { libc::munmap(start as *mut _, size) };
                return Err(out_of_memory());
            };
            Some(s)
        } else {
            None
        };
        self.reservations
            .insert(start, Reservation { len: size, shadow });
        Ok(start)
    }

    fn mappings_in(&self, ptr: u64, end: u64) -> impl Iterator<Item = (u64, Mapping)> + '_ {
        // A mapping starting before `ptr` may reach into the range.
        let first = self
            .mappings
            .range(..ptr)
            .next_back()
            .filter(|(&s, m)| s + m.len as u64 > ptr)
            .map(|(&s, _)| s)
            .unwrap_or(ptr);
        self.mappings
            .range(first..end.max(first))
            .map(|(&s, &m)| (s, m))
    }

    /// The reservation holding `ptr`: its start and itself.
    fn reservation_of(&self, ptr: u64) -> Option<(u64, &Reservation)> {
        let (&s, r) = self.reservations.range(..=ptr).next_back()?;
        (ptr < s + r.len as u64).then_some((s, r))
    }

    pub fn address_free(&mut self, ptr: u64, size: usize) -> R<()> {
        match self.reservations.get(&ptr) {
            Some(r) if r.len == size => {}
            Some(r) => {
                return Err(Failure::invalid(format!(
                    "the reservation at {ptr:#x} has {} bytes, not {size}",
                    r.len
                )))
            }
            None => {
                return Err(Failure::invalid(format!(
                    "{ptr:#x} is not the start of a reservation"
                )))
            }
        }
        let end = end_of(ptr, size)?;
        if let Some((s, m)) = self.mappings_in(ptr, end).next() {
            // The driver leaves a mapped range's fate undefined; refusing shows the bug.
            return Err(Failure::invalid(format!(
                "the reservation still has {} bytes mapped at {s:#x}: unmap them first",
                m.len
            )));
        }
        let r = self.reservations.remove(&ptr).expect("checked above");
        // SAFETY: our reservation (and its shadow), with nothing mapped in it.
        unsafe {
            libc::munmap(ptr as *mut _, size);
            if let Some(s) = r.shadow {
                libc::munmap(s as *mut _, size);
            }
        }
        // The addresses go back to the host, which may reuse them for its own memory: forget
        // them, or a host buffer there would pass for device memory.
        self.gone.retain(|&s, _| s < ptr || s >= end);
        Ok(())
    }

    pub fn create(&mut self, size: usize, initcheck: bool) -> R<u64> {
        if size == 0 || !aligned(size as u64) {
            return Err(Failure::invalid(format!(
                "size {size} is not a positive multiple of the granularity ({})",
                mib(GRANULARITY)
            )));
        }
        let out_of_memory = || {
            Failure::new(
                CUresult::CUDA_ERROR_OUT_OF_MEMORY,
                format!("the host refused a memfd of {size} bytes"),
            )
        };
        let memory = memfd(size).ok_or_else(out_of_memory)?;
        let shadow = if initcheck {
            Some(memfd(size).ok_or_else(out_of_memory)?)
        } else {
            None
        };
        self.next_handle += 1;
        let id = 0x4a4e_0000_0000 + self.next_handle;
        self.handles.insert(
            id,
            Handle {
                memory,
                shadow,
                size,
                released: false,
                mappings: 0,
            },
        );
        Ok(id)
    }

    fn live_handle(&self, handle: u64) -> R<&Handle> {
        self.handles
            .get(&handle)
            .filter(|h| !h.released)
            .ok_or_else(|| {
                Failure::invalid(format!(
                    "{handle:#x} is not a live cuMemCreate handle (never created, or released)"
                ))
            })
    }

    /// Releases a handle; the bytes whose memory is gone now (none while it is still mapped).
    pub fn release(&mut self, handle: u64) -> R<usize> {
        self.live_handle(handle)?;
        self.handles.get_mut(&handle).expect("checked").released = true;
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
        for (what, value) in [
            ("address", ptr),
            ("size", size as u64),
            ("offset", offset as u64),
        ] {
            if !aligned(value) {
                return Err(Failure::invalid(format!(
                    "{what} {value:#x} is not a multiple of the granularity ({})",
                    mib(GRANULARITY)
                )));
            }
        }
        if size == 0 {
            return Err(Failure::invalid("size 0"));
        }
        let end = end_of(ptr, size)?;
        let h = self.live_handle(handle)?;
        if offset.checked_add(size).is_none_or(|e| e > h.size) {
            return Err(Failure::invalid(format!(
                "{size} bytes from offset {offset} run past the handle's {} bytes",
                h.size
            )));
        }
        let Some((res_start, res)) = self
            .reservation_of(ptr)
            .filter(|(s, r)| end <= s + r.len as u64)
        else {
            return Err(Failure::invalid(format!(
                "[{ptr:#x}, {end:#x}) is not inside one reservation"
            )));
        };
        if let Some((s, m)) = self.mappings_in(ptr, end).next() {
            return Err(Failure::new(
                CUresult::CUDA_ERROR_ALREADY_MAPPED,
                format!(
                    "[{ptr:#x}, {end:#x}) overlaps the mapping of {} bytes at {s:#x}",
                    m.len
                ),
            ));
        }
        // Inaccessible until cuMemSetAccess (and to host code for good).
        if !map_fd(ptr, size, libc::PROT_NONE, &h.memory, offset) {
            return Err(Failure::new(
                CUresult::CUDA_ERROR_OUT_OF_MEMORY,
                "the host refused the mapping",
            ));
        }
        let shadow_at = res.shadow.map(|s| s + (ptr - res_start));
        let tracked = match (shadow_at, &h.shadow) {
            (Some(at), Some(fd)) => {
                map_fd(at, size, libc::PROT_READ | libc::PROT_WRITE, fd, offset)
            }
            _ => false,
        };
        self.handles.get_mut(&handle).expect("checked").mappings += 1;
        self.mappings.insert(
            ptr,
            Mapping {
                len: size,
                handle,
                accessible: false,
                tracked,
            },
        );
        self.gone.remove(&ptr);
        Ok(())
    }

    /// The mappings that make up `[ptr, ptr + size)` exactly, first to last, or why the range is
    /// not a whole number of adjacent mappings.
    fn whole_mappings(&self, ptr: u64, size: usize) -> R<Vec<(u64, Mapping)>> {
        if size == 0 {
            return Err(Failure::invalid("size 0"));
        }
        let end = end_of(ptr, size)?;
        let found: Vec<(u64, Mapping)> = self.mappings_in(ptr, end).collect();
        let mut at = ptr;
        for &(s, m) in &found {
            if s != at {
                let why = if s < at {
                    format!(
                        "{at:#x} is inside the mapping at {s:#x} ({} bytes), not at its start",
                        m.len
                    )
                } else {
                    format!("nothing is mapped at {at:#x}")
                };
                return Err(Failure::invalid(format!(
                    "[{ptr:#x}, {end:#x}) is not whole mappings: {why}"
                )));
            }
            at = s + m.len as u64;
        }
        if at != end {
            let why = match found.last() {
                Some(&(s, m)) if at > end => {
                    format!("it ends inside the mapping at {s:#x} ({} bytes)", m.len)
                }
                _ => format!("nothing is mapped at {at:#x}"),
            };
            return Err(Failure::invalid(format!(
                "[{ptr:#x}, {end:#x}) is not whole mappings: {why}"
            )));
        }
        Ok(found)
    }

    /// Grants the device read-write access to the whole mappings that make up the range.
    pub fn set_access(&mut self, ptr: u64, size: usize) -> R<()> {
        for (s, _) in self.whole_mappings(ptr, size)? {
            self.mappings.get_mut(&s).expect("found above").accessible = true;
        }
        Ok(())
    }

    /// The whole mappings that make up the range, as `cuMemUnmap` would take them.
    pub fn unmappable(&self, ptr: u64, size: usize) -> R<Vec<u64>> {
        Ok(self
            .whole_mappings(ptr, size)?
            .into_iter()
            .map(|(s, _)| s)
            .collect())
    }

    /// Unmaps the whole mappings that make up the range; the bytes whose memory is gone now.
    pub fn unmap(&mut self, ptr: u64, size: usize) -> R<usize> {
        let found = self.whole_mappings(ptr, size)?;
        let shadow = self
            .reservation_of(ptr)
            .and_then(|(s, r)| Some(r.shadow? + (ptr - s)));
        reserve_pages(Some(ptr), size).ok_or_else(|| {
            Failure::new(
                CUresult::CUDA_ERROR_UNKNOWN,
                "the host refused to turn the range back into a reservation",
            )
        })?;
        if let Some(s) = shadow {
            reserve_pages(Some(s), size);
        }
        let mut freed = 0;
        for (s, m) in found {
            self.mappings.remove(&s);
            self.gone.insert(s, m.len);
            if let Some(h) = self.handles.get_mut(&m.handle) {
                h.mappings -= 1;
            }
            freed += self.drop_if_unused(m.handle);
        }
        Ok(freed)
    }

    /// The starts of the mappings that overlap `[ptr, end)`.
    pub fn mapping_starts(&self, ptr: u64, end: u64) -> Vec<u64> {
        self.mappings_in(ptr, end).map(|(s, _)| s).collect()
    }

    /// The mapping holding `ptr`: its start and itself.
    pub fn mapping_of(&self, ptr: u64) -> Option<(u64, Mapping)> {
        let (&start, &m) = self.mappings.range(..=ptr).next_back()?;
        (ptr < start + m.len as u64).then_some((start, m))
    }

    /// The end of the accessible mapped run holding `ptr` (adjacent accessible mappings join),
    /// or why there is none.
    pub fn extent(&self, ptr: u64) -> Result<u64, Unreachable> {
        let Some((start, m)) = self.mapping_of(ptr) else {
            return Err(self.why_not(ptr));
        };
        if !m.accessible {
            return Err(Unreachable::NotOpened);
        }
        let mut end = start + m.len as u64;
        while let Some(next) = self.mappings.get(&end).filter(|n| n.accessible) {
            end += next.len as u64;
        }
        Ok(end)
    }

    fn why_not(&self, ptr: u64) -> Unreachable {
        if let Some((&s, &len)) = self.gone.range(..=ptr).next_back() {
            if ptr < s + len as u64 {
                return Unreachable::Unmapped;
            }
        }
        if self.reservation_of(ptr).is_some() {
            Unreachable::ReservedOnly
        } else {
            Unreachable::Foreign
        }
    }

    /// initcheck's shadow of `[ptr, end)`: one contiguous run of bytes when every mapping in the
    /// range is tracked and they share one reservation, else `None` (untracked).
    pub fn shadow(&self, ptr: u64, end: u64) -> Option<*mut u8> {
        let (res_start, res) = self.reservation_of(ptr)?;
        if end > res_start + res.len as u64 {
            return None;
        }
        let mut at = ptr;
        for (s, m) in self.mappings_in(ptr, end) {
            if s > at || !m.tracked {
                return None;
            }
            at = s + m.len as u64;
        }
        if at < end {
            return None;
        }
        Some((res.shadow? + (ptr - res_start)) as *mut u8)
    }

    /// Physical bytes held by handles (released or not) that still exist.
    pub fn physical_bytes(&self) -> usize {
        self.handles.values().map(|h| h.size).sum()
    }
}
