#include "io_addon.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

#include "../core/buffers.h"
#include "../core/copy_bytes.h"
#include "../core/errors.h"
#include "../core/js_errors.h"
#include "../core/js_options.h"
#include "crc32c.h"
#include "cufile_api.h"
#include "file_io.h"
#include "gds_io.h"
#include "io_queue.h"
#include "parallel_copy.h"

namespace ncclnode {

namespace {

// Two threads: one process usually writes one shard at a time (the writer pipelines
// inside itself); the second lets a load or a CLI verify run beside a save.
constexpr size_t kIoThreads = 2;

IoQueue& queueOf(const Napi::CallbackInfo& info) { return *static_cast<IoQueue*>(info.Data()); }

std::string pathArg(const Napi::CallbackInfo& info, const char* fn) {
  if (!info[0].IsString()) throw Error(Code::InvalidArgument, std::string(fn) + ": expected a path string");
  return info[0].As<Napi::String>().Utf8Value();
}

// A segment or destination: host memory, or a NativeDeviceBuffer (device >= 0).
BufferView ioViewOf(const Napi::Value& v, const char* what) {
  BufferView b = viewOf(v, what);
  if (b.mem != MemKind::Host && b.mem != MemKind::Device) throw Error(Code::InvalidArgument, std::string(what) + ": unsupported memory");
  if (b.mem == MemKind::Host) b.device = -1;
  return b;
}

// ioWriteFile(path, segments: (ArrayBufferView | NativeDeviceBuffer)[], checksum: boolean[], options)
//   -> Promise<{bytes, direct, gds, gdsReason, seconds, crcs: number[], chunks: Uint32Array[]}>
Napi::Value WriteFile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const std::string path = pathArg(info, "ioWriteFile");
    if (!info[1].IsArray() || !info[2].IsArray()) throw Error(Code::InvalidArgument, "ioWriteFile: expected segment and checksum arrays");
    auto arr = info[1].As<Napi::Array>();
    auto sums = info[2].As<Napi::Array>();
    std::vector<Segment> segs;
    IoHold hold;
    for (uint32_t i = 0; i < arr.Length(); i++) {
      Napi::Value v = arr.Get(i);
      BufferView b = ioViewOf(v, "ioWriteFile segment");
      segs.push_back({static_cast<const uint8_t*>(b.data), b.bytes, sums.Get(i).ToBoolean().Value(), b.device});
      hold.add(v, std::move(b.keep), false);
    }
    WriteOptions o;
    if (info[3].IsObject()) {
      auto opt = info[3].As<Napi::Object>();
      o.direct = flagOr(opt, "direct", o.direct);
      o.sync = flagOr(opt, "sync", o.sync);
      o.dropCache = flagOr(opt, "dropCache", o.dropCache);
      o.gds = flagOr(opt, "gds", o.gds);
      o.blockBytes = static_cast<size_t>(dbl(opt, "blockBytes", static_cast<double>(o.blockBytes)));
      o.chunkBytes = static_cast<size_t>(dbl(opt, "chunkBytes", static_cast<double>(o.chunkBytes)));
    }
    auto result = std::make_shared<WriteResult>();
    return queueOf(info).submit(
        env, "ioWriteFile", [=] { *result = writeFile(path, segs, o); },
        [result](Napi::Env env) -> Napi::Value {
          auto out = Napi::Object::New(env);
          out.Set("bytes", Napi::Number::New(env, static_cast<double>(result->bytes)));
          out.Set("direct", Napi::Boolean::New(env, result->direct));
          out.Set("gds", Napi::Boolean::New(env, result->gds));
          out.Set("gdsReason", Napi::String::New(env, result->gdsReason));
          out.Set("seconds", Napi::Number::New(env, result->seconds));
          auto crcs = Napi::Array::New(env, result->sums.size());
          auto chunks = Napi::Array::New(env, result->sums.size());
          for (size_t i = 0; i < result->sums.size(); i++) {
            crcs.Set(i, Napi::Number::New(env, result->sums[i].crc));
            const auto& c = result->sums[i].chunks;
            auto ta = Napi::Uint32Array::New(env, c.size());
            std::copy(c.begin(), c.end(), ta.Data());
            chunks.Set(i, ta);
          }
          out.Set("crcs", crcs);
          out.Set("chunks", chunks);
          return out;
        },
        hold);
  });
}

