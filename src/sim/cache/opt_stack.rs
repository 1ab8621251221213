//! OPT's miss-ratio curve in one pass: Mattson's stack algorithm (1970) with priority = next use.
//! Requesting x at depth d puts x on top and carries the old top down: at each depth i < d the
//! carried key and the key at i are compared, the one needed sooner stays at i and the other is
//! carried on; what is carried last lands at depth d (or at the bottom, for a first request).
//!
//! The carried key is always the one needed latest among depths 0..i, so the stack changes only at
//! depths whose key is needed later than every key above it. A max segment tree over the next-use
//! times by depth finds each such depth in O(log n); the cost of a request is O(r log n) for r such
//! records, instead of O(d). The stack tends toward next-use order, so r can approach d: the stack
//! is therefore cut at the largest capacity of interest. Keys carried past the cut are dropped;
//! they would miss in every cache up to that capacity, and the walk above the cut never looks
//! below it, so the curve up to the cut is exact.

use super::curve::MissRatioCurve;
use super::links::NONE;
use super::opt::next_uses;

/// Max over leaves, with "first leaf in a range above a value" queries.
struct MaxTree {
    size: usize,
    t: Vec<u64>,
}

impl MaxTree {
    fn new(n: usize) -> Self {
        let size = n.next_power_of_two().max(1);
        MaxTree {
            size,
            t: vec![0; 2 * size],
        }
    }

    fn get(&self, i: usize) -> u64 {
        self.t[self.size + i]
    }

    fn set(&mut self, i: usize, v: u64) {
        let mut j = self.size + i;
        self.t[j] = v;
        while j > 1 {
            j /= 2;
            self.t[j] = self.t[2 * j].max(self.t[2 * j + 1]);
        }
    }

    /// The first leaf in `lo..hi` holding more than `v`.
    fn first_above(&self, lo: usize, hi: usize, v: u64) -> Option<usize> {
        self.find(1, 0, self.size, lo, hi, v)
    }

    fn find(
        &self,
        node: usize,
        nl: usize,
        nr: usize,
        lo: usize,
        hi: usize,
        v: u64,
    ) -> Option<usize> {
        if nr <= lo || hi <= nl || self.t[node] <= v {
            return None;
        }
        if nr - nl == 1 {
            return Some(nl);
        }
        let mid = (nl + nr) / 2;
        self.find(2 * node, nl, mid, lo, hi, v)
            .or_else(|| self.find(2 * node + 1, mid, nr, lo, hi, v))
    }
}

/// OPT's hit count at every capacity up to `max_capacity` (beyond it the curve stays flat).
pub fn opt_curve(keys: &[u32], key_space: usize, max_capacity: usize) -> MissRatioCurve {
    let next = next_uses(keys, key_space);
    let depth_limit = max_capacity.clamp(1, key_space.max(1));
    let mut depth_of = vec![NONE; key_space];
    let mut key_at = vec![NONE; depth_limit];
    let mut next_at = MaxTree::new(depth_limit);
    let mut len = 0usize;
    let mut hist = vec![0u64; key_space + 1];
    for (t, &x) in keys.iter().enumerate() {
        let old = depth_of[x as usize];
        let d = if old == NONE {
            len
        } else {
            hist[old as usize + 1] += 1;
            old as usize
        };
        if d == 0 {
            next_at.set(0, next[t]);
            key_at[0] = x;
            depth_of[x as usize] = 0;
            len = len.max(1);
            continue;
        }
        let (mut carried, mut carried_next) = (key_at[0], next_at.get(0));
        key_at[0] = x;
        depth_of[x as usize] = 0;
        next_at.set(0, next[t]);
        let mut at = 0;
        while let Some(j) = next_at.first_above(at + 1, d, carried_next) {
            let (stays, stays_next) = (carried, carried_next);
            (carried, carried_next) = (key_at[j], next_at.get(j));
            key_at[j] = stays;
            depth_of[stays as usize] = j as u32;
            next_at.set(j, stays_next);
            at = j;
        }
        if d < depth_limit {
            key_at[d] = carried;
            depth_of[carried as usize] = d as u32;
            next_at.set(d, carried_next);
            if d == len {
                len += 1;
            }
        } else {
            // Carried past the cut: forgotten, as if never seen.
            depth_of[carried as usize] = NONE;
        }
    }
    MissRatioCurve::from_distances(&hist, keys.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_tree_finds_the_first_leaf_above() {
        let mut m = MaxTree::new(6);
        for (i, v) in [5u64, 1, 9, 3, 9, 2].into_iter().enumerate() {
            m.set(i, v);
        }
        assert_eq!(m.first_above(0, 6, 4), Some(0));
        assert_eq!(m.first_above(1, 6, 4), Some(2));
        assert_eq!(m.first_above(3, 6, 9), None);
        assert_eq!(m.first_above(3, 4, 2), Some(3));
        assert_eq!(m.first_above(5, 6, 1), Some(5));
        assert_eq!(m.first_above(2, 2, 0), None);
    }
}
