/**
 * NFNet inference with MindSpore's C++ API: Ascend 310 / 310P / 910, GPU or CPU, on MindSpore
 * Lite 2.x (cloud inference package) or full MindSpore <= 2.3.
 *
 * Loads a MINDIR written by export.py, runs every <input_path>/<name>.bin (float32 NCHW,
 * written by preprocess.py through the Python eval transform, so no image decoding or
 * resizing happens here) and writes <result_path>/<name>_<i>.bin for each output i,
 * which postprocess.py scores. Prints the latency of each file and writes the mean per
 * real image to <time_path>/test_perform_static.txt. Every MindSpore call runs inside a
 * try/catch and has its Status checked: the app never aborts; it stops with one `error:` line
 * naming the step, the MINDIR, the device and the cause (the exception's text, or the Status as
 * its signed code, name and message) and exits 2 when the model cannot be built or used (a
 * MINDIR this runtime cannot read, a wrong device), 1 when an inference fails. Before building,
 * the MINDIR's header (inc/mindir_header.h) is checked against mindspore::Version(): a MINDIR
 * from a newer MindSpore is named as such, with the MindSpore Lite it needs and the ONNX route.
 *
 * Building the model differs between the two packages that install include/api:
 * - MindSpore Lite builds from the file, Model::Build(path, ModelType::kMindIR, context), and
 *   answers kLiteNotSupport to a GraphCell build
 *   (https://www.mindspore.cn/lite/cloud_docs/en/r2.10.0/mindir/runtime_cpp.html);
 * - full MindSpore (<= 2.3, the last wheels with include/api and libmindspore.so) builds from
 *   Serialization::Load + Model::Build(GraphCell(graph), context).
 * build.sh defines NFNET_MINDSPORE_LITE for Lite; whichever way is tried first, a
 * kLiteNotSupport answer makes the app try the other one.
 */
#include <chrono>
#include <iomanip>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <sys/stat.h>

#include "include/api/context.h"
#include "include/api/model.h"
#include "include/api/serialization.h"
#include "include/api/status.h"
#include "include/api/types.h"
#include "inc/mindir_header.h"
#include "inc/utils.h"

