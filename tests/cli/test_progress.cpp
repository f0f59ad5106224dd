// Progress lines: hand-computed formatting of counts, percent, rates and ETA.
#include <doctest/doctest.h>

#include "cli/progress.hpp"

using namespace kveval::cli;

TEST_SUITE("cli.progress") {
  TEST_CASE("format_eta: m:ss, h:mm:ss from an hour, ? when unknown") {
    CHECK(format_eta(0) == "0:00");
    CHECK(format_eta(59.4) == "0:59");
    CHECK(format_eta(61) == "1:01");
    CHECK(format_eta(3600 + 62) == "1:01:02");
    CHECK(format_eta(-1) == "?");
  }

  TEST_CASE("progress_line: done/total, floor percent, req/s, tok/s, ETA from the rate so far") {
    // 64 of 300 in 4 s: 16 req/s, 20000 tok / 4 s = 5.0k tok/s, (300-64)/16 = 14.75 s -> 0:15
    CHECK(progress_line("loglikelihood", 64, 300, 20000, 4.0) ==
          "loglikelihood: 64/300 (21%) | 16.0 req/s, 5.0k tok/s | ETA 0:15 | 4.0 s");
    // nothing done yet: no rates
    CHECK(progress_line("generation", 0, 8, 0, 0.05) == "generation: 0/8 (0%) | 0.1 s");
    // finished: no ETA
    CHECK(progress_line("generation", 8, 8, 80, 2.0) == "generation: 8/8 (100%) | 4.0 req/s, 40.0 tok/s | 2.0 s");
    CHECK(progress_line("x", 0, 0, 0, 0) == "x: 0/0 (100%) | 0.0 s");
    // under 0.05 s a rate means nothing (1 request in 1.25e-7 s would print "8.0M req/s"): none shown
    CHECK(progress_line("generation", 1, 8, 8, 1.25e-7) == "generation: 1/8 (12%) | 0.0 s");
    CHECK(progress_line("generation", 1, 8, 8, 0.05) ==
          "generation: 1/8 (12%) | 20.0 req/s, 160.0 tok/s | ETA 0:00 | 0.1 s");
  }
}
