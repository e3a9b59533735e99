/**
 * Runs the MindSpore-free part of ascend310_infer (inc/utils.h) the way main.cc does, with the
 * model replaced by a fixed, exactly reproducible function, so tests/deploy/test_cpp_app.py can
 * check it on real preprocess.py output against NumPy and postprocess.py.
 *
 *   io_check --mindir_path=<any file> --input_path=<images/> --result_path=<dir> --time_path=<dir>
 *            --num_classes=N [--num_images=N] --input_shape=B,C,H,W [--output_type=float32|float16]
 *            [--output_elements=N] [--ms_per_file=10]
 *
 * The "model": logits[b][k] = input[b].flat[k * stride], stride = C*H*W / num_classes (a copy of
 * every stride-th value of each image), so the result files hold the inputs' own bytes. Its
 * output is reported to CheckOutput as --output_type with --output_elements values (default:
 * float32, B x num_classes), and each file "takes" --ms_per_file for the timing summary.
 */
#include <cstdint>
#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "inc/utils.h"

namespace {

int Fail(const std::string &message, int code) {
  std::cerr << "error: " << message << std::endl;
  return code;
}

/// Removes --key=value from argv (test-only options) and returns value, or `fallback`.
std::string TakeOption(int *argc, char **argv, const std::string &key, const std::string &fallback) {
  const std::string prefix = "--" + key + "=";
  std::string value = fallback;
  int out = 1;
  for (int i = 1; i < *argc; ++i) {
    if (std::string(argv[i]).rfind(prefix, 0) == 0) {
      value = std::string(argv[i]).substr(prefix.size());
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  return value;
}

std::vector<int64_t> ParseShape(const std::string &text) {
  std::vector<int64_t> shape;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    shape.push_back(std::stoll(part));
  }
  return shape;
}

}  // namespace

int main(int argc, char **argv) {
  const std::vector<int64_t> shape = ParseShape(TakeOption(&argc, argv, "input_shape", "1,3,64,64"));
  const std::string output_type = TakeOption(&argc, argv, "output_type", "float32");
  const int64_t output_elements = std::stoll(TakeOption(&argc, argv, "output_elements", "-1"));
  const double ms_per_file = std::stod(TakeOption(&argc, argv, "ms_per_file", "10"));
  nfnet_infer::Options options;
  std::string error;
  if (!nfnet_infer::ParseOptions(argc, argv, &options, &error)) {
    return Fail(error.empty() ? nfnet_infer::Usage(argv[0]) : error, nfnet_infer::kExitUsage);
  }
  std::vector<std::string> files;
  if (!nfnet_infer::ListBinFiles(options.input_path, &files, &error)) {
    return Fail(error, nfnet_infer::kExitUsage);
  }
  if (!nfnet_infer::MakeDirs(options.result_path, &error) || !nfnet_infer::MakeDirs(options.time_path, &error)) {
    return Fail(error, nfnet_infer::kExitUsage);
  }
  const int64_t batch = shape[0];
  const int64_t per_image = shape[1] * shape[2] * shape[3];
  const size_t input_bytes = static_cast<size_t>(batch * per_image) * sizeof(float);
  const int64_t classes = options.num_classes;
  if (!nfnet_infer::CheckImageCount(options.num_images, files.size(), batch, &error)) {
    return Fail(error, nfnet_infer::kExitUsage);
  }
  double total_ms = 0.0;
  for (const std::string &file : files) {
    std::vector<char> data;
    if (!nfnet_infer::ReadFile(file, &data, &error) ||
        !nfnet_infer::CheckInputSize(file, data.size(), shape, input_bytes, &error)) {
      return Fail(error, nfnet_infer::kExitUsage);
    }
    const std::string name = nfnet_infer::BaseName(file);
    const int64_t elements = output_elements >= 0 ? output_elements : batch * classes;
    if (!nfnet_infer::CheckOutput(name, 0, output_type == "float32", output_type, elements, batch, classes, &error)) {
      return Fail(error, nfnet_infer::kExitUsage);
    }
    std::vector<float> image(static_cast<size_t>(batch * per_image));
    std::memcpy(image.data(), data.data(), data.size());
    std::vector<float> logits(static_cast<size_t>(batch * classes));
    const int64_t stride = per_image / classes;
    for (int64_t b = 0; b < batch; ++b) {
      for (int64_t k = 0; k < classes; ++k) {
        logits[b * classes + k] = image[b * per_image + k * stride];
      }
    }
    if (!nfnet_infer::WriteFile(nfnet_infer::ResultPath(options.result_path, name, 0), logits.data(),
                                logits.size() * sizeof(float), &error)) {
      return Fail(error, nfnet_infer::kExitRuntime);
    }
    total_ms += ms_per_file;
  }
  const std::string text = nfnet_infer::TimingSummary(total_ms, files.size(), batch, options.num_images) + "\n";
  if (!nfnet_infer::WriteFile(options.time_path + "/" + nfnet_infer::kTimeFile, text.data(), text.size(), &error)) {
    return Fail(error, nfnet_infer::kExitRuntime);
  }
  std::cout << text;
  return 0;
}
