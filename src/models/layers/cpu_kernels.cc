// Fused float32 CPU kernels for MindSpore's ops.Custom(func_type="aot"); built and wrapped by
// cpu_kernels.py, which explains why they exist. Every kernel has MindSpore's aot signature:
// params holds the inputs then the outputs, shapes[i] / ndims[i] / dtypes[i] describe params[i].
// A non-zero return makes MindSpore raise. `omp simd` (-fopenmp-simd, no OpenMP runtime) lets the
// compiler vectorize the reductions.
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace {

// A fork-join pool whose idle workers sleep. OpenMP's workers spin after each parallel region
// (libgomp's default wait policy, fixed when MindSpore loads libgomp) and took the cores from
// the MindSpore kernels that ran next: the F0 train step measured 5.0 s with OpenMP here,
// 3.8 s with sleeping workers.
class Pool {
 public:
  ~Pool() { stop(); }

  // body(begin, end) over [0, n) split into one contiguous chunk per thread.
  void parallel_for(int64_t n, int threads, const std::function<void(int64_t, int64_t)> &body) {
    const int chunks = static_cast<int>(std::min<int64_t>(std::max(threads, 1), n));
    if (chunks <= 1) {
      if (n > 0) body(0, n);
      return;
    }
    std::unique_lock<std::mutex> call(call_mutex_);  // one parallel region at a time
    ensure_workers(chunks - 1);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      body_ = &body;
      n_ = n;
      chunks_ = chunks;
      pending_ = chunks - 1;
      ++generation_;
    }
    wake_.notify_all();
    body(0, n / chunks);  // chunk 0 on the calling thread
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [this] { return pending_ == 0; });
    body_ = nullptr;
  }

 private:
  void ensure_workers(int count) {
    if (pid_ != getpid()) {  // a forked child has none of its parent's threads
      for (auto &w : workers_) w.detach();
      workers_.clear();
      pid_ = getpid();
    }
    while (static_cast<int>(workers_.size()) < count) {
      const int index = static_cast<int>(workers_.size()) + 1;
      workers_.emplace_back([this, index] { work(index); });
    }
  }

  void work(int index) {
    uint64_t seen = 0;
    for (;;) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      if (index >= chunks_) continue;
      const auto *body = body_;
      const int64_t begin = n_ * index / chunks_, end = n_ * (index + 1) / chunks_;
      lock.unlock();
      (*body)(begin, end);
      lock.lock();
      if (--pending_ == 0) done_.notify_one();
    }
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (auto &w : workers_) {
      if (pid_ == getpid() && w.joinable()) w.join();
    }
  }

  std::mutex call_mutex_, mutex_;
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int64_t, int64_t)> *body_ = nullptr;
  int64_t n_ = 0;
  int chunks_ = 0, pending_ = 0;
  uint64_t generation_ = 0;
  bool stopping_ = false;
  pid_t pid_ = getpid();
};

Pool g_pool;
int g_threads = 0;  // 0: the cores this process may run on; set through NfnetKernelsSetThreads

// The cores this process may run on, as set_cpu_threads sizes MindSpore's pool (a process that only
// loads a MINDIR calling these kernels never sets the count).
int allowed_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

int threads() {
  static const int cores = allowed_cores();
  return g_threads > 0 ? g_threads : cores;
}

template <typename F>
void parallel_for(int64_t n, F body) {
  g_pool.parallel_for(n, threads(), [&body](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) body(i);
  });
}

// parallel_for of an elementwise `element(i)` (each i independent of the others, which `omp simd`
// asserts), vectorized without runtime alias checks. Built for AVX2, the GELU loops had compiled to
// scalar code (GCC 12 does not turn float compares into vector selects under -ftrapping-math; see
// CXX_FLAGS in cpu_kernels.py): 6x slower than now, 14 % of an F0 train step's CPU time (perf).
// tests/models/test_kernel_build.py checks that every call vectorizes. `element` captures by value,
// so the chunk's copy holds its pointers and scalars in registers.
template <typename F>
void parallel_simd(int64_t n, const F &element) {
  g_pool.parallel_for(n, threads(), [&element](int64_t begin, int64_t end) {
    const F local = element;
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) local(i);
  });
}

// The i-th parameter of an aot kernel as a float32 input or output.
inline const float *input(void **params, int i) { return static_cast<const float *>(params[i]); }
inline float *output(void **params, int i) { return static_cast<float *>(params[i]); }

int64_t numel(int ndim, const int64_t *shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

bool all_float32(int count, const char **dtypes) {
  for (int i = 0; i < count; ++i) {
    if (std::strcmp(dtypes[i], "float32") != 0) return false;
  }
  return true;
}

// erf(x) in float32 as x * P(x^2) / Q(x^2) on [-4, 4] (erf(+-4) rounds to +-1 in float32),
// the rational fit used by Eigen's and XLA's float erf; |error| < 5e-7 against float64 erf
// (measured over [-6, 6]). Branch-free (with -fno-trapping-math), so the loops below vectorize;
// the clamps pass a NaN through.
inline float erf_f32(float x) {
  x = x < -4.0f ? -4.0f : x;
  x = x > 4.0f ? 4.0f : x;
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 - 2.10102402082508e-06f;
  p = p * x2 - 5.69250639462346e-05f;
  p = p * x2 - 7.34990630326855e-04f;
  p = p * x2 - 2.95459980854025e-03f;
  p = p * x2 - 1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 - 2.13374055278905e-04f;
  q = q * x2 - 1.68282697438203e-03f;
  q = q * x2 - 7.37332916720468e-03f;
  q = q * x2 - 1.42647390514189e-02f;
  return x * p / q;
}

// exp(x) for x <= 0 in float32: x = n ln2 + r (Cody-Waite split of ln2), exp(r) by its Taylor
// polynomial of degree 7 (|r| <= ln2/2: truncation < 5e-9 relative), times 2^n built from the
// exponent bits. Clamped at -87 (exp(-87) ~ 1.6e-38, still a normal float). std::exp does not
// vectorize here and made the GELU backward 13x slower than its forward.
inline float exp_nonpositive_f32(float x) {
  x = x < -87.0f ? -87.0f : x;
  const float n = std::nearbyint(x * 1.44269504088896341f);  // floor() would not vectorize
  const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187045e-06f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

constexpr float kSqrtHalf = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kTanhCubic = 0.044715f;

// tanh(u) = sign(u) (1 - e) / (1 + e) with e = exp(-2 |u|) <= 1: branch-free and vectorizable
// like exp_nonpositive_f32; |error| < 3e-7 absolute.
inline float tanh_f32(float u) {
  const float e = exp_nonpositive_f32(-2.0f * std::fabs(u));
  return std::copysign((1.0f - e) / (1.0f + e), u);
}

// gamma * GELU(v), exact and tanh forms, with half_gamma = gamma / 2: the forward kernels' element
// (one definition, so that the fused inference path computes the same floats).
inline float scaled_gelu(float v, float half_gamma) { return half_gamma * v * (1.0f + erf_f32(v * kSqrtHalf)); }
inline float scaled_tanh_gelu(float v, float half_gamma) {
  return half_gamma * v * (1.0f + tanh_f32(kSqrt2OverPi * (v + kTanhCubic * v * v * v)));
}

// GELU'(v), exact and tanh forms: the backward kernels compute dx = dy * gamma * gelu_slope(x)
// (one definition, so that the fused training chain computes the same floats).
inline float gelu_slope(float v) {
  const float cdf = 0.5f * (1.0f + erf_f32(v * kSqrtHalf));
  const float pdf = kInvSqrt2Pi * exp_nonpositive_f32(-0.5f * v * v);
  return cdf + v * pdf;
}
inline float tanh_gelu_slope(float v) {
  const float t = tanh_f32(kSqrt2OverPi * (v + kTanhCubic * v * v * v));
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kTanhCubic * v * v);
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
}

}  // namespace

extern "C" void NfnetKernelsSetThreads(int num) { g_threads = num; }
extern "C" int NfnetKernelsThreads() { return threads(); }

// y = gamma * x * Phi(x). params: x, gamma (1,), y.
extern "C" int ScaledGeluForward(int nparam, void **params, int *ndims, int64_t **shapes,
                                 const char **dtypes, void *, void *) {
  if (nparam != 3 || !all_float32(3, dtypes)) return 1;
  const float *x = input(params, 0);
  const float half_gamma = 0.5f * input(params, 1)[0];
  float *y = output(params, 2);
  const int64_t n = numel(ndims[0], shapes[0]);
  parallel_simd(n, [=](int64_t i) { y[i] = scaled_gelu(x[i], half_gamma); });
  return 0;
}

// dx = dy * gamma * (Phi(x) + x * phi(x)). params: x, dy, gamma (1,), dx.
extern "C" int ScaledGeluBackward(int nparam, void **params, int *ndims, int64_t **shapes,
                                  const char **dtypes, void *, void *) {
  if (nparam != 4 || !all_float32(4, dtypes)) return 1;
  const float *x = input(params, 0);
  const float *dy = input(params, 1);
  const float gamma = input(params, 2)[0];
  float *dx = output(params, 3);
  const int64_t n = numel(ndims[0], shapes[0]);
  parallel_simd(n, [=](int64_t i) { dx[i] = dy[i] * gamma * gelu_slope(x[i]); });
  return 0;
}

// y = gamma * 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3) (jax.nn.gelu's default form).
// params: x, gamma (1,), y.
extern "C" int ScaledTanhGeluForward(int nparam, void **params, int *ndims, int64_t **shapes,
                                     const char **dtypes, void *, void *) {
  if (nparam != 3 || !all_float32(3, dtypes)) return 1;
  const float *x = input(params, 0);
  const float half_gamma = 0.5f * input(params, 1)[0];
  float *y = output(params, 2);
  const int64_t n = numel(ndims[0], shapes[0]);
  parallel_simd(n, [=](int64_t i) { y[i] = scaled_tanh_gelu(x[i], half_gamma); });
  return 0;
}

// dx = dy * gamma * (0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2)), t = tanh(u).
// params: x, dy, gamma (1,), dx.
extern "C" int ScaledTanhGeluBackward(int nparam, void **params, int *ndims, int64_t **shapes,
                                      const char **dtypes, void *, void *) {
  if (nparam != 4 || !all_float32(4, dtypes)) return 1;
  const float *x = input(params, 0);
  const float *dy = input(params, 1);
  const float gamma = input(params, 2)[0];
  float *dx = output(params, 3);
  const int64_t n = numel(ndims[0], shapes[0]);
  parallel_simd(n, [=](int64_t i) { dx[i] = dy[i] * gamma * tanh_gelu_slope(x[i]); });
  return 0;
}

namespace {

// The backward of an NF block's first activation, whose input x (or whose output) the shortcut reads
// too (layers/activations.py: PreActivation): with sum_first, dx = (dy + dy_shortcut) * gamma * slope(x),
// else dx = dy * gamma * slope(x) + dy_shortcut. The same floats as the GELU backward kernel and an AddN
// before or after it: the sum is its own loop over a block still in cache, so that GCC cannot contract
// it with the product into an FMA.
template <typename Slope>
int gelu_backward_fork(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, Slope slope) {
  if (nparam != 5 || !all_float32(5, dtypes)) return 1;
  const int64_t n = numel(ndims[0], shapes[0]);
  if (numel(ndims[1], shapes[1]) != n || numel(ndims[2], shapes[2]) != n) return 1;
  const float *x = input(params, 0);
  const float *dy = input(params, 1);
  const float *dy_shortcut = input(params, 2);
  const float gamma = input(params, 3)[0];
  const bool sum_first = input(params, 3)[1] != 0.0f;
  float *dx = output(params, 4);
  if (sum_first) {
    parallel_simd(n, [=](int64_t i) { dx[i] = (dy[i] + dy_shortcut[i]) * gamma * slope(x[i]); });
    return 0;
  }
  constexpr int64_t kBlock = 4096;
  parallel_for((n + kBlock - 1) / kBlock, [=](int64_t b) {
    const int64_t begin = b * kBlock, end = std::min(n, begin + kBlock);
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) dx[i] = dy[i] * gamma * slope(x[i]);
#pragma omp simd
    for (int64_t i = begin; i < end; ++i) dx[i] += dy_shortcut[i];
  });
  return 0;
}

}  // namespace

// gelu_backward_fork of the exact GELU. params: x, dy, dy_shortcut, consts (2,) = [gamma, sum_first], dx.
extern "C" int ScaledGeluBackwardFork(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                                      void *, void *) {
  return gelu_backward_fork(nparam, params, ndims, shapes, dtypes, [](float v) { return gelu_slope(v); });
}

// gelu_backward_fork of the tanh GELU. params as ScaledGeluBackwardFork.
extern "C" int ScaledTanhGeluBackwardFork(int nparam, void **params, int *ndims, int64_t **shapes,
                                          const char **dtypes, void *, void *) {
  return gelu_backward_fork(nparam, params, ndims, shapes, dtypes, [](float v) { return tanh_gelu_slope(v); });
}

namespace {

// mean and the reciprocal standard deviation of one row of k values (two passes, float64 sums):
// timm's 1/sqrt(var + eps), or, with deepmind, DeepMind's sqrt(k) / sqrt(max(k * var, eps)) (the
// sqrt(k) cancels the layer's scale gamma / sqrt(k)). Returns true when DeepMind's floor is taken
// (then rstd does not depend on w).
inline bool row_stats(const float *w, int64_t k, float eps, bool deepmind, float *mean, float *rstd) {
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < k; ++j) sum += w[j];
  const double mu = sum / static_cast<double>(k);
  double sq = 0.0;
#pragma omp simd reduction(+ : sq)
  for (int64_t j = 0; j < k; ++j) {
    const double c = w[j] - mu;
    sq += c * c;
  }
  *mean = static_cast<float>(mu);
  if (!deepmind) {
    *rstd = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(k) + eps));
    return false;
  }
  // k * var = sq
  const bool floored = sq <= static_cast<double>(eps);
  *rstd = static_cast<float>(std::sqrt(static_cast<double>(k)) / std::sqrt(floored ? eps : sq));
  return floored;
}

// One row (output unit) of WeightStandardizeForward: out = (w - mean) * rstd * gain * scale, consts =
// [scale, eps, form (0 timm, 1 deepmind)].
inline void standardize_row(const float *w, int64_t k, float gain, const float *consts, float *out) {
  float mean, rstd;
  row_stats(w, k, consts[1], consts[2] != 0.0f, &mean, &rstd);
  const float f = rstd * gain * consts[0];
  for (int64_t j = 0; j < k; ++j) out[j] = (w[j] - mean) * f;
}

