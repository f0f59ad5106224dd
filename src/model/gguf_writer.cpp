// GGUF v3 writer: see gguf_writer.hpp and the layout comment in gguf.cpp.
#include "model/gguf_writer.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

#include <fmt/format.h>

#include "model/dequantize.hpp"
#include "util/atomic_file.hpp"
#include "util/error.hpp"

namespace kveval::gguf {

namespace {

void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  if (n == 0) return;
  const size_t old = out.size();
  out.resize(old + n);  // resize + memcpy: vector::insert trips a GCC 12 -Wstringop-overflow false positive
  std::memcpy(out.data() + old, p, n);
}
template <class T>
void put(std::vector<uint8_t>& out, T v) {
  put_bytes(out, &v, sizeof v);
}
void put_string(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}

[[noreturn]] void bad_value(const std::string& key, const char* what) {
  throw ArgumentError(fmt::format("gguf writer: key '{}': {}", key, what));
}

uint64_t as_u(const std::string& key, const Value& v, uint64_t max) {
  uint64_t x;
  if (auto* u = std::get_if<uint64_t>(&v.data)) x = *u;
  else if (auto* s = std::get_if<int64_t>(&v.data); s && *s >= 0) x = static_cast<uint64_t>(*s);
  else bad_value(key, "unsigned value needs a non-negative integer");
  if (x > max) bad_value(key, "value out of range of its type");
  return x;
}
int64_t as_i(const std::string& key, const Value& v, int64_t min, int64_t max) {
  int64_t x;
  if (auto* s = std::get_if<int64_t>(&v.data)) x = *s;
  else if (auto* u = std::get_if<uint64_t>(&v.data); u && *u <= static_cast<uint64_t>(INT64_MAX)) x = static_cast<int64_t>(*u);
  else bad_value(key, "signed value needs an integer");
  if (x < min || x > max) bad_value(key, "value out of range of its type");
  return x;
}
double as_d(const std::string& key, const Value& v) {
  if (auto* d = std::get_if<double>(&v.data)) return *d;
  bad_value(key, "float value needs a double");
}

/// Encodes the payload of `v` (no type tag), validating it.
void put_value(std::vector<uint8_t>& out, const std::string& key, const Value& v) {
  switch (v.type) {
    case ValueType::UINT8: put<uint8_t>(out, static_cast<uint8_t>(as_u(key, v, UINT8_MAX))); break;
    case ValueType::UINT16: put<uint16_t>(out, static_cast<uint16_t>(as_u(key, v, UINT16_MAX))); break;
    case ValueType::UINT32: put<uint32_t>(out, static_cast<uint32_t>(as_u(key, v, UINT32_MAX))); break;
    case ValueType::UINT64: put<uint64_t>(out, as_u(key, v, UINT64_MAX)); break;
    case ValueType::INT8: put<int8_t>(out, static_cast<int8_t>(as_i(key, v, INT8_MIN, INT8_MAX))); break;
    case ValueType::INT16: put<int16_t>(out, static_cast<int16_t>(as_i(key, v, INT16_MIN, INT16_MAX))); break;
    case ValueType::INT32: put<int32_t>(out, static_cast<int32_t>(as_i(key, v, INT32_MIN, INT32_MAX))); break;
    case ValueType::INT64: put<int64_t>(out, as_i(key, v, INT64_MIN, INT64_MAX)); break;
    case ValueType::FLOAT32: put<float>(out, static_cast<float>(as_d(key, v))); break;
    case ValueType::FLOAT64: put<double>(out, as_d(key, v)); break;
    case ValueType::BOOL: {
      auto* b = std::get_if<bool>(&v.data);
      if (!b) bad_value(key, "bool value needs a bool");
      put<uint8_t>(out, *b ? 1 : 0);
      break;
    }
    case ValueType::STRING: {
      auto* s = std::get_if<std::string>(&v.data);
      if (!s) bad_value(key, "string value needs a string");
      put_string(out, *s);
      break;
    }
    case ValueType::ARRAY: {
      auto* a = std::get_if<std::vector<Value>>(&v.data);
      if (!a) bad_value(key, "array value needs a vector");
      put<uint32_t>(out, static_cast<uint32_t>(v.array_type));
      put<uint64_t>(out, a->size());
      for (const Value& e : *a) {
        if (e.type != v.array_type) bad_value(key, "array element type differs from array_type");
        put_value(out, key, e);
      }
      break;
    }
    default: bad_value(key, "unknown value type");
  }
}

/// Encodes `src` as `type` (F32, F16, BF16 or a quantized type: see dequantize.hpp's quantize).
void encode(std::span<const float> src, TensorType type, uint8_t* dst) {
  quantize(type, src.data(), reinterpret_cast<std::byte*>(dst), src.size());
}

/// Bytes of a tensor of `dims` stored as `type`; ArgumentError naming the tensor
/// for an unsupported type or rows that are not a multiple of the block size.
uint64_t byte_size(const std::string& name, const std::vector<uint64_t>& dims, uint64_t n, TensorType type) {
  const TypeInfo* ti = type_info(static_cast<uint32_t>(type));
  if (!ti || !ti->supported())
    throw ArgumentError(fmt::format("gguf writer: tensor '{}': type {} cannot be written", name, type_name(type)));
  if (dims[0] % ti->block_size != 0)
    throw ArgumentError(fmt::format("gguf writer: tensor '{}': rows of {} elements are not a multiple of the {} block size {}",
                                    name, dims[0], ti->name, ti->block_size));
  return tensor_bytes(type, n);
}

uint64_t product(const std::string& name, const std::vector<uint64_t>& dims) {
  if (dims.empty() || dims.size() > 4) throw ArgumentError(fmt::format("gguf writer: tensor '{}' needs 1..4 dims", name));
  uint64_t n = 1;
  for (uint64_t d : dims) {
    if (d == 0 || d > (uint64_t{1} << 62) / n)
      throw ArgumentError(fmt::format("gguf writer: tensor '{}' has a zero or too large dimension", name));
    n *= d;
  }
  return n;
}

}  // namespace

