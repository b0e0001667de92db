// What JavaScript tells the NCCL backend about upcoming operations, out of band of
// the core engine: "the op with ordinal k belongs to a group", "ends a group", "uses
// a pre-multiplied sum with scalar s". The JS side (src/gpu/nccl-comm.ts) counts its
// submissions; the backend counts the ops it runs; both start at 0, the engine keeps
// order, so ordinals match. Also hands JS the control block of split children.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>

namespace ncclnode {

struct OpTag {
  enum Kind : int { None = 0, InGroup = 1, GroupEnd = 2 } kind = None;
  bool preMulSum = false;
  double scalar = 1.0;
};

class NcclBackend;

class NcclControl {
 public:
  void tag(uint64_t ordinal, OpTag t) { std::lock_guard<std::mutex> l(mu_); tags_[ordinal] = t; }
  void untag(uint64_t ordinal) { std::lock_guard<std::mutex> l(mu_); tags_.erase(ordinal); }
  OpTag take(uint64_t ordinal) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = tags_.find(ordinal);
    if (it == tags_.end()) return OpTag{};
    OpTag t = it->second;
    tags_.erase(it);
    return t;
  }
  // The kind of the tag waiting for `ordinal`, without taking it.
  OpTag::Kind peekKind(uint64_t ordinal) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = tags_.find(ordinal);
    return it == tags_.end() ? OpTag::None : it->second.kind;
  }
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
  std::map<uint64_t, OpTag> tags_;
  std::deque<std::shared_ptr<NcclControl>> children_;
  std::mutex backendMu_;
  NcclBackend* backend_ = nullptr;
};

}  // namespace ncclnode
