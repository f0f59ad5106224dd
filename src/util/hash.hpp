#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace kveval {

/// Incremental SHA-256 (FIPS 180-4, OpenSSL EVP): update() any number of
/// times, then hex(). Throws kveval::Error if OpenSSL fails.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  /// Adds `n` bytes at `data`.
  void update(const void* data, size_t n);
  /// The digest of everything added, as 64 lowercase hex digits (call once).
  std::string hex();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// SHA-256 of a file's bytes as 64 lowercase hex digits (OpenSSL EVP).
/// Throws kveval::Error if the file cannot be read.
std::string sha256_file(const std::string& path);

/// SHA-256 of `data` as 64 lowercase hex digits (OpenSSL EVP).
std::string sha256_hex(std::string_view data);

/// kveval's version ("0.1.0") and the git hash it was built from.
const char* version();
const char* git_hash();

}  // namespace kveval
