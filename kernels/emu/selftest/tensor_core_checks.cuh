// The bodies of the tensor-core selftest kernels (tests/suite/emu_tensor_core.rs), shared by
// tensor_core.cu (the emulator's mma/ldmatrix, through kernels/tensor_core.cuh) and
// tensor_core_mutants.cu (the same with one layout broken). `Ops` supplies the two operations.
// Every fragment coordinate comes from the test, which reads it from CUTLASS cute's layouts.
#pragma once
#include "common.cuh"

namespace tc_check {

__device__ __forceinline__ unsigned bits16(__half x) { return __half_as_ushort(x); }
__device__ __forceinline__ unsigned bits16(__nv_bfloat16 x) { return __bfloat16_as_ushort(x); }

// One mma per warp of the block: warp w computes d[w] = c[w] + a[w] * b[w], a 16 x 16 (row-major,
// m * 16 + k), b 16 x 8 (k * 8 + n), c and d 16 x 8 f32 (m * 8 + n). Lane l loads its A value v
// (register v / 2, half v % 2) from a_at[l * 8 + v] = m * 16 + k, its B value v from
// b_at[l * 4 + v] = k * 8 + n, and its C/D register i at c_at[l * 4 + i] = m * 8 + n.
template <class Ops, class T>
__device__ void mma_check(GPTR(const T) a, GPTR(const T) b, GPTR(const float) c, GPTR(const int) a_at,
                    GPTR(const int) b_at, GPTR(const int) c_at, GPTR(float) d) {
    const unsigned t = thread_rank(), lane = t % 32, w = t / 32;
    unsigned ra[4] = {0, 0, 0, 0}, rb[2] = {0, 0};
    float rd[4];
    for (int v = 0; v < 8; v++) ra[v / 2] |= bits16(a[w * 256 + a_at[lane * 8 + v]]) << (16 * (v % 2));
    for (int v = 0; v < 4; v++) rb[v / 2] |= bits16(b[w * 128 + b_at[lane * 4 + v]]) << (16 * (v % 2));
    for (int i = 0; i < 4; i++) rd[i] = c[w * 128 + c_at[lane * 4 + i]];
    Ops::template multiply<T>(rd, ra, rb);
    for (int i = 0; i < 4; i++) d[w * 128 + c_at[lane * 4 + i]] = rd[i];
}

// One ldmatrix per warp: lane l stores its 16-byte row rows[w][l] in shared-memory slot
// slot[w][l] (of 64 per warp; static or, with `dynamic`, dynamic shared memory) — except lane
// `skip_lane`, whose slot keeps the emulator's poison — and passes that slot's address; with
// `junk_unused`, the lanes whose address ldmatrix does not read (l >= 8 N) pass a pointer that is
// not in shared memory at all. out[w][l][i] = the lane's register i.
template <class Ops, int N, bool TRANS>
__device__ void ldmatrix_check(GPTR(const unsigned) rows, GPTR(const int) slot, GPTR(unsigned) out,
                         int dynamic, int skip_lane, int junk_unused) {
    __shared__ __align__(16) uint4 static_slots[2 * 64];
    DYNAMIC_SHARED(uint4, dynamic_slots);
    const unsigned t = thread_rank(), lane = t % 32, w = t / 32;
    uint4* slots = (dynamic ? dynamic_slots : static_slots) + w * 64;
    uint4* mine = slots + slot[w * 32 + lane];
    if (static_cast<int>(lane) != skip_lane) *mine = ld_vec<uint4>(rows + (w * 32 + lane) * 4);
    __syncwarp();
    const uint4 junk = make_uint4(0, 0, 0, 0);
    const void* row = junk_unused && lane >= 8 * N ? static_cast<const void*>(&junk) : mine;
    unsigned r[N];
    Ops::template load<N, TRANS>(r, row);
    for (int i = 0; i < N; i++) out[(w * 32 + lane) * N + i] = r[i];
}

}  // namespace tc_check

// Stamps the 2 mma and 6 ldmatrix check kernels, named PREFIX_mma_f16, PREFIX_ldmatrix_x4_trans...
#define TC_CHECK_MMA_KERNEL(PREFIX, OPS, SUFFIX, T)                                                \
    extern "C" __global__ void PREFIX##_mma_##SUFFIX(GPTR(const T) a, GPTR(const T) b,            \
                                                     GPTR(const float) c, GPTR(const int) a_at,   \
                                                     GPTR(const int) b_at, GPTR(const int) c_at,  \
                                                     GPTR(float) d) {                             \
        tc_check::mma_check<OPS, T>(a, b, c, a_at, b_at, c_at, d);                                      \
    }
#define TC_CHECK_LDMATRIX_KERNEL(PREFIX, OPS, SUFFIX, N, TRANS)                                   \
    extern "C" __global__ void PREFIX##_ldmatrix_##SUFFIX(GPTR(const unsigned) rows,              \
                                                          GPTR(const int) slot,                   \
                                                          GPTR(unsigned) out, int dynamic,        \
                                                          int skip_lane, int junk_unused) {       \
        tc_check::ldmatrix_check<OPS, N, TRANS>(rows, slot, out, dynamic, skip_lane, junk_unused);      \
    }
#define TC_CHECK_KERNELS(PREFIX, OPS)                                  \
    TC_CHECK_MMA_KERNEL(PREFIX, OPS, f16, __half)                      \
    TC_CHECK_MMA_KERNEL(PREFIX, OPS, bf16, __nv_bfloat16)              \
    TC_CHECK_LDMATRIX_KERNEL(PREFIX, OPS, x1, 1, false)                \
    TC_CHECK_LDMATRIX_KERNEL(PREFIX, OPS, x2, 2, false)                \
    TC_CHECK_LDMATRIX_KERNEL(PREFIX, OPS, x4, 4, false)                \
    TC_CHECK_LDMATRIX_KERNEL(PREFIX, OPS, x1_trans, 1, true)           \
    TC_CHECK_LDMATRIX_KERNEL(PREFIX, OPS, x2_trans, 2, true)           \
    TC_CHECK_LDMATRIX_KERNEL(PREFIX, OPS, x4_trans, 4, true)
