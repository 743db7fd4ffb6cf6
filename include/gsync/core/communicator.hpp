#pragma once
/// \file
/// `gsync::communicator<Transport>`: a group of ranks connected by a transport, plus the settings
/// and state every collective needs (timeout, segment size, operation sequence number, logger).
/// Movable, not copyable. Collectives are free functions taking a communicator (allreduce.hpp).
///
/// Asynchronous operations (async.hpp) run on the communicator's progress engine
/// (core/progress_engine.hpp), a thread created on the first asynchronous call. `execute` runs a
/// synchronous operation inline when the engine is idle (or absent) and otherwise queues it behind
/// the pending ones and waits; `issue` queues an asynchronous one and returns its request.
///
/// Thread safety: one user thread issues operations on a communicator (collectives, *_async,
/// submit, setters, move, destruction), as NCCL and MPI_THREAD_FUNNELED require; the engine thread
/// is internal; requests may be tested and waited on from any thread.
///
/// Timeouts: every blocking wait of an operation ends at the timeout in force when the operation
/// was issued: the communicator's (`set_timeout`, GSYNC_TIMEOUT_S), or a per-call one set for the
/// calls issued while a `with_timeout` guard lives.
///
/// Abort: `abort(reason)` may be called from any thread (a watchdog, a signal-handling thread):
/// the running operation fails at once with `errc::aborted`, queued and later ones fail without
/// running, and the transport tells the peers (best effort), whose pending operations then fail
/// naming this rank instead of waiting for their timeouts.
///
/// Observability: every operation is counted (`counters()`: calls, bytes, time and failures per
/// kind) and, with `GSYNC_TRACE=path`, written as one span to a Chrome-trace timeline per rank
/// (core/trace.hpp; `trace()` gives the writer, for spans of the user's own, such as steps).
///
/// Operation numbers are assigned at issue, on the issuing thread, so that issue order is wire
/// order on every rank (core/op_numbering.hpp).

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <type_traits>
#include <mutex>
#include <new>
#include <system_error>
#include <span>
#include <string>
#include <vector>

#include "gsync/core/choice_memo.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/config.hpp"
#include "gsync/core/counters.hpp"
#include "gsync/core/links.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/health.hpp"
#include "gsync/core/log.hpp"
#include "gsync/core/memory_registration.hpp"
#include "gsync/core/op_numbering.hpp"
#include "gsync/core/shrink_terms.hpp"
#include "gsync/core/progress_engine.hpp"
#include "gsync/core/request.hpp"
#include "gsync/core/timeout_guard.hpp"
#include "gsync/core/trace.hpp"
#include "gsync/detail/aligned_buffer.hpp"

namespace gsync {

namespace bootstrap {
struct launch_info;  // bootstrap/launch_env.hpp: what joining a job needs (join, bootstrap/join.hpp)
}

/// What an operation carries from issue to run: its number and the timeout in force at issue.
struct op_ticket {
  std::uint64_t seq = 0;                 ///< operation number (`communicator::next_seq`)
  std::chrono::milliseconds timeout{0};  ///< deadline length of each of its waits
};

/// A transport that can be aborted from another thread (`x.abort(reason)`, thread-safe, noexcept).
/// \tparam X a transport type.
template <class X>
concept abortable_transport = requires(X& x, const std::string& why) {
  { x.abort(why) } noexcept;
};

/// A transport that registers user buffers with its RDMA adapters, for sends from them without a
/// copy (`x.register_memory(bytes)`; core/memory_registration.hpp).
/// \tparam X a transport type.
template <class X>
concept registering_transport = requires(X& x, std::span<const std::byte> b) {
  { x.register_memory(b) } -> std::same_as<memory_registration>;
};

/// A transport that wants to hear when an operation has ended (on the thread that ran it), e.g.
/// to withdraw a stall record it published while the operation waited.
template <class X>
concept op_aware_transport = requires(X& x) {
  { x.op_finished() } noexcept;
};

/// A group of ranks over transport `X`.
/// \tparam X a type satisfying `gsync::transport_policy`.
template <transport_policy X>
class communicator {
 public:
  using transport_type = X;  ///< the transport policy

