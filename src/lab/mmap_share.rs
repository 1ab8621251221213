//! N processes map one file and each reads its own slice, plus a region all of them read (the
//! tensor-parallel weight-loading question: does every rank pay for the whole file?). The page
//! cache holds each file page once; every process maps the pages it touched, and smaps shows the
//! sharing: pages mapped by several processes are `Shared_Clean` and count 1/N in each `Pss`.

use super::fork::{self, Pipe};
use super::machine::{bytes as show, page_bytes, MachineFacts, MemInfo};
use super::procstat::{mapping_memory_of, Faults};
use super::scratch::ScratchFile;
use super::{Check, LabError, KIB, MIB};
use serde::Serialize;
use std::os::fd::OwnedFd;
use std::path::PathBuf;

/// Slices are whole multiples of this, the kernel's default fault-around window, so mapping the
/// neighbours of a faulting page never reaches into another process's slice.
const SLICE_ALIGN: usize = 64 * KIB;
/// The largest fault-around window (one page table): each reader maps the file at a multiple.
const MAP_ALIGN: usize = 2 * MIB;
const MAX_PROCESSES: usize = 64;

#[derive(Debug, Clone)]
pub struct ShareConfig {
    pub processes: usize,
    pub file_bytes: usize,
    /// Bytes at the start of the file that every process reads (embeddings, norms).
    pub shared_bytes: usize,
    pub dir: PathBuf,
}

impl Default for ShareConfig {
    fn default() -> Self {
        ShareConfig {
            processes: 4,
            file_bytes: 64 * MIB,
            shared_bytes: 8 * MIB,
            dir: std::env::temp_dir(),
        }
    }
}

/// One process's view of its file mapping (its smaps entry, read while it is alive).
#[derive(Debug, Clone, Serialize)]
pub struct ProcessRow {
    pub slice_offset: usize,
    pub slice_bytes: usize,
    pub rss_bytes: u64,
    pub pss_bytes: u64,
    pub shared_clean_bytes: u64,
    pub private_clean_bytes: u64,
    pub minor_faults: u64,
    pub major_faults: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ShareReport {
    pub processes: usize,
    pub file_bytes: usize,
    pub shared_bytes: usize,
    pub slice_bytes: usize,
    pub rows: Vec<ProcessRow>,
    /// What each process read: the shared region and its slice.
    pub read_per_process_bytes: usize,
    /// Distinct file bytes read by any process.
    pub distinct_bytes: usize,
    pub sum_rss_bytes: u64,
    pub sum_pss_bytes: u64,
    /// The file's pages in the page cache (mincore) after its cache was dropped, and while the
    /// processes hold their mappings.
    pub file_cached_before_bytes: u64,
    pub file_cached_after_bytes: u64,
    /// Growth of `Cached` in /proc/meminfo: system-wide, so other processes' I/O adds noise.
    pub page_cache_growth_bytes: Option<i64>,
    pub checks: Vec<Check>,
}

/// Exit codes of a reader.
const MAP_FAILED: i32 = 3;
const PARENT_GONE: i32 = 4;

pub fn run(cfg: &ShareConfig, facts: &MachineFacts) -> Result<ShareReport, LabError> {
    let l = layout(cfg, facts)?;
    let (n, shared, slice) = (l.processes, l.shared, l.slice);
    let page = page_bytes();
    let file = ScratchFile::create(&cfg.dir, "share", cfg.file_bytes)?;
    let dropped = file.drop_cache();
    let cached_before = file.cached_pages()?.0;
    let meminfo_before = MemInfo::read().cached_bytes;

    let reports_pipe = Pipe::new()?;
    let release = Pipe::new()?;
    let fd = std::os::fd::AsRawFd::as_raw_fd(&file.file);
    let len = file.len;
    let mut children = Vec::with_capacity(n);
    for index in 0..n {
        let reader = Reader {
            index,
            fd,
            len,
            shared,
            offset: shared + index * slice,
            slice,
            page,
        };
        // SAFETY: the body maps the file, reads it, reads counters and talks through pipes:
        // system calls and memory reads only.
        let child =
            unsafe { fork::spawn(|| reader.read_and_report(&reports_pipe.write, &release.read)) }?;
        children.push(child);
    }
    drop(reports_pipe.write);
    let rows = collect_rows(&reports_pipe.read, &children, l)?;
    let cached_after = file.cached_pages()?.0;
    let meminfo_after = MemInfo::read().cached_bytes;
    fork::write_all(&release.write, &vec![1u8; n]);
    for (i, child) in children.into_iter().enumerate() {
        match child.wait()? {
            0 => {}
            MAP_FAILED => {
                return Err(LabError::Child(format!(
                    "reader {i} could not map the file"
                )))
            }
            code => return Err(LabError::Child(format!("reader {i} exited with {code}"))),
        }
    }
    let cold = dropped.is_ok() && cached_before * page <= len / 10;
    let checks = checks(&rows, l, cold, cached_before * page);
    Ok(ShareReport {
        processes: n,
        file_bytes: len,
        shared_bytes: shared,
        slice_bytes: slice,
        read_per_process_bytes: l.per_process(),
        distinct_bytes: l.distinct(),
        sum_rss_bytes: rows.iter().map(|r| r.rss_bytes).sum(),
        sum_pss_bytes: rows.iter().map(|r| r.pss_bytes).sum(),
        rows,
        file_cached_before_bytes: (cached_before * page) as u64,
        file_cached_after_bytes: (cached_after * page) as u64,
        page_cache_growth_bytes: meminfo_before
            .zip(meminfo_after)
            .map(|(b, a)| a as i64 - b as i64),
        checks,
    })
}

/// How the file is cut: the region every process reads at its start, then one slice per
/// process (both whole multiples of [`SLICE_ALIGN`]).
#[derive(Debug, Clone, Copy)]
struct Layout {
    processes: usize,
    shared: usize,
    slice: usize,
}

impl Layout {
    /// What each process reads.
    fn per_process(&self) -> usize {
        self.shared + self.slice
    }

