// Decode attention (one query token per sequence) over a KV cache, GQA-grouped, in f32.
//
// One CTA per (KV head, sequence, partition of the context): it reads that KV head's K and V rows
// of its partition once and computes every query head of the group from that one read, so GQA
// costs no extra KV traffic (vLLM's kernel re-reads KV per query head). With one partition the CTA
// writes the output; with several it writes a normalised partial output, its max and its sum, and
// merge_partitions() combines them (split-K, "flash decoding").
//
// Bytes in flight are the whole game on HBM (Little's law: an H200 needs ~25-30 KiB per SM), so:
// - Each warp streams its own contiguous share of the partition, in tiles, with its own online
//   softmax state in registers: no block-wide barrier until the warps' states are merged at the end.
// - A warp's tiles (4 KiB of K and V) flow through a ring of kStages shared-memory slots filled by
//   cp.async (attention_ring.cuh, with the block-table words in the same pipeline): the wait for
//   tile i finds kStages tiles (12 KiB per warp) in flight. Each lane copies 16-byte segments of K
//   and V rows into its own slots and later reads exactly those bytes back (fp8 rows excepted).
// - Issue slots are the next limit (~110 warp instructions per token at the H200's bandwidth, for
//   head dim 128, f16, 4 query heads per KV head): a row's partial dot products are summed across
//   its lanes by a transposing reduction (each halving step sends half the values, so the sum of 16
//   values over 16 lanes costs 15 shuffles, not 64) and gathered back with one shuffle per value.
// - q lives in registers, pre-scaled by scale * log2(e) so scores are in the exp2 domain; partial
//   maxima (part_max) are log2-domain too.
//
// Rows are found through a `Rows` policy: PagedRows reads the block table, ContiguousRows does not;
// everything else is shared, so the two kernels differ only in addressing (and agree bit for bit).
// Grouped heads (4 and 8 query heads per KV head) at head dim 128 run on tensor cores instead
// (attention_tc.cuh), with the same ring, policies and output path.
#pragma once
#include "attention_ring.cuh"
#include "common.cuh"

namespace attn {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kStages = 3;        // ring slots per warp
constexpr int kLoadsPerTile = 4;  // 16-byte segments of K (and of V) each lane copies per tile
constexpr int kMaxGroup = 8;      // query heads per KV head

// Dynamic shared memory of a CTA, which the launchers pass (src/attention/mod.rs:
// ATTENTION_SMEM_BYTES; a launch with less traps):
//   ring  [kWarps][kStages][2: K, V][kLoadsPerTile][32 lanes] 16-byte segments      48 KiB
//   words [kWarps][kStages][kMaxTileTokens] block-table words                        1.5 KiB
//   ids   [kWarps][kStages][kMaxTileTokens] the tiles' row ids (attention_ring.cuh)    1.5 KiB
// More than the 48 KiB a CTA may declare statically: the launcher opts the kernel in.
constexpr int kRingBytes = kWarps * kStages * 2 * kLoadsPerTile * 32 * 16;
constexpr int kWordBytes = kWarps * kStages * kMaxTileTokens * 4;
constexpr int kSmemBytes = kRingBytes + 2 * kWordBytes;
// Partitions are whole multiples of this many tokens (src/attention/split.rs: CHUNK).
constexpr int kPartitionQuantum = 128;

// CTAs per SM promised to ptxas: it caps registers at 65536 / (kThreads * n). A group of 8 keeps
// 2 x 64 floats of q and accumulators per lane and needs more than 128 registers. An A100 (sm_80,
// 164 KiB of shared memory per SM) holds only 3 CTAs of kSmemBytes: promising 4 would cap registers
// for nothing.
__host__ __device__ constexpr int min_blocks_per_sm(int head_dim, int group) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  return group >= 8 ? 2 : 3;
#else
  return group >= 8 ? 2 : 4;
#endif
}

