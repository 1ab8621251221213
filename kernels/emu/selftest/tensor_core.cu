// Kernels that test the emulator's tensor cores (tests/suite/emu_tensor_core.rs): mma_m16n8k16 and
// ldmatrix of kernels/tensor_core.cuh, as the kernels call them. Emulator only, never in the
// fatbin.
#include "tensor_core.cuh"
#include "tensor_core_checks.cuh"

struct TensorCoreOps {
    template <class T>
    static void multiply(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
        mma_m16n8k16<T>(d, a, b);
    }
    template <int N, bool TRANS>
    static void load(unsigned (&r)[N], const void* row) {
        ldmatrix<N, TRANS>(r, row);
    }
};

TC_CHECK_KERNELS(emu_selftest_tc, TensorCoreOps)

// An mma that only lanes below `lanes` of each warp reach; the others return.
extern "C" __global__ void emu_selftest_tc_mma_some_lanes(GPTR(float) out,  // [block * 4]
                                                          int lanes) {
    const unsigned t = thread_rank();
    if (static_cast<int>(t % 32) >= lanes) return;
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    const unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    mma_m16n8k16<__half>(d, a, b);
    for (int i = 0; i < 4; i++) out[t * 4 + i] = d[i];
}

// Lanes below 16 in an mma, the others in an ldmatrix.x4 (shape 4) or an ldmatrix.x1 (shape 1),
// or an f16 mma beside a bf16 one (shape 0).
extern "C" __global__ void emu_selftest_tc_mixed(GPTR(float) out,  // [block]
                                                 int shape) {
    __shared__ __align__(16) uint4 rows[32];
    const unsigned t = thread_rank();
    rows[t % 32] = make_uint4(0, 0, 0, 0);
    __syncwarp();
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    const unsigned a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
    unsigned r[4] = {0, 0, 0, 0};
    if (t % 32 < 16) {
        mma_m16n8k16<__half>(d, a, b);
    } else if (shape == 0) {
        mma_m16n8k16<__nv_bfloat16>(d, a, b);
    } else if (shape == 1) {
        unsigned r1[1];
        ldmatrix<1, false>(r1, &rows[t % 32]);
        r[0] = r1[0];
    } else {
        ldmatrix<4, false>(r, &rows[t % 32]);
    }
    out[t] = d[0] + static_cast<float>(r[0]);
}

// ldmatrix.x4 where lane `bad_lane` gives a bad row address: mode 0 a thread-local variable (not
// shared memory), 1 its shared row plus 8 bytes (misaligned), 2 the last 8 bytes of dynamic shared
// memory (`smem_bytes` of it; the row runs past its end). Other lanes give their own rows.
extern "C" __global__ void emu_selftest_tc_ldmatrix_bad_address(GPTR(unsigned) out,  // [block * 4]
                                                                int bad_lane, int mode,
                                                                int smem_bytes) {
    DYNAMIC_SHARED(uint4, rows);
    const unsigned t = thread_rank();
    rows[t] = make_uint4(t, t, t, t);
    __syncwarp();
    const uint4 local = make_uint4(0, 0, 0, 0);
    const void* row = &rows[t];
    if (static_cast<int>(t % 32) == bad_lane) {
        if (mode == 0) row = &local;
        if (mode == 1) row = reinterpret_cast<const char*>(&rows[t]) + 8;
        if (mode == 2) row = reinterpret_cast<const char*>(rows) + smem_bytes - 8;
    }
    unsigned r[4];
    ldmatrix<4, false>(r, row);
    for (int i = 0; i < 4; i++) out[t * 4 + i] = r[i];
}
