// Runs the kernels of kernels.cu through the driver API: the fatbin nvcc made at
// build time is loaded per device with cuModuleLoadData and launched with
// cuLaunchKernel. Without the fatbin (no nvcc at build time) each call says so.
#include <dlfcn.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include "../core/dtype.h"
#include "../core/js_errors.h"
#include "../cuda/device_buffer.h"
#include "../cuda/gpu_env.h"
#include "../cuda/poller.h"
#include "verifiable_defs.h"

namespace ncclnode {

namespace {

std::string addonDir() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&addonDir), &info) == 0 || !info.dli_fname) return ".";
  std::string p = info.dli_fname;
  return p.substr(0, p.rfind('/'));
}

// NCCL_NODE_KERNELS, else <build>/kernels/nccl_node_kernels.fatbin next to <build>/Release.
std::string kernelsPath() {
  const char* env = std::getenv("NCCL_NODE_KERNELS");
  if (env && *env) return env;
  return addonDir() + "/../kernels/nccl_node_kernels.fatbin";
}

// CUDA version codes (cuDriverGetVersion's 1000 * major + 10 * minor) as text.
std::string cudaVersionText(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

// The image built by CUDA X.Y loads only on a driver that supports X.Y; say so
// instead of failing in cuModuleLoadData (CUDA_ERROR_UNSUPPORTED_PTX_VERSION or a
// bare "no kernel image"). The version sits beside the image (cmake/gpu.cmake).
void checkDriverFor(const std::string& imagePath) {
  std::ifstream f(imagePath.substr(0, imagePath.rfind('.')) + ".cuda-version");
  int built = 0;
  if (!(f >> built) || built <= 0) return;  // unknown: let the driver decide
  int driver = 0;
  cuCheck(cuda().cuDriverGetVersion(&driver), "cuDriverGetVersion");
  if (driver >= built) return;
  throw Error(Code::Unavailable,
              "the CUDA kernels were built with CUDA " + cudaVersionText(built) + " and need a driver that supports it" +
                  (built >= 13000 ? " (R580 or newer)" : "") + "; this driver supports CUDA " +
                  cudaVersionText(driver) + ": update the driver, or rebuild with an nvcc no newer than " +
                  cudaVersionText(driver));
}

std::mutex mu;
std::vector<char>& image() {
  static std::vector<char> bytes;
  return bytes;
}

CUfunction function(int device, const char* name) {
  const CudaApi& cu = cuda();
  if (!cu.cuModuleLoadData || !cu.cuLaunchKernel || !cu.cuModuleGetFunction) {
    throw Error(Code::Unavailable, "the CUDA driver lacks cuModuleLoadData / cuLaunchKernel");
  }
  std::lock_guard<std::mutex> lock(mu);
  static std::map<int, CUmodule> modules;
  if (image().empty()) {
    const std::string path = kernelsPath();
    std::ifstream f(path, std::ios::binary);
    if (!f) {
      throw Error(Code::Unavailable, "the CUDA kernels are not built: " + path +
                                         " is missing (build with nvcc on PATH, or set NCCL_NODE_KERNELS)");
    }
    checkDriverFor(path);
    image().assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    image().push_back('\0');  // PTX images must be NUL-terminated
  }
  useDevice(device);
  CUmodule& m = modules[device];
  if (!m) cuCheck(cu.cuModuleLoadData(&m, image().data()), "cuModuleLoadData");
  CUfunction fn = nullptr;
  cuCheck(cu.cuModuleGetFunction(&fn, m, name), (std::string("cuModuleGetFunction ") + name).c_str());
  return fn;
}

void launch(int device, const char* name, size_t n, CUstream s, std::vector<void*> args) {
  CUfunction fn = function(device, name);
  const unsigned threads = 256;
  const size_t blocks = std::min<size_t>((n + threads - 1) / threads, 4096);
  cuCheck(cuda().cuLaunchKernel(fn, static_cast<unsigned>(blocks ? blocks : 1), 1, 1, threads, 1, 1, 0, s, args.data(),
                                nullptr),
          (std::string("cuLaunchKernel ") + name).c_str());
}

DeviceBufferWrap* bufferArg(const Napi::Value& v, const char* call) {
  BufferView view;
  if (!deviceBufferView(v, &view)) throw Error(Code::InvalidArgument, std::string(call) + ": expected a DeviceBuffer");
  return DeviceBufferWrap::Unwrap(v.As<Napi::Object>());
}

int intArg(const Napi::Value& v) { return v.IsNumber() ? v.As<Napi::Number>().Int32Value() : 0; }
uint64_t u64Arg(const Napi::Value& v) { return v.IsNumber() ? static_cast<uint64_t>(v.As<Napi::Number>().Int64Value()) : 0; }

// A device scratch word: zeroed, written by a kernel, read back when the stream gets there.
// An 8-byte device counter a kernel adds into (wrong elements, a checksum), zeroed
// on the stream, read back once the stream reaches the read.
struct Scratch {
  int device;
  CUdeviceptr dev = 0;
  uint64_t host = 0;
  ~Scratch() {
    if (!dev) return;
    try { useDevice(device); cuda().cuMemFree(dev); } catch (...) {}
  }
};

std::shared_ptr<Scratch> zeroedCounter(int device, CUstream s) {
  auto c = std::make_shared<Scratch>();
  c->device = device;
  useDevice(device);
  cuCheck(cuda().cuMemAlloc(&c->dev, 8), "cuMemAlloc");
  cuCheck(cuda().cuMemsetD8Async(c->dev, 0, 8, s), "cuMemsetD8Async");
  return c;
}

// Copies the counter back after the kernel and resolves with value(counter).
Napi::Promise counterResult(Napi::Env env, const std::shared_ptr<Scratch>& c, CUstream s,
                            Napi::Value (*value)(Napi::Env, uint64_t), std::vector<Napi::Value> keep) {
  cuCheck(cuda().cuMemcpyDtoHAsync(&c->host, c->dev, 8, s), "cuMemcpyDtoHAsync");
  return gpuEnv(env).poller->afterStream(env, c->device, s, [c, value](Napi::Env e) { return value(e, c->host); },
                                         std::move(keep));
}

Napi::Value asNumber(Napi::Env env, uint64_t v) { return Napi::Number::New(env, static_cast<double>(v)); }
Napi::Value asBigInt(Napi::Env env, uint64_t v) { return Napi::BigInt::New(env, v); }

// fill(buf, count, dtype, rank, seed, stream?) -> Promise<void>
Napi::Value Fill(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    auto* b = bufferArg(info[0], "fill");
    CUdeviceptr p = b->ptr();
    uint64_t n = u64Arg(info[1]);
    int dtype = intArg(info[2]), rank = intArg(info[3]);
    uint64_t seed = u64Arg(info[4]);
    CUstream s = streamArg(info[5]);
    launch(b->device(), "nccl_node_fill", n, s, {&p, &n, &dtype, &rank, &seed});
    return gpuEnv(env).poller->afterStream(env, b->device(), s, nullptr, {info[0]});
  });
}