// ---- how K and V are stored ---------------------------------------------------------------------
// KvFormat<KV>: the stored element, and what one lane reads of a row to compute on (Vec, kVec
// elements). 16-bit and f32 rows are read 16 bytes a lane; fp8 rows 8 bytes (8 elements), so that a
// lane computes on 8 elements whatever the storage and q and the accumulators keep their registers.
// fp8 codes are read unscaled: k_scale folds into q, v_scale into the output.
template <class KV>
struct KvFormat {
  using Elem = KV;
  using Vec = uint4;
  static constexpr int kVec = kVec16Elems<KV>;
  __device__ __forceinline__ static void unpack(const Vec& v, float (&out)[kVec]) {
    unpack16<KV>(v, out);
  }
};

template <__nv_fp8_interpretation_t F>
struct KvFormat<Fp8<F>> {
  using Elem = unsigned char;
  using Vec = uint2;
  static constexpr int kVec = 8;
  __device__ __forceinline__ static void unpack(const Vec& v, float (&out)[kVec]) {
    unpack8_fp8<F>(v, out);
  }
};

// How a warp covers a tile: kLoadsPerTile copies of 16 bytes a lane (2 KiB of K, 2 KiB of V) fill
// kTokens rows laid end to end in its ring slot; the compute reads them back kVec elements a lane,
// kRowsPerStep rows per step, kSteps steps, one online-softmax update per kLoadsPerTile steps. For
// 16-bit and f32 storage a lane reads back exactly what it copied; for fp8 it reads what other lanes
// copied (kCrossLane), so the warp synchronises between copying and reading a slot.
template <class KV, int HEAD_DIM>
struct TileShape {
  using Format = KvFormat<KV>;
  static constexpr int kRowBytes = HEAD_DIM * (int)sizeof(typename Format::Elem);
  static constexpr int kTileBytes = kLoadsPerTile * 32 * 16;
  static constexpr int kTokens = kTileBytes / kRowBytes;
  static constexpr int kVec = Format::kVec;
  static constexpr int kLanesPerRow = kRowBytes / (int)sizeof(typename Format::Vec);
  static constexpr int kRowsPerStep = 32 / kLanesPerRow;
  static constexpr int kSteps = kTokens / kRowsPerStep;
  static constexpr int kUpdates = kSteps / kLoadsPerTile;
  static constexpr bool kCrossLane = sizeof(typename Format::Vec) != 16;
  static_assert(kRowBytes % 16 == 0 && kTileBytes % kRowBytes == 0, "whole rows per tile");
  static_assert(kLanesPerRow >= 1 && kLanesPerRow <= 32 && 32 % kLanesPerRow == 0,
                "a row is 1 to 32 lanes' vectors");
  static_assert(kSteps % kLoadsPerTile == 0, "whole softmax updates per tile");
  static_assert(kTokens <= kMaxTileTokens, "a tile's table words fit their slot");
};

// ---- where a token's K/V row lives ---------------------------------------------------------------
// Both hold the CTA's sequence. stage(): starts copying what token t's row is computed from (its
// block-table word) into shared memory; nothing for a contiguous cache (kStaged false). row_id():
// the index of the row of token t of KV head `head` in its cache, from the staged word: its first
// element is at row_id * head_dim. Row ids are 32-bit (the launch plan refuses a cache of more
// rows: src/launch/attention.rs).

struct PagedRows {
  static constexpr bool kStaged = true;
  GPTR(const int) table;  // the sequence's row of block_tables [num_seqs, table_stride]
  PagedLayout layout;     // the pool: [num_blocks, num_kv_heads, block_size, head_dim]
  __device__ __forceinline__ void stage(int* word, int t) const {
    cp_async4(word, table + layout.block_of(t));
  }
  __device__ __forceinline__ unsigned row_id(int block, int head, int t) const {
    return layout.row_id(block, head, layout.offset_in_block(t));
  }
};

// Contiguous: [num_seqs, num_kv_heads, max_len, head_dim]; no table.
struct ContiguousRows {
  static constexpr bool kStaged = false;
  int max_len;
  int num_kv_heads;
  int seq;
  __device__ __forceinline__ void stage(int*, int) const {}
  __device__ __forceinline__ unsigned row_id(int, int head, int t) const {
    return ((unsigned)seq * num_kv_heads + head) * max_len + t;
  }
};

