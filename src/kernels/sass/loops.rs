//! Loops of a function, from its control-flow graph: a branch from block T to block H is a back
//! edge when H dominates T (every path from the entry to T passes H); the loop is H and every block
//! that reaches T without passing H. Back edges to one head make one loop. A loop is innermost when
//! no other loop's head lies in it; its depth is the number of loops around it. A backward jump
//! that is not a back edge (ptxas's out-of-line slow paths jump back into the code they left) is
//! not a loop.

use super::listing::Instruction;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loop {
    /// Address of the head's first instruction.
    pub head: u32,
    /// Address of the last backward branch to the head.
    pub latch: u32,
    /// Loops that contain this one.
    pub depth: u32,
    pub innermost: bool,
    /// Heads of the other loops control can reach from this loop's head without taking a back
    /// edge: loops after it in one pass. Two loops neither of which reaches the other are
    /// versions of one loop (ptxas unswitched it on a test hoisted out): only one runs.
    pub reaches: Vec<u32>,
    /// The loop's blocks, as ranges of instruction indices.
    blocks: Vec<std::ops::Range<usize>>,
}

impl Loop {
    /// The loop's instructions from the head to the latch, in address order; blocks placed
    /// outside that range (out-of-line slow paths) are left out.
    pub fn body<'a>(&self, instructions: &'a [Instruction]) -> Vec<&'a Instruction> {
        let mut body: Vec<&Instruction> = self
            .blocks
            .iter()
            .flat_map(|b| &instructions[b.clone()])
            .filter(|i| (self.head..=self.latch).contains(&i.address))
            .collect();
        body.sort_by_key(|i| i.address);
        body
    }
}

/// Does control never fall through past this instruction?
fn ends_unconditionally(ins: &Instruction) -> bool {
    let unguarded = ins.guard.is_none() || ins.guard.as_deref() == Some("@PT");
    match ins.base() {
        // `BRA 0x220` always jumps; `BRA.DIV UR5, 0x..` and `BRA.U !UP0, 0x..` test something.
        "BRA" => unguarded && !ins.operands.contains(','),
        "EXIT" | "RET" | "BRX" | "JMX" | "KILL" => unguarded,
        _ => false,
    }
}

fn ends_block(ins: &Instruction) -> bool {
    matches!(
        ins.base(),
        "BRA" | "EXIT" | "RET" | "BRX" | "JMX" | "KILL" | "CALL"
    )
}

struct Graph {
    blocks: Vec<std::ops::Range<usize>>,
    successors: Vec<Vec<usize>>,
}

impl Graph {
    fn predecessors(&self) -> Vec<Vec<usize>> {
        let mut predecessors = vec![Vec::new(); self.blocks.len()];
        for (b, next) in self.successors.iter().enumerate() {
            for &s in next {
                predecessors[s].push(b);
            }
        }
        predecessors
    }
}

fn graph(code: &[Instruction]) -> Graph {
    let index_of = |address: u32| code.binary_search_by_key(&address, |i| i.address).ok();
    let mut leader = vec![false; code.len()];
    if let Some(first) = leader.first_mut() {
        *first = true;
    }
    for (i, ins) in code.iter().enumerate() {
        if let Some(t) = ins.branch_target().and_then(index_of) {
            leader[t] = true;
        }
        if ends_block(ins) && i + 1 < code.len() {
            leader[i + 1] = true;
        }
    }
    let starts: Vec<usize> = (0..code.len()).filter(|&i| leader[i]).collect();
    let blocks: Vec<std::ops::Range<usize>> = starts
        .iter()
        .enumerate()
        .map(|(b, &s)| s..starts.get(b + 1).copied().unwrap_or(code.len()))
        .collect();
    let block_of = |i: usize| starts.partition_point(|&s| s <= i) - 1;
    let successors = blocks
        .iter()
        .enumerate()
        .map(|(b, range)| {
            let last = &code[range.end - 1];
            let mut next = Vec::new();
            if let Some(t) = last.branch_target().and_then(index_of) {
                next.push(block_of(t));
            }
            if !ends_unconditionally(last) && b + 1 < blocks.len() {
                next.push(b + 1);
            }
            next
        })
        .collect();
    Graph { blocks, successors }
}

/// `dominators[b][d]`: block d dominates block b (both reachable from the entry).
fn dominators(g: &Graph) -> (Vec<bool>, Vec<Vec<bool>>) {
    let n = g.blocks.len();
    let mut reachable = vec![false; n];
    let mut stack = vec![0];
    while let Some(b) = stack.pop() {
        if n > 0 && !reachable[b] {
            reachable[b] = true;
            stack.extend(&g.successors[b]);
        }
    }
    let predecessors = g.predecessors();
    let mut dom: Vec<Vec<bool>> = (0..n)
        .map(|b| (0..n).map(|d| b != 0 || d == 0).collect())
        .collect();
    let mut changed = true;
    while changed {
        changed = false;
        for b in 1..n {
            if !reachable[b] {
                continue;
            }
            let mut set = vec![true; n];
            for &p in predecessors[b].iter().filter(|&&p| reachable[p]) {
                for (s, d) in set.iter_mut().zip(&dom[p]) {
                    *s &= *d;
                }
            }
            set[b] = true;
            if set != dom[b] {
                dom[b] = set;
                changed = true;
            }
        }
    }
    (reachable, dom)
}

