// estimate_weight_bytes (declared in model.hpp): resident weight bytes of a
// GGUF model before loading it, for the memory plan. The hyper-parameters
// themselves are read and range-checked in model_load.cpp.
#include "backend/backend.hpp"
#include "model/arch/arch.hpp"
#include "model/gguf.hpp"
#include "model/model.hpp"
#include "model/model_impl.hpp"

namespace kveval {

uint64_t estimate_weight_bytes(const gguf::File& f, DType dtype, ComputeDtype kept) {
  const detail::KeptBlocks keep = detail::kept_blocks(kept);
  auto kept_type = [&](const gguf::TensorInfo& t) { return keep.keeps && t.type == keep.type; };
  uint64_t bytes = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const bool blocks = kept_type(t) && t.dims.size() == 2 && t.name != arch::kTokenEmbd;
    bytes += blocks ? backend::blocks_bytes(keep.dtype, t.n_elements) : t.n_elements * dtype_size(dtype);
  }
  // A tied output projection is a second copy of token_embd (kept blocks or the matrix dtype).
  if (f.find_tensor(arch::kOutput) == nullptr)
    if (const gguf::TensorInfo* te = f.find_tensor(arch::kTokenEmbd))
      bytes += kept_type(*te) ? backend::blocks_bytes(keep.dtype, te->n_elements) : te->n_elements * dtype_size(dtype);
  return bytes;
}

}  // namespace kveval
