//! Miss-ratio curves of stack algorithms from one pass. For a stack algorithm each request has a
//! stack distance d (its depth in the algorithm's priority stack, ∞ for a first request), and it
//! hits in every cache of capacity ≥ d; a histogram of distances therefore gives the hit count of
//! every capacity at once.
//!
//! LRU's stack is recency order, so d = 1 + the number of distinct keys requested since the key's
//! previous request. A Fenwick tree over request times with a 1 at each key's latest request counts
//! them in O(log n).

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissRatioCurve {
    requests: u64,
    /// `hits_at[c]`: hits of a cache of capacity `c`; constant past the end.
    hits_at: Vec<u64>,
}

impl MissRatioCurve {
    /// From a histogram of stack distances, `hist[d]` for d ≥ 1 (`hist[0]` unused; infinite
    /// distances not counted).
    pub fn from_distances(hist: &[u64], requests: u64) -> Self {
        let mut hits_at = Vec::with_capacity(hist.len().max(1));
        hits_at.push(0);
        let mut sum = 0;
        for &h in hist.iter().skip(1) {
            sum += h;
            hits_at.push(sum);
        }
        while hits_at.len() > 1 && hits_at[hits_at.len() - 2] == sum {
            hits_at.pop();
        }
        MissRatioCurve { requests, hits_at }
    }

    pub fn requests(&self) -> u64 {
        self.requests
    }

    pub fn hits(&self, capacity: usize) -> u64 {
        *self
            .hits_at
            .get(capacity)
            .unwrap_or_else(|| self.hits_at.last().expect("never empty"))
    }

    pub fn hit_ratio(&self, capacity: usize) -> f64 {
        if self.requests == 0 {
            return 0.0;
        }
        self.hits(capacity) as f64 / self.requests as f64
    }

    pub fn miss_ratio(&self, capacity: usize) -> f64 {
        1.0 - self.hit_ratio(capacity)
    }

    /// The smallest capacity that reaches the curve's final hit count.
    pub fn saturation_capacity(&self) -> usize {
        self.hits_at.len() - 1
    }
}

/// Counts of 1s over positions `0..n`, prefix sums in O(log n).
struct Fenwick(Vec<u32>);

impl Fenwick {
    fn new(n: usize) -> Self {
        Fenwick(vec![0; n + 1])
    }

    fn add(&mut self, i: usize, delta: i32) {
        let mut i = i + 1;
        while i < self.0.len() {
            self.0[i] = self.0[i].wrapping_add_signed(delta);
            i += i & i.wrapping_neg();
        }
    }

    /// Sum over positions `0..=i`.
    fn prefix(&self, i: usize) -> u32 {
        let mut i = i + 1;
        let mut s = 0;
        while i > 0 {
            s += self.0[i];
            i &= i - 1;
        }
        s
    }
}

/// LRU's hit count at every capacity, in O(n log n) for n requests.
pub fn lru_curve(keys: &[u32], key_space: usize) -> MissRatioCurve {
    let mut last = vec![usize::MAX; key_space];
    let mut marks = Fenwick::new(keys.len());
    let mut live = 0u32;
    let mut hist = vec![0u64; key_space + 1];
    for (t, &k) in keys.iter().enumerate() {
        let prev = last[k as usize];
        if prev != usize::MAX {
            // Keys whose latest request came after `prev`, plus the key itself.
            let d = live - marks.prefix(prev) + 1;
            hist[d as usize] += 1;
            marks.add(prev, -1);
        } else {
            live += 1;
        }
        marks.add(t, 1);
        last[k as usize] = t;
    }
    MissRatioCurve::from_distances(&hist, keys.len() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances_of_a_small_trace() {
        // a b c a c b: a at distance 3, c at 2, b at 3.
        let c = lru_curve(&[0, 1, 2, 0, 2, 1], 3);
        assert_eq!(
            (0..5).map(|cap| c.hits(cap)).collect::<Vec<_>>(),
            [0, 0, 1, 3, 3]
        );
        assert_eq!(c.saturation_capacity(), 3);
        assert_eq!(c.requests(), 6);
    }
}
