// health(): NVML health counters of every GPU, read on a libuv worker (a lost GPU
// can make NVML calls slow) into a small value tree, converted to JS on the main
// thread. Raw codes only (bitmasks, enum numbers); src/gpu/health.ts names them.
// NVML_ERROR_NOT_SUPPORTED (or a symbol this library lacks) means "unavailable":
// the field is null. Any other error also nulls the field and is listed in the
// device's `errors` map, so one bad counter never hides the rest.
#include <napi.h>

#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "../core/js_errors.h"
#include "nvml_api.h"

namespace ncclnode {

void registerXid(Napi::Env env, Napi::Object exports);  // xid_watch.cpp

namespace {

struct Node {
  enum Kind { Null, Number, String, Bool, Object, Array } kind = Null;
  double num = 0;
  std::string str;
  std::vector<std::pair<std::string, Node>> fields;
  std::vector<Node> items;

  static Node number(double v) { Node n; n.kind = Number; n.num = v; return n; }
  static Node string(std::string s) { Node n; n.kind = String; n.str = std::move(s); return n; }
  static Node boolean(bool b) { Node n; n.kind = Bool; n.num = b ? 1 : 0; return n; }
  static Node object() { Node n; n.kind = Object; return n; }
  static Node array() { Node n; n.kind = Array; return n; }
  Node& set(const char* key, Node v) { fields.emplace_back(key, std::move(v)); return *this; }

  Napi::Value toJs(Napi::Env env) const {
    switch (kind) {
      case Number: return Napi::Number::New(env, num);
      case String: return Napi::String::New(env, str);
      case Bool: return Napi::Boolean::New(env, num != 0);
      case Object: {
        Napi::Object o = Napi::Object::New(env);
        for (const auto& f : fields) o.Set(f.first, f.second.toJs(env));
        return o;
      }
      case Array: {
        Napi::Array a = Napi::Array::New(env, items.size());
        for (size_t i = 0; i < items.size(); i++) a.Set(static_cast<uint32_t>(i), items[i].toJs(env));
        return a;
      }
      default: return env.Null();
    }
  }
};

constexpr nvmlReturn kNvmlInsufficientSize = 7, kNvmlArgumentVersionMismatch = 25;

// Reads one device. `ok(field, r)` is the single place that decides between a
// value, "unavailable" (null, silent) and an error (null, recorded).
struct DeviceReader {
  const NvmlApi& a;
  nvmlDevice d;
  Node errors = Node::object();

  bool ok(const char* field, nvmlReturn r) {
    if (r == kNvmlSuccess) return true;
    if (r != kNvmlNotSupported && r != kNvmlFunctionNotFound) errors.set(field, Node::string(NvmlApi::name(r)));
    return false;
  }
  template <class Fn, class... Args>
  nvmlReturn call(Fn* fn, Args... args) { return fn ? fn(d, args...) : kNvmlFunctionNotFound; }

  template <class T, class Fn>
  Node scalar(const char* field, Fn* fn) {
    T v{};
    return ok(field, call(fn, &v)) ? Node::number(static_cast<double>(v)) : Node();
  }

  Node ecc() {
    int current = 0, pending = 0;
    if (!ok("ecc", call(a.DeviceGetEccMode, &current, &pending))) return Node();
    Node out = Node::object();
    out.set("enabled", Node::boolean(current == 1)).set("pendingEnabled", Node::boolean(pending == 1));
    const char* counters[] = {"volatile", "aggregate"};  // NVML_VOLATILE_ECC = 0, NVML_AGGREGATE_ECC = 1
    for (int c = 0; c < 2; c++) {
      Node kinds = Node::object();
      const char* types[] = {"corrected", "uncorrected"};  // NVML_MEMORY_ERROR_TYPE_*
      for (int t = 0; t < 2; t++) {
        unsigned long long v = 0;
        const std::string field = std::string("ecc.") + counters[c] + "." + types[t];
        kinds.set(types[t], ok(field.c_str(), call(a.DeviceGetTotalEccErrors, t, c, &v)) ? Node::number(v) : Node());
      }
      out.set(counters[c], std::move(kinds));
    }
    return out;
  }

