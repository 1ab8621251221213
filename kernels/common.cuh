// Shared by every kernels/*.cu, compiled both by nvcc and, with PAGEDKV_EMU, by the host C++
// compiler against kernels/emu/ (see KERNELS.md). Holds: GPTR and DYNAMIC_SHARED, the paged layout
// (PagedLayout), dtype traits (f16/bf16/f32 <-> float, 16-byte vectors of each), fp8 conversions
// and scales (e4m3/e5m2, 16-byte vectors of 16 codes), vector
// loads/stores, asynchronous copies into shared memory, warp/block reductions.
#pragma once

#include <type_traits>

#ifdef PAGEDKV_EMU
#include "emu/emu.h"
// A bounds-checked pointer into one kernel argument buffer (kernels/emu/gptr.h).
#define GPTR(T) ::emu::gptr<T>
#define DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(::emu::dynamic_shared())
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#define GPTR(T) T* __restrict__
#define DYNAMIC_SHARED(T, name)                                  \
    extern __shared__ __align__(16) unsigned char pagedkv_smem_[]; \
    T* name = reinterpret_cast<T*>(pagedkv_smem_)
#endif

// ---- the paged KV layout, device side ------------------------------------------------------------
// A pool (K and V alike) is [num_blocks, num_kv_heads, block_size, head_dim]: element (block, head,
// offset, dim) sits at ((block * num_kv_heads + head) * block_size + offset) * head_dim + dim, so one
// (block, head) pair is one contiguous run of block_size * head_dim elements. The host states the
// same formula once in src/kv/spec.rs (KvSpec::elem_offset); every kernel reads the layout here.
// Block sizes are powers of two: a token's block and offset are a shift and a mask.
struct PagedLayout {
    int num_kv_heads;
    int log2_block_size;
    int head_dim;
    __device__ __forceinline__ int block_of(int token) const { return token >> log2_block_size; }
    __device__ __forceinline__ int offset_in_block(int token) const {
        return token & ((1 << log2_block_size) - 1);
    }
    // Element offset of the row (block, head, offset): its dim 0.
    __device__ __forceinline__ int64_t row(int64_t block, int head, int offset) const {
        return (((block * num_kv_heads + head) << log2_block_size) + offset) * head_dim;
    }
    // The same row as an index among the pool's rows (its dim 0 is at row_id * head_dim), for
    // pools of fewer than 2^32 rows (the attention launch refuses larger ones). The offset is below
    // the block size, so it is or-ed in.
    __device__ __forceinline__ unsigned row_id(int block, int head, int offset) const {
        return (((unsigned)block * num_kv_heads + head) << log2_block_size) | offset;
    }
    // Element offset of the row of head `head` at a slot (block * block_size + offset).
    __device__ __forceinline__ int64_t slot_row(int64_t slot, int head) const {
        return row(slot >> log2_block_size, head, (int)(slot & ((1 << log2_block_size) - 1)));
    }
};

// ---- dtype traits ---------------------------------------------------------------------------
// DtypeTraits<T>: float conversions of one element (round to nearest even into 16-bit types).
template <class T>
struct DtypeTraits;

template <>
struct DtypeTraits<float> {
    __device__ __forceinline__ static float to_float(float x) { return x; }
    __device__ __forceinline__ static float from_float(float x) { return x; }
};

template <>
struct DtypeTraits<__half> {
    __device__ __forceinline__ static float to_float(__half x) { return __half2float(x); }
    __device__ __forceinline__ static __half from_float(float x) { return __float2half_rn(x); }
};

template <>
struct DtypeTraits<__nv_bfloat16> {
    __device__ __forceinline__ static float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
    __device__ __forceinline__ static __nv_bfloat16 from_float(float x) {
        return __float2bfloat16_rn(x);
    }
};

template <class T>
__device__ __forceinline__ float to_float(T x) {
    return DtypeTraits<T>::to_float(x);
}

template <class T>
__device__ __forceinline__ T from_float(float x) {
    return DtypeTraits<T>::from_float(x);
}

// Elements of T in one 16-byte vector (uint4): 8 for f16/bf16, 4 for f32.
template <class T>
constexpr int kVec16Elems = 16 / static_cast<int>(sizeof(T));

