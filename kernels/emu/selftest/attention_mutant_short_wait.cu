// A mutant of the paged decode-attention kernel (emulator only, never in the fatbin): the ring's
// wait lets one group too many stay pending, so tile i is read while its copies may still be in
// flight. tests/suite/emu_attention.rs shows the emulator catches it.
#define PAGEDKV_ATTENTION_RING_WAIT(STAGES) cp_async_wait<(STAGES)>()
#include "attention.cuh"

PAGEDKV_DEFINE_PAGED_ATTENTION(mutant_short_wait_paged_attention_f16_d128_g4, __half, __half, __half, 128, 4)
