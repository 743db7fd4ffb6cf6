// gsync's torch.distributed process group: the operations (see process_group.hpp).

#include "process_group.hpp"

#include <cstdio>
#include <cstring>
#include <numeric>
#include <span>

#include <Python.h>
#include <pybind11/pybind11.h>

#include <gsync/gsync.hpp>

#include "dispatch.hpp"
#include "store_bridge.hpp"

namespace gsync_torch {

namespace {

using namespace std::chrono_literals;

void check_tensor(const at::Tensor& t, const char* op) {
  if (t.is_sparse()) refuse(std::string(op) + ": sparse tensors are not supported");
  if (!t.device().is_cpu()) refuse(std::string(op) + ": only CPU tensors are supported (this backend has no device path in torch yet)");
  if (!t.is_contiguous()) refuse(std::string(op) + ": the tensor is not contiguous");
}
void check_tensors(const std::vector<at::Tensor>& ts, const char* op, bool one = true) {
  if (one && ts.size() != 1) refuse(std::string(op) + ": takes one tensor per call (got " + std::to_string(ts.size()) + ")");
  for (const auto& t : ts) check_tensor(t, op);
}
void check_same_type(const at::Tensor& a, const at::Tensor& b, const char* op) {
  if (a.scalar_type() != b.scalar_type())
    refuse(std::string(op) + ": tensors of different types (" + c10::toString(a.scalar_type()) + " and " + c10::toString(b.scalar_type()) + ")");
}
template <class T>
std::span<T> span_of(const at::Tensor& t) {
  return {static_cast<T*>(t.data_ptr()), static_cast<std::size_t>(elements(t))};
}
template <class T>
std::span<const T> cspan_of(const at::Tensor& t) {
  return {static_cast<const T*>(t.data_ptr()), static_cast<std::size_t>(elements(t))};
}
std::chrono::milliseconds timeout_of(std::chrono::milliseconds t) { return t == c10d::kUnsetTimeout ? 0ms : t; }

/// A flat tensor holding the elements of `parts` one after another (their type and device).
at::Tensor flat_for(const std::vector<at::Tensor>& parts) {
  std::int64_t n = 0;
  for (const auto& p : parts) n += p.numel();
  return at::empty({n}, parts.at(0).options());
}
/// Copies `parts` into `flat`, or `flat` into `parts` (`out`), one after another (bytes).
void copy_parts(const at::Tensor& flat, const std::vector<at::Tensor>& parts, bool out) {
  auto* base = static_cast<std::byte*>(flat.data_ptr());
  std::size_t at = 0;
  for (const auto& p : parts) {
    const std::size_t b = p.nbytes();
    if (b) {
      if (out) std::memcpy(p.data_ptr(), base + at, b);
      else std::memcpy(base + at, p.data_ptr(), b);
    }
    at += b;
  }
}
/// gsync elements per part.
std::vector<std::size_t> counts_of(const std::vector<at::Tensor>& parts) {
  std::vector<std::size_t> c;
  for (const auto& p : parts) c.push_back(static_cast<std::size_t>(elements(p)));
  return c;
}

}  // namespace

process_group::process_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size, std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size),
      comm_(std::in_place, [&] {
        gsync::config cfg = gsync::config::from_env();
        if (timeout.count() > 0) cfg.timeout = timeout;
        return gsync::tcp_communicator::join(launch_from_store(store, rank, size), cfg);
      }()),
      completer_(std::make_shared<completer>()),
      meter_(std::make_shared<step_meter>()) {}

// The communicator's destructor lets its pending jobs end (their futures complete on the
// completer, which their callbacks keep alive). Python drops the group holding the GIL, and the
// engine and completer threads may drop the last reference of a tensor whose Python object they
// then own, which takes the GIL: so they are waited for with the GIL released (holding it, a
// destroy_process_group could wait for them forever).
process_group::~process_group() {
  report();
  std::optional<pybind11::gil_scoped_release> nogil;
  if (Py_IsInitialized() && PyGILState_Check()) nogil.emplace();
  try {
    comm_.reset();
  } catch (...) {
    // a destructor reports nothing; the peers learn of a failure on their own
  }
  completer_.reset();
}

