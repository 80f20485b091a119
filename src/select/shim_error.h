// The error codes and messages of the C shims over C++ index libraries
// (hnsw_shim.cpp, faiss_shim.cpp): 0 success, 1 out of memory, 2 any other
// failure, with the message copied into the caller's buffer. C++ only.
#ifndef SUBQ_SELECT_SHIM_ERROR_H
#define SUBQ_SELECT_SHIM_ERROR_H

#include <cstddef>
#include <cstring>
#include <exception>
#include <new>

// Copy `what` into msg (cap bytes, truncated, terminated); returns code.
inline int shim_fail(char *msg, size_t cap, int code, const char *what) {
    if (msg && cap) {
        std::strncpy(msg, what, cap - 1);
        msg[cap - 1] = 0;
    }
    return code;
}

// Inside a catch (...) block: the exception in flight as a code and
// message: bad_alloc as 1 with `oom`, any other std::exception as 2 with
// its what(), anything else as 2 with `unknown`.
inline int shim_fail_current(char *msg, size_t cap, const char *oom, const char *unknown) {
    try {
        throw;
    } catch (const std::bad_alloc &) {
        return shim_fail(msg, cap, 1, oom);
    } catch (const std::exception &e) {
        return shim_fail(msg, cap, 2, e.what());
    } catch (...) {
        return shim_fail(msg, cap, 2, unknown);
    }
}

#endif
