//! A dependent pointer chase: each cache line of a working set holds the address of the next line
//! to visit, in an order that is one random cycle through all of them. Every load waits for the
//! previous one, and the hardware prefetcher cannot guess the next address, so the time per step
//! is the latency of wherever the line lives (L1, L2, LLC, DRAM) plus any TLB miss on the way.

use rand::{Rng, SeedableRng};

/// Sattolo's algorithm: a uniformly random cyclic permutation of `0..n`. `next[i]` is the line
/// visited after line `i`; following it from any line visits all `n` before returning.
pub fn sattolo_cycle(n: usize, seed: u64) -> Vec<u32> {
    assert!(n <= u32::MAX as usize, "at most 2^32 lines");
    // A fast generator: a 1 GiB working set is 16 M lines, each one random swap.
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut next: Vec<u32> = (0..n as u32).collect();
    // Unlike Fisher-Yates, j < i strictly: no element may stay in place, which is what makes
    // the result a single cycle.
    for i in (1..n).rev() {
        let j = rng.random_range(0..i);
        next.swap(i, j);
    }
    next
}

/// Steps from `start` until the walk returns to it (at most `next.len() + 1`).
pub fn cycle_len(next: &[u32], start: usize) -> usize {
    let mut at = start;
    for steps in 1..=next.len() + 1 {
        at = next[at] as usize;
        if at == start {
            return steps;
        }
    }
    next.len() + 1
}

/// Writes the chain into `[base, base + next.len() * stride)`: at line `i` the address of line
/// `next[i]`.
///
/// # Safety
/// The range must be writable memory that stays mapped while the chain is walked; `stride` is at
/// least a pointer and a multiple of its alignment.
pub unsafe fn write_chain(base: *mut u8, stride: usize, next: &[u32]) {
    for (i, &n) in next.iter().enumerate() {
        // SAFETY: both lines lie in the caller's range; the slot is pointer-aligned.
        unsafe {
            base.add(i * stride)
                .cast::<*const u8>()
                .write(base.add(n as usize * stride))
        };
    }
}

/// Follows the chain `steps` times from `start`; where it ends.
///
/// # Safety
/// `start` must be a line of a chain written by [`write_chain`] that is still mapped.
#[inline(never)]
pub unsafe fn chase(start: *const u8, steps: usize) -> *const u8 {
    let mut p = start;
    for _ in 0..steps {
        // SAFETY: every line holds the address of another line of the chain.
        p = unsafe { p.cast::<*const u8>().read() };
    }
    p
}

/// Walks the chain in memory from `base`: true when it first returns to `base` after exactly
/// `lines` steps, i.e. it visits every line once.
///
/// # Safety
/// As for [`chase`].
pub unsafe fn visits_every_line(base: *const u8, lines: usize) -> bool {
    let mut p = base;
    for step in 1..=lines {
        // SAFETY: as in `chase`.
        p = unsafe { p.cast::<*const u8>().read() };
        if p == base {
            return step == lines;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn sattolo_is_one_cycle_through_every_element(n in 2usize..2000, seed in any::<u64>()) {
            let next = sattolo_cycle(n, seed);
            let mut seen = vec![false; n];
            for &x in &next {
                prop_assert!(!seen[x as usize], "{x} has two predecessors");
                seen[x as usize] = true;
            }
            for start in [0, n / 2, n - 1] {
                prop_assert_eq!(cycle_len(&next, start), n);
            }
        }
    }

    #[test]
    fn a_shuffle_with_fixed_points_is_caught() {
        // Two cycles (0 1)(2 3) and a fixed point: what a Fisher-Yates shuffle can give.
        let two = [1, 0, 3, 2, 4];
        assert_eq!(cycle_len(&two, 0), 2);
        assert_eq!(cycle_len(&two, 4), 1);
    }

    #[test]
    fn every_cycle_of_three_is_reached() {
        // Sattolo gives (n-1)! cycles uniformly: both 3-cycles appear.
        let cycles: std::collections::HashSet<Vec<u32>> =
            (0..200).map(|s| sattolo_cycle(3, s)).collect();
        assert_eq!(cycles.len(), 2, "{cycles:?}");
    }

    #[test]
    fn chain_in_memory_visits_every_line_and_chase_ends_where_the_permutation_says() {
        let lines = 512;
        let stride = 64;
        let next = sattolo_cycle(lines, 7);
        let mut buf = vec![0u64; lines * stride / 8];
        let base = buf.as_mut_ptr().cast::<u8>();
        // SAFETY: the buffer holds `lines` lines of `stride` bytes, 8-aligned.
        unsafe { write_chain(base, stride, &next) };
        assert!(unsafe { visits_every_line(base, lines) });
        let mut at = 0usize;
        for _ in 0..1000 {
            at = next[at] as usize;
        }
        let end = unsafe { chase(base, 1000) };
        assert_eq!(end as usize, base as usize + at * stride);
        // A broken chain (a line pointing at itself) is caught.
        unsafe {
            base.add(5 * stride)
                .cast::<*const u8>()
                .write(base.add(5 * stride))
        };
        assert!(!unsafe { visits_every_line(base, lines) });
    }
}
