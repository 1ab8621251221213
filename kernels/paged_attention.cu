// Paged decode attention: K and V read through the block table. See attention.cuh.
//
// The signatures below (and contiguous_attention.cu's) are the one statement of the kernels'
// argument order; the launchers, src/device/cuda/attention.rs on a GPU and src/emu/attention.rs on
// the emulator, pass their arguments in this order and refer here. Buffer shapes are on
// attn::decode_attention and attn::merge_partitions in attention.cuh.
#include "attention.cuh"

#define PAGED_ATTENTION(name, T, D, G)                                                        \
  extern "C" __global__ void __launch_bounds__(attn::kThreads, attn::min_blocks_per_sm(D, G))                                \
      paged_attention_##name##_d##D##_g##G(                                                   \
          GPTR(T) out, GPTR(float) part_out, GPTR(float) part_max, GPTR(float) part_sum,       \
          GPTR(const T) q, GPTR(const T) k_cache, GPTR(const T) v_cache,                      \
          GPTR(const int) block_tables, GPTR(const int) seq_lens, int table_stride,           \
          int log2_block_size, int num_partitions, int partition_size, float scale) {         \
    const attn::PagedRows rows{block_tables, table_stride, log2_block_size, (int)gridDim.x};  \
    attn::decode_attention<T, D, G>(out, part_out, part_max, part_sum, q, k_cache, v_cache,   \
                                    seq_lens, rows,                                           \
                                    attn::Outputs{num_partitions, partition_size, scale});    \
  }
PAGEDKV_FOR_EACH_ATTENTION_INSTANCE(PAGED_ATTENTION)

#define MERGE_PARTITIONS(name, T, D)                                                          \
  extern "C" __global__ void merge_partitions_##name##_d##D(                                  \
      GPTR(T) out, GPTR(const float) part_out, GPTR(const float) part_max,                    \
      GPTR(const float) part_sum, int num_partitions) {                                       \
    attn::merge_partitions<T, D>(out, part_out, part_max, part_sum, num_partitions);          \
  }
MERGE_PARTITIONS(f16, __half, 64) MERGE_PARTITIONS(f16, __half, 128) MERGE_PARTITIONS(f16, __half, 256)
MERGE_PARTITIONS(bf16, __nv_bfloat16, 64) MERGE_PARTITIONS(bf16, __nv_bfloat16, 128)
MERGE_PARTITIONS(bf16, __nv_bfloat16, 256)
MERGE_PARTITIONS(f32, float, 128)
