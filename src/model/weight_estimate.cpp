// estimate_weight_bytes (declared in model.hpp): resident weight bytes of a
// GGUF model before loading it, for the memory plan. The hyper-parameters
// themselves are read and range-checked in model_load.cpp.
#include "model/arch/arch.hpp"
#include "model/gguf.hpp"
#include "model/model.hpp"

namespace kveval {

uint64_t estimate_weight_bytes(const gguf::File& f, DType dtype) {
  uint64_t elements = 0;
  for (const gguf::TensorInfo& t : f.tensors()) elements += t.n_elements;
  // A tied output projection is a second, transposed copy of token_embd.
  if (f.find_tensor(arch::kOutput) == nullptr)
    if (const gguf::TensorInfo* te = f.find_tensor(arch::kTokenEmbd)) elements += te->n_elements;
  return elements * dtype_size(dtype);
}

}  // namespace kveval
