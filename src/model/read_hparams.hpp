#pragma once
// The {arch}.* hyper-parameters of a GGUF file (keys and defaults of llama.cpp's
// llama_model::load_hparams), used by the loader (model_load.cpp).
#include "model/arch/arch.hpp"
#include "model/gguf.hpp"
#include "model/model.hpp"

namespace kveval {

/// Reads the {arch}.* hyper-parameters into `hp` (everything but n_vocab and the
/// tensor-derived flags): sizes, head size, RoPE dimensions, base and linear scaling
/// (rope.scaling.type none/linear with rope.scaling.factor or rope.scale_linear),
/// LongRoPE's original context, RMSNorm epsilon, then the recipe's numbers
/// (read_recipe_numbers). Throws FormatError naming the file and key.
void read_hparams(const gguf::File& f, const arch::Description& d, HParams& hp);

}  // namespace kveval
