//! Caches and the TLB seen through a dependent random pointer chase ([`super::chase`]) over
//! working sets growing by doubling, with 4 KiB pages and with 2 MiB transparent huge pages.
//! Where a cache level runs out the time per access steps up; where the 4 KiB TLB's reach runs
//! out (entries x 4 KiB) every access also walks the page table, which huge pages spare.

use super::chase::{self, sattolo_cycle};
use super::machine::{bytes as show, page_bytes, MachineFacts};
use super::mapping::Mapping;
use super::procstat::{mapping_memory, thread_cpu_ns};
use super::tlb_entries::TlbLevel;
use super::{Check, LabError, Spread, GIB, KIB};
use crate::device::cpu::last_level_cache::last_level_cache;
use serde::Serialize;

#[derive(Debug, Clone, Copy)]
pub struct TlbConfig {
    pub min_bytes: usize,
    pub max_bytes: usize,
    /// Dependent loads timed per repetition at most (fewer for slow rows: ~10 ms a repetition).
    pub steps: usize,
    pub reps: usize,
    /// Also run every working set on 2 MiB pages.
    pub huge: bool,
    pub seed: u64,
}

impl Default for TlbConfig {
    fn default() -> Self {
        TlbConfig {
            min_bytes: 16 * KIB,
            max_bytes: GIB,
            steps: 1 << 17,
            reps: 5,
            huge: true,
            seed: 1,
        }
    }
}

/// The whole chain is walked to check it visits every line up to this working set; larger ones
/// would spend seconds on it (the permutation itself is tested in `chase`).
const VERIFY_UP_TO: usize = 16 << 20;
/// A repetition lasts about this long, and takes at least `MIN_STEPS` loads.
const REP_BUDGET_NS: f64 = 10e6;
const MIN_STEPS: usize = 1 << 14;

#[derive(Debug, Clone, Serialize)]
pub struct TlbRow {
    pub working_set_bytes: usize,
    pub page_bytes: usize,
    /// Median over repetitions, in thread CPU time (preemption excluded).
    pub ns_per_access: f64,
    pub spread: Spread,
    /// Share of the mapping under it in huge pages (smaps `AnonHugePages`).
    pub huge_share: f64,
    pub lines: usize,
    /// Dependent loads timed per repetition.
    pub steps: usize,
    /// The chain was walked and visits every line once; null when too large to walk.
    pub cycle_verified: Option<bool>,
}

