#pragma once
/// \file
/// `detail::progress_engine`: the one background thread of a communicator that runs its queued
/// operations, one at a time, in the order they were issued.
///
/// How it works. A communicator creates its engine on the first asynchronous call (one that never
/// goes asynchronous has no engine and no extra thread). The issuing thread numbers an operation
/// (so issue order is wire order on every rank), wraps it into a `queued_op` (one allocation that
/// is also the request's state and holds the callable, reached through a few plain functions:
/// `job_ops`) and appends it to a FIFO queue; the engine thread pops it, runs it with the
/// communicator looked up through the engine (`owner`, which a move of the communicator updates
/// while the engine is idle), and records the outcome in the request.
///
/// `pending` counts operations queued or running. A synchronous call that finds it zero runs
/// inline on the caller's thread with no hop and no allocation: only the issuing thread adds
/// work, so nothing can start behind its back. The engine decrements `pending` only after the
/// operation has stopped touching the transport and its request is marked finished, so an idle
/// engine means every request it handed out has finished.
///
/// Failures. When an operation fails, the transport may hold partial frames, so the engine marks
/// the communicator broken (`engine_shared`): every later operation fails at once with the same
/// error code and "communicator broken by an earlier failure: <original message>".
///
/// Shutdown. The destructor lets queued work run until the communicator's timeout has passed
/// since the shutdown began (each operation is bounded by its own transport deadline); jobs still
/// queued then fail with `errc::aborted` without running; then it joins the thread.
///
/// Non-templated except for the few lines that wrap a callable into a queued operation (`job_ops_of`).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>

#include "gsync/core/error.hpp"
#include "gsync/core/request.hpp"

namespace gsync::detail {

/// What a queued operation knows of the callable it runs: four plain functions, made once per
/// callable type. Everything else of a queued operation (its allocation, the request's state, the
/// queue) is one non-templated type, so each collective call site generates these few lines and
/// not a class with its own virtual table and shared-pointer control block (that chain was about
/// a third of a sweep test's compile time: benchmarks/results/layering/compile_time.md).
struct job_ops {
  void* (*emplace)(void* buf, void* src);  ///< moves the callable at `src` into `buf` (or the heap); returns it
  void (*run)(void* job, void* owner);     ///< runs it on the communicator `owner`
  void (*skipped)(void* job) noexcept;     ///< tells it it will not run; null when it has no `skipped()`
  void (*destroy)(void* job) noexcept;     ///< destroys it (and frees it when it was on the heap)
};

/// Bytes of a queued operation's inline room for its callable; a larger one goes on the heap.
/// Every collective's job (pointers, a count, an operator, a ticket) fits.
inline constexpr std::size_t job_inline_bytes = 96;

/// True when a callable of type F lives inside the queued operation.
template <class F>
inline constexpr bool job_fits_inline = sizeof(F) <= job_inline_bytes && alignof(F) <= alignof(std::max_align_t);

/// The `job_ops` of callable type F (`void(void* owner)`, with an optional `skipped()`).
template <class F>
inline constexpr job_ops job_ops_of{
    [](void* buf, void* src) -> void* {
      if constexpr (job_fits_inline<F>) return ::new (buf) F(std::move(*static_cast<F*>(src)));
      else return new F(std::move(*static_cast<F*>(src)));
    },
    [](void* job, void* owner) { (*static_cast<F*>(job))(owner); },
    [] {
      if constexpr (requires(F& f) { f.skipped(); }) return +[](void* job) noexcept { static_cast<F*>(job)->skipped(); };
      else return static_cast<void (*)(void*) noexcept>(nullptr);
    }(),
    [](void* job) noexcept {
      if constexpr (job_fits_inline<F>) static_cast<F*>(job)->~F();
      else delete static_cast<F*>(job);
    }};

/// A job `f(Owner&)` as the engine runs it (`void(void* owner)`); forwards `skipped()` when F has it.
/// \tparam Owner the communicator type. \tparam F the callable.
template <class Owner, class F>
struct bound_job {
  F f;  ///< the callable
  void operator()(void* owner) { f(*static_cast<Owner*>(owner)); }  ///< runs it on `owner`
  /// Tells it it will not run.
  void skipped() noexcept
    requires requires(F& g) { g.skipped(); }
  {
    f.skipped();
  }
};

/// A queued operation: the request's state plus the callable it runs, erased to `job_ops`.
class queued_op final : public op_state {
 public:
  /// Operation named `what` of engine `eng` with wait timeout `timeout`, running the callable at
  /// `src` (moved in; the caller still destroys the moved-from object) through `ops`.
  queued_op(std::shared_ptr<engine_shared> eng, std::chrono::milliseconds timeout, const char* what, const job_ops& ops,
            void* src)
      : op_state(std::move(eng), timeout, what), ops_(&ops), job_(ops.emplace(buf_, src)) {}
  ~queued_op() override { ops_->destroy(job_); }
  void run(void* owner) override { ops_->run(job_, owner); }  ///< runs the work on communicator `owner`
  /// Tells the work it will not run, when it wants to know (a `skipped()` member).
  void skipped() noexcept override {
    if (ops_->skipped) ops_->skipped(job_);
  }

