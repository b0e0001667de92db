// Where a receive lands (native/net/tcp_mesh.cpp, receiveSome): two processes over
// loopback, the backend's own TcpMesh, one rank sending `bytes` a call (from half a page
// into a page) to the other after a 32-byte exchange both ways (the agreement round every
// collective starts with), meeting through a Gloo file store. Per page offset of the
// receiving buffer, blocks of calls alternate between a mesh that
// receives straight into the buffer (setBounce(false)) and one that goes through its
// bounce buffer where aliasedLanding() says so (setBounce(true)); offsets outside that
// band take the same path on both, the control. Per offset: the median over blocks of the
// receiver's median µs a call, and the ratio. Table and JSON.
//
//   build/tcp_landing [--bytes 2097152] [--blocks 6] [--iters 100] [--offsets 0,8,16,...] [--send-offset 2048]
//                     [--both-ways 1] [--json out.json]
//
// --both-ways 1: both ranks send `bytes` and receive the other's at once (a 2-rank
// all-gather's exchange); rank 1 reports.
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../native/core/copy_bytes.h"
#include "../native/net/tcp_mesh.h"
#include "direct_common.h"
#include "fork_pair.h"
#include "gloo_bench.h"

namespace {

using bench::argOf;
using bench::die;
using bench::medianOf;

using ncclnode::net::Clock;
using ncclnode::net::TcpMesh;
using ncclnode::net::Xfer;

// One call: the 32-byte exchange, then rank 0's bytes into rank 1's `into` (with bothWays,
// each rank's into the other's at once).
void call(TcpMesh& mesh, int rank, const uint8_t* from, uint8_t* into, size_t bytes, bool bothWays) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  uint8_t headOut[32] = {1}, headIn[32];
  Xfer s, r;
  s.peer = r.peer = 1 - rank;
  s.data = headOut;
  s.bytes = r.bytes = sizeof headOut;
  r.data = headIn;
  mesh.transfer(&s, 1, &r, 1, deadline);
  Xfer x;
  x.peer = 1 - rank;
  x.bytes = bytes;
  if (bothWays) {
    // Each rank sends its buffer and receives the other's at once, as a 2-rank all-gather.
    Xfer in = x;
    x.data = const_cast<uint8_t*>(from);
    in.data = into;
    mesh.transfer(&x, 1, &in, 1, deadline);
    return;
  }
  if (rank == 0) {
    x.data = const_cast<uint8_t*>(from);
    mesh.transfer(&x, 1, nullptr, 0, deadline);
  } else {
    x.data = into;
    mesh.transfer(nullptr, 0, &x, 1, deadline);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const size_t bytes = std::strtoull(argOf(argc, argv, "--bytes", "2097152"), nullptr, 10);
  const int blocks = std::atoi(argOf(argc, argv, "--blocks", "6"));
  const int iters = std::atoi(argOf(argc, argv, "--iters", "100"));
  const std::string json = argOf(argc, argv, "--json", "");
  const bool bothWays = std::string(argOf(argc, argv, "--both-ways", "0")) == "1";
  const size_t sendOffset = std::strtoull(argOf(argc, argv, "--send-offset", "2048"), nullptr, 10) % 4096;
  std::vector<size_t> offsets = bench::sizesOf(argOf(argc, argv, "--offsets", "0,4,8,16,24,28,32,48,64,128,256,1024,2048,4080"));
  for (size_t& o : offsets) o %= 4096;
  if (bytes == 0 || blocks < 1 || iters < 1 || offsets.empty()) {
    std::fprintf(stderr, "tcp_landing: --bytes, --blocks, --iters and --offsets must be positive and non-empty\n");
    return 2;
  }
  char dirTemplate[] = "/tmp/tcp-landing-XXXXXX";
  if (!::mkdtemp(dirTemplate)) die("mkdtemp");
  const std::string dir = dirTemplate;
  const std::vector<double> results = bench::forkPair([&](int rank) {
    gloo::rendezvous::FileStore files(dir);
    gloo::rendezvous::PrefixStore directStore("direct", files), bouncedStore("bounced", files);
    TcpMesh direct(rank, 2, 0x1a4d), bounced(rank, 2, 0x1a4d);
    direct.setBounce(false);
    bounced.setBounce(true);
    bench::connectOwnMesh(direct, directStore, std::chrono::seconds(30));
    bench::connectOwnMesh(bounced, bouncedStore, std::chrono::seconds(30));
    std::vector<uint8_t> store(bytes + 8192, static_cast<uint8_t>(rank + 1));
    const size_t base = reinterpret_cast<uintptr_t>(store.data()) % 4096;
    // The sender's buffer (--send-offset; by default half a page in, away from where its
    // own copy into the socket aliases: the same band mirrored, just before a page's end).
    // Both ways, each rank sends from a buffer of its own, apart from the one it receives into.
    std::vector<uint8_t> sendStore(bothWays ? bytes + 8192 : 0, static_cast<uint8_t>(rank + 1));
    const uint8_t* from = bothWays ? sendStore.data() + (sendOffset + 4096 - reinterpret_cast<uintptr_t>(sendStore.data()) % 4096) % 4096
                                   : store.data() + (sendOffset + 4096 - base) % 4096;
    std::vector<double> results;  // per offset: the direct and the bounced median over blocks
    for (size_t offset : offsets) {
      uint8_t* at = store.data() + (offset + 4096 - base) % 4096;
      std::vector<double> perBlock[2];
      for (int b = 0; b < 2 * blocks; ++b) {
        const int mode = (b + static_cast<int>(offset / 16)) % 2;  // alternating which goes first
        TcpMesh& mesh = mode == 0 ? direct : bounced;
        for (int i = 0; i < 3; ++i) call(mesh, rank, from, at, bytes, bothWays);
        std::vector<double> us;
        for (int i = 0; i < iters; ++i) {
          const auto t0 = Clock::now();
          call(mesh, rank, from, at, bytes, bothWays);
          us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
        }
        perBlock[mode].push_back(medianOf(us));
      }
      if (rank == 1 && (at[0] != 1 || at[bytes - 1] != 1)) die("wrong bytes received");
      results.push_back(medianOf(perBlock[0]));
      results.push_back(medianOf(perBlock[1]));
    }
    return results;
  }, 1, offsets.size() * 2);
  std::string rm = "rm -rf " + dir;
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "tcp_landing: could not remove %s\n", dir.c_str());

