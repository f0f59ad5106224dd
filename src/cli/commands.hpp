#pragma once
// Subcommands: one file each (cmd_<name>.cpp). Each registers itself on the
// top-level app and sets `action` to the function that runs it; main() calls
// the action inside its single catch ladder and returns its exit code.
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "util/error.hpp"

namespace kveval::cli {

/// Runs a parsed subcommand; returns the process exit code.
using Action = std::function<int()>;

/// Exit codes shared by all subcommands.
enum Exit : int {
  kOk = 0,
  kFailure = 1,       ///< runtime error (model, cache, I/O)
  kUsage = 2,         ///< bad command line or spec / data file
  kRegression = 3,    ///< `run --baseline`: a metric got worse than the baseline by more than --tolerance
  kRequestErrors = 4, ///< `run`: some requests failed (counted in the report)
};

/// Throws ArgumentError "<path>: model file not found (<where>)" when `path`
/// cannot be opened for reading: the one line run, generate, bench and
/// tokenize give for a missing model file (exit 2).
inline void require_model_file(const std::string& path, const std::string& where) {
  std::ifstream probe(path, std::ios::binary);
  if (!probe) throw ArgumentError(fmt::format("{}: model file not found ({})", path, where));
}

/// The bytes of the file `path` given to option `option`, read as util::read_input_file
/// (InputKind::Text); its errors name the option: "--file: missing.txt: not found" (SpecError, exit 2).
std::string read_option_file(const std::string& option, const std::string& path);

/// The `--mmap` switch of run, generate and bench (ModelOptions::map_weights): `prefix` and `suffix` frame its
/// shared help text. A switch only: `--mmap=false` is refused, so it can never silently leave a spec's
/// "mmap": true in force.
inline CLI::Option* add_mmap_flag(CLI::App* cmd, bool& on, const std::string& prefix, const std::string& suffix) {
  return cmd
      ->add_flag("--mmap", on,
                 prefix + "read the kept Q8_0/Q4_0/Q4_1/Q5_0/Q5_1/Q2_K..Q6_K blocks in place from the file's mapping "
                          "instead of copying them: a faster load, a slower decode (" + suffix + "docs/engine.md)")
      ->disable_flag_override();
}

/// Validator for an integer option in [lo, hi], worded like the spec's
/// checks: "--threads: expected an integer in [0, 4096], got 65536" (CLI11
/// prefixes the option name).
inline CLI::Validator int_in(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& v) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long x = std::strtoll(v.c_str(), &end, 10);
        if (v.empty() || end == nullptr || *end != '\0' || errno == ERANGE || x < lo || x > hi)
          return fmt::format("expected an integer in [{}, {}], got {}", lo, hi, v);
        return "";
      },
      fmt::format("INT in [{}, {}]", lo, hi));
}

/// Validator of a --seed: a non-negative integer that fits 64 bits, with a one-line
/// message (CLI11 2.1 would wrap -1 to 2^64 - 1 and saturate larger values).
inline CLI::Validator seed_validator() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        if (!v.empty() && v[0] == '-') return fmt::format("must be >= 0, got {}", v);
        errno = 0;
        char* end = nullptr;
        std::strtoull(v.c_str(), &end, 10);
        if (v.empty() || *end != '\0' || errno == ERANGE)
          return fmt::format("expected an integer in [0, 18446744073709551615], got '{}'", v);
        return "";
      },
      "UINT64");
}

/// Validator for a file path option: refuses the empty string, which would
/// otherwise read as "not given" (`-o ''`: "--output: empty path", exit 2).
inline CLI::Validator non_empty_path() {
  return CLI::Validator([](std::string& v) -> std::string { return v.empty() ? "empty path" : ""; }, "PATH");
}

/// Refuses an empty value ("--dtype ''": "--dtype: empty value", exit 2) for
/// every option of every subcommand that takes one, but a prompt or a text, where
/// "" is a value: CLI11 2.1 reads '' as 0 for a number and as "not given" for a
/// string. Call after all subcommands are added.
inline void refuse_empty_values(CLI::App& app) {
  const CLI::Validator non_empty([](std::string& v) -> std::string { return v.empty() ? "empty value" : ""; }, "");
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    for (CLI::Option* o : sub->get_options())
      if (o->get_type_size() != 0 && !o->check_lname("prompt") && !o->check_name("text")) o->check(non_empty);
}

void add_run_command(CLI::App& app, Action& action);
void add_bench_command(CLI::App& app, Action& action);
void add_make_model_command(CLI::App& app, Action& action);
void add_generate_command(CLI::App& app, Action& action);
void add_tokenize_command(CLI::App& app, Action& action);
/// `kveval chat-template`: prints a conversation rendered with a model's or a file's chat template.
void add_chat_template_command(CLI::App& app, Action& action);
void add_tasks_command(CLI::App& app, Action& action);

}  // namespace kveval::cli
