// The local data files of an lm-eval task YAML (dataset_path json, csv or
// parquet with dataset_kwargs.data_files): see lm_eval_task_keys.hpp.
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "eval/data_files.hpp"
#include "eval/json_input.hpp"
#include "eval/lm_eval_task_keys.hpp"
#include "util/error.hpp"

namespace kveval::eval {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

/// The folders a relative data_files entry is looked for in: `data_dir` (dataset_kwargs.data_dir,
/// the base `datasets` resolves data_files against; itself next to the YAML, else in the working
/// directory), else the YAML's folder, then the working directory (lm-eval passes data_files on
/// unchanged and `datasets` resolves them there).
std::vector<std::string> data_bases(const TaskKeys& c, const std::string& data_dir) {
  const std::string dir = fs::path(c.path).parent_path().string();
  if (data_dir.empty()) return {dir, fs::current_path().string()};
  std::error_code ec;
  if (fs::path(data_dir).is_absolute()) return {data_dir};
  const std::string next = dir.empty() ? data_dir : (fs::path(dir) / data_dir).lexically_normal().string();
  if (fs::is_directory(next, ec)) return {next};
  if (fs::is_directory(data_dir, ec)) return {fs::absolute(data_dir).lexically_normal().string()};
  c.fail("dataset_kwargs", fmt::format("data_dir: folder \"{}\" not found (looked for next to the YAML, then in the "
                                       "working directory)", data_dir));
}

/// One entry of data_files (split `split`): a file, or a glob pattern giving its matches in
/// sorted order (glob_data_files; none: empty, as `datasets` skips a pattern without matches);
/// an absolute path as it is, a relative one in the first of data_bases that has it. Each
/// file's extension must pick the YAML's builder (data_file_format).
std::vector<std::string> resolve_data_files(const TaskKeys& c, const std::string& split, const std::string& p,
                                            const std::string& data_dir) {
  const std::string where = fmt::format("data_files.{}", split);
  if (p.find("://") != std::string::npos)
    c.fail("dataset_kwargs", fmt::format("{}: \"{}\" is not a local file; kveval reads local files only (give the "
                                         "path of a local copy)", where, p));
  std::error_code ec;
  const std::vector<std::string> bases = data_bases(c, data_dir);
  std::vector<std::string> files;
  for (const std::string& base : fs::path(p).is_absolute() ? std::vector<std::string>{""} : bases) {
    if (has_glob_magic(p)) {
      files = glob_data_files(p, base);
    } else if (std::string f = base.empty() ? p : (fs::path(base) / p).lexically_normal().string(); fs::is_regular_file(f, ec)) {
      files = {f};
    }
    if (!files.empty()) break;
  }
  if (files.empty() && !has_glob_magic(p))
    c.fail("dataset_kwargs", fmt::format("{}: file \"{}\" not found ({})", where, p,
                                         fs::path(p).is_absolute() ? "an absolute path"
                                         : data_dir.empty()        ? "looked for next to the YAML, then in the working directory"
                                                                   : "looked for in data_dir " + bases[0]));
  const std::string builder = c.at("dataset_path").get<std::string>();
  for (const std::string& file : files)
    if (const std::string format = data_file_format(file); format != builder)
      c.fail("dataset_kwargs", fmt::format("{}: \"{}\" is read as {} (kveval picks the reader by the extension: .csv, "
                                           ".parquet, anything else JSON), but dataset_path is {}", where,
                                           has_glob_magic(p) ? file : p, format, builder));
  return files;
}

}  // namespace

/// dataset_path values that name a local-file builder of `datasets` (json, csv, parquet).
bool is_local_builder(const TaskKeys& c) {
  if (!c.has("dataset_path") || !c.at("dataset_path").is_string()) return false;
  const std::string b = c.at("dataset_path").get<std::string>();
  return b == "json" || b == "csv" || b == "parquet";
}

/// dataset_path json, csv or parquet with dataset_kwargs.data_files (a file or pattern, a list of
/// them, or a mapping of split to either; a bare file or list is the "train" split, as in
/// `datasets`) and optional data_dir: each split's files in order (resolve_data_files, the
/// patterns' matches one after the other, as DataFilesList.from_patterns).
std::map<std::string, std::vector<std::string>> local_data_files(const TaskKeys& c) {
  std::map<std::string, std::vector<std::string>> files;  // split -> files
  const std::string builder = c.at("dataset_path").get<std::string>();
  if (c.has("dataset_name")) c.fail("dataset_name", fmt::format("must be null for local {} data", builder));
  if (!c.has("dataset_kwargs") || !c.at("dataset_kwargs").is_object() || !c.at("dataset_kwargs").contains("data_files"))
    c.fail("dataset_path", fmt::format("'{}' needs dataset_kwargs.data_files (the local files of each split; kveval does "
                                       "not infer splits from the names of data_dir's files)", builder));
  std::string data_dir;
  for (auto it = c.at("dataset_kwargs").begin(); it != c.at("dataset_kwargs").end(); ++it)
    if (it.key() == "data_dir") {
      if (!it.value().is_string() || it.value().get<std::string>().empty())
        c.fail("dataset_kwargs", fmt::format("data_dir: expected a folder name, got {}", json_excerpt(it.value())));
      data_dir = it.value().get<std::string>();
    } else if (it.key() != "data_files") {
      c.fail("dataset_kwargs", fmt::format("'{}' is not supported (only data_files and data_dir)", it.key()));
    }
  const json& df = c.at("dataset_kwargs")["data_files"];
  auto one = [&](const json& v, const std::string& split) {
    const json list = v.is_array() ? v : json::array({v});
    std::vector<std::string>& out = files[split];
    for (const json& f : list) {
      if (!f.is_string() || f.get<std::string>().empty())
        c.fail("dataset_kwargs", fmt::format("data_files.{}: expected a file name or pattern, got {}", split, json_excerpt(v)));
      for (std::string& file : resolve_data_files(c, split, f.get<std::string>(), data_dir)) out.push_back(std::move(file));
    }
    if (out.empty())
      c.fail("dataset_kwargs", fmt::format("data_files.{}: no file matches {} ({})", split, json_excerpt(v),
                                           data_dir.empty() ? "looked for next to the YAML, then in the working directory"
                                                            : "looked for in data_dir " + data_bases(c, data_dir)[0]));
  };
  if (df.is_object()) {
    for (auto it = df.begin(); it != df.end(); ++it) one(it.value(), it.key());
  } else {
    one(df, "train");  // datasets: a bare file or list is the "train" split
  }
  return files;
}

}  // namespace kveval::eval