  /// Wraps an established transport endpoint.
  explicit communicator(std::unique_ptr<X> x, config cfg = config::from_env(), int local_rank = -1)
      : communicator(std::move(x), std::move(cfg), local_rank, nullptr, true) {}

 private:
  // `own_trace`: open this rank's timeline (GSYNC_TRACE); a split shares its parent's (`trace`).
  communicator(std::unique_ptr<X> x, config cfg, int local_rank, std::shared_ptr<trace_writer> trace, bool own_trace)
      : x_(std::move(x)), cfg_(std::move(cfg)), log_(x_->rank()), local_rank_(local_rank < 0 ? x_->rank() : local_rank),
        scratch_(detail::make_aligned_bytes(scratch_bytes)), trace_(own_trace ? trace_writer::from_env(x_->rank()) : std::move(trace)),
        engine_(std::make_unique<detail::progress_engine>(this)) {
    if (cfg_.deterministic && x_->topo().links()) {  // the links as assumed or given, never as measured
      fixed_placement_ = std::make_shared<topology>(x_->topo());
      fixed_placement_->set_links(detail::override_links({}, cfg_.transport.net_gbps, cfg_.transport.net_latency_us));
    }
    if (!local_costs_of(*x_).declared && x_->rank() == 0)
      log_.warn("transport '" + std::string(x_->name()) +
                "' declares no cost model (costed_transport or transport_traits<X>::local_costs): the automatic choice of "
                "algorithms assumes loopback TCP");
  }

 public:

  /// Joins the job described by the environment (see bootstrap/launch_env.hpp and README) — for
  /// transports that can bootstrap themselves, such as TCP. Defined with the set-up code, in
  /// bootstrap/join.hpp (gsync/communicator.hpp includes it).
  static communicator from_env()
    requires std::constructible_from<X, const bootstrap::launch_info&, std::chrono::milliseconds, logger>;

  /// Joins the ranks of an MPI communicator (`MPI_COMM_WORLD` or any split of it), collectively
  /// over `mpi_comm`: ranks and addresses come through MPI (no master address or port; any number
  /// at once), and rank 0 draws a fresh job key and broadcasts it. Needs `#include <gsync/mpi.hpp>`.
  /// \tparam MpiComm `MPI_Comm` (a pointer in Open MPI, an integer in MPICH).
  template <class MpiComm>
  static communicator from_mpi(MpiComm mpi_comm, config cfg = config::from_env())
    requires std::constructible_from<X, const bootstrap::launch_info&, std::chrono::milliseconds, logger>;

  /// Joins the job described by `li` (rank, size, store address) with settings `cfg`, used as
  /// given, its transport settings (`cfg.transport`) included: the environment is not read here
  /// (pass `config::from_env()`, possibly changed, to start from it).
  static communicator join(const bootstrap::launch_info& li, config cfg)
    requires std::constructible_from<X, const bootstrap::launch_info&, std::chrono::milliseconds, logger>;

  /// Moves the communicator. If asynchronous work is pending, waits until it has finished first
  /// (every operation ends by its deadline), so no queued job ever sees the moved-from object.
  communicator(communicator&& o) noexcept {
    o.quiesce();
    take(o);
  }
  /// Stops this communicator's engine (as the destructor), then moves `o` in as the move constructor.
  communicator& operator=(communicator&& o) noexcept {
    if (this != &o) {
      stop_engine();
      o.quiesce();
      take(o);
    }
    return *this;
  }
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;
  /// Lets queued asynchronous work finish (for at most the timeout; what is still queued then
  /// fails with `errc::aborted`), joins the engine thread, then closes the transport. Requests
  /// that outlive the communicator stay valid. Must not run inside one of its own submit() jobs.
  ~communicator() { stop_engine(); }

