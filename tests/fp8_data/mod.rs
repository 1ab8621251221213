//! CUDA's own fp8 conversions as recorded in tests/data/fp8/ by scripts/record-fp8-reference
//! (cuda_fp8.h's host code path, CUDA 13.0). Shared by tests/suite/fp8_reference.rs (the Rust
//! conversions) and tests/suite/emu_fp8.rs (the emulator's).

#![allow(dead_code)] // each test file uses part of it

use pagedkv::kv::Fp8Format;
use std::path::PathBuf;

/// The data under the package root; relative to the working directory where the build's root is
/// gone (scripts/gpu-check runs the bundled test binaries from the repository root of a copy).
pub fn data_dir() -> PathBuf {
    let built = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/fp8");
    if built.is_dir() {
        built
    } else {
        PathBuf::from("tests/data/fp8")
    }
}

/// fp8 code -> f16 bits -> f32 bits.
pub struct DecodeRow {
    pub format: Fp8Format,
    pub code: u8,
    pub half: u16,
    pub float: u32,
}

/// f32 bits -> the e4m3 and e5m2 codes.
pub struct EncodeRow {
    pub input: u32,
    pub e4m3: u8,
    pub e5m2: u8,
}

impl EncodeRow {
    pub fn code(&self, format: Fp8Format) -> u8 {
        match format {
            Fp8Format::E4M3 => self.e4m3,
            Fp8Format::E5M2 => self.e5m2,
        }
    }
}

/// `float(code) * scale`, all bit patterns.
pub struct ScaledDecodeRow {
    pub format: Fp8Format,
    pub scale: u32,
    pub code: u8,
    pub float: u32,
}

/// `fp8(x / scale)` rows (scale bits, row) and `float(code) * scale` rows.
pub struct Scaled {
    pub encode: Vec<(u32, EncodeRow)>,
    pub decode: Vec<ScaledDecodeRow>,
}

impl Scaled {
    /// The scales, in the order they first appear.
    pub fn scales(&self) -> Vec<u32> {
        let mut scales: Vec<u32> = Vec::new();
        for &(s, _) in &self.encode {
            if !scales.contains(&s) {
                scales.push(s);
            }
        }
        scales
    }

    /// The encode rows recorded at `scale` (its bits).
    pub fn encode_at(&self, scale: u32) -> Vec<&EncodeRow> {
        let rows = self.encode.iter().filter(|(s, _)| *s == scale);
        rows.map(|(_, r)| r).collect()
    }

    /// The decode rows of `format` recorded at `scale` (its bits), in code order.
    pub fn decode_at(&self, scale: u32, format: Fp8Format) -> Vec<&ScaledDecodeRow> {
        let rows = self.decode.iter();
        rows.filter(|r| r.scale == scale && r.format == format)
            .collect()
    }
}

fn lines(file: &str) -> Vec<Vec<String>> {
    let path = data_dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (scripts/record-fp8-reference writes it)",
            path.display()
        )
    });
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

fn hex<T: TryFrom<u32>>(s: &str) -> T {
    let v = u32::from_str_radix(s, 16).unwrap_or_else(|e| panic!("{s:?}: {e}"));
    T::try_from(v).unwrap_or_else(|_| panic!("{s:?} out of range"))
}

fn format(s: &str) -> Fp8Format {
    match s {
        "e4m3" => Fp8Format::E4M3,
        "e5m2" => Fp8Format::E5M2,
        _ => panic!("unknown fp8 format {s:?}"),
    }
}

fn decode_row(f: &[String]) -> DecodeRow {
    DecodeRow {
        format: format(&f[0]),
        code: hex(&f[1]),
        half: hex(&f[2]),
        float: hex(&f[3]),
    }
}

fn encode_row(f: &[String]) -> EncodeRow {
    EncodeRow {
        input: hex(&f[0]),
        e4m3: hex(&f[1]),
        e5m2: hex(&f[2]),
    }
}

/// All 256 codes of each format, e4m3 first, in code order.
pub fn decode_rows() -> Vec<DecodeRow> {
    let rows: Vec<DecodeRow> = lines("decode.txt").iter().map(|f| decode_row(f)).collect();
    let expected = Fp8Format::ALL
        .iter()
        .flat_map(|&f| (0..=255u8).map(move |c| (f, c)));
    assert!(
        rows.iter().map(|r| (r.format, r.code)).eq(expected),
        "decode.txt must list every code of e4m3 then e5m2"
    );
    rows
}

/// The sweep of floats, in ascending order of their bits.
pub fn encode_rows() -> Vec<EncodeRow> {
    let rows: Vec<EncodeRow> = lines("encode.txt").iter().map(|f| encode_row(f)).collect();
    assert!(rows.len() > 5000, "encode.txt has only {} rows", rows.len());
    assert!(rows.windows(2).all(|w| w[0].input < w[1].input));
    rows
}

pub fn scaled() -> Scaled {
    let mut scaled = Scaled {
        encode: Vec::new(),
        decode: Vec::new(),
    };
    for f in lines("scaled.txt") {
        match f[0].as_str() {
            "enc" => scaled.encode.push((hex(&f[1]), encode_row(&f[2..]))),
            "dec" => scaled.decode.push(ScaledDecodeRow {
                format: format(&f[1]),
                scale: hex(&f[2]),
                code: hex(&f[3]),
                float: hex(&f[4]),
            }),
            other => panic!("scaled.txt: unknown row kind {other:?}"),
        }
    }
    assert_eq!(scaled.scales().len(), 3);
    assert_eq!(scaled.decode.len(), 3 * 2 * 256);
    scaled
}
