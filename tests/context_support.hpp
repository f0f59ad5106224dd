#pragma once
// Tests' handle on a loaded model with one Context over it (model, eval and cli
// tests), and the real model's Context shared by a test binary's suites.
#include <memory>
#include <string>

#include "model/context.hpp"
#include "model/model.hpp"
#include "test_support.hpp"

namespace kveval::test {

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

}  // namespace kveval::test