// Sums each of N values over the LANES lanes of a row (LANES consecutive lanes, a power of two),
// transposing: at a step with C > 1 live values a lane keeps half of them and sends the other half
// to its partner, which keeps the opposite half, so each step halves the values a lane holds. Once
// one is left, further steps are plain butterflies. Afterwards a lane holds max(1, N / LANES) sums
// in v[0..); holder_lane() says which lane of the row holds sum x, in v[x % that count].
template <int N, int C, int OFF>
__device__ __forceinline__ void row_sum_transposing(float (&v)[N], int lane) {
  if constexpr (OFF >= 1) {
    if constexpr (C > 1) {
      const bool upper = (lane & OFF) != 0;
#pragma unroll
      for (int i = 0; i < C / 2; ++i) {
        const float keep = upper ? v[i + C / 2] : v[i];
        const float send = upper ? v[i] : v[i + C / 2];
        v[i] = keep + __shfl_xor_sync(0xffffffffu, send, OFF);
      }
      row_sum_transposing<N, C / 2, OFF / 2>(v, lane);
    } else {
      v[0] += __shfl_xor_sync(0xffffffffu, v[0], OFF);
      row_sum_transposing<N, 1, OFF / 2>(v, lane);
    }
  }
}

template <int N, int LANES>
__host__ __device__ constexpr int row_sums_per_lane() {
  return N / LANES > 1 ? N / LANES : 1;
}

// The lane (within its row) whose v[x % row_sums_per_lane()] holds sum x after row_sum_transposing.
template <int N, int LANES>
__host__ __device__ constexpr int holder_lane(int x) {
  constexpr int per_lane = row_sums_per_lane<N, LANES>();
  int steps = 0;  // transposing steps: log2(N / per_lane)
  for (int c = N / per_lane; c > 1; c /= 2) ++steps;
  int lane = 0;
  for (int k = 0; k < steps; ++k)
    if (((x / per_lane) >> (steps - 1 - k)) & 1) lane += LANES >> (k + 1);
  return lane;
}

// Which sum lane `lane` (within its row) holds in v[j] after row_sum_transposing: the inverse of
// holder_lane().
template <int N, int LANES>
__host__ __device__ constexpr int held_index(int j, int lane) {
  constexpr int per_lane = row_sums_per_lane<N, LANES>();
  int steps = 0;
  for (int c = N / per_lane; c > 1; c /= 2) ++steps;
  int q = 0;
  for (int k = 0; k < steps; ++k)
    if (lane & (LANES >> (k + 1))) q |= 1 << (steps - 1 - k);
  return j + q * per_lane;
}

// ---- the end of a CTA: the warps' states merged, normalised and written -----------------------

struct Outputs {
  int num_partitions;
  int partition_size;  // a multiple of kPartitionQuantum when num_partitions > 1
  float scale;
};

// Where the warps leave their states in shared memory once every warp has left its loop (the
// ring's bytes): each warp's unnormalised output [kWarps][GROUP][HEAD_DIM], its running max (log2
// domain) and its sum of weights, [kWarps][GROUP] each.
template <int GROUP, int HEAD_DIM>
struct MergeArea {
  static constexpr int kBytes = (int)sizeof(float) * kWarps * GROUP * (HEAD_DIM + 2);
  float* merged;
  float (*warp_max)[GROUP];
  float (*warp_sum)[GROUP];
  __device__ __forceinline__ explicit MergeArea(unsigned char* smem)
      : merged(reinterpret_cast<float*>(smem)),
        warp_max(reinterpret_cast<float(*)[GROUP]>(merged + kWarps * GROUP * HEAD_DIM)),
        warp_sum(warp_max + kWarps) {}
};

