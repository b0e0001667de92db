#include "file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "../core/copy_bytes.h"
#include "../core/errors.h"
#include "aligned_buf.h"
#include "crc32c.h"
#include "device_copy.h"
#include "gds_io.h"
#include "sums.h"

namespace ncclnode {

namespace {

constexpr size_t kAlign = kIoAlign;  // O_DIRECT needs buffer, offset and length aligned to the logical block

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw Error(Code::Io, what + " " + path + ": " + std::strerror(err));
}

struct Fd {
  int fd = -1;
  ~Fd() { if (fd >= 0) ::close(fd); }
};

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The I/O half of the pipeline: pwrites filled blocks while the caller's thread
// copies and checksums the next one (2 cores: copy+CRC and the disk overlap).
class BlockWriter {
 public:
  BlockWriter(int fd, const std::string& path, bool direct) : fd_(fd), path_(path), direct_(direct) {
    thread_ = std::thread([this] { loop(); });
  }
  ~BlockWriter() { finish(); }
  // Queues [p, p+len) for file offset `off`; blocks while `depth` blocks are queued.
  void push(const uint8_t* p, size_t len, uint64_t off, size_t depth) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return q_.size() < depth || err_; });
    if (err_) return;
    q_.push_back({p, len, off});
    cv_.notify_all();
  }
  // Waits until at most `n` blocks are still queued or being written.
  void drainTo(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [&] { return q_.size() + busy_ <= n || err_; });
  }
  void finish() {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!thread_.joinable()) return;
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    if (err_) fail("write", path_, err_);
  }
  bool direct() const { return direct_; }

 private:
  struct Job { const uint8_t* p; size_t len; uint64_t off; };
  void loop() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
      cv_.wait(l, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;
      Job j = q_.front();
      q_.pop_front();
      busy_ = 1;
      l.unlock();
      int e = writeAll(j);
      l.lock();
      busy_ = 0;
      if (e && !err_) err_ = e;
      cv_.notify_all();
    }
  }
  int writeAll(Job j) {
    size_t done = 0;
    while (done < j.len) {
      ssize_t n = ::pwrite(fd_, j.p + done, j.len - done, static_cast<off_t>(j.off + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EINVAL && direct_) {
        // The filesystem accepted O_DIRECT at open but refuses this write: go buffered.
        int fl = ::fcntl(fd_, F_GETFL);
        if (::fcntl(fd_, F_SETFL, fl & ~O_DIRECT) == 0) { direct_ = false; continue; }
      }
      if (n <= 0) return n < 0 ? errno : EIO;
      done += static_cast<size_t>(n);
    }
    return 0;
  }
  int fd_;
  std::string path_;
  bool direct_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> q_;
  int busy_ = 0;
  int err_ = 0;
  bool stop_ = false;
};

}  // namespace

namespace {

// The posix writer: copies (device segments: cuMemcpyDtoH) into staging blocks,
// checksums them, and pwrites them with O_DIRECT where the file system allows.
WriteResult writeStaged(const std::string& path, const std::vector<Segment>& segs, const WriteOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const size_t block = std::max(kAlign, (o.blockBytes + kAlign - 1) / kAlign * kAlign);
  const size_t chunk = std::max<size_t>(1, o.chunkBytes);
  Fd f;
  bool direct = o.direct;
  if (direct) {
    f.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    if (f.fd < 0 && errno == EINVAL) direct = false;  // tmpfs and friends: no O_DIRECT
  }
  if (f.fd < 0) f.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f.fd < 0) fail("open", path, errno);

