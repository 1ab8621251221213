// emu::gptr<T>: what GPTR(T) means under the emulator. A pointer into one kernel argument buffer
// that knows the buffer's base, length and name; every dereference is bounds-checked and a bad one
// ends the launch with an error naming the kernel, the buffer and the index. Arithmetic may leave
// the buffer (as C pointers may), only accesses are checked.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

namespace emu {

// Ends the calling CUDA thread's launch with an error (see runtime.cpp); never returns.
[[noreturn]] void fail(int status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
[[noreturn]] void fail_access(const char* buffer, size_t buffer_bytes, size_t elem_bytes,
                              ptrdiff_t byte_offset, size_t width, const char* what);

template <class T>
class gptr {
    template <class U>
    friend class gptr;
    char* base_ = nullptr;
    size_t bytes_ = 0;
    ptrdiff_t off_ = 0;  // in bytes from base_
    const char* name_ = "?";

public:
    using element_type = T;
    gptr() = default;
    gptr(void* base, size_t bytes, const char* name)
        : base_(static_cast<char*>(base)), bytes_(bytes), name_(name) {}
    template <class U, std::enable_if_t<std::is_same_v<const U, T> && !std::is_const_v<U>, int> = 0>
    gptr(const gptr<U>& o) : base_(o.base_), bytes_(o.bytes_), off_(o.off_), name_(o.name_) {}

    // The address of `width` bytes at element `i`, after checking they lie in the buffer.
    T* checked(ptrdiff_t i, size_t width, const char* what) const {
        const ptrdiff_t at = off_ + i * static_cast<ptrdiff_t>(sizeof(T));
        if (at < 0 || static_cast<size_t>(at) > bytes_ || bytes_ - static_cast<size_t>(at) < width)
            fail_access(name_, bytes_, sizeof(T), at, width, what);
        return reinterpret_cast<T*>(base_ + at);
    }
    // Vector accesses must also be aligned to their width relative to the buffer (cudaMalloc
    // aligns buffers to 256 bytes, so relative alignment is what the GPU will see).
    T* checked_vector(size_t width, const char* what) const {
        T* p = checked(0, width, what);
        if (off_ % static_cast<ptrdiff_t>(width) != 0)
            fail(5 /* EMU_MISALIGNED */, "%s of %zu bytes at byte offset %td of buffer '%s' is not %zu-byte aligned",
                 what, width, off_, name_, width);
        return p;
    }

    T& operator[](ptrdiff_t i) const { return *checked(i, sizeof(T), "access"); }
    T& operator*() const { return *checked(0, sizeof(T), "access"); }
    T* operator->() const { return checked(0, sizeof(T), "access"); }

    gptr operator+(ptrdiff_t n) const {
        gptr r = *this;
        r.off_ += n * static_cast<ptrdiff_t>(sizeof(T));
        return r;
    }
    gptr operator-(ptrdiff_t n) const { return *this + (-n); }
    friend gptr operator+(ptrdiff_t n, const gptr& p) { return p + n; }
    ptrdiff_t operator-(const gptr& o) const {
        return (base_ + off_ - (o.base_ + o.off_)) / static_cast<ptrdiff_t>(sizeof(T));
    }
    gptr& operator+=(ptrdiff_t n) { return *this = *this + n; }
    gptr& operator-=(ptrdiff_t n) { return *this = *this - n; }
    gptr& operator++() { return *this += 1; }
    gptr& operator--() { return *this -= 1; }
    gptr operator++(int) {
        gptr r = *this;
        *this += 1;
        return r;
    }
    gptr operator--(int) {
        gptr r = *this;
        *this -= 1;
        return r;
    }
    const char* address() const { return base_ + off_; }
    bool operator==(const gptr& o) const { return address() == o.address(); }
    bool operator!=(const gptr& o) const { return address() != o.address(); }
    bool operator<(const gptr& o) const { return address() < o.address(); }
    bool operator<=(const gptr& o) const { return address() <= o.address(); }
    bool operator>(const gptr& o) const { return address() > o.address(); }
    bool operator>=(const gptr& o) const { return address() >= o.address(); }
};

}  // namespace emu
