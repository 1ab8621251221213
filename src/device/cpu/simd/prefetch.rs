//! Memory requested ahead of use: the K and V lines of the next attention step, asked into L2 a
//! few at a time while the present step is computed.
//!
//! Why by hand: the hardware prefetchers follow a stream only within a 4 KiB page, and a paged
//! block of 16 tokens is one such page per KV head. Every block would start with a wait for DRAM;
//! requests issued one step ahead overlap that wait with the present step's arithmetic. Why L2:
//! the next step's K and V (128 KiB at 32 tokens x 8 KV heads x head dim 128, f16) would evict the
//! present step from L1, and L2's miss queue holds more requests in flight than L1's. Why spread:
//! a burst of requests fills the miss queues and stalls the arithmetic behind it (measured).

/// A contiguous range of a pool's elements: `len` elements from `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    pub start: usize,
    pub len: usize,
}

/// The lines of `spans` in K and in V (the pools share their layout), requested in order,
/// `per_beat` lines of each per [`Ahead::beat`].
pub struct Ahead<'a, T> {
    k: &'a [T],
    v: &'a [T],
    spans: &'a [Span],
    span: usize,
    at: usize,
    per_beat: usize,
    beats: usize,
}

impl<'a, T> Ahead<'a, T> {
    /// Nothing to request.
    #[cfg(test)]
    pub fn none() -> Self {
        Ahead {
            k: &[],
            v: &[],
            spans: &[],
            span: 0,
            at: 0,
            per_beat: 0,
            beats: 0,
        }
    }

    /// Requests for every line of `spans`, spread evenly over `beats` beats.
    pub fn new(k: &'a [T], v: &'a [T], spans: &'a [Span], beats: usize) -> Self {
        let line = Self::line_elems();
        let lines: usize = spans.iter().map(|s| s.len.div_ceil(line)).sum();
        Ahead {
            k,
            v,
            spans,
            span: 0,
            at: 0,
            per_beat: lines.div_ceil(beats.max(1)),
            beats: 0,
        }
    }

    /// Elements of `T` in a 64-byte cache line.
    fn line_elems() -> usize {
        (64 / std::mem::size_of::<T>().max(1)).max(1)
    }

    /// Issues the next `per_beat` lines of K and of V: a run of lines per span, the span looked
    /// up once per run rather than once per line.
    #[inline]
    pub fn beat(&mut self) {
        self.beats += 1;
        let line = Self::line_elems();
        let mut left = self.per_beat;
        while left > 0 {
            let Some(span) = self.spans.get(self.span) else {
                return;
            };
            debug_assert!(
                span.start + span.len <= self.k.len() && span.start + span.len <= self.v.len(),
                "span outside the pools"
            );
            // wrapping_add: a prefetch never dereferences, so no bound needs to hold.
            let k = self.k.as_ptr().wrapping_add(span.start);
            let v = self.v.as_ptr().wrapping_add(span.start);
            let end = span.len.min(self.at + left * line);
            let mut at = self.at;
            while at < end {
                prefetch_l2(k.wrapping_add(at));
                prefetch_l2(v.wrapping_add(at));
                at += line;
            }
            left -= (at - self.at) / line;
            if at >= span.len {
                (self.span, self.at) = (self.span + 1, 0);
            } else {
                self.at = at;
            }
        }
    }

    /// Beats so far (for the tests that hold kernels to the count they announce).
    #[cfg(test)]
    pub fn beats(&self) -> usize {
        self.beats
    }

    /// Whether every line has been requested.
    #[cfg(test)]
    pub fn is_done(&self) -> bool {
        self.span >= self.spans.len()
    }
}

#[inline]
fn prefetch_l2<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of x86-64; a prefetch never faults, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_line_is_requested_within_the_announced_beats() {
        let pool = vec![0u16; 4096];
        // 100 + 33 + 64 elements of 2 bytes: 4 + 2 + 2 lines.
        let spans = [
            Span { start: 0, len: 100 },
            Span {
                start: 1000,
                len: 33,
            },
            Span {
                start: 4000,
                len: 64,
            },
        ];
        for beats in [1, 3, 8, 20] {
            let mut a = Ahead::new(&pool, &pool, &spans, beats);
            for b in 0..beats {
                // The requests last at least until the last beat when there are enough lines.
                assert_eq!(a.is_done(), b >= 8, "beat {b} of {beats}");
                a.beat();
            }
            assert!(a.is_done(), "{beats} beats");
            assert_eq!(a.beats(), beats);
        }
        let mut none = Ahead::<u16>::none();
        none.beat();
        assert!(none.is_done());
    }
}
