//! Host buffers with a chosen page size: anonymous mmap, advised `MADV_HUGEPAGE` (transparent huge
//! pages, 2 MiB on x86-64) or `MADV_NOHUGEPAGE` (4 KiB pages) before first touch, so the TLB's share
//! in the cost of small scattered blocks can be measured both ways; and `Vec`s advised for huge
//! pages ([`huge_vec`]), for the pools of the attention problems.

use memmap2::{Advice, MmapMut};
use rayon::prelude::*;
use serde::Serialize;

/// Alignment of huge pages on x86-64 and aarch64 (4 KiB base pages).
const HUGE_PAGE: usize = 2 << 20;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pages {
    /// Transparent huge pages requested with madvise.
    Huge,
    /// Huge pages refused with madvise: base pages only.
    Small,
}

impl Pages {
    pub fn label(self) -> &'static str {
        match self {
            Pages::Huge => "thp",
            Pages::Small => "4k",
        }
    }
}

/// The kernel's THP mode (`always`, `madvise` or `never`), the bracketed word of
/// /sys/kernel/mm/transparent_hugepage/enabled; `None` when the file is absent.
pub fn thp_mode() -> Option<String> {
    let text = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    Some(text[start + 1..end].to_string())
}

/// Whether `MADV_HUGEPAGE` can give huge pages here.
pub fn thp_available() -> bool {
    matches!(thp_mode().as_deref(), Some("always" | "madvise"))
}

/// `n` copies of `value` in memory advised `MADV_HUGEPAGE` before its first touch, as an engine
/// that advises its KV pools gets it (a plain `Vec` gets 4 KiB pages unless the kernel's THP mode
/// is `always`); written on every core. The 2 MiB-aligned interior is advised; without THP the
/// advice fails quietly and the pages are small. (A `Vec` from the allocator, not a mapping of
/// ours, so memmap2 cannot advise it: libc's madvise does.)
pub fn huge_vec<T: Copy + Send + Sync>(n: usize, value: T) -> Vec<T> {
    let mut v = Vec::with_capacity(n);
    let start = v.as_mut_ptr() as usize;
    let (lo, hi) = (
        start.next_multiple_of(HUGE_PAGE),
        (start + n * std::mem::size_of::<T>()) / HUGE_PAGE * HUGE_PAGE,
    );
    if hi > lo {
        // SAFETY: advice on whole pages of our own untouched allocation; it changes no contents.
        unsafe { libc::madvise(lo as *mut libc::c_void, hi - lo, libc::MADV_HUGEPAGE) };
    }
    v.spare_capacity_mut()[..n]
        .par_chunks_mut(1 << 16)
        .for_each(|c| c.iter_mut().for_each(|x| _ = x.write(value)));
    // SAFETY: the first n elements were just written.
    unsafe { v.set_len(n) };
    v
}

/// A zero-filled anonymous mapping with a 2 MiB-aligned window of `len` bytes; unmapped on drop.
pub struct HostBuf {
    map: MmapMut,
    /// Where the aligned window starts in the mapping.
    offset: usize,
    len: usize,
}

impl HostBuf {
    /// Maps `len` bytes advised for `pages`. Pages are not touched: the first write places them.
    pub fn new(len: usize, pages: Pages) -> std::io::Result<HostBuf> {
        // One huge page more than asked, so that an aligned window of `len` bytes fits.
        let map = MmapMut::map_anon(len.max(1) + HUGE_PAGE)?;
        let offset = (HUGE_PAGE - map.as_ptr() as usize % HUGE_PAGE) % HUGE_PAGE;
        map.advise(match pages {
            Pages::Huge => Advice::HugePage,
            Pages::Small => Advice::NoHugePage,
        })?;
        Ok(HostBuf { map, offset, len })
    }

    fn bytes(&self) -> &[u8] {
        &self.map[self.offset..self.offset + self.len]
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_slice<T: bytemuck::Pod>(&self) -> &[T] {
        bytemuck::cast_slice(self.bytes())
    }

    pub fn as_mut_slice<T: bytemuck::Pod>(&mut self) -> &mut [T] {
        bytemuck::cast_slice_mut(&mut self.map[self.offset..self.offset + self.len])
    }

    /// The share of this buffer's resident memory backed by huge pages (`AnonHugePages / Rss` of
    /// the mappings it lies in, from /proc/self/smaps); `None` when smaps cannot be read.
    pub fn huge_page_share(&self) -> Option<f64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let lo = self.bytes().as_ptr() as usize;
        let hi = lo + self.len;
        let (mut inside, mut rss_kb, mut huge_kb) = (false, 0u64, 0u64);
        for line in smaps.lines() {
            let mut words = line.split_whitespace();
            let first = words.next().unwrap_or("");
            if let Some((a, b)) = first.split_once('-') {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = a < hi && lo < b;
                    continue;
                }
            }
            if !inside {
                continue;
            }
            let kb = || words.clone().next().and_then(|w| w.parse::<u64>().ok());
            match first {
                "Rss:" => rss_kb += kb().unwrap_or(0),
                "AnonHugePages:" => huge_kb += kb().unwrap_or(0),
                _ => {}
            }
        }
        (rss_kb > 0).then(|| huge_kb as f64 / rss_kb as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_are_aligned_zeroed_and_writable() {
        for pages in [Pages::Huge, Pages::Small] {
            if pages == Pages::Huge && !thp_available() {
                continue;
            }
            let mut b = HostBuf::new(4 << 20, pages).unwrap();
            assert_eq!(b.as_slice::<u8>().as_ptr() as usize % HUGE_PAGE, 0);
            assert!(b.as_slice::<u32>().iter().all(|&x| x == 0));
            b.as_mut_slice::<u32>()
                .iter_mut()
                .enumerate()
                .for_each(|(i, x)| *x = i as u32);
            assert_eq!(b.as_slice::<u32>()[12345], 12345);
            let share = b.huge_page_share().unwrap();
            assert!((0.0..=1.0).contains(&share));
            if pages == Pages::Small {
                assert_eq!(share, 0.0);
            }
        }
    }

    #[test]
    fn huge_vecs_hold_their_value_in_huge_pages_where_offered() {
        let v = huge_vec(3 << 20, 7u32);
        assert_eq!(v.len(), 3 << 20);
        assert!(v.iter().all(|&x| x == 7));
        assert!(huge_vec(0, 1u8).is_empty());
    }

    #[test]
    fn reads_the_thp_mode() {
        if let Some(mode) = thp_mode() {
            assert!(
                ["always", "madvise", "never"].contains(&mode.as_str()),
                "{mode}"
            );
        }
    }
}
