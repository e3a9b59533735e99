/**
 * File and command-line helpers of the NFNet inference app (see inc/utils.h). POSIX calls
 * (opendir, stat, mkdir, rename) instead of <filesystem>, which GCC 7.3 (the Ascend
 * toolkits' baseline compiler) ships only as the experimental, separately linked stdc++fs.
 */
#include "inc/utils.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iomanip>
#include <map>
#include <sstream>

namespace nfnet_infer {
namespace {

bool EndsWith(const std::string &text, const std::string &suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool Contains(const std::vector<std::string> &values, const std::string &value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

std::string Join(const std::vector<std::string> &values, const std::string &sep) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    out += (i ? sep : "") + values[i];
  }
  return out;
}

/// A non-negative decimal integer of at most 12 digits.
bool ParseCount(const std::string &text, int64_t *value) {
  if (text.empty() || text.size() > 12 ||
      !std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
    return false;
  }
  *value = std::stoll(text);
  return true;
}

bool IsDirectory(const std::string &path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool IsRegularFile(const std::string &path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

}  // namespace

const std::vector<std::string> &DeviceTypes() {
  static const std::vector<std::string> kTypes = {"Ascend", "Ascend310", "Ascend310P", "Ascend910", "GPU", "CPU"};
  return kTypes;
}

bool IsAscend(const std::string &device_type) { return device_type.rfind("Ascend", 0) == 0; }

const std::vector<std::string> &PrecisionModes() {
  static const std::vector<std::string> kModes = {
      "preferred_fp32", "enforce_fp32", "enforce_origin", "preferred_optimal", "enforce_fp16",
      "allow_fp32_to_fp16", "force_fp32", "must_keep_origin_dtype", "allow_mix_precision", "force_fp16"};
  return kModes;
}

std::string Usage(const std::string &program) {
  std::ostringstream out;
  out << "usage: " << program
      << " --mindir_path=<net.mindir> --input_path=<dir of .bin> [--result_path=result_Files]\n"
      << "       [--time_path=time_Result] [--device_type=" << Join(DeviceTypes(), "|") << "] [--device_id=0]\n"
      << "       [--precision_mode=preferred_fp32] [--num_classes=N] [--num_images=N]\n"
      << "Runs every <input_path>/<name>.bin (float32, the model's input shape) through the MINDIR and\n"
      << "writes output i to <result_path>/<name>_<i>.bin and the mean latency per image to\n"
      << "<time_path>/" << kTimeFile << ".\n"
      << "  --precision_mode  Ascend only: " << Join(PrecisionModes(), ", ") << "\n"
      << "                    (preferred_fp32 keeps float32 wherever the chip has a float32 kernel)\n"
      << "  --num_classes     check that every output is float32 with batch x num_classes values\n"
      << "  --num_images      real images in all files (the last file may be padded); per-image time uses it";
  return out.str();
}

bool ParseOptions(int argc, char **argv, Options *options, std::string *error) {
  std::map<std::string, std::string> values;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      *error = "unexpected argument '" + arg + "' (options are written --key=value)";
      return false;
    }
    std::string key = arg.substr(2);
    std::string value;
    size_t eq = key.find('=');
    if (eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else if (key == "help") {
      error->clear();
      return false;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      *error = "--" + key + " needs a value";
      return false;
    }
    values[key] = value;
  }
  for (const auto &entry : values) {
    const std::string &key = entry.first;
    const std::string &value = entry.second;
    int64_t count = 0;
    if (key == "mindir_path") {
      options->mindir_path = value;
    } else if (key == "input_path" || key == "input0_path") {  // input0_path: the model zoo's name
      options->input_path = value;
    } else if (key == "result_path") {
      options->result_path = value;
    } else if (key == "time_path") {
      options->time_path = value;
    } else if (key == "device_type") {
      options->device_type = value;
    } else if (key == "precision_mode") {
      options->precision_mode = value;
    } else if (key == "device_id" || key == "num_classes" || key == "num_images") {
      if (!ParseCount(value, &count) || (key == "device_id" && count > 0xFFFF)) {
        *error = "--" + key + " must be a non-negative integer, got '" + value + "'";
        return false;
      }
      if (key == "device_id") {
        options->device_id = static_cast<uint32_t>(count);
      } else if (key == "num_classes") {
        options->num_classes = count;
      } else {
        options->num_images = count;
      }
    } else {
      *error = "unknown option --" + key;
      return false;
    }
  }
  if (options->mindir_path.empty() || options->input_path.empty()) {
    *error = "--mindir_path and --input_path are required";
    return false;
  }
  if (!Contains(DeviceTypes(), options->device_type)) {
    *error = "--device_type must be one of " + Join(DeviceTypes(), ", ") + ", got '" + options->device_type + "'";
    return false;
  }
  if (!Contains(PrecisionModes(), options->precision_mode)) {
    *error = "--precision_mode must be one of " + Join(PrecisionModes(), ", ") + ", got '" +
             options->precision_mode + "'";
    return false;
  }
  if (!IsRegularFile(options->mindir_path)) {
    *error = "model file not found: " + options->mindir_path;
    return false;
  }
  return true;
}

bool ListBinFiles(const std::string &dir, std::vector<std::string> *files, std::string *error) {
  DIR *handle = opendir(dir.c_str());
  if (handle == nullptr) {
    *error = (errno == ENOENT || errno == ENOTDIR ? "input folder not found: " : "cannot list ") + dir +
             (errno == ENOENT || errno == ENOTDIR ? "" : std::string(": ") + std::strerror(errno));
    return false;
  }
  files->clear();
  const std::string prefix = EndsWith(dir, "/") ? dir : dir + "/";
  for (struct dirent *entry = readdir(handle); entry != nullptr; entry = readdir(handle)) {
    const std::string name = entry->d_name;
    if (name[0] != '.' && EndsWith(name, ".bin") && IsRegularFile(prefix + name)) {
      files->push_back(prefix + name);
    }
  }
  closedir(handle);
  std::sort(files->begin(), files->end());
  return true;
}

std::string BaseName(const std::string &path) {
  const size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  const size_t dot = name.find_last_of('.');
  return dot == std::string::npos || dot == 0 ? name : name.substr(0, dot);
}

bool ReadFile(const std::string &path, std::vector<char> *data, std::string *error) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    *error = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  const std::streamsize size = in.tellg();
  in.seekg(0, std::ios::beg);
  data->resize(static_cast<size_t>(size));
  if (size > 0 && !in.read(data->data(), size)) {
    *error = "cannot read " + path;
    return false;
  }
  return true;
}

bool CheckInputSize(const std::string &path, size_t file_bytes, const std::vector<int64_t> &shape,
                    size_t expected_bytes, std::string *error) {
  if (file_bytes == expected_bytes) {
    return true;
  }
  const std::string batch = shape.empty() ? "?" : std::to_string(shape[0]);
  const std::string size = shape.empty() ? "?" : std::to_string(shape.back());
  *error = path + ": " + std::to_string(file_bytes) + " bytes, but the model input (" + ShapeToString(shape) +
           ", float32) takes " + std::to_string(expected_bytes) + "; preprocess with --batch_size " + batch +
           " at test_input_size " + size;
  return false;
}

bool CheckOutput(const std::string &name, size_t index, bool is_float32, const std::string &type_name,
                 int64_t elements, int64_t batch, int64_t num_classes, std::string *error) {
  const std::string what = "output " + std::to_string(index) + " of " + name;
  if (!is_float32) {
    *error = what + " is " + type_name + ", expected float32 logits (re-export the model in float32; with " +
             "converter_lite keep the output float32)";
    return false;
  }
  if (num_classes > 0 && elements != batch * num_classes) {
    *error = what + " has " + std::to_string(elements) + " values, expected " + std::to_string(batch) + " x " +
             std::to_string(num_classes) + " (batch x --num_classes)";
    return false;
  }
  return true;
}

bool CheckImageCount(int64_t num_images, size_t files, int64_t batch, std::string *error) {
  const int64_t capacity = static_cast<int64_t>(files) * batch;
  if (num_images == 0 || (num_images > capacity - batch && num_images <= capacity)) {
    return true;
  }
  *error = "--num_images " + std::to_string(num_images) + " does not fit " + std::to_string(files) +
           " files of batch " + std::to_string(batch) + " (expected " + std::to_string(capacity - batch + 1) +
           " to " + std::to_string(capacity) + ")";
  return false;
}

std::string ResultPath(const std::string &result_path, const std::string &name, size_t index) {
  return result_path + "/" + name + "_" + std::to_string(index) + ".bin";
}

bool WriteFile(const std::string &path, const void *data, size_t size, std::string *error) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      *error = "cannot create " + tmp + ": " + std::strerror(errno);
      return false;
    }
    out.write(static_cast<const char *>(data), static_cast<std::streamsize>(size));
    if (!out.flush()) {
      *error = "cannot write " + tmp;
      std::remove(tmp.c_str());
      return false;
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    *error = "cannot rename " + tmp + " to " + path + ": " + std::strerror(errno);
    std::remove(tmp.c_str());
    return false;
  }
  return true;
}

