//! The static report: for every kernel instance compiled for sm_90, its resources (ptxas), how
//! many CTAs and warps an H100/H200 SM holds, the bytes of global loads in flight per SM in the
//! steady state of its main loops, and the warp instructions it issues per token of one KV head
//! against what an H200 can issue per token at its memory's peak (from the SASS, [`super::sass`]).
//! [`super::foreign`] makes the same report of any compiled kernel. Method and limits:
//! KERNELS.md, "Static report".

use super::gpu_facts::{IssueBudget, H200};
use super::occupancy::{self, CtaShape, Limiter, SmLimits};
use super::sass::{KernelSass, LoopReport};
use super::token_bytes::attention_stream;
use super::{RESOURCES, SASS_ANALYSIS, SASS_KERNELS};
use serde::Serialize;

/// Threads per CTA of kernels without `__launch_bounds__`, by name prefix: what their launchers
/// pass. Every kernel states its own today (KERNELS.md asks it to).
pub const DECLARED_THREADS: &[(&str, u32)] = &[];

/// Dynamic shared memory per launch, by kernel name prefix; a kernel not listed gets 0. A launcher
/// that passes more than 0 (src/device/cuda/*.rs) adds its kernel here. The first matching prefix
/// counts: the tensor-core kernels come before the CUDA-core ones, whose prefix is theirs too.
pub const DYNAMIC_SHARED_BYTES: &[(&str, u32)] = &[
    ("paged_attention_tc_", super::ATTENTION_TC_SMEM_BYTES),
    ("contiguous_attention_tc_", super::ATTENTION_TC_SMEM_BYTES),
    ("paged_attention_", super::ATTENTION_SMEM_BYTES),
    ("contiguous_attention_", super::ATTENTION_SMEM_BYTES),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WaitDetail {
    pub address: u32,
    pub outstanding_bytes: u32,
}

/// One innermost loop with global loads.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoopDetail {
    pub head: u32,
    pub latch: u32,
    pub depth: u32,
    /// Counted in the kernel's figures (see [`main_loops`]).
    pub main: bool,
    pub remainder_of: Option<u32>,
    /// Another version of the loop at that head runs instead of this one (ptxas unswitched it).
    pub version_of: Option<u32>,
    /// Whether its exit test depends on the kernel's arguments or loaded data (false: a prologue
    /// over a fixed range, such as loading q).
    pub trip_from_data: bool,
    pub instructions: u32,
    /// Warp instructions issued per iteration (refills by their share of the iterations).
    pub issued_per_iteration: f64,
    pub global_loads: u32,
    pub async_copies: u32,
    pub load_bytes_per_warp: f64,
    /// The part of the loaded bytes that is the stream (not block-table or page indices).
    pub stream_bytes_per_warp: f64,
    /// Part of the body runs once in this many iterations.
    pub refill_period: Option<u32>,
    /// Instructions that run on one iteration of the whole loop only (not counted as issued).
    pub once_per_loop: u32,
    pub round_trips_per_iteration: f64,
    pub bytes_in_flight_per_warp: Option<f64>,
    pub bytes_in_flight_per_sm: Option<f64>,
    pub waits: Vec<WaitDetail>,
}

/// One kernel on sm_90.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StaticKernel {
    pub module: String,
    pub kernel: String,
    pub registers: u32,
    /// Bytes spilled (stores and loads, ptxas's report); `None` when not known (a kernel read
    /// from another build: see `local_bytes`).
    pub spill_bytes: Option<u32>,
    /// Local memory per thread (spills and local arrays), when read from cuobjdump's report.
    pub local_bytes: Option<u32>,
    pub static_shared_bytes: u32,
    pub dynamic_shared_bytes: u32,
    pub threads_per_cta: Option<u32>,
    pub threads_from: Option<ThreadsFrom>,
    pub ctas_per_sm: Option<u32>,
    pub warps_per_sm: Option<u32>,
    pub limited_by: Option<Limiter>,
    /// The weakest main loop's bytes in flight per warp, and times resident warps.
    pub bytes_in_flight_per_warp: Option<f64>,
    pub bytes_in_flight_per_sm: Option<f64>,
    /// Bytes one token of one KV head streams (its K and V rows), when known.
    pub bytes_per_token: Option<u32>,
    /// Warp instructions issued per token of one KV head in the main loops' steady state
    /// ([`issue_per_token`]).
    pub issue_per_token: Option<f64>,
    /// Warp instructions an H200 issues per token at its memory's peak
    /// ([`super::gpu_facts::GpuFacts::issue_budget_per_token`]).
    pub issue_budget_per_token: Option<f64>,
    pub loops: Vec<LoopDetail>,
}

