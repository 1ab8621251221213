// Mutants of the emulator's tensor-core layouts (emulator only, never in the fatbin): the check
// kernels of tensor_core_checks.cuh run on emu::mma_m16n8k16_with / ldmatrix_m8n8_with with one
// function of emu::PtxFragments broken. tests/suite/emu_tensor_core.rs shows the checks that pass on the
// real layouts fail on these.
#include "tensor_core_checks.cuh"

// A's registers 1 and 2 swapped: rows g + 8 and columns 2c + 8.. exchanged in every lane.
struct SwappedARegisters : ::emu::PtxFragments {
    static ::emu::RowCol a(unsigned lane, int reg, int half) {
        return PtxFragments::a(lane, reg == 1 ? 2 : reg == 2 ? 1 : reg, half);
    }
};

// ldmatrix's two halves of every destination register swapped.
struct SwappedLdmatrixHalves : ::emu::PtxFragments {
    static ::emu::RowCol ldmatrix_element(unsigned lane, int half, bool trans) {
        return PtxFragments::ldmatrix_element(lane, 1 - half, trans);
    }
};

template <class F>
struct MutantOps {
    template <class T>
    static void multiply(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
        ::emu::mma_m16n8k16_with<F>(std::is_same_v<T, __nv_bfloat16>, d, a, b);
    }
    template <int N, bool TRANS>
    static void load(unsigned (&r)[N], const void* row) {
        ::emu::ldmatrix_m8n8_with<F>(N, TRANS, r, row);
    }
};

TC_CHECK_MMA_KERNEL(emu_selftest_tc_mutant_swapped_a, MutantOps<SwappedARegisters>, f16, __half)
TC_CHECK_MMA_KERNEL(emu_selftest_tc_mutant_swapped_a, MutantOps<SwappedARegisters>, bf16, __nv_bfloat16)
TC_CHECK_LDMATRIX_KERNEL(emu_selftest_tc_mutant_swapped_halves, MutantOps<SwappedLdmatrixHalves>, x1, 1, false)
TC_CHECK_LDMATRIX_KERNEL(emu_selftest_tc_mutant_swapped_halves, MutantOps<SwappedLdmatrixHalves>, x4_trans, 4, true)
