// Executor: compute buffers per device (grown on demand, or an error under
// LOOM_SCHED_NO_REALLOC=1), binding of plan and caller tensors, and the job loop: each job
// waits for the events of the jobs it depends on, runs on its device's stream, and records an
// event when a later job waits for it. compute() ends with every stream synchronized.
#include "loom/sched/executor.h"

#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "plan_internal.h"

namespace loom::sched {

namespace {

// LOOM_SCHED_SYNC_ALL=1 waits for every stream at the end of compute (the rule before covered
// streams were skipped), for comparing sync counts.
bool sync_covered_streams() {
  const char* v = std::getenv("LOOM_SCHED_SYNC_ALL");
  return !(v && *v && std::strcmp(v, "0") != 0);
}

bool no_realloc_env() {
  const char* v = std::getenv("LOOM_SCHED_NO_REALLOC");
  return v && *v && std::strcmp(v, "0") != 0;
}

Status from_error(const Error& e) { return Status::error(e.kind(), e.what()); }

// Checks that optimize_graph kept the same nodes with every node after its sources in the list.
Status check_order(const std::vector<Tensor*>& before, const std::vector<Tensor*>& after, const Device& dev) {
  std::unordered_map<const Tensor*, size_t> pos;
  for (size_t i = 0; i < after.size(); ++i) pos.emplace(after[i], i);
  bool ok = before.size() == after.size() && pos.size() == after.size();
  for (size_t i = 0; ok && i < before.size(); ++i) ok = pos.count(before[i]) != 0;
  for (size_t i = 0; ok && i < after.size(); ++i)
    for (const Tensor* s : after[i]->src)
      if (s) {
        const Tensor* r = s->view_src && !pos.count(s) ? s->view_src : s;
        if (auto it = pos.find(r); it != pos.end() && it->second > i) ok = false;
      }
  if (ok) return Status::ok();
  return Status::error(ErrorKind::internal,
                       fmt::format("[executor] {} optimize_graph broke a split's node order", dev.name()));
}

}  // namespace

Executor::Executor(std::span<Device* const> devices) : devices_(devices.begin(), devices.end()) {
  buffers_.resize(devices_.size());
  for (Device* d : devices_) streams_.push_back(d->create_stream());
}

Executor::~Executor() {
  for (auto& s : streams_) {
    try {
      s->synchronize();
    } catch (const Error&) {
    }
  }
  streams_.clear();
  for (size_t d = 0; d < buffers_.size(); ++d) release_buffer((int)d);
}

size_t Executor::buffer_size(int device) const {
  const auto& b = buffers_[(size_t)device];
  return b ? b->size() : 0;
}

void Executor::release_buffer(int d) {
  auto& b = buffers_[(size_t)d];
  b.reset();
}

Status Executor::ensure_buffer(int d, const ExecutionPlan& plan, bool is_reserve) {
  const DevicePlan& dp = plan.device_plans[(size_t)d];
  if (dp.graph.n_nodes() == 0 && dp.graph.leafs().empty()) return Status::ok();
  const size_t need = dp.memory.total;
  auto& buf = buffers_[(size_t)d];
  if (buf && buf->size() >= need) return Status::ok();
  if (buf && !is_reserve && no_realloc_env()) {
    const alloc::Placement* worst = nullptr;  // the largest tensor reaching past the reserve
    for (const alloc::Placement& p : dp.memory.placements)
      if (p.offset + p.size > buf->size() && (!worst || p.size > worst->size)) worst = &p;
    const Tensor* t = worst ? worst->tensor : nullptr;
    return Status::error(
        ErrorKind::out_of_memory,
        fmt::format("[executor] LOOM_SCHED_NO_REALLOC=1: {} needs a {} byte compute buffer but {} are reserved; "
                    "tensor '{}' ({} {}, {} bytes at offset {}) grew past the reserve",
                    devices_[(size_t)d]->name(), need, buf->size(), t ? t->name : "?", t ? op_name(t->op) : "?",
                    t ? describe(*t) : "", worst ? worst->size : 0, worst ? worst->offset : 0));
  }
  const bool had = buf != nullptr;
  release_buffer(d);  // free first: the peak is the new size, not both
  std::unique_ptr<Buffer> fresh;
  Status st = compute_buffer_type(d).alloc(need, fresh);
  if (!st && &compute_buffer_type(d) != &devices_[(size_t)d]->buffer_type())  // no pinned memory that large
    st = devices_[(size_t)d]->buffer_type().alloc(need, fresh);
  if (!st)
    return Status::error(st.kind(), fmt::format("[executor] compute buffer of {} ({} bytes): {}",
                                                devices_[(size_t)d]->name(), need, st.message()));
  fresh->set_usage(BufferUsage::compute);  // the planner places tensors bound here anew
  buf = std::move(fresh);
  if (had) ++n_reallocs_;
  bound_plan_ = 0;
  return Status::ok();
}

// A host device computes in pinned memory when another device offers it (inputs and the host's
// side of copies then move without staging); any other device in its own memory.
const BufferType& Executor::compute_buffer_type(int d) const {
  const Device& dev = *devices_[(size_t)d];
  if (dev.buffer_type().is_host())
    for (const Device* other : devices_)
      if (const BufferType* pinned = other != &dev ? other->host_buffer_type() : nullptr)
        if (dev.supports_buffer_type(*pinned)) return *pinned;
  return dev.buffer_type();
}

Status Executor::reserve(const Graph& g, const ExecutionPlan& plan) {
  (void)g;
  LOOM_CHECK(plan.devices == devices_, usage, "[executor] plan made for other devices");
  for (size_t d = 0; d < devices_.size(); ++d)
    if (Status st = ensure_buffer((int)d, plan, true); !st) return st;
  return Status::ok();
}

Status Executor::alloc(const Graph& g, const ExecutionPlan& plan) {
  if (plan.devices != devices_)
    return Status::error(ErrorKind::usage, "[executor] plan made for other devices than the executor's");
  if (plan.plan_only)
    return Status::error(ErrorKind::usage,
                         "[executor] the plan places weights that have no memory (PlanPolicy::leaf_devices): it can "
                         "be inspected, not run");
  if (plan.graph_uid != g.uid())
    return Status::error(ErrorKind::usage, "[executor] plan made for another graph (uid mismatch)");
  try {
    synchronize();  // nothing may still run on buffers about to be rebound or replaced
  } catch (const Error& e) {
    return from_error(e);
  }
  for (size_t d = 0; d < devices_.size(); ++d) {
    if (Status st = ensure_buffer((int)d, plan, false); !st) return st;
    if (buffers_[d])
      if (Status st = alloc::apply_plan(plan.device_plans[d].memory, *buffers_[d]); !st) return st;
  }
  // Plan tensors in creation order: clones take their copy-0 memory, views their root's.
  std::unordered_map<const Tensor*, const Tensor*> clone_of;
  for (auto& [orig, cl] : plan.clones) clone_of.emplace(cl, orig);
  for (Tensor& t : plan.ctx->tensors()) {
    if (t.view_src) {
      t.data = t.view_src->data ? static_cast<char*>(t.view_src->data) + t.view_offs : nullptr;
      t.buffer = t.view_src->buffer;
    } else if (auto it = clone_of.find(&t); it != clone_of.end()) {
      t.data = it->second->data;
      t.buffer = it->second->buffer;
    }
  }
  // Caller tensors: nodes and inputs take their mirror's memory, views their root's.
  for (auto& [orig, m] : plan.binds) {
    orig->data = m->data;
    orig->buffer = m->buffer;
  }
  auto bind_view = [](Tensor* t) {
    if (t->view_src && !detail::has_fixed_memory(t->view_src) && t->view_src->data) {
      t->data = static_cast<char*>(t->view_src->data) + t->view_offs;
      t->buffer = t->view_src->buffer;
    }
  };
  for (Tensor* t : g.leafs()) bind_view(t);
  for (Tensor* t : g.nodes()) bind_view(t);
  // The per-split optimize_graph hook, on copies of the plan's node lists.
  run_nodes_.assign((size_t)plan.n_copies, {});
  for (int c = 0; c < plan.n_copies; ++c)
    for (const Split& s : plan.splits) {
      std::vector<Tensor*> list = s.nodes[(size_t)c];
      streams_[(size_t)s.device]->optimize_graph(list);
      if (Status st = check_order(s.nodes[(size_t)c], list, *devices_[(size_t)s.device]); !st) return st;
      run_nodes_[(size_t)c].push_back(std::move(list));
    }
  bound_plan_ = plan.uid;
  return Status::ok();
}

void Executor::synchronize() {
  for (auto& s : streams_) s->synchronize();
}

Status Executor::compute(const Graph& g, const ExecutionPlan& plan) {
  if (bound_plan_ != plan.uid) {
    if (Status st = alloc(g, plan); !st) return st;
    for (const LeafPlan& l : plan.leafs)
      if (l.cause == Cause::input)
        return Status::error(ErrorKind::usage,
                             fmt::format("[executor] input '{}' got its memory just now: call alloc(), fill the "
                                         "inputs, then compute()",
                                         l.tensor->name));
  }
  const size_t slot = (size_t)(n_computes_++ % (uint64_t)plan.n_copies);
  std::vector<std::unique_ptr<Event>> events(plan.jobs.size());
  Status result;
  if (comm_) comm_->begin_compute();
  try {
    run_jobs(plan, slot, events, result);
  } catch (const Error& e) {
    result = from_error(e);
  }
  // Outputs readable on return: wait for the streams whose last work no other waited-for stream
  // covers; the rest finished before an event a waited-for stream passed, and are only asked for
  // an error (no wait).
  const std::vector<bool> wait_for =
      result ? streams_to_wait(plan) : std::vector<bool>(streams_.size(), true);  // a failed job: all
  for (size_t d = 0; d < streams_.size(); ++d) {
    try {
      if (wait_for[d]) {
        streams_[d]->synchronize();
        if (devices_[d]->caps().async) ++n_syncs_;
      } else if (Status st = streams_[d]->error(); !st && result) {
        result = st;
      }
    } catch (const Error& e) {
      if (result) result = from_error(e);
    }
  }
  if (comm_) comm_->end_compute();
  return result;
}

std::vector<bool> Executor::streams_to_wait(const ExecutionPlan& plan) const {
  std::vector<int> last(streams_.size(), -1);  // each stream's last job in this compute
  for (size_t j = 0; j < plan.jobs.size(); ++j) last[(size_t)plan.jobs[j].device] = (int)j;
  std::vector<bool> wait(streams_.size(), false);
  if (!sync_covered_streams()) {
    for (size_t d = 0; d < wait.size(); ++d) wait[d] = true;  // LOOM_SCHED_SYNC_ALL=1: every stream
    return wait;
  }
  // Streams by their last job, latest first: the latest is always waited for; an earlier one is
  // covered (complete once compute returns) when a later job of a stream already known complete
  // waited for its last job's event.
  std::vector<size_t> order;
  for (size_t d = 0; d < last.size(); ++d)
    if (last[d] >= 0) order.push_back(d);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return last[a] > last[b]; });
  std::vector<bool> complete(streams_.size(), false);
  for (size_t d : order) {
    bool covered = false;
    for (size_t j = (size_t)last[d] + 1; j < plan.jobs.size() && !covered; ++j) {
      const Job& job = plan.jobs[j];
      if (!complete[(size_t)job.device]) continue;
      for (int w : job.waits) covered = covered || w == last[d];
    }
    wait[d] = !covered;
    complete[d] = true;
  }
  return wait;
}

