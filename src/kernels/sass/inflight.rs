//! Bytes in flight in a loop's steady state, read from the scoreboards alone.
//!
//! The model: every global load (and every cp.async group) completes one latency L after it issues;
//! nothing else takes time. A warp walks the loop body in order, iteration after iteration, and
//! an instruction waits where its control bits say so: for each scoreboard in its wait mask, until
//! every load counted there has completed; at `DEPBAR.LE SBk, N`, until at most N remain. Forward
//! branches inside the body are ignored (every conditional block runs, every predicated load
//! issues: the steady state of a full tile). After a warm-up, the clock's advance over a window of
//! iterations gives the iteration time in units of L; the bytes one iteration loads divided by it
//! are the bytes the warp keeps in flight (Little's law). For a loop that issues its loads and then
//! waits for them this is exactly the bytes issued before the first instruction that waits on them;
//! for a pipeline that waits for loads issued iterations earlier it counts every stage in flight.

use super::cadence::{cadences, Cadence};
use super::control::SCOREBOARDS;
use super::listing::Instruction;
use super::memory::{classify, MemoryOp, LANES};

/// Iterations walked before measuring: enough to fill any pipeline the scoreboards can express.
pub const WARMUP: u64 = 24;
/// Iterations measured: a multiple of every period from 1 to 6 and of 8, so a pipeline of that many
/// stages is measured over whole periods.
pub const WINDOW: u64 = 120;

/// An instruction that stalls in the steady state, with the bytes one warp had outstanding when it
/// was reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitPoint {
    pub address: u32,
    pub outstanding_bytes: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Steady {
    /// Global loads (`LDG`/`LD`) in the body.
    pub global_loads: u32,
    /// Async copies (`LDGSTS`) in the body.
    pub async_copies: u32,
    /// Bytes one warp loads per iteration (loads and async copies), on average over the
    /// iterations when part of the body runs only on some ([`super::cadence`]).
    pub load_bytes: f64,
    /// The part of `load_bytes` that streams data rather than indices ([`streams`]).
    pub stream_bytes: f64,
    /// Warp instructions issued per iteration, on average ([`issued`]).
    pub issued: f64,
    /// The longest period of a part that runs only once in so many iterations, if any.
    pub refill_period: Option<u32>,
    /// Instructions that run on one iteration of the whole loop only (left out of `issued`).
    pub once_per_loop: u32,
    /// Iteration time in load latencies: memory round trips per iteration.
    pub round_trips: f64,
    /// `load_bytes / round_trips`; `None` when the loop never waits for its loads.
    pub bytes_in_flight: Option<f64>,
    /// Where the last measured iteration stalled, in order.
    pub waits: Vec<WaitPoint>,
}

#[derive(Debug, Clone, Copy)]
struct Event {
    done: u64,
    bytes: u32,
}

#[derive(Default)]
struct Warp {
    clock: u64,
    scoreboards: [Vec<Event>; SCOREBOARDS],
    open_group: u32,
}

impl Warp {
    fn outstanding(&self) -> u32 {
        self.scoreboards
            .iter()
            .flatten()
            .filter(|e| e.done > self.clock)
            .map(|e| e.bytes)
            .sum()
    }

    fn drain(&mut self, sb: usize) {
        if let Some(last) = self.scoreboards[sb].iter().map(|e| e.done).max() {
            self.clock = self.clock.max(last);
        }
        self.scoreboards[sb].clear();
    }

    /// Wait until at most `n` events of scoreboard `sb` are still pending.
    fn wait_until_at_most(&mut self, sb: usize, n: usize) {
        let clock = self.clock;
        let mut pending: Vec<u64> = self.scoreboards[sb]
            .iter()
            .map(|e| e.done)
            .filter(|&d| d > clock)
            .collect();
        pending.sort_unstable();
        if pending.len() > n {
            self.clock = pending[pending.len() - n - 1];
        }
        let now = self.clock;
        self.scoreboards[sb].retain(|e| e.done > now);
    }