// The kVec16Elems<T> elements packed in a uint4, as floats.
template <class T>
__device__ __forceinline__ void unpack16(const uint4& v, float (&out)[kVec16Elems<T>]) {
    const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if constexpr (sizeof(T) == 4) {
            out[i] = __uint_as_float(words[i]);
        } else if constexpr (std::is_same_v<T, __half>) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
            out[2 * i] = f.x;
            out[2 * i + 1] = f.y;
        } else {
            const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[i]));
            out[2 * i] = f.x;
            out[2 * i + 1] = f.y;
        }
    }
}

// kVec16Elems<T> floats rounded to T and packed in a uint4.
template <class T>
__device__ __forceinline__ uint4 pack16(const float (&in)[kVec16Elems<T>]) {
    unsigned words[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        if constexpr (sizeof(T) == 4) {
            words[i] = __float_as_uint(in[i]);
        } else if constexpr (std::is_same_v<T, __half>) {
            const __half2 h = __floats2half2_rn(in[2 * i], in[2 * i + 1]);
            words[i] = *reinterpret_cast<const unsigned*>(&h);
        } else {
            const __nv_bfloat162 b = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
            words[i] = *reinterpret_cast<const unsigned*>(&b);
        }
    }
    return make_uint4(words[0], words[1], words[2], words[3]);
}

// ---- fp8 (e4m3, e5m2) ----------------------------------------------------------------------------
// An fp8 element is one byte (unsigned char) holding a code of format F, __NV_E4M3 or __NV_E5M2
// (cuda_fp8.h's names; kernels/emu/fp8.h gives them to the emulator). The conversions are CUDA's:
// float -> fp8 rounds to nearest even and saturates to the finite range (__NV_SATFINITE: +-inf and
// everything beyond +-448 / +-57344 give the largest code; NaN gives 0x7f); fp8 -> float is exact
// (e5m2 +-inf stays infinite, NaN codes give NaN). On sm_90 they compile to cvt instructions
// (cvt.rn.satfinite.e4m3x2.f32, cvt.rn.f16x2.e4m3x2 and the e5m2 forms), on sm_80 to
// cuda_fp8.hpp's integer code. Scales follow vLLM's k_scale/v_scale: a cache stores
// fp8(x / scale) and reads float(code) * scale, one scale per tensor (or per KV head).
template <__nv_fp8_interpretation_t F>
__device__ __forceinline__ unsigned char float_to_fp8(float x) {
    return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, F);
}

__device__ __forceinline__ float fp8_half_to_float(__half_raw h) {
#ifdef PAGEDKV_EMU
    return ::emu::half_bits_to_float_canonical_nan(h.x);  // a NaN as CUDA's: 0x7fffffff
#else
    return __half2float(__half(h));
#endif
}

template <__nv_fp8_interpretation_t F>
__device__ __forceinline__ float fp8_to_float(unsigned char code) {
    return fp8_half_to_float(__nv_cvt_fp8_to_halfraw(code, F));
}

// Division, as vLLM quantises: multiplying by a precomputed 1/scale rounds differently for scales
// that are not powers of two.
template <__nv_fp8_interpretation_t F>
__device__ __forceinline__ unsigned char float_to_fp8_scaled(float x, float scale) {
    return float_to_fp8<F>(x / scale);
}

template <__nv_fp8_interpretation_t F>
__device__ __forceinline__ float fp8_to_float_scaled(unsigned char code, float scale) {
    return fp8_to_float<F>(code) * scale;
}

// One 16-byte segment of an fp8 row holds 16 elements; byte i (little-endian in v.x..v.w) is
// element i.
constexpr int kFp8Vec16Elems = 16;

template <__nv_fp8_interpretation_t F>
__device__ __forceinline__ void unpack16_fp8(const uint4& v, float scale, float (&out)[kFp8Vec16Elems]) {
    const unsigned words[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
        for (int pair = 0; pair < 2; pair++) {
            const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
                static_cast<__nv_fp8x2_storage_t>(words[i] >> (16 * pair)), F);
            out[4 * i + 2 * pair] = fp8_half_to_float(__half_raw{h.x}) * scale;
            out[4 * i + 2 * pair + 1] = fp8_half_to_float(__half_raw{h.y}) * scale;
        }
    }
}