// verify(buf, count, dtype, nranks, seed, stream?) -> Promise<number of wrong elements>
Napi::Value Verify(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    auto* b = bufferArg(info[0], "verify");
    CUdeviceptr p = b->ptr();
    uint64_t n = u64Arg(info[1]);
    int dtype = intArg(info[2]), nranks = intArg(info[3]);
    uint64_t seed = u64Arg(info[4]);
    CUstream s = streamArg(info[5]);
    auto counter = zeroedCounter(b->device(), s);
    CUdeviceptr errors = counter->dev;
    launch(b->device(), "nccl_node_verify", n, s, {&p, &n, &dtype, &nranks, &seed, &errors});
    return counterResult(env, counter, s, asNumber, {info[0]});
  });
}

// cast(src, dst, kind, count, stream?): kind 0 f32->bf16, 1 f32->f16, 2 bf16->f32, 3 f16->f32
Napi::Value Cast(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    static const char* names[] = {"nccl_node_cast_f32_bf16", "nccl_node_cast_f32_f16", "nccl_node_cast_bf16_f32",
                                  "nccl_node_cast_f16_f32"};
    auto* src = bufferArg(info[0], "cast");
    auto* dst = bufferArg(info[1], "cast");
    const int kind = intArg(info[2]);
    if (kind < 0 || kind > 3) throw Error(Code::InvalidArgument, "cast: unknown conversion");
    uint64_t n = u64Arg(info[3]);
    const size_t inW = kind < 2 ? 4 : 2, outW = kind < 2 ? 2 : 4;
    if (n * inW > src->bytes() || n * outW > dst->bytes()) throw Error(Code::SizeMismatch, "cast: buffers too small for the count");
    CUdeviceptr a = src->ptr(), b = dst->ptr();
    CUstream s = streamArg(info[4]);
    launch(src->device(), names[kind], n, s, {&a, &b, &n});
    return gpuEnv(env).poller->afterStream(env, src->device(), s, nullptr, {info[0], info[1]});
  });
}

