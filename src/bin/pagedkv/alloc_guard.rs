//! The backstop of the memory checks: one allocation larger than the memory available when the run
//! started cannot succeed (Rust aborts on a failed allocation, or the kernel's OOM killer ends the
//! process), so it is refused before it is tried, in one line with exit code 2. The commands check
//! their own sizes first (`pagedkv::host_memory`), with messages that name the option; this
//! catches what they do not, such as a simulator asked for billions of requests.

use pagedkv::host_memory::{available_bytes, Bytes};
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes available when [`arm`] ran; no limit before.
static AVAILABLE: AtomicU64 = AtomicU64::new(u64::MAX);

/// Reads the memory available now: larger allocations are refused from here on.
pub fn arm() {
    if let Some(bytes) = available_bytes() {
        AVAILABLE.store(bytes, Ordering::Relaxed);
    }
}

/// The system allocator, with larger-than-memory requests refused.
pub struct Guard;

// SAFETY: every request goes to the system allocator unchanged, or the process exits.
unsafe impl GlobalAlloc for Guard {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        check(layout.size());
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        check(new_size);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

fn check(size: usize) {
    let available = AVAILABLE.load(Ordering::Relaxed);
    if size as u64 > available {
        refuse(size as u64, available);
    }
}

/// Prints the refusal and exits, allocating nothing (the message is formatted on the stack).
#[cold]
fn refuse(size: u64, available: u64) -> ! {
    let mut line = [0u8; 256];
    let mut cursor = std::io::Cursor::new(&mut line[..]);
    let _ = writeln!(
        cursor,
        "pagedkv: one allocation of {} is more than the {} of memory available; choose smaller sizes",
        Bytes(size),
        Bytes(available)
    );
    let len = cursor.position() as usize;
    // SAFETY: writes `len` initialised bytes to stderr, then ends the process at once (no
    // destructors, which could allocate).
    unsafe {
        libc::write(2, line.as_ptr().cast(), len);
        libc::_exit(2)
    }
}
