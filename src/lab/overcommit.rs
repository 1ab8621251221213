//! Overcommit: reserve far more virtual memory than the machine has (`MAP_NORESERVE`), write a
//! little of it, and watch RSS follow the writes, not the reservation. Beside it, what the
//! kernel's `vm.overcommit_memory` mode does with the same request when it is accounted, and
//! what strict accounting (mode 2) would refuse.

use super::machine::{bytes as show, page_bytes, MachineFacts};
use super::mapping::Mapping;
use super::procstat::{mapping_memory, rollup, virtual_bytes};
use super::{Check, LabError, GIB, MIB};
use serde::Serialize;
use std::time::Instant;

/// Above this a reservation is refused as absurd: x86-64 user space has 128 TiB.
const MAX_RESERVE: usize = 64 << 40;

#[derive(Debug, Clone, Copy)]
pub struct OvercommitConfig {
    /// Bytes reserved; `None`: 1 TiB, or twice RAM + swap if that is more.
    pub reserve_bytes: Option<usize>,
    /// Bytes written at the start of the reservation.
    pub write_bytes: usize,
}

impl Default for OvercommitConfig {
    fn default() -> Self {
        OvercommitConfig {
            reserve_bytes: None,
            write_bytes: 64 * MIB,
        }
    }
}