 private:
  const job_ops* ops_;
  alignas(std::max_align_t) std::byte buf_[job_inline_bytes];
  void* job_;
};

/// One communicator's background thread and FIFO queue of operations.
class progress_engine {
 public:
  using clock = std::chrono::steady_clock;  ///< the clock of deadlines

  /// An engine (no thread yet) for the communicator at `owner`.
  explicit progress_engine(void* owner) : owner_(owner), shared_(std::make_shared<engine_shared>()) {}
  progress_engine(const progress_engine&) = delete;
  progress_engine& operator=(const progress_engine&) = delete;
  /// Drains and joins (see `shutdown`), with a 300 s bound if `shutdown` was not called first.
  ~progress_engine() { shutdown(std::chrono::seconds(300)); }

  /// The state shared with requests.
  const std::shared_ptr<engine_shared>& shared() const noexcept { return shared_; }
  /// True when no operation is queued or running (as seen by the issuing thread).
  bool idle() const noexcept { return pending_.load(std::memory_order_acquire) == 0; }
  /// True on the engine thread (inside a queued operation).
  bool on_engine_thread() const noexcept { return shared_->on_engine_thread(); }
  /// True once an operation failed.
  bool broken() const noexcept { return shared_->broken(); }
  /// Throws the error that operations get after the failure.
  [[noreturn]] void throw_broken() const { throw shared_->broken_error(); }

  /// An operation named `what` whose waits use `timeout`, running the callable at `job` (moved
  /// into the operation; the caller still destroys the moved-from object) through `ops`
  /// (`job_ops_of<F>`, F a callable `void(void* owner)`). The caller then either queues it
  /// (`enqueue`) or runs it inline.
  std::shared_ptr<op_state> make_op(const char* what, std::chrono::milliseconds timeout, const job_ops& ops, void* job) const {
    return std::make_shared<queued_op>(shared_, timeout, what, ops, job);
  }

  /// Appends `op` to the queue, starting the thread on first use. Throws `errc::system` if the
  /// thread cannot be started. Called by the issuing thread only.
  void enqueue(std::shared_ptr<op_state> op) {
    std::unique_lock lk(m_);
    if (stop_) throw error(errc::aborted, "progress engine: the communicator is being destroyed");
    if (!thread_.joinable()) {
      try {
        thread_ = std::thread([this] { loop(); });  // blocks on m_ until we release it below
      } catch (const std::system_error& e) {
        throw error(errc::system, std::string("progress engine: cannot start its thread: ") + e.what());
      }
      shared_->set_thread_id(thread_.get_id());
    }
    queue_.push_back(std::move(op));
    pending_.fetch_add(1, std::memory_order_acq_rel);
    lk.unlock();
    work_cv_.notify_one();
  }

