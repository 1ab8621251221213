//! The static report's reading of compiled code. build.rs runs [`analyse`] on what `cuobjdump`
//! prints for each module's sm_90 code and embeds the result (not the SASS) in the library; it
//! includes this module with `#[path]`, so it uses nothing beyond `std`. KERNELS.md, "Static
//! report", explains the method and its limits.

pub mod cadence;
pub mod control;
pub mod dataflow;
pub mod inflight;
pub mod listing;
pub mod loops;
pub mod memory;
pub mod nvinfo;
pub mod remainder;
pub mod resources;
pub mod tool;

use std::borrow::Cow;
use std::fmt::Write as _;

pub use inflight::WaitPoint;

/// The architecture analysed.
pub const ARCH: &str = "sm_90";

/// Whether code for `arch` is [`ARCH`]'s: sm_90, or sm_90a (the same SM with its
/// architecture-specific instructions, as FlashInfer and vLLM build Hopper kernels).
pub fn is_arch(arch: &str) -> bool {
    arch.strip_suffix('a').unwrap_or(arch) == ARCH
}

/// One innermost loop that loads from global memory, in its steady state (see [`inflight`]).
#[derive(Debug, Clone, PartialEq)]
pub struct LoopReport {
    /// Address of the first instruction of the body and of the backward branch closing it.
    pub head: u32,
    pub latch: u32,
    /// Loops around this one.
    pub depth: u32,
    /// The head of the unrolled loop this one is the remainder (or prologue) of ([`remainder`]).
    pub remainder_of: Option<u32>,
    /// The head of an earlier analysed loop at the same depth that this one is another version of:
    /// neither reaches the other ([`loops::Loop::reaches`]), so only one of them runs.
    pub version_of: Option<u32>,
    pub instructions: u32,
    /// Whether the loop's exit test depends on a kernel argument or on loaded data: a loop over
    /// the context does; a loop over a fixed range (q's elements, a prologue) does not
    /// ([`dataflow::depends_on_data`]).
    pub trip_from_data: bool,
    /// `LDG`/`LD` and `LDGSTS` instructions per iteration.
    pub global_loads: u32,
    pub async_copies: u32,
    /// Bytes one warp loads per iteration (on average, see [`cadence`]).
    pub load_bytes_per_warp: f64,
    /// The part of them that streams data, not indices ([`inflight::streams`]).
    pub stream_bytes_per_warp: f64,
    /// Warp instructions issued per iteration ([`inflight::issued`]).
    pub issued: f64,
    /// A part of the body runs once in this many iterations ([`cadence`]).
    pub refill_period: Option<u32>,
    /// Instructions that run on one iteration of the whole loop only, not in the steady state
    /// ([`cadence::Cadence::Once`]).
    pub once_per_loop: u32,
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
        if function.arch.as_deref().is_some_and(|a| !is_arch(a)) {
            continue;
        }
        function.instructions.sort_by_key(|i| i.address);
        let code = &function.instructions;
        let refs: Vec<&listing::Instruction> = code.iter().collect();
        let all = loops::find(code);
        let heads: Vec<u32> = all.iter().map(|l| l.head).collect();
        let mut loops: Vec<LoopReport> = Vec::new();
        let mut shapes: Vec<remainder::Shape> = Vec::new();
        let mut versions: Vec<&loops::Loop> = Vec::new();
        for l in all.iter().filter(|l| l.innermost) {
            let body = l.body(code);
            let steady = inflight::steady_state(&body);
            if steady.global_loads + steady.async_copies == 0 {
                continue;
            }
            versions.push(l);
            shapes.push(remainder::Shape::of(l.head, l.depth, &body));
            loops.push(LoopReport {
                head: l.head,
                latch: l.latch,
                depth: l.depth,
                remainder_of: None,
                version_of: versions
                    .iter()
                    .find(|o| {
                        o.head != l.head
                            && o.depth == l.depth
                            && !o.reaches.contains(&l.head)
                            && !l.reaches.contains(&o.head)
                    })
                    .map(|o| o.head),
                instructions: body.len() as u32,
                trip_from_data: trip_from_data(&refs, l),
                global_loads: steady.global_loads,
                async_copies: steady.async_copies,
                load_bytes_per_warp: steady.load_bytes,
                stream_bytes_per_warp: steady.stream_bytes,
                issued: steady.issued,
                refill_period: steady.refill_period,
                once_per_loop: steady.once_per_loop,
                round_trips: steady.round_trips,
                bytes_in_flight_per_warp: steady.bytes_in_flight,
                waits: Cow::Owned(steady.waits),
            });
        }
        for (l, of) in loops.iter_mut().zip(remainder::remainders(&shapes, &heads)) {
            l.remainder_of = of;
        }
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

/// Whether any test that leaves loop `l` depends on the kernel's arguments or loaded data: the
/// latch's predicate and those of branches out of the body. A loop whose exits test nothing
/// (or nothing found) counts as running over the data.
fn trip_from_data(code: &[&listing::Instruction], l: &loops::Loop) -> bool {
    let inside = |a: u32| (l.head..=l.latch).contains(&a);
    let exits: Vec<(usize, &str)> = code
        .iter()
        .enumerate()
        .filter(|(_, i)| inside(i.address))
        .filter(|(_, i)| {
            i.branch_target()
                .is_some_and(|t| i.address == l.latch || !inside(t))
        })
        .filter_map(|(at, i)| {
            let guard = i.guard.as_deref()?.trim_start_matches(['@', '!']);
            dataflow::register(guard).map(|p| (at, p))
        })
        .collect();
    exits.is_empty()
        || exits
            .iter()
            .any(|&(at, p)| dataflow::depends_on_data(code, at, p))
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
                 version_of: {:?}, instructions: {}, trip_from_data: {}, global_loads: {}, async_copies: {}, \
                 load_bytes_per_warp: {:?}, stream_bytes_per_warp: {:?}, issued: {:?}, \
                 refill_period: {:?}, once_per_loop: {}, round_trips: {:?}, bytes_in_flight_per_warp: {:?}, \
                 waits: {cow}(&[",
                l.head,
                l.latch,
                l.depth,
                l.remainder_of,
                l.version_of,
                l.instructions,
                l.trip_from_data,
                l.global_loads,
                l.async_copies,
                l.load_bytes_per_warp,
                l.stream_bytes_per_warp,
                l.issued,
                l.refill_period,
                l.once_per_loop,
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
    fn sm_90a_code_is_read_as_sm_90() {
        assert!(is_arch("sm_90") && is_arch("sm_90a"));
        assert!(!is_arch("sm_80") && !is_arch("sm_100a") && !is_arch("sm_9"));
    }
}
