#pragma once
/// \file
/// `gsync::request`: the handle of an operation that a communicator's progress engine runs in the
/// background (see core/progress_engine.hpp and async.hpp).
///
/// An asynchronous call (`gsync::allreduce_async`, `gsync::submit`, ...) queues its operation and
/// returns a request at once. `test()` asks, without blocking, whether the operation has finished;
/// `wait()` blocks until it has. Both rethrow the operation's exception when it failed, on every
/// call. A request is movable, not copyable; dropping it does not cancel the operation (the
/// communicator still runs it, as MPI_Request_free does).
///
/// Deadlines. Every transport wait inside an operation ends at the communicator's timeout, so an
/// operation always finishes, with `errc::timeout` at worst. `wait()` adds a backstop for work
/// that ignores deadlines (a `submit()` job blocked in user code): it throws `errc::timeout` once
/// the communicator's engine has made no progress (no operation started or ended) for the timeout
/// plus a small margin, and marks the communicator broken.
///
/// Non-templated: the state of an operation (`detail::op_state`) and what it shares with its
/// engine (`detail::engine_shared`) live here; the engine's thread and queue are in
/// core/progress_engine.hpp.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "gsync/core/error.hpp"
#include "gsync/detail/function_ref.hpp"

namespace gsync {

namespace detail {

/// What one progress engine shares with the requests it hands out (requests may outlive their
/// communicator, so this lives on the heap, owned jointly): the time of the last progress, the
/// identity of the engine thread, and the "broken" state that a failure leaves behind.
class engine_shared {
 public:
  using clock = std::chrono::steady_clock;  ///< the clock of every engine timestamp

  /// Records that an operation started or ended now.
  void tick() noexcept { progress_ns_.store(clock::now().time_since_epoch().count(), std::memory_order_release); }
  /// Time of the last start or end of an operation (the engine's creation before any).
  clock::time_point last_progress() const noexcept {
    return clock::time_point(clock::duration(progress_ns_.load(std::memory_order_acquire)));
  }

  /// Id of the engine thread (a default id before it starts).
  std::thread::id thread_id() const noexcept { return tid_.load(std::memory_order_acquire); }
  /// Sets the id of the engine thread (by the thread that starts it).
  void set_thread_id(std::thread::id id) noexcept { tid_.store(id, std::memory_order_release); }
  /// True on the engine thread.
  bool on_engine_thread() const noexcept { return thread_id() == std::this_thread::get_id(); }

  /// True once an operation failed: the transport state is then unknown and nothing more runs.
  bool broken() const noexcept { return broken_.load(std::memory_order_acquire); }

  /// Marks the communicator broken by a failure of kind `kind` described by `msg` (the first
  /// failure wins; later ones keep it).
  void mark_broken(errc kind, const std::string& msg) noexcept {
    std::lock_guard lk(m_);
    if (broken_.load(std::memory_order_relaxed)) return;
    try {
      msg_ = msg;
    } catch (...) {
      // out of memory while copying a message: keep the code, lose the words
    }
    kind_ = kind;
    broken_.store(true, std::memory_order_release);
  }

  /// Marks the communicator broken by the exception `e` (a gsync::error keeps its code; anything
  /// else counts as `errc::aborted`).
  void mark_broken(const std::exception_ptr& e) noexcept {
    try {
      std::rethrow_exception(e);
    } catch (const error& x) {
      mark_broken(x.kind(), x.what());
    } catch (const std::exception& x) {
      mark_broken(errc::aborted, std::string("an operation threw: ") + x.what());
    } catch (...) {
      mark_broken(errc::aborted, "an operation threw an exception that is not a std::exception");
    }
  }

  /// The error every operation after the failure gets: the original code, and a message that
  /// names the original failure.
  error broken_error() const {
    std::lock_guard lk(m_);
    return error(kind_, "communicator broken by an earlier failure: " + msg_);
  }

