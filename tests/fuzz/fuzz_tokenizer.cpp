// libFuzzer target: the SentencePiece tokenizer and the incremental
// detokenizer, with the real vocabulary (KVEVAL_FUZZ_MODEL, default
// models/stories260K.gguf from the working directory, when present) and a
// small synthetic one (byte fallback everywhere). Properties checked on
// every input: ids are in range and start with BOS; encode without BOS is the
// same ids minus BOS; decode(encode(s)) == s for well-formed UTF-8 without "▁"
// (U+2581, which SentencePiece maps to a space); the incremental detokenizer emits
// only well-formed UTF-8 and, for well-formed input, exactly decode's text;
// ids out of range are an ArgumentError.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.hpp"
#include "model/gguf.hpp"
#include "model/tokenizer.hpp"
#include "util/error.hpp"

using namespace kveval;

namespace {

std::vector<std::unique_ptr<Tokenizer>> make_tokenizers() {
  std::vector<std::unique_ptr<Tokenizer>> out;
  const char* env = std::getenv("KVEVAL_FUZZ_MODEL");
  const std::string path = env ? env : "models/stories260K.gguf";
  try {
    gguf::File f(path);
    out.push_back(std::make_unique<Tokenizer>(Tokenizer::from_gguf(f)));
  } catch (const Error& e) {
    std::fprintf(stderr, "fuzz_tokenizer: no real vocabulary (%s); synthetic one only\n", e.what());
  }
  // <unk> <s> </s>, 256 byte tokens, then "▁", a..e and a few merges
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.push_back(buf);
    types.push_back(6);
  }
  std::vector<float> scores(tokens.size(), 0.0f);
  float s = -1;
  for (const char* p : {"\xE2\x96\x81", "a", "b", "c", "d", "e", "ab", "\xE2\x96\x81" "a", "\xE2\x96\x81" "ab", "cd",
                        "abcd", "\xC3\xA9"}) {
    tokens.push_back(p);
    types.push_back(1);
    scores.push_back(s -= 1);
  }
  out.push_back(std::make_unique<Tokenizer>(tokens, scores, types, 1, 2, 0, true));
  return out;
}

void check_text(const Tokenizer& tok, std::string_view text) {
  const auto ids = tok.encode(text, true);
  if (ids.empty() || ids[0] != tok.bos()) fuzz::property_failed("encode(text, true) does not start with BOS");
  for (int32_t id : ids)
    if (id < 0 || id >= tok.n_vocab()) fuzz::property_failed("encode produced an id outside the vocabulary");
  const auto no_bos = tok.encode(text, false);
  if (no_bos != std::vector<int32_t>(ids.begin() + 1, ids.end()))
    fuzz::property_failed("encode(text, false) differs from encode(text, true) without BOS");
  const bool has_space_piece = text.find("\xE2\x96\x81") != std::string_view::npos;
  // Only for well-formed UTF-8: like llama.cpp, encode groups an invalid lead
  // byte with the bytes after it, which can split the "▁" of a following space
  // into byte tokens ("\xC6 " decodes as "\xC6▁"). Prompts must be UTF-8.
  const bool utf8 = fuzz::valid_utf8(text);
  if (!has_space_piece && utf8 && tok.decode(ids) != text) fuzz::property_failed("decode(encode(text)) != text");
  IncrementalDetokenizer d(tok);
  std::string streamed;
  for (int32_t id : no_bos) streamed += d.push(id);
  streamed += d.flush();
  if (!fuzz::valid_utf8(streamed)) fuzz::property_failed("the incremental detokenizer emitted malformed UTF-8");
  if (!has_space_piece && utf8 && streamed != tok.decode(no_bos))
    fuzz::property_failed("streamed text of well-formed input differs from decode");
}

void check_ids(const Tokenizer& tok, const uint8_t* data, size_t size) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 1 < size; i += 2)
    ids.push_back(static_cast<int32_t>((data[i] | (data[i + 1] << 8)) % (tok.n_vocab() + 4)) - 2);
  bool in_range = true;
  for (int32_t id : ids) in_range = in_range && id >= 0 && id < tok.n_vocab();
  try {
    const std::string text = tok.decode(ids);
    if (!in_range) fuzz::property_failed("decode accepted an id outside the vocabulary");
  } catch (const ArgumentError&) {
    if (in_range) fuzz::property_failed("decode refused ids inside the vocabulary");
  }
  IncrementalDetokenizer d(tok);
  std::string streamed;
  for (int32_t id : ids) {
    try {
      streamed += d.push(id);
    } catch (const ArgumentError&) {
      if (id >= 0 && id < tok.n_vocab()) fuzz::property_failed("push refused an id inside the vocabulary");
    }
  }
  streamed += d.flush();
  if (!fuzz::valid_utf8(streamed)) fuzz::property_failed("the incremental detokenizer emitted malformed UTF-8");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto toks = make_tokenizers();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const auto& t : toks) {
    try {
      check_text(*t, text);
    } catch (const FormatError&) {
      // only for a missing byte token, which neither vocabulary lacks
      fuzz::property_failed("encode threw FormatError with every byte token present");
    }
    check_ids(*t, data, size);
  }
  return 0;
}