    fn set(&mut self, sb: Option<u8>, bytes: u32) {
        if let Some(sb) = sb.map(usize::from).filter(|&s| s < SCOREBOARDS) {
            let done = if bytes > 0 {
                self.clock + 1
            } else {
                self.clock
            };
            self.scoreboards[sb].push(Event { done, bytes });
        }
    }

    /// Issues one instruction; returns whether it stalled.
    fn issue(&mut self, ins: &Instruction, op: &MemoryOp) -> bool {
        let before = self.clock;
        for sb in 0..SCOREBOARDS {
            if ins.control.waits_on(sb as u8) {
                self.drain(sb);
            }
        }
        match op {
            MemoryOp::DepBar {
                scoreboard,
                max_pending,
                drain,
            } => {
                if usize::from(*scoreboard) < SCOREBOARDS {
                    self.wait_until_at_most(usize::from(*scoreboard), *max_pending as usize);
                }
                for &sb in drain.iter().filter(|&&s| usize::from(s) < SCOREBOARDS) {
                    self.drain(usize::from(sb));
                }
            }
            MemoryOp::GlobalLoad { bytes } => self.set(ins.control.write_barrier, bytes * LANES),
            MemoryOp::AsyncCopy { bytes } => self.open_group += bytes * LANES,
            MemoryOp::CommitGroup => {
                let group = std::mem::take(&mut self.open_group);
                self.set(ins.control.write_barrier, group);
            }
            MemoryOp::Other => {}
        }
        self.clock > before
    }
}

/// Bytes per lane a load or async copy moves, 0 for anything else.
fn lane_bytes(op: &MemoryOp) -> u32 {
    match op {
        MemoryOp::GlobalLoad { bytes } | MemoryOp::AsyncCopy { bytes } => *bytes,
        _ => 0,
    }
}

/// The bytes per lane below which a load reads indices, not the stream, in a loop that also
/// has wider loads: a block-table word, a page index (4 bytes) beside 8- or 16-byte rows. In a loop
/// whose every load is this narrow, they all count as the stream.
pub const INDEX_LOAD_MAX_BYTES: u32 = 4;

/// Whether a load of `bytes` per lane streams data in a loop whose widest load is `widest`.
pub fn streams(bytes: u32, widest: u32) -> bool {
    bytes > INDEX_LOAD_MAX_BYTES || widest <= INDEX_LOAD_MAX_BYTES
}

/// What counts as issued: every instruction of the body that can execute, once per iteration
/// (a predicated-off instruction still takes its issue slot; so do `NOP`, `BSSY`/`BSYNC` and the
/// branches), every conditional block as if it ran (the steady state of a full tile), except a
/// part that runs on a cadence, counted by its share of the iterations. Instructions guarded by
/// `@!PT` never execute and are left out.
pub fn issued(body: &[(&Instruction, MemoryOp, Option<Cadence>)]) -> f64 {
    body.iter()
        .map(|(_, _, c)| c.map_or(1.0, |c| c.share()))
        .sum()
}

