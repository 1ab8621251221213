// Decode attention on tensor cores, for grouped query heads: the kernel attention.cuh describes
// (one CTA per KV head, sequence and partition; four warps each streaming their own share through a
// cp.async ring; online softmax per warp; the warps merged at the end), with the score q . K^T and
// the weighted sum P . V computed by mma.sync.m16n8k16 (tensor_core.cuh) instead of f32 FMAs.
//
// Why: on CUDA cores a token of one KV head costs ~90 warp instructions at group 4 and ~150 at
// group 8 (f16, head dim 128), against ~111 that an H200 can issue per token while its memory
// streams: the kernel is issue-bound. On tensor cores 16 tokens cost 24 mma and 16 ldmatrix
// whatever the group (up to 8), under 3 instructions per token, plus the softmax and the copies
// (KERNELS.md, "Tensor cores", counts each part).
//
// The tiles, 16 tokens at a time:
//   S (16 x 16) = Q (16 rows x HEAD_DIM) . K^T (HEAD_DIM x 16 tokens): 2 n-tiles of 8 tokens,
//     HEAD_DIM / 16 k-steps. Rows 0 .. GROUP-1 are the group's heads, the rest zero: a lane
//     (g = lane / 4, c = lane % 4) holds the scores of head g for tokens 2c, 2c+1, 8+2c, 8+2c+1.
//   O^T (HEAD_DIM x 8 heads) += V^T (HEAD_DIM x 16 tokens) . P^T (16 tokens x 8 heads): HEAD_DIM /
//     16 m-tiles of one mma each. A lane's scores of head g, exponentiated and paired, are exactly
//     its B fragment of P^T, so P never leaves registers; the transposed product needs no zero
//     rows (half as many mma and accumulators as O = P . V with the heads as 16 rows).
//   K's B fragments come from ldmatrix on the ring's rows, V^T's A fragments from ldmatrix.trans,
//   each four registers as they arrive. The ring is swizzled (attention_ring.cuh) so those reads
//   are free of bank conflicts.
// - fp8 K and V are widened to f16 pairs in registers (cvt.rn.f16x2.e4m3x2 / e5m2x2 on sm_90,
//   exact, the upper pair of a register selected by the conversion), and the mma multiplies f16 (q
//   in bf16 is converted to f16: exact for |q| in [2^-14, 65504]). K: ldmatrix of raw bytes gives
//   a lane dims 4c..4c+3 of a token; widened, they feed the mma as k = 2c, 2c+1, 2c+8, 2c+9, and
//   q's fragment is built with the same permutation of dims (a dot product does not care about the
//   order of its terms). V: ldmatrix.trans of raw bytes gives a lane dims 2g, 2g+1 of two tokens;
//   one byte permute makes two (token, token) pairs, one per dim, so rows g and g + 8 of an m-tile
//   are dims 2g and 2g + 1 of its 16, unpermuted when the warp writes its state.
// - Scores are scaled in f32 after the mma (q enters unscaled, exact); P is rounded to the mma's
//   input type (f16, or bf16 for bf16 K/V), the sum of weights is kept in f32.
// - A rescale of the accumulators (a new running max) is skipped by the whole warp when no lane's
//   max grew, which after the first tiles is almost always.
#pragma once
#include "attention.cuh"
#include "tensor_core.cuh"

