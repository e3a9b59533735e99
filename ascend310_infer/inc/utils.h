/**
 * File and command-line helpers of the NFNet inference app. No MindSpore types here,
 * so this part builds (and is tested) without the MindSpore headers.
 */
#ifndef NFNET_ASCEND310_INFER_UTILS_H_
#define NFNET_ASCEND310_INFER_UTILS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace nfnet_infer {

/// Options of the app, from --key=value arguments.
struct Options {
  std::string mindir_path;              // exported graph (.mindir)
  std::string input_path;               // folder of <name>.bin inputs (preprocess.py's images/)
  std::string result_path = "result_Files";
  std::string time_path = "time_Result";
  std::string device_type = "Ascend";   // Ascend | GPU | CPU
  uint32_t device_id = 0;
};

/// Parses --key=value (or --key value) into `options`; on failure returns false and sets `error`.
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

/// Writes `size` bytes through a temporary file and a rename; false with `error` set on failure.
bool WriteFile(const std::string &path, const void *data, size_t size, std::string *error);

/// Creates `dir` and its parents when missing; false with `error` set on failure.
bool MakeDirs(const std::string &dir, std::string *error);

/// "1,3,256,256"
std::string ShapeToString(const std::vector<int64_t> &shape);

}  // namespace nfnet_infer

#endif  // NFNET_ASCEND310_INFER_UTILS_H_
