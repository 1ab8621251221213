// The emulator's scheduler. A launch runs its blocks one after another on each worker OS thread;
// a block runs each of its CUDA threads as a fiber. Fibers are cooperative: one runs until it
// reaches a synchronisation point (__syncthreads, a warp collective) or exits, then the scheduler
// resumes the next runnable one in the block's schedule order. The last thread to reach a barrier
// or the last lane to join a warp collective releases the others. A pass over the block that finds
// no runnable fiber while some have not exited is a deadlock, reported as an error, never a hang.

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "fiber.h"
#include "runtime.h"

namespace emu {

__thread Geometry current = {};

namespace {

enum class State : uint8_t { Runnable, AtBarrier, AtWarp, Done };

// One cp.async in flight: the bytes it read and where they land when its group retires.
struct AsyncCopy {
    unsigned char* dst;
    unsigned char data[16];
    uint32_t bytes;
};

// A copy's destination holds the poison it was given at issue until the copy lands; anything else
// there means shared memory was written while the copy was in flight: a race on the GPU.
bool still_poisoned(const AsyncCopy& c) {
    for (uint32_t i = 0; i < c.bytes; i++)
        if (c.dst[i] != 0xff) return false;
    return true;
}

struct Fiber {
    Context ctx;
    State state;
    uint3 tid;
    // The warp collective this lane waits in, and its result once every lane has joined.
    WarpOp op;
    unsigned mask;
    uint32_t value;
    int arg;
    int width;
    uint32_t result;
    // OP_MATRIX: the instruction's name and this lane's operands (tensor_core.h).
    const char* matrix_op;
    void* lane_data;
    // This thread's cp.async copies: not yet committed, and committed groups oldest first.
    std::vector<AsyncCopy> uncommitted;
    std::deque<std::vector<AsyncCopy>> groups;
};

// Shared by the workers of one launch.
struct LaunchState {
    const char* kernel;
    const EmuLaunch* cfg;
    void (*body)(const EmuArg*);
    const EmuArg* args;
    uint64_t num_blocks;
    std::atomic<uint64_t> next_block{0};
    std::atomic<bool> stop{false};
    std::mutex error_lock;
    int status = EMU_OK;
    std::string message;
};

// Dynamic shared memory, ending at a guard page so an overrun past its end faults.
class SmemArena {
public:
    ~SmemArena() { release(); }
    unsigned char* get(size_t bytes) {
        const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
        const size_t want = (bytes + 15) / 16 * 16;
        if (base_ == nullptr || want > usable_) {
            release();
            usable_ = (want + page - 1) / page * page;
            if (usable_ == 0) usable_ = page;
            void* m = mmap(nullptr, usable_ + page, PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (m == MAP_FAILED) {
                std::perror("pagedkv emu: mmap of shared memory");
                std::abort();
            }
            base_ = static_cast<unsigned char*>(m);
            mprotect(base_ + usable_, page, PROT_NONE);
        }
        return base_ + usable_ - want;
    }

private:
    void release() {
        if (base_ != nullptr)
            munmap(base_, usable_ + static_cast<size_t>(sysconf(_SC_PAGESIZE)));
        base_ = nullptr;
    }
    unsigned char* base_ = nullptr;
    size_t usable_ = 0;
};

thread_local StackPool t_stacks;
// The static __shared__ variables of this OS thread (see SharedRegistrar).
thread_local std::vector<std::pair<void*, size_t>> t_static_shared;
thread_local SmemArena t_smem;

// One OS thread's state while it runs blocks of a launch.
struct Worker {
    LaunchState* launch;
    std::vector<Fiber> fibers;
    std::vector<uint32_t> order;
    Context scheduler;
    Fiber* running = nullptr;
    unsigned num_threads = 0;
    unsigned exited = 0;
    unsigned at_barrier = 0;
    const char* barrier_file = nullptr;
    int barrier_line = 0;
    unsigned char* smem = nullptr;
    size_t smem_bytes = 0;
    bool failed = false;
};

__thread Worker* t_worker = nullptr;

const char* op_name(WarpOp op) {
    switch (op) {
        case OP_SYNCWARP: return "__syncwarp";
        case OP_SHFL_IDX: return "__shfl_sync";
        case OP_SHFL_UP: return "__shfl_up_sync";
        case OP_SHFL_DOWN: return "__shfl_down_sync";
        case OP_SHFL_XOR: return "__shfl_xor_sync";
        case OP_BALLOT: return "__ballot_sync";
        case OP_ANY: return "__any_sync";
        case OP_ALL: return "__all_sync";
        case OP_MATRIX: return "a warp matrix operation";
    }
    return "?";
}

// The collective a waiting lane is in, for messages.
const char* collective_name(const Fiber& f) { return f.op == OP_MATRIX ? f.matrix_op : op_name(f.op); }

std::string vformat(const char* fmt, va_list ap) {
    char buf[1024];
    vsnprintf(buf, sizeof buf, fmt, ap);
    return buf;
}

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vformat(fmt, ap);
    va_end(ap);
    return s;
}

// Records the launch's first error and stops the other workers.
void set_error(Worker& w, int status, const std::string& what) {
    w.failed = true;
    LaunchState& l = *w.launch;
    std::lock_guard<std::mutex> g(l.error_lock);
    if (l.status == EMU_OK) {
        const uint3 b = current.block_idx;
        std::string where = format("kernel %s, block (%u,%u,%u)", l.kernel, b.x, b.y, b.z);
        if (w.running != nullptr) {
            const uint3 t = w.running->tid;
            where += format(", thread (%u,%u,%u)", t.x, t.y, t.z);
        }
        l.status = status;
        l.message = where + ": " + what;
    }
    l.stop = true;
}

unsigned linear_id(const Fiber& f) {
    const dim3 d = current.block_dim;
    return f.tid.x + d.x * (f.tid.y + d.y * f.tid.z);
}

// Leaves the running fiber and returns to the scheduler; resumes when the scheduler picks it again.
void yield_as(State s) {
    Worker& w = *t_worker;
    Fiber* f = w.running;
    f->state = s;
    switch_context(f->ctx, w.scheduler);
}

[[noreturn]] void abandon_fiber() {
    Worker& w = *t_worker;
    Fiber* f = w.running;
    f->state = State::Done;
    switch_context(f->ctx, w.scheduler);
    std::abort();  // a failed fiber is never resumed
}

[[noreturn]] void fiber_fail(int status, const std::string& what) {
    Worker* w = t_worker;
    if (w == nullptr || w->running == nullptr) {
        std::fprintf(stderr, "pagedkv emu: error outside a kernel: %s\n", what.c_str());
        std::abort();
    }
    set_error(*w, status, what);
    abandon_fiber();
}

// A lane exits: no lane of its warp may be waiting in a collective that names it.
void check_exit_from_warp(Worker& w) {
    const unsigned id = linear_id(*w.running), lane = id % 32, base = id - lane;
    for (unsigned l = 0; l < 32 && base + l < w.num_threads; l++) {
        const Fiber& g = w.fibers[base + l];
        if (g.state == State::AtWarp && ((g.mask >> lane) & 1u))
            fiber_fail(EMU_WARP_SYNC,
                       format("lane %u exits while lane %u waits for it in %s with mask %#x", lane, l,
                              collective_name(g), g.mask));
    }
}

void fiber_main() {
    Worker& w = *t_worker;
    w.launch->body(w.launch->args);
    check_exit_from_warp(w);
    w.exited++;
    if (w.at_barrier > 0 && w.at_barrier + w.exited == w.num_threads)
        fiber_fail(EMU_DIVERGENT_BARRIER,
                   format("divergent __syncthreads at %s:%d: %u of %u threads reached it, the others "
                          "exited",
                          w.barrier_file, w.barrier_line, w.at_barrier, w.num_threads));
    abandon_fiber();
}

// Why no fiber of the block can run: the error message of a deadlock.
void report_stall(Worker& w) {
    unsigned at_warp = 0;
    std::string warp_detail;
    for (const Fiber& f : w.fibers) {
        if (f.state != State::AtWarp) continue;
        if (at_warp++ == 0) {
            const unsigned id = linear_id(f);
            warp_detail =
                format(" (first: thread %u in %s with mask %#x)", id, collective_name(f), f.mask);
        }
    }
    w.running = nullptr;
    const int status = w.at_barrier > 0 ? EMU_DIVERGENT_BARRIER : EMU_WARP_SYNC;
    std::string what = format("deadlock: of %u threads, %u wait at __syncthreads", w.num_threads,
                              w.at_barrier);
    if (w.at_barrier > 0) what += format(" (%s:%d)", w.barrier_file, w.barrier_line);
    what += format(", %u wait in a warp collective%s, %u exited", at_warp, warp_detail.c_str(),
                   w.exited);
    set_error(w, status, what);
}

uint64_t splitmix(uint64_t& s) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void make_order(Worker& w, uint64_t block_linear) {
    const EmuLaunch& cfg = *w.launch->cfg;
    w.order.resize(w.num_threads);
    for (unsigned i = 0; i < w.num_threads; i++) w.order[i] = i;
    if (cfg.schedule == EMU_REVERSE) {
        std::reverse(w.order.begin(), w.order.end());
    } else if (cfg.schedule == EMU_SHUFFLED) {
        uint64_t s = cfg.seed ^ (block_linear * 0xd1b54a32d192ed03ull);
        for (unsigned i = w.num_threads; i > 1; i--) std::swap(w.order[i - 1], w.order[splitmix(s) % i]);
    }
}

// Runs one block to completion; false when it failed.
bool run_block(Worker& w, uint64_t block_linear) {
    const EmuLaunch& cfg = *w.launch->cfg;
    current.block_idx = {static_cast<unsigned>(block_linear % cfg.grid[0]),
                         static_cast<unsigned>(block_linear / cfg.grid[0] % cfg.grid[1]),
                         static_cast<unsigned>(block_linear / cfg.grid[0] / cfg.grid[1])};
    w.exited = 0;
    w.at_barrier = 0;
    w.running = nullptr;
    for (unsigned i = 0; i < w.num_threads; i++) {
        Fiber& f = w.fibers[i];
        f.state = State::Runnable;
        f.uncommitted.clear();  // copies a thread left in flight die with its block
        f.groups.clear();
        f.tid = {i % cfg.block[0], i / cfg.block[0] % cfg.block[1], i / cfg.block[0] / cfg.block[1]};
        make_context(f.ctx, t_stacks.stack(i), StackPool::kStackBytes, fiber_main);
    }
    std::memset(w.smem, 0xff, w.smem_bytes);  // poison: NaN as f32, f16 and bf16
    for (const auto& [variable, bytes] : t_static_shared) std::memset(variable, 0xff, bytes);
    make_order(w, block_linear);
    while (w.exited < w.num_threads) {
        bool ran = false;
        for (uint32_t i : w.order) {
            Fiber& f = w.fibers[i];
            if (f.state != State::Runnable) continue;
            ran = true;
            w.running = &f;
            current.thread_idx = f.tid;
            switch_context(w.scheduler, f.ctx);
            if (w.failed) return false;
        }
        if (!ran) {
            report_stall(w);
            return false;
        }
    }
    // Copies never waited for may stay in flight past the end (the GPU lets them land whenever),
    // but nothing may have written their destinations in the meantime.
    for (Fiber& f : w.fibers) {
        std::vector<const AsyncCopy*> pending;
        for (const AsyncCopy& c : f.uncommitted) pending.push_back(&c);
        for (const auto& group : f.groups)
            for (const AsyncCopy& c : group) pending.push_back(&c);
        for (const AsyncCopy* c : pending) {
            if (still_poisoned(*c)) continue;
            w.running = &f;
            current.thread_idx = f.tid;
            set_error(w, EMU_ASYNC_COPY_RACE,
                      format("shared memory at %p (%u bytes) was written while a cp.async into it "
                             "was in flight (found when the block ended, the copy never waited for)",
                             static_cast<void*>(c->dst), c->bytes));
            return false;
        }
    }
    return true;
}

void run_worker(LaunchState& l) {
    const EmuLaunch& cfg = *l.cfg;
    Worker w;
    w.launch = &l;
    w.num_threads = cfg.block[0] * cfg.block[1] * cfg.block[2];
    w.fibers.resize(w.num_threads);
    w.smem_bytes = cfg.dynamic_smem_bytes;
    w.smem = t_smem.get(w.smem_bytes);
    Worker* saved = t_worker;
    const Geometry saved_geometry = current;
    t_worker = &w;
    current.block_dim = dim3(cfg.block[0], cfg.block[1], cfg.block[2]);
    current.grid_dim = dim3(cfg.grid[0], cfg.grid[1], cfg.grid[2]);
    while (!l.stop) {
        const uint64_t b = l.next_block.fetch_add(1);
        if (b >= l.num_blocks || !run_block(w, b)) break;
    }
    t_worker = saved;
    current = saved_geometry;
}

std::string check_geometry(const EmuLaunch& c, long long max_threads) {
    const uint64_t threads = uint64_t{c.block[0]} * c.block[1] * c.block[2];
    if (c.grid[0] == 0 || c.grid[1] == 0 || c.grid[2] == 0)
        return format("grid (%u,%u,%u) has a zero dimension", c.grid[0], c.grid[1], c.grid[2]);
    if (c.block[0] == 0 || c.block[1] == 0 || c.block[2] == 0)
        return format("block (%u,%u,%u) has a zero dimension", c.block[0], c.block[1], c.block[2]);
    if (threads > 1024 || c.block[2] > 64)
        return format("block (%u,%u,%u) exceeds CUDA's limits (1024 threads, z <= 64)", c.block[0],
                      c.block[1], c.block[2]);
    if (static_cast<long long>(threads) > max_threads)
        return format("block (%u,%u,%u) of %llu threads exceeds the kernel's __launch_bounds__(%lld)",
                      c.block[0], c.block[1], c.block[2], static_cast<unsigned long long>(threads),
                      max_threads);
    if (c.grid[0] > 0x7fffffffu || c.grid[1] > 65535 || c.grid[2] > 65535)
        return format("grid (%u,%u,%u) exceeds CUDA's limits", c.grid[0], c.grid[1], c.grid[2]);
    if (c.dynamic_smem_bytes > 232448)
        return format("%llu bytes of dynamic shared memory exceed the 227 KiB of a Hopper block",
                      static_cast<unsigned long long>(c.dynamic_smem_bytes));
    return {};
}

}  // namespace

void fail(int status, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string what = vformat(fmt, ap);
    va_end(ap);
    fiber_fail(status, what);
}

void fail_access(const char* buffer, size_t buffer_bytes, size_t elem_bytes, ptrdiff_t byte_offset,
                 size_t width, const char* what) {
    fiber_fail(EMU_OUT_OF_BOUNDS,
               format("out-of-bounds %s of buffer '%s' (%zu bytes, %zu elements): element %td "
                      "(byte offset %td, %zu bytes wide)",
                      what, buffer, buffer_bytes, buffer_bytes / elem_bytes,
                      byte_offset / static_cast<ptrdiff_t>(elem_bytes), byte_offset, width));
}

void fail_misaligned(const char* buffer, const void* address, ptrdiff_t byte_offset, size_t width,
                     size_t alignment, const char* what) {
    fiber_fail(EMU_MISALIGNED,
               format("misaligned %s of buffer '%s': %zu bytes at address %p (byte offset %td) is "
                      "not %zu-byte aligned",
                      what, buffer, width, address, byte_offset, alignment));
}

void fail_uninitialized(const char* buffer, size_t elem_bytes, ptrdiff_t byte_offset, size_t width,
                        size_t first_unwritten, const char* what) {
    fiber_fail(EMU_UNINITIALIZED,
               format("initcheck: %s of device memory never written: buffer '%s', element %td (byte "
                      "offset %td, %zu bytes wide): byte %zu was never written",
                      what, buffer, byte_offset / static_cast<ptrdiff_t>(elem_bytes), byte_offset,
                      width, first_unwritten));
}

void syncthreads(const char* file, int line) {
    Worker& w = *t_worker;
    if (w.at_barrier == 0) {
        w.barrier_file = file;
        w.barrier_line = line;
    } else if (line != w.barrier_line || std::strcmp(file, w.barrier_file) != 0) {
        fiber_fail(EMU_DIVERGENT_BARRIER,
                   format("divergent __syncthreads: threads wait at %s:%d and at %s:%d", w.barrier_file,
                          w.barrier_line, file, line));
    }
    if (++w.at_barrier == w.num_threads) {
        for (Fiber& f : w.fibers)
            if (f.state == State::AtBarrier) f.state = State::Runnable;
        w.at_barrier = 0;
        return;
    }
    if (w.at_barrier + w.exited == w.num_threads)
        fiber_fail(EMU_DIVERGENT_BARRIER,
                   format("divergent __syncthreads at %s:%d: %u of %u threads reached it, the others "
                          "exited",
                          file, line, w.at_barrier, w.num_threads));
    yield_as(State::AtBarrier);
}

namespace {
// Lane `lane` of the warp at `base` has joined its collective (self.op, self.mask): whether every
// lane of the mask is now here. A named lane that has exited, or one waiting in another
// collective, is an error.
bool all_lanes_here(const Worker& w, const Fiber& self, unsigned lane, unsigned base) {
    bool complete = true;
    for (unsigned l = 0; l < 32; l++) {
        if (((self.mask >> l) & 1u) == 0 || l == lane || base + l >= w.num_threads) continue;
        const Fiber& g = w.fibers[base + l];
        if (g.state == State::Done)
            fiber_fail(EMU_WARP_SYNC, format("%s with mask %#x: lane %u of the warp has exited",
                                             collective_name(self), self.mask, l));
        if (g.state != State::AtWarp) {
            complete = false;
        } else if (g.op != self.op || g.mask != self.mask ||
                   (self.op == OP_MATRIX && std::strcmp(g.matrix_op, self.matrix_op) != 0)) {
            fiber_fail(EMU_WARP_SYNC,
                       format("lanes %u and %u meet in different warp collectives: %s with mask %#x "
                              "and %s with mask %#x",
                              lane, l, collective_name(self), self.mask, collective_name(g), g.mask));
        }
    }
    return complete;
}
}  // namespace

uint32_t warp_collective(WarpOp op, unsigned mask, uint32_t value, int arg, int width) {
    Worker& w = *t_worker;
    Fiber& self = *w.running;
    const unsigned id = linear_id(self), lane = id % 32, base = id - lane;
    if (((mask >> lane) & 1u) == 0)
        fiber_fail(EMU_WARP_SYNC, format("%s with mask %#x called by lane %u, which is not in the mask",
                                         op_name(op), mask, lane));
    if (width <= 0 || width > 32 || (width & (width - 1)) != 0)
        fiber_fail(EMU_WARP_SYNC, format("%s with width %d: must be a power of two up to 32",
                                         op_name(op), width));
    self.op = op;
    self.mask = mask;
    self.value = value;
    self.arg = arg;
    self.width = width;
    if (!all_lanes_here(w, self, lane, base)) {
        yield_as(State::AtWarp);
        return self.result;
    }
    // Every lane named in the mask is here: compute each one's result and release them.
    uint32_t present = 0, votes = 0;
    for (unsigned l = 0; l < 32; l++) {
        if (((mask >> l) & 1u) == 0 || base + l >= w.num_threads) continue;
        present |= 1u << l;
        if (w.fibers[base + l].value != 0) votes |= 1u << l;
    }
    for (unsigned l = 0; l < 32; l++) {
        if (((mask >> l) & 1u) == 0 || base + l >= w.num_threads) continue;
        Fiber& g = w.fibers[base + l];
        const unsigned group = l / g.width * g.width, end = group + g.width;
        unsigned src = l;
        switch (op) {
            case OP_SYNCWARP: g.result = 0; continue;
            case OP_BALLOT: g.result = votes; continue;
            case OP_ANY: g.result = votes != 0; continue;
            case OP_ALL: g.result = votes == present; continue;
            case OP_SHFL_IDX: src = group + (static_cast<unsigned>(g.arg) & (g.width - 1)); break;
            case OP_SHFL_UP: src = l >= group + static_cast<unsigned>(g.arg) ? l - g.arg : l; break;
            case OP_SHFL_DOWN: src = l + static_cast<unsigned>(g.arg) < end ? l + g.arg : l; break;
            case OP_SHFL_XOR: src = (l ^ static_cast<unsigned>(g.arg)) < end ? l ^ g.arg : l; break;
        }
        if (((mask >> src) & 1u) == 0 || base + src >= w.num_threads)
            fiber_fail(EMU_WARP_SYNC,
                       format("%s: lane %u reads lane %u, which is %s", op_name(op), l, src,
                              base + src >= w.num_threads ? "past the end of the block"
                                                          : "not in the mask"));
        g.result = w.fibers[base + src].value;
    }
    for (unsigned l = 0; l < 32; l++)
        if ((present >> l) & 1u) w.fibers[base + l].state = State::Runnable;
    return self.result;
}

void warp_matrix_collective(const char* name, void* lane_data, void (*combine)(void* const* lanes)) {
    Worker& w = *t_worker;
    Fiber& self = *w.running;
    const unsigned id = linear_id(self), lane = id % 32, base = id - lane;
    if (base + 32 > w.num_threads)
        fiber_fail(EMU_WARP_SYNC,
                   format("%s needs all 32 lanes of a warp: this warp has %u (a block of %u threads)",
                          name, w.num_threads - base, w.num_threads));
    self.op = OP_MATRIX;
    self.mask = 0xffffffffu;
    self.matrix_op = name;
    self.lane_data = lane_data;
    if (!all_lanes_here(w, self, lane, base)) {
        yield_as(State::AtWarp);
        return;
    }
    void* lanes[32];
    for (unsigned l = 0; l < 32; l++) lanes[l] = w.fibers[base + l].lane_data;
    combine(lanes);
    for (unsigned l = 0; l < 32; l++) w.fibers[base + l].state = State::Runnable;
}

unsigned lane_id() { return linear_id(*t_worker->running) % 32; }

unsigned char* dynamic_shared() { return t_worker->smem; }
unsigned dynamic_shared_bytes() { return static_cast<unsigned>(t_worker->smem_bytes); }

namespace {
std::string overwritten_in_flight(const AsyncCopy& c, const char* when) {
    return format("shared memory at %p (%u bytes) was written while a cp.async into it was in "
                  "flight (found %s)",
                  static_cast<void*>(c.dst), c.bytes, when);
}

// Whether [p, p + bytes) lies in the running block's dynamic or static shared memory.
bool in_shared(const Worker& w, const unsigned char* p, size_t bytes) {
    const auto inside = [&](const void* base, size_t len) {
        const unsigned char* b = static_cast<const unsigned char*>(base);
        return p >= b && p + bytes <= b + len;
    };
    if (inside(w.smem, w.smem_bytes)) return true;
    for (const auto& [variable, len] : t_static_shared)
        if (inside(variable, len)) return true;
    return false;
}
}  // namespace

bool in_block_shared(const void* p, size_t bytes) {
    return in_shared(*t_worker, static_cast<const unsigned char*>(p), bytes);
}

void async_copy(void* shared_dst, const void* global_src, size_t bytes) {
    Worker& w = *t_worker;
    unsigned char* dst = static_cast<unsigned char*>(shared_dst);
    if (bytes != 4 && bytes != 8 && bytes != 16)
        fiber_fail(EMU_INVALID_LAUNCH, format("cp.async of %zu bytes: 4, 8 or 16", bytes));
    if (!in_shared(w, dst, bytes))
        fiber_fail(EMU_OUT_OF_BOUNDS,
                   format("cp.async destination %p (%zu bytes) is not in the block's shared memory",
                          shared_dst, bytes));
    if (reinterpret_cast<uintptr_t>(dst) % bytes != 0)
        fiber_fail(EMU_MISALIGNED,
                   format("cp.async destination %p is not %zu-byte aligned", shared_dst, bytes));
    AsyncCopy c;
    c.dst = dst;
    c.bytes = static_cast<uint32_t>(bytes);
    std::memcpy(c.data, global_src, bytes);
    std::memset(dst, 0xff, bytes);  // what a reader sees until the copy is waited for
    w.running->uncommitted.push_back(c);
}

void async_commit() {
    Fiber& f = *t_worker->running;
    f.groups.push_back(std::move(f.uncommitted));
    f.uncommitted.clear();
}

void async_wait(int pending_groups) {
    Fiber& f = *t_worker->running;
    while (f.groups.size() > static_cast<size_t>(std::max(pending_groups, 0))) {
        for (const AsyncCopy& c : f.groups.front()) {
            if (!still_poisoned(c))
                fiber_fail(EMU_ASYNC_COPY_RACE, overwritten_in_flight(c, "when it was waited for"));
            std::memcpy(c.dst, c.data, c.bytes);
        }
        f.groups.pop_front();
    }
}

SharedRegistrar::SharedRegistrar(void* variable, size_t bytes) {
    std::memset(variable, 0xff, bytes);
    t_static_shared.emplace_back(variable, bytes);
}

int launch(const char* kernel, const EmuLaunch* cfg, void (*body)(const EmuArg*), const EmuArg* args,
           char* err, size_t errlen, long long max_threads) {
    LaunchState l;
    l.kernel = kernel;
    l.cfg = cfg;
    l.body = body;
    l.args = args;
    std::string bad = check_geometry(*cfg, max_threads);
    if (!bad.empty()) {
        l.status = EMU_INVALID_LAUNCH;
        l.message = format("kernel %s: invalid launch: %s", kernel, bad.c_str());
    } else {
        l.num_blocks = uint64_t{cfg->grid[0]} * cfg->grid[1] * cfg->grid[2];
        const uint64_t workers = std::min<uint64_t>(std::max<uint32_t>(cfg->workers, 1), l.num_blocks);
        std::vector<std::thread> helpers;
        for (uint64_t i = 1; i < workers; i++) helpers.emplace_back([&l] { run_worker(l); });
        run_worker(l);
        for (std::thread& t : helpers) t.join();
    }
    if (l.status != EMU_OK && err != nullptr && errlen > 0) std::snprintf(err, errlen, "%s", l.message.c_str());
    return l.status;
}

}  // namespace emu
