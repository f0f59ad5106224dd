#pragma once
// Tests' handle on a loaded model with one Context over it (model, eval and cli
// tests), and the real model's Context shared by a test binary's suites.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "model/context.hpp"
#include "model/model.hpp"
#include "model/random_model.hpp"
#include "test_support.hpp"

namespace kveval::test {

/// Path of the random model `spec()` with weights from `seed` (write_random_model),
/// written once per test binary as `name`.gguf in a scratch directory of its own
/// (removed at exit); later calls with the same `name` return the same path.
inline const std::string& cached_random_model(const std::string& name, const std::function<RandomModelSpec()>& spec,
                                              uint64_t seed) {
  static std::map<std::string, std::pair<std::unique_ptr<ScratchDir>, std::string>> written;
  auto it = written.find(name);
  if (it == written.end()) {
    auto dir = std::make_unique<ScratchDir>(name);
    const std::string path = dir->file(name + ".gguf");
    write_random_model(path, spec(), seed);
    it = written.emplace(name, std::make_pair(std::move(dir), path)).first;
  }
  return it->second.second;
}

/// A model loaded for a test and one Context over it; `->` and `*` reach the
/// context, `model()` the model.
struct LoadedContext {
  std::unique_ptr<Model> owner;
  std::unique_ptr<Context> ctx;
  Context* operator->() const { return ctx.get(); }
  Context& operator*() const { return *ctx; }
  Model& model() const { return *owner; }
};

/// Model::load(path, opts) and a fresh Context over it; throws what Model::load throws.
inline LoadedContext load_context(const std::string& path, const ModelOptions& opts = {}) {
  LoadedContext l;
  l.owner = Model::load(path, opts);
  l.ctx = std::make_unique<Context>(*l.owner);
  return l;
}

/// The real model (test::model_path(), 2 threads), loaded once per process, and one
/// Context over it. Only from test cases decorated with needs_model(); a case that
/// sets up caches (KvCacheScope) releases them before it ends.
inline Context& real_context() {
  static const LoadedContext l = load_context(model_path(), {.threads = 2});
  return *l;
}

/// The model a recorded llama.cpp comparison ran (tests/data/llamacpp_*.json, one entry of "runs"): the
/// preset and arch of `run`, the vocabulary file `vocab`, and its optional sliding_window / attn_softcap /
/// final_softcap / original_context (make-model's --original-context); write it with write_random_model(path, spec, run["seed"]) as `kveval make-model` does.
inline RandomModelSpec recorded_model_spec(const nlohmann::json& run, const std::string& vocab) {
  RandomModelSpec s = random_model_flavour(random_model_preset(run["preset"].get<std::string>()),
                                           run["arch"].get<std::string>());
  s.vocab = vocab;
  s.n_vocab = random_model_vocab_size(vocab);
  s.sliding_window = run.value("sliding_window", s.sliding_window);
  s.attn_softcap = run.value("attn_softcap", s.attn_softcap);
  s.final_softcap = run.value("final_softcap", s.final_softcap);
  s.longrope.original_context = run.value("original_context", s.longrope.original_context);
  return s;
}

}  // namespace kveval::test
