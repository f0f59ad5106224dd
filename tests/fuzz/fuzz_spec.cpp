// libFuzzer target: the spec and JSONL loaders. An input is split at the
// first "\n#jsonl\n" into a spec (spec.json) and a data file (d.jsonl) in a
// per-process directory (without the marker both get the whole input); the
// data file is read with read_jsonl and the spec with load_spec, which
// validates the spec and renders every document of the files it names (seeds
// name "d.jsonl"). kveval::Error (SpecError) is the expected outcome for bad
// input; any other exception, crash, hang or sanitizer report is a finding.
#include <cstdint>
#include <string>
#include <string_view>

#include "eval/json_input.hpp"
#include "eval/spec.hpp"
#include "fuzz_util.hpp"
#include "util/error.hpp"

using namespace kveval;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string spec = (fuzz::scratch_dir("spec") / "spec.json").string();
  static const std::string jsonl = (fuzz::scratch_dir("spec") / "d.jsonl").string();
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kMark = "\n#jsonl\n";
  const size_t at = in.find(kMark);
  const std::string_view spec_part = at == std::string_view::npos ? in : in.substr(0, at);
  const std::string_view data_part = at == std::string_view::npos ? in : in.substr(at + kMark.size());
  fuzz::write_file(spec, reinterpret_cast<const uint8_t*>(spec_part.data()), spec_part.size());
  fuzz::write_file(jsonl, reinterpret_cast<const uint8_t*>(data_part.data()), data_part.size());
  try {
    const auto lines = eval::read_jsonl(jsonl);
    for (const auto& [line, obj] : lines)
      if (line < 1 || !obj.is_object()) fuzz::property_failed("read_jsonl returned a non-object or line < 1");
  } catch (const Error&) {
  }
  try {
    const eval::EvalSpec s = eval::load_spec(spec);
    if (s.tasks.empty()) fuzz::property_failed("load_spec accepted a spec without tasks");
    for (const auto& t : s.tasks)
      if (t.output_type == eval::OutputType::MultipleChoice)
        for (const auto& d : t.docs)
          if (d.gold < 0 || static_cast<size_t>(d.gold) >= d.choices.size())
            fuzz::property_failed("multiple_choice gold outside the choices");
  } catch (const Error&) {
  }
  return 0;
}
