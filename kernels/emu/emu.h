// The CPU emulation of CUDA that kernels/*.cu compile against when PAGEDKV_EMU is defined (see
// README.md here and notes in KERNELS.md). Each CUDA thread is a fiber of its block; runtime.cpp
// schedules them. Everything a kernel may use is declared here; anything else fails to compile.
#pragma once
#ifndef PAGEDKV_EMU
#error "kernels/emu/emu.h is the CPU emulation of CUDA: compile with -DPAGEDKV_EMU"
#endif

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "fp8.h"
#include "gptr.h"
#include "half.h"
#include "vector_types.h"

// ---- declaration specifiers -------------------------------------------------------------------
#ifdef PAGEDKV_EMU_SCAN
#define __global__ __pagedkv_emu_kernel__  // build.rs finds kernels by this marker
#else
#define __global__
#endif
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#ifdef PAGEDKV_EMU_SCAN
#define __launch_bounds__(...) __pagedkv_emu_launch_bounds__(__VA_ARGS__)
#else
#define __launch_bounds__(...)
#endif
#define __align__(n) __attribute__((aligned(n)))
// One OS thread runs one block's fibers at a time, so a thread-local static is one copy per block.
// 16-byte aligned, so vector accesses to it work; `__shared__ __align__(n)` asks for more. build.rs
// follows each declaration with an emu::SharedRegistrar, so the runtime poisons it (0xff) before
// every block, as it does dynamic shared memory.
#ifdef PAGEDKV_EMU_SCAN
#define __shared__ __pagedkv_emu_shared__ __attribute__((aligned(16))) static thread_local
#else
#define __shared__ __attribute__((aligned(16))) static thread_local
#endif
// Constant and managed memory are not emulated: a declaration fails to compile with this name.
#define __constant__ __pagedkv_emu_does_not_emulate_constant_memory__
#define __managed__ __pagedkv_emu_does_not_emulate_managed_memory__

// ---- thread geometry --------------------------------------------------------------------------
namespace emu {
struct Geometry {
    uint3 thread_idx;
    uint3 block_idx;
    dim3 block_dim;
    dim3 grid_dim;
};
// The running fiber's view, set by the scheduler before it resumes a fiber.
extern __thread Geometry current;
}  // namespace emu

#define threadIdx (static_cast<const uint3&>(::emu::current.thread_idx))
#define blockIdx (static_cast<const uint3&>(::emu::current.block_idx))
#define blockDim (static_cast<const dim3&>(::emu::current.block_dim))
#define gridDim (static_cast<const dim3&>(::emu::current.grid_dim))
constexpr int warpSize = 32;

// ---- synchronisation (runtime.cpp) ------------------------------------------------------------
namespace emu {
enum WarpOp {
    OP_SYNCWARP, OP_SHFL_IDX, OP_SHFL_UP, OP_SHFL_DOWN, OP_SHFL_XOR, OP_BALLOT, OP_ANY, OP_ALL,
    OP_MATRIX,  // mma.sync, ldmatrix (tensor_core.h): warp_matrix_collective
};
void syncthreads(const char* file, int line);
uint32_t warp_collective(WarpOp op, unsigned mask, uint32_t value, int arg, int width);
unsigned char* dynamic_shared();
unsigned dynamic_shared_bytes();
// cp.async (common.cuh's cp_async16/commit/wait): the calling thread's asynchronous copies into
// shared memory. A copy reads its source now and poisons its destination (0xff) until a wait
// retires its group, so reading it before the right wait shows.
void async_copy(void* shared_dst, const void* global_src, size_t bytes);
void async_commit();
void async_wait(int pending_groups);
// Registers a static __shared__ variable of the running OS thread: poisons it now and before every
// later block.
struct SharedRegistrar {
    SharedRegistrar(void* variable, size_t bytes);
};

template <class T>
uint32_t to_lane_bits(T v) {
    static_assert(std::is_same_v<T, float> || std::is_same_v<T, int> || std::is_same_v<T, unsigned>,
                  "pagedkv emu: warp shuffles are emulated for float, int and unsigned only");
    uint32_t u;
    std::memcpy(&u, &v, 4);
    return u;
}
template <class T>
T from_lane_bits(uint32_t u) {
    T v;
    std::memcpy(&v, &u, 4);
    return v;
}
}  // namespace emu

#define __syncthreads() ::emu::syncthreads(__FILE__, __LINE__)
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    emu::warp_collective(emu::OP_SYNCWARP, mask, 0, 0, 32);
}
template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32) {
    return emu::from_lane_bits<T>(
        emu::warp_collective(emu::OP_SHFL_IDX, mask, emu::to_lane_bits(var), src_lane, width));
}
template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    return emu::from_lane_bits<T>(emu::warp_collective(emu::OP_SHFL_UP, mask, emu::to_lane_bits(var),
                                                       static_cast<int>(delta), width));
}
template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
    return emu::from_lane_bits<T>(emu::warp_collective(
        emu::OP_SHFL_DOWN, mask, emu::to_lane_bits(var), static_cast<int>(delta), width));
}
template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
    return emu::from_lane_bits<T>(
        emu::warp_collective(emu::OP_SHFL_XOR, mask, emu::to_lane_bits(var), lane_mask, width));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
    return emu::warp_collective(emu::OP_BALLOT, mask, pred != 0, 0, 32);
}
inline int __any_sync(unsigned mask, int pred) {
    return static_cast<int>(emu::warp_collective(emu::OP_ANY, mask, pred != 0, 0, 32));
}
inline int __all_sync(unsigned mask, int pred) {
    return static_cast<int>(emu::warp_collective(emu::OP_ALL, mask, pred != 0, 0, 32));
}
#include "tensor_core.h"  // mma.sync and ldmatrix, for kernels/tensor_core.cuh
[[noreturn]] inline void __trap() { emu::fail(6 /* EMU_TRAP */, "__trap() called"); }

