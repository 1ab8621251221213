//! Parts of a loop body that run only on some iterations: a refill that loads once every N
//! iterations (FlashInfer's decode kernel reads its page indices once every `bdx` iterations) is
//! guarded by a test of a counter modulo N. ptxas compiles `it % N == 0` (N a power of two) into
//! `LOP3.LUT P, RZ, it, N-1, RZ, 0xc0, !PT` (P: the low bits are not all zero; `ULOP3` and a
//! `PLOP3` copy to a warp predicate for a uniform counter), or into a `LOP3` and an
//! `ISETP.NE`/`ISETP.EQ` against zero; it guards the refill by that predicate, either
//! instruction by instruction (`@!P LDG ...`) or with a forward branch around it. With the counter
//! advancing by s per iteration the test repeats every N / gcd(N, s) iterations (FlashInfer's
//! `(iter + 2) & 0xe` with iter stepping by 2: once in 8). A part guarded by a counter's equality
//! with a fixed value (vLLM's V loop pads the last block: `ISETP.NE P0, PT, R6, RZ` with R6
//! stepping by -4) runs on one iteration of the whole loop: none of the steady state. Other tests
//! (a period that is not a power of two, compiled as a multiplication by a magic number; data)
//! are not recognised: such a part is counted on every iteration, as every other conditional
//! part is.

use super::dataflow::{definition, immediate, operands, register, step, writes};
use super::listing::Instruction;

/// When an instruction runs, iteration by iteration, if not on every one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cadence {
    /// On iteration k when `((k * step) & mask == 0) == hit`: a counter stepping by `step` (from
    /// 0: the phase does not change how often) tested modulo a power of two.
    Modulo { step: u32, mask: u32, hit: bool },
    /// On one iteration of the whole loop at most (a counter equal to a fixed value: vLLM's
    /// padding of the last block), so on none of the steady state.
    Once,
    /// On every iteration but one: every one of the steady state.
    AllButOnce,
}

impl Cadence {
    /// The span of counter values the test sees: the power of two above the mask.
    fn modulus(mask: u32) -> u64 {
        (u64::from(mask) + 1).next_power_of_two()
    }

    /// Iterations after which the pattern repeats (1 when it does not depend on the iteration).
    pub fn period(&self) -> u32 {
        match *self {
            Cadence::Modulo { step, mask, .. } => {
                let m = Cadence::modulus(mask);
                let s = u64::from(step) % m;
                (m / gcd(m, s)) as u32
            }
            _ => 1,
        }
    }

    /// Whether the instruction runs on iteration `k` of the steady state.
    pub fn runs(&self, k: u64) -> bool {
        match *self {
            Cadence::Modulo { step, mask, hit } => {
                ((k.wrapping_mul(u64::from(step)) & u64::from(mask)) == 0) == hit
            }
            Cadence::Once => false,
            Cadence::AllButOnce => true,
        }
    }

    /// The share of the steady state's iterations it runs on.
    pub fn share(&self) -> f64 {
        let p = u64::from(self.period());
        let runs = (0..p).filter(|&k| self.runs(k)).count();
        runs as f64 / p as f64
    }

    /// The iterations this one does not run on.
    pub fn complement(self) -> Cadence {
        match self {
            Cadence::Modulo { step, mask, hit } => Cadence::Modulo {
                step,
                mask,
                hit: !hit,
            },
            Cadence::Once => Cadence::AllButOnce,
            Cadence::AllButOnce => Cadence::Once,
        }
    }
}

