// Decode attention (one query token per sequence) over a KV cache, GQA-grouped, in f32.
//
// One CTA per (KV head, sequence, partition of the context): it reads that KV head's K and V rows
// of its partition once and computes every query head of the group from that one read, so GQA
// costs no extra KV traffic (vLLM's kernel re-reads KV per query head). The partition is walked in
// chunks of kChunk tokens with an online softmax: a chunk's logits go to shared memory, the running
// max and sum are updated, and the V accumulators are rescaled. With one partition the CTA writes
// the output; with several it writes a normalised partial output, its max and its sum, and
// merge_partitions() combines them (split-K, "flash decoding").
//
// Rows are found through a `Rows` policy: PagedRows reads the block table, ContiguousRows does not;
// everything else is shared, so the two kernels differ only in addressing.
#pragma once
#include "common.cuh"

namespace attn {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kChunk = 128;     // tokens scored per pass (logits buffer: GROUP * kChunk floats)
constexpr int kMaxGroup = 8;    // query heads per KV head
// CTAs per SM promised to ptxas: it caps registers at 65536 / (kThreads * n). Without a promise
// its heuristic spilled a few bytes at 40-80 registers; groups of 8 keep 8 query slices in
// registers and need up to 256; head dim 256 needed a little over 128 on sm_80.
__host__ __device__ constexpr int min_blocks_per_sm(int head_dim, int group) {
  return group >= 8 ? 2 : head_dim >= 256 ? 3 : 4;
}

// ---- loads ------------------------------------------------------------------------------------

// 4 consecutive elements as floats: one 8-byte load for 16-bit types, 16 bytes for f32.
template <class T>
__device__ __forceinline__ void load4(GPTR(const T) p, float (&out)[4]) {
  if constexpr (sizeof(T) == 2) {
    const uint2 raw = ld_vec<uint2>(p);
    const unsigned words[2] = {raw.x, raw.y};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      float2 f;
      if constexpr (std::is_same_v<T, __half>) {
        f = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
      } else {
        f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[i]));
      }
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    }
  } else {
    const float4 raw = ld_vec<float4>(p);
    out[0] = raw.x; out[1] = raw.y; out[2] = raw.z; out[3] = raw.w;
  }
}

// ---- where a token's K/V row lives -------------------------------------------------------------

// Paged: [num_blocks, num_kv_heads, block_size, head_dim]; block = block_table[seq][t >> log2_bs].
struct PagedRows {
  GPTR(const int) block_tables;  // [num_seqs, table_stride]
  int table_stride;
  int log2_block_size;
  int num_kv_heads;
  template <int HEAD_DIM>
  __device__ __forceinline__ int64_t row(int seq, int head, int t) const {
    const int64_t block = block_tables[(int64_t)seq * table_stride + (t >> log2_block_size)];
    const int offset = t & ((1 << log2_block_size) - 1);
    return (((block * num_kv_heads + head) << log2_block_size) + offset) * HEAD_DIM;
  }
};

// Contiguous: [num_seqs, num_kv_heads, max_len, head_dim]; no table.
struct ContiguousRows {
  int max_len;
  int num_kv_heads;
  template <int HEAD_DIM>
  __device__ __forceinline__ int64_t row(int seq, int head, int t) const {
    return (((int64_t)seq * num_kv_heads + head) * max_len + t) * HEAD_DIM;
  }
};

// ---- the kernel body ---------------------------------------------------------------------------

struct Outputs {
  int num_partitions;
  int partition_size;
  float scale;
};

