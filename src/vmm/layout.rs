//! How a pool is cut into physical chunks: every chunk a multiple of the allocation granularity,
//! all of the same size except possibly the last (which is smaller, still a multiple).

use super::VmmError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ChunkLayout {
    /// Bytes reserved and backed: the requested size rounded up to the granularity.
    pub size: usize,
    /// Bytes per chunk (the last one may be smaller).
    pub chunk: usize,
    pub granularity: usize,
}

fn round_up(n: usize, to: usize) -> Result<usize, VmmError> {
    n.checked_next_multiple_of(to).ok_or(VmmError::Overflow(n))
}

impl ChunkLayout {
    /// `chunk: None` means one chunk for the whole pool (fewest mappings, cheapest wake).
    pub fn new(size: usize, chunk: Option<usize>, granularity: usize) -> Result<Self, VmmError> {
        if size == 0 {
            return Err(VmmError::EmptyPool);
        }
        if chunk == Some(0) {
            return Err(VmmError::ZeroChunk);
        }
        let granularity = granularity.max(1);
        let size = round_up(size, granularity)?;
        let chunk = round_up(chunk.unwrap_or(size), granularity)?.min(size);
        Ok(ChunkLayout {
            size,
            chunk,
            granularity,
        })
    }

    pub fn count(&self) -> usize {
        self.size.div_ceil(self.chunk)
    }

    /// The chunks bytes `offset..offset + len` touch (none when `len` is 0); out of range is an
    /// error.
    pub fn chunks_of(&self, offset: usize, len: usize) -> Result<std::ops::Range<usize>, VmmError> {
        let size = self.size;
        match offset.checked_add(len) {
            Some(end) if end <= size && len == 0 => Ok(0..0),
            Some(end) if end <= size => Ok(offset / self.chunk..(end - 1) / self.chunk + 1),
            _ => Err(VmmError::OutOfRange { offset, len, size }),
        }
    }

    /// Byte offset and length of chunk `i`.
    pub fn range(&self, i: usize) -> (usize, usize) {
        let offset = i * self.chunk;
        (offset, self.chunk.min(self.size - offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ranges_name_the_chunks_they_touch() {
        let l = ChunkLayout::new(10 * 4096, Some(3 * 4096), 4096).unwrap();
        assert_eq!(l.chunks_of(0, 0).unwrap(), 0..0);
        assert_eq!(l.chunks_of(0, 1).unwrap(), 0..1);
        assert_eq!(l.chunks_of(3 * 4096 - 1, 2).unwrap(), 0..2);
        assert_eq!(l.chunks_of(9 * 4096, 4096).unwrap(), 3..4);
        assert_eq!(l.chunks_of(0, 10 * 4096).unwrap(), 0..4);
        assert!(matches!(
            l.chunks_of(10 * 4096, 1),
            Err(VmmError::OutOfRange { .. })
        ));
        assert!(matches!(
            l.chunks_of(usize::MAX, 2),
            Err(VmmError::OutOfRange { .. })
        ));
    }

    #[test]
    fn rejects_empty_pools_and_chunks() {
        assert!(matches!(
            ChunkLayout::new(0, None, 4096),
            Err(VmmError::EmptyPool)
        ));
        assert!(matches!(
            ChunkLayout::new(4096, Some(0), 4096),
            Err(VmmError::ZeroChunk)
        ));
        assert!(matches!(
            ChunkLayout::new(usize::MAX, None, 4096),
            Err(VmmError::Overflow(_))
        ));
    }

    proptest! {
        #[test]
        fn chunks_tile_the_pool(size in 1usize..1 << 30, chunk in proptest::option::of(1usize..1 << 28),
                                gran_log2 in 0u32..22) {
            let g = 1usize << gran_log2;
            let l = ChunkLayout::new(size, chunk, g).unwrap();
            prop_assert!(l.size >= size && l.size - size < g);
            let mut next = 0;
            for i in 0..l.count() {
                let (off, len) = l.range(i);
                prop_assert_eq!(off, next);
                prop_assert!(len > 0 && len % g == 0 && len <= l.chunk);
                next += len;
            }
            prop_assert_eq!(next, l.size);
        }
    }
}
