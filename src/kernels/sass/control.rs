//! The scheduling control bits of one Volta-and-later SASS instruction.
//!
//! Since Volta an instruction is 128 bits; cuobjdump prints it as two 64-bit words, low first, and
//! the top 23 bits of the high word (bits 105-127 of the instruction) are the control code
//! assigned by ptxas. From the least significant bit: stall cycles (4), yield (1), write-barrier
//! index (3), read-barrier index (3), wait-barrier mask (6), operand reuse (4). A barrier index of 7
//! means none. The layout is the one CuAssembler decodes (`CuAsm/CuSMVersion.py`:
//! `splitControlCodes_7x_8x` takes `high >> 41`; `CuAsm/common.py`: `decodeCtrlCodes`), after
//! Jia et al., "Dissecting the NVIDIA Volta GPU Architecture via Microbenchmarking"
//! (arXiv:1804.06826) and "... Turing ..." (arXiv:1903.07486). The six barriers are the warp's
//! scoreboards SB0-SB5: a variable-latency instruction (a load, a shared-memory access, a
//! conversion) increments its write barrier when it issues and decrements it when its result is
//! written; an instruction whose wait mask names a barrier does not issue until that barrier is
//! zero. `tests/suite/kernels_sass_fixtures.rs` checks the decode against code compiled for sm_90.

/// The six scoreboards a warp has.
pub const SCOREBOARDS: usize = 6;

/// The decoded control code of one instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Control {
    pub stall: u8,
    /// The raw yield bit (ptxas clears it where the warp may yield).
    pub yield_bit: bool,
    /// Scoreboard set when the result is written (a load's destination), if any.
    pub write_barrier: Option<u8>,
    /// Scoreboard set until the source operands are read (a store's data), if any.
    pub read_barrier: Option<u8>,
    /// Bit k: wait until scoreboard k is zero before issuing.
    pub wait_mask: u8,
    pub reuse: u8,
}

impl Control {
    /// Decodes the high 64-bit word of an instruction as cuobjdump prints it.
    pub fn from_high_word(high: u64) -> Control {
        let code = high >> 41;
        let barrier = |v: u64| (v != 7).then_some(v as u8);
        Control {
            stall: (code & 0xf) as u8,
            yield_bit: (code >> 4) & 1 == 1,
            write_barrier: barrier((code >> 5) & 7),
            read_barrier: barrier((code >> 8) & 7),
            wait_mask: ((code >> 11) & 0x3f) as u8,
            reuse: ((code >> 17) & 0xf) as u8,
        }
    }

    /// Whether this instruction waits for scoreboard `sb` to drain.
    pub fn waits_on(&self, sb: u8) -> bool {
        self.wait_mask >> sb & 1 == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Words from `cuobjdump -sass` of sm_90 code, decoded by hand.
    #[test]
    fn decodes_words_printed_by_cuobjdump() {
        // LDG.E R2, desc[UR4][R2.64]: sets SB2, waits on nothing.
        let ldg = Control::from_high_word(0x000ea2000c1e1900);
        assert_eq!(ldg.write_barrier, Some(2));
        assert_eq!(ldg.read_barrier, None);
        assert_eq!(ldg.wait_mask, 0);
        // FFMA R9, R9, 0.5, R2: waits on SB2 (mask 0b000100), stall 12.
        let ffma = Control::from_high_word(0x004fd80000000002);
        assert_eq!(ffma.wait_mask, 0b100);
        assert!(ffma.waits_on(2) && !ffma.waits_on(0));
        assert_eq!(ffma.stall, 12);
        assert_eq!((ffma.write_barrier, ffma.read_barrier), (None, None));
        // LDGSTS.E.BYPASS.128: read barrier SB1 (its address registers), no write barrier.
        let ldgsts = Control::from_high_word(0x0003e4000b901c46);
        assert_eq!((ldgsts.write_barrier, ldgsts.read_barrier), (None, Some(1)));
        // IMAD.WIDE.U32 R24, R22.reuse, UR4, RZ: the first operand reused (bit 0).
        let imad = Control::from_high_word(0x040fe2000f8e00ff);
        assert_eq!(imad.reuse, 0b0001);
        assert_eq!(imad.wait_mask, 0);
    }

    #[test]
    fn every_field_round_trips() {
        for (stall, y, wb, rb, wait, reuse) in [
            (0u64, 0u64, 7u64, 7u64, 0u64, 0u64),
            (15, 1, 0, 5, 0x3f, 0xf),
            (3, 0, 4, 7, 0b100001, 2),
        ] {
            let code = stall | y << 4 | wb << 5 | rb << 8 | wait << 11 | reuse << 17;
            let c = Control::from_high_word(code << 41);
            assert_eq!(c.stall as u64, stall);
            assert_eq!(c.yield_bit, y == 1);
            assert_eq!(c.write_barrier.map_or(7, u64::from), wb);
            assert_eq!(c.read_barrier.map_or(7, u64::from), rb);
            assert_eq!(c.wait_mask as u64, wait);
            assert_eq!(c.reuse as u64, reuse);
        }
    }
}
