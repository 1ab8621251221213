//! The prefill instances' router under Mooncake's Conductor: the choice is its caller's
//! ([`crate::sim::cluster::pd::conductor`]), made from what a router cannot see — each
//! instance's queued prefill tokens and step-time model, the KV link, the decode side — and
//! handed to [`crate::sim::cluster::ClusterCore::submit_to`]. `ClusterCore::submit` refuses a
//! cluster behind it, so `route` is not asked; were it, it would answer the least loaded.

use super::ties::Ties;
use super::{Arrival, Choice, Reason, Replicas, Router, RouterKind};

#[derive(Debug, Clone)]
pub struct Directed {
    ties: Ties,
}

impl Directed {
    pub fn new(seed: u64) -> Directed {
        Directed {
            ties: Ties::new(seed, 1),
        }
    }
}

impl Router for Directed {
    fn kind(&self) -> RouterKind {
        RouterKind::Conductor
    }

    fn route(&mut self, _a: &Arrival, _now: f64, replicas: &dyn Replicas) -> Choice {
        let (replica, load, tied) = super::least_loaded(&mut self.ties, replicas);
        Choice {
            replica,
            reason: Reason::LeastLoaded { load, tied },
        }
    }
}
