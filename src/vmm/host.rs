//! The CPU twin of the CUDA pool: an `mmap(PROT_NONE)` reservation (the `cuMemAddressReserve`),
//! one memfd per chunk (the `cuMemCreate` handle) mapped over its part of the reservation with
//! `MAP_FIXED | MAP_SHARED` (the `cuMemMap`). Releasing a chunk puts a fresh `PROT_NONE` mapping
//! over it — atomically, so the range never becomes free for another `mmap` to take — and closes
//! the memfd, which frees its pages: resident memory really drops.
//!
//! The reservation and its chunks are mapped with libc: memmap2 does not map over a reservation
//! (`MAP_FIXED`). The offload buffer ([`HostBuffer`]) is a plain anonymous mapping: memmap2's.

use super::{Backing, ChunkLayout, VmmError};
use memmap2::{Advice, MmapMut};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub struct HostBacking {
    layout: ChunkLayout,
    base: *mut u8,
    /// The memfd behind each mapped chunk; `None` while the chunk is released.
    chunks: Vec<Option<OwnedFd>>,
}

// SAFETY: the backing owns its mappings exclusively; the raw pointer is only an address.
unsafe impl Send for HostBacking {}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

impl HostBacking {
    /// Reserves `size` bytes (rounded up to the page size) cut into chunks of `chunk` bytes; no
    /// chunk is mapped yet (see [`super::SleepPool::new`]).
    pub fn reserve(size: usize, chunk: Option<usize>) -> Result<Self, VmmError> {
        let layout = ChunkLayout::new(size, chunk, page_size())?;
        // SAFETY: a fresh anonymous mapping at an address of the kernel's choosing.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.size,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(VmmError::os("mmap(PROT_NONE) reservation"));
        }
        Ok(HostBacking {
            layout,
            base: base.cast(),
            chunks: (0..layout.count()).map(|_| None).collect(),
        })
    }

    /// The whole pool as bytes; `None` unless every chunk is mapped.
    pub fn as_slice(&self) -> Option<&[u8]> {
        self.all_mapped()
            // SAFETY: every page of the range is mapped read-write and owned by `self`.
            .then(|| unsafe { std::slice::from_raw_parts(self.base, self.layout.size) })
    }

    pub fn as_mut_slice(&mut self) -> Option<&mut [u8]> {
        self.all_mapped()
            // SAFETY: as above, and `&mut self` makes the access exclusive.
            .then(|| unsafe { std::slice::from_raw_parts_mut(self.base, self.layout.size) })
    }

    fn all_mapped(&self) -> bool {
        self.chunks.iter().all(Option::is_some)
    }

    fn chunk_ptr(&self, i: usize) -> (*mut libc::c_void, usize) {
        let (offset, len) = self.layout.range(i);
        // SAFETY: offset < layout.size, inside the reservation.
        (unsafe { self.base.add(offset) }.cast(), len)
    }

    fn check_mapped(&self, offset: usize, len: usize) -> Result<(), VmmError> {
        let chunks = self.layout.chunks_of(offset, len)?;
        if self.chunks[chunks].iter().all(Option::is_some) {
            Ok(())
        } else {
            Err(VmmError::Asleep(super::PoolState::AsleepDiscarded))
        }
    }
}

impl Backing for HostBacking {
    type HostBuffer = HostBuffer;

    fn layout(&self) -> &ChunkLayout {
        &self.layout
    }

    fn base_address(&self) -> u64 {
        self.base as u64
    }

    fn map_chunk(&mut self, i: usize) -> Result<(), VmmError> {
        if self.chunks[i].is_some() {
            return Ok(());
        }
        let (addr, len) = self.chunk_ptr(i);
        // SAFETY: the name is a valid C string; flags are plain constants.
        let raw = unsafe { libc::memfd_create(c"pagedkv-pool".as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(VmmError::os("memfd_create"));
        }
        // SAFETY: `raw` is a fresh descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: resizing a file we own.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(VmmError::os("ftruncate(memfd)"));
        }
        // SAFETY: MAP_FIXED over our own PROT_NONE reservation, replacing nothing else.
        let mapped = unsafe {
            libc::mmap(
                addr,
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd.as_raw_fd(),
                0,
            )
        };
        if mapped == libc::MAP_FAILED {
            return Err(VmmError::os("mmap(MAP_FIXED, memfd)"));
        }
        // Allocate the pages now, as cuMemCreate does, so wake pays for its memory and resident
        // memory comes back at wake. MAP_POPULATE would map shared pages read-only, and the
        // restore would then take one write fault per 4 KiB page; populating for write does not.
        populate_for_write(mapped, len)?;
        self.chunks[i] = Some(fd);
        Ok(())
    }

