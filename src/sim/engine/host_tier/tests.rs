//! The policy-level scenarios of the offloading spec (`/work/notes/vllm-offloading.md` §7, D–F;
//! their LRU and ARC rows were checked there against vLLM 0.33's own `CPUOffloadingManager`):
//! the manager's calls in the order vLLM's scheduler makes them, block size 4, one block per
//! chunk.

use super::manager::{ChunkKey, Key, Lookup, Manager, ReqId};
use super::TierPolicy;

// Chunk names: X1, X2, ... the first, second ... chunk of prompt X (end position 4, 8, ...).
const A1: Key = 0xa1;
const A2: Key = 0xa2;
const B1: Key = 0xb1;
const B2: Key = 0xb2;
const C1: Key = 0xc1;
/// R4's third chunk, after the A1 A2 it loads (end position 12).
const D3: Key = 0xd3;
const E1: Key = 0xe1;
const E2: Key = 0xe2;

fn chunk(key: Key) -> ChunkKey {
    ChunkKey {
        key,
        end: 4 * (key & 0xf) as u32,
    }
}

fn chunks(keys: &[Key]) -> Vec<ChunkKey> {
    keys.iter().map(|&k| chunk(k)).collect()
}

const R1: ReqId = 1;
const R2: ReqId = 2;
const R3: ReqId = 3;
const R4: ReqId = 4;
const R5: ReqId = 5;
const R6: ReqId = 6;

/// Stores `keys` for `req`; the chunks it evicted (panics when it refuses).
fn store(m: &mut Manager, req: ReqId, keys: &[Key]) -> Vec<Key> {
    let s = m.prepare_store(&chunks(keys), req).expect("the store fits");
    m.check().unwrap();
    s.evicted
}

fn held(m: &Manager, keys: &[Key]) -> Vec<Key> {
    keys.iter()
        .copied()
        .filter(|&k| m.lookup(k) != Lookup::Miss)
        .collect()
}

/// Scenario D up to step 3: R1 = A1 A2 stored in step 1, R2 = B1 B2 in step 2; R1's store is
/// reported in step 2, R2 finishes at its end and is signalled in step 3, whose output reports
/// R2's store.
fn scenario_d(policy: TierPolicy) -> Manager {
    let mut m = Manager::new(4, policy);
    store(&mut m, R1, &[A1, A2]);
    store(&mut m, R2, &[B1, B2]);
    m.complete_store(&[A1, A2]);
    m.on_request_finished(R2);
    m.complete_store(&[B1, B2]);
    m
}

#[test]
fn d_lru_ranks_tails_first_and_active_requests_by_their_start() {
    let m = scenario_d(TierPolicy::Lru);
    let rank = |k| m.lru_rank(k).unwrap();
    assert_eq!(
        [rank(A1), rank(A2), rank(B2), rank(B1)],
        [(1, -4), (1, -8), (3, 0), (4, 0)]
    );
    // D1: C1 arrives while R1 still runs: R1's tail goes.
    let mut d1 = m.clone();
    assert_eq!(store(&mut d1, R3, &[C1]), [A2]);
    // D2: after R1's finish is signalled (step 5), C1 in step 6 evicts B2.
    let mut d2 = m;
    d2.on_request_finished(R1);
    assert_eq!(
        (d2.lru_rank(A2), d2.lru_rank(A1)),
        (Some((5, 0)), Some((6, 0)))
    );
    assert_eq!(store(&mut d2, R3, &[C1]), [B2]);
    assert_eq!(held(&d2, &[A1, A2, B1, B2, C1]), [A1, A2, B1, C1]);
}

#[test]
fn d_arc_evicts_the_head_of_t1() {
    let m = scenario_d(TierPolicy::Arc);
    assert_eq!(m.arc_lists().unwrap().0[0], [A1, A2, B2, B1]);
    let mut d1 = m.clone();
    assert_eq!(store(&mut d1, R3, &[C1]), [A1]);
    let mut d2 = m;
    d2.on_request_finished(R1);
    assert_eq!(d2.arc_lists().unwrap().0[0], [B2, B1, A2, A1]);
    assert_eq!(store(&mut d2, R3, &[C1]), [B2]);
}