// ---- atomics: real atomics, since blocks may run on several OS threads ------------------------
inline float atomicAdd(float* addr, float v) {
    uint32_t* word = reinterpret_cast<uint32_t*>(addr);
    uint32_t old = __atomic_load_n(word, __ATOMIC_RELAXED);
    while (!__atomic_compare_exchange_n(word, &old, emu::float_bits(emu::bits_float(old) + v), true,
                                        __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    return emu::bits_float(old);
}
inline unsigned atomicAdd(unsigned* addr, unsigned v) {
    return __atomic_fetch_add(addr, v, __ATOMIC_RELAXED);
}
inline int atomicAdd(int* addr, int v) { return __atomic_fetch_add(addr, v, __ATOMIC_RELAXED); }
template <class T, class V>
T atomicAdd(emu::gptr<T> p, V v) {
    return atomicAdd(p.checked_update(0, "atomicAdd"), static_cast<T>(v));
}

// ---- math: the CUDA names, computed exactly (the GPU's fast intrinsics are approximations) ----
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __int_as_float(int i) { return emu::from_lane_bits<float>(static_cast<uint32_t>(i)); }
inline int __float_as_int(float f) { return static_cast<int>(emu::float_bits(f)); }
inline float __uint_as_float(unsigned u) { return emu::bits_float(u); }
inline unsigned __float_as_uint(float f) { return emu::float_bits(f); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(static_cast<unsigned>(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long min(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long max(unsigned long long a, unsigned long long b) { return a > b ? a : b; }
inline long min(long a, long b) { return a < b ? a : b; }
inline long max(long a, long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
// CUDA's mixed signed/unsigned overloads compare as unsigned.
inline unsigned min(int a, unsigned b) { return min(static_cast<unsigned>(a), b); }
inline unsigned min(unsigned a, int b) { return min(a, static_cast<unsigned>(b)); }
inline unsigned max(int a, unsigned b) { return max(static_cast<unsigned>(a), b); }
inline unsigned max(unsigned a, int b) { return max(a, static_cast<unsigned>(b)); }
// Byte n of the result is byte (s >> 4n) & 7 of the eight bytes of y:x (x's bytes 0-3, y's 4-7);
// the selectors' fourth bits and s's upper 16 bits are not used (CUDA Math API, __byte_perm).
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t bytes = uint64_t{y} << 32 | x;
    unsigned r = 0;
    for (unsigned n = 0; n < 4; n++)
        r |= static_cast<unsigned>(bytes >> (8 * ((s >> (4 * n)) & 7u)) & 0xffu) << (8 * n);
    return r;
}

// ---- CUDA features the emulator lacks: using one is a compile-time error that says so ---------
#define EMU_UNSUPPORTED(name)                                                                      \
    template <class... A>                                                                          \
    int name(A&&...) {                                                                             \
        static_assert(emu::dependent_false<emu::Geometry(A...)>,                                   \
                      "pagedkv emu: " #name " is not emulated (kernels/emu/README.md lists what is)"); \
        return 0;                                                                                  \
    }
EMU_UNSUPPORTED(__ldg)
EMU_UNSUPPORTED(__ldcg)
EMU_UNSUPPORTED(__ldcs)
EMU_UNSUPPORTED(__ldlu)
EMU_UNSUPPORTED(__stcg)
EMU_UNSUPPORTED(__stcs)
EMU_UNSUPPORTED(__stwt)
EMU_UNSUPPORTED(atomicCAS)
EMU_UNSUPPORTED(atomicExch)
EMU_UNSUPPORTED(atomicMax)
EMU_UNSUPPORTED(atomicMin)
EMU_UNSUPPORTED(atomicSub)
EMU_UNSUPPORTED(__shfl)
EMU_UNSUPPORTED(__shfl_xor)
EMU_UNSUPPORTED(__shfl_down)
EMU_UNSUPPORTED(__shfl_up)
EMU_UNSUPPORTED(__ballot)
EMU_UNSUPPORTED(__any)
EMU_UNSUPPORTED(__all)
EMU_UNSUPPORTED(__activemask)
EMU_UNSUPPORTED(__syncthreads_count)
EMU_UNSUPPORTED(__syncthreads_and)
EMU_UNSUPPORTED(__syncthreads_or)
EMU_UNSUPPORTED(__threadfence)
EMU_UNSUPPORTED(__threadfence_block)
EMU_UNSUPPORTED(__nanosleep)
EMU_UNSUPPORTED(clock64)
EMU_UNSUPPORTED(__pipeline_memcpy_async)
EMU_UNSUPPORTED(__pipeline_commit)
EMU_UNSUPPORTED(__pipeline_wait_prior)
EMU_UNSUPPORTED(__hadd)
EMU_UNSUPPORTED(__hmul)
EMU_UNSUPPORTED(__hfma)
EMU_UNSUPPORTED(__hadd2)
EMU_UNSUPPORTED(__hmul2)
EMU_UNSUPPORTED(__hfma2)
#undef EMU_UNSUPPORTED