// One row of WeightStandardizeBackward (its comment has the formulas): dw and dgain from w and dw_hat.
inline void standardize_row_backward(const float *w, const float *dout, int64_t k, float gain, const float *consts,
                                     float *dw, float *dgain) {
  const float scale = consts[0];
  float mean, rstd;
  const bool floored = row_stats(w, k, consts[1], consts[2] != 0.0f, &mean, &rstd);
  double sum_d = 0.0, sum_dx = 0.0;  // sums of dw_hat and dw_hat * xhat
#pragma omp simd reduction(+ : sum_d, sum_dx)
  for (int64_t j = 0; j < k; ++j) {
    sum_d += dout[j];
    sum_dx += static_cast<double>(dout[j]) * ((w[j] - mean) * rstd);
  }
  const float s = gain * scale;
  *dgain = static_cast<float>(scale * sum_dx);
  const float mean_g = static_cast<float>(s * sum_d / static_cast<double>(k));
  const float mean_gx = floored ? 0.0f : static_cast<float>(s * sum_dx / static_cast<double>(k));
  for (int64_t j = 0; j < k; ++j) {
    const float xhat = (w[j] - mean) * rstd;
    dw[j] = rstd * (dout[j] * s - mean_g - xhat * mean_gx);
  }
}

}  // namespace

// Scaled weight standardization per output unit (row) of w (out, k...):
//   w_hat = (w - mean) * rstd * gain * scale   (rstd: row_stats).
// params: w, gain (out, ...), consts (3,) = [scale, eps, form (0 timm, 1 deepmind)], w_hat.
extern "C" int WeightStandardizeForward(int nparam, void **params, int *ndims, int64_t **shapes,
                                        const char **dtypes, void *, void *) {
  if (nparam != 4 || !all_float32(4, dtypes)) return 1;
  const float *w = input(params, 0);
  const float *gain = input(params, 1);
  const float *consts = input(params, 2);
  float *out = output(params, 3);
  const int64_t rows = shapes[0][0];
  const int64_t k = numel(ndims[0], shapes[0]) / rows;
  parallel_for(rows, [&](int64_t r) { standardize_row(w + r * k, k, gain[r], consts, out + r * k); });
  return 0;
}

// Backward of WeightStandardizeForward. With xhat = (w - mean) * rstd and g = dw_hat * gain * scale:
//   dgain = scale * sum(dw_hat * xhat),  dw = rstd * (g - mean(g) - xhat * mean(g * xhat)),
// without the last term where DeepMind's floor is taken (rstd is then a constant).
// params: w, gain, consts, dw_hat, dw, dgain.
extern "C" int WeightStandardizeBackward(int nparam, void **params, int *ndims, int64_t **shapes,
                                         const char **dtypes, void *, void *) {
  if (nparam != 6 || !all_float32(6, dtypes)) return 1;
  const float *w = input(params, 0);
  const float *gain = input(params, 1);
  const float *consts = input(params, 2);
  const float *dout = input(params, 3);
  float *dw = output(params, 4);
  float *dgain = output(params, 5);
  const int64_t rows = shapes[0][0];
  const int64_t k = numel(ndims[0], shapes[0]) / rows;
  parallel_for(rows, [&](int64_t r) {
    standardize_row_backward(w + r * k, dout + r * k, k, gain[r], consts, dw + r * k, dgain + r);
  });
  return 0;
}

namespace {

// TensorFlow SAME padding: (pad_before, out_size) for one spatial axis.
inline void same_padding(int64_t size, int64_t kernel, int64_t stride, int64_t *before, int64_t *out) {
  *out = (size + stride - 1) / stride;
  const int64_t total = std::max<int64_t>((*out - 1) * stride + kernel - size, 0);
  *before = total / 2;
}

// The output columns ox whose input column ox * stride + j - left lies in [0, w): [*first, *last).
inline void valid_columns(int64_t j, int64_t left, int64_t stride, int64_t w, int64_t ow, int64_t *first,
                          int64_t *last) {
  int64_t a = left - j;  // ox * stride >= left - j
  *first = a <= 0 ? 0 : (a + stride - 1) / stride;
  int64_t b = w + left - j;  // ox * stride < w + left - j
  *last = b <= 0 ? 0 : std::min<int64_t>((b + stride - 1) / stride, ow);
  if (*first > *last) *first = *last;
}

struct ConvGeometry {
  int64_t n, c, h, w, kh, kw, stride, top, left, oh, ow;
};

// The geometry input's shape is (kh, kw, stride): see FusedConv2dSame in cpu_kernels.py.
bool conv_geometry(const int64_t *x_shape, int geometry_ndim, const int64_t *geometry, ConvGeometry *g) {
  if (geometry_ndim != 3) return false;
  g->n = x_shape[0];
  g->c = x_shape[1];
  g->h = x_shape[2];
  g->w = x_shape[3];
  g->kh = geometry[0];
  g->kw = geometry[1];
  g->stride = geometry[2];
  if (g->kh < 1 || g->kw < 1 || g->stride < 1) return false;
  same_padding(g->h, g->kh, g->stride, &g->top, &g->oh);
  same_padding(g->w, g->kw, g->stride, &g->left, &g->ow);
  return true;
}

}  // namespace

// im2col of an NCHW input with SAME padding: patches (c * kh * kw, n * oh * ow), row
// (channel, tap), column (sample, output pixel), zeros where a tap falls into the padding.
// params: x (n, c, h, w), geometry (kh, kw, stride) int32 (only its shape is read), patches.
extern "C" int Im2ColSame(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                          void *, void *) {
  if (nparam != 3 || ndims[0] != 4 || std::strcmp(dtypes[0], "float32") != 0 ||
      std::strcmp(dtypes[2], "float32") != 0) return 1;
  const float *x = input(params, 0);
  ConvGeometry g;
  if (!conv_geometry(shapes[0], ndims[1], shapes[1], &g)) return 1;
  float *patches = output(params, 2);
  const int64_t taps = g.kh * g.kw, cols = g.n * g.oh * g.ow;
  parallel_for(g.c * taps, [&](int64_t row_index) {  // one patch row: (channel, tap)
    const int64_t c = row_index / taps, tap = row_index % taps;
    {
      const int64_t i = tap / g.kw, j = tap % g.kw;
      int64_t first, last;
      valid_columns(j, g.left, g.stride, g.w, g.ow, &first, &last);
      float *row = patches + (c * taps + tap) * cols;
      for (int64_t s = 0; s < g.n; ++s) {
        const float *plane = x + (s * g.c + c) * g.h * g.w;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          float *dst = row + (s * g.oh + oy) * g.ow;
          const int64_t iy = oy * g.stride + i - g.top;
          if (iy < 0 || iy >= g.h) {
            std::fill(dst, dst + g.ow, 0.0f);
            continue;
          }
          const float *src = plane + iy * g.w;  // input column of ox: ox * stride + j - left
          std::fill(dst, dst + first, 0.0f);
          if (g.stride == 1) {
            std::copy(src + first + j - g.left, src + last + j - g.left, dst + first);
          } else {
            for (int64_t ox = first; ox < last; ++ox) dst[ox] = src[ox * g.stride + j - g.left];
          }
          std::fill(dst + last, dst + g.ow, 0.0f);
        }
      }
    }
  });
  return 0;
}

// col2im, the adjoint of Im2ColSame: dx[s, c, iy, ix] = sum of the patch entries read from it.
// params: dpatches (c * kh * kw, n * oh * ow), x and geometry (only their shapes are read), dx.
extern "C" int Col2ImSame(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                          void *, void *) {
  if (nparam != 4 || ndims[1] != 4 || std::strcmp(dtypes[0], "float32") != 0 ||
      std::strcmp(dtypes[3], "float32") != 0) return 1;
  const float *dpatches = input(params, 0);
  ConvGeometry g;
  if (!conv_geometry(shapes[1], ndims[2], shapes[2], &g)) return 1;
  float *dx = output(params, 3);
  const int64_t taps = g.kh * g.kw, cols = g.n * g.oh * g.ow;
  // one channel per iteration (its n planes): no two threads write the same element, and the
  // channel's patch rows are read front to back
  parallel_for(g.c, [&](int64_t c) {
    for (int64_t s = 0; s < g.n; ++s) {
      float *plane = dx + (s * g.c + c) * g.h * g.w;
      std::fill(plane, plane + g.h * g.w, 0.0f);
    }
    for (int64_t tap = 0; tap < taps; ++tap) {
      const int64_t i = tap / g.kw, j = tap % g.kw;
      int64_t first, last;
      valid_columns(j, g.left, g.stride, g.w, g.ow, &first, &last);
      const float *row = dpatches + (c * taps + tap) * cols;
      for (int64_t s = 0; s < g.n; ++s) {
        float *plane = dx + (s * g.c + c) * g.h * g.w;
        for (int64_t oy = 0; oy < g.oh; ++oy) {
          const int64_t iy = oy * g.stride + i - g.top;
          if (iy < 0 || iy >= g.h) continue;
          const float *src = row + (s * g.oh + oy) * g.ow;
          const int64_t base = iy * g.w + j - g.left;  // input column of ox: ox * stride + j - left
          if (g.stride == 1) {
            for (int64_t ox = first; ox < last; ++ox) plane[base + ox] += src[ox];
          } else {
            for (int64_t ox = first; ox < last; ++ox) plane[base + ox * g.stride] += src[ox];
          }
        }
      }
    }
  });
  return 0;
}

// 2x2 average pooling with stride 2 and TensorFlow SAME padding (none for an even size, one row or
// column after an odd one), averaging the valid pixels only: nn.AvgPool2d(2, 2, pad_mode="same"), the
// transition blocks' shortcut. params: x (n, c, h, w), out (n, c, ceil(h / 2), ceil(w / 2)).
extern "C" int AvgPool2x2Same(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                              void *, void *) {
  if (nparam != 2 || ndims[0] != 4 || ndims[1] != 4 || !all_float32(nparam, dtypes)) return 1;
  const int64_t planes = shapes[0][0] * shapes[0][1], h = shapes[0][2], w = shapes[0][3];
  const int64_t oh = (h + 1) / 2, ow = (w + 1) / 2;
  if (shapes[1][2] != oh || shapes[1][3] != ow || numel(4, shapes[1]) != planes * oh * ow) return 1;
  const float *x = input(params, 0);
  float *out = output(params, 1);
  parallel_for(planes * oh, [&](int64_t row) {
    const int64_t oy = row % oh;
    const float *top = x + (row / oh) * h * w + 2 * oy * w;
    const float *bottom = 2 * oy + 1 < h ? top + w : nullptr;
    float *dst = out + row * ow;
    const int64_t full = w / 2;  // the windows with both columns
    if (bottom) {
#pragma omp simd
      for (int64_t ox = 0; ox < full; ++ox)
        dst[ox] = (top[2 * ox] + top[2 * ox + 1] + bottom[2 * ox] + bottom[2 * ox + 1]) * 0.25f;
      if (full < ow) dst[full] = (top[w - 1] + bottom[w - 1]) * 0.5f;
    } else {
#pragma omp simd
      for (int64_t ox = 0; ox < full; ++ox) dst[ox] = (top[2 * ox] + top[2 * ox + 1]) * 0.5f;
      if (full < ow) dst[full] = top[w - 1];
    }
  });
  return 0;
}

// Backward of AvgPool2x2Same: each input pixel gets its window's gradient over the window's count.
// params: x (its shape only), dout (n, c, ceil(h / 2), ceil(w / 2)), dx (x's shape).
extern "C" int AvgPool2x2SameBackward(int nparam, void **params, int *ndims, int64_t **shapes,
                                      const char **dtypes, void *, void *) {
  if (nparam != 3 || ndims[0] != 4 || ndims[1] != 4 || ndims[2] != 4 || !all_float32(nparam, dtypes)) return 1;
  const int64_t planes = shapes[0][0] * shapes[0][1], h = shapes[0][2], w = shapes[0][3];
  const int64_t oh = (h + 1) / 2, ow = (w + 1) / 2;
  if (shapes[1][2] != oh || shapes[1][3] != ow || numel(4, shapes[1]) != planes * oh * ow ||
      numel(4, shapes[2]) != planes * h * w)
    return 1;
  const float *dout = input(params, 1);
  float *dx = output(params, 2);
  parallel_for(planes * h, [&](int64_t row) {
    const int64_t iy = row % h;
    const float *src = dout + (row / h) * oh * ow + (iy / 2) * ow;
    float *dst = dx + row * w;
    const float rows_scale = (iy / 2) * 2 + 1 < h ? 0.5f : 1.0f;  // 1 / the window's valid rows
    const float scale = rows_scale * 0.5f;
#pragma omp simd
    for (int64_t ox = 0; ox < w / 2; ++ox) {
      const float v = src[ox] * scale;
      dst[2 * ox] = v;
      dst[2 * ox + 1] = v;
    }
    if (w % 2) dst[w - 1] = src[ow - 1] * rows_scale;
  });
  return 0;
}

// Matmul output (out_channels, n, m) -> NCHW (n, out_channels, m) plus a per-channel bias.
// params: y (a, b, m...), bias (a,), out (b, a, m...).
extern "C" int ChannelsToNCHWBias(int nparam, void **params, int *ndims, int64_t **shapes,
                                  const char **dtypes, void *, void *) {
  if (nparam != 3 || !all_float32(3, dtypes)) return 1;
  const float *y = input(params, 0);
  const float *bias = input(params, 1);
  float *out = output(params, 2);
  const int64_t a = shapes[0][0], b = shapes[0][1];
  const int64_t m = numel(ndims[0], shapes[0]) / (a * b);
  parallel_for(b * a, [&](int64_t index) {  // index = s * a + o, the output plane
    const int64_t s = index / a, o = index % a;
    const float *src = y + (o * b + s) * m;
    float *dst = out + index * m;
    const float v = bias[o];
    for (int64_t k = 0; k < m; ++k) dst[k] = src[k] + v;
  });
  return 0;
}

