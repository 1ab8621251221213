//! Which registers an instruction writes and reads, and where a value came from: enough to tell a
//! loop over the context (its exit test depends on a kernel argument or on loaded data) from a loop
//! over a fixed range (q's elements), and to find the counter behind a predicate. Definitions are
//! found by scanning back in address order, which is exact in straight-line code and in ptxas's
//! layout of a loop and its preheader; it is not a full reaching-definitions analysis.

use super::listing::Instruction;

/// Kernel parameters start at this offset of constant bank 0 on sm_90 (below it: the launch
/// shape, the stack pointer, the global-memory descriptor).
pub const PARAM_OFFSET: u32 = 0x210;

/// The instruction's operands, split at top-level commas (`{5,4}` and `[..]` kept whole).
pub fn operands(ins: &Instruction) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    let text = ins.operands.as_str();
    for (i, c) in text.char_indices() {
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    if !text[start..].trim().is_empty() {
        out.push(text[start..].trim());
    }
    out
}

/// `R12`, `UR4`, `P0`, `UP1` (not the constants `RZ`, `URZ`, `PT`, `UPT`) in an operand such as
/// `-R12.reuse`, `!P0` or `|R5|`.
pub fn register(operand: &str) -> Option<&str> {
    let t = operand.trim_start_matches(['-', '!', '|', '~']);
    let t = t.split(['.', '|']).next().unwrap_or_default();
    let digits = t
        .strip_prefix("UR")
        .or_else(|| t.strip_prefix("UP"))
        .or_else(|| t.strip_prefix('R'))
        .or_else(|| t.strip_prefix('P'))?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(t)
}

fn is_predicate(operand: &str) -> bool {
    let t = operand.trim_start_matches('!');
    t == "PT"
        || t == "UPT"
        || register(t).is_some_and(|r| r.starts_with('P') || r.starts_with("UP"))
}

/// A number operand: `0x3`, `-0xf0`, `16`.
pub fn immediate(operand: &str) -> Option<i64> {
    let (negative, t) = match operand.strip_prefix('-') {
        Some(t) => (true, t),
        None => (false, operand),
    };
    let v = match t.strip_prefix("0x") {
        Some(hex) => i64::from_str_radix(hex, 16).ok()?,
        None => t.parse().ok()?,
    };
    Some(if negative { -v } else { v })
}

/// How many consecutive registers the first destination spans (`.64`/`.WIDE` 2, `.128` 4).
fn width(ins: &Instruction) -> u32 {
    let modifiers: Vec<&str> = ins.opcode.split('.').skip(1).collect();
    if modifiers.contains(&"128") {
        4
    } else if modifiers.iter().any(|m| *m == "64" || *m == "WIDE") {
        2
    } else {
        1
    }
}

fn writes_nothing(ins: &Instruction) -> bool {
    let base = ins.base();
    base.starts_with("ST")
        || matches!(
            base,
            "RED"
                | "BRA"
                | "BRX"
                | "BSSY"
                | "BSYNC"
                | "EXIT"
                | "BAR"
                | "NOP"
                | "DEPBAR"
                | "LDGSTS"
                | "LDGDEPBAR"
                | "WARPSYNC"
                | "CALL"
                | "RET"
                | "MEMBAR"
                | "FENCE"
                | "ERRBAR"
                | "CCTL"
                | "YIELD"
                | "KILL"
                | "JMP"
                | "JMX"
        )
}

/// How many leading operands are destinations.
fn destinations(ins: &Instruction, ops: &[&str]) -> usize {
    if writes_nothing(ins) || ops.is_empty() {
        return 0;
    }
    let base = ins.base();
    if base.ends_with("SETP") || base.ends_with("PLOP3") {
        return 2.min(ops.len());
    }
    // `LOP3.LUT P0, RZ, R12, 0x3, RZ, 0xc0, !PT`: a predicate and a register out.
    if is_predicate(ops[0]) && ops.len() > 1 && !is_predicate(ops[1]) {
        return 2;
    }
    // `IADD3 R14, P0, P2, R5, R6, R7`: carries out after the result.
    1 + ops[1..].iter().take_while(|o| is_predicate(o)).count()
}

/// Whether `ins` writes register `reg`.
pub fn writes(ins: &Instruction, reg: &str) -> bool {
    let ops = operands(ins);
    let n = destinations(ins, &ops);
    ops[..n].iter().enumerate().any(|(i, o)| {
        let Some(r) = register(o) else { return false };
        if r == reg {
            return true;
        }
        // The first destination of a wide operation spans the registers after it.
        let number = |r: &str| r.trim_start_matches(['U', 'R']).parse::<u32>().ok();
        let same_file = r.starts_with("UR") == reg.starts_with("UR") && !reg.starts_with('P');
        i == 0
            && same_file
            && matches!((number(r), number(reg)), (Some(a), Some(b)) if b > a && b < a + width(ins))
    })
}

