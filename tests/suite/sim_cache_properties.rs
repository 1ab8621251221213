//! Properties every correct simulator must show: FIFO's anomaly on Belady's sequence, the stack
//! property of LRU and OPT, one-pass curves equal to per-capacity runs, OPT never beaten, and
//! LRU/FIFO hit ratios on Zipf next to Che's approximation (theory computed here).

use clap::ValueEnum;
use pagedkv::sim::cache::{hit_sequence, lru_curve, opt_curve, simulate, Policy};
use pagedkv::workload::key_gen::{
    drifting_hot_set, loop_over, scan_into_hot_set, sequence, uniform, zipf,
};
use pagedkv::workload::keys::KeyTrace;

fn hits(p: Policy, t: &KeyTrace, cap: usize) -> u64 {
    simulate(p, t, cap).unwrap().hits
}

#[test]
fn fifo_shows_beladys_anomaly_on_the_textbook_sequence() {
    // Belady, Nelson and Shedler (1969): 9 faults with 3 frames, 10 with 4.
    let t = sequence(&[1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5]).unwrap();
    let misses = |cap| simulate(Policy::Fifo, &t, cap).unwrap().misses();
    assert_eq!((misses(3), misses(4)), (9, 10));
    // The stack algorithms cannot show it.
    for p in [Policy::Lru, Policy::Opt] {
        let m = |cap| simulate(p, &t, cap).unwrap().misses();
        assert!(m(4) <= m(3), "{p}");
    }
}

fn random_traces() -> Vec<KeyTrace> {
    let mut v = Vec::new();
    for seed in 0..5u64 {
        v.push(uniform(20 + 10 * seed as u32, 3000, seed));
        v.push(zipf(200, 0.7 + 0.1 * seed as f64, 3000, 50 + seed));
    }
    v
}

#[test]
fn lru_and_opt_have_the_stack_property() {
    for t in random_traces() {
        for p in [Policy::Lru, Policy::Opt] {
            let mut smaller = hit_sequence(p, &t, 1).unwrap();
            for cap in 2..=t.key_space() + 1 {
                let larger = hit_sequence(p, &t, cap).unwrap();
                // Every hit of the smaller cache is a hit of the larger one (inclusion), so the
                // hit ratio never falls as the capacity grows.
                assert!(
                    smaller.iter().zip(&larger).all(|(&s, &l)| !s || l),
                    "{p} capacity {cap}"
                );
                smaller = larger;
            }
        }
    }
}

#[test]
fn one_pass_curves_equal_per_capacity_runs() {
    let mut traces = random_traces();
    traces.push(loop_over(30, 2000));
    traces.push(scan_into_hot_set(300, 30, 0.9, 3000, 1));
    traces.push(drifting_hot_set(300, 30, 0.8, 3000, 2));
    for t in traces {
        let lru = lru_curve(t.keys(), t.key_space());
        let opt = opt_curve(t.keys(), t.key_space(), usize::MAX);
        // Cut at a smaller capacity, the curve is the same up to the cut.
        let cut = t.key_space() / 3;
        let short = opt_curve(t.keys(), t.key_space(), cut);
        for cap in 1..=cut {
            assert_eq!(
                short.hits(cap),
                opt.hits(cap),
                "opt cut at {cut}, capacity {cap}"
            );
        }
        for cap in 1..=t.key_space() + 2 {
            assert_eq!(lru.hits(cap), hits(Policy::Lru, &t, cap), "lru at {cap}");
            assert_eq!(opt.hits(cap), hits(Policy::Opt, &t, cap), "opt at {cap}");
        }
        assert_eq!(lru.hits(0), 0);
    }
}

#[test]
fn opt_is_never_beaten() {
    let mut traces = random_traces();
    traces.push(loop_over(50, 3000));
    traces.push(scan_into_hot_set(500, 50, 1.0, 4000, 3));
    traces.push(drifting_hot_set(500, 50, 0.9, 4000, 4));
    traces.push(sequence(&[1, 2, 3, 4, 1, 2, 5, 1, 2, 3, 4, 5]).unwrap());
    for t in &traces {
        for cap in [1, 2, 3, 4, 7, 16, 33, 64, 150] {
            let best = hits(Policy::Opt, t, cap);
            for &p in Policy::value_variants() {
                let h = hits(p, t, cap);
                assert!(h <= best, "{p} at {cap}: {h} hits > OPT's {best}");
            }
        }
    }
}

#[test]
fn a_loop_longer_than_the_cache_defeats_lru_fifo_and_clock() {
    // Each key comes back after n - 1 others, and these policies keep only the last c < n.
    let t = loop_over(10, 1000);
    for p in [Policy::Lru, Policy::Fifo, Policy::Clock] {
        assert_eq!(hits(p, &t, 9), 0, "{p}");
        assert_eq!(hits(p, &t, 10), 990, "{p}");
    }
    // OPT keeps c - 1 keys of each lap: its hit count grows with c.
    assert!(hits(Policy::Opt, &t, 9) > hits(Policy::Opt, &t, 5));
}

/// Zipf(alpha) probabilities of `n` ranks.
fn zipf_probs(n: usize, alpha: f64) -> Vec<f64> {
    let w: Vec<f64> = (1..=n).map(|r| (r as f64).powf(-alpha)).collect();
    let s: f64 = w.iter().sum();
    w.into_iter().map(|x| x / s).collect()
}

/// Solves `occupancy(T) = cap` for the characteristic time T by bisection.
fn characteristic_time(cap: f64, occupancy: impl Fn(f64) -> f64) -> f64 {
    let (mut lo, mut hi) = (0.0, 1.0);
    while occupancy(hi) < cap {
        hi *= 2.0;
    }
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if occupancy(mid) < cap {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

#[test]
fn lru_and_fifo_on_zipf_match_ches_approximation() {
    let (n, alpha, cap) = (2000usize, 0.9, 200usize);
    let p = zipf_probs(n, alpha);
    // Che et al. (2002) for LRU: a key stays while requested within T.
    let t = characteristic_time(cap as f64, |t| p.iter().map(|q| 1.0 - (-q * t).exp()).sum());
    let lru_theory: f64 = p.iter().map(|q| q * (1.0 - (-q * t).exp())).sum();
    // FIFO (and random) under independent requests: hit probability qT / (1 + qT).
    let t = characteristic_time(cap as f64, |t| {
        p.iter().map(|q| q * t / (1.0 + q * t)).sum()
    });
    let fifo_theory: f64 = p.iter().map(|q| q * (q * t / (1.0 + q * t))).sum();
    let trace = zipf(n as u32, alpha, 400_000, 11);
    let lru = simulate(Policy::Lru, &trace, cap).unwrap().hit_ratio();
    let fifo = simulate(Policy::Fifo, &trace, cap).unwrap().hit_ratio();
    assert!((lru - lru_theory).abs() < 0.01, "lru {lru} vs {lru_theory}");
    assert!(
        (fifo - fifo_theory).abs() < 0.01,
        "fifo {fifo} vs {fifo_theory}"
    );
    assert!(lru > fifo);
}

#[test]
fn capacity_beyond_the_key_space_misses_only_first_requests() {
    for t in random_traces().iter().take(4) {
        let distinct = t.distinct() as u64;
        for &p in Policy::value_variants() {
            let h = simulate(p, t, t.key_space() + 5).unwrap();
            assert_eq!(h.misses(), distinct, "{p}");
        }
    }
}
