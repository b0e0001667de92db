// The JS side's handle on an NCCL communicator besides its ops: registration under
// the communicator lock, the flight record, and the control blocks of split
// children (queued in split order).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace ncclnode {

class NcclBackend;

class NcclControl {
 public:
  void pushChild(std::shared_ptr<NcclControl> c) { std::lock_guard<std::mutex> l(mu_); children_.push_back(std::move(c)); }
  std::shared_ptr<NcclControl> popChild() {
    std::lock_guard<std::mutex> l(mu_);
    if (children_.empty()) return nullptr;
    auto c = children_.front();
    children_.pop_front();
    return c;
  }
  // Runs f with the backend's communicator lock held (registration from the JS
  // thread must not overlap the worker's NCCL calls). Throws if the backend is gone.
  void withBackend(const std::function<void(NcclBackend&)>& f);
  void attach(NcclBackend* b) { std::lock_guard<std::mutex> l(backendMu_); backend_ = b; }

 private:
  std::mutex mu_;
  std::deque<std::shared_ptr<NcclControl>> children_;
  std::mutex backendMu_;
  NcclBackend* backend_ = nullptr;
};

}  // namespace ncclnode