/// The same size asked for with accounting (no `MAP_NORESERVE`).
#[derive(Debug, Clone, Serialize)]
pub struct Accounted {
    pub granted: bool,
    /// What the mode predicts: mode 0 refuses more than RAM + swap in one request, mode 1
    /// grants everything, mode 2 refuses past CommitLimit. Null when the request is too close
    /// to the limit to call.
    pub predicted: Option<bool>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct OvercommitReport {
    pub reserved_bytes: usize,
    /// The `MAP_NORESERVE` reservation was granted (mode 2 ignores the flag and may refuse).
    pub reservation_granted: bool,
    pub reservation_error: Option<String>,
    pub written_bytes: usize,
    pub write_ns: f64,
    /// This process's RSS before reserving and after writing.
    pub rss_before_bytes: u64,
    pub rss_after_bytes: u64,
    /// The reservation's own resident bytes (smaps) after reserving and after writing.
    pub mapping_rss_reserved_bytes: u64,
    pub mapping_rss_written_bytes: u64,
    pub virtual_before_bytes: Option<u64>,
    pub virtual_after_bytes: Option<u64>,
    pub overcommit_memory: Option<u32>,
    pub overcommit_ratio: Option<u32>,
    pub mem_total_bytes: Option<u64>,
    pub swap_total_bytes: Option<u64>,
    pub commit_limit_bytes: Option<u64>,
    pub committed_as_bytes: Option<u64>,
    /// CommitLimit - Committed_AS: the largest new commitment mode 2 would grant now.
    pub mode2_headroom_bytes: Option<i64>,
    pub mode2_would_refuse: Option<bool>,
    pub accounted: Accounted,
    pub checks: Vec<Check>,
}

pub fn run(cfg: OvercommitConfig, facts: &MachineFacts) -> Result<OvercommitReport, LabError> {
    let page = page_bytes();
    let mem = facts.memory;
    let ram_swap = mem.mem_total_bytes.unwrap_or(0) + mem.swap_total_bytes.unwrap_or(0);
    let reserve = reservation_bytes(cfg, facts, ram_swap)?;
    let written = cfg.write_bytes.next_multiple_of(page);
    let mode = facts.overcommit_memory;
    let headroom = mem
        .commit_limit_bytes
        .zip(mem.committed_as_bytes)
        .map(|(l, c)| l as i64 - c as i64);
    let r = reserve_and_write(reserve, page, written)?;
    let mut checks = reservation_checks(&r, reserve, written, mode);
    let accounted = accounted_attempt(reserve, page, mode, ram_swap, headroom);
    checks.push(accounted_check(&accounted, reserve, mode));
    Ok(OvercommitReport {
        reserved_bytes: reserve,
        reservation_granted: r.granted,
        reservation_error: r.error,
        written_bytes: if r.granted { written } else { 0 },
        write_ns: r.write_ns,
        rss_before_bytes: r.rss_before,
        rss_after_bytes: r.rss_after,
        mapping_rss_reserved_bytes: r.reserved_rss,
        mapping_rss_written_bytes: r.written_rss,
        virtual_before_bytes: r.virtual_before,
        virtual_after_bytes: r.virtual_after,
        overcommit_memory: mode,
        overcommit_ratio: facts.overcommit_ratio,
        mem_total_bytes: mem.mem_total_bytes,
        swap_total_bytes: mem.swap_total_bytes,
        commit_limit_bytes: mem.commit_limit_bytes,
        committed_as_bytes: mem.committed_as_bytes,
        mode2_headroom_bytes: headroom,
        mode2_would_refuse: headroom.map(|h| reserve as i64 > h),
        accounted,
        checks,
    })
}

/// The bytes to reserve (by default 1 TiB, or twice RAM + swap if that is more), the settings
/// checked.
fn reservation_bytes(
    cfg: OvercommitConfig,
    facts: &MachineFacts,
    ram_swap: u64,
) -> Result<usize, LabError> {
    let reserve = cfg
        .reserve_bytes
        .unwrap_or_else(|| (2 * ram_swap as usize).next_multiple_of(GIB).max(1 << 40));
    super::error::positive(cfg.write_bytes, "the bytes written")?;
    super::error::positive(reserve, "the reservation")?;
    if reserve > MAX_RESERVE {
        return Err(LabError::Invalid(format!(
            "a reservation of {} is beyond the {} this lab allows",
            show(reserve as u64),
            show(MAX_RESERVE as u64)
        )));
    }
    if cfg.write_bytes > reserve {
        return Err(LabError::Invalid(format!(
            "cannot write {} into a reservation of {}",
            show(cfg.write_bytes as u64),
            show(reserve as u64)
        )));
    }
    super::error::at_most_half_memory(
        cfg.write_bytes as u64,
        "writing",
        facts.memory.mem_total_bytes,
    )?;
    Ok(reserve)
}

/// What the `MAP_NORESERVE` reservation did: granted or not, and the memory around it.
struct Reserved {
    granted: bool,
    error: Option<String>,
    rss_before: u64,
    rss_after: u64,
    /// The reservation's own resident bytes after reserving and after writing.
    reserved_rss: u64,
    written_rss: u64,
    write_ns: f64,
    virtual_before: Option<u64>,
    virtual_after: Option<u64>,
}

/// Reserves `reserve` bytes without accounting, writes the first `written`, and reads the RSS
/// and virtual size around it; the reservation is given back before returning.
fn reserve_and_write(reserve: usize, page: usize, written: usize) -> Result<Reserved, LabError> {
    let rss_before = rollup(None)
        .map_err(LabError::io("reading smaps_rollup"))?
        .rss_bytes;
    let virtual_before = virtual_bytes();
    let reservation = Mapping::anonymous(reserve, page, libc::MAP_PRIVATE | libc::MAP_NORESERVE);
    let (granted, error, reserved_rss, written_rss, write_ns, virtual_after) = match &reservation {
        Ok(map) => {
            let reserved_rss = mapping_memory(map.addr()).unwrap_or_default().rss_bytes;
            let virtual_after = virtual_bytes();
            let t = Instant::now();
            // SAFETY: the first `written` bytes lie inside the mapping.
            unsafe { std::ptr::write_bytes(map.as_ptr(), 0x5a, written) };
            let write_ns = t.elapsed().as_nanos() as f64;
            let written_rss = mapping_memory(map.addr()).unwrap_or_default().rss_bytes;
            (
                true,
                None,
                reserved_rss,
                written_rss,
                write_ns,
                virtual_after,
            )
        }
        Err(e) => (false, Some(e.to_string()), 0, 0, 0.0, virtual_bytes()),
    };
    let rss_after = rollup(None)
        .map_err(LabError::io("reading smaps_rollup"))?
        .rss_bytes;
    drop(reservation);
    Ok(Reserved {
        granted,
        error,
        rss_before,
        rss_after,
        reserved_rss,
        written_rss,
        write_ns,
        virtual_before,
        virtual_after,
    })
}

/// A granted reservation holds nothing until written, then the bytes written; a refused one is
/// refused only under strict accounting.
fn reservation_checks(
    r: &Reserved,
    reserve: usize,
    written: usize,
    mode: Option<u32>,
) -> Vec<Check> {
    let mut checks = Vec::new();
    if r.granted {
        checks.push(Check::verdict(
            "reserving address space costs no memory: the reservation holds nothing resident",
            r.reserved_rss == 0,
            format!(
                "{} bytes resident after reserving {}",
                r.reserved_rss,
                show(reserve as u64)
            ),
        ));
        let diff = (r.written_rss as f64 - written as f64).abs();
        checks.push(Check::verdict(
            "RSS follows the writes: the reservation's RSS is the bytes written (within 10%)",
            diff <= 0.1 * written as f64,
            format!(
                "{} resident after writing {}",
                show(r.written_rss),
                show(written as u64)
            ),
        ));
    } else {
        let strict = mode == Some(2);
        checks.push(Check::verdict(
            "only strict accounting (mode 2) refuses a MAP_NORESERVE reservation",
            strict,
            format!(
                "refused ({}) under overcommit_memory={}",
                r.error.as_deref().unwrap_or("?"),
                mode.map_or("?".to_string(), |m| m.to_string())
            ),
        ));
    }
    checks
}

/// The accounted request decided as the mode documents (when it is not too close to call).
fn accounted_check(accounted: &Accounted, reserve: usize, mode: Option<u32>) -> Check {
    match accounted.predicted {
        Some(p) => Check::verdict(
            "the mode decides an accounted request as documented",
            p == accounted.granted,
            format!(
                "{} accounted under overcommit_memory={}: {}, predicted {}",
                show(reserve as u64),
                mode.map_or("?".to_string(), |m| m.to_string()),
                if accounted.granted {
                    "granted"
                } else {
                    "refused"
                },
                if p { "granted" } else { "refused" }
            ),
        ),
        None => Check::skipped(
            "the mode decides an accounted request as documented",
            "the request is too close to the limit to predict",
        ),
    }
}

/// Asks for `reserve` bytes with accounting and gives them back at once (nothing is touched).
fn accounted_attempt(
    reserve: usize,
    page: usize,
    mode: Option<u32>,
    ram_swap: u64,
    headroom: Option<i64>,
) -> Accounted {
    let attempt = Mapping::anonymous(reserve, page, libc::MAP_PRIVATE);
    let clear = |limit: f64| {
        let r = reserve as f64;
        (r > 1.05 * limit || r < 0.95 * limit).then_some(r <= limit)
    };
    let predicted = match mode {
        Some(0) if ram_swap > 0 => clear(ram_swap as f64),
        Some(1) => Some(true),
        Some(2) => headroom.and_then(|h| clear(h as f64)),
        _ => None,
    };
    Accounted {
        granted: attempt.is_ok(),
        predicted,
        error: attempt.err().map(|e| e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terabyte_reserved_holds_only_what_was_written() {
        let facts = MachineFacts::read();
        let cfg = OvercommitConfig {
            reserve_bytes: None,
            write_bytes: 4 * MIB,
        };
        let r = run(cfg, &facts).unwrap();
        assert!(r.reserved_bytes >= 1 << 40);
        if r.reservation_granted {
            assert_eq!(r.mapping_rss_reserved_bytes, 0);
            let w = r.mapping_rss_written_bytes as f64;
            assert!(
                (w - (4 * MIB) as f64).abs() <= 0.1 * (4 * MIB) as f64,
                "{w}"
            );
        } else {
            assert_eq!(r.overcommit_memory, Some(2));
        }
        assert!(r.checks.iter().all(|c| !c.contradicted()), "{:?}", r.checks);
    }

    #[test]
    fn bad_sizes_are_bad_input() {
        let facts = MachineFacts::read();
        for (reserve, write) in [
            (Some(MIB), 2 * MIB),
            (Some(0), MIB),
            (None, 0),
            (Some(usize::MAX), MIB),
        ] {
            let cfg = OvercommitConfig {
                reserve_bytes: reserve,
                write_bytes: write,
            };
            assert!(
                matches!(run(cfg, &facts), Err(LabError::Invalid(_))),
                "{reserve:?} {write}"
            );
        }
    }
}
