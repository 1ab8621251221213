//! The router's bookkeeping: the requests it sent each replica that it has not yet seen finish
//! (a replica's load), and the first tokens and finishes that happened in steps it has not caught
//! up with. A step that began before an arrival may end after it; its events reach the router
//! only once the cluster's clock passes them, as a gateway learns of them from the streams.

use super::router::Router;
use crate::stats::Time;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// What happened to a request the router sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Happened {
    FirstToken,
    Finished,
}

/// (time, order of recording, what, request, replica): ordered earliest first, ties in the order
/// they were recorded.
type Event = (Time, u64, Happened, u32, u32);

#[derive(Debug, Clone, Default)]
pub struct Book {
    loads: Vec<usize>,
    unseen: BinaryHeap<Reverse<Event>>,
    recorded: u64,
}

impl Book {
    pub fn new(replicas: usize) -> Book {
        Book {
            loads: vec![0; replicas],
            ..Default::default()
        }
    }

    /// Requests sent to `replica` and not yet seen to finish.
    pub fn load(&self, replica: usize) -> usize {
        self.loads[replica]
    }

    /// Request `k` went to `replica`.
    pub fn sent(&mut self, replica: usize) {
        self.loads[replica] += 1;
    }

    /// Request `k` on `replica` had `what` happen at `time`.
    pub fn record(&mut self, time: f64, what: Happened, k: u32, replica: usize) {
        self.unseen.push(Reverse((
            Time(time),
            self.recorded,
            what,
            k,
            replica as u32,
        )));
        self.recorded += 1;
    }

    /// Everything recorded that happened by `now`, in time order, told to `router`.
    pub fn catch_up(&mut self, now: f64, router: &mut dyn Router) {
        while let Some(&Reverse((Time(t), _, what, k, replica))) = self.unseen.peek() {
            if t > now {
                break;
            }
            self.unseen.pop();
            let replica = replica as usize;
            match what {
                Happened::FirstToken => router.first_token(k, replica),
                Happened::Finished => {
                    self.loads[replica] -= 1;
                    router.finished(k, replica);
                }
            }
        }
    }

    /// Requests sent and not seen to finish, over every replica.
    pub fn in_flight(&self) -> usize {
        self.loads.iter().sum()
    }
}
