#pragma once
// Subcommands: one file each (cmd_<name>.cpp). Each registers itself on the
// top-level app and sets `action` to the function that runs it; main() calls
// the action inside its single catch ladder and returns its exit code.
#include <functional>

#include <CLI/CLI.hpp>

namespace kveval::cli {

/// Runs a parsed subcommand; returns the process exit code.
using Action = std::function<int()>;

/// Exit codes shared by all subcommands.
enum Exit : int {
  kOk = 0,
  kFailure = 1,       ///< runtime error (model, cache, I/O)
  kUsage = 2,         ///< bad command line or spec / data file
  kRegression = 3,    ///< `run --check`: a metric fell outside its bound
  kRequestErrors = 4, ///< `run`: some requests failed (counted in the report)
};

void add_run_command(CLI::App& app, Action& action);
void add_bench_command(CLI::App& app, Action& action);
void add_make_model_command(CLI::App& app, Action& action);
void add_generate_command(CLI::App& app, Action& action);
void add_tokenize_command(CLI::App& app, Action& action);

}  // namespace kveval::cli
