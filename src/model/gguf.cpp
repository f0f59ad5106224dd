// GGUF reader: see gguf.hpp. Layout (little-endian), from the GGUF spec
// (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md):
//   "GGUF" u32 version, u64 n_tensors, u64 n_kv,
//   n_kv x { string key, u32 type, value },
//   n_tensors x { string name, u32 n_dims, u64 dims[n_dims], u32 type, u64 offset },
//   zero padding to `general.alignment`, then the tensor data section.
// string = u64 length + bytes; array = u32 element type + u64 count + elements.
#include "model/gguf.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "model/dequantize.hpp"
#include "util/bf16.hpp"
#include "util/error.hpp"
#include "util/half.hpp"
#include "util/sigbus_guard.hpp"

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace kveval::gguf {

namespace {

constexpr int kMaxArrayDepth = 8;   // nesting of arrays of arrays
constexpr uint32_t kMaxDims = 4;    // GGML_MAX_DIMS
// Metadata array elements per file. Each becomes a Value (~48 bytes), so this
// bounds memory at ~200 MB for crafted files; real vocabularies (tokens,
// scores, types, merges of a 256k vocabulary) hold about 1M.
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 22;

const char* value_type_name(uint32_t t) {
  static const char* names[] = {"uint8", "int8",   "uint16", "int16", "uint32", "int32", "float32",
                                "bool",  "string", "array",  "uint64", "int64", "float64"};
  return t < std::size(names) ? names[t] : "unknown";
}

/// Bytes of one element of a fixed-size type; 0 for string/array/unknown.
uint64_t fixed_size(uint32_t t) {
  switch (static_cast<ValueType>(t)) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    default: return 0;
  }
}

/// Smallest encoding of one value of type `t` (string: its length; array: type + count).
uint64_t min_size(uint32_t t) {
  if (t == static_cast<uint32_t>(ValueType::STRING)) return 8;
  if (t == static_cast<uint32_t>(ValueType::ARRAY)) return 12;
  return fixed_size(t);
}

bool valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::FLOAT64); }

std::string dims_str(std::span<const uint64_t> d) {
  return fmt::format("[{}]", fmt::join(d, ", "));
}

/// Bounds-checked little-endian cursor over the mapping.
struct Cursor {
  const std::string& path;
  const uint8_t* base;
  uint64_t size;
  uint64_t pos = 0;
  std::string where;  // context for errors, e.g. "key 'x'" or "tensor #3"
  uint64_t array_elements = 0;  // read so far, against kMaxArrayElements

  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(fmt::format("{}: {} ({} at offset {})", path, what, where, pos));
  }
  uint64_t left() const { return size - pos; }
  void need(uint64_t n, const char* what) const {
    if (n > left()) fail(fmt::format("{} needs {} bytes but only {} are left in the file", what, n, left()));
  }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base + pos, sizeof(T));
    pos += sizeof(T);
    return v;
  }
  std::string read_string(const char* what) {
    uint64_t n = read<uint64_t>(what);
    if (n > left()) fail(fmt::format("{} length {} exceeds the {} bytes left in the file", what, n, left()));
    std::string s(reinterpret_cast<const char*>(base + pos), n);
    pos += n;
    return s;
  }
};