void Writer::add(const std::string& key, Value value) {
  std::vector<uint8_t> scratch;
  put_value(scratch, key, value);  // validate now, not at write time
  kv_.emplace_back(key, std::move(value));
}
void Writer::add_uint32(const std::string& key, uint32_t v) { add(key, Value{ValueType::UINT32, uint64_t{v}}); }
void Writer::add_float32(const std::string& key, float v) { add(key, Value{ValueType::FLOAT32, double{v}}); }
void Writer::add_string(const std::string& key, const std::string& v) { add(key, Value{ValueType::STRING, v}); }
void Writer::add_bool(const std::string& key, bool v) { add(key, Value{ValueType::BOOL, v}); }
void Writer::add_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::vector<Value> a;
  a.reserve(v.size());
  for (const auto& s : v) a.push_back(Value{ValueType::STRING, s});
  add(key, Value{ValueType::ARRAY, std::move(a), ValueType::STRING});
}
void Writer::add_float32_array(const std::string& key, const std::vector<float>& v) {
  std::vector<Value> a;
  a.reserve(v.size());
  for (float f : v) a.push_back(Value{ValueType::FLOAT32, double{f}});
  add(key, Value{ValueType::ARRAY, std::move(a), ValueType::FLOAT32});
}
void Writer::add_int32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<Value> a;
  a.reserve(v.size());
  for (int32_t i : v) a.push_back(Value{ValueType::INT32, int64_t{i}});
  add(key, Value{ValueType::ARRAY, std::move(a), ValueType::INT32});
}

void Writer::add_tensor(const std::string& name, std::vector<uint64_t> dims, const std::vector<float>& data,
                        TensorType type) {
  const uint64_t n = product(name, dims);
  if (n != data.size())
    throw ArgumentError(fmt::format("gguf writer: tensor '{}' has {} elements, data has {}", name, n, data.size()));
  const uint64_t bytes = byte_size(name, dims, n, type);
  PendingTensor t{name, std::move(dims), type, {}, {}, n};
  t.payload.resize(bytes);
  encode(data, type, t.payload.data());
  tensors_.push_back(std::move(t));
}

