#pragma once
// The two efficiency figures of a program training through the gsync backend: the share of step
// time spent waiting for communication and the speedup of N workers over one it implies (their
// definitions: gsync/grad/stats.hpp). The program marks its steps (gsync_torch.step()); the meter
// sees every operation's issue and end, and the caller's waits in Work.wait().
//
// Exposed communication of a step: the time the caller spent in Work.wait() (exact), plus, when
// the step's last operation was not waited for that way, the time from its issue to the end of
// every operation then in flight. That tail is what a caller waits that waits right after its last
// issue, through the operations' futures: DDP's reducer (whose last bucket is issued as backward
// ends) and blocking calls; a caller that computes after its last issue and then waits on a
// future is charged that computation too.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>

#include <gsync/grad/stats.hpp>

namespace gsync_torch {

class step_meter {
 public:
  using clock = std::chrono::steady_clock;
  using seconds = std::chrono::duration<double>;

  step_meter() : step_start_(clock::now()) {}

  /// An operation is issued now; returns its number (1, 2, ...).
  std::uint64_t issued() {
    std::lock_guard lk(m_);
    ++in_flight_;
    last_waited_ = false;
    last_issue_ = clock::now();
    ++ops_in_step_;
    return last_id_ = ++ids_;
  }
  /// Operation `id` ended after running `busy` on the engine.
  void finished(std::uint64_t /*id*/, seconds busy) {
    std::lock_guard lk(m_);
    busy_ += busy;
    total_busy_ += busy;
    if (--in_flight_ == 0) drained_at_ = clock::now();
  }
  /// The caller waited `w` in Work.wait() for operation `id`, until now.
  void waited(std::uint64_t id, seconds w) {
    std::lock_guard lk(m_);
    waited_ += w;
    wait_end_ = clock::now();
    if (id == last_id_) last_waited_ = true;
  }
  /// Ends a step now (gsync_torch.step()).
  void step() {
    std::lock_guard lk(m_);
    const auto now = clock::now();
    gsync::grad::step_stats s;
    s.synced = ops_in_step_ > 0;
    s.buckets = ops_in_step_;
    s.step_time = now - step_start_;
    s.comm_time = busy_;
    s.exposed_time = waited_;
    if (s.synced && !last_waited_) {  // the tail, less what a Work.wait() after the last issue counted already
      const auto from = std::max(last_issue_, wait_end_);
      const auto to = in_flight_ == 0 ? drained_at_ : now;
      if (to > from) s.exposed_time += to - from;
    }
    s.exposed_time = std::min(s.exposed_time, s.step_time);
    totals_.add(s);
    step_start_ = now;
    ops_in_step_ = 0;
    busy_ = waited_ = seconds{0};
    last_waited_ = true;  // nothing issued in the new step yet
  }
  /// Starts afresh: the figures count from now (a step starts now).
  void reset() {
    std::lock_guard lk(m_);
    totals_ = {};
    step_start_ = clock::now();
    ops_in_step_ = 0;
    busy_ = waited_ = seconds{0};
    last_waited_ = true;
  }
  /// Operations issued and their run time on the engine since the meter began (not reset).
  std::uint64_t ops() const {
    std::lock_guard lk(m_);
    return ids_;
  }
  seconds total_busy() const {
    std::lock_guard lk(m_);
    return total_busy_;
  }
  /// The steps ended so far.
  gsync::grad::running_stats totals() const {
    std::lock_guard lk(m_);
    return totals_;
  }

 private:
  mutable std::mutex m_;
  std::uint64_t ids_ = 0, last_id_ = 0, in_flight_ = 0, ops_in_step_ = 0;
  clock::time_point step_start_, last_issue_{}, drained_at_{}, wait_end_{};
  seconds busy_{0}, waited_{0};  // this step's
  seconds total_busy_{0};        // every operation's
  bool last_waited_ = true;       // the step's last operation was waited for in Work.wait()
  gsync::grad::running_stats totals_;
};

}  // namespace gsync_torch