namespace attn {
namespace tc {

constexpr int kStages = 2;       // ring slots per warp
constexpr int kSlotBytes = 4096;  // K (and V) bytes of a warp's tile
// Dynamic shared memory of a CTA, which the launchers pass (src/kernels/mod.rs:
// ATTENTION_TC_SMEM_BYTES; a launch with less traps):
//   ring  [kWarps][kStages][2: K, V][kSlotBytes]                 64 KiB
//   words [kWarps][kStages][kMaxTileTokens] block-table words     1 KiB
//   ids   [kWarps][kStages][kMaxTileTokens] the tiles' row ids    1 KiB
constexpr int kRingBytes = kWarps * kStages * 2 * kSlotBytes;
constexpr int kWordBytes = kWarps * kStages * kMaxTileTokens * 4;
constexpr int kSmemBytes = kRingBytes + 2 * kWordBytes;

// Three CTAs of kSmemBytes fit an sm_90 SM (228 KiB), two an sm_80 one (164 KiB); ptxas may use up
// to 65536 / (kThreads * n) registers.
__host__ __device__ constexpr int min_blocks_per_sm() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  return 2;
#else
  return 3;
#endif
}

// What the mma multiplies for q of T and K/V stored as KV: T itself for 16-bit storage, f16 for fp8
// (widened in registers).
template <class T, class KV>
struct Operands {
  using Mma = T;
  static constexpr bool kFp8 = false;
};
template <class T, __nv_fp8_interpretation_t F>
struct Operands<T, Fp8<F>> {
  using Mma = __half;
  static constexpr bool kFp8 = true;
};

// Two fp8 codes as an f16 pair (the first code in the low half): the low two bytes of `codes`,
// or the high two. On the GPU the high pair is selected by the conversion's operand (no shift).
template <__nv_fp8_interpretation_t F>
__device__ __forceinline__ unsigned fp8x2_lo_to_f16x2(unsigned codes) {
  const __half2_raw h =
      __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes & 0xffffu), F);
  return static_cast<unsigned>(h.x) | static_cast<unsigned>(h.y) << 16;
}
template <__nv_fp8_interpretation_t F>
__device__ __forceinline__ unsigned fp8x2_hi_to_f16x2(unsigned codes) {
#if defined(PAGEDKV_EMU) || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ < 890
  return fp8x2_lo_to_f16x2<F>(codes >> 16);
#else
  unsigned r;
  if constexpr (F == __NV_E4M3) {
    asm("{ .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e4m3x2 %0, hi;\n }\n"
        : "=r"(r) : "r"(codes));
  } else {
    asm("{ .reg .b16 lo, hi;\n mov.b32 {lo, hi}, %1;\n cvt.rn.f16x2.e5m2x2 %0, hi;\n }\n"
        : "=r"(r) : "r"(codes));
  }
  return r;
#endif
}

template <class KV>
struct Fp8Format;
template <__nv_fp8_interpretation_t F>
struct Fp8Format<Fp8<F>> {
  static constexpr __nv_fp8_interpretation_t kFormat = F;
};

