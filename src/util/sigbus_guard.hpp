#pragma once
// Reading a memory-mapped file that another process truncates: the pages past
// the new end of file raise SIGBUS (mmap(2)), which would kill the process in
// the middle of a copy. read_catching_sigbus absorbs such faults, in whichever
// thread they happen (loads convert tensors with OpenMP threads): the faulting
// page of the mapping is replaced by a page of zeros, the read continues, and
// the call reports that the file changed so the caller can refuse the result.
#include <cstddef>
#include <functional>

namespace kveval {

/// Runs `read()`, which reads the file mapping [lo, lo + len). Returns true
/// when no read faulted; false when the file shrank under the mapping (SIGBUS
/// at an address in the range): every faulting page was replaced by zeros (a
/// private anonymous page, MAP_FIXED) so `read` finished on zeros, whose
/// results the caller must discard. If `read` throws after such a fault, false
/// is returned instead of the exception (the fault is the cause); otherwise
/// its exception propagates. SIGBUS at other addresses, and every other
/// signal, keep their previous handling. One guarded call at a time (calls are
/// serialised); the handler is installed for the call only.
bool read_catching_sigbus(const void* lo, size_t len, const std::function<void()>& read);

/// memcpy(dst, src, n) where src lies in a file mapping: false if the file
/// shrank under the copy (SIGBUS); the bytes past the end are then zeros.
bool copy_from_mapping(void* dst, const void* src, size_t n);

}  // namespace kveval