// Combines the warps' states (after the barrier that follows their writes into `area`): each
// thread normalises and writes 16 bytes' worth of output elements of one query head, into `out`
// (one partition) or the partition's partial output, max and sum.
template <class T, int HEAD_DIM, int GROUP>
__device__ __forceinline__ void write_output(const MergeArea<GROUP, HEAD_DIM>& area, GPTR(T) out,
                                             GPTR(float) part_out, GPTR(float) part_max,
                                             GPTR(float) part_sum, float v_scale_head,
                                             const Outputs& o) {
  const int kv_head = blockIdx.x, seq = blockIdx.y, part = blockIdx.z;
  const int num_heads = gridDim.x * GROUP;
  constexpr int OUT = kVec16Elems<T>;
  for (int i = threadIdx.x; i < GROUP * HEAD_DIM / OUT; i += kThreads) {
    const int g = i / (HEAD_DIM / OUT), d0 = i % (HEAD_DIM / OUT) * OUT;
    float mx = -INFINITY;
    // `!= 0` rather than `> 0`: a NaN sum (NaN in K or V) must reach the output, not be dropped.
#pragma unroll
    for (int w = 0; w < kWarps; ++w)
      if (area.warp_sum[w][g] != 0.f) mx = fmaxf(mx, area.warp_max[w][g]);
    float sum = 0.f, value[OUT];
#pragma unroll
    for (int e = 0; e < OUT; ++e) value[e] = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      if (area.warp_sum[w][g] != 0.f) {  // a warp without tokens has nothing to add
        const float a = fast_exp2(area.warp_max[w][g] - mx);
        sum += area.warp_sum[w][g] * a;
#pragma unroll
        for (int e = 0; e < OUT; ++e)
          value[e] += a * area.merged[(w * GROUP + g) * HEAD_DIM + d0 + e];
      }
    }
    // An empty share writes zeros; the V scale comes in here (p . (v * s) = (p . v) * s).
    const float inv = sum != 0.f ? v_scale_head / sum : 0.f;
#pragma unroll
    for (int e = 0; e < OUT; ++e) value[e] *= inv;
    const int head = kv_head * GROUP + g;
    if (o.num_partitions == 1) {
      st_vec(out + ((int64_t)seq * num_heads + head) * HEAD_DIM + d0, pack16<T>(value));
    } else {
      const int64_t ph = ((int64_t)seq * num_heads + head) * o.num_partitions + part;
#pragma unroll
      for (int e = 0; e < OUT; e += 4)
        st_vec(part_out + ph * HEAD_DIM + d0 + e,
               make_float4(value[e], value[e + 1], value[e + 2], value[e + 3]));
      if (d0 == 0) {
        part_max[ph] = mx;
        part_sum[ph] = sum;
      }
    }
  }
}

// ---- the kernel body -----------------------------------------------------------------------------

