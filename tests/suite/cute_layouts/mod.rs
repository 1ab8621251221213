//! CUTLASS cute's statement of the sm_80 tensor-core fragment layouts, as
//! scripts/record-cute-layouts recorded it in tests/data/tensor_core/cute_layouts.txt: the
//! independent reference the emulator's layouts are checked against (tests/suite/emu_tensor_core.rs).

use std::collections::HashMap;

/// (row, col) pairs.
type Coords = Vec<(usize, usize)>;

const FILE: &str = "tests/data/tensor_core/cute_layouts.txt";

/// One mma atom: for each thread, each value's (row, col). A: (m, k) for its 8 16-bit values
/// (register v / 2, half v % 2); B: (n, k) for its 4; C: (m, n) for its 4 f32 registers.
pub struct MmaAtom {
    pub a: Vec<[(usize, usize); 8]>,
    pub b: Vec<[(usize, usize); 4]>,
    pub c: Vec<[(usize, usize); 4]>,
}

/// One ldmatrix copy atom, per 16-bit element: `src[t][e]` is the bit where element e of thread
/// t's 16-byte row lands, `dst[t][e]` the bit its register element e (register e / 2, half e % 2)
/// takes.
pub struct CopyAtom {
    pub src: Vec<Vec<usize>>,
    pub dst: Vec<Vec<usize>>,
}

impl CopyAtom {
    /// For each thread and destination element: (source thread, element of its row). Where cute
    /// lets several threads hold the same bits (x1 and x2 alias lanes 8.. or 16.. onto the
    /// first), the lowest thread is taken: the one whose address ldmatrix reads (PTX ISA).
    pub fn sources(&self) -> Vec<Vec<(usize, usize)>> {
        let mut by_bit: HashMap<usize, (usize, usize)> = HashMap::new();
        for (t, row) in self.src.iter().enumerate() {
            for (e, &bit) in row.iter().enumerate() {
                by_bit.entry(bit).or_insert((t, e));
            }
        }
        self.dst
            .iter()
            .enumerate()
            .map(|(t, elems)| {
                elems
                    .iter()
                    .map(|bit| {
                        *by_bit.get(bit).unwrap_or_else(|| {
                            panic!("{FILE}: dst thread {t} bit {bit} has no source")
                        })
                    })
                    .collect()
            })
            .collect()
    }
}

pub struct CuteLayouts {
    mma: HashMap<String, MmaAtom>,
    copy: HashMap<String, CopyAtom>,
}

impl CuteLayouts {
    pub fn load() -> CuteLayouts {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(FILE);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{FILE}: {e}"));
        let mut mma: HashMap<String, MmaAtom> = HashMap::new();
        let mut copy: HashMap<String, CopyAtom> = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            let num = |k: usize| -> usize {
                f.get(k)
                    .and_then(|s| s.parse().ok())
                    .unwrap_or_else(|| panic!("{FILE}:{}: bad line {line:?}", i + 1))
            };
            match (f[0], f.len()) {
                ("mma", 7) => {
                    let atom = mma.entry(f[1].to_string()).or_insert_with(|| MmaAtom {
                        a: vec![[(usize::MAX, 0); 8]; 32],
                        b: vec![[(usize::MAX, 0); 4]; 32],
                        c: vec![[(usize::MAX, 0); 4]; 32],
                    });
                    let (t, v, coord) = (num(3), num(4), (num(5), num(6)));
                    match f[2] {
                        "A" => atom.a[t][v] = coord,
                        "B" => atom.b[t][v] = coord,
                        "C" => atom.c[t][v] = coord,
                        _ => panic!("{FILE}:{}: bad operand {line:?}", i + 1),
                    }
                }
                ("ldsm", 6) => {
                    let atom = copy.entry(f[1].to_string()).or_insert_with(|| CopyAtom {
                        src: vec![Vec::new(); 32],
                        dst: vec![Vec::new(); 32],
                    });
                    let side = match f[2] {
                        "src" => &mut atom.src,
                        "dst" => &mut atom.dst,
                        _ => panic!("{FILE}:{}: bad side {line:?}", i + 1),
                    };
                    let (t, e, bit) = (num(3), num(4), num(5));
                    assert_eq!(side[t].len(), e, "{FILE}:{}: elements out of order", i + 1);
                    side[t].push(bit);
                }
                _ => panic!("{FILE}:{}: bad line {line:?}", i + 1),
            }
        }
        for (name, atom) in &mma {
            // Each operand's values cover its matrix once: A 16 x 16, B 8 x 16, C 16 x 8.
            let operands: [(&str, Coords, usize); 3] = [
                ("A", atom.a.iter().flatten().copied().collect(), 16),
                ("B", atom.b.iter().flatten().copied().collect(), 8),
                ("C", atom.c.iter().flatten().copied().collect(), 16),
            ];
            for (operand, mut coords, rows) in operands {
                coords.sort_unstable();
                let cols = coords.len() / rows;
                let whole: Coords = (0..rows)
                    .flat_map(|r| (0..cols).map(move |c| (r, c)))
                    .collect();
                assert_eq!(
                    coords, whole,
                    "{FILE}: {name} {operand} is not one value per element"
                );
            }
        }
        CuteLayouts { mma, copy }
    }

    pub fn mma(&self, op: &str) -> &MmaAtom {
        self.mma
            .get(op)
            .unwrap_or_else(|| panic!("{FILE} has no mma atom {op}"))
    }

    pub fn copy(&self, op: &str) -> &CopyAtom {
        self.copy
            .get(op)
            .unwrap_or_else(|| panic!("{FILE} has no copy atom {op}"))
    }
}
