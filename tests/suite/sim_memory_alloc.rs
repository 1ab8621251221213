//! Allocation simulator: hand-worked fits, the contiguous allocator against a byte-map model, and
//! invariants over random replays (never over-committed, every token of capacity accounted for).

use clap::ValueEnum;
use pagedkv::sim::alloc::{
    compare, policies, replay, replay_observed, ContiguousMemory, Fit, NoHole, Policy,
    ReplayConfig, ReplayError, SyntheticRequests,
};
use pagedkv::workload::azure::Request;
use proptest::prelude::*;

fn req(arrival_s: f64, prompt: u32, output: u32) -> Request {
    Request {
        arrival_s,
        prompt_tokens: prompt,
        output_tokens: output,
    }
}

/// Capacity 10: take [0,2) [2,4) [4,10), free the first and the last: holes of 2 at 0 and 6 at 4.
/// Then ask for 2 and 6. First fit puts the 2 at 0 and the 6 at 4. Worst fit puts the 2 in the
/// largest hole (at 4), leaving holes of 2 and 4: the 6 fails with 6 units free in total.
#[test]
fn worst_fit_fails_where_first_fit_does_not() {
    let run = |fit| {
        let mut m = ContiguousMemory::new(10, fit);
        let spans: Vec<u64> = [2, 2, 6].iter().map(|&s| m.allocate(s).unwrap()).collect();
        assert_eq!(spans, [0, 2, 4]);
        m.release(0, 2);
        m.release(4, 6);
        (m.allocate(2), m.allocate(6))
    };
    assert_eq!(run(Fit::First), (Ok(0), Ok(4)));
    assert_eq!(run(Fit::Best), (Ok(0), Ok(4)));
    assert_eq!(run(Fit::Worst), (Ok(4), Err(NoHole::Fragmented)));
}

/// The same sequence through the replay, in tokens with one-second steps. Capacity 100.
/// a: 20 tokens (19 prompt + 1 output) leaves at step 2; b: 20 tokens (1 + 19) lives to step 20;
/// c: 60 tokens (59 + 1) leaves at step 2. At step 5, d (20) and then e (60) arrive: holes are
/// [0,20) and [40,100). Worst fit puts d at 40 and must reject e although 60 tokens are free.
#[test]
fn replay_rejects_for_fragmentation_only_under_worst_fit() {
    let reqs = [
        req(0.0, 19, 1),
        req(0.1, 1, 19),
        req(0.2, 59, 1),
        req(5.0, 19, 1),
        req(5.5, 59, 1),
    ];
    let cfg = ReplayConfig {
        capacity: 100,
        step_s: 1.0,
        check: true,
    };
    for &fit in Fit::value_variants() {
        let row = replay(&reqs, Policy::Contiguous { fit }, &cfg).unwrap();
        let expect = u64::from(fit == Fit::Worst);
        assert_eq!(
            (row.rejected, row.rejected_fragmentation, row.served),
            (expect, expect, 5 - expect),
            "{fit:?}"
        );
    }
    // Paging never needs a hole: everyone is served.
    let row = replay(&reqs, Policy::Paged { page_size: 4 }, &cfg).unwrap();
    assert_eq!((row.rejected, row.preempted, row.served), (0, 0, 5));
    // Reserving 60 tokens per request, whatever its length: only one reservation fits in 100.
    let row = replay(
        &reqs,
        Policy::Reserve {
            fit: Fit::First,
            max_len: 60,
        },
        &cfg,
    )
    .unwrap();
    // a takes [0,60); b and c find 40 free: rejected. At step 5 a is gone: d takes [0,60) and e
    // finds 40 free again: rejected. None of these is fragmentation: 40 free in total < 60.
    assert_eq!(
        (row.served, row.rejected, row.rejected_fragmentation),
        (2, 3, 0)
    );
}

