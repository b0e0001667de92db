// Host copies by how far the destination lies past the source in a 4 KiB page
// (native/core/copy_bytes.cpp): glibc's memcpy against copyBytes, one process, blocks of
// calls alternating between the two. Per size and distance: the median over blocks of
// each block's µs a call, and the ratio. Outside 1-31 bytes copyBytes is memcpy, the
// control. copyBytes takes its backward path here whatever the CPU (NCCL_NODE_COPY_BACKWARD=1
// unless set otherwise), and the run prints the stall this process measured
// (aliasingRatio(): where it is under 2 the addon copies forward). Table and JSON.
//
//   build/copy_bytes [--sizes 4096,16384,65536,262144,1048576,8388608] [--apart 0,4,8,16,24,31,32,64,2048,4080]
//                    [--blocks 9] [--json out.json]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "../native/core/copy_bytes.h"
#include "direct_common.h"

namespace {

using bench::argOf;
using bench::medianOf;

struct Row {
  size_t bytes, apart;
  double memcpyUs, copyBytesUs;
};

}  // namespace

int main(int argc, char** argv) {
  const auto sizes = bench::sizesOf(argOf(argc, argv, "--sizes", "4096,16384,65536,262144,1048576,8388608"));
  const auto aparts = bench::sizesOf(argOf(argc, argv, "--apart", "0,4,8,16,24,31,32,64,2048,4080"));
  const int blocks = std::atoi(argOf(argc, argv, "--blocks", "9"));
  const char* json = argOf(argc, argv, "--json", nullptr);
  if (sizes.empty() || aparts.empty() || blocks < 1) {
    std::fprintf(stderr, "copy_bytes: --sizes and --apart must be non-empty and --blocks positive\n");
    return 2;
  }
  ::setenv("NCCL_NODE_COPY_BACKWARD", "1", 0);  // before the first copy, which reads it
  size_t largest = 0;
  for (size_t s : sizes) largest = std::max(largest, s);
  // Both buffers page-aligned plus 16 bytes (as malloc's large blocks), touched before timing.
  std::vector<uint8_t> srcStore(largest + 8192, 1), dstStore(largest + 8192, 2);
  auto pageIn = [](std::vector<uint8_t>& v, size_t at) {
    const size_t base = reinterpret_cast<uintptr_t>(v.data()) % 4096;
    return v.data() + (at + 4096 - base) % 4096;
  };
  uint8_t* src = pageIn(srcStore, 16);
  std::vector<Row> rows;
  std::printf("# copy_bytes: µs a call, median of %d blocks each way (alternating); destination `apart` bytes past the source in its page\n",
              blocks);
  std::printf("# this process's measured stall (aliasingRatio): %.2fx; backward path %s\n", ncclnode::aliasingRatio(),
              ncclnode::copiesBackwardInBand() ? "on" : "off (NCCL_NODE_COPY_BACKWARD=0)");
  std::printf("| bytes | apart | memcpy | copyBytes | ratio |\n|---|---|---|---|---|\n");
  for (size_t bytes : sizes) {
    // About 50 MB copied per block: enough calls to time, few enough to keep the run short.
    const int calls = static_cast<int>(std::max<size_t>(4, (50u << 20) / bytes));
    for (size_t apart : aparts) {
      uint8_t* dst = pageIn(dstStore, 16 + apart);
      std::vector<double> plain, ours;
      for (int b = 0; b < 2 * blocks; ++b) {
        const bool mine = (b % 2 == 1) != (b / 2 % 2 == 1);  // ABBA, so neither side always goes first
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) {
          if (mine) {
            ncclnode::copyBytes(dst, src, bytes);
          } else {
            std::memcpy(dst, src, bytes);
          }
          asm volatile("" ::: "memory");
        }
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls;
        (mine ? ours : plain).push_back(us);
      }
      if (std::memcmp(dst, src, bytes) != 0) {
        std::fprintf(stderr, "copy_bytes: %zu bytes %zu apart copied wrong\n", bytes, apart);
        return 1;
      }
      Row r{bytes, apart, medianOf(plain), medianOf(ours)};
      rows.push_back(r);
      std::printf("| %zu | %zu | %.2f | %.2f | %.2f |\n", r.bytes, r.apart, r.memcpyUs, r.copyBytesUs, r.copyBytesUs / r.memcpyUs);
    }
  }
  if (json) {
    FILE* f = std::fopen(json, "w");
    if (!f) {
      std::perror(json);
      return 1;
    }
    std::fprintf(f, "{\"bench\":\"copy_bytes\",\"blocks\":%d,\"aliasingRatio\":%.3f,\"copiesBackward\":%s,\"rows\":[", blocks,
                 ncclnode::aliasingRatio(), ncclnode::copiesBackwardInBand() ? "true" : "false");
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::fprintf(f, "%s{\"bytes\":%zu,\"apart\":%zu,\"memcpyUs\":%.3f,\"copyBytesUs\":%.3f,\"ratio\":%.3f}", i ? "," : "",
                   r.bytes, r.apart, r.memcpyUs, r.copyBytesUs, r.copyBytesUs / r.memcpyUs);
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
