//! Racecheck-lite: which queued work happens before which, whatever order the emulator happens
//! to run it in. A stream's items are ordered; `cuStreamWaitEvent` orders a stream after the
//! recorded item; the legacy default stream and blocking streams wait for each other; the host is
//! ordered after what it synchronised with, and everything it queues afterwards after that. A
//! `cuMemFreeAsync` or a `cuMemUnmap` that nothing orders with a kernel or copy using the same
//! memory is a race: on a GPU either may run first. Each item gets a vector clock (stream -> the
//! last item of that stream known to come before it) when it is queued, so a race is found when
//! its second half is queued, not when (or whether) the bad order happens to run.

use std::collections::{HashMap, HashSet};

/// The legacy default stream, `CUstream` 0.
pub const LEGACY: u64 = 0;

/// stream -> the last item of that stream known to happen before.
pub type Clock = HashMap<u64, u64>;

fn join(into: &mut Clock, from: &Clock) {
    for (&stream, &seq) in from {
        let e = into.entry(stream).or_insert(0);
        *e = (*e).max(seq);
    }
}

fn covers(clock: &Clock, stream: u64, seq: u64) -> bool {
    clock.get(&stream).is_some_and(|&s| s >= seq)
}

/// One queued item: its stream and its number there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Item {
    pub stream: u64,
    pub seq: u64,
}

/// Two things that use one memory region with nothing ordering them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Race {
    pub region: u64,
    /// The free or unmap.
    pub release: String,
    /// The kernel or copy.
    pub user: String,
}

#[derive(Default)]
pub struct Order {
    /// What the host has synchronised with.
    host: Clock,
    /// Per stream (destroyed ones too: their work still finishes), what comes before its next item.
    streams: HashMap<u64, Clock>,
    /// Streams created without `CU_STREAM_NON_BLOCKING`: the legacy stream and they wait for
    /// each other.
    blocking: HashSet<u64>,
    legacy_items: u64,
    /// Per memory region (an allocation's or a mapping's start), per stream: its latest use the
    /// host has not yet waited for, and what it was.
    uses: HashMap<u64, HashMap<u64, (u64, String)>>,
    /// Per region: a queued `cuMemFreeAsync` the host has not yet waited for, and what it was.
    frees: HashMap<u64, (Item, String)>,
}

impl Order {
    pub fn new_stream(&mut self, stream: u64, blocking: bool) {
        if blocking {
            self.blocking.insert(stream);
        }
    }

    /// The next item number of the legacy stream (other streams number their queues).
    pub fn next_legacy_seq(&mut self) -> u64 {
        self.legacy_items += 1;
        self.legacy_items
    }

    /// Item `seq` of `stream` is queued: its clock (which the stream keeps for its next item).
    pub fn item(&mut self, stream: u64, seq: u64) -> Clock {
        let mut clock = self.streams.get(&stream).cloned().unwrap_or_default();
        join(&mut clock, &self.host);
        if stream == LEGACY {
            for b in &self.blocking {
                if let Some(c) = self.streams.get(b) {
                    join(&mut clock, c);
                }
            }
        } else if self.blocking.contains(&stream) {
            if let Some(c) = self.streams.get(&LEGACY) {
                join(&mut clock, c);
            }
        }
        clock.insert(stream, seq);
        self.streams.insert(stream, clock.clone());
        clock
    }

    /// `stream`'s later items come after everything `clock` covers (`cuStreamWaitEvent`).
    pub fn stream_waits(&mut self, stream: u64, clock: &Clock) {
        join(self.streams.entry(stream).or_default(), clock);
    }

    /// What `stream` has queued so far, as a clock (for an event recorded now).
    pub fn stream_clock(&self, stream: u64) -> Clock {
        self.streams.get(&stream).cloned().unwrap_or_default()
    }

    /// The host has waited for everything `clock` covers.
    pub fn host_waits(&mut self, clock: &Clock) {
        join(&mut self.host, clock);
        let host = &self.host;
        for per_stream in self.uses.values_mut() {
            per_stream.retain(|&stream, (seq, _)| !covers(host, stream, *seq));
        }
        self.uses.retain(|_, per_stream| !per_stream.is_empty());
        self.frees
            .retain(|_, (item, _)| !covers(host, item.stream, item.seq));
    }

    /// The host has waited for `stream`'s work (and, for the legacy stream, every blocking one's).
    pub fn host_waits_stream(&mut self, stream: u64) {
        let mut clock = self.stream_clock(stream);
        if stream == LEGACY {
            for b in &self.blocking {
                join(&mut clock, &self.stream_clock(*b));
            }
        }
        self.host_waits(&clock);
    }

    /// The host has waited for all work (`cuCtxSynchronize` and the calls that synchronise).
    pub fn host_waits_all(&mut self) {
        let mut clock = Clock::new();
        for c in self.streams.values() {
            join(&mut clock, c);
        }
        self.host_waits(&clock);
    }

