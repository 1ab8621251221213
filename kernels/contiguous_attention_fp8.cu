// Contiguous decode attention over fp8 K and V: the baseline of paged_attention_fp8.cu, in a file
// of its own so that the attention files compile in parallel (attention.cuh defines the kernels).
#include "attention.cuh"

#define CONTIGUOUS_ATTENTION(name, T, KV, E, D, G) \
  PAGEDKV_DEFINE_CONTIGUOUS_ATTENTION(contiguous_attention_##name##_d##D##_g##G, T, KV, E, D, G)
#define CONTIGUOUS_ATTENTION_GROUPS(name, T, KV, D) \
  PAGEDKV_FOR_EACH_ATTENTION_GROUP(CONTIGUOUS_ATTENTION, name, T, KV, unsigned char, D)
PAGEDKV_FOR_EACH_FP8_ATTENTION_DTYPE_AND_DIM(CONTIGUOUS_ATTENTION_GROUPS)
