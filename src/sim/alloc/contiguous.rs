//! Contiguous allocation in a linear memory of `capacity` units: a sorted map of free holes,
//! coalesced on free, searched first fit, best fit or worst fit.

use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Fit {
    /// The hole at the lowest address that is large enough.
    First,
    /// The smallest hole that is large enough (lowest address among equals).
    Best,
    /// The largest hole (lowest address among equals).
    Worst,
}

crate::value_names::display_as_value_name!(Fit);

/// Why an allocation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoHole {
    /// Less free memory in total than asked for.
    OutOfMemory,
    /// Enough free memory in total, but no single hole large enough: external fragmentation alone.
    Fragmented,
}

#[derive(Debug, Clone)]
pub struct ContiguousMemory {
    capacity: u64,
    fit: Fit,
    /// Free holes: start → length; never two adjacent (they are merged on free).
    holes: BTreeMap<u64, u64>,
    free: u64,
}

impl ContiguousMemory {
    pub fn new(capacity: u64, fit: Fit) -> Self {
        let mut holes = BTreeMap::new();
        if capacity > 0 {
            holes.insert(0, capacity);
        }
        ContiguousMemory {
            capacity,
            fit,
            holes,
            free: capacity,
        }
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn free(&self) -> u64 {
        self.free
    }

    pub fn largest_hole(&self) -> u64 {
        self.holes.values().copied().max().unwrap_or(0)
    }

    pub fn holes(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.holes.iter().map(|(&s, &l)| (s, l))
    }

    /// Takes `size` units (size > 0) from a hole chosen by the fit policy; returns its start.
    pub fn allocate(&mut self, size: u64) -> Result<u64, NoHole> {
        assert!(size > 0, "allocations are at least one unit");
        let fits = self.holes.iter().filter(|(_, &len)| len >= size);
        // Holes iterate by address and min_by_key keeps the first of equals: ties go to the lowest
        // address for best and worst fit alike.
        let chosen = match self.fit {
            Fit::First => fits.map(|(&s, &l)| (s, l)).next(),
            Fit::Best => fits.min_by_key(|(_, &l)| l).map(|(&s, &l)| (s, l)),
            Fit::Worst => fits
                .min_by_key(|(_, &l)| std::cmp::Reverse(l))
                .map(|(&s, &l)| (s, l)),
        };
        let Some((start, len)) = chosen else {
            return Err(if self.free >= size {
                NoHole::Fragmented
            } else {
                NoHole::OutOfMemory
            });
        };
        self.holes.remove(&start);
        if len > size {
            self.holes.insert(start + size, len - size);
        }
        self.free -= size;
        Ok(start)
    }

    /// Returns `[start, start + size)` to the free holes, merging with its neighbours.
    pub fn release(&mut self, start: u64, size: u64) {
        debug_assert!(start + size <= self.capacity);
        let (mut s, mut l) = (start, size);
        if let Some((&ps, &pl)) = self.holes.range(..start).next_back() {
            debug_assert!(ps + pl <= start, "double free of [{start}, +{size})");
            if ps + pl == start {
                self.holes.remove(&ps);
                s = ps;
                l += pl;
            }
        }
        if let Some(&nl) = self.holes.get(&(start + size)) {
            self.holes.remove(&(start + size));
            l += nl;
        }
        self.holes.insert(s, l);
        self.free += size;
    }

    /// External fragmentation: the share of free memory outside the largest hole (0 when none free).
    pub fn external_fragmentation(&self) -> f64 {
        if self.free == 0 {
            0.0
        } else {
            1.0 - self.largest_hole() as f64 / self.free as f64
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_merges_neighbours() {
        let mut m = ContiguousMemory::new(10, Fit::First);
        let a = m.allocate(3).unwrap();
        let b = m.allocate(3).unwrap();
        let c = m.allocate(3).unwrap();
        assert_eq!((a, b, c), (0, 3, 6));
        m.release(a, 3);
        m.release(c, 3);
        assert_eq!(m.holes().collect::<Vec<_>>(), vec![(0, 3), (6, 4)]);
        assert!((m.external_fragmentation() - 3.0 / 7.0).abs() < 1e-12);
        m.release(b, 3);
        assert_eq!(m.holes().collect::<Vec<_>>(), vec![(0, 10)]);
        assert_eq!(m.free(), 10);
    }

    #[test]
    fn each_fit_picks_its_hole() {
        // Holes of 4 at 0, 2 at 6, 6 at 10 (capacity 16).
        let setup = |fit| {
            let mut m = ContiguousMemory::new(16, fit);
            for size in [4, 2, 2, 2, 6] {
                m.allocate(size).unwrap();
            }
            m.release(0, 4);
            m.release(6, 2);
            m.release(10, 6);
            m
        };
        assert_eq!(setup(Fit::First).allocate(2), Ok(0));
        assert_eq!(setup(Fit::Best).allocate(2), Ok(6));
        assert_eq!(setup(Fit::Worst).allocate(2), Ok(10));
        assert_eq!(setup(Fit::First).allocate(7), Err(NoHole::Fragmented));
        assert_eq!(setup(Fit::First).allocate(13), Err(NoHole::OutOfMemory));
    }
}
