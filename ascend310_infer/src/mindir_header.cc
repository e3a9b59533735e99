/**
 * A minimal protobuf reader for the header of a MINDIR (see inc/mindir_header.h). The field
 * numbers are those of MindSpore's mind_ir.proto, ModelProto: 2 producer_name (string),
 * 5 model_version (string), 13 mind_ir_version (int64); every other field is skipped by its
 * wire type, so the graph (field 7, most of the file) is seeked over, never read.
 */
#include "inc/mindir_header.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace nfnet_infer {
namespace {

constexpr int kProducerName = 2;
constexpr int kModelVersion = 5;
constexpr int kMindIrVersion = 13;
constexpr uint64_t kMaxHeaderString = 1 << 16;  // a version or a name; a longer one is not a header field

enum WireType { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

/// A base-128 varint; false at the end of the file or after 10 bytes.
bool ReadVarint(std::istream &in, uint64_t *value) {
  *value = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    const int byte = in.get();
    if (byte == EOF) {
      return false;
    }
    *value |= static_cast<uint64_t>(byte & 0x7F) << shift;
    if ((byte & 0x80) == 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

bool ReadMindirHeader(const std::string &path, MindirHeader *header, std::string *error) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    *error = "cannot open " + path + ": " + std::strerror(errno);
    return false;
  }
  const std::streamoff size = in.tellg();
  in.seekg(0, std::ios::beg);
  const std::string not_mindir = path + " is not a MINDIR (mind_ir.proto ModelProto): ";
  *header = MindirHeader();
  while (in.tellg() < size) {
    uint64_t key = 0;
    uint64_t value = 0;
    if (!ReadVarint(in, &key)) {
      *error = not_mindir + "a truncated field key";
      return false;
    }
    const int field = static_cast<int>(key >> 3);
    switch (key & 7) {
      case kVarint:
        if (!ReadVarint(in, &value)) {
          *error = not_mindir + "a truncated number in field " + std::to_string(field);
          return false;
        }
        if (field == kMindIrVersion) {
          header->mind_ir_version = static_cast<int64_t>(value);
        }
        break;
      case kFixed64:
        in.seekg(8, std::ios::cur);
        break;
      case kFixed32:
        in.seekg(4, std::ios::cur);
        break;
      case kLengthDelimited: {
        if (!ReadVarint(in, &value) || static_cast<uint64_t>(size - in.tellg()) < value) {
          *error = not_mindir + "field " + std::to_string(field) + " runs past the end of the file";
          return false;
        }
        if ((field == kProducerName || field == kModelVersion) && value <= kMaxHeaderString) {
          std::string text(static_cast<size_t>(value), '\0');
          in.read(&text[0], static_cast<std::streamsize>(value));
          (field == kProducerName ? header->producer_name : header->model_version) = text;
        } else {
          in.seekg(static_cast<std::streamoff>(value), std::ios::cur);
        }
        break;
      }
      default:
        *error = not_mindir + "wire type " + std::to_string(key & 7) + " in field " + std::to_string(field);
        return false;
    }
    if (!in) {
      *error = not_mindir + "the file ends inside field " + std::to_string(field);
      return false;
    }
  }
  if (header->producer_name.empty() && header->model_version.empty()) {
    *error = not_mindir + "no producer_name or model_version";
    return false;
  }
  return true;
}

bool ParseVersion(const std::string &text, int version[3]) {
  for (size_t start = 0; start < text.size(); ++start) {
    const bool number_starts = std::isdigit(static_cast<unsigned char>(text[start])) &&
                               (start == 0 || !std::isdigit(static_cast<unsigned char>(text[start - 1])));
    if (number_starts && std::sscanf(text.c_str() + start, "%d.%d.%d", &version[0], &version[1], &version[2]) == 3) {
      return true;
    }
  }
  return false;
}

std::string MindirVersionProblem(const std::string &path, const MindirHeader &header,
                                 const std::string &runtime_version) {
  int exporter[3];
  int runtime[3];
  if (!ParseVersion(header.model_version, exporter) || !ParseVersion(runtime_version, runtime) ||
      !std::lexicographical_compare(runtime, runtime + 3, exporter, exporter + 3)) {
    return "";
  }
  std::ostringstream out;
  out << path << " is a MINDIR of mind_ir_version " << header.mind_ir_version << " exported by "
      << (header.producer_name.empty() ? "MindSpore" : header.producer_name) << " " << header.model_version
      << ", newer than this runtime (" << runtime_version << "), which cannot read it: run it on MindSpore Lite "
      << header.model_version << " or newer (MindSpore Lite reads the MINDIRs of its own release and older), "
      << "or export ONNX (export.py --file_format ONNX) and convert it with this runtime's converter_lite "
      << "(--fmk=ONNX --saveType=MINDIR; docs/deployment.md)";
  return out.str();
}

}  // namespace nfnet_infer
