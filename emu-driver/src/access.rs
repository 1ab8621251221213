//! How the driver itself touches device memory. Device memory (allocations and mapped ranges) is
//! inaccessible to host code, as on a GPU: the driver opens the pages it needs for the duration of
//! one copy or kernel ([`Opened`]) and closes them after. initcheck (`PAGEDKV_EMU_INITCHECK=1`)
//! keeps a shadow byte per byte of device memory, non-zero once written: copies from the host and
//! memsets mark what they write, a device-to-device copy carries the source's marks along (a
//! copy is not a use, as in compute-sanitizer's and MSan's models), and kernels check every read
//! and mark every write through `emu::gptr` (kernels/emu/gptr.h).

use crate::errors::{Failure, R};
use crate::memory::Kind;
use crate::state::State;
use cudarc::driver::sys::CUresult;

/// Whether `PAGEDKV_EMU_INITCHECK=1`: memory allocated, created or reserved while it is set is
/// tracked. Any value but 1, 0 or none stops the process (exit 2), as a bad fault spec does.
pub fn initcheck_requested() -> bool {
    match std::env::var("PAGEDKV_EMU_INITCHECK") {
        Err(_) => false,
        Ok(v) if v.is_empty() || v == "0" => false,
        Ok(v) if v == "1" => true,
        Ok(v) => {
            eprintln!(
                "pagedkv emulated driver: PAGEDKV_EMU_INITCHECK={v:?}: expected 1 (on) or 0 (off)"
            );
            std::process::exit(2);
        }
    }
}

fn page() -> u64 {
    // SAFETY: a plain query.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as u64 }
}

/// Device memory opened to the driver's own accesses, closed again when dropped.
#[derive(Default)]
pub struct Opened {
    ranges: Vec<(u64, usize)>,
}

impl Drop for Opened {
    fn drop(&mut self) {
        for &(p, len) in &self.ranges {
            // SAFETY: pages of our own device memory, opened by `State::open`.
            unsafe { libc::mprotect(p as *mut _, len, libc::PROT_NONE) };
        }
    }
}

impl State {
    /// Whether `ptr` is device memory host code may not touch (an allocation's or a mapping's).
    fn protected(&self, ptr: u64) -> bool {
        match self.memory.find(ptr) {
            Some((_, a)) => a.kind == Kind::Device,
            None => self.vmm.mapping_of(ptr).is_some(),
        }
    }

    /// Opens `[ptr, ptr + len)`, live device memory (checked by the caller), to the driver until
    /// `opened` is dropped; memory host code may use anyway is left as it is.
    pub fn open(&self, opened: &mut Opened, ptr: u64, len: usize) -> R {
        if len == 0 || !self.protected(ptr) {
            return Ok(());
        }
        // An allocation is its own page-aligned mapping and a mapped range is granular, so the
        // pages around the range are the same memory's.
        let start = ptr / page() * page();
        let end = (ptr + len as u64).next_multiple_of(page());
        let bytes = (end - start) as usize;
        // SAFETY: the pages of live device memory the driver mapped (checked by the caller).
        if unsafe { libc::mprotect(start as *mut _, bytes, libc::PROT_READ | libc::PROT_WRITE) }
            != 0
        {
            return Err(Failure::new(
                CUresult::CUDA_ERROR_UNKNOWN,
                format!("the host refused to open device memory at {start:#x} ({bytes} bytes)"),
            ));
        }
        opened.ranges.push((start, bytes));
        Ok(())
    }

    /// initcheck's shadow of `[ptr, ptr + len)`, when that memory is tracked.
    pub fn shadow(&self, ptr: u64, len: usize) -> Option<*mut u8> {
        match self.memory.find(ptr) {
            Some((start, a)) => a.shadow.map(|s| (s + (ptr - start)) as *mut u8),
            None => self.vmm.shadow(ptr, ptr + len as u64),
        }
    }

    /// `[ptr, ptr + len)` (live device memory) was written by the host or a memset.
    pub fn mark_written(&self, ptr: u64, len: usize) {
        if let Some(s) = self.shadow(ptr, len) {
            // SAFETY: the tracked shadow of the range, `len` bytes.
            unsafe { std::ptr::write_bytes(s, 1, len) };
        }
    }

    /// `[dst, dst + len)` was copied from `[src, src + len)` (both live): what was written there
    /// is what was written at the source, or everything when the source is untracked.
    pub fn copy_marks(&self, dst: u64, src: u64, len: usize) {
        let Some(to) = self.shadow(dst, len) else {
            return;
        };
        match self.shadow(src, len) {
            // SAFETY: both are tracked shadows of `len` bytes; they may overlap as the data may.
            Some(from) => unsafe { std::ptr::copy(from, to, len) },
            // SAFETY: as in `mark_written`.
            None => unsafe { std::ptr::write_bytes(to, 1, len) },
        }
    }
}
