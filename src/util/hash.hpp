#pragma once
#include <string>
#include <string_view>

namespace kveval {

/// SHA-256 of a file's bytes as 64 lowercase hex digits (OpenSSL EVP).
/// Throws kveval::Error if the file cannot be read.
std::string sha256_file(const std::string& path);

/// SHA-256 of `data` as 64 lowercase hex digits (OpenSSL EVP).
std::string sha256_hex(std::string_view data);

/// kveval's version ("0.1.0") and the git hash it was built from.
const char* version();
const char* git_hash();

}  // namespace kveval
