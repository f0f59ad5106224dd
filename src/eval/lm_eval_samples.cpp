// The samples file (--log-samples): see lm_eval_format.hpp's sample_records.
#include <map>
#include <optional>
#include <utility>

#include <fmt/format.h>

#include "eval/filters.hpp"
#include "eval/lm_eval_format.hpp"
#include "eval/lm_eval_format_impl.hpp"
#include "eval/metrics.hpp"
#include "eval/requests.hpp"
#include "eval/template/template.hpp"

namespace kveval::eval {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

using detail::generation_kwargs_json;

/// lm-eval's logged target: doc_to_target(doc) as it returns it (an int index or a choice's text for
/// multiple choice, a list of references, ...); the target text when there is no value.
ojson target_of(const TaskSpec& t, const Doc& d) {
  if (!d.target_value.is_null()) return ojson::parse(d.target_value.dump());
  if (t.output_type == OutputType::MultipleChoice) return d.gold;
  return d.target;
}

/// The document as lm-eval logs it: its keys in the order of its JSONL line when it has one.
ojson doc_of(const Doc& d) {
  if (!d.raw_text.empty()) {
    try {
      ojson o = ojson::parse(d.raw_text);
      if (json::parse(d.raw_text) == d.raw) return o;
    } catch (const std::exception&) {  // read_jsonl accepted it; fall back to the parsed value
    }
  }
  return ojson::parse(d.raw.dump());
}

/// What lm-eval logs of a document's requests: their arguments, responses and
/// filtered responses, the prompt hashed as prompt_hash; for generate_until the
/// output after the filter pipeline (or the pipeline's error).
struct SampleResponses {
  ojson arguments = ojson::object(), resps = ojson::array(), filtered = ojson::array();
  std::string prompt;
  std::optional<std::string> filtered_text;  ///< generate_until: the output after the pipeline
  std::optional<FilteredResponses> filtered_n;  ///< generate_until with repeats > 1: the repeats after the pipeline
  std::string filter_error;
};

/// lm-eval's one instance of a document with repeats: its arguments once, resps
/// [[every repeat's text]], filtered_resps [the pipeline's string or list] (`fo`: the
/// pipeline's outcome for the document, none when it did not run).
void repeated_responses(const TaskSpec& task, const Doc& d, const std::optional<FilterOutcome>& fo,
                        const RunResult& res, const std::vector<size_t>& reqs, SampleResponses& s) {
  s.arguments["gen_args_0"] = {{"arg_0", d.context}, {"arg_1", generation_kwargs_json(task.generation_kwargs)}};
  ojson texts = ojson::array();
  for (size_t i : reqs) texts.push_back(res.outcomes[i].ran ? ojson(res.outcomes[i].output) : ojson(nullptr));
  s.resps.push_back(texts);
  ojson f = nullptr;
  if (fo && !fo->error.empty()) {  // a regex the PCRE2 matcher cannot run: no value for this doc
    s.filter_error = fo->error;
  } else if (fo) {
    s.filtered_n = fo->filtered;
    f = s.filtered_n->is_list ? ojson(s.filtered_n->items) : ojson(s.filtered_n->items.at(0));
  }
  s.filtered.push_back(f);
}

/// The responses of the requests `reqs` of document `d` (outcome `o`, may be
/// null) and `fo`, the outcome of the filter pipeline on them (generate_until).
SampleResponses responses_of(const TaskSpec& task, const Doc& d, const DocOutcome* o, const std::optional<FilterOutcome>& fo,
                             const RunResult& res, const std::vector<size_t>& reqs) {
  SampleResponses s;
  auto add_args = [&](size_t k, std::vector<ojson> args) {
    ojson a = ojson::object();
    for (size_t j = 0; j < args.size(); ++j) a[fmt::format("arg_{}", j)] = std::move(args[j]);
    s.arguments[fmt::format("gen_args_{}", k)] = std::move(a);
  };
  s.prompt = d.context;
  switch (task.output_type) {
    case OutputType::Loglikelihood:
    case OutputType::MultipleChoice:
      for (size_t k = 0; k < reqs.size(); ++k) {
        const Request& r = res.requests[reqs[k]];
        const RequestOutcome& ro = res.outcomes[reqs[k]];
        // the context and continuation as requests.cpp built them
        const bool multi = r.index >= 0 && static_cast<size_t>(r.index) < d.contexts.size();  // multiple input
        if (multi && k == 0) s.prompt = d.contexts[static_cast<size_t>(r.index)];  // lm-eval: arguments[0] of the first request
        add_args(k, {context_of(d, r.index), continuation_of(task, d, r.index)});
        ojson pair = ro.ran ? ojson::array({ro.logprob, ro.is_greedy}) : ojson(nullptr);
        s.resps.push_back(ojson::array({pair}));
        s.filtered.push_back(pair);
      }
      break;
    case OutputType::LoglikelihoodRolling: {
      // lm-eval sends one request per document; kveval's windows add up to it
      s.prompt = d.target;
      add_args(0, {d.target});
      ojson ll = o && o->ok ? ojson(o->logprob) : ojson(nullptr);
      s.resps.push_back(ojson::array({ll}));
      s.filtered.push_back(ll);
      break;
    }
    case OutputType::GenerateUntil:
      if (task.repeats > 1) {
        repeated_responses(task, d, fo, res, reqs, s);
        break;
      }
      for (size_t k = 0; k < reqs.size(); ++k) {
        const RequestOutcome& ro = res.outcomes[reqs[k]];
        add_args(k, {d.context, generation_kwargs_json(task.generation_kwargs)});
        s.resps.push_back(ojson::array({ro.ran ? ojson(ro.output) : ojson(nullptr)}));
        ojson f = nullptr;
        if (ro.ran && k == 0 && fo && !fo->error.empty()) {  // a regex the PCRE2 matcher cannot run: no value
          s.filter_error = fo->error;
        } else if (ro.ran && k == 0 && fo) {
          s.filtered_text = fo->filtered.items.at(0);
          f = *s.filtered_text;
        }
        s.filtered.push_back(f);
      }
      break;
  }
  return s;
}

/// kveval's own record of each request of a sample: kind, index, token
/// counts, stop reason (generation) and error.
ojson request_details(const RunResult& res, const std::vector<size_t>& reqs) {
  ojson extra = ojson::array();
  for (size_t i : reqs) {
    const Request& r = res.requests[i];
    const RequestOutcome& ro = res.outcomes[i];
    const bool gen = r.kind == RequestKind::Generate;
    ojson e;
    e["kind"] = to_string(r.kind);
    e["index"] = r.index < 0 ? ojson(nullptr) : ojson(r.index);
    e["n_context_tokens"] = r.n_context_tokens;
    e["tokens"] = ro.ran ? ojson(gen ? ro.tokens : r.n_continuation_tokens) : ojson(nullptr);
    e["truncated_tokens"] = r.truncated_tokens;
    if (gen) e["stop_reason"] = ro.ran ? ojson(ro.stop_reason) : ojson(nullptr);
    e["error"] = !r.error.empty()  ? ojson(r.error)
                 : !ro.error.empty() ? ojson(ro.error)
                 : ro.ran            ? ojson(nullptr)
                                     : ojson("not run");
    extra.push_back(std::move(e));
  }
  return extra;
}

/// The lm-eval sample of one document after one filter pipeline (see sample_records; `f`:
/// the pipeline's outcome for the document).
ojson sample_of(const TaskSpec& task, int t, size_t di, const FilterPipeline& pipe, const std::optional<FilterOutcome>& f,
                const RunResult& res, const std::vector<size_t>& reqs) {
  const Doc& d = task.docs[di];
  const DocOutcome* o = static_cast<size_t>(t) < res.docs.size() && di < res.docs[static_cast<size_t>(t)].size()
                            ? &res.docs[static_cast<size_t>(t)][di]
                            : nullptr;
  const ojson target = target_of(task, d);
  const SampleResponses r = responses_of(task, d, o, f, res, reqs);
  const ojson extra = request_details(res, reqs);
  std::vector<std::pair<std::string, json>> values;
  if (o && (task.output_type != OutputType::GenerateUntil || r.filtered_text || r.filtered_n))
    values = doc_metric_values(task, d, *o, r.filtered_text ? &*r.filtered_text : nullptr,
                               r.filtered_n ? &*r.filtered_n : nullptr);
  ojson s;
  s["doc_id"] = di;
  const ojson doc = doc_of(d);
  s["doc"] = doc;
  s["target"] = target;
  s["arguments"] = r.arguments;
  s["resps"] = r.resps;
  s["filtered_resps"] = r.filtered;
  s["filter"] = pipe.name;
  ojson names = ojson::array();
  for (const auto& [name, v] : values) names.push_back(name);
  s["metrics"] = names;
  s["doc_hash"] = hash_string(doc.dump(2, ' ', false, ojson::error_handler_t::replace));
  s["prompt_hash"] = hash_string(r.prompt);
  s["target_hash"] = hash_string(target.is_string() ? target.get<std::string>() : tmpl::python_str(json::parse(target.dump())));
  for (const auto& [name, v] : values) s[name] = ojson::parse(v.dump());
  if (o && !o->ok) s["error"] = o->error;
  else if (!r.filter_error.empty()) s["error"] = "filter " + pipe.name + ": " + r.filter_error;
  s["task"] = task.name;
  s["kveval"] = {{"requests", extra}};
  return s;
}

}  // namespace