// Backward of ChannelsToNCHWBias: dy (a, b, m) = dout transposed back, dbias (a,) = sums.
// params: dout (b, a, m...), dy (a, b, m...), dbias (a,).
extern "C" int ChannelsToNCHWBiasBackward(int nparam, void **params, int *ndims, int64_t **shapes,
                                          const char **dtypes, void *, void *) {
  if (nparam != 3 || !all_float32(3, dtypes)) return 1;
  const float *dout = input(params, 0);
  float *dy = output(params, 1);
  float *dbias = output(params, 2);
  const int64_t b = shapes[0][0], a = shapes[0][1];
  const int64_t m = numel(ndims[0], shapes[0]) / (a * b);
  parallel_for(a, [&](int64_t o) {
    double sum = 0.0;
    for (int64_t s = 0; s < b; ++s) {
      const float *src = dout + (s * a + o) * m;
      float *dst = dy + (o * b + s) * m;
      float part = 0.0f;
#pragma omp simd reduction(+ : part)
      for (int64_t k = 0; k < m; ++k) {
        dst[k] = src[k];
        part += src[k];
      }
      sum += part;
    }
    dbias[o] = static_cast<float>(sum);
  });
  return 0;
}

// One SGD-AGC step (src/optim/sgd_agc.py) of one unit (row) of a parameter, in place:
//   max_norm = clipping * max(||W_i||, eps); G_i *= max_norm / max(||G_i||, 1e-6) where ||G_i|| > max_norm;
//   g = G + wd * W;  buf = momentum * buf + g;
//   Nesterov: W = (W - lr * momentum * buf) - lr * g;  heavy ball: W = W - lr * buf.
// The same arithmetic, in the same order, as AGC + weight decay followed by MindSpore's
// ApplyMomentum(W, buf, lr * momentum, g, momentum) and W -= lr * g. G is grad * scale (1 / loss
// scale, or 1: x * 1 is x), the product LossScaler.unscale forms, taken here instead of in a
// gradient-sized Mul pass (bit-identical). With an average, the EMA update of EmaUpdate follows on
// the new W while its row is in cache (src/trainers/ema.py; the same bits as EmaUpdate after the step).
struct SgdAgcStep {
  float clipping, eps, wd;
  bool nesterov;
  float lr, lr_momentum, momentum, scale, ema_decay, ema_rest;

  void row(const float *gr, float *pr, float *br, float *ar, int64_t k) const {
    float factor = 1.0f;
    if (clipping > 0.0f) {
      const float s = scale;  // a local: read through `this`, AVX2 builds kept the reduction scalar
      double gsq = 0.0, psq = 0.0;
#pragma omp simd reduction(+ : gsq, psq)
      for (int64_t j = 0; j < k; ++j) {
        const float g = gr[j] * s;
        gsq += static_cast<double>(g) * g;
        psq += static_cast<double>(pr[j]) * pr[j];
      }
      const float max_norm = clipping * std::max(static_cast<float>(std::sqrt(psq)), eps);
      const float gnorm = static_cast<float>(std::sqrt(gsq));
      if (gnorm > max_norm) factor = max_norm / std::max(gnorm, 1e-6f);
    }
    const float s = scale, w = wd, l = lr, lm = lr_momentum, m = momentum;
    if (nesterov) {
#pragma omp simd
      for (int64_t j = 0; j < k; ++j) {
        const float g = (gr[j] * s) * factor + w * pr[j];
        const float b = br[j] * m + g;
        br[j] = b;
        pr[j] = (pr[j] - lm * b) - l * g;
      }
    } else {
#pragma omp simd
      for (int64_t j = 0; j < k; ++j) {
        const float b = br[j] * m + ((gr[j] * s) * factor + w * pr[j]);
        br[j] = b;
        pr[j] = pr[j] - l * b;
      }
    }
    if (ar != nullptr) {
      const float d = ema_decay, r = ema_rest;
      for (int64_t j = 0; j < k; ++j) ar[j] = ar[j] * d + pr[j] * r;
    }
  }
};

// The SGD-AGC step of all m parameters of an optimizer in one launch (per parameter it was one
// launch each, 233 on F0, and 233 nodes for the graph compiler). Each parameter's units are its rows
// (the first axis), or one unit when its consts ask for a whole-tensor norm; the units of all
// parameters are split between the threads by element count, so small and large tensors balance.
// params: consts (m, 5) = per parameter [clipping (<= 0: off), eps, wd, whole tensor (0/1), Nesterov
// (0/1)]; hyper (3,) = [lr, lr * momentum, momentum] or (4,) with the gradient's scale last; grad_0 ...
// grad_{m-1}; param_0 ...; buf_0 ... (each param's shape); then, with the EMA, decay (2,) = [decay,
// 1 - decay] and average_0 ...; out (1,) = 0. Params, bufs and averages are written in place.
extern "C" int SgdAgcUpdate(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                            void *, void *) {
  if (nparam < 6 || ndims[0] != 2 || shapes[0][1] != 5 || !all_float32(nparam, dtypes)) return 1;
  const int64_t m = shapes[0][0];
  const bool ema = nparam == 4 * m + 4;
  if (m < 1 || (!ema && nparam != 3 * m + 3)) return 1;
  const float *consts = input(params, 0);
  const float *hyper = input(params, 1);
  SgdAgcStep step{};
  step.lr = hyper[0];
  step.lr_momentum = hyper[1];
  step.momentum = hyper[2];
  step.scale = numel(ndims[1], shapes[1]) >= 4 ? hyper[3] : 1.0f;
  const int first = 2;  // grad_0
  const int averages = ema ? first + 3 * static_cast<int>(m) + 1 : 0;
  if (ema) {
    step.ema_decay = input(params, averages - 1)[0];
    step.ema_rest = input(params, averages - 1)[1];
  }
  std::vector<int64_t> start(static_cast<size_t>(m) + 1, 0), rows(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    const int g = first + static_cast<int>(i);
    for (int other : {g + static_cast<int>(m), g + 2 * static_cast<int>(m)}) {
      if (numel(ndims[other], shapes[other]) != numel(ndims[g], shapes[g])) return 1;
    }
    if (ema && numel(ndims[averages + i], shapes[averages + i]) != numel(ndims[g], shapes[g])) return 1;
    const int64_t n = numel(ndims[g], shapes[g]);
    rows[i] = (consts[i * 5 + 3] != 0.0f || ndims[g] == 0 || n == 0) ? 1 : shapes[g][0];
    start[i + 1] = start[i] + n;
  }
  const int64_t total = start[m];
  const int parts = threads();
  parallel_for(parts, [&](int64_t t) {
    // this thread's units: those whose first element lies in [lo, hi) of all parameters' elements
    const int64_t lo = total * t / parts, hi = total * (t + 1) / parts;
    for (int64_t i = 0; i < m; ++i) {
      if (start[i + 1] <= lo || start[i] >= hi) continue;
      const int64_t n = start[i + 1] - start[i], k = n / rows[i];
      if (k == 0) continue;
      const int64_t r0 = std::max<int64_t>(0, (lo - start[i] + k - 1) / k);
      const int64_t r1 = std::min(rows[i], (hi - start[i] + k - 1) / k);
      SgdAgcStep own = step;
      own.clipping = consts[i * 5 + 0];
      own.eps = consts[i * 5 + 1];
      own.wd = consts[i * 5 + 2];
      own.nesterov = consts[i * 5 + 4] != 0.0f;
      const int g = first + static_cast<int>(i);
      const float *grad = input(params, g);
      float *param = output(params, g + static_cast<int>(m));
      float *buf = output(params, g + 2 * static_cast<int>(m));
      float *average = ema ? output(params, averages + static_cast<int>(i)) : nullptr;
      for (int64_t r = r0; r < r1; ++r) {
        own.row(grad + r * k, param + r * k, buf + r * k, average ? average + r * k : nullptr, k);
      }
    }
  });
  output(params, nparam - 1)[0] = 0.0f;
  return 0;
}

// The EMA update (src/trainers/ema.py) in place: average = average * decay + weight * (1 - decay).
// params: average, weight (same shape), decay (2,) = [decay, 1 - decay], out (1,) = 0.
extern "C" int EmaUpdate(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *,
                         void *) {
  if (nparam != 4 || !all_float32(4, dtypes)) return 1;
  float *average = output(params, 0);
  const float *weight = input(params, 1);
  const float decay = input(params, 2)[0], rest = input(params, 2)[1];
  const int64_t n = numel(ndims[0], shapes[0]);
  constexpr int64_t kBlock = 1 << 14;
  parallel_for((n + kBlock - 1) / kBlock, [&](int64_t block) {
    const int64_t end = std::min(n, (block + 1) * kBlock);
    for (int64_t j = block * kBlock; j < end; ++j) average[j] = average[j] * decay + weight[j] * rest;
  });
  output(params, 3)[0] = 0.0f;
  return 0;
}

// 1 when every element of x is finite, else 0 (the overflow check of src/trainers/loss_scale.py):
// x * 0 is 0 for finite x and NaN for inf or NaN, so one sum per chunk tells. params: x, out (1,).
extern "C" int AllFinite(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *,
                         void *) {
  if (nparam != 2 || !all_float32(2, dtypes)) return 1;
  const float *x = input(params, 0);
  const int64_t n = numel(ndims[0], shapes[0]);
  constexpr int64_t kBlock = 1 << 16;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<float> partial(static_cast<size_t>(std::max<int64_t>(blocks, 1)), 0.0f);
  parallel_for(blocks, [&](int64_t block) {
    const int64_t end = std::min(n, (block + 1) * kBlock);
    const float *xs = x;  // in a register, as in SgdAgcUpdate's reduction
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = block * kBlock; j < end; ++j) sum += xs[j] * 0.0f;
    partial[static_cast<size_t>(block)] = sum;
  });
  float sum = 0.0f;
  for (float p : partial) sum += p;
  output(params, 1)[0] = sum == 0.0f ? 1.0f : 0.0f;
  return 0;
}

// AllFinite over every input tensor in one launch (the overflow check of all of a step's gradients;
// per tensor it was 233 kernels plus a slice and a compare each on F0). params: x_0 ... x_{m-1}, out (1,).
extern "C" int AllFiniteMulti(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *,
                              void *) {
  if (nparam < 2 || !all_float32(nparam, dtypes)) return 1;
  constexpr int64_t kBlock = 1 << 16;
  std::vector<std::pair<const float *, int64_t>> blocks;  // (start, length) of each block of each tensor
  for (int i = 0; i + 1 < nparam; ++i) {
    const float *x = input(params, i);
    const int64_t n = numel(ndims[i], shapes[i]);
    for (int64_t begin = 0; begin < n; begin += kBlock) blocks.emplace_back(x + begin, std::min(kBlock, n - begin));
  }
  std::vector<float> partial(blocks.size(), 0.0f);
  parallel_for(static_cast<int64_t>(blocks.size()), [&](int64_t b) {
    const float *x = blocks[static_cast<size_t>(b)].first;
    const int64_t n = blocks[static_cast<size_t>(b)].second;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; ++j) sum += x[j] * 0.0f;
    partial[static_cast<size_t>(b)] = sum;
  });
  float sum = 0.0f;
  for (float p : partial) sum += p;
  output(params, nparam - 1)[0] = sum == 0.0f ? 1.0f : 0.0f;
  return 0;
}

// The row view every row kernel checks: `want` float32 params, params[0] viewed as (rows, k) with rows the
// element count of params[1] (the factor, the mean or its gradient); false when k would not be whole.
static bool row_view(int nparam, int want, int *ndims, int64_t **shapes, const char **dtypes, int64_t *rows,
                     int64_t *k) {
  if (nparam != want || !all_float32(want, dtypes)) return false;
  *rows = numel(ndims[1], shapes[1]);
  const int64_t n = numel(ndims[0], shapes[0]);
  if (*rows <= 0 || n % *rows != 0) return false;
  *k = n / *rows;
  return true;
}

namespace {

// out = x * factor[row] (+ addend): x viewed as (R, K) with R = the factor's element count. With an
// addend the product is rounded before the sum, as in two kernels: fp-contract=off keeps GCC from making
// them one FMA here (it did, 1 ulp off in a fifth of the elements).
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
int scale_rows(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, bool with_addend) {
  int64_t rows = 0, k = 0;
  if (!row_view(nparam, with_addend ? 4 : 3, ndims, shapes, dtypes, &rows, &k)) return 1;
  if (with_addend && numel(ndims[2], shapes[2]) != rows * k) return 1;
  const float *x = input(params, 0);
  const float *factor = input(params, 1);
  const float *addend = with_addend ? input(params, 2) : nullptr;
  float *out = output(params, with_addend ? 3 : 2);
  parallel_for(rows, [&](int64_t r) {
    const float f = factor[r];
    const float *src = x + r * k;
    float *dst = out + r * k;
    if (addend == nullptr) {
#pragma omp simd
      for (int64_t j = 0; j < k; ++j) dst[j] = src[j] * f;
    } else {
      const float *add = addend + r * k;
#pragma omp simd
      for (int64_t j = 0; j < k; ++j) dst[j] = src[j] * f + add[j];
    }
  });
  return 0;
}
#pragma GCC pop_options

}  // namespace

// x times one factor per row: x viewed as (R, K) with R = the factor's element count (an (R, 1)
// factor, or (N, C) for an NCHW x: its channels are the rows, so no reshape copies x around the
// call); SE gates, stochastic-depth masks. params: x, factor, out (x's shape).
extern "C" int MulRows(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *,
                       void *) {
  return scale_rows(nparam, params, ndims, shapes, dtypes, false);
}

// MulRows plus a same-shaped addend: out = x * factor[row] + addend, an NF block's gated branch and
// its shortcut in one pass. Its backward is MulRowsBackward's, and dout for the addend.
// params: x, factor, addend, out.
extern "C" int MulRowsAdd(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *,
                          void *) {
  return scale_rows(nparam, params, ndims, shapes, dtypes, true);
}

// Backward of MulRows: dx = dout * factor, dfactor = row sums of dout * x.
// params: x, factor, dout, dx, dfactor.
extern "C" int MulRowsBackward(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                               void *, void *) {
  int64_t rows = 0, k = 0;
  if (!row_view(nparam, 5, ndims, shapes, dtypes, &rows, &k)) return 1;
  const float *x = input(params, 0);
  const float *factor = input(params, 1);
  const float *dout = input(params, 2);
  float *dx = output(params, 3);
  float *dfactor = output(params, 4);
  parallel_for(rows, [&](int64_t r) {
    const float f = factor[r];
    const float *xr = x + r * k;
    const float *dr = dout + r * k;
    float *o = dx + r * k;
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < k; ++j) {
      o[j] = dr[j] * f;
      sum += static_cast<double>(dr[j]) * xr[j];
    }
    dfactor[r] = static_cast<float>(sum);
  });
  return 0;
}