// T: q and the output; KV: how K and V are stored (T itself, or Fp8<F>).
template <class T, class KV, int HEAD_DIM, int GROUP, class Rows>
__device__ __forceinline__ void decode_attention(
    GPTR(T) out,             // [num_seqs, num_heads, HEAD_DIM]; written when num_partitions == 1
    GPTR(float) part_out,    // [num_seqs, num_heads, num_partitions, HEAD_DIM]; when > 1
    GPTR(float) part_max,    // [num_seqs, num_heads, num_partitions] (log2 domain)
    GPTR(float) part_sum,    // [num_seqs, num_heads, num_partitions]
    GPTR(const T) q,         // [num_seqs, num_heads, HEAD_DIM]
    GPTR(const Stored<KV>) k_cache,  // laid out as Rows says
    GPTR(const Stored<KV>) v_cache,  // laid out as Rows says
    GPTR(const float) k_scale,  // [num_kv_heads]: K = stored * k_scale (1 unless quantised)
    GPTR(const float) v_scale,  // [num_kv_heads]
    GPTR(const int) seq_lens,   // [num_seqs]
    const Rows rows, const Outputs o) {
  static_assert(GROUP >= 1 && GROUP <= 8, "a group fills at most the 8 upper rows of the tile");
  static_assert(HEAD_DIM % 32 == 0, "whole ldmatrix.x4 reads of K and V");
  using Ops = Operands<T, KV>;
  using Mma = typename Ops::Mma;
  using Elem = Stored<KV>;
  constexpr bool FP8 = Ops::kFp8;
  constexpr int ROW_BYTES = HEAD_DIM * (int)sizeof(Elem);
  constexpr int TILE = kSlotBytes / ROW_BYTES;  // tokens per tile
  constexpr int STEPS = TILE / 16;              // mma steps (16 tokens) per tile
  constexpr int KSTEPS = HEAD_DIM / 16;         // k-steps of q . K^T
  constexpr int MT = HEAD_DIM / 16;             // m-tiles (16 dims) of O^T = V^T . P^T
  static_assert(TILE % 16 == 0 && TILE <= kMaxTileTokens, "whole mma steps per tile");
  static_assert(kPartitionQuantum % TILE == 0, "partitions are whole tiles");

  const int kv_head = blockIdx.x;
  const int seq = blockIdx.y;
  const int part = blockIdx.z;
  const int num_heads = gridDim.x * GROUP;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;  // fragment row and column pair
  // The row (of 16) and chunk offset (0 or 1) this lane addresses in an ldmatrix.x4: matrix
  // i = lane / 8 is tokens 0-7 or 8-15 (bit 1) of chunk base or base + 1 (bit 0), so that
  // registers 0, 1 are the first 8 tokens' and 2, 3 the last 8 tokens' (K: the B fragments of two
  // n-tiles; V transposed: the A fragment of one m-tile).
  const int mrow = 8 * (lane >> 4) + (lane & 7);
  const int mchunk = (lane >> 3) & 1;
  const int len = seq_lens[seq];
  const int start = part * o.partition_size;
  const int end = min(len, start + o.partition_size);

  const WarpShare share = warp_share<TILE, kWarps>(start, end, warp);
  const int wstart = share.wstart, wend = share.wend, num_tiles = share.num_tiles;

  DYNAMIC_SHARED(unsigned char, smem);
  if (dynamic_smem_bytes() < (unsigned)kSmemBytes) __trap();  // launched with too little
  unsigned char(*slots)[2][kSlotBytes] =  // this warp's [kStages][K, V][kSlotBytes]
      reinterpret_cast<unsigned char(*)[kStages][2][kSlotBytes]>(smem)[warp];
  int(*words)[kMaxTileTokens] =  // this warp's [kStages][kMaxTileTokens]
      reinterpret_cast<int(*)[kMaxTileTokens]>(smem + kRingBytes) + warp * kStages;
  unsigned(*row_ids)[kMaxTileTokens] =  // this warp's [kStages][kMaxTileTokens]
      reinterpret_cast<unsigned(*)[kMaxTileTokens]>(smem + kRingBytes + kWordBytes) +
      warp * kStages;

  // q's A fragments, unscaled (exact in the mma's type): row g is head g of the group (zero past
  // the group), rows g + 8 zero. For k-step kk, register 0 holds dims lo, lo + 1 and register 2
  // dims hi, hi + 1: lo = 16kk + 2c, hi = lo + 8 as the ISA lays out k; for fp8, lo = 16kk + 4c,
  // hi = lo + 2, the order in which widened K arrives (see above).
  unsigned qa[KSTEPS][4];
  {
    const int64_t row = ((int64_t)seq * num_heads + kv_head * GROUP + g) * HEAD_DIM;
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
      const int lo = 16 * kk + (FP8 ? 4 * c : 2 * c), hi = lo + (FP8 ? 2 : 8);
      qa[kk][0] = g < GROUP ? pack2<Mma>(to_float<T>(q[row + lo]), to_float<T>(q[row + lo + 1])) : 0u;
      qa[kk][2] = g < GROUP ? pack2<Mma>(to_float<T>(q[row + hi]), to_float<T>(q[row + hi + 1])) : 0u;
      qa[kk][1] = qa[kk][3] = 0u;
    }
    // Through shared memory and back, 16 bytes a fragment: a fragment loaded whole stays whole in
    // its four registers through the loop (built in registers, the compiler writes its zero
    // halves again every iteration). The last ring slot: the first copies into it are issued after
    // these loads (ring.start() fills the first kStages - 1 slots).
    uint4* staged = reinterpret_cast<uint4*>(slots[kStages - 1][0]) + lane * KSTEPS;
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk)
      st_vec(staged + kk, make_uint4(qa[kk][0], qa[kk][1], qa[kk][2], qa[kk][3]));
#pragma unroll
    for (int kk = 0; kk < KSTEPS; ++kk) {
      const uint4 v = opaque_load(staged + kk);
      qa[kk][0] = v.x, qa[kk][1] = v.y, qa[kk][2] = v.z, qa[kk][3] = v.w;
    }
  }
  // Scores in the exp2 domain with the K scale: s * scale * log2(e) * k_scale.
  const float qscale = o.scale * 1.4426950408889634f * k_scale[kv_head];

  WarpRing<Rows, Elem, kStages, kSlotBytes, ROW_BYTES, true, true> ring{
      slots, words, row_ids, rows, k_cache, v_cache, kv_head, wstart, wend, num_tiles, lane};

  float m = -INFINITY, l = 0.f;  // head g's running max (log2 domain) and this lane's weights
  // O^T's C fragments, m-tile t: rows are dims, columns heads 2c, 2c + 1 ([0], [2]: head 2c; [1],
  // [3]: head 2c + 1). Rows g and g + 8 are dims 16t + g and 16t + g + 8, or for fp8 16t + 2g and
  // 16t + 2g + 1 (the order widened V arrives in).
  float acc[MT][4];
