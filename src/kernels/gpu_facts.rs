//! What the static report measures kernels against: an H200's streaming and issue rates
//! ([`crate::hw::H200`], where its figures are stated). The SM's resource limits are in
//! [`super::occupancy::SM90`].

pub use crate::hw::{Gpu as GpuFacts, H200};

/// Rates a kernel budget is measured against.
pub trait IssueBudget {
    /// Warp instructions the whole GPU can issue per token streamed at its memory's peak, for a
    /// kernel that reads `bytes_per_token` per token: SMs x schedulers x clock / (bandwidth /
    /// bytes per token).
    fn issue_budget_per_token(&self, bytes_per_token: f64) -> f64;
    /// Bytes in flight per SM that Little's law asks for the peak bandwidth: bandwidth x latency
    /// / SMs.
    fn bytes_in_flight_needed_per_sm(&self) -> f64;
    /// The memory's peak, bytes per second.
    fn stream_bytes_per_s(&self) -> f64;
}

impl IssueBudget for GpuFacts {
    fn issue_budget_per_token(&self, bytes_per_token: f64) -> f64 {
        let issue_per_s = f64::from(self.sms * self.schedulers_per_sm) * self.clock_hz;
        let tokens_per_s = self.stream_bytes_per_s() / bytes_per_token;
        issue_per_s / tokens_per_s
    }

    fn bytes_in_flight_needed_per_sm(&self) -> f64 {
        self.stream_bytes_per_s() * self.dram_latency_s / f64::from(self.sms)
    }

    fn stream_bytes_per_s(&self) -> f64 {
        self.hbm_gbps * 1e9
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_h200_issues_from_one_scheduler_per_sub_partition() {
        assert_eq!(
            H200.schedulers_per_sm,
            super::super::occupancy::SM90.sub_partitions
        );
    }

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
