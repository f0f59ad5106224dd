#pragma once
// The recipe's numbers of a GGUF file (arch::Param, arch.hpp) resolved into
// HParams, and the load line's note on sliding-window layers; used by the
// loader (model_load.cpp).
#include <string>

#include "model/arch/arch.hpp"
#include "model/gguf.hpp"
#include "model/model.hpp"

namespace kveval {

/// Resolves the recipe's numbers (arch::Param: the file's key, else the
/// recipe's formula or constant) into hp (embd_scale .. final_softcap, rope_attn_factor (at most 16),
/// sliding_window, the sliding layers' RoPE base and scale); hp's other fields,
/// rope scaling included, must be read first. Each is 0 (off) or finite and
/// positive (positive only where the recipe says so, its key present where
/// required), the window an integer in [0, 2^24]; a file's
/// {arch}.attention.sliding_window_pattern must name the recipe's sliding
/// layers. Throws FormatError naming the file and key.
void read_recipe_numbers(const gguf::File& f, const arch::Description& d, HParams& hp);

/// "sliding window 4096 on 13 of 26 layers (those read at most 4096 cached
/// positions and keep at most 4223 per KV cache row[, RoPE base B scale S])"
/// (KvCache::cells_for), or "" when no layer slides.
std::string sliding_summary(const HParams& hp, const arch::Description& d);

}  // namespace kveval
