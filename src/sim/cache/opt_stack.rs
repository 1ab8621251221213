//! OPT's miss-ratio curve in one pass: Mattson's stack algorithm (1970) with priority = next use.
//! Requesting x at depth d puts x on top and carries the old top down: at each depth i < d the
//! carried key and the key at i are compared, the one needed sooner stays at i and the other is
//! carried on; what is carried last lands at depth d (or at the bottom, for a first request).
//!
//! A request costs O(d): one sequential pass over two arrays (keys and next-use times by depth).
//! The carried key is the latest-needed of the depths above, so the stack only changes where a key
//! is needed later than all above it; a segment tree that jumps between such depths was tried and
//! was slower, because the stack drifts toward next-use order and nearly every depth qualifies.
//! The stack is cut at the largest capacity of interest: keys carried past the cut are dropped.
//! They would miss in every cache up to that capacity, and the walk above the cut never looks below
//! it, so the curve up to the cut is exact.

use super::curve::MissRatioCurve;
use super::links::NONE;
use super::opt::next_uses;

/// OPT's hit count at every capacity up to `max_capacity` (beyond it the curve stays flat).
pub fn opt_curve(keys: &[u32], key_space: usize, max_capacity: usize) -> MissRatioCurve {
    let next = next_uses(keys, key_space);
    let depth_limit = max_capacity.clamp(1, key_space.max(1));
    let mut depth_of = vec![NONE; key_space];
    let mut key_at = vec![NONE; depth_limit];
    let mut next_at = vec![0u64; depth_limit];
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
        let (mut carried, mut carried_next) = (key_at[0], next_at[0]);
        key_at[0] = x;
        next_at[0] = next[t];
        depth_of[x as usize] = 0;
        if d == 0 {
            len = len.max(1);
            continue;
        }
        for j in 1..d {
            if next_at[j] > carried_next {
                std::mem::swap(&mut carried, &mut key_at[j]);
                std::mem::swap(&mut carried_next, &mut next_at[j]);
                depth_of[key_at[j] as usize] = j as u32;
            }
        }
        if d < depth_limit {
            key_at[d] = carried;
            next_at[d] = carried_next;
            depth_of[carried as usize] = d as u32;
            len = len.max(d + 1);
        } else {
            // Carried past the cut: forgotten, as if never seen.
            depth_of[carried as usize] = NONE;
        }
    }
    MissRatioCurve::from_distances(&hist, keys.len() as u64)
}