  /// This rank, 0 <= rank < size. Throws `errc::invalid_argument` on a null communicator.
  int rank() const {
    if (!x_) [[unlikely]] null_use();
    return x_->rank();
  }
  /// Number of ranks. Throws `errc::invalid_argument` on a null communicator.
  int size() const {
    if (!x_) [[unlikely]] null_use();
    return x_->size();
  }
  int local_rank() const noexcept { return local_rank_; }  ///< rank among this host's processes of this communicator
  /// False for the null communicator `split` returns to a rank that passed a negative color (and
  /// for a moved-from one): every call on it but `valid` and destruction throws
  /// `errc::invalid_argument`.
  bool valid() const noexcept { return x_ != nullptr; }
  /// The communicator's identity on the wire: 0 for the job's world, derived by `split` for the
  /// others (messages name a communicator by it).
  std::uint64_t id() const noexcept {
    if constexpr (splittable_transport<X>) return x_ ? static_cast<std::uint64_t>(x_->comm_id()) : 0;
    else return 0;
  }

  /// Splits this communicator, as `MPI_Comm_split` / `ncclCommSplit`: collective over this
  /// communicator (every rank calls it, in the same order relative to its other collectives).
  /// Ranks passing the same non-negative `color` form one new communicator, ordered by `key`,
  /// then by their rank here; a rank passing a negative color gets a null communicator
  /// (`valid()` false). The new communicator has this one's type and settings (timeout, segment
  /// size), shares its connections (no new store, port or connection), numbers its own
  /// operations and stamps its identity on its frames, so that it may be used at the same time as
  /// this one and its siblings, from other threads; it can be split again and may outlive this
  /// one. Defined in gsync/split.hpp (included by every collective's header).
  communicator split(int color, int key = 0)
    requires splittable_transport<X>;

  /// After a failure (`peer_lost`, `aborted`, a timeout, or `health()` reporting a lost peer), a
  /// communicator of the same type and settings over the ranks still alive, in their old order:
  /// collective over the survivors. They go on only as a quorum (a majority, half with rank 0, or
  /// `opt.min_size`); a rank left out fails with `errc::excluded`. A `split` communicator shrinks
  /// to its own survivors. Rules and example: gsync/recovery.hpp, core/shrink_terms.hpp.
  communicator shrink(const shrink_options& opt = {})
    requires shrinkable_transport<X>;
  /// What the shrink that made this communicator agreed (core/shrink_terms.hpp): the collectives
  /// of the old one completed by every member, this rank's own count, the old ranks. Empty
  /// (`old_size` 0) for a communicator not made by a shrink.
  const shrink_report& last_shrink() const noexcept { return shrunk_; }

  /// Whether this communicator can still be used, without blocking and without talking to the
  /// peers; callable from any thread. Not `ok()` once an operation failed, after `abort()`, or
  /// when the transport's liveness checks found a peer stopped, vanished or exited meanwhile
  /// (the TCP / shared-memory transport: within GSYNC_LIVENESS_S, also between operations;
  /// core/health.hpp). The next operation then fails with that kind and words. Defined in
  /// gsync/recovery.hpp (included by every collective's header).
  health_report health() const noexcept;

  /// Deadline length of every blocking wait.
  std::chrono::milliseconds timeout() const noexcept { return cfg_.timeout; }
  /// Sets the deadline length of every later blocking wait (must be positive). Waits until pending
  /// asynchronous operations have finished (they read the settings while they run).
  void set_timeout(std::chrono::milliseconds t) {
    if (t.count() <= 0) throw error(errc::invalid_argument, "set_timeout: timeout must be positive");
    quiesce();
    cfg_.timeout = t;
  }
  /// Per-call timeout: operations issued on this communicator while the returned guard lives
  /// (synchronous or asynchronous) use `t` instead of the communicator's timeout; the guard's end
  /// restores the previous value (guards nest). Unlike `set_timeout`, it never waits for pending
  /// work: operations issued earlier keep their own timeouts.
  /// \code
  ///   { auto g = comm.with_timeout(std::chrono::milliseconds(200)); gsync::barrier(comm); }
  /// \endcode
  [[nodiscard]] timeout_guard with_timeout(std::chrono::milliseconds t) {
    if (t.count() <= 0) throw error(errc::invalid_argument, "with_timeout: timeout must be positive");
    return timeout_guard(call_timeout_ms_, call_timeout_ms_.exchange(t.count(), std::memory_order_relaxed));
  }
  /// The timeout an operation issued now gets: the innermost `with_timeout`, else the communicator's.
  std::chrono::milliseconds issue_timeout() const noexcept {
    const std::int64_t c = call_timeout_ms_.load(std::memory_order_relaxed);
    return c > 0 ? std::chrono::milliseconds(c) : cfg_.timeout;
  }