/// Where a kernel's threads per CTA came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadsFrom {
    LaunchBounds,
    /// The launcher's block size, or for a foreign kernel the `--threads` option.
    Declared,
}

/// What the code does not say and the report needs: how a kernel is launched and what it streams.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LaunchFacts {
    /// Threads per CTA when the kernel has no `__launch_bounds__`.
    pub declared_threads: Option<u32>,
    pub dynamic_shared_bytes: u32,
    pub bytes_per_token: Option<u32>,
    /// How many times the kernel reads one KV head's K and V per token: the query heads sharing
    /// a KV head (the group) over the query heads one CTA serves per read. 1 for ours (one CTA
    /// serves the whole group); G for vLLM's paged attention at group G (one CTA per query head).
    pub reads_per_token: f64,
}

/// Resources of one kernel as ptxas (or cuobjdump) reports them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resources {
    pub registers: u32,
    pub spill_bytes: Option<u32>,
    pub local_bytes: Option<u32>,
    pub static_shared_bytes: u32,
}

/// The main loops: innermost loops with global loads that are not the remainder (or prologue)
/// of an unrolled loop ([`super::sass::remainder`]) nor a loop over a fixed range (loading q,
/// [`super::sass::dataflow::depends_on_data`]) when there are loops over the data, at the deepest
/// nesting among those (a loop run once per CTA before the main work sits outside the loop over
/// the context).
pub fn main_loops(loops: &[LoopReport]) -> Vec<&LoopReport> {
    let candidates: Vec<&LoopReport> = loops.iter().filter(|l| l.remainder_of.is_none()).collect();
    let over_data = candidates.iter().any(|l| l.trip_from_data);
    let candidates: Vec<&LoopReport> = candidates
        .into_iter()
        .filter(|l| l.trip_from_data || !over_data)
        .collect();
    let deepest = candidates.iter().map(|l| l.depth).max();
    candidates
        .into_iter()
        .filter(|l| Some(l.depth) == deepest)
        .collect()
}

/// Warp instructions issued per token of one KV head: the main loops' instructions per iteration,
/// summed, over the tokens one iteration of each streams (their stream bytes, summed, over the
/// bytes per token), times the reads of the KV head per token. Assumes every main loop runs as
/// many iterations (vLLM's K loop and V loop both walk every block once). Of several versions of
/// one loop only the costliest (instructions per stream byte) counts: one of them runs.
pub fn issue_per_token(
    main: &[&LoopReport],
    bytes_per_token: u32,
    reads_per_token: f64,
) -> Option<f64> {
    let cost = |l: &LoopReport| l.issued / l.stream_bytes_per_warp;
    let counted: Vec<&LoopReport> = main
        .iter()
        .filter(|l| l.version_of.is_none())
        .map(|&first| {
            main.iter()
                .copied()
                .filter(|l| l.head == first.head || l.version_of == Some(first.head))
                .max_by(|a, b| cost(a).total_cmp(&cost(b)))
                .unwrap_or(first)
        })
        .collect();
    let issued: f64 = counted.iter().map(|l| l.issued).sum();
    let stream: f64 = counted.iter().map(|l| l.stream_bytes_per_warp).sum();
    let tokens = stream / f64::from(bytes_per_token);
    (tokens > 0.0).then(|| issued / tokens * reads_per_token)
}

fn by_prefix(table: &[(&str, u32)], kernel: &str) -> Option<u32> {
    table
        .iter()
        .find(|(prefix, _)| kernel.starts_with(prefix))
        .map(|&(_, v)| v)
}

