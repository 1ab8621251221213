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
//! Sharing ([`LinkSharing`]): by default each transfer has its nodes' links to itself; with
//! `fifo` a node's NIC carries one transfer at a time at the full bandwidth, in the order the
//! transfers' ends are set ([`Nics`]).

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

/// Whether transfers share their nodes' NICs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum LinkSharing {
    /// Each transfer has the whole bandwidth of its nodes' links, however many run at once.
    #[default]
    Own,
    /// A node's NIC sends (prefill side) or receives (decode side) one transfer at a time.
    Fifo,
}

crate::value_names::display_as_value_name!(LinkSharing);

impl LinkSharing {
    pub fn is_own(&self) -> bool {
        *self == LinkSharing::Own
    }
}

/// The nodes' NICs under [`LinkSharing::Fifo`]: when each prefill node's and each decode node's
/// is next free. A transfer begins once it may (its reservation; whole: its prefill's end too)
/// and both its NICs are free, and holds them for its volume at the full bandwidth (whole: to
/// its end; layerwise: `bytes / bandwidth` from its beginning — a last layer that waits for the
/// prefill leaves the NIC to others meanwhile).
#[derive(Debug, Clone, PartialEq)]
pub struct Nics {
    send: Vec<f64>,
    receive: Vec<f64>,
}

impl Nics {
    pub fn new(prefill_nodes: usize, decode_nodes: usize) -> Nics {
        Nics {
            send: vec![f64::NEG_INFINITY; prefill_nodes],
            receive: vec![f64::NEG_INFINITY; decode_nodes],
        }
    }

    /// The end of a transfer of `bytes` from prefill node `p` to decode node `d`, reserved at
    /// `start`, its prefill ended at `prefill_end`; books the NICs.
    pub fn transfer(
        &mut self,
        link: &Link,
        (p, d): (usize, usize),
        start: f64,
        prefill_end: f64,
        bytes: u64,
    ) -> f64 {
        let free = self.send[p].max(self.receive[d]);
        let begin = match link.mode {
            KvTransfer::Whole => start.max(prefill_end).max(free),
            KvTransfer::Layerwise => start.max(free),
        };
        let end = link.end(begin, prefill_end, bytes);
        let busy = match link.mode {
            KvTransfer::Whole => end,
            KvTransfer::Layerwise => begin + link.seconds(bytes),
        };
        self.send[p] = busy;
        self.receive[d] = busy;
        end
    }
}

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

    #[test]
    fn fifo_nics_carry_one_transfer_at_a_time() {
        // 10 ms a transfer (100 MB over 10 GB/s), 1 ms a layer.
        let mut l = Link {
            gbps: 10.0,
            mode: KvTransfer::Whole,
            bytes_per_token: 100_000,
            layers: 10,
        };
        let b = l.bytes(1000);
        let near = |x: f64, y: f64| (x - y).abs() < 1e-12;
        let mut n = Nics::new(2, 2);
        // Whole: two prefills of node 0 ending at 1.0 s go one after the other; node 1 to
        // decode 1 runs beside them; node 1 to decode 0 waits for decode 0's NIC.
        assert!(near(n.transfer(&l, (0, 0), 0.0, 1.0, b), 1.01));
        assert!(near(n.transfer(&l, (0, 1), 0.0, 1.0, b), 1.02));
        assert!(near(n.transfer(&l, (1, 1), 0.5, 0.9, b), 1.03));
        assert!(near(n.transfer(&l, (1, 0), 0.0, 0.0, b), 1.04));
        // Layerwise: from the reservation on; the NIC is held for the volume only.
        l.mode = KvTransfer::Layerwise;
        let mut n = Nics::new(1, 2);
        // Streams 0 to 0.01 but ends after its prefill's last layer, at 1.001.
        assert!(near(n.transfer(&l, (0, 0), 0.0, 1.0, b), 1.001));
        // The NIC is free again at 0.01: the next, reserved at 0, begins then.
        assert!(near(n.transfer(&l, (0, 1), 0.0, 0.005, b), 0.02));
        // Own links would have ended it at 0.01.
        assert!(near(l.end(0.0, 0.005, b), 0.01));
    }
}
