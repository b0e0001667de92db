// The stand-in libnccl's ncclCommShrink argument checks, called through its C ABI as a
// C program would (dlopen). Builds a 2-rank communicator in two threads, then prints one
// line per refused call: "<case> <result> <ncclGetLastError()>". Usage: shrink_check <libnccl.so.2>
#include <dlfcn.h>

#include <cstdio>
#include <thread>

using Comm = void*;
struct UniqueId { char internal[128]; };

int main(int argc, char** argv) {
  void* lib = dlopen(argc > 1 ? argv[1] : "libnccl.so.2", RTLD_NOW);
  if (!lib) { std::printf("dlopen: %s\n", dlerror()); return 2; }
  auto getId = reinterpret_cast<int (*)(UniqueId*)>(dlsym(lib, "ncclGetUniqueId"));
  auto initRank = reinterpret_cast<int (*)(Comm*, int, UniqueId, int)>(dlsym(lib, "ncclCommInitRank"));
  auto shrink = reinterpret_cast<int (*)(Comm, int*, int, Comm*, void*, int)>(dlsym(lib, "ncclCommShrink"));
  auto lastError = reinterpret_cast<const char* (*)(Comm)>(dlsym(lib, "ncclGetLastError"));
  auto destroy = reinterpret_cast<int (*)(Comm)>(dlsym(lib, "ncclCommDestroy"));
  if (!getId || !initRank || !shrink || !lastError || !destroy) { std::printf("missing symbol\n"); return 2; }
  UniqueId id;
  if (getId(&id) != 0) { std::printf("ncclGetUniqueId failed\n"); return 2; }
  Comm comms[2] = {nullptr, nullptr};
  int rc[2] = {-1, -1};
  std::thread peer([&] { rc[1] = initRank(&comms[1], 2, id, 1); });
  rc[0] = initRank(&comms[0], 2, id, 0);
  peer.join();
  if (rc[0] != 0 || rc[1] != 0) { std::printf("init failed: %d %d\n", rc[0], rc[1]); return 2; }
  Comm out = nullptr;
  auto report = [&](const char* what, int r) { std::printf("%s %d %s\n", what, r, lastError(comms[0])); };
  int outside[] = {5}, twice[] = {1, 1}, self[] = {0}, other[] = {1};
  report("outside", shrink(comms[0], outside, 1, &out, nullptr, 0));
  report("twice", shrink(comms[0], twice, 2, &out, nullptr, 0));
  report("self", shrink(comms[0], self, 1, &out, nullptr, 0));
  report("count", shrink(comms[0], nullptr, 1, &out, nullptr, 0));
  report("flags", shrink(comms[0], other, 1, &out, nullptr, 2));
  report("newcomm", shrink(comms[0], other, 1, nullptr, nullptr, 0));
  std::printf("out %s\n", out == nullptr ? "untouched" : "written");
  destroy(comms[0]);
  destroy(comms[1]);
  return 0;
}
