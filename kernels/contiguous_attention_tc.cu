// Contiguous decode attention on tensor cores: attention_tc.cuh over a cache with no block table,
// the baseline for paged_attention_tc.cu (the two agree bit for bit).
#include "attention_tc.cuh"

#define CONTIGUOUS_ATTENTION_TC(name, T, KV, E, D, G)                                          \
  PAGEDKV_DEFINE_CONTIGUOUS_ATTENTION_WITH(contiguous_attention_tc_##name##_d##D##_g##G,       \
                                           attn::tc::decode_attention,                         \
                                           attn::tc::min_blocks_per_sm(), T, KV, E, D, G)
PAGEDKV_FOR_EACH_TC_ATTENTION(CONTIGUOUS_ATTENTION_TC)