// The mean of each row of x viewed as (R, K), R = the output's element count: an NCHW tensor's mean
// over H and W as (N, C), the SE squeeze (sum in float64, then one float32 division by K, as
// ReduceMean's sum / count). params: x, out.
extern "C" int MeanRows(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *,
                        void *) {
  int64_t rows = 0, k = 0;
  if (!row_view(nparam, 2, ndims, shapes, dtypes, &rows, &k)) return 1;
  const float *x = input(params, 0);
  float *out = output(params, 1);
  const float count = static_cast<float>(k);
  parallel_for(rows, [&](int64_t r) {
    const float *xr = x + r * k;
    double sum = 0.0;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < k; ++j) sum += xr[j];
    out[r] = static_cast<float>(sum) / count;
  });
  return 0;
}

// Backward of MeanRows for an x that another op reads too (the SE gate: layers/rowwise.py SqueezeHW):
// dx[r, j] = dx_other[r, j] + dout[r] / K, one pass (the operator form tiles dout to x's shape, divides
// the tiled tensor, and autodiff adds dx_other: three passes and two temporaries).
// params: x (its shape only), dout, dx_other (x's shape), dx.
extern "C" int MeanRowsBackward(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                                void *, void *) {
  int64_t rows = 0, k = 0;
  if (!row_view(nparam, 4, ndims, shapes, dtypes, &rows, &k)) return 1;
  if (numel(ndims[2], shapes[2]) != rows * k) return 1;
  const float *dout = input(params, 1);
  const float *dx_other = input(params, 2);
  float *dx = output(params, 3);
  const float count = static_cast<float>(k);
  parallel_for(rows, [&](int64_t r) {
    const float v = dout[r] / count;
    const float *other = dx_other + r * k;
    float *o = dx + r * k;
#pragma omp simd
    for (int64_t j = 0; j < k; ++j) o[j] = other[j] + v;
  });
  return 0;
}

namespace {

// The squeeze-excite's dense layers (layers/squeeze_excite.py: DenseAct): y = act(x W^T + b) for x (N, I),
// W (O, I) or a 1x1 convolution's (O, I, 1, 1) read as (O, I), b (O); act ReLU (fc1) or sigmoid (fc2).
// MindSpore's MatMul reads the 4-D parameter through a Reshape that copies it on every call, and its
// gradient back the same way; here W and dW are read and written where they are.
enum class Excite { kRelu, kSigmoid };

bool dense_view(int *ndims, int64_t **shapes, int64_t *n, int64_t *in, int64_t *out) {
  if (ndims[0] != 2 || ndims[1] < 2 || ndims[2] != 1) return false;
  *n = shapes[0][0];
  *in = shapes[0][1];
  *out = shapes[1][0];
  return *out > 0 && numel(ndims[1], shapes[1]) == *out * *in && shapes[2][0] == *out;
}

template <Excite kAct>
float excite(float z) {
  if (kAct == Excite::kRelu) return z > 0.0f ? z : 0.0f;
  return 1.0f / (1.0f + std::exp(-z));
}

// dy * d act / dz from the output y, as MindSpore's ReluGrad (dy where y > 0, else 0) and SigmoidGrad
// (dy y (1 - y)).
template <Excite kAct>
float excite_grad(float dy, float y) {
  if (kAct == Excite::kRelu) return y > 0.0f ? dy : 0.0f;
  return dy * (y * (1.0f - y));
}

// params: x, W, b, y (N, O).
template <Excite kAct>
int dense_act_forward(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  int64_t n = 0, in = 0, out = 0;
  if (nparam != 4 || !all_float32(4, dtypes) || !dense_view(ndims, shapes, &n, &in, &out)) return 1;
  const float *x = input(params, 0);
  const float *w = input(params, 1);
  const float *b = input(params, 2);
  float *y = output(params, 3);
  parallel_for(out, [&](int64_t o) {  // one pass over W; x stays in cache
    const float *wo = w + o * in;
    int64_t s = 0;
    for (; s + 4 <= n; s += 4) {  // four samples per pass over the row: four independent sums
      const float *x0 = x + s * in, *x1 = x0 + in, *x2 = x1 + in, *x3 = x2 + in;
      float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma omp simd reduction(+ : a0, a1, a2, a3)
      for (int64_t i = 0; i < in; ++i) {
        a0 += x0[i] * wo[i];
        a1 += x1[i] * wo[i];
        a2 += x2[i] * wo[i];
        a3 += x3[i] * wo[i];
      }
      y[s * out + o] = excite<kAct>(a0 + b[o]);
      y[(s + 1) * out + o] = excite<kAct>(a1 + b[o]);
      y[(s + 2) * out + o] = excite<kAct>(a2 + b[o]);
      y[(s + 3) * out + o] = excite<kAct>(a3 + b[o]);
    }
    for (; s < n; ++s) {
      const float *xs = x + s * in;
      float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
      for (int64_t i = 0; i < in; ++i) acc += xs[i] * wo[i];
      y[s * out + o] = excite<kAct>(acc + b[o]);
    }
  });
  return 0;
}

// dz = dy * act'(y); dx = dz W, dW = dz^T x, db = the column sums of dz, in one pass over W and dW:
// each thread takes a range of W's columns, so every sum runs in a fixed order whatever the thread count.
// params: x, W, b, y, dy, dx, dW, db.
template <Excite kAct>
int dense_act_backward(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes) {
  int64_t n = 0, in = 0, out = 0;
  if (nparam != 8 || !all_float32(8, dtypes) || !dense_view(ndims, shapes, &n, &in, &out)) return 1;
  const float *x = input(params, 0);
  const float *w = input(params, 1);
  const float *y = input(params, 3);
  const float *dy = input(params, 4);
  float *dx = output(params, 5);
  float *dw = output(params, 6);
  float *db = output(params, 7);
  std::vector<float> dz(static_cast<size_t>(n * out));
  for (int64_t j = 0; j < n * out; ++j) dz[j] = excite_grad<kAct>(dy[j], y[j]);
  for (int64_t o = 0; o < out; ++o) {
    float sum = 0.0f;
    for (int64_t s = 0; s < n; ++s) sum += dz[s * out + o];
    db[o] = sum;
  }
  constexpr int64_t kColumns = 256;  // bounds the dx accumulators: n * kColumns floats per thread
  g_pool.parallel_for(in, threads(), [&](int64_t begin, int64_t end) {
    std::vector<float> acc(static_cast<size_t>(n * std::min(kColumns, end - begin)));
    for (int64_t c0 = begin; c0 < end; c0 += kColumns) {
      const int64_t width = std::min(kColumns, end - c0);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t o = 0; o < out; ++o) {
        const float *wo = w + o * in + c0;
        float *dwo = dw + o * in + c0;
        int64_t s = 0;
        for (; s + 4 <= n; s += 4) {  // four samples per pass over the row segment: dW's sum stays in a register
          const float g0 = dz[s * out + o], g1 = dz[(s + 1) * out + o];
          const float g2 = dz[(s + 2) * out + o], g3 = dz[(s + 3) * out + o];
          const float *x0 = x + s * in + c0, *x1 = x0 + in, *x2 = x1 + in, *x3 = x2 + in;
          float *a0 = acc.data() + s * width, *a1 = a0 + width, *a2 = a1 + width, *a3 = a2 + width;
          const bool first = s == 0;
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) {
            const float wv = wo[i];
            float d = first ? 0.0f : dwo[i];
            d += g0 * x0[i];
            d += g1 * x1[i];
            d += g2 * x2[i];
            d += g3 * x3[i];
            dwo[i] = d;
            a0[i] += g0 * wv;
            a1[i] += g1 * wv;
            a2[i] += g2 * wv;
            a3[i] += g3 * wv;
          }
        }
        if (n < 4) std::fill_n(dwo, width, 0.0f);
        for (; s < n; ++s) {
          const float g = dz[s * out + o];
          const float *xs = x + s * in + c0;
          float *as = acc.data() + s * width;
#pragma omp simd
          for (int64_t i = 0; i < width; ++i) {
            as[i] += g * wo[i];
            dwo[i] += g * xs[i];
          }
        }
      }
      for (int64_t s = 0; s < n; ++s) std::copy_n(acc.data() + s * width, width, dx + s * in + c0);
    }
  });
  return 0;
}

}  // namespace

extern "C" int DenseReluForward(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                                void *, void *) {
  return dense_act_forward<Excite::kRelu>(nparam, params, ndims, shapes, dtypes);
}

extern "C" int DenseReluBackward(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                                 void *, void *) {
  return dense_act_backward<Excite::kRelu>(nparam, params, ndims, shapes, dtypes);
}

extern "C" int DenseSigmoidForward(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                                   void *, void *) {
  return dense_act_forward<Excite::kSigmoid>(nparam, params, ndims, shapes, dtypes);
}

extern "C" int DenseSigmoidBackward(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                                    void *, void *) {
  return dense_act_backward<Excite::kSigmoid>(nparam, params, ndims, shapes, dtypes);
}

#ifdef NFNET_WITH_DNNL
// ---------------------------------------------------------------------------------------------
// Convolutions through oneDNN, the copy MindSpore's wheel ships (mindspore/lib/libdnnl.so.3,
// oneDNN 3.x built with the threadpool runtime). MindSpore's own Conv2D hands it plain weights,
// for which oneDNN picks a reference kernel (measured: 1 GFLOP/s); with the weights reordered
// into the layout each primitive asks for, the same library runs F0's convolutions on NCHW
// tensors at 190-215 GFLOP/s, with no im2col columns. The declarations are oneDNN's documented
// C API (dnnl.h, dnnl_types.h and dnnl_threadpool_iface.hpp of oneDNN 3.x; enum values as
// published there).
extern "C" {
typedef struct dnnl_engine *dnnl_engine_t;
typedef struct dnnl_stream *dnnl_stream_t;
typedef struct dnnl_memory_desc *dnnl_memory_desc_t;
typedef const struct dnnl_memory_desc *const_dnnl_memory_desc_t;
typedef struct dnnl_primitive_desc *dnnl_primitive_desc_t;
typedef struct dnnl_primitive *dnnl_primitive_t;
typedef struct dnnl_memory *dnnl_memory_t;
typedef struct dnnl_primitive_attr *dnnl_primitive_attr_t;
typedef int64_t dnnl_dims_t[12];
typedef struct {
  int arg;
  dnnl_memory_t memory;
} dnnl_exec_arg_t;
int dnnl_engine_create(dnnl_engine_t *engine, int kind, size_t index);
int dnnl_primitive_attr_create(dnnl_primitive_attr_t *attr);
int dnnl_primitive_attr_set_scratchpad_mode(dnnl_primitive_attr_t attr, int mode);
int dnnl_threadpool_interop_stream_create(dnnl_stream_t *stream, dnnl_engine_t engine, void *threadpool);
int dnnl_memory_desc_create_with_tag(dnnl_memory_desc_t *desc, int ndims, const dnnl_dims_t dims, int data_type,
                                     int tag);
int dnnl_memory_desc_create_with_strides(dnnl_memory_desc_t *desc, int ndims, const dnnl_dims_t dims, int data_type,
                                         const dnnl_dims_t strides);
int dnnl_memory_desc_destroy(dnnl_memory_desc_t desc);
int dnnl_memory_desc_equal(const_dnnl_memory_desc_t lhs, const_dnnl_memory_desc_t rhs);
size_t dnnl_memory_desc_get_size(const_dnnl_memory_desc_t desc);
int dnnl_convolution_forward_primitive_desc_create(dnnl_primitive_desc_t *pd, dnnl_engine_t engine, int prop_kind,
                                                   int alg_kind, const_dnnl_memory_desc_t src,
                                                   const_dnnl_memory_desc_t weights, const_dnnl_memory_desc_t bias,
                                                   const_dnnl_memory_desc_t dst, const dnnl_dims_t strides,
                                                   const dnnl_dims_t dilates, const dnnl_dims_t padding_l,
                                                   const dnnl_dims_t padding_r, const void *attr);
int dnnl_convolution_backward_data_primitive_desc_create(dnnl_primitive_desc_t *pd, dnnl_engine_t engine, int alg_kind,
                                                         const_dnnl_memory_desc_t diff_src,
                                                         const_dnnl_memory_desc_t weights,
                                                         const_dnnl_memory_desc_t diff_dst, const dnnl_dims_t strides,
                                                         const dnnl_dims_t dilates, const dnnl_dims_t padding_l,
                                                         const dnnl_dims_t padding_r, const dnnl_primitive_desc_t hint,
                                                         const void *attr);
int dnnl_convolution_backward_weights_primitive_desc_create(
    dnnl_primitive_desc_t *pd, dnnl_engine_t engine, int alg_kind, const_dnnl_memory_desc_t src,
    const_dnnl_memory_desc_t diff_weights, const_dnnl_memory_desc_t diff_bias, const_dnnl_memory_desc_t diff_dst,
    const dnnl_dims_t strides, const dnnl_dims_t dilates, const dnnl_dims_t padding_l, const dnnl_dims_t padding_r,
    const dnnl_primitive_desc_t hint, const void *attr);
int dnnl_reorder_primitive_desc_create(dnnl_primitive_desc_t *pd, const_dnnl_memory_desc_t src, dnnl_engine_t src_engine,
                                       const_dnnl_memory_desc_t dst, dnnl_engine_t dst_engine, const void *attr);
const_dnnl_memory_desc_t dnnl_primitive_desc_query_md(const dnnl_primitive_desc_t pd, int what, int index);
int dnnl_primitive_desc_destroy(dnnl_primitive_desc_t pd);
int dnnl_primitive_create(dnnl_primitive_t *primitive, const dnnl_primitive_desc_t pd);
int dnnl_memory_create(dnnl_memory_t *memory, const_dnnl_memory_desc_t desc, dnnl_engine_t engine, void *handle);
int dnnl_memory_set_data_handle(dnnl_memory_t memory, void *handle);
int dnnl_memory_get_memory_desc(dnnl_memory_t memory, const_dnnl_memory_desc_t *desc);
int dnnl_primitive_execute(const dnnl_primitive_t primitive, dnnl_stream_t stream, int nargs,
                           const dnnl_exec_arg_t *args);
int dnnl_stream_wait(dnnl_stream_t stream);
int dnnl_get_effective_cpu_isa(void);
int dnnl_memory_destroy(dnnl_memory_t memory);
int dnnl_primitive_destroy(dnnl_primitive_t primitive);
}

