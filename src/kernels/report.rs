//! The static report: for every kernel instance compiled for sm_90, its resources (ptxas), how
//! many CTAs and warps an H100/H200 SM holds, and the bytes of global loads in flight per SM in the
//! steady state of its main loops (from the SASS, [`super::sass`]). Method and limits: KERNELS.md,
//! "Static report".

use super::occupancy::{self, CtaShape, Limiter, SmLimits};
use super::sass::{KernelSass, LoopReport};
use super::{KernelResources, RESOURCES, SASS_ANALYSIS, SASS_KERNELS};
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

/// Where a kernel's threads per CTA came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadsFrom {
    LaunchBounds,
    Declared,
}

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
    /// Counted in the kernel's figure (see [`main_loops`]).
    pub main: bool,
    pub remainder_of: Option<u32>,
    pub instructions: u32,
    pub global_loads: u32,
    pub async_copies: u32,
    pub load_bytes_per_warp: u32,
    pub round_trips_per_iteration: f64,
    pub bytes_in_flight_per_warp: Option<f64>,
    pub bytes_in_flight_per_sm: Option<f64>,
    pub waits: Vec<WaitDetail>,
}

/// One kernel instance on sm_90.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StaticKernel {
    pub module: &'static str,
    pub kernel: &'static str,
    pub registers: u32,
    pub spill_bytes: u32,
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
    pub loops: Vec<LoopDetail>,
}

/// The main loops: innermost loops with global loads that are not the remainder (or prologue)
/// of an unrolled loop ([`super::sass::remainder`]), at the deepest nesting among those (a loop run
/// once per CTA before the main work, like loading q, sits outside the loop over the context).
pub fn main_loops(loops: &[LoopReport]) -> Vec<&LoopReport> {
    let candidates: Vec<&LoopReport> = loops.iter().filter(|l| l.remainder_of.is_none()).collect();
    let deepest = candidates.iter().map(|l| l.depth).max();
    candidates
        .into_iter()
        .filter(|l| Some(l.depth) == deepest)
        .collect()
}

fn by_prefix(table: &[(&str, u32)], kernel: &str) -> Option<u32> {
    table
        .iter()
        .find(|(prefix, _)| kernel.starts_with(prefix))
        .map(|&(_, v)| v)
}

fn kernel_report(
    sm: &SmLimits,
    sass: &'static KernelSass,
    resources: Option<&'static KernelResources>,
    dynamic: &[(&str, u32)],
) -> StaticKernel {
    kernel_report_with(sm, sass, resources, DECLARED_THREADS, dynamic)
}

