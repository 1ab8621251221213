//! Anonymous memory mappings for the labs, with guard pages on both sides.
//!
//! The kernel merges neighbouring anonymous mappings with equal flags into one region, and a lab
//! reading its mapping's line of /proc/self/smaps would then count the allocator's pages too. A
//! `PROT_NONE` guard on each side keeps the mapping a region of its own.

use std::io;

/// An anonymous mapping of `len` bytes, unmapped on drop.
pub struct Mapping {
    /// The reservation including the guards.
    base: *mut u8,
    total: usize,
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value.
unsafe impl Send for Mapping {}
// SAFETY: shared access only hands out raw pointers; writers synchronise themselves.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes read-write at an address aligned to `align` (a power of two, at least a
    /// page). `flags` must hold `MAP_PRIVATE` or `MAP_SHARED` and may add `MAP_POPULATE`,
    /// `MAP_NORESERVE`; `MAP_ANONYMOUS | MAP_FIXED` are added here.
    pub fn anonymous(len: usize, align: usize, flags: libc::c_int) -> io::Result<Mapping> {
        let page = super::machine::page_bytes();
        let align = align.max(page);
        if len == 0 || !align.is_power_of_two() {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        let len = len.next_multiple_of(page);
        let total = len
            .checked_add(align)
            .and_then(|t| t.checked_add(2 * page))
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        // SAFETY: a fresh inaccessible reservation; nothing is mapped over.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = base.cast::<u8>();
        let start = (base as usize + page).next_multiple_of(align);
        // SAFETY: [start, start + len) lies inside the reservation, at least a page from each end.
        let ptr = unsafe {
            libc::mmap(
                start as *mut libc::c_void,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            // SAFETY: the reservation is ours.
            unsafe { libc::munmap(base.cast(), total) };
            return Err(e);
        }
        Ok(Mapping {
            base,
            total,
            ptr: ptr.cast(),
            len,
        })
    }

    /// `madvise(advice)` over the whole mapping.
    pub fn advise(&self, advice: libc::c_int) -> io::Result<()> {
        // SAFETY: the range is this mapping.
        if unsafe { libc::madvise(self.ptr.cast(), self.len, advice) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes `value` into the first byte of every `stride`-th byte of `[0, bytes)`.
    pub fn write_every(&self, bytes: usize, stride: usize, value: u8) {
        write_every(self.ptr, bytes.min(self.len), stride, value);
    }

    /// Reads the first byte of every `stride`-th byte of `[0, bytes)`; their wrapping sum.
    pub fn read_every(&self, bytes: usize, stride: usize) -> u64 {
        read_every(self.ptr, bytes.min(self.len), stride)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the reservation (guards and mapping) is ours and unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.total) };
    }
}

/// Volatile writes, one per `stride` bytes: each is a real store the compiler cannot merge or
/// drop, so each page written is a page touched. The caller guarantees `[ptr, ptr + bytes)` is
/// writable memory.
pub(crate) fn write_every(ptr: *mut u8, bytes: usize, stride: usize, value: u8) {
    for off in (0..bytes).step_by(stride.max(1)) {
        // SAFETY: `off < bytes` inside the caller's writable range.
        unsafe { std::ptr::write_volatile(ptr.add(off), value) };
    }
}

/// Volatile reads, one per `stride` bytes, summed. The caller guarantees `[ptr, ptr + bytes)` is
/// readable memory.
pub(crate) fn read_every(ptr: *const u8, bytes: usize, stride: usize) -> u64 {
    let mut sum = 0u64;
    for off in (0..bytes).step_by(stride.max(1)) {
        // SAFETY: `off < bytes` inside the caller's readable range.
        sum = sum.wrapping_add(u64::from(unsafe { std::ptr::read_volatile(ptr.add(off)) }));
    }
    sum
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_private_mapping_reads_back() {
        let m = Mapping::anonymous(3 * 4096 + 5, 2 << 20, libc::MAP_PRIVATE).unwrap();
        assert_eq!(m.addr() % (2 << 20), 0);
        assert_eq!(m.len() % 4096, 0);
        assert!(m.len() >= 3 * 4096 + 5);
        assert_eq!(
            m.read_every(m.len(), 4096),
            0,
            "fresh anonymous memory is zero"
        );
        m.write_every(m.len(), 4096, 7);
        assert_eq!(m.read_every(m.len(), 4096), 7 * (m.len() / 4096) as u64);
    }

    #[test]
    fn the_mapping_is_a_region_of_its_own() {
        let m = Mapping::anonymous(64 << 10, 4096, libc::MAP_PRIVATE).unwrap();
        let regions = crate::vmm::memstat::regions_in(m.addr() as u64, m.len());
        assert_eq!(regions.len(), 1, "{regions:?}");
        assert_eq!(regions[0].start, m.addr() as u64);
        assert_eq!(regions[0].end, (m.addr() + m.len()) as u64);
    }

    #[test]
    fn zero_length_and_bad_alignment_are_refused() {
        assert!(Mapping::anonymous(0, 4096, libc::MAP_PRIVATE).is_err());
        assert!(Mapping::anonymous(4096, 3 << 12, libc::MAP_PRIVATE).is_err());
    }
}
