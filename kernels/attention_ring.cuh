// A warp's ring of cp.async tiles, shared by the decode-attention kernels (attention.cuh on CUDA
// cores, attention_tc.cuh on tensor cores).
//
// A warp streams its own tiles of the context: tile i holds the K and V rows of kTokens consecutive
// tokens, end to end, in ring slot i % STAGES. While tile i is computed, tiles i+1 .. i+STAGES-1
// are loading, so the wait for tile i finds STAGES tiles in flight. The block table is read through
// the same pipeline: a tile's table words (one per token) are copied into shared memory in the
// group of the tile STAGES before it, so they have landed before the tile's own copies are issued;
// the lanes that copy a token's row translate its word into the row offset, which K and V share. No
// load is ever waited on outside the ring's one wait per tile.
//
// CROSS_LANE: lanes read bytes other lanes copied (fp8 rows on CUDA cores, ldmatrix on tensor
// cores), so the warp synchronises between copying into a slot and reading it, and before a slot
// is refilled. Without it a lane reads back exactly the bytes it copied, and its own cp.async wait
// is all the synchronisation the ring needs.
//
// SWIZZLE places 16-byte chunk j of row r at chunk j ^ (r % 8) of the row, so that eight rows read
// at the same chunk (an ldmatrix phase) fall in eight different bank groups; rows of at least 128
// bytes keep every chunk inside its row.
#pragma once
#include "common.cuh"

namespace attn {

constexpr int kMaxTileTokens = 32;  // table words staged per tile

// The ring's wait: tile i has landed once at most STAGES - 1 newer groups are pending.
// kernels/emu/selftest/attention_mutant_*.cu redefine it to show the emulator catches a bad wait.
#ifndef PAGEDKV_ATTENTION_RING_WAIT
#define PAGEDKV_ATTENTION_RING_WAIT(STAGES) cp_async_wait<(STAGES) - 1>()
#endif

template <int ROW_BYTES, bool SWIZZLE>
__device__ __forceinline__ int ring_offset(int row, int byte_in_row) {
  if constexpr (SWIZZLE) {
    static_assert(ROW_BYTES % 128 == 0, "a swizzled row spans whole 128-byte bank groups");
    return row * ROW_BYTES + (((byte_in_row >> 4) ^ (row & 7)) << 4) + (byte_in_row & 15);
  } else {
    return row * ROW_BYTES + byte_in_row;
  }
}

// A warp's share of a partition's tokens [start, end): whole tiles of TOKENS tokens, the same
// number for each of WARPS warps (the last ones may get fewer or none).
struct WarpShare {
  int wstart, wend, num_tiles;  // tokens [wstart, wend) in num_tiles tiles
};
template <int TOKENS, int WARPS>
__device__ __forceinline__ WarpShare warp_share(int start, int end, int warp) {
  const int tiles = end > start ? (end - start + TOKENS - 1) / TOKENS : 0;
  const int per_warp = (tiles + WARPS - 1) / WARPS;
  const int first_tile = min(tiles, warp * per_warp);
  const int num_tiles = min(tiles, first_tile + per_warp) - first_tile;
  const int wstart = start + first_tile * TOKENS;
  return {wstart, min(end, wstart + num_tiles * TOKENS), num_tiles};
}

// Rows: where a token's row lives (PagedRows or ContiguousRows, attention.cuh). Elem: the stored
// element. Slots are [STAGES][2: K, V][TILE_BYTES]; words [STAGES][kMaxTileTokens].
template <class Rows, class Elem, int STAGES, int TILE_BYTES, int ROW_BYTES, bool CROSS_LANE,
          bool SWIZZLE>
struct WarpRing {
  static constexpr int kTokens = TILE_BYTES / ROW_BYTES;
  static_assert(TILE_BYTES % 512 == 0, "a tile is whole 16-byte copies of every lane");
  static_assert(ROW_BYTES % 16 == 0 && TILE_BYTES % ROW_BYTES == 0, "whole rows per tile");
  static_assert(kTokens <= kMaxTileTokens, "a tile's table words fit their slot");

  unsigned char (*slots)[2][TILE_BYTES];
  int (*words)[kMaxTileTokens];
  const Rows& rows;
  GPTR(const Elem) k_cache;
  GPTR(const Elem) v_cache;
  int seq, kv_head;
  int wstart, wend, num_tiles;  // this warp's tokens [wstart, wend) in num_tiles tiles
  int lane;
  int issue_slot = 0;  // i % STAGES of the next tile issued, kept incrementally

  // Lanes 0 .. kTokens-1 start copying the table words of tile i (those past the end are not
  // needed).
  __device__ __forceinline__ void stage_words(int i, int slot) {
    const int t = wstart + i * kTokens + lane;
    if (i < num_tiles && lane < kTokens && t < wend) rows.stage(&words[slot][lane], seq, t);
  }

  // The first STAGES tiles' words, then the first STAGES - 1 tiles.
  __device__ __forceinline__ void start() {
    if constexpr (Rows::kStaged) {
#pragma unroll
      for (int i = 0; i < STAGES; ++i) stage_words(i, i);
      cp_async_commit();
      cp_async_wait<0>();
      __syncwarp();  // words copied by one lane are read by others
    }
#pragma unroll
    for (int i = 0; i < STAGES - 1; ++i) issue(i);
  }

  // Issues the copies of tile i into its slot, and the table words of tile i + STAGES into the
  // word slot tile i's words leave free, as one cp.async group (empty past the end, so every
  // iteration commits one group and the wait count stays uniform). Tile i's words have landed:
  // they came with the group of tile i - STAGES, which the previous wait retired.
  __device__ __forceinline__ void issue(int i) {
    const int slot = issue_slot;
    issue_slot = issue_slot + 1 == STAGES ? 0 : issue_slot + 1;
    // Other lanes read this slot's bytes (tile i - STAGES) in the last iteration: all done first.
    if constexpr (CROSS_LANE) __syncwarp();
    if (i < num_tiles) {
      const int t0 = wstart + i * kTokens;
#pragma unroll
      for (int u = 0; u < TILE_BYTES / 512; ++u) {
        const int byte = u * 512 + lane * 16;  // of the tile's rows laid end to end
        const int row = byte / ROW_BYTES, in_row = byte % ROW_BYTES;
        // Past the end a lane copies the last token's row (always a real row) and ignores it.
        const int t = min(t0 + row, wend - 1);
        const int word = Rows::kStaged ? words[slot][t - t0] : 0;
        const int64_t at = rows.resolve(word, seq, kv_head, t) + in_row / (int)sizeof(Elem);
        const int to = ring_offset<ROW_BYTES, SWIZZLE>(row, in_row);
        cp_async16(&slots[slot][0][to], k_cache + at);
        cp_async16(&slots[slot][1][to], v_cache + at);
      }
    }
    if constexpr (Rows::kStaged) {
      __syncwarp();  // every lane has read the slot's words before they are replaced
      stage_words(i + STAGES, slot);
    }
    cp_async_commit();
  }

  // Issues tile i + STAGES - 1 and waits for tile i; afterwards every lane may read tile i's slot
  // (and the words of tile i + STAGES, which other lanes copied).
  __device__ __forceinline__ void next(int i) {
    issue(i + STAGES - 1);
    PAGEDKV_ATTENTION_RING_WAIT(STAGES);
    if constexpr (Rows::kStaged || CROSS_LANE) __syncwarp();
  }
};

}  // namespace attn