template <class T, int HEAD_DIM, int GROUP, class Rows>
__device__ __forceinline__ void decode_attention(
    GPTR(T) out,             // [num_seqs, num_heads, HEAD_DIM]; written when num_partitions == 1
    GPTR(float) part_out,    // [num_seqs, num_heads, num_partitions, HEAD_DIM]; when > 1
    GPTR(float) part_max,    // [num_seqs, num_heads, num_partitions]
    GPTR(float) part_sum,    // [num_seqs, num_heads, num_partitions]
    GPTR(const T) q,         // [num_seqs, num_heads, HEAD_DIM]
    GPTR(const T) k_cache,   // laid out as Rows says
    GPTR(const T) v_cache,   // laid out as Rows says
    GPTR(const int) seq_lens,  // [num_seqs]
    const Rows rows, const Outputs o) {
  static_assert(GROUP >= 1 && GROUP <= kMaxGroup, "GQA group of 1 to 8 query heads");
  static_assert(HEAD_DIM % 16 == 0, "head dim a multiple of 16");
  // K phase: each lane reads two 16-byte segments of a token's row, at segments (s * K_LANES +
  // lane), so one load instruction covers K_LANES * 16 contiguous bytes of each of K_TOKENS tokens.
  constexpr int SEG = kVec16Elems<T>;                       // elements per 16-byte segment
  constexpr int K_LANES = HEAD_DIM / SEG / 2 < 32 ? HEAD_DIM / SEG / 2 : 32;
  constexpr int K_SEGS = HEAD_DIM / SEG / K_LANES;          // segments per lane
  static_assert(K_SEGS >= 1 && HEAD_DIM % (SEG * K_LANES) == 0, "head dim fits the lanes");
  constexpr int K_TOKENS = 32 / K_LANES;                    // tokens per warp step
  // V phase: lanes split the row in runs of 4 elements; the warp covers V_TOKENS tokens per step.
  constexpr int V_LANES = HEAD_DIM / 4 < 32 ? HEAD_DIM / 4 : 32;
  constexpr int V_RUNS = HEAD_DIM / 4 / V_LANES;            // runs of 4 per lane
  constexpr int V_TOKENS = 32 / V_LANES;
  // Tokens in flight per lane: as many as the registers left beside the accumulators allow.
  constexpr int V_BUDGET = GROUP * V_RUNS * 4 >= 64 ? 16 : 80 - GROUP * V_RUNS * 4;
  constexpr int V_FIT = V_BUDGET / (V_RUNS * 4);
  constexpr int V_UNROLL = V_FIT >= 8 ? 8 : V_FIT >= 4 ? 4 : 2;

  const int kv_head = blockIdx.x;
  const int seq = blockIdx.y;
  const int part = blockIdx.z;
  const int num_kv_heads = gridDim.x;
  const int num_heads = num_kv_heads * GROUP;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int len = seq_lens[seq];
  const int start = part * o.partition_size;
  const int end = min(len, start + o.partition_size);

  __shared__ float q_s[GROUP][HEAD_DIM];
  __shared__ float logits[GROUP][kChunk];
  __shared__ float m_s[GROUP], l_s[GROUP], alpha_s[GROUP];
  __shared__ float red[GROUP][HEAD_DIM];

  for (int i = threadIdx.x; i < GROUP * HEAD_DIM; i += kThreads) {
    const int g = i / HEAD_DIM, d = i % HEAD_DIM;
    q_s[g][d] = to_float(q[((int64_t)seq * num_heads + kv_head * GROUP + g) * HEAD_DIM + d]);
    red[g][d] = 0.f;
  }
  if (threadIdx.x < GROUP) {
    m_s[threadIdx.x] = -INFINITY;
    l_s[threadIdx.x] = 0.f;
  }
  __syncthreads();

  float acc[GROUP][V_RUNS * 4];
#pragma unroll
  for (int g = 0; g < GROUP; ++g)
#pragma unroll
    for (int e = 0; e < V_RUNS * 4; ++e) acc[g][e] = 0.f;

  for (int c0 = start; c0 < end; c0 += kChunk) {
    const int cn = min(kChunk, end - c0);

    // 1. Logits of the chunk: q . k * scale for every query head of the group.
    {
      const int sub = lane / K_LANES, kl = lane % K_LANES;
      for (int base = warp * K_TOKENS; base < cn; base += kWarps * K_TOKENS) {
        const int i = base + sub;
        const bool valid = i < cn;
        float dot[GROUP];
#pragma unroll
        for (int g = 0; g < GROUP; ++g) dot[g] = 0.f;
        if (valid) {
          const int64_t r = rows.template row<HEAD_DIM>(seq, kv_head, c0 + i);
#pragma unroll
          for (int s = 0; s < K_SEGS; ++s) {
            const int d0 = (s * K_LANES + kl) * SEG;
            float kf[SEG];
            unpack16<T>(ld_vec<uint4>(k_cache + r + d0), kf);
#pragma unroll
            for (int g = 0; g < GROUP; ++g)
#pragma unroll
              for (int e = 0; e < SEG; ++e) dot[g] += q_s[g][d0 + e] * kf[e];
          }
        }
        // Every lane takes part in the shuffles, valid or not: the warp stays converged.
#pragma unroll
        for (int g = 0; g < GROUP; ++g) {
#pragma unroll
          for (int off = K_LANES / 2; off > 0; off /= 2)
            dot[g] += __shfl_xor_sync(0xffffffffu, dot[g], off);
          if (valid && kl == 0) logits[g][i] = dot[g] * o.scale;
        }
      }
    }
    __syncthreads();

    // 2. Online softmax: warp w owns query heads w, w + kWarps, ...
    for (int g = warp; g < GROUP; g += kWarps) {
      float cmax = -INFINITY;
      for (int i = lane; i < cn; i += 32) cmax = fmaxf(cmax, logits[g][i]);
#pragma unroll
      for (int off = 16; off > 0; off /= 2) cmax = fmaxf(cmax, __shfl_xor_sync(0xffffffffu, cmax, off));
      const float m_old = m_s[g];
      const float m_new = fmaxf(m_old, cmax);
      float sum = 0.f;
      for (int i = lane; i < cn; i += 32) {
        const float p = __expf(logits[g][i] - m_new);
        logits[g][i] = p;
        sum += p;
      }
#pragma unroll
      for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      __syncwarp();
      if (lane == 0) {
        const float alpha = __expf(m_old - m_new);  // 0 on the first chunk (m_old = -inf)
        alpha_s[g] = alpha;
        l_s[g] = l_s[g] * alpha + sum;
        m_s[g] = m_new;
      }
    }
    __syncthreads();

    // 3. Rescale the accumulators, then add p * v for the chunk's tokens.
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
      const float a = alpha_s[g];
#pragma unroll
      for (int e = 0; e < V_RUNS * 4; ++e) acc[g][e] *= a;
    }
    {
      // Several tokens per warp step, all loads issued before any use: enough bytes in flight.
      const int sub = lane / V_LANES, vl = lane % V_LANES;
      for (int i0 = warp * V_TOKENS * V_UNROLL; i0 < cn; i0 += kWarps * V_TOKENS * V_UNROLL) {
        float vf[V_UNROLL][V_RUNS * 4];
#pragma unroll
        for (int u = 0; u < V_UNROLL; ++u) {
          const int i = i0 + u * V_TOKENS + sub;
          if (i < cn) {
            const int64_t r = rows.template row<HEAD_DIM>(seq, kv_head, c0 + i);
#pragma unroll
            for (int s = 0; s < V_RUNS; ++s) {
              float run[4];
              load4<T>(v_cache + r + (s * V_LANES + vl) * 4, run);
#pragma unroll
              for (int e = 0; e < 4; ++e) vf[u][s * 4 + e] = run[e];
            }
          }
        }
#pragma unroll
        for (int u = 0; u < V_UNROLL; ++u) {
          const int i = i0 + u * V_TOKENS + sub;
          if (i < cn) {
#pragma unroll
            for (int g = 0; g < GROUP; ++g) {
              const float p = logits[g][i];
#pragma unroll
              for (int e = 0; e < V_RUNS * 4; ++e) acc[g][e] += p * vf[u][e];
            }
          }
        }
      }
    }
    __syncthreads();  // the next chunk overwrites logits
  }

  // 4. Sum the accumulators of the warp's token slots, then of the warps, in a fixed order.
