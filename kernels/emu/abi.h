// The C ABI between Rust (src/emu) and the emulator: one launch's geometry, its arguments, and the
// status codes a launch returns. Rust mirrors these structs in src/emu/ffi.rs; keep both in step.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// Order in which the fibers of a block are resumed after each synchronisation point. Cooperative
// fibers run until they block, so the order decides which unsynchronised read sees which write:
// running a kernel under several orders is how races show up as wrong results.
enum EmuSchedule { EMU_FORWARD = 0, EMU_REVERSE = 1, EMU_SHUFFLED = 2 };

typedef struct EmuLaunch {
    uint32_t grid[3];
    uint32_t block[3];
    uint64_t dynamic_smem_bytes;
    uint32_t schedule;  // EmuSchedule
    uint32_t workers;   // OS threads running blocks; 0 or 1 = the calling thread only
    uint64_t seed;      // for EMU_SHUFFLED
} EmuLaunch;

// One kernel argument: a buffer (ptr, byte length) or a scalar (ptr to its value, its size). A
// buffer may have initcheck's shadow: `bytes` bytes, non-zero where the buffer was written (null:
// not tracked).
typedef struct EmuArg {
    void* ptr;
    uint64_t bytes;
    void* shadow;
} EmuArg;

enum EmuStatus {
    EMU_OK = 0,
    EMU_INVALID_LAUNCH = 1,
    EMU_OUT_OF_BOUNDS = 2,
    EMU_DIVERGENT_BARRIER = 3,
    EMU_WARP_SYNC = 4,
    EMU_MISALIGNED = 5,
    EMU_TRAP = 6,
    EMU_ASYNC_COPY_RACE = 7,
    EMU_UNINITIALIZED = 8,
};

#ifdef __cplusplus
}
#endif
