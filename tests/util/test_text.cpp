// UTF-8 validation (Unicode Table 3-7) and the incremental SHA-256.
#include <doctest/doctest.h>

#include <string>

#include "util/hash.hpp"
#include "util/utf8.hpp"

using namespace kveval;

TEST_SUITE("util.text") {
  TEST_CASE("well-formed UTF-8 is accepted, every ill-formed kind is found at its first byte") {
    constexpr auto npos = std::string_view::npos;
    CHECK(first_invalid_utf8("") == npos);
    CHECK(first_invalid_utf8("Once upon a time") == npos);
    CHECK(first_invalid_utf8("caf\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xF4\x8F\xBF\xBF") == npos);  // é € 😀 U+10FFFF
    CHECK(first_invalid_utf8("ab\xFF") == 2);               // never valid
    CHECK(first_invalid_utf8("a\x80") == 1);                // lone continuation
    CHECK(first_invalid_utf8("\xC0\xAF") == 0);             // overlong '/'
    CHECK(first_invalid_utf8("\xE0\x80\xAF") == 0);         // overlong 3-byte
    CHECK(first_invalid_utf8("x\xED\xA0\x80") == 1);        // surrogate U+D800
    CHECK(first_invalid_utf8("\xF4\x90\x80\x80") == 0);     // U+110000
    CHECK(first_invalid_utf8("\xF0\x8F\xBF\xBF") == 0);     // overlong 4-byte
    CHECK(first_invalid_utf8("ok\xE2\x82") == 2);           // cut at the end
    CHECK(first_invalid_utf8("\xC3(") == 0);                // bad continuation
    CHECK(first_invalid_utf8(std::string_view("a\0b", 3)) == npos);  // NUL is a valid code point
  }

  TEST_CASE("incremental SHA-256 equals the FIPS 180-4 examples") {
    Sha256 a;
    a.update("abc", 3);
    CHECK(a.hex() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    Sha256 b;  // "abc" in pieces, and the empty string
    b.update("a", 1);
    b.update("", 0);
    b.update("bc", 2);
    CHECK(b.hex() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    Sha256 e;
    CHECK(e.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  }
}
