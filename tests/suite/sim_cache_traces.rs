//! Trace files in libCacheSim's formats, written here byte by byte from the format descriptions,
//! read back and replayed: the same id sequence gives the same keys and the same hits in every
//! format.

use pagedkv::sim::cache::{next_uses, simulate, Policy};
use pagedkv::workload::cache_trace::{
    read_key_trace, read_oracle, write_oracle, TraceFormat, TraceReadOptions,
};
use pagedkv::workload::key_gen::{sequence, zipf};
use pagedkv::workload::keys::KeyTraceError;
use std::io::Read;
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

/// Hands out at most `step` bytes per read, as a pipe may.
struct Trickle<'a> {
    bytes: &'a [u8],
    step: usize,
}

impl Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.step).min(self.bytes.len());
        buf[..n].copy_from_slice(&self.bytes[..n]);
        self.bytes = &self.bytes[n..];
        Ok(n)
    }
}

#[test]
fn oracle_records_are_read_across_blocks_and_short_reads() {
    // More records than one read block holds; small ids (numbered without hashing) and large.
    let ids: Vec<u64> = zipf(5000, 0.8, 40_000, 9)
        .keys()
        .iter()
        .enumerate()
        .map(|(t, &k)| match t % 3 {
            0 => k as u64,
            _ => ((k as u64) << 33) | 7,
        })
        .collect();
    let bytes = oracle_bytes(&ids);
    let want = sequence(&ids).unwrap();
    for step in [1 << 20, 1000, 7] {
        let got = read_oracle(
            Trickle {
                bytes: &bytes,
                step,
            },
            "t",
            usize::MAX,
        )
        .unwrap();
        assert_eq!(got, want, "reads of {step} bytes");
    }
    let head = read_oracle(
        Trickle {
            bytes: &bytes,
            step: 4096,
        },
        "t",
        20_000,
    )
    .unwrap();
    assert_eq!(head.keys(), &want.keys()[..20_000]);
    // A record cut short at the end of the stream is an error, unless the limit stops before it.
    let cut = &bytes[..bytes.len() - 5];
    let e = read_oracle(
        Trickle {
            bytes: cut,
            step: 999,
        },
        "t",
        usize::MAX,
    )
    .unwrap_err();
    assert!(
        matches!(e, KeyTraceError::PartialRecord { len, .. } if len == cut.len() as u64),
        "{e}"
    );
    assert_eq!(
        read_oracle(
            Trickle {
                bytes: cut,
                step: 999
            },
            "t",
            100
        )
        .unwrap()
        .len(),
        100
    );
}

#[test]
fn written_oracle_traces_hold_every_field_and_replay_the_same() {
    let trace = zipf(300, 0.9, 5000, 8);
    let keys = trace.keys();
    let mut bytes = Vec::new();
    write_oracle(&mut bytes, keys, &next_uses(keys, trace.key_space())).unwrap();
    assert_eq!(bytes.len(), 24 * keys.len());
    let field = |rec: &[u8], at: usize, len: usize| {
        let mut b = [0u8; 8];
        b[..len].copy_from_slice(&rec[at..at + len]);
        u64::from_le_bytes(b)
    };
    for (t, rec) in bytes.chunks_exact(24).enumerate() {
        let next = keys[t + 1..]
            .iter()
            .position(|&x| x == keys[t])
            .map_or(-1i64, |d| (t + 1 + d) as i64);
        assert_eq!(field(rec, 0, 4), t as u64, "time of {t}");
        assert_eq!(field(rec, 4, 8), keys[t] as u64, "id of {t}");
        assert_eq!(field(rec, 12, 4), 1, "size of {t}");
        assert_eq!(field(rec, 16, 8) as i64, next, "next access of {t}");
    }
    let back = read_oracle(bytes.as_slice(), "t", usize::MAX).unwrap();
    let ids: Vec<u64> = keys.iter().map(|&k| k as u64).collect();
    assert_eq!(back, sequence(&ids).unwrap());
    for p in [Policy::Lru, Policy::Lfu, Policy::Sieve, Policy::Opt] {
        assert_eq!(
            simulate(p, &back, 40).unwrap(),
            simulate(p, &trace, 40).unwrap()
        );
    }
}
