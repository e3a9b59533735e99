/**
 * NFNet inference on Ascend 310 (or GPU / CPU) with MindSpore's C++ API.
 *
 * Loads a MINDIR written by export.py, runs every <input_path>/<name>.bin (float32 NCHW,
 * written by preprocess.py through the Python eval transform, so no image decoding or
 * resizing happens here) and writes <result_path>/<name>_<i>.bin for each output i,
 * which postprocess.py scores. Prints the latency of each file and writes the mean per
 * image to <time_path>/test_perform_static.txt. Every MindSpore Status is checked: the
 * app stops with a message naming the failed step and exits non-zero.
 */
#include <chrono>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "include/api/context.h"
#include "include/api/model.h"
#include "include/api/serialization.h"
#include "include/api/status.h"
#include "include/api/types.h"
#include "inc/utils.h"

namespace {

using mindspore::MSTensor;
using mindspore::Status;
using nfnet_infer::Options;

constexpr char kTimeFile[] = "test_perform_static.txt";

/// Prints "error: <step> failed (status <code>): <message>" when `status` is not OK.
bool Ok(const Status &status, const std::string &step) {
  if (status == mindspore::kSuccess) {
    return true;
  }
  std::cerr << "error: " << step << " failed (status " << static_cast<uint32_t>(status.StatusCode())
            << "): " << status.ToString() << std::endl;
  return false;
}

int Fail(const std::string &message) {
  std::cerr << "error: " << message << std::endl;
  return 1;
}

/// The device description for --device_type (validated by ParseOptions).
std::shared_ptr<mindspore::DeviceInfoContext> MakeDeviceInfo(const Options &options) {
  if (options.device_type == "Ascend") {
    auto ascend = std::make_shared<mindspore::AscendDeviceInfo>();
    ascend->SetDeviceID(options.device_id);
    return ascend;
  }
  if (options.device_type == "GPU") {
    auto gpu = std::make_shared<mindspore::GPUDeviceInfo>();
    gpu->SetDeviceID(options.device_id);
    return gpu;
  }
  return std::make_shared<mindspore::CPUDeviceInfo>();
}

/// Writes each output of one inference as <result_path>/<name>_<i>.bin.
bool WriteOutputs(const Options &options, const std::string &name, const std::vector<MSTensor> &outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const std::string path = options.result_path + "/" + name + "_" + std::to_string(i) + ".bin";
    std::shared_ptr<const void> data = outputs[i].Data();  // host copy of the output
    std::string error;
    if (data == nullptr || !nfnet_infer::WriteFile(path, data.get(), outputs[i].DataSize(), &error)) {
      std::cerr << "error: output " << i << " of " << name << ": "
                << (data == nullptr ? "no data on the host" : error) << std::endl;
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char **argv) {
  Options options;
  std::string error;
  if (!nfnet_infer::ParseOptions(argc, argv, &options, &error)) {
    if (!error.empty()) {
      std::cerr << "error: " << error << "\n";
    }
    std::cerr << nfnet_infer::Usage(argv[0]) << std::endl;
    return error.empty() ? 0 : 2;
  }
  std::vector<std::string> files;
  if (!nfnet_infer::ListBinFiles(options.input_path, &files, &error)) {
    return Fail(error);
  }
  if (files.empty()) {
    return Fail("no .bin files in " + options.input_path + " (run preprocess.py first)");
  }
  if (!nfnet_infer::MakeDirs(options.result_path, &error) || !nfnet_infer::MakeDirs(options.time_path, &error)) {
    return Fail(error);
  }

  auto context = std::make_shared<mindspore::Context>();
  context->MutableDeviceInfo().push_back(MakeDeviceInfo(options));
  mindspore::Graph graph;
  if (!Ok(mindspore::Serialization::Load(options.mindir_path, mindspore::ModelType::kMindIR, &graph),
          "loading " + options.mindir_path)) {
    return 1;
  }
  mindspore::Model model;
  if (!Ok(model.Build(mindspore::GraphCell(graph), context),
          "building the model on " + options.device_type + " " + std::to_string(options.device_id))) {
    return 1;
  }
  const std::vector<MSTensor> model_inputs = model.GetInputs();
  if (model_inputs.size() != 1) {
    return Fail("expected a model with one input, " + options.mindir_path + " has " +
                std::to_string(model_inputs.size()));
  }
  const MSTensor &input = model_inputs[0];
  if (input.DataType() != mindspore::DataType::kNumberTypeFloat32 || input.Shape().empty() ||
      input.Shape()[0] < 1) {
    return Fail("expected a float32 NCHW model input, got shape (" + nfnet_infer::ShapeToString(input.Shape()) + ")");
  }
  const int64_t batch = input.Shape()[0];
  std::cout << "model input " << input.Name() << ": float32 (" << nfnet_infer::ShapeToString(input.Shape())
            << "), " << files.size() << " files" << std::endl;

  double total_ms = 0.0;
  for (const std::string &file : files) {
    std::vector<char> data;
    if (!nfnet_infer::ReadFile(file, &data, &error)) {
      return Fail(error);
    }
    if (data.size() != input.DataSize()) {
      return Fail(file + ": " + std::to_string(data.size()) + " bytes, but the model input (" +
                  nfnet_infer::ShapeToString(input.Shape()) + ") takes " + std::to_string(input.DataSize()) +
                  "; preprocess with the exported batch size and test_input_size");
    }
    std::vector<MSTensor> inputs;
    inputs.emplace_back(input.Name(), input.DataType(), input.Shape(), data.data(), data.size());
    std::vector<MSTensor> outputs;
    const auto start = std::chrono::steady_clock::now();
    const Status status = model.Predict(inputs, &outputs);
    const auto end = std::chrono::steady_clock::now();
    const std::string name = nfnet_infer::BaseName(file);
    if (!Ok(status, "inference on " + file)) {
      return 1;
    }
    if (outputs.empty()) {
      return Fail("inference on " + file + " returned no output");
    }
    if (!WriteOutputs(options, name, outputs)) {
      return 1;
    }
    const double ms = std::chrono::duration<double, std::milli>(end - start).count();
    total_ms += ms;
    std::cout << name << ": " << std::fixed << std::setprecision(3) << ms / static_cast<double>(batch)
              << " ms per image" << std::endl;
  }

  const double per_file = total_ms / static_cast<double>(files.size());
  std::ostringstream summary;
  summary << std::fixed << std::setprecision(3) << "NN inference cost average time: "
          << per_file / static_cast<double>(batch) << " ms per image (" << per_file << " ms per file, "
          << files.size() << " files, " << files.size() * static_cast<size_t>(batch) << " images)";
  const std::string text = summary.str() + "\n";
  if (!nfnet_infer::WriteFile(options.time_path + "/" + kTimeFile, text.data(), text.size(), &error)) {
    return Fail(error);
  }
  std::cout << summary.str() << std::endl;
  return 0;
}
