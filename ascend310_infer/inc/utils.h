/**
 * The parts of the NFNet inference app that need no MindSpore: options, listing and reading
 * the input .bin files, size checks, writing results and the timing summary. They build
 * with any C++17 compiler from GCC 7.3 on (no <filesystem>), and tests/deploy/ compiles
 * them into a small program that runs on real preprocess.py output.
 */
#ifndef NFNET_ASCEND310_INFER_UTILS_H_
#define NFNET_ASCEND310_INFER_UTILS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace nfnet_infer {

/// Exit codes: 2 for a user mistake (arguments, input files), 1 for a failure of the runtime.
constexpr int kExitUsage = 2;
constexpr int kExitRuntime = 1;

/// Options of the app, from --key=value arguments.
struct Options {
  std::string mindir_path;              // exported graph (.mindir), or converter_lite's .mindir
  std::string input_path;               // folder of <name>.bin inputs (preprocess.py's images/)
  std::string result_path = "result_Files";
  std::string time_path = "time_Result";
  std::string device_type = "Ascend";   // see DeviceTypes()
  std::string precision_mode = "preferred_fp32";  // Ascend only, see PrecisionModes()
  uint32_t device_id = 0;
  int64_t num_classes = 0;              // 0: not checked
  int64_t num_images = 0;               // real images over all files; 0: files x batch
};

/// --device_type values: every Ascend chip goes through AscendDeviceInfo, CPU through CPUDeviceInfo.
const std::vector<std::string> &DeviceTypes();
bool IsAscend(const std::string &device_type);

/// --precision_mode values of AscendDeviceInfo::SetPrecisionMode (MindSpore's include/api/context.h;
/// full MindSpore translates them to the ACL names force_fp32, allow_fp32_to_fp16, force_fp16,
/// must_keep_origin_dtype, allow_mix_precision, which are accepted too).
const std::vector<std::string> &PrecisionModes();

/// Parses --key=value (or --key value) into `options`; on failure returns false and sets `error`
/// (empty `error` with false: --help was asked).
bool ParseOptions(int argc, char **argv, Options *options, std::string *error);

/// The usage text printed for --help and for wrong arguments.
std::string Usage(const std::string &program);

/// Sorted paths of the regular *.bin files directly in `dir` (not hidden ones).
/// Returns false with `error` set when `dir` is not a readable folder.
bool ListBinFiles(const std::string &dir, std::vector<std::string> *files, std::string *error);

/// File name without its folder and its last extension: "a/img_00000001.bin" -> "img_00000001".
std::string BaseName(const std::string &path);

/// Reads a whole file; false with `error` set on failure.
bool ReadFile(const std::string &path, std::vector<char> *data, std::string *error);

/// Checks that an input file holds exactly the model input's bytes; false with a one-line `error`
/// naming the file, both sizes, the input shape and the fix.
bool CheckInputSize(const std::string &path, size_t file_bytes, const std::vector<int64_t> &shape,
                    size_t expected_bytes, std::string *error);

/// Checks output `index` of an inference on `name`: float32 (`type_name` names what it is otherwise)
/// and, with num_classes > 0, batch x num_classes elements. False with a one-line `error`.
bool CheckOutput(const std::string &name, size_t index, bool is_float32, const std::string &type_name,
                 int64_t elements, int64_t batch, int64_t num_classes, std::string *error);

/// Checks --num_images against the files: more than (files - 1) x batch (every file but the last is
/// full) and at most files x batch; 0 passes (no padding known). False with a one-line `error`.
bool CheckImageCount(int64_t num_images, size_t files, int64_t batch, std::string *error);

/// <result_path>/<name>_<index>.bin: what postprocess.py reads (output 0).
std::string ResultPath(const std::string &result_path, const std::string &name, size_t index);

/// Writes `size` bytes through a temporary file and a rename; false with `error` set on failure.
bool WriteFile(const std::string &path, const void *data, size_t size, std::string *error);

/// Creates `dir` and its parents when missing; false with `error` set on failure.
bool MakeDirs(const std::string &dir, std::string *error);

/// "1,3,256,256"
std::string ShapeToString(const std::vector<int64_t> &shape);

/// The timing line: mean ms per real image (the zero images padding the last file excluded),
/// per file, and the counts. `num_images` <= 0 means files x batch.
std::string TimingSummary(double total_ms, size_t files, int64_t batch, int64_t num_images);

/// Name of the file in <time_path> that holds TimingSummary(...).
constexpr char kTimeFile[] = "test_perform_static.txt";

}  // namespace nfnet_infer

#endif  // NFNET_ASCEND310_INFER_UTILS_H_
