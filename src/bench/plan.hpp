#pragma once
// The plan of `kveval bench` (as llama-bench's get_cmd_params_instances): the
// flat list of model loads, test instances and size warnings in the order
// execute() (execute.cpp) runs them.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "eval/spec.hpp"

#include "bench/run.hpp"

namespace kveval::bench {

/// What plan() needs to know of the model file, read before anything loads.
struct ModelFacts {
  /// Per --dtype entry (same order), the compute dtype it resolves to for the file (resolve_dtype_for_file).
  std::vector<std::string> dtypes;
  int n_ctx = 0;  ///< {arch}.context_length (positions); 0 when the key is absent (Model::load refuses the file)
};

/// Reads `o.model_path`'s header: the resolved --dtype values and the context length.
/// Throws what opening a gguf::File throws (IoError, FormatError) and ArgumentError for a bad --dtype.
ModelFacts model_facts(const Options& o);

/// One step of a bench plan.
struct Instance {
  enum class Kind {
    Load,     ///< Model::load at `threads` and `dtype`; the Test and Warning steps up to the next Load use it
    Test,     ///< one measurement of `test` at its parameters
    Warning,  ///< `warning` is added to the report here (a size capped or skipped, a repeated dtype)
  };
  Kind kind = Kind::Test;
  /// A test_names() entry, or the option ("--dtype", "--kv-cache-dtype") of a Warning that two of its values
  /// resolve to the same type (the repeat is measured once).
  std::string test;
  int threads = 0;             ///< -t value
  std::string dtype;           ///< resolved compute dtype ("f32", "bf16", ...); "" for fidelity
  std::string kv_cache_dtype;  ///< resolved KV-cache type the step runs with; "" for Load and fidelity
  int batch = 0;               ///< rows (pp, tg, tg-nocache, ll, cache, switch, gen-mixed)
  int n_prompt = 0;            ///< prompt tokens per row (pp, tg, tg-nocache, switch)
  int n_gen = 0;               ///< generated tokens per row (tg, tg-nocache, switch)
  int positions = 0;           ///< cache positions per row (cache, gen-mixed)
  std::string warning;         ///< Warning: the text (Report::add_warning)
  bool operator==(const Instance&) const = default;
};

/// "load t=1 f32", "test pp t=1 f32/f32 b=1 p=16", "warning tg t=1 ...: text": one line per step, for tests and logs.
std::string to_string(const Instance& s);

/// The steps of a bench for `o` on a file described by `f`, in the order they run:
/// for each -t value, a Load per distinct resolved --dtype (a repeat is a
/// Warning), then its tests in test_names() order over its KV-cache types (tg
/// with all of them interleaved; cache, switch and gen-mixed once per type; the
/// others with the first), each test's sizes as llama-bench crosses them (batch,
/// then prompt, then generation); with several --dtype values, tg of every load
/// of that -t value comes last (interleaved: one Test per load and KV-cache type
/// at each shape); fidelity last of all. Sizes the context cannot hold are
/// capped or skipped with a Warning where they would run. Memory checks happen
/// in execute(): a plan is what runs when everything fits. Expects validate(o).
std::vector<Instance> plan(const Options& o, const ModelFacts& f);

/// Runs `steps` (plan(o, f)) and returns the report; `progress` and `info` as
/// run_bench; `fidelity_spec` is the spec of a fidelity step (read from o.spec
/// when not given, before anything runs). A load that does not fit the memory budget skips its steps with a
/// warning when other loads are planned (the rows measured stay), and a test
/// whose sizes do not fit is skipped with a warning (Memory in docs/engine.md).
Report execute(const Options& o, const ModelFacts& f, const std::vector<Instance>& steps,
               std::optional<eval::EvalSpec> fidelity_spec = {},
               const std::function<void(const std::string&)>& progress = {},
               const std::function<void(const std::string&)>& info = {});

namespace detail {
/// The KV-cache types of a load with compute dtype `compute` (--kv-cache-dtype resolved, repeats
/// dropped) and the warnings the repeats give.
struct KvTypes {
  std::vector<KvCacheDtype> types;
  std::vector<std::string> warnings;
};
KvTypes kv_types_for(const Options& o, ComputeDtype compute);
/// The tests an empty --tests runs (test_names() but the opt-in ones), in order.
std::vector<std::string> default_tests();
/// Whether --tests selects `t` (an empty --tests: default_tests()).
bool selected(const Options& o, const std::string& t);
}  // namespace detail

}  // namespace kveval::bench
