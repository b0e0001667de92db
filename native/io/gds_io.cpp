#include "gds_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <memory>

#include "../core/errors.h"
#include "aligned_buf.h"
#include "crc32c.h"
#include "cufile_api.h"
#include "device_copy.h"
#include "sums.h"

namespace ncclnode {

namespace {

// An fd opened with O_DIRECT (GDS's P2P path needs it) and registered with cuFile.
struct GdsFile {
  const CufileApi* api = nullptr;
  int fd = -1;
  CUfileHandle h = nullptr;
  ~GdsFile() {
    if (h) api->HandleDeregister(h);
    if (fd >= 0) ::close(fd);
  }
  bool open(const CufileApi* a, const std::string& path, int flags, std::string* why) {
    api = a;
    fd = ::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, 0644);
    if (fd < 0) {
      *why = errno == EINVAL ? "the file system of " + path + " does not support O_DIRECT"
                             : "open(O_DIRECT) " + path + ": " + std::strerror(errno);
      return false;
    }
    CUfileDescr d;
    std::memset(&d, 0, sizeof d);
    d.type = kCufileHandleTypeOpaqueFd;
    d.handle.fd = fd;
    const CUfileError e = api->HandleRegister(&h, &d);
    if (e.err != kCufileSuccess) {
      h = nullptr;
      *why = "cuFileHandleRegister " + path + ": " + cufileErrorText(e.err);
      return false;
    }
    return true;
  }
};

// cuFileBufRegister is optional (unregistered memory goes through cuFile's own
// bounce buffers); registered memory takes the faster path, so try it.
struct BufRegistration {
  const CufileApi* api;
  const void* base = nullptr;
  BufRegistration(const CufileApi* a, const void* p, size_t n) : api(a) {
    if (api->BufRegister(p, n, 0).err == kCufileSuccess) base = p;
  }
  ~BufRegistration() {
    if (base) api->BufDeregister(base);
  }
};

bool writeHost(int fd, const uint8_t* p, size_t n, uint64_t off) {
  size_t done = 0;
  while (done < n) {
    ssize_t w = ::pwrite(fd, p + done, n - done, static_cast<off_t>(off + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

}  // namespace

bool gdsWriteFile(const std::string& path, const std::vector<Segment>& segs, const WriteOptions& o,
                  WriteResult* r, std::string* why) {
  const CufileApi* api = tryCufile(why);
  if (!api) return false;
  GdsFile f;
  if (!f.open(api, path, O_WRONLY | O_CREAT | O_TRUNC, why)) return false;
  const size_t block = std::max(kIoAlign, (o.blockBytes + kIoAlign - 1) / kIoAlign * kIoAlign);
  const size_t chunk = std::max<size_t>(1, o.chunkBytes);

  std::vector<uint64_t> offs;
  std::vector<SegmentSums*> sums;
  r->sums.clear();
  for (const Segment& s : segs) r->sums.resize(r->sums.size() + (s.checksum ? 1 : 0));
  uint64_t total = 0;
  for (size_t i = 0, k = 0; i < segs.size(); i++) {
    offs.push_back(total);
    total += segs[i].len;
    sums.push_back(segs[i].checksum ? &r->sums[k++] : nullptr);
  }

  // Host segments first, buffered, and flushed: no dirty page of the header may
  // sit over bytes the direct device writes are about to put on disk.
  {
    const int hfd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (hfd < 0) return *why = "open " + path + ": " + std::strerror(errno), false;
    bool ok = true;
    for (size_t i = 0; i < segs.size() && ok; i++) {
      if (segs[i].device >= 0) continue;
      ok = writeHost(hfd, segs[i].data, segs[i].len, offs[i]);
      if (ok && sums[i]) {
        SumBuilder b(sums[i], chunk);
        b.add(segs[i].data, segs[i].len);
        b.finish();
      }
    }
    const int err = ok ? (::fdatasync(hfd) == 0 ? 0 : errno) : errno;
    ::close(hfd);
    if (!ok || err) return *why = "write " + path + ": " + std::strerror(err ? err : EIO), false;
  }

  AlignedBuf bounce[2] = {AlignedBuf(block), AlignedBuf(block)};
  std::unique_ptr<DeviceCopier> copier;
  for (size_t i = 0; i < segs.size(); i++) {
    const Segment& s = segs[i];
    if (s.device < 0 || s.len == 0) continue;
    if (!copier || copier->device() != s.device) {
      copier = std::make_unique<DeviceCopier>(s.device);
      for (auto& bb : bounce) copier->pin(bb.p, block);
    }
    BufRegistration reg(api, s.data, s.len);
    std::unique_ptr<SumBuilder> b = sums[i] ? std::make_unique<SumBuilder>(sums[i], chunk) : nullptr;
    std::future<void> crcJob;  // the previous block's CRC, overlapping this block's write
    for (size_t pos = 0, k = 0; pos < s.len; pos += block, k++) {
      const size_t n = std::min(block, s.len - pos);
      uint8_t* host = bounce[k % 2].p;
      if (b) copier->toHostAsync(host, reinterpret_cast<CUdeviceptr>(s.data) + pos, n);
      for (size_t done = 0; done < n;) {
        const ssize_t w = api->Write(f.h, s.data, n - done, static_cast<off_t>(offs[i] + pos + done), static_cast<off_t>(pos + done));
        if (w <= 0) {
          const int e = errno;
          if (crcJob.valid()) crcJob.wait();
          if (b) copier->sync();
          *why = "cuFileWrite " + path + ": " + (w == 0 ? std::string("wrote nothing") : cufileIoErrorText(w, e));
          return false;
        }
        done += static_cast<size_t>(w);
      }
      if (!b) continue;
      copier->sync();
      if (crcJob.valid()) crcJob.get();
      crcJob = std::async(std::launch::async, [&b, host, n] { b->add(host, n); });
    }
    if (crcJob.valid()) crcJob.get();
    if (b) b->finish();
  }
  if (o.sync && ::fsync(f.fd) != 0) throw Error(Code::Io, "fsync " + path + ": " + std::strerror(errno));
  if (o.dropCache) ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED);
  r->bytes = total;
  r->direct = true;
  r->gds = true;
  r->gdsReason.clear();
  return true;
}

bool gdsReadFile(const std::string& path, const std::vector<ReadItem>& items, const std::vector<size_t>& which,
                 std::vector<uint32_t>* crcs, std::string* why) {
  const CufileApi* api = tryCufile(why);
  if (!api) return false;
  GdsFile f;
  if (!f.open(api, path, O_RDONLY, why)) return false;
  constexpr size_t kBounce = 8u << 20;
  AlignedBuf bounce(kBounce);
  std::unique_ptr<DeviceCopier> copier;
  for (size_t i : which) {
    const ReadItem& it = items[i];
    if (!copier || copier->device() != it.device) {
      copier = std::make_unique<DeviceCopier>(it.device);
      copier->pin(bounce.p, kBounce);
    }
    for (size_t done = 0; done < it.len;) {
      const ssize_t n = api->Read(f.h, it.dst, it.len - done, static_cast<off_t>(it.offset + done), static_cast<off_t>(done));
      if (n == 0) {
        throw Error(Code::Io, "read " + path + ": file ends at byte " + std::to_string(it.offset + done) +
                                  ", expected " + std::to_string(it.len - done) + " more (truncated)");
      }
      if (n < 0) return *why = "cuFileRead " + path + ": " + cufileIoErrorText(n, errno), false;
      done += static_cast<size_t>(n);
    }
    uint32_t crc = 0;
    for (size_t pos = 0; pos < it.len; pos += kBounce) {
      const size_t n = std::min(kBounce, it.len - pos);
      copier->toHost(bounce.p, reinterpret_cast<CUdeviceptr>(it.dst) + pos, n);
      crc = crc32c(crc, bounce.p, n);
    }
    (*crcs)[i] = crc;
  }
  return true;
}

bool gdsProbe(const std::string& dir, std::string* why) {
  try {
    const CufileApi* api = tryCufile(why);
    if (!api) return false;
    const std::string probe = dir + "/.nccl-node-gds-probe-" + std::to_string(::getpid());
    bool ok;
    {
      GdsFile f;
      ok = f.open(api, probe, O_WRONLY | O_CREAT | O_TRUNC, why);
    }
    ::unlink(probe.c_str());
    return ok;
  } catch (const std::exception& e) {
    *why = e.what();
    return false;
  }
}

}  // namespace ncclnode