namespace {

constexpr int kDnnlCpu = 1, kDnnlF32 = 3, kTagAny = 1, kTagA = 2, kTagAbcd = 5, kTagAbcde = 6, kTagAcdb = 22;
constexpr int kForwardTraining = 64, kConvolutionDirect = 1;
constexpr int kIsaAvx512Bit = 0x20;  // set in every dnnl_cpu_isa_t of the AVX-512 family (avx512_core = 0x27, ...)
constexpr int kQuerySrcMd = 129, kQueryDiffSrcMd = 130, kQueryWeightsMd = 131, kQueryDiffWeightsMd = 132;
constexpr int kQueryDstMd = 133, kQueryDiffDstMd = 134, kQueryScratchpadMd = 136;
constexpr int kScratchpadModeUser = 1;
constexpr int kArgSrc = 1, kArgDst = 17, kArgWeights = 33, kArgBias = 41, kArgScratchpad = 80;
constexpr int kArgDiffSrc = 129, kArgDiffDst = 145, kArgDiffWeights = 161, kArgDiffBias = 169;

thread_local bool t_in_dnnl_parallel = false;

// oneDNN's threadpool interface (dnnl::threadpool_interop::threadpool_iface): the same virtual
// functions in the same order, run on this library's pool.
struct DnnlThreadpool {
  virtual int get_num_threads() const { return threads(); }
  virtual bool get_in_parallel() const { return t_in_dnnl_parallel; }
  virtual void parallel_for(int n, const std::function<void(int, int)> &fn) {
    g_pool.parallel_for(n, threads(), [&](int64_t begin, int64_t end) {
      const bool outer = t_in_dnnl_parallel;
      t_in_dnnl_parallel = true;
      for (int64_t i = begin; i < end; ++i) fn(static_cast<int>(i), n);
      t_in_dnnl_parallel = outer;
    });
  }
  virtual uint64_t get_flags() const { return 0; }  // synchronous
  virtual void wait() {}
  virtual ~DnnlThreadpool() = default;
};

// An activation a primitive reads or writes: the NCHW memory MindSpore passes (`user`) and, when
// the primitive asked for another layout, a memory of that layout (`inner`) at `offset` in the
// context's activations buffer with the reorder between the two (user -> inner for an input,
// inner -> user for an output).
struct DnnlActivation {
  dnnl_memory_t user = nullptr, inner = nullptr;
  dnnl_primitive_t reorder = nullptr;
  size_t offset = 0;
};

// One convolution geometry: forward, backward-data and backward-weights primitives. Each call
// reorders the weights into (or the weight gradient out of) the layout its primitive asked for,
// and the activations between NCHW and the blocked layouts the primitives ask for, all in the
// context's shared buffers: nothing per layer stays. On NCHW tensors oneDNN 3.10 wraps its
// kernels in internal layout copies (forward, backward-data) or picks its im2col + GEMM
// implementation (backward-weights: measured 136-182 GFLOP/s on F0's shapes, against 206-220
// for the direct AVX-512 kernel it picks on blocked tensors); the explicit reorders take a few
// percent of the convolution's time.
// Where each element (r, j) of a (rows, k) OIHW weight lies in a oneDNN weights layout: at row[r] + col[j]
// when the layout separates so (the blocked layouts oneDNN picks for convolution weights do: each dimension
// is blocked at most once, so an element's offset is a sum of one term per dimension); else separable is
// false and the weights go through OIHW and a reorder. Built on first use (weight_map).
struct WeightMap {
  bool built = false, separable = false;
  std::vector<int64_t> row, col;
  int64_t rows_together = 1;  // rows r..r+n-1 (r a multiple of n) lie side by side: the layout's innermost block
};

struct DnnlConv {
  int64_t out_channels = 0, weight_numel = 0;
  WeightMap forward_map, data_map, diff_map;  // forward_weights', data_weights' and diff_weights' layouts
  dnnl_primitive_t forward = nullptr, backward_data = nullptr, backward_weights = nullptr;
  dnnl_memory_t forward_scratch = nullptr, data_scratch = nullptr, weights_scratch = nullptr;  // nullptr: none
  dnnl_primitive_t to_forward_weights = nullptr, to_data_weights = nullptr, from_diff_weights = nullptr;
  dnnl_memory_t bias = nullptr, user_weights = nullptr;
  dnnl_memory_t forward_weights = nullptr, data_weights = nullptr, diff_weights = nullptr;
  DnnlActivation x, y;                   // forward
  DnnlActivation data_dy, dx;            // backward-data
  DnnlActivation weights_x, weights_dy;  // backward-weights
  bool shared_dy = false;                // both backward primitives read dy in one layout: data_dy's
};

struct DnnlContext {
  dnnl_engine_t engine = nullptr;
  dnnl_stream_t stream = nullptr;
  DnnlThreadpool pool;
  std::mutex run;  // one creation or execution at a time: the stream and the buffers are shared
  std::vector<std::pair<std::vector<int64_t>, std::unique_ptr<DnnlConv>>> convs;  // keyed by geometry
  dnnl_primitive_attr_t attr = nullptr;  // the convolutions': user-managed scratchpads, see dnnl_scratchpad
  std::vector<float> weights, activations, scratch;