template <class Job>
c10::intrusive_ptr<c10d::Work> process_group::enqueue(c10d::OpType type, std::vector<at::Tensor> outputs, std::chrono::milliseconds timeout,
                                                      Job job, std::shared_ptr<int> source) {
  auto fut = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
  std::lock_guard lk(issue_);
  // The job's run time, written by the job (also when it fails), read when the request finishes
  // (also when the job never ran: the communicator was broken).
  auto spent = std::make_shared<std::atomic<std::int64_t>>(0);
  gsync::request r = gsync::submit(*comm_, [job = std::move(job), timeout, spent](auto& c) mutable {
    struct account {
      std::chrono::steady_clock::time_point t0;
      std::atomic<std::int64_t>& spent;
      ~account() { spent.store(std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count()); }
    } a{std::chrono::steady_clock::now(), *spent};
    if (timeout.count() > 0) {
      auto g = c.with_timeout(timeout);
      job(c);
    } else {
      job(c);
    }
  });
  const std::uint64_t id = meter_->issued();  // after submit: one that throws issues nothing
  r.on_finish([c = completer_, fut, outputs, meter = meter_, id, spent](std::exception_ptr e) {
    meter->finished(id, std::chrono::nanoseconds(spent->load()));
    c->post(fut, outputs, e);
  });
  return c10::make_intrusive<work>(getRank(), type, std::move(r), std::move(outputs), std::move(fut), std::move(source), meter_, id);
}

group_stats process_group::stats() const {
  group_stats s;
  s.ops = meter_->ops();
  s.busy_seconds = meter_->total_busy().count();
  s.steps = meter_->totals();
  return s;
}

// At GSYNC_DEBUG=INFO, the group's figures, once, as it goes (as gsync's gradient synchronizer does).
void process_group::report() const noexcept {
  try {
    if (!comm_ || !comm_->log().enabled(gsync::log_level::info)) return;
    const group_stats s = stats();
    char buf[400];
    if (s.steps.steps() == 0)
      std::snprintf(buf, sizeof buf, "torch backend: %llu operations, %.3f s on the engine; no steps marked (gsync_torch.step() once per step gives the efficiency figures)",
                    static_cast<unsigned long long>(s.ops), s.busy_seconds);
    else
      std::snprintf(buf, sizeof buf,
                    "torch backend: %llu steps, mean %.3f ms; communication exposed %.1f%% of step time (%.1f%% of its %.3f s hidden "
                    "behind computation); speedup over one worker %.2f of %d (weak scaling, from the exposed share)",
                    static_cast<unsigned long long>(s.steps.steps()), s.steps.mean_step_ms(), 100.0 * s.steps.comm_ratio(),
                    100.0 * s.steps.overlap(), s.steps.comm_time().count(), s.steps.speedup(getSize()), getSize());
    comm_->log().info(buf);
  } catch (...) {
    // a report never turns a teardown into an error
  }
}

c10::intrusive_ptr<c10d::Work> process_group::broadcast(std::vector<at::Tensor>& tensors, const c10d::BroadcastOptions& opts) {
  check_tensors(tensors, "broadcast", false);
  const int root = static_cast<int>(opts.rootRank);
  return enqueue(c10d::OpType::BROADCAST, tensors, timeout_of(opts.timeout), [tensors, root](auto& c) {
    for (const auto& t : tensors) with_type(t.scalar_type(), [&]<class T>() { gsync::broadcast(c, span_of<T>(t), root); });
  });
}

c10::intrusive_ptr<c10d::Work> process_group::allreduce(std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  check_tensors(tensors, "allreduce", false);
  const auto op = opts.reduceOp.op_;
  for (const auto& t : tensors)  // an unsupported (type, operator) pair is refused here, at the call
    with_type(t.scalar_type(), [&]<class T>() { with_op<T>(op, t.scalar_type(), [](auto) {}); });
  return enqueue(c10d::OpType::ALLREDUCE, tensors, timeout_of(opts.timeout), [tensors, op](auto& c) {
    for (const auto& t : tensors)
      with_type(t.scalar_type(), [&]<class T>() { with_op<T>(op, t.scalar_type(), [&](auto o) { gsync::allreduce(c, span_of<T>(t), o); }); });
  });
}

c10::intrusive_ptr<c10d::Work> process_group::allreduce_coalesced(std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  return allreduce(tensors, opts);  // one job: the tensors are reduced back to back
}