  std::printf("# %zu bytes a call, %s after a 32-byte exchange, 2 processes over loopback, sent from page offset %zu; %d blocks of %d calls per mesh and offset\n",
              bytes, bothWays ? "both ways at once" : "one way", sendOffset, blocks, iters);
  // What the backend's default rests on (NCCL_NODE_TCP_BOUNCE unset: on at 2x or more).
  std::printf("# this process's measured 4K-aliasing stall (aliasingRatio): %.2fx\n", ncclnode::aliasingRatio());
  std::vector<bool> aliased;
  for (size_t offset : offsets) aliased.push_back(ncclnode::net::aliasedLanding(reinterpret_cast<const uint8_t*>(offset)));
  std::printf("| receive buffer's page offset | aliased | straight in, us | through the bounce buffer, us | ratio |\n|---|---|---|---|---|\n");
  for (size_t i = 0; i < offsets.size(); ++i) {
    std::printf("| %zu | %s | %.1f | %.1f | %.2f |\n", offsets[i], aliased[i] ? "yes" : "no", results[2 * i], results[2 * i + 1],
                results[2 * i + 1] / results[2 * i]);
  }
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (!f) die("json");
    std::fprintf(f, "{\"bench\":\"tcp_landing\",\"bothWays\":%s,\"bytes\":%zu,\"sendOffset\":%zu,\"blocks\":%d,\"iters\":%d,\"aliasingRatio\":%.3f,\"rows\":[",
                 bothWays ? "true" : "false", bytes, sendOffset, blocks, iters, ncclnode::aliasingRatio());
    for (size_t i = 0; i < offsets.size(); ++i) {
      std::fprintf(f, "%s{\"offset\":%zu,\"aliased\":%s,\"directUs\":%.1f,\"bouncedUs\":%.1f,\"ratio\":%.3f}", i ? "," : "", offsets[i],
                   aliased[i] ? "true" : "false", results[2 * i], results[2 * i + 1], results[2 * i + 1] / results[2 * i]);
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
