// Shared by every kernel file: the source contract of /kernels (see kernels/emu/README.md).
// Under nvcc: CUDA's own headers. Under the CPU emulator (-DPAGEDKV_EMU): emu/emu.h, which
// provides the same names with CUDA's semantics.
#pragma once

#ifdef PAGEDKV_EMU
#include "emu/emu.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

// A global-memory pointer parameter. The emulator's version is bounds-checked.
#define GPTR(T) T* __restrict__

// Dynamic shared memory of the launch, as an array of T.
#define DYNAMIC_SHARED(T, name)                                              \
  extern __shared__ __align__(16) unsigned char pagedkv_smem_[];             \
  T* name = reinterpret_cast<T*>(pagedkv_smem_)

// Vector load/store through a 16- or 8-byte type; the address must be aligned to its size.
template <class V, class T>
__device__ __forceinline__ V ld_vec(const T* p) {
  return __ldg(reinterpret_cast<const V*>(p));
}
template <class V, class T>
__device__ __forceinline__ void st_vec(T* p, V v) {
  *reinterpret_cast<V*>(p) = v;
}
#endif