    /// The distinct file bytes read by any process.
    fn distinct(&self) -> usize {
        self.shared + self.processes * self.slice
    }
}

/// The settings checked and the file cut into the shared region and the slices.
fn layout(cfg: &ShareConfig, facts: &MachineFacts) -> Result<Layout, LabError> {
    let n = super::error::positive(cfg.processes, "the process count")?;
    if n > MAX_PROCESSES {
        return Err(LabError::Invalid(format!(
            "at most {MAX_PROCESSES} processes"
        )));
    }
    super::error::positive(cfg.file_bytes, "the file size")?;
    let total = facts.memory.mem_total_bytes;
    super::error::at_most_half_memory(cfg.file_bytes as u64, "a file of", total)?;
    let shared = cfg
        .shared_bytes
        .min(cfg.file_bytes)
        .next_multiple_of(SLICE_ALIGN);
    let slice = cfg.file_bytes.saturating_sub(shared) / n / SLICE_ALIGN * SLICE_ALIGN;
    if slice == 0 {
        return Err(LabError::Invalid(format!(
            "{} minus the shared {} leaves less than {} per process",
            show(cfg.file_bytes as u64),
            show(shared as u64),
            show(SLICE_ALIGN as u64)
        )));
    }
    Ok(Layout {
        processes: n,
        shared,
        slice,
    })
}

/// What one reader process needs: plain values only (its body allocates nothing).
#[derive(Debug, Clone, Copy)]
struct Reader {
    index: usize,
    fd: std::os::fd::RawFd,
    len: usize,
    shared: usize,
    offset: usize,
    slice: usize,
    page: usize,
}

impl Reader {
    /// The reader's body: maps the file, reads the shared region and its slice, reports
    /// `[index, mapping address, minor faults, major faults]`, then holds its mapping until
    /// released. Returns its exit code.
    fn read_and_report(self, reports: &OwnedFd, release: &OwnedFd) -> i32 {
        let Reader {
            index: i,
            fd,
            len,
            shared,
            offset,
            slice,
            page,
        } = self;
        // SAFETY: system calls, and reads inside the mapping just made (`shared` and the slice
        // lie within the file's `len` bytes).
        unsafe {
            // The file mapped at a 2 MiB-aligned address: fault-around maps the cached
            // neighbours of a faulting page within an aligned window of *virtual* addresses,
            // so only then do its windows line up with the slices' file offsets.
            let room = libc::mmap(
                std::ptr::null_mut(),
                len + MAP_ALIGN,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            );
            if room == libc::MAP_FAILED {
                return MAP_FAILED;
            }
            let at = (room as usize).next_multiple_of(MAP_ALIGN);
            let ptr = libc::mmap(
                at as *mut libc::c_void,
                len,
                libc::PROT_READ,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd,
                0,
            );
            if ptr == libc::MAP_FAILED {
                return MAP_FAILED;
            }
            let ptr = ptr.cast::<u8>();
            let before = Faults::of_thread();
            let sum = super::mapping::read_every(ptr, shared, page)
                .wrapping_add(super::mapping::read_every(ptr.add(offset), slice, page));
            std::hint::black_box(sum);
            let f = Faults::of_thread().since(before);
            // One write of at most PIPE_BUF bytes: the readers' reports never interleave.
            let sent = fork::send_words(reports, [i as u64, ptr as u64, f.minor, f.major]);
            let mut go = [0u8];
            if sent && fork::read_exact(release, &mut go) {
                0
            } else {
                PARENT_GONE
            }
        }
    }
}

/// Every reader's report, then its mapping as its smaps shows it: every reader reports after its
/// reads, so only when all have reported are their mappings final.
fn collect_rows(
    reports_read: &OwnedFd,
    children: &[fork::Child],
    l: Layout,
) -> Result<Vec<ProcessRow>, LabError> {
    let n = l.processes;
    let mut reports: Vec<Option<[u64; 3]>> = vec![None; n];
    for _ in 0..n {
        let [i, addr, minor, major] = fork::receive_words::<4>(reports_read)?;
        let slot = reports
            .get_mut(i as usize)
            .ok_or_else(|| LabError::Child(format!("unknown reader {i}")))?;
        *slot = Some([addr, minor, major]);
    }
    let mut rows = Vec::with_capacity(n);
    for (i, (report, child)) in reports.iter().zip(children).enumerate() {
        let [addr, minor, major] =
            report.ok_or_else(|| LabError::Child(format!("reader {i} sent no report")))?;
        let pid = child.pid();
        let mem = mapping_memory_of(Some(pid), addr as usize).ok_or_else(|| {
            LabError::Child(format!(
                "reader {i}: no mapping at {addr:#x} in /proc/{pid}/smaps"
            ))
        })?;
        rows.push(ProcessRow {
            slice_offset: l.shared + i * l.slice,
            slice_bytes: l.slice,
            rss_bytes: mem.rss_bytes,
            pss_bytes: mem.pss_bytes,
            shared_clean_bytes: mem.shared_clean_bytes,
            private_clean_bytes: mem.private_clean_bytes,
            minor_faults: minor,
            major_faults: major,
        });
    }
    Ok(rows)
}

/// The lab's checks: RSS per process, PSS adding up to the distinct bytes, the shared region
/// shared, and (when the file's cache was dropped: `cold`) major faults.
fn checks(rows: &[ProcessRow], l: Layout, cold: bool, cached_before_bytes: usize) -> Vec<Check> {
    let (n, shared) = (l.processes, l.shared);
    let (per_process, distinct) = (l.per_process(), l.distinct());
    let sum_rss: u64 = rows.iter().map(|r| r.rss_bytes).sum();
    let sum_pss: u64 = rows.iter().map(|r| r.pss_bytes).sum();
    let within = |got: u64, want: usize| (got as f64 - want as f64).abs() <= 0.1 * want as f64;
    let mut checks = vec![
        Check::verdict(
            "each process holds the pages it read: its RSS is the shared region plus its slice \
             (within 10%)",
            rows.iter().all(|r| within(r.rss_bytes, per_process)),
            format!(
                "RSS {} per process for {} read",
                rows.iter()
                    .map(|r| show(r.rss_bytes))
                    .collect::<Vec<_>>()
                    .join(", "),
                show(per_process as u64)
            ),
        ),
        Check::verdict(
            "each file page exists once: the processes' PSS adds up to the distinct bytes read \
             (within 10%), not to the sum of their RSS",
            within(sum_pss, distinct),
            format!(
                "sum of PSS {}, distinct bytes read {}, sum of RSS {}",
                show(sum_pss),
                show(distinct as u64),
                show(sum_rss)
            ),
        ),
    ];
    if n >= 2 {
        checks.push(Check::verdict(
            "pages every process read are shared: each mapping's Shared_Clean is the shared \
             region (within 10%)",
            rows.iter().all(|r| within(r.shared_clean_bytes, shared)),
            format!(
                "Shared_Clean {} per process for a shared region of {}",
                rows.iter()
                    .map(|r| show(r.shared_clean_bytes))
                    .collect::<Vec<_>>()
                    .join(", "),
                show(shared as u64)
            ),
        ));
    }
    let expectation = "the readers' first touches went to the disk (major faults)";
    checks.push(if cold {
        Check::verdict(
            expectation,
            rows.iter().map(|r| r.major_faults).sum::<u64>() > 0,
            format!(
                "{} major faults in all",
                rows.iter().map(|r| r.major_faults).sum::<u64>()
            ),
        )
    } else {
        Check::skipped(
            expectation,
            format!(
                "the file's cache could not be dropped ({} still cached)",
                show(cached_before_bytes as u64)
            ),
        )
    });
    checks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_readers_share_the_common_region() {
        let cfg = ShareConfig {
            processes: 3,
            file_bytes: 4 * MIB,
            shared_bytes: MIB,
            dir: std::env::temp_dir(),
        };
        let r = run(&cfg, &MachineFacts::read()).unwrap();
        assert_eq!(r.rows.len(), 3);
        assert_eq!(r.slice_bytes, MIB);
        assert_eq!(r.distinct_bytes, 4 * MIB);
        // Never more than was read: slices and mappings are aligned to the fault-around window,
        // which maps no neighbour. At most 1% less, for the few clean file pages the kernel may
        // reclaim or migrate between the reads and the look at smaps.
        let read = |got: u64, want: usize| got <= want as u64 && got as f64 >= 0.99 * want as f64;
        for row in &r.rows {
            assert!(read(row.rss_bytes, 2 * MIB), "{row:?}");
            assert!(read(row.shared_clean_bytes, MIB), "{row:?}");
        }
        // The shared MiB counts a third in each PSS: 3 x (1/3 + 1) MiB = 4 MiB.
        let pss = r.sum_pss_bytes as f64;
        assert!(
            (pss - (4 * MIB) as f64).abs() < 0.02 * (4 * MIB) as f64,
            "{pss}"
        );
        assert!(read(r.sum_rss_bytes, 6 * MIB), "{}", r.sum_rss_bytes);
        assert!(r.file_cached_after_bytes >= 4 * MIB as u64);
        assert!(r.checks.iter().all(|c| !c.contradicted()), "{:?}", r.checks);
    }

    #[test]
    fn bad_shapes_are_bad_input() {
        let facts = MachineFacts::read();
        for cfg in [
            ShareConfig {
                processes: 0,
                ..Default::default()
            },
            ShareConfig {
                processes: 1000,
                ..Default::default()
            },
            ShareConfig {
                file_bytes: 0,
                ..Default::default()
            },
            ShareConfig {
                file_bytes: MIB,
                shared_bytes: MIB,
                ..Default::default()
            },
            ShareConfig {
                file_bytes: usize::MAX / 2,
                ..Default::default()
            },
        ] {
            assert!(
                matches!(run(&cfg, &facts), Err(LabError::Invalid(_))),
                "{cfg:?}"
            );
        }
    }
}
