// Byte-level BPE on hand-made vocabularies (hand-computed ids): merge order,
// the GPT-2 byte mapping, pre-tokenizer splits, NFC for qwen2, special tokens
// (control never from plain text, user-defined always, EOT), incremental
// detokenization of characters split over byte tokens, and the one-line errors
// of bad files. Real vocabularies (when <shared> exists): NFC on Qwen2, EOT and
// BOS of Llama 3 / Qwen2, special parsing, detokenization of split characters.
#include <doctest/doctest.h>

#include <filesystem>

#include "model/gguf.hpp"
#include "model/gguf_writer.hpp"
#include "model/tokenizer.hpp"
#include "model/tokenizer_bpe.hpp"
#include "model/tokenizer_pretok.hpp"
#include "test_support.hpp"
#include "util/error.hpp"

using namespace kveval;

namespace {

using Ids = std::vector<int32_t>;
using Pieces = std::vector<std::string>;

/// 256 byte tokens (id = byte), then `extra` normal tokens, then the specials
/// "<|endoftext|>" (control), "<|im_end|>" (control), "<tool>" (user-defined).
struct SmallVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  int32_t id(const std::string& t) const {
    for (size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] == t) return static_cast<int32_t>(i);
    FAIL("no token " << t);
    return -1;
  }
};

SmallVocab small_vocab(const std::vector<std::string>& extra) {
  SmallVocab v;
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(byte_to_unicode(static_cast<uint8_t>(b)));
    v.types.push_back(1);
  }
  for (const auto& e : extra) {
    v.tokens.push_back(e);
    v.types.push_back(1);
  }
  for (const char* s : {"<|endoftext|>", "<|im_end|>"}) {
    v.tokens.push_back(s);
    v.types.push_back(3);
  }
  v.tokens.push_back("<tool>");
  v.types.push_back(4);
  return v;
}

Tokenizer small_bpe(const SmallVocab& v, const std::vector<std::string>& merges, const std::string& pre = "gpt-2",
                    SpecialTokens sp = {}) {
  if (sp.eos < 0) sp.eos = v.id("<|endoftext|>");
  return Tokenizer::bpe(v.tokens, v.types, merges, pre, sp);
}

Pieces split(const std::string& pre, std::string_view text) {
  PreTokenizer p(pre);
  Pieces out;
  for (auto s : p.split(text)) out.emplace_back(s);
  return out;
}

const std::string kE = "\xC3\xA9";          // é (NFC)
const std::string kEDecomposed = "e\xCC\x81";  // e + U+0301 COMBINING ACUTE ACCENT

/// Writes a gpt2-model GGUF with `pre` and `merges` over small_vocab({"ab"}).
std::string write_bpe_gguf(const std::filesystem::path& dir, const std::string& name, const std::string& pre,
                           const std::vector<std::string>& merges) {
  const SmallVocab v = small_vocab({"ab"});
  const std::string p = (dir / name).string();
  gguf::Writer w;
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", pre);
  w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  w.add_int32_array("tokenizer.ggml.token_type", v.types);
  w.add_string_array("tokenizer.ggml.merges", merges);
  w.add_uint32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.id("<|endoftext|>")));
  w.write(p);
  return p;
}

