//! Round-robin: the k-th request to replica k mod N, whatever their loads.

use super::{Arrival, Choice, Reason, Replicas, Router, RouterKind};

#[derive(Debug, Clone)]
pub struct RoundRobin {
    replicas: usize,
    sent: usize,
}

impl RoundRobin {
    pub fn new(replicas: usize) -> RoundRobin {
        RoundRobin { replicas, sent: 0 }
    }
}

impl Router for RoundRobin {
    fn kind(&self) -> RouterKind {
        RouterKind::RoundRobin
    }

    fn route(&mut self, _a: &Arrival, _now: f64, _replicas: &dyn Replicas) -> Choice {
        let replica = self.sent % self.replicas;
        self.sent += 1;
        Choice {
            replica,
            reason: Reason::Turn,
        }
    }
}
