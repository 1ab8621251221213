//! The waiting queue: a deque in arrival order (FCFS: preempted requests return to the front), or
//! a heap ordered by the policy's rank (vLLM's priority queue orders by (priority, arrival,
//! request id); the beyond-vLLM policies rank by predicted length or aged arrival).

use super::config::Policy;
use super::request::Req;
use std::cmp::Ordering;
use std::collections::{BinaryHeap, VecDeque};

/// A request's place under a ranked policy: smaller first, compared field by field.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rank {
    pub major: i64,
    pub minor: f64,
    pub arrival: f64,
    pub id_rank: u32,
}

impl Rank {
    /// Where `r` ranks under `policy` now.
    pub fn of(r: &Req, policy: Policy, aging_delay: f64) -> Rank {
        let (major, minor) = match policy {
            Policy::Fcfs | Policy::Priority => (r.priority, 0.0),
            Policy::Sjf => (0, r.predicted_output),
            Policy::Srpt => (0, r.predicted_output - f64::from(r.num_output)),
            Policy::Aging => (0, r.arrival + r.priority as f64 * aging_delay),
        };
        Rank {
            major,
            minor,
            arrival: r.arrival,
            id_rank: r.id_rank,
        }
    }

    /// The order of preemption victims: vLLM compares (priority, arrival) only.
    pub fn victim_cmp(&self, other: &Rank) -> Ordering {
        self.major
            .cmp(&other.major)
            .then(self.minor.total_cmp(&other.minor))
            .then(self.arrival.total_cmp(&other.arrival))
    }

    fn cmp(&self, other: &Rank) -> Ordering {
        self.victim_cmp(other)
            .then(self.id_rank.cmp(&other.id_rank))
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    rank: Rank,
    req: u32,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Entry {
    // Reversed: BinaryHeap pops its greatest, the queue wants the smallest rank.
    fn cmp(&self, other: &Self) -> Ordering {
        other.rank.cmp(&self.rank).then(other.req.cmp(&self.req))
    }
}

#[derive(Debug, Clone)]
enum Queue {
    Fifo(VecDeque<u32>),
    Ranked(BinaryHeap<Entry>),
}

#[derive(Debug, Clone)]
pub struct WaitingQueue(Queue);

impl WaitingQueue {
    pub fn new(policy: Policy) -> Self {
        WaitingQueue(if policy.ranked() {
            Queue::Ranked(BinaryHeap::new())
        } else {
            Queue::Fifo(VecDeque::new())
        })
    }

    pub fn len(&self) -> usize {
        match &self.0 {
            Queue::Fifo(q) => q.len(),
            Queue::Ranked(h) => h.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn peek(&self) -> Option<u32> {
        match &self.0 {
            Queue::Fifo(q) => q.front().copied(),
            Queue::Ranked(h) => h.peek().map(|e| e.req),
        }
    }

    pub fn pop(&mut self) -> Option<u32> {
        match &mut self.0 {
            Queue::Fifo(q) => q.pop_front(),
            Queue::Ranked(h) => h.pop().map(|e| e.req),
        }
    }

    /// An arrival: to the back, or by rank.
    pub fn add(&mut self, req: u32, rank: Rank) {
        match &mut self.0 {
            Queue::Fifo(q) => q.push_back(req),
            Queue::Ranked(h) => h.push(Entry { rank, req }),
        }
    }

    /// A preempted request: to the front, or by rank.
    pub fn prepend(&mut self, req: u32, rank: Rank) {
        match &mut self.0 {
            Queue::Fifo(q) => q.push_front(req),
            Queue::Ranked(h) => h.push(Entry { rank, req }),
        }
    }

    pub fn remove(&mut self, req: u32) {
        match &mut self.0 {
            Queue::Fifo(q) => q.retain(|&x| x != req),
            Queue::Ranked(h) => h.retain(|e| e.req != req),
        }
    }

    /// The requests in the order they would be popped.
    pub fn ordered(&self) -> Vec<u32> {
        match &self.0 {
            Queue::Fifo(q) => q.iter().copied().collect(),
            Queue::Ranked(h) => {
                let mut v: Vec<Entry> = h.iter().copied().collect();
                v.sort_by(|a, b| b.cmp(a));
                v.into_iter().map(|e| e.req).collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rank(major: i64, arrival: f64, id_rank: u32) -> Rank {
        Rank {
            major,
            minor: 0.0,
            arrival,
            id_rank,
        }
    }

    #[test]
    fn fifo_prepends_and_ranked_orders_by_rank_then_id() {
        let mut q = WaitingQueue::new(Policy::Fcfs);
        q.add(1, rank(0, 0.0, 0));
        q.add(2, rank(0, 0.0, 0));
        q.prepend(3, rank(0, 0.0, 0));
        assert_eq!(q.ordered(), [3, 1, 2]);
        q.remove(1);
        assert_eq!((q.pop(), q.pop(), q.pop()), (Some(3), Some(2), None));

        let mut q = WaitingQueue::new(Policy::Priority);
        q.add(0, rank(1, 0.0, 0));
        q.add(1, rank(0, 5.0, 1));
        q.add(2, rank(0, 5.0, 0)); // same priority and arrival: the smaller id first
        q.prepend(3, rank(0, 1.0, 3));
        assert_eq!(q.ordered(), [3, 2, 1, 0]);
        assert_eq!(q.peek(), Some(3));
        assert_eq!(q.len(), 4);
        assert_eq!(
            rank(0, 1.0, 9).victim_cmp(&rank(0, 1.0, 0)),
            Ordering::Equal
        );
    }
}
