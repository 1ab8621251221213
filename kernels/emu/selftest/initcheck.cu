// Kernels that test the emulator's initcheck (tests/suite/emu_initcheck.rs): reads, writes and
// read-modify-writes of a writable buffer through emu::gptr's element proxy, an atomic, and
// 16-byte vector loads and stores. Emulator only, never in the fatbin.
#include "common.cuh"

// acc[i] += x[i]; out[i] = acc[i]; hits[0] counts the threads (atomically); one thread per i.
extern "C" __global__ void emu_selftest_initcheck_accumulate(GPTR(float) acc,      // [n]
                                                             GPTR(const float) x,  // [n]
                                                             GPTR(float) out,      // [n]
                                                             GPTR(unsigned) hits,  // [1]
                                                             int n) {
    const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (i >= n) return;
    acc[i] += x[i];
    out[i] = acc[i];
    atomicAdd(hits, 1u);
}

// dst[4i..4i+4) = src[4i..4i+4) as one 16-byte vector per thread.
extern "C" __global__ void emu_selftest_initcheck_vectors(GPTR(float) dst,        // [4n]
                                                          GPTR(const float) src,  // [4n]
                                                          int n) {
    const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) st_vec(dst + 4 * i, ld_vec<float4>(src + 4 * i));
}
