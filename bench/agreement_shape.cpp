// The shape of a rooted call's agreement round over the backend's own TcpMesh: --ranks
// processes over loopback, rank 0 the root with `bytes` of body (a small broadcast).
// "mesh": one round in which every rank sends its 32-byte head to every other rank, the
// root its body with it (gloo_agreement.cpp today: n(n-1) messages, one hop). "star": the
// non-roots send their heads to the root, which answers each with its head and body (2(n-1)
// messages, two hops; the root holds every head, so it can give every rank the same
// verdict). Blocks of calls alternate between the shapes in the same processes; per body
// size, the median over blocks of the root's and of the last rank's median µs a call.
// Table and JSON.
//
//   build/agreement_shape [--ranks 4] [--bytes 8,2048,32768] [--blocks 8] [--iters 400] [--json out.json]
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>

#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

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

constexpr size_t kHead = 32;

struct Rank {
  TcpMesh& mesh;
  int rank, size;
  std::vector<uint8_t> head = std::vector<uint8_t>(kHead, 1);
  std::vector<uint8_t> heads;  // size x kHead
  std::vector<uint8_t> body;   // the root's body; on the others, where it arrives
};

void meshCall(Rank& r, size_t bytes) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  std::vector<Xfer> sends, recvs;
  for (int p = 0; p < r.size; ++p) {
    if (p == r.rank) continue;
    Xfer s;
    s.peer = p;
    s.data = r.head.data();
    s.bytes = kHead;
    if (r.rank == 0) {
      s.split = kHead;
      s.tail = r.body.data();
      s.bytes = kHead + bytes;
    }
    sends.push_back(s);
  }
  // From the root its head and body; from the others their heads.
  std::vector<uint8_t> rootMsg(r.rank == 0 ? 0 : kHead + bytes);
  for (int p = 0; p < r.size; ++p) {
    if (p == r.rank) continue;
    Xfer x;
    x.peer = p;
    if (p == 0) {
      x.data = rootMsg.data();
      x.bytes = kHead + bytes;
    } else {
      x.data = r.heads.data() + static_cast<size_t>(p) * kHead;
      x.bytes = kHead;
    }
    recvs.push_back(x);
  }
  r.mesh.transfer(sends.data(), sends.size(), recvs.data(), recvs.size(), deadline);
  if (r.rank != 0) std::memcpy(r.body.data(), rootMsg.data() + kHead, bytes);
}

void starCall(Rank& r, size_t bytes) {
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  if (r.rank == 0) {
    std::vector<Xfer> recvs, sends;
    for (int p = 1; p < r.size; ++p) {
      Xfer x;
      x.peer = p;
      x.data = r.heads.data() + static_cast<size_t>(p) * kHead;
      x.bytes = kHead;
      recvs.push_back(x);
    }
    r.mesh.transfer(nullptr, 0, recvs.data(), recvs.size(), deadline);
    for (int p = 1; p < r.size; ++p) {
      Xfer s;
      s.peer = p;
      s.data = r.head.data();
      s.split = kHead;
      s.tail = r.body.data();
      s.bytes = kHead + bytes;
      sends.push_back(s);
    }
    r.mesh.transfer(sends.data(), sends.size(), nullptr, 0, deadline);
    return;
  }
  std::vector<uint8_t> rootMsg(kHead + bytes);
  Xfer s, x;
  s.peer = x.peer = 0;
  s.data = r.head.data();
  s.bytes = kHead;
  x.data = rootMsg.data();
  x.bytes = kHead + bytes;
  r.mesh.transfer(&s, 1, &x, 1, deadline);
  std::memcpy(r.body.data(), rootMsg.data() + kHead, bytes);
}

}  // namespace

