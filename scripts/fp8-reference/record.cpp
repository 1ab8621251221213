// Records CUDA's own fp8 conversions (cuda_fp8.h, host code path) as test data for the emulator and
// the Rust CPU conversions: tests/data/fp8/{decode,encode,scaled}.txt. Built and run by
// scripts/record-fp8-reference; tests/suite/fp8_reference.rs reruns it where CUDA's headers exist and
// compares its output with the committed files. Everything is written as hex bit patterns.
//
//   decode.txt  every code of both formats: fp8 -> half (__nv_cvt_fp8_to_halfraw) -> float
//               (__half2float)
//   encode.txt  a sweep of floats -> e4m3 and e5m2 codes (__nv_cvt_float_to_fp8, __NV_SATFINITE)
//   scaled.txt  vLLM's scale convention: stored = fp8(x / scale), read = float(code) * scale
#include <cuda_fp8.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace {

const __nv_fp8_interpretation_t kFormats[2] = {__NV_E4M3, __NV_E5M2};
const char* const kNames[2] = {"e4m3", "e5m2"};

uint32_t bits_of(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

float float_of(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

unsigned encode(float x, __nv_fp8_interpretation_t format) {
    return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, format);
}

unsigned decode_half(unsigned code, __nv_fp8_interpretation_t format) {
    return __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), format).x;
}

float decode(unsigned code, __nv_fp8_interpretation_t format) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), format)));
}

// splitmix64: a fixed, portable stream, so the sweep is the same on every machine.
struct Rng {
    uint64_t state;
    uint64_t next() {
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
};

// Floats across the exponent range that matters to both formats (2^-30 .. 2^20), random sign and
// mantissa, then fully random bit patterns (huge, tiny, NaN payloads).
std::vector<float> random_floats(size_t scaled, size_t raw) {
    Rng rng{0x5eed0f8ull};
    std::vector<float> out;
    for (size_t i = 0; i < scaled; i++) {
        const uint64_t r = rng.next();
        const uint32_t sign = static_cast<uint32_t>(r >> 63) << 31;
        const uint32_t exponent = static_cast<uint32_t>(127 - 30 + (r >> 32) % 51) << 23;
        out.push_back(float_of(sign | exponent | static_cast<uint32_t>(r & 0x7fffff)));
    }
    for (size_t i = 0; i < raw; i++) out.push_back(float_of(static_cast<uint32_t>(rng.next())));
    return out;
}

void add_with_neighbours(std::set<uint32_t>& sweep, float x) {
    for (float s : {x, -x}) {
        sweep.insert(bits_of(s));
        sweep.insert(bits_of(std::nextafterf(s, INFINITY)));
        sweep.insert(bits_of(std::nextafterf(s, -INFINITY)));
    }
}

std::set<uint32_t> encode_sweep() {
    std::set<uint32_t> sweep;
    for (auto format : kFormats) {
        // Every finite code's value, and the midpoints between neighbouring codes (the ties of
        // round-to-nearest-even), each with the floats one ulp either side.
        std::vector<float> values;
        for (unsigned code = 0; code < 0x80; code++) {
            const float v = decode(code, format);
            if (std::isfinite(v)) values.push_back(v);
        }
        std::sort(values.begin(), values.end());
        for (size_t i = 0; i < values.size(); i++) {
            add_with_neighbours(sweep, values[i]);
            if (i + 1 < values.size()) add_with_neighbours(sweep, (values[i] + values[i + 1]) / 2);
        }
        // Above the largest finite value: its would-be next code, the midpoint to it, 2x, 4x.
        const float max = values.back(), step = max - values[values.size() - 2];
        for (float x : {max + step / 2, max + step, 2 * max, 4 * max}) add_with_neighbours(sweep, x);
    }
    for (float x : {0.0f, INFINITY, FLT_MAX, FLT_MIN, FLT_TRUE_MIN, 65504.0f, 65536.0f, 1e30f})
        add_with_neighbours(sweep, x);
    for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0x7fa00000u, 0x7fe00000u, 0x7fd00000u, 0x7f900000u,
                         0x7fffffffu, 0x7fbfffffu, 0x7fc00001u})
        for (uint32_t sign : {0u, 0x80000000u}) sweep.insert(nan | sign);
    for (float x : random_floats(3072, 256)) sweep.insert(bits_of(x));
    return sweep;
}

FILE* open_or_die(const std::string& path) {
    FILE* f = std::fopen(path.c_str(), "w");
    if (!f) {
        std::perror(path.c_str());
        std::exit(1);
    }
    return f;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
        return 2;
    }
    const std::string dir = argv[1];

    FILE* f = open_or_die(dir + "/decode.txt");
    std::fprintf(f, "# CUDA cuda_fp8.h host path: fp8 code -> __nv_cvt_fp8_to_halfraw -> __half2float\n");
    std::fprintf(f, "# format code half_bits float_bits\n");
    for (int k = 0; k < 2; k++)
        for (unsigned code = 0; code < 256; code++)
            std::fprintf(f, "%s %02x %04x %08x\n", kNames[k], code, decode_half(code, kFormats[k]),
                         bits_of(decode(code, kFormats[k])));
    std::fclose(f);

    f = open_or_die(dir + "/encode.txt");
    std::fprintf(f, "# CUDA cuda_fp8.h host path: __nv_cvt_float_to_fp8(x, __NV_SATFINITE, format)\n");
    std::fprintf(f, "# float_bits e4m3 e5m2\n");
    for (uint32_t x : encode_sweep())
        std::fprintf(f, "%08x %02x %02x\n", x, encode(float_of(x), __NV_E4M3), encode(float_of(x), __NV_E5M2));
    std::fclose(f);

    // 1, a power of two (exact), and an arbitrary scale (a calibrated amax of 1000 over e4m3's 448).
    const float scales[3] = {1.0f, 16.0f, 1000.0f / 448.0f};
    f = open_or_die(dir + "/scaled.txt");
    std::fprintf(f, "# vLLM's convention with CUDA's conversions: enc = __nv_cvt_float_to_fp8(x / scale, "
                    "__NV_SATFINITE, format); dec = __half2float(__nv_cvt_fp8_to_halfraw(code)) * scale\n");
    std::fprintf(f, "# enc scale_bits float_bits e4m3 e5m2 | dec format scale_bits code float_bits\n");
    const std::vector<float> inputs = random_floats(384, 0);
    for (float scale : scales) {
        for (float x : inputs)
            std::fprintf(f, "enc %08x %08x %02x %02x\n", bits_of(scale), bits_of(x),
                         encode(x / scale, __NV_E4M3), encode(x / scale, __NV_E5M2));
        for (int k = 0; k < 2; k++)
            for (unsigned code = 0; code < 256; code++)
                std::fprintf(f, "dec %s %08x %02x %08x\n", kNames[k], bits_of(scale), code,
                             bits_of(decode(code, kFormats[k]) * scale));
    }
    std::fclose(f);
    return 0;
}
