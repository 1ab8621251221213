// Tiny kernels whose bytes in flight are known by hand: the static report's analyser
// (src/kernels/sass/) is checked against them by tests/suite/kernels_sass_fixtures.rs. The committed
// fixtures.sm_90.sass and fixtures.sm_90.elf are this file compiled by nvcc 13.0.88 and dumped by
// cuobjdump 13.2.86, as build.rs does (kernels/build_sass.rs) when both are present, so the test
// also runs on fresh output:
//   nvcc -cubin -arch sm_90 -O3 -std=c++17 fixtures.cu -o fixtures.cubin
//   cuobjdump -sass -arch sm_90 fixtures.cubin > fixtures.sm_90.sass
//   cuobjdump -elf -arch sm_90 fixtures.cubin > fixtures.sm_90.elf
#include <cstdint>

// One 4-byte load per iteration, consumed at once: 1 load (128 B per warp) in flight.
extern "C" __global__ void __launch_bounds__(128) serial_loads(float* out, const float* in,
                                                               int n) {
  float acc = 0.f;
#pragma unroll 1
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc = acc * 0.5f + in[i];
  out[threadIdx.x] = acc;
}

// Each load's address is the previous load's value: 1 load (128 B per warp) in flight.
extern "C" __global__ void __launch_bounds__(128) pointer_chase(int* out, const int* next,
                                                                int steps) {
  int at = threadIdx.x;
#pragma unroll 1
  for (int s = 0; s < steps; ++s) at = next[at];
  out[threadIdx.x] = at;
}

// Two independent 4-byte loads, then their uses: 2 loads (256 B per warp) in flight.
extern "C" __global__ void __launch_bounds__(128) two_loads(float* out, const float* a,
                                                            const float* b, int n) {
  float acc = 0.f;
#pragma unroll 1
  for (int i = threadIdx.x; i < n; i += blockDim.x) acc += a[i] * b[i];
  out[threadIdx.x] = acc;
}

// Four independent 16-byte loads, then their uses: 4 x 512 = 2048 B per warp in flight.
extern "C" __global__ void __launch_bounds__(128) four_wide_loads(unsigned* out, const uint4* in,
                                                                  int n) {
  unsigned acc = 0;
#pragma unroll 1
  for (int i = threadIdx.x; i + 3 * 128 < n; i += 4 * 128) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = __ldg(in + i + u * 128);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
  }
  out[threadIdx.x] = acc;
}

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Double buffering with cp.async: tile t+1 is copied while tile t is used. Each iteration
// commits one group of one 16-byte copy per lane (512 B per warp) and waits until at most
// STAGES - 1 groups remain: STAGES x 512 B per warp in flight.
template <int STAGES>
__device__ __forceinline__ void cp_async_pipeline(unsigned* out, const uint4* in, int tiles) {
  __shared__ uint4 buf[STAGES][128];
  unsigned acc = 0;
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < tiles) cp_async16(&buf[s][threadIdx.x], in + s * 128 + threadIdx.x);
    cp_async_commit();
  }
#pragma unroll 1
  for (int t = 0; t < tiles; ++t) {
    const int next = t + STAGES - 1;
    if (next < tiles) cp_async16(&buf[next % STAGES][threadIdx.x], in + next * 128 + threadIdx.x);
    cp_async_commit();
    cp_async_wait<STAGES - 1>();
    __syncthreads();
    const uint4 v = buf[t % STAGES][(threadIdx.x + 1) % 128];
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
    __syncthreads();
  }
  out[threadIdx.x] = acc;
}

extern "C" __global__ void __launch_bounds__(128) cp_async_two_stages(unsigned* out,
                                                                      const uint4* in, int tiles) {
  cp_async_pipeline<2>(out, in, tiles);
}

extern "C" __global__ void __launch_bounds__(128) cp_async_three_stages(unsigned* out,
                                                                        const uint4* in,
                                                                        int tiles) {
  cp_async_pipeline<3>(out, in, tiles);
}

// A prologue loop over a fixed range (q: 512 floats into shared memory, 4 per thread), then the
// loop over the data at the same depth: four independent 16-byte loads per iteration.
extern "C" __global__ void __launch_bounds__(128) q_prologue_then_stream(unsigned* out, const float* q,
                                                                     const uint4* kv, int n) {
  __shared__ float qs[512];
#pragma unroll 1
  for (int i = threadIdx.x; i < 512; i += 128) qs[i] = q[blockIdx.x * 512 + i];
  __syncthreads();
  unsigned acc = 0;
#pragma unroll 1
  for (int i = threadIdx.x; i + 3 * 128 < n; i += 4 * 128) {
    uint4 v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) v[u] = __ldg(kv + i + u * 128);
#pragma unroll
    for (int u = 0; u < 4; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    acc += __float_as_uint(qs[(i >> 7) & 511]);
  }
  out[threadIdx.x] = acc;
}

// Page indices refilled once every 8 iterations (it % 8 == 0: FlashInfer's decode reads them once
// every bdx iterations), a 16-byte row every iteration through them.
extern "C" __global__ void __launch_bounds__(128) refill_every_8(float* out, const int* idx,
                                                                 const float4* kv, int iters) {
  __shared__ int page[128];
  float acc = 0.f;
#pragma unroll 1
  for (int it = 0; it < iters; ++it) {
    if (it % 8 == 0) {
      page[threadIdx.x] = idx[(it / 8) * 128 + threadIdx.x];
      __syncwarp();
    }
    float4 v = kv[page[(threadIdx.x + it) % 128] * 128 + threadIdx.x];
    acc += v.x + v.y + v.z + v.w;
  }
  out[threadIdx.x] = acc;
}

// The same with a refill too long to predicate: ptxas branches around it.
extern "C" __global__ void __launch_bounds__(128) refill_branch_every_4(float* out, const int* idx,
                                                                        const float4* kv, int iters) {
  __shared__ int page[4][128];
  float acc = 0.f;
#pragma unroll 1
  for (int it = 0; it < iters; ++it) {
    if (it % 4 == 0) {
#pragma unroll
      for (int j = 0; j < 4; ++j) page[j][threadIdx.x] = idx[(it + j) * 128 + threadIdx.x] * 3 + j;
      __syncwarp();
    }
    float4 v = kv[page[it % 4][(threadIdx.x + it) % 128] * 128 + threadIdx.x];
    acc += v.x + v.y + v.z + v.w;
  }
  out[threadIdx.x] = acc;
}

// The last block's rows past the sequence's end zeroed inside the loop (vLLM's V loop pads the
// last block so): a block that runs on one iteration of the loop only, not in its steady state.
extern "C" __global__ void __launch_bounds__(128) last_block_padding(float* out, const float4* kv,
                                                                     int blocks, int len) {
  float acc = 0.f;
#pragma unroll 1
  for (int b = 0; b < blocks; ++b) {
    float4 v = kv[b * 128 + threadIdx.x];
    if (b == blocks - 1) {
      const int t = b * 128 + threadIdx.x;
      v.x = t < len ? v.x : 0.f;
      v.y = t + 1 < len ? v.y : 0.f;
      v.z = t + 2 < len ? v.z : 0.f;
      v.w = t + 3 < len ? v.w : 0.f;
      acc *= 0.5f;
    }
    acc += v.x * v.y + v.z * v.w;
  }
  out[threadIdx.x] = acc;
}

// No __launch_bounds__: the report needs a declared block size for it.
extern "C" __global__ void no_bounds(float* out, const float* in) {
  out[threadIdx.x] = in[threadIdx.x] * 2.f;
}
