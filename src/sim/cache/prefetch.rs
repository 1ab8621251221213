//! Look-ahead for trace replay. A replay knows which keys come next, and most of a request's cost is
//! waiting for the cache lines of the key's entry and of the list nodes beside it; asking for them
//! a few requests early overlaps those waits. Hints only: nothing here changes a result.

/// How far ahead of the current request each step of the look-ahead runs.
pub const ENTRY_AHEAD: usize = 16;
pub const NEIGHBOURS_AHEAD: usize = 8;

/// Which lines to pull for a coming key; the second step reads what the first pulled in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ahead {
    /// The key's own entry (and what the next eviction will touch).
    Entry,
    /// The nodes linked to the key's (what unlinking it will write).
    Neighbours,
}

/// Asks the CPU to load `slice[i]`'s cache line; out of range is ignored.
#[inline(always)]
pub fn touch<T>(slice: &[T], i: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(r) = slice.get(i) {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: prefetching is a hint with no effect on memory; the pointer is in bounds.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((r as *const T).cast::<i8>()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (slice, i);
}
