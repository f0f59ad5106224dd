// Quantized model files end to end: bad files (unknown or unsupported tensor
// types, rows that are not a multiple of the block size, truncated block
// data) each refused with one line naming the file and the tensor; weights
// holding NaN or Inf refused at load naming the tensor and the first bad
// element; files written by kveval in every supported type
// load, with the load summary, and read back exactly as quantize -> dequantize.
// These run under AddressSanitizer too (scripts/test.sh).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "model/dequantize.hpp"
#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/model.hpp"
#include "model/random_model.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;
using gguf::TensorType;
namespace fs = std::filesystem;

namespace {

fs::path dir() {
  static const test::ScratchDir d("quant_files");
  return d.path;
}

std::vector<uint8_t> read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::string write_bytes(const std::string& name, const std::vector<uint8_t>& b) {
  const std::string p = (dir() / name).string();
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  return p;
}

/// A Llama shape every block type applies to (rows of 256 or 512 elements).
RandomModelSpec k_spec() {
  RandomModelSpec s;
  s.name = "k256";
  s.n_embd = 256;
  s.n_layer = 1;
  s.n_head = 4;
  s.n_head_kv = 2;
  s.n_ff = 512;
  s.n_vocab = 300;
  s.n_ctx = 64;
  return s;
}

std::string write_model(const std::string& name, const RandomModelSpec& spec, TensorType type) {
  const std::string p = (dir() / name).string();
  write_random_llama(p, spec, 5, type);
  return p;
}

/// File offset of the u32 type field of tensor `name`'s info in `b`.
size_t type_field(const std::vector<uint8_t>& b, const std::string& name) {
  std::vector<uint8_t> key(8);
  const uint64_t len = name.size();
  std::memcpy(key.data(), &len, 8);
  key.insert(key.end(), name.begin(), name.end());
  const auto it = std::search(b.begin(), b.end(), key.begin(), key.end());
  REQUIRE(it != b.end());
  const size_t pos = static_cast<size_t>(it - b.begin()) + key.size();
  uint32_t n_dims;
  std::memcpy(&n_dims, b.data() + pos, 4);
  return pos + 4 + 8 * n_dims;
}

/// File offset of the data of tensor `name`.
size_t data_of(const std::string& path, const std::string& name) {
  gguf::File f(path);
  return f.data_offset() + f.tensor(name).offset;
}

/// The FormatError message of Model::load(path) (checked to be one line naming the file), or "".
std::string load_error(const std::string& path, ModelOptions o = {.threads = 1}) {
  try {
    Model::load(path, o);
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    CHECK(msg.rfind(path + ": ", 0) == 0);
    CHECK(msg.find('\n') == std::string::npos);
    return msg;
  }
  return "";
}

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

/// A GGUF file holding one tensor "w" of `dims` and ggml type number `type`, with `data_bytes` bytes of data.
std::vector<uint8_t> one_tensor(std::vector<uint64_t> dims, uint32_t type, size_t data_bytes) {
  std::vector<uint8_t> b = {'G', 'G', 'U', 'F'};
  auto put = [&](auto v) {
    const size_t o = b.size();
    b.resize(o + sizeof v);
    std::memcpy(b.data() + o, &v, sizeof v);
  };
  put(uint32_t{3});
  put(uint64_t{1});
  put(uint64_t{0});
  put(uint64_t{1});
  b.push_back('w');
  put(static_cast<uint32_t>(dims.size()));
  for (uint64_t d : dims) put(d);
  put(type);
  put(uint64_t{0});
  b.resize((b.size() + 31) / 32 * 32 + data_bytes, 0);
  return b;
}

/// The FormatError message of gguf::File on `bytes` (one line naming the file), or "".
std::string file_error(const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string p = write_bytes(name, bytes);
  try {
    gguf::File f(p);
  } catch (const FormatError& e) {
    const std::string msg = e.what();
    CHECK(msg.rfind(p + ": ", 0) == 0);
    CHECK(msg.find('\n') == std::string::npos);
    return msg;
  }
  return "";
}

}  // namespace

