// A warp's ring of cp.async tiles, shared by the decode-attention kernels (attention.cuh on CUDA
// cores, attention_tc.cuh on tensor cores).
//
// A warp streams its own tiles of the context: tile i holds the K and V rows of kTokens consecutive
// tokens, end to end, in ring slot i % STAGES. While tile i is computed, tiles i+1 .. i+STAGES-1
// are loading, so the wait for tile i finds STAGES tiles in flight. The block table is read through
// the same pipeline: a tile's table words (one per token) are copied into shared memory in the
// group of the tile STAGES before it, so they have landed before the tile's own copies are issued;
// each is translated once into its row's index (below), which K and V share. No load is ever
// waited on outside the ring's one wait per tile.
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
// element. Slots are [STAGES][2: K, V][TILE_BYTES]; words and row ids [STAGES][kMaxTileTokens].
//
// The copies: a lane copies 16 bytes of K and 16 of V per step, the warp 512 contiguous bytes of the
// tile's rows laid end to end (whole sectors and lines of global memory), kCopies steps per tile.
// A lane's rows are therefore fixed: step u covers row u * kRowsPerStep + lane / (32 /
// kRowsPerStep) at the same byte of the row. Their addresses come from row ids (Rows::row_id: the
// row's index in its cache: its element offset over the head dim) that the first kTokens lanes
// compute once per tile, one token each, and leave in shared memory ordered so that each lane's
// kCopies rows are adjacent: a lane reads them in 16-byte loads and makes each copy's address with
// one multiply-add, whatever the block size. (Copying a tile's rows with one lookup needs blocks of
// at least a tile; this costs two instructions a copy more and serves every block size the same.)
template <class Rows, class Elem, int STAGES, int TILE_BYTES, int ROW_BYTES, bool CROSS_LANE,
          bool SWIZZLE>
struct WarpRing {
  static constexpr int kTokens = TILE_BYTES / ROW_BYTES;
  static constexpr int kCopies = TILE_BYTES / 512;     // steps of 16 bytes a lane per tile
  static constexpr int kRowsPerStep = 512 / ROW_BYTES;  // rows one step of the warp covers
  static constexpr int kRowElems = ROW_BYTES / (int)sizeof(Elem);
  static_assert(TILE_BYTES % 512 == 0, "a tile is whole 16-byte copies of every lane");
  static_assert(ROW_BYTES % 16 == 0 && 512 % ROW_BYTES == 0, "whole rows per step of the warp");
  static_assert(kTokens <= kMaxTileTokens, "a tile's table words fit their slot");
  static_assert(kCopies % 4 == 0, "a lane's row ids are whole 16-byte loads");

  unsigned char (*slots)[2][TILE_BYTES];
  int (*words)[kMaxTileTokens];
  unsigned (*row_ids)[kMaxTileTokens];
  const Rows& rows;
  GPTR(const Elem) k_cache;
  GPTR(const Elem) v_cache;
  int kv_head;
  int wstart, wend, num_tiles;  // this warp's tokens [wstart, wend) in num_tiles tiles
  int lane;
  // Where this lane leaves the row id it computes (lanes past the tile's tokens compute its last
  // token's again, into an entry no lane reads: no branch).
  int id_entry = lane < kTokens ? row_id_slot(lane) : lane;
  // The caches at this lane's byte of a row: a copy's source is one multiply-add from them.
  GPTR(const Elem) k_lane = opaque(k_cache + byte_in_row() / (int)sizeof(Elem));
  GPTR(const Elem) v_lane = opaque(v_cache + byte_in_row() / (int)sizeof(Elem));

  // Where token j of a tile (its row j) keeps its row id: lane l reads its kCopies rows (l /
  // (32 / kRowsPerStep) + u * kRowsPerStep) at l / (32 / kRowsPerStep) * kCopies + u.
  __device__ __forceinline__ static int row_id_slot(int j) {
    return j % kRowsPerStep * kCopies + j / kRowsPerStep;
  }
  __device__ __forceinline__ int first_row() const { return lane * 16 / ROW_BYTES; }
  __device__ __forceinline__ int byte_in_row() const { return lane * 16 % ROW_BYTES; }

