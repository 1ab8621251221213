//! What an instruction does for the bytes-in-flight count: a global load and its width, an async
//! copy (cp.async), the commit of a copy group, a wait on a scoreboard's count, or nothing.

use super::listing::Instruction;

/// Lanes per warp: every load is counted as issued by all of them (predicated ones too).
pub const LANES: u32 = 32;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryOp {
    /// `LDG` (or a generic `LD`, counted as global): `bytes` per lane.
    GlobalLoad {
        bytes: u32,
    },
    /// `LDGSTS` (cp.async): global to shared, completion tracked by its group.
    AsyncCopy {
        bytes: u32,
    },
    /// `LDGDEPBAR` (cp.async.commit_group): closes the open group; its write barrier counts it.
    CommitGroup,
    /// `DEPBAR.LE SBk, N`: wait until at most N events remain on scoreboard k (with cp.async,
    /// "until at most N groups are pending"); `{a,b}` after it: also until those are empty.
    DepBar {
        scoreboard: u8,
        max_pending: u32,
        drain: Vec<u8>,
    },
    Other,
}

/// Bytes per lane from the width modifier: `.128` 16, `.64` 8, `.U16`/`.S16` 2, `.U8`/`.S8` 1,
/// otherwise 4.
pub fn width_bytes(opcode: &str) -> u32 {
    opcode
        .split('.')
        .skip(1)
        .find_map(|m| match m {
            "256" => Some(32),
            "128" => Some(16),
            "64" => Some(8),
            "U16" | "S16" => Some(2),
            "U8" | "S8" => Some(1),
            _ => None,
        })
        .unwrap_or(4)
}

fn parse_number(token: &str) -> Option<u32> {
    let t = token.trim();
    match t.strip_prefix("0x") {
        Some(hex) => u32::from_str_radix(hex, 16).ok(),
        None => t.parse().ok(),
    }
}

fn parse_depbar(operands: &str) -> Option<MemoryOp> {
    let (counted, drain) = match operands.split_once('{') {
        Some((head, list)) => (head, list.trim_end_matches('}')),
        None => (operands, ""),
    };
    let mut parts = counted.split(',').map(str::trim).filter(|p| !p.is_empty());
    let scoreboard = parts.next()?.strip_prefix("SB")?.parse().ok()?;
    let max_pending = parse_number(parts.next()?)?;
    let drain = drain
        .split(',')
        .filter_map(|d| parse_number(d).and_then(|n| u8::try_from(n).ok()))
        .collect();
    Some(MemoryOp::DepBar {
        scoreboard,
        max_pending,
        drain,
    })
}

pub fn classify(ins: &Instruction) -> MemoryOp {
    match ins.base() {
        "LDG" | "LD" => MemoryOp::GlobalLoad {
            bytes: width_bytes(&ins.opcode),
        },
        "LDGSTS" => MemoryOp::AsyncCopy {
            bytes: width_bytes(&ins.opcode),
        },
        "LDGDEPBAR" => MemoryOp::CommitGroup,
        "DEPBAR" => parse_depbar(&ins.operands).unwrap_or(MemoryOp::Other),
        _ => MemoryOp::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn widths_follow_the_opcode_suffix() {
        for (op, bytes) in [
            ("LDG.E", 4),
            ("LDG.E.128.CONSTANT", 16),
            ("LDG.E.64", 8),
            ("LDG.E.U16", 2),
            ("LDG.E.S8", 1),
            ("LDG.E.LTC128B.128", 16),
            ("LDGSTS.E.BYPASS.LTC128B.128", 16),
            ("LDG.E.EL.U8.CONSTANT", 1),
        ] {
            assert_eq!(width_bytes(op), bytes, "{op}");
        }
    }

    #[test]
    fn reads_depbar_operands() {
        assert_eq!(
            parse_depbar("SB0, 0x1"),
            Some(MemoryOp::DepBar {
                scoreboard: 0,
                max_pending: 1,
                drain: vec![]
            })
        );
        assert_eq!(
            parse_depbar("SB2, 0x0, {5,4}"),
            Some(MemoryOp::DepBar {
                scoreboard: 2,
                max_pending: 0,
                drain: vec![5, 4]
            })
        );
        assert_eq!(parse_depbar("garbage"), None);
    }
}