#pragma unroll
  for (int t = 0; t < MT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;

  ring.start();
  for (int i = 0, slot = 0; i < num_tiles; ++i, slot = ring.next_slot(slot)) {
    ring.next(i, slot);
    const unsigned char* kslot = slots[slot][0];
    const unsigned char* vslot = slots[slot][1];
    const auto at = [&](const unsigned char* base, int step, int chunk_base) {
      return base + ring_offset<ROW_BYTES, true>(16 * step + mrow, (chunk_base + mchunk) * 16);
    };

    // S = Q . K^T for the tile's steps: s[step][n-tile][C fragment].
    float s[STEPS][2][4];
#pragma unroll
    for (int st = 0; st < STEPS; ++st) {
#pragma unroll
      for (int j = 0; j < 2; ++j) s[st][j][0] = s[st][j][1] = s[st][j][2] = s[st][j][3] = 0.f;
      if constexpr (!FP8) {
        // Matrices: tokens 0-7 of dims 16kk..+7 and 16kk+8..+15 (n-tile 0's B), then tokens 8-15.
#pragma unroll
        for (int kk = 0; kk < KSTEPS; ++kk) {
          unsigned r[4];
          ldmatrix<4, false>(r, at(kslot, st, 2 * kk));
          const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
          mma_m16n8k16<Mma>(s[st][0], qa[kk], b0);
          mma_m16n8k16<Mma>(s[st][1], qa[kk], b1);
        }
      } else {
        // Matrices: tokens 0-7 of dims 32kp..+15 and of the next 16, then tokens 8-15: register x
        // is n-tile x / 2 of k-step 2kp + x % 2.
        constexpr auto F = Fp8Format<KV>::kFormat;
#pragma unroll
        for (int kp = 0; kp < KSTEPS / 2; ++kp) {
          unsigned r[4];
          ldmatrix<4, false>(r, at(kslot, st, 2 * kp));
#pragma unroll
          for (int x = 0; x < 4; ++x) {
            const unsigned b[2] = {fp8x2_lo_to_f16x2<F>(r[x]), fp8x2_hi_to_f16x2<F>(r[x])};
            mma_m16n8k16<Mma>(s[st][x >> 1], qa[2 * kp + (x & 1)], b);
          }
        }
      }
    }

    // Online softmax over the tile's scores of head g (columns 2c, 2c+1 of each n-tile); the max
    // is taken over the quad of lanes that share the row.
    const int t0 = wstart + i * TILE;
    const bool partial = t0 + TILE > wend;  // uniform over the warp
    float mx = -INFINITY;
#pragma unroll
    for (int st = 0; st < STEPS; ++st)
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float x = s[st][j][h] * qscale;
          if (partial && t0 + 16 * st + 8 * j + 2 * c + h >= wend) x = -INFINITY;
          s[st][j][h] = x;
          mx = fmaxf(mx, x);
        }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    // The first tile of a warp starts with a real token, so m is finite from then on (NaN scores
    // aside, which reach the output through the weights).
    if (__any_sync(0xffffffffu, mx > m)) {
      const float alpha = mx > m ? fast_exp2(m - mx) : 1.f;  // 0 the first time (m = -inf)
      if (mx > m) m = mx;
      l *= alpha;
      // O^T's columns are heads 2c and 2c + 1, whose factors lanes 8c and 8c + 4 hold.
      const float a0 = __shfl_sync(0xffffffffu, alpha, 8 * c);
      const float a1 = __shfl_sync(0xffffffffu, alpha, 8 * c + 4);
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        acc[t][0] *= a0;
        acc[t][2] *= a0;
        acc[t][1] *= a1;
        acc[t][3] *= a1;
      }
    }

    // O^T += V^T . P^T, step by step: P^T's B fragment is the step's scores of head g,
    // exponentiated (tokens 2c, 2c+1 and 8+2c, 8+2c+1).
