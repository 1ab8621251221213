// Paged decode attention with K and V stored as q is (f16, bf16, f32): K and V read through the
// block table; and the merge of split-K partitions (shared by every attention file). The kernels,
// their argument order and the list of instances are defined once in attention.cuh.
#include "attention.cuh"

#define PAGED_ATTENTION(name, T, KV, E, D, G) \
  PAGEDKV_DEFINE_PAGED_ATTENTION(paged_attention_##name##_d##D##_g##G, T, KV, E, D, G)
#define PAGED_ATTENTION_GROUPS(name, T, D) \
  PAGEDKV_FOR_EACH_ATTENTION_GROUP(PAGED_ATTENTION, name, T, T, T, D)
PAGEDKV_FOR_EACH_ATTENTION_DTYPE_AND_DIM(PAGED_ATTENTION_GROUPS)

#define MERGE_PARTITIONS(name, T, D) \
  PAGEDKV_DEFINE_MERGE_PARTITIONS(merge_partitions_##name##_d##D, T, D)
PAGEDKV_FOR_EACH_ATTENTION_DTYPE_AND_DIM(MERGE_PARTITIONS)
