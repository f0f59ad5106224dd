// Counts in printed lines: the noun agrees with the number.
#include <doctest/doctest.h>

#include "util/number_format.hpp"

using namespace kveval;

TEST_SUITE("util.number_format") {
  TEST_CASE("count_of: singular for exactly 1, the plural (regular or given) otherwise") {
    CHECK(count_of(1, "token") == "1 token");
    CHECK(count_of(0, "token") == "0 tokens");
    CHECK(count_of(2, "token") == "2 tokens");
    CHECK(count_of(1, "forward pass", "forward passes") == "1 forward pass");
    CHECK(count_of(4, "forward pass", "forward passes") == "4 forward passes");
    CHECK(count_of(11, "row") == "11 rows");
    CHECK(count_of(UINT64_MAX, "byte") == "18446744073709551615 bytes");
    CHECK(noun_for(1, "entry", "entries") == "entry");
    CHECK(noun_for(3, "entry", "entries") == "entries");
  }
}
