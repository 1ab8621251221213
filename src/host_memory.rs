//! The host memory a run may take, and the one check that refuses a size beyond it before anything
//! is allocated: an allocation that fails aborts the process (or the kernel's OOM killer ends
//! it), while a refused size is an error the CLI prints in one line.

use thiserror::Error;

/// A size refused: `what` would need `bytes`, more than the `available` bytes.
#[derive(Debug, Error, PartialEq)]
#[error("{what} needs {} of memory, more than the {} available", bytes(*.need), bytes(*.available))]
pub struct TooLarge {
    pub what: String,
    pub need: u64,
    pub available: u64,
}

/// Memory the kernel can give now without swapping: `MemAvailable` of /proc/meminfo (bytes), no
/// more than what the process's address-space limit leaves (`ulimit -v` less what is mapped
/// already: past it an allocation fails however much is free), or `None` where neither says.
pub fn available_bytes() -> Option<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| meminfo_field(&text, "MemAvailable"));
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct, which `limit` is.
    let address_space = match unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } {
        0 if limit.rlim_cur != libc::RLIM_INFINITY => {
            let mapped = std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|text| meminfo_field(&text, "VmSize"))
                .unwrap_or(0);
            Some(limit.rlim_cur.saturating_sub(mapped))
        }
        _ => None,
    };
    match (meminfo, address_space) {
        (Some(m), Some(a)) => Some(m.min(a)),
        (m, a) => m.or(a),
    }
}

/// A `/proc/meminfo` field in bytes (`MemAvailable:  22611596 kB`).
pub fn meminfo_field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(key)?.strip_prefix(':')?;
        let mut parts = rest.split_whitespace();
        let n: u64 = parts.next()?.parse().ok()?;
        match parts.next() {
            Some("kB") => n.checked_mul(1024),
            None => Some(n),
            Some(_) => None,
        }
    })
}

/// `Err` when `need` bytes (for `what`, e.g. "attention --batch 100000") exceed the memory
/// available now; unknown availability passes.
pub fn ensure_fits(need: u64, what: &str) -> Result<(), TooLarge> {
    ensure_within(need, what, available_bytes())
}

/// [`ensure_fits`] against a given availability.
pub fn ensure_within(need: u64, what: &str, available: Option<u64>) -> Result<(), TooLarge> {
    match available {
        Some(available) if need > available => Err(TooLarge {
            what: what.to_string(),
            need,
            available,
        }),
        _ => Ok(()),
    }
}

/// The bytes of `n` elements of `size` bytes each, saturating (a size too large for the address
/// space is still refused, not wrapped round).
pub fn elems_bytes(n: usize, size: usize) -> u64 {
    (n as u64).saturating_mul(size as u64)
}

/// A byte count in binary units: `4 KiB`, `1.5 GiB`.
pub fn bytes(n: u64) -> String {
    Bytes(n).to_string()
}

/// [`bytes`] as a `Display` that allocates nothing (for the allocator's own refusal).
pub struct Bytes(pub u64);

impl std::fmt::Display for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
        let mut v = self.0 as f64;
        let mut u = 0;
        while v >= 1024.0 && u + 1 < units.len() {
            v /= 1024.0;
            u += 1;
        }
        if v.fract() == 0.0 {
            write!(f, "{v} {}", units[u])
        } else {
            write!(f, "{v:.1} {}", units[u])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_fields_read_in_bytes() {
        let text =
            "MemTotal:       24684084 kB\nMemAvailable:   22611596 kB\nHugePages_Total:       0\n";
        assert_eq!(meminfo_field(text, "MemAvailable"), Some(22611596 * 1024));
        assert_eq!(meminfo_field(text, "HugePages_Total"), Some(0));
        assert_eq!(meminfo_field(text, "MemFree"), None);
        assert_eq!(meminfo_field(text, "Mem"), None, "a prefix is not a field");
        if let Some(avail) = available_bytes() {
            assert!(avail > 1 << 20, "{avail}");
        }
    }

    #[test]
    fn sizes_beyond_the_memory_available_are_refused_in_one_line() {
        assert_eq!(ensure_within(10, "x", Some(10)), Ok(()));
        assert_eq!(ensure_within(u64::MAX, "x", None), Ok(()));
        let e = ensure_within(838_860_800_000, "attention --batch 100000", Some(22 << 30));
        assert_eq!(
            e.unwrap_err().to_string(),
            "attention --batch 100000 needs 781.2 GiB of memory, more than the 22 GiB available"
        );
        assert_eq!(elems_bytes(usize::MAX, 4), u64::MAX);
        assert_eq!(bytes(1536 << 20), "1.5 GiB");
        assert_eq!(bytes(4096), "4 KiB");
    }
}
