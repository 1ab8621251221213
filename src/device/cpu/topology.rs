//! What the kernel says about the CPU's caches and the CPUs a run may use: sysfs's cache levels
//! (`/sys/devices/system/cpu/cpuN/cache/index*`) and the affinity mask. Read here once for the
//! whole crate: the memory limits' cache estimate ([`super::last_level_cache`]) and the labs.

use serde::Serialize;
use std::path::{Path, PathBuf};

/// One CPU cache as one CPU sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CacheLevel {
    pub level: u32,
    /// Data, Instruction or Unified.
    pub kind: String,
    pub size_bytes: usize,
    pub line_bytes: usize,
    /// The CPUs sharing this cache, as sysfs writes them (`0-1`); one instance of a cache per
    /// distinct list. Not in the JSON: the labs' reports keep their keys.
    #[serde(skip)]
    pub shared_cpu_list: Option<String>,
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

/// sysfs's cache directory of CPU `cpu`.
pub fn cache_dir(cpu: usize) -> PathBuf {
    PathBuf::from(format!("/sys/devices/system/cpu/cpu{cpu}/cache"))
}

/// The caches sysfs lists under `dir` (a [`cache_dir`]), sorted by level and kind; empty when
/// sysfs does not say.
pub fn cache_levels(dir: &Path) -> Vec<CacheLevel> {
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
                size_bytes: parse_cache_size(&read_trimmed(p.join("size"))?)?,
                line_bytes: read_trimmed(p.join("coherency_line_size"))
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(64),
                shared_cpu_list: read_trimmed(p.join("shared_cpu_list")),
            })
        })
        .collect();
    v.sort_by(|a, b| (a.level, &a.kind).cmp(&(b.level, &b.kind)));
    v
}

/// `32768K`, `1M`, `512` (bytes) as sysfs writes cache sizes; `None` for anything else or a size
/// that does not fit a `usize`.
pub fn parse_cache_size(text: &str) -> Option<usize> {
    let text = text.trim();
    let (digits, unit) = match text.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => text.split_at(i),
        None => (text, ""),
    };
    let n: usize = digits.parse().ok()?;
    let shift = match unit {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        _ => return None,
    };
    n.checked_mul(1 << shift)
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

/// The last-level cache as sysfs gives it to a run on `cpus`: one instance's size (the largest
/// data or unified cache of the first CPU), the instances the CPUs span (distinct
/// `shared_cpu_list`s of that level; 1 when sysfs does not say), and the largest cache below it
/// (a core's private caches, per core).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct SysfsLlc {
    pub instance_bytes: usize,
    pub instances: usize,
    pub private_bytes: Option<usize>,
}

impl SysfsLlc {
    /// Every instance together.
    pub fn total_bytes(&self) -> usize {
        self.instance_bytes.saturating_mul(self.instances)
    }
}

/// [`SysfsLlc`] for a run on `cpus`; `None` when sysfs lists no data cache.
pub fn sysfs_llc(cpus: &[usize]) -> Option<SysfsLlc> {
    llc_under(cpus, cache_dir)
}

/// [`sysfs_llc`] with each CPU's cache directory given by `dir`.
fn llc_under(cpus: &[usize], dir: impl Fn(usize) -> PathBuf) -> Option<SysfsLlc> {
    let first = cpus.first().copied().unwrap_or(0);
    let levels = cache_levels(&dir(first));
    let data = || levels.iter().filter(|c| c.holds_data());
    let llc = data().max_by_key(|c| (c.level, c.size_bytes))?;
    let mut lists: Vec<String> = cpus
        .iter()
        .filter_map(|&cpu| {
            cache_levels(&dir(cpu))
                .into_iter()
                .find(|c| c.holds_data() && c.level == llc.level)?
                .shared_cpu_list
        })
        .collect();
    lists.sort();
    lists.dedup();
    Some(SysfsLlc {
        instance_bytes: llc.size_bytes,
        instances: lists.len().max(1),
        private_bytes: data()
            .filter(|c| c.level < llc.level)
            .map(|c| c.size_bytes)
            .max(),
    })
}