    fn unmap_chunk(&mut self, i: usize) -> Result<(), VmmError> {
        if self.chunks[i].is_none() {
            return Ok(());
        }
        let (addr, len) = self.chunk_ptr(i);
        // SAFETY: replaces our own mapping of chunk i with an inaccessible one, keeping the range.
        let mapped = unsafe {
            libc::mmap(
                addr,
                len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if mapped == libc::MAP_FAILED {
            return Err(VmmError::os("mmap(MAP_FIXED, PROT_NONE)"));
        }
        // Closing the last reference to the memfd frees its pages.
        self.chunks[i] = None;
        Ok(())
    }

    fn synchronize(&self) -> Result<(), VmmError> {
        // CPU work on the pool is synchronous: nothing can be outstanding.
        Ok(())
    }

    fn alloc_host(&self, len: usize) -> Result<HostBuffer, VmmError> {
        HostBuffer::new(len)
    }

    fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<(), VmmError> {
        self.check_mapped(offset, dst.len())?;
        // SAFETY: the range is inside the reservation and mapped (checked above).
        let src = unsafe { std::slice::from_raw_parts(self.base.add(offset), dst.len()) };
        dst.copy_from_slice(src);
        Ok(())
    }

    fn copy_from_host(&mut self, offset: usize, src: &[u8]) -> Result<(), VmmError> {
        self.check_mapped(offset, src.len())?;
        // SAFETY: as above; `&mut self` makes the write exclusive.
        let dst = unsafe { std::slice::from_raw_parts_mut(self.base.add(offset), src.len()) };
        dst.copy_from_slice(src);
        Ok(())
    }
}

/// Faults in every page of `addr..addr + len` writable (see [`populate`]).
fn populate_for_write(addr: *mut libc::c_void, len: usize) -> Result<(), VmmError> {
    // SAFETY: `addr..addr + len` is a mapping we just created.
    let advised = if unsafe { libc::madvise(addr, len, libc::MADV_POPULATE_WRITE) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    };
    // SAFETY: the fresh mapping is readable and writable, zero-filled, and nothing else refers to it.
    populate(advised, unsafe {
        std::slice::from_raw_parts_mut(addr.cast(), len)
    })
}

/// Completes MADV_POPULATE_WRITE on `bytes` (Linux 5.14+): older kernels refuse it as unknown
/// (EINVAL) and get one write per page instead, which the zero-filled pages tolerate.
fn populate(advised: std::io::Result<()>, bytes: &mut [u8]) -> Result<(), VmmError> {
    match advised {
        Ok(()) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            for byte in bytes.iter_mut().step_by(page_size()) {
                // Volatile: writing the zero the page holds must still reach it, to allocate it.
                // SAFETY: a valid, exclusively borrowed byte.
                unsafe { std::ptr::write_volatile(byte, 0) };
            }
            Ok(())
        }
        Err(source) => Err(VmmError::Os {
            op: "madvise(MADV_POPULATE_WRITE)",
            source,
        }),
    }
}

impl Drop for HostBacking {
    fn drop(&mut self) {
        // Unmapping the whole reservation drops every chunk mapping too; the memfds close after.
        // SAFETY: the range is ours and nothing refers to it once the backing is dropped.
        unsafe { libc::munmap(self.base.cast(), self.layout.size) };
    }
}

/// The offload buffer of the CPU twin: anonymous memory populated at allocation, as pinned
/// memory is, so the copy into it is a plain copy and the cost of getting the pages shows apart,
/// as allocation time. Transparent huge pages are asked for (madvise) because that allocation
/// otherwise costs one page fault per 4 KiB.
pub struct HostBuffer {
    map: MmapMut,
}

impl HostBuffer {
    pub fn new(len: usize) -> Result<Self, VmmError> {
        let os = |op| move |source| VmmError::Os { op, source };
        let mut map = MmapMut::map_anon(len).map_err(os("mmap(offload buffer)"))?;
        // Refusal (THP off) only costs speed.
        let _ = map.advise(Advice::HugePage);
        let advised = map.advise(Advice::PopulateWrite);
        populate(advised, &mut map)?;
        Ok(HostBuffer { map })
    }
}

impl AsRef<[u8]> for HostBuffer {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

impl AsMut<[u8]> for HostBuffer {
    fn as_mut(&mut self) -> &mut [u8] {
        &mut self.map
    }
}

/// A CPU pool: the state machine over the CPU twin.
pub type CpuPool = super::SleepPool<HostBacking>;

impl CpuPool {
    /// Reserves and maps a CPU pool of `size` bytes in chunks of `chunk` bytes (one chunk when
    /// `None`).
    pub fn create(size: usize, chunk: Option<usize>) -> Result<Self, VmmError> {
        super::SleepPool::new(HostBacking::reserve(size, chunk)?)
    }

    /// The pool's bytes; an error while asleep.
    pub fn as_slice(&self) -> Result<&[u8], VmmError> {
        self.ptr()?;
        self.backing()
            .as_slice()
            .ok_or(VmmError::Asleep(self.state()))
    }

    pub fn as_mut_slice(&mut self) -> Result<&mut [u8], VmmError> {
        self.backing_mut()?
            .as_mut_slice()
            .ok_or(VmmError::Asleep(super::PoolState::AsleepDiscarded))
    }
}
