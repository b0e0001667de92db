#include "gloo_addon.h"

#include "../core/comm_wrap.h"
#include "../core/js_errors.h"
#include "../core/js_options.h"
#include "gloo_backend.h"

namespace ncclnode {

namespace {

// createGloo({rank, size, storeHost, storePort, token, prefix, hostname, iface,
//             timeoutMs, checkAgreement, tuning}) -> Promise<NativeComm>
// Options arrive validated by src/comm/call-options.ts; only types are re-checked here.
Napi::Value CreateGloo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!info[0].IsObject()) throw Error(Code::InvalidArgument, "createGloo: expected an options object");
    auto o = info[0].As<Napi::Object>();
    GlooConfig cfg;
    cfg.rank = static_cast<int>(num(o, "rank", -1));
    cfg.size = static_cast<int>(num(o, "size", 0));
    if (cfg.size < 1 || cfg.rank < 0 || cfg.rank >= cfg.size) {
      throw Error(Code::InvalidArgument, "createGloo: expected 0 <= rank < size, received rank " +
                                             std::to_string(cfg.rank) + " size " + std::to_string(cfg.size));
    }
    cfg.prefix = str(o, "prefix", "nccl-node/gloo/");
    cfg.hostname = str(o, "hostname");
    cfg.iface = str(o, "iface");
    cfg.storeHost = str(o, "storeHost", "127.0.0.1");
    cfg.storePort = static_cast<int>(num(o, "storePort", 0));
    cfg.token = str(o, "token");
    cfg.tuning = str(o, "tuning");
    Napi::Value check = o.Get("checkAgreement");
    cfg.checkAgreement = !check.IsBoolean() || check.As<Napi::Boolean>().Value();
    const int64_t timeoutMs = num(o, "timeoutMs", 600000);
    Napi::Object comm = CommWrap::Wrap(env, std::make_unique<GlooBackend>(cfg, nullptr));
    return CommWrap::Unwrap(comm)->Connect(env, timeoutMs);
  });
}

// glooShmStats() -> {segments, allReduces, twoLevel, allGathers,
// reduceScatters, allToAlls, bytes, fallbacks, onCaller, naps, napsWoken, wakes, lastSegment}: this
// process's use of the shared-memory path, counted since it loaded the addon.
Napi::Value GlooShmStats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto& s = shm::stats();
  Napi::Object o = Napi::Object::New(env);
  o.Set("segments", static_cast<double>(s.segments.load()));
  o.Set("allReduces", static_cast<double>(s.allReduces.load()));
  o.Set("twoLevel", static_cast<double>(s.twoLevel.load()));
  o.Set("allGathers", static_cast<double>(s.allGathers.load()));
  o.Set("reduceScatters", static_cast<double>(s.reduceScatters.load()));
  o.Set("allToAlls", static_cast<double>(s.allToAlls.load()));
  o.Set("bytes", static_cast<double>(s.bytes.load()));
  o.Set("fallbacks", static_cast<double>(s.fallbacks.load()));
  o.Set("onCaller", static_cast<double>(s.onCaller.load()));
  const auto& w = shm::waitStats();
  o.Set("naps", static_cast<double>(w.naps.load()));
  o.Set("napsWoken", static_cast<double>(w.napsWoken.load()));
  o.Set("wakes", static_cast<double>(w.wakes.load()));
  std::lock_guard<std::mutex> lock(s.mu);
  o.Set("lastSegment", s.lastSegment);
  return o;
}

