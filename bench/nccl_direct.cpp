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
#include "direct_common.h"

using namespace ncclnode;

namespace {

constexpr int kFloat32 = 7, kSum = 0;  // ncclFloat32, ncclSum

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
  bench::DirectArgs args;
  if (!bench::parseDirectArgs(argc, argv, &args)) return 2;
  const int rank = args.rank;
  const size_t maxBytes = args.maxBytes;
  try {
    const CudaApi& cu = cuda();
    const NcclApi& nc = nccl();
    useDevice(0);
    ncclUniqueIdBytes id = shareId(nc, rank, args.dir);
    ncclComm comm = nullptr;
    ncclConfigV23007 config = ncclConfigInit();
    ncclCheck(nc, nc.CommInitRankConfig(&comm, args.size, id, rank, &config), "ncclCommInitRankConfig", nullptr);
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
    for (size_t bytes = args.minBytes; bytes <= maxBytes; bytes *= 2) {
      const size_t count = bytes / sizeof(float);
      const int n = args.itersFor(bytes);
      for (int i = 0; i < 3; ++i) once(count);  // warm-up; an all-reduce also lines the ranks up
      const double us = bench::medianUs(n, [&] { once(count); });
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
