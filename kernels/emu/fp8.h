// The fp8 part of cuda_fp8.h for the emulator: CUDA's names and types (__nv_fp8_storage_t,
// __NV_E4M3/__NV_E5M2, __NV_SATFINITE, __half_raw) and the conversions kernels use, bit-exact with
// CUDA 13.0's own (tests/data/fp8/, recorded by scripts/record-fp8-reference; checked by
// tests/suite/emu_fp8.rs). What CUDA does, and so what this does:
// - float -> fp8 with __NV_SATFINITE: round to nearest even; every finite value beyond the largest
//   code and +-inf saturate to +-448 (e4m3 0x7e/0xfe) or +-57344 (e5m2 0x7b/0xfb); NaN of either
//   sign and any payload becomes 0x7f in both formats (CUDA first replaces a NaN by 0x7fffffff);
//   -0 and negative values that round to zero keep the sign (0x80).
// - fp8 -> half: exact for every finite code, e5m2 +-inf -> half +-inf; the NaN codes (e4m3
//   0x7f/0xff, e5m2 0x7d-0x7f/0xfd-0xff) become the canonical half NaN 0x7fff, sign dropped.
// __NV_NOSAT is not emulated (a launch that asks for it fails).
#pragma once
#include <cmath>
#include <cstdint>

#include "half.h"
#include "vector_types.h"

typedef unsigned char __nv_fp8_storage_t;
typedef unsigned short __nv_fp8x2_storage_t;
enum __nv_saturation_t { __NV_NOSAT, __NV_SATFINITE };
enum __nv_fp8_interpretation_t { __NV_E4M3, __NV_E5M2 };
struct __half_raw {
    unsigned short x;
};
struct __half2_raw {
    unsigned short x, y;
};

namespace emu {

[[noreturn]] void fail(int status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// The shape of one fp8 format: mantissa bits, exponent bias, and its largest finite value.
struct Fp8Shape {
    int mantissa_bits;
    int bias;
    uint32_t max_float_bits;  // 448 or 57344 as f32 bits
    uint8_t max_code;         // 0x7e or 0x7b
};
inline Fp8Shape fp8_shape(__nv_fp8_interpretation_t format) {
    return format == __NV_E4M3 ? Fp8Shape{3, 7, 0x43e00000u, 0x7e} : Fp8Shape{2, 15, 0x47600000u, 0x7b};
}

// Rounds away the low `shift` bits of `m` to nearest, ties to even (shift in 1..31).
inline uint32_t round_shift_rne(uint32_t m, int shift) {
    const uint32_t kept = m >> shift, rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    return kept + (rest > half || (rest == half && (kept & 1u)));
}

inline uint8_t float_to_fp8_satfinite(float f, __nv_fp8_interpretation_t format) {
    const uint32_t x = float_bits(f), ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return 0x7f;  // NaN, whatever its sign and payload
    const Fp8Shape s = fp8_shape(format);
    const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
    // At or beyond the largest finite value (inf included): rounding cannot go higher.
    if (ax >= s.max_float_bits) return sign | s.max_code;
    const int exponent = static_cast<int>(ax >> 23) - 127, min_normal_exponent = 1 - s.bias;
    if (exponent >= min_normal_exponent) {
        // Normal fp8: rebias and round the 23-bit mantissa to mantissa_bits; a carry out of the
        // mantissa moves to the next exponent, which the encoding does by itself.
        const uint32_t rebased = ax - (static_cast<uint32_t>(127 - s.bias) << 23);
        return sign | static_cast<uint8_t>(round_shift_rne(rebased, 23 - s.mantissa_bits));
    }
    if (exponent == -127) return sign;  // f32 zero or subnormal: far below half the smallest fp8
    // Subnormal fp8: the value in units of the smallest subnormal, 2^(min_normal - mantissa_bits).
    const uint32_t significand = (ax & 0x7fffffu) | 0x800000u;
    const int shift = 23 - s.mantissa_bits + (min_normal_exponent - exponent);
    if (shift > 25) return sign;  // below a quarter of the smallest subnormal
    return sign | static_cast<uint8_t>(round_shift_rne(significand, shift));
}

inline uint16_t fp8_to_half_bits(uint8_t code, __nv_fp8_interpretation_t format) {
    if (format == __NV_E5M2) {
        const uint16_t h = static_cast<uint16_t>(code << 8);  // e5m2 is the top byte of a half
        return (h & 0x7fffu) > 0x7c00u ? 0x7fff : h;
    }
    if ((code & 0x7fu) == 0x7fu) return 0x7fff;
    const int exponent_field = (code >> 3) & 0xf, mantissa = code & 0x7;
    const float magnitude = exponent_field == 0 ? std::ldexp(static_cast<float>(mantissa), -9)
                                                : std::ldexp(static_cast<float>(8 + mantissa), exponent_field - 10);
    return float_to_half_bits((code & 0x80u) ? -magnitude : magnitude);  // exact in half
}

// half -> float as CUDA's host path converts a NaN: canonical 0x7fffffff, sign dropped (half.h's
// __half2float keeps the payload instead).
inline float half_bits_to_float_canonical_nan(uint16_t h) {
    return (h & 0x7fffu) > 0x7c00u ? bits_float(0x7fffffffu) : half_bits_to_float(h);
}

inline void require_satfinite(__nv_saturation_t saturate) {
    if (saturate != __NV_SATFINITE) fail(6 /* EMU_TRAP */, "fp8 conversion with __NV_NOSAT is not emulated");
}

}  // namespace emu

inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t saturate,
                                                __nv_fp8_interpretation_t format) {
    emu::require_satfinite(saturate);
    return emu::float_to_fp8_satfinite(x, format);
}

// Element x in the low byte, as cvt.rn.satfinite.{e4m3,e5m2}x2.f32 packs it.
inline __nv_fp8x2_storage_t __nv_cvt_float2_to_fp8x2(float2 v, __nv_saturation_t saturate,
                                                     __nv_fp8_interpretation_t format) {
    emu::require_satfinite(saturate);
    return static_cast<__nv_fp8x2_storage_t>(emu::float_to_fp8_satfinite(v.x, format) |
                                             emu::float_to_fp8_satfinite(v.y, format) << 8);
}

inline __half_raw __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t code, __nv_fp8_interpretation_t format) {
    return {emu::fp8_to_half_bits(code, format)};
}

inline __half2_raw __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t codes, __nv_fp8_interpretation_t format) {
    return {emu::fp8_to_half_bits(static_cast<uint8_t>(codes), format),
            emu::fp8_to_half_bits(static_cast<uint8_t>(codes >> 8), format)};
}
