// Gloo's rendezvous Store over the job's store, with a per-communicator key prefix
// so several communicators (split) rendezvous on one server without clashing.
#pragma once

#include <gloo/rendezvous/store.h>

#include <memory>
#include <string>

#include "../core/store_client.h"

namespace ncclnode {

class GlooStore : public gloo::rendezvous::Store {
 public:
  GlooStore(std::shared_ptr<StoreClient> client, std::string prefix, std::chrono::milliseconds timeout)
      : client_(std::move(client)), prefix_(std::move(prefix)), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    client_->set(prefix_ + key, data);
  }
  std::vector<char> get(const std::string& key) override { return client_->get(prefix_ + key, timeout_); }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    full.reserve(keys.size());
    for (const auto& k : keys) full.push_back(prefix_ + k);
    client_->wait(full, timeout);
  }

 private:
  std::shared_ptr<StoreClient> client_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace ncclnode
