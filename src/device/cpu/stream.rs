//! The CPU's memory limits: the one measurement every CPU bandwidth figure of the crate is compared
//! with (decode attention, the sweep's gathers and attention), the host counterpart of
//! kernels/stream.cu.
//!
//! A limit is what the memory can give, so everything here is set up to reach it, and a kernel
//! that beats it shows a fault in the limit, not a fast kernel:
//! - every core: one rayon task per 2 MiB piece, on the global pool (one thread per core);
//! - wide loads: 256-bit AVX2 loads into four independent accumulators (8-byte words elsewhere);
//!   the copy writes with non-temporal stores, so no store reads its line first;
//! - transparent huge pages where the kernel offers them (`MADV_HUGEPAGE` before first touch), so
//!   no TLB miss interrupts a stream;
//! - the best of several passes, not their median: on a shared machine a slow pass measures the
//!   neighbours;
//! - over the bytes of the measurement compared with, but never less than [`LLC_MULTIPLE`] times
//!   the last-level cache the run has ([`super::last_level_cache`]: measured, not sysfs's
//!   figure, which a VM often gives as its host's), so DRAM is measured and not the cache.
//!
//! Not measured here: `vmm`'s sleep/wake copy baseline and `swap`'s contiguous copy. Both time a
//! copy between the very buffers their operation uses (a pool's chunk mappings, an offload
//! buffer, the swap slots), at that operation's size, on that operation's path: baselines for one
//! path, not the memory's limit.

use super::last_level_cache::last_level_cache;
use super::pages::{thp_available, HostBuf, Pages};
use super::wide::{copy_piece, sum_words};
use crate::device::Limits;
use crate::timing::best_secs;
use rayon::prelude::*;

/// The limits read at least this many times the last-level cache.
pub const LLC_MULTIPLE: usize = 4;
/// Passes at the least; the best counts. A pass over 128 MiB takes a few milliseconds, and on a
/// shared machine one in several finds every core free.
pub const MIN_PASSES: usize = 10;
/// Bytes per parallel task: one huge page, so a task never leaves its page.
const PIECE: usize = 2 << 20;

/// The bytes the limits are measured over for a measurement of `bytes`: at least
/// [`LLC_MULTIPLE`] times the last-level cache the run has ([`last_level_cache`]), in whole
/// pieces.
pub fn limit_bytes(bytes: usize) -> usize {
    let llc = last_level_cache().bytes;
    let pieces = bytes.max(LLC_MULTIPLE * llc).div_ceil(2 * PIECE);
    pieces.min(usize::MAX / (2 * PIECE)) * 2 * PIECE
}

/// One buffer, populated with huge pages where possible, that the limits are measured over.
pub struct MemoryProbe {
    buf: HostBuf,
}

impl MemoryProbe {
    /// A probe for a measurement of `bytes` (see [`limit_bytes`]), written once on every core so
    /// that its pages are placed before any pass is timed.
    pub fn new(bytes: usize) -> std::io::Result<Self> {
        let pages = if thp_available() {
            Pages::Huge
        } else {
            Pages::Small
        };
        let mut buf = HostBuf::new(limit_bytes(bytes), pages)?;
        buf.as_mut_slice::<u64>()
            .par_chunks_mut(PIECE / 8)
            .enumerate()
            .for_each(|(i, words)| {
                let base = (i * PIECE / 8) as u64;
                words
                    .iter_mut()
                    .enumerate()
                    .for_each(|(j, w)| *w = base + j as u64);
            });
        Ok(MemoryProbe { buf })
    }

    /// Bytes the read-only stream reads per pass (the copy reads half and writes half).
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// The share of the buffer in huge pages (see [`HostBuf::huge_page_share`]).
    pub fn huge_page_share(&self) -> Option<f64> {
        self.buf.huge_page_share()
    }

    /// One read-only pass over the whole buffer (what the stream limit times).
    pub fn stream_pass(&self) -> u64 {
        read_only_sum(self.buf.as_slice::<u64>())
    }

