// The registry of architecture recipes (see arch.hpp).
#include "model/arch/arch.hpp"

#include <fmt/format.h>

namespace kveval::arch {

const char* to_string(RopeStyle s) { return s == RopeStyle::Normal ? "normal" : "neox"; }

// The recipes, one file each (llama.cpp, qwen2.cpp, qwen3.cpp, gemma2.cpp, gemma3.cpp, granite.cpp,
// phi3.cpp); a new architecture adds its declaration here and its entry to all().
const Description& llama();
const Description& qwen2();
const Description& qwen3();
const Description& gemma2();
const Description& gemma3();
const Description& granite();
const Description& phi3();

const std::vector<const Description*>& all() {
  static const std::vector<const Description*> v = {&llama(), &qwen2(), &qwen3(), &gemma2(), &gemma3(),
                                                    &granite(), &phi3()};
  return v;
}

const Description* find(std::string_view name) {
  for (const Description* d : all())
    if (d->name == name) return d;
  return nullptr;
}

std::string names() {
  std::string s;
  for (const Description* d : all()) s += (s.empty() ? "" : ", ") + std::string(d->name);
  return s;
}

std::string blk_tensor(int layer, std::string_view base, std::string_view kind) {
  return fmt::format("blk.{}.{}.{}", layer, base, kind);
}

}  // namespace kveval::arch