  /// Aborts the communicator; callable from any thread, at any time until its destruction (not
  /// concurrently with a move). The operation running now fails promptly with `errc::aborted`
  /// naming `reason`, as does every queued and later one, on this rank; the transport also tells
  /// the peers (best effort: they fail with `errc::aborted` naming this rank instead of waiting
  /// for their timeouts). Idempotent; an aborted communicator can only be destroyed.
  void abort(const std::string& reason = "aborted by the application") noexcept {
    if (aborted_.exchange(true, std::memory_order_acq_rel)) return;
    std::string msg;
    try {
      msg = "rank " + std::to_string(x_ ? x_->rank() : -1) + ": communicator aborted: " + reason;
    } catch (...) {
    }
    if (engine_) engine_->shared()->mark_broken(errc::aborted, msg);
    if constexpr (abortable_transport<X>) {
      if (x_) x_->abort(msg);
    }
  }
  /// True once `abort` was called.
  bool aborted() const noexcept { return aborted_.load(std::memory_order_acquire); }

  /// Registers `buf` for sends without a copy between hosts, as ncclCommRegister does: while the
  /// handle lives, payloads from inside it go from where they lie to the RDMA adapter; its end
  /// deregisters. The buffer must stay allocated while the handle lives (a registration pins the
  /// pages it had: core/memory_registration.hpp). Local to this rank, not collective; waits until
  /// pending asynchronous operations have finished. Where no link registers memory (one host,
  /// TCP, shared memory), it registers nothing: `adapters() == 0`, and sends copy as before.
  /// \code
  ///   std::vector<float> grads(n);
  ///   auto reg = comm.register_memory(std::span(grads));
  ///   gsync::allreduce(comm, std::span(grads));  // across hosts: from grads, without a copy
  /// \endcode
  template <class T>
  [[nodiscard]] memory_registration register_memory(std::span<T> buf) {
    quiesce();
    if constexpr (registering_transport<X>) return x_->register_memory(std::as_bytes(buf));
    else return memory_registration(std::as_bytes(buf), {});
  }
  /// `register_memory` of `bytes` bytes at `p` (a tensor's storage, say).
  [[nodiscard]] memory_registration register_memory(const void* p, std::size_t bytes) {
    return register_memory(std::span<const std::byte>(static_cast<const std::byte*>(p), bytes));
  }

  /// Pipelining unit of segmented schedules, in bytes.
  std::size_t segment_bytes() const noexcept { return cfg_.segment_bytes; }
  /// Sets the pipelining unit (>= 1 byte; tiny values force many segments, which tests use).
  /// Waits until pending asynchronous operations have finished.
  void set_segment_bytes(std::size_t b) {
    if (b == 0) throw error(errc::invalid_argument, "set_segment_bytes: must be at least 1");
    quiesce();
    cfg_.segment_bytes = b;
  }
  /// Settings in force.
  const config& settings() const noexcept { return cfg_; }