int main(int argc, char** argv) {
  const int ranks = std::atoi(argOf(argc, argv, "--ranks", "4"));
  const std::vector<size_t> sizes = bench::sizesOf(argOf(argc, argv, "--bytes", "8,2048,32768"));
  const int blocks = std::atoi(argOf(argc, argv, "--blocks", "8"));
  const int iters = std::atoi(argOf(argc, argv, "--iters", "400"));
  const std::string json = argOf(argc, argv, "--json", "");
  if (ranks < 2 || sizes.empty() || blocks < 1 || iters < 1) {
    std::fprintf(stderr, "agreement_shape: --ranks >= 2, --bytes non-empty, --blocks and --iters positive\n");
    return 2;
  }
  char dirTemplate[] = "/tmp/agreement-shape-XXXXXX";
  if (!::mkdtemp(dirTemplate)) die("mkdtemp");
  const std::string dir = dirTemplate;
  // One gang of processes per reporting rank (the root, then the last rank): per size,
  // the reporter's median over blocks for the mesh and for the star.
  auto run = [&](int reporter) {
    return bench::forkRanks(ranks, [&](int rank) {
      gloo::rendezvous::FileStore files(dir + "/" + std::to_string(reporter));
      gloo::rendezvous::PrefixStore store("shape", files);
      TcpMesh mesh(rank, ranks, 0x5a4e);
      bench::connectOwnMesh(mesh, store, std::chrono::seconds(30));
      Rank r{mesh, rank, ranks};
      r.heads.assign(static_cast<size_t>(ranks) * kHead, 0);
      std::vector<double> results;
      for (size_t bytes : sizes) {
        r.body.assign(bytes, static_cast<uint8_t>(rank == 0 ? 7 : 0));
        std::vector<double> perBlock[2];
        for (int b = 0; b < 2 * blocks; ++b) {
          const int shape = (b + static_cast<int>(bytes % 2)) % 2;
          auto call = [&] { shape == 0 ? meshCall(r, bytes) : starCall(r, bytes); };
          for (int i = 0; i < 20; ++i) call();
          std::vector<double> us;
          const auto t0 = Clock::now();
          auto last = t0;
          for (int i = 0; i < iters; ++i) {
            call();
            const auto now = Clock::now();
            us.push_back(std::chrono::duration<double, std::micro>(now - last).count());
            last = now;
          }
          perBlock[shape].push_back(medianOf(us));
        }
        if (r.body[0] != 7 || r.body[bytes - 1] != 7) die("wrong bytes received");
        results.push_back(medianOf(perBlock[0]));
        results.push_back(medianOf(perBlock[1]));
      }
      return results;
    }, reporter, sizes.size() * 2);
  };
  ::mkdir((dir + "/0").c_str(), 0700);
  ::mkdir((dir + "/" + std::to_string(ranks - 1)).c_str(), 0700);
  const std::vector<double> root = run(0);
  const std::vector<double> leaf = run(ranks - 1);
  std::string rm = "rm -rf " + dir;
  if (std::system(rm.c_str()) != 0) std::fprintf(stderr, "agreement_shape: could not remove %s\n", dir.c_str());

  std::printf("# a rooted call's round, %d processes over loopback, root 0; %d blocks of %d calls per shape, alternating; µs a call, back to back\n",
              ranks, blocks, iters);
  std::printf("| body bytes | root: mesh | root: star | ratio | rank %d: mesh | rank %d: star | ratio |\n|---|---|---|---|---|---|---|\n",
              ranks - 1, ranks - 1);
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::printf("| %zu | %.1f | %.1f | %.2f | %.1f | %.1f | %.2f |\n", sizes[i], root[2 * i], root[2 * i + 1],
                root[2 * i + 1] / root[2 * i], leaf[2 * i], leaf[2 * i + 1], leaf[2 * i + 1] / leaf[2 * i]);
  }
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (!f) die("json");
    std::fprintf(f, "{\"bench\":\"agreement_shape\",\"ranks\":%d,\"blocks\":%d,\"iters\":%d,\"rows\":[", ranks, blocks, iters);
    for (size_t i = 0; i < sizes.size(); ++i) {
      std::fprintf(f, "%s{\"bytes\":%zu,\"rootMeshUs\":%.2f,\"rootStarUs\":%.2f,\"lastMeshUs\":%.2f,\"lastStarUs\":%.2f}", i ? "," : "",
                   sizes[i], root[2 * i], root[2 * i + 1], leaf[2 * i], leaf[2 * i + 1]);
    }
    std::fprintf(f, "]}\n");
    std::fclose(f);
  }
  return 0;
}
