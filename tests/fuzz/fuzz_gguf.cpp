// libFuzzer target: the GGUF reader. Each input is written to a per-process
// file and opened with gguf::File; a file that opens is read the way the
// model loader reads it (every key through the typed getters, every tensor
// as float32, the tokenizer). kveval::Error is the expected outcome for bad
// input; any other exception, crash or sanitizer report is a finding.
#include <cstdint>
#include <string>

#include "fuzz_util.hpp"
#include "model/gguf.hpp"
#include "model/tokenizer.hpp"
#include "util/error.hpp"

using namespace kveval;

namespace {

template <class F>
void expect_error_or_value(F&& f) {
  try {
    f();
  } catch (const Error&) {
  }
}

void read_everything(const gguf::File& file) {
  volatile double sink = 0;
  for (const auto& kv : file.metadata()) {
    const std::string& key = kv.first;  // clang 14 cannot capture structured bindings
    expect_error_or_value([&] { sink = sink + static_cast<double>(file.get_uint(key)); });
    expect_error_or_value([&] { sink = sink + file.get_float(key); });
    expect_error_or_value([&] { sink = sink + static_cast<double>(file.get_string(key).size()); });
    expect_error_or_value([&] { sink = sink + static_cast<double>(file.get_string_array(key).size()); });
    expect_error_or_value([&] { sink = sink + static_cast<double>(file.get_float_array(key).size()); });
    expect_error_or_value([&] { sink = sink + static_cast<double>(file.get_int_array(key).size()); });
    if (file.find(key) != &kv.second) fuzz::property_failed("find(key) is not the metadata entry");
  }
  for (const auto& t : file.tensors()) {
    if (file.find_tensor(t.name) != &t) fuzz::property_failed("find_tensor(name) is not the tensor");
    expect_error_or_value([&] {
      const auto v = file.tensor_f32(t.name, t.dims);
      if (v.size() != t.n_elements) fuzz::property_failed("tensor_f32 size != n_elements");
      for (float x : v) sink = sink + x;
    });
  }
  expect_error_or_value([&] {
    const Tokenizer tok = Tokenizer::from_gguf(file);
    for (const char* s : {"Once upon a time", " a\n\xC3\xA9\xF0\x9F\x99\x82", ""}) {
      const auto ids = tok.encode(s, true);
      sink = sink + static_cast<double>(tok.decode(ids).size());
    }
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = (fuzz::scratch_dir("gguf") / "input.gguf").string();
  fuzz::write_file(path, data, size);
  try {
    gguf::File file(path);
    read_everything(file);
  } catch (const Error&) {
  }
  return 0;
}