    /// One copy of the buffer's first half into its second (what the copy limit times).
    pub fn copy_pass(&mut self) {
        let half = self.bytes() / 2;
        let (src, dst) = self.buf.as_mut_slice::<u8>().split_at_mut(half);
        stream_copy(dst, src);
    }

    /// The best of `passes` (at least [`MIN_PASSES`]) copies and read-only streams, after one
    /// untimed pass of each. Copy counts bytes read plus bytes written, as STREAM does.
    pub fn measure(&mut self, passes: usize) -> Limits {
        Limits {
            copy_gbps: self.measure_copy(passes),
            stream_gbps: self.measure_stream(passes),
        }
    }

    /// The copy limit alone (GB/s, bytes read plus written): the best of `passes` (at least
    /// [`MIN_PASSES`]) after one untimed pass.
    pub fn measure_copy(&mut self, passes: usize) -> f64 {
        let copy_s = best_secs(1, passes.max(MIN_PASSES), || self.copy_pass());
        self.bytes() as f64 / copy_s / 1e9
    }

    /// The read-only stream limit alone (GB/s): the best of `passes` (at least [`MIN_PASSES`])
    /// after one untimed pass.
    pub fn measure_stream(&mut self, passes: usize) -> f64 {
        let read_s = best_secs(1, passes.max(MIN_PASSES), || {
            std::hint::black_box(self.stream_pass());
        });
        self.bytes() as f64 / read_s / 1e9
    }
}

/// The limits for a measurement of `bytes`, `passes` passes (see [`MemoryProbe`]).
pub fn memory_limits(bytes: usize, passes: usize) -> std::io::Result<Limits> {
    Ok(MemoryProbe::new(bytes)?.measure(passes))
}

/// The wrapping sum of `words`, read once on every core with the widest loads available.
pub fn read_only_sum(words: &[u64]) -> u64 {
    words
        .par_chunks(PIECE / 8)
        .map(sum_words)
        .reduce(|| 0, u64::wrapping_add)
}

/// Copies `src` into `dst` (equal lengths) on every core, without reading `dst`'s lines first.
pub fn stream_copy(dst: &mut [u8], src: &[u8]) {
    assert_eq!(dst.len(), src.len(), "copy lengths");
    dst.par_chunks_mut(PIECE)
        .zip(src.par_chunks(PIECE))
        .for_each(|(d, s)| copy_piece(d, s));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_sum_is_the_sum_at_every_alignment() {
        let v: Vec<u64> = (0..1_000_003).collect();
        for skip in 0..5 {
            let w = &v[skip..];
            let want = w.iter().fold(0u64, |a, &x| a.wrapping_add(x));
            assert_eq!(read_only_sum(w), want);
        }
    }

    #[test]
    fn stream_copy_copies_every_byte_at_every_alignment() {
        let src: Vec<u8> = (0..(5 << 20) + 77)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect();
        for skip in [0, 1, 9, 16] {
            let mut dst = vec![0u8; src.len() - skip];
            stream_copy(&mut dst, &src[skip..]);
            assert!(dst == src[skip..]);
        }
    }

    #[test]
    fn limits_read_whole_pieces_over_several_caches() {
        let llc = last_level_cache().bytes;
        assert!(llc >= 1 << 10, "{llc}");
        assert!(limit_bytes(1) >= LLC_MULTIPLE * llc);
        assert_eq!(limit_bytes(1) % (2 * PIECE), 0);
        assert_eq!(limit_bytes(1 << 40), 1 << 40);
        assert_eq!(
            limit_bytes(usize::MAX),
            usize::MAX / (2 * PIECE) * 2 * PIECE
        );
    }

    #[test]
    fn limits_are_positive_over_several_caches() {
        let mut probe = MemoryProbe::new(1).unwrap();
        assert!(probe.bytes() >= LLC_MULTIPLE * last_level_cache().bytes);
        let l = probe.measure(1);
        assert!(l.copy_gbps > 0.0 && l.stream_gbps > 0.0, "{l:?}");
    }
}