/// `x & mask` in `ins` (`LOP3.LUT dst.., x, mask, RZ, 0xc0, !PT`): the counter and the mask.
fn masked_counter(ins: &Instruction) -> Option<(&str, u32)> {
    if !matches!(ins.base(), "LOP3" | "ULOP3") {
        return None;
    }
    let ops = operands(ins);
    // The last four operands are c, the look-up table and the predicate input; a and b before.
    let n = ops.len();
    if n < 6 || immediate(ops[n - 2]) != Some(0xc0) || !matches!(ops[n - 3], "RZ" | "URZ") {
        return None;
    }
    let (a, b) = (ops[n - 5], ops[n - 4]);
    let (counter, mask) = match (immediate(a), immediate(b)) {
        (None, Some(m)) => (register(a)?, m),
        (Some(m), None) => (register(b)?, m),
        _ => return None,
    };
    Some((counter, u32::try_from(mask).ok().filter(|&m| m > 0)?))
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// When `counter & mask` (at `at`) is zero, for a counter stepping by a constant through `body`.
fn modulo(
    body: &[&Instruction],
    at: usize,
    counter: &str,
    mask: u32,
    hit: bool,
) -> Option<Cadence> {
    let step = step(body, at, counter)?;
    let m = Cadence::modulus(mask) as i64;
    let c = Cadence::Modulo {
        step: u32::try_from(step.rem_euclid(m)).ok()?,
        mask,
        hit,
    };
    (c.period() > 1).then_some(c)
}

/// Whether `operand` has one value through the loop: a constant, or a register `body` does not
/// write.
fn invariant(body: &[&Instruction], operand: &str) -> bool {
    matches!(operand, "RZ" | "URZ")
        || immediate(operand).is_some()
        || register(operand).is_some_and(|r| !body.iter().any(|i| writes(i, r)))
}

/// When predicate `pred` (read at `at` in `body`) is true: on a cadence, if it tests a counter
/// modulo a power of two, or a counter for equality with a fixed value.
fn predicate_cadence(body: &[&Instruction], at: usize, pred: &str) -> Option<Cadence> {
    let d = definition(body, at, pred)?;
    let def = body[d];
    let ops = operands(def);
    // `PLOP3.LUT P0, PT, PT, PT, UP0, 0x80, 0x0`: P0 = PT & PT & UP0, a copy of UP0.
    if def.base() == "PLOP3" {
        let inputs = ops.get(2..5)?;
        let copied: Vec<&&str> = inputs
            .iter()
            .filter(|o| !matches!(**o, "PT" | "UPT"))
            .collect();
        return match (ops.get(5).and_then(|l| immediate(l)), copied.as_slice()) {
            (Some(0x80), [one]) => predicate_cadence(body, d, register(one)?),
            _ => None,
        };
    }
    // P = (x & m) != 0 straight from a LOP3 with a predicate out.
    if ops.first().and_then(|o| register(o)) == Some(pred) {
        if let Some((counter, mask)) = masked_counter(def) {
            return modulo(body, d, counter, mask, false);
        }
    }
    // P = (y != c) or (y == c): y = x & m against zero, or a counter against a fixed value.
    if !matches!(def.base(), "ISETP" | "UISETP") {
        return None;
    }
    let mods: Vec<&str> = def.opcode.split('.').collect();
    let equal = mods.contains(&"EQ");
    if !(equal || mods.contains(&"NE")) || ops.len() < 5 || !matches!(ops[4], "PT" | "UPT") {
        return None;
    }
    if register(ops[0]) != Some(pred) {
        return None;
    }
    let (a, b) = (ops[2], ops[3]);
    for (value, other) in [(a, b), (b, a)] {
        let Some(value) = register(value) else {
            continue;
        };
        if matches!(other, "RZ" | "URZ") {
            let masked =
                definition(body, d, value).and_then(|v| Some((v, masked_counter(body[v])?)));
            if let Some((v, (counter, mask))) = masked {
                return modulo(body, v, counter, mask, equal);
            }
        }
        if step(body, d, value).is_some_and(|s| s != 0) && invariant(body, other) {
            return Some(if equal {
                Cadence::Once
            } else {
                Cadence::AllButOnce
            });
        }
    }
    None
}

/// For each instruction of `body` (head to latch, in order), the cadence it runs on, if it does
/// not run on every iteration.
pub fn cadences(body: &[&Instruction]) -> Vec<Option<Cadence>> {
    let mut out: Vec<Option<Cadence>> = vec![None; body.len()];
    for (i, ins) in body.iter().enumerate() {
        let Some(guard) = ins.guard.as_deref() else {
            continue;
        };
        let negated = guard.starts_with("@!");
        let Some(pred) = register(guard.trim_start_matches(['@', '!'])) else {
            continue;
        };
        let Some(true_on) = predicate_cadence(body, i, pred) else {
            continue;
        };
        // When the guard holds.
        let holds = if negated {
            true_on.complement()
        } else {
            true_on
        };
        match ins.branch_target() {
            // A forward branch: the instructions it jumps over run when it is not taken.
            Some(target) if ins.base() == "BRA" && target > ins.address => {
                let skipped = holds.complement();
                for (j, c) in out.iter_mut().enumerate().skip(i + 1) {
                    if body[j].address >= target {
                        break;
                    }
                    c.get_or_insert(skipped);
                }
            }
            Some(_) => {}
            None => out[i] = Some(holds),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ins(address: u32, text: &str) -> Instruction {
        Instruction::from_text(address, text)
    }

    #[test]
    fn a_guard_on_a_counter_modulo_four_runs_once_in_four() {
        let body = [
            ins(0x00, "LOP3.LUT P0, RZ, R12, 0x3, RZ, 0xc0, !PT"),
            ins(0x10, "@!P0 LDG.E R14, desc[UR4][R4.64]"),
            ins(0x20, "@P0 FADD R1, R1, R1"),
            ins(0x30, "LDG.E.128 R4, desc[UR4][R4.64]"),
            ins(0x40, "VIADD R12, R12, 0x1"),
        ];
        let body: Vec<&Instruction> = body.iter().collect();
        let c = cadences(&body);
        let once = Cadence::Modulo {
            step: 1,
            mask: 3,
            hit: true,
        };
        assert_eq!(c[1], Some(once));
        assert_eq!((once.period(), once.share()), (4, 0.25));
        assert_eq!(c[2], Some(once.complement()));
        assert_eq!((c[0], c[3], c[4]), (None, None, None));
        assert_eq!(c[2].unwrap().share(), 0.75);
    }

    #[test]
    fn a_branch_around_a_refill_and_a_counter_stepping_by_two() {
        // R8 steps by 2, masked with 7: zero once every 4 iterations.
        let body = [
            ins(0x00, "LOP3.LUT R9, R8, 0x7, RZ, 0xc0, !PT"),
            ins(0x10, "ISETP.NE.AND P1, PT, R9, RZ, PT"),
            ins(0x20, "@P1 BRA 0x50"),
            ins(0x30, "LDG.E R14, desc[UR4][R4.64]"),
            ins(0x40, "STS [R15], R14"),
            ins(0x50, "IADD3 R8, R8, 0x2, RZ"),
        ];
        let body: Vec<&Instruction> = body.iter().collect();
        let c = cadences(&body);
        let once = Cadence::Modulo {
            step: 2,
            mask: 7,
            hit: true,
        };
        assert_eq!((c[3], c[4]), (Some(once), Some(once)));
        assert_eq!((once.period(), once.share()), (4, 0.25));
        assert_eq!((c[2], c[5]), (None, None));
        // A counter that is not an induction variable: no cadence.
        let mut changed: Vec<Instruction> = body.iter().map(|&i| i.clone()).collect();
        changed[5] = ins(0x50, "IADD3 R8, R8, R3, RZ");
        let changed: Vec<&Instruction> = changed.iter().collect();
        assert!(cadences(&changed).iter().all(Option::is_none));
    }

    #[test]
    fn flashinfers_mask_of_even_counter_values_and_vllms_last_block() {
        // (iter + 2) & 0xe with the counter stepping by 2: zero once in 8 iterations.
        let c = Cadence::Modulo {
            step: 2,
            mask: 0xe,
            hit: true,
        };
        assert_eq!((c.period(), c.share()), (8, 0.125));
        // A counter stepping by -4 compared with zero: the block runs on one iteration only.
        let body = [
            ins(0x00, "ISETP.NE.AND P0, PT, R6, RZ, PT"),
            ins(0x10, "@P0 BRA 0x40"),
            ins(0x20, "FADD R1, R1, R1"),
            ins(0x30, "FADD R2, R2, R2"),
            ins(0x40, "VIADD R6, R6, 0xfffffffc"),
        ];
        let body: Vec<&Instruction> = body.iter().collect();
        let c = cadences(&body);
        assert_eq!((c[2], c[3]), (Some(Cadence::Once), Some(Cadence::Once)));
        assert_eq!(Cadence::Once.share(), 0.0);
        // Against a register the loop changes: no cadence.
        let mut moving: Vec<Instruction> = body.iter().map(|&i| i.clone()).collect();
        moving[0] = ins(0x00, "ISETP.NE.AND P0, PT, R6, R7, PT");
        moving.push(ins(0x50, "IADD3 R7, R7, R9, RZ"));
        let moving: Vec<&Instruction> = moving.iter().collect();
        assert!(cadences(&moving).iter().all(Option::is_none));
    }
}
