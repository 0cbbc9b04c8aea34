// The SIM stream: one worker thread runs queued jobs (compute, copy, event markers, waits) in
// order, after an optional random sleep (LOOM_SIM_LATENCY_US). The first failing job's error is
// kept; later compute/copy jobs are skipped and synchronize() throws it.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <random>
#include <system_error>
#include <thread>

#include "loom/cpu/cpu.h"
#include "loom/sim/sim.h"

namespace loom::sim {

namespace {

struct EventState {
  std::mutex mutex;
  std::condition_variable cv;
  bool done = false;
};

class SimEvent final : public Event {
 public:
  explicit SimEvent(std::shared_ptr<EventState> state) : state_(std::move(state)) {}
  void synchronize() override {
    std::unique_lock lock(state_->mutex);
    state_->cv.wait(lock, [&] { return state_->done; });
  }
  bool is_complete() override {
    std::lock_guard lock(state_->mutex);
    return state_->done;
  }
  const std::shared_ptr<EventState>& state() const { return state_; }

 private:
  std::shared_ptr<EventState> state_;
};

class SimStream final : public Stream {
 public:
  explicit SimStream(SimDevice& dev) : dev_(dev), rng_(std::random_device{}()) {
    try {
      worker_ = std::thread([this] { loop(); });
    } catch (const std::system_error& e) {
      fail(ErrorKind::out_of_memory, "{}: cannot start the stream's thread: {}", dev.name(), e.what());
    }
  }
  ~SimStream() override {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }

  Status compute(const Graph& graph, std::span<Tensor* const> nodes) override {
    for (const Tensor* n : nodes) {
      if (!dev_.supports_op(n))
        return Status::error(ErrorKind::unsupported, fmt::format("{}: no kernel for {} '{}' ({})", dev_.name(),
                                                                 op_name(n->op), n->name, describe(*n)));
      if (!n->data && n->nelements() != 0)
        return Status::error(ErrorKind::internal, fmt::format("{}: node '{}' has no memory", dev_.name(), n->name));
    }
    std::vector<Tensor*> list(nodes.begin(), nodes.end());
    push(false, [this, &graph, list = std::move(list)] { dev_.run_nodes(graph, list); });
    return Status::ok();
  }

  Status copy(const Tensor* src, Tensor* dst) override {
    if (src->nbytes() != dst->nbytes() || !src->is_contiguous() || !dst->is_contiguous() || !src->data || !dst->data)
      return Status::error(ErrorKind::internal, fmt::format("{}: bad copy '{}' ({}) -> '{}' ({})", dev_.name(),
                                                            src->name, describe(*src), dst->name, describe(*dst)));
    push(false, [src, dst] { copy_tensor(src, dst).throw_if_error(); });
    return Status::ok();
  }

  std::unique_ptr<Event> record() override {
    auto state = std::make_shared<EventState>();
    push(true, [state] {
      {
        std::lock_guard lock(state->mutex);
        state->done = true;
      }
      state->cv.notify_all();
    });
    return std::make_unique<SimEvent>(state);
  }

  void wait(Event& e) override {
    if (auto* se = dynamic_cast<SimEvent*>(&e)) {
      push(true, [state = se->state()] {
        std::unique_lock lock(state->mutex);
        state->cv.wait(lock, [&] { return state->done; });
      });
    } else {
      push(true, [&e] { e.synchronize(); });  // the caller keeps e alive until synchronize()
    }
  }

  void synchronize() override {
    std::unique_lock lock(mutex_);
    idle_cv_.wait(lock, [&] { return jobs_.empty() && !busy_; });
    if (error_) {
      Error e = *error_;
      error_.reset();
      throw e;
    }
  }

  Status error() override {
    std::lock_guard lock(mutex_);
    if (!error_) return Status::ok();
    const Error e = *error_;
    error_.reset();
    return Status::error(e.kind(), e.what());
  }

  void optimize_graph(std::vector<Tensor*>& nodes) override { dev_.optimize(nodes); }

 private:
  struct Job {
    bool always;  // events and waits run even after an error (nobody may block forever)
    std::function<void()> fn;
  };

  void push(bool always, std::function<void()> fn) {
    {
      std::lock_guard lock(mutex_);
      jobs_.push_back({always, std::move(fn)});
    }
    cv_.notify_one();
  }

  void loop() {
    for (;;) {
      Job job;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stop requested and nothing left
        job = std::move(jobs_.front());
        jobs_.pop_front();
        busy_ = true;
      }
      if (const int us = dev_.latency_us(); us > 0)
        std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, us)(rng_)));
      bool skip;
      {
        std::lock_guard lock(mutex_);
        skip = error_.has_value() && !job.always;
      }
      std::optional<Error> failed;
      if (!skip) {
        try {
          job.fn();
        } catch (const Error& e) {
          failed = e;
        } catch (const std::exception& e) {
          failed = Error(ErrorKind::internal, fmt::format("{}: {}", dev_.name(), e.what()));
        }
      }
      {
        std::lock_guard lock(mutex_);
        if (failed && !error_) error_ = std::move(failed);
        busy_ = false;
      }
      idle_cv_.notify_all();
    }
  }

  SimDevice& dev_;
  std::mt19937 rng_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<Job> jobs_;
  bool busy_ = false;
  bool stop_ = false;
  std::optional<Error> error_;
  std::thread worker_;
};

}  // namespace

std::unique_ptr<Stream> SimDevice::create_stream() { return std::make_unique<SimStream>(*this); }

}  // namespace loom::sim
