// Kernels that test the emulator itself (tests/suite/emu_selftest.rs). Compiled into the emulator only,
// never into the GPU fatbin (build.rs scans kernels/*.cu, not this folder).
#include "common.cuh"

// Reverses each block's slice through shared memory, with the barrier a correct kernel needs.
extern "C" __global__ void emu_selftest_reverse_synced(GPTR(const float) in,  // [grid * block]
                                                       GPTR(float) out) {     // [grid * block]
    __shared__ float s[1024];
    const unsigned n = blockDim.x, t = threadIdx.x, base = blockIdx.x * n;
    s[t] = in[base + t];
    __syncthreads();
    out[base + t] = s[n - 1 - t];
}

// The same without the barrier: a race on dynamic shared memory (poisoned before each block).
extern "C" __global__ void emu_selftest_reverse_racy(GPTR(const float) in,  // [grid * block]
                                                     GPTR(float) out) {     // [grid * block]
    DYNAMIC_SHARED(float, s);
    const unsigned n = blockDim.x, t = threadIdx.x, base = blockIdx.x * n;
    s[t] = in[base + t];
    out[base + t] = s[n - 1 - t];
}

// The same race on static shared memory (which keeps the previous block's values).
extern "C" __global__ void emu_selftest_reverse_racy_static(GPTR(const float) in,  // [grid * block]
                                                            GPTR(float) out) {     // [grid * block]
    __shared__ float s[1024];
    const unsigned n = blockDim.x, t = threadIdx.x, base = blockIdx.x * n;
    s[t] = in[base + t];
    out[base + t] = s[n - 1 - t];
}

// Rounds of write / barrier / read a neighbour / barrier: each read must see this round's write.
// Any block shape: threads are numbered by thread_rank(), blocks by their linear index.
extern "C" __global__ void emu_selftest_barrier_rounds(GPTR(int) out,  // [blocks * threads]
                                                       int rounds) {
    __shared__ int s[1024];
    const unsigned n = blockDim.x * blockDim.y * blockDim.z, t = thread_rank();
    const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    int acc = 0;
    for (int r = 0; r < rounds; r++) {
        s[t] = r * 1000 + static_cast<int>(t);
        __syncthreads();
        acc = acc * 7 + s[(t + r + 1) % n];
        __syncthreads();
    }
    out[block * n + t] = acc * 10 + static_cast<int>(threadIdx.y + 2 * blockIdx.z);
}

// Warp and block reductions from common.cuh over a 1-D block (a multiple of 32 threads).
extern "C" __global__ void emu_selftest_reductions(GPTR(const float) in,    // [block]
                                                   GPTR(float) warp_sums,   // [block]
                                                   GPTR(float) warp_maxes,  // [block]
                                                   GPTR(float) block_sums,  // [block]
                                                   GPTR(float) block_maxes) {  // [block]
    const unsigned t = threadIdx.x;
    const float x = in[t];
    warp_sums[t] = warp_sum(x);
    warp_maxes[t] = warp_max(x);
    block_sums[t] = block_sum(x);
    block_maxes[t] = block_max(x);
}

// Every warp collective once, each lane writing its results: out[t * 7 + k].
extern "C" __global__ void emu_selftest_shuffles(GPTR(int) out,  // [block * 7]
                                                 int arg, int width) {
    const int t = static_cast<int>(threadIdx.x), v = t * 3 + 1;
    const unsigned full = 0xffffffffu;
    out[t * 7 + 0] = __shfl_sync(full, v, arg, width);
    out[t * 7 + 1] = __shfl_up_sync(full, v, static_cast<unsigned>(arg), width);
    out[t * 7 + 2] = __shfl_down_sync(full, v, static_cast<unsigned>(arg), width);
    out[t * 7 + 3] = __shfl_xor_sync(full, v, arg, width);
    out[t * 7 + 4] = static_cast<int>(__ballot_sync(full, t % 3 == 0));
    out[t * 7 + 5] = __any_sync(full, t % 32 == arg);
    __syncwarp();
    out[t * 7 + 6] = __all_sync(full, t % 32 != arg);
}

// A barrier only threads below `cut` reach.
extern "C" __global__ void emu_selftest_divergent_barrier(GPTR(int) out,  // [block]
                                                          int cut) {
    if (static_cast<int>(threadIdx.x) < cut) __syncthreads();
    out[threadIdx.x] = 1;
}

// Odd and even threads at two different barriers.
extern "C" __global__ void emu_selftest_split_barrier(GPTR(int) out) {  // [block]
    if (threadIdx.x % 2) {
        __syncthreads();
    } else {
        __syncthreads();
    }
    out[threadIdx.x] = 1;
}

