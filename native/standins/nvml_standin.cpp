// Stand-in libnvidia-ml.so.1 for CI without a GPU. Devices and counters come from
// the JSON file named by NCCL_NODE_NVML_STANDIN_CONFIG, else 8 healthy H100-like
// GPUs. Each device is the defaults below overlaid with the config's
// `devices[i]` (shallow). A field that is null or absent answers
// NVML_ERROR_NOT_SUPPORTED (as a real GPU does for counters it lacks); a field
// {"nvmlError": N} answers N; `"lost": true` makes every query GPU_IS_LOST.
// Xid events: `"xid": [{"device", "xid", "afterMs", "eventType"?}]` fire that long
// after nvmlEventSetCreate; `"xidFile"` names a file whose appended lines
// "<device> <xid>" fire as they appear (tests write it while a watch runs).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "nvml_standin_json.h"

using nvmlstandin::Json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int OK = 0, NOT_SUPPORTED = 3, INVALID_ARGUMENT = 2, UNINITIALIZED = 1, INSUFFICIENT_SIZE = 7,
              TIMEOUT = 10, GPU_IS_LOST = 15, UNKNOWN = 999;

const char* kDefaults = R"({
  "name": "NVIDIA H100 80GB HBM3", "eccMode": 1,
  "ecc": {"volatile": {"corrected": 0, "uncorrected": 0}, "aggregate": {"corrected": 0, "uncorrected": 0}},
  "retiredPages": null,
  "remappedRows": {"corrected": 0, "uncorrected": 0, "pending": 0, "failed": 0},
  "clockEventReasons": 1, "temperature": 34, "power": 71000, "powerLimit": 700000,
  "utilization": {"gpu": 0, "memory": 0},
  "memory": {"total": 85520809984, "reserved": 566231040, "used": 0},
  "pcieReplay": 0, "nvlinks": 18,
  "nvlinkErrors": {"replay": 0, "recovery": 0, "crcFlit": 0, "crcData": 0, "eccData": 0},
  "fabric": null, "supportedEvents": 59407
})";  // supportedEvents: SBE|DBE|PState|Xid|Clock|PowerSource|DramRetirement*|GpuUnavailable|RecoveryAction

struct Device {
  int index = 0;
  Json f;  // merged fields
  std::string uuid, busId;
  unsigned long long registered = 0;  // event mask registered in the (one) set
};

struct Pending { Clock::time_point at; int device; unsigned long long type, data; };

struct EventSet {
  std::mutex mu;
  Clock::time_point created = Clock::now();
  std::vector<Pending> timed;
  std::string xidFile;
  std::streamoff fileOffset = 0;
};

std::mutex mu;
bool inited = false;
std::vector<Device> devices;
Json config;

int load() {
  std::string text = "{}";
  const char* path = std::getenv("NCCL_NODE_NVML_STANDIN_CONFIG");
  try {
    if (path && *path) {
      std::ifstream in(path);
      if (!in) { std::fprintf(stderr, "nvml stand-in: cannot read %s\n", path); return UNKNOWN; }
      std::stringstream ss;
      ss << in.rdbuf();
      text = ss.str();
    }
    config = nvmlstandin::JsonParser(text).parse();
    const Json defaults = nvmlstandin::JsonParser(kDefaults).parse();
    const Json* list = config.get("devices");
    const Json* count = config.get("count");
    const size_t n = count ? static_cast<size_t>(count->num) : list ? list->arr.size() : 8;
    devices.clear();
    for (size_t i = 0; i < n; i++) {
      Device d;
      d.index = static_cast<int>(i);
      d.f = defaults;
      if (list && i < list->arr.size()) for (const auto& kv : list->arr[i].obj) d.f.obj[kv.first] = kv.second;
      char buf[64];
      std::snprintf(buf, sizeof buf, "GPU-5ta0d1n0-0000-4000-8000-%012zx", i);
      d.uuid = buf;
      std::snprintf(buf, sizeof buf, "00000000:%02zX:00.0", 0x18 + i);  // the CUDA stand-in's bus ids
      d.busId = buf;
      devices.push_back(std::move(d));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nvml stand-in: bad config %s: %s\n", path ? path : "(defaults)", e.what());
    return UNKNOWN;
  }
  return OK;
}

Device* dev(void* h) { return static_cast<Device*>(h); }

// The one lookup every query goes through: value, NOT_SUPPORTED, an injected error, or a lost GPU.
int field(void* h, const char* name, const Json** out) {
  if (!inited) return UNINITIALIZED;
  if (!h) return INVALID_ARGUMENT;
  const Json* lost = dev(h)->f.get("lost");
  if (lost && lost->b) return GPU_IS_LOST;
  const Json* v = dev(h)->f.get(name);
  if (!v || v->isNull()) return NOT_SUPPORTED;
  if (const Json* e = v->get("nvmlError")) return static_cast<int>(e->num);
  *out = v;
  return OK;
}
double num(const Json* o, const char* k) { const Json* v = o ? o->get(k) : nullptr; return v ? (v->kind == Json::Bool ? v->b : v->num) : 0; }

void copyStr(char* dst, unsigned len, const std::string& s) {
  std::strncpy(dst, s.c_str(), len);
  if (len) dst[len - 1] = 0;
}

}  // namespace