namespace {

using mindspore::MSTensor;
using mindspore::Status;
using nfnet_infer::Options;

#ifndef NFNET_MS_VERSION
#define NFNET_MS_VERSION ""
#endif
/// The version of the MindSpore (Lite) package build.sh built against ("" when it could not tell).
constexpr char kBuiltVersion[] = NFNET_MS_VERSION;

#ifdef NFNET_MINDSPORE_LITE
constexpr bool kLiteFirst = true;
#else
constexpr bool kLiteFirst = false;
#endif

/// "status <signed code> <name>[: <message>]": what a failed Status says.
std::string StatusText(const Status &status) {
  const mindspore::StatusCode code = status.StatusCode();
  const std::string name = Status::CodeAsString(code);
  std::string text = "status " + std::to_string(static_cast<int32_t>(code)) + " (" + name + ")";
  for (const std::string &detail : {status.GetErrDescription(), status.ToString()}) {
    if (!detail.empty() && detail != name) {
      return text + ": " + detail;
    }
  }
  return text;
}

/// Runs one MindSpore call, which returns a Status or throws; false with `cause` set when it fails.
template <typename Call>
bool Try(Call &&call, std::string *cause) {
  try {
    const Status status = call();
    if (status == mindspore::kSuccess) {
      return true;
    }
    *cause = StatusText(status);
  } catch (const std::exception &e) {
    *cause = std::string("exception: ") + e.what();
  } catch (...) {
    *cause = "an exception that is not a std::exception";
  }
  return false;
}

int Fail(const std::string &message, int code) {
  std::cerr << "error: " << message << std::endl;
  return code;
}

/// The device description for --device_type (validated by ParseOptions).
std::shared_ptr<mindspore::DeviceInfoContext> MakeDeviceInfo(const Options &options) {
  if (nfnet_infer::IsAscend(options.device_type)) {  // 310, 310P and 910 alike: the runtime knows the chip
    auto ascend = std::make_shared<mindspore::AscendDeviceInfo>();
    ascend->SetDeviceID(options.device_id);
    ascend->SetPrecisionMode(options.precision_mode);
    return ascend;
  }
  if (options.device_type == "GPU") {
    auto gpu = std::make_shared<mindspore::GPUDeviceInfo>();
    gpu->SetDeviceID(options.device_id);
    return gpu;
  }
  auto cpu = std::make_shared<mindspore::CPUDeviceInfo>();
  cpu->SetEnableFP16(false);  // float32 kernels: eval.py's numbers
  return cpu;
}

/// MindSpore Lite's way: the runtime reads the file itself.
Status BuildFromFile(mindspore::Model *model, const std::string &path,
                     const std::shared_ptr<mindspore::Context> &context) {
  return model->Build(path, mindspore::ModelType::kMindIR, context);
}

/// Full MindSpore's way: load the graph, then build a GraphCell.
Status BuildFromGraph(mindspore::Model *model, const std::string &path,
                      const std::shared_ptr<mindspore::Context> &context) {
  mindspore::Graph graph;
  const Status status = mindspore::Serialization::Load(path, mindspore::ModelType::kMindIR, &graph);
  if (status != mindspore::kSuccess) {
    return status;
  }
  return model->Build(mindspore::GraphCell(graph), context);
}

/// Where the app runs: "<mindir> on <device_type> <device_id>".
std::string Where(const Options &options) {
  return options.mindir_path + " on " + options.device_type + " " + std::to_string(options.device_id);
}

/// Builds the model the flavour's way; on kLiteNotSupport, the other way on a fresh Model.
/// Null with `error` set (one line) when neither works.
std::unique_ptr<mindspore::Model> BuildModel(const Options &options,
                                             const std::shared_ptr<mindspore::Context> &context,
                                             std::string *error) {
  using Builder = Status (*)(mindspore::Model *, const std::string &, const std::shared_ptr<mindspore::Context> &);
  const Builder first = kLiteFirst ? BuildFromFile : BuildFromGraph;
  const Builder second = kLiteFirst ? BuildFromGraph : BuildFromFile;
  const char *second_name = kLiteFirst ? "Serialization::Load + GraphCell" : "Model::Build(path)";
  auto model = std::make_unique<mindspore::Model>();
  bool unsupported = false;
  std::string cause;
  bool built = Try([&] {
    const Status status = first(model.get(), options.mindir_path, context);
    unsupported = status == mindspore::kLiteNotSupport;
    return status;
  }, &cause);
  if (unsupported) {
    std::cout << "note: the runtime does not support this way of building; trying " << second_name << std::endl;
    model = std::make_unique<mindspore::Model>();
    built = Try([&] { return second(model.get(), options.mindir_path, context); }, &cause);
  }
  if (!built) {
    *error = "building " + Where(options) + " failed: " + cause;
    return nullptr;
  }
  return model;
}

std::string TypeName(mindspore::DataType type) {
  switch (type) {
    case mindspore::DataType::kNumberTypeFloat16:
      return "float16";
    case mindspore::DataType::kNumberTypeFloat32:
      return "float32";
    case mindspore::DataType::kNumberTypeUInt8:
      return "uint8";
    default:
      return "data type " + std::to_string(static_cast<int>(type));
  }
}

/// Checks and writes each output of one inference as <result_path>/<name>_<i>.bin; returns the exit code.
int WriteOutputs(const Options &options, const std::string &name, int64_t batch,
                 const std::vector<MSTensor> &outputs) {
  std::string error;
  if (outputs.empty()) {
    return Fail("inference on " + name + " returned no output", nfnet_infer::kExitRuntime);
  }
  for (size_t i = 0; i < outputs.size(); ++i) {
    const MSTensor &output = outputs[i];
    if (!nfnet_infer::CheckOutput(name, i, output.DataType() == mindspore::DataType::kNumberTypeFloat32,
                                  TypeName(output.DataType()), output.ElementNum(), batch, options.num_classes,
                                  &error)) {
      return Fail(error, nfnet_infer::kExitUsage);
    }
    std::shared_ptr<const void> data = output.Data();  // host copy of the output
    if (data == nullptr) {
      return Fail("output " + std::to_string(i) + " of " + name + ": no data on the host", nfnet_infer::kExitRuntime);
    }
    if (!nfnet_infer::WriteFile(nfnet_infer::ResultPath(options.result_path, name, i), data.get(), output.DataSize(),
                                &error)) {
      return Fail(error, nfnet_infer::kExitRuntime);
    }
  }
  return 0;
}

bool FileSize(const std::string &path, size_t *size) {
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    return false;
  }
  *size = static_cast<size_t>(info.st_size);
  return true;
}

/// Checks the MINDIR's header against the runtime; false with `error` set when it cannot be read here.
bool CheckMindir(const Options &options, std::string *error) {
  nfnet_infer::MindirHeader header;
  if (!nfnet_infer::ReadMindirHeader(options.mindir_path, &header, error)) {
    return false;
  }
  std::string runtime;
  std::string cause;
  Try([&] {
    runtime = mindspore::Version();
    return Status(mindspore::kSuccess);
  }, &cause);
  if (runtime.empty()) {  // MindSpore Lite 2.0.0 answers ""; build.sh read the version from the package
    runtime = kBuiltVersion[0] == '\0' ? "of unknown version"
                                       : std::string(kLiteFirst ? "MindSpore Lite " : "MindSpore ") + kBuiltVersion;
  }
  std::cout << "MINDIR: " << header.producer_name << " "
            << (header.model_version.empty() ? "(no version)" : header.model_version) << ", mind_ir_version "
            << header.mind_ir_version << "; runtime: " << runtime << std::endl;
  *error = nfnet_infer::MindirVersionProblem(options.mindir_path, header, runtime);
  return error->empty();
}

