//! Replays requests against one memory policy in fixed time steps. In each step every running
//! request writes one output token (paging takes a page when the last one is full), requests that
//! have written their last token leave, and the requests that arrived during the step are admitted
//! with their prompt written (contiguous policies take the whole span now). A request that cannot be
//! admitted is rejected, not queued; a paged request that finds no page to grow into is preempted
//! (dropped). After each step the memory is sampled: every token of capacity is data, reserved (the
//! holder will write it later), internal waste (allocated, never written) or free.

use super::memory::{Handle, Memory, Policy, Reject};
use crate::workload::azure::Request;
use serde::Serialize;
use thiserror::Error;

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ReplayConfig {
    /// Memory size in tokens.
    pub capacity: u64,
    /// Seconds per decode step: each running request writes one token per step.
    pub step_s: f64,
    /// Check the memory's bookkeeping after every step (slow; for tests).
    pub check: bool,
}

#[derive(Debug, Error, Clone, PartialEq)]
pub enum ReplayError {
    #[error("capacity must be positive")]
    ZeroCapacity,
    #[error("step must be a positive number of seconds, got {0}")]
    BadStep(f64),
    #[error("page size must be positive")]
    ZeroPageSize,
    #[error("capacity {capacity} is not a whole number of {page_size}-token pages")]
    PartialPage { capacity: u64, page_size: usize },
    #[error("{capacity} tokens in {page_size}-token pages is more than {MAX_PAGES} pages")]
    TooManyPages { capacity: u64, page_size: usize },
    #[error("reservation length must be positive")]
    ZeroReservation,
    #[error("request {index}: arrival {arrival_s} s is not a finite time after the previous one")]
    BadArrival { index: usize, arrival_s: f64 },
    #[error("request {index}: arrival {arrival_s:.4e} s is step {steps:.3e} of {step_s:.3e} s, beyond the last step counted (2^52); raise the step or shorten the trace")]
    TooManySteps {
        index: usize,
        arrival_s: f64,
        step_s: f64,
        steps: f64,
    },
    #[error("bookkeeping broken after step {step}: {what}")]
    Invariant { step: u64, what: String },
}

/// One memory sample: shares of capacity, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Sample {
    pub step: u64,
    pub running: u64,
    pub data: u64,
    pub reserved: u64,
    pub internal: u64,
    /// Capacity minus every holder's allocation, counted from the holders.
    pub free: u64,
    /// Free memory as the memory itself counts it (must equal `free`).
    pub free_reported: u64,
}

/// What one policy did with one request stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AllocRow {
    pub policy: String,
    pub page_size: Option<usize>,
    pub requests: u64,
    pub served: u64,
    /// Turned away at admission, for any reason.
    pub rejected: u64,
    /// Rejected although free memory in total would have held the request.
    pub rejected_fragmentation: u64,
    /// Rejected as longer than the memory or the reservation.
    pub too_long: u64,
    /// Admitted, then dropped for lack of a page to grow into (paging only).
    pub preempted: u64,
    /// Means over the steps with a request running.
    pub data_share: f64,
    pub reserved_share: f64,
    pub internal_share: f64,
    pub free_share: f64,
    /// Mean share of free memory outside the largest hole (0 for paging).
    pub external_fragmentation: f64,
    pub peak_running: u64,
    pub steps: u64,
}

impl AllocRow {
    /// Requests that did not complete.
    pub fn failed(&self) -> u64 {
        self.rejected + self.preempted
    }
}

struct Running {
    handle: Handle,
    len: u64,
    final_len: u64,
}

/// Most pages a paged memory may have (the block allocator keeps a few words per page).
pub const MAX_PAGES: u64 = 1 << 26;

/// The step of the last arrival at most: 2^52, so that step indices and step ends stay exact in
/// an f64 (each step is one past the last) and the step counter never wraps. The steps taken are
/// the busy ones (idle stretches are jumped), so a late arrival costs nothing by itself.
pub const LAST_ARRIVAL_STEP: f64 = (1u64 << 52) as f64;

pub fn replay(
    requests: &[Request],
    policy: Policy,
    cfg: &ReplayConfig,
) -> Result<AllocRow, ReplayError> {
    replay_observed(requests, policy, cfg, |_| {})
}

fn validate(requests: &[Request], policy: Policy, cfg: &ReplayConfig) -> Result<(), ReplayError> {
    if cfg.capacity == 0 {
        return Err(ReplayError::ZeroCapacity);
    }
    if !(cfg.step_s.is_finite() && cfg.step_s > 0.0) {
        return Err(ReplayError::BadStep(cfg.step_s));
    }
    match policy {
        Policy::Paged { page_size: 0 } => return Err(ReplayError::ZeroPageSize),
        Policy::Paged { page_size } if !cfg.capacity.is_multiple_of(page_size as u64) => {
            return Err(ReplayError::PartialPage {
                capacity: cfg.capacity,
                page_size,
            })
        }
        Policy::Paged { page_size } if cfg.capacity / page_size as u64 > MAX_PAGES => {
            return Err(ReplayError::TooManyPages {
                capacity: cfg.capacity,
                page_size,
            })
        }
        Policy::Reserve { max_len: 0, .. } => return Err(ReplayError::ZeroReservation),
        _ => {}
    }
    let mut last = 0.0;
    for (index, r) in requests.iter().enumerate() {
        if !(r.arrival_s.is_finite() && r.arrival_s >= last) {
            return Err(ReplayError::BadArrival {
                index,
                arrival_s: r.arrival_s,
            });
        }
        let steps = r.arrival_s / cfg.step_s;
        if steps > LAST_ARRIVAL_STEP {
            return Err(ReplayError::TooManySteps {
                index,
                arrival_s: r.arrival_s,
                step_s: cfg.step_s,
                steps,
            });
        }
        last = r.arrival_s;
    }
    Ok(())
}

