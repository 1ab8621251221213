//! The machine facts that explain the labs' figures, read from /proc and /sys: page sizes,
//! transparent huge page settings, overcommit settings, memory totals, cache sizes, TLB entries,
//! cores. A fact the kernel does not expose here is `None`, never a guess.

use super::tlb_entries::{self, TlbLevel};
use serde::Serialize;
use std::path::Path;

const THP: &str = "/sys/kernel/mm/transparent_hugepage";

#[derive(Debug, Clone, Serialize)]
pub struct MachineFacts {
    /// CPUs online, and the ones this process may run on.
    pub cpus_online: usize,
    pub cpus_allowed: Vec<usize>,
    pub page_bytes: usize,
    /// The size of a PMD-mapped transparent huge page (2 MiB on x86-64).
    pub huge_page_bytes: Option<usize>,
    /// The selected value of `transparent_hugepage/enabled`: always, madvise or never.
    pub thp_enabled: Option<String>,
    /// The selected value of `transparent_hugepage/defrag`.
    pub thp_defrag: Option<String>,
    pub overcommit_memory: Option<u32>,
    pub overcommit_ratio: Option<u32>,
    pub memory: MemInfo,
    pub caches: Vec<CacheLevel>,
    /// Data TLB levels from `cpuid` (x86-64 only).
    pub tlb: Vec<TlbLevel>,
    /// Effective user id 0: dropping the page cache system-wide, and the like, would be allowed.
    pub root: bool,
    /// The CPU says it runs under a hypervisor (the `hypervisor` flag in /proc/cpuinfo): guest
    /// memory then sits on the host's pages too, which caps what guest huge pages can gain.
    pub hypervisor: bool,
}

/// A few lines of /proc/meminfo, in bytes.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct MemInfo {
    pub mem_total_bytes: Option<u64>,
    pub swap_total_bytes: Option<u64>,
    pub cached_bytes: Option<u64>,
    /// What mode 2 (strict accounting) allows in all: swap + ratio x RAM.
    pub commit_limit_bytes: Option<u64>,
    /// What is committed now: the figure mode 2 compares with the limit.
    pub committed_as_bytes: Option<u64>,
}

/// One CPU cache as cpu0 sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CacheLevel {
    pub level: u32,
    /// Data, Instruction or Unified.
    pub kind: String,
    pub size_bytes: usize,
    pub line_bytes: usize,
}

impl CacheLevel {
    /// Holds data (not an instruction cache).
    pub fn holds_data(&self) -> bool {
        self.kind != "Instruction"
    }

    /// `L1d`, `L2`, ...
    pub fn name(&self) -> String {
        match self.kind.as_str() {
            "Data" => format!("L{}d", self.level),
            "Instruction" => format!("L{}i", self.level),
            _ => format!("L{}", self.level),
        }
    }
}

impl MachineFacts {
    pub fn read() -> MachineFacts {
        MachineFacts {
            cpus_online: sysconf(libc::_SC_NPROCESSORS_ONLN).unwrap_or(1),
            cpus_allowed: allowed_cpus(),
            page_bytes: page_bytes(),
            huge_page_bytes: read_trimmed(Path::new(THP).join("hpage_pmd_size"))
                .and_then(|s| s.parse().ok()),
            thp_enabled: thp_setting("enabled"),
            thp_defrag: thp_setting("defrag"),
            overcommit_memory: read_number("/proc/sys/vm/overcommit_memory"),
            overcommit_ratio: read_number("/proc/sys/vm/overcommit_ratio"),
            memory: MemInfo::read(),
            caches: cache_levels(Path::new("/sys/devices/system/cpu/cpu0/cache")),
            tlb: tlb_entries::data_tlb(),
            // SAFETY: geteuid cannot fail.
            root: unsafe { libc::geteuid() } == 0,
            hypervisor: cpu_flag("hypervisor"),
        }
    }

    /// Transparent huge pages can be had with `madvise(MADV_HUGEPAGE)` (enabled is `always` or
    /// `madvise`); the reason when not.
    pub fn thp_usable(&self) -> Result<(), String> {
        match self.thp_enabled.as_deref() {
            Some("always" | "madvise") => Ok(()),
            Some(other) => Err(format!(
                "transparent huge pages are disabled (enabled={other})"
            )),
            None => Err(format!(
                "{THP}/enabled is missing: no transparent huge pages"
            )),
        }
    }

    /// The smallest data cache of each level (cpu0's view), in level order.
    pub fn data_caches(&self) -> Vec<&CacheLevel> {
        let mut v: Vec<&CacheLevel> = self.caches.iter().filter(|c| c.holds_data()).collect();
        v.sort_by_key(|c| (c.level, c.size_bytes));
        v.dedup_by_key(|c| c.level);
        v
    }

    /// One line: the facts every lab prints.
    pub fn summary(&self) -> String {
        let caches: Vec<String> = self
            .data_caches()
            .iter()
            .map(|c| format!("{} {}", c.name(), bytes(c.size_bytes as u64)))
            .collect();
        format!(
            "{} CPUs online ({} allowed){}, page {}, THP enabled={} defrag={}, caches {}",
            self.cpus_online,
            self.cpus_allowed.len(),
            if self.hypervisor {
                ", under a hypervisor"
            } else {
                ""
            },
            bytes(self.page_bytes as u64),
            self.thp_enabled.as_deref().unwrap_or("?"),
            self.thp_defrag.as_deref().unwrap_or("?"),
            if caches.is_empty() {
                "unknown".to_string()
            } else {
                caches.join(", ")
            }
        )
    }
}

