// Tokenizer: every "tokenize" case of the reference file (ids from llama.cpp's
// llama-tokenize), decode round trips, the greedy reference texts, and
// hand-computed merges on small vocabularies (score order, leftmost ties,
// byte fallback), plus the incremental detokenizer on split UTF-8.
#include <doctest/doctest.h>

#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/tokenizer.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

#include <filesystem>
#include <unistd.h>

using namespace kveval;

namespace {

const Tokenizer& real_tokenizer() {
  static const Tokenizer t = [] {
    gguf::File f(test::model_path());
    return Tokenizer::from_gguf(f);
  }();
  return t;
}

const std::string kSp = "\xE2\x96\x81";  // "▁"

/// A small vocabulary: <unk>, <s>, </s>, 256 byte tokens, then `pieces` with `scores`.
Tokenizer small_tokenizer(const std::vector<std::string>& pieces, const std::vector<float>& scores,
                          bool add_space_prefix = true) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
  }
  std::vector<float> sc(tokens.size(), 0.0f);
  for (size_t i = 0; i < pieces.size(); ++i) {
    tokens.push_back(pieces[i]);
    types.push_back(1);
    sc.push_back(scores[i]);
  }
  return Tokenizer(tokens, sc, types, 1, 2, 0, add_space_prefix);
}
constexpr int32_t P = 259;  // id of the first piece in small_tokenizer

}  // namespace