  /// The transport endpoint (for primitives and algorithms).
  X& transport() noexcept { return *x_; }
  /// The transport endpoint (const).
  const X& transport() const noexcept { return *x_; }
  /// The placement the automatic choices read: the transport's topology, except in deterministic
  /// mode (`config::deterministic`), where the links between hosts are the assumed or given ones,
  /// whatever the transport measured.
  const topology& placement() const noexcept { return fixed_placement_ ? *fixed_placement_ : x_->topo(); }
  /// Size of the communicator's fixed scratch buffer (allocated once, at construction).
  static constexpr std::size_t scratch_bytes = 256 << 10;
  /// The scratch buffer, for schedules that must hold a whole incoming message before combining it.
  std::span<std::byte> scratch() noexcept { return {scratch_.get(), scratch_bytes}; }

  /// Per-kind totals of the operations run on this communicator (safe to read from any thread).
  const op_counters& counters() const noexcept { return counters_; }
  /// The counters, for the operations' scopes to record into.
  op_counters& counters() noexcept { return counters_; }
  /// This rank's Chrome-trace writer (GSYNC_TRACE), or null: add spans of your own with
  /// `gsync::trace_span s(comm.trace(), "step", "train");`.
  trace_writer* trace() const noexcept { return trace_.get(); }
  /// Replaces the trace writer (null: no timeline). Waits until pending asynchronous work has finished.
  void set_trace(std::shared_ptr<trace_writer> w) {
    quiesce();
    trace_ = std::move(w);
  }

  /// This rank's logger.
  const logger& log() const noexcept { return log_; }

  /// Numbers a new collective operation (identical on every rank that issues the same sequence
  /// of collectives). Called at issue, on the issuing thread; inside a submit() job (on the
  /// engine thread) the numbers come from the jobs' own counter (from 2^63).
  std::uint64_t next_seq() noexcept { return numbers_.collective(in_job()); }
  /// Counts a collective that completed on this rank (called by its scope, detail::op_scope).
  void count_completed() noexcept { numbers_.completed(); }
  /// Numbers a new collective and records the timeout in force (see `next_seq`, `issue_timeout`).
  op_ticket next_op() { return {next_seq(), issue_timeout()}; }
  /// Numbers the next point-to-point message to `peer`, with the timeout in force.
  op_ticket next_send_op(int peer) { return {next_p2p_send_seq(peer), issue_timeout()}; }
  /// Numbers the next point-to-point message expected from `peer`, with the timeout in force.
  op_ticket next_recv_op(int peer) { return {next_p2p_recv_seq(peer), issue_timeout()}; }

  /// Numbers the next point-to-point message this rank sends to `peer` (1, 2, ...). Point-to-point
  /// traffic involves two ranks only, so it never advances the collective sequence (`next_seq`).
  /// \param peer a valid rank other than this one.
  std::uint64_t next_p2p_send_seq(int peer) { return numbers_.send(peer, size(), in_job()); }
  /// Numbers the next point-to-point message this rank expects from `peer` (1, 2, ...): the n-th
  /// recv from a peer matches that peer's n-th send to this rank.
  std::uint64_t next_p2p_recv_seq(int peer) { return numbers_.recv(peer, size(), in_job()); }
  /// Per peer, the messages expected from it so far (issue time), for a receive from any source
  /// issued now (gsync::recv_any).
  detail::any_source_base p2p_recv_counts() { return {numbers_.received_counts(size(), in_job()), in_job()}; }
  /// Receives from any source that ran: the shift of later receives' numbers (any_source_shift).
  detail::any_source_shift& any_source() noexcept { return any_shift_; }
  /// Deadline of the running operation: its start (`set_running_since`; now when none runs) plus
  /// its timeout (set by `set_running_timeout` when it started), else the communicator's. Reusing
  /// the start saves a clock read per operation, a noticeable part of a small same-host allreduce
  /// (benchmarks/results/from_code_comments.md).
  deadline make_deadline() const {
    const auto from = running_since_ != std::chrono::steady_clock::time_point{} ? running_since_ : std::chrono::steady_clock::now();
    return from + (running_timeout_.count() > 0 ? running_timeout_ : cfg_.timeout);
  }
  /// Sets the timeout of the operation that starts running on this thread now (0: none); the
  /// operation's scope (detail::op_scope) resets it when it ends. Operations never run
  /// concurrently on one communicator.
  void set_running_timeout(std::chrono::milliseconds t) noexcept { running_timeout_ = t; }
  /// The running operation's timeout (0 when none is running).
  std::chrono::milliseconds running_timeout() const noexcept { return running_timeout_; }
  /// Sets when the operation running on this thread started (epoch: none); its scope resets it.
  void set_running_since(std::chrono::steady_clock::time_point t) noexcept { running_since_ = t; }
  /// When the running operation started (the clock's epoch when none is running).
  std::chrono::steady_clock::time_point running_since() const noexcept { return running_since_; }

