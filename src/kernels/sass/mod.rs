//! The static report's reading of compiled code. build.rs runs [`analyse`] on what `cuobjdump`
//! prints for each module's sm_90 code and embeds the result (not the SASS) in the library; it
//! includes this module with `#[path]`, so it uses nothing beyond `std`. KERNELS.md, "Static
//! report", explains the method and its limits.

pub mod control;
pub mod inflight;
pub mod listing;
pub mod loops;
pub mod memory;
pub mod nvinfo;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;

pub use inflight::WaitPoint;

/// The architecture analysed.
pub const ARCH: &str = "sm_90";

/// One innermost loop that loads from global memory, in its steady state (see [`inflight`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LoopReport {
    /// Address of the first instruction of the body and of the backward branch closing it.
    pub head: u32,
    pub latch: u32,
    /// Loops around this one.
    pub depth: u32,
    /// The head of a loop at the same depth whose loads are a whole multiple (2 or more times)
    /// of this one's: this loop is then the remainder of that loop unrolled, or its prologue.
    pub remainder_of: Option<u32>,
    pub instructions: u32,
    /// `LDG`/`LD` and `LDGSTS` instructions per iteration.
    pub global_loads: u32,
    pub async_copies: u32,
    /// Bytes one warp loads per iteration.
    pub load_bytes_per_warp: u32,
    /// Memory round trips per iteration (iteration time in load latencies).
    pub round_trips: f64,
    /// Bytes one warp keeps in flight; `None` when the loop never waits for its loads.
    pub bytes_in_flight_per_warp: Option<f64>,
    /// Where the steady-state iteration stalls, with the bytes outstanding there.
    pub waits: Cow<'static, [WaitPoint]>,
}

/// What the compiled code of one kernel says, on [`ARCH`].
#[derive(Debug, Clone, PartialEq)]
pub struct KernelSass {
    pub module: Cow<'static, str>,
    pub kernel: Cow<'static, str>,
    /// `__launch_bounds__`' maximum threads per CTA, when the kernel declares one.
    pub max_threads: Option<u32>,
    pub instructions: u32,
    /// Innermost loops with global loads, by address.
    pub loops: Cow<'static, [LoopReport]>,
}

/// Every kernel of one module: `sass` is `cuobjdump -sass` output, `elf` is `cuobjdump -elf`
/// output (for the launch bounds). Functions compiled for another architecture are skipped.
pub fn analyse(
    module: &str,
    sass: &str,
    elf: &str,
) -> Result<Vec<KernelSass>, listing::ListingError> {
    let bounds = nvinfo::max_threads(elf);
    let mut kernels = Vec::new();
    for mut function in listing::parse(sass)? {
        if function.arch.as_deref().is_some_and(|a| a != ARCH) {
            continue;
        }
        function.instructions.sort_by_key(|i| i.address);
        let code = &function.instructions;
        let mut loops: Vec<(LoopReport, BTreeMap<&str, u32>)> = Vec::new();
        for l in loops::find(code).into_iter().filter(|l| l.innermost) {
            let body = l.body(code);
            let steady = inflight::steady_state(&body);
            if steady.global_loads + steady.async_copies == 0 {
                continue;
            }
            let mut loads: BTreeMap<&str, u32> = BTreeMap::new();
            for ins in body.iter().filter(|i| !i.never_executes()) {
                if let memory::MemoryOp::GlobalLoad { .. } | memory::MemoryOp::AsyncCopy { .. } =
                    memory::classify(ins)
                {
                    *loads.entry(ins.opcode.as_str()).or_default() += 1;
                }
            }
            let report = LoopReport {
                head: l.head,
                latch: l.latch,
                depth: l.depth,
                remainder_of: None,
                instructions: body.len() as u32,
                global_loads: steady.global_loads,
                async_copies: steady.async_copies,
                load_bytes_per_warp: steady.load_bytes,
                round_trips: steady.round_trips,
                bytes_in_flight_per_warp: steady.bytes_in_flight,
                waits: Cow::Owned(steady.waits),
            };
            loops.push((report, loads));
        }
        let remainders: Vec<Option<u32>> = loops
            .iter()
            .map(|(l, loads)| {
                loops
                    .iter()
                    .find(|(m, m_loads)| m.depth == l.depth && is_multiple(m_loads, loads))
                    .map(|(m, _)| m.head)
            })
            .collect();
        let loops: Vec<LoopReport> = loops
            .into_iter()
            .zip(remainders)
            .map(|((l, _), remainder_of)| LoopReport { remainder_of, ..l })
            .collect();
        kernels.push(KernelSass {
            module: Cow::Owned(module.to_string()),
            max_threads: bounds.get(&function.name).copied(),
            kernel: Cow::Owned(function.name),
            instructions: code.len() as u32,
            loops: Cow::Owned(loops),
        });
    }
    kernels.sort_by(|a, b| a.kernel.cmp(&b.kernel));
    Ok(kernels)
}