    /// `item` (with `clock`) uses `regions`: the races with queued frees nothing orders it with.
    pub fn uses(&mut self, item: Item, clock: &Clock, regions: &[u64], what: &str) -> Vec<Race> {
        let mut races = Vec::new();
        for &region in regions {
            if let Some((free, release)) = self.frees.get(&region) {
                if free.stream != item.stream && !covers(clock, free.stream, free.seq) {
                    races.push(Race {
                        region,
                        release: release.clone(),
                        user: what.to_string(),
                    });
                }
            }
            self.uses
                .entry(region)
                .or_default()
                .insert(item.stream, (item.seq, what.to_string()));
        }
        races
    }

    /// `item` (with `clock`) frees `region`: the races with uses it is not ordered after.
    pub fn free(&mut self, item: Item, clock: &Clock, region: u64, what: &str) -> Vec<Race> {
        let races = self
            .uses
            .get(&region)
            .into_iter()
            .flatten()
            .filter(|&(&stream, (seq, _))| stream != item.stream && !covers(clock, stream, *seq))
            .map(|(_, (_, user))| Race {
                region,
                release: what.to_string(),
                user: user.clone(),
            })
            .collect();
        self.frees.insert(region, (item, what.to_string()));
        races
    }

    /// The host unmaps `regions` now: the races with uses it has not waited for. The regions'
    /// records go with them (their addresses may be mapped again).
    pub fn host_unmaps(&mut self, regions: &[u64], what: &str) -> Vec<Race> {
        let mut races = Vec::new();
        for region in regions {
            if let Some(per_stream) = self.uses.remove(region) {
                for (stream, (seq, user)) in per_stream {
                    if !covers(&self.host, stream, seq) {
                        races.push(Race {
                            region: *region,
                            release: what.to_string(),
                            user,
                        });
                    }
                }
            }
            self.frees.remove(region);
        }
        races
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: u64 = 0xa0;
    const B: u64 = 0xb0;
    const X: u64 = 0x1000;

    fn order() -> Order {
        let mut o = Order::default();
        o.new_stream(A, false);
        o.new_stream(B, false);
        o
    }

    #[test]
    fn a_free_and_a_use_on_two_streams_race_unless_an_event_orders_them() {
        for ordered in [false, true] {
            let mut o = order();
            let read = o.item(A, 1);
            assert!(o
                .uses(Item { stream: A, seq: 1 }, &read, &[X], "read")
                .is_empty());
            let record = o.item(A, 2);
            if ordered {
                o.stream_waits(B, &record);
            }
            let free = o.item(B, 1);
            let races = o.free(Item { stream: B, seq: 1 }, &free, X, "free");
            assert_eq!(races.is_empty(), ordered, "{races:?}");
        }
    }

    #[test]
    fn a_use_queued_after_an_unordered_free_races_and_the_host_orders_everything_after_a_sync() {
        let mut o = order();
        let free = o.item(B, 1);
        assert!(o
            .free(Item { stream: B, seq: 1 }, &free, X, "free")
            .is_empty());
        let read = o.item(A, 1);
        assert_eq!(
            o.uses(Item { stream: A, seq: 1 }, &read, &[X], "read")
                .len(),
            1
        );
        // The same stream orders itself; after the host synchronises B, anything is after it.
        let again = o.item(B, 2);
        assert!(o
            .uses(Item { stream: B, seq: 2 }, &again, &[X], "read")
            .is_empty());
        o.host_waits_stream(B);
        let later = o.item(A, 2);
        assert!(o
            .uses(Item { stream: A, seq: 2 }, &later, &[X], "read")
            .is_empty());
    }

    #[test]
    fn the_host_unmapping_races_with_uses_it_has_not_waited_for() {
        let mut o = order();
        let read = o.item(A, 1);
        o.uses(Item { stream: A, seq: 1 }, &read, &[X], "read");
        assert_eq!(o.host_unmaps(&[X], "unmap").len(), 1);
        let read = o.item(A, 2);
        o.uses(Item { stream: A, seq: 2 }, &read, &[X], "read");
        o.host_waits_all();
        assert!(o.host_unmaps(&[X], "unmap").is_empty());
    }

    #[test]
    fn blocking_streams_and_the_legacy_stream_wait_for_each_other() {
        let mut o = Order::default();
        o.new_stream(A, true);
        o.new_stream(B, false);
        let read = o.item(A, 1);
        o.uses(Item { stream: A, seq: 1 }, &read, &[X], "read");
        let seq = o.next_legacy_seq();
        let free = o.item(LEGACY, seq);
        assert!(o
            .free(
                Item {
                    stream: LEGACY,
                    seq
                },
                &free,
                X,
                "free"
            )
            .is_empty());
        // A non-blocking stream is not ordered with the legacy stream.
        let read = o.item(B, 1);
        assert_eq!(
            o.uses(Item { stream: B, seq: 1 }, &read, &[X], "read")
                .len(),
            1
        );
    }
}
