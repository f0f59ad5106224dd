#pragma once
// Helpers of the libFuzzer targets: a per-process scratch directory and UTF-8 validation.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace kveval::fuzz {

/// `<tmp>/kveval_fuzz_<tag>_<pid>`, created on first use and removed at exit.
inline const std::filesystem::path& scratch_dir(const char* tag) {
  static const std::filesystem::path dir = [tag] {
    auto d = std::filesystem::temp_directory_path() / ("kveval_fuzz_" + std::string(tag) + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    static std::string to_remove = d.string();
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(to_remove, ec);
    });
    return d;
  }();
  return dir;
}

/// Writes `size` bytes to `path` (truncating); aborts on failure (a broken harness, not a finding).
inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || (size && std::fwrite(data, 1, size, f) != size) || std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
}

/// True when `s` is well-formed UTF-8 (Unicode 15, table 3-7: no overlong
/// forms, no surrogates, nothing above U+10FFFF).
inline bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b0 = static_cast<unsigned char>(s[i]);
    int len;
    unsigned char lo = 0x80, hi = 0xBF;
    if (b0 < 0x80) { ++i; continue; }
    if (b0 >= 0xC2 && b0 <= 0xDF) len = 2;
    else if (b0 >= 0xE0 && b0 <= 0xEF) { len = 3; if (b0 == 0xE0) lo = 0xA0; if (b0 == 0xED) hi = 0x9F; }
    else if (b0 >= 0xF0 && b0 <= 0xF4) { len = 4; if (b0 == 0xF0) lo = 0x90; if (b0 == 0xF4) hi = 0x8F; }
    else return false;
    if (i + static_cast<size_t>(len) > s.size()) return false;
    for (int k = 1; k < len; ++k) {
      const auto b = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return false;
    }
    i += static_cast<size_t>(len);
  }
  return true;
}

/// Stops the fuzzer with a message: a property of the code under test failed.
[[noreturn]] inline void property_failed(const char* what) {
  std::fprintf(stderr, "kveval fuzz: property failed: %s\n", what);
  std::abort();
}

}  // namespace kveval::fuzz
