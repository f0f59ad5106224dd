#pragma once
// The embedded CPython interpreter (Debian's libpython3, through pybind11) that
// runs lm-eval's `!function module.name` hooks. This interface is C++ only:
// python_hooks.cpp is the one unit that includes Python's headers.
//
// - Also reads CSV and Parquet data files (read_table_with_python).
// - Import as lm-eval's utils.import_function: `<folder of the YAML holding the
//   tag>/<module>.py` executed as a fresh module named `module` (no sys.path
//   change), once per tag; then `getattr(module, name)`.
// - Values cross as JSON (json.loads / json.dumps): key order, int, float, bool,
//   None, nested lists and dicts are kept; a value that is not JSON-like
//   (a set, an object, NaN) is an error naming its type.
// - The interpreter starts at the first hook and stays idle between calls (it
//   never runs during forward passes); Python's signal handlers are not
//   installed (Ctrl-C stays kveval's); print() in a hook goes to stderr.
// - Each call has a time limit (KVEVAL_HOOK_TIMEOUT seconds, default 300): a
//   watchdog takes the GIL and raises HookTimeout in the hook's thread
//   (PyThreadState_SetAsyncExc, seen at its next bytecode); a hook blocked
//   inside C code ends the process 10 s later with exit 2 and the same message.
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace kveval::eval {

/// One `!function module.name` tag of a task YAML.
struct PythonHook {
  std::string module_file;  ///< <YAML's folder>/<module>.py
  std::string module;       ///< "utils" (dotted names keep their dots, as lm-eval)
  std::string function;     ///< "process_docs"
  std::string key;          ///< the YAML key: doc_to_text, process_docs, process_results, metric, aggregation, ...
  std::string where;        ///< "task.yaml:10: process_docs" (file:line and key of the tag)
  /// "utils.process_docs" as written.
  std::string name() const { return module + "." + function; }
};

/// How a hook is called (lm-eval's argument shapes, lm_eval/api/task.py).
enum class HookCall {
  Doc,             ///< f(doc: dict) -> doc_to_text / doc_to_target / doc_to_choice value
  ProcessDocs,     ///< f(dataset) -> dataset: datasets.Dataset when importable, else kveval's stand-in
  ProcessResults,  ///< f(doc: dict, results: list) -> dict of metric values
  Metric,          ///< f(references=[gold], predictions=[output]) -> number or dict
  Aggregation,     ///< f(values: list) -> number
  Samples,         ///< f() -> list of dicts (fewshot_config.samples)
  Filter,          ///< key "filter": f(**kwargs).apply(resps, docs); key "filter_fn": f(resps, docs) -> list
};

/// Imports the hook's module and looks the function up (no call). Throws
/// SpecError "where: utils.py: import langdetect failed: No module named 'langdetect'",
/// "where: utils.py: no function 'f'", ... (one line).
void check_python_hook(const PythonHook& hook);

/// Calls the hook with `args` (a JSON array of the positional arguments of
/// `call`: [doc], [docs], [doc, results], [references, predictions], [values], [],
/// [resps, docs, kwargs]).
/// Returns the result as JSON (ProcessDocs: the documents as a list of objects).
/// Throws SpecError "where: utils.process_results raised KeyError: 'x'", or a
/// wrong-type / time-limit message, one line.
nlohmann::ordered_json call_python_hook(const PythonHook& hook, HookCall call, const nlohmann::ordered_json& args);

/// The rows of a local data file read in the embedded Python (data_files.hpp): `format`
/// "csv" (the csv module, columns typed as pandas.read_csv types them) or "parquet"
/// (pyarrow.parquet). Returns (first line of the row, row) pairs (Parquet: the row
/// number from 1), each row an object in column order. Throws SpecError "path: ..." (one line: a CSV
/// error with its line, pyarrow not importable, a value that is not JSON-like).
std::vector<std::pair<int, nlohmann::ordered_json>> read_table_with_python(const std::string& path,
                                                                           const std::string& format);

/// Whether the embedded Python can import the top-level package `module`
/// (importlib.util.find_spec; the package is not imported).
bool python_can_import(const std::string& module);

/// A Hugging Face Hub dataset as lm-eval's Task.download loads it:
/// `datasets.load_dataset(path=path, name=name, **kwargs)` in the embedded Python
/// (`datasets` reads its own environment: HF cache, HF_DATASETS_OFFLINE), then the
/// rows of each of `splits` (objects in column order). Returns an object split ->
/// list of rows, or null when the `datasets` package is not importable. Throws
/// SpecError, one line without the file (the caller names it): "datasets.load_dataset raised
/// ValueError: ...", "the dataset has no split 'x' (splits: ...)", a row that is not JSON-like.
nlohmann::ordered_json load_hub_dataset(const std::string& path, const nlohmann::ordered_json& name,
                                        const nlohmann::ordered_json& kwargs, const std::vector<std::string>& splits);

/// The time limit of one call in seconds (> 0); the default comes from
/// KVEVAL_HOOK_TIMEOUT (else 300). Throws ArgumentError for <= 0.
void set_python_hook_timeout(double seconds);

}  // namespace kveval::eval
