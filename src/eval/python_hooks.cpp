#include "eval/python_hooks.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <pybind11/embed.h>

#include "util/error.hpp"

namespace kveval::eval {

namespace py = pybind11;
using ojson = nlohmann::ordered_json;

namespace {

const char* const kGlue =
#include "eval/python_hooks_glue.inc"
    ;

/// The interpreter and the glue's namespace, started at the first use.
struct Interpreter {
  py::dict ns;
  PyObject* timeout_cls = nullptr;  ///< HookTimeout (kept alive by ns)
};

Interpreter& interpreter() {
  static Interpreter* it = [] {
    // no signal handlers (SIGINT stays kveval's), no program directory on sys.path
    py::initialize_interpreter(false, 0, nullptr, false);
    auto* i = new Interpreter;  // lives until exit; never finalized (no Python runs after main)
    try {
      i->ns["__builtins__"] = py::module_::import("builtins");
      i->ns["__name__"] = "kveval_hooks";
      py::exec(kGlue, i->ns);
    } catch (const py::error_already_set& e) {
      throw Error(fmt::format("the embedded Python cannot start kveval's hook module: {}", e.what()));
    }
    i->timeout_cls = py::object(i->ns["HookTimeout"]).ptr();
    PyEval_SaveThread();  // idle between calls: the GIL is taken per call (glue_call)
    return i;
  }();
  return *it;
}

double default_timeout() {
  const char* env = std::getenv("KVEVAL_HOOK_TIMEOUT");
  if (!env || !*env) return 300;
  char* end = nullptr;
  double s = std::strtod(env, &end);
  if (*end || !(s > 0)) throw ArgumentError(fmt::format("KVEVAL_HOOK_TIMEOUT={}: expected seconds > 0", env));
  return s;
}

double& timeout_seconds() {
  static double s = default_timeout();
  return s;
}

std::atomic<intptr_t> g_running{0};        ///< id of the call running now (0: none)
std::atomic<unsigned long> g_caller{0};    ///< Python thread id of the thread running it

/// Raises HookTimeout in call `id` if it is still running: takes the GIL (the
/// running hook yields it within Python's switch interval) and sets an
/// asynchronous exception on the caller's thread, raised at its next bytecode.
/// Runs on its own detached thread: a hook holding the GIL in C code blocks it.
void interrupt(intptr_t id, PyObject* timeout_cls) {
  std::thread([id, timeout_cls] {
    PyGILState_STATE st = PyGILState_Ensure();
    if (g_running.load() == id) PyThreadState_SetAsyncExc(g_caller.load(), timeout_cls);
    PyGILState_Release(st);
  }).detach();
}

/// Raises HookTimeout in the running hook after `seconds` (interrupt); ends the
/// process (exit 2, `message`) when the hook still has not returned 10 s later.
class Watchdog {
 public:
  Watchdog(double seconds, std::string message) : id_(++next_id_), message_(std::move(message)) {
    g_running = id_;
    g_caller = PyThread_get_thread_ident();
    PyObject* cls = interpreter().timeout_cls;
    thread_ = std::thread([this, seconds, cls] {
      std::unique_lock<std::mutex> l(m_);
      if (cv_.wait_for(l, std::chrono::duration<double>(seconds), [this] { return done_; })) return;
      interrupt(id_, cls);
      if (cv_.wait_for(l, std::chrono::seconds(10), [this] { return done_; })) return;
      std::fprintf(stderr, "kveval: %s (it cannot be interrupted; stopping)\n", message_.c_str());
      std::fflush(stderr);
      std::_Exit(2);
    });
  }
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> l(m_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
    g_running = 0;
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  static inline intptr_t next_id_ = 0;
  intptr_t id_;
  std::string message_;
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

std::string timeout_text() { return fmt::format("{:g} s", timeout_seconds()); }

/// The cache key of a hook: each tag is its own module, as lm-eval imports per tag.
std::string hook_key(const PythonHook& h) { return h.where + "|" + h.module_file + "|" + h.function; }

/// (ok, text) from a glue function; a Python error escaping the glue becomes the text.
std::pair<bool, std::string> glue_call(const PythonHook& h, const char* fn, const py::tuple& args) {
  py::gil_scoped_acquire gil;
  try {
    Watchdog dog(timeout_seconds(), fmt::format("{}: {} did not return within {}", h.where, h.name(), timeout_text()));
    py::tuple r = py::object(interpreter().ns[fn])(*args);
    return {r[0].cast<bool>(), r[1].cast<std::string>()};
  } catch (const py::error_already_set& e) {
    if (e.matches(interpreter().timeout_cls))
      return {false, fmt::format("{} did not return within {} (the time limit of a hook; KVEVAL_HOOK_TIMEOUT sets it)",
                                 h.name(), timeout_text())};
    return {false, fmt::format("{}: {}", h.name(), e.what())};
  } catch (const py::cast_error& e) {
    return {false, fmt::format("{}: {}", h.name(), e.what())};
  }
}

const char* call_kind(const PythonHook& h, HookCall c) {
  switch (c) {
    case HookCall::Doc: return h.key == "doc_to_choice" ? "doc_to_choice" : h.key == "doc_to_target" ? "doc_to_target" : "doc_to_text";
    case HookCall::ProcessDocs: return "process_docs";
    case HookCall::ProcessResults: return "process_results";
    case HookCall::Metric: return "metric";
    case HookCall::Aggregation: return "aggregation";
    case HookCall::Samples: return "samples";
    case HookCall::Filter: return h.key == "filter_fn" ? "filter_fn" : "filter";
  }
  return "";
}

}  // namespace

void check_python_hook(const PythonHook& h) {
  interpreter();
  py::gil_scoped_acquire gil;
  auto [ok, msg] = glue_call(h, "load", py::make_tuple(hook_key(h), h.module_file, h.module, h.function));
  if (!ok) throw SpecError(fmt::format("{}: {}", h.where, msg));
}

ojson call_python_hook(const PythonHook& h, HookCall c, const ojson& args) {
  check_python_hook(h);
  const std::string text = args.dump(-1, ' ', true, ojson::error_handler_t::replace);
  std::pair<bool, std::string> r;
  {
    py::gil_scoped_acquire gil;
    r = glue_call(h, "call", py::make_tuple(hook_key(h), call_kind(h, c), text, h.name(), timeout_text()));
  }
  auto& [ok, out] = r;
  if (!ok) throw SpecError(fmt::format("{}: {}", h.where, out));
  try {
    return ojson::parse(out);
  } catch (const ojson::exception& e) {
    throw SpecError(fmt::format("{}: {} returned text kveval cannot read as JSON ({})", h.where, h.name(), e.what()));
  }
}

namespace {

/// Glue function `fn` called with `args` (interpreter started, GIL held for the
/// call), as a hook named module.function at `where` in glue_call's messages
/// and time limit: {ok, JSON text or the error line}.
template <class... A>
std::pair<bool, std::string> glue_named(const std::string& module, const char* function, const std::string& where,
                                        const char* fn, A&&... args) {
  interpreter();
  PythonHook h;
  h.module = module;
  h.function = function;
  h.where = where;
  py::gil_scoped_acquire gil;
  return glue_call(h, fn, py::make_tuple(std::forward<A>(args)...));
}

}  // namespace

std::vector<std::pair<int, ojson>> read_table_with_python(const std::string& path, const std::string& format) {
  const auto r = glue_named(format, "read", path, "read_table", path, format);
  if (!r.first) throw SpecError(fmt::format("{}: {}", path, r.second));
  std::vector<std::pair<int, ojson>> rows;
  for (auto& e : ojson::parse(r.second)) rows.emplace_back(e[0].get<int>(), std::move(e[1]));
  return rows;
}

bool python_can_import(const std::string& module) {
  const auto r = glue_named("importlib.util", "find_spec", module, "can_import", module);
  return r.first && r.second == "true";
}

ojson load_hub_dataset(const std::string& path, const ojson& name, const ojson& kwargs,
                        const std::vector<std::string>& splits) {
  const auto r = glue_named("datasets", "load_dataset", path, "load_hub", path, name.dump(), kwargs.dump(), ojson(splits).dump());
  if (!r.first) throw SpecError(r.second);
  return ojson::parse(r.second);
}

void set_python_hook_timeout(double seconds) {
  if (!(seconds > 0)) throw ArgumentError(fmt::format("hook time limit {}: expected seconds > 0", seconds));
  timeout_seconds() = seconds;
}

}  // namespace kveval::eval
