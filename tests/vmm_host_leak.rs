//! The CPU twin gives memory back: 1,000 offload cycles with the contents intact every time, and
//! resident shared memory, open descriptors and mappings back at their starting values after each
//! wake–sleep pair. One test in its own process, so no other test's pools disturb the counts.

use pagedkv::vmm::checksum::{checksum, fill_random};
use pagedkv::vmm::host::CpuPool;
use pagedkv::vmm::memstat::{open_fds, regions_in, resident};
use pagedkv::vmm::{SleepMode, WakeFault};

/// How the pool's address range is mapped, from /proc/self/maps: the number of memfd chunk
/// mappings and of inaccessible (reserved) regions. Panics if any byte of the range is unmapped,
/// that is, if the reservation was lost.
fn range_mapping(base: u64, size: usize) -> (usize, usize) {
    let regions = regions_in(base, size);
    let mut next = base;
    let (mut memfd, mut reserved) = (0, 0);
    for r in &regions {
        assert_eq!(
            r.start.max(base),
            next,
            "hole in the reservation: {regions:?}"
        );
        next = r.end;
        match r.perms.as_str() {
            "rw-s" if r.path.contains("memfd:pagedkv-pool") => memfd += 1,
            "---p" if r.path.is_empty() => reserved += 1,
            _ => panic!("unexpected mapping in the pool: {r:?}"),
        }
    }
    assert!(
        next >= base + size as u64,
        "reservation ends early: {regions:?}"
    );
    (memfd, reserved)
}

#[test]
fn thousand_cycles_without_leak_or_loss() {
    const SIZE: usize = 256 << 10;
    const CHUNK: usize = 64 << 10;
    let mut pool = CpuPool::create(SIZE, Some(CHUNK)).unwrap();
    fill_random(pool.as_mut_slice().unwrap(), 11, 0);
    let sum = checksum(pool.as_slice().unwrap());
    let base = pool.base_address();

    // Warm-up cycle: the first offload allocates (and the allocator may keep) its host buffer.
    pool.sleep(SleepMode::Offload).unwrap();
    pool.wake().unwrap();
    let awake = resident().unwrap();
    assert!(
        awake.shmem >= SIZE as u64,
        "the pool's memfd pages should be resident: {awake:?}"
    );
    pool.sleep(SleepMode::Offload).unwrap();
    let asleep = resident().unwrap();
    let fds_asleep = open_fds();
    let chunks = SIZE / CHUNK;
    assert_eq!(
        awake.shmem - asleep.shmem,
        SIZE as u64,
        "sleep frees exactly the pool's pages"
    );
    pool.wake().unwrap();
    let fds_awake = open_fds();
    assert_eq!(fds_awake - fds_asleep, chunks, "one memfd per chunk");

    for cycle in 0..1000 {
        // Every 100th wake first fails half-way and rolls back: that must not leak either.
        let mode = if cycle % 2 == 0 {
            SleepMode::Offload
        } else {
            SleepMode::Discard
        };
        pool.sleep(mode).unwrap();
        assert_eq!(resident().unwrap().shmem, asleep.shmem, "cycle {cycle}");
        assert_eq!(open_fds(), fds_asleep);
        assert_eq!(range_mapping(base, SIZE).0, 0, "a chunk stayed mapped");
        if cycle % 100 == 0 {
            pool.inject_wake_fault(WakeFault::MapChunk(2));
            pool.wake().unwrap_err();
            assert_eq!(resident().unwrap().shmem, asleep.shmem, "rollback {cycle}");
            assert_eq!(open_fds(), fds_asleep);
            assert_eq!(range_mapping(base, SIZE).0, 0, "a chunk stayed mapped");
        }
        pool.wake().unwrap();
        assert_eq!(pool.ptr().unwrap(), base);
        assert_eq!(resident().unwrap().shmem, awake.shmem, "cycle {cycle}");
        assert_eq!(open_fds(), fds_awake);
        assert_eq!(range_mapping(base, SIZE), (chunks, 0));
        if mode == SleepMode::Offload {
            assert_eq!(checksum(pool.as_slice().unwrap()), sum, "cycle {cycle}");
        } else {
            // Fresh memory after a discard: write the data back for the next offload cycle.
            assert!(pool.as_slice().unwrap().iter().all(|&b| b == 0));
            fill_random(pool.as_mut_slice().unwrap(), 11, 0);
        }
    }
}
