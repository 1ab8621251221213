// Paged gather: read K/V blocks through a block table. Bandwidth probes for the block-size sweep,
// and the simplest user of the paged layout (PagedLayout in common.cuh). CPU reference:
// src/device/cpu/gather.rs.
//
// - Copy-out (paged_gather_copy_*): every token of every sequence into a contiguous buffer
//   [num_kv_heads, total_tokens, head_dim], sequence s starting at token out_offsets[s].
// - Read-only (paged_gather_sum_partial_* then paged_gather_sum_merge): for each (sequence, KV
//   head) the f32 sum of its K and V elements, [num_seqs, num_kv_heads]. Long sequences are split
//   into chunks of tokens_per_cta tokens, one CTA each, which write one partial sum per chunk; the
//   merge kernel adds a sequence's partials in chunk order (deterministic, no atomics, and every
//   output element is written, so poisoned outputs catch a missed one).
//
// Geometry of the per-token kernels: grid (ceil(max_len / tokens_per_cta), num_kv_heads,
// num_seqs), 1-D blocks of at most 256 threads (the sum: a multiple of 32). CTAs past a sequence's
// end exit at once. head_dim is a multiple of 16, so a token row is a whole number of 16-byte
// vectors in every dtype and every row starts 16-byte aligned.
#include "common.cuh"

// 16-byte vectors each thread loads before it uses any: the loads of one thread overlap.
constexpr int kUnroll = 4;
// Threads per CTA at most, and CTAs per SM promised to ptxas: without the promise it spilled a few
// bytes of the sums at 48 registers on sm_90; with it, 48 registers and no spill.
#define PAGEDKV_GATHER_BOUNDS __launch_bounds__(256, 4)

// Element offset of vector `c` of `token` (within the sequence) of `head`, through the table row.
template <class T>
__device__ __forceinline__ long long pool_offset(GPTR(const int) table_row, int token, int c,
                                                 int head, const PagedLayout& layout) {
    return layout.row(table_row[layout.block_of(token)], head, layout.offset_in_block(token)) +
           c * kVec16Elems<T>;
}

template <class T>
__device__ __forceinline__ void gather_copy(
    GPTR(const T) pool,            // [num_blocks, num_kv_heads, block_size, head_dim]
    GPTR(const int) block_tables,  // [num_seqs, table_stride]
    GPTR(const int) seq_lens,      // [num_seqs]
    GPTR(const int) out_offsets,   // [num_seqs]: first token of each sequence in out
    GPTR(T) out,                   // [num_kv_heads, total_tokens, head_dim]
    int num_kv_heads, int log2_block_size, int head_dim, int table_stride, int total_tokens,
    int tokens_per_cta) {
    const PagedLayout layout{num_kv_heads, log2_block_size, head_dim};
    const int seq = blockIdx.z, head = blockIdx.y;
    const int first = blockIdx.x * tokens_per_cta;
    const int len = seq_lens[seq];
    if (first >= len) return;
    const int vecs_per_token = head_dim / kVec16Elems<T>;
    const int num_vecs = min(tokens_per_cta, len - first) * vecs_per_token;
    GPTR(const int) table_row = block_tables + static_cast<long long>(seq) * table_stride;
    GPTR(T) dst =
        out + (static_cast<long long>(head) * total_tokens + out_offsets[seq] + first) * head_dim;
    for (int base = threadIdx.x; base < num_vecs; base += kUnroll * blockDim.x) {
        uint4 r[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            const int v = base + u * blockDim.x;
            r[u] = make_uint4(0, 0, 0, 0);
            if (v < num_vecs)
                r[u] = ld_vec<uint4>(pool + pool_offset<T>(table_row, first + v / vecs_per_token,
                                                           v % vecs_per_token, head, layout));
        }
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            const int v = base + u * blockDim.x;
            if (v < num_vecs) st_vec(dst + static_cast<long long>(v) * kVec16Elems<T>, r[u]);
        }
    }
}