/// Everything after the options: build, check, run every file, write the timing. Returns the exit code.
int Run(const Options &options) {
  std::string error;
  std::vector<std::string> files;
  if (!nfnet_infer::ListBinFiles(options.input_path, &files, &error)) {
    return Fail(error, nfnet_infer::kExitUsage);
  }
  if (files.empty()) {
    return Fail("no .bin files in " + options.input_path + " (run preprocess.py first)", nfnet_infer::kExitUsage);
  }
  if (!nfnet_infer::MakeDirs(options.result_path, &error) || !nfnet_infer::MakeDirs(options.time_path, &error)) {
    return Fail(error, nfnet_infer::kExitUsage);
  }
  if (!CheckMindir(options, &error)) {
    return Fail(error, nfnet_infer::kExitUsage);
  }

  auto context = std::make_shared<mindspore::Context>();
  context->MutableDeviceInfo().push_back(MakeDeviceInfo(options));
  std::cout << "MindSpore " << (kLiteFirst ? "Lite" : "(full)") << " C++ API, device " << options.device_type << " "
            << options.device_id;
  if (nfnet_infer::IsAscend(options.device_type)) {
    std::cout << ", precision_mode " << options.precision_mode;
  }
  std::cout << std::endl;
  std::unique_ptr<mindspore::Model> model = BuildModel(options, context, &error);
  if (model == nullptr) {
    return Fail(error, nfnet_infer::kExitUsage);
  }
  const std::vector<MSTensor> model_inputs = model->GetInputs();
  if (model_inputs.size() != 1) {
    return Fail("expected a model with one input, " + options.mindir_path + " has " +
                std::to_string(model_inputs.size()), nfnet_infer::kExitUsage);
  }
  const MSTensor &input = model_inputs[0];
  const std::vector<int64_t> shape = input.Shape();
  if (input.DataType() != mindspore::DataType::kNumberTypeFloat32 || shape.size() != 4 || shape[0] < 1) {
    return Fail("expected a float32 NCHW model input, got " + TypeName(input.DataType()) + " (" +
                nfnet_infer::ShapeToString(shape) + ")", nfnet_infer::kExitUsage);
  }
  const int64_t batch = shape[0];
  if (!nfnet_infer::CheckImageCount(options.num_images, files.size(), batch, &error)) {
    return Fail(error, nfnet_infer::kExitUsage);
  }
  for (const std::string &file : files) {  // every input checked before the first runs
    size_t size = 0;
    if (!FileSize(file, &size) || !nfnet_infer::CheckInputSize(file, size, shape, input.DataSize(), &error)) {
      return Fail(error.empty() ? "cannot read " + file : error, nfnet_infer::kExitUsage);
    }
  }
  std::cout << "model input " << input.Name() << ": float32 (" << nfnet_infer::ShapeToString(shape) << "), "
            << files.size() << " files" << std::endl;

  double total_ms = 0.0;
  std::string cause;
  for (size_t index = 0; index < files.size(); ++index) {
    const std::string &file = files[index];
    std::vector<char> data;
    if (!nfnet_infer::ReadFile(file, &data, &error)) {
      return Fail(error, nfnet_infer::kExitUsage);
    }
    std::vector<MSTensor> inputs;
    inputs.emplace_back(input.Name(), input.DataType(), shape, data.data(), data.size());
    std::vector<MSTensor> outputs;
    if (index == 0 && !Try([&] { return model->Predict(inputs, &outputs); }, &cause)) {
      // the first call sets the device up; it is not timed
      return Fail("warm-up inference on " + file + " (" + Where(options) + ") failed: " + cause,
                  nfnet_infer::kExitRuntime);
    }
    outputs.clear();
    const auto start = std::chrono::steady_clock::now();
    const bool ran = Try([&] { return model->Predict(inputs, &outputs); }, &cause);
    const auto end = std::chrono::steady_clock::now();
    if (!ran) {
      return Fail("inference on " + file + " (" + Where(options) + ") failed: " + cause, nfnet_infer::kExitRuntime);
    }
    const std::string name = nfnet_infer::BaseName(file);
    const int code = WriteOutputs(options, name, batch, outputs);
    if (code != 0) {
      return code;
    }
    const double ms = std::chrono::duration<double, std::milli>(end - start).count();
    total_ms += ms;
    std::cout << name << ": " << std::fixed << std::setprecision(3) << ms << " ms" << std::endl;
  }

  const std::string summary = nfnet_infer::TimingSummary(total_ms, files.size(), batch, options.num_images);
  const std::string text = summary + "\n";
  if (!nfnet_infer::WriteFile(options.time_path + "/" + nfnet_infer::kTimeFile, text.data(), text.size(), &error)) {
    return Fail(error, nfnet_infer::kExitRuntime);
  }
  std::cout << summary << std::endl;
  return 0;
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
    return error.empty() ? 0 : nfnet_infer::kExitUsage;
  }
  try {  // the calls not wrapped one by one (GetInputs, MSTensor, Data()) can throw too: never abort
    return Run(options);
  } catch (const std::exception &e) {
    return Fail("running " + Where(options) + " failed: exception: " + e.what(), nfnet_infer::kExitRuntime);
  } catch (...) {
    return Fail("running " + Where(options) + " failed: an exception that is not a std::exception",
                nfnet_infer::kExitRuntime);
  }
}
