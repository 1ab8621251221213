//! The CPU's memory limits over a given number of bytes: a multi-threaded copy and a read-only
//! streaming reduction, the host counterparts of kernels/stream.cu.

use crate::device::Limits;
use crate::stats::median;
use rayon::prelude::*;
use std::time::Instant;

const CHUNK: usize = 1 << 20;

/// Copy (bytes read + written per second) and read-only bandwidth over `bytes` bytes.
pub fn memory_limits(bytes: usize, iters: usize) -> Limits {
    let n = bytes.div_ceil(8).max(1);
    // Written once so every page is really backed before timing.
    let src: Vec<u64> = (0..n as u64).collect();
    let mut dst = vec![0u64; n];
    let time = |f: &mut dyn FnMut()| -> f64 {
        f();
        let v: Vec<f64> = (0..iters.max(1))
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect();
        median(&v)
    };
    let copy = time(&mut || {
        dst.par_chunks_mut(CHUNK)
            .zip(src.par_chunks(CHUNK))
            .for_each(|(d, s)| d.copy_from_slice(s));
    });
    let mut sink = 0u64;
    let read = time(&mut || {
        sink ^= read_only_sum(&src);
    });
    std::hint::black_box(sink);
    std::hint::black_box(&dst);
    Limits {
        copy_gbps: 2.0 * (n * 8) as f64 / copy / 1e9,
        stream_gbps: (n * 8) as f64 / read / 1e9,
    }
}

/// Reads every word once; eight independent lanes so the loop vectorises and is memory-bound.
pub fn read_only_sum(words: &[u64]) -> u64 {
    words
        .par_chunks(CHUNK)
        .map(|c| {
            let mut acc = [0u64; 8];
            let chunks = c.chunks_exact(8);
            let tail = chunks
                .remainder()
                .iter()
                .fold(0u64, |a, &x| a.wrapping_add(x));
            for w in chunks {
                for i in 0..8 {
                    acc[i] = acc[i].wrapping_add(w[i]);
                }
            }
            acc.iter().fold(tail, |a, &x| a.wrapping_add(x))
        })
        .reduce(|| 0, u64::wrapping_add)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_sum_is_the_sum() {
        let v: Vec<u64> = (0..100_003).collect();
        assert_eq!(read_only_sum(&v), 100_003 * 100_002 / 2);
    }

    #[test]
    fn limits_are_positive() {
        let l = memory_limits(1 << 20, 2);
        assert!(l.copy_gbps > 0.0 && l.stream_gbps > 0.0);
    }
}