TEST_SUITE("model.quant_files") {
  TEST_CASE("unknown and unsupported tensor types are refused by name") {
    const std::string supported = "kveval reads F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K";
    std::string msg = file_error("t99.gguf", one_tensor({256, 2}, 99, 1024));
    CHECK(contains(msg, "tensor 'w' has unknown type 99 (not a ggml type); " + supported));
    CHECK(contains(file_error("q8k.gguf", one_tensor({256, 2}, 15, 584)), "tensor 'w' has type Q8_K (15), which kveval does not read"));
    CHECK(contains(file_error("tq1.gguf", one_tensor({256, 2}, 34, 108)), "tensor 'w' has type TQ1_0 (34), which kveval does not read"));
    CHECK(contains(file_error("iq4.gguf", one_tensor({256, 2}, 23, 272)), "tensor 'w' has type IQ4_XS (23), which kveval does not read"));
    CHECK(contains(file_error("mxfp4.gguf", one_tensor({32, 2}, 39, 34)), "tensor 'w' has type MXFP4 (39), which kveval does not read"));
    CHECK(contains(file_error("q4_0_4_4.gguf", one_tensor({32, 2}, 31, 36)),
                   "tensor 'w' has type Q4_0_4_4 (31), which ggml removed (re-quantize the model)"));

    // In a model file, through Model::load.
    const std::string src = write_model("types.gguf", random_model_preset("tiny"), TensorType::F32);
    auto b = read_bytes(src);
    const uint32_t t99 = 99;
    std::memcpy(b.data() + type_field(b, "blk.0.attn_k.weight"), &t99, 4);
    const std::string p = write_bytes("types99.gguf", b);
    CHECK(load_error(p) == p + ": tensor 'blk.0.attn_k.weight' has unknown type 99 (not a ggml type); " + supported);
  }

  TEST_CASE("a quantized tensor whose rows are not a multiple of its block size is refused") {
    CHECK(contains(file_error("rows_q4k.gguf", one_tensor({100, 2}, 12, 288)),
                   "tensor 'w' of type Q4_K has rows of 100 elements, not a multiple of its block size 256"));
    CHECK(contains(file_error("rows_q8.gguf", one_tensor({48, 2}, 8, 68)),
                   "tensor 'w' of type Q8_0 has rows of 48 elements, not a multiple of its block size 32"));
    // A model whose attn_q (rows of 64) claims Q6_K.
    const std::string src = write_model("rows.gguf", random_model_preset("tiny"), TensorType::F32);
    auto b = read_bytes(src);
    const uint32_t q6k = 14;
    std::memcpy(b.data() + type_field(b, "blk.1.attn_q.weight"), &q6k, 4);
    const std::string p = write_bytes("rows_q6k.gguf", b);
    CHECK(load_error(p) == p + ": tensor 'blk.1.attn_q.weight' of type Q6_K has rows of 64 elements, not a multiple "
                               "of its block size 256");
    // The writer refuses such a tensor too.
    CHECK_THROWS_AS(write_model("rows_w.gguf", random_model_preset("tiny"), TensorType::Q4_K), ArgumentError);
  }

  TEST_CASE("truncated block data is refused naming the tensor") {
    // 4 blocks of Q4_K need 576 bytes.
    std::string msg = file_error("trunc_raw.gguf", one_tensor({256, 4}, 12, 500));
    CHECK(contains(msg, "tensor data [0, 576) extends past the end of the 500-byte data section; file truncated? "
                        "(tensor 'w')"));
    for (TensorType t : {TensorType::Q8_0, TensorType::Q4_K, TensorType::Q6_K}) {
      const std::string name = gguf::type_name(t);
      CAPTURE(name);
      const std::string src = write_model("trunc_" + name + ".gguf", k_spec(), t);
      auto b = read_bytes(src);
      b.resize(b.size() * 99 / 100);
      const std::string p = write_bytes("trunc99_" + name + ".gguf", b);
      msg = load_error(p);
      CHECK(contains(msg, "extends past the end"));
      CHECK(contains(msg, "file truncated? (tensor 'blk.0.ffn_down.weight')"));
    }
  }

  TEST_CASE("weights holding NaN or Inf are refused at load, naming the tensor and the first bad element") {
    const std::string src = write_model("finite.gguf", random_model_preset("tiny"), TensorType::F32);
    auto patch_f32 = [&](const std::string& out, const std::string& tensor, uint64_t element, float v) {
      auto b = read_bytes(src);
      std::memcpy(b.data() + data_of(src, tensor) + 4 * element, &v, 4);
      return write_bytes(out, b);
    };
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    std::string p = patch_f32("nan.gguf", "blk.1.ffn_up.weight", 1234, nan);
    CHECK(load_error(p) == p + ": tensor 'blk.1.ffn_up.weight' holds NaN at element 1234 (row 19, column 18); the "
                               "weights of a model must be finite (corrupt or badly converted file)");
    p = patch_f32("ninf.gguf", "output_norm.weight", 5, -inf);
    CHECK(contains(load_error(p), "tensor 'output_norm.weight' holds -Inf at element 5 (row 0, column 5)"));
    p = patch_f32("pinf.gguf", "token_embd.weight", 0, inf);
    CHECK(contains(load_error(p), "tensor 'token_embd.weight' holds +Inf at element 0 (row 0, column 0)"));
    // The check can be turned off (for measuring its cost): the file then loads.
    CHECK(load_error(p, {.threads = 1, .check_finite = false}).empty());

    // Q8_0: an infinite scale in block 3 of attn_v makes elements 96.. non-finite.
    const std::string q8 = write_model("finite_q8.gguf", random_model_preset("tiny"), TensorType::Q8_0);
    CHECK(load_error(q8).empty());
    auto b = read_bytes(q8);
    const size_t at = data_of(q8, "blk.0.attn_v.weight") + 3 * 34;
    b[at] = 0x00;
    b[at + 1] = 0x7C;  // f16 +Inf
    p = write_bytes("inf_q8.gguf", b);
    CHECK(contains(load_error(p), "tensor 'blk.0.attn_v.weight' holds "));
    CHECK(contains(load_error(p), " at element 96 (row 1, column 32)"));
    // The same error when the blocks are kept (compute dtype q8_0: the scales are scanned, the failing chunk decoded).
    const std::string kept = load_error(p, {.threads = 1, .dtype = ComputeDtype::Q8_0});
    CHECK(contains(kept, "tensor 'blk.0.attn_v.weight' holds "));
    CHECK(contains(kept, " at element 96 (row 1, column 32)"));
    CHECK(load_error(q8, {.threads = 1, .dtype = ComputeDtype::Q8_0}).empty());
  }

  TEST_CASE("the finite check finds the first bad element when converting in parallel") {
    for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q8_0}) {
      const std::string name = gguf::type_name(t);
      CAPTURE(name);
      gguf::Writer w;
      const uint64_t n = 1024 * 512;  // 32 chunks: converted by the OpenMP team
      w.add_tensor("big", {1024, 512}, [](uint64_t first, std::span<float> out) {
        for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<float>((first + i) % 1000) * 1e-3f;
      }, t);
      const std::string p = (dir() / ("big_" + name + ".gguf")).string();
      w.write(p);
      auto b = read_bytes(p);
      const size_t base = data_of(p, "big");
      // NaN at element 400000 and at 300000 (the first), Inf at 450000.
      for (uint64_t e : {400000ull, 300000ull, 450000ull}) {
        const float v = e == 450000 ? std::numeric_limits<float>::infinity() : std::numeric_limits<float>::quiet_NaN();
        if (t == TensorType::F32) {
          std::memcpy(b.data() + base + 4 * e, &v, 4);
        } else if (t == TensorType::F16) {
          const uint16_t h = gguf::f32_to_f16(v);
          std::memcpy(b.data() + base + 2 * e, &h, 2);
        } else {  // the block's scale: every element of block e / 32 becomes non-finite
          const uint16_t h = gguf::f32_to_f16(v);
          std::memcpy(b.data() + base + 34 * (e / 32), &h, 2);
        }
      }
      const std::string bad = write_bytes("big_bad_" + name + ".gguf", b);
      gguf::File f(bad);
      std::vector<float> out(n);
      try {
        dequantize_rows(f, f.tensor("big"), 0, 512, DType::F32, out.data(), {.check_finite = true, .threads = 2});
        FAIL("no error");
      } catch (const FormatError& e) {
        CHECK(contains(e.what(), "tensor 'big' holds NaN at element 300000 (row 292, column 992)"));
      }
      // Rows after the first NaN: the error names the element within the whole tensor.
      try {
        dequantize_rows(f, f.tensor("big"), 300, 212, DType::F32, out.data(), {.check_finite = true, .threads = 2});
        FAIL("no error");
      } catch (const FormatError& e) {
        CHECK(contains(e.what(), "tensor 'big' holds NaN at element 400000 (row 390, column 640)"));
      }
      CHECK_THROWS_AS(dequantize_rows(f, f.tensor("big"), 500, 13, DType::F32, out.data()), ArgumentError);
    }
  }

  TEST_CASE("files written in every supported type load; tensors equal quantize -> dequantize of the F32 weights") {
    const std::string f32_path = write_model("all_F32.gguf", k_spec(), TensorType::F32);
    gguf::File ref(f32_path);
    for (TensorType t : gguf::supported_types()) {
      const std::string name = gguf::type_name(t);
      CAPTURE(name);
      const std::string p = write_model("all_" + name + ".gguf", k_spec(), t);
      gguf::File f(p);
      const bool quantized = gguf::type_info(t).block_size > 1;
      for (const auto& ti : f.tensors()) {
        CAPTURE(ti.name);
        const bool matrix = ti.dims.size() == 2;
        CHECK(ti.type == (matrix ? t : TensorType::F32));  // norms F32 in every type (llama.cpp's convention)
        const auto x = ref.tensor_f32(ti.name, ti.dims);
        std::vector<std::byte> q(tensor_bytes(ti.type, x.size()));
        quantize(ti.type, x.data(), q.data(), x.size(), 1);
        std::vector<float> want(x.size());
        dequantize(ti.type, q.data(), want.data(), x.size(), 1);
        CHECK(f.tensor_f32(ti.name, ti.dims) == want);
      }
      auto m = Model::load(p, {.threads = 1});
      const LoadSummary& s = m->load_summary();
      CHECK(s.architecture == "llama");
      CHECK(s.parameters == random_model_parameters(k_spec()));
      CHECK(s.resident_bytes == 4 * s.parameters);  // untied: every element once, as F32
      CHECK(s.context_length == 64);
      CHECK(s.tokenizer_model == "llama");
      CHECK(s.tokenizer_pre.empty());
      if (t != TensorType::F32) {
        REQUIRE(s.tensor_types.size() == 2);
        CHECK(s.tensor_types[0] == std::pair<std::string, uint64_t>{name, 9});
        CHECK(s.tensor_types[1] == std::pair<std::string, uint64_t>{"F32", 3});
        // 744192 parameters, 2976768 bytes resident as F32
        CHECK(s.parameters == 744192);
        if (quantized) {
          CHECK(contains(format_load_summary(s), "load: llama, 0.74M parameters, tensors " + name + " x9, F32 x3 ("));
          CHECK(contains(format_load_summary(s), "; weights F32 in memory, 2.8 MiB resident; context 64; tokenizer llama; "));
        }
      } else {
        REQUIRE(s.tensor_types.size() == 1);
        CHECK(s.tensor_types[0] == std::pair<std::string, uint64_t>{name, 12});
      }
    }
  }
}