// checksum(buf, bytes, stream?) -> Promise<bigint>
Napi::Value Checksum(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    auto* b = bufferArg(info[0], "checksum");
    CUdeviceptr p = b->ptr();
    uint64_t n = u64Arg(info[1]);
    if (n > b->bytes()) throw Error(Code::SizeMismatch, "checksum: byte count exceeds the buffer");
    CUstream s = streamArg(info[2]);
    auto counter = zeroedCounter(b->device(), s);
    CUdeviceptr out = counter->dev;
    launch(b->device(), "nccl_node_checksum", n, s, {&p, &n, &out});
    return counterResult(env, counter, s, asBigInt, {info[0]});
  });
}

// The benchmark's verifiable data (verifiable_defs.h): with rank >= 0 rank's input, with
// rank < 0 the expected result, for elements offset.. of a (dtype, op, nranks, seed) test.
// verifiablePrepare(buf, count, dtype, op, nranks, rank, seed, offset, stream?) -> Promise<void>
Napi::Value VerifiablePrepare(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    auto* b = bufferArg(info[0], "verifiablePrepare");
    CUdeviceptr p = b->ptr();
    uint64_t n = u64Arg(info[1]);
    int dtype = intArg(info[2]), op = intArg(info[3]), nranks = intArg(info[4]), rank = intArg(info[5]);
    unsigned seed = static_cast<unsigned>(u64Arg(info[6]));
    uint64_t offset = u64Arg(info[7]);
    if (dtype < 0 || dtype >= kNumVerifiableDTypes || op < 0 || op > 5 || nranks < 1 || rank >= nranks) {
      throw Error(Code::InvalidArgument, "verifiablePrepare: bad dtype, op, nranks or rank");
    }
    if (n * elementSize(static_cast<DType>(dtype)) > b->bytes()) throw Error(Code::SizeMismatch, "verifiablePrepare: count exceeds the buffer");
    CUstream s = streamArg(info[8]);
    launch(b->device(), "nccl_node_verifiable_prepare", n, s, {&p, &n, &dtype, &op, &nranks, &rank, &seed, &offset});
    return gpuEnv(env).poller->afterStream(env, b->device(), s, nullptr, {info[0]});
  });
}

// verifiableCompare(actual, expected, count, dtype, op, stream?) -> Promise<number of wrong elements>
Napi::Value VerifiableCompare(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    auto* a = bufferArg(info[0], "verifiableCompare");
    auto* e = bufferArg(info[1], "verifiableCompare");
    CUdeviceptr pa = a->ptr(), pe = e->ptr();
    uint64_t n = u64Arg(info[2]);
    int dtype = intArg(info[3]), op = intArg(info[4]);
    if (dtype < 0 || dtype >= kNumVerifiableDTypes || op < 0 || op > 5) throw Error(Code::InvalidArgument, "verifiableCompare: bad dtype or op");
    const uint64_t bytes = n * elementSize(static_cast<DType>(dtype));
    if (bytes > a->bytes() || bytes > e->bytes()) throw Error(Code::SizeMismatch, "verifiableCompare: count exceeds a buffer");
    if (a->device() != e->device()) throw Error(Code::InvalidArgument, "verifiableCompare: buffers on different devices");
    CUstream s = streamArg(info[5]);
    auto counter = zeroedCounter(a->device(), s);
    CUdeviceptr errors = counter->dev;
    launch(a->device(), "nccl_node_verifiable_compare", n, s, {&pa, &pe, &n, &dtype, &op, &errors});
    return counterResult(env, counter, s, asNumber, {info[0], info[1]});
  });
}

Napi::Value KernelsPath(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), kernelsPath()); }

}  // namespace

void registerKernels(Napi::Env env, Napi::Object exports) {
  Napi::Object k = Napi::Object::New(env);
  k.Set("fill", Napi::Function::New(env, Fill, "fill"));
  k.Set("verify", Napi::Function::New(env, Verify, "verify"));
  k.Set("cast", Napi::Function::New(env, Cast, "cast"));
  k.Set("checksum", Napi::Function::New(env, Checksum, "checksum"));
  k.Set("verifiablePrepare", Napi::Function::New(env, VerifiablePrepare, "verifiablePrepare"));
  k.Set("verifiableCompare", Napi::Function::New(env, VerifiableCompare, "verifiableCompare"));
  k.Set("path", Napi::Function::New(env, KernelsPath, "path"));
  exports.Set("kernels", k);
}

}  // namespace ncclnode