Value read_value(Cursor& c, uint32_t type, int depth) {
  Value v;
  if (!valid_value_type(type)) c.fail(fmt::format("unknown value type {}", type));
  v.type = static_cast<ValueType>(type);
  switch (v.type) {
    case ValueType::UINT8: v.data = uint64_t{c.read<uint8_t>("uint8 value")}; break;
    case ValueType::INT8: v.data = int64_t{c.read<int8_t>("int8 value")}; break;
    case ValueType::UINT16: v.data = uint64_t{c.read<uint16_t>("uint16 value")}; break;
    case ValueType::INT16: v.data = int64_t{c.read<int16_t>("int16 value")}; break;
    case ValueType::UINT32: v.data = uint64_t{c.read<uint32_t>("uint32 value")}; break;
    case ValueType::INT32: v.data = int64_t{c.read<int32_t>("int32 value")}; break;
    case ValueType::UINT64: v.data = c.read<uint64_t>("uint64 value"); break;
    case ValueType::INT64: v.data = c.read<int64_t>("int64 value"); break;
    case ValueType::FLOAT32: v.data = double{c.read<float>("float32 value")}; break;
    case ValueType::FLOAT64: v.data = c.read<double>("float64 value"); break;
    case ValueType::BOOL: {
      uint8_t b = c.read<uint8_t>("bool value");
      if (b > 1) c.fail(fmt::format("bool value {} is neither 0 nor 1", b));
      v.data = b == 1;
      break;
    }
    case ValueType::STRING: v.data = c.read_string("string"); break;
    case ValueType::ARRAY: {
      if (depth >= kMaxArrayDepth) c.fail(fmt::format("arrays nested deeper than {}", kMaxArrayDepth));
      uint32_t et = c.read<uint32_t>("array element type");
      if (!valid_value_type(et)) c.fail(fmt::format("unknown array element type {}", et));
      uint64_t n = c.read<uint64_t>("array count");
      uint64_t ms = min_size(et);
      if (n > c.left() / ms)
        c.fail(fmt::format("array count {} of {} needs at least {} bytes per element but only {} bytes are left", n,
                           value_type_name(et), ms, c.left()));
      c.array_elements += n;
      if (c.array_elements > kMaxArrayElements)
        c.fail(fmt::format("metadata arrays hold more than {} elements in total (array count {})", kMaxArrayElements, n));
      v.array_type = static_cast<ValueType>(et);
      std::vector<Value> elems;
      elems.reserve(n);
      for (uint64_t i = 0; i < n; ++i) elems.push_back(read_value(c, et, depth + 1));
      v.data = std::move(elems);
      break;
    }
  }
  return v;
}

std::string type_label(const Value& v) {
  if (v.type == ValueType::ARRAY)
    return fmt::format("array of {}", value_type_name(static_cast<uint32_t>(v.array_type)));
  return value_type_name(static_cast<uint32_t>(v.type));
}

bool is_integer(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::UINT16: case ValueType::INT16:
    case ValueType::UINT32: case ValueType::INT32: case ValueType::UINT64: case ValueType::INT64: return true;
    default: return false;
  }
}
bool is_float(ValueType t) { return t == ValueType::FLOAT32 || t == ValueType::FLOAT64; }

}  // namespace

struct File::Impl {
  std::string path;
  void* map = nullptr;
  size_t map_size = 0;
  std::shared_ptr<const void> owner;  // unmaps `map` when the last holder (this or a weight viewing it) goes
  uint32_t version = 0;
  uint64_t alignment = 32;
  uint64_t data_start = 0;
  std::vector<std::pair<std::string, Value>> kv;
  std::map<std::string, size_t, std::less<>> kv_index;
  std::vector<TensorInfo> tensors;
  std::map<std::string, size_t, std::less<>> tensor_index;
  std::vector<std::string> warnings;

  [[noreturn]] void fail(const std::string& what) const { throw FormatError(fmt::format("{}: {}", path, what)); }

  // The steps of File::File, in order.
  /// Maps `path` read-only (map, map_size); fails for a missing, unreadable, non-regular or too small file.
  void map_file();
  /// Magic and version; returns the tensor and metadata counts, checked to fit the file.
  std::pair<uint64_t, uint64_t> read_header(Cursor& c);
  /// The n_kv key-value pairs into kv / kv_index (duplicate keys refused).
  void read_metadata(Cursor& c, uint64_t n_kv);
  /// general.alignment, when present: a power of two up to 2^30.
  void read_alignment();
  /// Tensor info #i: name, dims, type (its table row: refused when ggml removed it, never had it or
  /// kveval does not read it), byte size and offset.
  TensorInfo read_tensor_info(Cursor& c, uint64_t i);
  /// The tensor type field of tensor `name`, checked against the storage types table.
  const TypeInfo& read_tensor_type(Cursor& c, const std::string& name) const;
  /// Starts the data section at `header_end` rounded up to the alignment and points each tensor into
  /// it; fails for data past the end or overlapping tensors; records the alignment warning.
  void place_tensors(const Cursor& c, uint64_t header_end);