// glooAlgoStats() -> {meshAllReduces, meshTwoRoundAllReduces, meshAllGathers, meshReduceScatters,
// legacyAllReduces, legacyAllGathers, legacyReduceScatters, tcpRingCalls, glooAllGathers,
// meshAllToAlls, shmAllToAlls, tcpAllToAlls, meshRooted, shmRooted, tcpRooted, tcpBroadcastTrees, tcpOnCaller,
// tcpSecondRoundsToWorker, meshLandedBodies, tcpMarkedReceives, tcpOneWayPeers, tcpSizedReceiveBuffers, tcpBouncedBytes, tcpEmptyReads}: calls of this process that took
// the mesh round, one of Gloo's legacy classes, the backend's own ring or gloo::allgather
// (gloo_tuning.h), and all-to-alls (gloo_alltoall.cpp) and broadcasts, reduces, gathers
// and scatters (gloo_rooted.cpp) in the TCP round, through the shared-memory segment or on
// the own connections; the peers' bodies the TCP round read straight into an output;
// receives put to sleep under a receive mark (net::markedReceives()); and peers connected
// one connection each way, summed over the meshes connected (net::oneWayPairs()); and
// connections within the host given a fixed receive buffer (net::sizedReceiveBuffers());
// and bytes received through the bounce buffer (net::bouncedBytes()); and reads that found
// nothing (net::emptyReads()), reads that moved bytes (net::dataReads()) and bytes a read
// took beyond its message and handed back (net::unreadBytes()).
Napi::Value GlooAlgoStatsJs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto& s = glooAlgoStats();
  Napi::Object o = Napi::Object::New(env);
  o.Set("meshAllReduces", static_cast<double>(s.meshAllReduces.load()));
  o.Set("meshTwoRoundAllReduces", static_cast<double>(s.meshTwoRoundAllReduces.load()));
  o.Set("meshAllGathers", static_cast<double>(s.meshAllGathers.load()));
  o.Set("meshReduceScatters", static_cast<double>(s.meshReduceScatters.load()));
  o.Set("legacyAllReduces", static_cast<double>(s.legacyAllReduces.load()));
  o.Set("tcpRingCalls", static_cast<double>(s.tcpRingCalls.load()));
  o.Set("legacyAllGathers", static_cast<double>(s.legacyAllGathers.load()));
  o.Set("glooAllGathers", static_cast<double>(s.glooAllGathers.load()));
  o.Set("legacyReduceScatters", static_cast<double>(s.legacyReduceScatters.load()));
  o.Set("meshAllToAlls", static_cast<double>(s.meshAllToAlls.load()));
  o.Set("shmAllToAlls", static_cast<double>(s.shmAllToAlls.load()));
  o.Set("tcpAllToAlls", static_cast<double>(s.tcpAllToAlls.load()));
  o.Set("tcpOnCaller", static_cast<double>(s.tcpOnCaller.load()));
  o.Set("tcpSecondRoundsToWorker", static_cast<double>(s.tcpSecondRoundsToWorker.load()));
  o.Set("meshRooted", static_cast<double>(s.meshRooted.load()));
  o.Set("shmRooted", static_cast<double>(s.shmRooted.load()));
  o.Set("tcpRooted", static_cast<double>(s.tcpRooted.load()));
  o.Set("tcpBroadcastTrees", static_cast<double>(s.tcpBroadcastTrees.load()));
  o.Set("meshLandedBodies", static_cast<double>(s.meshLandedBodies.load()));
  o.Set("tcpMarkedReceives", static_cast<double>(net::markedReceives()));
  o.Set("tcpOneWayPeers", static_cast<double>(net::oneWayPairs()));
  o.Set("tcpSizedReceiveBuffers", static_cast<double>(net::sizedReceiveBuffers()));
  o.Set("tcpBouncedBytes", static_cast<double>(net::bouncedBytes()));
  o.Set("tcpEmptyReads", static_cast<double>(net::emptyReads()));
  o.Set("tcpDataReads", static_cast<double>(net::dataReads()));
  o.Set("tcpUnreadBytes", static_cast<double>(net::unreadBytes()));
  return o;
}

}  // namespace

void registerGloo(Napi::Env env, Napi::Object exports) {
  exports.Set("createGloo", Napi::Function::New(env, CreateGloo, "createGloo"));
  exports.Set("glooShmStats", Napi::Function::New(env, GlooShmStats, "glooShmStats"));
  exports.Set("glooAlgoStats", Napi::Function::New(env, GlooAlgoStatsJs, "glooAlgoStats"));
}

}  // namespace ncclnode
