//! Property tests of the block allocator: long random sequences of operations (at least 10,000
//! per case) with every invariant checked after each one — no block both free and referenced,
//! refcounts equal to the number of holders, fill counts consistent — out-of-blocks errors that
//! change nothing, and no leak once everything is freed.

use pagedkv::kv::{AllocError, BlockAllocator, SeqId};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    New,
    Append { seq: usize, n: usize },
    Fork { seq: usize },
    Free { seq: usize },
    Raw { n: usize },
    RetainRaw { which: usize },
    ReleaseRaw { which: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => Just(Op::New),
        8 => (any::<usize>(), 0usize..40).prop_map(|(seq, n)| Op::Append { seq, n }),
        2 => any::<usize>().prop_map(|seq| Op::Fork { seq }),
        3 => any::<usize>().prop_map(|seq| Op::Free { seq }),
        1 => (0usize..4).prop_map(|n| Op::Raw { n }),
        1 => any::<usize>().prop_map(|which| Op::RetainRaw { which }),
        1 => any::<usize>().prop_map(|which| Op::ReleaseRaw { which }),
    ]
}

fn run(num_blocks: usize, block_size: usize, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut a = BlockAllocator::new(num_blocks, block_size);
    let mut live: Vec<SeqId> = Vec::new();
    let mut raw: Vec<u32> = Vec::new();
    for op in ops {
        let before = a.clone();
        let result: Result<(), AllocError> = match *op {
            Op::New => {
                live.push(a.new_sequence());
                Ok(())
            }
            Op::Append { seq, n } if !live.is_empty() => {
                let s = live[seq % live.len()];
                let len = a.len(s).unwrap();
                a.append_tokens(s, n).map(|w| {
                    assert_eq!(w.len(), n);
                    assert_eq!(a.len(s).unwrap(), len + n);
                    // Every write lands in the sequence's own, unshared block.
                    for (i, x) in w.iter().enumerate() {
                        let t = len + i;
                        let block = a.blocks(s).unwrap()[t / block_size];
                        assert_eq!(x.slot, block as usize * block_size + t % block_size);
                    }
                })
            }
            Op::Fork { seq } if !live.is_empty() => {
                let parent = live[seq % live.len()];
                let child = a.fork(parent)?;
                prop_assert_eq!(a.blocks(child).unwrap(), a.blocks(parent).unwrap());
                live.push(child);
                Ok(())
            }
            Op::Free { seq } if !live.is_empty() => {
                let s = live.swap_remove(seq % live.len());
                a.free_sequence(s)
            }
            Op::Raw { n } => a.allocate_blocks(n).map(|got| raw.extend(got)),
            Op::RetainRaw { which } if !raw.is_empty() => {
                let b = raw[which % raw.len()];
                a.retain_block(b).map(|_| raw.push(b))
            }
            Op::ReleaseRaw { which } if !raw.is_empty() => {
                let b = raw.swap_remove(which % raw.len());
                a.release_block(b)
            }
            _ => Ok(()),
        };
        match result {
            Ok(()) => {}
            Err(AllocError::OutOfBlocks { .. }) => {
                prop_assert!(a == before, "a failed operation changed the allocator")
            }
            Err(e) => return Err(TestCaseError::fail(format!("unexpected error {e}"))),
        }
        a.check_invariants().map_err(TestCaseError::fail)?;
        let u = a.usage();
        prop_assert_eq!(u.free_blocks + u.used_blocks, num_blocks);
        prop_assert_eq!(u.filled_slots + u.wasted_slots, u.used_blocks * block_size);
    }
    for s in live {
        a.free_sequence(s).unwrap();
    }
    for b in raw {
        a.release_block(b).unwrap();
    }
    prop_assert_eq!(a.free_blocks(), num_blocks, "blocks leaked");
    a.check_invariants().map_err(TestCaseError::fail)?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]

    #[test]
    fn ten_thousand_random_operations_keep_every_invariant(
        num_blocks in 1usize..200,
        log_bs in 0u32..=8,
        ops in prop::collection::vec(op(), 10_000),
    ) {
        run(num_blocks, 1 << log_bs, &ops)?;
    }
}
