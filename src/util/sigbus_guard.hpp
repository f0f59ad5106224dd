#pragma once
// Reading a memory-mapped file that another process truncates: the pages past
// the new end of file raise SIGBUS (mmap(2)), which would kill the process in
// the middle of a memcpy. These calls turn such a fault into a return value
// the caller reports as "file changed while loading".
#include <cstddef>

namespace kveval {

/// Calls `fn(ctx)`; if a read inside [lo, lo + len) faults with SIGBUS while
/// it runs, `fn` is abandoned (siglongjmp) and false is returned; otherwise
/// true. SIGBUS at other addresses, and every other signal, keep their
/// previous handling. `fn` must not own objects with destructors or locks
/// while it reads the region (it may be left without unwinding). The handler
/// is installed for the call only; one thread at a time (the region belongs to
/// the calling thread).
bool call_catching_sigbus(const void* lo, size_t len, void (*fn)(void*), void* ctx);

/// memcpy(dst, src, n) where src lies in a file mapping: false if the file
/// shrank under the copy (SIGBUS); dst is then partly written.
bool copy_from_mapping(void* dst, const void* src, size_t n);

}  // namespace kveval
