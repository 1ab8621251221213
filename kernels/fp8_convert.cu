// The fp8 conversions of common.cuh (float_to_fp8, fp8_to_float and their scaled forms, the 16-byte
// pack16_fp8/unpack16_fp8) over whole buffers, for the tests that compare them with CUDA's own
// conversions in tests/data/fp8/: on the emulator (tests/suite/emu_fp8.rs) and on a GPU, where sm_90
// runs the cvt instructions (tests/gpu/fp8_gpu.rs). Not used by the cache itself. One thread per
// 16-byte segment of 16 elements, each converted element by element and as one 16-byte vector.
// e5m2 != 0 picks __NV_E5M2, else __NV_E4M3.
#include "common.cuh"

template <__nv_fp8_interpretation_t F>
__device__ void decode_segment(GPTR(const unsigned char) codes, GPTR(unsigned) half_bits, GPTR(float) values,
                               GPTR(float) unpacked, float scale, int first) {
    for (int i = first; i < first + kFp8Vec16Elems; i++) {
        half_bits[i] = __nv_cvt_fp8_to_halfraw(codes[i], F).x;
        values[i] = fp8_to_float_scaled<F>(codes[i], scale);
    }
    float out[kFp8Vec16Elems];
    unpack16_fp8<F>(ld_vec<uint4>(codes + first), scale, out);
    for (int i = 0; i < kFp8Vec16Elems; i++) unpacked[first + i] = out[i];
}

extern "C" __global__ void __launch_bounds__(64) fp8_convert_decode(GPTR(const unsigned char) codes,  // [n]
                                                   GPTR(unsigned) half_bits,         // [n]
                                                   GPTR(float) values,               // [n]
                                                   GPTR(float) unpacked,             // [n]
                                                   int e5m2, float scale,
                                                   int n) {  // a multiple of 16
    const int first = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x) * kFp8Vec16Elems;
    if (first >= n) return;
    if (e5m2) {
        decode_segment<__NV_E5M2>(codes, half_bits, values, unpacked, scale, first);
    } else {
        decode_segment<__NV_E4M3>(codes, half_bits, values, unpacked, scale, first);
    }
}

template <__nv_fp8_interpretation_t F>
__device__ void encode_segment(GPTR(const float) x, GPTR(unsigned char) codes, GPTR(unsigned char) packed,
                               float scale, int first) {
    float in[kFp8Vec16Elems];
    for (int i = 0; i < kFp8Vec16Elems; i++) {
        in[i] = x[first + i];
        codes[first + i] = float_to_fp8_scaled<F>(in[i], scale);
    }
    st_vec(packed + first, pack16_fp8<F>(in, scale));
}

extern "C" __global__ void __launch_bounds__(64) fp8_convert_encode(GPTR(const float) x,            // [n]
                                                   GPTR(unsigned char) codes,      // [n]
                                                   GPTR(unsigned char) packed,     // [n]
                                                   int e5m2, float scale,
                                                   int n) {  // a multiple of 16
    const int first = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x) * kFp8Vec16Elems;
    if (first >= n) return;
    if (e5m2) {
        encode_segment<__NV_E5M2>(x, codes, packed, scale, first);
    } else {
        encode_segment<__NV_E4M3>(x, codes, packed, scale, first);
    }
}
