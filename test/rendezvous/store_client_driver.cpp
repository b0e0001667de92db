// Test driver for native/core/store_client.cpp, run by native-client.test.ts
// against the TypeScript server. Prints one line per step:
//   <step> ok <result>          or          <step> err <CODE> <ms> <message>
// where <ms> is how long the failing call took, so the test can check deadlines.
//
// usage: store_client_driver <host> <port> <token> <scenario>
//   scenario: basic | wrong-token | connect-late | unreachable | mute
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../../native/core/errors.h"
#include "../../native/core/store_client.h"

using ncclnode::Error;
using ncclnode::StoreClient;
using std::chrono::milliseconds;

namespace {

std::vector<char> bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }
std::string text(const std::vector<char>& v) { return std::string(v.begin(), v.end()); }

void step(const char* name, const std::function<std::string()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  try {
    const std::string result = fn();
    std::printf("%s ok %s\n", name, result.c_str());
  } catch (const Error& e) {
    const auto ms = std::chrono::duration_cast<milliseconds>(std::chrono::steady_clock::now() - start).count();
    std::printf("%s err %s %lld %s\n", name, ncclnode::codeName(e.code()), static_cast<long long>(ms), e.what());
  }
  std::fflush(stdout);
}

void basic(const std::string& host, int port, const std::string& token) {
  StoreClient c(host, port, token, "driver-basic", milliseconds(5000));
  step("set", [&] { c.set("cpp/hello", bytes("from c++")); return std::string("done"); });
  step("get-ts", [&] { return text(c.get("ts/hello", milliseconds(2000))); });
  step("add", [&] { c.add("cpp/counter", 5); return std::to_string(c.add("cpp/counter", -2)); });
  step("check", [&] {
    return std::string(c.check("cpp/hello") ? "1" : "0") + (c.check("cpp/absent") ? "1" : "0");
  });
  step("wait", [&] { c.wait({"ts/hello", "cpp/hello"}, milliseconds(2000)); return std::string("done"); });
  step("wait-timeout", [&] { c.wait({"cpp/hello", "never/a"}, milliseconds(200)); return std::string("returned"); });
  step("get-timeout", [&] { return text(c.get("never/b", milliseconds(200))); });
  step("remove", [&] {
    c.remove("cpp/hello");
    return std::string(c.check("cpp/hello") ? "still there" : "gone");
  });
  // Threads share one client: the mutex must keep request/reply pairs together.
  step("threads", [&] {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 50; ++i) c.add("cpp/threads", 1);
      });
    }
    for (auto& th : threads) th.join();
    return std::to_string(c.add("cpp/threads", 0));
  });
  // The test sets "late" when it sees "driver/ready", so this GET must block first.
  step("get-late", [&] {
    c.set("driver/ready", bytes("1"));
    return text(c.get("late", milliseconds(5000)));
  });
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s <host> <port> <token> <scenario>\n", argv[0]);
    return 2;
  }
  const std::string host = argv[1];
  const int port = std::atoi(argv[2]);
  const std::string token = argv[3];
  const std::string scenario = argv[4];
  if (scenario == "basic") {
    step("connect", [&] { basic(host, port, token); return std::string("done"); });
  } else if (scenario == "wrong-token") {
    step("connect", [&] { StoreClient c(host, port, token, "driver-wrong", milliseconds(2000)); return std::string("connected"); });
  } else if (scenario == "connect-late") {
    step("connect", [&] {
      StoreClient c(host, port, token, "driver-late", milliseconds(5000));
      c.set("late/connected", bytes("yes"));
      return std::string("connected");
    });
  } else if (scenario == "unreachable") {
    step("connect", [&] { StoreClient c(host, port, token, "driver-unreachable", milliseconds(300)); return std::string("connected"); });
  } else if (scenario == "mute") {
    // The server accepts AUTH and then never answers: calls must still return.
    StoreClient c(host, port, token, "driver-mute", milliseconds(2000));
    step("get", [&] { return text(c.get("k", milliseconds(100))); });
    step("after", [&] { return std::string(c.check("k") ? "1" : "0"); });
  } else {
    std::fprintf(stderr, "unknown scenario %s\n", scenario.c_str());
    return 2;
  }
  return 0;
}
