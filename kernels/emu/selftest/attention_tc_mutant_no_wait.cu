// A mutant of the paged decode-attention kernel on tensor cores (emulator only, never in the
// fatbin): the ring's cp.async wait removed. tests/suite/emu_attention.rs shows the emulator catches it:
// the copies' bytes never land, the kernel reads the poison the emulator leaves in their place.
#define PAGEDKV_ATTENTION_RING_WAIT(STAGES) ((void)0)
#include "attention_tc.cuh"

PAGEDKV_DEFINE_PAGED_ATTENTION_WITH(mutant_no_wait_paged_attention_tc_f16_d128_g8,
                                    attn::tc::decode_attention, attn::tc::min_blocks_per_sm(),
                                    __half, __half, __half, 128, 8)