  Node retiredPages() {
    Node out = Node::object();
    const char* causes[] = {"singleBit", "doubleBit"};  // MULTIPLE_SINGLE_BIT_ECC_ERRORS, DOUBLE_BIT_ECC_ERROR
    for (int c = 0; c < 2; c++) {
      unsigned count = 0;
      nvmlReturn r = call(a.DeviceGetRetiredPages, c, &count, static_cast<unsigned long long*>(nullptr));
      if (r == kNvmlInsufficientSize) r = kNvmlSuccess;  // asked for the count only
      if (!ok("retiredPages", r)) return Node();
      out.set(causes[c], Node::number(count));
    }
    int pending = 0;
    out.set("pending", ok("retiredPages.pending", call(a.DeviceGetRetiredPagesPendingStatus, &pending))
                           ? Node::boolean(pending == 1) : Node());
    return out;
  }

  Node remappedRows() {
    unsigned corr = 0, unc = 0, pending = 0, failed = 0;
    if (!ok("remappedRows", call(a.DeviceGetRemappedRows, &corr, &unc, &pending, &failed))) return Node();
    Node out = Node::object();
    out.set("corrected", Node::number(corr)).set("uncorrected", Node::number(unc));
    out.set("pending", Node::boolean(pending != 0)).set("failed", Node::boolean(failed != 0));
    return out;
  }

  Node temperature() {
    nvmlTemperatureV1 t{nvmlStructVersion(sizeof(nvmlTemperatureV1), 1), 0 /* NVML_TEMPERATURE_GPU */, 0};
    const nvmlReturn r = call(a.DeviceGetTemperatureV, &t);
    // Older drivers: no TemperatureV, or a struct version they do not know.
    if (r == kNvmlFunctionNotFound || r == kNvmlArgumentVersionMismatch) {
      unsigned c = 0;
      return ok("temperatureC", call(a.DeviceGetTemperature, 0, &c)) ? Node::number(c) : Node();
    }
    return ok("temperatureC", r) ? Node::number(t.temperature) : Node();
  }

  Node utilization() {
    nvmlUtilization u{};
    if (!ok("utilization", call(a.DeviceGetUtilizationRates, &u))) return Node();
    Node out = Node::object();
    return std::move(out.set("gpu", Node::number(u.gpu)).set("memory", Node::number(u.memory)));
  }

  Node memory() {
    nvmlMemoryV2 m{};
    m.version = nvmlStructVersion(sizeof m, 2);
    if (!ok("memory", call(a.DeviceGetMemoryInfo, &m))) return Node();
    Node out = Node::object();
    out.set("total", Node::number(m.total)).set("reserved", Node::number(m.reserved));
    return std::move(out.set("free", Node::number(m.free)).set("used", Node::number(m.used)));
  }

  Node nvlink() {
    Node links = Node::array();
    for (unsigned l = 0; l < kNvmlNvlinkMaxLinks; l++) {
      int state = 0;
      const nvmlReturn r = call(a.DeviceGetNvLinkState, l, &state);
      // Past the last link NVML answers INVALID_ARGUMENT or NOT_SUPPORTED.
      if (l > 0 && (r == kNvmlInvalidArgument || r == kNvmlNotSupported)) break;
      if (!ok("nvlink", r)) return Node();
      Node link = Node::object();
      link.set("link", Node::number(l)).set("active", Node::boolean(state == 1));
      const char* names[] = {"replay", "recovery", "crcFlit", "crcData", "eccData"};  // DL_REPLAY .. DL_ECC_DATA
      Node counters = Node::object();
      for (int c = 0; c < 5; c++) {
        unsigned long long v = 0;
        const std::string field = "nvlink." + std::to_string(l) + "." + names[c];
        counters.set(names[c], ok(field.c_str(), call(a.DeviceGetNvLinkErrorCounter, l, c, &v)) ? Node::number(v) : Node());
      }
      link.set("errors", std::move(counters));
      links.items.push_back(std::move(link));
    }
    return links;
  }