  // `buffer` 4096-byte aligned with at least `bytes` (grown as needed).
  static char *aligned(std::vector<float> *buffer, size_t bytes) {
    if (buffer->size() * sizeof(float) < bytes + 4096) buffer->resize((bytes + 4096) / sizeof(float) + 1);
    const uintptr_t p = reinterpret_cast<uintptr_t>(buffer->data());
    return reinterpret_cast<char *>((p + 4095) & ~static_cast<uintptr_t>(4095));
  }
  std::vector<float> oihw;  // a standardized weight or its gradient in OIHW, where a layout does not separate
  void *weights_buffer(size_t bytes) { return aligned(&weights, bytes); }
  char *activations_buffer(size_t bytes) { return aligned(&activations, bytes); }
  void *scratch_buffer(size_t bytes) { return aligned(&scratch, bytes); }
};

DnnlContext &dnnl_context() {
  static DnnlContext context;
  return context;
}

// A reorder primitive from layout `from` to layout `to`.
bool dnnl_reorder(dnnl_engine_t engine, const_dnnl_memory_desc_t from, const_dnnl_memory_desc_t to,
                  dnnl_primitive_t *reorder) {
  dnnl_primitive_desc_t pd = nullptr;
  const bool ok = dnnl_reorder_primitive_desc_create(&pd, from, engine, to, engine, nullptr) == 0 &&
                  dnnl_primitive_create(reorder, pd) == 0;
  if (pd) dnnl_primitive_desc_destroy(pd);
  return ok;
}

// A memory of layout `md` (handle set per call) and the reorder from the user's layout `user_md`
// into it (`input`) or out of it.
bool dnnl_inner(dnnl_engine_t engine, const_dnnl_memory_desc_t user_md, const_dnnl_memory_desc_t md, bool input,
                dnnl_primitive_t *reorder, dnnl_memory_t *memory) {
  return dnnl_reorder(engine, input ? user_md : md, input ? md : user_md, reorder) &&
         dnnl_memory_create(memory, md, engine, nullptr) == 0;
}

// dnnl_inner for a weights layout; `*bytes` grows to the largest, the shared weights buffer's size.
bool dnnl_weights(dnnl_engine_t engine, const_dnnl_memory_desc_t user_md, const_dnnl_memory_desc_t md, bool input,
                  dnnl_primitive_t *reorder, dnnl_memory_t *memory, size_t *bytes) {
  *bytes = std::max(*bytes, dnnl_memory_desc_get_size(md));
  return dnnl_inner(engine, user_md, md, input, reorder, memory);
}

// The scratchpad memory primitive `pd` asks for (nullptr if none; its handle is set per call to the
// context's shared scratch buffer); `*bytes` grows to the largest. The convolutions run with
// user-managed scratchpads, as PyTorch's (ideep's) do: one buffer, allocated once, instead of
// whatever the library does per execution. One F0 train step on AVX2 (oneDNN's log): F0's 6x6
// backward convolutions took 3.3-7.1 ms per call with the library's scratchpads, 3.4-5.7 with
// these; the whole step's convolution time did not move beyond the run-to-run noise.
bool dnnl_scratchpad(dnnl_engine_t engine, const dnnl_primitive_desc_t pd, size_t *bytes, dnnl_memory_t *memory) {
  const_dnnl_memory_desc_t md = dnnl_primitive_desc_query_md(pd, kQueryScratchpadMd, 0);
  const size_t size = md == nullptr ? 0 : dnnl_memory_desc_get_size(md);
  if (size == 0) return true;
  *bytes = std::max(*bytes, size);
  return dnnl_memory_create(memory, md, engine, nullptr) == 0;
}

// Sets up `a` for the primitive `pd`'s argument `query` with NCHW layout `user_md`; its blocked
// memory, if any, goes at `*end` in the activations buffer, which is advanced past it.
bool dnnl_activation(dnnl_engine_t engine, const dnnl_primitive_desc_t pd, int query, const_dnnl_memory_desc_t user_md,
                     bool input, size_t *end, DnnlActivation *a) {
  const_dnnl_memory_desc_t md = dnnl_primitive_desc_query_md(pd, query, 0);
  if (md == nullptr || dnnl_memory_create(&a->user, user_md, engine, nullptr) != 0) return false;
  if (dnnl_memory_desc_equal(md, user_md)) {
    a->inner = a->user;
    return true;
  }
  a->offset = *end;
  *end += (dnnl_memory_desc_get_size(md) + 4095) / 4096 * 4096;
  return dnnl_inner(engine, user_md, md, input, &a->reorder, &a->inner);
}

// The activation layout a convolution's primitives are asked for. Left free, oneDNN picks its blocked
// layout (nChw16c with AVX-512, nChw8c with AVX2) and its jit kernels for it. With AVX-512 a stride-1
// kxk convolution runs faster on NHWC, where oneDNN picks its brgemm kernels (the minimum over 12 F0
// train steps, b8 at 192 px, oneDNN's log, Ice Lake: convolutions 1,464 -> 1,243 ms per step, layout
// changes 146 -> 179 ms; stage 3's grouped 3x3 forward 147 -> 110 ms); its 1x1 and strided ones ran
// slower there (stage 3's 1x1 backward-weights 95 -> 132 ms) and keep the free choice. With AVX2 (oneDNN
// limited to it) NHWC gained in the forward what the extra layout changes cost, and lost in
// backward-weights (stage 3's grouped 3x3 135 -> 163 ms): every convolution keeps the free choice.
int dnnl_activation_tag(const ConvGeometry &g) {
  static const bool nhwc = [] {
    // kTagAcdb is oneDNN 3.x's published value of NHWC (acdb); the library confirms it
    const dnnl_dims_t dims = {2, 3, 4, 5}, nhwc_strides = {60, 1, 15, 3};
    dnnl_memory_desc_t tagged = nullptr, strided = nullptr;
    const bool same = dnnl_memory_desc_create_with_tag(&tagged, 4, dims, kDnnlF32, kTagAcdb) == 0 &&
                      dnnl_memory_desc_create_with_strides(&strided, 4, dims, kDnnlF32, nhwc_strides) == 0 &&
                      dnnl_memory_desc_equal(tagged, strided);
    for (auto md : {tagged, strided})
      if (md) dnnl_memory_desc_destroy(md);
    return same && (dnnl_get_effective_cpu_isa() & kIsaAvx512Bit) != 0;  // honours ONEDNN_MAX_CPU_ISA
  }();
  return nhwc && g.stride == 1 && (g.kh > 1 || g.kw > 1) ? kTagAcdb : kTagAny;
}

// The primitives of one convolution geometry, made on first use (nullptr if oneDNN refuses
// them). Call with the context's `run` held.
DnnlConv *dnnl_conv(const ConvGeometry &g, int64_t out_channels, int64_t groups) {
  DnnlContext &ctx = dnnl_context();
  const std::vector<int64_t> key = {g.n, g.c, g.h, g.w, out_channels, g.kh, g.kw, g.stride, groups};
  for (auto &entry : ctx.convs)
    if (entry.first == key) return entry.second.get();
  if (ctx.engine == nullptr && (dnnl_engine_create(&ctx.engine, kDnnlCpu, 0) != 0 ||
                                dnnl_threadpool_interop_stream_create(&ctx.stream, ctx.engine, &ctx.pool) != 0 ||
                                dnnl_primitive_attr_create(&ctx.attr) != 0 ||
                                dnnl_primitive_attr_set_scratchpad_mode(ctx.attr, kScratchpadModeUser) != 0))
    return nullptr;
  const int64_t bottom = std::max<int64_t>((g.oh - 1) * g.stride + g.kh - g.h, 0) - g.top;
  const int64_t right = std::max<int64_t>((g.ow - 1) * g.stride + g.kw - g.w, 0) - g.left;
  const dnnl_dims_t src_dims = {g.n, g.c, g.h, g.w}, dst_dims = {g.n, out_channels, g.oh, g.ow};
  const dnnl_dims_t bias_dims = {out_channels}, strides = {g.stride, g.stride}, dilates = {0, 0};
  const dnnl_dims_t pad_l = {g.top, g.left}, pad_r = {bottom, right};
  dnnl_dims_t weight_dims = {groups, out_channels / groups, g.c / groups, g.kh, g.kw};  // (g, o, i, kh, kw)
  if (groups == 1) std::copy(weight_dims + 1, weight_dims + 5, weight_dims);          // (o, i, kh, kw)
  const int weight_ndims = groups == 1 ? 4 : 5;
  dnnl_memory_desc_t src_md, dst_md, conv_src_md, conv_dst_md, bias_md, user_md, any_md;
  dnnl_memory_desc_create_with_tag(&src_md, 4, src_dims, kDnnlF32, kTagAbcd);
  dnnl_memory_desc_create_with_tag(&dst_md, 4, dst_dims, kDnnlF32, kTagAbcd);
  const int activation_tag = dnnl_activation_tag(g);
  dnnl_memory_desc_create_with_tag(&conv_src_md, 4, src_dims, kDnnlF32, activation_tag);
  dnnl_memory_desc_create_with_tag(&conv_dst_md, 4, dst_dims, kDnnlF32, activation_tag);
  dnnl_memory_desc_create_with_tag(&bias_md, 1, bias_dims, kDnnlF32, kTagA);
  dnnl_memory_desc_create_with_tag(&user_md, weight_ndims, weight_dims, kDnnlF32,
                                   groups == 1 ? kTagAbcd : kTagAbcde);
  dnnl_memory_desc_create_with_tag(&any_md, weight_ndims, weight_dims, kDnnlF32, kTagAny);
  auto conv = std::make_unique<DnnlConv>();
  conv->out_channels = out_channels;
  conv->weight_numel = out_channels * (g.c / groups) * g.kh * g.kw;
  dnnl_primitive_desc_t fwd = nullptr, bwd_data = nullptr, bwd_weights = nullptr;
  bool ok =
      dnnl_convolution_forward_primitive_desc_create(&fwd, ctx.engine, kForwardTraining, kConvolutionDirect,
                                                     conv_src_md, any_md, bias_md, conv_dst_md, strides, dilates, pad_l,
                                                     pad_r, ctx.attr) == 0 &&
      dnnl_convolution_backward_data_primitive_desc_create(&bwd_data, ctx.engine, kConvolutionDirect, conv_src_md,
                                                           any_md, conv_dst_md, strides, dilates, pad_l, pad_r, fwd,
                                                           ctx.attr) == 0 &&
      dnnl_convolution_backward_weights_primitive_desc_create(&bwd_weights, ctx.engine, kConvolutionDirect,
                                                              conv_src_md, any_md, bias_md, conv_dst_md, strides,
                                                              dilates, pad_l, pad_r, fwd, ctx.attr) == 0;
  size_t weights_bytes = 0, forward_end = 0, backward_end = 0, scratch_bytes = 0;
  if (ok) {
    const_dnnl_memory_desc_t data_dy_md = dnnl_primitive_desc_query_md(bwd_data, kQueryDiffDstMd, 0);
    conv->shared_dy = dnnl_memory_desc_equal(data_dy_md, dnnl_primitive_desc_query_md(bwd_weights, kQueryDiffDstMd, 0));
    ok = dnnl_primitive_create(&conv->forward, fwd) == 0 && dnnl_primitive_create(&conv->backward_data, bwd_data) == 0 &&
         dnnl_primitive_create(&conv->backward_weights, bwd_weights) == 0 &&
         dnnl_scratchpad(ctx.engine, fwd, &scratch_bytes, &conv->forward_scratch) &&
         dnnl_scratchpad(ctx.engine, bwd_data, &scratch_bytes, &conv->data_scratch) &&
         dnnl_scratchpad(ctx.engine, bwd_weights, &scratch_bytes, &conv->weights_scratch) &&
         dnnl_weights(ctx.engine, user_md, dnnl_primitive_desc_query_md(fwd, kQueryWeightsMd, 0), true,
                      &conv->to_forward_weights, &conv->forward_weights, &weights_bytes) &&
         dnnl_weights(ctx.engine, user_md, dnnl_primitive_desc_query_md(bwd_data, kQueryWeightsMd, 0), true,
                      &conv->to_data_weights, &conv->data_weights, &weights_bytes) &&
         dnnl_weights(ctx.engine, user_md, dnnl_primitive_desc_query_md(bwd_weights, kQueryDiffWeightsMd, 0), false,
                      &conv->from_diff_weights, &conv->diff_weights, &weights_bytes) &&
         dnnl_memory_create(&conv->bias, bias_md, ctx.engine, nullptr) == 0 &&
         dnnl_memory_create(&conv->user_weights, user_md, ctx.engine, nullptr) == 0 &&
         dnnl_activation(ctx.engine, fwd, kQuerySrcMd, src_md, true, &forward_end, &conv->x) &&
         dnnl_activation(ctx.engine, fwd, kQueryDstMd, dst_md, false, &forward_end, &conv->y) &&
         dnnl_activation(ctx.engine, bwd_data, kQueryDiffDstMd, dst_md, true, &backward_end, &conv->data_dy) &&
         dnnl_activation(ctx.engine, bwd_data, kQueryDiffSrcMd, src_md, false, &backward_end, &conv->dx) &&
         dnnl_activation(ctx.engine, bwd_weights, kQuerySrcMd, src_md, true, &backward_end, &conv->weights_x) &&
         (conv->shared_dy || dnnl_activation(ctx.engine, bwd_weights, kQueryDiffDstMd, dst_md, true, &backward_end,
                                             &conv->weights_dy));
  }
  for (auto pd : {fwd, bwd_data, bwd_weights})
    if (pd) dnnl_primitive_desc_destroy(pd);
  for (auto md : {src_md, dst_md, conv_src_md, conv_dst_md, bias_md, user_md, any_md}) dnnl_memory_desc_destroy(md);
  if (!ok) return nullptr;
  ctx.weights_buffer(weights_bytes);
  ctx.activations_buffer(std::max(forward_end, backward_end));
  ctx.scratch_buffer(scratch_bytes);
  ctx.convs.emplace_back(key, std::move(conv));
  return ctx.convs.back().second.get();
}

bool dnnl_execute(DnnlContext &ctx, dnnl_primitive_t primitive, const std::vector<dnnl_exec_arg_t> &args) {
  return dnnl_primitive_execute(primitive, ctx.stream, static_cast<int>(args.size()), args.data()) == 0;
}

// dnnl_execute of a convolution primitive with its scratchpad `scratch` (or none).
bool dnnl_execute_conv(DnnlContext &ctx, dnnl_primitive_t primitive, dnnl_memory_t scratch,
                       std::vector<dnnl_exec_arg_t> args) {
  if (scratch != nullptr) {
    dnnl_memory_set_data_handle(scratch, ctx.scratch_buffer(0));
    args.push_back({kArgScratchpad, scratch});
  }
  return dnnl_execute(ctx, primitive, args);
}

// Runs `reorder` from `from` to `to`, or nothing if there is none.
bool dnnl_reorder_run(DnnlContext &ctx, dnnl_primitive_t reorder, dnnl_memory_t from, dnnl_memory_t to) {
  return reorder == nullptr || dnnl_execute(ctx, reorder, {{kArgSrc, from}, {kArgDst, to}});
}

// Points `a` at MindSpore's NCHW `data` (and its blocked memory into the activations buffer).
void dnnl_bind(DnnlContext &ctx, DnnlActivation *a, void *data) {
  dnnl_memory_set_data_handle(a->user, data);
  if (a->reorder) dnnl_memory_set_data_handle(a->inner, ctx.activations_buffer(0) + a->offset);
}

// Reorders an input activation into its primitive's layout, or an output one out of it.
bool dnnl_load(DnnlContext &ctx, const DnnlActivation &a) { return dnnl_reorder_run(ctx, a.reorder, a.user, a.inner); }
bool dnnl_store(DnnlContext &ctx, const DnnlActivation &a) { return dnnl_reorder_run(ctx, a.reorder, a.inner, a.user); }

// The convolution of the geometry input (kh, kw, stride, groups), weight shape `w` and input shape `x`.
DnnlConv *dnnl_conv_for(const int64_t *x, const int64_t *w, int geometry_ndim, const int64_t *geometry) {
  ConvGeometry g;
  if (geometry_ndim != 4 || !conv_geometry(x, 3, geometry, &g) || geometry[3] < 1) return nullptr;
  return dnnl_conv(g, w[0], geometry[3]);
}

// The three passes of `conv` on memories already in its primitives' layouts (the weights' user
// layout is MindSpore's (out, c / groups, kh, kw) at `weights`). Forward: x -> y with `bias`.
const_dnnl_memory_desc_t dnnl_md(dnnl_memory_t memory) {
  const_dnnl_memory_desc_t md = nullptr;
  return dnnl_memory_get_memory_desc(memory, &md) == 0 ? md : nullptr;
}

// A convolution's weights in a call: the standardized OIHW weight, or with `gain` set the raw weight that
// is standardized (consts as WeightStandardizeForward's) straight into the layout a primitive reads, and
// whose gradient comes back through the standardization's backward straight from the layout the
// backward-weights primitive writes: no OIHW standardized weight, no reorders of the weights.
struct ConvWeights {
  void *weight = nullptr;
  void *bias = nullptr;
  const float *gain = nullptr, *consts = nullptr;
};

// The WeightMap of `layout` (a weights memory of `conv`), built on first use: oneDNN itself reorders a
// tensor holding each position's index out of the layout into OIHW, which gives every element's position.
WeightMap &weight_map(DnnlContext &ctx, DnnlConv *conv, dnnl_memory_t layout, WeightMap *map) {
  if (map->built) return *map;
  map->built = true;
  const_dnnl_memory_desc_t from = dnnl_md(layout), to = dnnl_md(conv->user_weights);
  const size_t bytes = dnnl_memory_desc_get_size(to), count = bytes / sizeof(float);
  // positions as float32 indices are exact below 2^24; padded layouts (larger than OIHW) keep the reorder
  if (from == nullptr || to == nullptr || dnnl_memory_desc_get_size(from) != bytes || count >= (1u << 24)) return *map;
  std::vector<float> positions(count), oihw(count);
  for (size_t q = 0; q < count; ++q) positions[q] = static_cast<float>(q);
  dnnl_primitive_t reorder = nullptr;
  dnnl_memory_t src = nullptr, dst = nullptr;
  bool ok = dnnl_reorder(ctx.engine, from, to, &reorder) &&
            dnnl_memory_create(&src, from, ctx.engine, positions.data()) == 0 &&
            dnnl_memory_create(&dst, to, ctx.engine, oihw.data()) == 0 &&
            dnnl_execute(ctx, reorder, {{kArgSrc, src}, {kArgDst, dst}}) && dnnl_stream_wait(ctx.stream) == 0;
  for (auto m : {src, dst})
    if (m) dnnl_memory_destroy(m);
  if (reorder) dnnl_primitive_destroy(reorder);
  const int64_t rows = conv->out_channels, k = static_cast<int64_t>(count) / rows;
  if (!ok || rows * k != static_cast<int64_t>(count)) return *map;
  map->row.resize(rows);
  map->col.resize(k);
  for (int64_t r = 0; r < rows; ++r) map->row[r] = static_cast<int64_t>(oihw[r * k]);
  for (int64_t j = 0; j < k; ++j) map->col[j] = static_cast<int64_t>(oihw[j]) - map->row[0];
  for (int64_t r = 0; r < rows && ok; ++r)
    for (int64_t j = 0; j < k; ++j)
      if (static_cast<int64_t>(oihw[r * k + j]) != map->row[r] + map->col[j]) {
        ok = false;
        break;
      }
  map->separable = ok;
  for (int64_t n : {64, 32, 16, 8}) {  // the output channels' inner block (OIhw16i16o, aBdec64b, ...)
    bool together = ok && rows % n == 0;
    for (int64_t r = 0; r < rows && together; ++r) together = map->row[r] == map->row[r - r % n] + r % n;
    if (together) {
      map->rows_together = n;
      break;
    }
  }
  return *map;
}

// fn(r0, n, block) in parallel for each block of n = map.rows_together rows (r0 a multiple of n), which lie
// side by side in the layout; `block` is scratch for their n * k values (a thread's own).
template <typename Fn>
void for_row_blocks(const WeightMap &map, int64_t rows, int64_t k, Fn fn) {
  const int64_t n = map.rows_together;
  g_pool.parallel_for(rows / n, threads(), [&](int64_t begin, int64_t end) {
    std::vector<float> block(n * k);
    for (int64_t b = begin; b < end; ++b) fn(b * n, n, block.data());
  });
}

// cw's weight standardized into `layout` (the primitive's weights memory, its handle set), through its map
// or, where the layout does not separate, through OIHW and the reorder `to_layout`.
bool standardize_into(DnnlContext &ctx, DnnlConv *conv, const ConvWeights &cw, dnnl_memory_t layout,
                      dnnl_primitive_t to_layout, WeightMap *map_slot) {
  const WeightMap &map = weight_map(ctx, conv, layout, map_slot);
  const float *w = static_cast<const float *>(cw.weight);
  const int64_t rows = conv->out_channels, k = conv->weight_numel / rows;
  if (!map.separable) {
    ctx.oihw.resize(conv->weight_numel);
    float *out = ctx.oihw.data();
    parallel_for(rows, [&](int64_t r) { standardize_row(w + r * k, k, cw.gain[r], cw.consts, out + r * k); });
    dnnl_memory_set_data_handle(conv->user_weights, out);
    if (to_layout == nullptr) dnnl_memory_set_data_handle(layout, out);  // the layout is OIHW itself
    return dnnl_reorder_run(ctx, to_layout, conv->user_weights, layout);
  }
  // Rows that lie side by side in the layout (its output-channel block) are standardized together and
  // written a column at a time: whole cache lines instead of one element per line. F0 train step, b8 at
  // 192 px, Zen 4 with AVX-512, `perf` over 12 steady steps: this loop 3.05 -> 2.30 % of the samples, the
  // whole standardization (with the backward's gather below) 5.9 -> 4.7 %.
  float *out = static_cast<float *>(ctx.weights_buffer(0));
  for_row_blocks(map, rows, k, [&](int64_t r0, int64_t n, float *block) {
    for (int64_t t = 0; t < n; ++t) standardize_row(w + (r0 + t) * k, k, cw.gain[r0 + t], cw.consts, block + t * k);
    float *base = out + map.row[r0];
    for (int64_t j = 0; j < k; ++j)
      for (int64_t t = 0; t < n; ++t) base[map.col[j] + t] = block[t * k + j];
  });
  return true;
}

// The weights memory `layout` (handle: the shared weights buffer) filled for a primitive from cw: cw's
// standardized OIHW weight reordered, or its raw weight standardized into it.
bool load_weights(DnnlContext &ctx, DnnlConv *conv, const ConvWeights &cw, dnnl_memory_t layout,
                  dnnl_primitive_t to_layout, WeightMap *map) {
  dnnl_memory_set_data_handle(layout, ctx.weights_buffer(0));
  if (cw.gain != nullptr) return standardize_into(ctx, conv, cw, layout, to_layout, map);
  dnnl_memory_set_data_handle(conv->user_weights, cw.weight);
  return dnnl_reorder_run(ctx, to_layout, conv->user_weights, layout);
}

bool dnnl_forward(DnnlContext &ctx, DnnlConv *conv, const ConvWeights &cw, dnnl_memory_t x, dnnl_memory_t y) {
  dnnl_memory_set_data_handle(conv->bias, cw.bias);
  return load_weights(ctx, conv, cw, conv->forward_weights, conv->to_forward_weights, &conv->forward_map) &&
         dnnl_execute_conv(ctx, conv->forward, conv->forward_scratch,
                           {{kArgSrc, x}, {kArgWeights, conv->forward_weights}, {kArgBias, conv->bias}, {kArgDst, y}});
}

// Backward-data: dy -> dx.
bool dnnl_backward_data(DnnlContext &ctx, DnnlConv *conv, const ConvWeights &cw, dnnl_memory_t dy, dnnl_memory_t dx) {
  return load_weights(ctx, conv, cw, conv->data_weights, conv->to_data_weights, &conv->data_map) &&
         dnnl_execute_conv(ctx, conv->backward_data, conv->data_scratch,
                           {{kArgDiffDst, dy}, {kArgWeights, conv->data_weights}, {kArgDiffSrc, dx}});
}

// Backward-weights: (x, dy) -> the weight gradient in OIHW at `dweights`, the bias's at `dbias`. With cw's
// gain set, the gradient of cw's raw weight and of its gain (at `dgain`), through the standardization.
bool dnnl_backward_weights(DnnlContext &ctx, DnnlConv *conv, dnnl_memory_t x, dnnl_memory_t dy, void *dweights,
                           void *dbias, const ConvWeights *cw = nullptr, void *dgain = nullptr) {
  dnnl_memory_set_data_handle(conv->bias, dbias);
  dnnl_memory_set_data_handle(conv->diff_weights, ctx.weights_buffer(0));
  if (!dnnl_execute_conv(ctx, conv->backward_weights, conv->weights_scratch,
                         {{kArgSrc, x}, {kArgDiffDst, dy}, {kArgDiffWeights, conv->diff_weights},
                          {kArgDiffBias, conv->bias}}))
    return false;
  if (cw == nullptr || cw->gain == nullptr) {
    dnnl_memory_set_data_handle(conv->user_weights, dweights);
    return dnnl_reorder_run(ctx, conv->from_diff_weights, conv->diff_weights, conv->user_weights);
  }
  if (dnnl_stream_wait(ctx.stream) != 0) return false;  // the gradient is read here, outside the stream
  const WeightMap &map = weight_map(ctx, conv, conv->diff_weights, &conv->diff_map);
  const float *w = static_cast<const float *>(cw->weight);
  float *dw = static_cast<float *>(dweights), *dg = static_cast<float *>(dgain);
  const int64_t rows = conv->out_channels, k = conv->weight_numel / rows;
  if (!map.separable) {
    ctx.oihw.resize(conv->weight_numel);
    dnnl_memory_set_data_handle(conv->user_weights, ctx.oihw.data());
    if (!dnnl_reorder_run(ctx, conv->from_diff_weights, conv->diff_weights, conv->user_weights) ||
        dnnl_stream_wait(ctx.stream) != 0)
      return false;
    const float *d = conv->from_diff_weights ? ctx.oihw.data() : static_cast<const float *>(ctx.weights_buffer(0));
    parallel_for(rows, [&](int64_t r) {
      standardize_row_backward(w + r * k, d + r * k, k, cw->gain[r], cw->consts, dw + r * k, dg + r);
    });
    return true;
  }
  const float *diff = static_cast<const float *>(ctx.weights_buffer(0));
  for_row_blocks(map, rows, k, [&](int64_t r0, int64_t n, float *block) {  // read as standardize_into writes
    const float *base = diff + map.row[r0];
    for (int64_t j = 0; j < k; ++j)
      for (int64_t t = 0; t < n; ++t) block[t * k + j] = base[map.col[j] + t];
    for (int64_t r = r0; r < r0 + n; ++r)
      standardize_row_backward(w + r * k, block + (r - r0) * k, k, cw->gain[r], cw->consts, dw + r * k, dg + r);
  });
  return true;
}

}  // namespace