/// Whether `big` holds every load of `small` the same whole number of times, at least twice.
fn is_multiple(big: &BTreeMap<&str, u32>, small: &BTreeMap<&str, u32>) -> bool {
    let Some((op, &n)) = small.iter().next() else {
        return false;
    };
    let k = big.get(op).copied().unwrap_or(0) / n;
    k >= 2 && big.len() == small.len() && small.iter().all(|(op, &c)| big.get(op) == Some(&(c * k)))
}

impl KernelSass {
    /// This report as a Rust constant expression, for build.rs to embed; `sass` is the path of
    /// this module where the expression is compiled.
    pub fn to_rust(&self, sass: &str) -> String {
        let mut s = String::new();
        let cow = "::std::borrow::Cow::Borrowed";
        write!(
            s,
            "{sass}::KernelSass {{ module: {cow}({:?}), kernel: {cow}({:?}), max_threads: {:?}, \
             instructions: {}, loops: {cow}(&[",
            self.module, self.kernel, self.max_threads, self.instructions
        )
        .unwrap();
        for l in self.loops.iter() {
            write!(
                s,
                "{sass}::LoopReport {{ head: {}, latch: {}, depth: {}, remainder_of: {:?}, \
                 instructions: {}, global_loads: {}, async_copies: {}, load_bytes_per_warp: {}, round_trips: {:?}, \
                 bytes_in_flight_per_warp: {:?}, waits: {cow}(&[",
                l.head,
                l.latch,
                l.depth,
                l.remainder_of,
                l.instructions,
                l.global_loads,
                l.async_copies,
                l.load_bytes_per_warp,
                l.round_trips,
                l.bytes_in_flight_per_warp
            )
            .unwrap();
            for w in l.waits.iter() {
                write!(
                    s,
                    "{sass}::WaitPoint {{ address: {}, outstanding_bytes: {} }}, ",
                    w.address, w.outstanding_bytes
                )
                .unwrap();
            }
            s.push_str("]) }, ");
        }
        s.push_str("]) }");
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_remainder_holds_the_same_loads_a_whole_number_of_times_fewer() {
        let map = |pairs: &[(&'static str, u32)]| pairs.iter().copied().collect::<BTreeMap<_, _>>();
        let unrolled = map(&[("LDG.E.128", 8), ("LDG.E", 4)]);
        assert!(is_multiple(
            &unrolled,
            &map(&[("LDG.E.128", 2), ("LDG.E", 1)])
        ));
        assert!(is_multiple(
            &unrolled,
            &map(&[("LDG.E.128", 4), ("LDG.E", 2)])
        ));
        assert!(!is_multiple(&unrolled, &unrolled), "not itself");
        assert!(
            !is_multiple(&unrolled, &map(&[("LDG.E.128", 2)])),
            "not a different mix"
        );
        assert!(!is_multiple(
            &unrolled,
            &map(&[("LDG.E.128", 3), ("LDG.E", 1)])
        ));
        assert!(!is_multiple(&unrolled, &map(&[])));
    }
}
