#include "mesh_exchange.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace ncclnode {

size_t MeshExchange::capacity(int worldSize) {
  // n-1 messages per rank per call: worth it while n is small; beyond, only the
  // 48-byte agreement header travels this way and data takes Gloo's algorithms.
  constexpr size_t kHeader = 64;
  if (worldSize > 64) return kHeader;
  return kHeader + (worldSize <= 8 ? 64 * 1024 : 16 * 1024);
}

MeshExchange::MeshExchange(std::shared_ptr<gloo::Context> ctx)
    : ctx_(std::move(ctx)), cap_(capacity(ctx_->size)), scratch_(cap_ * ctx_->size) {
  buf_ = ctx_->createUnboundBuffer(scratch_.data(), scratch_.size());
}

MeshExchange::~MeshExchange() = default;

void MeshExchange::post(const void* head, size_t headBytes, const void* body, size_t bodyBytes) {
  const size_t bytes = headBytes + bodyBytes;
  if (bytes > cap_) throw std::length_error("mesh exchange message exceeds its capacity");
  const int rank = ctx_->rank;
  const int size = ctx_->size;
  uint8_t* own = scratch_.data() + static_cast<size_t>(rank) * cap_;
  if (headBytes) std::memcpy(own, head, headBytes);
  if (bodyBytes) std::memcpy(own + headBytes, body, bodyBytes);
  if (size == 1) return;
  // Every rank calls this at the same point of its collective sequence, so the
  // context's slot counter agrees across ranks.
  const uint64_t slot = ctx_->nextSlot();
  // Receives first, so a peer's send finds them posted and goes out at once.
  for (int p = 0; p < size; ++p) {
    if (p != rank) buf_->recv(p, slot, static_cast<size_t>(p) * cap_, cap_);
  }
  for (int p = 0; p < size; ++p) {
    if (p != rank) buf_->send(p, slot, static_cast<size_t>(rank) * cap_, bytes);
  }
}

void MeshExchange::wait(std::chrono::milliseconds timeout) {
  const int rank = ctx_->rank;
  const int size = ctx_->size;
  // One deadline for the whole round, not one timeout per peer. Never pass Gloo a
  // value <= 0: -1 ms means "the context's default".
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left = [&] {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    return std::max(ms, std::chrono::milliseconds(1));
  };
  for (int p = 0; p < size; ++p) {
    if (p != rank && !buf_->waitRecv(left())) throw std::runtime_error("mesh exchange receive was aborted");
  }
  for (int p = 0; p < size; ++p) {
    if (p != rank && !buf_->waitSend(left())) throw std::runtime_error("mesh exchange send was aborted");
  }
}

void reduceInRankOrder(const MeshExchange& mesh, size_t offset, int worldSize, MeshReduceFn fn, void* out,
                       size_t count, size_t elementBytes) {
  std::memcpy(out, mesh.from(0) + offset, count * elementBytes);
  for (int r = 1; r < worldSize; ++r) fn(out, out, mesh.from(r) + offset, count);
}

}  // namespace ncclnode
