// The NCCL baseline for the addon's per-call overhead: ncclAllReduce (float32 sum,
// in place) called from C++ with no addon in between, completion found by spinning
// on cuEventQuery as nccl-tests does (with a yield). Loads libcuda/libnccl exactly as the addon
// does (NCCL_NODE_LIBCUDA / NCCL_NODE_LIBNCCL, so the stand-ins in CI, the real
// libraries on a GPU host). The unique id travels through a file in <dir>.
//
//   nccl_direct <rank> <size> <dir> [iters=200] [min=8] [max=64M]
// prints one JSON object per size on rank 0: {"size":B,"us":..,"iters":n}, us the median per call.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "../native/core/errors.h"
#include "../native/cuda/cuda_api.h"
#include "../native/nccl/nccl_api.h"

using namespace ncclnode;

namespace {

constexpr int kFloat32 = 7, kSum = 0;  // ncclFloat32, ncclSum

size_t parseSize(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (end && *end ? *end : ' ') {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
  }
  return static_cast<size_t>(v);
}

ncclUniqueIdBytes shareId(const NcclApi& nc, int rank, const std::string& dir) {
  ncclUniqueIdBytes id{};
  const std::string path = dir + "/nccl-id";
  if (rank == 0) {
    ncclCheck(nc, nc.GetUniqueId(&id), "ncclGetUniqueId", nullptr);
    const std::string tmp = path + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(id.internal, sizeof id.internal);
    std::rename(tmp.c_str(), path.c_str());
    return id;
  }
  for (;;) {
    std::ifstream in(path, std::ios::binary);
    if (in && in.read(id.internal, sizeof id.internal)) return id;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s <rank> <size> <dir> [iters] [minbytes] [maxbytes]\n", argv[0]);
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const int size = std::atoi(argv[2]);
  const int iters = argc > 4 ? std::atoi(argv[4]) : 200;
  const size_t minBytes = argc > 5 ? parseSize(argv[5]) : 8;
  const size_t maxBytes = argc > 6 ? parseSize(argv[6]) : 64u << 20;
  try {
    const CudaApi& cu = cuda();
    const NcclApi& nc = nccl();
    useDevice(0);
    ncclUniqueIdBytes id = shareId(nc, rank, argv[3]);
    ncclComm comm = nullptr;
    ncclConfigV23007 config = ncclConfigInit();
    ncclCheck(nc, nc.CommInitRankConfig(&comm, size, id, rank, &config), "ncclCommInitRankConfig", nullptr);
    CUstream stream = nullptr;
    CUevent event = nullptr;
    CUdeviceptr buf = 0;
    cuCheck(cu.cuStreamCreate(&stream, kStreamNonBlocking), "cuStreamCreate");
    cuCheck(cu.cuEventCreate(&event, kEventDisableTiming), "cuEventCreate");
    cuCheck(cu.cuMemAlloc(&buf, maxBytes), "cuMemAlloc");
    cuCheck(cu.cuMemsetD8Async(buf, 0, maxBytes, stream), "cuMemsetD8Async");
    auto once = [&](size_t count) {
      void* p = reinterpret_cast<void*>(buf);
      ncclCheck(nc, nc.AllReduce(p, p, count, kFloat32, kSum, comm, stream), "ncclAllReduce", comm);
      cuCheck(cu.cuEventRecord(event, stream), "cuEventRecord");
      CUresult r;
      // Spin, yielding so a rank sharing a core with its peer cannot starve it.
      while ((r = cu.cuEventQuery(event)) == kCudaNotReady) std::this_thread::yield();
      cuCheck(r, "cuEventQuery");
    };
    for (size_t bytes = minBytes; bytes <= maxBytes; bytes *= 2) {
      const size_t count = bytes / sizeof(float);
      const int n = bytes >= (1u << 20) ? std::max(5, iters / 20) : iters;
      for (int i = 0; i < 3; ++i) once(count);  // warm-up; an all-reduce also lines the ranks up
      // The median per-call time: robust to the odd call stalled by the scheduler.
      std::vector<double> times(n);
      for (int i = 0; i < n; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        once(count);
        times[i] = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
      }
      std::nth_element(times.begin(), times.begin() + n / 2, times.end());
      const double us = times[n / 2];
      if (rank == 0) std::printf("{\"size\":%zu,\"us\":%.3f,\"iters\":%d}\n", bytes, us, n);
      std::fflush(stdout);
    }
    ncclCheck(nc, nc.CommDestroy(comm), "ncclCommDestroy", comm);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl_direct rank %d: %s\n", rank, e.what());
    return 1;
  }
  return 0;
}