/// The report of one kernel from its analysed code, its resources and how it is launched.
pub fn kernel_report(
    sm: &SmLimits,
    sass: &KernelSass,
    resources: Option<Resources>,
    launch: &LaunchFacts,
) -> StaticKernel {
    let (threads_per_cta, threads_from) = match (sass.max_threads, launch.declared_threads) {
        (Some(t), _) => (Some(t), Some(ThreadsFrom::LaunchBounds)),
        (None, Some(t)) => (Some(t), Some(ThreadsFrom::Declared)),
        (None, None) => (None, None),
    };
    let dynamic_shared_bytes = launch.dynamic_shared_bytes;
    let occupancy = threads_per_cta.zip(resources).map(|(threads, r)| {
        occupancy::occupancy(
            sm,
            &CtaShape {
                threads,
                registers_per_thread: r.registers,
                static_shared_bytes: r.static_shared_bytes,
                dynamic_shared_bytes,
            },
        )
    });
    let warps = occupancy.map(|o| f64::from(o.warps_per_sm));
    let per_sm = |per_warp: Option<f64>| per_warp.zip(warps).map(|(b, w)| b * w);
    let main = main_loops(&sass.loops);
    let main_heads: Vec<u32> = main.iter().map(|l| l.head).collect();
    let loops: Vec<LoopDetail> = sass
        .loops
        .iter()
        .map(|l| LoopDetail {
            head: l.head,
            latch: l.latch,
            depth: l.depth,
            main: main_heads.contains(&l.head),
            remainder_of: l.remainder_of,
            version_of: l.version_of,
            trip_from_data: l.trip_from_data,
            instructions: l.instructions,
            issued_per_iteration: l.issued,
            global_loads: l.global_loads,
            async_copies: l.async_copies,
            load_bytes_per_warp: l.load_bytes_per_warp,
            stream_bytes_per_warp: l.stream_bytes_per_warp,
            refill_period: l.refill_period,
            once_per_loop: l.once_per_loop,
            round_trips_per_iteration: l.round_trips,
            bytes_in_flight_per_warp: l.bytes_in_flight_per_warp,
            bytes_in_flight_per_sm: per_sm(l.bytes_in_flight_per_warp),
            waits: l
                .waits
                .iter()
                .map(|w| WaitDetail {
                    address: w.address,
                    outstanding_bytes: w.outstanding_bytes,
                })
                .collect(),
        })
        .collect();
    let weakest = loops
        .iter()
        .filter(|l| l.main)
        .filter_map(|l| l.bytes_in_flight_per_warp)
        .min_by(f64::total_cmp);
    let bytes_per_token = launch.bytes_per_token;
    StaticKernel {
        module: sass.module.to_string(),
        kernel: sass.kernel.to_string(),
        registers: resources.map_or(0, |r| r.registers),
        spill_bytes: resources.and_then(|r| r.spill_bytes),
        local_bytes: resources.and_then(|r| r.local_bytes),
        static_shared_bytes: resources.map_or(0, |r| r.static_shared_bytes),
        dynamic_shared_bytes,
        threads_per_cta,
        threads_from,
        ctas_per_sm: occupancy.map(|o| o.ctas_per_sm),
        warps_per_sm: occupancy.map(|o| o.warps_per_sm),
        limited_by: occupancy.map(|o| o.limited_by),
        bytes_in_flight_per_warp: weakest,
        bytes_in_flight_per_sm: per_sm(weakest),
        bytes_per_token,
        issue_per_token: bytes_per_token
            .and_then(|b| issue_per_token(&main, b, launch.reads_per_token)),
        issue_budget_per_token: bytes_per_token.map(|b| H200.issue_budget_per_token(f64::from(b))),
        loops,
    }
}

/// How this build's kernel `kernel` is launched: the tables above, and its bytes per token from
/// its name (one CTA serves the whole GQA group: one read per token).
pub fn own_launch(kernel: &str, dynamic: &[(&str, u32)]) -> LaunchFacts {
    LaunchFacts {
        declared_threads: by_prefix(DECLARED_THREADS, kernel),
        dynamic_shared_bytes: by_prefix(dynamic, kernel).unwrap_or(0),
        bytes_per_token: attention_stream(kernel).map(|s| s.bytes_per_token()),
        reads_per_token: 1.0,
    }
}

/// The report of every kernel the build analysed, with `dynamic` shared memory per launch
/// (normally [`DYNAMIC_SHARED_BYTES`]). Empty when there was no analysis: [`availability`] says why.
pub fn report(dynamic: &[(&str, u32)]) -> Vec<StaticKernel> {
    SASS_KERNELS
        .iter()
        .map(|k| {
            let resources = RESOURCES
                .iter()
                .find(|r| {
                    r.arch == super::sass::ARCH && r.module == k.module && r.kernel == k.kernel
                })
                .map(|r| Resources {
                    registers: r.registers,
                    spill_bytes: Some(r.spill_stores + r.spill_loads),
                    local_bytes: None,
                    static_shared_bytes: r.shared_bytes,
                });
            kernel_report(
                &occupancy::SM90,
                k,
                resources,
                &own_launch(&k.kernel, dynamic),
            )
        })
        .collect()
}

/// The tool that made the analysis, or why there is none.
pub fn availability() -> Result<&'static str, &'static str> {
    SASS_ANALYSIS
}

/// The report's entry for `kernel`.
pub fn find<'a>(report: &'a [StaticKernel], kernel: &str) -> Option<&'a StaticKernel> {
    report.iter().find(|k| k.kernel == kernel)
}