void Writer::add_tensor(const std::string& name, std::vector<uint64_t> dims, Fill fill, TensorType type) {
  const uint64_t n = product(name, dims);
  if (!fill) throw ArgumentError(fmt::format("gguf writer: tensor '{}' has no fill function", name));
  byte_size(name, dims, n, type);
  tensors_.push_back(PendingTensor{name, std::move(dims), type, {}, std::move(fill), n});
}

uint64_t Writer::alignment() const {
  for (const auto& [k, v] : kv_)
    if (k == "general.alignment") {
      uint64_t a = as_u(k, v, UINT32_MAX);
      if (a == 0 || (a & (a - 1)) != 0) bad_value(k, "alignment must be a nonzero power of two");
      return a;
    }
  return 32;
}

std::vector<uint8_t> Writer::header() const {
  const uint64_t align = alignment();
  std::vector<uint8_t> out;
  put_bytes(out, "GGUF", 4);
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kv_.size());
  for (const auto& [k, v] : kv_) {
    put_string(out, k);
    put<uint32_t>(out, static_cast<uint32_t>(v.type));
    put_value(out, k, v);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
    for (uint64_t d : t.dims) put<uint64_t>(out, d);
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset += (tensor_bytes(t.type, t.n_elements) + align - 1) / align * align;
  }
  out.resize((out.size() + align - 1) / align * align, 0);
  return out;
}

/// Calls sink(const uint8_t*, size_t) for the whole file in order.
template <class Sink>
void Writer::emit(Sink&& sink) const {
  const uint64_t align = alignment();
  std::vector<uint8_t> h = header();
  sink(h.data(), h.size());
  static const uint8_t zeros[256 * 1024] = {};
  constexpr uint64_t kChunk = 1 << 20;  // elements per generated chunk
  std::vector<float> buf;
  std::vector<uint8_t> enc;
  for (const auto& t : tensors_) {
    const uint64_t n_bytes = tensor_bytes(t.type, t.n_elements);
    if (!t.fill) {
      sink(t.payload.data(), t.payload.size());
    } else {
      for (uint64_t first = 0; first < t.n_elements; first += kChunk) {
        const uint64_t n = std::min(kChunk, t.n_elements - first);
        buf.resize(n);
        t.fill(first, std::span<float>(buf));
        enc.resize(tensor_bytes(t.type, n));
        encode(buf, t.type, enc.data());
        sink(enc.data(), enc.size());
      }
    }
    uint64_t pad = (n_bytes + align - 1) / align * align - n_bytes;
    while (pad > 0) {
      uint64_t k = std::min<uint64_t>(pad, sizeof zeros);
      sink(zeros, k);
      pad -= k;
    }
  }
}

std::vector<TensorInfo> Writer::tensor_infos() const {
  const uint64_t align = alignment();
  std::vector<TensorInfo> out;
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    TensorInfo i;
    i.name = t.name;
    i.dims = t.dims;
    i.type = t.type;
    i.offset = offset;
    i.n_elements = t.n_elements;
    i.n_bytes = tensor_bytes(t.type, t.n_elements);
    offset += (i.n_bytes + align - 1) / align * align;
    out.push_back(std::move(i));
  }
  return out;
}

uint64_t Writer::file_size() const {
  const uint64_t align = alignment();
  uint64_t n = header().size();
  for (const auto& t : tensors_) n += (tensor_bytes(t.type, t.n_elements) + align - 1) / align * align;
  return n;
}

std::vector<uint8_t> Writer::bytes() const {
  std::vector<uint8_t> out;
  emit([&](const uint8_t* p, size_t n) { out.insert(out.end(), p, p + n); });
  return out;
}

uint64_t Writer::write(const std::string& path) const {
  // All or nothing (util::AtomicFile): a failed write never leaves a truncated
  // file under the final name.
  util::AtomicFile f(path);
  emit([&](const uint8_t* p, size_t n) { f.write(std::string_view(reinterpret_cast<const char*>(p), n)); });
  f.commit();
  return f.bytes();
}

}  // namespace kveval::gguf