/// The steady state of a loop whose body (head to latch) is `body`.
pub fn steady_state(body: &[&Instruction]) -> Steady {
    let executable: Vec<&Instruction> = body
        .iter()
        .copied()
        .filter(|i| !i.never_executes())
        .collect();
    let cadence = cadences(&executable);
    let body: Vec<(&Instruction, MemoryOp, Option<Cadence>)> = executable
        .iter()
        .zip(cadence)
        .map(|(&i, c)| (i, classify(i), c))
        .collect();
    let count = |f: fn(&MemoryOp) -> bool| body.iter().filter(|(_, op, _)| f(op)).count() as u32;
    let global_loads = count(|op| matches!(op, MemoryOp::GlobalLoad { .. }));
    let async_copies = count(|op| matches!(op, MemoryOp::AsyncCopy { .. }));
    let widest = body
        .iter()
        .map(|(_, op, _)| lane_bytes(op))
        .max()
        .unwrap_or(0);
    let share = |c: &Option<Cadence>| c.map_or(1.0, |c| c.share());
    let bytes_where = |keep: &dyn Fn(u32) -> bool| -> f64 {
        body.iter()
            .filter(|(_, op, _)| keep(lane_bytes(op)))
            .map(|(_, op, c)| f64::from(lane_bytes(op) * LANES) * share(c))
            .sum()
    };
    let load_bytes = bytes_where(&|_| true);
    let stream_bytes = bytes_where(&|b| streams(b, widest));
    let refill_period = body
        .iter()
        .filter_map(|(_, _, c)| c.map(|c| c.period()))
        .filter(|&p| p > 1)
        .max();
    let once_per_loop = body
        .iter()
        .filter(|(_, _, c)| *c == Some(Cadence::Once))
        .count() as u32;
    // Whole periods of every cadence in the window.
    let window = refill_period.map_or(WINDOW, |p| lcm(WINDOW, u64::from(p)));

    let mut warp = Warp::default();
    let mut start = 0;
    let mut waits = Vec::new();
    for iteration in 0..WARMUP + window {
        if iteration == WARMUP {
            start = warp.clock;
        }
        let last = iteration == WARMUP + window - 1;
        for (ins, op, c) in &body {
            if c.is_some_and(|c| !c.runs(iteration)) {
                continue;
            }
            let outstanding = if last { warp.outstanding() } else { 0 };
            if warp.issue(ins, op) && last {
                waits.push(WaitPoint {
                    address: ins.address,
                    outstanding_bytes: outstanding,
                });
            }
        }
    }
    let round_trips = (warp.clock - start) as f64 / window as f64;
    Steady {
        global_loads,
        async_copies,
        load_bytes,
        stream_bytes,
        issued: issued(&body),
        refill_period,
        once_per_loop,
        round_trips,
        bytes_in_flight: (round_trips > 0.0).then(|| load_bytes / round_trips),
        waits,
    }
}

fn lcm(a: u64, b: u64) -> u64 {
    let (mut x, mut y) = (a, b);
    while y != 0 {
        (x, y) = (y, x % y);
    }
    a / x * b
}

#[cfg(test)]
mod tests {
    use super::super::control::Control;
    use super::*;

    fn refs(body: &[Instruction]) -> Vec<&Instruction> {
        body.iter().collect()
    }

    /// An instruction with write barrier `wb` (7 = none) and wait mask `wait`.
    fn ins(address: u32, text: &str, wb: u64, wait: u64) -> Instruction {
        let (opcode, operands) = text.split_once(' ').unwrap_or((text, ""));
        let code = 7 << 8 | wb << 5 | wait << 11;
        Instruction {
            address,
            guard: None,
            opcode: opcode.to_string(),
            operands: operands.to_string(),
            control: Control::from_high_word(code << 41),
        }
    }

    #[test]
    fn a_load_used_at_once_keeps_one_load_in_flight() {
        let body = [
            ins(0, "LDG.E R2, [R2]", 2, 0),
            ins(0x10, "FADD R3, R3, R2", 7, 0b100),
        ];
        let s = steady_state(&refs(&body));
        assert_eq!((s.global_loads, s.load_bytes), (1, 128.0));
        assert_eq!(s.issued, 2.0);
        assert_eq!(s.round_trips, 1.0);
        assert_eq!(s.bytes_in_flight, Some(128.0));
        assert_eq!(
            s.waits,
            vec![WaitPoint {
                address: 0x10,
                outstanding_bytes: 128
            }]
        );
    }

    #[test]
    fn loads_behind_a_wait_double_the_round_trips() {
        // Two 16-byte loads, the second only after the first is used.
        let body = [
            ins(0, "LDG.E.128 R4, [R2]", 2, 0),
            ins(0x10, "IADD3 R8, R4, R8", 7, 0b100),
            ins(0x20, "LDG.E.128 R4, [R8]", 3, 0),
            ins(0x30, "IADD3 R9, R4, R9", 7, 0b1000),
        ];
        let s = steady_state(&refs(&body));
        assert_eq!((s.load_bytes, s.round_trips), (1024.0, 2.0));
        assert_eq!(s.bytes_in_flight, Some(512.0));
        // Without the first wait both loads are in flight together.
        let mut batched = body.clone();
        batched[1].control.wait_mask = 0;
        assert_eq!(steady_state(&refs(&batched)).bytes_in_flight, Some(1024.0));
    }

