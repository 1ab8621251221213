// Contiguous decode attention: the same math as paged_attention.cu over a cache with no block
// table ([num_seqs, num_kv_heads, max_len, head_dim]), the baseline that shows what paging costs.
// Split-K partials are combined by paged_attention.cu's merge_partitions_* kernels. The kernels,
// their argument order and the list of instances are defined once in attention.cuh.
#include "attention.cuh"

#define CONTIGUOUS_ATTENTION(name, T, KV, E, D, G) \
  PAGEDKV_DEFINE_CONTIGUOUS_ATTENTION(contiguous_attention_##name##_d##D##_g##G, T, KV, E, D, G)
#define CONTIGUOUS_ATTENTION_GROUPS(name, T, D) \
  PAGEDKV_FOR_EACH_ATTENTION_GROUP(CONTIGUOUS_ATTENTION, name, T, T, T, D)
PAGEDKV_FOR_EACH_ATTENTION_DTYPE_AND_DIM(CONTIGUOUS_ATTENTION_GROUPS)
