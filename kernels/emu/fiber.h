// Fibers for the emulator: a stack each (mmap'd, a guard page below, reused across blocks) and a
// context switch. x86-64 uses a hand-written switch of the callee-saved registers (no syscalls);
// other architectures (or -DPAGEDKV_EMU_UCONTEXT) fall back to ucontext.
#pragma once
#include <cstddef>
#include <vector>

#if !defined(__x86_64__) || defined(PAGEDKV_EMU_UCONTEXT)
#define PAGEDKV_EMU_USE_UCONTEXT 1
#include <ucontext.h>
#endif

namespace emu {

struct Context {
#ifndef PAGEDKV_EMU_USE_UCONTEXT
    void* sp = nullptr;
#else
    ucontext_t uc;
#endif
};

// Prepares `ctx` to run `entry()` on [stack, stack + bytes) at the next switch into it.
void make_context(Context& ctx, void* stack, size_t bytes, void (*entry)());
// Saves the running context in `from` and resumes `to`.
void switch_context(Context& from, Context& to);

// Per-OS-thread pool of fiber stacks.
class StackPool {
public:
    static constexpr size_t kStackBytes = 64 * 1024;
    ~StackPool();
    // Stack `i` (allocated on first use).
    void* stack(size_t i);

private:
    std::vector<void*> stacks_;
};

}  // namespace emu