std::vector<ojson> sample_records(const EvalSpec& spec, const RunResult& res) {
  // requests of each (task, doc), in request order
  std::map<std::pair<int, int>, std::vector<size_t>> by_doc;
  for (size_t i = 0; i < res.requests.size(); ++i) by_doc[{res.requests[i].task, res.requests[i].doc}].push_back(i);
  const std::vector<size_t> no_requests;
  std::vector<ojson> out;
  for (size_t t = 0; t < spec.tasks.size(); ++t) {
    const TaskSpec& task = spec.tasks[t];
    // lm-eval writes one sample per filter pipeline and document, filters outermost
    std::vector<FilterPipeline> pipes = task.output_type == OutputType::GenerateUntil ? task.filter_list
                                                                                     : std::vector<FilterPipeline>{};
    if (pipes.empty()) pipes.push_back({detail::kNoFilter, {}});
    std::vector<const std::vector<size_t>*> reqs(task.docs.size(), &no_requests);
    for (size_t di = 0; di < task.docs.size(); ++di)
      if (auto it = by_doc.find({static_cast<int>(t), static_cast<int>(di)}); it != by_doc.end()) reqs[di] = &it->second;
    // generate_until: the outputs each pipeline runs on (a custom filter is called once for all of them)
    std::vector<std::optional<std::vector<std::string>>> outputs(task.docs.size());
    for (size_t di = 0; di < task.docs.size() && task.output_type == OutputType::GenerateUntil; ++di) {
      const DocOutcome* o = t < res.docs.size() && di < res.docs[t].size() ? &res.docs[t][di] : nullptr;
      if (task.repeats > 1 && o && o->ok) outputs[di] = o->outputs;
      if (task.repeats <= 1 && !reqs[di]->empty() && res.outcomes[reqs[di]->front()].ran)
        outputs[di] = std::vector<std::string>{res.outcomes[reqs[di]->front()].output};
    }
    for (const FilterPipeline& pipe : pipes) {
      const auto filtered = filter_docs(pipe, outputs, task.docs, task.repeats <= 1);
      for (size_t di = 0; di < task.docs.size(); ++di)
        out.push_back(sample_of(task, static_cast<int>(t), di, pipe, filtered[di], res, *reqs[di]));
    }
  }
  return out;
}


}  // namespace kveval::eval