/// The operands `ins` reads.
pub fn sources(ins: &Instruction) -> Vec<&str> {
    let ops = operands(ins);
    let n = destinations(ins, &ops);
    let mut out: Vec<&str> = ops[n..].to_vec();
    if let Some(g) = ins.guard.as_deref() {
        out.push(g.trim_start_matches('@'));
    }
    out
}

/// Registers named anywhere in an operand (`desc[UR10][R4.64+0x400]` names UR10 and R4).
fn registers_in(operand: &str) -> Vec<&str> {
    operand
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '.')
        .filter_map(register)
        .collect()
}

/// `c[0x0][0x228]` at or above [`PARAM_OFFSET`], or any other bank: a kernel argument (or user
/// constant data).
fn reads_argument(operand: &str) -> bool {
    let Some(rest) = operand.trim_start_matches('-').strip_prefix("c[") else {
        return false;
    };
    let mut parts = rest.split(['[', ']']).filter(|p| !p.is_empty());
    let bank = parts.next().and_then(immediate);
    let offset = parts.next().and_then(immediate);
    match (bank, offset) {
        (Some(0), Some(offset)) => offset >= i64::from(PARAM_OFFSET),
        (Some(0), None) => false, // `c[0x0][RZ]`: the launch shape
        _ => true,
    }
}

/// Whether the value of `ins`'s destination is data the kernel was given: a load from memory.
fn loads_data(ins: &Instruction) -> bool {
    matches!(
        ins.base(),
        "LDG" | "LD" | "LDS" | "LDL" | "LDSM" | "ATOM" | "ATOMG" | "ATOMS"
    )
}

/// The index of the last instruction before `at` (in `code`'s order) that writes `reg`.
pub fn definition(code: &[&Instruction], at: usize, reg: &str) -> Option<usize> {
    (0..at.min(code.len()))
        .rev()
        .find(|&i| writes(code[i], reg))
}

/// Whether the value `reg` holds at instruction `at` depends on a kernel argument or on loaded
/// data (not only on immediates, thread and CTA indices and the launch shape). Gives up, saying
/// yes, after `budget` definitions.
pub fn depends_on_data(code: &[&Instruction], at: usize, reg: &str) -> bool {
    let mut budget = 256;
    let mut seen = std::collections::HashSet::new();
    let mut stack = vec![(at, reg.to_string())];
    while let Some((at, reg)) = stack.pop() {
        let Some(d) = definition(code, at, &reg) else {
            continue; // never written before: not from the arguments
        };
        if !seen.insert((d, reg)) {
            continue;
        }
        budget -= 1;
        if budget == 0 {
            return true;
        }
        let ins = code[d];
        if loads_data(ins) {
            return true;
        }
        for s in sources(ins) {
            if reads_argument(s) {
                return true;
            }
            stack.extend(registers_in(s).into_iter().map(|r| (d, r.to_string())));
        }
    }
    false
}

/// A register's value as the loop body computes it: its value at the top of an iteration of
/// register `.0`, plus `.1`; `None` when it is anything else.
type Symbolic = Option<(String, i64)>;

/// `ins` as `dst = src + imm` (adds, moves), with `src` a register, if it is one.
fn offset_of(ins: &Instruction) -> Option<(&str, i64)> {
    let adds = matches!(ins.base(), "IADD3" | "VIADD" | "UIADD3" | "IADD" | "UIADD");
    let moves = matches!(ins.base(), "MOV" | "UMOV") || ins.opcode == "IMAD.MOV.U32";
    if !(adds || moves) {
        return None;
    }
    let mut imm = 0;
    let mut base: Option<&str> = None;
    for o in sources(ins) {
        if let Some(v) = immediate(o) {
            imm += v;
        } else if matches!(o, "RZ" | "URZ" | "PT" | "UPT" | "!PT" | "!UPT") {
        } else if let (Some(r), None, false) = (register(o), base, o.starts_with('-')) {
            base = Some(r);
        } else {
            return None;
        }
    }
    Some((base?, imm))
}

/// Every register's symbolic value after the first `upto` instructions of `body`. A write under a
/// guard, or of anything but an add of a constant or a move, makes the value unknown.
fn symbolic(body: &[&Instruction], upto: usize) -> std::collections::HashMap<String, Symbolic> {
    let mut values: std::collections::HashMap<String, Symbolic> = Default::default();
    let value = |values: &std::collections::HashMap<String, Symbolic>, r: &str| -> Symbolic {
        values
            .get(r)
            .cloned()
            .unwrap_or_else(|| Some((r.to_string(), 0)))
    };
    for ins in &body[..upto.min(body.len())] {
        let ops = operands(ins);
        let n = destinations(ins, &ops);
        let computed = match (ins.guard.is_none(), offset_of(ins)) {
            (true, Some((src, imm))) => value(&values, src).map(|(r, c)| (r, c + imm)),
            _ => None,
        };
        for (i, d) in ops[..n].iter().enumerate() {
            if let Some(r) = register(d) {
                values.insert(r.to_string(), if i == 0 { computed.clone() } else { None });
            }
        }
    }
    values
}