c10::intrusive_ptr<c10d::Work> process_group::reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) {
  check_tensors(tensors, "reduce");
  const auto op = opts.reduceOp.op_;
  const int root = static_cast<int>(opts.rootRank), me = getRank();
  with_type(tensors[0].scalar_type(), [&]<class T>() { with_op<T>(op, tensors[0].scalar_type(), [](auto) {}); });
  return enqueue(c10d::OpType::REDUCE, tensors, timeout_of(opts.timeout), [t = tensors[0], op, root, me](auto& c) {
    with_type(t.scalar_type(), [&]<class T>() {
      with_op<T>(op, t.scalar_type(), [&](auto o) { gsync::reduce(c, cspan_of<T>(t), me == root ? span_of<T>(t) : std::span<T>{}, o, root); });
    });
  });
}

c10::intrusive_ptr<c10d::Work> process_group::allgather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                                        const c10d::AllgatherOptions& opts) {
  check_tensors(inputs, "allgather");
  if (outputs.size() != 1 || outputs[0].size() != static_cast<std::size_t>(getSize()))
    refuse("allgather: expects one list of world-size output tensors");
  for (const auto& o : outputs[0]) {
    check_tensor(o, "allgather");
    check_same_type(o, inputs[0], "allgather");
  }
  auto outs = outputs[0];
  auto flat = flat_for(outs);
  return enqueue(c10d::OpType::ALLGATHER, outs, timeout_of(opts.timeout), [in = inputs[0], outs, flat](auto& c) {
    with_type(in.scalar_type(), [&]<class T>() { gsync::allgatherv(c, cspan_of<T>(in), span_of<T>(flat), counts_of(outs)); });
    copy_parts(flat, outs, true);
  });
}

c10::intrusive_ptr<c10d::Work> process_group::_allgather_base(at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  check_tensor(output, "_allgather_base");
  check_tensor(input, "_allgather_base");
  check_same_type(output, input, "_allgather_base");
  return enqueue(c10d::OpType::_ALLGATHER_BASE, {output}, timeout_of(opts.timeout), [output, input](auto& c) {
    with_type(input.scalar_type(), [&]<class T>() { gsync::allgather(c, cspan_of<T>(input), span_of<T>(output)); });
  });
}

c10::intrusive_ptr<c10d::Work> process_group::allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                                                  const c10d::AllgatherOptions& opts) {
  // outputs[r][i] receives rank r's inputs[i]: one allgatherv per input, in one job.
  check_tensors(inputs, "allgather_coalesced", false);
  if (outputs.size() != static_cast<std::size_t>(getSize())) refuse("allgather_coalesced: expects one output list per rank");
  std::vector<at::Tensor> all;
  for (const auto& l : outputs) {
    if (l.size() != inputs.size()) refuse("allgather_coalesced: every output list must have one tensor per input");
    for (std::size_t i = 0; i < l.size(); ++i) {
      check_tensor(l[i], "allgather_coalesced");
      check_same_type(l[i], inputs[i], "allgather_coalesced");
      all.push_back(l[i]);
    }
  }
  return enqueue(c10d::OpType::ALLGATHER_COALESCED, all, timeout_of(opts.timeout), [outputs, inputs](auto& c) {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      std::vector<at::Tensor> col;
      for (const auto& l : outputs) col.push_back(l[i]);
      auto flat = flat_for(col);
      with_type(inputs[i].scalar_type(), [&]<class T>() { gsync::allgatherv(c, cspan_of<T>(inputs[i]), span_of<T>(flat), counts_of(col)); });
      copy_parts(flat, col, true);
    }
  });
}

c10::intrusive_ptr<c10d::Work> process_group::gather(std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
                                                     const c10d::GatherOptions& opts) {
  check_tensors(inputs, "gather");
  const int root = static_cast<int>(opts.rootRank), me = getRank();
  std::vector<at::Tensor> outs;
  if (me == root) {
    if (outputs.size() != 1 || outputs[0].size() != static_cast<std::size_t>(getSize()))
      refuse("gather: the root expects one list of world-size output tensors");
    for (const auto& o : outputs[0]) {
      check_tensor(o, "gather");
      check_same_type(o, inputs[0], "gather");
      if (o.numel() != inputs[0].numel()) refuse("gather: every output tensor must have the input's size");
    }
    outs = outputs[0];
  } else if (!outputs.empty() && !outputs[0].empty()) {
    refuse("gather: only the root passes output tensors");
  }
  at::Tensor flat = me == root ? flat_for(outs) : at::Tensor();
  return enqueue(c10d::OpType::GATHER, outs, timeout_of(opts.timeout), [in = inputs[0], outs, flat, root, me](auto& c) {
    with_type(in.scalar_type(), [&]<class T>() { gsync::gather(c, cspan_of<T>(in), me == root ? span_of<T>(flat) : std::span<T>{}, root); });
    if (me == root) copy_parts(flat, outs, true);
  });
}

