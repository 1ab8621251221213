// Cache operations: write new tokens' K/V through a slot mapping, and copy whole blocks (the same
// kernel serves copy-on-write inside a pool and swaps between device and mapped pinned host
// memory, all pairs in one launch where vLLM issues one memcpy per block).
#include "common.cuh"

// One CTA per token; threads stride over its num_kv_heads * head_dim elements of K and V, and
// put(dst, src, head) moves element src of the new K/V to element dst of the pools. Both slot
// writes below are this walk.
template <class Put>
__device__ __forceinline__ void for_each_slot_elem(
    GPTR(const int64_t) slots,  // [num_tokens]; negative = skip; no two alike (checked on the host)
    int num_kv_heads, int head_dim, int log2_block_size, Put put) {
  const PagedLayout layout{num_kv_heads, log2_block_size, head_dim};
  const int token = blockIdx.x;
  const int64_t slot = slots[token];
  if (slot < 0) return;
  const int elems = num_kv_heads * head_dim;
  for (int i = threadIdx.x; i < elems; i += blockDim.x) {
    const int head = i / head_dim, dim = i % head_dim;
    put(layout.slot_row(slot, head) + dim, (int64_t)token * elems + i, head);
  }
}

template <class T>
__device__ __forceinline__ void write_kv_slots(
    GPTR(T) k_cache,            // [num_blocks, num_kv_heads, block_size, head_dim]
    GPTR(T) v_cache,            // [num_blocks, num_kv_heads, block_size, head_dim]
    GPTR(const T) k_new,        // [num_tokens, num_kv_heads, head_dim]
    GPTR(const T) v_new,        // [num_tokens, num_kv_heads, head_dim]
    GPTR(const int64_t) slots,  // [num_tokens]
    int num_kv_heads, int head_dim, int log2_block_size) {
  for_each_slot_elem(slots, num_kv_heads, head_dim, log2_block_size,
                     [&](int64_t dst, int64_t src, int) {
                       k_cache[dst] = k_new[src];
                       v_cache[dst] = v_new[src];
                     });
}

// 128 threads per CTA for both kernels (src/device/cuda/cache_ops.rs): __launch_bounds__ says so
// to ptxas and to the static report.
#define WRITE_KV_SLOTS(name, T)                                                               \
  extern "C" __global__ void __launch_bounds__(128) write_kv_slots_##name(                    \
      GPTR(T) k_cache, GPTR(T) v_cache, GPTR(const T) k_new, GPTR(const T) v_new,             \
      GPTR(const int64_t) slots, int num_kv_heads, int head_dim, int log2_block_size) {     \
    write_kv_slots<T>(k_cache, v_cache, k_new, v_new, slots, num_kv_heads, head_dim,          \
                      log2_block_size);                                                       \
  }
WRITE_KV_SLOTS(f16, __half)
WRITE_KV_SLOTS(bf16, __nv_bfloat16)
WRITE_KV_SLOTS(f32, float)

// Writes token i's K/V into an fp8 cache (format F), quantised with the KV head's scale as vLLM
// does: code = fp8(x / scale), round to nearest even, saturating. The same geometry as
// write_kv_slots.
template <__nv_fp8_interpretation_t F, class T>
__device__ __forceinline__ void quantize_kv_slots(
    GPTR(unsigned char) k_cache,  // [num_blocks, num_kv_heads, block_size, head_dim] fp8 codes
    GPTR(unsigned char) v_cache,  // [num_blocks, num_kv_heads, block_size, head_dim] fp8 codes
    GPTR(const T) k_new,          // [num_tokens, num_kv_heads, head_dim]
    GPTR(const T) v_new,          // [num_tokens, num_kv_heads, head_dim]
    GPTR(const int64_t) slots,    // [num_tokens]
    GPTR(const float) k_scale,    // [num_kv_heads]
    GPTR(const float) v_scale,    // [num_kv_heads]
    int num_kv_heads, int head_dim, int log2_block_size) {
  for_each_slot_elem(slots, num_kv_heads, head_dim, log2_block_size,
                     [&](int64_t dst, int64_t src, int head) {
                       k_cache[dst] = float_to_fp8_scaled<F>(to_float(k_new[src]), k_scale[head]);
                       v_cache[dst] = float_to_fp8_scaled<F>(to_float(v_new[src]), v_scale[head]);
                     });
}

#define QUANTIZE_KV_SLOTS(name, T, fmt, F)                                                     \
  extern "C" __global__ void __launch_bounds__(128) quantize_kv_slots_##name##_to_##fmt(       \
      GPTR(unsigned char) k_cache, GPTR(unsigned char) v_cache, GPTR(const T) k_new,           \
      GPTR(const T) v_new, GPTR(const int64_t) slots, GPTR(const float) k_scale,               \
      GPTR(const float) v_scale, int num_kv_heads, int head_dim, int log2_block_size) {        \
    quantize_kv_slots<F, T>(k_cache, v_cache, k_new, v_new, slots, k_scale, v_scale,           \
                            num_kv_heads, head_dim, log2_block_size);                          \
  }
QUANTIZE_KV_SLOTS(f16, __half, fp8_e4m3, __NV_E4M3)
QUANTIZE_KV_SLOTS(bf16, __nv_bfloat16, fp8_e4m3, __NV_E4M3)
QUANTIZE_KV_SLOTS(f32, float, fp8_e4m3, __NV_E4M3)
QUANTIZE_KV_SLOTS(f16, __half, fp8_e5m2, __NV_E5M2)
QUANTIZE_KV_SLOTS(bf16, __nv_bfloat16, fp8_e5m2, __NV_E5M2)
QUANTIZE_KV_SLOTS(f32, float, fp8_e5m2, __NV_E5M2)

// Block pair p = blockIdx.y: block pairs[p][0] of src -> block pairs[p][1] of dst, in 16-byte
// vectors; blockIdx.x strides over the block's vectors. A block is always a multiple of 16 bytes
// (head_dim is a multiple of 16).
extern "C" __global__ void __launch_bounds__(128) copy_blocks(
    GPTR(unsigned char) dst,        // [num_dst_blocks, block_vecs * 16]
    GPTR(const unsigned char) src,  // [num_src_blocks, block_vecs * 16]
    GPTR(const int) pairs,          // [num_pairs, 2]: (src block, dst block); no dst twice
    int64_t block_vecs) {
  const int64_t s = pairs[2 * blockIdx.y];
  const int64_t d = pairs[2 * blockIdx.y + 1];
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < block_vecs;
       i += (int64_t)gridDim.x * blockDim.x) {
    st_vec<uint4>(dst + (d * block_vecs + i) * 16, ld_vec<uint4>(src + (s * block_vecs + i) * 16));
  }
}
