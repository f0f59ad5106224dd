#pragma once
// The evaluation spec (`kveval run spec.json`): a JSON file naming a model and
// a list of tasks in lm-evaluation-harness terms (output_type, doc_to_text,
// doc_to_target, doc_to_choice, target_delimiter, generation_kwargs,
// metric_list, num_fewshot). Loading validates the whole spec and renders
// every document of every data file, so that all input errors surface before
// the model is loaded. Every error is a kveval::SpecError with one line naming
// the file and the JSON path (`spec.json: tasks[2].generation_kwargs.until[0]: ...`)
// or the JSONL line (`data.jsonl:17: ...`).
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/group_spec.hpp"  // GroupSpec
#include "eval/json_input.hpp"  // parse_json_text, read_jsonl, closest (declared there)
#include "eval/mapping.hpp"     // resolve_mapping
#include "model/model.hpp"      // ComputeDtype
#include "model/sampling.hpp"   // SamplingParams

namespace kveval::eval {

struct TaskHooks;     // eval/task_hooks.hpp
struct ChatTemplate;  // eval/chat_template.hpp
struct PythonHook;    // eval/python_hooks.hpp

/// The four request kinds of lm-evaluation-harness (lm_eval/api/task.py OUTPUT_TYPES).
enum class OutputType { Loglikelihood, MultipleChoice, LoglikelihoodRolling, GenerateUntil };
/// "loglikelihood", "multiple_choice", "loglikelihood_rolling", "generate_until".
const char* to_string(OutputType t);

/// `generation_kwargs` of a generate_until task.
struct GenerationKwargs {
  std::vector<std::string> until;  ///< stop strings; output is cut before the first one found
  int max_gen_toks = 256;          ///< tokens generated at most (lm-eval default 256); 0 is allowed
  /// do_sample, temperature, top_k, top_p, min_p, seed (HF's defaults: greedy
  /// unless do_sample; seed defaults to the spec's `seed`).
  SamplingParams sampling;
};

/// One document after rendering the task's doc_to_* mappings.
struct Doc {
  std::string origin;                ///< "data.jsonl:17" or "spec.json: tasks[0].docs[3]" (for messages)
  std::string context;               ///< description + few-shot examples + doc_to_text
  std::string target;                ///< doc_to_target as text ("" when the task has none)
  bool has_target = false;           ///< doc_to_target was given
  std::vector<std::string> choices;  ///< multiple_choice: doc_to_choice
  nlohmann::json raw;                ///< the document as read (for the samples file)
  /// its JSON text as read (a JSONL line, a Hub row; "" when not known): the samples' `doc` keeps its key order
  std::string raw_text;
  nlohmann::json target_value;       ///< doc_to_target's value as lm-eval returns it (int, str or list; samples' `target`)
  int gold = -1;                     ///< multiple_choice: index of the gold choice (the first of `golds`)
  /// generate_until whose doc_to_target is a list: every reference answer (lm-eval's
  /// multiple_target; `target` is the first); empty for one answer.
  std::vector<std::string> targets;
  /// multiple_choice whose doc_to_target is a list of indices (AGIEval): every gold
  /// index, in order; empty for one gold index.
  std::vector<int> golds;
  /// A multiple-input task (TaskSpec::multiple_input): one whole context per choice
  /// (`context` + choices[i]); each request scores target_delimiter + target after it.
  std::vector<std::string> contexts;
};

/// exact_match options of lm-eval's metric_list entry (lm_eval/api/metrics.py
/// exact_match_hf_evaluate): applied in this order to prediction and reference.
struct ExactMatchOptions {
  std::vector<std::string> regexes_to_ignore;  ///< each removed with re.sub(pattern, "", text)
  bool ignore_case = false;                    ///< str.lower()
  bool ignore_punctuation = false;             ///< remove string.punctuation (ASCII)
};

/// One step of an lm-eval filter pipeline on generated text (lm_eval/filters/).
struct FilterStep {
  /// "regex", "take_first", "take_first_k", "majority_vote", "lowercase", "uppercase", "remove_whitespace"
  std::string function;
  std::string regex_pattern = "#### (\\-?[0-9\\.\\,]+)";  ///< regex: lm-eval's default (GSM8K answer)
  int group_select = 0;              ///< regex: which findall() match (Python index; negative from the end)
  std::string fallback = "[invalid]";  ///< regex: the output when nothing matches
  int k = 0;                         ///< take_first_k: responses kept
  /// A custom filter (`function: !function m.Class`, or lm-eval's `custom` with `filter_fn`):
  /// its Python hook (task_hooks.hpp run_filter_hook); null for the built-in functions.
  std::shared_ptr<const PythonHook> hook = nullptr;
  nlohmann::json kwargs = nullptr;   ///< custom filter class: the step's other keys, its keyword arguments
};

/// A named filter pipeline (`filter_list` entry); metrics are reported per pipeline.
struct FilterPipeline {
  std::string name;
  std::vector<FilterStep> steps;
};

/// How a loglikelihood_rolling task scores its text.
/// - LmEval: each document on its own, every token once with as much left
///   context as fits max_length (lm-eval's rolling windows).
/// - LlamaCpp: additionally, the documents joined by "\n\n" are tokenized once
///   and scored as llama.cpp's `llama-perplexity` does
///   (tools/perplexity/perplexity.cpp perplexity()): chunks of context_length
///   tokens, only the second half of each chunk scored; when the vocabulary
///   adds BOS (tokenizer.ggml.add_bos_token or llama.cpp's default for the
///   tokenizer), the text starts with BOS and each chunk's first token is
///   replaced by BOS, otherwise neither; reported as metric `perplexity_llamacpp`.
enum class RollingMethod { LmEval, LlamaCpp };

/// One task of the spec, validated, with its documents rendered.
struct TaskSpec {
  std::string name;
  std::string task_alias;            ///< lm-eval's task_alias: the name tables and results' `alias` show ("" = name)
  OutputType output_type = OutputType::Loglikelihood;
  std::string dataset_path;          ///< resolved path of the (first) data file ("" for inline docs)
  std::vector<std::string> dataset_files;  ///< every data file of the documents, read in this order (empty for inline docs)
  std::string doc_to_text;           ///< field name or `{{field}}` template ("" = none)
  std::string doc_to_target;         ///< field name or template ("" = none)
  nlohmann::json doc_to_choice;      ///< field name / template string, or array of templates (null = none)
  std::string target_delimiter = " ";
  std::string description;           ///< template rendered per document, prepended to its context
  GenerationKwargs generation_kwargs;
  int repeats = 1;                   ///< lm-eval's repeats: generations per document (generate_until), >= 1
  std::vector<std::string> metric_list;  ///< resolved: defaults to default_metrics_for(output_type)
  int num_fewshot = 0;
  std::string fewshot_split;         ///< resolved path of the (first) file of few-shot examples ("" = the task's own docs)
  std::vector<std::string> fewshot_files;  ///< every file of the few-shot examples, in order (empty: see fewshot_split)
  std::string fewshot_delimiter = "\n\n";
  /// lm-eval's multiple_input (Winogrande): a multiple_choice task whose doc_to_text gives an
  /// int for its first document. doc_to_choice then gives the contexts, doc_to_text the gold
  /// index and doc_to_target the continuation scored after every context (Doc::contexts).
  bool multiple_input = false;
  std::string fewshot_sampler = "default";  ///< fewshot_config.sampler: "default" (seeded sample) or "first_n"
  /// fewshot_config.samples: inline few-shot documents (a JSON array of objects; null = none),
  /// used when there is no fewshot_split.
  nlohmann::json fewshot_samples;
  /// fewshot_config.doc_to_text / doc_to_target / doc_to_choice: the mappings of the
  /// few-shot examples ("" / null = the task's own).
  std::string fewshot_doc_to_text, fewshot_doc_to_target;
  nlohmann::json fewshot_doc_to_choice;
  /// fewshot_config.target_delimiter / fewshot_delimiter: the delimiters of the few-shot
  /// examples (lm-eval's FewshotConfig, lm_eval/config/task.py; nullopt = the task's own).
  /// The document's own target_delimiter, the description's and `until`'s fewshot_delimiter
  /// stay the task's.
  std::optional<std::string> fewshot_target_delimiter, fewshot_fewshot_delimiter;
  /// lm-eval's self-exclusion rule: true when fewshot_split == test_split by name (None ==
  /// None included): draw num_fewshot + 1 examples; false: draw num_fewshot. Either way
  /// a drawn example equal to the document is dropped. Unset (JSON specs): true exactly
  /// when the examples are the task's own documents.
  std::optional<bool> fewshot_same_split;
  /// gen_prefix: a field name or template rendered per document; the context ends with
  /// it (after target_delimiter when requires_delimiter holds: question_turn), and each
  /// few-shot example carries its own document's prefix (fewshot_turn, chat_context.hpp).
  std::optional<std::string> gen_prefix;
  /// fewshot_config.gen_prefix: the few-shot examples' prefix in place of gen_prefix
  /// (lm-eval main's FewshotConfig); nullopt = the task's gen_prefix, "" (also for null) = none.
  std::optional<std::string> fewshot_gen_prefix;
  ExactMatchOptions exact_match;     ///< options of the exact_match entry of metric_list
  std::vector<FilterPipeline> filter_list;  ///< generate_until: filters on the output (empty = lm-eval's "none")
  std::optional<double> version;     ///< metadata.version (lm-eval task version), when given
  std::string source;                ///< lm-eval YAML file the task came from ("" for JSON specs)
  /// The YAML's `!function` hooks (task_hooks.hpp); null when it has none.
  std::shared_ptr<const TaskHooks> hooks;
  /// loglikelihood: the continuation is target_delimiter + target (kveval JSON specs), or the
  /// target alone (false; lm-eval's construct_requests, used for lm-eval YAML tasks).
  bool loglikelihood_delimiter = true;
  /// The contexts are chat-template renderings (EvalSpec::chat): no target_delimiter before a
  /// continuation, special tokens parsed (continuation_of, encode_prompt in requests.hpp).
  bool chat_template = false;
  std::optional<int> limit;          ///< task-level limit (overrides the spec's)
  RollingMethod rolling_method = RollingMethod::LmEval;  ///< `rolling_method`: "lm-eval" or "llama.cpp"
  int context_length = 0;            ///< `context_length` (tokens per llama.cpp chunk, >= 4); 0 unless LlamaCpp
  int n_docs_total = 0;              ///< documents in the data before `limit`
  std::vector<Doc> docs;             ///< rendered documents (after `limit`)
};

/// lm-eval's chat options of a run (its --apply_chat_template, --system_instruction,
/// --fewshot_as_multiturn; spec keys of the same names). chat_context.hpp builds the prompts.
struct ChatOptions {
  bool apply = false;                            ///< apply_chat_template: contexts rendered as chats
  std::string name;                              ///< its value: "" (the model's template), a template name or a file
  std::optional<std::string> system_instruction; ///< system_instruction (also without a chat template)
  bool fewshot_as_multiturn = false;             ///< few-shot examples as user/assistant turns (needs apply)
  std::shared_ptr<const ChatTemplate> tpl;       ///< the template applied (set when `apply`)
  std::string bos_token, eos_token;              ///< the template's bos_token / eos_token: the GGUF vocabulary's texts
};

/// The largest batch_size a spec or `run --batch-size` accepts.
inline constexpr int kMaxBatchSize = 4096;

/// A validated spec.
struct EvalSpec {
  std::string path;                  ///< the spec file as given ("" for in-memory specs)
  std::string model;                 ///< model path, resolved relative to the spec's directory
  int threads = 0;                   ///< compute threads; 0 = all cores
  ComputeDtype dtype = ComputeDtype::Auto;  ///< compute dtype ("dtype": f32, bf16, q8_0, q4_0, blocks, blocks-bf16, auto)
  KvCacheDtype kv_cache_dtype = KvCacheDtype::Auto;  ///< "kv_cache_dtype": f32, bf16, f16, auto (bf16 for a bf16 compute dtype)
  MatmulMode matmul = MatmulMode::Exact;  ///< run's --matmul: how decode steps on kept blocks multiply
  bool map_weights = false;  ///< "mmap" (run's --mmap): file-block matrices read in place (ModelOptions::map_weights)
  int batch_size = 1;                ///< rows per forward pass / per generation batch
  /// "auto": the run picks the largest batch_size (at most kAutoBatchMax) its memory plan allows.
  bool batch_size_auto = false;
  std::optional<int> max_length;     ///< context window in tokens; default: the model's context_length
  uint64_t seed = 1234;              ///< few-shot sampling seed (lm-eval's default fewshot seed)
  /// lm-eval's python random, numpy and torch seeds (--seed; nullopt = None): recorded in the
  /// results' config only, nothing in kveval draws from them.
  std::optional<int64_t> random_seed = 0, numpy_seed = 1234, torch_seed = 1234;
  int bootstrap_iters = 100000;      ///< lm-eval's bootstrap_iters (stderr of perplexity; 0: no stderr at all)
  std::optional<int> limit;          ///< documents per task at most
  std::optional<double> limit_fraction;  ///< --limit in (0, 1): that share of each task's documents (lm-eval's limit < 1)
  /// --gen-kwargs: an object merged into every generate_until task's
  /// generation_kwargs (lm-eval's gen_kwargs; null = none).
  nlohmann::json gen_kwargs;
  ChatOptions chat;                  ///< apply_chat_template, system_instruction, fewshot_as_multiturn
  std::vector<TaskSpec> tasks;
  /// The groups named by the spec or --tasks (each once; parents before their
  /// nested groups); their member tasks are in `tasks`.
  std::vector<GroupSpec> groups;
  /// Notes to print once: a name used that stands for a task or group and a tag (TaskTree::notes).
  std::vector<std::string> notes;
  nlohmann::json raw;                ///< the spec as parsed (for the results file)
  /// Keys the command line set, each with the option that set it ("max_length" ->
  /// "--max-length", "num_fewshot" -> "--num-fewshot" for every task): a message about
  /// such a value names the option, not the spec's key (value_origin, task_key_where).
  std::map<std::string, std::string> set_by;
};

/// The prefix of a message about the value of the spec's top-level `key`: the
/// option that set it ("--max-length") when the command line did, else
/// "<spec path>: <key>" ("spec.json: max_length").
std::string value_origin(const EvalSpec& s, const std::string& key);

/// Metrics an output type can report (lm-eval names), in report order.
const std::vector<std::string>& metrics_for(OutputType t);
/// Metrics reported when a task has no metric_list: lm-eval's defaults
/// (lm_eval/api/task.py): loglikelihood perplexity, acc; multiple_choice acc,
/// acc_norm; loglikelihood_rolling word_perplexity, byte_perplexity,
/// bits_per_byte; generate_until exact_match. (acc_bytes and token_perplexity
/// only when listed.)
const std::vector<std::string>& default_metrics_for(OutputType t);
/// The metric of rolling_method "llama.cpp": llama-perplexity's chunked perplexity.
inline constexpr const char* kPerplexityLlamaCpp = "perplexity_llamacpp";

/// Command-line settings that reach into every task of a spec (`kveval run`).
struct TaskOverrides {
  std::optional<int> num_fewshot;          ///< --num-fewshot: set on every task (EvalSpec::set_by names it)
  std::vector<std::string> include_paths;  ///< --include-path: where task names are looked up (task_index.hpp)
  std::optional<uint64_t> fewshot_seed;    ///< --seed's few-shot seed: replaces the spec's `seed`
  nlohmann::json gen_kwargs;               ///< --gen-kwargs (parse_gen_kwargs_arg); null = none
  /// --apply-chat-template [NAME]: "" = the model's own template; replaces the spec's apply_chat_template
  std::optional<std::string> apply_chat_template;
  std::optional<std::string> system_instruction;  ///< --system-instruction: replaces the spec's
  bool fewshot_as_multiturn = false;              ///< --fewshot-as-multiturn: sets the spec's
};

/// lm-eval's `--gen_kwargs` value, or a JSON object. "k=v,k2=v2" is read as
/// simple_parse_args_string + handle_arg_string (lm_eval/utils.py): split on ','
/// (empty items skipped), each at its first '=' (the rest, '=' included, is the
/// value); "true"/"false" (any case) become booleans, all-digit values integers,
/// values Python's float() reads floats, others strings; a later key replaces
/// an earlier one. Throws SpecError "--gen-kwargs: ..." for an item without a
/// key or bad JSON. The keys are checked as generation_kwargs when the spec is parsed.
nlohmann::json parse_gen_kwargs_arg(const std::string& text);

/// Sampling parameters from an object of generation_kwargs' sampling keys (do_sample,
/// temperature, top_k, top_p, min_p, seed), checked as the spec's keys are (the same
/// ranges and messages, naming `origin`: "<origin>: top_p: 0 is outside (0, 1]"); the
/// seed defaults to 1234. Throws SpecError. (`kveval generate`'s sampling options.)
SamplingParams parse_sampling_kwargs(const nlohmann::json& kwargs, const std::string& origin);

/// Reads, validates and renders the spec at `path` and every data file it names.
/// Relative paths (model, dataset_path, fewshot_split) are relative to the
/// spec's directory. `model_override` (from `--model`) replaces `model` and is
/// taken as given (relative to the working directory). Throws SpecError.
/// Task names in `tasks` ("arc_easy", {"task": "ai2_arc", ...}) are looked up in
/// the spec's `include_path` (a directory or a list, relative to the spec), then
/// `o.include_paths`, then $KVEVAL_INCLUDE_PATH (TaskIndex).
EvalSpec load_spec(const std::string& path, const std::string& model_override = "", const TaskOverrides& o = {});

/// The JSON of the spec file `path` (its text `text`), refused in one SpecError line when the file holds
/// something else: "PATH: not a kveval spec: WHAT; a spec is one JSON object {"model": ..., "tasks": [...]}
/// (see docs/spec.md)", WHAT naming an empty file (0 bytes or only whitespace), JSON lines (a .jsonl data file),
/// a JSON array or scalar, YAML text, or an object none of whose keys is or nearly is a spec key (a document). Any other syntax error is
/// parse_json_text's "PATH:LINE:COLUMN: ..." line.
nlohmann::json parse_spec_text(std::string_view text, const std::string& path);

/// Same as load_spec for a spec already in memory; `origin` names it in
/// messages and `base_dir` resolves its relative paths. Throws SpecError.
EvalSpec parse_spec(const nlohmann::json& j, const std::string& origin, const std::string& base_dir,
                    const std::string& model_override = "", const TaskOverrides& o = {});

}  // namespace kveval::eval
