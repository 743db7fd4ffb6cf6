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
#include <mutex>
#include <thread>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <gsync/core/error.hpp>
#include <gsync/core/request.hpp>

namespace gsync_torch {

/// Completes futures in the order their operations finished, on its own thread.
class completer {
 public:
  completer() : thread_([this] { loop(); }) {}
  completer(const completer&) = delete;
  completer& operator=(const completer&) = delete;
  ~completer() {
    {
      std::lock_guard lk(m_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  /// Queues the completion of `fut` with `outputs`, or with `error` when it is set.
  void post(c10::intrusive_ptr<c10::ivalue::Future> fut, std::vector<at::Tensor> outputs, std::exception_ptr error) {
    {
      std::lock_guard lk(m_);
      q_.push_back({std::move(fut), std::move(outputs), std::move(error)});
    }
    cv_.notify_one();
  }

 private:
  struct item {
    c10::intrusive_ptr<c10::ivalue::Future> fut;
    std::vector<at::Tensor> outputs;
    std::exception_ptr error;
  };
  void loop() {
    std::unique_lock lk(m_);
    for (;;) {
      cv_.wait(lk, [&] { return stop_ || !q_.empty(); });
      if (q_.empty()) return;  // stopping, nothing left
      item it = std::move(q_.front());
      q_.pop_front();
      lk.unlock();
      try {
        if (it.error) it.fut->setError(it.error);
        else it.fut->markCompleted(c10::IValue(it.outputs));
      } catch (...) {
        // a callback's failure stays with its future
      }
      lk.lock();
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<item> q_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

/// One queued operation of the process group.
class work final : public c10d::Work {
 public:
  work(int rank, c10d::OpType type, gsync::request r, std::vector<at::Tensor> outputs, c10::intrusive_ptr<c10::ivalue::Future> fut)
      : c10d::Work(rank, type), req_(std::move(r)), outputs_(std::move(outputs)), fut_(std::move(fut)) {}

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
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return fut_; }

 private:
  mutable gsync::request req_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> fut_;
};

}  // namespace gsync_torch
