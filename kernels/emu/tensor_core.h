// Tensor cores for the emulator: mma.sync.m16n8k16 (f16 or bf16 in, f32 accumulate) and
// ldmatrix.m8n8 (x1, x2, x4, plain or .trans) as full-warp collectives. Kernels reach them through
// kernels/tensor_core.cuh (mma_m16n8k16<T>, ldmatrix<N, TRANS>).
//
// All 32 lanes of the warp must arrive at the same operation (same instruction and shape), as
// .sync.aligned demands; otherwise EmuError::WarpSync. The last lane to arrive computes every
// lane's result from every lane's registers through the layouts of PtxFragments below: the one
// place they are stated, checked against CUTLASS cute's atoms by tests/suite/emu_tensor_core.rs.
//
// mma: D = C + A * B. Each product of two f16 or two bf16 values is exact in f32 (bf16: unless it
// leaves f32's normal range); the products are added onto C in f32, k = 0, 1, ..., 15, each sum
// rounded to nearest even. Real tensor cores add in another order with their own rounding, so
// compare kernels that use mma with a tolerance, never bit for bit against a GPU.
// ldmatrix: each row address must lie in the block's shared memory (static or dynamic) with its 16
// bytes, 16-byte aligned (else EmuError::OutOfBounds / Misaligned); the bytes are read as they are
// when the last lane arrives, so a row a cp.async has not landed in yet reads as poison (0xff).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "abi.h"
#include "gptr.h"  // emu::fail
#include "half.h"

