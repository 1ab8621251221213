// The launch entry the generated per-kernel wrappers call (see build.rs / kernels/emu/build_emu.rs).
#pragma once
#include <cstring>

#include "abi.h"
#include "emu.h"

namespace emu {

// Runs `body(args)` once per CUDA thread of the launch `l` as described in runtime.cpp. Returns an
// EmuStatus; on error writes a message that names `kernel` into err[0..errlen). `max_threads` is
// the kernel's __launch_bounds__ (1024 without): a bigger block fails, as it would on the GPU.
int launch(const char* kernel, const EmuLaunch* l, void (*body)(const EmuArg*), const EmuArg* args,
           char* err, size_t errlen, long long max_threads);

template <class T>
T scalar(const EmuArg& a) {
    T v;
    std::memcpy(&v, a.ptr, sizeof(T));
    return v;
}

}  // namespace emu
