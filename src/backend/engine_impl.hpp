#pragma once
// Internal to src/backend: the oneDNN state behind Engine (primitive caches,
// scratchpad, engine-owned buffers), shared by matmul.cpp and attention.cpp.
#include <cstdint>
#include <map>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "backend/backend.hpp"
#include "util/error.hpp"

namespace kveval::backend {

/// Throws BackendError naming `what` and oneDNN's status.
[[noreturn]] inline void rethrow_dnnl(const dnnl::error& e, const char* what) {
  throw BackendError(fmt::format("oneDNN {} failed: {} (status {})", what, e.what(), static_cast<int>(e.status)));
}

struct MatmulEntry {
  dnnl::matmul prim;
  dnnl::memory::desc src_md, wei_md, dst_md, scratch_md;
  // Fixed-M entries (and runtime-M entries for one-row products) keep their
  // memory objects and only swap data handles, so a decode step allocates nothing.
  dnnl::memory src, wei, dst, scratch;
};

struct Engine::Impl {
  dnnl::engine eng;
  dnnl::stream strm;
  int threads = 1;
  uint64_t created = 0;
  uint64_t allocations = 0;
  bool block_tiles_bf16 = false;  // Engine::set_block_tiles_bf16
  // key: (M or 0 for runtime M, n_in, n_out, ld, W given as rows, ldy, accumulate, dtype, BF16 panels)
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, bool, int64_t, bool, Dtype, bool>, MatmulEntry> matmuls;
  std::vector<uint8_t> scratch;  // user scratchpad shared by all primitives (grow at creation only)
  Buffer pad_x, pad_y;           // row padding for batch-invariant matmuls
  Buffer x_bf16;                 // activations converted to bf16 for BF16 weights
  Buffer widened;                // a chunk of a Q8_0/Q4_0 weight widened to f32 (matmul_widened)
  Buffer gemv_part;              // gemv's scratch: the second half's chain (f32), both chains and x (bf16)
  Buffer int8_x;                 // int8_matmul's quantized activation rows
  MatmulMode matmul_mode = MatmulMode::Exact;
  void grow_scratch(size_t need) {
    if (need > scratch.size()) {
      scratch.resize(need);
      ++allocations;
    }
  }

  // Attention matmuls with runtime dims/strides: 0 = S = Q·Kᵀ, 1 = O = S·V.
  std::map<std::pair<int, int64_t>, MatmulEntry> attn;
  MatmulEntry& get_attn(int which, int64_t G) {
    auto it = attn.find({which, G});
    if (it != attn.end()) return it->second;
    using dt = dnnl::memory::data_type;
    const auto rt = DNNL_RUNTIME_DIM_VAL;
    // 3D [batch, rows, cols]; weights broadcast over the batch (GQA group).
    dnnl::memory::desc src_md({G, rt, rt}, dt::f32, {rt, rt, 1});
    dnnl::memory::desc wei_md({1, rt, rt}, dt::f32, which == 0 ? dnnl::memory::dims{rt, 1, rt} : dnnl::memory::dims{rt, rt, 1});
    dnnl::memory::desc dst_md({G, rt, rt}, dt::f32, {rt, rt, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, dst_md), attr, eng);
      grow_scratch(pd.scratchpad_desc().get_size());
      ++created;
      return attn.emplace(std::make_pair(which, G), MatmulEntry{dnnl::matmul(pd), src_md, wei_md, dst_md, pd.scratchpad_desc(), {}, {}, {}, {}}).first->second;
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, "attention matmul primitive creation");
    }
  }

  /// The matmul primitive for these dims (m = 0: runtime M), created once.
  /// With `panels`, the weights are a BF16 Weight's Wᵀ in oneDNN's BA16a64b2a
  /// layout (Weight::bf16_panels; ld and w_rows unused); m must be fixed, since
  /// oneDNN 2.6 has only its reference kernel for blocked weights with runtime
  /// M, and a reference kernel chosen anyway (on a CPU without avx512_core_bf16)
  /// throws BackendError rather than run 1000x slower. Throws BackendError.
  MatmulEntry& get(int64_t m, int64_t k, int64_t n, int64_t ld, bool w_rows, int64_t ldy, bool acc, Dtype wdt,
                   bool panels = false) {
    auto key = std::make_tuple(m, k, n, ld, w_rows, ldy, acc, wdt, panels);
    auto it = matmuls.find(key);
    if (it != matmuls.end()) return it->second;
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const auto mm = m > 0 ? m : DNNL_RUNTIME_DIM_VAL;
    const dt in_dt = wdt == Dtype::BF16 ? dt::bf16 : dt::f32;
    dnnl::memory::desc src_md({mm, k}, in_dt, tag::ab);
    // Wᵀ [k, n] with row stride ld, or (w_rows) W [n, k] with row stride ld ("ba")
    dnnl::memory::desc wei_md = panels ? dnnl::memory::desc({k, n}, in_dt, tag::BA16a64b2a)
                                       : dnnl::memory::desc({k, n}, in_dt, w_rows ? dnnl::memory::dims{1, ld} : dnnl::memory::dims{ld, 1});
    dnnl::memory::desc dst_md({mm, n}, dt::f32, dnnl::memory::dims{ldy, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (acc) {
      dnnl::post_ops po;
      po.append_sum(1.0f);
      attr.set_post_ops(po);
    }
    try {
      dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, wei_md, dst_md), attr, eng);
      if (panels && std::string_view(pd.impl_info_str()).starts_with("ref"))
        throw BackendError(fmt::format("oneDNN has only its reference kernel ({}) for a bf16 [{}x{}] product on packed "
                                       "weights on this CPU; use --dtype f32",
                                       pd.impl_info_str(), k, n));
      grow_scratch(pd.scratchpad_desc().get_size());
      ++created;
      auto [pos, ok] = matmuls.emplace(key, MatmulEntry{dnnl::matmul(pd), src_md, wei_md, dst_md, pd.scratchpad_desc(), {}, {}, {}, {}});
      return pos->second;
    } catch (const dnnl::error& e) {
      rethrow_dnnl(e, fmt::format("matmul primitive creation [{}x{}]", k, n).c_str());
    }
  }
};

}  // namespace kveval::backend