template <__nv_fp8_interpretation_t F>
__device__ __forceinline__ uint4 pack16_fp8(const float (&in)[kFp8Vec16Elems], float scale) {
    unsigned words[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const unsigned lo = __nv_cvt_float2_to_fp8x2(
            make_float2(in[4 * i] / scale, in[4 * i + 1] / scale), __NV_SATFINITE, F);
        const unsigned hi = __nv_cvt_float2_to_fp8x2(
            make_float2(in[4 * i + 2] / scale, in[4 * i + 3] / scale), __NV_SATFINITE, F);
        words[i] = lo | hi << 16;
    }
    return make_uint4(words[0], words[1], words[2], words[3]);
}
// Eight fp8 codes in a uint2 (byte i is element i), as floats, unscaled.
template <__nv_fp8_interpretation_t F>
__device__ __forceinline__ void unpack8_fp8(const uint2& v, float (&out)[8]) {
    const unsigned words[2] = {v.x, v.y};
#pragma unroll
    for (int i = 0; i < 2; i++) {
#pragma unroll
        for (int pair = 0; pair < 2; pair++) {
            const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(
                static_cast<__nv_fp8x2_storage_t>(words[i] >> (16 * pair)), F);
            out[4 * i + 2 * pair] = fp8_half_to_float(__half_raw{h.x});
            out[4 * i + 2 * pair + 1] = fp8_half_to_float(__half_raw{h.y});
        }
    }
}
// ---- element storage ------------------------------------------------------------------------------
// A cache stores elements of type S (__half, __nv_bfloat16, float) or fp8 codes of format F (the
// tag Fp8<F>, one unsigned char each). Stored<S> is the element type a pointer into it has;
// Vec16<S> reads 16 bytes of it as floats (fp8 unscaled).
template <__nv_fp8_interpretation_t F>
struct Fp8 {};

template <class S>
struct StoredType {
    using type = S;
};
template <__nv_fp8_interpretation_t F>
struct StoredType<Fp8<F>> {
    using type = unsigned char;
};
template <class S>
using Stored = typename StoredType<S>::type;

template <class S>
struct Vec16 {
    static constexpr int kElems = kVec16Elems<S>;
    __device__ __forceinline__ static void unpack(const uint4& v, float (&out)[kElems]) {
        unpack16<S>(v, out);
    }
};
template <__nv_fp8_interpretation_t F>
struct Vec16<Fp8<F>> {
    static constexpr int kElems = kFp8Vec16Elems;
    __device__ __forceinline__ static void unpack(const uint4& v, float (&out)[kElems]) {
        unpack16_fp8<F>(v, 1.0f, out);
    }
};
// ---- end of fp8 -----------------------------------------------------------------------------------

// ---- vector loads and stores ----------------------------------------------------------------
// V is uint2/uint4/float2/float4; p must be aligned to sizeof(V) (16-byte types need 16 bytes on
// the GPU). The emulator checks the whole vector's bounds and the alignment.
#ifdef PAGEDKV_EMU
template <class V, class T>
V ld_vec(::emu::gptr<T> p) {
    V v;
    std::memcpy(&v, p.checked_vector(sizeof(V), "vector load"), sizeof(V));
    return v;
}
template <class V, class T>
void st_vec(::emu::gptr<T> p, const V& v) {
    static_assert(!std::is_const_v<T>, "st_vec into a const buffer");
    std::memcpy(p.checked_vector(sizeof(V), "vector store"), &v, sizeof(V));
}
#endif
// Raw pointers (shared memory under the emulator, everything under nvcc).
template <class V, class T>
__device__ __forceinline__ V ld_vec(const T* p) {
    return *reinterpret_cast<const V*>(p);
}
template <class V, class T>
__device__ __forceinline__ void st_vec(T* p, const V& v) {
    *reinterpret_cast<V*>(p) = v;
}

