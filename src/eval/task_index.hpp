#pragma once
// Task names from include paths, as lm-evaluation-harness's TaskManager
// indexes them (lm_eval/tasks/__init__.py _get_task_and_group): every *.yaml
// under each include path (recursively, sorted) is read with its includes
// merged (load_lm_eval_yaml_keys); a `task:` string is a task, a `task:` list
// with a `group:` name is a group, and each `tag:` (string or list) of a task
// names a tag whose members are the tasks that carry it. A YAML with no
// `task:` of its own (an `include` base) is not indexed. A name defined by two
// files (two tasks, two groups, or a task and a group) is an error naming both;
// a tag that has the name of a task or group is not registered (lm-eval keeps
// the task or group), except that a task whose name was first met as a tag is
// not registered (lm-eval skips it); either clash is noted once when the name
// is used (TaskTree::notes).
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/group_spec.hpp"

namespace kveval::eval {

/// What a name in the index stands for.
enum class TaskKind { Task, Tag, Group };
/// "task", "tag", "group".
const char* to_string(TaskKind k);

/// One indexed name.
struct TaskIndexEntry {
  std::string name;
  TaskKind kind = TaskKind::Task;
  std::string file;                  ///< the YAML (task, group); for a tag, the first task's YAML
  std::vector<std::string> members;  ///< tag: its tasks in index order; group: the names of its `task:` list as written
  nlohmann::json config;             ///< group: its YAML's top-level keys (includes merged)
};

/// What task, tag and group names stand for (TaskIndex::expand_tree).
struct TaskTree {
  /// The tasks, each once, in order: the name and the keys a dict of a group's
  /// `task:` list sets on it (num_fewshot, task_alias, lm_eval_overrides: the other
  /// task keys; an empty object otherwise); an inline task config (a dict naming no
  /// indexed task) is named "<group>::<task>" with {"!inline": the dict, "!file": the group YAML}.
  std::vector<std::pair<std::string, nlohmann::json>> tasks;
  /// The groups met, each once, parents before their nested groups (members filled).
  std::vector<GroupSpec> groups;
  /// Notes on names that stand for one of two things (a task or group and a tag), each once.
  std::vector<std::string> notes;
};

/// The environment variable naming extra include paths, colon-separated.
inline constexpr const char* kIncludePathEnv = "KVEVAL_INCLUDE_PATH";

/// The directories of $KVEVAL_INCLUDE_PATH (empty items skipped); none when unset.
std::vector<std::string> include_paths_from_env();

/// The index of every task, tag and group under some include paths.
class TaskIndex {
 public:
  /// Reads every *.yaml under `paths`. `what` names the source of the paths in
  /// messages ("--include-path", "spec.json: include_path"). Throws
  /// ArgumentError "<what> DIR: not a directory", SpecError for a YAML that
  /// cannot be read, and SpecError "duplicate task name 'x': a.yaml and b.yaml".
  static TaskIndex build(const std::vector<std::pair<std::string, std::string>>& paths);

  /// All names, sorted.
  const std::map<std::string, TaskIndexEntry>& entries() const { return entries_; }
  /// The entry of `name`, or nullptr.
  const TaskIndexEntry* find(const std::string& name) const;
  /// The tasks `names` stand for, in order, each once: a task itself, a tag
  /// its member tasks, a group its `task:` list with nested groups and tags
  /// expanded. Throws SpecError "unknown task, tag or group 'x' (did you mean
  /// 'y'?)" naming `origin`; a group listing itself is refused the same way.
  std::vector<std::string> expand(const std::vector<std::string>& names, const std::string& origin) const;
  /// Adds what `name` stands for to `tree` (tasks once; groups with their
  /// members as lm-eval's TaskManager builds them: a tag in a group's list
  /// becomes its tasks, a dict {task: NAME, ...} a task with overrides (an
  /// inline task config when NAME is not indexed), a dict {group: NAME, task: [...]} a nested group).
  /// Throws SpecError as expand, and for a group file's bad keys
  /// (parse_group_config).
  void expand_tree(const std::string& name, const std::string& origin, TaskTree& tree) const;
  /// The YAML file of task `name` (which must be a task).
  const std::string& file_of(const std::string& name) const { return entries_.at(name).file; }
  /// The include directories read, as given.
  const std::vector<std::string>& dirs() const { return dirs_; }
  /// The include bases: YAML files without a 'task' key (what task YAMLs `include:`), file stem -> file
  /// ("_arc_base" -> "tasks/lm_eval/_arc_base.yaml"). They are not tasks; a message about such a name says so.
  const std::map<std::string, std::string>& include_bases() const { return bases_; }
  /// The line about include base `stem`: "'_arc_base' is an include base (FILE: no 'task' key; task YAMLs
  /// include it), not a task, tag or group".
  std::string base_note(const std::string& stem) const;

 private:
  /// `inherited`: the task keys the enclosing groups set on their members (lm-eval's overrides).
  void expand_item(const nlohmann::json& item, const std::string& file, const std::string& origin,
                   std::vector<std::string>& stack, TaskTree& tree, std::vector<std::string>* parent,
                   const nlohmann::json& inherited = nlohmann::json::object()) const;
  void expand_group(const nlohmann::json& config, const std::string& file, const std::string& origin,
                    std::vector<std::string>& stack, TaskTree& tree, std::vector<std::string>* parent,
                    const nlohmann::json& inherited = nlohmann::json::object()) const;
  void add_task(const std::string& name, const nlohmann::json& overrides, TaskTree& tree, std::vector<std::string>* parent) const;
  std::string unknown(const std::string& name, const std::string& origin) const;
  std::map<std::string, TaskIndexEntry> entries_;
  std::map<std::string, std::string> notes_;  ///< name -> how a task/group and tag clash was resolved
  std::map<std::string, std::string> bases_;  ///< include_bases()
  std::vector<std::string> dirs_;
};

/// A spec's `tasks` list with every named entry replaced by the task entries
/// it stands for: "arc_easy" or {"task": "ai2_arc", "num_fewshot": 5, "limit": 10}
/// become {"lm_eval_yaml": FILE, ...the object's other keys} for each task the
/// name expands to (TaskIndex::expand_tree), an inline task config
/// {"lm_eval_yaml": GROUP_FILE, "lm_eval_inline": CONFIG, "name": "<group>::<task>"};
/// other entries are kept. `num_fewshot`,
/// when given, is set on every entry. `index` is called once, on the first
/// named entry. Each result keeps the position of the entry it came from (for
/// messages). `origin(i)` names entry i in messages. The groups met are
/// appended to `groups` (each once), the index's notes on the names used to
/// `notes` (each once). Throws SpecError.
std::vector<std::pair<size_t, nlohmann::json>> expand_task_names(const nlohmann::json& tasks,
                                                                 const std::function<const TaskIndex&()>& index,
                                                                 const std::function<std::string(size_t)>& origin,
                                                                 std::optional<int> num_fewshot,
                                                                 std::vector<GroupSpec>* groups = nullptr,
                                                                 std::vector<std::string>* notes = nullptr);

/// Whether `name` matches the shell glob `pattern` (`*`, `?`, `[...]`; Python
/// fnmatch.fnmatchcase, as `lm_eval --tasks list` filters).
bool glob_match(const std::string& pattern, const std::string& name);

}  // namespace kveval::eval
