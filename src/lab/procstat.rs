//! Per-process and per-mapping counters: page faults from `getrusage`, resident and proportional
//! memory from /proc/PID/smaps and smaps_rollup.

use crate::vmm::memstat::field_kib;
use serde::Serialize;

/// Page faults counted by the kernel: minor (no I/O) and major (waited for I/O).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Faults {
    pub minor: u64,
    pub major: u64,
}

impl Faults {
    /// This thread's faults so far (`RUSAGE_THREAD`, so other threads of a test harness do not
    /// count). Async-signal-safe: usable in a forked child.
    pub fn of_thread() -> Faults {
        // SAFETY: a zeroed rusage is valid; getrusage fills it.
        let mut r: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: `r` is valid for writing.
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut r) };
        Faults {
            minor: r.ru_minflt as u64,
            major: r.ru_majflt as u64,
        }
    }

    /// The faults between `earlier` and `self`.
    pub fn since(self, earlier: Faults) -> Faults {
        Faults {
            minor: self.minor.saturating_sub(earlier.minor),
            major: self.major.saturating_sub(earlier.major),
        }
    }
}

/// CPU time this thread has run, in ns (`CLOCK_THREAD_CPUTIME_ID`): unlike the wall clock it
/// stops while the thread is preempted, so a busy machine adds less noise to a timing.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is valid for writing.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// One mapping's memory as /proc/self/smaps reports it, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct MappingMemory {
    pub rss_bytes: u64,
    /// Proportional set size: each page divided by the number of processes mapping it.
    pub pss_bytes: u64,
    /// Resident in transparent huge pages.
    pub anon_huge_bytes: u64,
    /// Unmodified pages mapped by other processes too, and by this one only.
    pub shared_clean_bytes: u64,
    pub private_clean_bytes: u64,
}

/// The smaps entry of this process's mapping that contains `addr`; `None` when there is none.
pub fn mapping_memory(addr: usize) -> Option<MappingMemory> {
    mapping_memory_of(None, addr)
}

/// The same for process `pid` (this process when `None`).
pub fn mapping_memory_of(pid: Option<libc::pid_t>, addr: usize) -> Option<MappingMemory> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/smaps"),
        None => "/proc/self/smaps".to_string(),
    };
    let text = std::fs::read_to_string(path).ok()?;
    let section = smaps_section(&text, addr)?;
    let get = |name| field_kib(section, name).unwrap_or(0) * 1024;
    Some(MappingMemory {
        rss_bytes: get("Rss"),
        pss_bytes: get("Pss"),
        anon_huge_bytes: get("AnonHugePages"),
        shared_clean_bytes: get("Shared_Clean"),
        private_clean_bytes: get("Private_Clean"),
    })
}

/// The lines of the smaps entry whose range holds `addr`: its header up to the next header.
fn smaps_section(text: &str, addr: usize) -> Option<&str> {
    let is_header = |line: &str| {
        line.split_whitespace()
            .next()
            .and_then(|r| r.split_once('-'))
            .and_then(|(s, e)| {
                Some((
                    usize::from_str_radix(s, 16).ok()?,
                    usize::from_str_radix(e, 16).ok()?,
                ))
            })
    };
    let mut offset = 0;
    let mut start = None;
    for line in text.split_inclusive('\n') {
        if let Some((s, e)) = is_header(line) {
            if let Some(begin) = start {
                return Some(&text[begin..offset]);
            }
            if (s..e).contains(&addr) {
                start = Some(offset);
            }
        }
        offset += line.len();
    }
    start.map(|begin| &text[begin..])
}

/// A whole process's memory from /proc/PID/smaps_rollup, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Rollup {
    pub rss_bytes: u64,
    /// Proportional set size: each page divided by the number of processes mapping it.
    pub pss_bytes: u64,
    pub shared_clean_bytes: u64,
    pub private_clean_bytes: u64,
    pub anonymous_bytes: u64,
}

/// The rollup of process `pid` (this process when `None`).
pub fn rollup(pid: Option<libc::pid_t>) -> std::io::Result<Rollup> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/smaps_rollup"),
        None => "/proc/self/smaps_rollup".to_string(),
    };
    let text = std::fs::read_to_string(path)?;
    Ok(parse_rollup(&text))
}

fn parse_rollup(text: &str) -> Rollup {
    let get = |name| field_kib(text, name).unwrap_or(0) * 1024;
    Rollup {
        rss_bytes: get("Rss"),
        pss_bytes: get("Pss"),
        shared_clean_bytes: get("Shared_Clean"),
        private_clean_bytes: get("Private_Clean"),
        anonymous_bytes: get("Anonymous"),
    }
}

/// Virtual size of this process (`VmSize` in /proc/self/status), in bytes.
pub fn virtual_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/status").ok()?;
    field_kib(&text, "VmSize").map(|k| k * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMAPS: &str = "\
55d0a000-55d0c000 r--p 00000000 fd:00 123   /bin/x
Rss:                   8 kB
AnonHugePages:         0 kB
7f0000000000-7f0000400000 rw-p 00000000 00:00 0 
Rss:                4096 kB
Pss:                4096 kB
AnonHugePages:      2048 kB
7f0000400000-7f0000401000 ---p 00000000 00:00 0 
Rss:                   0 kB
";

    #[test]
    fn finds_the_section_holding_an_address() {
        let s = smaps_section(SMAPS, 0x7f0000123456).unwrap();
        assert!(s.starts_with("7f0000000000-"));
        assert_eq!(field_kib(s, "Rss"), Some(4096));
        assert_eq!(field_kib(s, "AnonHugePages"), Some(2048));
        let last = smaps_section(SMAPS, 0x7f0000400000).unwrap();
        assert_eq!(field_kib(last, "Rss"), Some(0));
        assert!(smaps_section(SMAPS, 0x1000).is_none());
    }

    #[test]
    fn reads_a_fresh_mapping_after_touching_it() {
        let m =
            super::super::mapping::Mapping::anonymous(256 << 10, 4096, libc::MAP_PRIVATE).unwrap();
        m.advise(libc::MADV_NOHUGEPAGE).unwrap();
        let before = Faults::of_thread();
        m.write_every(m.len(), 4096, 1);
        let faults = Faults::of_thread().since(before);
        assert!(faults.minor >= 64, "{faults:?}");
        let mem = mapping_memory(m.addr() + 5000).unwrap();
        assert_eq!(mem.rss_bytes, 256 << 10);
        assert_eq!(mem.anon_huge_bytes, 0);
    }

    #[test]
    fn parses_rollups() {
        let r = parse_rollup("Rss: 100 kB\nPss: 50 kB\nShared_Clean: 60 kB\nPrivate_Clean: 4 kB\n");
        assert_eq!(r.rss_bytes, 100 * 1024);
        assert_eq!(r.pss_bytes, 50 * 1024);
        assert_eq!(r.shared_clean_bytes, 60 * 1024);
        assert_eq!(r.private_clean_bytes, 4 * 1024);
        assert!(rollup(None).unwrap().rss_bytes > 0);
    }
}