#[test]
fn e_a_full_tier_of_pending_chunks_refuses_then_evicts_once_they_are_ready() {
    for (policy, evicted, survivor) in [(TierPolicy::Lru, A2, A1), (TierPolicy::Arc, A1, A2)] {
        let mut m = Manager::new(2, policy);
        // Step 1: A1 A2 pending; B1 finds nothing free and nothing idle.
        store(&mut m, R1, &[A1, A2]);
        assert_eq!(m.prepare_store(&chunks(&[B1]), R2), None);
        // Step 2: still pending (reported at the end of step 2).
        assert_eq!(m.lookup(A1), Lookup::HitPending);
        assert_eq!(m.prepare_store(&chunks(&[B1]), R2), None);
        m.complete_store(&[A1, A2]);
        // Step 3: one of R1's chunks goes.
        assert_eq!(store(&mut m, R2, &[B1]), [evicted], "{policy:?}");
        assert_eq!(m.lookup(survivor), Lookup::Hit);
        assert_eq!(m.lookup(B1), Lookup::HitPending);
        // A pending chunk is offered again: ignored, nothing stored twice.
        assert_eq!(
            m.prepare_store(&chunks(&[B1]), R2).unwrap().keys,
            Vec::<Key>::new()
        );
    }
}

#[test]
fn pinned_chunks_are_not_evicted_and_offered_ones_are_protected() {
    let mut m = Manager::new(2, TierPolicy::Lru);
    store(&mut m, R1, &[A1, A2]);
    m.complete_store(&[A1, A2]);
    m.prepare_load(&chunks(&[A1]), R2);
    // Only A2 is idle, and R3 offers it: no room for B1 and B2.
    assert_eq!(m.prepare_store(&chunks(&[A2, B1]), R3), None);
    assert_eq!(held(&m, &[A1, A2, B1]), [A1, A2]);
    m.complete_load(&[A1]);
    // A2 protected, A1 idle again: A1 goes.
    assert_eq!(store(&mut m, R3, &[A2, B1]), [A1]);
    m.check().unwrap();
}

/// Scenario F's calls up to R5's finish.
fn scenario_f(policy: TierPolicy) -> Manager {
    let mut m = Manager::new(4, policy);
    store(&mut m, R1, &[A1, A2]);
    store(&mut m, R2, &[B1, B2]);
    m.complete_store(&[A1, A2]);
    m.on_request_finished(R2);
    m.complete_store(&[B1, B2]);
    m.on_request_finished(R1);
    assert_eq!(store(&mut m, R3, &[C1]), [B2], "{policy:?}");
    m.complete_store(&[C1]);
    m.on_request_finished(R3);
    assert_eq!((m.lookup(A1), m.lookup(A2)), (Lookup::Hit, Lookup::Hit));
    m.prepare_load(&chunks(&[A1, A2]), R4);
    m.complete_load(&[A1, A2]);
    assert_eq!(store(&mut m, R4, &[D3]), [B1], "{policy:?}");
    m.complete_store(&[D3]);
    m.on_request_finished(R4);
    let mut r5 = store(&mut m, R5, &[E1, E2]);
    r5.sort();
    assert_eq!(r5, [C1, D3], "{policy:?}");
    m.complete_store(&[E1, E2]);
    m.on_request_finished(R5);
    m
}

#[test]
fn f_arc_keeps_reused_chunks_in_t2_and_learns_from_a_ghost_hit() {
    let mut m = scenario_f(TierPolicy::Arc);
    let ([t1, t2, b1, b2], target) = m.arc_lists().unwrap();
    assert_eq!((t1, t2), (vec![E2, E1], vec![A2, A1]));
    assert_eq!((b1, b2, target), (vec![B2, B1, C1, D3], vec![], 0.0));
    assert_eq!(store(&mut m, R6, &[C1]), [E2]);
    let ([t1, _, b1, _], target) = m.arc_lists().unwrap();
    // The ghost hit moves C1 to B1's recent end (`_adapt_to_ghost_hit`), E2's eviction trims B1
    // to capacity from its old end (B2 goes), and only then does C1's insert leave B1.
    assert_eq!((t1, b1, target), (vec![E1, C1], vec![B1, D3, E2], 1.0));
}

#[test]
fn f_lru_evicts_the_oldest_finished_request_s_tail() {
    let mut m = scenario_f(TierPolicy::Lru);
    let mut by_rank = vec![A1, A2, E1, E2];
    by_rank.sort_by_key(|&k| m.lru_rank(k).unwrap());
    assert_eq!(by_rank, [A2, A1, E2, E1]);
    assert_eq!(store(&mut m, R6, &[C1]), [A2]);
}
