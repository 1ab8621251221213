//! Trace files in libCacheSim's formats, written here byte by byte from the format descriptions,
//! read back and replayed: the same id sequence gives the same keys and the same hits in every
//! format.

use pagedkv::sim::cache::{simulate, Policy};
use pagedkv::workload::cache_trace::{read_key_trace, TraceFormat, TraceReadOptions};
use pagedkv::workload::key_gen::{sequence, zipf};
use pagedkv::workload::keys::KeyTraceError;
use std::path::PathBuf;

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("pagedkv-cache-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `struct { u32 clock_time; u64 obj_id; u32 obj_size; i64 next_access_vtime; }`, little-endian.
fn oracle_bytes(ids: &[u64]) -> Vec<u8> {
    let mut out = Vec::with_capacity(24 * ids.len());
    for (t, &id) in ids.iter().enumerate() {
        let next = ids[t + 1..]
            .iter()
            .position(|&x| x == id)
            .map_or(-1i64, |d| (t + 1 + d) as i64);
        out.extend_from_slice(&(1000 + t as u32).to_le_bytes());
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&4096u32.to_le_bytes());
        out.extend_from_slice(&next.to_le_bytes());
    }
    out
}

fn ids() -> Vec<u64> {
    // Sparse, large ids, with a Zipf popularity so that policies differ.
    zipf(300, 0.9, 5000, 8)
        .keys()
        .iter()
        .map(|&k| (k as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 3)
        .collect()
}

#[test]
fn the_same_ids_replay_identically_in_every_format() {
    let dir = temp_dir("formats");
    let ids = ids();
    let oracle = dir.join("t.oracleGeneral.bin");
    std::fs::write(&oracle, oracle_bytes(&ids)).unwrap();
    let txt = dir.join("t.txt");
    let lines: Vec<String> = ids.iter().map(|i| i.to_string()).collect();
    std::fs::write(&txt, lines.join("\n") + "\n").unwrap();
    let csv = dir.join("t.csv");
    let rows: Vec<String> = ids
        .iter()
        .enumerate()
        .map(|(t, i)| format!("{t},{i},4096"))
        .collect();
    std::fs::write(&csv, format!("time,obj_id,size\n{}\n", rows.join("\n"))).unwrap();

    let want = sequence(&ids).unwrap();
    let opts = TraceReadOptions::default();
    for (path, format) in [
        (&oracle, TraceFormat::Oracle),
        (&txt, TraceFormat::Txt),
        (&csv, TraceFormat::Csv),
    ] {
        assert_eq!(TraceFormat::from_path(path).unwrap(), format);
        let got = read_key_trace(path, format, &opts, usize::MAX).unwrap();
        assert_eq!(got, want, "{format:?}");
        for p in [Policy::Lru, Policy::Arc, Policy::S3Fifo] {
            assert_eq!(
                simulate(p, &got, 40).unwrap(),
                simulate(p, &want, 40).unwrap()
            );
        }
        let head = read_key_trace(path, format, &opts, 100).unwrap();
        assert_eq!(head.keys(), &want.keys()[..100], "{format:?} limit");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn broken_files_are_errors_not_panics() {
    let dir = temp_dir("broken");
    let opts = TraceReadOptions::default();
    let read = |name: &str, bytes: &[u8], f| {
        let p = dir.join(name);
        std::fs::write(&p, bytes).unwrap();
        read_key_trace(&p, f, &opts, usize::MAX)
    };
    let mut partial = oracle_bytes(&[1, 2, 3]);
    partial.pop();
    assert!(matches!(
        read("p.bin", &partial, TraceFormat::Oracle),
        Err(KeyTraceError::PartialRecord { len: 71, .. })
    ));
    let mut zst = vec![0x28, 0xb5, 0x2f, 0xfd];
    zst.resize(48, 0);
    let e = read("z.bin", &zst, TraceFormat::Oracle).unwrap_err();
    assert!(e.to_string().contains("zstd"), "{e}");
    assert!(matches!(
        read("e.bin", &[], TraceFormat::Oracle),
        Err(KeyTraceError::EmptyTrace(_))
    ));
    assert!(matches!(
        read("e.txt", b"\n\n", TraceFormat::Txt),
        Err(KeyTraceError::EmptyTrace(_))
    ));
    assert!(matches!(
        read("e.csv", b"", TraceFormat::Csv),
        Err(KeyTraceError::EmptyTrace(_))
    ));
    assert!(matches!(
        read("b.txt", &[0xff, 0xfe, b'\n'], TraceFormat::Txt),
        Err(KeyTraceError::Parse { line: 1, .. })
    ));
    let missing = read_key_trace(&dir.join("nope.csv"), TraceFormat::Csv, &opts, 10);
    assert!(matches!(missing, Err(KeyTraceError::Io { .. })));
    std::fs::remove_dir_all(dir).unwrap();
}
