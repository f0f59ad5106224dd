#pragma once
// lm-evaluation-harness filters on generated text (lm_eval/filters/:
// extraction.py RegexFilter and WhitespaceFilter, selection.py TakeFirstFilter,
// transformation.py LowercaseFilter/UppercaseFilter) and exact_match's text
// options (lm_eval/api/metrics.py exact_match_hf_evaluate). Regular expressions
// are Python `re` patterns run with PCRE2 in UTF mode with Unicode character
// classes (PCRE2_UTF | PCRE2_UCP, as Python's str patterns), `\Z` read as
// Python's end of string.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "eval/spec.hpp"

namespace kveval::eval {

/// A compiled Python-style regular expression.
class PyRegex {
 public:
  /// Compiles `pattern`. Throws SpecError "regex "...": message at offset N".
  explicit PyRegex(const std::string& pattern);
  ~PyRegex();
  PyRegex(const PyRegex&) = delete;
  PyRegex& operator=(const PyRegex&) = delete;
  /// re.findall: every non-overlapping match; for each, the whole match when
  /// the pattern has no group, group 1 when it has one, and all groups (unmatched
  /// groups as "") when it has more.
  std::vector<std::vector<std::string>> findall(const std::string& text) const;
  /// re.sub(pattern, "", text).
  std::string remove_all(const std::string& text) const;
  /// re.sub(pattern, repl, text, count) (count 0: every match; negative: none) with Python's
  /// replacement syntax: \1..\99 and \g<n>/\g<name> (an unmatched group is ""),
  /// \0 and \ooo octal, \n \t \r \f \v \a \b \\; another backslash before an
  /// ASCII letter, or a group the pattern lacks, throws SpecError as Python's re.error;
  /// so does a result longer than `max_bytes`.
  std::string sub(const std::string& text, const std::string& repl, int64_t count = 0,
                  size_t max_bytes = std::string().max_size()) const;
  int groups() const { return groups_; }

 private:
  void* code_ = nullptr;  // pcre2_code_8*
  int groups_ = 0;
  std::string pattern_;
};

/// Checks a task's filter_list (known functions, regexes that compile) and
/// exact_match regexes. Throws SpecError naming `where`.
void validate_filters(const TaskSpec& t, const std::string& where);

/// What a pipeline makes of a document's responses (one per repeat), with
/// lm-eval's semantics on lists (lm_eval/filters/): regex = findall()[group_select] (a
/// Python index, negative from the end; for several groups the first non-empty one),
/// stripped; the fallback when nothing matches, when group_select is past the matches
/// or when every group of the selected match is empty; lowercase/uppercase =
/// str.lower()/upper(); remove_whitespace = str.strip(); these map over the list.
/// take_first keeps the first response and ends the list (is_list false); take_first_k
/// keeps the first k (fewer when fewer are left); majority_vote keeps [the most common
/// response] (Counter.most_common: ties go to the one seen first); a custom filter maps
/// the list to its result (a list, or one string that ends the list). A pipeline
/// without steps ("none") is lm-eval's default take_first.
struct FilteredResponses {
  std::vector<std::string> items;  ///< one item when !is_list
  bool is_list = true;
};

/// One document's input to a pipeline: its responses (one per repeat) and the document
/// (needed by custom filters; may be null for built-in steps).
struct DocResponses {
  std::vector<std::string> responses;
  const Doc* doc = nullptr;
};

/// One document's result: the filtered responses, or (error not empty) why the document
/// is left out (a regex PCRE2 cannot run on its text, a failing custom filter).
struct FilterOutcome {
  FilteredResponses filtered;
  std::string error;
};

/// Runs pipeline `p` on a task's documents, step by step as lm-eval's
/// FilterEnsemble.apply: built-in steps per document (FilteredResponses), each custom
/// filter (FilterStep::hook) called ONCE with the responses and documents of all
/// documents not yet failed (run_filter_hook), its results mapped back in order; a
/// custom filter after the list has ended gets [that response] and keeps the first item
/// of a list result. `one_response`: every document has one response (repeats = 1) and
/// keeps one: a custom filter's list result keeps its first item (as a take_first after
/// it would) and the result is that one string (is_list false). Returns one outcome per
/// document, in order; never throws for a document's own failure.
std::vector<FilterOutcome> filter_task(const FilterPipeline& p, const std::vector<DocResponses>& docs, bool one_response);

/// filter_task on the documents i of `docs` whose responses[i] is set (the others, e.g.
/// documents whose requests failed, are not passed on): their outcomes, nullopt for the others.
std::vector<std::optional<FilterOutcome>> filter_docs(const FilterPipeline& p,
                                                      const std::vector<std::optional<std::vector<std::string>>>& responses,
                                                      const std::vector<Doc>& docs, bool one_response);

/// filter_task on one generated text (one_response): the filtered string. Throws
/// SpecError with the document's error.
std::string apply_filter_pipeline(const FilterPipeline& p, const std::string& output, const Doc* doc = nullptr);

/// filter_task on one document's responses. Throws SpecError with the document's error.
FilteredResponses apply_filter_pipeline(const FilterPipeline& p, const std::vector<std::string>& responses,
                                        const Doc* doc = nullptr);

/// exact_match text after the options: each regex removed, then lower-cased,
/// then ASCII punctuation removed.
std::string exact_match_normalize(const ExactMatchOptions& o, const std::string& text);

}  // namespace kveval::eval