  /// Runs `op` here and now (the caller is the engine thread inside a job, so this keeps issue
  /// order): records the outcome in `op`, marking the communicator broken on failure.
  void run_inline(op_state& op, void* owner) noexcept {
    op.mark_started();
    std::exception_ptr err;
    try {
      op.run(owner);
    } catch (...) {
      err = std::current_exception();
      shared_->mark_broken(err);
    }
    op.finish(std::move(err));
  }

  /// Points later operations at the communicator's new address. Call only while idle.
  void rebind(void* owner) noexcept {
    std::lock_guard lk(m_);
    owner_ = owner;
  }

  /// Blocks until nothing is queued or running. If the engine makes no progress for `timeout`,
  /// marks the communicator broken (queued operations then fail without running) and goes on
  /// waiting for the running one, which its own deadline ends (a `submit()` job blocked forever in
  /// user code blocks this too, as a thread that never returns blocks `join`).
  void wait_idle(std::chrono::milliseconds timeout) noexcept {
    if (idle() || on_engine_thread()) return;
    std::unique_lock lk(m_);
    auto begin = clock::now();
    while (pending_.load(std::memory_order_acquire) != 0) {
      const auto dl = std::max(begin, shared_->last_progress()) + timeout;
      if (clock::now() >= dl) {
        shared_->mark_broken(errc::timeout, "the progress engine made no progress for " + std::to_string(timeout.count()) +
                                                " ms while the communicator waited to become idle");
        begin = clock::now();
      }
      idle_cv_.wait_until(lk, dl);
    }
  }

  /// Stops the engine: queued work runs until `timeout` after this call, the rest fails with
  /// `errc::aborted`; then joins the thread. Idempotent. Must not be called from the engine thread.
  void shutdown(std::chrono::milliseconds timeout) noexcept {
    {
      std::lock_guard lk(m_);
      if (!thread_.joinable() || stop_) return;
      stop_ = true;
      stop_deadline_ = clock::now() + timeout;
    }
    work_cv_.notify_all();
    if (on_engine_thread()) {
      thread_.detach();  // destroyed from inside its own job: a usage error; never terminate
      return;
    }
    thread_.join();
  }

 private:
  void loop() noexcept {
    std::unique_lock lk(m_);
    for (;;) {
      work_cv_.wait(lk, [&] { return !queue_.empty() || stop_; });
      if (queue_.empty()) return;  // stopping and drained
      std::shared_ptr<op_state> op = std::move(queue_.front());
      queue_.pop_front();
      void* const owner = owner_;
      const bool late = stop_ && clock::now() > stop_deadline_;
      lk.unlock();

      op->mark_started();
      shared_->tick();
      std::exception_ptr err;
      if (shared_->broken()) {
        err = std::make_exception_ptr(shared_->broken_error());
        op->skipped();
      } else if (late) {
        op->skipped();
        err = std::make_exception_ptr(error(errc::aborted, "operation not run: the communicator was destroyed and its queued "
                                                           "work did not finish within the timeout"));
      } else {
        try {
          op->run(owner);
        } catch (...) {
          err = std::current_exception();
          shared_->mark_broken(err);  // before `pending` drops, so an inline call sees it
        }
      }
      shared_->tick();
      op->finish(std::move(err));  // before `pending` drops: once idle, every request is finished
      op.reset();                  // the work (and anything it captured) goes away outside the lock

      lk.lock();
      pending_.fetch_sub(1, std::memory_order_acq_rel);
      idle_cv_.notify_all();
    }
  }

  std::mutex m_;                        // guards queue_, owner_, stop_, stop_deadline_, thread_
  std::condition_variable work_cv_;     // work queued, or stop
  std::condition_variable idle_cv_;     // an operation ended
  std::deque<std::shared_ptr<op_state>> queue_;
  std::atomic<std::size_t> pending_{0};  // queued + running
  void* owner_;
  bool stop_ = false;
  clock::time_point stop_deadline_{};
  std::shared_ptr<engine_shared> shared_;
  std::thread thread_;
};

}  // namespace gsync::detail