  // The slot after `slot`: tile i is in slot i % STAGES.
  __device__ __forceinline__ static int next_slot(int slot) {
    if constexpr ((STAGES & (STAGES - 1)) == 0) {
      return (slot + 1) & (STAGES - 1);
    } else {
      return slot + 1 == STAGES ? 0 : slot + 1;
    }
  }

  // The lanes start copying the table words of tile i, one token each; those past the end of the
  // share are not needed (nor, past kTokens, read: they are the next tile's).
  __device__ __forceinline__ void stage_words(int i, int slot) {
    const int t = wstart + i * kTokens + lane;
    if (t < wend) rows.stage(&words[slot][lane], t);
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
    for (int i = 0; i < STAGES - 1; ++i) issue(i, i);
  }

  // Issues the copies of tile i into its slot, and the table words of tile i + STAGES into the
  // word slot tile i's words leave free, as one cp.async group (empty past the end, so every
  // iteration commits one group and the wait count stays uniform). Tile i's words have landed:
  // they came with the group of tile i - STAGES, which the previous wait retired.
  __device__ __forceinline__ void issue(int i, int slot) {
    if (i < num_tiles) {  // uniform over the warp
      // Row ids, one token a lane. Past the end a lane takes the last token's row (always a real
      // row): its bytes are copied and ignored.
      const int t0 = wstart + i * kTokens;
      {
        const int t = min(t0 + min(lane, kTokens - 1), wend - 1);
        const int word = Rows::kStaged ? words[slot][t - t0] : 0;
        row_ids[slot][id_entry] = rows.row_id(word, kv_head, t);
      }
      // One barrier orders three things: the ids written by one lane before others read them;
      // every lane's read of the words before they are replaced; and the reads of this slot's
      // bytes by other lanes (tile i - STAGES, CROSS_LANE) before the copies refill it.
      __syncwarp();
      stage_words(i + STAGES, slot);
      unsigned ids[kCopies];
#pragma unroll
      for (int u = 0; u < kCopies; u += 4) {
        const uint4 v = ld_vec<uint4>(&row_ids[slot][first_row() * kCopies + u]);
        ids[u] = v.x, ids[u + 1] = v.y, ids[u + 2] = v.z, ids[u + 3] = v.w;
      }
      // Step u's destination: the swizzle repeats every 8 rows, so steps kPeriod apart are a
      // constant distance apart.
      constexpr int kPeriod = SWIZZLE && kRowsPerStep < 8 ? 8 / kRowsPerStep : 1;
#pragma unroll
      for (int u = 0; u < kCopies; ++u) {
        const int64_t at = static_cast<int64_t>(ids[u]) * kRowElems;
        const int to = ring_offset<ROW_BYTES, SWIZZLE>(first_row() + u % kPeriod * kRowsPerStep,
                                                       byte_in_row()) +
                       u / kPeriod * kPeriod * 512;
        cp_async16(&slots[slot][0][to], k_lane + at);
        cp_async16(&slots[slot][1][to], v_lane + at);
      }
    }
    cp_async_commit();
  }

  // Issues tile i + STAGES - 1 and waits for tile i, which is in `slot`; afterwards every lane may
  // read tile i's slot (and the words of tile i + STAGES, which other lanes copied).
  __device__ __forceinline__ void next(int i, int slot) {
    issue(i + STAGES - 1, (STAGES & (STAGES - 1)) == 0 ? (slot - 1) & (STAGES - 1)
                                                         : slot == 0 ? STAGES - 1 : slot - 1);
    PAGEDKV_ATTENTION_RING_WAIT(STAGES);
    if constexpr (Rows::kStaged || CROSS_LANE) __syncwarp();
  }
};

}  // namespace attn
