//! The machine facts that explain the labs' figures, read from /proc and /sys: page sizes,
//! transparent huge page settings, overcommit settings, memory totals, cache sizes, TLB entries,
//! cores. A fact the kernel does not expose here is `None`, never a guess.

use super::tlb_entries::{self, TlbLevel};
pub use crate::device::cpu::topology::{allowed_cpus, CacheLevel};
use crate::device::cpu::topology::{cache_dir, cache_levels, read_trimmed};
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
            caches: cache_levels(&cache_dir(0)),
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

/// `flag` is among the first CPU's flags in /proc/cpuinfo.
fn cpu_flag(flag: &str) -> bool {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("flags"))
        .is_some_and(|l| l.split_whitespace().any(|f| f == flag))
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
