// doctest main of every suite. `--model-part` (ctest's `<module>.stories260K`
// tests) exits 77, ctest's SKIP_RETURN_CODE, with the reason on stdout when
// the real model cannot be had; otherwise model-dependent cases that cannot
// run are skipped with one line saying why (see test_skip.hpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <cstdio>
#include <cstring>
#include <vector>

#include "test_skip.hpp"

int main(int argc, char** argv) {
  bool model_part = false;
  std::vector<const char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--model-part") == 0) model_part = true;
    else args.push_back(argv[i]);
  }
  const std::string why = kveval::test::model_unavailable_reason();
  const int n = kveval::test::needs_model_count();
  if (model_part && n == 0) {
    std::printf("SKIPPED: no test case of this suite needs the model\n");
    return 77;
  }
  if (!why.empty() && n > 0) {
    std::printf("SKIPPED: %d test case(s) that need the real model: %s\n", n, why.c_str());
    if (model_part) return 77;
  }
  doctest::Context ctx(static_cast<int>(args.size()), args.data());
  return ctx.run();
}