c10::intrusive_ptr<c10d::Work> process_group::scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                                      const c10d::ScatterOptions& opts) {
  check_tensors(outputs, "scatter");
  const int root = static_cast<int>(opts.rootRank), me = getRank();
  std::vector<at::Tensor> ins;
  if (me == root) {
    if (inputs.size() != 1 || inputs[0].size() != static_cast<std::size_t>(getSize()))
      refuse("scatter: the root expects one list of world-size input tensors");
    for (const auto& i : inputs[0]) {
      check_tensor(i, "scatter");
      check_same_type(i, outputs[0], "scatter");
      if (i.numel() != outputs[0].numel()) refuse("scatter: every input tensor must have the output's size");
    }
    ins = inputs[0];
  } else if (!inputs.empty() && !inputs[0].empty()) {
    refuse("scatter: only the root passes input tensors");
  }
  at::Tensor flat = me == root ? flat_for(ins) : at::Tensor();
  return enqueue(c10d::OpType::SCATTER, outputs, timeout_of(opts.timeout), [out = outputs[0], ins, flat, root, me](auto& c) {
    if (me == root) copy_parts(flat, ins, false);
    with_type(out.scalar_type(), [&]<class T>() { gsync::scatter(c, me == root ? cspan_of<T>(flat) : std::span<const T>{}, span_of<T>(out), root); });
  });
}

c10::intrusive_ptr<c10d::Work> process_group::reduce_scatter(std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
                                                             const c10d::ReduceScatterOptions& opts) {
  check_tensors(outputs, "reduce_scatter");
  if (inputs.size() != 1 || inputs[0].size() != static_cast<std::size_t>(getSize()))
    refuse("reduce_scatter: expects one list of world-size input tensors");
  for (const auto& i : inputs[0]) {
    check_tensor(i, "reduce_scatter");
    check_same_type(i, outputs[0], "reduce_scatter");
  }
  const auto op = opts.reduceOp.op_;
  with_type(outputs[0].scalar_type(), [&]<class T>() { with_op<T>(op, outputs[0].scalar_type(), [](auto) {}); });
  auto ins = inputs[0];
  auto flat = flat_for(ins);
  return enqueue(c10d::OpType::REDUCE_SCATTER, outputs, timeout_of(opts.timeout), [out = outputs[0], ins, flat, op](auto& c) {
    copy_parts(flat, ins, false);
    with_type(out.scalar_type(), [&]<class T>() {
      with_op<T>(op, out.scalar_type(), [&](auto o) { gsync::reduce_scatterv(c, cspan_of<T>(flat), span_of<T>(out), counts_of(ins), o); });
    });
  });
}

c10::intrusive_ptr<c10d::Work> process_group::_reduce_scatter_base(at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  check_tensor(output, "_reduce_scatter_base");
  check_tensor(input, "_reduce_scatter_base");
  check_same_type(output, input, "_reduce_scatter_base");
  const auto op = opts.reduceOp.op_;
  with_type(output.scalar_type(), [&]<class T>() { with_op<T>(op, output.scalar_type(), [](auto) {}); });
  return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, {output}, timeout_of(opts.timeout), [output, input, op](auto& c) {
    with_type(output.scalar_type(), [&]<class T>() {
      with_op<T>(op, output.scalar_type(), [&](auto o) { gsync::reduce_scatter(c, cspan_of<T>(input), span_of<T>(output), o); });
    });
  });
}

