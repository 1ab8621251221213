//! Cache operations on the CPU, the reference for `kernels/cache_ops.cu`:
//! writing new tokens' K/V through a slot mapping, and copying whole blocks (copy-on-write, swap).

use crate::kv::{KvElem, KvSpec};

pub use crate::launch::cache_ops::{check_pairs, check_pairs_within, check_slots, CacheOpError};

/// Writes token `i`'s K/V (`new` is `[num_tokens, num_kv_heads, head_dim]`) into slot `slots[i]`
/// of `pool`; a negative slot means "skip this token" (padding).
pub fn write_slots<T: KvElem>(
    spec: &KvSpec,
    pool: &mut [T],
    new: &[T],
    slots: &[i64],
) -> Result<(), CacheOpError> {
    let hd = spec.head_dim;
    for_each_row(spec, pool.len(), new.len(), slots, |dst, src, _| {
        pool[dst..dst + hd].copy_from_slice(&new[src..src + hd]);
    })
}

/// [`write_slots`] into an fp8 pool (`KV` an fp8 element) from new K/V of `T`, quantised with the
/// KV head's scale as vLLM does: code = fp8(x / scale[head]) (`kernels/cache_ops.cu`'s
/// `quantize_kv_slots_*`).
pub fn write_slots_quantised<T: KvElem, KV: KvElem>(
    spec: &KvSpec,
    pool: &mut [KV],
    new: &[T],
    scale: &[f32],
    slots: &[i64],
) -> Result<(), CacheOpError> {
    assert_eq!(scale.len(), spec.num_kv_heads, "one scale per KV head");
    let hd = spec.head_dim;
    for_each_row(spec, pool.len(), new.len(), slots, |dst, src, head| {
        for (to, from) in pool[dst..dst + hd].iter_mut().zip(&new[src..src + hd]) {
            *to = KV::from_f32(from.to_f32() / scale[head]);
        }
    })
}

/// The slot writes' checks and walk: `row(dst, src, head)` for every KV head of every token with
/// a slot, `dst` the row's first element in the pool, `src` in `new`.
fn for_each_row(
    spec: &KvSpec,
    pool_len: usize,
    new_len: usize,
    slots: &[i64],
    mut row: impl FnMut(usize, usize, usize),
) -> Result<(), CacheOpError> {
    let want = slots.len() * spec.elems_per_token();
    if new_len != want {
        return Err(CacheOpError::Shape {
            got: new_len,
            want,
            tokens: slots.len(),
        });
    }
    check_slots(spec, pool_len / spec.elems_per_block(), slots)?;
    for (token, &slot) in slots.iter().enumerate() {
        if slot < 0 {
            continue;
        }
        let (block, offset) = (
            slot as usize / spec.block_size,
            slot as usize % spec.block_size,
        );
        for head in 0..spec.num_kv_heads {
            let src = (token * spec.num_kv_heads + head) * spec.head_dim;
            row(spec.elem_offset(block, head, offset, 0), src, head);
        }
    }
    Ok(())
}

/// Copies whole blocks: block `pairs[i][0]` of `src` into block `pairs[i][1]` of `dst`.
pub fn copy_blocks<T: Copy>(
    block_elems: usize,
    src: &[T],
    dst: &mut [T],
    pairs: &[[i32; 2]],
) -> Result<(), CacheOpError> {
    check_pairs(pairs, src.len() / block_elems, dst.len() / block_elems)?;
    for &[s, d] in pairs {
        let (s, d) = (s as usize * block_elems, d as usize * block_elems);
        dst[d..d + block_elems].copy_from_slice(&src[s..s + block_elems]);
    }
    Ok(())
}