#[test]
fn bad_configurations_are_errors() {
    let reqs = [req(0.0, 1, 1)];
    let cfg = |capacity, step_s| ReplayConfig {
        capacity,
        step_s,
        check: false,
    };
    let paged = Policy::Paged { page_size: 16 };
    assert_eq!(
        replay(&reqs, paged, &cfg(0, 1.0)),
        Err(ReplayError::ZeroCapacity)
    );
    assert!(replay(&reqs, paged, &cfg(100, 1.0)).is_err());
    assert!(replay(&reqs, paged, &cfg(128, 0.0)).is_err());
    assert!(replay(&reqs, Policy::Paged { page_size: 0 }, &cfg(128, 1.0)).is_err());
    let backwards = [req(1.0, 1, 1), req(0.5, 1, 1)];
    assert!(matches!(
        replay(&backwards, paged, &cfg(128, 1.0)),
        Err(ReplayError::BadArrival { index: 1, .. })
    ));
}

/// A byte map: the obvious model of a contiguous memory.
struct ByteMap {
    used: Vec<bool>,
    fit: Fit,
}

impl ByteMap {
    fn holes(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.used.len() {
            if self.used[i] {
                i += 1;
                continue;
            }
            let start = i;
            while i < self.used.len() && !self.used[i] {
                i += 1;
            }
            out.push((start as u64, (i - start) as u64));
        }
        out
    }

