//! Least-loaded: the replica with the fewest requests in flight (sent, not yet seen to finish),
//! uniformly at random among equals (a router that broke ties by index would send every request
//! of a light load to replica 0).

use super::ties::Ties;
use super::{Arrival, Choice, Reason, Replicas, Router, RouterKind};

#[derive(Debug, Clone)]
pub struct LeastLoaded {
    ties: Ties,
}

impl LeastLoaded {
    pub fn new(seed: u64) -> LeastLoaded {
        LeastLoaded {
            ties: Ties::new(seed, 1),
        }
    }
}

impl Router for LeastLoaded {
    fn kind(&self) -> RouterKind {
        RouterKind::LeastLoaded
    }

    fn route(&mut self, _a: &Arrival, _now: f64, replicas: &dyn Replicas) -> Choice {
        let (replica, load, tied) = super::least_loaded(&mut self.ties, replicas);
        Choice {
            replica,
            reason: Reason::LeastLoaded { load, tied },
        }
    }
}