// SAME-padded NCHW convolution plus bias (the forward of FusedConv2dSame). params: x (n, c, h, w),
// weight (out, c / groups, kh, kw), bias (out,), geometry (kh, kw, stride, groups) int32 (only its
// shape is read), y (n, out, oh, ow).
extern "C" int DnnlConvForward(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *,
                               void *) {
  if (nparam != 5 || ndims[0] != 4 || ndims[1] != 4 || !all_float32(3, dtypes) ||
      std::strcmp(dtypes[4], "float32") != 0) return 1;
  DnnlContext &ctx = dnnl_context();
  std::lock_guard<std::mutex> lock(ctx.run);
  DnnlConv *conv = dnnl_conv_for(shapes[0], shapes[1], ndims[3], shapes[3]);
  if (conv == nullptr) return 1;
  dnnl_bind(ctx, &conv->x, params[0]);
  dnnl_bind(ctx, &conv->y, params[4]);
  const bool ok = dnnl_load(ctx, conv->x) &&
                  dnnl_forward(ctx, conv, ConvWeights{params[1], params[2]}, conv->x.inner, conv->y.inner) &&
                  dnnl_store(ctx, conv->y) && dnnl_stream_wait(ctx.stream) == 0;
  return ok ? 0 : 1;
}

// The gradients of DnnlConvForward, in one call (the two backward primitives share the cores
// instead of being scheduled side by side). params: x (n, c, h, w), dy (n, out, oh, ow), weight
// (out, c / groups, kh, kw), geometry (only its shape is read), dx, dweight, dbias.
extern "C" int DnnlConvBackward(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *,
                                void *) {
  if (nparam != 7 || ndims[0] != 4 || ndims[1] != 4 || ndims[2] != 4 || !all_float32(3, dtypes) ||
      std::strcmp(dtypes[4], "float32") != 0 || std::strcmp(dtypes[5], "float32") != 0 ||
      std::strcmp(dtypes[6], "float32") != 0) return 1;
  DnnlContext &ctx = dnnl_context();
  std::lock_guard<std::mutex> lock(ctx.run);
  DnnlConv *conv = dnnl_conv_for(shapes[0], shapes[2], ndims[3], shapes[3]);
  if (conv == nullptr) return 1;
  dnnl_bind(ctx, &conv->data_dy, params[1]);
  dnnl_bind(ctx, &conv->dx, params[4]);
  dnnl_bind(ctx, &conv->weights_x, params[0]);
  const dnnl_memory_t weights_dy = conv->shared_dy ? conv->data_dy.inner : conv->weights_dy.inner;
  if (!conv->shared_dy) dnnl_bind(ctx, &conv->weights_dy, params[1]);
  const bool ok = dnnl_load(ctx, conv->data_dy) &&
                  dnnl_backward_data(ctx, conv, ConvWeights{params[2]}, conv->data_dy.inner, conv->dx.inner) &&
                  dnnl_store(ctx, conv->dx) && dnnl_load(ctx, conv->weights_x) &&
                  (conv->shared_dy || dnnl_load(ctx, conv->weights_dy)) &&
                  dnnl_backward_weights(ctx, conv, conv->weights_x.inner, weights_dy, params[5], params[6]) &&
                  dnnl_stream_wait(ctx.stream) == 0;
  return ok ? 0 : 1;
}

