#include "held_beats.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "store_client.h"

namespace ncclnode::heldbeats {

namespace {

using Clock = std::chrono::steady_clock;

// Shared with the thread, which may outlive stop() by one write (a store that stopped
// answering holds it up to the client's request timeout): it keeps its own reference.
struct State {
  std::mutex mu;
  std::condition_variable cv;
  HeldBeatsTarget target;
  uint64_t generation = 0;  // bumped by start() and stop(): a thread of an older one ends
  bool running = false;
  bool writing = false;  // a beat is on its way to the store
};

// How long stop() waits for a beat on its way: the rank's last beat (closed) must not be
// overtaken by it, and a store that stopped answering must not hold the JS thread long.
constexpr std::chrono::seconds kStopWait{2};

std::shared_ptr<State>& state() {
  static auto s = std::make_shared<State>();
  return s;
}

std::atomic<int> holds{0};
std::atomic<int64_t> heldSinceNs{0};  // steady clock, when the outermost hold began
std::atomic<uint64_t> beats{0};
std::atomic<bool> active{false};  // a beat thread runs (start() until stop())

int64_t nowNs() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

void loop(std::shared_ptr<State> s, uint64_t generation) {
  std::unique_ptr<StoreClient> client;
  HeldBeatsTarget t;
  int64_t seq = 0;
  Clock::time_point last{};
  std::unique_lock<std::mutex> lock(s->mu);
  while (s->running && s->generation == generation) {
    t = s->target;
    // A look every quarter interval, a beat every half interval while held, the first a
    // quarter to half an interval into the hold: with the JavaScript timer's last beat
    // up to one interval before the hold, no gap exceeds one and a half intervals
    // (the launcher's timeout is three by default).
    s->cv.wait_for(lock, t.interval / 4);
    if (!s->running || s->generation != generation) break;
    const int64_t since = heldSinceNs.load();
    const bool due = holds.load() > 0 && nowNs() - since >= std::chrono::nanoseconds(t.interval / 4).count() &&
                     Clock::now() - last >= t.interval / 2;
    if (!due) continue;
    s->writing = true;
    lock.unlock();
    try {
      if (!client) client = std::make_unique<StoreClient>(t.host, t.port, t.token, "held-beats", t.interval);
      const std::string json = "{\"pid\":" + std::to_string(t.pid) + ",\"seq\":" + std::to_string(seq++) + ",\"held\":true}";
      client->set(t.key, std::vector<char>(json.begin(), json.end()));
      beats++;
      last = Clock::now();
    } catch (...) {
      client.reset();  // a lost store shows up in the collectives; try again next time
    }
    lock.lock();
    s->writing = false;
    s->cv.notify_all();
  }
}

}  // namespace

void start(const HeldBeatsTarget& target) {
  auto s = state();
  std::lock_guard<std::mutex> lock(s->mu);
  s->target = target;
  s->running = true;
  active.store(true);
  const uint64_t generation = ++s->generation;
  s->cv.notify_all();
  std::thread(loop, s, generation).detach();
}

void stop() {
  auto s = state();
  std::unique_lock<std::mutex> lock(s->mu);
  s->running = false;
  active.store(false);
  ++s->generation;
  s->cv.notify_all();
  s->cv.wait_for(lock, kStopWait, [&] { return !s->writing; });
}

uint64_t written() { return beats.load(); }

// Without a beat thread (no launcher) nobody reads the time: a blocking call that misses
// its fast path makes no clock read for it. start() comes from the JS thread, never
// while a hold is on.
Hold::Hold() {
  if (holds.fetch_add(1) == 0 && active.load(std::memory_order_relaxed)) heldSinceNs.store(nowNs());
}

Hold::~Hold() { holds.fetch_sub(1); }

}  // namespace ncclnode::heldbeats
