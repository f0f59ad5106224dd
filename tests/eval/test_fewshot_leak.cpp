// Few-shot examples never leak the scored document: when the
// examples come from the data being scored (no fewshot_split, or a
// fewshot_split that is the same file however spelt), it is the same split and
// the document is never its own example (lm-eval's n + 1 draw minus the doc).
#include <doctest/doctest.h>

#include <filesystem>
#include <string>

#include "eval/spec.hpp"
#include "eval_test_util.hpp"
#include "util/error.hpp"

using namespace kveval;
using namespace kveval::eval;
using kveval::test::TempDir;

namespace {

const char* kData = R"({"q": "Q: What did Lily find?", "a": "a red ball"}
{"q": "Q: Where did Tom go?", "a": "to the park"}
{"q": "Q: What was the cat called?", "a": "Tiger"}
)";

std::string spec_text(const std::string& fewshot_split, int num_fewshot) {
  std::string fs = fewshot_split.empty() ? "" : R"("fewshot_split": ")" + fewshot_split + R"(", )";
  return R"({"model": "m.gguf", "tasks": [{"name": "leak", "output_type": "loglikelihood", "dataset_path": "data.jsonl", )" +
         fs + R"("num_fewshot": )" + std::to_string(num_fewshot) +
         R"(, "doc_to_text": "q", "doc_to_target": "a", "fewshot_delimiter": "\n"}]})";
}

const std::string kQ[3] = {"Q: What did Lily find?", "Q: Where did Tom go?", "Q: What was the cat called?"};
const std::string kA[3] = {"a red ball", "to the park", "Tiger"};

}  // namespace

TEST_SUITE("eval.fewshot_leak") {
  TEST_CASE("3 docs, 2 shots, fewshot_split = dataset_path (several spellings): no prompt holds its own answer") {
    TempDir d;
    d.write("data.jsonl", kData);
    std::filesystem::create_directories(d.path / "sub");
    std::filesystem::create_symlink(d.path / "data.jsonl", d.path / "sub" / "link.jsonl");
    std::filesystem::create_hard_link(d.path / "data.jsonl", d.path / "hard.jsonl");
    EvalSpec own = load_spec(d.write("own.json", spec_text("", 2)));
    for (const std::string& split : {std::string("data.jsonl"), std::string("./data.jsonl"),
                                     std::string("sub/../data.jsonl"), std::string("sub/link.jsonl"),
                                     std::string("hard.jsonl"), d.file("data.jsonl")}) {
      CAPTURE(split);
      EvalSpec s = load_spec(d.write("spec.json", spec_text(split, 2)));
      REQUIRE(s.tasks[0].docs.size() == 3);
      for (size_t i = 0; i < 3; ++i) {
        const std::string& ctx = s.tasks[0].docs[i].context;
        CAPTURE(ctx);
        // its own solved example is absent; both other documents are there, each once
        CHECK(ctx.find(kA[i]) == std::string::npos);
        CHECK(ctx.find(kQ[i]) == ctx.size() - kQ[i].size());  // only as the question at the end
        for (size_t k = 0; k < 3; ++k)
          if (k != i) CHECK(ctx.find(kQ[k] + " " + kA[k] + "\n") != std::string::npos);
        // the same examples in the same order as with the task's own documents
        CHECK(ctx == own.tasks[0].docs[i].context);
      }
    }
  }
}
