// libFuzzer target: the tokenizers (SentencePiece and byte-level BPE) and the
// incremental detokenizer. Vocabularies: the GGUF files listed in
// KVEVAL_FUZZ_VOCABS (':'-separated; scripts/fuzz.sh passes the real model
// and ../shared/tokenizers/*.gguf when present) and a small synthetic
// SentencePiece one (byte fallback everywhere). The first input byte picks
// the vocabulary, the rest is the text. Properties checked:
// - ids are in range; with BOS, encode(s, true) is BOS + encode(s, false);
// - decode(encode(s)) == s for well-formed UTF-8 (SentencePiece: without "▁",
//   U+2581, which it maps to a space, and without user-defined tokens, after
//   which it adds a space; BPE: not for NFC-normalizing qwen2, nor for text
//   with a byte the vocabulary lacks, which encode drops like llama.cpp);
// - encode with special-token parsing gives ids in range;
// - the incremental detokenizer emits only well-formed UTF-8 and, for
//   well-formed input, exactly decode's text;
// - ids taken from the input decode, or are refused with ArgumentError
//   exactly when one is outside the vocabulary.
// kveval::Error from encode is a finding too: these vocabularies have every byte.
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

struct Vocab {
  std::string name;
  std::unique_ptr<Tokenizer> tok;
  bool nfc = false;  ///< tokenizer.ggml.pre qwen2: the text is NFC-normalized first
  std::string dropped;  ///< bytes the vocabulary has no token for (encode drops them, as llama.cpp)
};

/// decode(encode(text)): for SentencePiece with BOS, so that decode removes
/// the dummy-prefix space.
std::string round_trip(const Tokenizer& tok, std::string_view text) {
  const bool spm_bos = tok.kind() == TokenizerKind::Spm && tok.has_bos();
  return tok.decode(tok.encode(text, spm_bos));
}

/// Bytes that do not survive encode/decode alone: Falcon's BPE vocabulary has
/// no token for 14 ASCII control characters nor for some bytes that only
/// lead UTF-8 sequences of unassigned planes (0xF2: U+80000..U+BFFFF), and
/// encode leaves them out (as llama.cpp and Hugging Face's BPE without an unk
/// token do), so a text holding one cannot round-trip.
std::string dropped_bytes(const Tokenizer& tok) {
  std::string out;
  for (int b = 0; b < 256; ++b) {
    const std::string s(1, static_cast<char>(b));
    if (round_trip(tok, s) != s) out += s;
  }
  return out;
}

std::vector<Vocab> make_vocabs() {
  std::vector<Vocab> out;
  const char* env = std::getenv("KVEVAL_FUZZ_VOCABS");
  std::string list = env ? env : "models/stories260K.gguf";
  for (size_t a = 0; a <= list.size();) {
    size_t b = list.find(':', a);
    if (b == std::string::npos) b = list.size();
    const std::string path = list.substr(a, b - a);
    a = b + 1;
    if (path.empty()) continue;
    try {
      gguf::File f(path);
      out.push_back({path, std::make_unique<Tokenizer>(Tokenizer::from_gguf(f)),
                     f.get_string_or("tokenizer.ggml.pre", "") == "qwen2"});
    } catch (const Error& e) {
      std::fprintf(stderr, "fuzz_tokenizer: skipping %s: %s\n", path.c_str(), e.what());
    }
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
  out.push_back({"synthetic", std::make_unique<Tokenizer>(tokens, scores, types, 1, 2, 0, true), false});
  for (auto& v : out) {
    v.dropped = dropped_bytes(*v.tok);
    std::fprintf(stderr, "fuzz_tokenizer: vocabulary %s (%s), %zu bytes without a token\n", v.name.c_str(),
                 v.tok->describe().c_str(), v.dropped.size());
  }
  return out;
}

void check_in_range(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  for (int32_t id : ids)
    if (id < 0 || id >= tok.n_vocab()) fuzz::property_failed("encode produced an id outside the vocabulary");
}

void check_text(const Vocab& v, std::string_view text) {
  const Tokenizer& tok = *v.tok;
  const auto ids = tok.encode(text, false);
  check_in_range(tok, ids);
  if (tok.has_bos()) {
    const auto with = tok.encode(text, true);
    if (with.empty() || with[0] != tok.bos() || std::vector<int32_t>(with.begin() + 1, with.end()) != ids)
      fuzz::property_failed("encode(text, true) is not BOS + encode(text, false)");
  }
  check_in_range(tok, tok.encode(text, false, true));
  const bool utf8 = fuzz::valid_utf8(text);
  // SentencePiece maps "▁" to a space; like llama.cpp it groups an invalid lead
  // byte with the bytes after it ("\xC6 " decodes as "\xC6▁"); qwen2 applies NFC.
  const bool spm = tok.kind() == TokenizerKind::Spm;
  // SentencePiece also puts the dummy space before the text after a matched
  // user-defined token (llama.cpp), so its round trip needs text without them.
  bool special_piece = false;
  for (int32_t id : ids) special_piece = special_piece || tok.type(id) == TokenType::UserDefined;
  const bool round_trip_ok = utf8 && !v.nfc && text.find_first_of(v.dropped) == std::string_view::npos &&
                          !(spm && (special_piece || text.find("\xE2\x96\x81") != std::string_view::npos));
  if (round_trip_ok && round_trip(tok, text) != text) fuzz::property_failed("decode(encode(text)) != text");
  IncrementalDetokenizer d(tok);
  std::string streamed;
  for (int32_t id : ids) streamed += d.push(id);
  streamed += d.flush();
  if (!fuzz::valid_utf8(streamed)) fuzz::property_failed("the incremental detokenizer emitted malformed UTF-8");
  if (utf8 && fuzz::valid_utf8(tok.decode(ids)) && streamed != tok.decode(ids))
    fuzz::property_failed("streamed text of well-formed input differs from decode");
}

void check_ids(const Tokenizer& tok, const uint8_t* data, size_t size) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i + 2 < size; i += 3)
    ids.push_back(static_cast<int32_t>((data[i] | (data[i + 1] << 8) | (data[i + 2] << 16)) % (tok.n_vocab() + 4)) - 2);
  bool in_range = true;
  for (int32_t id : ids) in_range = in_range && id >= 0 && id < tok.n_vocab();
  try {
    (void)tok.decode(ids);
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

const std::vector<Vocab>& vocabs() {
  static const auto v = make_vocabs();
  return v;
}

}  // namespace

// Loads the vocabularies before fuzzing starts (outside the per-input timeout).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  vocabs();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& vocabs = ::vocabs();
  if (size == 0) return 0;
  const Vocab& v = vocabs[data[0] % vocabs.size()];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    check_text(v, text);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s\n", v.name.c_str(), e.what());
    fuzz::property_failed("encode or decode threw on text (every byte has a token)");
  }
  check_ids(*v.tok, data + 1, size - 1);
  return 0;
}
