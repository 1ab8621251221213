// Tensor cores (sm_80+): the warp-wide matrix multiply mma.sync.m16n8k16 (f16 or bf16 in, f32
// accumulate) and the shared-memory matrix load ldmatrix.m8n8 (x1, x2, x4, plain or .trans), with
// the fragment layouts of the PTX ISA ("Matrix Fragments for mma.m16n8k16", "ldmatrix"). Under
// nvcc they are inline PTX; under the emulator they are warp collectives (kernels/emu/tensor_core.h)
// whose layouts tests/suite/emu_tensor_core.rs checks against CUTLASS's cute atoms.
//
// Fragments, with g = lane / 4 and c = lane % 4 (each 32-bit register holds two 16-bit elements,
// the lower-numbered column in the low half):
//   A (16 x 16, row-major): a[0] = (g, 2c..2c+1)   a[1] = (g+8, 2c..2c+1)
//                           a[2] = (g, 2c+8..+9)   a[3] = (g+8, 2c+8..+9)
//   B (16 x 8, K x N):      b[0] = (k 2c..2c+1, n g)   b[1] = (k 2c+8..+9, n g)
//   C/D (16 x 8, f32):      d[0], d[1] = (g, 2c), (g, 2c+1)   d[2], d[3] = (g+8, 2c), (g+8, 2c+1)
// ldmatrix: lanes 8i..8i+7 give the addresses of rows 0..7 of matrix i (16 bytes each, 16-byte
// aligned, shared memory); register i of every lane receives matrix i, lane l holding row l / 4,
// 16-bit columns 2(l % 4) and 2(l % 4) + 1 (with .trans: the transposed matrix, i.e. column l / 4,
// rows 2(l % 4) and 2(l % 4) + 1). x1 reads addresses from lanes 0-7, x2 from lanes 0-15.
#pragma once
#include "common.cuh"

#ifdef PAGEDKV_EMU
#include "emu/tensor_core.h"
#endif

// d += a * b for T = __half or __nv_bfloat16.
template <class T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4],
                                             const unsigned (&b)[2]) {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, "f16 or bf16");
#ifdef PAGEDKV_EMU
  ::emu::mma_m16n8k16_f32(std::is_same_v<T, __nv_bfloat16>, d, a, b);
#else
  if constexpr (std::is_same_v<T, __half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
#endif
}

// N (1, 2 or 4) 8 x 8 matrices of 16-bit elements from shared memory; `row` is this lane's row
// address (see above; lanes that give none may pass any pointer). The "memory" clobber keeps the
// compiler from moving it across shared-memory stores or the cp.async wait.
template <int N, bool TRANS>
__device__ __forceinline__ void ldmatrix(unsigned (&r)[N], const void* row) {
  static_assert(N == 1 || N == 2 || N == 4, "x1, x2 or x4");
#ifdef PAGEDKV_EMU
  ::emu::ldmatrix_m8n8(N, TRANS, r, row);
#else
  const unsigned at = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (N == 4 && TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at) : "memory");
  } else if constexpr (N == 4) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(at) : "memory");
  } else if constexpr (N == 2 && TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(at) : "memory");
  } else if constexpr (N == 2) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(at) : "memory");
  } else if constexpr (TRANS) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0]) : "r"(at) : "memory");
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\n"
                 : "=r"(r[0]) : "r"(at) : "memory");
  }
#endif
}

// Two floats rounded to T and packed in one register, the first in the low half.
template <class T>
__device__ __forceinline__ unsigned pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, __half>) {
    const __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&h);
  } else {
    const __nv_bfloat162 b = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&b);
  }
}