// Lane `gone` exits before a full-warp shuffle.
extern "C" __global__ void emu_selftest_warp_exit(GPTR(float) out,  // [block]
                                                  int gone) {
    if (static_cast<int>(threadIdx.x % 32) == gone) return;
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

// out[t] = in[t + shift]: out of bounds once t + shift passes the end of `in`.
extern "C" __global__ void emu_selftest_shifted_read(GPTR(const float) in,  // [n]
                                                     GPTR(float) out,       // [block]
                                                     int shift) {
    out[threadIdx.x] = in[static_cast<int>(threadIdx.x) + shift];
}

// A 16-byte load at element `offset`: misaligned unless offset is a multiple of 4.
extern "C" __global__ void emu_selftest_vector_load(GPTR(const float) in,  // [n]
                                                    GPTR(float) out,       // [4]
                                                    int offset) {
    const float4 v = ld_vec<float4>(in + offset);
    st_vec(out, v);
}

// Element conversions and the 16-byte pack/unpack of common.cuh, one thread per 8 elements.
extern "C" __global__ void emu_selftest_convert(GPTR(const float) x,       // [n]
                                                GPTR(__half) h,            // [n]
                                                GPTR(__nv_bfloat16) b,     // [n]
                                                GPTR(float) h_unpacked,    // [n]
                                                GPTR(float) b_unpacked,    // [n]
                                                int n) {
    const int first = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (first >= n) return;
    float in[8];
    for (int i = 0; i < 8; i++) {
        in[i] = x[first + i];
        h[first + i] = __float2half_rn(in[i]);
        b[first + i] = from_float<__nv_bfloat16>(in[i]);
    }
    float hf[8], bf[8];
    unpack16<__half>(ld_vec<uint4>(h + first), hf);
    unpack16<__nv_bfloat16>(pack16<__nv_bfloat16>(in), bf);
    for (int i = 0; i < 8; i++) {
        h_unpacked[first + i] = hf[i];
        b_unpacked[first + i] = bf[i];
    }
}

// A kernel with launch bounds given by a constant: bigger blocks must not launch.
constexpr int kBoundedThreads = 64;
extern "C" __global__ void emu_selftest_bounded(GPTR(int) out);  // a declaration first
extern "C" __global__ __launch_bounds__(kBoundedThreads, 2) void emu_selftest_bounded(
    GPTR(int) out) {  // [block]
    out[threadIdx.x] = static_cast<int>(threadIdx.x);
}

// Reads static shared memory before writing it: the emulator must show poison (0xff), in every
// block, although the previous block left 1.0 there.
extern "C" __global__ void emu_selftest_static_shared_poison(GPTR(float) out) {  // [grid * block]
    __shared__ float s[64], unused[2];
    const unsigned t = threadIdx.x;
    out[blockIdx.x * blockDim.x + t] = s[t];
    __syncthreads();
    s[t] = 1.0f;
    unused[0] = 1.0f;
}

// cp.async through the ring discipline: each thread copies `groups` 16-byte vectors of `in`, one
// group each, into shared memory, then waits until at most `pending` groups are left and writes
// back what its slots hold (the retired copies' data; poison for those still in flight).
// pending < 0: no wait at all. dst_global != 0: the copy's destination is global memory (an error).
extern "C" __global__ void emu_selftest_cp_async(GPTR(const float) in,  // [threads * groups * 4]
                                                 GPTR(float) out,       // [threads * groups * 4]
                                                 int groups, int pending) {
    __shared__ __align__(16) float4 slots[32][8];
    const int t = threadIdx.x;
    for (int g = 0; g < groups; ++g) {
        cp_async16(&slots[t][g], in + (t * groups + g) * 4);
        cp_async_commit();
    }
    if (pending == 0) cp_async_wait<0>();
    if (pending == 1) cp_async_wait<1>();
    if (pending == 2) cp_async_wait<2>();
    for (int g = 0; g < groups; ++g) st_vec(out + (t * groups + g) * 4, slots[t][g]);
}

// A cp.async whose destination is not shared memory.
extern "C" __global__ void emu_selftest_cp_async_to_global(GPTR(const float) in,  // [4]
                                                           GPTR(float) out) {     // [4]
    float4 local;
    cp_async16(&local, in);
    cp_async_wait<0>();
    st_vec(out, local);
}

// A race the emulator must report: thread t's cp.async into s[t] is still in flight when thread
// t - 1 writes s[t]. wait_after_write != 0: the copy is waited for after that write (caught at the
// wait); otherwise never (caught when the block ends).
extern "C" __global__ void emu_selftest_cp_async_race(GPTR(const float) in,  // [threads * 4]
                                                      GPTR(float) out,       // [threads * 4]
                                                      int wait_after_write) {
    __shared__ __align__(16) float4 s[32];
    const int t = threadIdx.x;
    cp_async16(&s[t], in + t * 4);
    cp_async_commit();
    __syncthreads();
    s[(t + 1) % 32] = make_float4(1.f, 1.f, 1.f, 1.f);
    __syncthreads();
    if (wait_after_write) cp_async_wait<0>();
    st_vec(out + t * 4, s[t]);
}

// out[i] = __byte_perm(x[i], y[i], s[i]).
extern "C" __global__ void emu_selftest_byte_perm(GPTR(const unsigned) x,  // [n]
                                                  GPTR(const unsigned) y,  // [n]
                                                  GPTR(const unsigned) s,  // [n]
                                                  GPTR(unsigned) out,      // [n]
                                                  int n) {
    const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) out[i] = __byte_perm(x[i], y[i], s[i]);
}
