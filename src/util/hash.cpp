#include "util/hash.hpp"

#include <cstdio>
#include <fstream>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <openssl/evp.h>

#include "util/error.hpp"
#ifndef KVEVAL_GIT_HASH  // the fuzz build (tests/fuzz) defines it
#include "git_hash.inc"  // KVEVAL_GIT_HASH (build dir, scripts/git_hash.cmake)
#endif

namespace kveval {

struct Sha256::Impl {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx{EVP_MD_CTX_new(), EVP_MD_CTX_free};
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  if (!impl_->ctx || EVP_DigestInit_ex(impl_->ctx.get(), EVP_sha256(), nullptr) != 1)
    throw Error("sha256: OpenSSL digest init failed");
}
Sha256::~Sha256() = default;

void Sha256::update(const void* data, size_t n) {
  if (n && EVP_DigestUpdate(impl_->ctx.get(), data, n) != 1) throw Error("sha256: OpenSSL digest update failed");
}

std::string Sha256::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(impl_->ctx.get(), md, &len) != 1) throw Error("sha256: OpenSSL digest final failed");
  std::string out;
  for (unsigned i = 0; i < len; ++i) out += fmt::format("{:02x}", md[i]);
  return out;
}

std::string sha256_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(fmt::format("{}: cannot open file for hashing", path));
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    throw Error("sha256: OpenSSL digest init failed");
  std::vector<char> buf(1 << 20);
  while (f) {
    f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (f.gcount() > 0) EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<size_t>(f.gcount()));
  }
  if (f.bad()) throw Error(fmt::format("{}: read error while hashing", path));
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &len);
  std::string hex;
  for (unsigned i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

std::string sha256_hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr) != 1) throw Error("sha256: OpenSSL digest failed");
  std::string hex;
  for (unsigned i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

const char* version() { return KVEVAL_VERSION; }
const char* git_hash() { return KVEVAL_GIT_HASH; }

}  // namespace kveval