// T: q and the output; KV: how K and V are stored (T itself, or Fp8<F>).
template <class T, class KV, int HEAD_DIM, int GROUP, class Rows>
__device__ __forceinline__ void decode_attention(
    GPTR(T) out,             // [num_seqs, num_heads, HEAD_DIM]; written when num_partitions == 1
    GPTR(float) part_out,    // [num_seqs, num_heads, num_partitions, HEAD_DIM]; when > 1
    GPTR(float) part_max,    // [num_seqs, num_heads, num_partitions] (log2 domain)
    GPTR(float) part_sum,    // [num_seqs, num_heads, num_partitions]
    GPTR(const T) q,         // [num_seqs, num_heads, HEAD_DIM]
    GPTR(const typename KvFormat<KV>::Elem) k_cache,  // laid out as Rows says
    GPTR(const typename KvFormat<KV>::Elem) v_cache,  // laid out as Rows says
    GPTR(const float) k_scale,  // [num_kv_heads]: K = stored * k_scale (1 unless quantised)
    GPTR(const float) v_scale,  // [num_kv_heads]
    GPTR(const int) seq_lens,   // [num_seqs]
    const Rows rows, const Outputs o) {
  static_assert(GROUP >= 1 && GROUP <= kMaxGroup, "GQA group of 1 to 8 query heads");
  using Shape = TileShape<KV, HEAD_DIM>;
  using Format = typename Shape::Format;
  using Elem = typename Format::Elem;
  using Vec = typename Format::Vec;
  constexpr int VEC = Shape::kVec, LANES = Shape::kLanesPerRow, ROWS = Shape::kRowsPerStep;
  constexpr int TILE = Shape::kTokens, ROW_BYTES = Shape::kRowBytes;
  static_assert(VEC * sizeof(T) == 16, "a lane's q segment is one 16-byte vector of T");

  const int kv_head = blockIdx.x;
  const int seq = blockIdx.y;
  const int part = blockIdx.z;
  const int num_heads = gridDim.x * GROUP;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int row_lane = lane % LANES;  // which segment of a row this lane computes on
  const int row_group = lane / LANES;  // which of a step's rows
  const int len = seq_lens[seq];
  const int start = part * o.partition_size;
  const int end = min(len, start + o.partition_size);

  const WarpShare share = warp_share<TILE, kWarps>(start, end, warp);
  const int wstart = share.wstart, wend = share.wend, num_tiles = share.num_tiles;

  DYNAMIC_SHARED(unsigned char, smem);
  if (dynamic_smem_bytes() < (unsigned)kSmemBytes) __trap();  // launched with too little
  // [warp][slot][K or V][kTileBytes]: a tile's rows end to end; also the merge buffer afterwards.
  unsigned char(*slots)[2][Shape::kTileBytes] =  // this warp's [kStages][K, V][kTileBytes]
      reinterpret_cast<unsigned char(*)[kStages][2][Shape::kTileBytes]>(smem)[warp];
  int(*words)[kMaxTileTokens] =  // this warp's [kStages][kMaxTileTokens]
      reinterpret_cast<int(*)[kMaxTileTokens]>(smem + kRingBytes) + warp * kStages;
  unsigned(*row_ids)[kMaxTileTokens] =  // this warp's [kStages][kMaxTileTokens]
      reinterpret_cast<unsigned(*)[kMaxTileTokens]>(smem + kRingBytes + kWordBytes) +
      warp * kStages;

  // q of this lane's segment, for every query head of the group, in the exp2 domain and with the
  // K scale folded in (q . (k * s) = (q * s) . k).
  float qf[GROUP][VEC];
  {
    const float qscale = o.scale * 1.4426950408889634f * k_scale[kv_head];  // log2(e)
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
      const int64_t at = ((int64_t)seq * num_heads + kv_head * GROUP + g) * HEAD_DIM + row_lane * VEC;
      unpack16<T>(ld_vec<uint4>(q + at), qf[g]);
#pragma unroll
      for (int e = 0; e < VEC; ++e) qf[g][e] *= qscale;
    }
  }

  WarpRing<Rows, Elem, kStages, Shape::kTileBytes, ROW_BYTES, Shape::kCrossLane, false> ring{
      slots, words, row_ids, rows, k_cache, v_cache, kv_head, wstart, wend, num_tiles, lane};

  float m[GROUP], l[GROUP], acc[GROUP][VEC];
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int e = 0; e < VEC; ++e) acc[g][e] = 0.f;
  }

  // Which step of an update (token row) each score this lane holds after the row sum belongs to.
  int held_step[row_sums_per_lane<kLoadsPerTile * GROUP, LANES>()];
