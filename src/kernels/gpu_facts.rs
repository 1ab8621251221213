//! The figures of the GPU the static report measures kernels against (an H200), stated once: how
//! fast it streams memory and how many warp instructions it issues in that time. The SM's resource
//! limits are in [`super::occupancy::SM90`].

use super::occupancy::SM90;

/// One GPU's streaming and issue rates.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuFacts {
    pub name: &'static str,
    pub sms: u32,
    /// Warp schedulers per SM, each issuing at most one warp instruction per clock.
    pub schedulers_per_sm: u32,
    pub clock_hz: f64,
    /// The memory's peak bandwidth.
    pub stream_bytes_per_s: f64,
    /// DRAM latency under load (for Little's law).
    pub dram_latency_s: f64,
}

/// NVIDIA H200 SXM: 132 SMs (GH100 as in the H100 SXM5; `multiProcessorCount`), 4 warp
/// schedulers per SM (one per sub-partition: the Hopper architecture whitepaper, "H100 SM
/// architecture"), 1.98 GHz boost clock (the maximum graphics clock `nvidia-smi -q -d CLOCK`
/// reports), 4.8 TB/s of HBM3e (the H200 datasheet); ~700 ns DRAM latency under load (an
/// estimate, KERNELS.md "Why bytes in flight"; not measured here). Peak figures: a measured stream is lower (`pagedkv attention` measures it),
/// which leaves a kernel more issue slots per token than the budget here.
pub const H200: GpuFacts = GpuFacts {
    name: "H200",
    sms: 132,
    schedulers_per_sm: SM90.sub_partitions,
    clock_hz: 1.98e9,
    stream_bytes_per_s: 4.8e12,
    dram_latency_s: 700e-9,
};

impl GpuFacts {
    /// Warp instructions the whole GPU can issue per token streamed at its memory's peak, for a
    /// kernel that reads `bytes_per_token` per token: SMs x schedulers x clock / (bandwidth /
    /// bytes per token).
    pub fn issue_budget_per_token(&self, bytes_per_token: f64) -> f64 {
        let issue_per_s = f64::from(self.sms * self.schedulers_per_sm) * self.clock_hz;
        let tokens_per_s = self.stream_bytes_per_s / bytes_per_token;
        issue_per_s / tokens_per_s
    }

    /// Bytes in flight per SM that Little's law asks for the peak bandwidth: bandwidth x latency
    /// / SMs.
    pub fn bytes_in_flight_needed_per_sm(&self) -> f64 {
        self.stream_bytes_per_s * self.dram_latency_s / f64::from(self.sms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_of_one_kv_head_at_head_dim_128() {
        // f16 K and V rows of 128 elements: 512 bytes per token. 132 x 4 x 1.98e9 = 1.045e12
        // instructions per second over 4.8e12 / 512 = 9.375e9 tokens per second: 111.5.
        let f16 = H200.issue_budget_per_token(512.0);
        assert!((f16 - 111.51).abs() < 0.01, "{f16}");
        // fp8 rows are half as long: half the budget.
        assert!((H200.issue_budget_per_token(256.0) - f16 / 2.0).abs() < 1e-9);
        // 4.8e12 x 700e-9 / 132 = 25.5 kB per SM.
        let need = H200.bytes_in_flight_needed_per_sm();
        assert!((need - 25_454.5).abs() < 1.0, "{need}");
    }
}
