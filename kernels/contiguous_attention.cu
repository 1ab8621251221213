// Contiguous decode attention: the same math as paged_attention.cu over a cache with no block
// table ([num_seqs, num_kv_heads, max_len, head_dim]), the baseline that shows what paging costs.
// Split-K partials are combined by paged_attention.cu's merge_partitions_* kernels.
#include "attention.cuh"

#define CONTIGUOUS_ATTENTION(name, T, D, G)                                                   \
  extern "C" __global__ void __launch_bounds__(attn::kThreads, attn::min_blocks_per_sm(D, G))                                \
      contiguous_attention_##name##_d##D##_g##G(                                              \
          GPTR(T) out, GPTR(float) part_out, GPTR(float) part_max, GPTR(float) part_sum,       \
          GPTR(const T) q, GPTR(const T) k_cache, GPTR(const T) v_cache,                      \
          GPTR(const int) seq_lens, int max_len, int num_partitions, int partition_size,       \
          float scale) {                                                                      \
    const attn::ContiguousRows rows{max_len, (int)gridDim.x};                                 \
    attn::decode_attention<T, D, G>(out, part_out, part_max, part_sum, q, k_cache, v_cache,   \
                                    seq_lens, rows,                                           \
                                    attn::Outputs{num_partitions, partition_size, scale});    \
  }
PAGEDKV_FOR_EACH_ATTENTION_INSTANCE(CONTIGUOUS_ATTENTION)