impl MemInfo {
    pub fn read() -> MemInfo {
        let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        MemInfo::parse(&text)
    }

    fn parse(text: &str) -> MemInfo {
        let get = |name| crate::vmm::memstat::field_kib(text, name).map(|k| k * 1024);
        MemInfo {
            mem_total_bytes: get("MemTotal"),
            swap_total_bytes: get("SwapTotal"),
            cached_bytes: get("Cached"),
            commit_limit_bytes: get("CommitLimit"),
            committed_as_bytes: get("Committed_AS"),
        }
    }
}

/// A byte count for people: `4 KiB`, `1.5 MiB`, `24 GiB`.
pub use crate::host_memory::bytes;

pub fn page_bytes() -> usize {
    sysconf(libc::_SC_PAGESIZE).unwrap_or(4096)
}

fn sysconf(name: libc::c_int) -> Option<usize> {
    // SAFETY: sysconf only reads a configuration value.
    let v = unsafe { libc::sysconf(name) };
    (v > 0).then_some(v as usize)
}

/// The CPUs this thread may run on (`sched_getaffinity`), in order.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the call fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is valid and its size is passed.
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return vec![0];
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `i` is below CPU_SETSIZE.
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .collect()
}

/// `flag` is among the first CPU's flags in /proc/cpuinfo.
fn cpu_flag(flag: &str) -> bool {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("flags"))
        .is_some_and(|l| l.split_whitespace().any(|f| f == flag))
}

fn read_trimmed(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

fn read_number<T: std::str::FromStr>(path: &str) -> Option<T> {
    read_trimmed(path).and_then(|s| s.parse().ok())
}

fn thp_setting(name: &str) -> Option<String> {
    read_trimmed(Path::new(THP).join(name)).and_then(|t| selected(&t))
}

/// The bracketed choice of a sysfs setting: `always [madvise] never` -> `madvise`.
fn selected(text: &str) -> Option<String> {
    let start = text.find('[')?;
    let end = start + text[start..].find(']')?;
    Some(text[start + 1..end].to_string())
}

/// `32K` -> 32768, `1024K`, `32M`, a plain number of bytes.
fn parse_size(text: &str) -> Option<usize> {
    let t = text.trim();
    let (digits, unit) = match t.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => t.split_at(i),
        None => (t, ""),
    };
    let n: usize = digits.parse().ok()?;
    let scale = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(scale)
}

fn cache_levels(dir: &Path) -> Vec<CacheLevel> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<CacheLevel> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with("index"))
        .filter_map(|e| {
            let p = e.path();
            Some(CacheLevel {
                level: read_trimmed(p.join("level"))?.parse().ok()?,
                kind: read_trimmed(p.join("type"))?,
                size_bytes: parse_size(&read_trimmed(p.join("size"))?)?,
                line_bytes: read_trimmed(p.join("coherency_line_size"))
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(64),
            })
        })
        .collect();
    v.sort_by(|a, b| (a.level, &a.kind).cmp(&(b.level, &b.kind)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_bracketed_setting() {
        assert_eq!(
            selected("always [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(
            selected("always defer defer+madvise [madvise] never").as_deref(),
            Some("madvise")
        );
        assert_eq!(selected("[always] never").as_deref(), Some("always"));
        assert_eq!(selected("always never"), None);
    }

    #[test]
    fn parses_cache_sizes() {
        assert_eq!(parse_size("32K"), Some(32 << 10));
        assert_eq!(parse_size("1024K\n"), Some(1 << 20));
        assert_eq!(parse_size("32M"), Some(32 << 20));
        assert_eq!(parse_size("512"), Some(512));
        assert_eq!(parse_size("12Q"), None);
        assert_eq!(parse_size("K"), None);
    }

    #[test]
    fn parses_meminfo() {
        let m = MemInfo::parse(
            "MemTotal:       24684092 kB\nCached:  3241404 kB\nSwapTotal: 0 kB\n\
             CommitLimit:    12342044 kB\nCommitted_AS:     110964 kB\n",
        );
        assert_eq!(m.mem_total_bytes, Some(24684092 * 1024));
        assert_eq!(m.swap_total_bytes, Some(0));
        assert_eq!(m.cached_bytes, Some(3241404 * 1024));
        assert_eq!(m.commit_limit_bytes, Some(12342044 * 1024));
        assert_eq!(m.committed_as_bytes, Some(110964 * 1024));
    }

    #[test]
    fn reads_this_machine() {
        let f = MachineFacts::read();
        assert!(f.page_bytes >= 4096 && f.page_bytes.is_power_of_two());
        assert!(!f.cpus_allowed.is_empty());
        assert!(f.cpus_allowed.len() <= f.cpus_online.max(f.cpus_allowed.len()));
        for c in &f.caches {
            assert!(c.size_bytes > 0 && c.line_bytes > 0, "{c:?}");
        }
    }

    #[test]
    fn byte_counts_for_people() {
        assert_eq!(bytes(4096), "4 KiB");
        assert_eq!(bytes(3 << 19), "1.5 MiB");
        assert_eq!(bytes(1 << 40), "1 TiB");
        assert_eq!(bytes(100), "100 B");
    }
}
