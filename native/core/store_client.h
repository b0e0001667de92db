// Client of the job's rendezvous store (protocol: docs/rendezvous.md). Native
// backends use it to exchange connection details (Gloo addresses now, NCCL unique
// ids next). Blocking calls; safe to share between threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace ncclnode {

class StoreClient {
 public:
  // Connects (retrying until connectTimeout while the server is not up yet) and
  // authenticates with the job token. Throws Error(Store | Unauthorized | Timeout).
  StoreClient(std::string host, int port, std::string token, std::string clientName,
              std::chrono::milliseconds connectTimeout);
  ~StoreClient();
  StoreClient(const StoreClient&) = delete;
  StoreClient& operator=(const StoreClient&) = delete;

  void set(const std::string& key, const std::vector<char>& value);
  // Waits until the key exists; throws Error(Timeout) naming the key after timeout.
  std::vector<char> get(const std::string& key, std::chrono::milliseconds timeout);
  int64_t add(const std::string& key, int64_t delta);
  bool check(const std::string& key);
  // Waits until every key exists; throws Error(Timeout) naming the missing keys.
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  void remove(const std::string& key);

  const std::string& host() const { return host_; }
  int port() const { return port_; }

 private:
  std::vector<char> call(const std::vector<char>& request, std::chrono::milliseconds timeout);

  std::string host_;
  int port_;
  int fd_ = -1;
  std::mutex mu_;
};

}  // namespace ncclnode