TEST_SUITE("model.tokenizer") {
  TEST_CASE("reference tokenize cases (llama.cpp ids) and decode round trip" * kveval::test::needs_model()) {
    const Tokenizer& tok = real_tokenizer();
    CHECK(tok.n_vocab() == 512);
    CHECK(tok.bos() == 1);
    CHECK(tok.eos() == 2);
    const auto& cases = test::reference_cases("tokenize");
    REQUIRE(cases.size() >= 7);
    for (const auto& c : cases) {
      const std::string text = c.at("text").get<std::string>();
      const auto expected = c.at("ids").get<std::vector<int32_t>>();
      CAPTURE(text);
      const auto ids = tok.encode(text, true);
      CHECK(ids == expected);
      CHECK(tok.decode(ids) == text);
      // Without BOS: the same ids minus the first.
      CHECK(tok.encode(text, false) == std::vector<int32_t>(expected.begin() + 1, expected.end()));
    }
  }

  TEST_CASE("greedy reference texts are the decoding of their ids" * kveval::test::needs_model()) {
    const Tokenizer& tok = real_tokenizer();
    for (const auto& g : test::reference_cases("greedy")) {
      const auto ids = g.at("ids").get<std::vector<int32_t>>();
      CHECK(tok.decode(ids) == g.at("text").get<std::string>());
    }
  }

  TEST_CASE("pieces and decode conventions" * kveval::test::needs_model()) {
    const Tokenizer& tok = real_tokenizer();
    CHECK(tok.piece(259) == kSp + "t");
    CHECK(tok.token_to_piece(259) == " t");
    CHECK(tok.token_to_piece(1).empty());        // control
    CHECK(tok.token_to_piece(2).empty());
    CHECK(tok.token_to_piece(3 + 0x0A) == "\n");  // <0x0A>
    CHECK(tok.token_to_piece(3 + 0xF0) == "\xF0");
    CHECK_THROWS_AS(tok.token_to_piece(512), ArgumentError);
    CHECK_THROWS_AS(tok.token_to_piece(-1), ArgumentError);
    const std::vector<int32_t> bad = {1, 600};
    CHECK_THROWS_AS(tok.decode(bad), ArgumentError);
    // The leading space is stripped only after BOS.
    const auto with = tok.encode(" x", true);
    CHECK(tok.decode(with) == " x");
    const auto without = tok.encode("Once", false);
    CHECK(tok.decode(without) == " Once");
    CHECK(tok.encode("", false).empty());
  }

  TEST_CASE("merges: highest score first, leftmost on ties") {
    // "abc": "ab" (score -1) vs "bc" (score 0): bc wins -> a, bc.
    {
      Tokenizer t = small_tokenizer({"a", "b", "c", "ab", "bc"}, {-1, -1, -1, -1, 0}, false);
      CHECK(t.encode("abc", false) == std::vector<int32_t>{P + 0, P + 4});
    }
    {
      Tokenizer t = small_tokenizer({"a", "b", "c", "ab", "bc"}, {-1, -1, -1, 0, -1}, false);
      CHECK(t.encode("abc", false) == std::vector<int32_t>{P + 3, P + 2});
    }
    // "aaa" with "aa": equal scores, leftmost pair merges first -> aa, a.
    {
      Tokenizer t = small_tokenizer({"a", "aa"}, {0, 0}, false);
      CHECK(t.encode("aaa", false) == std::vector<int32_t>{P + 1, P + 0});
      CHECK(t.encode("aaaa", false) == std::vector<int32_t>{P + 1, P + 1});
    }
    // Merges chain: a+b -> ab, ab+c -> abc; dummy prefix and spaces as "▁".
    {
      Tokenizer t = small_tokenizer({kSp, "a", "b", "c", "ab", "abc", kSp + "abc"}, {0, 0, 0, 0, -3, -2, -1});
      CHECK(t.encode("abc", true) == std::vector<int32_t>{1, P + 6});
      CHECK(t.encode("abc abc", false) == std::vector<int32_t>{P + 6, P + 6});
      CHECK(t.encode("a  b", false) == std::vector<int32_t>{P + 0, P + 1, P + 0, P + 0, P + 2});
      CHECK(t.decode(t.encode("abc abc", true)) == "abc abc");
    }
  }

  TEST_CASE("byte fallback for characters outside the vocabulary" * kveval::test::needs_model()) {
    Tokenizer t = small_tokenizer({kSp, "a"}, {0, 0});
    // "aé" -> ▁, a, <0xC3>, <0xA9>
    CHECK(t.encode("a\xC3\xA9", false) == std::vector<int32_t>{P + 0, P + 1, 3 + 0xC3, 3 + 0xA9});
    CHECK(t.decode(t.encode("a\xC3\xA9", true)) == "a\xC3\xA9");
    // Invalid UTF-8 (a lone continuation byte, a truncated sequence) still round-trips bytewise.
    const std::string junk = "a\x80z\xE2\x96";
    CHECK(t.decode(t.encode(junk, true)) == junk);
    // Real model: "猫" (E7 8C AB) is not a piece.
    const Tokenizer& real = real_tokenizer();
    const auto ids = real.encode("\xE7\x8C\xAB", false);
    CHECK(ids == std::vector<int32_t>{410, 3 + 0xE7, 3 + 0x8C, 3 + 0xAB});
  }

  TEST_CASE("missing byte token: the byte itself as a token (llama.cpp's byte_to_token), else an error at encode time") {
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>", "a", "c"};
    Tokenizer t(tokens, {0, 0, 0, 0, 0}, {2, 3, 3, 1, 1}, 1, 2, 0, false);
    CHECK(t.encode("aa", false) == std::vector<int32_t>{3, 3});
    // "b" is no piece, and there is neither a <0x62> nor a "b" token
    CHECK_THROWS_WITH_AS(t.encode("b", false),
                         "the model's tokenizer cannot encode byte 0x62: neither <0x62> nor the byte itself is in its "
                         "vocabulary (SentencePiece byte fallback)",
                         FormatError);
    std::vector<std::string> with_byte = {"<unk>", "<s>", "</s>", "a", "\xC3", "\xA9"};
    Tokenizer u(with_byte, {0, 0, 0, 0, 0, 0}, {2, 3, 3, 1, 1, 1}, 1, 2, 0, false);
    CHECK(u.encode("a\xC3\xA9", false) == std::vector<int32_t>{3, 4, 5});
  }

  TEST_CASE("constructor and from_gguf validation") {
    CHECK_THROWS_AS(Tokenizer({"a", "b"}, {0}, {1, 1}, 0, 1), FormatError);
    CHECK_THROWS_AS(Tokenizer({"a", "b"}, {0, 0}, {1}, 0, 1), FormatError);
    CHECK_THROWS_AS(Tokenizer({"a", "b"}, {0, 0}, {1, 1}, 2, 1), FormatError);
    CHECK_THROWS_AS(Tokenizer({}, {}, {}, 0, 0), FormatError);

    const test::ScratchDir dir("tok");
    const std::string p = dir.file("gpt2.gguf");
    gguf::Writer w;
    w.add_string("tokenizer.ggml.model", "t5");
    w.add_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
    w.write(p);
    gguf::File f(p);
    CHECK_THROWS_WITH_AS(Tokenizer::from_gguf(f),
                         (p + ": tokenizer model 't5' is not supported, expected 'llama' (SentencePiece) or 'gpt2' "
                              "(byte-level BPE) (key 'tokenizer.ggml.model')")
                             .c_str(),
                         FormatError);
    const std::string p2 = dir.file("badbos.gguf");
    gguf::Writer w2;
    w2.add_string("tokenizer.ggml.model", "llama");
    w2.add_string_array("tokenizer.ggml.tokens", {"a", "b", "c"});
    w2.add_uint32("tokenizer.ggml.bos_token_id", 7);
    w2.write(p2);
    gguf::File f2(p2);
    CHECK_THROWS_WITH_AS(Tokenizer::from_gguf(f2),
                         (p2 + ": token id 7 outside the vocabulary of 3 (key 'tokenizer.ggml.bos_token_id')").c_str(),
                         FormatError);
  }

  TEST_CASE("incremental detokenizer holds back split UTF-8" * kveval::test::needs_model()) {
    const Tokenizer& tok = real_tokenizer();
    // "🙂" = F0 9F 99 82 arrives as four byte tokens.
    IncrementalDetokenizer d(tok);
    CHECK(d.push(410) == " ");  // "▁"
    CHECK(d.push(3 + 0xF0).empty());
    CHECK(d.push(3 + 0x9F).empty());
    CHECK(d.push(3 + 0x99).empty());
    CHECK(d.push(3 + 0x82) == "\xF0\x9F\x99\x82");
    CHECK(d.flush().empty());
    // A held-back partial character becomes U+FFFD on flush.
    CHECK(d.push(3 + 0xE7).empty());
    CHECK(d.push(3 + 0x8C).empty());
    CHECK(d.flush() == "\xEF\xBF\xBD");
    // Invalid bytes are replaced immediately, text after them flows.
    CHECK(d.push(3 + 0xFF) == "\xEF\xBF\xBD");
    CHECK(d.push(3 + 0xE7).empty());
    CHECK(d.push(259) == "\xEF\xBF\xBD t");  // lead byte followed by ASCII: invalid, then " t"
    // Concatenated pushes of a reference case equal decode (without BOS stripping).
    const auto ids = tok.encode("caf\xC3\xA9 \xF0\x9F\x99\x82 \xE7\x8C\xAB", false);
    IncrementalDetokenizer d2(tok);
    std::string s;
    for (int32_t id : ids) s += d2.push(id);
    s += d2.flush();
    CHECK(s == tok.decode(ids));
    CHECK(s == " caf\xC3\xA9 \xF0\x9F\x99\x82 \xE7\x8C\xAB");
  }
}
