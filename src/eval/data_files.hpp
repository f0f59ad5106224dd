#pragma once
// Internal to src/eval: the rows of one local data file, read as lm-eval's
// `datasets` builders read them (dataset_path json, csv, parquet), chosen by
// the file's extension:
// - `.csv`: CSV (RFC 4180: quoted fields, doubled quotes, line breaks inside
//   quotes; the first row names the columns), read with Python's csv module in
//   the embedded interpreter, each column typed as pandas.read_csv (which
//   `datasets` calls) types it: int when every cell is an integer and none is
//   missing, float when every cell is a number or missing, bool for
//   True/False, else str; a missing cell (empty or one of pandas' NA strings)
//   is None;
// - `.parquet`: pyarrow.parquet when pyarrow is importable, else an error
//   saying so;
// - anything else: JSON Lines (one object per non-blank line), or one JSON
//   array of objects when the file starts with '[' (datasets' json builder
//   reads both).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kveval::eval {

/// One row of a data file.
struct DataRow {
  std::string origin;  ///< "data.jsonl:17" (the line the row starts at) or "data.json: [3]"
  nlohmann::json doc;  ///< the row
  std::string text;    ///< the row as JSON text in its key order (the samples' `doc`)
};

/// The rows of `path` (see above), in file order. Throws SpecError "path:line: ..."
/// for a row that is not an object, a CSV error, or a format the machine cannot read.
std::vector<DataRow> read_data_file(const std::string& path);

/// The format read_data_file uses for `path`: "csv", "parquet" or "json".
std::string data_file_format(const std::string& path);

/// Whether a data_files entry is a glob pattern (has `*`, `?` or `[`, Python's glob.has_magic).
bool has_glob_magic(const std::string& pattern);

/// The files a glob pattern of `datasets`' data_files matches (datasets.data_files.resolve_pattern,
/// fsspec's glob): relative to `base_dir` unless absolute; `*` and `?` match within one path
/// component, `**` any number of components, `[...]` / `[!...]` a character class; regular files
/// only (symlinks to files count); files and folders whose names start with "." or folders
/// starting with "__" only when the pattern names as many such parts; README.md, config.json,
/// dataset_info.json, dataset_infos.json, dummy_data.zip and dataset_dict.json only when the
/// pattern names them. Sorted by path (fsspec's order); empty when nothing matches.
std::vector<std::string> glob_data_files(const std::string& pattern, const std::string& base_dir);

}  // namespace kveval::eval