bool MakeDirs(const std::string &dir, std::string *error) {
  for (size_t pos = 1; pos <= dir.size(); ++pos) {  // each prefix ending before a '/' and the whole path
    if (pos < dir.size() && dir[pos] != '/') {
      continue;
    }
    const std::string part = dir.substr(0, pos);
    if (mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) {
      *error = "cannot create folder " + part + ": " + std::strerror(errno);
      return false;
    }
  }
  if (!IsDirectory(dir)) {
    *error = "cannot create folder " + dir + ": a file of that name exists";
    return false;
  }
  return true;
}

std::string ShapeToString(const std::vector<int64_t> &shape) {
  std::ostringstream out;
  for (size_t i = 0; i < shape.size(); ++i) {
    out << (i ? "," : "") << shape[i];
  }
  return out.str();
}

std::string TimingSummary(double total_ms, size_t files, int64_t batch, int64_t num_images) {
  const int64_t images = num_images > 0 ? num_images : static_cast<int64_t>(files) * batch;
  const double per_file = files ? total_ms / static_cast<double>(files) : 0.0;
  const double per_image = images ? total_ms / static_cast<double>(images) : 0.0;
  std::ostringstream out;
  out << std::fixed << std::setprecision(3) << "NN inference cost average time: " << per_image
      << " ms per image (" << per_file << " ms per file, " << files << " files, " << images << " images)";
  return out.str();
}

}  // namespace nfnet_infer
