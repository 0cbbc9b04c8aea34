// In-process communicator: ranks are threads of this process; collectives meet in host memory
// (a slot per rank, summed in rank order by the last rank to arrive). Ranks take turns
// computing (see InProcessGroup in comm.h).
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "loom/core/error.h"
#include "loom/core/fp16.h"
#include "loom/meta/comm.h"

namespace loom::meta {

struct InProcessGroup::State {
  explicit State(int n) : n(n), slots((size_t)n) {}
  const int n;
  std::mutex mu;
  std::condition_variable cv;
  int turn = -1;  // the rank computing now (-1: nobody)
  int arrived = 0;
  uint64_t generation = 0;
  std::vector<std::vector<float>> slots;  // each rank's contribution
  std::vector<float> result;
  std::string aborted;

  void take_turn(std::unique_lock<std::mutex>& lk, int r) {
    cv.wait(lk, [&] { return turn == -1 || !aborted.empty(); });
    check();
    turn = r;
  }
  void give_turn(int r) {
    if (turn == r) turn = -1;
    cv.notify_all();
  }
  void check() const { LOOM_CHECK(aborted.empty(), internal, "[inproc] collective aborted: {}", aborted); }

  // Every rank contributes through fill(slot); the last to arrive runs combine(); all wait.
  template <typename Fill, typename Combine>
  void meet(int r, Fill fill, Combine combine) {
    std::unique_lock lk(mu);
    check();
    fill(slots[(size_t)r]);
    const uint64_t gen = generation;
    const bool had_turn = turn == r;
    if (++arrived == n) {
      combine();
      arrived = 0;
      ++generation;
    }
    give_turn(r);
    cv.wait(lk, [&] { return generation != gen || !aborted.empty(); });
    check();
    if (had_turn) take_turn(lk, r);
  }
};

namespace {

class InProcessComm final : public Communicator {
 public:
  InProcessComm(InProcessGroup::State& s, int rank) : s_(s), rank_(rank) {}
  const char* name() const override { return "inproc"; }
  int rank() const override { return rank_; }
  int size() const override { return s_.n; }

  void all_reduce_sum(float* data, size_t n) override {
    count(n);
    const bool bf16 = use_bf16(n);
    s_.meet(
        rank_,
        [&](std::vector<float>& slot) {
          slot.assign(data, data + n);
          if (bf16)  // what an MPI rank would send
            for (float& v : slot) v = bf16_to_f32(f32_to_bf16(v));
        },
        [&] {
          s_.result.assign(n, 0.0f);
          for (const auto& slot : s_.slots) {
            LOOM_CHECK(slot.size() == n, internal, "[inproc] all_reduce sizes differ: {} vs {}", slot.size(), n);
            for (size_t i = 0; i < n; ++i) s_.result[i] += slot[i];
          }
        });
    std::lock_guard lk(s_.mu);  // result stays until every rank has arrived at the next collective
    std::memcpy(data, s_.result.data(), n * sizeof(float));
  }

  void all_gather(const float* local, const std::vector<size_t>& counts, float* out) override {
    s_.meet(
        rank_, [&](std::vector<float>& slot) { slot.assign(local, local + counts[(size_t)rank_]); },
        [&] {
          s_.result.clear();
          for (const auto& slot : s_.slots) s_.result.insert(s_.result.end(), slot.begin(), slot.end());
        });
    std::lock_guard lk(s_.mu);
    std::memcpy(out, s_.result.data(), s_.result.size() * sizeof(float));
  }

  void broadcast(void* data, size_t n, int root) override {
    s_.meet(
        rank_,
        [&](std::vector<float>& slot) {
          slot.assign((n + sizeof(float) - 1) / sizeof(float), 0.0f);
          std::memcpy(slot.data(), data, n);
        },
        [&] { s_.result = s_.slots[(size_t)root]; });
    std::lock_guard lk(s_.mu);
    std::memcpy(data, s_.result.data(), n);
  }

  void begin_compute() override {
    std::unique_lock lk(s_.mu);
    s_.take_turn(lk, rank_);
  }
  void end_compute() override {
    std::lock_guard lk(s_.mu);
    s_.give_turn(rank_);
  }

 private:
  InProcessGroup::State& s_;
  const int rank_;
};

}  // namespace

InProcessGroup::InProcessGroup(int n) : state_(std::make_unique<State>(n)) {
  LOOM_CHECK(n >= 1, internal, "[inproc] group of {} ranks", n);
  for (int r = 0; r < n; ++r) ranks_.push_back(std::make_unique<InProcessComm>(*state_, r));
}

InProcessGroup::~InProcessGroup() = default;

int InProcessGroup::size() const { return state_->n; }

Communicator& InProcessGroup::rank(int r) { return *ranks_.at((size_t)r); }

void InProcessGroup::abort(const std::string& why) {
  std::lock_guard lk(state_->mu);
  if (state_->aborted.empty()) state_->aborted = why.empty() ? "a member failed" : why;
  state_->cv.notify_all();
}

}  // namespace loom::meta