/// [`replay`], calling `observe` with the sample taken after every step.
pub fn replay_observed(
    requests: &[Request],
    policy: Policy,
    cfg: &ReplayConfig,
    mut observe: impl FnMut(&Sample),
) -> Result<AllocRow, ReplayError> {
    validate(requests, policy, cfg)?;
    let mut mem = Memory::new(policy, cfg.capacity);
    let mut row = empty_row(requests, policy);
    let mut running: Vec<Running> = Vec::new();
    let mut next = 0;
    let mut busy_steps = 0u64;
    let mut step = 0u64;
    while next < requests.len() || !running.is_empty() {
        // Skip idle stretches: jump to the step of the next arrival.
        if running.is_empty() {
            step = step.max((requests[next].arrival_s / cfg.step_s).floor() as u64);
        }
        decode_step(&mut mem, &mut running, &mut row);
        let step_end = (step + 1) as f64 * cfg.step_s;
        while next < requests.len() && requests[next].arrival_s < step_end {
            admit(&requests[next], &mut mem, &mut running, &mut row);
            next += 1;
        }
        let s = sample(step, &running, &mem, cfg)?;
        observe(&s);
        if !running.is_empty() {
            busy_steps += 1;
            let cap = cfg.capacity as f64;
            row.data_share += s.data as f64 / cap;
            row.reserved_share += s.reserved as f64 / cap;
            row.internal_share += s.internal as f64 / cap;
            row.free_share += s.free as f64 / cap;
            row.external_fragmentation += mem.external_fragmentation();
            row.peak_running = row.peak_running.max(s.running);
        }
        step += 1;
    }
    row.steps = busy_steps;
    if busy_steps > 0 {
        let n = busy_steps as f64;
        for v in [
            &mut row.data_share,
            &mut row.reserved_share,
            &mut row.internal_share,
            &mut row.free_share,
            &mut row.external_fragmentation,
        ] {
            *v /= n;
        }
    }
    Ok(row)
}

/// The row before the replay: the policy and the request count, nothing counted yet.
fn empty_row(requests: &[Request], policy: Policy) -> AllocRow {
    AllocRow {
        policy: policy.name(),
        page_size: policy.page_size(),
        requests: requests.len() as u64,
        served: 0,
        rejected: 0,
        rejected_fragmentation: 0,
        too_long: 0,
        preempted: 0,
        data_share: 0.0,
        reserved_share: 0.0,
        internal_share: 0.0,
        free_share: 0.0,
        external_fragmentation: 0.0,
        peak_running: 0,
        steps: 0,
    }
}

/// One decode step: finished requests leave; every other writes a token, or is preempted when
/// it finds no room to grow into.
fn decode_step(mem: &mut Memory, running: &mut Vec<Running>, row: &mut AllocRow) {
    running.retain_mut(|r| {
        if r.len == r.final_len {
            mem.release(r.handle);
            row.served += 1;
            return false;
        }
        if !mem.grow(r.handle) {
            mem.release(r.handle);
            row.preempted += 1;
            return false;
        }
        r.len += 1;
        true
    });
}

/// An arrival, admitted with its prompt written, or rejected (and why).
fn admit(r: &Request, mem: &mut Memory, running: &mut Vec<Running>, row: &mut AllocRow) {
    let (prompt, final_len) = (
        u64::from(r.prompt_tokens),
        u64::from(r.prompt_tokens) + u64::from(r.output_tokens),
    );
    if final_len == 0 {
        row.served += 1;
        return;
    }
    match mem.admit(prompt, final_len) {
        Ok(handle) => running.push(Running {
            handle,
            len: prompt,
            final_len,
        }),
        Err(why) => {
            row.rejected += 1;
            match why {
                Reject::TooLong => row.too_long += 1,
                Reject::Fragmented => row.rejected_fragmentation += 1,
                Reject::OutOfMemory => {}
            }
        }
    }
}

/// The memory after `step`, counted from the holders; with `cfg.check`, the memory's own
/// bookkeeping checked against it.
fn sample(
    step: u64,
    running: &[Running],
    mem: &Memory,
    cfg: &ReplayConfig,
) -> Result<Sample, ReplayError> {
    let mut s = Sample {
        step,
        running: running.len() as u64,
        ..Sample::default()
    };
    let mut allocated = 0;
    for r in running {
        let alloc = mem.allocated(r.handle);
        let will_hold = alloc.min(r.final_len);
        allocated += alloc;
        s.data += r.len;
        s.reserved += will_hold - r.len;
        s.internal += alloc - will_hold;
    }
    s.free = cfg.capacity.saturating_sub(allocated);
    s.free_reported = mem.free();
    if cfg.check {
        let broken = |what: String| ReplayError::Invariant { step, what };
        if allocated > cfg.capacity {
            return Err(broken(format!("{allocated} allocated of {}", cfg.capacity)));
        }
        if s.free != s.free_reported {
            return Err(broken(format!(
                "holders leave {} free, memory reports {}",
                s.free, s.free_reported
            )));
        }
        let live: Vec<Handle> = running.iter().map(|r| r.handle).collect();
        mem.check(&live, s.data).map_err(broken)?;
    }
    Ok(s)
}