std::string load_error(const std::string& path) {
  try {
    gguf::File f(path);
    Tokenizer::from_gguf(f);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_SUITE("model.tokenizer_bpe") {
  TEST_CASE("GPT-2 byte mapping") {
    CHECK(byte_to_unicode('a') == "a");
    CHECK(byte_to_unicode(' ') == "\xC4\xA0");   // Ġ U+0120: the 33rd non-printable byte (0..32)
    CHECK(byte_to_unicode('\n') == "\xC4\x8A");  // Ċ U+010A
    CHECK(byte_to_unicode(0xAD) == "\xC5\x83");  // Ń U+0143: the last of the 68 remapped bytes
    CHECK(byte_to_unicode(0xE9) == kE);           // printable Latin-1 stands for itself
    std::string all;
    for (int b = 0; b < 256; ++b) all += byte_to_unicode(static_cast<uint8_t>(b));
    std::string raw;
    for (int b = 0; b < 256; ++b) raw += static_cast<char>(b);
    CHECK(unicode_to_bytes(all) == raw);
  }

  TEST_CASE("merges by rank, leftmost on ties") {
    const SmallVocab v = small_vocab({"ab", "bc", "aa", "\xC4\xA0" "t", "he", "\xC4\xA0" "the"});
    {
      Tokenizer t = small_bpe(v, {"b c", "a b"});  // "bc" has the lower rank
      CHECK(t.encode("abc", false) == Ids{'a', v.id("bc")});
    }
    {
      Tokenizer t = small_bpe(v, {"a b", "b c"});
      CHECK(t.encode("abc", false) == Ids{v.id("ab"), 'c'});
    }
    {
      Tokenizer t = small_bpe(v, {"a a"});
      CHECK(t.encode("aaa", false) == Ids{v.id("aa"), 'a'});
      CHECK(t.encode("aaaa", false) == Ids{v.id("aa"), v.id("aa")});
    }
    {
      Tokenizer t = small_bpe(v, {"\xC4\xA0 t", "h e", "\xC4\xA0t he"});
      // " the" is one word (" ?\p{L}+"): Ġ+t, h+e, Ġt+he.
      CHECK(t.encode(" the", false) == Ids{v.id("\xC4\xA0the")});
      CHECK(t.encode("the the", false) == Ids{'t', v.id("he"), v.id("\xC4\xA0the")});
      CHECK(t.decode(t.encode("the the", false)) == "the the");
      // Words never merge across pre-tokenizer pieces: "a" and "b" in "a.b".
      Tokenizer t2 = small_bpe(v, {"a b"});
      CHECK(t2.encode("a.b", false) == Ids{'a', '.', 'b'});
    }
  }

  TEST_CASE("pre-tokenizer splits") {
    CHECK(split("gpt-2", "Hello world's  123 !!") == Pieces{"Hello", " world", "'s", " ", " 123", " !!"});
    CHECK(split("gpt-2", "I'M") == Pieces{"I", "'", "M"});  // GPT-2 contractions are case-sensitive
    CHECK(split("llama-bpe", "I'M") == Pieces{"I", "'M"});  // Llama 3: (?i:...)
    CHECK(split("llama-bpe", "12345") == Pieces{"123", "45"});
    CHECK(split("qwen2", "12345") == Pieces{"1", "2", "3", "4", "5"});
    CHECK(split("llama-bpe", "   x\n\n y") == Pieces{"  ", " x", "\n\n", " y"});
    CHECK(split("starcoder", "ab12") == Pieces{"ab", "1", "2"});
    CHECK(split("deepseek-coder", "ab\n12") == Pieces{"ab", "\n", "1", "2"});
    CHECK(split("falcon", "a123456") == Pieces{"a", "123", "456"});
    // U+0085 is white space for Hugging Face (Rust \s) and llama.cpp, not for PCRE2's \s.
    CHECK(split("gpt-2", "a\xC2\x85\xC2\x85" "b") == Pieces{"a", "\xC2\x85", "\xC2\x85", "b"});
    CHECK(pcre2_whitespace_pattern(R"(\s+(?!\S)|[^\s\p{L}])") == R"([\s\x{85}]+(?![^\s\x{85}])|[^\s\x{85}\p{L}])");
    // Invalid UTF-8 never matches a class: it stays, bytes unchanged, in pieces of its own.
    const Pieces p = split("gpt-2", "ab\xFF\xFE" "cd");
    std::string joined;
    for (const auto& s : p) joined += s;
    CHECK(joined == "ab\xFF\xFE" "cd");
    CHECK(p.front() == "ab");
    CHECK(p.back() == "cd");
    // Aliases and the empty pre ("default", as llama.cpp).
    CHECK(PreTokenizer("llama3").name() == "llama-bpe");
    CHECK(PreTokenizer("smollm").name() == "starcoder");
    CHECK(PreTokenizer("").name() == "default");
    CHECK(PreTokenizer("qwen2").nfc());
    CHECK_FALSE(PreTokenizer("llama-bpe").nfc());
    CHECK(PreTokenizer("llama-bpe").ignore_merges());
  }

  TEST_CASE("NFC: qwen2 tokenizes a decomposed e + U+0301 like U+00E9; others do not normalize") {
    CHECK(nfc_normalize(kEDecomposed) == kE);
    CHECK(nfc_normalize("\xFF" + kEDecomposed + "\xC3") == "\xFF" + kE + "\xC3");  // invalid bytes kept
    // Hangul: L + V + T compose to one syllable; U+11A7 is not a trailing consonant (T runs from U+11A8), so
    // U+AC00 + U+11A7 stays as it is (Unicode 15 section 3.12; Python's unicodedata.normalize agrees).
    CHECK(nfc_normalize("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8") == "\xEA\xB0\x81");  // U+1100 U+1161 U+11A8 -> U+AC01
    CHECK(nfc_normalize("\xEA\xB0\x80\xE1\x86\xA7") == "\xEA\xB0\x80\xE1\x86\xA7");  // U+AC00 U+11A7 unchanged
    // Singletons and composition exclusions: U+212B ANGSTROM SIGN -> U+00C5; U+0958 stays decomposed (U+0915 U+093C).
    CHECK(nfc_normalize("\xE2\x84\xAB") == "\xC3\x85");
    CHECK(nfc_normalize("\xE0\xA5\x98") == "\xE0\xA4\x95\xE0\xA4\xBC");
    // An encoded surrogate (ED A0 80) and an overlong form (C0 AF) are invalid bytes, kept as they are.
    CHECK(nfc_normalize("\xED\xA0\x80" + kEDecomposed + "\xC0\xAF") == "\xED\xA0\x80" + kE + "\xC0\xAF");
    // é is C3 A9, byte-encoded "Ã" "©"; the merge makes "Ã©".
    const SmallVocab v = small_vocab({"\xC3\x83\xC2\xA9"});
    const std::vector<std::string> merges = {"\xC3\x83 \xC2\xA9"};
    Tokenizer qwen = small_bpe(v, merges, "qwen2");
    Tokenizer gpt2 = small_bpe(v, merges, "gpt-2");
    const Ids e = {v.id("\xC3\x83\xC2\xA9")};
    CHECK(qwen.encode(kE, false) == e);
    CHECK(qwen.encode(kEDecomposed, false) == e);
    CHECK(gpt2.encode(kE, false) == e);
    CHECK(gpt2.encode(kEDecomposed, false) == Ids{'e', 0xCC, 0x81});
  }

  TEST_CASE("special tokens: control only with parse_special, user-defined always, EOT and BOS") {
    const SmallVocab v = small_vocab({});
    Tokenizer t = small_bpe(v, {});
    const int32_t im_end = v.id("<|im_end|>"), tool = v.id("<tool>"), eot_text = v.id("<|endoftext|>");
    const Ids plain = t.encode("a<|im_end|>b", false);
    CHECK(std::find(plain.begin(), plain.end(), im_end) == plain.end());
    CHECK(t.decode(plain) == "a<|im_end|>b");
    CHECK(t.encode("a<|im_end|>b", false, true) == Ids{'a', im_end, 'b'});
    CHECK(t.encode("x<tool>y", false) == Ids{'x', tool, 'y'});
    CHECK(t.decode(t.encode("x<tool>y", false)) == "x<tool>y");
    CHECK(t.token_to_piece(im_end).empty());  // control tokens render as nothing
    // EOT by text: "<|im_end|>" comes before "<|endoftext|>" in llama.cpp's list.
    CHECK(t.eot() == im_end);
    CHECK(t.eos() == eot_text);
    CHECK(t.is_eog(im_end));
    CHECK(t.is_eog(eot_text));
    CHECK_FALSE(t.is_eog('a'));
    // No BOS in the vocabulary: sequences start with EOS (lm-eval's prefix_token_id).
    CHECK_FALSE(t.has_bos());
    CHECK(t.bos() == eot_text);
    CHECK(t.encode("a", true) == Ids{eot_text, 'a'});
    SpecialTokens sp;
    sp.bos = 'B';
    sp.eot = 'E';
    sp.add_bos = true;
    Tokenizer t2 = small_bpe(v, {}, "gpt-2", sp);
    CHECK(t2.bos() == 'B');
    CHECK(t2.has_bos());
    CHECK(t2.add_bos());
    CHECK(t2.eot() == 'E');  // the GGUF key wins over the text search
  }

  TEST_CASE("incremental detokenization: a character split over byte tokens is emitted when complete") {
    const SmallVocab v = small_vocab({});
    Tokenizer t = small_bpe(v, {});
    const Ids ids = t.encode("a\xF0\x9F\x99\x82" "b" + kE, false);  // a 🙂 b é: every byte its own token
    REQUIRE(ids == Ids{'a', 0xF0, 0x9F, 0x99, 0x82, 'b', 0xC3, 0xA9});
    IncrementalDetokenizer d(t);
    CHECK(d.push(ids[0]) == "a");
    CHECK(d.push(ids[1]).empty());
    CHECK(d.push(ids[2]).empty());
    CHECK(d.push(ids[3]).empty());
    CHECK(d.push(ids[4]) == "\xF0\x9F\x99\x82");
    CHECK(d.push(ids[5]) == "b");
    CHECK(d.push(ids[6]).empty());
    CHECK(d.push(ids[7]) == kE);
    CHECK(d.flush().empty());
    // Invalid UTF-8 in the input survives byte for byte (each byte is a token).
    const std::string junk = "a\xFF\xFE" "b\xE2\x96";
    CHECK(t.encode(junk, false) == Ids{'a', 0xFF, 0xFE, 'b', 0xE2, 0x96});
    CHECK(t.decode(t.encode(junk, false)) == junk);
  }

  TEST_CASE("bad files: one-line errors naming file and key") {
    test::ScratchDir dir("tokbpe");
    const std::string unknown = write_bpe_gguf(dir.path, "pre.gguf", "klingon", {"a b"});
    const std::string e1 = load_error(unknown);
    CHECK(e1.rfind(unknown + ": pre-tokenizer 'klingon' is not supported (supported: default, gpt-2,", 0) == 0);
    CHECK(e1.find("qwen2") != std::string::npos);
    CHECK(e1.find("(key 'tokenizer.ggml.pre')") != std::string::npos);
    CHECK(e1.find('\n') == std::string::npos);

    const std::string bad = write_bpe_gguf(dir.path, "merge.gguf", "gpt-2", {"a b", "a \xE2\x9C\x93"});
    CHECK(load_error(bad) == bad + ": key 'tokenizer.ggml.merges'[1] \"a \xE2\x9C\x93\": token \"\xE2\x9C\x93\" is "
                                   "not in the vocabulary");
    const std::string nojoin = write_bpe_gguf(dir.path, "join.gguf", "gpt-2", {"b a"});  // "ba" is no token
    CHECK(load_error(nojoin) == nojoin + ": key 'tokenizer.ggml.merges'[0] \"b a\": token \"ba\" is not in the "
                                         "vocabulary");
    const std::string nospace = write_bpe_gguf(dir.path, "space.gguf", "gpt-2", {"ab"});
    CHECK(load_error(nospace) == nospace + ": key 'tokenizer.ggml.merges'[0] \"ab\": expected two tokens separated "
                                           "by a space");
    const std::string good = write_bpe_gguf(dir.path, "good.gguf", "gpt-2", {"a b"});
    gguf::File f(good);
    const Tokenizer t = Tokenizer::from_gguf(f);
    CHECK(t.encode("ab", false) == Ids{256});
    CHECK_FALSE(t.add_bos());
    CHECK(t.describe() == "bpe/gpt-2");

    // Duplicate tokens and add_bos without BOS.
    SmallVocab v = small_vocab({"a"});
    CHECK_THROWS_WITH_AS(Tokenizer::bpe(v.tokens, v.types, {}, "gpt-2", {.eos = 0}),
                         "token \"a\" appears twice in the vocabulary, ids 97 and 256 (key 'tokenizer.ggml.tokens')",
                         FormatError);
    SmallVocab v2 = small_vocab({});
    CHECK_THROWS_WITH_AS(Tokenizer::bpe(v2.tokens, v2.types, {}, "gpt-2", {.eos = 0, .add_bos = true}),
                         "tokenizer.ggml.add_bos_token is true but there is no BOS id (key "
                         "'tokenizer.ggml.bos_token_id')",
                         FormatError);
  }

  TEST_CASE("real vocabularies: NFC, BOS/EOT, special parsing, split characters") {
    const std::string shared = test::shared_dir();
    if (shared.empty()) {
      MESSAGE("SKIPPED: no shared fixtures folder (set KVEVAL_SHARED_DIR or place ../shared next to the source)");
      return;
    }
    const auto dir = std::filesystem::path(shared) / "tokenizers";
    gguf::File fq((dir / "ggml-vocab-qwen2.gguf").string());
    const Tokenizer qwen = Tokenizer::from_gguf(fq);
    CHECK(qwen.encode("caf" + kEDecomposed, false) == qwen.encode("caf" + kE, false));
    CHECK(qwen.encode(" r" + kEDecomposed + "sum" + kEDecomposed, false) == qwen.encode(" r" + kE + "sum" + kE, false));
    CHECK_FALSE(qwen.has_bos());
    CHECK_FALSE(qwen.add_bos());
    CHECK(qwen.bos() == 151645);  // no BOS: EOS "<|im_end|>" starts sequences
    CHECK(qwen.eot() == 151645);
    CHECK(qwen.encode("<|im_end|>", false).size() > 1);
    CHECK(qwen.encode("<|im_end|>", false, true) == Ids{151645});
    CHECK(qwen.encode("<think>", false) == Ids{151667});  // user-defined: always one token

    gguf::File fl((dir / "ggml-vocab-llama-bpe.gguf").string());
    const Tokenizer llama3 = Tokenizer::from_gguf(fl);
    CHECK(llama3.encode("caf" + kEDecomposed, false) != llama3.encode("caf" + kE, false));  // no NFC
    CHECK(llama3.has_bos());
    CHECK(llama3.add_bos());
    CHECK(llama3.bos() == 128000);
    CHECK(llama3.eos() == 128001);
    CHECK(llama3.eot() == 128009);  // "<|eot_id|>", found by text
    CHECK(llama3.is_eog(128009));
    Ids hi = {128000};
    for (int32_t id : llama3.encode("Hi", false)) hi.push_back(id);
    hi.push_back(128009);
    CHECK(llama3.encode("Hi<|eot_id|>", true, true) == hi);
    CHECK(llama3.encode("Hi<|eot_id|>", true) != hi);
    CHECK(llama3.decode(llama3.encode("Hi<|eot_id|>", true, true)) == "Hi");

    // A character the GPT-2 vocabulary has no token for comes as byte tokens.
    gguf::File fg((dir / "ggml-vocab-gpt-2.gguf").string());
    const Tokenizer gpt2 = Tokenizer::from_gguf(fg);
    const std::string text = " \xF0\x9F\xA6\x99 done";  // 🦙
    const Ids ids = gpt2.encode(text, false);
    IncrementalDetokenizer d(gpt2);
    std::string streamed;
    size_t n_empty = 0;
    for (int32_t id : ids) {
      const std::string s = d.push(id);
      n_empty += s.empty();
      streamed += s;
    }
    CHECK(n_empty >= 1);  // at least one step held back a partial character
    CHECK(streamed == text);
    CHECK(d.flush().empty());
  }
}
