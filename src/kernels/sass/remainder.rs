//! Which loops are the remainder (or the prologue) of an unrolled loop. Unrolling a loop k times
//! leaves a copy of the original body to run the last (or first) n mod k iterations: a loop at the
//! same depth, beside the unrolled one (no other loop between them but its fellow remainders),
//! holding each of its loads a k-th as often, and no kind of instruction the unrolled body lacks
//! (moves aside). Two different loops of one kernel (K and V of attention, with the softmax passes
//! between them) fail at least one of these.

use super::listing::Instruction;
use super::memory::{classify, MemoryOp};
use std::collections::{BTreeMap, BTreeSet};

/// What a loop is made of, for the comparison.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape<'a> {
    pub head: u32,
    pub depth: u32,
    /// Load opcode (with modifiers) -> count.
    pub loads: BTreeMap<&'a str, u32>,
    /// Instruction kinds (opcodes without modifiers), moves left out.
    pub kinds: BTreeSet<&'a str>,
}

impl<'a> Shape<'a> {
    pub fn of(head: u32, depth: u32, body: &[&'a Instruction]) -> Shape<'a> {
        let mut loads = BTreeMap::new();
        let mut kinds = BTreeSet::new();
        for ins in body.iter().filter(|i| !i.never_executes()) {
            if let MemoryOp::GlobalLoad { .. } | MemoryOp::AsyncCopy { .. } = classify(ins) {
                *loads.entry(ins.opcode.as_str()).or_default() += 1;
            }
            if ins.base() != "MOV" {
                kinds.insert(ins.base());
            }
        }
        Shape {
            head,
            depth,
            loads,
            kinds,
        }
    }
}

/// Whether `big` holds every load of `small` the same whole number of times, at least twice.
fn loads_are_a_multiple(big: &BTreeMap<&str, u32>, small: &BTreeMap<&str, u32>) -> bool {
    let Some((op, &n)) = small.iter().next() else {
        return false;
    };
    let k = big.get(op).copied().unwrap_or(0) / n;
    k >= 2 && big.len() == small.len() && small.iter().all(|(op, &c)| big.get(op) == Some(&(c * k)))
}

/// Whether `small` could be a copy of one iteration of `big`.
fn related(big: &Shape, small: &Shape) -> bool {
    big.depth == small.depth
        && loads_are_a_multiple(&big.loads, &small.loads)
        && small.kinds.is_subset(&big.kinds)
}

/// For each loop of `shapes`, the head of the unrolled loop it is the remainder of. `heads` are
/// the heads of every loop of the function (with loads or not): a loop between the two must be
/// another remainder of the same unrolled loop (unrolling by 16 may leave remainders by 4 and 1).
pub fn remainders(shapes: &[Shape], heads: &[u32]) -> Vec<Option<u32>> {
    let beside = |big: &Shape, small: &Shape| {
        let (lo, hi) = (big.head.min(small.head), big.head.max(small.head));
        heads
            .iter()
            .filter(|&&h| lo < h && h < hi)
            .all(|&h| shapes.iter().any(|s| s.head == h && related(big, s)))
    };
    shapes
        .iter()
        .map(|small| {
            shapes
                .iter()
                .find(|big| related(big, small) && beside(big, small))
                .map(|big| big.head)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(head: u32, loads: &[(&'static str, u32)], kinds: &[&'static str]) -> Shape<'static> {
        Shape {
            head,
            depth: 1,
            loads: loads.iter().copied().collect(),
            kinds: kinds.iter().copied().collect(),
        }
    }

    #[test]
    fn a_remainder_holds_the_same_loads_a_whole_number_of_times_fewer() {
        let big = BTreeMap::from([("LDG.E.128", 8), ("LDG.E", 4)]);
        let small =
            |pairs: &[(&'static str, u32)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();
        assert!(loads_are_a_multiple(
            &big,
            &small(&[("LDG.E.128", 2), ("LDG.E", 1)])
        ));
        assert!(loads_are_a_multiple(
            &big,
            &small(&[("LDG.E.128", 4), ("LDG.E", 2)])
        ));
        assert!(!loads_are_a_multiple(&big, &big), "not itself");
        assert!(!loads_are_a_multiple(&big, &small(&[("LDG.E.128", 2)])));
        assert!(!loads_are_a_multiple(
            &big,
            &small(&[("LDG.E.128", 3), ("LDG.E", 1)])
        ));
        assert!(!loads_are_a_multiple(&big, &small(&[])));
    }

    #[test]
    fn only_a_neighbour_made_of_the_same_kinds_is_a_remainder() {
        let kinds = ["IADD3", "LDG", "LOP3", "BRA"];
        let unrolled = shape(0x500, &[("LDG.E.128", 4)], &kinds);
        let remainder = shape(0x300, &[("LDG.E.128", 1)], &kinds);
        assert_eq!(
            remainders(&[remainder.clone(), unrolled.clone()], &[0x300, 0x500]),
            vec![Some(0x500), None]
        );
        // A loop between them (a softmax pass) makes them two phases.
        assert_eq!(
            remainders(
                &[remainder.clone(), unrolled.clone()],
                &[0x300, 0x400, 0x500]
            ),
            vec![None, None]
        );
        // So does an instruction kind the other lacks (the K phase's shuffles).
        let k_phase = shape(
            0x300,
            &[("LDG.E.128", 1)],
            &["IADD3", "LDG", "LOP3", "BRA", "SHFL"],
        );
        assert_eq!(
            remainders(&[k_phase, unrolled], &[0x300, 0x500]),
            vec![None, None]
        );
    }
}
