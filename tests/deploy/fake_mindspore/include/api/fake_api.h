// Test double of the MindSpore C++ inference API, declaring only what ascend310_infer/src/main.cc
// uses, with the documented signatures (mindspore.cn "C++ API": Context, DeviceInfoContext,
// Serialization::Load, Model::Build / GetInputs / Predict, MSTensor, Status). It lets the tests
// compile and run the app without MindSpore: a "MINDIR" here is a text file
// "<N> <C> <H> <W> <classes>", and Predict returns, for each batch row, the first <classes>
// input values of that row as the logits.
#ifndef FAKE_MINDSPORE_API_H_
#define FAKE_MINDSPORE_API_H_

#include <cstdint>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace mindspore {

enum StatusCode : uint32_t { kSuccess = 0, kMEFailed = 0x20000001u, kMEInvalidInput = 0x20000002u };

class Status {
 public:
  Status() = default;
  Status(enum StatusCode code, const std::string &msg = "") : code_(code), msg_(msg) {}  // NOLINT
  enum StatusCode StatusCode() const { return code_; }
  std::string ToString() const { return msg_; }
  bool operator==(enum StatusCode other) const { return code_ == other; }
  bool operator!=(enum StatusCode other) const { return code_ != other; }

 private:
  enum StatusCode code_ = kSuccess;
  std::string msg_;
};

enum class DataType : int { kTypeUnknown = 0, kNumberTypeFloat32 = 43 };
enum ModelType : uint32_t { kMindIR = 0 };

class MSTensor {
 public:
  MSTensor() = default;
  MSTensor(const std::string &name, enum DataType type, const std::vector<int64_t> &shape, const void *data,
           size_t data_len)
      : name_(name), type_(type), shape_(shape), bytes_(std::make_shared<std::vector<char>>(data_len)) {
    if (data != nullptr && data_len > 0) std::memcpy(bytes_->data(), data, data_len);
  }
  std::string Name() const { return name_; }
  enum DataType DataType() const { return type_; }
  const std::vector<int64_t> &Shape() const { return shape_; }
  size_t DataSize() const { return bytes_ ? bytes_->size() : 0; }
  std::shared_ptr<const void> Data() const {
    return bytes_ ? std::shared_ptr<const void>(bytes_, bytes_->data()) : nullptr;
  }

 private:
  std::string name_;
  enum DataType type_ = DataType::kTypeUnknown;
  std::vector<int64_t> shape_;
  std::shared_ptr<std::vector<char>> bytes_;
};

class DeviceInfoContext {
 public:
  virtual ~DeviceInfoContext() = default;
};
class CPUDeviceInfo : public DeviceInfoContext {};
class GPUDeviceInfo : public DeviceInfoContext {
 public:
  void SetDeviceID(uint32_t id) { id_ = id; }

 private:
  uint32_t id_ = 0;
};
class AscendDeviceInfo : public DeviceInfoContext {
 public:
  void SetDeviceID(uint32_t id) { id_ = id; }

 private:
  uint32_t id_ = 0;
};

class Context {
 public:
  std::vector<std::shared_ptr<DeviceInfoContext>> &MutableDeviceInfo() { return devices_; }

 private:
  std::vector<std::shared_ptr<DeviceInfoContext>> devices_;
};

class Graph {
 public:
  std::vector<int64_t> input_shape;
  int64_t classes = 0;
};

class GraphCell {
 public:
  explicit GraphCell(const Graph &graph) : graph_(graph) {}
  const Graph &graph() const { return graph_; }

 private:
  Graph graph_;
};

class Serialization {
 public:
  static Status Load(const std::string &file, ModelType, Graph *graph) {
    std::ifstream in(file);
    int64_t n = 0, c = 0, h = 0, w = 0, classes = 0;
    if (!(in >> n >> c >> h >> w >> classes)) return Status(kMEInvalidInput, "fake: cannot read " + file);
    graph->input_shape = {n, c, h, w};
    graph->classes = classes;
    return Status(kSuccess);
  }
};

class Model {
 public:
  Status Build(GraphCell graph, const std::shared_ptr<Context> &context = nullptr) {
    if (!context || context->MutableDeviceInfo().empty()) return Status(kMEFailed, "fake: no device");
    graph_ = graph.graph();
    return Status(kSuccess);
  }
  std::vector<MSTensor> GetInputs() {
    int64_t count = 1;
    for (int64_t d : graph_.input_shape) count *= d;
    std::vector<float> zeros(static_cast<size_t>(count));
    return {MSTensor("x", DataType::kNumberTypeFloat32, graph_.input_shape, zeros.data(),
                     zeros.size() * sizeof(float))};
  }
  Status Predict(const std::vector<MSTensor> &inputs, std::vector<MSTensor> *outputs) {
    const int64_t n = graph_.input_shape[0];
    const int64_t row = static_cast<int64_t>(inputs[0].DataSize() / sizeof(float)) / n;
    const float *x = static_cast<const float *>(inputs[0].Data().get());
    std::vector<float> logits;
    for (int64_t b = 0; b < n; ++b) logits.insert(logits.end(), x + b * row, x + b * row + graph_.classes);
    outputs->clear();
    outputs->emplace_back("logits", DataType::kNumberTypeFloat32, std::vector<int64_t>{n, graph_.classes},
                          logits.data(), logits.size() * sizeof(float));
    return Status(kSuccess);
  }

 private:
  Graph graph_;
};

}  // namespace mindspore

#endif  // FAKE_MINDSPORE_API_H_
