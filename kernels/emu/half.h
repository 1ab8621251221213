// __half and __nv_bfloat16 for the emulator: 16-bit storage, conversions that round to nearest even
// bit-exactly as CUDA's __float2half_rn / __float2bfloat16_rn (NaN becomes the canonical 0x7fff).
// Arithmetic operators on the 16-bit types are not emulated: CUDA rounds after every operation,
// which an implicit float conversion would silently skip, so using one fails at compile time.
#pragma once
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace emu {

inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

inline float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline uint16_t float_to_half_bits(float f) {
    const uint32_t x = float_bits(f);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return 0x7fff;                  // NaN
    if (ax >= 0x477ff000u) return sign | 0x7c00u;        // rounds to (or is) infinity
    if (ax <= 0x33000000u) return sign;                  // at most 2^-25: rounds to zero
    if (ax < 0x38800000u) {                              // half subnormal: round(|f| * 2^24)
        const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126u - (ax >> 23);
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (r & 1u))) r++;
        return static_cast<uint16_t>(sign | r);
    }
    uint32_t v = (ax - 0x38000000u) >> 13;               // rebias exponent 127 -> 15
    const uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (v & 1u))) v++;
    return static_cast<uint16_t>(sign | v);
}

inline float half_bits_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0x1f) return bits_float(sign | 0x7f800000u | (m << 13));
    if (e != 0) return bits_float(sign | ((e + 112u) << 23) | (m << 13));
    if (m == 0) return bits_float(sign);
    float f = static_cast<float>(m) * (1.0f / 16777216.0f);  // subnormal: m * 2^-24, exact
    return sign ? -f : f;
}

inline uint16_t float_to_bf16_bits(float f) {
    const uint32_t x = float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fff;  // NaN
    return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline float bf16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

template <class T>
constexpr bool dependent_false = false;

}  // namespace emu

struct __half {
    uint16_t __x;
    __half() = default;
    __half(float f) : __x(emu::float_to_half_bits(f)) {}
    __half(double d) : __x(emu::float_to_half_bits(static_cast<float>(d))) {}
    operator float() const { return emu::half_bits_to_float(__x); }
};

struct __nv_bfloat16 {
    uint16_t __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(emu::float_to_bf16_bits(f)) {}
    __nv_bfloat16(double d) : __x(emu::float_to_bf16_bits(static_cast<float>(d))) {}
    operator float() const { return emu::bf16_bits_to_float(__x); }
};

using half = __half;

struct alignas(4) __half2 {
    __half x, y;
};
using half2 = __half2;

struct alignas(4) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};

namespace emu {
template <class T>
constexpr bool is_half16 =
    std::is_same_v<std::decay_t<T>, __half> || std::is_same_v<std::decay_t<T>, __nv_bfloat16>;
template <class A, class B>
using if_half_operand = std::enable_if_t<is_half16<A> || is_half16<B>, int>;
}  // namespace emu

#define EMU_NO_HALF_OP(op)                                                                        \
    template <class A, class B, emu::if_half_operand<A, B> = 0>                                   \
    bool operator op(const A&, const B&) {                                                        \
        static_assert(emu::dependent_false<A>,                                                    \
                      "pagedkv emu: arithmetic and comparison on __half/__nv_bfloat16 are not "   \
                      "emulated; convert to float (__half2float, __bfloat162float) first");       \
        return false;                                                                             \
    }
EMU_NO_HALF_OP(+)
EMU_NO_HALF_OP(-)
EMU_NO_HALF_OP(*)
EMU_NO_HALF_OP(/)
EMU_NO_HALF_OP(<)
EMU_NO_HALF_OP(>)
EMU_NO_HALF_OP(<=)
EMU_NO_HALF_OP(>=)
EMU_NO_HALF_OP(==)
EMU_NO_HALF_OP(!=)
#undef EMU_NO_HALF_OP

inline float __half2float(__half h) { return emu::half_bits_to_float(h.__x); }
inline __half __float2half_rn(float f) { return __half(f); }
inline __half __float2half(float f) { return __half(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return emu::bf16_bits_to_float(b.__x); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __half __ushort_as_half(unsigned short u) {
    __half h;
    h.__x = u;
    return h;
}
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) {
    __nv_bfloat16 b;
    b.__x = u;
    return b;
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
