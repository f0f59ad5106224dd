// The storage types table (model/tensor_types.hpp) and the compute dtypes
// table (model/compute_dtypes.hpp) against numbers written down independently:
// ggml's type_traits (ggml/src/ggml.c: blck_size, type_size = sizeof(block_*)
// of ggml-common.h) copied by hand below, and the tensor layouts llama.cpp's
// quantizer wrote into ../shared/quant/model-*.gguf (each tensor's bytes are
// the gap to the next tensor's offset, less the writer's padding to 32).
#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "model/compute_dtypes.hpp"
#include "model/gguf.hpp"
#include "model/model.hpp"
#include "test_support.hpp"

using namespace kveval;
using gguf::TensorType;

namespace {

struct GgmlTraits {
  uint32_t number;
  const char* name;
  uint32_t block_size, type_size;
};
// ggml.c type_traits[] (name, blck_size, type_size) for every type ggml defines, by number.
constexpr GgmlTraits kGgml[] = {
    {0, "F32", 1, 4},        {1, "F16", 1, 2},         {2, "Q4_0", 32, 18},     {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},     {7, "Q5_1", 32, 24},      {8, "Q8_0", 32, 34},     {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},   {11, "Q3_K", 256, 110},   {12, "Q4_K", 256, 144},  {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292},   {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},  {20, "IQ4_NL", 32, 18},  {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},  {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},        {25, "I16", 1, 2},
    {26, "I32", 1, 4},       {27, "I64", 1, 8},        {28, "F64", 1, 8},       {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},      {34, "TQ1_0", 256, 54},   {35, "TQ2_0", 256, 66},  {39, "MXFP4", 32, 17},
};

}  // namespace