/// What the 4 KiB series shows around one size the machine reports (a cache, a TLB's reach).
#[derive(Debug, Clone, Serialize)]
pub struct Level {
    pub name: String,
    pub size_bytes: usize,
    /// ns per access at the largest working set <= size/2, and at the smallest >= 2 x size.
    pub inside_ns: Option<f64>,
    pub beyond_ns: Option<f64>,
    /// The working set in (size/2, 4 x size] with the steepest rise over the one before it.
    pub step_at_bytes: Option<usize>,
    pub step_ratio: Option<f64>,
    /// ns with 4 KiB pages / ns with 2 MiB pages at the smallest working set >= 2 x size.
    pub huge_gain_beyond: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct TlbReport {
    pub line_bytes: usize,
    pub rows: Vec<TlbRow>,
    pub levels: Vec<Level>,
    /// Data TLBs from cpuid, with their reach (entries x page size).
    pub tlb: Vec<TlbReach>,
    /// 4 KiB over 2 MiB time per access at the largest working set.
    pub huge_gain_at_max: Option<f64>,
    /// Why the 2 MiB series is missing, when it is.
    pub huge_skipped: Option<String>,
    pub checks: Vec<Check>,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub struct TlbReach {
    #[serde(flatten)]
    pub tlb: TlbLevel,
    pub reach_bytes: usize,
}

/// The working sets of a sweep: doublings from `min` up to `max`.
pub fn working_sets(
    cfg: &TlbConfig,
    line: usize,
    facts: &MachineFacts,
) -> Result<Vec<usize>, LabError> {
    if cfg.min_bytes < 2 * line {
        return Err(LabError::Invalid(format!(
            "the smallest working set must hold two cache lines ({} bytes)",
            2 * line
        )));
    }
    if cfg.max_bytes < cfg.min_bytes {
        return Err(LabError::Invalid(
            "the largest working set is below the smallest".into(),
        ));
    }
    let limit = facts.memory.mem_total_bytes.map_or(u64::MAX, |m| m / 4);
    if cfg.max_bytes as u64 > limit || cfg.max_bytes / line > u32::MAX as usize {
        return Err(LabError::Invalid(format!(
            "a working set of {} is absurd here (a quarter of memory is {})",
            show(cfg.max_bytes as u64),
            show(limit)
        )));
    }
    super::error::positive(cfg.steps, "the steps")?;
    super::error::positive(cfg.reps, "the repetitions")?;
    Ok(
        std::iter::successors(Some(cfg.min_bytes), |&w| w.checked_mul(2))
            .take_while(|&w| w <= cfg.max_bytes)
            .map(|w| w / line * line)
            .collect(),
    )
}

pub fn run(cfg: &TlbConfig, facts: &MachineFacts) -> Result<TlbReport, LabError> {
    let line = facts
        .data_caches()
        .first()
        .map_or(64, |c| c.line_bytes)
        .max(std::mem::size_of::<usize>());
    let sizes = working_sets(cfg, line, facts)?;
    let max = *sizes.last().expect("at least one working set");
    let huge_skipped = if !cfg.huge {
        Some("not asked for".to_string())
    } else {
        facts.thp_usable().err()
    };
    let huge = facts.huge_page_bytes.unwrap_or(2 << 20);
    // One mapping per page size, faulted in once: every working set is a prefix of it, so its
    // faults (seconds for 1 GiB of huge pages on some machines) are paid once, not per size.
    let small_map = Arena::new(max, page_bytes())?;
    let huge_map = match huge_skipped {
        None => Some(Arena::new(max, huge)?),
        Some(_) => None,
    };
    let mut rows = Vec::new();
    for (i, &ws) in sizes.iter().enumerate() {
        let next = sattolo_cycle(ws / line, cfg.seed.wrapping_add(i as u64));
        for arena in std::iter::once(&small_map).chain(&huge_map) {
            rows.push(measure(arena, ws, line, &next, cfg));
        }
    }
    Ok(summarise(rows, facts, line, huge, huge_skipped))
}

/// A mapping on one page size, every page faulted in.
struct Arena {
    map: Mapping,
    page: usize,
    /// Share of the mapping in huge pages (smaps `AnonHugePages`).
    huge_share: f64,
}

impl Arena {
    fn new(bytes: usize, page: usize) -> Result<Arena, LabError> {
        let small = page == page_bytes();
        // A huge page needs an aligned range of its own, even under a smaller working set.
        let len = if small {
            bytes
        } else {
            bytes.next_multiple_of(page)
        };
        let map = Mapping::anonymous(len, page, libc::MAP_PRIVATE).map_err(LabError::io("mmap"))?;
        let advice = if small {
            libc::MADV_NOHUGEPAGE
        } else {
            libc::MADV_HUGEPAGE
        };
        map.advise(advice).map_err(LabError::io("madvise"))?;
        map.write_every(len, page_bytes(), 1);
        let huge_share =
            mapping_memory(map.addr()).map_or(0.0, |m| m.anon_huge_bytes as f64 / len as f64);
        Ok(Arena {
            map,
            page,
            huge_share,
        })
    }
}

/// One working set on one page size: the chain written, walked once to check it (when small
/// enough), warmed, then timed in thread CPU time.
fn measure(arena: &Arena, ws: usize, line: usize, next: &[u32], cfg: &TlbConfig) -> TlbRow {
    let base = arena.map.as_ptr();
    let lines = next.len();
    // SAFETY: `lines * line == ws` bytes, within the arena, which outlives the walks.
    unsafe { chase::write_chain(base, line, next) };
    let cycle_verified = (ws <= VERIFY_UP_TO)
        // SAFETY: the chain was written above.
        .then(|| unsafe { chase::visits_every_line(base, lines) });
    let warmup = cfg.steps.min(lines).max(1);
    let t = thread_cpu_ns();
    // SAFETY: as above.
    let mut at = unsafe { chase::chase(base, warmup) };
    let per_step = (thread_cpu_ns() - t) as f64 / warmup as f64;
    // Slow (DRAM) rows take fewer steps, so the sweep stays within seconds.
    let steps =
        ((REP_BUDGET_NS / per_step.max(0.1)) as usize).clamp(MIN_STEPS.min(cfg.steps), cfg.steps);
    let samples: Vec<f64> = (0..cfg.reps)
        .map(|_| {
            let t = thread_cpu_ns();
            // SAFETY: `at` is a line of the chain.
            at = unsafe { chase::chase(at, steps) };
            (thread_cpu_ns() - t) as f64 / steps as f64
        })
        .collect();
    std::hint::black_box(at);
    let spread = Spread::of(&samples);
    TlbRow {
        working_set_bytes: ws,
        page_bytes: arena.page,
        ns_per_access: spread.median,
        spread,
        huge_share: arena.huge_share,
        lines,
        steps,
        cycle_verified,
    }
}

fn summarise(
    rows: Vec<TlbRow>,
    facts: &MachineFacts,
    line: usize,
    huge: usize,
    huge_skipped: Option<String>,
) -> TlbReport {
    let small: Vec<&TlbRow> = rows.iter().filter(|r| r.page_bytes != huge).collect();
    let ns_huge = |ws: usize| {
        rows.iter()
            .find(|r| r.page_bytes == huge && r.working_set_bytes == ws)
            .map(|r| r.ns_per_access)
    };
    let level = |name: String, size: usize| {
        let inside = small.iter().rev().find(|r| r.working_set_bytes <= size / 2);
        let beyond = small.iter().find(|r| r.working_set_bytes >= 2 * size);
        let step = small
            .windows(2)
            .filter(|w| w[1].working_set_bytes > size / 2 && w[1].working_set_bytes <= 4 * size)
            .map(|w| {
                (
                    w[1].working_set_bytes,
                    w[1].ns_per_access / w[0].ns_per_access,
                )
            })
            .max_by(|a, b| a.1.total_cmp(&b.1));
        Level {
            name,
            size_bytes: size,
            inside_ns: inside.map(|r| r.ns_per_access),
            beyond_ns: beyond.map(|r| r.ns_per_access),
            step_at_bytes: step.map(|s| s.0),
            step_ratio: step.map(|s| s.1),
            huge_gain_beyond: beyond
                .and_then(|r| ns_huge(r.working_set_bytes).map(|h| r.ns_per_access / h)),
        }
    };
    let mut levels: Vec<Level> = facts
        .data_caches()
        .iter()
        .map(|c| level(c.name(), c.size_bytes))
        .collect();
    let page = page_bytes();
    let tlb: Vec<TlbReach> = facts
        .tlb
        .iter()
        .map(|&t| TlbReach {
            tlb: t,
            reach_bytes: t.reach_bytes(),
        })
        .collect();
    for t in tlb.iter().filter(|t| t.tlb.page_bytes == page) {
        levels.push(level(
            format!("L{} DTLB reach ({} x 4 KiB)", t.tlb.level, t.tlb.entries),
            t.reach_bytes,
        ));
    }
    let last = small.last().copied();
    let huge_gain_at_max =
        last.and_then(|r| ns_huge(r.working_set_bytes).map(|h| r.ns_per_access / h));
    let checks = checks(&rows, &small, facts, &tlb, huge, huge_skipped.as_deref());
    TlbReport {
        line_bytes: line,
        rows,
        levels,
        tlb,
        huge_gain_at_max,
        huge_skipped,
        checks,
    }
}

fn checks(
    rows: &[TlbRow],
    small: &[&TlbRow],
    facts: &MachineFacts,
    tlb: &[TlbReach],
    huge: usize,
    huge_skipped: Option<&str>,
) -> Vec<Check> {
    vec![
        chains_check(rows),
        caches_check(small, facts),
        huge_pages_check(rows, small, facts, tlb, huge, huge_skipped),
    ]
}

/// Every chain walked is one cycle through every line of its working set.
fn chains_check(rows: &[TlbRow]) -> Check {
    let walked: Vec<&TlbRow> = rows.iter().filter(|r| r.cycle_verified.is_some()).collect();
    let broken = walked
        .iter()
        .filter(|r| r.cycle_verified == Some(false))
        .count();
    let expectation = "every chase is one cycle through every line of its working set";
    if walked.is_empty() {
        Check::skipped(
            expectation,
            format!(
                "every working set is over {}: too large to walk whole",
                show(VERIFY_UP_TO as u64)
            ),
        )
    } else {
        Check::verdict(
            expectation,
            broken == 0,
            format!(
                "{} of {} chains walked ({} too large to walk)",
                walked.len() - broken,
                walked.len(),
                rows.len() - walked.len()
            ),
        )
    }
}

/// Memory beyond the last cache is slower than the L1 cache.
fn caches_check(small: &[&TlbRow], facts: &MachineFacts) -> Check {
    let caches = facts.data_caches();
    let expectation = "memory beyond the last cache is slower than the L1 cache (over 2x)";
    match (caches.first(), caches.last()) {
        (Some(l1), Some(llc)) => {
            // The last cache as this run has it, not sysfs's figure alone (a VM's may be its
            // host's whole cache, beyond any working set here).
            let llc_bytes = llc.size_bytes.min(last_level_cache().bytes);
            let inside = small
                .iter()
                .rev()
                .find(|r| r.working_set_bytes <= l1.size_bytes / 2);
            let beyond = small.iter().find(|r| r.working_set_bytes >= 4 * llc_bytes);
            match (inside, beyond) {
                (Some(i), Some(b)) => Check::verdict(
                    expectation,
                    b.ns_per_access > 2.0 * i.ns_per_access,
                    format!(
                        "{:.1} ns at {} vs {:.1} ns at {}",
                        b.ns_per_access,
                        show(b.working_set_bytes as u64),
                        i.ns_per_access,
                        show(i.working_set_bytes as u64)
                    ),
                ),
                _ => Check::skipped(
                    expectation,
                    format!(
                        "the sweep does not span {} (half of {}) to {} (4x the {} this run has)",
                        show(l1.size_bytes as u64 / 2),
                        l1.name(),
                        show(4 * llc_bytes as u64),
                        llc.name()
                    ),
                ),
            }
        }
        _ => Check::skipped(expectation, "the machine reports no caches"),
    }
}

/// Beyond the 4 KiB TLB's reach, huge pages make the chase faster.
fn huge_pages_check(
    rows: &[TlbRow],
    small: &[&TlbRow],
    facts: &MachineFacts,
    tlb: &[TlbReach],
    huge: usize,
    huge_skipped: Option<&str>,
) -> Check {
    let expectation = "beyond the 4 KiB TLB's reach, huge pages make the chase faster";
    let reach = tlb
        .iter()
        .filter(|t| t.tlb.page_bytes == page_bytes())
        .map(|t| t.reach_bytes)
        .max();
    let last = small.last();
    let last_huge = last.and_then(|l| {
        rows.iter()
            .find(|r| r.page_bytes == huge && r.working_set_bytes == l.working_set_bytes)
    });
    match (huge_skipped, reach, last, last_huge) {
        (Some(why), ..) => Check::skipped(expectation, format!("no 2 MiB pages: {why}")),
        (_, None, ..) => Check::skipped(expectation, "cpuid reports no TLB sizes"),
        (_, Some(reach), Some(l), Some(h)) if l.working_set_bytes >= 2 * reach => {
            let measured = format!(
                "{:.1} ns with 4 KiB vs {:.1} ns with 2 MiB pages at {}",
                l.ns_per_access,
                h.ns_per_access,
                show(l.working_set_bytes as u64)
            );
            if h.huge_share < 0.9 {
                Check::skipped(
                    expectation,
                    format!(
                        "only {:.0}% of the 2 MiB mapping was granted huge pages; {measured}",
                        100.0 * h.huge_share
                    ),
                )
            } else if facts.hypervisor && h.ns_per_access >= l.ns_per_access {
                // The TLB caches guest-virtual to host-physical translations: on a host that
                // backs the guest with 4 KiB pages they are 4 KiB whatever the guest's size, so
                // no gain here does not contradict this machine.
                Check::skipped(
                    expectation,
                    format!(
                        "under a hypervisor the host's page size also bounds the TLB's reach, and \
                         it cannot be seen from here; {measured}"
                    ),
                )
            } else {
                Check::verdict(expectation, h.ns_per_access < l.ns_per_access, measured)
            }
        }
        (_, Some(reach), ..) => Check::skipped(
            expectation,
            format!(
                "the sweep stops below twice the 4 KiB TLB reach ({})",
                show(2 * reach as u64)
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> TlbConfig {
        TlbConfig {
            min_bytes: 4 * KIB,
            max_bytes: 64 * KIB,
            steps: 2000,
            reps: 2,
            huge: true,
            seed: 3,
        }
    }

    #[test]
    fn a_tiny_sweep_verifies_every_chain() {
        let facts = MachineFacts::read();
        let r = run(&tiny(), &facts).unwrap();
        let small: Vec<_> = r.rows.iter().filter(|r| r.page_bytes == 4096).collect();
        let sizes: Vec<usize> = small.iter().map(|r| r.working_set_bytes).collect();
        assert_eq!(sizes, [4096, 8192, 16384, 32768, 65536]);
        for row in &r.rows {
            assert_eq!(row.cycle_verified, Some(true));
            assert_eq!(row.lines, row.working_set_bytes / r.line_bytes);
            assert!(row.ns_per_access > 0.0 && row.ns_per_access.is_finite());
        }
        if r.huge_skipped.is_none() {
            assert_eq!(r.rows.len(), 10);
        }
        assert!(r.checks.iter().all(|c| !c.contradicted()), "{:?}", r.checks);
    }

    #[test]
    fn working_sets_double_and_absurd_ones_are_refused() {
        let facts = MachineFacts::read();
        let ws = working_sets(&tiny(), 64, &facts).unwrap();
        assert_eq!(ws, [4096, 8192, 16384, 32768, 65536]);
        let bad = [
            TlbConfig {
                min_bytes: 64,
                ..tiny()
            },
            TlbConfig {
                max_bytes: 1024,
                ..tiny()
            },
            TlbConfig {
                max_bytes: usize::MAX,
                ..tiny()
            },
            TlbConfig { steps: 0, ..tiny() },
        ];
        for cfg in bad {
            assert!(matches!(
                working_sets(&cfg, 64, &facts),
                Err(LabError::Invalid(_))
            ));
        }
    }
}
