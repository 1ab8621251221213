// Paged decode attention: K and V read through the block table, and the merge of split-K
// partitions (shared with contiguous_attention.cu). The kernels and their argument order are
// defined once in attention.cuh.
#include "attention.cuh"

#define PAGED_ATTENTION(name, T, D, G) \
  PAGEDKV_DEFINE_PAGED_ATTENTION(paged_attention_##name##_d##D##_g##G, T, D, G)
PAGEDKV_FOR_EACH_ATTENTION_INSTANCE(PAGED_ATTENTION)

PAGEDKV_DEFINE_MERGE_PARTITIONS(merge_partitions_f16_d64, __half, 64)
PAGEDKV_DEFINE_MERGE_PARTITIONS(merge_partitions_f16_d128, __half, 128)
PAGEDKV_DEFINE_MERGE_PARTITIONS(merge_partitions_f16_d256, __half, 256)
PAGEDKV_DEFINE_MERGE_PARTITIONS(merge_partitions_bf16_d64, __nv_bfloat16, 64)
PAGEDKV_DEFINE_MERGE_PARTITIONS(merge_partitions_bf16_d128, __nv_bfloat16, 128)
PAGEDKV_DEFINE_MERGE_PARTITIONS(merge_partitions_bf16_d256, __nv_bfloat16, 256)
PAGEDKV_DEFINE_MERGE_PARTITIONS(merge_partitions_f32_d128, float, 128)
