// Load and dequantization benchmarks: see load.hpp.
#include "bench/load.hpp"

#include <algorithm>
#include <random>

#include <fmt/format.h>

#include "model/dequantize.hpp"
#include "model/gguf.hpp"
#include "model/model.hpp"
#include "util/error.hpp"
#include "util/memory.hpp"
#include "util/timer.hpp"

namespace kveval::bench {

namespace {

Row make_row(const std::string& test, const std::string& name, int threads, const std::string& unit,
             const std::vector<double>& samples) {
  Row r;
  r.test = test;
  r.name = name;
  r.threads = threads;
  r.unit = unit;
  r.value = summarize(samples);
  return r;
}

}  // namespace

void run_load(const Options& o, int threads, ComputeDtype dtype, Report& rep,
              const std::function<void(const std::string&)>& say) {
  if (say) say(fmt::format("[t={}] load: {} x {} with and without the finite scan", threads, o.repetitions, o.model_path));
  // Seconds of one Model::load; the warm-up's model also gives the summary and the dtype `auto` resolved to.
  auto seconds = [&](bool check) {
    Stopwatch sw;
    Model::load(o.model_path, {.threads = threads, .dtype = dtype, .check_finite = check, .map_weights = o.map_weights});
    return sw.seconds();
  };
  LoadSummary summary;
  std::string dname;
  std::vector<double> with, without;
  try {
    {  // warm-up: the file in the page cache; released before the timed loads
      const auto warm =
          Model::load(o.model_path, {.threads = threads, .dtype = dtype, .check_finite = true, .map_weights = o.map_weights});
      summary = warm->load_summary();
      dname = to_string(warm->dtype());
    }
    for (int i = 0; i < o.repetitions; ++i) {
      with.push_back(seconds(true));
      without.push_back(seconds(false));
    }
  } catch (const MemoryError& e) {  // a second copy beside the dtype's own model: the test, not the report, is lost
    rep.add_warning(fmt::format("skipped, load test with --dtype {} and -t {}: {}", to_string(dtype), threads, e.what()));
    return;
  }
  const double mib = 1024.0 * 1024.0;
  Row r = make_row("load", "load", threads, "s", with);
  std::string types;
  for (const auto& [name, n] : summary.tensor_types) types += fmt::format("{}{}x{}", types.empty() ? "" : " ", name, n);
  r.with("resident_MiB", static_cast<double>(summary.resident_bytes) / mib)
      .with("file_tensor_MiB", static_cast<double>(summary.file_tensor_bytes) / mib)
      .with("params_M", static_cast<double>(summary.parameters) / 1e6);
  Row n = make_row("load", "load (no finite scan)", threads, "s", without);
  // A scan cheaper than the run-to-run noise can give a negative difference: shown as 0.
  const double diff = std::max(0.0, median(with) - median(without));
  Row d = make_row("load", "finite scan", threads, "s", {diff});
  d.with("frac_of_load", median(with) > 0 ? diff / median(with) : 0.0);
  for (Row* x : {&r, &n, &d}) {
    x->dtype = dname;
    rep.rows.push_back(*x);
  }
  rep.add_note(fmt::format(
      "load: Model::load wall time with the file in the page cache (tensor types {}), conversion to the row's "
      "compute dtype included; 'finite scan' is the difference of the medians with and without the NaN/Inf "
      "check, timed interleaved (0 when the scan costs less than the noise between loads).",
      types));
}

void run_dequant(const Options& o, int threads, Report& rep, const std::function<void(const std::string&)>& say) {
  const uint64_t n = uint64_t{1} << 24;  // 16 Mi elements, 64 MiB of float32
  uint64_t blocks = 0;  // the largest type's blocks (one type's buffer is alive at a time)
  for (gguf::TensorType t : gguf::supported_types()) blocks = std::max(blocks, tensor_bytes(t, n));
  const MemoryPart parts[] = {{"float32 weights and output", 2 * n * sizeof(float)}, {"quantized blocks", blocks}};
  if (!fits_budget(rep, "dequant", parts)) return;
  std::vector<float> x(n);
  {
    std::mt19937_64 rng(o.seed);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    for (auto& v : x) v = normal(rng);
  }
  std::vector<float> y(n);
  for (gguf::TensorType t : gguf::supported_types()) {
    const std::string name = gguf::type_name(t);
    if (say) say(fmt::format("[t={}] dequant: {}", threads, name));
    std::vector<std::byte> q(tensor_bytes(t, n));
    quantize(t, x.data(), q.data(), n, threads);
    auto time = [&](bool check) {
      dequantize(t, q.data(), y.data(), n, threads, check);  // warm-up (pages of y touched)
      std::vector<double> s;
      for (int i = 0; i < o.repetitions; ++i) {
        Stopwatch sw;
        dequantize(t, q.data(), y.data(), n, threads, check);
        s.push_back(sw.seconds());
      }
      return s;
    };
    const auto with = time(true), without = time(false);
    const double out_bytes = static_cast<double>(n) * 4, in_bytes = static_cast<double>(q.size());
    std::vector<double> gbs;
    for (double s : with) gbs.push_back(out_bytes / s / 1e9);
    Row r = make_row("dequant", name, threads, "GB/s", gbs);
    r.with("in_GB_per_s", in_bytes / median(with) / 1e9)
        .with("Melem_per_s", static_cast<double>(n) / median(with) / 1e6)
        .with("no_scan_GB_per_s", out_bytes / median(without) / 1e9)
        .with("bits_per_weight", in_bytes * 8 / static_cast<double>(n));
    rep.rows.push_back(r);
  }
  rep.add_note(
      "dequant: 16 Mi N(0, 0.02) weights per type (kveval's quantizers), decoded to float32 with the NaN/Inf scan; "
      "GB/s = float32 bytes written per second (in_GB_per_s: block bytes read); no_scan_GB_per_s without the scan.");
}

}  // namespace kveval::bench