  WriteResult r;
  constexpr size_t kBufs = 3;  // one being filled, up to two queued or in flight
  std::vector<std::unique_ptr<AlignedBuf>> bufs;
  for (size_t i = 0; i < kBufs; i++) bufs.push_back(std::make_unique<AlignedBuf>(block));
  std::unique_ptr<DeviceCopier> copier;  // made on the first device segment
  BlockWriter w(f.fd, path, direct);
  size_t cur = 0, fill = 0;
  uint64_t fileOff = 0;
  for (const Segment& s : segs) {
    if (s.checksum) r.sums.emplace_back();
    SumBuilder sums(s.checksum ? &r.sums.back() : nullptr, chunk);
    if (s.device >= 0 && (!copier || copier->device() != s.device)) {
      copier = std::make_unique<DeviceCopier>(s.device);
      for (auto& b : bufs) copier->pin(b->p, block);
    }
    size_t pos = 0;
    while (pos < s.len) {
      const size_t n = std::min(block - fill, s.len - pos);
      if (s.device >= 0) copier->toHost(bufs[cur]->p + fill, reinterpret_cast<CUdeviceptr>(s.data) + pos, n);
      else copyBytes(bufs[cur]->p + fill, s.data + pos, n);
      if (s.checksum) sums.add(bufs[cur]->p + fill, n);  // CRC over the copy just made (hot in cache)
      pos += n;
      fill += n;
      if (fill == block) {
        w.drainTo(kBufs - 2);  // the next buffer must not still be in flight
        w.push(bufs[cur]->p, block, fileOff, kBufs - 1);
        fileOff += block;
        cur = (cur + 1) % kBufs;
        fill = 0;
      }
    }
    if (s.checksum) sums.finish();
  }
  const uint64_t total = fileOff + fill;
  if (fill > 0) {
    // O_DIRECT writes whole blocks: pad the tail with zeros, then cut the file back.
    const size_t padded = w.direct() ? (fill + kAlign - 1) / kAlign * kAlign : fill;
    std::memset(bufs[cur]->p + fill, 0, padded - fill);
    w.drainTo(kBufs - 2);
    w.push(bufs[cur]->p, padded, fileOff, kBufs - 1);
  }
  w.finish();
  if (::ftruncate(f.fd, static_cast<off_t>(total)) != 0) fail("ftruncate", path, errno);
  if (o.sync && ::fsync(f.fd) != 0) fail("fsync", path, errno);
  if (o.dropCache) ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_DONTNEED);
  r.bytes = total;
  r.direct = w.direct();
  r.seconds = since(t0);
  return r;
}

}  // namespace

WriteResult writeFile(const std::string& path, const std::vector<Segment>& segs, const WriteOptions& o) {
  bool anyDevice = false;
  for (const Segment& s : segs) anyDevice = anyDevice || (s.device >= 0 && s.len > 0);
  if (!anyDevice) return writeStaged(path, segs, o);
  std::string why = !o.gds ? "disabled (gds: false)" : "disabled (direct: false; GDS needs O_DIRECT)";
  if (o.gds && o.direct) {
    WriteResult r;
    const auto t0 = std::chrono::steady_clock::now();
    if (gdsWriteFile(path, segs, o, &r, &why)) {
      r.seconds = since(t0);
      return r;
    }
  }
  // cuFile is absent or refused this file: the whole file again, through host blocks.
  WriteResult r = writeStaged(path, segs, o);
  r.gdsReason = why;
  return r;
}

void readFile(const std::string& path, const std::vector<ReadItem>& items, const std::vector<size_t>& which,
              std::vector<uint32_t>* crcs) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) fail("open", path, errno);
  ::posix_fadvise(f.fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  auto readAll = [&](uint8_t* dst, size_t len, uint64_t off) {
    size_t done = 0;
    while (done < len) {
      ssize_t n = ::pread(f.fd, dst + done, len - done, static_cast<off_t>(off + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) fail("read", path, errno);
      if (n == 0) {
        throw Error(Code::Io, "read " + path + ": file ends at byte " + std::to_string(off + done) +
                                  ", expected " + std::to_string(len - done) + " more (truncated)");
      }
      done += static_cast<size_t>(n);
    }
  };
  constexpr size_t kBounce = 8u << 20;  // device items go through this many host bytes at a time
  std::unique_ptr<AlignedBuf> bounce;
  std::unique_ptr<DeviceCopier> copier;
  for (size_t i : which) {
    const ReadItem& it = items[i];
    if (it.device < 0) {
      readAll(it.dst, it.len, it.offset);
      (*crcs)[i] = crc32c(0, it.dst, it.len);
      continue;
    }
    if (!bounce) bounce = std::make_unique<AlignedBuf>(kBounce);
    if (!copier || copier->device() != it.device) {
      copier = std::make_unique<DeviceCopier>(it.device);
      copier->pin(bounce->p, kBounce);
    }
    uint32_t crc = 0;
    for (size_t pos = 0; pos < it.len; pos += kBounce) {
      const size_t n = std::min(kBounce, it.len - pos);
      readAll(bounce->p, n, it.offset + pos);
      crc = crc32c(crc, bounce->p, n);
      copier->toDevice(reinterpret_cast<CUdeviceptr>(it.dst) + pos, bounce->p, n);
    }
    (*crcs)[i] = crc;
  }
}

void fsyncDir(const std::string& path) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (f.fd < 0) fail("open", path, errno);
  if (::fsync(f.fd) != 0) fail("fsync", path, errno);
}

}  // namespace ncclnode