  /// True the first time a collective shape is seen (used to log algorithm choices once per shape).
  bool first_time(const std::string& shape) {
    for (const auto& s : logged_shapes_)
      if (s == shape) return false;
    logged_shapes_.push_back(shape);  // a few shapes per job (only logged ones are kept)
    return true;
  }
  /// Recent automatic allreduce choices (see core/choice_memo.hpp).
  detail::choice_memo& allreduce_choices() noexcept { return allreduce_choices_; }

  /// Runs a synchronous operation `f(*this)` (the operation already numbered): inline on this
  /// thread when no asynchronous work is queued or running, or when called inside a submit() job
  /// (no thread hop, no allocation); otherwise queues it behind the pending operations and waits
  /// for it. After a failure of queued work, throws the "communicator broken" error.
  /// \tparam F a callable `void(communicator&)`; copied when queued, so it must not capture the
  /// caller's locals by reference. \param what the operation's name, for messages.
  template <class F>
  void execute(const char* what, F&& f) {
    if (runs_inline()) f(*this);
    else run_queued(what, std::forward<F>(f));
  }

  /// True when a synchronous operation may run inline now: no engine, or an idle one, or the
  /// caller is inside a submit() job. Throws the "communicator broken" error after a failure of
  /// queued work (except inside a job).
  bool runs_inline() const {
    if (!engine_) null_use();
    if (engine_->on_engine_thread()) return true;
    if (engine_->broken()) engine_->throw_broken();
    return engine_->idle();
  }

  /// Queues a synchronous operation `f(*this)` behind the pending ones and waits for it (the slow
  /// path of `execute`). \tparam F a callable `void(communicator&)`. \param what the name.
  template <class F>
  void run_queued(const char* what, F&& f) {
    request r = issue(what, std::forward<F>(f));
    r.wait();
  }

  /// Issues an asynchronous operation `f(*this)` (already numbered) and returns its request: it
  /// runs on the engine after every operation issued before it. On a broken communicator the
  /// request is already finished with the "communicator broken" error; inside a submit() job the
  /// operation runs at once (still in issue order) and the request is finished on return.
  /// \tparam F a callable `void(communicator&)`, copied into the queue. \param what the name.
  template <class F>
  request issue(const char* what, F&& f) {
    detail::bound_job<communicator, std::decay_t<F>> job{std::forward<F>(f)};
    return issue_job(what, detail::job_ops_of<decltype(job)>, &job);
  }

  /// The slot where an optional part keeps its per-communicator state (the CUDA staging
  /// resources, cuda/staging.hpp), made by that part on first use. Jobs that use it hold a
  /// reference, and the engine stops before the communicator's members go, so it outlives them.
  std::shared_ptr<void>& device_state_slot() noexcept { return device_state_; }
  /// The slot of the CUDA IPC group of this communicator's device collectives
  /// (dispatch/ipc_setup.hpp), kept as `device_state_slot`.
  std::shared_ptr<void>& ipc_state_slot() noexcept { return ipc_state_; }

  /// The progress engine, created (without a thread yet) on first use.
  detail::progress_engine& engine() {
    if (!x_) null_use();
    if (!engine_) engine_ = std::make_unique<detail::progress_engine>(this);
    return *engine_;
  }
  /// True once an asynchronous operation failed (or a wait on one timed out): every later
  /// operation then fails with "communicator broken by an earlier failure: ...".
  bool broken() const noexcept { return engine_ && engine_->broken(); }