extern "C" {

int nvmlInit_v2() {
  std::lock_guard<std::mutex> l(mu);
  if (inited) return OK;
  const int r = load();
  inited = r == OK;
  return r;
}
int nvmlShutdown() { return OK; }  // keeps state: handles stay valid, as the addon never shuts down
const char* nvmlErrorString(int r) { return r == OK ? "Success" : r == NOT_SUPPORTED ? "Not Supported" : "NVML stand-in error"; }
int nvmlSystemGetDriverVersion(char* v, unsigned len) { copyStr(v, len, "570.133.20-standin"); return OK; }
int nvmlSystemGetNVMLVersion(char* v, unsigned len) { copyStr(v, len, "12.570.133.20-standin"); return OK; }
int nvmlSystemGetCudaDriverVersion(int* v) { *v = 12080; return OK; }

int nvmlDeviceGetCount_v2(unsigned* n) {
  if (!inited) return UNINITIALIZED;
  *n = static_cast<unsigned>(devices.size());
  return OK;
}
int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** h) {
  if (!inited) return UNINITIALIZED;
  if (i >= devices.size()) return INVALID_ARGUMENT;
  *h = &devices[i];
  return OK;
}
int nvmlDeviceGetName(void* h, char* name, unsigned len) {
  const Json* v = nullptr;
  const int r = field(h, "name", &v);
  if (r == OK) copyStr(name, len, v->str);
  return r;
}
int nvmlDeviceGetUUID(void* h, char* uuid, unsigned len) {
  if (!h) return INVALID_ARGUMENT;
  copyStr(uuid, len, dev(h)->uuid);
  return OK;
}
int nvmlDeviceGetPciInfo_v3(void* h, char* info) {  // nvmlPciInfo_t: busIdLegacy[16], 5 unsigned, busId[32]
  if (!h) return INVALID_ARGUMENT;
  std::memset(info, 0, 68);
  copyStr(info, 16, dev(h)->busId);
  unsigned bus = 0x18 + dev(h)->index;
  std::memcpy(info + 20, &bus, 4);
  copyStr(info + 36, 32, dev(h)->busId);
  return OK;
}
int nvmlDeviceGetEccMode(void* h, int* cur, int* pending) {
  const Json* v = nullptr;
  const int r = field(h, "eccMode", &v);
  if (r == OK) *cur = *pending = static_cast<int>(v->num);
  return r;
}
int nvmlDeviceGetTotalEccErrors(void* h, int type, int counter, unsigned long long* out) {
  const Json* v = nullptr;
  const int r = field(h, "ecc", &v);
  if (r != OK) return r;
  const Json* c = v->get(counter == 0 ? "volatile" : "aggregate");
  *out = static_cast<unsigned long long>(num(c, type == 0 ? "corrected" : "uncorrected"));
  return OK;
}
int nvmlDeviceGetRetiredPages(void* h, int cause, unsigned* count, unsigned long long* addrs) {
  const Json* v = nullptr;
  const int r = field(h, "retiredPages", &v);
  if (r != OK) return r;
  const unsigned n = static_cast<unsigned>(num(v, cause == 0 ? "singleBit" : "doubleBit"));
  const unsigned room = *count;
  *count = n;
  if (room < n) return INSUFFICIENT_SIZE;
  for (unsigned i = 0; i < n && addrs; i++) addrs[i] = 0x1000ull * (i + 1);
  return OK;
}
int nvmlDeviceGetRetiredPagesPendingStatus(void* h, int* pending) {
  const Json* v = nullptr;
  const int r = field(h, "retiredPages", &v);
  if (r == OK) *pending = num(v, "pending") != 0;
  return r;
}
int nvmlDeviceGetRemappedRows(void* h, unsigned* corr, unsigned* unc, unsigned* pending, unsigned* failed) {
  const Json* v = nullptr;
  const int r = field(h, "remappedRows", &v);
  if (r != OK) return r;
  *corr = num(v, "corrected"); *unc = num(v, "uncorrected"); *pending = num(v, "pending"); *failed = num(v, "failed");
  return OK;
}
int nvmlDeviceGetCurrentClocksEventReasons(void* h, unsigned long long* out) {
  const Json* v = nullptr;
  const int r = field(h, "clockEventReasons", &v);
  if (r == OK) *out = static_cast<unsigned long long>(v->num);
  return r;
}
int nvmlDeviceGetTemperatureV(void* h, unsigned* t) {  // nvmlTemperature_v1_t {version, sensorType, temperature}
  if ((t[0] >> 24) != 1 || (t[0] & 0xffffff) != 12) return 25;  // ARGUMENT_VERSION_MISMATCH
  const Json* v = nullptr;
  const int r = field(h, "temperature", &v);
  if (r == OK) reinterpret_cast<int*>(t)[2] = static_cast<int>(v->num);
  return r;
}
int nvmlDeviceGetTemperature(void* h, int, unsigned* out) {
  const Json* v = nullptr;
  const int r = field(h, "temperature", &v);
  if (r == OK) *out = static_cast<unsigned>(v->num);
  return r;
}
#define NN_SCALAR(fn, key, T) \
  int fn(void* h, T* out) { const Json* v = nullptr; const int r = field(h, key, &v); if (r == OK) *out = static_cast<T>(v->num); return r; }
