// `kveval tasks [--include-path DIR]... [PATTERN]`: every task, tag and group
// found under the include paths (and $KVEVAL_INCLUDE_PATH), one per line with
// its kind and YAML file, like `lm_eval --tasks list`; PATTERN filters the
// names as a shell glob (fnmatch).
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli/commands.hpp"
#include "eval/task_index.hpp"
#include "util/error.hpp"

namespace kveval::cli {

namespace {

struct TasksArgs {
  std::vector<std::string> include_paths;
  std::string pattern = "*";
};

int list_tasks(const TasksArgs& a) {
  using namespace kveval::eval;
  std::vector<std::pair<std::string, std::string>> dirs;
  for (const auto& d : a.include_paths) dirs.emplace_back("--include-path", d);
  for (const auto& d : include_paths_from_env()) dirs.emplace_back(std::string(kIncludePathEnv) + ":", d);
  if (dirs.empty())
    throw ArgumentError(fmt::format("no include path: give --include-path DIR or set {} (directories of lm-eval task YAMLs)",
                                    kIncludePathEnv));
  const TaskIndex index = TaskIndex::build(dirs);
  std::vector<const TaskIndexEntry*> rows;
  for (const auto& [name, e] : index.entries())
    if (glob_match(a.pattern, name)) rows.push_back(&e);
  size_t w = 4;
  for (const auto* e : rows) w = std::max(w, e->name.size());
  if (!rows.empty()) fmt::print("{:<{}}  {:<5}  {}\n", "name", w, "kind", "file");
  for (const auto* e : rows) {
    std::string where = e->file;
    if (e->kind == TaskKind::Tag) {  // a tag has no file of its own: its tasks
      where.clear();
      for (const auto& m : e->members) where += (where.empty() ? "" : ",") + m;
    }
    fmt::print("{:<{}}  {:<5}  {}\n", e->name, w, to_string(e->kind), where);
  }
  if (rows.empty()) fmt::print(stderr, "kveval: no task, tag or group matches '{}'\n", a.pattern);
  for (const auto& [stem, file] : index.include_bases())  // "_arc_*": the bases it meant are not listed, say why
    if (rows.empty() && glob_match(a.pattern, stem)) fmt::print(stderr, "kveval: note: {}\n", index.base_note(stem));
  return kOk;
}

}  // namespace

void add_tasks_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<TasksArgs>();
  CLI::App* cmd = app.add_subcommand("tasks", "List the lm-eval tasks, tags and groups under the include paths");
  cmd->add_option("pattern", args->pattern, "shell glob on the names (default '*')");
  cmd->add_option("--include-path,--include_path", args->include_paths,
                  "directory of lm-eval task YAMLs, searched recursively (repeatable; also $KVEVAL_INCLUDE_PATH, colon-separated)")
      ->allow_extra_args(false)
      ->check(non_empty_path());
  cmd->callback([args, &action] { action = [args] { return list_tasks(*args); }; });
}

}  // namespace kveval::cli
