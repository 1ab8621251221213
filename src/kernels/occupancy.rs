//! Resident CTAs and warps per SM from a kernel's resources, as the CUDA occupancy calculator
//! computes them (`cuda_occupancy.h` of the pinned CUDA 13.0 runtime,
//! `.cuda/nvidia/cu13/include/cuda_occupancy.h`: `cudaOccMaxBlocksPerSMRegsLimit`,
//! `cudaOccMaxBlocksPerSMSmemLimit`), with the sm_90 limits of the CUDA Programming Guide's
//! compute-capability table (docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/
//! compute-capabilities.html) and the Hopper tuning guide (228 KiB of shared memory per SM, up
//! to 227 KiB per CTA).

use serde::Serialize;

/// One SM's limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SmLimits {
    pub registers: u32,
    /// Registers are allocated per warp in units of this many (so per thread in units of 8).
    pub register_unit_per_warp: u32,
    /// The register file is split evenly between this many schedulers; a warp's registers come
    /// from one of them.
    pub sub_partitions: u32,
    pub max_registers_per_thread: u32,
    pub max_warps: u32,
    pub max_ctas: u32,
    pub shared_bytes: u32,
    pub max_shared_bytes_per_cta: u32,
    /// Shared memory the system reserves for each resident CTA.
    pub reserved_shared_bytes_per_cta: u32,
    pub shared_unit: u32,
}

/// H100 and H200 (compute capability 9.0), with the largest shared-memory carveout.
pub const SM90: SmLimits = SmLimits {
    registers: 65_536,
    register_unit_per_warp: 256,
    sub_partitions: 4,
    max_registers_per_thread: 255,
    max_warps: 64,
    max_ctas: 32,
    shared_bytes: 228 * 1024,
    max_shared_bytes_per_cta: 227 * 1024,
    reserved_shared_bytes_per_cta: 1024,
    shared_unit: 128,
};

/// What one CTA of a kernel takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CtaShape {
    pub threads: u32,
    pub registers_per_thread: u32,
    pub static_shared_bytes: u32,
    pub dynamic_shared_bytes: u32,
}

/// The resource that stops one more CTA from fitting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limiter {
    Ctas,
    Warps,
    Registers,
    SharedMemory,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Occupancy {
    pub ctas_per_sm: u32,
    pub warps_per_sm: u32,
    pub limited_by: Limiter,
}

fn round_up(x: u32, unit: u32) -> u32 {
    x.div_ceil(unit) * unit
}

/// Resident CTAs and warps per SM; 0 CTAs when one CTA does not fit at all.
pub fn occupancy(sm: &SmLimits, cta: &CtaShape) -> Occupancy {
    let warps_per_cta = cta.threads.div_ceil(32).max(1);
    let by_warps = sm.max_warps / warps_per_cta;

    let by_registers = if cta.registers_per_thread == 0 {
        u32::MAX
    } else {
        let per_warp = round_up(cta.registers_per_thread * 32, sm.register_unit_per_warp);
        // The launch check rounds the CTA's warps up to whole sub-partitions.
        let fits = cta.registers_per_thread <= sm.max_registers_per_thread
            && per_warp * round_up(warps_per_cta, sm.sub_partitions) <= sm.registers;
        let warps_per_sub_partition = sm.registers / sm.sub_partitions / per_warp;
        if fits {
            warps_per_sub_partition * sm.sub_partitions / warps_per_cta
        } else {
            0
        }
    };

    let shared = cta
        .static_shared_bytes
        .saturating_add(cta.dynamic_shared_bytes);
    let by_shared = if shared > sm.max_shared_bytes_per_cta {
        0
    } else {
        sm.shared_bytes / round_up(shared + sm.reserved_shared_bytes_per_cta, sm.shared_unit)
    };

    let limits = [
        (sm.max_ctas, Limiter::Ctas),
        (by_warps, Limiter::Warps),
        (by_registers, Limiter::Registers),
        (by_shared, Limiter::SharedMemory),
    ];
    let (ctas_per_sm, limited_by) = limits
        .into_iter()
        .min_by_key(|&(n, _)| n)
        .expect("four limits");
    Occupancy {
        ctas_per_sm,
        warps_per_sm: ctas_per_sm * warps_per_cta,
        limited_by,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cta(threads: u32, regs: u32, smem: u32) -> CtaShape {
        CtaShape {
            threads,
            registers_per_thread: regs,
            static_shared_bytes: smem,
            dynamic_shared_bytes: 0,
        }
    }

    /// Worked by hand from the limits: 32 x 128-thread CTAs would be 128 warps.
    #[test]
    fn warps_cap_small_kernels() {
        let o = occupancy(&SM90, &cta(128, 32, 0));
        assert_eq!(
            (o.ctas_per_sm, o.warps_per_sm, o.limited_by),
            (16, 64, Limiter::Warps)
        );
        let o = occupancy(&SM90, &cta(32, 16, 0));
        assert_eq!((o.ctas_per_sm, o.limited_by), (32, Limiter::Ctas));
    }

    #[test]
    fn registers_round_to_eight_per_thread_and_split_by_sub_partition() {
        // 123 registers -> 128 per thread = 4096 per warp; 16384 / 4096 = 4 warps per
        // sub-partition, 16 per SM: 4 CTAs of 4 warps.
        let o = occupancy(&SM90, &cta(128, 123, 0));
        assert_eq!(
            (o.ctas_per_sm, o.warps_per_sm, o.limited_by),
            (4, 16, Limiter::Registers)
        );
        // 93 -> 96: 3072 per warp, 5 per sub-partition (not 65536 / 3072 = 21 per SM): 20 warps.
        let o = occupancy(&SM90, &cta(128, 93, 0));
        assert_eq!((o.ctas_per_sm, o.warps_per_sm), (5, 20));
        // 256 threads at 64 registers: 2048 per warp, 8 per sub-partition, 32 warps, 4 CTAs.
        assert_eq!(occupancy(&SM90, &cta(256, 64, 0)).ctas_per_sm, 4);
        assert_eq!(occupancy(&SM90, &cta(128, 256, 0)).ctas_per_sm, 0);
    }

    #[test]
    fn shared_memory_counts_the_reserved_kilobyte() {
        // 27 KiB + 1 KiB reserved = 28 KiB per CTA: 228 / 28 = 8.
        let o = occupancy(&SM90, &cta(128, 32, 27 * 1024));
        assert_eq!((o.ctas_per_sm, o.limited_by), (8, Limiter::SharedMemory));
        // Dynamic shared memory adds to the static.
        let with_dynamic = CtaShape {
            dynamic_shared_bytes: 29 * 1024,
            ..cta(128, 32, 27 * 1024)
        };
        assert_eq!(occupancy(&SM90, &with_dynamic).ctas_per_sm, 4);
        assert_eq!(occupancy(&SM90, &cta(128, 32, 227 * 1024)).ctas_per_sm, 1);
        assert_eq!(
            occupancy(&SM90, &cta(128, 32, 227 * 1024 + 1)).ctas_per_sm,
            0
        );
    }
}