/// A sysfs or procfs file's text without its surrounding whitespace; `None` when unreadable.
pub fn read_trimmed(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("32K"), Some(32 << 10));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("big"), None);
        assert_eq!(parse_cache_size("12Q"), None);
        assert_eq!(parse_cache_size("K"), None);
        assert_eq!(parse_cache_size("99999999999999999999G"), None);
        assert_eq!(parse_cache_size("18446744073709551615G"), None);
    }

    /// A sysfs tree written here: two CPUs, each with private L1d and L2 and one L3 shared by
    /// both, then the same with an L3 of its own per CPU.
    #[test]
    fn the_last_level_is_the_largest_level_and_counts_its_instances() {
        let root = std::env::temp_dir().join(format!("pagedkv-topology-{}", std::process::id()));
        let write = |cpu: usize, index: usize, level: u32, kind: &str, size: &str, shared: &str| {
            let d = root.join(format!("cpu{cpu}/cache/index{index}"));
            std::fs::create_dir_all(&d).unwrap();
            for (f, v) in [
                ("level", level.to_string()),
                ("type", kind.into()),
                ("size", size.into()),
                ("shared_cpu_list", shared.into()),
            ] {
                std::fs::write(d.join(f), format!("{v}\n")).unwrap();
            }
        };
        let tree = |l3_shared: [&str; 2]| {
            for (cpu, shared) in l3_shared.into_iter().enumerate() {
                let own = cpu.to_string();
                write(cpu, 0, 1, "Data", "48K", &own);
                write(cpu, 1, 1, "Instruction", "32K", &own);
                write(cpu, 2, 2, "Unified", "2048K", &own);
                write(cpu, 3, 3, "Unified", "491520K", shared);
            }
        };
        let dir = |cpu: usize| root.join(format!("cpu{cpu}/cache"));
        tree(["0-1", "0-1"]);
        let levels = cache_levels(&dir(0));
        let names: Vec<String> = levels.iter().map(CacheLevel::name).collect();
        assert_eq!(names, ["L1d", "L1i", "L2", "L3"]);
        assert_eq!(levels[3].size_bytes, 480 << 20);
        assert_eq!(levels[3].shared_cpu_list.as_deref(), Some("0-1"));
        assert!(!levels[1].holds_data());
        let shared = SysfsLlc {
            instance_bytes: 480 << 20,
            instances: 1,
            private_bytes: Some(2 << 20),
        };
        assert_eq!(llc_under(&[0, 1], dir), Some(shared));
        // An L3 per CPU: two instances for a run on both, one for a run on CPU 1 alone.
        tree(["0", "1"]);
        let per_cpu = llc_under(&[0, 1], dir).unwrap();
        assert_eq!((per_cpu.instances, per_cpu.total_bytes()), (2, 960 << 20));
        assert_eq!(llc_under(&[1], dir).unwrap().instances, 1);
        assert_eq!(llc_under(&[0], |_| root.join("none")), None);
        // The real tree of this machine: every size positive.
        for c in cache_levels(&cache_dir(allowed_cpus()[0])) {
            assert!(c.size_bytes > 0 && c.line_bytes > 0, "{c:?}");
        }
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn this_machines_last_level_is_no_smaller_than_its_private_caches() {
        let cpus = allowed_cpus();
        assert!(!cpus.is_empty());
        if let Some(llc) = sysfs_llc(&cpus) {
            assert!(llc.instances >= 1 && llc.instances <= cpus.len(), "{llc:?}");
            assert!(llc.private_bytes.is_none_or(|p| p <= llc.instance_bytes));
            assert_eq!(llc.total_bytes(), llc.instance_bytes * llc.instances);
        }
    }
}