// S: how the pool stores elements (T, or Fp8<F>: codes summed unscaled).
template <class S>
__device__ __forceinline__ void gather_sum_partial(
    GPTR(const Stored<S>) k_pool,  // [num_blocks, num_kv_heads, block_size, head_dim]
    GPTR(const Stored<S>) v_pool,  // [num_blocks, num_kv_heads, block_size, head_dim]
    GPTR(const int) block_tables,  // [num_seqs, table_stride]
    GPTR(const int) seq_lens,      // [num_seqs]
    GPTR(float) partials,          // [num_seqs, num_kv_heads, gridDim.x]
    int num_kv_heads, int log2_block_size, int head_dim, int table_stride, int tokens_per_cta) {
    const PagedLayout layout{num_kv_heads, log2_block_size, head_dim};
    const int seq = blockIdx.z, head = blockIdx.y;
    const int first = blockIdx.x * tokens_per_cta;
    const int len = seq_lens[seq];
    if (first >= len) return;  // uniform over the CTA: no thread reaches block_sum's barriers
    using T = Stored<S>;
    constexpr int kElems = Vec16<S>::kElems;
    const int vecs_per_token = head_dim / kElems;
    const int num_vecs = min(tokens_per_cta, len - first) * vecs_per_token;
    GPTR(const int) table_row = block_tables + static_cast<long long>(seq) * table_stride;
    float acc = 0.0f;
    for (int base = threadIdx.x; base < num_vecs; base += kUnroll * blockDim.x) {
        uint4 kr[kUnroll], vr[kUnroll];
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            const int v = base + u * blockDim.x;
            kr[u] = vr[u] = make_uint4(0, 0, 0, 0);  // zeros add nothing
            if (v < num_vecs) {
                const long long at = pool_offset<T>(table_row, first + v / vecs_per_token,
                                                    v % vecs_per_token, head, layout);
                kr[u] = ld_vec<uint4>(k_pool + at);
                vr[u] = ld_vec<uint4>(v_pool + at);
            }
        }
#pragma unroll
        for (int u = 0; u < kUnroll; u++) {
            // One vector unpacked at a time: fp8 on sm_80 converts in software, and K and V
            // unpacked together spilled at the 64 registers 4 CTAs of 256 threads leave.
            float f[kElems];
            Vec16<S>::unpack(kr[u], f);  // a zero vector is +0 in every storage
#pragma unroll
            for (int i = 0; i < kElems; i++) acc += f[i];
            Vec16<S>::unpack(vr[u], f);
#pragma unroll
            for (int i = 0; i < kElems; i++) acc += f[i];
        }
    }
    const float sum = block_sum(acc);
    if (threadIdx.x == 0)
        partials[(static_cast<long long>(seq) * num_kv_heads + head) * gridDim.x + blockIdx.x] = sum;
}

// S: how the pool stores elements (T, or Fp8<F>); T: the element type of its pointers.
#define PAGED_GATHER_KERNELS(S, T, SUFFIX)                                                         \
    extern "C" __global__ void PAGEDKV_GATHER_BOUNDS paged_gather_copy_##SUFFIX(                   \
        GPTR(const T) pool,            /* [num_blocks, num_kv_heads, block_size, head_dim] */      \
        GPTR(const int) block_tables,  /* [num_seqs, table_stride] */                              \
        GPTR(const int) seq_lens,      /* [num_seqs] */                                            \
        GPTR(const int) out_offsets,   /* [num_seqs] */                                            \
        GPTR(T) out,                   /* [num_kv_heads, total_tokens, head_dim] */                \
        int num_kv_heads, int log2_block_size, int head_dim, int table_stride, int total_tokens,   \
        int tokens_per_cta) {                                                                      \
        gather_copy<T>(pool, block_tables, seq_lens, out_offsets, out, num_kv_heads,              \
                       log2_block_size, head_dim, table_stride, total_tokens, tokens_per_cta);     \
    }                                                                                              \
    extern "C" __global__ void PAGEDKV_GATHER_BOUNDS paged_gather_sum_partial_##SUFFIX(            \
        GPTR(const T) k_pool,          /* [num_blocks, num_kv_heads, block_size, head_dim] */      \
        GPTR(const T) v_pool,          /* [num_blocks, num_kv_heads, block_size, head_dim] */      \
        GPTR(const int) block_tables,  /* [num_seqs, table_stride] */                              \
        GPTR(const int) seq_lens,      /* [num_seqs] */                                            \
        GPTR(float) partials,          /* [num_seqs, num_kv_heads, gridDim.x] */                   \
        int num_kv_heads, int log2_block_size, int head_dim, int table_stride, int tokens_per_cta) {\
        gather_sum_partial<S>(k_pool, v_pool, block_tables, seq_lens, partials, num_kv_heads,      \
                              log2_block_size, head_dim, table_stride, tokens_per_cta);            \
    }

PAGED_GATHER_KERNELS(__half, __half, f16)
PAGED_GATHER_KERNELS(__nv_bfloat16, __nv_bfloat16, bf16)
PAGED_GATHER_KERNELS(float, float, f32)
PAGED_GATHER_KERNELS(Fp8<__NV_E4M3>, unsigned char, fp8_e4m3)
PAGED_GATHER_KERNELS(Fp8<__NV_E5M2>, unsigned char, fp8_e5m2)

// out[s, h] = the sum of the partials of sequence s's ceil(len / tokens_per_cta) chunks, in order.
// Grid: ceil(num_seqs * num_kv_heads / blockDim.x) 1-D blocks of MERGE_THREADS = 128 threads
// (src/emu/gather.rs).
extern "C" __global__ void __launch_bounds__(128) paged_gather_sum_merge(
    GPTR(const float) partials,  // [num_seqs, num_kv_heads, num_chunks]
    GPTR(const int) seq_lens,    // [num_seqs]
    GPTR(float) out,             // [num_seqs, num_kv_heads]
    int num_seqs, int num_kv_heads, int num_chunks, int tokens_per_cta) {
    const long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= static_cast<long long>(num_seqs) * num_kv_heads) return;
    const int chunks = (seq_lens[i / num_kv_heads] + tokens_per_cta - 1) / tokens_per_cta;
    float sum = 0.0f;
    for (int c = 0; c < chunks; c++) sum += partials[i * num_chunks + c];
    out[i] = sum;
}