NN_SCALAR(nvmlDeviceGetPowerUsage, "power", unsigned)
NN_SCALAR(nvmlDeviceGetEnforcedPowerLimit, "powerLimit", unsigned)
NN_SCALAR(nvmlDeviceGetPcieReplayCounter, "pcieReplay", unsigned)
int nvmlDeviceGetUtilizationRates(void* h, unsigned* u) {
  const Json* v = nullptr;
  const int r = field(h, "utilization", &v);
  if (r == OK) { u[0] = num(v, "gpu"); u[1] = num(v, "memory"); }
  return r;
}
int nvmlDeviceGetMemoryInfo_v2(void* h, unsigned long long* m) {  // {unsigned version; ull total, reserved, free, used}
  if ((reinterpret_cast<unsigned*>(m)[0] >> 24) != 2) return 25;
  const Json* v = nullptr;
  const int r = field(h, "memory", &v);
  if (r != OK) return r;
  m[1] = num(v, "total"); m[2] = num(v, "reserved"); m[4] = num(v, "used"); m[3] = m[1] - m[2] - m[4];
  return OK;
}
int nvmlDeviceGetNvLinkState(void* h, unsigned link, int* active) {
  const Json* v = nullptr;
  const int r = field(h, "nvlinks", &v);
  if (r != OK) return r;
  if (link >= v->num) return INVALID_ARGUMENT;
  *active = 1;
  return OK;
}
int nvmlDeviceGetNvLinkErrorCounter(void* h, unsigned link, int counter, unsigned long long* out) {
  const Json* v = nullptr;
  int r = field(h, "nvlinks", &v);
  if (r != OK) return r;
  if (link >= v->num) return INVALID_ARGUMENT;
  if ((r = field(h, "nvlinkErrors", &v)) != OK) return r;
  static const char* names[] = {"replay", "recovery", "crcFlit", "crcData", "eccData"};
  if (counter < 0 || counter > 4) return INVALID_ARGUMENT;
  // Counts on link 0 only, so totals over links are checkable.
  *out = link == 0 ? static_cast<unsigned long long>(num(v, names[counter])) : 0;
  return OK;
}
int nvmlDeviceGetGpuFabricInfoV(void* h, unsigned char* info) {  // nvmlGpuFabricInfo_v3_t, 40 bytes
  if ((reinterpret_cast<unsigned*>(info)[0] >> 24) != 3) return 25;
  const Json* v = nullptr;
  const int r = field(h, "fabric", &v);
  if (r != OK) return r;
  for (int i = 0; i < 16; i++) info[4 + i] = static_cast<unsigned char>(num(v, "cluster") + i);
  int status = num(v, "status");
  unsigned clique = num(v, "cliqueId"), mask = num(v, "healthMask");
  std::memcpy(info + 20, &status, 4);
  std::memcpy(info + 24, &clique, 4);
  info[28] = static_cast<unsigned char>(num(v, "state"));
  std::memcpy(info + 32, &mask, 4);
  info[36] = static_cast<unsigned char>(num(v, "healthSummary"));
  return OK;
}