 private:
  struct null_tag {};
  // The null communicator (split with a negative color).
  explicit communicator(null_tag, config cfg) : cfg_(std::move(cfg)), log_(-1) {}
  [[noreturn, gnu::cold]] static void null_use() {
    throw error(errc::invalid_argument,
                "use of a null communicator (this rank passed a negative color to split) or of a moved-from one");
  }
  bool in_job() const noexcept { return engine_ && engine_->on_engine_thread(); }
  // `issue` past the callable's type (detail::job_ops): one copy per transport, not per call site.
  request issue_job(const char* what, const detail::job_ops& ops, void* job) {
    auto& e = engine();
    if (e.broken())
      return request(std::make_shared<detail::finished_op>(e.shared(), what, std::make_exception_ptr(e.shared()->broken_error())));
    auto op = e.make_op(what, issue_timeout(), ops, job);
    if (e.on_engine_thread()) e.run_inline(*op, this);
    else e.enqueue(op);
    return request(std::move(op));
  }

  // Waits until no asynchronous work is pending (bounded per operation by its deadline).
  void quiesce() noexcept {
    if (engine_) engine_->wait_idle(cfg_.timeout);
  }
  void stop_engine() noexcept {
    if (engine_) {
      engine_->shutdown(cfg_.timeout);
      engine_.reset();
    }
  }
  // Member-wise move from an idle `o`; the engine (if any) then looks this object up.
  void take(communicator& o) noexcept {
    x_ = std::move(o.x_);
    cfg_ = std::move(o.cfg_);
    log_ = o.log_;
    local_rank_ = o.local_rank_;
    numbers_ = std::move(o.numbers_);
    any_shift_ = std::move(o.any_shift_);
    splits_ = o.splits_;
    logged_shapes_ = std::move(o.logged_shapes_);
    allreduce_choices_ = o.allreduce_choices_;
    call_timeout_ms_.store(o.call_timeout_ms_.load());
    running_timeout_ = o.running_timeout_;
    running_since_ = o.running_since_;
    aborted_.store(o.aborted_.load());
    scratch_ = std::move(o.scratch_);
    fixed_placement_ = std::move(o.fixed_placement_);
    counters_ = o.counters_;
    trace_ = std::move(o.trace_);
    device_state_ = std::move(o.device_state_);
    ipc_state_ = std::move(o.ipc_state_);
    shrunk_ = std::move(o.shrunk_);
    engine_ = std::move(o.engine_);
    if (engine_) engine_->rebind(this);
  }

  std::unique_ptr<X> x_;
  config cfg_;
  logger log_;
  int local_rank_ = 0;
  detail::op_numbering numbers_;       // collectives' and messages' numbers (core/op_numbering.hpp)
  detail::any_source_shift any_shift_;  // receives from any source that ran (recv_any)
  std::uint64_t splits_ = 0;           // split() calls so far (part of the new communicators' ids)
  std::vector<std::string> logged_shapes_;
  detail::choice_memo allreduce_choices_;
  std::atomic<std::int64_t> call_timeout_ms_{0};   // with_timeout (0: none); read at issue
  std::chrono::milliseconds running_timeout_{0};   // the running operation's (0: none)
  std::chrono::steady_clock::time_point running_since_{};  // its start (epoch: none running)
  std::atomic<bool> aborted_{false};
  detail::aligned_bytes scratch_;
  std::shared_ptr<topology> fixed_placement_;  // deterministic mode only (see placement())
  op_counters counters_;
  std::shared_ptr<trace_writer> trace_;
  std::shared_ptr<void> device_state_;                // device_state_slot()
  std::shared_ptr<void> ipc_state_;                   // ipc_state_slot()
  shrink_report shrunk_;                              // last_shrink()
  std::unique_ptr<detail::progress_engine> engine_;  // null until the first asynchronous call
};

}  // namespace gsync