#pragma unroll
  for (int j = 0; j < row_sums_per_lane<kLoadsPerTile * GROUP, LANES>(); ++j)
    held_step[j] = held_index<kLoadsPerTile * GROUP, LANES>(j, row_lane) / GROUP;

  ring.start();
  for (int i = 0, slot = 0; i < num_tiles; ++i, slot = ring.next_slot(slot)) {
    ring.next(i, slot);

#pragma unroll
    for (int h = 0; h < Shape::kUpdates; ++h) {
      // This update's rows: step u of it is row (h * kLoadsPerTile + u) * ROWS + row_group.
      const int first_row = h * kLoadsPerTile * ROWS + row_group;
      const auto at = [&](int kv, int u) {  // this lane's vector of row `first_row + u * ROWS`
        return ld_vec<Vec>(&slots[slot][kv][(first_row + u * ROWS) * ROW_BYTES +
                                                 row_lane * (int)sizeof(Vec)]);
      };

      // Scores of this lane's tokens: partial dots over its segment, summed over the row's lanes,
      // then every sum gathered back to every lane of the row.
      constexpr int NS = kLoadsPerTile * GROUP;  // scores per row group: [step][query head]
      float partial[NS];
#pragma unroll
      for (int u = 0; u < kLoadsPerTile; ++u) {
        float kf[VEC];
        Format::unpack(at(0, u), kf);
#pragma unroll
        for (int g = 0; g < GROUP; ++g) {
          float dot = 0.f;
#pragma unroll
          for (int e = 0; e < VEC; ++e) dot += qf[g][e] * kf[e];
          partial[u * GROUP + g] = dot;
        }
      }
      row_sum_transposing<NS, NS, LANES / 2>(partial, lane);
      constexpr int HELD = row_sums_per_lane<NS, LANES>();
      const int t0 = wstart + i * TILE + first_row;
#pragma unroll
      for (int j = 0; j < HELD; ++j)  // a token past the end scores -inf: weight 0
        if (t0 + held_step[j] * ROWS >= wend) partial[j] = -INFINITY;
      float s[kLoadsPerTile][GROUP];
#pragma unroll
      for (int u = 0; u < kLoadsPerTile; ++u)
#pragma unroll
        for (int g = 0; g < GROUP; ++g) {
          const int x = u * GROUP + g;
          s[u][g] = __shfl_sync(0xffffffffu, partial[x % HELD], holder_lane<NS, LANES>(x), LANES);
        }

      // Online softmax: the max is the warp's (uniform), the sum each row group's. The first row
      // of a tile is always valid, so the first update's max is finite; a later update whose
      // tokens are all past the end has max -inf and changes nothing (its weights are 0).
#pragma unroll
      for (int g = 0; g < GROUP; ++g) {
        float mx = s[0][g];
#pragma unroll
        for (int u = 1; u < kLoadsPerTile; ++u) mx = fmaxf(mx, s[u][g]);
#pragma unroll
        for (int off = LANES; off < 32; off *= 2)
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        if (mx > m[g]) {  // alpha is 0 the first time (m = -inf)
          const float alpha = fast_exp2(m[g] - mx);
          l[g] *= alpha;
#pragma unroll
          for (int e = 0; e < VEC; ++e) acc[g][e] *= alpha;
          m[g] = mx;
        }
#pragma unroll
        for (int u = 0; u < kLoadsPerTile; ++u) {
          s[u][g] = fast_exp2(s[u][g] - m[g]);  // 0 for the tokens past the end
          l[g] += s[u][g];
        }
      }

      // p . v over the update's rows of this lane's segment.
#pragma unroll
      for (int u = 0; u < kLoadsPerTile; ++u) {
        float vf[VEC];
        Format::unpack(at(1, u), vf);
#pragma unroll
        for (int g = 0; g < GROUP; ++g)
#pragma unroll
          for (int e = 0; e < VEC; ++e) acc[g][e] += s[u][g] * vf[e];
      }
    }
  }

  // The row groups of a warp hold disjoint tokens of the same segments: add them up.
#pragma unroll
  for (int g = 0; g < GROUP; ++g) {
#pragma unroll
    for (int off = LANES; off < 32; off *= 2) {
      l[g] += __shfl_xor_sync(0xffffffffu, l[g], off);
#pragma unroll
      for (int e = 0; e < VEC; ++e) acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], off);
    }
  }

  // Merge the warps' states through shared memory: the ring, once every warp has left its loop.
  static_assert(MergeArea<GROUP, HEAD_DIM>::kBytes <= kRingBytes, "merge fits");
  const MergeArea<GROUP, HEAD_DIM> area(smem);
  __syncthreads();
  if (row_group == 0) {
#pragma unroll
    for (int g = 0; g < GROUP; ++g)
#pragma unroll
      for (int e = 0; e < VEC; e += 4)
        st_vec(area.merged + (warp * GROUP + g) * HEAD_DIM + row_lane * VEC + e,
               make_float4(acc[g][e], acc[g][e + 1], acc[g][e + 2], acc[g][e + 3]));
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < GROUP; ++g) {
      area.warp_max[warp][g] = m[g];
      area.warp_sum[warp][g] = l[g];
    }
  }
  __syncthreads();
  write_output<T, HEAD_DIM, GROUP>(area, out, part_out, part_max, part_sum, v_scale[kv_head], o);
}

