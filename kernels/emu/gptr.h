// emu::gptr<T>: what GPTR(T) means under the emulator. A pointer into one kernel argument buffer
// that knows the buffer's base, length and name; every dereference is bounds-checked and
// alignment-checked on the address itself (a scalar to its type's alignment, a vector to its
// width, as the GPU checks them), and a bad one ends the launch with an error naming the kernel,
// the buffer and the index. Arithmetic may leave the buffer (as C pointers may), only accesses
// are checked.
//
// initcheck: when the launcher gives a buffer a shadow (one byte per byte of the buffer, non-zero
// once written: the emulated driver's PAGEDKV_EMU_INITCHECK=1), every read checks that its bytes
// were written and every write marks them. So that reads and writes can be told apart, an element
// of a writable buffer is a gref<T> (read by converting it to T, written by assigning to it), not
// a T&: bind it to a T, never to `auto`, to keep a value. Likewise a vector access
// (checked_vector, for common.cuh's ld_vec/st_vec and cp_async) is a gvec<T>: converted to the
// `const void*` a copy reads from it is a read, to the `void*` a copy writes to a write.
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
[[noreturn]] void fail_misaligned(const char* buffer, const void* address, ptrdiff_t byte_offset,
                                  size_t width, size_t alignment, const char* what);
[[noreturn]] void fail_uninitialized(const char* buffer, size_t elem_bytes, ptrdiff_t byte_offset,
                                     size_t width, size_t first_unwritten, const char* what);

template <class T>
class gref;
template <class T>
class gvec;

template <class T>
class gptr {
    template <class U>
    friend class gptr;
    friend class gvec<T>;
    char* base_ = nullptr;
    size_t bytes_ = 0;
    ptrdiff_t off_ = 0;  // in bytes from base_
    const char* name_ = "?";
    unsigned char* shadow_ = nullptr;  // initcheck: shadow_[k] != 0 once base_[k] was written

    // The address of `width` bytes at element `i`, after checking they lie in the buffer and that
    // the address is a multiple of `alignment`.
    T* locate(ptrdiff_t i, size_t width, size_t alignment, const char* what) const {
        const ptrdiff_t at = off_ + i * static_cast<ptrdiff_t>(sizeof(T));
        if (at < 0 || static_cast<size_t>(at) > bytes_ || bytes_ - static_cast<size_t>(at) < width)
            fail_access(name_, bytes_, sizeof(T), at, width, what);
        char* p = base_ + at;
        if (reinterpret_cast<uintptr_t>(p) % alignment != 0)
            fail_misaligned(name_, p, at, width, alignment, what);
        return reinterpret_cast<T*>(p);
    }
    // initcheck: every byte of the located range was written.
    void check_written(const T* p, size_t width, const char* what) const {
        if (shadow_ == nullptr) return;
        const ptrdiff_t at = reinterpret_cast<const char*>(p) - base_;
        for (size_t k = 0; k < width; k++)
            if (__atomic_load_n(shadow_ + at + k, __ATOMIC_RELAXED) == 0)
                fail_uninitialized(name_, sizeof(T), at, width, k, what);
    }
    void mark_written(const T* p, size_t width) const {
        if (shadow_ == nullptr) return;
        const ptrdiff_t at = reinterpret_cast<const char*>(p) - base_;
        for (size_t k = 0; k < width; k++) __atomic_store_n(shadow_ + at + k, 1, __ATOMIC_RELAXED);
    }

public:
    using element_type = T;
    using reference = std::conditional_t<std::is_const_v<T>, const T&, gref<T>>;
    gptr() = default;
    gptr(void* base, size_t bytes, const char* name, void* shadow = nullptr)
        : base_(static_cast<char*>(base)),
          bytes_(bytes),
          name_(name),
          shadow_(static_cast<unsigned char*>(shadow)) {}
    template <class U, std::enable_if_t<std::is_same_v<const U, T> && !std::is_const_v<U>, int> = 0>
    gptr(const gptr<U>& o)
        : base_(o.base_), bytes_(o.bytes_), off_(o.off_), name_(o.name_), shadow_(o.shadow_) {}