    #[test]
    fn a_load_consumed_in_the_next_iteration_overlaps_the_rest() {
        // The use (waiting on SB2) comes before the next load in the body: one round trip each.
        let body = [
            ins(0, "FADD R3, R3, R4", 7, 0b100),
            ins(0x10, "LDG.E.64 R4, [R2]", 2, 0),
        ];
        let s = steady_state(&refs(&body));
        assert_eq!(s.bytes_in_flight, Some(256.0));
    }

    #[test]
    fn cp_async_groups_count_per_stage() {
        let body = |n: &str| {
            [
                ins(0, "LDGSTS.E.BYPASS.128 [R7], [R4.64]", 7, 0),
                ins(0x10, "LDGDEPBAR", 0, 0),
                ins(0x20, &format!("DEPBAR.LE SB0, {n}"), 7, 0),
            ]
        };
        // wait_group 1: two groups of 512 B outstanding; wait_group 0: one; wait_group 2: three.
        for (n, expected) in [("0x0", 512.0), ("0x1", 1024.0), ("0x2", 1536.0)] {
            let s = steady_state(&refs(&body(n)));
            assert_eq!((s.async_copies, s.load_bytes), (1, 512.0));
            assert_eq!(s.bytes_in_flight, Some(expected), "DEPBAR.LE SB0, {n}");
        }
    }

    #[test]
    fn a_loop_that_never_waits_has_no_figure() {
        let s = steady_state(&refs(&[ins(0, "LDG.E R2, [R2]", 2, 0)]));
        assert_eq!((s.round_trips, s.bytes_in_flight), (0.0, None));
        let never = Instruction {
            guard: Some("@!PT".into()),
            ..ins(0, "LDG.E R2, [R2]", 2, 0)
        };
        let s = steady_state(&[&never]);
        assert_eq!((s.load_bytes, s.issued), (0.0, 0.0));
    }
    #[test]
    fn a_refill_once_in_four_iterations_counts_a_quarter() {
        // A 4-byte index load on SB3 once every 4 iterations (R12 & 3 == 0), a 16-byte row load
        // on SB2 every iteration, each used at once.
        let mut body = vec![
            ins(0, "LOP3.LUT P0, RZ, R12, 0x3, RZ, 0xc0, !PT", 7, 0),
            ins(0x10, "LDG.E R14, [R4.64]", 3, 0),
            ins(0x20, "STS [R15], R14", 7, 0b1000),
            ins(0x30, "LDG.E.128 R4, [R6.64]", 2, 0),
            ins(0x40, "FADD R3, R3, R4", 7, 0b100),
            ins(0x50, "VIADD R12, R12, 0x1", 7, 0),
        ];
        body[1].guard = Some("@!P0".into());
        body[2].guard = Some("@!P0".into());
        let s = steady_state(&refs(&body));
        assert_eq!(s.refill_period, Some(4));
        assert_eq!(s.load_bytes, 512.0 + 128.0 / 4.0);
        assert_eq!(
            s.stream_bytes, 512.0,
            "the 4-byte index load is not the stream"
        );
        assert_eq!(s.issued, 4.0 + 2.0 / 4.0);
        // One round trip every iteration, a second one on the refill's: 1.25 per iteration.
        assert_eq!(s.round_trips, 1.25);
        // Counted on every iteration, as before the cadence was read: twice the index bytes.
        body[0] = ins(0, "FSETP.GT.AND P0, PT, R3, R13, PT", 7, 0);
        let every = steady_state(&refs(&body));
        assert_eq!((every.refill_period, every.load_bytes), (None, 640.0));
        assert_eq!(every.round_trips, 2.0);
    }
}
