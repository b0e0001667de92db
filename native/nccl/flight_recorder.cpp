#include "flight_recorder.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <algorithm>
#include <vector>
#include <sstream>

#include "../core/errors.h"

namespace ncclnode {

namespace {

std::mutex registryMu;
// In creation order, so a dump lists the world before the communicators split from it
// (ordering by address made that order change from run to run).
std::vector<const FlightRecorder*>& registry() {
  static auto* r = new std::vector<const FlightRecorder*>();
  return *r;
}

int64_t wallUs(std::chrono::steady_clock::time_point t) {
  if (t.time_since_epoch().count() == 0) return 0;
  // Steady times become wall-clock times so records from several hosts line up.
  const auto now = std::chrono::system_clock::now();
  const auto age = std::chrono::steady_clock::now() - t;
  return std::chrono::duration_cast<std::chrono::microseconds>((now - age).time_since_epoch()).count();
}

int64_t nowUs() { return wallUs(std::chrono::steady_clock::now()); }

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) { out += ' '; continue; }
    out += c;
  }
  return out + "\"";
}

}  // namespace

FlightRecorder::FlightRecorder(std::string name, int rank, int size) : name_(std::move(name)), rank_(rank), size_(size) {
  const char* env = std::getenv("NCCL_NODE_FLIGHT_RECORDER_SIZE");
  capacity_ = env && *env ? std::strtoul(env, nullptr, 10) : 2000;
  ring_.resize(capacity_);
  std::lock_guard<std::mutex> lock(registryMu);
  registry().push_back(this);
}

FlightRecorder::~FlightRecorder() {
  std::lock_guard<std::mutex> lock(registryMu);
  auto& r = registry();
  r.erase(std::remove(r.begin(), r.end(), this), r.end());
}

uint64_t FlightRecorder::begin(const Op& op, const char* what) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t id = next_++;
  lastEnqueued_ = op.seq;
  if (capacity_ == 0) return id;
  Entry& e = ring_[id % capacity_];
  e = Entry{};
  e.id = id;
  e.seq = op.seq;
  e.op = what;
  e.dtype = dtypeName(op.dtype);
  e.count = op.count;
  e.peer = op.root;
  e.state = "scheduled";
  e.enqueuedUs = wallUs(op.enqueued);
  return id;
}

void FlightRecorder::setState(uint64_t id, const char* state) {
  std::lock_guard<std::mutex> lock(mu_);
  if (capacity_ == 0 || id + capacity_ < next_) return;  // overwritten already
  Entry& e = ring_[id % capacity_];
  e.state = state;
  const std::string s(state);
  if (s == "started") { e.startedUs = nowUs(); lastStarted_ = e.seq; }
  else if (s != "enqueued") e.endedUs = nowUs();
  if (s == "completed") lastCompleted_ = e.seq;
}

std::string FlightRecorder::json() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::ostringstream o;
  o << "{\"comm\":" << quote(name_) << ",\"rank\":" << rank_ << ",\"size\":" << size_
    << ",\"lastEnqueuedSeq\":" << lastEnqueued_ << ",\"lastStartedSeq\":" << lastStarted_
    << ",\"lastCompletedSeq\":" << lastCompleted_ << ",\"entries\":[";
  const uint64_t first = next_ > capacity_ ? next_ - capacity_ : 0;
  for (uint64_t id = first; id < next_; ++id) {
    const Entry& e = ring_[id % capacity_];
    o << (id == first ? "" : ",") << "{\"id\":" << e.id << ",\"seq\":" << e.seq << ",\"op\":" << quote(e.op)
      << ",\"count\":" << e.count << ",\"dtype\":" << quote(e.dtype) << ",\"peer\":" << e.peer
      << ",\"state\":" << quote(e.state) << ",\"enqueuedUs\":" << e.enqueuedUs << ",\"startedUs\":" << e.startedUs
      << ",\"endedUs\":" << e.endedUs << "}";
  }
  o << "]}";
  return o.str();
}

std::string FlightRecorder::dumpAll(const std::string& reason) {
  const char* dirEnv = std::getenv("NCCL_NODE_FLIGHT_RECORDER_DIR");
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = dirEnv && *dirEnv ? dirEnv : tmp && *tmp ? tmp : "/tmp";
  const char* rankEnv = std::getenv("RANK");
  std::ostringstream body;
  int rank = rankEnv ? std::atoi(rankEnv) : -1;
  body << "{\"version\":1,\"pid\":" << getpid() << ",\"reason\":" << quote(reason) << ",\"dumpedUs\":" << nowUs()
       << ",\"communicators\":[";
  {
    std::lock_guard<std::mutex> lock(registryMu);
    bool first = true;
    for (const FlightRecorder* r : registry()) {
      if (rank < 0) rank = r->rank_;
      body << (first ? "" : ",") << r->json();
      first = false;
    }
  }
  body << "]}";
  const std::string path = dir + "/nccl-node-fr-rank" + std::to_string(rank < 0 ? 0 : rank) + "-" +
                           std::to_string(getpid()) + ".json";
  std::ofstream f(path + ".tmp", std::ios::trunc);
  f << body.str() << "\n";
  f.close();
  if (!f || std::rename((path + ".tmp").c_str(), path.c_str()) != 0) {
    throw Error(Code::Io, "could not write the flight record to " + path);
  }
  return path;
}

}  // namespace ncclnode
