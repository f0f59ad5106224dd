#include "eval/requests.hpp"

#include <algorithm>
#include <tuple>

#include <fmt/format.h>

#include "eval/chat_context.hpp"
#include "util/error.hpp"
#include "util/number_format.hpp"
#include "util/whitespace.hpp"

namespace kveval::eval {

const char* to_string(RequestKind k) {
  switch (k) {
    case RequestKind::Loglikelihood: return "loglikelihood";
    case RequestKind::RollingWindow: return "loglikelihood_rolling";
    case RequestKind::Generate: return "generate_until";
    case RequestKind::PerplexityChunk: return "perplexity_chunk";
  }
  return "?";
}

std::vector<int32_t> encode_prompt(const Tokenizer& tok, std::string_view text, bool chat) {
  if (!chat) return tok.encode(text, true);
  const std::string& bos_text = tok.piece(tok.bos());
  return tok.encode(text, bos_text.empty() || !text.starts_with(bos_text), true);
}

const std::string& context_of(const Doc& d, int index) {
  return index >= 0 && static_cast<size_t>(index) < d.contexts.size() ? d.contexts[static_cast<size_t>(index)] : d.context;
}

std::string continuation_of(const TaskSpec& t, const Doc& d, int index) {
  // lm-eval main's construct_requests: under a chat template target_delimiter stays only after a gen_prefix
  // (the task's, as written) that does not end in whitespace
  const bool keep = !t.chat_template || (t.gen_prefix && !t.gen_prefix->empty() && !ends_with_whitespace(*t.gen_prefix));
  const std::string delim = keep ? t.target_delimiter : std::string();
  if (index >= 0 && !d.contexts.empty()) return delim + d.target;  // multiple input: the contexts differ
  if (index >= 0) return delim + d.choices.at(static_cast<size_t>(index));
  return (t.loglikelihood_delimiter ? delim : std::string()) + d.target;
}

EncodedPair encode_pair(const Tokenizer& tok, std::string_view context, std::string_view continuation, bool chat) {
  // lm-eval: n_spaces = len(context) - len(context.rstrip()); Python's
  // whitespace (util/whitespace.hpp), so a trailing U+00A0 moves too.
  const std::string_view kept = util::rstrip(context);
  std::string ctx(kept);
  std::string cont = std::string(context.substr(kept.size())) + std::string(continuation);
  EncodedPair p;
  std::vector<int32_t> whole = encode_prompt(tok, ctx + cont, chat);
  p.context = encode_prompt(tok, ctx, chat);
  if (whole.size() > p.context.size()) p.continuation.assign(whole.begin() + static_cast<long>(p.context.size()), whole.end());
  return p;
}

std::vector<ScoreRequest> rolling_windows(std::span<const int32_t> seq, int max_length) {
  if (max_length < 2) throw ArgumentError(fmt::format("rolling windows need max_length >= 2, got {}", max_length));
  std::vector<ScoreRequest> out;
  const size_t n = seq.size(), w = static_cast<size_t>(max_length);
  if (n < 2) return out;
  size_t first = std::min(w, n);
  out.push_back({std::vector<int32_t>(seq.begin(), seq.begin() + static_cast<long>(first)), 1});
  size_t predicted = first;  // positions [1, predicted) are scored
  while (predicted < n) {
    size_t end = std::min(n, predicted + (w - 1));
    size_t start = end >= w ? end - w : 0;
    ScoreRequest r;
    r.tokens.assign(seq.begin() + static_cast<long>(start), seq.begin() + static_cast<long>(end));
    r.score_from = static_cast<int>(predicted - start);
    out.push_back(std::move(r));
    predicted = end;
  }
  return out;
}

std::vector<ScoreRequest> llamacpp_chunks(std::span<const int32_t> seq, int n_ctx, std::optional<int32_t> bos) {
  if (n_ctx < 4) throw ArgumentError(fmt::format("llama.cpp perplexity chunks need context_length >= 4, got {}", n_ctx));
  std::vector<ScoreRequest> out;
  const size_t n = static_cast<size_t>(n_ctx);
  if (seq.size() < 2 * n) return out;
  const int first = n_ctx / 2;
  for (size_t k = 0; k < seq.size() / n; ++k) {
    ScoreRequest r;
    r.tokens.assign(seq.begin() + static_cast<long>(k * n), seq.begin() + static_cast<long>((k + 1) * n));
    if (bos) r.tokens[0] = *bos;
    r.score_from = first + 1;
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

/// The PerplexityChunk requests of rolling task `ti` (rolling_method "llama.cpp").
void add_llamacpp_chunks(const EvalSpec& spec, size_t ti, const Tokenizer& tok, int max_length, std::vector<Request>& out) {
  const TaskSpec& t = spec.tasks[ti];
  if (t.context_length > max_length)
    throw SpecError(fmt::format("{}: tasks[{}].context_length: {} tokens per chunk do not fit max_length {}", spec.path,
                                ti, t.context_length, max_length));
  std::string text;
  for (size_t di = 0; di < t.docs.size(); ++di) text += (di ? kLlamaCppDocSeparator : "") + t.docs[di].target;
  // llama-perplexity: BOS first and in each chunk's first position only when the vocabulary adds one
  const std::vector<int32_t> seq = tok.encode(text, tok.add_bos());
  const std::optional<int32_t> bos = tok.add_bos() ? std::optional<int32_t>(tok.bos()) : std::nullopt;
  std::vector<ScoreRequest> chunks = llamacpp_chunks(seq, t.context_length, bos);
  const int first = t.context_length / 2;
  if (chunks.empty()) {
    Request r;
    r.task = static_cast<int>(ti);
    r.doc = -1;
    r.index = 0;
    r.kind = RequestKind::PerplexityChunk;
    r.error = fmt::format("task {}: llama.cpp perplexity needs at least 2 x context_length = {} tokens; {} "
                          "from {} joined",
                          t.name, 2 * t.context_length, count_of(seq.size(), "token"), count_of(t.docs.size(), "document"));
    out.push_back(std::move(r));
  }
  for (size_t k = 0; k < chunks.size(); ++k) {
    Request r;
    r.task = static_cast<int>(ti);
    r.doc = -1;
    r.index = static_cast<int>(k);
    r.kind = RequestKind::PerplexityChunk;
    r.n_context_tokens = first + 1;
    r.n_continuation_tokens = t.context_length - first - 1;
    r.score = std::move(chunks[k]);
    out.push_back(std::move(r));
  }
}

/// A request of document `di` of task `ti`.
Request doc_request(size_t ti, size_t di, RequestKind kind) {
  Request r;
  r.task = static_cast<int>(ti);
  r.doc = static_cast<int>(di);
  r.kind = kind;
  return r;
}

/// The Loglikelihood request of context_of(d, index) and continuation_of(t, d, index)
/// (choice `index`, -1 for a loglikelihood task): lm-eval's encode_pair,
/// left-truncated to `max_length` (BOS kept, counted in `n_truncated`);
/// a per-request error for a zero-token or too long continuation.
Request loglikelihood_request(const Tokenizer& tok, const TaskSpec& t, const Doc& d, size_t ti, size_t di, int index,
                              int max_length, int& n_truncated) {
  Request r = doc_request(ti, di, RequestKind::Loglikelihood);
  r.index = index;
  const std::string cont = continuation_of(t, d, index);
  EncodedPair p = encode_pair(tok, context_of(d, index), cont, t.chat_template);
  r.n_context_tokens = static_cast<int>(p.context.size());
  r.n_continuation_tokens = static_cast<int>(p.continuation.size());
  // a multiple-choice document has one request per choice: name it
  const std::string which = index >= 0 ? fmt::format(" choice {}:", index) : std::string();
  if (p.continuation.empty()) {
    r.error = fmt::format("{}:{} continuation \"{}\" has zero tokens after the context/continuation split", d.origin,
                          which, cont);
  } else if (p.continuation.size() > static_cast<size_t>(max_length - 1)) {
    r.error = fmt::format("{}:{} continuation of {} tokens does not fit max_length {}", d.origin, which,
                          p.continuation.size(), max_length);
  } else {
    std::vector<int32_t> all = std::move(p.context);
    all.insert(all.end(), p.continuation.begin(), p.continuation.end());
    if (all.size() > static_cast<size_t>(max_length)) {
      size_t drop = all.size() - static_cast<size_t>(max_length);
      all.erase(all.begin() + 1, all.begin() + 1 + static_cast<long>(drop));  // keep BOS
      all.shrink_to_fit();  // what is kept is max_length ids, as plan_requests counts
      r.truncated_tokens = static_cast<int>(drop);
      ++n_truncated;
    }
    r.score.score_from = static_cast<int>(all.size() - r.n_continuation_tokens);
    r.score.tokens = std::move(all);
  }
  return r;
}

/// The RollingWindow requests of document `d` (a per-request error when it has no token to score).
void add_rolling_requests(const Tokenizer& tok, const Doc& d, size_t ti, size_t di, int max_length,
                          std::vector<Request>& out) {
  std::vector<int32_t> seq = tok.encode(d.target, true);
  auto wins = rolling_windows(seq, max_length);
  if (wins.empty()) {
    Request r = doc_request(ti, di, RequestKind::RollingWindow);
    r.index = 0;
    r.error = fmt::format("{}: empty document: no tokens to score", d.origin);
    out.push_back(std::move(r));
  }
  for (size_t k = 0; k < wins.size(); ++k) {
    Request r = doc_request(ti, di, RequestKind::RollingWindow);
    r.index = static_cast<int>(k);
    r.n_context_tokens = wins[k].score_from;
    r.n_continuation_tokens = static_cast<int>(wins[k].tokens.size()) - wins[k].score_from;
    r.score = std::move(wins[k]);
    out.push_back(std::move(r));
  }
}

/// The Generate request of document `d`: its prompt left-truncated so that
/// max_gen_toks fit `max_length` (BOS kept, counted in `n_truncated`).
Request generate_request(const Tokenizer& tok, const TaskSpec& t, const Doc& d, size_t ti, size_t di, int max_length,
                         int& n_truncated) {
  Request r = doc_request(ti, di, RequestKind::Generate);
  r.max_gen_toks = t.generation_kwargs.max_gen_toks;
  r.until = t.generation_kwargs.until;
  r.sampling = t.generation_kwargs.sampling;
  r.prompt = encode_prompt(tok, d.context, t.chat_template);
  r.n_context_tokens = static_cast<int>(r.prompt.size());
  size_t room = static_cast<size_t>(max_length - r.max_gen_toks);  // >= 1
  if (r.prompt.size() > room) {
    size_t drop = r.prompt.size() - room;
    r.prompt.erase(r.prompt.begin() + 1, r.prompt.begin() + 1 + static_cast<long>(drop));  // keep BOS
    r.prompt.shrink_to_fit();
    r.truncated_tokens = static_cast<int>(drop);
    ++n_truncated;
  }
  return r;
}

/// The requests of document `di` of task `ti`, by output type; a text the
/// tokenizer cannot encode is a FormatError naming the document.
void add_doc_requests(const EvalSpec& spec, size_t ti, size_t di, const Tokenizer& tok, int max_length,
                      std::vector<Request>& out, int& n_truncated) {
  const TaskSpec& t = spec.tasks[ti];
  const Doc& d = t.docs[di];
  try {
    switch (t.output_type) {
      case OutputType::Loglikelihood:
        out.push_back(loglikelihood_request(tok, t, d, ti, di, -1, max_length, n_truncated));
        break;
      case OutputType::MultipleChoice:
        for (size_t c = 0; c < d.choices.size(); ++c)
          out.push_back(loglikelihood_request(tok, t, d, ti, di, static_cast<int>(c), max_length, n_truncated));
        break;
      case OutputType::LoglikelihoodRolling:
        add_rolling_requests(tok, d, ti, di, max_length, out);
        break;
      case OutputType::GenerateUntil: {
        Request r = generate_request(tok, t, d, ti, di, max_length, n_truncated);
        for (int k = 0; k < t.repeats; ++k) {
          out.push_back(r);
          if (t.repeats > 1) out.back().index = k;
        }
        break;
      }
    }
  } catch (const FormatError& e) {
    throw FormatError(fmt::format("{}: {}", d.origin, e.what()));
  }
}

}  // namespace

std::vector<Request> build_requests(const EvalSpec& spec, const Tokenizer& tok, int max_length,
                                    std::vector<std::string>* warnings) {
  std::vector<Request> out;
  for (size_t ti = 0; ti < spec.tasks.size(); ++ti) {
    const TaskSpec& t = spec.tasks[ti];
    int n_truncated = 0;
    if (t.output_type == OutputType::GenerateUntil && t.generation_kwargs.max_gen_toks >= max_length)
      throw SpecError(fmt::format("{}: tasks[{}].generation_kwargs.max_gen_toks: {} tokens do not fit max_length {} "
                                  "(the prompt needs at least BOS)",
                                  spec.path, ti, t.generation_kwargs.max_gen_toks, max_length));
    for (size_t di = 0; di < t.docs.size(); ++di) add_doc_requests(spec, ti, di, tok, max_length, out, n_truncated);
    if (t.output_type == OutputType::LoglikelihoodRolling && t.rolling_method == RollingMethod::LlamaCpp)
      add_llamacpp_chunks(spec, ti, tok, max_length, out);
    if (n_truncated > 0 && warnings)
      warnings->push_back(fmt::format("task {}: {} left-truncated to fit max_length {} (BOS kept)", t.name,
                                      count_of(n_truncated, "request"), max_length));
  }
  return out;
}

RequestsPlan plan_requests(const EvalSpec& spec, int max_length) {
  RequestsPlan p;
  const uint64_t cap = static_cast<uint64_t>(std::max(max_length, 1));
  auto encode = [&](uint64_t text_bytes) {  // one encode() call; returns the most ids it can give
    p.longest_text = std::max(p.longest_text, text_bytes);
    return text_bytes + 2;  // BOS, and SentencePiece's space prefix
  };
  auto keep = [&](uint64_t ids) { p.token_ids += ids * sizeof(int32_t) + sizeof(Request); };
  for (const TaskSpec& t : spec.tasks) {
    uint64_t joined = 0;
    for (const Doc& d : t.docs) {
      switch (t.output_type) {
        case OutputType::Loglikelihood: {
          const uint64_t n = d.context.size() + t.target_delimiter.size() + d.target.size();
          keep(std::min(encode(n), cap));  // encode_pair: context + continuation, then the context alone
          break;
        }
        case OutputType::MultipleChoice:
          for (size_t c = 0; c < d.choices.size(); ++c)
            keep(std::min(encode(d.contexts.empty() ? d.context.size() + t.target_delimiter.size() + d.choices[c].size()
                                                    : d.contexts[c].size() + t.target_delimiter.size() + d.target.size()),
                          cap));
          break;
        case OutputType::LoglikelihoodRolling:
          keep(2 * encode(d.target.size()));  // windows overlap: max_length / (max_length - 1) times the ids, at most 2
          joined += d.target.size() + 2;      // kLlamaCppDocSeparator
          break;
        case OutputType::GenerateUntil:
          for (int k = 0; k < t.repeats; ++k) keep(std::min(encode(d.context.size()), cap));
          break;
      }
    }
    if (t.output_type == OutputType::LoglikelihoodRolling && t.rolling_method == RollingMethod::LlamaCpp)
      keep(encode(joined));
  }
  p.tokenizer = p.longest_text * kTokenizerBytesPerTextByte;
  return p;
}

std::vector<size_t> canonical_score_order(const EvalSpec& spec, const std::vector<Request>& reqs) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < reqs.size(); ++i)
    if (reqs[i].error.empty() && reqs[i].kind != RequestKind::Generate) idx.push_back(i);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    const Request &x = reqs[a], &y = reqs[b];
    return std::make_tuple(-static_cast<long>(x.score.tokens.size()), std::cref(spec.tasks[x.task].name), x.doc, x.index) <
           std::make_tuple(-static_cast<long>(y.score.tokens.size()), std::cref(spec.tasks[y.task].name), y.doc, y.index);
  });
  return idx;
}

std::vector<size_t> canonical_generate_order(const EvalSpec& spec, const std::vector<Request>& reqs) {
  std::vector<size_t> idx;
  for (size_t i = 0; i < reqs.size(); ++i)
    if (reqs[i].error.empty() && reqs[i].kind == RequestKind::Generate) idx.push_back(i);
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    const Request &x = reqs[a], &y = reqs[b];
    long lx = static_cast<long>(x.prompt.size()) + x.max_gen_toks, ly = static_cast<long>(y.prompt.size()) + y.max_gen_toks;
    return std::make_tuple(-lx, std::cref(spec.tasks[x.task].name), x.doc, x.index) <
           std::make_tuple(-ly, std::cref(spec.tasks[y.task].name), y.doc, y.index);
  });
  return idx;
}

}  // namespace kveval::eval
