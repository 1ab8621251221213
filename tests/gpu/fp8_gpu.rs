//! common.cuh's fp8 conversions on a real GPU (kernels/fp8_convert.cu; the cvt instructions on
//! sm_89+, cuda_fp8.hpp's integer code on sm_80) against CUDA's host conversions recorded in
//! tests/data/fp8/, bit for bit, every row but NaNs (see `same_f32`): the device path of the three
//! (GPU, emulator, Rust).
//! Ignored by a plain `cargo test`; scripts/gpu-check runs it with `--include-ignored` on a GPU.

use crate::fp8_data;

use cudarc::driver::LaunchConfig;
use fp8_data::{decode_rows, encode_rows, scaled};
use pagedkv::device::cuda::CudaDevice;
use pagedkv::kv::Fp8Format;

const SEGMENT: usize = 16;
const THREADS: u32 = 64;

fn gpu() -> CudaDevice {
    CudaDevice::open(0).unwrap_or_else(|e| panic!("a GPU test run without a GPU: {e}"))
}

fn config(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: ((n / SEGMENT).div_ceil(THREADS as usize) as u32, 1, 1),
        block_dim: (THREADS, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Bit for bit, except that a NaN only has to be a NaN: CUDA's host path returns one canonical NaN
/// (f16 0x7fff, fp8 0x7f), and nothing documents that the sm_89+ cvt instructions return the same
/// sign and payload. A NaN where a number is due, or a number where a NaN is due, still fails.
fn same_f32(got: u32, want: u32) -> bool {
    got == want || (f32::from_bits(got).is_nan() && f32::from_bits(want).is_nan())
}

fn same_f16(got: u32, want: u16) -> bool {
    let nan = |h: u32| h <= 0xffff && h & 0x7c00 == 0x7c00 && h & 0x03ff != 0;
    got == u32::from(want) || (nan(got) && nan(u32::from(want)))
}

fn same_code(format: Fp8Format, got: u8, want: u8) -> bool {
    got == want || (format.decode(got).is_nan() && format.decode(want).is_nan())
}

/// Per code: (f16 bits, f32 bits one by one, f32 bits through unpack16_fp8).
fn device_decode(dev: &CudaDevice, format: Fp8Format, scale: f32) -> Vec<(u32, u32, u32)> {
    let codes: Vec<u8> = (0..=255).collect();
    let n = codes.len();
    let st = &dev.stream;
    let d_codes = st.upload("codes", &codes).unwrap();
    let half = st.upload("f16 out", &vec![u32::MAX; n]).unwrap();
    let one = st.upload("f32 out", &vec![f32::NAN; n]).unwrap();
    let vec = st.upload("unpacked out", &vec![f32::NAN; n]).unwrap();
    let (e5m2, n_i32) = (i32::from(format == Fp8Format::E5M2), n as i32);
    let f = dev.function("fp8_convert", "fp8_convert_decode").unwrap();
    let mut b = f.launch(st);
    b.arg(&d_codes).arg(&half).arg(&one).arg(&vec);
    b.arg(&e5m2).arg(&scale).arg(&n_i32);
    // SAFETY: every buffer holds n elements of the kernel's types; n is a multiple of 16.
    unsafe { b.launch(config(n)) }.unwrap();
    let (half, one, vec) = (
        st.download(&half).unwrap(),
        st.download(&one).unwrap(),
        st.download(&vec).unwrap(),
    );
    (0..n)
        .map(|i| (half[i], one[i].to_bits(), vec[i].to_bits()))
        .collect()
}

/// Per input: (code one by one, code through pack16_fp8).
fn device_encode(dev: &CudaDevice, format: Fp8Format, inputs: &[f32], scale: f32) -> Vec<(u8, u8)> {
    let mut x = inputs.to_vec();
    x.resize(inputs.len().next_multiple_of(SEGMENT), 0.0);
    let n = x.len();
    let st = &dev.stream;
    let d_x = st.upload("inputs", &x).unwrap();
    let one = st.upload("codes out", &vec![0x55u8; n]).unwrap();
    let packed = st.upload("packed out", &vec![0xaau8; n]).unwrap();
    let (e5m2, n_i32) = (i32::from(format == Fp8Format::E5M2), n as i32);
    let f = dev.function("fp8_convert", "fp8_convert_encode").unwrap();
    let mut b = f.launch(st);
    b.arg(&d_x).arg(&one).arg(&packed);
    b.arg(&e5m2).arg(&scale).arg(&n_i32);
    // SAFETY: every buffer holds n elements of the kernel's types; n is a multiple of 16.
    unsafe { b.launch(config(n)) }.unwrap();
    let (one, packed) = (st.download(&one).unwrap(), st.download(&packed).unwrap());
    one.into_iter().zip(packed).take(inputs.len()).collect()
}

#[test]
#[ignore = "needs a CUDA GPU: scripts/gpu-check runs it (cargo test -- --include-ignored)"]
fn gpu_fp8_conversions_match_cuda_bit_for_bit() {
    let dev = gpu();
    println!(
        "fp8 on {} (sm_{})",
        dev.info.name,
        dev.info.compute_capability.replace('.', "")
    );
    let mut wrong = Vec::new();
    let decode = decode_rows();
    for format in Fp8Format::ALL {
        let rows = decode.iter().filter(|r| r.format == format);
        for (r, got) in rows.zip(device_decode(&dev, format, 1.0)) {
            if !(same_f16(got.0, r.half) && same_f32(got.1, r.float) && same_f32(got.2, r.float)) {
                wrong.push(format!(
                    "decode {format} {:02x}: host f16 {:04x} f32 {:08x}, device {got:08x?}",
                    r.code, r.half, r.float
                ));
            }
        }
    }
    let encode = encode_rows();
    let inputs: Vec<f32> = encode.iter().map(|r| f32::from_bits(r.input)).collect();
    for format in Fp8Format::ALL {
        for (r, got) in encode.iter().zip(device_encode(&dev, format, &inputs, 1.0)) {
            let want = r.code(format);
            if !(same_code(format, got.0, want) && same_code(format, got.1, want)) {
                wrong.push(format!(
                    "encode {format} {:08x}: host {:02x}, device {got:02x?}",
                    r.input,
                    r.code(format)
                ));
            }
        }
    }
    let data = scaled();
    for scale_bits in data.scales() {
        let scale = f32::from_bits(scale_bits);
        let rows = data.encode_at(scale_bits);
        let inputs: Vec<f32> = rows.iter().map(|r| f32::from_bits(r.input)).collect();
        for format in Fp8Format::ALL {
            for (r, got) in rows.iter().zip(device_encode(&dev, format, &inputs, scale)) {
                let want = r.code(format);
                if !(same_code(format, got.0, want) && same_code(format, got.1, want)) {
                    wrong.push(format!(
                        "encode {format} / {scale} {:08x}: {got:02x?}",
                        r.input
                    ));
                }
            }
            let want = data.decode_at(scale_bits, format);
            for (r, got) in want.into_iter().zip(device_decode(&dev, format, scale)) {
                if !(same_f32(got.1, r.float) && same_f32(got.2, r.float)) {
                    wrong.push(format!(
                        "decode {format} x {scale} {:02x}: {got:08x?}",
                        r.code
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} rows differ between the GPU and CUDA's host conversions:\n{}",
        wrong.len(),
        wrong
            .iter()
            .take(16)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}
