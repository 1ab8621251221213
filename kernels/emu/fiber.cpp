#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace emu {

#ifndef PAGEDKV_EMU_USE_UCONTEXT
extern "C" void pagedkv_emu_switch(void** save_sp, void* load_sp);
asm(R"(
    .text
    .globl pagedkv_emu_switch
    .type pagedkv_emu_switch,@function
pagedkv_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size pagedkv_emu_switch, .-pagedkv_emu_switch
    .section .note.GNU-stack,"",@progbits
    .text
)");

void make_context(Context& ctx, void* stack, size_t bytes, void (*entry)()) {
    // From the top: a zero fake return address for `entry`, then `entry` for the switch's `ret`,
    // then six zeroed callee-saved registers. After `ret`, rsp + 8 is 16-byte aligned, as at any
    // function entry.
    auto top = reinterpret_cast<uintptr_t>(stack) + bytes;
    top &= ~uintptr_t{15};
    auto* sp = reinterpret_cast<void**>(top);
    *--sp = nullptr;
    *--sp = reinterpret_cast<void*>(entry);
    for (int i = 0; i < 6; i++) *--sp = nullptr;
    ctx.sp = sp;
}

void switch_context(Context& from, Context& to) { pagedkv_emu_switch(&from.sp, to.sp); }
#else
void make_context(Context& ctx, void* stack, size_t bytes, void (*entry)()) {
    getcontext(&ctx.uc);
    ctx.uc.uc_stack.ss_sp = stack;
    ctx.uc.uc_stack.ss_size = bytes;
    ctx.uc.uc_link = nullptr;
    makecontext(&ctx.uc, entry, 0);
}

void switch_context(Context& from, Context& to) { swapcontext(&from.uc, &to.uc); }
#endif

StackPool::~StackPool() {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    for (void* s : stacks_) munmap(static_cast<char*>(s) - page, kStackBytes + page);
}

void* StackPool::stack(size_t i) {
    while (stacks_.size() <= i) {
        const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
        void* m = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) {
            std::perror("pagedkv emu: mmap of a fiber stack");
            std::abort();
        }
        mprotect(m, page, PROT_NONE);  // guard page: an overflow faults instead of corrupting
        stacks_.push_back(static_cast<char*>(m) + page);
    }
    return stacks_[i];
}

}  // namespace emu
