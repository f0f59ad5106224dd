// estimate_weight_bytes (declared in model.hpp): resident weight bytes of a
// GGUF model before loading it, for the memory plan. The hyper-parameters
// themselves are read and range-checked in model_load.cpp.
#include "backend/backend.hpp"
#include "model/arch/arch.hpp"
#include "model/gguf.hpp"
#include "model/model.hpp"

namespace kveval {

uint64_t estimate_weight_bytes(const gguf::File& f, DType dtype, bool keep_q8_0) {
  uint64_t bytes = 0;
  for (const gguf::TensorInfo& t : f.tensors()) {
    const bool q8 = keep_q8_0 && t.type == gguf::TensorType::Q8_0 && t.dims.size() == 2 && t.name != arch::kTokenEmbd;
    bytes += q8 ? backend::q8_0_bytes(t.n_elements) : t.n_elements * dtype_size(dtype);
  }
  // A tied output projection is a second copy of token_embd (Q8_0 blocks or the matrix dtype).
  if (f.find_tensor(arch::kOutput) == nullptr)
    if (const gguf::TensorInfo* te = f.find_tensor(arch::kTokenEmbd))
      bytes += keep_q8_0 && te->type == gguf::TensorType::Q8_0 ? backend::q8_0_bytes(te->n_elements)
                                                                : te->n_elements * dtype_size(dtype);
  return bytes;
}

}  // namespace kveval