 private:
  std::atomic<clock::rep> progress_ns_{clock::now().time_since_epoch().count()};
  std::atomic<std::thread::id> tid_{};
  std::atomic<bool> broken_{false};
  mutable std::mutex m_;  // guards kind_ and msg_
  errc kind_ = errc::aborted;
  std::string msg_;
};

/// State of one queued operation, shared by the engine's queue and the request. Derived classes
/// (core/progress_engine.hpp) hold the work itself and implement `run`.
class op_state {
 public:
  using clock = std::chrono::steady_clock;  ///< the clock of started_at / finished_at

  /// An operation named `what` (a string literal, for messages) of the engine `eng`, whose
  /// waits use the communicator's timeout `timeout` as of issue.
  op_state(std::shared_ptr<engine_shared> eng, std::chrono::milliseconds timeout, const char* what)
      : eng_(std::move(eng)), timeout_(timeout), what_(what) {}
  op_state(const op_state&) = delete;
  op_state& operator=(const op_state&) = delete;
  virtual ~op_state() = default;

  /// Runs the operation on the communicator `owner` (engine thread, or inline). Throws on failure.
  virtual void run(void* owner) = 0;
  /// Called instead of `run` when the engine drops the operation without running it (the
  /// communicator is broken, or being destroyed): work that holds a resource outside the process
  /// (a CUDA stream waiting for the operation) lets go of it here.
  virtual void skipped() noexcept {}

  /// Records the start time (engine, before `run`).
  void mark_started() noexcept { started_ = clock::now(); }

  /// Records the outcome (`e` null on success), wakes every waiter, then runs the completion
  /// callbacks (`on_finish`). Called once.
  void finish(std::exception_ptr e) noexcept {
    std::vector<detail::shared_function<void(std::exception_ptr)>> then;
    {
      std::lock_guard lk(m_);
      error_ = std::move(e);
      finished_ = clock::now();
      if (started_ == clock::time_point{}) started_ = finished_;
      done_.store(true, std::memory_order_release);
      then.swap(then_);
    }
    cv_.notify_all();
    for (auto& f : then) call_quietly(f);
  }
  /// Calls `f(error)` (null on success) once the operation has finished: at once, on this
  /// thread, if it has; else on the thread that finishes it (the engine's, after the waiters are
  /// woken). `f` should be short; an exception it throws is dropped.
  void on_finish(detail::shared_function<void(std::exception_ptr)> f) {
    {
      std::lock_guard lk(m_);
      if (!done_.load(std::memory_order_acquire)) {
        then_.push_back(std::move(f));
        return;
      }
    }
    call_quietly(f);
  }

  /// True once finished; rethrows the operation's exception if it failed.
  bool test() {
    if (!done_.load(std::memory_order_acquire)) return false;
    if (error_) std::rethrow_exception(error_);
    return true;
  }

  /// Blocks until finished (see the file comment for the deadline); rethrows the operation's
  /// exception if it failed.
  void wait() {
    if (test()) return;
    if (eng_->on_engine_thread())
      throw error(errc::invalid_argument, std::string("wait: called inside a submit() job on a ") + what_ +
                                              " of the same communicator, which runs after the job: this would deadlock");
    std::unique_lock lk(m_);
    const auto begin = clock::now();
    const auto margin = timeout_ / 8 + std::chrono::milliseconds(50);
    while (!done_.load(std::memory_order_acquire)) {
      const auto dl = std::max(begin, eng_->last_progress()) + timeout_ + margin;
      if (clock::now() >= dl) {
        const std::string msg = std::string("wait: ") + what_ + " not finished, and the communicator's engine made no progress for " +
                                std::to_string(timeout_.count()) +
                                " ms (the timeout): a job that blocks without a deadline, or an engine that cannot run";
        eng_->mark_broken(errc::timeout, msg);
        throw error(errc::timeout, msg);
      }
      cv_.wait_until(lk, dl);
    }
    lk.unlock();
    test();
  }

  /// When the engine began the operation (valid once finished).
  clock::time_point started_at() const noexcept { return done_.load(std::memory_order_acquire) ? started_ : clock::time_point{}; }
  /// When the operation ended (valid once finished).
  clock::time_point finished_at() const noexcept { return done_.load(std::memory_order_acquire) ? finished_ : clock::time_point{}; }

