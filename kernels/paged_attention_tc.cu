// Paged decode attention on tensor cores (attention_tc.cuh) for the shapes listed by
// PAGEDKV_FOR_EACH_TC_ATTENTION; the same signature as paged_attention.cu's kernels, whose
// merge_partitions_* combine its split-K partials.
#include "attention_tc.cuh"

#define PAGED_ATTENTION_TC(name, T, KV, E, D, G)                                               \
  PAGEDKV_DEFINE_PAGED_ATTENTION_WITH(paged_attention_tc_##name##_d##D##_g##G,                 \
                                      attn::tc::decode_attention, attn::tc::min_blocks_per_sm(), \
                                      T, KV, E, D, G)
PAGEDKV_FOR_EACH_TC_ATTENTION(PAGED_ATTENTION_TC)
