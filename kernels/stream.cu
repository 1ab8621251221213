// Stream probes: the memory limits every bandwidth figure is reported against, measured over the
// same bytes in the same run. A copy (reads + writes) and a read-only reduction (reads only).
#include "common.cuh"

// Both probes run 256 threads per CTA (src/device/cuda/stream.rs); __launch_bounds__ says so to
// ptxas and to the static report.

// dst = src for n 16-byte vectors, grid-stride.
extern "C" __global__ void __launch_bounds__(256)
    stream_copy(GPTR(unsigned char) dst,        // [n * 16]
                GPTR(const unsigned char) src,  // [n * 16]
                int64_t n) {
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    st_vec<uint4>(dst + i * 16, ld_vec<uint4>(src + i * 16));
}

// Reads n 16-byte vectors and writes one xor-fold per CTA, so the reads cannot be optimised away.
extern "C" __global__ void __launch_bounds__(256)
    stream_read(GPTR(unsigned) out,             // [gridDim.x]
                GPTR(const unsigned char) src,  // [n * 16]
                int64_t n) {
  unsigned acc = 0;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    const uint4 v = ld_vec<uint4>(src + i * 16);
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
