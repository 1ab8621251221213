//! Threads share an address space, forked processes get a copy-on-write copy of it: a thread's
//! write is seen by its parent, a forked child's is not, and each page the child writes costs it
//! a minor fault (the kernel copies the page then).

use super::fork::{self, Pipe};
use super::mapping::Mapping;
use super::procstat::Faults;
use super::{Check, LabError};
use serde::Serialize;
use std::time::Instant;

const BEFORE: u8 = 1;
const BY_THREAD: u8 = 2;
const BY_CHILD: u8 = 3;

#[derive(Debug, Clone, Serialize)]
pub struct CowReport {
    pub pages: usize,
    pub page_bytes: usize,
    /// The parent read back every page a spawned thread wrote.
    pub thread_write_seen: bool,
    /// The child found the parent's data in every page before writing.
    pub child_saw_parent_data: bool,
    /// Pages of the parent that hold the child's value after the child wrote all of them.
    pub child_writes_seen_by_parent: usize,
    /// Minor faults of the child while it wrote each page once.
    pub child_minor_faults: u64,
    pub child_ns_per_fault: f64,
    pub checks: Vec<Check>,
}

/// Runs the demonstration over `pages` pages (4 KiB pages: huge pages are switched off for the
/// mapping, so each page is copied by a fault of its own).
pub fn run(pages: usize) -> Result<CowReport, LabError> {
    super::error::positive(pages, "the copy-on-write page count")?;
    let page = super::machine::page_bytes();
    let bytes = pages
        .checked_mul(page)
        .ok_or_else(|| LabError::Invalid(format!("{pages} pages overflow")))?;
    let map = Mapping::anonymous(bytes, page, libc::MAP_PRIVATE).map_err(LabError::io("mmap"))?;
    let _ = map.advise(libc::MADV_NOHUGEPAGE);
    map.write_every(bytes, page, BEFORE);

    std::thread::scope(|s| s.spawn(|| map.write_every(bytes, page, BY_THREAD)).join())
        .map_err(|_| LabError::Child("the writing thread panicked".into()))?;
    let thread_write_seen = count(&map, bytes, page, BY_THREAD) == pages;

    let Pipe { read, write } = Pipe::new()?;
    let ptr = map.as_ptr();
    // SAFETY: the body reads and writes the mapping, reads counters and the clock, writes to a
    // pipe: system calls and memory accesses only.
    let child = unsafe {
        fork::spawn(|| {
            let saw =
                super::mapping::read_every(ptr, bytes, page) == (BY_THREAD as u64) * pages as u64;
            let before = Faults::of_thread();
            let start = Instant::now();
            super::mapping::write_every(ptr, bytes, page, BY_CHILD);
            let ns = start.elapsed().as_nanos() as u64;
            let faults = Faults::of_thread().since(before).minor;
            if fork::send_words(&write, [u64::from(saw), faults, ns]) {
                0
            } else {
                1
            }
        })
    }?;
    // The child holds the only write end now: if it dies, the read below ends instead of waiting.
    drop(write);
    let words = fork::receive_words::<3>(&read);
    let code = child.wait()?;
    let [saw, child_minor_faults, ns] = words?;
    if code != 0 {
        return Err(LabError::Child(format!("the writer exited with {code}")));
    }
    let child_writes_seen_by_parent = count(&map, bytes, page, BY_CHILD);
    let parent_kept = count(&map, bytes, page, BY_THREAD) == pages;

    let checks = vec![
        Check::verdict(
            "threads share memory: the parent sees a thread's writes",
            thread_write_seen,
            format!("{pages} pages written by a thread"),
        ),
        Check::verdict(
            "a forked child starts with the parent's data and its writes stay its own",
            saw == 1 && child_writes_seen_by_parent == 0 && parent_kept,
            format!(
                "child saw the parent's data: {}; parent pages holding the child's value: \
                 {child_writes_seen_by_parent} of {pages}",
                saw == 1
            ),
        ),
        Check::verdict(
            "each page the child writes is copied on a fault of its own (faults >= pages)",
            child_minor_faults >= pages as u64,
            format!("{child_minor_faults} minor faults for {pages} pages"),
        ),
    ];
    Ok(CowReport {
        pages,
        page_bytes: page,
        thread_write_seen,
        child_saw_parent_data: saw == 1,
        child_writes_seen_by_parent,
        child_minor_faults,
        child_ns_per_fault: ns as f64 / child_minor_faults.max(1) as f64,
        checks,
    })
}

/// Pages whose first byte is `value`.
fn count(map: &Mapping, bytes: usize, page: usize, value: u8) -> usize {
    (0..bytes)
        .step_by(page)
        // SAFETY: `off < bytes` within the mapping.
        .filter(|&off| unsafe { std::ptr::read_volatile(map.as_ptr().add(off)) } == value)
        .count()
}

#[cfg(test)]
mod tests {
    #[test]
    fn child_copies_and_parent_keeps_its_pages() {
        let r = super::run(32).unwrap();
        assert!(r.thread_write_seen);
        assert!(r.child_saw_parent_data);
        assert_eq!(r.child_writes_seen_by_parent, 0);
        assert!(r.child_minor_faults >= 32, "{}", r.child_minor_faults);
        assert!(r.checks.iter().all(|c| !c.contradicted()), "{:?}", r.checks);
    }

    #[test]
    fn zero_pages_is_bad_input() {
        assert!(matches!(super::run(0), Err(super::LabError::Invalid(_))));
    }
}