#pragma unroll
    for (int st = 0; st < STEPS; ++st) {
      float p[2][2];
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          p[j][h] = fast_exp2(s[st][j][h] - m);  // 0 for the tokens past the end
          l += p[j][h];
        }
      const unsigned pb[2] = {pack2<Mma>(p[0][0], p[0][1]), pack2<Mma>(p[1][0], p[1][1])};
      if constexpr (!FP8) {
        // Matrices (transposed): tokens 0-7 of dims 16t..+7 and 16t+8..+15, then tokens 8-15:
        // m-tile t's A fragment as it is.
#pragma unroll
        for (int t = 0; t < MT; ++t) {
          unsigned r[4];
          ldmatrix<4, true>(r, at(vslot, st, 2 * t));
          mma_m16n8k16<Mma>(acc[t], r, pb);
        }
      } else {
        // Matrices (transposed b16 = byte pairs): tokens 0-7 of dims 32cp..+15 and of the next
        // 16, then tokens 8-15. A register holds (token 2c: dims 2g, 2g+1; token 2c+1: dims 2g,
        // 2g+1); the permute makes (2c, 2c+1 of dim 2g; 2c, 2c+1 of dim 2g+1): rows g and g + 8
        // of the m-tile are dims 2g and 2g + 1 of its 16.
        constexpr auto F = Fp8Format<KV>::kFormat;
#pragma unroll
        for (int cp = 0; cp < MT / 2; ++cp) {
          unsigned r[4];
          ldmatrix<4, true>(r, at(vslot, st, 2 * cp));
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const unsigned first = __byte_perm(r[e], 0u, 0x3120);
            const unsigned last = __byte_perm(r[2 + e], 0u, 0x3120);
            const unsigned a[4] = {fp8x2_lo_to_f16x2<F>(first), fp8x2_hi_to_f16x2<F>(first),
                                   fp8x2_lo_to_f16x2<F>(last), fp8x2_hi_to_f16x2<F>(last)};
            mma_m16n8k16<Mma>(acc[2 * cp + e], a, pb);
          }
        }
      }
    }
  }

  // Head g's sum of weights: the quad's lanes hold disjoint tokens.
  l += __shfl_xor_sync(0xffffffffu, l, 1);
  l += __shfl_xor_sync(0xffffffffu, l, 2);

  // Merge the warps' states through shared memory: the ring, once every warp has left its loop.
  static_assert(MergeArea<GROUP, HEAD_DIM>::kBytes <= kRingBytes, "merge fits");
  const MergeArea<GROUP, HEAD_DIM> area(smem);
  __syncthreads();
#pragma unroll
  for (int h = 0; h < 2; ++h) {  // head 2c + h: columns [h] and [2 + h] of every m-tile
    if (2 * c + h < GROUP) {
      float* row = area.merged + (warp * GROUP + 2 * c + h) * HEAD_DIM;
#pragma unroll
      for (int t = 0; t < MT; ++t) {
        if constexpr (!FP8) {  // dims 16t + g, 16t + g + 8
          row[16 * t + g] = acc[t][h];
          row[16 * t + g + 8] = acc[t][2 + h];
        } else {  // dims 16t + 2g, 16t + 2g + 1
          st_vec(row + 16 * t + 2 * g, make_float2(acc[t][h], acc[t][2 + h]));
        }
      }
    }
  }
  if (g < GROUP && c == 0) {
    area.warp_max[warp][g] = m;
    area.warp_sum[warp][g] = l;
  }
  __syncthreads();
  write_output<T, HEAD_DIM, GROUP>(area, out, part_out, part_max, part_sum, v_scale[kv_head], o);
}

}  // namespace tc
}  // namespace attn

// The instances on tensor cores, stated once: head dim 128, groups 4 and 8 (where the CUDA-core
// kernel is issue-bound), q in f16 or bf16, K/V stored as q or in fp8. The launcher dispatches
// to them whenever a shape has one (src/launch/attention.rs); their names add `tc_` after the
// layout: paged_attention_tc_f16_kvfp8_e4m3_d128_g8.
// X(name, T, KV, E, D, G)
#define PAGEDKV_FOR_EACH_TC_ATTENTION(X)                                         \
  X(f16, __half, __half, __half, 128, 4)                                         \
  X(f16, __half, __half, __half, 128, 8)                                         \
  X(bf16, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 128, 4)                   \
  X(bf16, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, 128, 8)                   \
  X(f16_kvfp8_e4m3, __half, Fp8<__NV_E4M3>, unsigned char, 128, 4)               \
  X(f16_kvfp8_e4m3, __half, Fp8<__NV_E4M3>, unsigned char, 128, 8)               \
  X(bf16_kvfp8_e4m3, __nv_bfloat16, Fp8<__NV_E4M3>, unsigned char, 128, 4)       \
  X(bf16_kvfp8_e4m3, __nv_bfloat16, Fp8<__NV_E4M3>, unsigned char, 128, 8)       \
  X(f16_kvfp8_e5m2, __half, Fp8<__NV_E5M2>, unsigned char, 128, 4)               \
  X(f16_kvfp8_e5m2, __half, Fp8<__NV_E5M2>, unsigned char, 128, 8)               \
  X(bf16_kvfp8_e5m2, __nv_bfloat16, Fp8<__NV_E5M2>, unsigned char, 128, 4)       \
  X(bf16_kvfp8_e5m2, __nv_bfloat16, Fp8<__NV_E5M2>, unsigned char, 128, 8)