#pragma unroll
  for (int g = 0; g < GROUP; ++g)
#pragma unroll
    for (int e = 0; e < V_RUNS * 4; ++e)
#pragma unroll
      for (int off = V_LANES; off < 32; off *= 2)
        acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], off);
  for (int w = 0; w < kWarps; ++w) {
    if (warp == w && lane < V_LANES) {
#pragma unroll
      for (int g = 0; g < GROUP; ++g)
#pragma unroll
        for (int s = 0; s < V_RUNS; ++s)
#pragma unroll
          for (int e = 0; e < 4; ++e) red[g][(s * V_LANES + lane) * 4 + e] += acc[g][s * 4 + e];
    }
    __syncthreads();
  }

  // 5. Normalise and write: the output itself, or this partition's share of it.
  for (int i = threadIdx.x; i < GROUP * HEAD_DIM; i += kThreads) {
    const int g = i / HEAD_DIM, d = i % HEAD_DIM;
    const int head = kv_head * GROUP + g;
    const float l = l_s[g];
    const float value = l > 0.f ? red[g][d] / l : 0.f;
    if (o.num_partitions == 1) {
      out[((int64_t)seq * num_heads + head) * HEAD_DIM + d] = from_float<T>(value);
    } else {
      const int64_t ph = ((int64_t)seq * num_heads + head) * o.num_partitions + part;
      part_out[ph * HEAD_DIM + d] = value;
      if (d == 0) {
        part_max[ph] = m_s[g];
        part_sum[ph] = l;
      }
    }
  }
}

