// Pre-tokenizer regexes per `tokenizer.ggml.pre` (PCRE2, UTF + UCP mode) and
// NFC normalization (ICU). See tokenizer_pretok.hpp for the sources.
#include "model/tokenizer_pretok.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/utf8.h>

#include <array>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <new>

#include <fmt/format.h>

#include "util/error.hpp"

namespace kveval {

namespace {

// GPT-2 (llama.cpp LLAMA_VOCAB_PRE_TYPE_GPT2, also MPT and OLMo).
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";

// Llama 3 tokenizer.json (llama.cpp rewrites the (?i:...) group for std::regex).
constexpr const char* kLlama3 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2 tokenizer.json: as Llama 3 but one digit per word.
constexpr const char* kQwen2 =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// StarCoder, Refact, SmolLM: single digits first, then the GPT-2 expression.
constexpr const char* kDigit = R"(\p{N})";

// DeepSeek LLM: cased-letter ranges of its tokenizer.json, written as escapes.
constexpr const char* kDeepseekLlmLetters =
    R"(\s?[\x{41}-\x{5A}\x{61}-\x{7A}\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293})"
    R"(\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
    R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD})"
    R"(\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15})"
    R"(\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D})"
    R"(\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB})"
    R"(\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D})"
    R"(\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E})"
    R"(\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D})"
    R"(\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06})"
    R"(\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB})"
    R"(\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
constexpr const char* kDeepseekLlmPunct = R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
constexpr const char* kCjkHangul = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

struct Family {
  const char* name;                     // canonical tokenizer.ggml.pre value
  std::vector<const char*> aliases;     // other pre values with the same behaviour (llama.cpp's table)
  std::vector<const char*> regexes;
  bool ignore_merges = false;
  bool nfc = false;
};

const std::vector<Family>& families() {
  static const std::vector<Family> f = {
      {"default", {""},
       {R"([\p{P}\$\+<=>\^~\|]+)", R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))",
        R"(\p{N}+)", "[0-9][0-9][0-9]"}},
      {"gpt-2", {"phi-2", "olmo"}, {kGpt2}},
      {"mpt", {}, {kGpt2}},
      {"llama-bpe", {"llama3", "llama-v3"}, {kLlama3}, /*ignore_merges=*/true},
      {"qwen2", {"deepseek-r1-qwen"}, {kQwen2}, false, /*nfc=*/true},
      {"deepseek-llm", {}, {"[\r\n]", kDeepseekLlmLetters, kDeepseekLlmPunct, R"(\s+$)", kCjkHangul, R"(\p{N}+)"}},
      {"deepseek-coder", {}, {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjkHangul, R"(\p{N})"}},
      {"falcon", {}, {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}},
      {"starcoder", {"smollm"}, {kDigit, kGpt2}},
      {"refact", {}, {kDigit, kGpt2}},
  };
  return f;
}

/// Byte length of the (possibly invalid) UTF-8 sequence starting at s[i], at least 1.
size_t char_len(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  size_t n = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
  return std::min(n, s.size() - i);
}

}  // namespace

std::string pcre2_whitespace_pattern(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[i + 1];
      if (n == 's') out += in_class ? R"(\s\x{85})" : R"([\s\x{85}])";
      else if (n == 'S' && !in_class) out += R"([^\s\x{85}])";
      else if (n == 'S') throw Error("pre-tokenizer: \\S inside a character class is not supported");
      else out.append(p.substr(i, 2));
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a literal ']' first in the class
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const std::string& pre) {
  const Family* fam = nullptr;
  for (const Family& f : families()) {
    if (pre == f.name) fam = &f;
    for (const char* a : f.aliases)
      if (pre == a) fam = &f;
  }
  if (!fam)
    throw FormatError(fmt::format("pre-tokenizer '{}' is not supported (supported: {}) (key 'tokenizer.ggml.pre')", pre,
                                  supported()));
  name_ = fam->name;
  ignore_merges_ = fam->ignore_merges;
  nfc_ = fam->nfc;
  for (const char* rx : fam->regexes) {
    const std::string pat = pcre2_whitespace_pattern(rx);
    int err = 0;
    PCRE2_SIZE off = 0;
    auto r = std::make_unique<Regex>();
    r->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(),
                            PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY | PCRE2_MATCH_INVALID_UTF, &err, &off,
                            nullptr);
    if (!r->code) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      throw Error(fmt::format("pre-tokenizer '{}': regex /{}/ does not compile at offset {}: {}", name_, pat, off,
                              reinterpret_cast<const char*>(msg)));
    }
    pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE);  // optional: the interpreter runs when JIT is unavailable
    regexes_.push_back(std::move(r));
  }
}