  Node fabric() {
    nvmlGpuFabricInfoV3 f{};
    f.version = nvmlStructVersion(sizeof f, 3);
    if (!ok("fabric", call(a.DeviceGetGpuFabricInfoV, &f))) return Node();
    if (f.state == 0) return Node();  // NVML_GPU_FABRIC_STATE_NOT_SUPPORTED: no fabric on this GPU
    char uuid[33];
    for (int i = 0; i < 16; i++) std::snprintf(uuid + 2 * i, 3, "%02x", f.clusterUuid[i]);
    Node out = Node::object();
    out.set("state", Node::number(f.state)).set("status", Node::string(NvmlApi::name(f.status)));
    out.set("cliqueId", Node::number(f.cliqueId)).set("clusterUuid", Node::string(uuid));
    return std::move(out.set("healthMask", Node::number(f.healthMask)).set("healthSummary", Node::number(f.healthSummary)));
  }
};

Node readDevice(const NvmlApi& a, unsigned index) {
  Node out = Node::object();
  out.set("index", Node::number(index));
  nvmlDevice d = nullptr;
  const nvmlReturn r = a.DeviceGetHandleByIndex(index, &d);
  if (r != kNvmlSuccess) return std::move(out.set("error", Node::string(NvmlApi::name(r))));
  DeviceReader rd{a, d};
  char buf[96] = {0};
  out.set("name", rd.ok("name", rd.call(a.DeviceGetName, buf, 96u)) ? Node::string(buf) : Node());
  char uuid[96] = {0};
  out.set("uuid", rd.ok("uuid", rd.call(a.DeviceGetUUID, uuid, 96u)) ? Node::string(uuid) : Node());
  nvmlPciInfoV3 pci{};
  out.set("pciBusId", rd.ok("pciBusId", rd.call(a.DeviceGetPciInfo, &pci)) ? Node::string(std::string(pci.busId, strnlen(pci.busId, 32))) : Node());
  out.set("ecc", rd.ecc());
  out.set("retiredPages", rd.retiredPages());
  out.set("remappedRows", rd.remappedRows());
  out.set("clockEventReasons", rd.scalar<unsigned long long>("clockEventReasons", a.DeviceGetCurrentClocksEventReasons));
  out.set("temperatureC", rd.temperature());
  out.set("powerMilliwatts", rd.scalar<unsigned>("powerMilliwatts", a.DeviceGetPowerUsage));
  out.set("powerLimitMilliwatts", rd.scalar<unsigned>("powerLimitMilliwatts", a.DeviceGetEnforcedPowerLimit));
  out.set("utilization", rd.utilization());
  out.set("memory", rd.memory());
  out.set("pcieReplayCount", rd.scalar<unsigned>("pcieReplayCount", a.DeviceGetPcieReplayCounter));
  out.set("nvlinks", rd.nvlink());
  out.set("fabric", rd.fabric());
  out.set("errors", std::move(rd.errors));
  return out;
}

class HealthWorker : public Napi::AsyncWorker {
 public:
  HealthWorker(Napi::Env env) : Napi::AsyncWorker(env, "nccl-node:health"), deferred_(Napi::Promise::Deferred::New(env)) {}
  Napi::Promise promise() { return deferred_.Promise(); }

  void Execute() override {
    try {
      const NvmlApi& a = nvml();
      report_ = Node::object();
      char v[96] = {0};
      report_.set("driverVersion", a.SystemGetDriverVersion && a.SystemGetDriverVersion(v, 96) == kNvmlSuccess ? Node::string(v) : Node());
      char nv[96] = {0};
      report_.set("nvmlVersion", a.SystemGetNVMLVersion && a.SystemGetNVMLVersion(nv, 96) == kNvmlSuccess ? Node::string(nv) : Node());
      int cuda = 0;
      report_.set("cudaDriverVersion", a.SystemGetCudaDriverVersion && a.SystemGetCudaDriverVersion(&cuda) == kNvmlSuccess ? Node::number(cuda) : Node());
      unsigned n = 0;
      const nvmlReturn r = a.DeviceGetCount(&n);
      if (r != kNvmlSuccess) throw Error(Code::Nvml, std::string("nvmlDeviceGetCount_v2 failed: ") + NvmlApi::name(r));
      Node devices = Node::array();
      for (unsigned i = 0; i < n; i++) devices.items.push_back(readDevice(a, i));
      report_.set("devices", std::move(devices));
    } catch (const Error& e) {
      code_ = e.code();
      message_ = e.what();
      failed_ = true;
    }
  }
  void OnOK() override {
    if (failed_) deferred_.Reject(makeError(Env(), code_, "health: " + message_).Value());
    else deferred_.Resolve(report_.toJs(Env()));
  }

 private:
  Napi::Promise::Deferred deferred_;
  Node report_;
  bool failed_ = false;
  Code code_ = Code::Nvml;
  std::string message_;
};

}  // namespace

void registerNvml(Napi::Env env, Napi::Object exports) {
  exports.Set("health", Napi::Function::New(env, [](const Napi::CallbackInfo& info) -> Napi::Value {
    auto* w = new HealthWorker(info.Env());
    Napi::Promise p = w->promise();
    w->Queue();
    return p;
  }, "health"));
  registerXid(env, exports);
}

}  // namespace ncclnode