// ---- asynchronous copies global -> shared (cp.async, sm_80+) ---------------------------------------
// cp_async16 starts a 16-byte copy; cp_async_commit closes the calling thread's copies since the
// last commit into a group; cp_async_wait<N> returns once at most N of the thread's groups are
// still pending. A thread sees its own copied bytes after the wait; other threads need a barrier
// too. The emulator makes a destination hold poison (0xff) until a wait retires its copy, so a
// read before the right wait shows as NaN.
#ifdef PAGEDKV_EMU
template <class T>
void cp_async16(void* smem, ::emu::gptr<T> src) {
    ::emu::async_copy(smem, src.checked_vector(16, "cp.async"), 16);
}
template <class T>
void cp_async4(void* smem, ::emu::gptr<T> src) {
    ::emu::async_copy(smem, src.checked_vector(4, "cp.async"), 4);
}
inline void cp_async_commit() { ::emu::async_commit(); }
template <int N>
void cp_async_wait() {
    ::emu::async_wait(N);
}
#else
template <class T>
__device__ __forceinline__ void cp_async16(void* smem, const T* src) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    // .cg: cached in L2 only; KV is streamed once.
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
// 4 bytes (.ca: .cg takes only 16).
template <class T>
__device__ __forceinline__ void cp_async4(void* smem, const T* src) {
    const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif

// ---- code generation ----------------------------------------------------------------------------
// x, through a move the compiler cannot see into: it cannot fold x's computation into what uses it
// (a pointer stays one register that a loop adds offsets to) nor rematerialise it (a constant stays
// in its register). The emulator returns x.
template <class X>
__device__ __forceinline__ X opaque(X x) {
#ifndef PAGEDKV_EMU
    if constexpr (sizeof(X) == 8) {
        asm volatile("mov.b64 %0, %0;\n" : "+l"(x));
    } else {
        static_assert(sizeof(X) == 4, "a 32- or 64-bit value");
        asm volatile("mov.b32 %0, %0;\n" : "+r"(x));
    }
#endif
    return x;
}

// A 16-byte load from shared memory that the front end keeps (asm volatile), so values staged
// once are read back rather than recomputed. ptxas may still forward the thread's own preceding
// store into it (it does for the last q fragment on sm_90): the same values, still not rebuilt.
__device__ __forceinline__ uint4 opaque_load(const uint4* p) {
#ifdef PAGEDKV_EMU
    return *p;
#else
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(static_cast<unsigned>(__cvta_generic_to_shared(p)))
                 : "memory");
    return v;
#endif
}

// ---- launch facts ------------------------------------------------------------------------------------
// Bytes of dynamic shared memory the launch passed (a kernel that needs more can trap).
#ifdef PAGEDKV_EMU
inline unsigned dynamic_smem_bytes() { return ::emu::dynamic_shared_bytes(); }
#else
__device__ __forceinline__ unsigned dynamic_smem_bytes() {
    unsigned n;
    asm("mov.u32 %0, %%dynamic_smem_size;\n" : "=r"(n));
    return n;
}
#endif

// ---- math ------------------------------------------------------------------------------------------
// 2^x with the GPU's approximate instruction (ex2.approx.ftz: ~2 ulp, subnormals flushed to 0,
// 2^-inf = 0); the emulator computes it exactly. Softmax weights need no more.
#ifdef PAGEDKV_EMU
inline float fast_exp2(float x) { return std::exp2(x); }
#else
__device__ __forceinline__ float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
#endif

// ---- reductions -----------------------------------------------------------------------------
struct SumOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
    __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Reduces over the 32 lanes of a full warp; every lane gets the result.
template <class Op>
__device__ __forceinline__ float warp_reduce(float v, Op op) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
}
__device__ __forceinline__ float warp_sum(float v) { return warp_reduce(v, SumOp{}); }
__device__ __forceinline__ float warp_max(float v) { return warp_reduce(v, MaxOp{}); }

// Linear thread index in the block, x fastest.
__device__ __forceinline__ unsigned thread_rank() {
    return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

// Reduces over the whole block (its size a multiple of 32, at most 1024); every thread gets the
// result. Contains __syncthreads, so every thread of the block must call it.
template <class Op>
__device__ __forceinline__ float block_reduce(float v, Op op, float identity) {
    __shared__ float partials[32];
    const unsigned rank = thread_rank(), lane = rank % 32, warp = rank / 32;
    const unsigned warps = (blockDim.x * blockDim.y * blockDim.z + 31) / 32;
    v = warp_reduce(v, op);
    __syncthreads();  // a previous block_reduce has finished reading partials
    if (lane == 0) partials[warp] = v;
    __syncthreads();
    v = lane < warps ? partials[lane] : identity;
    return warp_reduce(v, op);
}
__device__ __forceinline__ float block_sum(float v) { return block_reduce(v, SumOp{}, 0.0f); }
__device__ __forceinline__ float block_max(float v) { return block_reduce(v, MaxOp{}, -INFINITY); }