/// Every loop of `code` (instructions sorted by address), by head address.
pub fn find(code: &[Instruction]) -> Vec<Loop> {
    let g = graph(code);
    let (reachable, dom) = dominators(&g);
    let n = g.blocks.len();
    let predecessors = g.predecessors();
    // Head block -> (latch address, blocks in the loop).
    let mut loops: Vec<(usize, u32, Vec<bool>)> = Vec::new();
    for t in (0..n).filter(|&t| reachable[t]) {
        for &h in g.successors[t].iter().filter(|&&h| dom[t][h]) {
            let latch = code[g.blocks[t].end - 1].address;
            let mut members = vec![false; n];
            members[h] = true;
            let mut stack = vec![t];
            while let Some(b) = stack.pop() {
                if !members[b] {
                    members[b] = true;
                    stack.extend(predecessors[b].iter().filter(|&&p| reachable[p]));
                }
            }
            match loops.iter_mut().find(|l| l.0 == h) {
                Some(l) => {
                    l.1 = l.1.max(latch);
                    l.2.iter_mut().zip(&members).for_each(|(a, m)| *a |= m);
                }
                None => loops.push((h, latch, members)),
            }
        }
    }
    // Reachability without back edges.
    let forward = |b: usize| {
        let mut seen = vec![false; n];
        let mut stack = vec![b];
        while let Some(x) = stack.pop() {
            if !seen[x] {
                seen[x] = true;
                stack.extend(g.successors[x].iter().filter(|&&s| !dom[x][s]));
            }
        }
        seen
    };
    let mut found: Vec<Loop> = loops
        .iter()
        .map(|(h, latch, members)| Loop {
            reaches: {
                let seen = forward(*h);
                loops
                    .iter()
                    .filter(|o| o.0 != *h && seen[o.0])
                    .map(|o| code[g.blocks[o.0].start].address)
                    .collect()
            },
            head: code[g.blocks[*h].start].address,
            latch: *latch,
            depth: loops.iter().filter(|o| o.0 != *h && o.2[*h]).count() as u32,
            innermost: !loops.iter().any(|o| o.0 != *h && members[o.0]),
            blocks: (0..n)
                .filter(|&b| members[b])
                .map(|b| g.blocks[b].clone())
                .collect(),
        })
        .collect();
    found.sort_by_key(|l| l.head);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ins(address: u32, text: &str) -> Instruction {
        Instruction::from_text(address, text)
    }

    #[test]
    fn nests_merges_and_skips_jumps_back_from_slow_paths() {
        // outer 0x10..0x80 holds inner 0x20..0x40 (two back edges) and inner 0x50..0x60; the
        // slow path at 0xb0 jumps back to 0x58, which does not dominate it: not a loop.
        let code = vec![
            ins(0x10, "NOP"),
            ins(0x20, "NOP"),
            ins(0x30, "@P0 BRA 0x20"),
            ins(0x40, "@P1 BRA 0x20"),
            ins(0x50, "BRA.DIV UR4, 0xb0"),
            ins(0x58, "NOP"),
            ins(0x60, "@P2 BRA 0x50"),
            ins(0x70, "@P3 BRA 0x90"),
            ins(0x80, "@P4 BRA 0x10"),
            ins(0x90, "EXIT"),
            ins(0xa0, "BRA 0xa0"),
            ins(0xb0, "NOP"),
            ins(0xc0, "BRA 0x58"),
        ];
        let loops = find(&code);
        let shape: Vec<_> = loops
            .iter()
            .map(|l| (l.head, l.latch, l.depth, l.innermost))
            .collect();
        assert_eq!(
            shape,
            vec![
                (0x10, 0x80, 0, false),
                (0x20, 0x40, 1, true),
                (0x50, 0x60, 1, true)
            ]
        );
        let body: Vec<u32> = loops[2].body(&code).iter().map(|i| i.address).collect();
        assert_eq!(body, vec![0x50, 0x58, 0x60], "the slow path is not walked");
        // The trap after EXIT branches to itself but is unreachable: no loop.
        assert!(loops.iter().all(|l| l.head != 0xa0));
        // The first inner loop reaches the second; nothing reaches the outer loop's head again
        // without its back edge.
        assert_eq!(loops[1].reaches, vec![0x50]);
        assert!(loops[2].reaches.is_empty());
        assert_eq!(loops[0].reaches, vec![0x20, 0x50]);
    }

    #[test]
    fn an_unswitched_loop_is_two_versions_that_do_not_reach_each_other() {
        // if (p) { loop A } else { loop B }: ptxas's layout, A then a jump over B.
        let code = vec![
            ins(0x10, "@P0 BRA 0x50"),
            ins(0x20, "NOP"),
            ins(0x30, "@P1 BRA 0x20"),
            ins(0x40, "BRA 0x70"),
            ins(0x50, "NOP"),
            ins(0x60, "@P1 BRA 0x50"),
            ins(0x70, "EXIT"),
        ];
        let loops = find(&code);
        assert_eq!(loops.len(), 2);
        assert!(loops[0].reaches.is_empty() && loops[1].reaches.is_empty());
    }
}
