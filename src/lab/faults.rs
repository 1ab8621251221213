//! Page faults measured: one byte written per 4 KiB page of an anonymous mapping with 4 KiB
//! pages, with transparent huge pages (`MADV_HUGEPAGE`), with `MAP_POPULATE`, and a second time;
//! then a file mapping read cold (its page cache dropped) and warm.

use super::machine::{page_bytes, MachineFacts};
use super::mapping::Mapping;
use super::procstat::{mapping_memory, Faults};
use super::scratch::ScratchFile;
use super::{Check, LabError, MIB};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Debug, Clone)]
pub struct FaultsConfig {
    /// Bytes of each anonymous mapping.
    pub bytes: usize,
    /// Bytes of the file read cold and warm; 0 skips the file part.
    pub file_bytes: usize,
    /// Where the file is made.
    pub dir: PathBuf,
}

impl Default for FaultsConfig {
    fn default() -> Self {
        FaultsConfig {
            bytes: 256 * MIB,
            file_bytes: 64 * MIB,
            dir: std::env::temp_dir(),
        }
    }
}

/// One pass over a mapping, one access per 4 KiB page.
#[derive(Debug, Clone, Serialize)]
pub struct Touch {
    pub pages: usize,
    pub minor_faults: u64,
    pub major_faults: u64,
    pub ns: f64,
    /// Time per fault (minor and major together); null when there was none.
    pub ns_per_fault: Option<f64>,
    pub ns_per_page: f64,
    /// The mapping's resident bytes afterwards, and those in transparent huge pages.
    pub rss_bytes: u64,
    pub huge_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Populate {
    /// The `mmap(MAP_POPULATE)` call: it takes the faults up front.
    pub mmap_ns: f64,
    pub mmap_faults: Faults,
    pub touch: Touch,
}

#[derive(Debug, Clone, Serialize)]
pub struct FileFaults {
    pub bytes: usize,
    /// Share of the file's pages still cached after `POSIX_FADV_DONTNEED`.
    pub cached_share_after_drop: f64,
    pub cold: Touch,
    pub warm: Touch,
}

#[derive(Debug, Clone, Serialize)]
pub struct FaultsReport {
    /// 4 KiB pages touched per anonymous mapping.
    pub pages: usize,
    pub faults_4k: u64,
    /// Faults with `MADV_HUGEPAGE`; null when THP is unavailable.
    pub faults_thp: Option<u64>,
    /// Share of the THP mapping in huge pages (`AnonHugePages` of its smaps entry).
    pub thp_share: f64,
    pub ns_per_fault_4k: Option<f64>,
    pub thp_enabled: Option<String>,
    pub thp_defrag: Option<String>,
    pub anon_4k: Touch,
    pub anon_thp: Option<Touch>,
    pub populate: Populate,
    pub second_touch: Touch,
    pub file: Option<FileFaults>,
    pub checks: Vec<Check>,
}

pub fn run(cfg: &FaultsConfig, facts: &MachineFacts) -> Result<FaultsReport, LabError> {
    let page = page_bytes();
    super::error::positive(cfg.bytes, "the mapping size")?;
    let bytes = cfg
        .bytes
        .checked_next_multiple_of(page)
        .ok_or_else(|| LabError::Invalid(format!("a mapping of {} bytes", cfg.bytes)))?;
    super::error::at_most_half_memory(bytes as u64, "a mapping of", facts.memory.mem_total_bytes)?;
    let pages = bytes / page;
    let mut checks = Vec::new();

    // 4 KiB pages: huge pages refused for this mapping, whatever the system setting.
    let small = anon(bytes, page, libc::MAP_PRIVATE)?;
    small
        .advise(libc::MADV_NOHUGEPAGE)
        .map_err(LabError::io("madvise"))?;
    let anon_4k = touch(&small, bytes, |m| m.write_every(bytes, page, 1));
    checks.push(Check::verdict(
        "with 4 KiB pages every first touch of a page is a fault (faults >= pages)",
        anon_4k.minor_faults + anon_4k.major_faults >= pages as u64,
        format!("{} faults for {pages} pages", anon_4k.minor_faults),
    ));
    checks.push(rss_check(
        "the mapping's RSS grew by the bytes written",
        &anon_4k,
        bytes,
    ));
    // The touch with the fewest faults of three: between touches the kernel may migrate resident
    // pages (compaction making huge pages for other processes), and the next touch of a migrated
    // page faults once on its migration entry, which says nothing about a resident page's cost.
    let second_touch = (2..5)
        .map(|value| touch(&small, bytes, |m| m.write_every(bytes, page, value)))
        .min_by_key(|t| t.minor_faults + t.major_faults)
        .expect("three touches");
    checks.push(Check::verdict(
        "a second touch of resident pages takes no faults (at most 1% of pages)",
        second_touch.minor_faults <= few(pages),
        format!("{} faults for {pages} pages", second_touch.minor_faults),
    ));
    drop(small);

    let (anon_thp, thp_share) = match thp_run(bytes, facts)? {
        Ok(t) => {
            let share = t.huge_bytes as f64 / bytes as f64;
            checks.push(thp_check(&t, share, facts));
            (Some(t), share)
        }
        Err(reason) => {
            checks.push(Check::skipped("huge pages mean fewer faults", reason));
            (None, 0.0)
        }
    };

    let t = Instant::now();
    let before = Faults::of_thread();
    let populated = anon(bytes, page, libc::MAP_PRIVATE | libc::MAP_POPULATE)?;
    let mmap_faults = Faults::of_thread().since(before);
    let mmap_ns = t.elapsed().as_nanos() as f64;
    let populate = Populate {
        mmap_ns,
        mmap_faults,
        touch: touch(&populated, bytes, |m| m.write_every(bytes, page, 1)),
    };
    drop(populated);
    checks.push(Check::verdict(
        "after MAP_POPULATE touching the pages takes no faults (at most 1% of pages)",
        populate.touch.minor_faults <= few(pages),
        format!(
            "{} faults while touching; mmap itself took {} faults in {:.1} ms",
            populate.touch.minor_faults,
            mmap_faults.minor,
            mmap_ns / 1e6
        ),
    ));

    let file = if cfg.file_bytes == 0 {
        checks.push(Check::skipped(
            "a cold file read waits for the disk",
            "no file size given",
        ));
        None
    } else {
        Some(file_run(cfg, &mut checks)?)
    };

    Ok(FaultsReport {
        pages,
        faults_4k: anon_4k.minor_faults + anon_4k.major_faults,
        faults_thp: anon_thp.as_ref().map(|t| t.minor_faults + t.major_faults),
        thp_share,
        ns_per_fault_4k: anon_4k.ns_per_fault,
        thp_enabled: facts.thp_enabled.clone(),
        thp_defrag: facts.thp_defrag.clone(),
        anon_4k,
        anon_thp,
        populate,
        second_touch,
        file,
        checks,
    })
}

/// One percent of `pages`, plus a few faults of the measuring code itself (its stack).
fn few(pages: usize) -> u64 {
    (pages / 100 + 16) as u64
}

fn anon(bytes: usize, align: usize, flags: libc::c_int) -> Result<Mapping, LabError> {
    Mapping::anonymous(bytes, align, flags).map_err(LabError::io("mmap"))
}

/// Times `access` over `map` and counts this thread's faults meanwhile.
fn touch(map: &Mapping, bytes: usize, access: impl FnOnce(&Mapping)) -> Touch {
    let pages = bytes / page_bytes();
    let before = Faults::of_thread();
    let t = Instant::now();
    access(map);
    let ns = t.elapsed().as_nanos() as f64;
    let f = Faults::of_thread().since(before);
    let mem = mapping_memory(map.addr()).unwrap_or_default();
    let faults = f.minor + f.major;
    Touch {
        pages,
        minor_faults: f.minor,
        major_faults: f.major,
        ns,
        ns_per_fault: (faults > 0).then(|| ns / faults as f64),
        ns_per_page: ns / pages.max(1) as f64,
        rss_bytes: mem.rss_bytes,
        huge_bytes: mem.anon_huge_bytes,
    }
}

fn rss_check(expectation: &str, t: &Touch, bytes: usize) -> Check {
    let diff = (t.rss_bytes as f64 - bytes as f64).abs();
    Check::verdict(
        expectation,
        diff <= 0.1 * bytes as f64,
        format!(
            "RSS {} after writing {}",
            super::machine::bytes(t.rss_bytes),
            super::machine::bytes(bytes as u64)
        ),
    )
}

/// The THP pass: `Err(reason)` inside when huge pages cannot be asked for here.
fn thp_run(bytes: usize, facts: &MachineFacts) -> Result<Result<Touch, String>, LabError> {
    if let Err(reason) = facts.thp_usable() {
        return Ok(Err(reason));
    }
    let Some(huge) = facts.huge_page_bytes else {
        return Ok(Err("the kernel reports no huge page size".into()));
    };
    let map = anon(bytes, huge, libc::MAP_PRIVATE)?;
    if let Err(e) = map.advise(libc::MADV_HUGEPAGE) {
        return Ok(Err(format!("madvise(MADV_HUGEPAGE) failed: {e}")));
    }
    let page = page_bytes();
    Ok(Ok(touch(&map, bytes, |m| m.write_every(bytes, page, 1))))
}

/// Huge pages granted for a share `s` of the mapping replace `huge/page` faults by one each:
/// at most `(1-s)·pages + s·pages/(huge/page)` faults, with 5% of slack.
fn thp_check(t: &Touch, share: f64, facts: &MachineFacts) -> Check {
    let expectation = "huge pages granted mean fewer faults: one per huge page";
    if share == 0.0 {
        return Check::skipped(
            expectation,
            format!(
                "no huge page was granted (defrag={}; memory may be fragmented)",
                facts.thp_defrag.as_deref().unwrap_or("?")
            ),
        );
    }
    let per_huge = (facts.huge_page_bytes.unwrap_or(2 * MIB) / page_bytes()) as f64;
    let pages = t.pages as f64;
    let bound = (1.0 - share) * pages + share * pages / per_huge + 0.05 * pages + 16.0;
    let faults = t.minor_faults + t.major_faults;
    Check::verdict(
        expectation,
        faults as f64 <= bound,
        format!(
            "{:.1}% in huge pages, {faults} faults for {} pages (at most {bound:.0} expected)",
            100.0 * share,
            t.pages
        ),
    )
}

fn file_run(cfg: &FaultsConfig, checks: &mut Vec<Check>) -> Result<FileFaults, LabError> {
    let page = page_bytes();
    let file = ScratchFile::create(&cfg.dir, "faults", cfg.file_bytes)?;
    let dropped = file.drop_cache();
    let (cached, pages) = file.cached_pages()?;
    let cached_share = cached as f64 / pages as f64;
    let read = |f: &ScratchFile| -> Result<Touch, LabError> {
        // SAFETY: the scratch file is ours and not truncated while mapped.
        let map = unsafe { memmap2::Mmap::map(&f.file) }.map_err(LabError::io("mmap file"))?;
        let before = Faults::of_thread();
        let t = Instant::now();
        let sum = super::mapping::read_every(map.as_ptr(), f.len, page);
        let ns = t.elapsed().as_nanos() as f64;
        std::hint::black_box(sum);
        let faults = Faults::of_thread().since(before);
        let total = faults.minor + faults.major;
        let mem = mapping_memory(map.as_ptr() as usize).unwrap_or_default();
        Ok(Touch {
            pages,
            minor_faults: faults.minor,
            major_faults: faults.major,
            ns,
            ns_per_fault: (total > 0).then(|| ns / total as f64),
            ns_per_page: ns / pages as f64,
            rss_bytes: mem.rss_bytes,
            huge_bytes: mem.anon_huge_bytes,
        })
    };
    let cold = read(&file)?;
    let warm = read(&file)?;
    let expectation = "a cold read waits for the disk (major faults), a warm one does not";
    checks.push(match dropped {
        Err(e) => Check::skipped(expectation, format!("posix_fadvise(DONTNEED) failed: {e}")),
        Ok(()) if cached_share > 0.1 => Check::skipped(
            expectation,
            format!(
                "posix_fadvise(DONTNEED) left {:.0}% of the file cached (tmpfs keeps its pages)",
                100.0 * cached_share
            ),
        ),
        Ok(()) => Check::verdict(
            expectation,
            cold.major_faults > 0 && warm.major_faults == 0,
            format!(
                "cold: {} major + {} minor faults; warm: {} major + {} minor, for {pages} pages",
                cold.major_faults, cold.minor_faults, warm.major_faults, warm.minor_faults
            ),
        ),
    });
    Ok(FileFaults {
        bytes: file.len,
        cached_share_after_drop: cached_share,
        cold,
        warm,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> FaultsConfig {
        FaultsConfig {
            bytes: 4 * MIB,
            file_bytes: MIB,
            dir: std::env::temp_dir(),
        }
    }

    #[test]
    fn small_pages_fault_once_each_and_fill_the_rss() {
        let r = run(&tiny(), &MachineFacts::read()).unwrap();
        assert_eq!(r.pages, 1024);
        assert!(r.faults_4k >= 1024, "{}", r.faults_4k);
        assert_eq!(r.anon_4k.rss_bytes, 4 * MIB as u64);
        assert_eq!(r.anon_4k.huge_bytes, 0);
        assert!(r.second_touch.minor_faults <= few(1024));
        assert!(r.populate.touch.minor_faults <= few(1024));
        assert!((0.0..=1.0).contains(&r.thp_share));
        let file = r.file.as_ref().unwrap();
        assert_eq!(file.warm.major_faults, 0);
        let contradicted: Vec<_> = r.checks.iter().filter(|c| c.contradicted()).collect();
        assert!(contradicted.is_empty(), "{contradicted:?}");
    }

    #[test]
    fn the_thp_bound_counts_one_fault_per_huge_page() {
        let facts = MachineFacts {
            huge_page_bytes: Some(2 * MIB),
            ..MachineFacts::read()
        };
        let touch = |faults| Touch {
            pages: 1024,
            minor_faults: faults,
            major_faults: 0,
            ns: 1.0,
            ns_per_fault: None,
            ns_per_page: 1.0,
            rss_bytes: 0,
            huge_bytes: 0,
        };
        // All 4 MiB in huge pages: 2 faults expected, bound 2 + 51 + 16.
        assert!(!thp_check(&touch(2), 1.0, &facts).contradicted());
        assert!(!thp_check(&touch(69), 1.0, &facts).contradicted());
        assert!(thp_check(&touch(1024), 1.0, &facts).contradicted());
        // Half: 512 + 1 + 51 + 16.
        assert!(!thp_check(&touch(580), 0.5, &facts).contradicted());
        assert!(thp_check(&touch(700), 0.5, &facts).contradicted());
        assert_eq!(
            thp_check(&touch(1024), 0.0, &facts).status,
            super::super::CheckStatus::Skipped
        );
    }

    #[test]
    fn zero_and_absurd_sizes_are_bad_input() {
        let facts = MachineFacts::read();
        let zero = FaultsConfig { bytes: 0, ..tiny() };
        assert!(matches!(run(&zero, &facts), Err(LabError::Invalid(_))));
        let huge = FaultsConfig {
            bytes: usize::MAX / 2,
            ..tiny()
        };
        assert!(matches!(run(&huge, &facts), Err(LabError::Invalid(_))));
    }
}
