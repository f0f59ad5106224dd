// The compute dtype a file resolves to (resolve_dtype_for_file, Model::load's
// choose_dtype): what the file's matrices are, against the CPU's bf16 support.
#include <optional>

#include <fmt/format.h>

#include "model/gguf.hpp"
#include "model/model_impl.hpp"

namespace kveval {

namespace be = kveval::backend;

namespace {

/// What the file's matrices are, for resolve_dtype: every matrix F32 (`f32`); the one GGUF type of every
/// matrix but token_embd when they share one that a compute dtype keeps as blocks (`kept`); every matrix
/// of a type with a kept-block kernel (`all_kept`).
struct FileKinds {
  bool f32 = true;
  std::optional<gguf::TensorType> kept;
  bool all_kept = true;
};
FileKinds file_kinds(const gguf::File& f) {
  FileKinds k;
  std::optional<gguf::TensorType> shared;  // the type of the matrices but token_embd seen so far
  bool uniform = true;
  for (const auto& t : f.tensors())
    if (t.dims.size() >= 2) {
      if (t.type != gguf::TensorType::F32) k.f32 = false;
      k.all_kept = k.all_kept && keeps(ComputeDtype::Blocks, t.type);
      if (t.name == arch::kTokenEmbd) continue;
      uniform = uniform && (!shared || *shared == t.type);
      shared = t.type;
    }
  k.all_kept = k.all_kept && !k.f32;  // some matrix, none F32
  if (uniform && shared)
    for (const ComputeDtypeInfo& i : kComputeDtypes)
      if (i.kept == shared) k.kept = shared;
  return k;
}

}  // namespace

namespace detail {

/// The compute dtype for `requested` and a note on how it was chosen (Model::dtype_note): a requested
/// dtype is itself ("q8_0"); auto names what it resolved to and why (the file's matrix types, the ISA).
ComputeDtype choose_dtype(const gguf::File& f, ComputeDtype requested, std::string& note) {
  if (requested != ComputeDtype::Auto) {
    note = to_string(requested);
    return requested;
  }
  const FileKinds kinds = file_kinds(f);
  const bool cpu_bf16 = be::cpu_has_bf16();
  const ComputeDtype dtype = resolve_dtype(requested, cpu_bf16, kinds.f32, kinds.kept, kinds.all_kept);
  const std::string file = kinds.f32 ? "F32" : (kinds.kept ? gguf::type_name(*kinds.kept) : "not F32");
  note = fmt::format("{} -> {} (file {}{}, oneDNN ISA {}{})", to_string(requested), to_string(dtype), file,
                     kinds.all_kept ? ", every matrix a kept-block type" : "", be::cpu_isa_name(),
                     cpu_bf16 ? ", bf16" : ", no bf16");
  return dtype;
}

}  // namespace detail

ComputeDtype resolve_dtype_for_file(const std::string& path, ComputeDtype requested) {
  if (requested != ComputeDtype::Auto) return requested;
  const FileKinds k = file_kinds(gguf::File(path));
  return resolve_dtype(requested, be::cpu_has_bf16(), k.f32, k.kept, k.all_kept);
}

}  // namespace kveval
