// Generation stops at EOT as at EOS: a tiny random model generates freely
// once; the same file with tokenizer.ggml.eot_token_id set to one of those
// generated ids must stop right after producing it, with reason "eos".
#include <doctest/doctest.h>

#include <algorithm>

#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/model.hpp"
#include "context_support.hpp"
#include "model/random_model.hpp"
#include "test_support.hpp"

using namespace kveval;

namespace {

/// Copies every key and tensor of `src` to `dst`, plus `extra` (key, id).
void copy_with_key(const std::string& src, const std::string& dst, const std::string& key, uint32_t value) {
  gguf::File f(src);
  gguf::Writer w;
  for (const auto& [k, v] : f.metadata())
    if (k != key) w.add(k, v);
  w.add_uint32(key, value);
  for (const auto& t : f.tensors()) w.add_tensor(t.name, t.dims, f.tensor_f32(t.name, t.dims));
  w.write(dst);
}

}  // namespace

TEST_SUITE("model.generate_eot") {
  TEST_CASE("greedy generation stops at the end-of-turn token") {
    test::ScratchDir dir("eot");
    const std::string base = (dir.path / "tiny.gguf").string();
    write_random_model(base, random_model_preset("tiny"), 7);
    GenerateOptions free_run;
    free_run.max_gen_toks = {12};
    free_run.stop_at_eos = false;
    std::vector<int32_t> ids;
    {
      auto m = test::load_context(base, {.threads = 1});
      CHECK(m->model().tokenizer().eot() == -1);  // the synthetic vocabulary has no end-of-turn text
      ids = generate_greedy_uncached(*m, {{1}}, free_run, 16)[0].ids;
    }
    REQUIRE(ids.size() == 12);
    // The first generated id that is new (not seen before it) and not EOS, after at least one token.
    size_t k = 1;
    while (k < ids.size() && (ids[k] == 2 || std::find(ids.begin(), ids.begin() + static_cast<long>(k), ids[k]) !=
                                                 ids.begin() + static_cast<long>(k)))
      ++k;
    REQUIRE_MESSAGE(k < ids.size(), "greedy run repeats itself: no fresh id to use as EOT");
    const std::string with_eot = (dir.path / "tiny_eot.gguf").string();
    copy_with_key(base, with_eot, "tokenizer.ggml.eot_token_id", static_cast<uint32_t>(ids[k]));
    auto m = test::load_context(with_eot, {.threads = 1});
    CHECK(m->model().tokenizer().eot() == ids[k]);
    GenerateOptions opts;
    opts.max_gen_toks = {12};
    const Generation g = generate_greedy_uncached(*m, {{1}}, opts, 16)[0];
    CHECK(g.reason == StopReason::Eos);
    CHECK(g.ids == std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<long>(k) + 1));
    opts.stop_at_eos = false;  // --ignore-eos ignores EOT too
    CHECK(generate_greedy_uncached(*m, {{1}}, opts, 16)[0].ids == ids);
  }
}