namespace emu {

// runtime.cpp: the rendezvous of all 32 lanes of the calling warp in the operation `name`. Each
// lane passes a pointer to its own operands; the last to arrive calls `combine` once with all 32
// pointers (index = lane), which writes every lane's results.
void warp_matrix_collective(const char* name, void* lane_data, void (*combine)(void* const* lanes));
// Whether [p, p + bytes) lies in the running block's static or dynamic shared memory.
bool in_block_shared(const void* p, size_t bytes);
// runtime.cpp: the calling thread's lane (linear thread id % 32).
unsigned lane_id();

// Row and column of one element of a fragment's matrix.
struct RowCol {
    int row, col;
};

// The fragment layouts of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point
// type", "Warp-level matrix load instruction: ldmatrix"), with g = lane / 4, c = lane % 4. A 32-bit
// register holds two 16-bit elements, `half` 0 in the low 16 bits. A selftest mutant
// (kernels/emu/selftest/tensor_core_mutants.cu) derives from this and breaks one function.
struct PtxFragments {
    // A, 16 x 16, (row m, col k): a[0] = (g, 2c + half), a[1] = (g + 8, ..), a[2] = (g, 2c + 8 +
    // half), a[3] = (g + 8, 2c + 8 + half).
    static RowCol a(unsigned lane, int reg, int half) {
        return {static_cast<int>(lane / 4) + 8 * (reg % 2),
                2 * static_cast<int>(lane % 4) + half + 8 * (reg / 2)};
    }
    // B, 16 x 8, (row k, col n): b[0] = (2c + half, g), b[1] = (2c + 8 + half, g).
    static RowCol b(unsigned lane, int reg, int half) {
        return {2 * static_cast<int>(lane % 4) + half + 8 * reg, static_cast<int>(lane / 4)};
    }
    // C and D, 16 x 8 f32, (row m, col n): d[0], d[1] = (g, 2c), (g, 2c + 1); d[2], d[3] = (g + 8, ..).
    static RowCol c(unsigned lane, int i) {
        return {static_cast<int>(lane / 4) + 8 * (i / 2), 2 * static_cast<int>(lane % 4) + i % 2};
    }
    // ldmatrix: the lane whose address gives row `row` of 8 x 8 matrix `matrix`.
    static unsigned ldmatrix_row_lane(int matrix, int row) {
        return static_cast<unsigned>(8 * matrix + row);
    }
    // ldmatrix: the element of each matrix (row, col as stored) that `lane`'s register for that
    // matrix holds in `half`: (lane / 4, 2 (lane % 4) + half), transposed with .trans.
    static RowCol ldmatrix_element(unsigned lane, int half, bool trans) {
        const int r = static_cast<int>(lane / 4), c = 2 * static_cast<int>(lane % 4) + half;
        return trans ? RowCol{c, r} : RowCol{r, c};
    }
};

namespace tc {

struct MmaLane {
    const unsigned* a;  // [4]
    const unsigned* b;  // [2]
    float* d;           // [4], C on entry
};

template <bool BF16>
float element(uint32_t reg, int half) {
    const uint16_t bits = static_cast<uint16_t>(reg >> (16 * half));
    return BF16 ? bf16_bits_to_float(bits) : half_bits_to_float(bits);
}

template <class F, bool BF16>
void mma_combine(void* const* lanes) {
    float a[16][16], b[16][8], c[16][8];
    // A layout that missed an element would leave NaN in the result.
    for (auto& row : a)
        for (float& x : row) x = bits_float(0x7fffffffu);
    for (auto& row : b)
        for (float& x : row) x = bits_float(0x7fffffffu);
    for (auto& row : c)
        for (float& x : row) x = bits_float(0x7fffffffu);
    for (unsigned l = 0; l < 32; l++) {
        const MmaLane& x = *static_cast<const MmaLane*>(lanes[l]);
        for (int h = 0; h < 2; h++) {
            for (int r = 0; r < 4; r++) {
                const RowCol p = F::a(l, r, h);
                a[p.row][p.col] = element<BF16>(x.a[r], h);
            }
            for (int r = 0; r < 2; r++) {
                const RowCol p = F::b(l, r, h);
                b[p.row][p.col] = element<BF16>(x.b[r], h);
            }
        }
        for (int i = 0; i < 4; i++) {
            const RowCol p = F::c(l, i);
            c[p.row][p.col] = x.d[i];
        }
    }
    for (int m = 0; m < 16; m++)
        for (int n = 0; n < 8; n++) {
            float acc = c[m][n];
            for (int k = 0; k < 16; k++) acc += a[m][k] * b[k][n];  // the product is exact
            c[m][n] = acc;
        }
    for (unsigned l = 0; l < 32; l++) {
        MmaLane& x = *static_cast<MmaLane*>(lanes[l]);
        for (int i = 0; i < 4; i++) {
            const RowCol p = F::c(l, i);
            x.d[i] = c[p.row][p.col];
        }
    }
}

struct LdmatrixLane {
    const void* row;
    unsigned* r;  // [N]
};

template <class F, int N, bool TRANS>
void ldmatrix_combine(void* const* lanes) {
    uint16_t m[N][8][8];
    for (int i = 0; i < N; i++)
        for (int row = 0; row < 8; row++)
            std::memcpy(m[i][row],
                        static_cast<const LdmatrixLane*>(lanes[F::ldmatrix_row_lane(i, row)])->row, 16);
    for (unsigned l = 0; l < 32; l++) {
        unsigned* r = static_cast<const LdmatrixLane*>(lanes[l])->r;
        const RowCol lo = F::ldmatrix_element(l, 0, TRANS), hi = F::ldmatrix_element(l, 1, TRANS);
        for (int i = 0; i < N; i++)
            r[i] = m[i][lo.row][lo.col] | static_cast<unsigned>(m[i][hi.row][hi.col]) << 16;
    }
}

template <class F, int N, bool TRANS>
void ldmatrix(const char* name, unsigned* r, const void* row) {
    const unsigned lane = lane_id();
    for (int i = 0; i < N; i++)
        for (int k = 0; k < 8; k++) {
            if (F::ldmatrix_row_lane(i, k) != lane) continue;
            if (!in_block_shared(row, 16))
                fail(EMU_OUT_OF_BOUNDS,
                     "%s: lane %u's address %p (row %d of matrix %d) is not 16 bytes inside the "
                     "block's shared memory",
                     name, lane, row, k, i);
            if (reinterpret_cast<uintptr_t>(row) % 16 != 0)
                fail(EMU_MISALIGNED, "%s: lane %u's address %p (row %d of matrix %d) is not 16-byte aligned",
                     name, lane, row, k, i);
        }
    LdmatrixLane mine{row, r};
    warp_matrix_collective(name, &mine, &ldmatrix_combine<F, N, TRANS>);
}

}  // namespace tc

// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: d += a * b, with the layouts of F.
template <class F>
void mma_m16n8k16_with(bool bf16, float* d, const unsigned* a, const unsigned* b) {
    tc::MmaLane mine{a, b, d};
    if (bf16)
        warp_matrix_collective("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32", &mine,
                               &tc::mma_combine<F, true>);
    else
        warp_matrix_collective("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32", &mine,
                               &tc::mma_combine<F, false>);
}

// ldmatrix.sync.aligned.m8n8.x{n}[.trans].shared.b16 into r[0..n), with the layouts of F.
template <class F>
void ldmatrix_m8n8_with(int n, bool trans, unsigned* r, const void* row) {
#define EMU_LDMATRIX(N, T, NAME)                                                                \
    if (n == N && trans == T) return tc::ldmatrix<F, N, T>("ldmatrix.sync.aligned.m8n8" NAME ".shared.b16", r, row)
    EMU_LDMATRIX(1, false, ".x1");
    EMU_LDMATRIX(2, false, ".x2");
    EMU_LDMATRIX(4, false, ".x4");
    EMU_LDMATRIX(1, true, ".x1.trans");
    EMU_LDMATRIX(2, true, ".x2.trans");
    EMU_LDMATRIX(4, true, ".x4.trans");
#undef EMU_LDMATRIX
    fail(EMU_INVALID_LAUNCH, "ldmatrix of %d matrices: 1, 2 or 4", n);
}

// What kernels/tensor_core.cuh calls: the PTX ISA's layouts.
inline void mma_m16n8k16_f32(bool bf16, float* d, const unsigned* a, const unsigned* b) {
    mma_m16n8k16_with<PtxFragments>(bf16, d, a, b);
}
inline void ldmatrix_m8n8(int n, bool trans, unsigned* r, const void* row) {
    ldmatrix_m8n8_with<PtxFragments>(n, trans, r, row);
}

}  // namespace emu