/// [`kernel_report`] with a table of declared block sizes of its own (tests).
fn kernel_report_with(
    sm: &SmLimits,
    sass: &'static KernelSass,
    resources: Option<&'static KernelResources>,
    declared: &[(&str, u32)],
    dynamic: &[(&str, u32)],
) -> StaticKernel {
    let kernel: &'static str = &sass.kernel;
    let (threads_per_cta, threads_from) = match (sass.max_threads, by_prefix(declared, kernel)) {
        (Some(t), _) => (Some(t), Some(ThreadsFrom::LaunchBounds)),
        (None, Some(t)) => (Some(t), Some(ThreadsFrom::Declared)),
        (None, None) => (None, None),
    };
    let dynamic_shared_bytes = by_prefix(dynamic, kernel).unwrap_or(0);
    let occupancy = threads_per_cta.zip(resources).map(|(threads, r)| {
        occupancy::occupancy(
            sm,
            &CtaShape {
                threads,
                registers_per_thread: r.registers,
                static_shared_bytes: r.shared_bytes,
                dynamic_shared_bytes,
            },
        )
    });
    let warps = occupancy.map(|o| f64::from(o.warps_per_sm));
    let per_sm = |per_warp: Option<f64>| per_warp.zip(warps).map(|(b, w)| b * w);
    let main: Vec<u32> = main_loops(&sass.loops).iter().map(|l| l.head).collect();
    let loops: Vec<LoopDetail> = sass
        .loops
        .iter()
        .map(|l| LoopDetail {
            head: l.head,
            latch: l.latch,
            depth: l.depth,
            main: main.contains(&l.head),
            remainder_of: l.remainder_of,
            instructions: l.instructions,
            global_loads: l.global_loads,
            async_copies: l.async_copies,
            load_bytes_per_warp: l.load_bytes_per_warp,
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
    StaticKernel {
        module: &sass.module,
        kernel,
        registers: resources.map_or(0, |r| r.registers),
        spill_bytes: resources.map_or(0, |r| r.spill_stores + r.spill_loads),
        static_shared_bytes: resources.map_or(0, |r| r.shared_bytes),
        dynamic_shared_bytes,
        threads_per_cta,
        threads_from,
        ctas_per_sm: occupancy.map(|o| o.ctas_per_sm),
        warps_per_sm: occupancy.map(|o| o.warps_per_sm),
        limited_by: occupancy.map(|o| o.limited_by),
        bytes_in_flight_per_warp: weakest,
        bytes_in_flight_per_sm: per_sm(weakest),
        loops,
    }
}

/// The report of every kernel the build analysed, with `dynamic` shared memory per launch
/// (normally [`DYNAMIC_SHARED_BYTES`]). Empty when there was no analysis: [`availability`] says why.
pub fn report(dynamic: &[(&str, u32)]) -> Vec<StaticKernel> {
    SASS_KERNELS
        .iter()
        .map(|k| {
            let resources = RESOURCES.iter().find(|r| {
                r.arch == super::sass::ARCH && r.module == k.module && r.kernel == k.kernel
            });
            kernel_report(&occupancy::SM90, k, resources, dynamic)
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
            instructions: 16,
            global_loads: 1,
            async_copies: 0,
            load_bytes_per_warp: 512,
            round_trips: 1.0,
            bytes_in_flight_per_warp: Some(in_flight),
            waits: Cow::Owned(vec![WaitPoint {
                address: head + 0x80,
                outstanding_bytes: 512,
            }]),
        }
    }

    fn kernel(name: &str, max_threads: Option<u32>, loops: Vec<LoopReport>) -> &'static KernelSass {
        Box::leak(Box::new(KernelSass {
            module: Cow::Owned("m".into()),
            kernel: Cow::Owned(name.into()),
            max_threads,
            instructions: 100,
            loops: Cow::Owned(loops),
        }))
    }

    fn resources(registers: u32, shared_bytes: u32) -> &'static KernelResources {
        Box::leak(Box::new(KernelResources {
            module: "m",
            kernel: "k",
            arch: "sm_90",
            registers,
            spill_stores: 0,
            spill_loads: 0,
            shared_bytes,
            stack_bytes: 0,
        }))
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
    fn per_sm_is_the_weakest_main_loop_times_resident_warps() {
        let k = kernel(
            "paged_attention_x",
            Some(128),
            vec![
                looped(0x100, 0, None, 64.0),
                looped(0x300, 1, None, 1024.0),
                looped(0x700, 1, None, 768.0),
            ],
        );
        // 123 registers, 128 threads: 4 CTAs, 16 warps (occupancy's own test works this out).
        let r = kernel_report(&occupancy::SM90, k, Some(resources(123, 6192)), &[]);
        assert_eq!((r.ctas_per_sm, r.warps_per_sm), (Some(4), Some(16)));
        assert_eq!(r.bytes_in_flight_per_warp, Some(768.0));
        assert_eq!(r.bytes_in_flight_per_sm, Some(768.0 * 16.0));
        assert_eq!(r.loops.iter().filter(|l| l.main).count(), 2);
        assert_eq!(r.loops[1].bytes_in_flight_per_sm, Some(1024.0 * 16.0));
        assert_eq!(r.threads_from, Some(ThreadsFrom::LaunchBounds));
    }

    #[test]
    fn declared_threads_and_dynamic_shared_memory_come_from_the_tables() {
        let merge = kernel(
            "merge_partitions_f16_d128",
            None,
            vec![looped(0, 0, None, 512.0)],
        );
        let declared = [("merge_partitions_", 128)];
        let r = kernel_report_with(
            &occupancy::SM90,
            merge,
            Some(resources(32, 0)),
            &declared,
            &[],
        );
        assert_eq!(
            (r.threads_per_cta, r.threads_from),
            (Some(128), Some(ThreadsFrom::Declared))
        );
        assert_eq!(r.ctas_per_sm, Some(16));
        // 100 KiB of dynamic shared memory per launch leaves room for 2 CTAs.
        let dynamic = [("merge_partitions_", 100 * 1024)];
        let r = kernel_report_with(
            &occupancy::SM90,
            merge,
            Some(resources(32, 0)),
            &declared,
            &dynamic,
        );
        assert_eq!(
            (r.ctas_per_sm, r.dynamic_shared_bytes),
            (Some(2), 100 * 1024)
        );
        assert_eq!(r.bytes_in_flight_per_sm, Some(512.0 * 8.0));
        // Neither bounds nor a declared size: no occupancy, no per-SM figure.
        let unknown = kernel("mystery", None, vec![looped(0, 0, None, 512.0)]);
        let r = kernel_report(&occupancy::SM90, unknown, Some(resources(32, 0)), &[]);
        assert_eq!((r.ctas_per_sm, r.bytes_in_flight_per_sm), (None, None));
        assert_eq!(r.bytes_in_flight_per_warp, Some(512.0));
    }
}
