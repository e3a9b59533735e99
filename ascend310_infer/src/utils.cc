/**
 * File and command-line helpers of the NFNet inference app (see inc/utils.h).
 */
#include "inc/utils.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

namespace fs = std::filesystem;

namespace nfnet_infer {
namespace {

bool EndsWith(const std::string &text, const std::string &suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool ParseDeviceId(const std::string &text, uint32_t *value) {
  if (text.empty() || text.size() > 9 || !std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c) != 0; })) {
    return false;
  }
  *value = static_cast<uint32_t>(std::stoul(text));
  return true;
}

}  // namespace

std::string Usage(const std::string &program) {
  std::ostringstream out;
  out << "usage: " << program
      << " --mindir_path=<net.mindir> --input_path=<dir of .bin> [--result_path=result_Files]\n"
      << "       [--time_path=time_Result] [--device_type=Ascend|GPU|CPU] [--device_id=0]\n"
      << "Runs every <input_path>/<name>.bin (float32, the model's input shape) through the MINDIR and\n"
      << "writes output i to <result_path>/<name>_<i>.bin and the mean latency to\n"
      << "<time_path>/test_perform_static.txt.";
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
      *error = "";
      return false;
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      *error = "--" + key + " needs a value";
      return false;
    }
    values[key] = value;
  }
  for (const auto &[key, value] : values) {
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
    } else if (key == "device_id") {
      if (!ParseDeviceId(value, &options->device_id)) {
        *error = "--device_id must be a non-negative integer, got '" + value + "'";
        return false;
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
  if (options->device_type != "Ascend" && options->device_type != "GPU" && options->device_type != "CPU") {
    *error = "--device_type must be Ascend, GPU or CPU, got '" + options->device_type + "'";
    return false;
  }
  return true;
}

bool ListBinFiles(const std::string &dir, std::vector<std::string> *files, std::string *error) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    *error = "input folder not found: " + dir;
    return false;
  }
  files->clear();
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (it->is_regular_file(ec) && EndsWith(name, ".bin") && name[0] != '.') {
      files->push_back(it->path().string());
    }
  }
  if (ec) {
    *error = "cannot list " + dir + ": " + ec.message();
    return false;
  }
  std::sort(files->begin(), files->end());
  return true;
}

std::string BaseName(const std::string &path) { return fs::path(path).stem().string(); }

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
      return false;
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    *error = "cannot rename " + tmp + " to " + path + ": " + ec.message();
    return false;
  }
  return true;
}

bool MakeDirs(const std::string &dir, std::string *error) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec)) {
    *error = "cannot create folder " + dir + (ec ? ": " + ec.message() : "");
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

}  // namespace nfnet_infer
