// GGUF reader and writer: the real model's metadata (values read independently
// with a Python struct dump of the file), writer -> reader round trips of every
// value type, f16 conversion against hand-computed IEEE bit patterns, and
// malformed files, each of which must raise a one-line FormatError naming the
// problem (never a crash, hang or huge allocation).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <numbers>
#include <unistd.h>

#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/context.hpp"
#include "model/model.hpp"
#include "model/random_model.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;
using namespace kveval::gguf;
namespace fs = std::filesystem;

namespace {

fs::path temp_dir() {
  static const kveval::test::ScratchDir dir("gguf");
  return dir.path;
}

std::string write_bytes(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string p = (temp_dir() / name).string();
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  return p;
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

/// The FormatError message raised by opening `bytes` as a GGUF file, or "" if none.
std::string load_error(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string p = write_bytes(name, bytes);
  try {
    File f(p);
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    CHECK(msg.rfind(p + ": ", 0) == 0);        // names the file
    CHECK(msg.find('\n') == std::string::npos);  // one line
    return msg;
  }
  return "";
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

/// Hand-assembled GGUF bytes for malformed files.
struct Raw {
  std::vector<uint8_t> b;
  template <class T>
  Raw& put(T v) {
    const size_t old = b.size();
    b.resize(old + sizeof v);  // resize + memcpy: insert() trips a GCC 12 -Wstringop-overflow false positive
    std::memcpy(b.data() + old, &v, sizeof v);
    return *this;
  }
  Raw& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Raw& header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    return put(version).put(n_tensors).put(n_kv);
  }
  Raw& kv_u32(const std::string& key, uint32_t v) { return str(key).put<uint32_t>(4).put(v); }
  Raw& tensor(const std::string& name, std::vector<uint64_t> dims, uint32_t type, uint64_t offset) {
    str(name).put<uint32_t>(static_cast<uint32_t>(dims.size()));
    for (auto d : dims) put(d);
    return put(type).put(offset);
  }
  Raw& pad(size_t align) {
    b.resize((b.size() + align - 1) / align * align, 0);
    return *this;
  }
  Raw& zeros(size_t n) {
    b.resize(b.size() + n, 0);
    return *this;
  }
};

}  // namespace

TEST_SUITE("model.gguf") {
  TEST_CASE("real model metadata and tensors" * kveval::test::needs_model()) {
    File f(test::model_path());
    CHECK(f.version() == 3);
    CHECK(f.alignment() == 32);
    CHECK(f.metadata().size() == 19);
    CHECK(f.metadata()[0].first == "tokenizer.ggml.tokens");
    CHECK(f.get_string("general.architecture") == "llama");
    CHECK(f.get_uint("llama.embedding_length") == 64);
    CHECK(f.get_uint("llama.block_count") == 5);
    CHECK(f.get_uint("llama.feed_forward_length") == 172);
    CHECK(f.get_uint("llama.attention.head_count") == 8);
    CHECK(f.get_uint("llama.attention.head_count_kv") == 4);
    CHECK(f.get_uint("llama.context_length") == 2048);
    CHECK(f.get_uint("llama.rope.dimension_count") == 8);
    CHECK(f.get_float("llama.attention.layer_norm_rms_epsilon") == static_cast<double>(1e-5f));
    CHECK(f.get_uint("tokenizer.ggml.seperator_token_id") == 4294967295u);
    CHECK(f.get_float_or("llama.rope.freq_base", 10000.0) == 10000.0);
    CHECK(f.get_uint_or("missing.key", 7) == 7);
    const auto tokens = f.get_string_array("tokenizer.ggml.tokens");
    REQUIRE(tokens.size() == 512);
    CHECK(tokens[0] == "<unk>");
    CHECK(tokens[3] == "<0x00>");
    CHECK(tokens[259] == "\xE2\x96\x81t");  // "▁t"
    const auto scores = f.get_float_array("tokenizer.ggml.scores");
    CHECK(scores[260] == -1.0f);
    CHECK(scores[269] == -10.0f);
    const auto types = f.get_int_array("tokenizer.ggml.token_type");
    CHECK(types[0] == 2);
    CHECK(types[1] == 3);
    CHECK(types[3] == 6);
    CHECK(types[259] == 1);

    REQUIRE(f.tensors().size() == 48);
    const TensorInfo& emb = f.tensor("token_embd.weight");
    CHECK(emb.dims == std::vector<uint64_t>{64, 512});
    CHECK(emb.type == TensorType::F32);
    CHECK(emb.n_bytes == 64 * 512 * 4);
    CHECK(f.tensor("blk.0.attn_k.weight").dims == std::vector<uint64_t>{64, 32});
    CHECK(f.tensor("blk.3.ffn_down.weight").dims == std::vector<uint64_t>{172, 64});
    CHECK(f.tensor("blk.4.ffn_norm.weight").offset == 1170944);
    CHECK(f.find_tensor("nope") == nullptr);
    // Values read with Python's struct module at data offset 14176 + tensor offset.
    const uint64_t ed[] = {64, 512};
    const auto e = f.tensor_f32("token_embd.weight", ed);
    CHECK(e[0] == -0.29474878311157227f);
    CHECK(e[3] == 0.34057360887527466f);
    const uint64_t nd[] = {64};
    CHECK(f.tensor_f32("output_norm.weight", nd)[1] == 1.3673226833343506f);
    CHECK(f.tensor_f32("blk.4.ffn_norm.weight", nd)[63] == 1.234261155128479f);
  }

  TEST_CASE("typed getters report missing keys and type mismatches" * kveval::test::needs_model()) {
    File f(test::model_path());
    const std::string p = test::model_path();
    CHECK_THROWS_WITH_AS(f.get_uint("llama.nope"), (p + ": missing key 'llama.nope'").c_str(), FormatError);
    CHECK_THROWS_WITH_AS(f.get_uint("general.name"), (p + ": key 'general.name' has type string, expected an integer").c_str(),
                         FormatError);
    CHECK_THROWS_WITH_AS(f.get_string("llama.block_count"),
                         (p + ": key 'llama.block_count' has type uint32, expected string").c_str(), FormatError);
    CHECK_THROWS_WITH_AS(f.get_string_array("tokenizer.ggml.scores"),
                         (p + ": key 'tokenizer.ggml.scores' has type array of float32, expected array of string").c_str(),
                         FormatError);
    CHECK_THROWS_AS(f.tensor("missing.weight"), FormatError);
    const uint64_t wrong[] = {512, 64};
    CHECK_THROWS_WITH_AS(f.tensor_f32("token_embd.weight", wrong),
                         (p + ": tensor 'token_embd.weight' has dims [64, 512], expected [512, 64]").c_str(), FormatError);
  }

  TEST_CASE("round trip of every value type, nested arrays and tensors") {
    Writer w;
    w.add("u8", Value{ValueType::UINT8, uint64_t{255}});
    w.add("i8", Value{ValueType::INT8, int64_t{-128}});
    w.add("u16", Value{ValueType::UINT16, uint64_t{65535}});
    w.add("i16", Value{ValueType::INT16, int64_t{-32768}});
    w.add_uint32("u32", 4000000000u);
    w.add("i32", Value{ValueType::INT32, int64_t{-2000000000}});
    w.add_float32("f32", 1.5f);
    w.add_bool("yes", true);
    w.add_bool("no", false);
    w.add_string("s", "h\xC3\xA9llo \xE2\x96\x81");
    w.add_string("empty", "");
    w.add("u64", Value{ValueType::UINT64, uint64_t{(1ull << 63) + 5}});
    w.add("i64", Value{ValueType::INT64, int64_t{-(1ll << 62)}});
    w.add("f64", Value{ValueType::FLOAT64, std::numbers::pi});
    w.add_string_array("sa", {"a", "", "\xF0\x9F\x99\x82"});
    w.add_float32_array("fa", {0.25f, -3.0f});
    w.add_int32_array("ia", {-1, 0, 7});
    w.add("empty_array", Value{ValueType::ARRAY, std::vector<Value>{}, ValueType::UINT64});
    // [[1, 2], [3]] as an array of arrays of int16
    std::vector<Value> inner1{Value{ValueType::INT16, int64_t{1}}, Value{ValueType::INT16, int64_t{2}}};
    std::vector<Value> inner2{Value{ValueType::INT16, int64_t{3}}};
    w.add("nested", Value{ValueType::ARRAY,
                          std::vector<Value>{Value{ValueType::ARRAY, inner1, ValueType::INT16},
                                             Value{ValueType::ARRAY, inner2, ValueType::INT16}},
                          ValueType::ARRAY});
    w.add_uint32("general.alignment", 64);
    const std::vector<float> a = {1.0f, -2.0f, 0.5f, 3.25f, 1e-3f, 65504.0f};
    const std::vector<float> b = {1.0f + 1.0f / 2048.0f, 0.1f, -0.0f};  // f16: tie-to-even, rounding, -0
    w.add_tensor("a", {3, 2}, a);
    w.add_tensor("b", {3}, b, TensorType::F16);
    w.add_tensor("c", {2, 1, 1, 2}, [](uint64_t first, std::span<float> out) {
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>(first + i) * 10.0f;
    });
    const std::string p = (temp_dir() / "roundtrip.gguf").string();
    const uint64_t n = w.write(p);
    CHECK(n == fs::file_size(p));
    CHECK(read_bytes(p) == w.bytes());

    File f(p);
    CHECK(f.version() == 3);
    CHECK(f.alignment() == 64);
    CHECK(f.get_uint("u8") == 255);
    CHECK(std::get<int64_t>(f.find("i8")->data) == -128);
    CHECK(f.find("i8")->type == ValueType::INT8);
    CHECK(f.get_uint("u16") == 65535);
    CHECK(std::get<int64_t>(f.find("i16")->data) == -32768);
    CHECK(f.get_uint("u32") == 4000000000u);
    CHECK(std::get<int64_t>(f.find("i32")->data) == -2000000000);
    CHECK(f.get_float("f32") == 1.5);
    CHECK(f.get_bool_or("yes", false) == true);
    CHECK(f.get_bool_or("no", true) == false);
    CHECK(f.get_bool_or("absent", true) == true);
    CHECK(f.get_string("s") == "h\xC3\xA9llo \xE2\x96\x81");
    CHECK(f.get_string("empty").empty());
    CHECK(f.get_uint("u64") == (1ull << 63) + 5);
    CHECK(std::get<int64_t>(f.find("i64")->data) == -(1ll << 62));
    CHECK_THROWS_WITH_AS(f.get_uint("i64"), (p + ": key 'i64' has negative value -4611686018427387904, expected >= 0").c_str(),
                         FormatError);
    CHECK(f.get_float("f64") == std::numbers::pi);
    CHECK(f.get_string_array("sa") == std::vector<std::string>{"a", "", "\xF0\x9F\x99\x82"});
    CHECK(f.get_float_array("fa") == std::vector<float>{0.25f, -3.0f});
    CHECK(f.get_int_array("ia") == std::vector<int64_t>{-1, 0, 7});
    CHECK(f.get_int_array("empty_array").empty());
    CHECK(f.find("empty_array")->array_type == ValueType::UINT64);
    const Value* nested = f.find("nested");
    REQUIRE(nested != nullptr);
    CHECK(nested->array_type == ValueType::ARRAY);
    const auto& outer = std::get<std::vector<Value>>(nested->data);
    REQUIRE(outer.size() == 2);
    CHECK(outer[0].array_type == ValueType::INT16);
    CHECK(std::get<int64_t>(std::get<std::vector<Value>>(outer[0].data)[1].data) == 2);
    CHECK(std::get<int64_t>(std::get<std::vector<Value>>(outer[1].data)[0].data) == 3);
    REQUIRE(f.metadata().size() == 20);
    CHECK(f.metadata()[19].first == "general.alignment");

    REQUIRE(f.tensors().size() == 3);
    for (const auto& t : f.tensors()) {
      CHECK(t.offset % 64 == 0);
      CHECK(reinterpret_cast<uintptr_t>(t.data) % 64 == 0);  // mmap is page-aligned, data section 64-aligned
    }
    const uint64_t da[] = {3, 2};
    CHECK(f.tensor_f32("a", da) == a);
    CHECK(f.tensor("b").type == TensorType::F16);
    CHECK(f.tensor("b").n_bytes == 6);
    const uint64_t db[] = {3};
    const auto bb = f.tensor_f32("b", db);
    CHECK(bb[0] == 1.0f);                     // halfway between 1 and 1+2^-10: even mantissa
    CHECK(bb[1] == 0.0999755859375f);         // 0x2E66
    CHECK(std::signbit(bb[2]));
    const uint64_t dc[] = {2, 1, 1, 2};
    CHECK(f.tensor_f32("c", dc) == std::vector<float>{0.0f, 10.0f, 20.0f, 30.0f});
    // Padding is zero (after a's 24, b's 6 and c's 16 bytes).
    const auto bytes = read_bytes(p);
    CHECK(f.tensor("b").offset == 64);
    CHECK(f.tensor("c").offset == 128);
    const size_t a_file = bytes.size() - 3 * 64;  // the data section is 3 tensors in 64-byte slots
    int nonzero_pad = 0;
    for (size_t i = a_file + 24; i < a_file + 64; ++i) nonzero_pad += bytes[i] != 0;
    for (size_t i = a_file + 64 + 6; i < a_file + 128; ++i) nonzero_pad += bytes[i] != 0;
    for (size_t i = a_file + 128 + 16; i < a_file + 192; ++i) nonzero_pad += bytes[i] != 0;
    CHECK(nonzero_pad == 0);
    float a0;
    std::memcpy(&a0, bytes.data() + a_file + 4, 4);
    CHECK(a0 == -2.0f);
  }

  TEST_CASE("writer refuses inconsistent values and tensors") {
    Writer w;
    CHECK_THROWS_AS(w.add("x", Value{ValueType::UINT8, uint64_t{256}}), ArgumentError);
    CHECK_THROWS_AS(w.add("x", Value{ValueType::STRING, uint64_t{1}}), ArgumentError);
    CHECK_THROWS_AS(w.add("x", Value{ValueType::ARRAY, std::vector<Value>{Value{ValueType::INT8, int64_t{1}}},
                                     ValueType::UINT8}),
                    ArgumentError);
    CHECK_THROWS_AS(w.add_tensor("t", {2, 2}, std::vector<float>{1, 2, 3}), ArgumentError);
    CHECK_THROWS_AS(w.add_tensor("t", {0}, std::vector<float>{}), ArgumentError);
  }

  TEST_CASE("f16 conversion: exact bit patterns") {
    CHECK(f32_to_f16(1.0f) == 0x3C00);
    CHECK(f32_to_f16(-2.0f) == 0xC000);
    CHECK(f32_to_f16(65504.0f) == 0x7BFF);
    CHECK(f32_to_f16(65519.0f) == 0x7BFF);  // below the rounding boundary 65520
    CHECK(f32_to_f16(65520.0f) == 0x7C00);  // rounds to infinity
    CHECK(f32_to_f16(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
    CHECK(f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);  // smallest subnormal
    CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);  // tie to even (0)
    CHECK(f32_to_f16(std::ldexp(3.0f, -25)) == 0x0002);  // 1.5 ulp -> tie to even 2
    CHECK(f32_to_f16(std::ldexp(1.0f, -26)) == 0x0000);
    CHECK(f32_to_f16(0.1f) == 0x2E66);
    CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);      // tie -> even
    CHECK(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie -> even (up)
    CHECK(f32_to_f16(-std::numeric_limits<float>::infinity()) == 0xFC00);
    CHECK((f32_to_f16(std::numeric_limits<float>::quiet_NaN()) & 0x7FFF) > 0x7C00);
    CHECK(f16_to_f32(0x3555) == 0.333251953125f);
    CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
    CHECK(f16_to_f32(0x03FF) == std::ldexp(1023.0f, -24));
    CHECK(f16_to_f32(0x7C00) == std::numeric_limits<float>::infinity());
    CHECK(std::isnan(f16_to_f32(0x7E00)));
    // Every non-NaN half survives half -> float -> half.
    int bad = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
      const float x = f16_to_f32(static_cast<uint16_t>(h));
      if (!std::isnan(x) && f32_to_f16(x) != h) ++bad;
    }
    CHECK(bad == 0);
  }

  TEST_CASE("truncated real model is rejected at construction" * kveval::test::needs_model()) {
    const auto full = read_bytes(test::model_path());
    REQUIRE(full.size() == 1185376);
    for (double frac : {0.10, 0.50, 0.99}) {
      CAPTURE(frac);
      std::vector<uint8_t> cut(full.begin(), full.begin() + static_cast<long>(full.size() * frac));
      const std::string msg = load_error("cut.gguf", cut);
      CHECK(contains(msg, "extends past the end"));
      CHECK(contains(msg, "truncated"));
      CHECK(contains(msg, "(tensor '"));
    }
    // Cut inside the metadata (the token strings): first the cheap up-front
    // count check, then (with room for the counts) the string reader.
    std::string msg = load_error("cut_header.gguf", std::vector<uint8_t>(full.begin(), full.begin() + 1000));
    CHECK(contains(msg, "tensor count 48 cannot fit in the 976 bytes left"));
    msg = load_error("cut_header.gguf", std::vector<uint8_t>(full.begin(), full.begin() + 5000));
    CHECK(contains(msg, "left in the file"));
    CHECK(contains(msg, "key 'tokenizer.ggml.tokens'"));
    CHECK(contains(load_error("tiny.gguf", std::vector<uint8_t>(full.begin(), full.begin() + 10)), "too small"));
    CHECK(contains(load_error("empty.gguf", {}), "too small"));
  }

  TEST_CASE("malformed headers") {
    Raw magic;  // a well-formed empty v3 file but for the first byte of the magic
    magic.header(3, 0, 0);
    REQUIRE(magic.b.size() == 24);
    magic.b[0] = 'X';
    CHECK(contains(load_error("magic.gguf", magic.b), "bad magic"));

    Raw v1;
    v1.header(1, 0, 0);
    CHECK(contains(load_error("v1.gguf", v1.b), "GGUF version 1 is not supported"));
    Raw v4;
    v4.header(4, 0, 0);
    CHECK(contains(load_error("v4.gguf", v4.b), "unsupported GGUF version 4"));
    Raw be;
    be.header(0x03000000u, 0, 0);
    CHECK(contains(load_error("be.gguf", be.b), "big-endian"));

    Raw v2;  // version 2 with one key and no tensors is fine
    v2.header(2, 0, 1).kv_u32("k", 5);
    const std::string p2 = write_bytes("v2.gguf", v2.b);
    File f2(p2);
    CHECK(f2.version() == 2);
    CHECK(f2.get_uint("k") == 5);

    Raw many_kv;  // a huge count is refused before anything is allocated
    many_kv.header(3, 0, 1ull << 60).kv_u32("k", 5);
    CHECK(contains(load_error("many_kv.gguf", many_kv.b), "metadata count 1152921504606846976 cannot fit"));
    Raw many_t;
    many_t.header(3, 1ull << 40, 0);
    many_t.zeros(64);
    CHECK(contains(load_error("many_t.gguf", many_t.b), "tensor count"));
  }

  TEST_CASE("malformed metadata") {
    Raw strlen;
    strlen.header(3, 0, 1).put<uint64_t>(1ull << 62).zeros(16);  // key length past the end
    std::string msg = load_error("strlen.gguf", strlen.b);
    CHECK(contains(msg, "key length 4611686018427387904 exceeds the 16 bytes left"));
    CHECK(contains(msg, "key #0"));

    Raw vstr;
    vstr.header(3, 0, 1).str("general.name").put<uint32_t>(8).put<uint64_t>(1000).zeros(8);
    msg = load_error("vstr.gguf", vstr.b);
    CHECK(contains(msg, "string length 1000 exceeds"));
    CHECK(contains(msg, "key 'general.name'"));

    Raw huge;
    huge.header(3, 0, 1).str("tokenizer.ggml.tokens").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(1ull << 61);
    huge.zeros(32);
    msg = load_error("huge_array.gguf", huge.b);
    CHECK(contains(msg, "array count 2305843009213693952"));
    CHECK(contains(msg, "key 'tokenizer.ggml.tokens'"));

    Raw many;  // 5M one-byte elements fit in the file but exceed the element budget
    many.header(3, 0, 1).str("k").put<uint32_t>(9).put<uint32_t>(0).put<uint64_t>(5000000).zeros(5000000);
    CHECK(contains(load_error("many_elements.gguf", many.b), "metadata arrays hold more than 4194304 elements"));

    Raw dup;
    dup.header(3, 0, 2).kv_u32("llama.block_count", 1).kv_u32("llama.block_count", 2);
    msg = load_error("dup.gguf", dup.b);
    CHECK(contains(msg, "duplicate key"));
    CHECK(contains(msg, "'llama.block_count'"));

    Raw vtype;
    vtype.header(3, 0, 1).str("k").put<uint32_t>(13).put<uint32_t>(0);
    CHECK(contains(load_error("vtype.gguf", vtype.b), "unknown value type 13"));

    Raw atype;
    atype.header(3, 0, 1).str("k").put<uint32_t>(9).put<uint32_t>(99).put<uint64_t>(0);
    CHECK(contains(load_error("atype.gguf", atype.b), "unknown array element type 99"));

    Raw boolv;
    boolv.header(3, 0, 1).str("k").put<uint32_t>(7).put<uint8_t>(2).zeros(8);
    CHECK(contains(load_error("bool.gguf", boolv.b), "bool value 2"));

    Raw deep;  // arrays of arrays nested 100 deep
    deep.header(3, 0, 1).str("k").put<uint32_t>(9);
    for (int i = 0; i < 100; ++i) deep.put<uint32_t>(9).put<uint64_t>(1);
    deep.zeros(16);
    CHECK(contains(load_error("deep.gguf", deep.b), "nested deeper"));

    for (uint32_t al : {0u, 48u}) {
      Raw bad;
      bad.header(3, 0, 1).kv_u32("general.alignment", al);
      msg = load_error("align.gguf", bad.b);
      CHECK(contains(msg, "general.alignment " + std::to_string(al) + " is not a nonzero power of two"));
    }
    Raw al_type;
    al_type.header(3, 0, 1).str("general.alignment").put<uint32_t>(8).str("32");
    CHECK(contains(load_error("align_type.gguf", al_type.b), "key 'general.alignment' has type string"));
  }

  TEST_CASE("malformed tensor infos") {
    auto one_tensor = [](std::vector<uint64_t> dims, uint32_t type, uint64_t offset, size_t data_bytes) {
      Raw r;
      r.header(3, 1, 0).tensor("blk.0.attn_q.weight", std::move(dims), type, offset).pad(32).zeros(data_bytes);
      return r.b;
    };
    // Sanity: the well-formed version loads.
    const std::string ok = write_bytes("ok.gguf", one_tensor({4, 2}, 0, 0, 32));
    CHECK(File(ok).tensor("blk.0.attn_q.weight").n_bytes == 32);

    std::string msg = load_error("iq2.gguf", one_tensor({256, 2}, 16, 0, 132));
    CHECK(contains(msg, "tensor 'blk.0.attn_q.weight' has type IQ2_XXS (16), which kveval does not read"));
    CHECK(contains(load_error("t99.gguf", one_tensor({4, 2}, 99, 0, 32)),
                   "tensor 'blk.0.attn_q.weight' has unknown type 99 (not a ggml type)"));
    // (more tensor-type cases in test_quant_files.cpp)

    msg = load_error("past.gguf", one_tensor({4, 2}, 0, 64, 32));
    CHECK(contains(msg, "tensor data [64, 96) extends past the end of the 32-byte data section"));
    CHECK(contains(msg, "tensor 'blk.0.attn_q.weight'"));
    msg = load_error("past_huge.gguf", one_tensor({4, 2}, 0, 1ull << 63, 32));
    CHECK(contains(msg, "extends past the end"));

    CHECK(contains(load_error("misaligned.gguf", one_tensor({4, 2}, 0, 4, 64)), "not a multiple of the alignment 32"));
    CHECK(contains(load_error("ndims0.gguf", one_tensor({}, 0, 0, 32)), "n_dims 0 is outside 1..4"));
    CHECK(contains(load_error("ndims5.gguf", one_tensor({1, 1, 1, 1, 1}, 0, 0, 32)), "n_dims 5 is outside 1..4"));
    CHECK(contains(load_error("dim0.gguf", one_tensor({4, 0}, 0, 0, 32)), "dimension 1 is 0"));
    CHECK(contains(load_error("overflow.gguf", one_tensor({1ull << 40, 1ull << 40}, 0, 0, 32)), "overflows"));
    msg = load_error("bigtensor.gguf", one_tensor({1ull << 30, 1ull << 30}, 0, 0, 32));
    CHECK(contains(msg, "extends past the end"));

    Raw dupt;
    dupt.header(3, 2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad(32).zeros(64);
    msg = load_error("dup_tensor.gguf", dupt.b);
    CHECK(contains(msg, "duplicate tensor name"));
    CHECK(contains(msg, "tensor 'w'"));

    Raw overlap;
    overlap.header(3, 2, 0).tensor("a", {16}, 0, 0).tensor("b", {8}, 0, 32).pad(32).zeros(64);
    CHECK(contains(load_error("overlap.gguf", overlap.b), "tensors 'a' and 'b' overlap"));

    Raw no_data;  // tensor infos end exactly at the end of the file
    no_data.header(3, 1, 0).tensor("w", {8}, 0, 0);
    CHECK(contains(load_error("no_data.gguf", no_data.b), "past the end"));
  }

  TEST_CASE("not a file") {
    const std::string missing = (temp_dir() / "does_not_exist.gguf").string();
    CHECK_THROWS_WITH_AS(File{missing}, (missing + ": cannot open: No such file or directory").c_str(), FormatError);
    CHECK_THROWS_WITH_AS(File{temp_dir().string()}, (temp_dir().string() + ": not a regular file").c_str(), FormatError);
  }

  TEST_CASE("trailing 1 dimensions are dropped, as ggml pads every shape to 4 dimensions") {
    Raw r;
    r.header(3, 3, 0).tensor("v", {8, 1, 1, 1}, 0, 0).tensor("m", {4, 2, 1}, 0, 32).tensor("one", {1, 1, 1, 1}, 0, 64);
    r.pad(32).zeros(96);
    File f(write_bytes("trailing_ones.gguf", r.b));
    CHECK(f.tensor("v").dims == std::vector<uint64_t>{8});
    CHECK(f.tensor("m").dims == std::vector<uint64_t>{4, 2});
    CHECK(f.tensor("one").dims == std::vector<uint64_t>{1});
    CHECK(f.tensor("m").n_rows() == 2);
    const uint64_t v8[] = {8}, v81[] = {8, 1}, m42[] = {4, 2, 1, 1}, m24[] = {2, 4};
    CHECK(f.tensor_f32("v", v8).size() == 8);
    CHECK(f.tensor_f32("v", v81).size() == 8);
    CHECK(f.tensor_f32("m", m42).size() == 8);
    CHECK_THROWS_WITH_AS(f.tensor_f32("m", m24), doctest::Contains("has dims [4, 2], expected [2, 4]"), FormatError);
    CHECK(same_shape(std::vector<uint64_t>{1, 8}, std::vector<uint64_t>{1, 8, 1}));
    CHECK_FALSE(same_shape(std::vector<uint64_t>{1, 8}, std::vector<uint64_t>{8}));  // leading 1s count
  }

  TEST_CASE("a model whose vectors are stored as [n, 1, 1, 1] loads and computes as with [n]") {
    kveval::test::ScratchDir dir("gguf_ones");
    const std::string plain = dir.file("plain.gguf"), padded = dir.file("padded.gguf");
    write_random_model(plain, random_model_preset("tiny"), 3);
    File src(plain);
    Writer w;
    for (const auto& [k, v] : src.metadata())
      if (k != "general.alignment") w.add(k, v);
    int widened = 0;
    for (const auto& t : src.tensors()) {
      std::vector<uint64_t> dims = t.dims;
      if (dims.size() == 1) dims = {dims[0], 1, 1, 1}, ++widened;
      else if (dims.size() == 2) dims.push_back(1);
      w.add_tensor(t.name, dims, src.tensor_f32(t.name, t.dims), t.type);
    }
    w.write(padded);
    REQUIRE(widened >= 3);  // the norms
    auto a = Model::load(plain, {.threads = 1});
    auto b = Model::load(padded, {.threads = 1});
    CHECK(b->load_summary().warnings.empty());
    const std::vector<int32_t> ids = {1, 5, 9, 2};
    std::vector<float> la(4 * static_cast<size_t>(a->hparams().n_vocab)), lb(la.size());
    const int n[] = {4};
    Context ca(*a), cb(*b);
    ca.forward(ids, 1, 4, n, Context::Logits::All, la);
    cb.forward(ids, 1, 4, n, Context::Logits::All, lb);
    CHECK(std::any_of(la.begin(), la.end(), [](float x) { return x != 0; }));
    CHECK(la == lb);
  }

  TEST_CASE("general.alignment smaller than the data's layout: one warning naming both; valid files: none") {
    // Two 32-byte F32 tensors at offsets 0 and 32; the header ends at byte 129,
    // so a data section aligned to 16 starts at 144, one aligned to 32 at 160.
    auto header = [](uint32_t declared) {
      Raw r;
      r.header(3, 2, 1).kv_u32("general.alignment", declared).tensor("w.00", {8}, 0, 0).tensor("w.01", {8}, 0, 32);
      REQUIRE(r.b.size() == 129);
      return r;
    };
    Raw shifted = header(16);  // written for 32, declared 16
    shifted.pad(32).zeros(64);
    const std::string p = write_bytes("align_shifted.gguf", shifted.b);
    File f(p);
    CHECK(f.data_offset() == 144);  // read as declared (as llama.cpp does)
    REQUIRE(f.warnings().size() == 1);
    const std::string& w = f.warnings()[0];
    CHECK(w.rfind(p + ": general.alignment is 16, but every tensor offset is a multiple of 32", 0) == 0);
    CHECK(contains(w, "if the file was written for alignment 32, every weight is read 16 bytes early"));
    CHECK(w.find('\n') == std::string::npos);
    CHECK(summarize_gguf(f).warnings == f.warnings());

    Raw valid = header(16);  // laid out for 16: ends 16 bytes before a 32-aligned layout would
    valid.pad(16).zeros(64);
    CHECK(File(write_bytes("align_valid16.gguf", valid.b)).warnings().empty());
    Raw valid32 = header(32);
    valid32.pad(32).zeros(64);
    CHECK(File(write_bytes("align_valid32.gguf", valid32.b)).warnings().empty());
    Raw data_first = header(16);  // room at the end, but the bytes a 32 layout would skip are tensor data
    data_first.pad(16).put<float>(1.0f).zeros(60 + 16);
    CHECK(File(write_bytes("align_data_first.gguf", data_first.b)).warnings().empty());

    // Real files (llama.cpp's writer): offsets are often multiples of far more than 32, never a warning.
    std::vector<std::string> real;
    if (const std::string shared = kveval::test::shared_dir(); !shared.empty()) {
      real.push_back(shared + "/models/stories260K.gguf");
      for (const auto& e : fs::directory_iterator(shared + "/quant"))
        if (e.path().extension() == ".gguf") real.push_back(e.path().string());
    }
    if (real.empty()) MESSAGE("skipping the real files: no shared fixtures folder");
    for (const auto& r : real) {
      CAPTURE(r);
      CHECK(File(r).warnings().empty());
    }
  }

  TEST_CASE("File::release drops a tensor's pages from the resident set; its bytes read back the same") {
    const auto rss_file_kb = [] {  // RssFile of /proc/self/status: file-backed resident pages
      std::ifstream in("/proc/self/status");
      for (std::string line; std::getline(in, line);)
        if (line.rfind("RssFile:", 0) == 0) return std::stol(line.substr(8));
      return -1L;
    };
    Writer w;
    w.add_tensor("big", {1024, 2048}, [](uint64_t first, std::span<float> out) {
      for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>((first + i) % 251);
    }, kveval::gguf::TensorType::F32);  // 8 MiB
    const std::string p = (temp_dir() / "release.gguf").string();
    w.write(p);
    const File f(p);
    const TensorInfo& t = f.tensor("big");
    const auto* v = reinterpret_cast<const float*>(t.data);
    double sum = 0;
    for (uint64_t i = 0; i < t.n_elements; i += 1024) sum += v[i];  // touch every page
    const long before = rss_file_kb();
    REQUIRE(before > 0);
    f.release(t.data, t.n_bytes);
    const long after = rss_file_kb();
    CHECK(before - after >= 7 * 1024);  // 8 MiB less two partial pages; the kernel updates the counter in batches
    double again = 0;
    for (uint64_t i = 0; i < t.n_elements; i += 1024) again += v[i];
    CHECK(again == sum);
    CHECK(v[2048 * 1024 - 1] == static_cast<float>((2048 * 1024 - 1) % 251));
    f.release(t.data, f.bytes().size() + 1);  // past the mapping's end: ignored
    f.release(nullptr, 1);
  }
}