namespace {

// A chain of convolutions with gamma * GELU between them (an NF block's main path) in one call: at
// inference DnnlConvGeluChain, in training DnnlConvGeluChainTrain and DnnlConvGeluChainBackward. The
// convolutions are dnnl_conv's (the same primitives, so the same floats as DnnlConvForward and
// DnnlConvBackward) and the GELU the GELU kernels' element, but an activation passes from one
// convolution to the next in the blocked layout oneDNN chose, with the GELU applied there, instead of
// going out to NCHW and back: per NF block 2 activation reorders instead of 8 forward, and 3 instead of
// 12 backward.
struct DnnlChain {
  std::vector<DnnlConv *> convs;
  std::vector<int64_t> numel;             // elements of conv i's output
  std::vector<dnnl_primitive_t> between;  // conv i's dst layout -> conv i+1's src layout; nullptr: the same
  // The backward's layout changes (nullptr: none), entry i for conv i; `saved` is the layout of the
  // GELU's input conv i-1 wrote (its dst), where the GELU and its gradient are applied:
  std::vector<dnnl_primitive_t> dx_to_saved;   // conv i's diff_src -> conv i-1's dst
  std::vector<dnnl_primitive_t> saved_to_src;  // conv i-1's dst -> conv i's backward-weights src
  std::vector<dnnl_primitive_t> saved_to_dy;   // (entry i for i < count - 1) conv i's dst -> its backward-data diff_dst
  std::vector<dnnl_primitive_t> data_to_weights_dy;  // conv i's backward-data diff_dst -> backward-weights'
  dnnl_primitive_t x_to_weights_x = nullptr;  // conv 0's forward src layout -> its backward-weights src layout
  size_t region = 0;  // bytes of one of the activation regions: the largest of every layout above
};

// The reorder from `from`'s layout to `to`'s into `*reorder`, nullptr if they are the same; grows
// `*bytes` to both sizes.
bool dnnl_change(dnnl_memory_t from, dnnl_memory_t to, size_t *bytes, dnnl_primitive_t *reorder) {
  const_dnnl_memory_desc_t a = dnnl_md(from), b = dnnl_md(to);
  if (a == nullptr || b == nullptr) return false;
  *bytes = std::max({*bytes, dnnl_memory_desc_get_size(a), dnnl_memory_desc_get_size(b)});
  *reorder = nullptr;
  return dnnl_memory_desc_equal(a, b) || dnnl_reorder(dnnl_context().engine, a, b, reorder);
}

// The chain for input shape `x` and, per convolution, weight shape `w[i]` and geometry shape
// `geo[i]` (kh, kw, stride, groups); made on first use, nullptr if oneDNN refuses a part or an
// intermediate activation's layout is padded (its GELU would touch the padding). Call with the
// context's `run` held.
DnnlChain *dnnl_chain(const int64_t *x, int count, int64_t *const *w, int64_t *const *geo) {
  static std::vector<std::pair<std::vector<int64_t>, std::unique_ptr<DnnlChain>>> chains;
  std::vector<int64_t> key(x, x + 4);
  for (int i = 0; i < count; ++i) key.insert(key.end(), {w[i][0], geo[i][0], geo[i][1], geo[i][2], geo[i][3]});
  for (auto &entry : chains)
    if (entry.first == key) return entry.second.get();
  auto chain = std::make_unique<DnnlChain>();
  int64_t shape[4] = {x[0], x[1], x[2], x[3]};
  for (int i = 0; i < count; ++i) {
    DnnlConv *conv = dnnl_conv_for(shape, w[i], 4, geo[i]);
    if (conv == nullptr) return nullptr;
    int64_t unused;
    same_padding(shape[2], geo[i][0], geo[i][2], &unused, &shape[2]);
    same_padding(shape[3], geo[i][1], geo[i][2], &unused, &shape[3]);
    shape[1] = w[i][0];
    chain->convs.push_back(conv);
    chain->numel.push_back(numel(4, shape));
    const_dnnl_memory_desc_t dst = dnnl_md(conv->y.inner);
    if (dst == nullptr) return nullptr;
    if (i + 1 < count && dnnl_memory_desc_get_size(dst) != static_cast<size_t>(chain->numel.back()) * sizeof(float))
      return nullptr;
  }
  size_t bytes = 0;
  for (int i = 0; i < count; ++i) {
    DnnlConv *conv = chain->convs[i];
    dnnl_primitive_t between = nullptr, dx_to_saved = nullptr, saved_to_src = nullptr, saved_to_dy = nullptr,
                     to_weights_dy = nullptr;
    for (dnnl_memory_t m : {conv->x.inner, conv->y.inner, conv->data_dy.inner, conv->dx.inner, conv->weights_x.inner})
      bytes = std::max(bytes, dnnl_memory_desc_get_size(dnnl_md(m)));
    const bool ok =
        (i + 1 == count || dnnl_change(conv->y.inner, chain->convs[i + 1]->x.inner, &bytes, &between)) &&
        (i == 0 || (dnnl_change(conv->dx.inner, chain->convs[i - 1]->y.inner, &bytes, &dx_to_saved) &&
                    dnnl_change(chain->convs[i - 1]->y.inner, conv->weights_x.inner, &bytes, &saved_to_src) &&
                    dnnl_change(chain->convs[i - 1]->y.inner, chain->convs[i - 1]->data_dy.inner, &bytes,
                                &saved_to_dy))) &&
        (conv->shared_dy || dnnl_change(conv->data_dy.inner, conv->weights_dy.inner, &bytes, &to_weights_dy));
    if (!ok) return nullptr;
    if (i + 1 < count) chain->between.push_back(between);
    chain->dx_to_saved.push_back(dx_to_saved);
    chain->saved_to_src.push_back(saved_to_src);
    if (i > 0) chain->saved_to_dy.push_back(saved_to_dy);
    chain->data_to_weights_dy.push_back(to_weights_dy);
  }
  // the training forward keeps x in the first convolution's layout in an output of x's size: not a padded one
  const size_t x_bytes = static_cast<size_t>(numel(4, x)) * sizeof(float);
  if (dnnl_memory_desc_get_size(dnnl_md(chain->convs[0]->x.inner)) != x_bytes ||
      !dnnl_change(chain->convs[0]->x.inner, chain->convs[0]->weights_x.inner, &bytes, &chain->x_to_weights_x))
    return nullptr;
  chain->region = (bytes + 4095) / 4096 * 4096;
  dnnl_context().activations_buffer(5 * chain->region);
  chains.emplace_back(key, std::move(chain));
  return chains.back().second.get();
}

// The chain of a kernel's params, or nullptr if they do not describe one: x at 0, then per
// convolution its weight at `first + i * stride` and its geometry at `first + i * stride + stride - 1`.
// Call with the context's `run` held.
DnnlChain *dnnl_chain_of(int count, int first, int stride, int nparam, int *ndims, int64_t **shapes,
                         const char **dtypes) {
  if (count < 1 || ndims[0] != 4) return nullptr;
  for (int i = 0; i < nparam; ++i) {
    const bool geometry = i >= first && i < first + count * stride && (i - first) % stride == stride - 1;
    if (!geometry && std::strcmp(dtypes[i], "float32") != 0) return nullptr;
  }
  std::vector<int64_t *> w, geo;
  for (int i = 0; i < count; ++i) {
    const int at = first + i * stride;
    if (ndims[at] != 4 || ndims[at + stride - 1] != 4) return nullptr;
    w.push_back(shapes[at]);
    geo.push_back(shapes[at + stride - 1]);
  }
  return dnnl_chain(shapes[0], count, w.data(), geo.data());
}

// y = gamma * GELU(v) over n elements (in place when y is v).
void chain_gelu(int64_t n, const float *v, float *y, float half_gamma, bool tanh_form) {
  if (tanh_form)
    parallel_simd(n, [=](int64_t j) { y[j] = scaled_tanh_gelu(v[j], half_gamma); });
  else
    parallel_simd(n, [=](int64_t j) { y[j] = scaled_gelu(v[j], half_gamma); });
}

char *chain_region(DnnlContext &ctx, const DnnlChain &chain, int r) {
  return ctx.activations_buffer(0) + r * chain.region;
}

// The chain's forward from NCHW `x` with convolution i's weights cw[i]; the last convolution's output goes
// to NCHW `y`, and with `saved`, convolution i's (the GELU's input) to saved[i] in its blocked layout and x to
// saved_x in the first convolution's, for the backward.
bool dnnl_chain_forward(DnnlContext &ctx, const DnnlChain &chain, void *x, const ConvWeights *cw, void *y,
                        void *const *saved, void *saved_x, float half_gamma, bool tanh_form) {
  const int count = static_cast<int>(chain.convs.size());
  char *regions[3] = {chain_region(ctx, chain, 0), chain_region(ctx, chain, 1), chain_region(ctx, chain, 2)};
  for (int i = 0; i < count; ++i) {
    DnnlConv *conv = chain.convs[i];
    char *out = regions[1 - i % 2];  // conv i reads the other region (or the third, after a reorder)
    if (i == 0) {
      dnnl_memory_set_data_handle(conv->x.user, x);
      if (conv->x.reorder) dnnl_memory_set_data_handle(conv->x.inner, saved ? saved_x : regions[0]);
      if (!dnnl_load(ctx, conv->x)) return false;
      if (saved && !conv->x.reorder) std::memcpy(saved_x, x, dnnl_memory_desc_get_size(dnnl_md(conv->x.user)));
    }
    const bool last = i + 1 == count;
    if (last) {
      dnnl_memory_set_data_handle(conv->y.user, y);
      if (conv->y.reorder) dnnl_memory_set_data_handle(conv->y.inner, out);
    } else {
      dnnl_memory_set_data_handle(conv->y.inner, saved ? saved[i] : out);
    }
    if (!dnnl_forward(ctx, conv, cw[i], conv->x.inner, conv->y.inner)) return false;
    if (last) return dnnl_store(ctx, conv->y) && dnnl_stream_wait(ctx.stream) == 0;
    chain_gelu(chain.numel[i], saved ? static_cast<const float *>(saved[i]) : reinterpret_cast<float *>(out),
               reinterpret_cast<float *>(out), half_gamma, tanh_form);
    DnnlConv *next = chain.convs[i + 1];
    dnnl_memory_set_data_handle(conv->y.inner, out);
    if (chain.between[i] == nullptr) {
      dnnl_memory_set_data_handle(next->x.inner, out);
    } else {
      dnnl_memory_set_data_handle(next->x.inner, regions[2]);
      if (!dnnl_reorder_run(ctx, chain.between[i], conv->y.inner, next->x.inner)) return false;
    }
  }
  return dnnl_stream_wait(ctx.stream) == 0;
}

// One convolution's gradients in a chain call: the weight's (of the raw weight where its ConvWeights has a
// gain, and then the gain's too) and the bias's.
struct ConvGrads {
  void *weight = nullptr, *gain = nullptr, *bias = nullptr;
};

// The chain's gradients. `dy` is NCHW, `x` and saved[i] the forward's saved_x and saved[i]; cw[i] convolution
// i's weights as in the forward; `dx` (NCHW) and grads[i] are written.
bool dnnl_chain_backward(DnnlContext &ctx, const DnnlChain &chain, void *x, void *dy, void *const *saved,
                         const ConvWeights *cw, void *dx, const ConvGrads *grads, float gamma, bool tanh_form) {
  const int count = static_cast<int>(chain.convs.size());
  // r[0] holds the current convolution's dy (in its backward-data layout), r[1] its dx, r[2] its dy in
  // the backward-weights layout, r[3] its backward-weights src, r[4] an intermediate layout
  char *r[5];
  for (int k = 0; k < 5; ++k) r[k] = chain_region(ctx, chain, k);
  DnnlConv *last = chain.convs[count - 1];
  dnnl_memory_set_data_handle(last->data_dy.user, dy);
  if (last->data_dy.reorder) dnnl_memory_set_data_handle(last->data_dy.inner, r[0]);
  if (!dnnl_load(ctx, last->data_dy)) return false;
  for (int i = count - 1; i >= 0; --i) {
    DnnlConv *conv = chain.convs[i];
    if (i == 0) {
      dnnl_memory_set_data_handle(conv->dx.user, dx);
      if (conv->dx.reorder) dnnl_memory_set_data_handle(conv->dx.inner, r[1]);
    } else {
      dnnl_memory_set_data_handle(conv->dx.inner, r[1]);
    }
    if (!dnnl_backward_data(ctx, conv, cw[i], conv->data_dy.inner, conv->dx.inner)) return false;
    if (i == 0 && !dnnl_store(ctx, conv->dx)) return false;
    dnnl_memory_t weights_dy = conv->data_dy.inner;
    if (!conv->shared_dy) {
      weights_dy = conv->weights_dy.inner;
      dnnl_memory_set_data_handle(weights_dy, r[2]);
      if (!dnnl_reorder_run(ctx, chain.data_to_weights_dy[i], conv->data_dy.inner, weights_dy)) return false;
    }
    if (i == 0) {  // x in the forward's layout, kept from it: no reorder from NCHW again
      dnnl_memory_set_data_handle(conv->x.inner, x);
      dnnl_memory_set_data_handle(conv->weights_x.inner, chain.x_to_weights_x ? r[3] : x);
      if (!dnnl_reorder_run(ctx, chain.x_to_weights_x, conv->x.inner, conv->weights_x.inner)) return false;
      if (!dnnl_backward_weights(ctx, conv, conv->weights_x.inner, weights_dy, grads[0].weight, grads[0].bias, &cw[0],
                                 grads[0].gain))
        return false;
      break;
    }
    // In one pass over the GELU's saved input v, in its layout: its output gamma * GELU(v) (recomputed,
    // not kept from the forward), this convolution's backward-weights src, and the previous
    // convolution's dy = dx * gamma * GELU'(v).
    DnnlConv *prev = chain.convs[i - 1];
    int at = 1;  // the region holding dx, then the previous convolution's dy
    if (chain.dx_to_saved[i]) {
      dnnl_memory_set_data_handle(prev->y.inner, r[4]);
      if (!dnnl_reorder_run(ctx, chain.dx_to_saved[i], conv->dx.inner, prev->y.inner)) return false;
      at = 4;
    }
    char *g = chain.saved_to_src[i] ? r[at == 4 ? 1 : 4] : r[3];
    float *d = reinterpret_cast<float *>(r[at]), *out = reinterpret_cast<float *>(g);
    const float *v = static_cast<const float *>(saved[i - 1]);
    const float half_gamma = 0.5f * gamma;
    if (tanh_form)
      parallel_simd(chain.numel[i - 1], [=](int64_t j) {
        out[j] = scaled_tanh_gelu(v[j], half_gamma);
        d[j] = d[j] * gamma * tanh_gelu_slope(v[j]);
      });
    else
      parallel_simd(chain.numel[i - 1], [=](int64_t j) {
        out[j] = scaled_gelu(v[j], half_gamma);
        d[j] = d[j] * gamma * gelu_slope(v[j]);
      });
    dnnl_memory_set_data_handle(prev->y.inner, g);
    dnnl_memory_set_data_handle(conv->weights_x.inner, r[3]);
    if (!dnnl_reorder_run(ctx, chain.saved_to_src[i], prev->y.inner, conv->weights_x.inner) ||
        !dnnl_backward_weights(ctx, conv, conv->weights_x.inner, weights_dy, grads[i].weight, grads[i].bias, &cw[i],
                               grads[i].gain))
      return false;
    if (chain.saved_to_dy[i - 1]) {
      dnnl_memory_set_data_handle(prev->y.inner, r[at]);
      dnnl_memory_set_data_handle(prev->data_dy.inner, r[0]);
      if (!dnnl_reorder_run(ctx, chain.saved_to_dy[i - 1], prev->y.inner, prev->data_dy.inner)) return false;
    } else {
      std::swap(r[0], r[at]);  // the new dy's region becomes r[0]
      dnnl_memory_set_data_handle(prev->data_dy.inner, r[0]);
    }
  }
  return dnnl_stream_wait(ctx.stream) == 0;
}

}  // namespace

namespace {

// DnnlConvGeluChain (`training` false) and DnnlConvGeluChainTrain: the same inputs and y, the latter
// with the count - 1 saved activations and saved x after y; with `standardizes`, each convolution's raw weight, gain
// and standardization consts in place of its standardized weight (DnnlConvGeluChainTrainStd).
int chain_forward_kernel(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, bool training,
                         bool standardizes) {
  const int per = standardizes ? 5 : 3;  // per convolution: weight[, gain, consts], bias, geometry
  const int count = training ? (nparam - 3) / (per + 1) : (nparam - 3) / per;
  if (nparam != (training ? (per + 1) * count + 3 : per * count + 3)) return 1;
  DnnlContext &ctx = dnnl_context();
  std::lock_guard<std::mutex> lock(ctx.run);
  DnnlChain *chain = dnnl_chain_of(count, 1, per, nparam, ndims, shapes, dtypes);
  if (chain == nullptr) return 1;
  std::vector<ConvWeights> cw(count);
  for (int i = 0; i < count; ++i) {
    const int at = 1 + per * i;
    cw[i].weight = params[at];
    if (standardizes) {
      cw[i].gain = input(params, at + 1);
      cw[i].consts = input(params, at + 2);
    }
    cw[i].bias = params[at + per - 2];
  }
  const float *consts = input(params, per * count + 1);
  return dnnl_chain_forward(ctx, *chain, params[0], cw.data(), params[per * count + 2],
                            training ? params + per * count + 3 : nullptr, training ? params[nparam - 1] : nullptr,
                            0.5f * consts[0], consts[1] != 0.0f)
             ? 0 : 1;
}

// DnnlConvGeluChainBackward, and with `standardizes` DnnlConvGeluChainBackwardStd.
int chain_backward_kernel(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                          bool standardizes) {
  const int per = standardizes ? 4 : 2;   // inputs per convolution: weight[, gain, consts], geometry
  const int outs = standardizes ? 3 : 2;  // outputs per convolution: dweight[, dgain], dbias
  const int count = (nparam - 3) / (per + outs + 1);
  if (nparam != (per + outs + 1) * count + 3) return 1;
  DnnlContext &ctx = dnnl_context();
  std::lock_guard<std::mutex> lock(ctx.run);
  const int first = count + 1;  // the first weight, after x, dy and the count - 1 saved activations
  DnnlChain *chain = dnnl_chain_of(count, first, per, nparam, ndims, shapes, dtypes);
  if (chain == nullptr) return 1;
  const int grads_at = first + per * count + 2;  // after the consts and dx
  std::vector<ConvWeights> cw(count);
  std::vector<ConvGrads> grads(count);
  for (int i = 0; i < count; ++i) {
    const int at = first + per * i, out = grads_at + outs * i;
    cw[i].weight = params[at];
    grads[i].weight = params[out];
    grads[i].bias = params[out + outs - 1];
    if (standardizes) {
      cw[i].gain = input(params, at + 1);
      cw[i].consts = input(params, at + 2);
      grads[i].gain = params[out + 1];
    }
  }
  const float *consts = input(params, first + per * count);
  return dnnl_chain_backward(ctx, *chain, params[0], params[1], params + 2, cw.data(), params[first + per * count + 1],
                             grads.data(), consts[0], consts[1] != 0.0f) ? 0 : 1;
}

}  // namespace

// conv -> gamma GELU -> conv -> ... -> conv at inference, SAME-padded NCHW convolutions with bias
// (an NF block's main path), in one call. params: x (n, c, h, w), then per
// convolution its weight (out, c / groups, kh, kw), bias (out,) and geometry (kh, kw, stride,
// groups; only its shape is read), then consts (2,) = [gamma, form (0 exact, 1 tanh)], y.
extern "C" int DnnlConvGeluChain(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes, void *,
                                 void *) {
  return chain_forward_kernel(nparam, params, ndims, shapes, dtypes, false, false);
}

// DnnlConvGeluChain in training: the same params, then after y the outputs saved_0 ... saved_{count-2},
// convolution i's output (the GELU's input, shaped as NCHW, in oneDNN's blocked layout), and saved_x, x in the
// first convolution's layout (its reorder from NCHW, which the forward makes anyway, written there instead of
// to a scratch buffer), for DnnlConvGeluChainBackward.
extern "C" int DnnlConvGeluChainTrain(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                                      void *, void *) {
  return chain_forward_kernel(nparam, params, ndims, shapes, dtypes, true, false);
}

// The gradients of DnnlConvGeluChainTrain. params: saved_x (in place of x), dy (the gradient of y), saved_0 ...
// saved_{count-2}, then per convolution its weight and geometry, then consts; outputs dx, then per
// convolution dweight and dbias.
extern "C" int DnnlConvGeluChainBackward(int nparam, void **params, int *ndims, int64_t **shapes, const char **dtypes,
                                         void *, void *) {
  return chain_backward_kernel(nparam, params, ndims, shapes, dtypes, false);
}

// DnnlConvGeluChainTrain with each convolution's weight standardized inside (the arithmetic of
// WeightStandardizeForward, written straight into the layout oneDNN reads). params: x, then per
// convolution its raw weight, gain (out, 1, 1, 1), standardization consts (3,), bias and geometry, then
// consts; outputs y, saved_0 ... saved_{count-2}, saved_x.
extern "C" int DnnlConvGeluChainTrainStd(int nparam, void **params, int *ndims, int64_t **shapes,
                                         const char **dtypes, void *, void *) {
  return chain_forward_kernel(nparam, params, ndims, shapes, dtypes, true, true);
}

// The gradients of DnnlConvGeluChainTrainStd, through the standardization (WeightStandardizeBackward's
// arithmetic, read straight from the layout oneDNN writes the weight gradient in). params: saved_x, dy,
// saved_0 ... saved_{count-2}, then per convolution its raw weight, gain, standardization consts and
// geometry, then consts; outputs dx, then per convolution dweight, dgain and dbias.
extern "C" int DnnlConvGeluChainBackwardStd(int nparam, void **params, int *ndims, int64_t **shapes,
                                            const char **dtypes, void *, void *) {
  return chain_backward_kernel(nparam, params, ndims, shapes, dtypes, true);
}
#endif  // NFNET_WITH_DNNL