  const Value& get(std::string_view key) const {
    auto it = kv_index.find(key);
    if (it == kv_index.end()) fail(fmt::format("missing key '{}'", key));
    return kv[it->second].second;
  }
  [[noreturn]] void mismatch(std::string_view key, const Value& v, const char* expected) const {
    fail(fmt::format("key '{}' has type {}, expected {}", key, type_label(v), expected));
  }
  uint64_t as_uint(std::string_view key, const Value& v) const {
    if (!is_integer(v.type)) mismatch(key, v, "an integer");
    if (auto* u = std::get_if<uint64_t>(&v.data)) return *u;
    int64_t s = std::get<int64_t>(v.data);
    if (s < 0) fail(fmt::format("key '{}' has negative value {}, expected >= 0", key, s));
    return static_cast<uint64_t>(s);
  }
  double as_float(std::string_view key, const Value& v) const {
    if (is_float(v.type)) return std::get<double>(v.data);
    if (auto* u = std::get_if<uint64_t>(&v.data)) return static_cast<double>(*u);
    if (auto* s = std::get_if<int64_t>(&v.data)) return static_cast<double>(*s);
    mismatch(key, v, "a float");
  }
};

File::File(const std::string& path) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.path = path;
  m.map_file();
  // The header and metadata are read from the mapping: a file truncated meanwhile
  // faults (SIGBUS) there; that becomes a FormatError instead of killing the process.
  auto parse = [&] {
    Cursor c{m.path, static_cast<const uint8_t*>(m.map), m.map_size, 0, {}, 0};
    const auto [n_tensors, n_kv] = m.read_header(c);
    m.read_metadata(c, n_kv);
    m.read_alignment();
    m.tensors.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
      TensorInfo t = m.read_tensor_info(c, i);
      m.tensor_index.emplace(t.name, m.tensors.size());
      m.tensors.push_back(std::move(t));
    }
    m.place_tensors(c, c.pos);
  };
  if (!read_catching_sigbus(m.map, m.map_size, parse))
    m.fail("file changed while loading (truncated while its header and metadata were read)");
}

void File::Impl::map_file() {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    fail(fmt::format("cannot stat: {}", std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("not a regular file");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 24) {
    ::close(fd);
    fail(fmt::format("file of {} bytes is too small for a GGUF header (24 bytes)", size));
  }
  void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) fail(fmt::format("cannot mmap: {}", std::strerror(e)));
  map = p;
  map_size = size;
  owner = std::shared_ptr<const void>(p, [size](const void* q) { ::munmap(const_cast<void*>(q), size); });
}

std::pair<uint64_t, uint64_t> File::Impl::read_header(Cursor& c) {
  c.where = "header";
  if (std::memcmp(c.base, "GGUF", 4) != 0)
    c.fail(fmt::format("bad magic {:02x} {:02x} {:02x} {:02x}, expected \"GGUF\" (not a GGUF file)", c.base[0],
                       c.base[1], c.base[2], c.base[3]));
  c.pos = 4;
  version = c.read<uint32_t>("version");
  if (version == 1) c.fail("GGUF version 1 is not supported (kveval reads versions 2 and 3; re-convert the model)");
  if (version != 2 && version != 3) {
    c.pos -= 4;
    if (__builtin_bswap32(version) == 2 || __builtin_bswap32(version) == 3)
      c.fail(fmt::format("GGUF version {} looks byte-swapped: big-endian files are not supported", version));
    c.fail(fmt::format("unsupported GGUF version {} (kveval reads versions 2 and 3)", version));
  }
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Each key-value needs >= 13 bytes (key length, type, 1-byte value); each
  // tensor info >= 32 bytes (name length, n_dims, 1 dim, type, offset).
  if (n_kv > c.left() / 13)
    c.fail(fmt::format("metadata count {} cannot fit in the {} bytes left in the file", n_kv, c.left()));
  if (n_tensors > c.left() / 32)
    c.fail(fmt::format("tensor count {} cannot fit in the {} bytes left in the file", n_tensors, c.left()));
  return {n_tensors, n_kv};
}