// A split with AllReduce nodes runs in pieces: up to and including each one, then the sum over
// the group (staged through host memory, so any device kind can take part).
Status Executor::compute_nodes(Stream& stream, const Graph& graph, const std::vector<Tensor*>& nodes) {
  size_t first = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    Tensor* t = nodes[i];
    if (t->op != OpKind::ALL_REDUCE || !comm_) continue;
    if (Status st = stream.compute(graph, std::span<Tensor* const>(nodes.data() + first, i + 1 - first)); !st)
      return st;
    first = i + 1;
    stream.synchronize();
    ++n_syncs_;
    if (t->type != DType::F32 || !t->is_contiguous())
      return Status::error(ErrorKind::internal,
                           fmt::format("[executor] AllReduce '{}' must be contiguous f32", t->name));
    const size_t n = (size_t)t->nelements();
    if (t->buffer && !t->buffer->type().is_host()) {
      std::vector<float> host(n);
      t->buffer->get(t, host.data(), 0, n * sizeof(float));
      comm_->all_reduce_sum(host.data(), n);
      t->buffer->set(t, host.data(), 0, n * sizeof(float));
    } else {
      comm_->all_reduce_sum(static_cast<float*>(t->data), n);
    }
  }
  if (first == 0) return stream.compute(graph, nodes);
  if (first == nodes.size()) return Status::ok();
  return stream.compute(graph, std::span<Tensor* const>(nodes.data() + first, nodes.size() - first));
}

void Executor::run_jobs(const ExecutionPlan& plan, size_t slot, std::vector<std::unique_ptr<Event>>& events,
                        Status& result) {
  for (size_t j = 0; j < plan.jobs.size() && result; ++j) {
    const Job& job = plan.jobs[j];
    Stream& stream = *streams_[(size_t)job.device];
    for (int w : job.waits)
      if (events[(size_t)w]) stream.wait(*events[(size_t)w]);  // none: that stream had finished it
    if (job.kind == JobKind::copy) {
      const CopyPlan& cp = plan.copies[(size_t)job.index];
      result = stream.copy(cp.source, cp.ring[slot]);
    } else {
      const std::vector<Tensor*>& nodes = run_nodes_[slot][(size_t)job.index];
      result = compute_nodes(stream, plan.device_plans[(size_t)job.device].graph, nodes);
    }
    if (result && job.signals) {
      events[j] = stream.record();
      if (!events[j]) {  // a stream without events: finish now
        stream.synchronize();
        if (devices_[(size_t)job.device]->caps().async) ++n_syncs_;
      }
    }
  }
}

}  // namespace loom::sched