/// Copies blocks within one pool (copy-on-write); a pair may not copy a block onto itself.
pub fn copy_blocks_within<T: Copy>(
    block_elems: usize,
    pool: &mut [T],
    pairs: &[[i32; 2]],
) -> Result<(), CacheOpError> {
    check_pairs_within(pairs, pool.len() / block_elems)?;
    for &[s, d] in pairs {
        let (s, d) = (s as usize * block_elems, d as usize * block_elems);
        pool.copy_within(s..s + block_elems, d);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{BlockAllocator, Dtype};

    #[test]
    fn writes_land_where_the_allocator_said_and_skips_negative_slots() {
        let spec = KvSpec::new(2, 16, 4, Dtype::F32).unwrap();
        let mut alloc = BlockAllocator::new(3, 4);
        let s = alloc.new_sequence();
        let mut slots: Vec<i64> = alloc
            .append_tokens(s, 6)
            .unwrap()
            .iter()
            .map(|a| a.slot as i64)
            .collect();
        slots.insert(2, -1);
        let new: Vec<f32> = (0..slots.len() * 32).map(|i| i as f32).collect();
        let mut pool = vec![f32::NAN; 3 * spec.elems_per_block()];
        write_slots(&spec, &mut pool, &new, &slots).unwrap();
        let blocks = alloc.blocks(s).unwrap();
        for (i, &slot) in slots.iter().enumerate().filter(|(_, &s)| s >= 0) {
            let t = if i > 2 { i - 1 } else { i };
            let (b, off) = (blocks[t / 4] as usize, t % 4);
            assert_eq!(slot as usize, b * 4 + off);
            for h in 0..2 {
                let at = spec.elem_offset(b, h, off, 5);
                assert_eq!(pool[at], new[(i * 2 + h) * 16 + 5]);
            }
        }
        // 6 tokens written, 6 of 12 slots still NaN.
        assert_eq!(pool.iter().filter(|x| x.is_nan()).count(), 6 * 32);
        assert!(matches!(
            write_slots(&spec, &mut pool, &new[..32], &[12]),
            Err(CacheOpError::SlotOutOfRange { slot: 12, .. })
        ));
    }

    #[test]
    fn copies_blocks_and_rejects_out_of_range_pairs() {
        let mut pool: Vec<u32> = (0..12).collect();
        copy_blocks_within(4, &mut pool, &[[2, 0]]).unwrap();
        assert_eq!(&pool[..4], &[8, 9, 10, 11]);
        let mut dst = vec![0u32; 8];
        copy_blocks(4, &pool, &mut dst, &[[1, 1]]).unwrap();
        assert_eq!(dst, vec![0, 0, 0, 0, 4, 5, 6, 7]);
        assert!(copy_blocks(4, &pool, &mut dst, &[[3, 0]]).is_err());
        assert!(copy_blocks(4, &pool, &mut dst, &[[0, -1]]).is_err());
    }

    #[test]
    fn a_slot_or_destination_block_written_twice_is_refused_before_anything_is_written() {
        let spec = KvSpec::new(1, 16, 4, Dtype::F32).unwrap();
        let mut pool = vec![f32::NAN; 2 * spec.elems_per_block()];
        let new = vec![1f32; 3 * 16];
        assert_eq!(
            write_slots(&spec, &mut pool, &new, &[5, -1, 5]),
            Err(CacheOpError::DuplicateSlot {
                first: 0,
                second: 2,
                slot: 5
            })
        );
        assert!(pool.iter().all(|x| x.is_nan()), "nothing written");
        // Skipped slots (-1) may repeat.
        write_slots(&spec, &mut pool, &new, &[-1, 3, -1]).unwrap();

        let src: Vec<u32> = (0..12).collect();
        let mut dst = vec![0u32; 12];
        assert_eq!(
            copy_blocks(4, &src, &mut dst, &[[0, 1], [2, 0], [1, 1]]),
            Err(CacheOpError::DuplicateDestination {
                first: 0,
                second: 2,
                block: 1
            })
        );
        assert!(dst.iter().all(|&x| x == 0), "nothing copied");
        // One source copied to two places is fine.
        copy_blocks(4, &src, &mut dst, &[[2, 0], [2, 1]]).unwrap();
        // Within one pool, a block both written and read depends on the order of the copies.
        let mut pool: Vec<u32> = (0..12).collect();
        assert_eq!(
            copy_blocks_within(4, &mut pool, &[[0, 1], [1, 2]]),
            Err(CacheOpError::DestinationIsSource {
                writer: 0,
                reader: 1,
                block: 1
            })
        );
    }
}
