// Evaluates CUTLASS cute's statements of the sm_80 tensor-core fragment layouts on the host and
// prints them, every thread and value (scripts/record-cute-layouts writes the output to
// tests/data/tensor_core/cute_layouts.txt). Nothing here restates a layout: every number printed
// is a cute Layout evaluated at (thread, value).
#include <cstdio>
#include <cstdlib>

#include <cute/atom/copy_traits_sm75.hpp>
#include <cute/atom/mma_traits_sm80.hpp>
#include <cute/tensor.hpp>
#include <cutlass/version.h>

using namespace cute;

// MMA: ALayout (thr, val) -> (m, k), BLayout -> (n, k), CLayout -> (m, n), each an index into the
// column-major coordinate space cute states them in (Shape_MNK's two extents).
template <class Layout, class Extents>
void print_mma(const char* op, const char* operand, Layout layout, Extents extents) {
    for (int t = 0; t < size<0>(layout); ++t)
        for (int v = 0; v < size<1>(layout); ++v) {
            const int index = layout(t, v);
            const auto coord = idx2crd(index, extents);
            std::printf("mma %s %s %d %d %d %d\n", op, operand, t, v, int(get<0>(coord)),
                        int(get<1>(coord)));
        }
}

template <class Op>
void print_mma_atom(const char* op) {
    using T = MMA_Traits<Op>;
    using MNK = typename T::Shape_MNK;
    static_assert(size(typename T::ThrID{}) == 32, "one warp");
    print_mma(op, "A", typename T::ALayout{}, make_shape(get<0>(MNK{}), get<2>(MNK{})));
    print_mma(op, "B", typename T::BLayout{}, make_shape(get<1>(MNK{}), get<2>(MNK{})));
    print_mma(op, "C", typename T::CLayout{}, make_shape(get<0>(MNK{}), get<1>(MNK{})));
}

// ldmatrix: SrcLayout and DstLayout map (thr, val) to a bit of the copied data. Printed per
// 16-bit element (val = 16 e), after checking that the element's 16 bits are consecutive.
template <class Layout>
void print_copy(const char* op, const char* side, Layout layout) {
    for (int t = 0; t < size<0>(layout); ++t)
        for (int v = 0; v < size<1>(layout); v += 16) {
            const int bit = layout(t, v);
            for (int b = 1; b < 16; ++b)
                if (layout(t, v + b) != bit + b) {
                    std::fprintf(stderr, "%s %s: thread %d value %d: bits not consecutive\n", op,
                                 side, t, v);
                    std::exit(1);
                }
            std::printf("ldsm %s %s %d %d %d\n", op, side, t, v / 16, bit);
        }
}

template <class Op>
void print_copy_atom(const char* op) {
    using T = Copy_Traits<Op>;
    static_assert(size(typename T::ThrID{}) == 32, "one warp");
    print_copy(op, "src", typename T::SrcLayout{});
    print_copy(op, "dst", typename T::DstLayout{});
}

int main() {
    std::printf("# cutlass %d.%d.%d\n", CUTLASS_MAJOR, CUTLASS_MINOR, CUTLASS_PATCH);
    print_mma_atom<SM80_16x8x16_F32F16F16F32_TN>("SM80_16x8x16_F32F16F16F32_TN");
    print_mma_atom<SM80_16x8x16_F32BF16BF16F32_TN>("SM80_16x8x16_F32BF16BF16F32_TN");
    print_copy_atom<SM75_U32x1_LDSM_N>("SM75_U32x1_LDSM_N");
    print_copy_atom<SM75_U32x2_LDSM_N>("SM75_U32x2_LDSM_N");
    print_copy_atom<SM75_U32x4_LDSM_N>("SM75_U32x4_LDSM_N");
    print_copy_atom<SM75_U16x2_LDSM_T>("SM75_U16x2_LDSM_T");
    print_copy_atom<SM75_U16x4_LDSM_T>("SM75_U16x4_LDSM_T");
    print_copy_atom<SM75_U16x8_LDSM_T>("SM75_U16x8_LDSM_T");
    return 0;
}