void File::Impl::read_metadata(Cursor& c, uint64_t n_kv) {
  kv.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i) {
    c.where = fmt::format("key #{}", i);
    std::string key = c.read_string("key");
    c.where = fmt::format("key '{}'", key);
    if (kv_index.count(key)) c.fail("duplicate key");
    uint32_t type = c.read<uint32_t>("value type");
    Value v = read_value(c, type, 0);
    kv_index.emplace(key, kv.size());
    kv.emplace_back(std::move(key), std::move(v));
  }
}

void File::Impl::read_alignment() {
  const auto it = kv_index.find("general.alignment");
  if (it == kv_index.end()) return;
  const Value& a = kv[it->second].second;
  if (!is_integer(a.type)) fail(fmt::format("key 'general.alignment' has type {}, expected uint32", type_label(a)));
  uint64_t al = as_uint("general.alignment", a);
  if (al == 0 || !std::has_single_bit(al) || al > (1u << 30))
    fail(fmt::format("general.alignment {} is not a nonzero power of two (key 'general.alignment')", al));
  alignment = al;
}

const TypeInfo& File::Impl::read_tensor_type(Cursor& c, const std::string& name) const {
  uint32_t type = c.read<uint32_t>("tensor type");
  const TypeInfo* ti = type_info(type);
  if (!ti) {
    if (const char* old_name = removed_type_name(type))
      fail(fmt::format("tensor '{}' has type {} ({}), which ggml removed (re-quantize the model); kveval reads {}", name,
                       old_name, type, supported_type_list()));
    fail(fmt::format("tensor '{}' has unknown type {} (not a ggml type); kveval reads {}", name, type,
                     supported_type_list()));
  }
  if (!ti->supported())
    fail(fmt::format("tensor '{}' has type {} ({}), which kveval does not read; kveval reads {}", name, ti->name, type,
                     supported_type_list()));
  return *ti;
}

TensorInfo File::Impl::read_tensor_info(Cursor& c, uint64_t i) {
  c.where = fmt::format("tensor #{}", i);
  TensorInfo t;
  t.name = c.read_string("tensor name");
  c.where = fmt::format("tensor '{}'", t.name);
  if (tensor_index.count(t.name)) c.fail("duplicate tensor name");
  uint32_t n_dims = c.read<uint32_t>("n_dims");
  if (n_dims < 1 || n_dims > kMaxDims) c.fail(fmt::format("n_dims {} is outside 1..{}", n_dims, kMaxDims));
  uint64_t n = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t dim = c.read<uint64_t>("dimension");
    if (dim == 0) c.fail(fmt::format("dimension {} is 0", d));
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / n)
      c.fail(fmt::format("element count overflows at dimension {} ({})", d, dim));
    n *= dim;
    t.dims.push_back(dim);
  }
  t.dims = trim_trailing_ones(t.dims);  // [64, 1, 1, 1] is [64], as in ggml
  const TypeInfo& ti = read_tensor_type(c, t.name);
  t.type = ti.type;
  if (t.dims[0] % ti.block_size != 0)
    fail(fmt::format("tensor '{}' of type {} has rows of {} elements, not a multiple of its block size {}", t.name,
                     ti.name, t.dims[0], ti.block_size));
  const uint64_t n_blocks = n / ti.block_size;
  if (n_blocks > std::numeric_limits<uint64_t>::max() / 2 / ti.type_size) c.fail("tensor byte size overflows");
  t.n_elements = n;
  t.n_bytes = n_blocks * ti.type_size;
  t.offset = c.read<uint64_t>("tensor offset");
  if (t.offset % alignment != 0)
    c.fail(fmt::format("data offset {} is not a multiple of the alignment {}", t.offset, alignment));
  return t;
}

