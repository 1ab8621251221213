//! One core's widest reads and writes: a sum of words with 256-bit loads, a copy with
//! non-temporal stores. The CPU's memory limits (stream.rs) and its cache measurement
//! (last_level_cache.rs) both read through them, so both see the same loads.

/// The wrapping sum of `words` on the calling thread, with the widest loads available.
pub fn sum_words(words: &[u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was just detected.
        return unsafe { x86::sum_words_avx2(words) };
    }
    let mut acc = [0u64; 8];
    let chunks = words.chunks_exact(8);
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
}

pub fn copy_piece(dst: &mut [u8], src: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: SSE2 is part of x86-64; lengths are equal.
        unsafe { x86::copy_streaming(dst, src) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    dst.copy_from_slice(src);
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Four 256-bit accumulators over 32-byte loads; the unaligned head and tail as words.
    #[target_feature(enable = "avx2")]
    pub unsafe fn sum_words_avx2(words: &[u64]) -> u64 {
        // SAFETY: u64 -> __m256i reinterprets plain integers; align_to picks the aligned middle.
        let (head, mid, tail) = unsafe { words.align_to::<__m256i>() };
        let mut acc = [_mm256_setzero_si256(); 4];
        let mut quads = mid.chunks_exact(4);
        for q in &mut quads {
            for j in 0..4 {
                acc[j] = _mm256_add_epi64(acc[j], q[j]);
            }
        }
        for &v in quads.remainder() {
            acc[0] = _mm256_add_epi64(acc[0], v);
        }
        let total = _mm256_add_epi64(
            _mm256_add_epi64(acc[0], acc[1]),
            _mm256_add_epi64(acc[2], acc[3]),
        );
        let mut lanes = [0u64; 4];
        // SAFETY: four u64 lanes into a 32-byte array.
        unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast(), total) };
        head.iter()
            .chain(tail)
            .chain(&lanes)
            .fold(0u64, |a, &x| a.wrapping_add(x))
    }

    /// 16-byte non-temporal stores where `dst` is aligned, a plain copy of the edges.
    ///
    /// # Safety
    /// `dst.len() == src.len()`.
    pub unsafe fn copy_streaming(dst: &mut [u8], src: &[u8]) {
        let lead = dst.as_ptr().align_offset(16).min(dst.len());
        let (dst_head, dst_rest) = dst.split_at_mut(lead);
        let (src_head, src_rest) = src.split_at(lead);
        dst_head.copy_from_slice(src_head);
        let body = dst_rest.len() / 16 * 16;
        let (d, s) = (dst_rest.as_mut_ptr(), src_rest.as_ptr());
        for off in (0..body).step_by(16) {
            // SAFETY: off + 16 <= body <= both lengths; d + off is 16-byte aligned.
            unsafe {
                let v = _mm_loadu_si128(s.add(off).cast());
                _mm_stream_si128(d.add(off).cast(), v);
            }
        }
        // The streamed lines must be visible before anyone reads them.
        _mm_sfence();
        dst_rest[body..].copy_from_slice(&src_rest[body..]);
    }
}