 private:
  std::shared_ptr<engine_shared> eng_;
  std::chrono::milliseconds timeout_;
  const char* what_;
  std::mutex m_;
  std::condition_variable cv_;
  std::atomic<bool> done_{false};
  std::exception_ptr error_;
  clock::time_point started_{}, finished_{};
  std::vector<detail::shared_function<void(std::exception_ptr)>> then_;  // on_finish's callbacks, until finished

  void call_quietly(detail::shared_function<void(std::exception_ptr)>& f) noexcept {
    try {
      f(error_);
    } catch (...) {
      // a completion callback's failure is its own; the operation's outcome stands
    }
  }
};

/// An operation that has already finished with `e` when it is created (a communicator that is
/// already broken refuses new work this way, so that the error surfaces at wait()).
class finished_op final : public op_state {
 public:
  /// A finished operation named `what` of engine `eng` that failed with `e`.
  finished_op(std::shared_ptr<engine_shared> eng, const char* what, std::exception_ptr e)
      : op_state(std::move(eng), std::chrono::milliseconds(1), what) {
    finish(std::move(e));
  }
  void run(void*) override {}  ///< nothing to run
};

}  // namespace detail

/// Handle of an asynchronous operation (returned by `allreduce_async`, `submit`, ...).
///
/// Thread safety: `test()`, `wait()` and the time queries may be called from any thread, also
/// concurrently; moving or destroying a request needs the usual exclusive access.
/// Buffers passed to the operation must stay alive and unchanged (and an output unread) until the
/// request reports that the operation finished.
class request {
 public:
  request() = default;  ///< an empty handle: `valid() == false`
  /// A handle of the operation `s` (used by the communicator).
  explicit request(std::shared_ptr<detail::op_state> s) noexcept : s_(std::move(s)) {}
  request(request&&) noexcept = default;             ///< moves the handle
  request& operator=(request&&) noexcept = default;  ///< moves the handle
  request(const request&) = delete;
  request& operator=(const request&) = delete;

  /// True when the handle refers to an operation.
  bool valid() const noexcept { return s_ != nullptr; }

  /// Non-blocking: true once the operation finished; if it failed, throws its exception (on
  /// this call and every later one). An empty handle counts as finished (as MPI_REQUEST_NULL).
  bool test() { return !s_ || s_->test(); }

  /// Blocks until the operation finished; throws its exception if it failed. A wait during which
  /// the communicator's engine makes no progress for longer than the communicator's timeout
  /// throws `errc::timeout` (the operation's own transport deadline normally fires first). An
  /// empty handle returns at once.
  void wait() {
    if (s_) s_->wait();
  }
  /// Calls `f(error)` once the operation has finished, with its exception (null on success): at
  /// once on this thread if it already has (an empty handle counts as finished), else on the
  /// communicator's engine thread as it ends the operation, after `wait()`ers are woken. For
  /// completing a future (PyTorch's `Work::getFuture`, a task system's continuation); `f` must
  /// not block or start gsync operations, and an exception it throws is dropped.
  template <class F>
    requires std::is_invocable_v<F&, std::exception_ptr>
  void on_finish(F&& f) {
    if (!s_) {
      try {
        f(std::exception_ptr{});
      } catch (...) {
      }
      return;
    }
    s_->on_finish(detail::shared_function<void(std::exception_ptr)>(std::forward<F>(f)));
  }

  /// When the engine began the operation; meaningful once it finished (a default time point
  /// before, and for an empty handle).
  std::chrono::steady_clock::time_point started_at() const noexcept { return s_ ? s_->started_at() : std::chrono::steady_clock::time_point{}; }
  /// When the operation ended; meaningful once it finished (a default time point before).
  std::chrono::steady_clock::time_point finished_at() const noexcept { return s_ ? s_->finished_at() : std::chrono::steady_clock::time_point{}; }

 private:
  std::shared_ptr<detail::op_state> s_;
};

}  // namespace gsync
