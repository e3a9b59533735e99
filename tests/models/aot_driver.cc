// Test driver (not runtime code): calls MindSpore aot custom-op kernels of a shared library
// outside MindSpore, so the same calls can run on a cross-built library under an emulator
// (tests/models/test_kernels_aarch64.py).
//
//   aot_driver LIBRARY REQUEST RESULT
//
// REQUEST (little-endian): "NFAOTREQ", int32 threads, int32 calls, then per call: string kernel,
// int32 nparam, and per param: int32 ndim, int64 shape[ndim], string dtype, int64 nbytes, the
// bytes. A string is int32 length + bytes. RESULT: "NFAOTRES", int32 calls, then per call: int32
// the kernel's return value, int32 nparam, and per param: int64 nbytes, the bytes after the call
// (every param: the in-place kernels write their inputs). Exit status 0, or 1 with one "error:"
// line on stderr (unreadable request, missing library or kernel); the driver never aborts.
#include <dlfcn.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Kernel = int (*)(int, void **, int *, int64_t **, const char **, void *, void *);
using SetThreads = void (*)(int);

struct Param {
  std::vector<int64_t> shape;
  std::string dtype;
  std::vector<char> data;
};

struct Call {
  std::string kernel;
  std::vector<Param> params;
};

class Reader {
 public:
  explicit Reader(FILE *f) : f_(f) {}
  bool bytes(void *out, size_t n) { return n == 0 || std::fread(out, 1, n, f_) == n; }
  template <typename T>
  bool value(T *out) { return bytes(out, sizeof(T)); }
  bool text(std::string *out) {
    int32_t n = 0;
    if (!value(&n) || n < 0 || n > 4096) return false;
    out->resize(static_cast<size_t>(n));
    return bytes(&(*out)[0], out->size());
  }

 private:
  FILE *f_;
};

bool read_request(const char *path, int32_t *threads, std::vector<Call> *calls) {
  FILE *f = std::fopen(path, "rb");
  if (f == nullptr) return false;
  Reader in(f);
  char magic[8];
  int32_t count = 0;
  bool ok = in.bytes(magic, 8) && std::memcmp(magic, "NFAOTREQ", 8) == 0 && in.value(threads) &&
            in.value(&count) && count >= 0;
  for (int32_t c = 0; ok && c < count; ++c) {
    Call call;
    int32_t nparam = 0;
    ok = in.text(&call.kernel) && in.value(&nparam) && nparam >= 0 && nparam <= 64;
    for (int32_t p = 0; ok && p < nparam; ++p) {
      Param param;
      int32_t ndim = 0;
      int64_t nbytes = 0;
      ok = in.value(&ndim) && ndim >= 0 && ndim <= 8;
      param.shape.resize(ok ? static_cast<size_t>(ndim) : 0);
      for (auto &d : param.shape) ok = ok && in.value(&d);
      ok = ok && in.text(&param.dtype) && in.value(&nbytes) && nbytes >= 0 && nbytes <= (int64_t{1} << 32);
      if (ok) {
        param.data.resize(static_cast<size_t>(nbytes) + 64);  // never a null pointer, even for 0 bytes
        ok = in.bytes(param.data.data(), static_cast<size_t>(nbytes));
        param.data.resize(static_cast<size_t>(nbytes));
      }
      call.params.push_back(std::move(param));
    }
    calls->push_back(std::move(call));
  }
  std::fclose(f);
  return ok;
}

bool write_result(const char *path, const std::vector<Call> &calls, const std::vector<int32_t> &codes) {
  FILE *f = std::fopen(path, "wb");
  if (f == nullptr) return false;
  bool ok = std::fwrite("NFAOTRES", 1, 8, f) == 8;
  const int32_t count = static_cast<int32_t>(calls.size());
  ok = ok && std::fwrite(&count, sizeof(count), 1, f) == 1;
  for (size_t c = 0; ok && c < calls.size(); ++c) {
    const int32_t nparam = static_cast<int32_t>(calls[c].params.size());
    ok = std::fwrite(&codes[c], sizeof(int32_t), 1, f) == 1 && std::fwrite(&nparam, sizeof(nparam), 1, f) == 1;
    for (const Param &p : calls[c].params) {
      const int64_t nbytes = static_cast<int64_t>(p.data.size());
      ok = ok && std::fwrite(&nbytes, sizeof(nbytes), 1, f) == 1 &&
           (p.data.empty() || std::fwrite(p.data.data(), 1, p.data.size(), f) == p.data.size());
    }
  }
  return std::fclose(f) == 0 && ok;
}

int fail(const std::string &message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 4) return fail("usage: aot_driver LIBRARY REQUEST RESULT");
  int32_t threads = 0;
  std::vector<Call> calls;
  if (!read_request(argv[2], &threads, &calls)) return fail(std::string("unreadable request ") + argv[2]);
  void *library = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return fail(std::string("cannot load ") + argv[1] + ": " + dlerror());
  if (threads > 0) {
    auto set_threads = reinterpret_cast<SetThreads>(dlsym(library, "NfnetKernelsSetThreads"));
    if (set_threads == nullptr) return fail(std::string("no NfnetKernelsSetThreads in ") + argv[1]);
    set_threads(threads);
  }
  std::vector<int32_t> codes;
  for (Call &call : calls) {
    auto kernel = reinterpret_cast<Kernel>(dlsym(library, call.kernel.c_str()));
    if (kernel == nullptr) return fail("no kernel " + call.kernel + " in " + argv[1]);
    std::vector<void *> data;
    std::vector<int> ndims;
    std::vector<int64_t *> shapes;
    std::vector<const char *> dtypes;
    for (Param &p : call.params) {
      data.push_back(p.data.data());
      ndims.push_back(static_cast<int>(p.shape.size()));
      shapes.push_back(p.shape.data());
      dtypes.push_back(p.dtype.c_str());
    }
    codes.push_back(kernel(static_cast<int>(call.params.size()), data.data(), ndims.data(), shapes.data(),
                           dtypes.data(), nullptr, nullptr));
  }
  if (!write_result(argv[3], calls, codes)) return fail(std::string("cannot write ") + argv[3]);
  return 0;
}