// ioReadFile(path, offsets: number[], lengths: number[], dsts: (ArrayBufferView | NativeDeviceBuffer)[], {gds?})
//   -> Promise<{crcs: Uint32Array, seconds, gds, gdsReason}>; each range lands at the start of its dst.
// Device destinations: cuFileRead where usable (gds: true), else pread into a host bounce buffer + copy.
Napi::Value ReadFile(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const std::string path = pathArg(info, "ioReadFile");
    if (!info[1].IsArray() || !info[2].IsArray() || !info[3].IsArray()) throw Error(Code::InvalidArgument, "ioReadFile: expected offset, length and destination arrays");
    auto offs = info[1].As<Napi::Array>();
    auto lens = info[2].As<Napi::Array>();
    auto dsts = info[3].As<Napi::Array>();
    const bool useGds = info[4].IsObject() ? flagOr(info[4].As<Napi::Object>(), "gds", true) : true;
    std::vector<ReadItem> items;
    IoHold hold;
    for (uint32_t i = 0; i < offs.Length(); i++) {
      Napi::Value d = dsts.Get(i);
      BufferView b = ioViewOf(d, "ioReadFile destination");
      const double len = lens.Get(i).As<Napi::Number>().DoubleValue();
      if (len > static_cast<double>(b.bytes)) throw Error(Code::SizeMismatch, "ioReadFile: destination " + std::to_string(i) + " is smaller than its range");
      items.push_back({static_cast<uint64_t>(offs.Get(i).As<Napi::Number>().DoubleValue()), static_cast<size_t>(len), static_cast<uint8_t*>(b.data), b.device});
      hold.add(d, std::move(b.keep), true);
    }
    struct Out {
      std::vector<uint32_t> crcs;
      double seconds = 0;
      bool gds = false;
      std::string gdsReason;
    };
    auto out = std::make_shared<Out>();
    return queueOf(info).submit(
        env, "ioReadFile",
        [=] {
          const auto t0 = std::chrono::steady_clock::now();
          out->crcs.assign(items.size(), 0);
          std::vector<size_t> host, dev;
          for (size_t i = 0; i < items.size(); i++) (items[i].device >= 0 && items[i].len > 0 ? dev : host).push_back(i);
          if (!dev.empty()) {
            out->gdsReason = "disabled (gds: false)";
            out->gds = useGds && gdsReadFile(path, items, dev, &out->crcs, &out->gdsReason);
            if (out->gds) out->gdsReason.clear();
            else host.insert(host.end(), dev.begin(), dev.end());
          }
          std::sort(host.begin(), host.end());
          readFile(path, items, host, &out->crcs);
          out->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        },
        [out](Napi::Env env) -> Napi::Value {
          auto res = Napi::Object::New(env);
          auto ta = Napi::Uint32Array::New(env, out->crcs.size());
          std::copy(out->crcs.begin(), out->crcs.end(), ta.Data());
          res.Set("crcs", ta);
          res.Set("seconds", Napi::Number::New(env, out->seconds));
          res.Set("gds", Napi::Boolean::New(env, out->gds));
          res.Set("gdsReason", Napi::String::New(env, out->gdsReason));
          return res;
        },
        hold);
  });
}

// ioGdsStatus(dir?) -> {available, library, reason}: whether cuFile loads (and, given
// a directory, takes an O_DIRECT file there). Synchronous: a probe file, no data.
Napi::Value GdsStatus(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    std::string why;
    const CufileApi* api = tryCufile(&why);
    bool ok = api != nullptr;
    if (ok && info[0].IsString()) ok = gdsProbe(info[0].As<Napi::String>().Utf8Value(), &why);
    auto out = Napi::Object::New(env);
    out.Set("available", Napi::Boolean::New(env, ok));
    out.Set("library", api ? Napi::Value(Napi::String::New(env, api->path)) : env.Null());
    out.Set("reason", Napi::String::New(env, ok ? "" : why));
    return out;
  });
}

// ioFsyncDir(path) -> Promise<void>
Napi::Value FsyncDir(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    const std::string path = pathArg(info, "ioFsyncDir");
    return queueOf(info).submit(env, "ioFsyncDir", [=] { fsyncDir(path); }, [](Napi::Env env) { return env.Undefined(); }, {});
  });
}