    // The address of `width` bytes at element `i`, checked in bounds and aligned to T; what is
    // done with it is not tracked (the raw primitive).
    T* checked(ptrdiff_t i, size_t width, const char* what) const {
        return locate(i, width, alignof(T), what);
    }
    // A read of element `i`.
    const T* checked_read(ptrdiff_t i, const char* what) const {
        const T* p = locate(i, sizeof(T), alignof(T), what);
        check_written(p, sizeof(T), what);
        return p;
    }
    // A write of element `i`.
    T* checked_write(ptrdiff_t i, const char* what) const {
        T* p = locate(i, sizeof(T), alignof(T), what);
        mark_written(p, sizeof(T));
        return p;
    }
    // A read-modify-write of element `i` (an atomic).
    T* checked_update(ptrdiff_t i, const char* what) const {
        T* p = locate(i, sizeof(T), alignof(T), what);
        check_written(p, sizeof(T), what);
        mark_written(p, sizeof(T));
        return p;
    }
    // A vector access of `width` bytes here, aligned to its width: a read or a write as gvec says.
    gvec<T> checked_vector(size_t width, const char* what) const {
        return gvec<T>(*this, locate(0, width, width, what), width, what);
    }

    reference operator[](ptrdiff_t i) const {
        if constexpr (std::is_const_v<T>)
            return *checked_read(i, "read");
        else
            return gref<T>(*this + i);
    }
    reference operator*() const { return (*this)[0]; }
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

// An element of a writable buffer: converting it to T reads it, assigning to it writes it, and a
// compound assignment does both, each checked as gptr says.
template <class T>
class gref {
    gptr<T> at_;

public:
    explicit gref(const gptr<T>& at) : at_(at) {}
    // `&p[i]` is the element's pointer, as in CUDA (`atomicAdd(&out[i], v)`).
    gptr<T> operator&() const { return at_; }
    operator T() const { return *at_.checked_read(0, "read"); }
    const gref& operator=(const T& v) const {
        *at_.checked_write(0, "write") = v;
        return *this;
    }
    const gref& operator=(const gref& o) const { return *this = static_cast<T>(o); }
#define EMU_GREF_COMPOUND(op)                                        \
    template <class V>                                               \
    const gref& operator op##=(const V& v) const {                   \
        return *this = static_cast<T>(static_cast<T>(*this) op v);   \
    }
    EMU_GREF_COMPOUND(+)
    EMU_GREF_COMPOUND(-)
    EMU_GREF_COMPOUND(*)
    EMU_GREF_COMPOUND(/)
    EMU_GREF_COMPOUND(|)
    EMU_GREF_COMPOUND(&)
    EMU_GREF_COMPOUND(^)
    EMU_GREF_COMPOUND(<<)
    EMU_GREF_COMPOUND(>>)
#undef EMU_GREF_COMPOUND
};

// `width` bytes of a buffer, located and checked in bounds and alignment; what is done with them
// is decided by the pointer type it converts to: the source of a copy (`const void*`) is a read,
// its destination (`void*`) a write. So `memcpy(&v, p.checked_vector(16, ..), 16)` checks initcheck's
// marks and `memcpy(p.checked_vector(16, ..), &v, 16)` sets them.
template <class T>
class gvec {
    const gptr<T>& buffer_;
    T* at_;
    size_t width_;
    const char* what_;

public:
    gvec(const gptr<T>& buffer, T* at, size_t width, const char* what)
        : buffer_(buffer), at_(at), width_(width), what_(what) {}
    operator const void*() const {
        buffer_.check_written(at_, width_, what_);
        return at_;
    }
    template <class U = T, std::enable_if_t<!std::is_const_v<U>, int> = 0>
    operator void*() const {
        buffer_.mark_written(at_, width_);
        return at_;
    }
};

}  // namespace emu