int nvmlDeviceGetSupportedEventTypes(void* h, unsigned long long* types) {
  const Json* v = nullptr;
  const int r = field(h, "supportedEvents", &v);
  if (r == OK) *types = static_cast<unsigned long long>(v->num);
  return r;
}
int nvmlEventSetCreate(void** set) {
  if (!inited) return UNINITIALIZED;
  auto* s = new EventSet();
  if (const Json* list = config.get("xid")) {
    for (const Json& e : list->arr) {
      const double type = num(&e, "eventType");
      s->timed.push_back({s->created + std::chrono::milliseconds(static_cast<long>(num(&e, "afterMs"))),
                          static_cast<int>(num(&e, "device")), type ? static_cast<unsigned long long>(type) : 0x8,
                          static_cast<unsigned long long>(num(&e, "xid"))});
    }
  }
  if (const Json* f = config.get("xidFile")) s->xidFile = f->str;
  *set = s;
  return OK;
}
int nvmlDeviceRegisterEvents(void* h, unsigned long long types, void* set) {
  if (!h || !set) return INVALID_ARGUMENT;
  unsigned long long supported = 0;
  const int r = nvmlDeviceGetSupportedEventTypes(h, &supported);
  if (r != OK) return r;
  if (types & ~supported) return NOT_SUPPORTED;
  dev(h)->registered |= types;
  return OK;
}
int nvmlEventSetFree(void* set) { delete static_cast<EventSet*>(set); return OK; }

}  // extern "C"

// nvmlEventData_t: {void* device; ull eventType, eventData; unsigned gpuInstanceId, computeInstanceId}
struct StandinEventData { void* device; unsigned long long type, data; unsigned gi, ci; };

namespace {

// Reads lines appended to the xid file since the last call into s->timed (due now).
void pollFile(EventSet* s) {
  if (s->xidFile.empty()) return;
  std::ifstream in(s->xidFile);
  if (!in) return;
  in.seekg(s->fileOffset);
  std::string line;
  while (std::getline(in, line)) {
    if (in.eof()) break;  // a partial line: wait for its newline
    s->fileOffset = in.tellg();
    int device = -1;
    unsigned long long xid = 0;
    if (std::sscanf(line.c_str(), "%d %llu", &device, &xid) == 2) s->timed.push_back({Clock::now(), device, 0x8, xid});
  }
}

bool takeDue(EventSet* s, StandinEventData* out) {
  const auto now = Clock::now();
  for (auto it = s->timed.begin(); it != s->timed.end(); ++it) {
    if (it->at > now) continue;
    const Pending p = *it;
    s->timed.erase(it);
    if (p.device < 0 || static_cast<size_t>(p.device) >= devices.size()) return false;
    Device& d = devices[p.device];
    if (!(d.registered & p.type)) return false;  // not registered: dropped, as NVML does
    *out = {&d, p.type, p.data, 0xFFFFFFFFu, 0xFFFFFFFFu};
    return true;
  }
  return false;
}

}  // namespace

extern "C" int nvmlEventSetWait_v2(void* set, StandinEventData* data, unsigned timeoutms) {
  if (!set || !data) return INVALID_ARGUMENT;
  auto* s = static_cast<EventSet*>(set);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeoutms);
  for (;;) {
    {
      std::lock_guard<std::mutex> l(s->mu);
      pollFile(s);
      while (!s->timed.empty()) {
        if (takeDue(s, data)) return OK;
        bool anyDue = false;
        for (const auto& p : s->timed) anyDue = anyDue || p.at <= Clock::now();
        if (!anyDue) break;
      }
    }
    if (Clock::now() >= deadline) return TIMEOUT;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}
