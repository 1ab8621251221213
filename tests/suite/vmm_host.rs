//! The CPU twin: state machine, address stability, rollback of failed wakes, tags and levels.
//! Memory accounting (resident pages, leaks) is in vmm_host_leak.rs, alone in its process.

use pagedkv::vmm::checksum::fill_random;
use pagedkv::vmm::host::{CpuPool, HostBacking, HostBuffer};
use pagedkv::vmm::memstat::regions_in;
use pagedkv::vmm::{
    Backing, ChunkLayout, PoolSet, PoolState, SleepLevel, SleepMode, SleepPool, VmmError,
    WakeFault, KV_CACHE, WEIGHTS,
};
use std::cell::Cell;

const KIB: usize = 1024;

fn random_pool(size: usize, chunk: usize, seed: u64) -> (CpuPool, Vec<u8>) {
    let mut pool = CpuPool::create(size, Some(chunk)).unwrap();
    // The oracle: an independent copy of what was written.
    let mut expected = vec![0u8; pool.size()];
    fill_random(&mut expected, seed, 0);
    pool.write(0, &expected).unwrap();
    (pool, expected)
}

fn contents(pool: &CpuPool) -> Vec<u8> {
    let mut out = vec![0u8; pool.size()];
    pool.read(0, &mut out).unwrap();
    out
}

#[test]
fn offload_cycles_keep_contents_and_address() {
    let (mut pool, expected) = random_pool(640 * KIB, 128 * KIB, 1);
    assert_eq!(pool.layout().count(), 5);
    let base = pool.ptr().unwrap();
    for cycle in 0..50 {
        let s = pool.sleep(SleepMode::Offload).unwrap();
        assert_eq!(s.bytes_copied, pool.size());
        assert_eq!(pool.state(), PoolState::AsleepOffloaded);
        assert_eq!(pool.base_address(), base);
        let w = pool.wake().unwrap();
        assert_eq!(w.bytes_restored, pool.size());
        assert_eq!(pool.ptr().unwrap(), base, "cycle {cycle}");
        assert!(contents(&pool) == expected, "data lost in cycle {cycle}");
    }
}

#[test]
fn kept_host_buffer_gives_the_same_contents() {
    let (mut pool, expected) = random_pool(256 * KIB, 64 * KIB, 2);
    pool.keep_host_buffer(true);
    for _ in 0..5 {
        pool.sleep(SleepMode::Offload).unwrap();
        pool.wake().unwrap();
        assert!(contents(&pool) == expected);
        // Change the contents between cycles: a stale buffer would bring old bytes back.
        pool.as_mut_slice().unwrap()[0] ^= 0xFF;
        pool.as_mut_slice().unwrap()[0] ^= 0xFF;
    }
    let mut changed = expected.clone();
    fill_random(&mut changed, 99, 0);
    pool.write(0, &changed).unwrap();
    pool.sleep(SleepMode::Offload).unwrap();
    pool.wake().unwrap();
    assert!(contents(&pool) == changed);
}

#[test]
fn discard_wakes_with_fresh_zeroed_memory() {
    let (mut pool, expected) = random_pool(256 * KIB, 32 * KIB, 3);
    assert!(expected.iter().any(|&b| b != 0));
    let base = pool.base_address();
    let s = pool.sleep(SleepMode::Discard).unwrap();
    assert_eq!(s.bytes_copied, 0);
    assert_eq!(pool.state(), PoolState::AsleepDiscarded);
    let w = pool.wake().unwrap();
    assert_eq!(w.bytes_restored, 0);
    assert_eq!(pool.ptr().unwrap(), base);
    // The old pages were given back: new memfd pages read as zeros.
    assert!(contents(&pool).iter().all(|&b| b == 0));
}

