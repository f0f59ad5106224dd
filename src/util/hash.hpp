#pragma once
#include <string>

namespace kveval {

/// SHA-256 of a file's bytes as 64 lowercase hex digits (OpenSSL EVP).
/// Throws kveval::Error if the file cannot be read.
std::string sha256_file(const std::string& path);

/// kveval's version ("0.1.0") and the git hash it was built from.
const char* version();
const char* git_hash();

}  // namespace kveval