    fn allocate(&mut self, size: u64) -> Option<u64> {
        let fits = self.holes().into_iter().filter(|h| h.1 >= size);
        let pick = match self.fit {
            Fit::First => fits.min_by_key(|h| h.0),
            Fit::Best => fits.min_by_key(|h| (h.1, h.0)),
            Fit::Worst => fits.min_by_key(|h| (u64::MAX - h.1, h.0)),
        }?;
        for b in &mut self.used[pick.0 as usize..(pick.0 + size) as usize] {
            *b = true;
        }
        Some(pick.0)
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Same choices as the byte-map model for every fit, and the same holes after every step.
    #[test]
    fn contiguous_memory_matches_a_byte_map(
        ops in prop::collection::vec(
            (1u64..24, any::<bool>(), any::<prop::sample::Index>()),
            1..120,
        ),
        fit_i in 0usize..3,
    ) {
        let fit = Fit::value_variants()[fit_i];
        let cap = 64u64;
        let mut m = ContiguousMemory::new(cap, fit);
        let mut model = ByteMap { used: vec![false; cap as usize], fit };
        let mut live: Vec<(u64, u64)> = Vec::new();
        for (size, free_one, which) in ops {
            if free_one && !live.is_empty() {
                let (s, l) = live.swap_remove(which.index(live.len()));
                m.release(s, l);
                for b in &mut model.used[s as usize..(s + l) as usize] { *b = false; }
            } else {
                let got = m.allocate(size);
                let want = model.allocate(size);
                prop_assert_eq!(got.ok(), want);
                if let Ok(s) = got { live.push((s, size)); }
            }
            prop_assert_eq!(m.holes().collect::<Vec<_>>(), model.holes());
            let free = model.used.iter().filter(|b| !**b).count() as u64;
            prop_assert_eq!(m.free(), free);
        }
    }

    /// Random replays on a small memory under every policy: memory never over-committed, data +
    /// reserved + internal + free = capacity at every step, the holders' free count equals the
    /// memory's own, the allocators' bookkeeping holds, every request ends exactly one way.
    #[test]
    fn random_replays_account_for_every_token(seed in 0u64..1000, cap_pages in 4u64..40) {
        let reqs = SyntheticRequests {
            requests: 60,
            rate_per_s: 3.0,
            prompt_mean: 40.0,
            prompt_sigma: 1.0,
            output_mean: 30.0,
            seed,
        }
        .generate()
        .unwrap();
        let cfg = ReplayConfig { capacity: cap_pages * 64, step_s: 0.1, check: true };
        for p in policies(&[1, 4, 16, 64], 128) {
            let mut bad = None;
            let row = replay_observed(&reqs, p, &cfg, |s| {
                let total = s.data + s.reserved + s.internal + s.free;
                if total != cfg.capacity || s.free != s.free_reported {
                    bad.get_or_insert(*s);
                }
            })
            .unwrap();
            prop_assert!(bad.is_none(), "{:?}: {:?}", p, bad);
            prop_assert_eq!(row.served + row.rejected + row.preempted, row.requests);
            prop_assert!(row.rejected_fragmentation + row.too_long <= row.rejected);
            let shares = row.data_share + row.reserved_share + row.internal_share + row.free_share;
            prop_assert!((shares - 1.0).abs() < 1e-9, "{:?}: shares sum to {}", p, shares);
            if let Policy::Paged { page_size } = p {
                prop_assert_eq!(row.rejected_fragmentation, 0);
                prop_assert_eq!(row.external_fragmentation, 0.0);
                if page_size == 1 {
                    // Token-sized pages: nothing allocated ahead, nothing wasted.
                    prop_assert_eq!(row.reserved_share + row.internal_share, 0.0);
                }
            } else {
                prop_assert_eq!(row.preempted, 0);
            }
        }
    }
}

/// With memory to spare nobody is turned away, and since every policy writes the same tokens at
/// the same steps, the data share is the same under each; only allocation ahead differs.
#[test]
fn with_ample_memory_every_policy_holds_the_same_data() {
    let reqs = SyntheticRequests {
        requests: 300,
        rate_per_s: 2.0,
        prompt_mean: 300.0,
        prompt_sigma: 0.5,
        output_mean: 50.0,
        seed: 3,
    }
    .generate()
    .unwrap();
    let cfg = ReplayConfig {
        capacity: 1 << 22,
        step_s: 0.05,
        check: false,
    };
    let rows = compare(&reqs, &policies(&[1, 16, 256], 1 << 16), &cfg).unwrap();
    let data = rows[0].data_share;
    assert!(data > 0.0);
    for r in &rows {
        assert_eq!(
            (r.served, r.rejected, r.preempted),
            (300, 0, 0),
            "{}",
            r.policy
        );
        assert!((r.data_share - data).abs() < 1e-12, "{}", r.policy);
    }
    // Exact-size contiguous spans hold only data and tokens still to come; paging at 1 only data.
    assert_eq!(rows[0].internal_share, 0.0);
    let paged1 = rows.iter().find(|r| r.page_size == Some(1)).unwrap();
    assert!((paged1.free_share + data - 1.0).abs() < 1e-9);
}

/// One request of 10 prompt + 5 output tokens in 96 tokens of memory, sampled right after its
/// admission and after its last token. Reserving 60: 10 data, 5 reserved for the output, 45 never
/// written, 36 free. Pages of 16: one page, 10 data, 5 reserved, 1 never written, 80 free. Pages
/// of 4: three pages at first (2 slots reserved), four at the end (1 slot never written).
#[test]
fn samples_split_memory_by_hand() {
    let reqs = [req(0.0, 10, 5)];
    let cfg = ReplayConfig {
        capacity: 96,
        step_s: 1.0,
        check: true,
    };
    let first_and_last = |p| {
        let mut seen = Vec::new();
        replay_observed(&reqs, p, &cfg, |s| seen.push(*s)).unwrap();
        let split = |s: &pagedkv::sim::alloc::Sample| (s.data, s.reserved, s.internal, s.free);
        (split(&seen[0]), split(&seen[5]), seen.len())
    };
    let reserve = Policy::Reserve {
        fit: Fit::Best,
        max_len: 60,
    };
    // Samples at steps 0 (admitted) .. 5 (last token written), then 6 (left: all free).
    assert_eq!(
        first_and_last(reserve),
        ((10, 5, 45, 36), (15, 0, 45, 36), 7)
    );
    assert_eq!(
        first_and_last(Policy::Paged { page_size: 16 }),
        ((10, 5, 1, 80), (15, 0, 1, 80), 7)
    );
    assert_eq!(
        first_and_last(Policy::Paged { page_size: 4 }),
        ((10, 2, 0, 84), (15, 0, 1, 80), 7)
    );
}
