//! The emulator's fp8 conversions (kernels/emu/fp8.h behind common.cuh's float_to_fp8,
//! fp8_to_float, their scaled forms and the 16-byte pack16_fp8/unpack16_fp8) against CUDA's own,
//! every row of tests/data/fp8/, through the kernels of kernels/fp8_convert.cu.

use crate::fp8_data;

use fp8_data::{decode_rows, encode_rows, scaled};
use pagedkv::emu::Launch;
use pagedkv::kv::Fp8Format;

const SEGMENT: usize = 16;
const THREADS: u32 = 64;

fn grid_for(n: usize) -> u32 {
    (n / SEGMENT).div_ceil(THREADS as usize) as u32
}

/// Per code: (f16 bits, f32 one by one, f32 through unpack16_fp8), with `scale`.
fn emulated_decode(format: Fp8Format, codes: &[u8], scale: f32) -> Vec<(u32, f32, f32)> {
    assert_eq!(codes.len() % SEGMENT, 0);
    let n = codes.len();
    let (mut half, mut one, mut vec) = (vec![u32::MAX; n], vec![f32::NAN; n], vec![f32::NAN; n]);
    Launch::new("fp8_convert_decode")
        .grid(grid_for(n))
        .block(THREADS)
        .buf(codes)
        .buf_mut(&mut half)
        .buf_mut(&mut one)
        .buf_mut(&mut vec)
        .i32(i32::from(format == Fp8Format::E5M2))
        .f32(scale)
        .i32(n as i32)
        .run()
        .unwrap();
    (0..n).map(|i| (half[i], one[i], vec[i])).collect()
}

/// Per input (padded with zeros to whole segments): (code one by one, code through pack16_fp8).
fn emulated_encode(format: Fp8Format, inputs: &[f32], scale: f32) -> Vec<(u8, u8)> {
    let mut x = inputs.to_vec();
    x.resize(inputs.len().next_multiple_of(SEGMENT), 0.0);
    let n = x.len();
    // Poisoned, differently in the two outputs, so an unwritten element cannot match in both.
    let (mut one, mut packed) = (vec![0x55u8; n], vec![0xaau8; n]);
    Launch::new("fp8_convert_encode")
        .grid(grid_for(n))
        .block(THREADS)
        .buf(&x)
        .buf_mut(&mut one)
        .buf_mut(&mut packed)
        .i32(i32::from(format == Fp8Format::E5M2))
        .f32(scale)
        .i32(n as i32)
        .run()
        .unwrap();
    one.into_iter().zip(packed).take(inputs.len()).collect()
}

#[test]
fn emulated_decode_matches_cuda_for_every_code() {
    let rows = decode_rows();
    for format in Fp8Format::ALL {
        let codes: Vec<u8> = (0..=255).collect();
        let got = emulated_decode(format, &codes, 1.0);
        for (r, (half, one, vec)) in rows.iter().filter(|r| r.format == format).zip(got) {
            assert_eq!(
                (half, one.to_bits(), vec.to_bits()),
                (u32::from(r.half), r.float, r.float),
                "{format} code {:02x}: (f16, f32 one by one, f32 unpacked)",
                r.code
            );
        }
    }
}

#[test]
fn emulated_encode_matches_cuda_on_every_row_of_the_sweep() {
    let rows = encode_rows();
    let inputs: Vec<f32> = rows.iter().map(|r| f32::from_bits(r.input)).collect();
    for format in Fp8Format::ALL {
        let got = emulated_encode(format, &inputs, 1.0);
        let wrong: Vec<String> = rows
            .iter()
            .zip(&got)
            .filter(|(r, &(one, packed))| one != r.code(format) || packed != r.code(format))
            .map(|(r, (one, packed))| {
                format!(
                    "{:08x}: CUDA {:02x}, emulated {one:02x} / packed {packed:02x}",
                    r.input,
                    r.code(format)
                )
            })
            .collect();
        assert!(
            wrong.is_empty(),
            "{format}: {} rows differ: {:?}",
            wrong.len(),
            &wrong[..wrong.len().min(12)]
        );
    }
}

#[test]
fn emulated_scaled_conversions_match_cuda_with_vllm_convention() {
    let data = scaled();
    for scale_bits in data.scales() {
        let scale = f32::from_bits(scale_bits);
        let rows = data.encode_at(scale_bits);
        let inputs: Vec<f32> = rows.iter().map(|r| f32::from_bits(r.input)).collect();
        for format in Fp8Format::ALL {
            for (r, (one, packed)) in rows.iter().zip(emulated_encode(format, &inputs, scale)) {
                assert_eq!(
                    (one, packed),
                    (r.code(format), r.code(format)),
                    "{format} scale {scale} {:08x}",
                    r.input
                );
            }
            let codes: Vec<u8> = (0..=255).collect();
            let want = data.decode_at(scale_bits, format);
            for (r, (_, one, vec)) in want.into_iter().zip(emulated_decode(format, &codes, scale)) {
                assert_eq!(
                    (one.to_bits(), vec.to_bits()),
                    (r.float, r.float),
                    "{format} scale {scale} code {:02x}",
                    r.code
                );
            }
        }
    }
}