c10::intrusive_ptr<c10d::Work> process_group::alltoall_base(at::Tensor& output, at::Tensor& input, std::vector<int64_t>& output_splits,
                                                            std::vector<int64_t>& input_splits, const c10d::AllToAllOptions& opts) {
  check_tensor(output, "alltoall_base");
  check_tensor(input, "alltoall_base");
  check_same_type(output, input, "alltoall_base");
  const auto n = static_cast<std::size_t>(getSize());
  // Splits count rows (the first dimension); a row holds the elements of the other dimensions.
  auto counts = [n](const at::Tensor& t, const std::vector<int64_t>& splits, const char* which) {
    const std::int64_t rows = t.dim() == 0 ? 1 : t.size(0), row = rows == 0 ? 0 : elements(t) / rows;
    std::vector<std::size_t> c(n);
    if (splits.empty()) {
      if (rows % static_cast<std::int64_t>(n) != 0)
        refuse(std::string("alltoall_base: the ") + which + " has " + std::to_string(rows) + " rows, not a multiple of the world size");
      for (auto& x : c) x = static_cast<std::size_t>(rows / static_cast<std::int64_t>(n) * row);
    } else {
      if (splits.size() != n) refuse(std::string("alltoall_base: ") + which + " splits need one entry per rank");
      std::int64_t total = 0;
      for (std::size_t j = 0; j < n; ++j) {
        if (splits[j] < 0) refuse("alltoall_base: a negative split");
        c[j] = static_cast<std::size_t>(splits[j] * row);
        total += splits[j];
      }
      if (total != rows) refuse(std::string("alltoall_base: the ") + which + " splits add up to " + std::to_string(total) + " rows, the tensor has " + std::to_string(rows));
    }
    return c;
  };
  auto sc = counts(input, input_splits, "input"), rc = counts(output, output_splits, "output");
  return enqueue(c10d::OpType::ALLTOALL_BASE, {output}, timeout_of(opts.timeout), [output, input, sc, rc](auto& c) {
    with_type(input.scalar_type(), [&]<class T>() { gsync::alltoallv(c, cspan_of<T>(input), sc, span_of<T>(output), rc); });
  });
}

c10::intrusive_ptr<c10d::Work> process_group::alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                                       const c10d::AllToAllOptions& opts) {
  const auto n = static_cast<std::size_t>(getSize());
  if (outputs.size() != n || inputs.size() != n) refuse("alltoall: expects world-size lists of input and output tensors");
  check_tensors(outputs, "alltoall", false);
  check_tensors(inputs, "alltoall", false);
  for (std::size_t j = 0; j < n; ++j) {
    check_same_type(inputs[j], inputs[0], "alltoall");
    check_same_type(outputs[j], inputs[0], "alltoall");
  }
  auto fin = flat_for(inputs), fout = flat_for(outputs);
  return enqueue(c10d::OpType::ALLTOALL, outputs, timeout_of(opts.timeout), [outputs, inputs, fin, fout](auto& c) {
    copy_parts(fin, inputs, false);
    with_type(fin.scalar_type(), [&]<class T>() {
      gsync::alltoallv(c, cspan_of<T>(fin), counts_of(inputs), span_of<T>(fout), counts_of(outputs));
    });
    copy_parts(fout, outputs, true);
  });
}

c10::intrusive_ptr<c10d::Work> process_group::send(std::vector<at::Tensor>& tensors, int dst, int tag) {
  check_tensors(tensors, "send");
  return enqueue(c10d::OpType::SEND, tensors, 0ms, [t = tensors[0], dst, tag](auto& c) {
    with_type(t.scalar_type(), [&]<class T>() { gsync::send(c, cspan_of<T>(t), dst, tag); });
  });
}

c10::intrusive_ptr<c10d::Work> process_group::recv(std::vector<at::Tensor>& tensors, int src, int tag) {
  check_tensors(tensors, "recv");
  return enqueue(c10d::OpType::RECV, tensors, 0ms, [t = tensors[0], src, tag](auto& c) {
    with_type(t.scalar_type(), [&]<class T>() { gsync::recv(c, span_of<T>(t), src, tag); });
  }, std::make_shared<int>(src));
}

c10::intrusive_ptr<c10d::Work> process_group::recvAnysource(std::vector<at::Tensor>& tensors, int tag) {
  check_tensors(tensors, "recv");
  auto from = std::make_shared<int>(-1);
  return enqueue(c10d::OpType::RECVANYSOURCE, tensors, 0ms, [t = tensors[0], tag, from](auto& c) {
    with_type(t.scalar_type(), [&]<class T>() { *from = gsync::recv_any(c, span_of<T>(t), tag); });
  }, from);
}

c10::intrusive_ptr<c10d::Work> process_group::barrier(const c10d::BarrierOptions& opts) {
  return enqueue(c10d::OpType::BARRIER, {}, timeout_of(opts.timeout), [](auto& c) { gsync::barrier(c); });
}

c10::intrusive_ptr<c10d::ProcessGroup> create(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                              const std::chrono::duration<float>& timeout) {
  return c10::make_intrusive<process_group>(store, rank, size, std::chrono::duration_cast<std::chrono::milliseconds>(timeout));
}

}  // namespace gsync_torch