PreTokenizer::~PreTokenizer() = default;

std::string PreTokenizer::supported() {
  std::string s;
  for (const Family& f : families()) {
    if (!s.empty()) s += ", ";
    s += f.name;
    for (const char* a : f.aliases)
      if (*a) s += fmt::format(", {}", a);
  }
  return s;
}

std::vector<std::string_view> PreTokenizer::split(std::string_view text) const {
  std::vector<std::string_view> pieces;
  if (text.empty()) return pieces;
  pieces.push_back(text);
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(pcre2_match_data_create(1, nullptr),
                                                                          &pcre2_match_data_free);
  if (!md) throw std::bad_alloc();
  std::vector<std::string_view> next;
  for (const auto& rx : regexes_) {
    next.clear();
    next.reserve(pieces.size() * 2);
    for (std::string_view piece : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(piece.data());
      size_t pos = 0, emitted = 0;  // search start; end of the last emitted piece
      while (pos <= piece.size()) {
        const int rc = pcre2_match(rx->code, subject, piece.size(), pos, 0, md.get(), nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR msg[256];
          pcre2_get_error_message(rc, msg, sizeof msg);
          throw Error(fmt::format("pre-tokenizer '{}': match failed: {}", name_, reinterpret_cast<const char*>(msg)));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        const size_t b = ov[0], e = ov[1];
        if (e == b) {  // empty match: no piece; move on by one character
          if (b >= piece.size()) break;
          pos = b + char_len(piece, b);
          continue;
        }
        if (b > emitted) next.push_back(piece.substr(emitted, b - emitted));
        next.push_back(piece.substr(b, e - b));
        emitted = pos = e;
      }
      if (emitted < piece.size()) next.push_back(piece.substr(emitted));
    }
    pieces.swap(next);
  }
  return pieces;
}

namespace {

/// End of the longest well-formed UTF-8 run of `text` starting at `i` (ICU's
/// U8_NEXT: no overlong forms, surrogates or code points above U+10FFFF).
size_t utf8_run_end(std::string_view text, size_t i) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const auto n = static_cast<int64_t>(text.size());
  auto j = static_cast<int64_t>(i);
  while (j < n) {
    int64_t k = j;
    UChar32 c;
    U8_NEXT(s, k, n, c);
    if (c < 0) break;
    j = k;
  }
  return static_cast<size_t>(j);
}

}  // namespace

std::string nfc_normalize(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  if (U_FAILURE(status)) throw Error(fmt::format("NFC normalization is unavailable (ICU: {})", u_errorName(status)));
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const size_t j = utf8_run_end(text, i);
    if (j == i) {
      out += text[i++];  // an invalid byte: kept as is
      continue;
    }
    if (j - i > static_cast<size_t>(INT32_MAX))
      throw Error(fmt::format("NFC normalization: a text run of {} bytes is longer than ICU's 2 GiB limit", j - i));
    icu::StringByteSink<std::string> sink(&out);
    nfc->normalizeUTF8(0, icu::StringPiece(text.data() + i, static_cast<int32_t>(j - i)), sink, nullptr, status);
    if (status == U_MEMORY_ALLOCATION_ERROR) throw std::bad_alloc();
    if (U_FAILURE(status)) throw Error(fmt::format("NFC normalization failed (ICU: {})", u_errorName(status)));
    i = j;
  }
  return out;
}

}  // namespace kveval