#[test]
fn the_reservation_is_kept_while_asleep() {
    let (mut pool, _) = random_pool(1024 * KIB, 256 * KIB, 4);
    pool.sleep(SleepMode::Discard).unwrap();
    let base = pool.base_address() as usize;
    // Ask the kernel for memory exactly where the pool lies: it must place it elsewhere.
    for offset in [0, 256 * KIB, 768 * KIB] {
        // SAFETY: a hint only (no MAP_FIXED); the mapping is unmapped right after.
        let p = unsafe {
            libc::mmap(
                (base + offset) as *mut libc::c_void,
                64 * KIB,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let at = p as usize;
        assert!(
            at + 64 * KIB <= base || at >= base + pool.size(),
            "the kernel handed out a page of the sleeping pool"
        );
        // SAFETY: unmapping what was just mapped.
        unsafe { libc::munmap(p, 64 * KIB) };
    }
    pool.wake().unwrap();
    assert_eq!(pool.ptr().unwrap() as usize, base);
}

#[test]
fn illegal_transitions_are_typed_errors() {
    let (mut pool, _) = random_pool(128 * KIB, 64 * KIB, 5);
    let mut buf = vec![0u8; 16];
    assert!(matches!(pool.wake(), Err(VmmError::NotAsleep)));
    assert!(matches!(
        pool.read(128 * KIB - 8, &mut buf),
        Err(VmmError::OutOfRange { .. })
    ));
    assert!(matches!(
        pool.write(usize::MAX, &buf),
        Err(VmmError::OutOfRange { .. })
    ));
    for (mode, state) in [
        (SleepMode::Offload, PoolState::AsleepOffloaded),
        (SleepMode::Discard, PoolState::AsleepDiscarded),
    ] {
        pool.sleep(mode).unwrap();
        for again in [SleepMode::Offload, SleepMode::Discard] {
            assert!(matches!(pool.sleep(again), Err(VmmError::AlreadyAsleep(s)) if s == state));
        }
        assert!(matches!(pool.read(0, &mut buf), Err(VmmError::Asleep(s)) if s == state));
        assert!(matches!(pool.write(0, &buf), Err(VmmError::Asleep(_))));
        assert!(matches!(pool.ptr(), Err(VmmError::Asleep(_))));
        assert!(matches!(pool.as_slice(), Err(VmmError::Asleep(_))));
        assert!(matches!(pool.as_mut_slice(), Err(VmmError::Asleep(_))));
        assert_eq!(pool.state(), state, "a refused call changed the state");
        pool.wake().unwrap();
        assert!(matches!(pool.wake(), Err(VmmError::NotAsleep)));
    }
}

#[test]
fn a_wake_that_fails_at_any_point_rolls_back_and_a_later_wake_restores() {
    let (mut pool, expected) = random_pool(512 * KIB, 64 * KIB, 6);
    let count = pool.layout().count();
    let base = pool.base_address();
    assert_eq!(mapped_chunks(pool.backing()), count);
    pool.sleep(SleepMode::Offload).unwrap();
    let faults = (0..count)
        .map(WakeFault::MapChunk)
        .chain([WakeFault::Restore]);
    for fault in faults {
        pool.inject_wake_fault(fault);
        match pool.wake() {
            Err(VmmError::Injected(f)) => assert_eq!(f, fault),
            other => panic!("expected the injected failure, got {other:?}"),
        }
        assert_eq!(pool.state(), PoolState::AsleepOffloaded);
        assert!(matches!(pool.ptr(), Err(VmmError::Asleep(_))));
        // Nothing stays mapped: every chunk of the reservation is inaccessible again.
        assert!(pool.backing().as_slice().is_none());
        assert_eq!(mapped_chunks(pool.backing()), 0, "after fault {fault:?}");
    }
    pool.wake().unwrap();
    assert_eq!(pool.ptr().unwrap(), base);
    assert!(contents(&pool) == expected);
}

/// Chunks of the pool mapped read-write, as the kernel sees them in /proc/self/maps.
fn mapped_chunks(b: &HostBacking) -> usize {
    regions_in(b.base_address(), b.layout().size)
        .iter()
        .filter(|r| r.perms.starts_with("rw"))
        .count()
}

/// A backing whose `map_chunk(k)` fails for real (an OS-level error), once armed; and whose
/// `unmap_chunk(k)` fails once, leaving the chunk mapped, as a failed `cuMemUnmap` does.
struct FlakyBacking {
    inner: HostBacking,
    fail_chunk: Cell<Option<usize>>,
    fail_unmap: Cell<Option<usize>>,
    fail_copy_out: bool,
}

impl Backing for FlakyBacking {
    type HostBuffer = HostBuffer;
    fn layout(&self) -> &ChunkLayout {
        self.inner.layout()
    }
    fn base_address(&self) -> u64 {
        self.inner.base_address()
    }
    fn map_chunk(&mut self, i: usize) -> Result<(), VmmError> {
        if self.fail_chunk.get() == Some(i) {
            self.fail_chunk.set(None);
            return Err(VmmError::Os {
                op: "memfd_create",
                source: std::io::Error::from_raw_os_error(libc::EMFILE),
            });
        }
        self.inner.map_chunk(i)
    }
    fn unmap_chunk(&mut self, i: usize) -> Result<(), VmmError> {
        if self.fail_unmap.get() == Some(i) {
            self.fail_unmap.set(None);
            return Err(VmmError::Os {
                op: "munmap",
                source: std::io::Error::from_raw_os_error(libc::EBUSY),
            });
        }
        self.inner.unmap_chunk(i)
    }
    fn synchronize(&self) -> Result<(), VmmError> {
        self.inner.synchronize()
    }
    fn alloc_host(&self, len: usize) -> Result<HostBuffer, VmmError> {
        self.inner.alloc_host(len)
    }
    fn copy_to_host(&self, offset: usize, dst: &mut [u8]) -> Result<(), VmmError> {
        if self.fail_copy_out {
            return Err(VmmError::Os {
                op: "copy",
                source: std::io::Error::from_raw_os_error(libc::EIO),
            });
        }
        self.inner.copy_to_host(offset, dst)
    }
    fn copy_from_host(&mut self, offset: usize, src: &[u8]) -> Result<(), VmmError> {
        self.inner.copy_from_host(offset, src)
    }
}

fn flaky_pool(size: usize, chunk: usize, seed: u64) -> (SleepPool<FlakyBacking>, Vec<u8>) {
    let inner = HostBacking::reserve(size, Some(chunk)).unwrap();
    let mut pool = SleepPool::new(FlakyBacking {
        inner,
        fail_chunk: Cell::new(None),
        fail_unmap: Cell::new(None),
        fail_copy_out: false,
    })
    .unwrap();
    let mut expected = vec![0u8; pool.size()];
    fill_random(&mut expected, seed, 0);
    pool.write(0, &expected).unwrap();
    (pool, expected)
}

#[test]
fn a_failed_offload_copy_in_a_set_leaves_every_pool_awake() {
    let (weights, w) = flaky_pool(128 * KIB, 64 * KIB, 50);
    let (mut kv, k) = flaky_pool(256 * KIB, 64 * KIB, 51);
    kv.backing_mut().unwrap().fail_copy_out = true;
    let mut set = PoolSet::new();
    set.insert(WEIGHTS, weights).unwrap();
    set.insert(KV_CACHE, kv).unwrap();
    let err = set.sleep(&[WEIGHTS, KV_CACHE]).unwrap_err();
    assert!(matches!(err.root(), VmmError::Os { op: "copy", .. }));
    for (t, data) in [(WEIGHTS, &w), (KV_CACHE, &k)] {
        let pool = set.get(t).unwrap();
        assert_eq!(pool.state(), PoolState::Awake, "{t}");
        // Read around the armed copy failure, straight from the mapping.
        assert!(
            pool.backing().inner.as_slice().unwrap() == data.as_slice(),
            "{t} changed"
        );
        assert_eq!(mapped_chunks(&pool.backing().inner), pool.layout().count());
    }
    set.get_mut(KV_CACHE)
        .unwrap()
        .backing_mut()
        .unwrap()
        .fail_copy_out = false;
    set.sleep(&[WEIGHTS, KV_CACHE]).unwrap();
    set.wake(None).unwrap();
    let mut got = vec![0u8; k.len()];
    set.get(KV_CACHE).unwrap().read(0, &mut got).unwrap();
    assert!(got == k);
}

#[test]
fn a_backing_error_during_wake_rolls_back_too() {
    let (mut pool, expected) = flaky_pool(256 * KIB, 32 * KIB, 7);
    pool.backing().fail_chunk.set(Some(5));
    pool.sleep(SleepMode::Offload).unwrap();
    assert!(pool.backing_mut().is_err(), "asleep pools refuse access");
    let err = pool.wake().unwrap_err();
    assert!(matches!(err, VmmError::Os { .. }), "{err:?}");
    assert_eq!(pool.state(), PoolState::AsleepOffloaded);
    assert_eq!(mapped_chunks(&pool.backing().inner), 0);
    pool.wake().unwrap();
    let mut got = vec![0u8; pool.size()];
    pool.read(0, &mut got).unwrap();
    assert!(got == expected);
}

#[test]
fn a_sleep_that_cannot_release_a_chunk_keeps_the_contents_and_a_wake_restores_them() {
    let (mut pool, expected) = flaky_pool(256 * KIB, 64 * KIB, 8);
    pool.backing().fail_unmap.set(Some(2));
    let err = pool.sleep(SleepMode::Offload).unwrap_err();
    assert!(
        matches!(&err, VmmError::NotReleased { chunks, .. } if chunks == &[2]),
        "{err}"
    );
    assert!(err.to_string().contains("munmap"), "{err}");
    // Asleep, the other chunks released, the contents readable in host memory.
    assert_eq!(pool.state(), PoolState::AsleepOffloaded);
    assert_eq!(mapped_chunks(&pool.backing().inner), 1);
    assert!(pool.host_copy() == Some(expected.as_slice()));
    pool.wake().unwrap();
    assert_eq!(mapped_chunks(&pool.backing().inner), 4);
    assert!(contents_of(&pool) == expected);
    // The same in a discard sleep: asleep, nothing to keep, a wake maps what is missing.
    pool.backing().fail_unmap.set(Some(0));
    assert!(pool.sleep(SleepMode::Discard).is_err());
    assert_eq!(pool.state(), PoolState::AsleepDiscarded);
    assert!(pool.host_copy().is_none());
    pool.wake().unwrap();
    assert_eq!(mapped_chunks(&pool.backing().inner), 4);
}

#[test]
fn a_wake_whose_rollback_cannot_unmap_stays_asleep_with_its_host_copy() {
    let (mut pool, expected) = flaky_pool(256 * KIB, 64 * KIB, 9);
    pool.sleep(SleepMode::Offload).unwrap();
    pool.backing().fail_chunk.set(Some(3));
    pool.backing().fail_unmap.set(Some(1));
    let err = pool.wake().unwrap_err();
    assert!(matches!(err, VmmError::Os { .. }), "{err:?}");
    assert_eq!(pool.state(), PoolState::AsleepOffloaded);
    // Chunk 1 could not be unmapped: it stays mapped, and the failure was recorded, not lost.
    assert_eq!(mapped_chunks(&pool.backing().inner), 1);
    let recorded = pagedkv::device::cuda::driver::teardown::take();
    assert!(
        recorded.iter().any(|e| e.to_string().contains("munmap")),
        "{recorded:?}"
    );
    assert!(pool.host_copy() == Some(expected.as_slice()));
    pool.wake().unwrap();
    assert!(contents_of(&pool) == expected);
}

fn contents_of(pool: &SleepPool<FlakyBacking>) -> Vec<u8> {
    let mut got = vec![0u8; pool.size()];
    pool.read(0, &mut got).unwrap();
    got
}

fn tagged_set(seed: u64) -> (PoolSet<HostBacking>, Vec<u8>, Vec<u8>) {
    let (weights, w) = random_pool(192 * KIB, 64 * KIB, seed);
    let (kv, k) = random_pool(320 * KIB, 64 * KIB, seed + 1);
    let mut set = PoolSet::new();
    set.insert(WEIGHTS, weights).unwrap();
    set.insert(KV_CACHE, kv).unwrap();
    (set, w, k)
}

#[test]
fn level_one_offloads_weights_and_discards_the_kv_cache() {
    let (mut set, w, _) = tagged_set(10);
    let bases: Vec<u64> = [WEIGHTS, KV_CACHE]
        .iter()
        .map(|t| set.get(t).unwrap().base_address())
        .collect();
    set.sleep_level(SleepLevel::One).unwrap();
    assert_eq!(
        set.get(WEIGHTS).unwrap().state(),
        PoolState::AsleepOffloaded
    );
    assert_eq!(
        set.get(KV_CACHE).unwrap().state(),
        PoolState::AsleepDiscarded
    );
    // Wake by tag: the weights first, the KV cache stays asleep.
    set.wake(Some(&[WEIGHTS])).unwrap();
    assert!(contents(set.get(WEIGHTS).unwrap()) == w);
    assert_eq!(
        set.get(KV_CACHE).unwrap().state(),
        PoolState::AsleepDiscarded
    );
    set.wake(Some(&[KV_CACHE])).unwrap();
    assert!(contents(set.get(KV_CACHE).unwrap()).iter().all(|&b| b == 0));
    for (t, b) in [WEIGHTS, KV_CACHE].iter().zip(bases) {
        assert_eq!(set.get(t).unwrap().ptr().unwrap(), b);
    }
}

#[test]
fn level_two_discards_both() {
    let (mut set, _, _) = tagged_set(20);
    assert!(matches!(
        SleepLevel::try_from(3),
        Err(VmmError::BadLevel(3))
    ));
    set.sleep_level(SleepLevel::try_from(2).unwrap()).unwrap();
    for t in [WEIGHTS, KV_CACHE] {
        assert_eq!(set.get(t).unwrap().state(), PoolState::AsleepDiscarded);
    }
    set.wake(None).unwrap();
    for t in [WEIGHTS, KV_CACHE] {
        assert!(contents(set.get(t).unwrap()).iter().all(|&b| b == 0));
    }
}

#[test]
fn set_refuses_bad_requests_without_changing_anything() {
    let (mut set, w, k) = tagged_set(30);
    let (extra, _) = random_pool(64 * KIB, 64 * KIB, 1);
    assert!(matches!(
        set.insert(WEIGHTS, extra),
        Err(VmmError::DuplicateTag(_))
    ));
    assert!(matches!(
        set.wake(Some(&["nope"])),
        Err(VmmError::UnknownTag(_))
    ));
    assert!(matches!(
        set.wake(None).unwrap_err().root(),
        VmmError::NotAsleep
    ));
    // Put only the KV cache to sleep by hand: a set-wide sleep is then refused as a whole.
    set.get_mut(KV_CACHE)
        .unwrap()
        .sleep(SleepMode::Offload)
        .unwrap();
    let err = set.sleep(&[WEIGHTS]).unwrap_err();
    assert!(matches!(err.root(), VmmError::AlreadyAsleep(_)));
    assert!(err.to_string().contains(KV_CACHE));
    assert_eq!(set.get(WEIGHTS).unwrap().state(), PoolState::Awake);
    // Waking everything is refused too (the weights are awake); waking the KV cache works.
    assert!(matches!(
        set.wake(None).unwrap_err().root(),
        VmmError::NotAsleep
    ));
    assert_eq!(
        set.get(KV_CACHE).unwrap().state(),
        PoolState::AsleepOffloaded
    );
    set.wake(Some(&[KV_CACHE])).unwrap();
    assert!(contents(set.get(WEIGHTS).unwrap()) == w);
    assert!(contents(set.get(KV_CACHE).unwrap()) == k);
}

#[test]
fn a_failed_set_wake_leaves_every_pool_asleep_and_intact() {
    let (mut set, w, k) = tagged_set(40);
    set.sleep(&[WEIGHTS, KV_CACHE]).unwrap();
    for fault in [WakeFault::MapChunk(3), WakeFault::Restore] {
        // The second pool fails after the first is mapped (and, for Restore, restored).
        set.get_mut(KV_CACHE).unwrap().inject_wake_fault(fault);
        let err = set.wake(None).unwrap_err();
        assert!(matches!(err.root(), VmmError::Injected(f) if *f == fault));
        assert_eq!(
            set.get(KV_CACHE).unwrap().state(),
            PoolState::AsleepOffloaded
        );
        assert_eq!(mapped_chunks(set.get(KV_CACHE).unwrap().backing()), 0);
        match fault {
            // Mapping failures roll the whole set back.
            WakeFault::MapChunk(_) => {
                assert_eq!(
                    set.get(WEIGHTS).unwrap().state(),
                    PoolState::AsleepOffloaded
                );
                assert_eq!(mapped_chunks(set.get(WEIGHTS).unwrap().backing()), 0);
            }
            // A restore failure comes after the weights were restored: they stay awake, whole.
            WakeFault::Restore => {
                assert!(contents(set.get(WEIGHTS).unwrap()) == w);
                set.get_mut(WEIGHTS)
                    .unwrap()
                    .sleep(SleepMode::Offload)
                    .unwrap();
            }
        }
    }
    set.wake(None).unwrap();
    assert!(contents(set.get(WEIGHTS).unwrap()) == w);
    assert!(contents(set.get(KV_CACHE).unwrap()) == k);
}