/// This build's kernel `kernel` as launched (its figures: issue per token and its budget, bytes in
/// flight per SM, spills); `None` when it was not analysed (no nvcc or no cuobjdump at build time:
/// [`availability`] says which).
pub fn kernel(kernel: &str) -> Option<StaticKernel> {
    SASS_KERNELS.iter().find(|k| k.kernel == kernel)?;
    report(DYNAMIC_SHARED_BYTES)
        .into_iter()
        .find(|k| k.kernel == kernel)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::sass::WaitPoint;
    use std::borrow::Cow;

    fn looped(head: u32, depth: u32, remainder_of: Option<u32>, in_flight: f64) -> LoopReport {
        LoopReport {
            head,
            latch: head + 0x100,
            depth,
            remainder_of,
            version_of: None,
            instructions: 16,
            trip_from_data: true,
            global_loads: 1,
            async_copies: 0,
            load_bytes_per_warp: 512.0,
            stream_bytes_per_warp: 512.0,
            issued: 16.0,
            refill_period: None,
            once_per_loop: 0,
            round_trips: 1.0,
            bytes_in_flight_per_warp: Some(in_flight),
            waits: Cow::Owned(vec![WaitPoint {
                address: head + 0x80,
                outstanding_bytes: 512,
            }]),
        }
    }

    fn kernel(name: &str, max_threads: Option<u32>, loops: Vec<LoopReport>) -> KernelSass {
        KernelSass {
            module: Cow::Owned("m".into()),
            kernel: Cow::Owned(name.into()),
            max_threads,
            instructions: 100,
            loops: Cow::Owned(loops),
        }
    }

    fn resources(registers: u32, shared_bytes: u32) -> Option<Resources> {
        Some(Resources {
            registers,
            spill_bytes: Some(0),
            local_bytes: None,
            static_shared_bytes: shared_bytes,
        })
    }

    fn launch(declared: Option<u32>, dynamic: u32) -> LaunchFacts {
        LaunchFacts {
            declared_threads: declared,
            dynamic_shared_bytes: dynamic,
            bytes_per_token: None,
            reads_per_token: 1.0,
        }
    }

    #[test]
    fn main_loops_skip_remainders_and_prologues() {
        let loops = [
            looped(0x100, 0, None, 64.0), // a prologue (q), outside the context loop
            looped(0x300, 1, None, 1024.0), // K
            looped(0x500, 1, Some(0x700), 96.0), // V's remainder
            looped(0x700, 1, None, 768.0), // V
        ];
        let heads: Vec<u32> = main_loops(&loops).iter().map(|l| l.head).collect();
        assert_eq!(heads, vec![0x300, 0x700]);
        let flat = [
            looped(0, 0, Some(0x200), 512.0),
            looped(0x200, 0, None, 2048.0),
        ];
        assert_eq!(main_loops(&flat).len(), 1);
    }

    #[test]
    fn a_loop_over_a_fixed_range_beside_the_context_loop_is_not_main() {
        // vLLM's q load: a loop at the context loop's depth whose exit test is a constant.
        let mut q = looped(0x100, 0, None, 512.0);
        q.trip_from_data = false;
        let loops = [q.clone(), looped(0x300, 0, None, 2048.0)];
        let heads: Vec<u32> = main_loops(&loops).iter().map(|l| l.head).collect();
        assert_eq!(heads, vec![0x300]);
        // Alone, it is all there is to report.
        assert_eq!(main_loops(&[q]).len(), 1);
    }

    #[test]
    fn issue_per_token_sums_the_main_loops_over_their_tokens() {
        // One loop of 717 instructions streaming 4096 bytes (plus 128 of table words, not the
        // stream) per iteration, 512 bytes per token: 8 tokens, 89.6 per token.
        let mut l = looped(0x2200, 0, None, 12672.0);
        (l.issued, l.load_bytes_per_warp, l.stream_bytes_per_warp) = (717.0, 4224.0, 4096.0);
        assert_eq!(issue_per_token(&[&l], 512, 1.0), Some(717.0 / 8.0));
        // K and V in two loops of one block each: 16 tokens of 512 bytes per pair of iterations.
        let (mut k, mut v) = (looped(0, 0, None, 1.0), looped(0x400, 0, None, 1.0));
        (k.issued, k.stream_bytes_per_warp) = (300.0, 4096.0);
        (v.issued, v.stream_bytes_per_warp) = (200.0, 4096.0);
        assert_eq!(issue_per_token(&[&k, &v], 512, 1.0), Some(500.0 / 16.0));
        // Read once per query head at group 4: four times the cost of one KV head's token.
        assert_eq!(
            issue_per_token(&[&k, &v], 512, 4.0),
            Some(4.0 * 500.0 / 16.0)
        );
        // Two versions of the K loop (unswitched), one runs: the costlier counts, not both.
        let mut k2 = looped(0x200, 0, None, 1.0);
        (k2.issued, k2.stream_bytes_per_warp, k2.version_of) = (320.0, 4096.0, Some(0));
        assert_eq!(
            issue_per_token(&[&k, &k2, &v], 512, 1.0),
            Some(520.0 / 16.0)
        );
        let mut none = l.clone();
        none.stream_bytes_per_warp = 0.0;
        assert_eq!(issue_per_token(&[&none], 512, 1.0), None);
    }

    #[test]
    fn per_sm_is_the_weakest_main_loop_times_resident_warps() {
        let k = kernel(
            "paged_attention_f16_d128_g4",
            Some(128),
            vec![
                looped(0x100, 0, None, 64.0),
                looped(0x300, 1, None, 1024.0),
                looped(0x700, 1, None, 768.0),
            ],
        );
        // 123 registers, 128 threads: 4 CTAs, 16 warps (occupancy's own test works this out).
        let own = own_launch("paged_attention_f16_d128_g4", &[]);
        let r = kernel_report(&occupancy::SM90, &k, resources(123, 6192), &own);
        assert_eq!((r.ctas_per_sm, r.warps_per_sm), (Some(4), Some(16)));
        assert_eq!(r.bytes_in_flight_per_warp, Some(768.0));
        assert_eq!(r.bytes_in_flight_per_sm, Some(768.0 * 16.0));
        assert_eq!(r.loops.iter().filter(|l| l.main).count(), 2);
        assert_eq!(r.loops[1].bytes_in_flight_per_sm, Some(1024.0 * 16.0));
        assert_eq!(r.threads_from, Some(ThreadsFrom::LaunchBounds));
        // The name gives 512 bytes per token; two main loops of 16 instructions and 512 stream
        // bytes each: 32 instructions per 2 tokens.
        assert_eq!(r.bytes_per_token, Some(512));
        assert_eq!(r.issue_per_token, Some(16.0));
        assert_eq!(
            r.issue_budget_per_token,
            Some(H200.issue_budget_per_token(512.0))
        );
    }

    #[test]
    fn declared_threads_and_dynamic_shared_memory_come_from_the_launch() {
        let merge = kernel(
            "merge_partitions_f16_d128",
            None,
            vec![looped(0, 0, None, 512.0)],
        );
        let r = kernel_report(
            &occupancy::SM90,
            &merge,
            resources(32, 0),
            &launch(Some(128), 0),
        );
        assert_eq!(
            (r.threads_per_cta, r.threads_from),
            (Some(128), Some(ThreadsFrom::Declared))
        );
        assert_eq!(r.ctas_per_sm, Some(16));
        assert_eq!((r.bytes_per_token, r.issue_per_token), (None, None));
        // 100 KiB of dynamic shared memory per launch leaves room for 2 CTAs.
        let r = kernel_report(
            &occupancy::SM90,
            &merge,
            resources(32, 0),
            &launch(Some(128), 100 * 1024),
        );
        assert_eq!(
            (r.ctas_per_sm, r.dynamic_shared_bytes),
            (Some(2), 100 * 1024)
        );
        assert_eq!(r.bytes_in_flight_per_sm, Some(512.0 * 8.0));
        // Neither bounds nor a declared size: no occupancy, no per-SM figure.
        let unknown = kernel("mystery", None, vec![looped(0, 0, None, 512.0)]);
        let r = kernel_report(
            &occupancy::SM90,
            &unknown,
            resources(32, 0),
            &launch(None, 0),
        );
        assert_eq!((r.ctas_per_sm, r.bytes_in_flight_per_sm), (None, None));
        assert_eq!(r.bytes_in_flight_per_warp, Some(512.0));
        // The tables by name prefix, for this build's kernels.
        let own = own_launch("paged_attention_bf16_d64_g2", DYNAMIC_SHARED_BYTES);
        assert_eq!(own.dynamic_shared_bytes, super::super::ATTENTION_SMEM_BYTES);
        assert_eq!(own.bytes_per_token, Some(256));
        assert_eq!(
            own_launch("stream_read", DYNAMIC_SHARED_BYTES).dynamic_shared_bytes,
            0
        );
    }
}