// Combines the partitions of one (sequence, query head): weights l_p * 2^(m_p - M).
template <class T, int HEAD_DIM>
__device__ __forceinline__ void merge_partitions(
    GPTR(T) out,                 // [num_seqs, num_heads, HEAD_DIM]
    GPTR(const float) part_out,  // [num_seqs, num_heads, num_partitions, HEAD_DIM]
    GPTR(const float) part_max,  // [num_seqs, num_heads, num_partitions] (log2 domain)
    GPTR(const float) part_sum,  // [num_seqs, num_heads, num_partitions]
    int num_partitions) {
  const int head = blockIdx.x, seq = blockIdx.y, num_heads = gridDim.x;
  const int64_t base = ((int64_t)seq * num_heads + head) * num_partitions;
  // Empty partitions (sum 0) add nothing; a NaN sum is kept so that NaN reaches the output.
  float m = -INFINITY;
  for (int p = 0; p < num_partitions; ++p)
    if (part_sum[base + p] != 0.f) m = fmaxf(m, part_max[base + p]);
  float total = 0.f;
  for (int p = 0; p < num_partitions; ++p)
    if (part_sum[base + p] != 0.f) total += part_sum[base + p] * fast_exp2(part_max[base + p] - m);
  for (int d = threadIdx.x; d < HEAD_DIM; d += blockDim.x) {
    float value = 0.f;
    for (int p = 0; p < num_partitions; ++p) {
      const float l = part_sum[base + p];
      if (l != 0.f) value += l * fast_exp2(part_max[base + p] - m) * part_out[(base + p) * HEAD_DIM + d];
    }
    out[((int64_t)seq * num_heads + head) * HEAD_DIM + d] =
        from_float<T>(total != 0.f ? value / total : 0.f);
  }
}

}  // namespace attn

// The entry points, their argument order stated once here: the launchers (src/device/cuda/
// attention.rs on a GPU, src/emu/attention.rs on the emulator) pass arguments in this order and
// refer here. Buffer shapes are on attn::decode_attention and attn::merge_partitions above. T is the
// type of q and the output, KV how K and V are stored, E the stored element (T, or unsigned char
// for fp8).
// BODY is attn::decode_attention (CUDA cores) or attn::tc::decode_attention (tensor cores,
// attention_tc.cuh); MIN_BLOCKS the CTAs per SM promised to ptxas.
#define PAGEDKV_DEFINE_PAGED_ATTENTION_WITH(kernel, BODY, MIN_BLOCKS, T, KV, E, D, G)         \
  extern "C" __global__ void __launch_bounds__(attn::kThreads, MIN_BLOCKS)                    \
      kernel(GPTR(T) out, GPTR(float) part_out, GPTR(float) part_max, GPTR(float) part_sum,   \
             GPTR(const T) q, GPTR(const E) k_cache, GPTR(const E) v_cache,                   \
             GPTR(const float) k_scale, GPTR(const float) v_scale,                            \
             GPTR(const int) block_tables, GPTR(const int) seq_lens, int table_stride,        \
             int log2_block_size, int num_partitions, int partition_size, float scale) {      \
    const attn::PagedRows rows{block_tables + (int64_t)blockIdx.y * table_stride,             \
                               PagedLayout{(int)gridDim.x, log2_block_size, D}};              \
    BODY<T, KV, D, G>(out, part_out, part_max, part_sum, q, k_cache, v_cache, k_scale,        \
                      v_scale, seq_lens, rows,                                                 \
                      attn::Outputs{num_partitions, partition_size, scale});                  \
  }

#define PAGEDKV_DEFINE_CONTIGUOUS_ATTENTION_WITH(kernel, BODY, MIN_BLOCKS, T, KV, E, D, G)    \
  extern "C" __global__ void __launch_bounds__(attn::kThreads, MIN_BLOCKS)                    \
      kernel(GPTR(T) out, GPTR(float) part_out, GPTR(float) part_max, GPTR(float) part_sum,   \
             GPTR(const T) q, GPTR(const E) k_cache, GPTR(const E) v_cache,                   \
             GPTR(const float) k_scale, GPTR(const float) v_scale,                            \
             GPTR(const int) seq_lens, int max_len, int num_partitions, int partition_size,   \
             float scale) {                                                                   \
    const attn::ContiguousRows rows{max_len, (int)gridDim.x, (int)blockIdx.y};             \
    BODY<T, KV, D, G>(out, part_out, part_max, part_sum, q, k_cache, v_cache, k_scale,        \
                      v_scale, seq_lens, rows,                                                 \
                      attn::Outputs{num_partitions, partition_size, scale});                  \
  }

