#pragma once
// Tests' handle on a loaded model with one Context over it (model, eval and cli tests).
#include <memory>
#include <string>

#include "model/context.hpp"
#include "model/model.hpp"

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

}  // namespace kveval::test
