// The bench's sources live in the kveval executable (src/cli/*.cpp is not a
// library), so test_cli compiles the units under test here, once.
// (If src/cli gains a library target, delete this file.)
#include "cli/bench_cost.cpp"
#include "cli/bench_report.cpp"
#include "cli/bench_run.cpp"
#include "cli/bench_stats.cpp"