#define PAGEDKV_DEFINE_PAGED_ATTENTION(kernel, T, KV, E, D, G)                                \
  PAGEDKV_DEFINE_PAGED_ATTENTION_WITH(kernel, attn::decode_attention,                        \
                                      attn::min_blocks_per_sm(D, G), T, KV, E, D, G)
#define PAGEDKV_DEFINE_CONTIGUOUS_ATTENTION(kernel, T, KV, E, D, G)                           \
  PAGEDKV_DEFINE_CONTIGUOUS_ATTENTION_WITH(kernel, attn::decode_attention,                   \
                                           attn::min_blocks_per_sm(D, G), T, KV, E, D, G)

#define PAGEDKV_DEFINE_MERGE_PARTITIONS(kernel, T, D)                                         \
  extern "C" __global__ void __launch_bounds__(128)                                           \
      kernel(GPTR(T) out, GPTR(const float) part_out, GPTR(const float) part_max,             \
             GPTR(const float) part_sum, int num_partitions) {                                \
    attn::merge_partitions<T, D>(out, part_out, part_max, part_sum, num_partitions);          \
  }

// The instances, stated once. Entry points are named paged_attention_{q}_d{D}_g{G} when K and V are
// stored as q is, paged_attention_{q}_kv{storage}_d{D}_g{G} otherwise (fp8), the same with
// contiguous_, and merge_partitions_{q}_d{D} (one per q dtype and head dim); the Rust side finds
// them by name in the table build.rs generates from these files (src/launch/instances.rs), never
// from a list of its own. f32 is a test dtype: head dim 128 only, to keep the build short.
// Y(name, T, D): K and V stored as T.
#define PAGEDKV_FOR_EACH_ATTENTION_DTYPE_AND_DIM(Y)                                        \
  Y(f16, __half, 64) Y(f16, __half, 128) Y(f16, __half, 256)                                \
  Y(bf16, __nv_bfloat16, 64) Y(bf16, __nv_bfloat16, 128) Y(bf16, __nv_bfloat16, 256)        \
  Y(f32, float, 128)
// Y(name, T, KV, D): fp8 K and V (e4m3, e5m2) read with q in f16 or bf16.
#define PAGEDKV_FOR_EACH_FP8_ATTENTION_DTYPE_AND_DIM(Y)                                    \
  Y(f16_kvfp8_e4m3, __half, Fp8<__NV_E4M3>, 64)                                      \
  Y(f16_kvfp8_e4m3, __half, Fp8<__NV_E4M3>, 128)                                     \
  Y(f16_kvfp8_e4m3, __half, Fp8<__NV_E4M3>, 256)                                     \
  Y(bf16_kvfp8_e4m3, __nv_bfloat16, Fp8<__NV_E4M3>, 64)                              \
  Y(bf16_kvfp8_e4m3, __nv_bfloat16, Fp8<__NV_E4M3>, 128)                             \
  Y(bf16_kvfp8_e4m3, __nv_bfloat16, Fp8<__NV_E4M3>, 256)                             \
  Y(f16_kvfp8_e5m2, __half, Fp8<__NV_E5M2>, 64)                                      \
  Y(f16_kvfp8_e5m2, __half, Fp8<__NV_E5M2>, 128)                                     \
  Y(f16_kvfp8_e5m2, __half, Fp8<__NV_E5M2>, 256)                                     \
  Y(bf16_kvfp8_e5m2, __nv_bfloat16, Fp8<__NV_E5M2>, 64)                              \
  Y(bf16_kvfp8_e5m2, __nv_bfloat16, Fp8<__NV_E5M2>, 128)                             \
  Y(bf16_kvfp8_e5m2, __nv_bfloat16, Fp8<__NV_E5M2>, 256)
// X(name, T, KV, E, D, G) for every GQA group.
#define PAGEDKV_FOR_EACH_ATTENTION_GROUP(X, name, T, KV, E, D) \
  X(name, T, KV, E, D, 1) X(name, T, KV, E, D, 2) X(name, T, KV, E, D, 4) X(name, T, KV, E, D, 8)
