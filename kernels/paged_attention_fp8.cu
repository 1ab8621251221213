// Paged decode attention over fp8 K and V (e4m3, e5m2, with per-KV-head scales), q and the output
// in f16 or bf16: the same kernel as paged_attention.cu (attention.cuh), in a file of its own so
// that the two compile in parallel. Split-K partials are merged by paged_attention.cu's kernels.
#include "attention.cuh"

#define PAGED_ATTENTION(name, T, KV, E, D, G) \
  PAGEDKV_DEFINE_PAGED_ATTENTION(paged_attention_##name##_d##D##_g##G, T, KV, E, D, G)
#define PAGED_ATTENTION_GROUPS(name, T, KV, D) \
  PAGEDKV_FOR_EACH_ATTENTION_GROUP(PAGED_ATTENTION, name, T, KV, unsigned char, D)
PAGEDKV_FOR_EACH_FP8_ATTENTION_DTYPE_AND_DIM(PAGED_ATTENTION_GROUPS)
