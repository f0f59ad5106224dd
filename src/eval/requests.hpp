#pragma once
// Turning rendered documents into model requests, with lm-evaluation-harness
// semantics (lm_eval/api/model.py `_encode_pair`, lm_eval/utils.py
// `get_rolling_token_windows` + `make_disjoint_window`), and the canonical
// order in which requests are batched.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "eval/spec.hpp"
#include "model/context.hpp"
#include "model/model.hpp"
#include "model/tokenizer.hpp"

namespace kveval::eval {

/// What the model is asked.
enum class RequestKind {
  Loglikelihood,  ///< log p(continuation | context); also one per multiple_choice choice
  RollingWindow,  ///< one window of a loglikelihood_rolling document
  Generate,       ///< generation (greedy or sampled) until a stop
  PerplexityChunk,  ///< one llama.cpp perplexity chunk of a rolling task (doc -1, index = chunk)
};
/// "loglikelihood", "loglikelihood_rolling", "generate_until", "perplexity_chunk".
const char* to_string(RequestKind k);

/// One request. `task`/`doc` index EvalSpec::tasks / TaskSpec::docs.
struct Request {
  int task = 0;
  int doc = 0;
  int index = -1;                     ///< choice index (multiple_choice), window index (rolling), repeat (generate_until with repeats > 1), else -1
  RequestKind kind = RequestKind::Loglikelihood;
  ScoreRequest score;                 ///< Loglikelihood/RollingWindow: tokens (BOS first) and first scored position
  std::vector<int32_t> prompt;        ///< Generate: prompt ids (BOS first), after truncation
  int max_gen_toks = 0;               ///< Generate
  std::vector<std::string> until;     ///< Generate: this request's own stop strings
  SamplingParams sampling;            ///< Generate: the task's decoding parameters
  int n_context_tokens = 0;           ///< tokens of the context incl. BOS (before truncation)
  int n_continuation_tokens = 0;      ///< tokens scored (Loglikelihood/RollingWindow)
  int truncated_tokens = 0;           ///< tokens dropped from the left to fit max_length
  std::string error;                  ///< non-empty: a per-request error; the request is not run
};

/// Context and continuation ids of one loglikelihood request.
struct EncodedPair {
  std::vector<int32_t> context;       ///< BOS + tokens of the context (after moving its trailing spaces)
  std::vector<int32_t> continuation;  ///< whole[context.size():], possibly empty
};

/// The token ids of a prompt text: tok.bos() followed by encode(text) with
/// special-token parsing off, or, for a chat-template rendering (`chat`), the
/// text with special tokens parsed (as Hugging Face tokenizers parse
/// `<|im_start|>` and the BOS text a template writes) and tok.bos() put first
/// only when the text does not already begin with that token's text: lm-eval's
/// HFLM.tok_encode, which since v0.4.10 skips the special tokens when the
/// string starts with the prefix token's text (has_bos_prefix), so a template
/// that writes {{ bos_token }} gets one BOS, not two.
std::vector<int32_t> encode_prompt(const Tokenizer& tok, std::string_view text, bool chat);

/// lm-eval's `_encode_pair`: trailing whitespace of `context` (Python's rstrip(),
/// Unicode: util/whitespace.hpp) moves to the start of
/// `continuation`; whole = encode(context + continuation, BOS); ctx =
/// encode(context, BOS); continuation = whole[len(ctx):]. An empty context
/// therefore gives ctx = [BOS] (lm-eval's prefix token). `chat`: both encoded
/// with encode_prompt's chat rule.
EncodedPair encode_pair(const Tokenizer& tok, std::string_view context, std::string_view continuation, bool chat = false);

/// The continuation of a loglikelihood request of `d` as lm-eval's
/// construct_requests builds it: for choice `index` (multiple_choice)
/// target_delimiter + the choice, for index -1 (loglikelihood) the target
/// after target_delimiter when the task keeps it (TaskSpec::loglikelihood_delimiter).
/// Under a chat template (TaskSpec::chat_template) no delimiter unless the
/// task's gen_prefix (the source as written, TaskSpec::gen_prefix) is not empty
/// and does not end in whitespace (lm-eval main's construct_requests,
/// ends_with_whitespace): the rendered prompt then ends with that prefix.
/// A multiple-input task (Doc::contexts non-empty, Winogrande style): target_delimiter + the target for
/// every index.
std::string continuation_of(const TaskSpec& t, const Doc& d, int index);
/// The context of request `index` of document `d`: d.contexts[index] for a multiple-input task, else d.context.
const std::string& context_of(const Doc& d, int index);

/// Rolling windows over `seq` (BOS first, never scored) for a model window of
/// `max_length` tokens (>= 2): every position 1..seq.size()-1 is scored exactly
/// once; the first window is seq[0, min(max_length, N)); each later window ends
/// `max_length - 1` positions further (or at N) and keeps as much left context
/// as fits (its length is max_length). Equivalent to lm-eval's
/// get_rolling_token_windows(context_len=1) + make_disjoint_window, where our
/// window includes the last predicted token. Empty for seq.size() < 2.
/// Throws ArgumentError for max_length < 2.
std::vector<ScoreRequest> rolling_windows(std::span<const int32_t> seq, int max_length);

/// llama.cpp's perplexity chunks (tools/perplexity/perplexity.cpp, perplexity()):
/// `seq` is the whole text's tokens (BOS first when the vocabulary adds one);
/// chunk k is seq[k*n_ctx, (k+1)*n_ctx) for k < seq.size() / n_ctx (a shorter
/// tail is dropped), its first token replaced by `bos` when given (llama.cpp
/// does so only when the vocabulary's add_bos is true; otherwise the chunk's
/// own first token stays), scored from position n_ctx/2 + 1 to the end (the logits at
/// positions first .. n_ctx-2, first = n_ctx/2, predict tokens first+1 .. n_ctx-1:
/// n_ctx - 1 - n_ctx/2 tokens per chunk). llama-perplexity refuses texts shorter
/// than 2 * n_ctx tokens; so does this: it returns no chunk then.
/// Throws ArgumentError for n_ctx < 4.
std::vector<ScoreRequest> llamacpp_chunks(std::span<const int32_t> seq, int n_ctx, std::optional<int32_t> bos);

/// Separator between the documents of a rolling task with rolling_method
/// "llama.cpp": they are joined into one text, as in one file given to
/// llama-perplexity -f (wikitext-2's test file separates articles by blank lines).
inline constexpr const char* kLlamaCppDocSeparator = "\n\n";

/// Builds every request of every task, in spec order: multiple_choice fans out
/// into one Loglikelihood request per choice (continuation = target_delimiter +
/// choice; a multiple-input task's: context = Doc::contexts[i], continuation =
/// target_delimiter + target), loglikelihood_rolling into windows, generate_until into one
/// Generate request per repeat (index = the repeat when repeats > 1); a rolling task with rolling_method "llama.cpp" adds its
/// PerplexityChunk requests (doc -1) after its documents' windows (which the
/// per-document samples report). Per-request errors
/// (zero-token continuation, empty rolling document, a continuation longer than
/// max_length - 1, a joined text shorter than 2 * context_length tokens) are
/// recorded in Request::error. Contexts too long for `max_length` are left-truncated
/// (BOS kept) and a warning is appended to `warnings`. Throws SpecError when a
/// task's max_gen_toks >= max_length or its context_length > max_length.
std::vector<Request> build_requests(const EvalSpec& spec, const Tokenizer& tok, int max_length,
                                    std::vector<std::string>* warnings);

/// Memory build_requests needs, planned from the rendered texts before any is
/// tokenized (bytes).
struct RequestsPlan {
  uint64_t token_ids = 0;  ///< the requests it keeps: token ids (at most one per text byte, plus BOS) and their records
  uint64_t tokenizer = 0;  ///< the largest single encode() call: kTokenizerBytesPerTextByte x its text
  uint64_t longest_text = 0;  ///< bytes of the longest text encoded in one call
};
/// Working memory of one Tokenizer::encode() call per byte of its text: the
/// SentencePiece path copies the text (spaces escaped to 3 bytes), keeps a
/// 24-byte symbol per character, a queue of candidate pairs and a map of the
/// merges made; measured at 48 bytes per byte (peak RSS of `kveval tokenize -f`
/// on 9.3 MB of English words with stories260K's vocabulary); 64 leaves a
/// margin. Byte-level BPE splits into words first and needs less.
inline constexpr uint64_t kTokenizerBytesPerTextByte = 64;
/// The plan of build_requests(spec, tok, max_length): every request's kept ids
/// bounded by its text (one id per byte at most, BOS added) and by max_length
/// after truncation (rolling windows: at most twice the document's ids), and
/// the largest encode() call. Never throws.
RequestsPlan plan_requests(const EvalSpec& spec, int max_length);

/// Indices of the runnable (error-free) requests of kind Loglikelihood or
/// RollingWindow, in canonical order: tokens desc, then task name, doc index,
/// request index. Independent of the order of tasks in the spec.
std::vector<size_t> canonical_score_order(const EvalSpec& spec, const std::vector<Request>& reqs);

/// Indices of the runnable Generate requests in canonical order: prompt
/// length + max_gen_toks desc, then task name, doc index, repeat.
std::vector<size_t> canonical_generate_order(const EvalSpec& spec, const std::vector<Request>& reqs);

}  // namespace kveval::eval
