// A mutant of the paged decode-attention kernel on tensor cores (emulator only, never in the
// fatbin): the ring's wait lets one group too many stay pending, so tile i is read while its copies
// may still be in flight. tests/suite/emu_attention.rs shows the emulator catches it.
#define PAGEDKV_ATTENTION_RING_WAIT(STAGES) cp_async_wait<(STAGES)>()
#include "attention_tc.cuh"

PAGEDKV_DEFINE_PAGED_ATTENTION_WITH(mutant_short_wait_paged_attention_tc_f16_d128_g8,
                                    attn::tc::decode_attention, attn::tc::min_blocks_per_sm(),
                                    __half, __half, __half, 128, 8)
