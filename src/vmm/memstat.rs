//! How much memory the process holds: resident pages from `/proc/self/smaps_rollup` (exact, it
//! walks the page tables) split by kind, and open descriptors and mappings for leak checks.

use super::VmmError;

/// Resident memory of this process, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct Resident {
    /// Everything resident.
    pub rss: u64,
    /// Anonymous pages (heap, offload buffers).
    pub anonymous: u64,
    /// Shared-memory pages mapped by this process (memfd pool chunks).
    pub shmem: u64,
}

/// The value of `Name:   123 kB` lines in /proc files (meminfo, smaps), in KiB.
pub fn field_kib(text: &str, name: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with(':'))
        .and_then(|l| l[name.len() + 1..].split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Reads `/proc/self/smaps_rollup`. `shmem` is `Pss_Shmem`, which equals the resident shared
/// memory when, as for pool memfds, no other process maps the pages.
pub fn resident() -> Result<Resident, VmmError> {
    let text =
        std::fs::read_to_string("/proc/self/smaps_rollup").map_err(|source| VmmError::Os {
            op: "reading /proc/self/smaps_rollup",
            source,
        })?;
    let get = |name| field_kib(&text, name).map(|k| k * 1024);
    Ok(Resident {
        rss: get("Rss").unwrap_or(0),
        anonymous: get("Anonymous").unwrap_or(0),
        shmem: get("Pss_Shmem").unwrap_or(0),
    })
}

/// Open file descriptors of this process.
pub fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// One line of `/proc/self/maps`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    pub start: u64,
    pub end: u64,
    /// `rw-s`, `---p`, ...
    pub perms: String,
    pub path: String,
}

fn parse_region(line: &str) -> Option<Region> {
    let mut parts = line.split_whitespace();
    let (start, end) = parts.next()?.split_once('-')?;
    let perms = parts.next()?.to_string();
    let path = parts.nth(3).map(str::to_string).unwrap_or_default();
    let path = match line.find(&path).filter(|_| !path.is_empty()) {
        Some(at) => line[at..].to_string(),
        None => path,
    };
    Some(Region {
        start: u64::from_str_radix(start, 16).ok()?,
        end: u64::from_str_radix(end, 16).ok()?,
        perms,
        path,
    })
}

/// The mappings of this process that overlap `[start, start + len)`, in address order.
pub fn regions_in(start: u64, len: usize) -> Vec<Region> {
    let end = start + len as u64;
    std::fs::read_to_string("/proc/self/maps")
        .unwrap_or_default()
        .lines()
        .filter_map(parse_region)
        .filter(|r| r.start < end && r.end > start)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rollup_fields() {
        let text = "5581f000-7ffd [rollup]\nRss:                1024 kB\nPss_Shmem:   8 kB\n\
                    Anonymous:   512 kB\nPss:  1000 kB\n";
        assert_eq!(field_kib(text, "Rss"), Some(1024));
        assert_eq!(field_kib(text, "Pss"), Some(1000));
        assert_eq!(field_kib(text, "Pss_Shmem"), Some(8));
        assert_eq!(field_kib(text, "Anonymous"), Some(512));
        assert_eq!(field_kib(text, "Swap"), None);
    }

    #[test]
    fn parses_maps_lines() {
        let r = parse_region("7f00a000-7f00c000 rw-s 00000000 00:01 1234   /memfd:pool (deleted)")
            .unwrap();
        assert_eq!((r.start, r.end), (0x7f00a000, 0x7f00c000));
        assert_eq!(r.perms, "rw-s");
        assert_eq!(r.path, "/memfd:pool (deleted)");
        let anon = parse_region("7f00c000-7f00d000 ---p 00000000 00:00 0").unwrap();
        assert_eq!((anon.perms.as_str(), anon.path.as_str()), ("---p", ""));
    }
}