// Combines the partitions of one (sequence, query head): weights l_p * exp(m_p - M).
template <class T, int HEAD_DIM>
__device__ __forceinline__ void merge_partitions(
    GPTR(T) out,                 // [num_seqs, num_heads, HEAD_DIM]
    GPTR(const float) part_out,  // [num_seqs, num_heads, num_partitions, HEAD_DIM]
    GPTR(const float) part_max,  // [num_seqs, num_heads, num_partitions]
    GPTR(const float) part_sum,  // [num_seqs, num_heads, num_partitions]
    int num_partitions) {
  const int head = blockIdx.x, seq = blockIdx.y, num_heads = gridDim.x;
  const int64_t base = ((int64_t)seq * num_heads + head) * num_partitions;
  float m = -INFINITY;
  for (int p = 0; p < num_partitions; ++p)
    if (part_sum[base + p] > 0.f) m = fmaxf(m, part_max[base + p]);
  float total = 0.f;
  for (int p = 0; p < num_partitions; ++p)
    if (part_sum[base + p] > 0.f) total += part_sum[base + p] * __expf(part_max[base + p] - m);
  for (int d = threadIdx.x; d < HEAD_DIM; d += blockDim.x) {
    float value = 0.f;
    for (int p = 0; p < num_partitions; ++p) {
      const float l = part_sum[base + p];
      if (l > 0.f) value += l * __expf(part_max[base + p] - m) * part_out[(base + p) * HEAD_DIM + d];
    }
    out[((int64_t)seq * num_heads + head) * HEAD_DIM + d] =
        from_float<T>(total > 0.f ? value / total : 0.f);
  }
}

}  // namespace attn

// Stamps out one extern "C" entry per (dtype, head dim, group): the launcher picks one by name,
// e.g. paged_attention_f16_d128_g4. f32 is a test dtype: head dim 128 only, to keep the build short.
#define PAGEDKV_FOR_EACH_ATTENTION_INSTANCE(X)                                             \
  X(f16, __half, 64, 1) X(f16, __half, 64, 2) X(f16, __half, 64, 4) X(f16, __half, 64, 8)      \
  X(f16, __half, 128, 1) X(f16, __half, 128, 2) X(f16, __half, 128, 4) X(f16, __half, 128, 8)  \
  X(f16, __half, 256, 1) X(f16, __half, 256, 2) X(f16, __half, 256, 4) X(f16, __half, 256, 8)  \
  X(bf16, __nv_bfloat16, 64, 1) X(bf16, __nv_bfloat16, 64, 2)                                 \
  X(bf16, __nv_bfloat16, 64, 4) X(bf16, __nv_bfloat16, 64, 8)                                 \
  X(bf16, __nv_bfloat16, 128, 1) X(bf16, __nv_bfloat16, 128, 2)                               \
  X(bf16, __nv_bfloat16, 128, 4) X(bf16, __nv_bfloat16, 128, 8)                               \
  X(bf16, __nv_bfloat16, 256, 1) X(bf16, __nv_bfloat16, 256, 2)                               \
  X(bf16, __nv_bfloat16, 256, 4) X(bf16, __nv_bfloat16, 256, 8)                               \
  X(f32, float, 128, 1) X(f32, float, 128, 2) X(f32, float, 128, 4) X(f32, float, 128, 8)
