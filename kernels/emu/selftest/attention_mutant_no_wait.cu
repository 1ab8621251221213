// A mutant of the paged decode-attention kernel (emulator only, never in the fatbin): the ring's
// cp.async wait removed. tests/suite/emu_attention.rs shows the emulator catches it: the copies' bytes
// never land, the kernel reads the poison the emulator leaves in their place.
#define PAGEDKV_ATTENTION_RING_WAIT(STAGES) ((void)0)
#include "attention.cuh"

PAGEDKV_DEFINE_PAGED_ATTENTION(mutant_no_wait_paged_attention_f16_d128_g4, __half, __half, __half, 128, 4)