void File::Impl::place_tensors(const Cursor& c, uint64_t header_end) {
  data_start = (header_end + alignment - 1) / alignment * alignment;
  if (tensors.empty()) return;
  const uint64_t size = c.size;
  if (data_start > size)
    fail(fmt::format("data section starts at offset {}, past the end of the file ({} bytes)", data_start, size));
  const uint64_t data_size = size - data_start;
  for (TensorInfo& t : tensors) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
      const uint64_t end = t.n_bytes > UINT64_MAX - t.offset ? UINT64_MAX : t.offset + t.n_bytes;
      fail(fmt::format("tensor data [{}, {}) extends past the end of the {}-byte data section; file truncated? "
                       "(tensor '{}')",
                       t.offset, end, data_size, t.name));
    }
    t.data = reinterpret_cast<const std::byte*>(c.base + data_start + t.offset);
  }
  // Overlapping tensors: sort by offset and compare neighbours.
  std::vector<const TensorInfo*> by_off;
  for (const auto& t : tensors) by_off.push_back(&t);
  std::sort(by_off.begin(), by_off.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_off.size(); ++i)
    if (by_off[i - 1]->offset + by_off[i - 1]->n_bytes > by_off[i]->offset)
      fail(fmt::format("tensors '{}' and '{}' overlap (data offsets {} and {})", by_off[i - 1]->name, by_off[i]->name,
                       by_off[i - 1]->offset, by_off[i]->offset));
  std::string w = alignment_warning(path, alignment, kv_index.count("general.alignment") != 0, header_end,
                                    {c.base, size}, tensors);
  if (!w.empty()) warnings.push_back(std::move(w));
}

File::~File() = default;
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;

const std::string& File::path() const { return impl_->path; }
uint32_t File::version() const { return impl_->version; }
uint64_t File::alignment() const { return impl_->alignment; }
uint64_t File::data_offset() const { return impl_->data_start; }
const std::vector<std::string>& File::warnings() const { return impl_->warnings; }
void File::release(const std::byte* p, uint64_t n) const {
  const auto* base = static_cast<const std::byte*>(impl_->map);
  if (!base || p < base || n > impl_->map_size || p - base > static_cast<std::ptrdiff_t>(impl_->map_size - n)) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(p) + n) & ~(page - 1);
  if (hi > lo) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

std::shared_ptr<const void> File::mapping() const { return impl_->owner; }

std::span<const std::byte> File::bytes() const {
  return {static_cast<const std::byte*>(impl_->map), impl_->map_size};
}
const std::vector<std::pair<std::string, Value>>& File::metadata() const { return impl_->kv; }

const Value* File::find(std::string_view key) const {
  auto it = impl_->kv_index.find(key);
  return it == impl_->kv_index.end() ? nullptr : &impl_->kv[it->second].second;
}

