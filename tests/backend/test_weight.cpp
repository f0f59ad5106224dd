// backend::alloc_floats: transparent huge pages advised for the block's whole
// 2 MiB pages only, so a block's tail never makes a huge page resident.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "backend/backend.hpp"

using namespace kveval::backend;

namespace {

/// The VmFlags line of the mapping in /proc/self/smaps that holds `addr` ("" if none).
std::string vm_flags_at(const void* addr) {
  const auto a = reinterpret_cast<uintptr_t>(addr);
  std::ifstream in("/proc/self/smaps");
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {  // a mapping's first line: "lo-hi perms ..."
      inside = lo <= a && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

bool has_flag(const std::string& flags, const char* flag) { return flags.find(std::string(" ") + flag) != std::string::npos; }

}  // namespace

TEST_SUITE("backend.weight") {
  TEST_CASE("alloc_floats: huge pages advised for whole 2 MiB pages, never under the tail") {
    constexpr size_t kHuge = size_t(2) << 20, kTail = size_t(64) << 10;
    float* p = alloc_floats((kHuge + kTail) / sizeof(float));
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<uintptr_t>(p) % kHuge == 0);
    std::memset(p, 1, kHuge + kTail);
    const std::string head = vm_flags_at(p), tail = vm_flags_at(reinterpret_cast<char*>(p) + kHuge + kTail / 2);
    REQUIRE(!head.empty());
    REQUIRE(!tail.empty());
    if (!has_flag(head, "hg")) MESSAGE("madvise(MADV_HUGEPAGE) not honoured here (no THP)");
    CHECK_FALSE(has_flag(tail, "hg"));
    free_floats(p);

    float* small = alloc_floats(1000);  // below 2 MiB: 64-byte aligned, no advice
    CHECK(reinterpret_cast<uintptr_t>(small) % 64 == 0);
    CHECK_FALSE(has_flag(vm_flags_at(small), "hg"));
    free_floats(small);
  }
}