TEST_SUITE("model.tensor_types") {
  TEST_CASE("storage types table: every ggml type's number, name, block size and bytes per block") {
    CHECK(std::size(gguf::kTensorTypes) == std::size(kGgml));
    for (const GgmlTraits& g : kGgml) {
      CAPTURE(g.name);
      const gguf::TypeInfo* ti = gguf::type_info(g.number);
      REQUIRE(ti != nullptr);
      CHECK(std::string(ti->name) == g.name);
      CHECK(static_cast<uint32_t>(ti->type) == g.number);
      CHECK(ti->block_size == g.block_size);
      CHECK(ti->type_size == g.type_size);
    }
    for (uint32_t removed : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u}) {
      CHECK(gguf::type_info(removed) == nullptr);
      CHECK(gguf::removed_type_name(removed) != nullptr);
    }
    CHECK(gguf::type_info(40u) == nullptr);
    CHECK(gguf::removed_type_name(40u) == nullptr);
  }

  TEST_CASE("storage types table: what kveval reads and which kept-block kernels exist") {
    const std::vector<TensorType> reads = {TensorType::F32,  TensorType::F16,  TensorType::BF16, TensorType::Q8_0,
                                           TensorType::Q4_0, TensorType::Q4_1, TensorType::Q5_0, TensorType::Q5_1,
                                           TensorType::Q2_K, TensorType::Q3_K, TensorType::Q4_K, TensorType::Q5_K,
                                           TensorType::Q6_K};
    CHECK(gguf::supported_types() == reads);
    CHECK(gguf::supported_type_list() == "F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K");
    const std::map<TensorType, backend::Dtype> kernels = {{TensorType::Q8_0, backend::Dtype::Q8_0},
                                                          {TensorType::Q4_0, backend::Dtype::Q4_0},
                                                          {TensorType::Q4_1, backend::Dtype::Q4_1},
                                                          {TensorType::Q5_0, backend::Dtype::Q5_0},
                                                          {TensorType::Q5_1, backend::Dtype::Q5_1},
                                                          {TensorType::Q2_K, backend::Dtype::Q2_K},
                                                          {TensorType::Q3_K, backend::Dtype::Q3_K},
                                                          {TensorType::Q4_K, backend::Dtype::Q4_K},
                                                          {TensorType::Q5_K, backend::Dtype::Q5_K},
                                                          {TensorType::Q6_K, backend::Dtype::Q6_K}};
    for (const gguf::TypeInfo& ti : gguf::kTensorTypes) {
      CAPTURE(ti.name);
      CHECK(ti.supported() == (std::find(reads.begin(), reads.end(), ti.type) != reads.end()));
      const auto k = kernels.find(ti.type);
      CHECK(ti.kept.has_value() == (k != kernels.end()));
      if (ti.kept && k != kernels.end()) CHECK(*ti.kept == k->second);
    }
  }

  TEST_CASE("storage types table: tensor bytes of llama.cpp's quantized files (../shared/quant)") {
    const std::string shared = test::shared_dir();
    if (shared.empty() || !std::filesystem::exists(shared + "/quant/model-F32.gguf")) {
      MESSAGE("skipped: ../shared/quant not found");
      return;
    }
    int files = 0;
    std::set<std::string> types_seen;
    for (const auto& entry : std::filesystem::directory_iterator(shared + "/quant")) {
      const std::string p = entry.path().string();
      if (entry.path().extension() != ".gguf") continue;
      CAPTURE(p);
      const gguf::File f(p);
      std::vector<const gguf::TensorInfo*> by_offset;
      for (const auto& t : f.tensors()) by_offset.push_back(&t);
      std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
      const uint64_t file_size = std::filesystem::file_size(p);
      for (size_t i = 0; i < by_offset.size(); ++i) {
        const gguf::TensorInfo& t = *by_offset[i];
        CAPTURE(t.name);
        types_seen.insert(gguf::type_name(t.type));
        // The writer pads each tensor to the alignment; the next tensor (or the end of the file) follows.
        const uint64_t next = i + 1 < by_offset.size() ? by_offset[i + 1]->offset : file_size - f.data_offset();
        const uint64_t padded = (t.n_bytes + f.alignment() - 1) / f.alignment() * f.alignment();
        CHECK(next - t.offset == padded);
      }
      ++files;
    }
    CHECK(files >= 15);
    for (const char* t : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
                          "Q6_K"})
      CHECK(types_seen.count(t) == 1);
  }

  TEST_CASE("compute dtypes table: names, kept storage types, auto and KV-cache defaults") {
    CHECK(join_names(compute_dtype_name_list()) == "f32, bf16, q8_0, q4_0, blocks, blocks-bf16 or auto");
    CHECK(join_names(compute_dtype_name_list(true), ", ") == "bf16, q8_0, q4_0, blocks, blocks-bf16");
    CHECK(join_names(kv_cache_dtype_name_list(), " or ", "'") == "'f32', 'bf16', 'f16' or 'auto'");
    for (const ComputeDtypeInfo& i : kComputeDtypes) {
      CAPTURE(i.name);
      CHECK(parse_compute_dtype(i.name) == i.dtype);
      CHECK(std::string(to_string(i.dtype)) == i.name);
    }
    CHECK_THROWS_WITH(parse_compute_dtype("q5_k"),
                      "--dtype 'q5_k': expected 'f32', 'bf16', 'q8_0', 'q4_0', 'blocks', 'blocks-bf16' or 'auto'");
    // which storage types each compute dtype keeps as blocks
    for (const gguf::TypeInfo& ti : gguf::kTensorTypes) {
      CAPTURE(ti.name);
      CHECK(keeps(ComputeDtype::Q8_0, ti.type) == (ti.type == TensorType::Q8_0));
      CHECK(keeps(ComputeDtype::Q4_0, ti.type) == (ti.type == TensorType::Q4_0));
      CHECK(keeps(ComputeDtype::Blocks, ti.type) == ti.kept.has_value());
      for (ComputeDtype d : {ComputeDtype::F32, ComputeDtype::BF16, ComputeDtype::Auto}) CHECK_FALSE(keeps(d, ti.type));
    }
    CHECK(resolve_kv_cache_dtype(KvCacheDtype::Auto, ComputeDtype::BF16) == KvCacheDtype::BF16);
    for (ComputeDtype d : {ComputeDtype::F32, ComputeDtype::Q8_0, ComputeDtype::Q4_0})
      CHECK(resolve_kv_cache_dtype(KvCacheDtype::Auto, d) == KvCacheDtype::F32);
    // Bytes per weight: f32 4, bf16 2. Blocks kept: the file's bytes (Q8_0 34 per 32: 32 quants and an f16
    // scale, Q4_0 18; K-quants 84 / 110 / 144 / 176 / 210 per 256; Q4_1, Q5_0, Q5_1 20 / 22 / 24 per 32);
    // F16 has no kept-block kernel.
    CHECK(matrix_bytes(ComputeDtype::F32, TensorType::Q8_0, true, 4096) == 16384);
    CHECK(matrix_bytes(ComputeDtype::BF16, TensorType::Q4_K, true, 4096) == 8192);
    CHECK(matrix_bytes(ComputeDtype::Q8_0, TensorType::Q8_0, true, 4096) == 4096 / 32 * 34);
    CHECK(matrix_bytes(ComputeDtype::Q4_0, TensorType::Q4_0, true, 4096) == 4096 / 32 * 18);
    CHECK(matrix_bytes(ComputeDtype::Q8_0, TensorType::Q8_0, false, 4096) == 16384);
    CHECK(matrix_bytes(ComputeDtype::Q8_0, TensorType::Q4_0, true, 4096) == 16384);
    CHECK(matrix_bytes(ComputeDtype::Blocks, TensorType::Q8_0, true, 4096) == 4096 / 32 * 34);
    CHECK(matrix_bytes(ComputeDtype::Blocks, TensorType::Q4_K, true, 4096) == 4096 / 256 * 144);
    CHECK(matrix_bytes(ComputeDtype::Blocks, TensorType::Q5_K, true, 4096) == 4096 / 256 * 176);
    CHECK(matrix_bytes(ComputeDtype::Blocks, TensorType::Q6_K, true, 4096) == 4096 / 256 * 210);
    CHECK(matrix_bytes(ComputeDtype::Blocks, TensorType::Q3_K, true, 4096) == 4096 / 256 * 110);
    CHECK(matrix_bytes(ComputeDtype::Blocks, TensorType::Q2_K, true, 4096) == 4096 / 256 * 84);
    CHECK(matrix_bytes(ComputeDtype::Blocks, TensorType::Q4_1, true, 4096) == 4096 / 32 * 20);
    CHECK(matrix_bytes(ComputeDtype::Blocks, TensorType::Q5_0, true, 4096) == 4096 / 32 * 22);
    CHECK(matrix_bytes(ComputeDtype::Blocks, TensorType::Q5_1, true, 4096) == 4096 / 32 * 24);
    CHECK(matrix_bytes(ComputeDtype::Blocks, TensorType::F16, true, 4096) == 16384);
    // auto picks blocks for a file whose every matrix is of a kept-block type, whatever the CPU (scoring on bf16
    // tiles with bf16); otherwise q8_0 only for a file of that type (token_embd aside) on a CPU without bf16, and
    // never q4_0
    for (bool bf16 : {false, true}) {
      const ComputeDtype blocks = bf16 ? ComputeDtype::BlocksBf16 : ComputeDtype::Blocks;
      CHECK(resolve_dtype(ComputeDtype::Auto, bf16, false, std::nullopt, true) == blocks);
      CHECK(resolve_dtype(ComputeDtype::Auto, bf16, false, std::optional(TensorType::Q8_0), true) == blocks);
      CHECK(resolve_dtype(ComputeDtype::F32, bf16, false, std::nullopt, true) == ComputeDtype::F32);
    }
    CHECK(resolve_dtype(ComputeDtype::Auto, false, false, std::optional(TensorType::Q8_0)) == ComputeDtype::Q8_0);
    CHECK(resolve_dtype(ComputeDtype::Auto, false, false, std::optional(TensorType::Q4_0)) == ComputeDtype::F32);
    CHECK(resolve_dtype(ComputeDtype::Auto, true, false, std::optional(TensorType::Q8_0)) == ComputeDtype::BF16);
    CHECK(resolve_dtype(ComputeDtype::Auto, true, false, std::nullopt, false) == ComputeDtype::BF16);
  }
}
