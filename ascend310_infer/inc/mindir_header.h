/**
 * Which MindSpore wrote a MINDIR, read without MindSpore: the app checks it against the runtime
 * before building, because a runtime older than the exporter rejects the file by throwing
 * (MindSpore's load_mindir raises "This software can only support the maximum mind ir version"
 * when the file's mind_ir_version is above the Version enum of the runtime's own mind_ir.proto).
 */
#ifndef NFNET_ASCEND310_INFER_MINDIR_HEADER_H_
#define NFNET_ASCEND310_INFER_MINDIR_HEADER_H_

#include <cstdint>
#include <string>

namespace nfnet_infer {

/// The top-level fields of a MINDIR (mind_ir.proto's ModelProto) that name its writer.
struct MindirHeader {
  std::string producer_name;   // field 2, "MindSpore"
  std::string model_version;   // field 5, the exporting MindSpore's version, e.g. "2.10.0"
  int64_t mind_ir_version = 0;  // field 13 (0 when absent): 1 up to MindSpore 2.0, 3 from MindSpore 2.10
};

/// Reads the header of the MINDIR at `path`, skipping the graph and weights (it reads the top-level
/// field keys only). False with a one-line `error` when the file is not a readable protobuf.
bool ReadMindirHeader(const std::string &path, MindirHeader *header, std::string *error);

/// The first "x.y.z" in `text` ("2.0.0", "MindSpore Lite 2.0.0") as {x, y, z}; false if there is none.
bool ParseVersion(const std::string &text, int version[3]);

/// Empty when a runtime of version `runtime_version` (mindspore::Version()) can read the MINDIR, else the
/// one-line reason: the MINDIR's mind_ir_version and exporter, the runtime, the MindSpore Lite needed and
/// the ONNX route for an older runtime. Unparseable versions pass (the runtime itself decides).
std::string MindirVersionProblem(const std::string &path, const MindirHeader &header,
                                 const std::string &runtime_version);

}  // namespace nfnet_infer

#endif  // NFNET_ASCEND310_INFER_MINDIR_HEADER_H_