uint64_t File::get_uint(std::string_view key) const { return impl_->as_uint(key, impl_->get(key)); }
uint64_t File::get_uint_or(std::string_view key, uint64_t def) const {
  const Value* v = find(key);
  return v ? impl_->as_uint(key, *v) : def;
}
double File::get_float(std::string_view key) const { return impl_->as_float(key, impl_->get(key)); }
double File::get_float_or(std::string_view key, double def) const {
  const Value* v = find(key);
  return v ? impl_->as_float(key, *v) : def;
}
std::string File::get_string(std::string_view key) const {
  const Value& v = impl_->get(key);
  if (v.type != ValueType::STRING) impl_->mismatch(key, v, "string");
  return std::get<std::string>(v.data);
}
std::string File::get_string_or(std::string_view key, std::string def) const {
  return find(key) ? get_string(key) : def;
}
bool File::get_bool_or(std::string_view key, bool def) const {
  const Value* v = find(key);
  if (!v) return def;
  if (v->type != ValueType::BOOL) impl_->mismatch(key, *v, "bool");
  return std::get<bool>(v->data);
}
std::vector<std::string> File::get_string_array(std::string_view key) const {
  const Value& v = impl_->get(key);
  if (v.type != ValueType::ARRAY || v.array_type != ValueType::STRING) impl_->mismatch(key, v, "array of string");
  std::vector<std::string> out;
  const auto& a = std::get<std::vector<Value>>(v.data);
  out.reserve(a.size());
  for (const auto& e : a) out.push_back(std::get<std::string>(e.data));
  return out;
}
std::vector<float> File::get_float_array(std::string_view key) const {
  const Value& v = impl_->get(key);
  if (v.type != ValueType::ARRAY || !(is_float(v.array_type) || is_integer(v.array_type)))
    impl_->mismatch(key, v, "array of float32");
  std::vector<float> out;
  const auto& a = std::get<std::vector<Value>>(v.data);
  out.reserve(a.size());
  for (const auto& e : a) out.push_back(static_cast<float>(impl_->as_float(key, e)));
  return out;
}
std::vector<int64_t> File::get_int_array(std::string_view key) const {
  const Value& v = impl_->get(key);
  if (v.type != ValueType::ARRAY || !is_integer(v.array_type)) impl_->mismatch(key, v, "array of integers");
  std::vector<int64_t> out;
  const auto& a = std::get<std::vector<Value>>(v.data);
  out.reserve(a.size());
  for (const auto& e : a) {
    if (auto* u = std::get_if<uint64_t>(&e.data)) {
      if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        impl_->fail(fmt::format("key '{}' holds {} which does not fit int64", key, *u));
      out.push_back(static_cast<int64_t>(*u));
    } else {
      out.push_back(std::get<int64_t>(e.data));
    }
  }
  return out;
}

const TypeInfo& type_info(TensorType t) {
  const TypeInfo* i = type_info(static_cast<uint32_t>(t));
  if (!i) throw ArgumentError(fmt::format("tensor type {} is not in ggml's type table", static_cast<uint32_t>(t)));
  return *i;
}
std::vector<TensorType> supported_types() {
  std::vector<TensorType> v;
  for (const TypeInfo& i : kTensorTypes)
    if (i.supported()) v.push_back(i.type);
  return v;
}
std::string supported_type_list() {
  std::string s;
  for (TensorType t : supported_types()) s += (s.empty() ? "" : ", ") + std::string(type_name(t));
  return s;
}

const std::vector<TensorInfo>& File::tensors() const { return impl_->tensors; }
const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = impl_->tensor_index.find(name);
  return it == impl_->tensor_index.end() ? nullptr : &impl_->tensors[it->second];
}
const TensorInfo& File::tensor(std::string_view name) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) impl_->fail(fmt::format("missing tensor '{}'", name));
  return *t;
}

std::vector<float> File::tensor_f32(std::string_view name, std::span<const uint64_t> expected_dims) const {
  const TensorInfo& t = tensor(name);
  if (!same_shape(t.dims, expected_dims))
    impl_->fail(fmt::format("tensor '{}' has dims {}, expected {}", name, dims_str(t.dims), dims_str(expected_dims)));
  std::vector<float> out(t.n_elements);
  ConvertOptions co;
  co.check_finite = false;
  dequantize_rows(*this, t, 0, t.n_rows(), DType::F32, out.data(), co);
  return out;
}

float f16_to_f32(uint16_t h) { return util::f16_to_f32(h); }

uint16_t f32_to_f16(float f) { return util::f32_to_f16(f); }

}  // namespace kveval::gguf

namespace kveval::gguf {

float bf16_to_f32(uint16_t h) { return util::bf16_to_f32(h); }

uint16_t f32_to_bf16(float f) { return util::f32_to_bf16(f); }

}  // namespace kveval::gguf
