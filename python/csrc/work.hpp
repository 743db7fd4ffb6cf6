#pragma once
// A c10d Work backed by a gsync request, and the thread that completes the Works' futures.
//
// Futures are completed on a thread of the process group's own (`completer`), not on gsync's
// engine thread: a future's callbacks (DDP's communication hooks) may issue further collectives,
// and gsync numbers an operation issued on its engine thread as part of a submit() job.

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <Python.h>
#include <pybind11/pybind11.h>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <gsync/core/error.hpp>
#include <gsync/core/request.hpp>

#include "step_meter.hpp"

namespace gsync_torch {

/// Completes futures in the order their operations finished, on its own thread.
class completer {
 public:
  completer() : thread_([s = s_] { loop(*s); }) {}
  completer(const completer&) = delete;
  completer& operator=(const completer&) = delete;
  /// Completes what is queued, then stops; waits with the GIL released (the thread may need it
  /// to drop a tensor, see ~process_group).
  ~completer() {
    {
      std::lock_guard lk(s_->m);
      s_->stop = true;
    }
    s_->cv.notify_one();
    if (std::this_thread::get_id() == thread_.get_id()) {
      thread_.detach();  // the last reference went on the thread itself, which owns the state too
      return;
    }
    std::optional<pybind11::gil_scoped_release> nogil;
    if (Py_IsInitialized() && PyGILState_Check()) nogil.emplace();
    thread_.join();
  }
  /// Queues the completion of `fut` with `outputs`, or with `error` when it is set.
  void post(c10::intrusive_ptr<c10::ivalue::Future> fut, std::vector<at::Tensor> outputs, std::exception_ptr error) {
    {
      std::lock_guard lk(s_->m);
      s_->q.push_back({std::move(fut), std::move(outputs), std::move(error)});
    }
    s_->cv.notify_one();
  }

 private:
  struct item {
    c10::intrusive_ptr<c10::ivalue::Future> fut;
    std::vector<at::Tensor> outputs;
    std::exception_ptr error;
  };
  struct state {
    std::mutex m;
    std::condition_variable cv;
    std::deque<item> q;
    bool stop = false;
  };
  static void loop(state& s) {
    for (;;) {
      std::optional<item> it;
      {
        std::unique_lock lk(s.m);
        s.cv.wait(lk, [&] { return s.stop || !s.q.empty(); });
        if (s.q.empty()) return;  // stopping, nothing left
        it.emplace(std::move(s.q.front()));
        s.q.pop_front();
      }
      // Unlocked, and the item dropped unlocked too: dropping a tensor may take the GIL.
      try {
        if (it->error) it->fut->setError(it->error);
        else it->fut->markCompleted(c10::IValue(it->outputs));
      } catch (...) {
        // a callback's failure stays with its future
      }
    }
  }
  std::shared_ptr<state> s_ = std::make_shared<state>();  // shared with the thread
  std::thread thread_;  // last: started once the state exists
};

/// One queued operation of the process group.
class work final : public c10d::Work {
 public:
  /// `source`: a receive's sender, written by its job before the request finishes (else null).
  /// `meter`, `id`: where the caller's waits for operation `id` are counted (step_meter.hpp).
  work(int rank, c10d::OpType type, gsync::request r, std::vector<at::Tensor> outputs, c10::intrusive_ptr<c10::ivalue::Future> fut,
       std::shared_ptr<int> source, std::shared_ptr<step_meter> meter, std::uint64_t id)
      : c10d::Work(rank, type), req_(std::move(r)), outputs_(std::move(outputs)), fut_(std::move(fut)), source_(std::move(source)),
        meter_(std::move(meter)), id_(id) {}

  bool isCompleted() override {
    try {
      return req_.test();
    } catch (...) {
      return true;
    }
  }
  bool isSuccess() const override {
    try {
      return req_.test();
    } catch (...) {
      return false;
    }
  }
  std::exception_ptr exception() const override {
    try {
      req_.test();
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  }
  /// Blocks until the operation finished (rethrowing gsync's error); with a timeout (not 0),
  /// fails with errc::timeout when it has not finished by then.
  bool wait(std::chrono::milliseconds timeout) override {
    struct account {  // the caller's time blocked here, also when the operation failed
      step_meter& m;
      std::uint64_t id;
      std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
      ~account() { m.waited(id, std::chrono::steady_clock::now() - t0); }
    } a{*meter_, id_};
    if (timeout.count() <= 0) {
      req_.wait();
      return true;
    }
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (!req_.test()) {
      if (std::chrono::steady_clock::now() >= until)
        throw gsync::error(gsync::errc::timeout, "gsync backend: Work.wait: the operation did not finish within " +
                                                     std::to_string(timeout.count()) + " ms");
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    return true;
  }
  void synchronize() override {}  // CPU tensors: nothing to order on a stream
  /// A finished receive's sender (torch's Work.source_rank()).
  int sourceRank() const override {
    if (!source_) throw gsync::error(gsync::errc::invalid_argument, "gsync backend: source_rank() is a receive's, and this Work is not one");
    if (!req_.test()) throw gsync::error(gsync::errc::invalid_argument, "gsync backend: source_rank() before the receive finished (wait() first)");
    return *source_;
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return fut_; }

 private:
  mutable gsync::request req_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> fut_;
  std::shared_ptr<int> source_;
  std::shared_ptr<step_meter> meter_;
  std::uint64_t id_;
};

}  // namespace gsync_torch
