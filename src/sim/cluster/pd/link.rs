//! The KV link between a prefill and a decode instance: bytes = tokens × the model's KV bytes per
//! token (every layer, every KV head, at the KV cache's dtype) over the link's bandwidth.
//!
//! The rule for when a transfer ends, `start` being when the decode instance reserved the blocks
//! and `prefill_end` when the prefill instance sampled the first token:
//! - whole: after the prefill, `max(start, prefill_end) + bytes / bandwidth`;
//! - layerwise (Mooncake's layer-by-layer streaming, vLLM's NIXL connector reading as layers
//!   are saved): each layer's KV leaves as that layer is computed, so the transfer ends at
//!   `max(prefill_end + bytes / layers / bandwidth, start + bytes / bandwidth)`: the last layer's
//!   share after the prefill, or the whole volume from the start, whichever is later.
//!
//! Each transfer has its node's link to itself (transfers do not share bandwidth).

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum KvTransfer {
    /// Layer by layer while the prefill runs (Mooncake; vLLM's NIXL connector).
    Layerwise,
    /// The whole KV after the prefill.
    Whole,
}

crate::value_names::display_as_value_name!(KvTransfer);

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Link {
    pub gbps: f64,
    pub mode: KvTransfer,
    /// The model's KV bytes per token (all layers and heads).
    pub bytes_per_token: u64,
    pub layers: u32,
}

impl Link {
    pub fn bytes(&self, tokens: u32) -> u64 {
        u64::from(tokens) * self.bytes_per_token
    }

    /// Seconds `bytes` take over the link.
    pub fn seconds(&self, bytes: u64) -> f64 {
        bytes as f64 / (self.gbps * 1e9)
    }

    /// When a transfer of `bytes` whose blocks were reserved at `start` ends, its prefill having
    /// ended at `prefill_end` (see the module's rule).
    pub fn end(&self, start: f64, prefill_end: f64, bytes: u64) -> f64 {
        let whole = self.seconds(bytes);
        match self.mode {
            KvTransfer::Whole => start.max(prefill_end) + whole,
            KvTransfer::Layerwise => {
                (prefill_end + whole / f64::from(self.layers.max(1))).max(start + whole)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_ends_after_its_last_layer_or_its_volume() {
        // 1000 tokens of 100 KB over 10 GB/s: 0.01 s; 10 layers: 1 ms a layer.
        let mut l = Link {
            gbps: 10.0,
            mode: KvTransfer::Layerwise,
            bytes_per_token: 100_000,
            layers: 10,
        };
        let b = l.bytes(1000);
        assert_eq!(b, 100_000_000);
        assert!((l.seconds(b) - 0.01).abs() < 1e-15);
        // A long prefill hides all but the last layer.
        assert!((l.end(0.0, 1.0, b) - 1.001).abs() < 1e-12);
        // A short one leaves the link the bottleneck.
        assert!((l.end(0.0, 0.002, b) - 0.01).abs() < 1e-12);
        // Reserved late (the decode pool was full): the volume from then.
        assert!((l.end(2.0, 1.0, b) - 2.01).abs() < 1e-12);
        l.mode = KvTransfer::Whole;
        assert!((l.end(0.0, 1.0, b) - 1.01).abs() < 1e-12);
        assert!((l.end(2.0, 1.0, b) - 2.01).abs() < 1e-12);
    }
}
