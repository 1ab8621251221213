//! Reads the text `cuobjdump -sass` prints: functions, and in each its instructions with their
//! address, guard predicate, opcode, operands and decoded control bits.
//!
//! ```text
//!         code for sm_90
//!                 Function : stream_read
//!         /*0110*/                   LDG.E.128 R4, desc[UR4][R2.64] ;   /* 0x0000000402047981 */
//!                                                                       /* 0x000ea8000c1e1d00 */
//! ```
//! The first hex word is the low half of the 128-bit instruction, the line below it the high half.

use super::control::Control;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instruction {
    pub address: u32,
    /// `@P0`, `@!PT`, ... when the instruction is guarded.
    pub guard: Option<String>,
    /// With its modifiers: `LDG.E.128.CONSTANT`.
    pub opcode: String,
    pub operands: String,
    pub control: Control,
}

#[cfg(test)]
impl Instruction {
    /// One instruction from its text (`@P0 BRA 0x220`), with no control bits: the analysers' tests.
    pub fn from_text(address: u32, text: &str) -> Instruction {
        let (guard, text) = match text.strip_prefix('@') {
            Some(_) => {
                let (g, r) = text.split_once(' ').expect("a guard, then the instruction");
                (Some(g.to_string()), r)
            }
            None => (None, text),
        };
        let (opcode, operands) = text.split_once(' ').unwrap_or((text, ""));
        Instruction {
            address,
            guard,
            opcode: opcode.to_string(),
            operands: operands.to_string(),
            control: Control::from_high_word(0),
        }
    }
}

impl Instruction {
    /// The opcode without modifiers: `LDG` for `LDG.E.128`.
    pub fn base(&self) -> &str {
        self.opcode.split('.').next().unwrap_or_default()
    }

    /// `@!PT`: guarded by "never", so it never executes (ptxas pads with such instructions).
    pub fn never_executes(&self) -> bool {
        self.guard.as_deref() == Some("@!PT")
    }

    /// Target address of a direct branch (`BRA 0x220`, `@!P0 BRA.U !UP0, 0x1a0`).
    pub fn branch_target(&self) -> Option<u32> {
        if self.base() != "BRA" {
            return None;
        }
        let last = self.operands.split([' ', ',']).rfind(|t| !t.is_empty())?;
        u32::from_str_radix(last.strip_prefix("0x")?, 16).ok()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    pub name: String,
    /// `sm_90` from the `code for sm_90` line above it, when cuobjdump printed one.
    pub arch: Option<String>,
    pub instructions: Vec<Instruction>,
}

/// A line cuobjdump's format should not produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListingError {
    pub line: usize,
    pub reason: String,
}

impl std::fmt::Display for ListingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SASS listing line {}: {}", self.line, self.reason)
    }
}

/// `/* 0x0123456789abcdef */` anywhere in `line`: the word.
fn hex_word(line: &str) -> Option<u64> {
    let start = line.rfind("/* 0x")? + 5;
    let end = start + line[start..].find(" */")?;
    u64::from_str_radix(&line[start..end], 16).ok()
}

/// `/*0110*/ TEXT ; /* 0x... */`: the address and TEXT.
fn instruction_line(line: &str) -> Option<(u32, &str)> {
    let rest = line.trim_start().strip_prefix("/*")?;
    let close = rest.find("*/")?;
    let address = u32::from_str_radix(&rest[..close], 16).ok()?;
    let body = &rest[close + 2..];
    let text_end = body.rfind("/* 0x")?;
    let text = body[..text_end].trim().trim_end_matches(';').trim();
    Some((address, text))
}

fn split_text(text: &str) -> (Option<String>, String, String) {
    let (guard, rest) = match text.strip_prefix('@') {
        Some(_) => {
            let (g, r) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
            (Some(g.to_string()), r.trim_start())
        }
        None => (None, text),
    };
    let (opcode, operands) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    (guard, opcode.to_string(), operands.trim().to_string())
}

/// Every function of the listing, in order.
pub fn parse(text: &str) -> Result<Vec<Function>, ListingError> {
    let mut functions: Vec<Function> = Vec::new();
    let mut arch: Option<String> = None;
    let lines: Vec<&str> = text.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(a) = line.trim().strip_prefix("code for ") {
            arch = Some(a.trim().to_string());
        } else if let Some(name) = line.trim().strip_prefix("Function : ") {
            functions.push(Function {
                name: name.trim().to_string(),
                arch: arch.clone(),
                instructions: Vec::new(),
            });
        } else if let Some((address, text)) = instruction_line(line) {
            let error = |reason: &str| ListingError {
                line: i + 1,
                reason: reason.to_string(),
            };
            let function = functions
                .last_mut()
                .ok_or_else(|| error("an instruction before any `Function :` line"))?;
            let high = lines
                .get(i + 1)
                .filter(|next| instruction_line(next).is_none())
                .and_then(|next| hex_word(next))
                .ok_or_else(|| error("no high word on the next line"))?;
            let (guard, opcode, operands) = split_text(text);
            function.instructions.push(Instruction {
                address,
                guard,
                opcode,
                operands,
                control: Control::from_high_word(high),
            });
            i += 1;
        }
        i += 1;
    }
    Ok(functions)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "\
\tcode for sm_90
\t\tFunction : tiny
\t.headerflags\t@\"EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)\"
        /*00e0*/                   LDG.E R2, desc[UR4][R2.64] ;                  /* 0x0000000402027981 */
                                                                                 /* 0x000ea2000c1e1900 */
        /*0110*/                   FFMA R9, R9, 0.5, R2 ;                        /* 0x3f00000009097823 */
                                                                                 /* 0x004fd80000000002 */
        /*0120*/              @!P0 BRA 0xd0 ;                                    /* 0xffffffffffe88947 */
                                                                                 /* 0x000fea000383ffff */
";

    #[test]
    fn reads_address_guard_opcode_operands_and_control() {
        let f = parse(LISTING).unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].name.as_str(), f[0].arch.as_deref()),
            ("tiny", Some("sm_90"))
        );
        let ins = &f[0].instructions;
        assert_eq!(ins.len(), 3);
        assert_eq!((ins[0].address, ins[0].opcode.as_str()), (0xe0, "LDG.E"));
        assert_eq!(ins[0].operands, "R2, desc[UR4][R2.64]");
        assert_eq!(ins[0].control.write_barrier, Some(2));
        assert!(ins[1].control.waits_on(2));
        assert_eq!(ins[2].guard.as_deref(), Some("@!P0"));
        assert_eq!(ins[2].branch_target(), Some(0xd0));
        assert_eq!(ins[1].branch_target(), None);
    }

    #[test]
    fn an_instruction_without_its_high_word_is_an_error() {
        let cut: String = LISTING.lines().take(4).collect::<Vec<_>>().join("\n");
        let err = parse(&cut).unwrap_err();
        assert_eq!(err.line, 4);
    }
}