/// The constant the value `reg` holds at instruction `at` of `body` advances by per iteration:
/// a register that one pass of the body leaves at its start value plus a constant (`VIADD R6, R6,
/// -4`; FlashInfer's `UR4 = UR5 + 2` at the top and `UR5 = UR4` at the bottom), or an offset of
/// one (`iter + 2`).
pub fn step(body: &[&Instruction], at: usize, reg: &str) -> Option<i64> {
    let (counter, _) = symbolic(body, at)
        .remove(reg)
        .unwrap_or_else(|| Some((reg.to_string(), 0)))?;
    match symbolic(body, body.len()).remove(&counter) {
        None => None, // never written: not a counter
        Some(Some((r, s))) if r == counter => Some(s),
        Some(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ins(text: &str) -> Instruction {
        Instruction::from_text(0, text)
    }

    #[test]
    fn destinations_and_sources() {
        let i = ins("IADD3 R14, P0, P2, R5, R6, R7");
        assert!(writes(&i, "R14") && writes(&i, "P0") && writes(&i, "P2"));
        assert!(!writes(&i, "R5"));
        assert_eq!(sources(&i), vec!["R5", "R6", "R7"]);
        let lop = ins("LOP3.LUT P0, RZ, R12, 0x3, RZ, 0xc0, !PT");
        assert!(writes(&lop, "P0") && !writes(&lop, "R12"));
        let wide = ins("IMAD.WIDE.U32 R4, R12, 0x4, R4");
        assert!(writes(&wide, "R4") && writes(&wide, "R5") && !writes(&wide, "R6"));
        let setp = ins("ISETP.GE.AND P0, PT, R7, -0xf0, PT");
        assert_eq!(sources(&setp), vec!["R7", "-0xf0", "PT"]);
        assert!(!writes(&ins("STS.64 [R6+-0x400], R8"), "R6"));
        assert_eq!(register("-R12.reuse"), Some("R12"));
        assert_eq!(register("!P0"), Some("P0"));
        assert_eq!(register("RZ"), None);
        assert_eq!(immediate("-0xf0"), Some(-240));
    }

    #[test]
    fn arguments_and_loads_are_data_thread_indices_are_not() {
        let code = [
            ins("S2R R17, SR_TID.X"),
            ins("LDC R0, c[0x0][RZ]"),
            ins("ULDC UR8, c[0x0][0x228]"),
            ins("IMAD.IADD R17, R0, 0x1, R17"),
            ins("ISETP.GE.AND P0, PT, R17, 0x200, PT"),
            ins("ISETP.GE.AND P1, PT, R17, UR8, PT"),
            ins("LDG.E R9, desc[UR6][R2.64]"),
            ins("ISETP.GE.AND P2, PT, R17, R9, PT"),
        ];
        let code: Vec<&Instruction> = code.iter().collect();
        assert!(!depends_on_data(&code, 8, "P0"));
        assert!(depends_on_data(&code, 8, "P1"));
        assert!(depends_on_data(&code, 8, "P2"));
    }

    #[test]
    fn counters_step_by_a_constant() {
        let body = [
            ins("UIADD3 UR4, UR5, 0x2, URZ"),
            ins("ULOP3.LUT UP0, UR9, UR4, 0xe, URZ, 0xc0, !UPT"),
            ins("VIADD R12, R12, 0x1"),
            ins("IADD3 R11, R11, 0x80, RZ"),
            ins("IADD3 R10, R10, R3, RZ"),
            ins("ULEA UR5, UR5, 0x6, 0x1"),
            ins("UMOV UR5, UR4"),
            ins("@P0 VIADD R9, R9, 0x1"),
        ];
        let body: Vec<&Instruction> = body.iter().collect();
        assert_eq!(step(&body, 0, "R12"), Some(1));
        assert_eq!(step(&body, 8, "R11"), Some(128));
        assert_eq!(step(&body, 0, "R10"), None);
        assert_eq!(step(&body, 0, "R8"), None, "never written");
        assert_eq!(step(&body, 0, "R9"), None, "written under a guard");
        // UR4 = UR5 + 2 at the top, UR5 = UR4 at the bottom (a temporary between): both step by 2.
        assert_eq!(step(&body, 1, "UR4"), Some(2));
        assert_eq!(step(&body, 0, "UR5"), Some(2));
    }
}
