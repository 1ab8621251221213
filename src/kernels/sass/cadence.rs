//! Parts of a loop body that run only on some iterations: a refill that loads once every N
//! iterations (FlashInfer's decode kernel reads its page indices once every `bdx` iterations) is
//! guarded by a test of a counter modulo N. ptxas compiles `it % N == 0` (N a power of two) into
//! `LOP3.LUT P, RZ, it, N-1, RZ, 0xc0, !PT` (P: the low bits are not all zero; `ULOP3` and a
//! `PLOP3` copy to a warp predicate for a uniform counter), or into a `LOP3` and an
//! `ISETP.NE`/`ISETP.EQ` against zero; it guards the refill by that predicate, either
//! instruction by instruction (`@!P LDG ...`) or with a forward branch around it. With the counter
//! advancing by s per iteration the test repeats every N / gcd(N, s) iterations. Other tests
//! (a period that is not a power of two, compiled as a multiplication by a magic number) are not
//! recognised: such a part is counted on every iteration, as every other conditional part is.

use super::dataflow::{definition, immediate, operands, register, step};
use super::listing::Instruction;

/// An instruction that runs on iteration k of the steady state when `(k % period == 0) == once`:
/// once per period (`once`), or on all the other iterations of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cadence {
    pub period: u32,
    pub once: bool,
}

impl Cadence {
    /// Whether the instruction runs on iteration `k`.
    pub fn runs(&self, k: u64) -> bool {
        (k % u64::from(self.period) == 0) == self.once
    }

    /// The share of iterations it runs on.
    pub fn share(&self) -> f64 {
        let p = f64::from(self.period);
        if self.once {
            1.0 / p
        } else {
            (p - 1.0) / p
        }
    }
}

/// `x & (2^k - 1)` in `ins` (`LOP3.LUT dst.., x, mask, RZ, 0xc0, !PT`): the counter and the mask.
fn masked_counter<'a>(ins: &'a Instruction) -> Option<(&'a str, u32)> {
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
    let mask = u32::try_from(mask)
        .ok()
        .filter(|m| (m + 1).is_power_of_two() && *m > 0)?;
    Some((counter, mask))
}

/// The period of `counter & mask == 0` for a counter stepping by `step`.
fn period(mask: u32, step: i64) -> Option<u32> {
    let n = i64::from(mask) + 1;
    let s = step.rem_euclid(n);
    let g = if s == 0 { n } else { gcd(n, s) };
    u32::try_from(n / g).ok().filter(|&p| p > 1)
}

fn gcd(a: i64, b: i64) -> i64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// When predicate `pred` (read at `at` in `body`) is true: on a cadence, if it tests a counter
/// modulo a power of two.
fn predicate_cadence(body: &[&Instruction], at: usize, pred: &str) -> Option<Cadence> {
    let d = definition(body, at, pred)?;
    let def = body[d];
    // `PLOP3.LUT P0, PT, PT, PT, UP0, 0x80, 0x0`: P0 = PT & PT & UP0, a copy of UP0.
    if def.base() == "PLOP3" {
        let ops = operands(def);
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
    if operands(def).first().and_then(|o| register(o)) == Some(pred) {
        if let Some((counter, mask)) = masked_counter(def) {
            let p = period(mask, step(body, counter)?)?;
            return Some(Cadence {
                period: p,
                once: false,
            });
        }
    }
    // P = (y != 0) or (y == 0), y = x & m.
    if !matches!(def.base(), "ISETP" | "UISETP") {
        return None;
    }
    let ops = operands(def);
    let mods: Vec<&str> = def.opcode.split('.').collect();
    let equal = mods.contains(&"EQ");
    if !(equal || mods.contains(&"NE")) || ops.len() < 5 || !matches!(ops[4], "PT" | "UPT") {
        return None;
    }
    if register(ops[0]) != Some(pred) {
        return None;
    }
    let value = match (ops[2], ops[3]) {
        ("RZ" | "URZ", v) | (v, "RZ" | "URZ") => register(v)?,
        _ => return None,
    };
    let (counter, mask) = masked_counter(body[definition(body, d, value)?])?;
    let p = period(mask, step(body, counter)?)?;
    Some(Cadence {
        period: p,
        once: equal,
    })
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
        let holds = Cadence {
            once: true_on.once != negated,
            ..true_on
        };
        match ins.branch_target() {
            // A forward branch: the instructions it jumps over run when it is not taken.
            Some(target) if ins.base() == "BRA" && target > ins.address => {
                let skipped = Cadence {
                    once: !holds.once,
                    ..holds
                };
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
    use super::super::control::Control;
    use super::*;

    fn ins(address: u32, text: &str) -> Instruction {
        let (guard, text) = match text.strip_prefix('@') {
            Some(_) => {
                let (g, r) = text.split_once(' ').unwrap();
                (Some(g.to_string()), r)
            }
            None => (None, text),
        };
        let (opcode, operands) = text.split_once(' ').unwrap_or((text, ""));
        Instruction {
            address,
            guard,
            opcode: opcode.into(),
            operands: operands.into(),
            control: Control::from_high_word(0),
        }
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
        let once = Cadence {
            period: 4,
            once: true,
        };
        assert_eq!(c[1], Some(once));
        assert_eq!(
            c[2],
            Some(Cadence {
                once: false,
                ..once
            })
        );
        assert_eq!((c[0], c[3], c[4]), (None, None, None));
        assert!((c[2].unwrap().share() - 0.75).abs() < 1e-12);
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
        let once = Some(Cadence {
            period: 4,
            once: true,
        });
        assert_eq!((c[3], c[4]), (once, once));
        assert_eq!((c[2], c[5]), (None, None));
        // A counter that is not an induction variable: no cadence.
        let mut changed: Vec<Instruction> = body.iter().map(|&i| i.clone()).collect();
        changed[5] = ins(0x50, "IADD3 R8, R8, R3, RZ");
        let changed: Vec<&Instruction> = changed.iter().collect();
        assert!(cadences(&changed).iter().all(Option::is_none));
    }
}