// ioCopy(dsts: ArrayBufferView[], srcs: ArrayBufferView[]) -> Promise<{seconds}>: host
// copies on I/O threads, each spread over copyThreads() threads; the JS thread runs on.
Napi::Value Copy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    if (!info[0].IsArray() || !info[1].IsArray()) throw Error(Code::InvalidArgument, "ioCopy: expected arrays of destinations and sources");
    auto dsts = info[0].As<Napi::Array>();
    auto srcs = info[1].As<Napi::Array>();
    if (dsts.Length() != srcs.Length()) {
      throw Error(Code::SizeMismatch, "ioCopy: " + std::to_string(dsts.Length()) + " destinations for " +
                                          std::to_string(srcs.Length()) + " sources");
    }
    std::vector<CopyItem> items;
    IoHold hold;
    for (uint32_t i = 0; i < dsts.Length(); i++) {
      BufferView d = hostViewOf(dsts.Get(i), "ioCopy destination");
      BufferView s = hostViewOf(srcs.Get(i), "ioCopy source");
      if (d.bytes < s.bytes) {
        throw Error(Code::SizeMismatch, "ioCopy: destination " + std::to_string(i) + " holds " + std::to_string(d.bytes) +
                                            " bytes, its source " + std::to_string(s.bytes));
      }
      items.push_back({static_cast<uint8_t*>(d.data), static_cast<const uint8_t*>(s.data), s.bytes});
      hold.add(dsts.Get(i), std::move(d.keep), true);
      hold.add(srcs.Get(i), std::move(s.keep), false);
    }
    auto seconds = std::make_shared<double>(0);
    return queueOf(info).submit(
        env, "ioCopy",
        [items, seconds] {
          const auto t0 = std::chrono::steady_clock::now();
          parallelCopy(items, copyThreads());
          *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        },
        [seconds](Napi::Env env) -> Napi::Value {
          auto res = Napi::Object::New(env);
          res.Set("seconds", Napi::Number::New(env, *seconds));
          return res;
        },
        hold);
  });
}

// crc32c(view, seed = 0) -> number; synchronous, for headers and tests.
Napi::Value Crc32c(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guard(env, [&]() -> Napi::Value {
    BufferView b = hostViewOf(info[0], "crc32c");
    const uint32_t seed = info[1].IsNumber() ? info[1].As<Napi::Number>().Uint32Value() : 0;
    return Napi::Number::New(env, crc32c(seed, b.data, b.bytes));
  });
}

// hostCopyStats() -> {backwardBytes, aliasingRatio, copiesBackward}: bytes this process's
// host copies (collectives' copies, ioCopy, staged writes) took from the end, their
// destination 1-31 bytes past their source's place in a page (copyBytes,
// native/core/copy_bytes.cpp); the stall measured there (aliasingRatio()); and whether
// copies in that band go backward.
Napi::Value HostCopyStats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("backwardBytes", static_cast<double>(backwardCopiedBytes()));
  o.Set("aliasingRatio", aliasingRatio());
  o.Set("copiesBackward", copiesBackwardInBand());
  return o;
}

void DeleteQueue(void* arg) { delete static_cast<IoQueue*>(arg); }

}  // namespace

void registerIo(Napi::Env env, Napi::Object exports) {
  auto* q = new IoQueue(env, kIoThreads);
  env.AddCleanupHook(DeleteQueue, static_cast<void*>(q));
  exports.Set("ioWriteFile", Napi::Function::New(env, WriteFile, "ioWriteFile", q));
  exports.Set("ioReadFile", Napi::Function::New(env, ReadFile, "ioReadFile", q));
  exports.Set("ioCopy", Napi::Function::New(env, Copy, "ioCopy", q));
  exports.Set("ioFsyncDir", Napi::Function::New(env, FsyncDir, "ioFsyncDir", q));
  exports.Set("ioGdsStatus", Napi::Function::New(env, GdsStatus, "ioGdsStatus"));
  exports.Set("crc32c", Napi::Function::New(env, Crc32c, "crc32c"));
  exports.Set("hostCopyStats", Napi::Function::New(env, HostCopyStats, "hostCopyStats"));
  exports.Set("crc32cHardware", Napi::Boolean::New(env, crc32cHardware()));
}

}  // namespace ncclnode
