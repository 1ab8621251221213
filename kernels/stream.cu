// Stream probes: the memory limits every bandwidth figure is reported against, measured over the
// same bytes in the same run. A copy (reads + writes) and a read-only reduction (reads only).
#include "common.cuh"

// dst[i] = src[i] for n 16-byte vectors, grid-stride.
extern "C" __global__ void stream_copy(GPTR(uint4) dst,        // [n]
                                       GPTR(const uint4) src,  // [n]
                                       long long n) {
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x)
    dst[i] = src[i];
}

// Reads n 16-byte vectors and writes one xor-fold per CTA, so the reads cannot be optimised away.
extern "C" __global__ void stream_read(GPTR(unsigned) out,      // [gridDim.x]
                                       GPTR(const uint4) src,   // [n]
                                       long long n) {
  unsigned acc = 0;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (long long)gridDim.x * blockDim.x) {
    const uint4 v = ld_vec<uint4>(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) acc ^= __shfl_xor_sync(0xffffffffu, acc, off);
  __shared__ unsigned warp_acc[32];
  if (threadIdx.x % 32 == 0) warp_acc[threadIdx.x / 32] = acc;
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned total = 0;
    for (int w = 0; w < (int)(blockDim.x + 31) / 32; ++w) total ^= warp_acc[w];
    out[blockIdx.x] = total;
  }
}
