#include "eval/task_index.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "eval/json_input.hpp"
#include "eval/lm_eval_yaml.hpp"
#include "util/error.hpp"

namespace kveval::eval {

namespace fs = std::filesystem;
using nlohmann::json;

const char* to_string(TaskKind k) {
  switch (k) {
    case TaskKind::Task: return "task";
    case TaskKind::Tag: return "tag";
    case TaskKind::Group: return "group";
  }
  return "?";
}

std::vector<std::string> include_paths_from_env() {
  std::vector<std::string> out;
  const char* v = std::getenv(kIncludePathEnv);
  if (!v) return out;
  std::string s(v);
  size_t start = 0;
  while (start <= s.size()) {
    size_t end = s.find(':', start);
    if (end == std::string::npos) end = s.size();
    if (end > start) out.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool glob_match(const std::string& pattern, const std::string& name) {
  return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

namespace {

/// The *.yaml files under `dir`, recursively, in sorted path order
/// (lm-eval's os.walk skips __pycache__ and .ipynb_checkpoints).
std::vector<std::string> yaml_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::follow_directory_symlink, ec), end;
  if (ec) throw ArgumentError(fmt::format("{}: cannot list: {}", dir, ec.message()));
  for (; it != end; it.increment(ec)) {
    if (ec) throw ArgumentError(fmt::format("{}: cannot list: {}", dir, ec.message()));
    const fs::path& p = it->path();
    const std::string leaf = p.filename().string();
    if (it->is_directory(ec) && (leaf == "__pycache__" || leaf == ".ipynb_checkpoints")) {
      it.disable_recursion_pending();
      continue;
    }
    if (p.extension() == ".yaml" && it->is_regular_file(ec)) out.push_back(p.string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

/// `v` as a list of strings (a string is a list of one); throws SpecError naming file and key.
std::vector<std::string> string_list(const json& v, const std::string& file, const char* key) {
  std::vector<std::string> out;
  if (v.is_string()) return {v.get<std::string>()};
  if (!v.is_array()) throw SpecError(fmt::format("{}: {}: expected a name or a list of names, got {}", file, key, json_excerpt(v)));
  for (const auto& e : v) {
    if (!e.is_string()) throw SpecError(fmt::format("{}: {}: expected names, got {}", file, key, json_excerpt(e)));
    out.push_back(e.get<std::string>());
  }
  return out;
}

}  // namespace

TaskIndex TaskIndex::build(const std::vector<std::pair<std::string, std::string>>& paths) {
  TaskIndex idx;
  std::map<std::string, TaskIndexEntry> tags;
  std::set<std::string> read;
  auto define = [&idx](TaskIndexEntry e) {
    auto [it, fresh] = idx.entries_.try_emplace(e.name, e);
    if (!fresh)
      throw SpecError(fmt::format("duplicate task name '{}': {} ({}) and {} ({})", e.name, it->second.file,
                                  to_string(it->second.kind), e.file, to_string(e.kind)));
  };
  for (const auto& [what, dir] : paths) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec))
      throw ArgumentError(fmt::format("{} {}: {}", what, dir, fs::exists(dir, ec) ? "not a directory" : "no such directory"));
    idx.dirs_.push_back(dir);
    for (const std::string& file : yaml_files(dir)) {
      if (!read.insert(fs::weakly_canonical(file, ec).string()).second) continue;  // under two include paths: read once
      const json c = load_lm_eval_yaml_keys(file);
      if (!c.contains("task")) {  // an include base, or a file lm-eval does not index
        idx.bases_.try_emplace(fs::path(file).stem().string(), file);
        continue;
      }
      if (c["task"].is_string()) {
        TaskIndexEntry e{c["task"].get<std::string>(), TaskKind::Task, file, {}, {}};
        if (auto t = tags.find(e.name); t != tags.end()) {  // lm-eval keeps the tag met first and skips the task
          idx.notes_[e.name] = fmt::format("'{}' is a tag (first in {}); the task of that name in {} is not registered, "
                                           "as in lm-eval", e.name, t->second.file, e.file);
          continue;
        }
        define(e);
        if (c.contains("tag") && !c["tag"].is_null())
          for (const std::string& t : string_list(c["tag"], file, "tag")) {
            auto [it, fresh] = tags.try_emplace(t, TaskIndexEntry{t, TaskKind::Tag, file, {}, {}});
            it->second.members.push_back(e.name);
          }
      } else if (c["task"].is_array()) {
        if (!c.contains("group") || !c["group"].is_string())
          throw SpecError(fmt::format("{}: group: a list under 'task' needs a 'group' name", file));
        TaskIndexEntry g{c["group"].get<std::string>(), TaskKind::Group, file, {}, c};
        for (const auto& m : c["task"]) {
          if (m.is_string()) g.members.push_back(m.get<std::string>());
          else if (m.is_object() && m.contains("task") && m["task"].is_string()) g.members.push_back(m["task"].get<std::string>());
          else if (m.is_object() && m.contains("group") && m["group"].is_string()) g.members.push_back(m["group"].get<std::string>());
          else throw SpecError(fmt::format("{}: task: {}: expected a task, tag or group name, or a mapping with 'task' or 'group'",
                                           file, json_excerpt(m)));
        }
        define(g);
      }
    }
  }
  for (auto& [name, t] : tags) {
    auto [it, fresh] = idx.entries_.try_emplace(name, t);  // a task or group of that name wins (lm-eval)
    if (!fresh)
      idx.notes_[name] = fmt::format("'{}' is a {} ({}); the tag of that name ({}) is not registered, as in lm-eval", name,
                                     to_string(it->second.kind), it->second.file, t.file);
  }
  return idx;
}

const TaskIndexEntry* TaskIndex::find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

std::string TaskIndex::base_note(const std::string& stem) const {
  return fmt::format("'{}' is an include base ({}: no 'task' key; task YAMLs include it), not a task, tag or group", stem,
                     bases_.at(stem));
}

std::string TaskIndex::unknown(const std::string& name, const std::string& origin) const {
  if (bases_.count(name)) return fmt::format("{}: {}", origin, base_note(name));
  // the closest names by edit distance (all of the smallest distance, at most three)
  const int limit = std::max(2, static_cast<int>(name.size()) / 3);
  int best = limit + 1;
  std::vector<std::string> near;
  for (const auto& [n, e] : entries_) {
    const int d = edit_distance(name, n);
    if (d < best) best = d, near.clear();
    if (d == best && near.size() < 3) near.push_back(n);
  }
  std::string hint;
  for (const auto& n : near) hint += (hint.empty() ? "" : ", ") + fmt::format("'{}'", n);
  std::string where;
  for (const auto& d : dirs_) where += (where.empty() ? "" : ", ") + d;
  return fmt::format("{}: unknown task, tag or group '{}'{}{} (searched {})", origin, name,
                     hint.empty() ? "" : fmt::format("; did you mean {}?", hint),
                     name.starts_with('_') ? "; a name with a leading '_' is usually an include base, not a task" : "",
                     where.empty() ? "no include path: give --include-path or set KVEVAL_INCLUDE_PATH" : where);
}

void TaskIndex::add_task(const std::string& name, const json& overrides, TaskTree& tree,
                         std::vector<std::string>* parent) const {
  if (parent) parent->push_back(name);
  for (const auto& t : tree.tasks)
    if (t.first == name) return;  // each task once (the first overrides win)
  tree.tasks.emplace_back(name, overrides);
}

/// A task's overrides from lm-eval's dict of task keys: num_fewshot and task_alias as the spec
/// entry's keys, the others replacing the YAML's keys (lm_eval_overrides).
static json task_overrides(const json& keys) {
  json overrides = json::object(), rest = keys;
  for (const char* k : {"num_fewshot", "task_alias"})
    if (rest.contains(k)) overrides[k] = rest[k], rest.erase(k);
  if (!rest.empty()) overrides["lm_eval_overrides"] = rest;
  return overrides;
}

/// `base` with `over`'s keys replacing its own (Python's {**base, **over}).
static json merged(json base, const json& over) {
  for (auto it = over.begin(); it != over.end(); ++it) base[it.key()] = it.value();
  return base;
}

void TaskIndex::expand_group(const json& config, const std::string& file, const std::string& origin,
                             std::vector<std::string>& stack, TaskTree& tree, std::vector<std::string>* parent,
                             const json& inherited) const {
  GroupSpec g = parse_group_config(config, file);
  // lm-eval's TaskFactory._build_group: the group's keys that are no GroupConfig field are task keys
  // set on every member, under those of the enclosing groups
  json keys = json::object();
  for (auto it = config.begin(); it != config.end(); ++it)
    if (!std::set<std::string>{"group", "group_alias", "task", "aggregate_metric_list", "metadata"}.count(it.key()))
      keys[it.key()] = it.value();
  keys = merged(keys, inherited);
  if (std::find(stack.begin(), stack.end(), g.name) != stack.end())
    throw SpecError(fmt::format("{}: group '{}' lists itself (through '{}')", file, g.name, stack.back()));
  if (parent) parent->push_back(g.name);
  for (const auto& known : tree.groups)
    if (known.name == g.name) return;
  const size_t gi = tree.groups.size();
  tree.groups.push_back(std::move(g));
  const json list = !config.contains("task") || config["task"].is_null() ? json::array()
                    : config["task"].is_array()                          ? config["task"]
                                                                         : json::array({config["task"]});
  std::vector<std::string> members;
  stack.push_back(tree.groups[gi].name);
  for (const json& item : list) expand_item(item, file, origin, stack, tree, &members, keys);
  stack.pop_back();
  tree.groups[gi].members = std::move(members);
}

void TaskIndex::expand_item(const json& item, const std::string& file, const std::string& origin,
                            std::vector<std::string>& stack, TaskTree& tree, std::vector<std::string>* parent,
                            const json& inherited) const {
  const std::string where = stack.empty() ? origin : fmt::format("{} (group '{}')", origin, stack.back());
  if (item.is_string() || (item.is_object() && item.contains("task") && item["task"].is_string())) {
    const std::string name = item.is_string() ? item.get<std::string>() : item["task"].get<std::string>();
    if (auto n = notes_.find(name); n != notes_.end() && std::find(tree.notes.begin(), tree.notes.end(), n->second) == tree.notes.end())
      tree.notes.push_back(n->second);
  }
  if (item.is_string()) {
    const std::string name = item.get<std::string>();
    const TaskIndexEntry* e = find(name);
    if (!e) throw SpecError(unknown(name, where));
    if (e->kind == TaskKind::Task) add_task(name, task_overrides(inherited), tree, parent);
    else if (e->kind == TaskKind::Tag) for (const auto& m : e->members) add_task(m, task_overrides(inherited), tree, parent);
    else expand_group(e->config, e->file, origin, stack, tree, parent, inherited);
    return;
  }
  if (item.is_object() && item.contains("task") && item["task"].is_string()) {
    // lm-eval (TaskFactory._build_group_members): a dict naming an indexed task, tag or group sets its
    // keys on its tasks; a dict naming no indexed task is an inline task config, named "<group>::<task>"
    const std::string name = item["task"].get<std::string>();
    const TaskIndexEntry* e = find(name);
    if (!e) {
      if (stack.empty() || file.empty())
        throw SpecError(fmt::format("{}: task: {}: an inline task config belongs in a group's task list", where, name));
      add_task(stack.back() + "::" + name, {{"!inline", merged(inherited, item)}, {"!file", file}}, tree, parent);
      return;
    }
    json keys = merged(inherited, item);  // the item's keys over the enclosing groups'
    keys.erase("task");
    const json overrides = task_overrides(keys);
    if (e->kind == TaskKind::Task) add_task(name, overrides, tree, parent);
    else if (e->kind == TaskKind::Tag) for (const auto& m : e->members) add_task(m, overrides, tree, parent);
    else expand_group(e->config, e->file, origin, stack, tree, parent, keys);
    return;
  }
  if (item.is_object() && item.contains("group") && item["group"].is_string()) {
    // lm-eval: a dict naming an indexed group sets its other keys on that group's members; else an inline group
    const TaskIndexEntry* e = find(item["group"].get<std::string>());
    if (e && e->kind == TaskKind::Group) {
      json keys = merged(inherited, item);
      keys.erase("group");
      return expand_group(e->config, e->file, origin, stack, tree, parent, keys);
    }
  }
  if (item.is_object() && item.contains("group")) return expand_group(item, file, origin, stack, tree, parent, inherited);
  throw SpecError(fmt::format("{}: task: {}: expected a task, tag or group name, or a mapping with 'task' or 'group'", file,
                              json_excerpt(item)));
}

void TaskIndex::expand_tree(const std::string& name, const std::string& origin, TaskTree& tree) const {
  std::vector<std::string> stack;
  expand_item(json(name), "", origin, stack, tree, nullptr);
}

std::vector<std::string> TaskIndex::expand(const std::vector<std::string>& names, const std::string& origin) const {
  TaskTree tree;
  for (const auto& n : names) expand_tree(n, origin, tree);
  std::vector<std::string> out;
  for (const auto& t : tree.tasks) out.push_back(t.first);
  return out;
}

std::vector<std::pair<size_t, json>> expand_task_names(const json& tasks, const std::function<const TaskIndex&()>& index,
                                                       const std::function<std::string(size_t)>& origin,
                                                       std::optional<int> num_fewshot, std::vector<GroupSpec>* groups,
                                                       std::vector<std::string>* notes) {
  std::vector<std::pair<size_t, json>> out;
  for (size_t i = 0; i < tasks.size(); ++i) {
    const json& e = tasks[i];
    const bool named = e.is_string() || (e.is_object() && e.contains("task"));
    if (!named) {
      out.emplace_back(i, e);
      if (num_fewshot && out.back().second.is_object()) out.back().second["num_fewshot"] = *num_fewshot;
      continue;
    }
    json rest = json::object();
    std::string name;
    if (e.is_string()) {
      name = e.get<std::string>();
    } else {
      for (auto it = e.begin(); it != e.end(); ++it)
        if (it.key() != "task" && it.key() != "num_fewshot" && it.key() != "limit")
          throw SpecError(fmt::format("{}.{}: not allowed with 'task' (a named task takes num_fewshot and limit)", origin(i), it.key()));
      if (!e["task"].is_string()) throw SpecError(fmt::format("{}.task: expected a task, tag or group name, got {}", origin(i), json_excerpt(e["task"])));
      name = e["task"].get<std::string>();
      rest = e;
      rest.erase("task");
    }
    const TaskIndex& idx = index();
    TaskTree tree;
    idx.expand_tree(name, e.is_string() ? origin(i) : origin(i) + ".task", tree);
    if (notes)
      for (const auto& n : tree.notes)
        if (std::find(notes->begin(), notes->end(), n) == notes->end()) notes->push_back(n);
    if (groups)
      for (auto& g : tree.groups)
        if (std::none_of(groups->begin(), groups->end(), [&](const GroupSpec& x) { return x.name == g.name; }))
          groups->push_back(std::move(g));
    for (const auto& [t, overrides] : tree.tasks) {
      // absolute: the entry is read relative to the spec's folder, the index's files to the working directory
      json entry;
      if (overrides.contains("!inline")) {  // an inline task config: its keys, read as written in the group's YAML
        entry = {{"lm_eval_yaml", fs::absolute(overrides["!file"].get<std::string>()).lexically_normal().string()},
                 {"lm_eval_inline", overrides["!inline"]},
                 {"name", t}};
      } else {
        entry = {{"lm_eval_yaml", fs::absolute(idx.file_of(t)).lexically_normal().string()}};
        entry.update(overrides);
      }
      entry.update(rest);
      if (num_fewshot) entry["num_fewshot"] = *num_fewshot;
      out.emplace_back(i, std::move(entry));
    }
  }
  return out;
}

}  // namespace kveval::eval
