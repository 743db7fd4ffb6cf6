// Memory space per call: an operation's primitives follow from its buffers' memory space
// (core/memory_space.hpp), so each schedule is written once for every space.
//
// This file adds a memory space the way the device space will (issue 27), as new types only: a
// tag (test_space), a buffer view mapped to it (test_view), its primitives (counting_primitives:
// host memory underneath, but every primitive is counted), and thin entry points that call the
// collectives' internal run functions with the view's space. allreduce and reduce_scatter
// schedules run through them over in-process and mailbox worlds; the results are checked against
// the double-precision reference, and the counters prove that the space's primitives ran (were
// make_primitives to ignore the space, host_primitives would run and the counters stay at zero).
// The compile-time checks say that a transport whose traits cannot move a space fails `moves`.

#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>
#include <gsync/gsync.hpp>

#include "support/failures.hpp"
#include "support/mailbox_transport.hpp"
#include "support/reference.hpp"
#include "support/world.hpp"

namespace space_test {

/// The toy memory space: host memory underneath, moved by any transport that moves host memory.
struct test_space {
  static constexpr std::string_view name = "test";
  template <class X>
  static constexpr bool moved_by = gsync::transport_traits<X>::supports_host_memory;
};

/// A buffer view of the toy space (as device_span<T> will be of device memory).
template <class T>
struct test_view {
  T* p = nullptr;
  std::size_t n = 0;
  T* data() const { return p; }
  std::size_t size() const { return n; }
};

/// What the toy space's primitives did, over all ranks of the current world.
struct counts {
  static inline std::atomic<long> built{0};       // primitives objects made
  static inline std::atomic<long> messages{0};    // send / recv / recv_copy_send
  static inline std::atomic<long> reductions{0};  // recv_reduce, recv_reduce_send, reduce
  static inline std::atomic<long> copies{0};      // copy, copy_final
  static void reset() { built = messages = reductions = copies = 0; }
};

/// The toy space's primitives: host primitives underneath, each primitive counted.
template <class T, class Op, class X>
class counting_primitives {
 public:
  using region = gsync::region<T>;
  counting_primitives(X& x, gsync::message_id id, const T* in, T* out, std::size_t count, std::size_t segment_elems, Op op,
                      gsync::deadline dl, std::span<std::byte> scratch)
      : h_(x, id, in, out, count, segment_elems, op, dl, scratch) {
    ++counts::built;
  }
  int rank() const { return h_.rank(); }
  int size() const { return h_.size(); }
  std::size_t count() const { return h_.count(); }
  std::size_t segment_elems() const { return h_.segment_elems(); }
  bool in_place() const { return h_.in_place(); }
  const gsync::topology& topo() const { return h_.topo(); }
  std::size_t scratch_elems() const { return h_.scratch_elems(); }
  region scratch(gsync::range r) const { return h_.scratch(r); }
  region in(gsync::range r) const { return h_.in(r); }
  region out(gsync::range r) const { return h_.out(r); }

  void send(int to, region src) {
    ++counts::messages;
    h_.send(to, src);
  }
  void recv(int from, region dst) {
    ++counts::messages;
    h_.recv(from, dst);
  }
  void recv_reduce(int from, region dst, region local, bool final) {
    ++counts::reductions;
    h_.recv_reduce(from, dst, local, final);
  }
  void recv_reduce_send(int from, int to, region dst, region local, bool final) {
    ++counts::reductions;
    h_.recv_reduce_send(from, to, dst, local, final);
  }
  void recv_copy_send(int from, int to, region dst) {
    ++counts::messages;
    h_.recv_copy_send(from, to, dst);
  }
  void copy_final(region dst, region src) {
    ++counts::copies;
    h_.copy_final(dst, src);
  }
  void reduce(region dst, region a, region b, bool final) {
    ++counts::reductions;
    h_.reduce(dst, a, b, final);
  }
  void copy(region dst, region src) {
    ++counts::copies;
    h_.copy(dst, src);
  }
  void finish() { h_.finish(); }

 private:
  gsync::host_primitives<T, Op, X> h_;
};

}  // namespace space_test

namespace gsync {
/// test_view is a buffer of the toy space.
template <class T>
struct memory_space_of<space_test::test_view<T>> {
  using type = space_test::test_space;
};
/// The toy space runs schedules over counting_primitives.
template <class T, class Op, class X>
struct primitives_for<space_test::test_space, T, Op, X> {
  using type = space_test::counting_primitives<T, Op, X>;
};
}  // namespace gsync

namespace space_test {

/// A transport (declarations only: enough for the concepts) whose traits say it cannot move host
/// memory: `moves` must reject it for host memory and for the toy space built on host memory.
struct host_blind_transport {
  int rank();
  int size();
  std::string_view name();
  void post_send(int, gsync::message_id, const std::byte*, std::size_t);
  void recv(int, gsync::message_id, std::byte*, std::size_t, gsync::deadline);
  void recv_stream(int, gsync::message_id, std::size_t, std::size_t,
                   gsync::detail::function_ref<void(std::span<const std::byte>)>, gsync::deadline);
  void flush_sends(gsync::deadline);
  const gsync::topology& topo();
};

/// A tag without `moved_by`: not movable by anything.
struct mute_space {
  static constexpr std::string_view name = "mute";
};

}  // namespace space_test

template <>
struct gsync::transport_traits<space_test::host_blind_transport> {
  static constexpr bool supports_host_memory = false;
  static constexpr bool supports_device_memory = true;
  static constexpr bool supports_registered_memory = false;
};

namespace space_test {

using gsync::transport::inproc;

// The spaces and views map as declared.
static_assert(gsync::memory_space<gsync::host_memory> && gsync::memory_space<test_space>);
static_assert(!gsync::memory_space<int>);
static_assert(std::is_same_v<gsync::memory_space_of_t<std::span<float>>, gsync::host_memory>);
static_assert(std::is_same_v<gsync::memory_space_of_t<const std::span<const double, 4>&>, gsync::host_memory>);
static_assert(std::is_same_v<gsync::memory_space_of_t<test_view<float>>, test_space>);
// Host schedules run over one untyped primitives type per transport, whatever the element and operator.
static_assert(std::is_same_v<gsync::primitives_t<gsync::host_memory, float, gsync::op::sum, inproc>,
                             gsync::basic_host_primitives<inproc>>);
static_assert(std::is_same_v<gsync::primitives_t<gsync::host_memory, gsync::half, gsync::op::max, inproc>,
                             gsync::basic_host_primitives<inproc>>);
static_assert(std::is_same_v<gsync::primitives_t<test_space, float, gsync::op::sum, inproc>,
                             counting_primitives<float, gsync::op::sum, inproc>>);
// The capability is read from transport_traits: a transport that cannot move a space fails `moves`.
static_assert(gsync::transport_policy<host_blind_transport>);
static_assert(gsync::moves<inproc, gsync::host_memory> && gsync::moves<inproc, test_space>);
static_assert(gsync::moves<gsync_test::mailbox_transport, test_space>);
static_assert(!gsync::moves<host_blind_transport, gsync::host_memory>);
static_assert(!gsync::moves<host_blind_transport, test_space>);
static_assert(!gsync::moves<inproc, mute_space>);
// The schedules accept the toy space's primitives as they accept the host's.
static_assert(gsync::reduce_scatter_algorithm<gsync::algo::ring, counting_primitives<float, gsync::op::sum, inproc>>);
static_assert(!gsync::reduce_scatter_algorithm<gsync::algo::halving_doubling, counting_primitives<float, gsync::op::sum, inproc>>);

// Thin entry points for the toy view, as a collective's overload for a new view is written: map
// the view to its space and hand the space to the internal run function.

template <class Algo, class X, class T, class Op>
void allreduce(gsync::communicator<X>& comm, test_view<const T> in, test_view<T> out, Op op) {
  using space = gsync::memory_space_of_t<decltype(out)>;
  gsync::detail::allreduce_impl<Algo, space>(comm, in.data(), out.data(), out.size(), op);
}

template <class Algo, class X, class T, class Op>
void reduce_scatter(gsync::communicator<X>& comm, test_view<const T> in, test_view<T> out, Op op) {
  using space = gsync::memory_space_of_t<decltype(out)>;
  gsync::detail::reduce_scatter_impl<Algo, space>(comm, in.data(), out.data(), out.size(), op);
}

using found = gsync_test::failures;  // failure messages from the ranks of a world (any thread)

/// One allreduce of `count` elements through the toy space, in place or not, checked elementwise.
template <class Algo, class T, class Op, class Comm>
void check_allreduce(Comm& comm, std::size_t count, bool in_place, found& f) {
  const int r = comm.rank(), n = comm.size();
  std::vector<T> in(count), out(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = gsync_test::input<T, Op>(r, i);
  if (in_place) {
    allreduce<Algo>(comm, test_view<const T>{in.data(), count}, test_view<T>{in.data(), count}, Op{});
    out = in;
  } else {
    allreduce<Algo>(comm, test_view<const T>{in.data(), count}, test_view<T>{out.data(), count}, Op{});
  }
  for (std::size_t i = 0; i < count; ++i)
    if (!gsync_test::check_element<T, Op>(out[i], n, i)) {
      f.add(std::string("allreduce ") + std::string(Algo::name) + " world " + std::to_string(n) + " count " +
            std::to_string(count) + (in_place ? " in place" : "") + ": rank " + std::to_string(r) + " element " +
            std::to_string(i) + " = " + std::to_string(gsync_test::to_double(out[i])));
      return;
    }
}

/// One reduce_scatter of `c` elements per rank through the toy space, checked elementwise.
template <class Algo, class T, class Op, class Comm>
void check_reduce_scatter(Comm& comm, std::size_t c, found& f) {
  const int r = comm.rank(), n = comm.size();
  const std::size_t total = c * static_cast<std::size_t>(n);
  std::vector<T> in(total), out(c);
  for (std::size_t i = 0; i < total; ++i) in[i] = gsync_test::input<T, Op>(r, i);
  reduce_scatter<Algo>(comm, test_view<const T>{in.data(), total}, test_view<T>{out.data(), c}, Op{});
  const std::size_t base = static_cast<std::size_t>(r) * c;
  for (std::size_t i = 0; i < c; ++i)
    if (!gsync_test::check_element<T, Op>(out[i], n, base + i)) {
      f.add(std::string("reduce_scatter ") + std::string(Algo::name) + " world " + std::to_string(n) + " c " +
            std::to_string(c) + ": rank " + std::to_string(r) + " element " + std::to_string(i) + " = " +
            std::to_string(gsync_test::to_double(out[i])));
      return;
    }
}

/// Counts small and awkward, plus one above the communicator's scratch (65,536 floats).
constexpr std::size_t sizes[] = {1, 7, 1000, 70001};

template <class T, class Op, class Comm>
void body(Comm& comm, found& f) {
  namespace algo = gsync::algo;
  for (std::size_t count : sizes)
    for (bool in_place : {false, true}) {
      check_allreduce<algo::ring, T, Op>(comm, count, in_place, f);
      check_allreduce<algo::recursive_doubling, T, Op>(comm, count, in_place, f);
      check_allreduce<algo::halving_doubling, T, Op>(comm, count, in_place, f);
      check_allreduce<algo::automatic, T, Op>(comm, count, in_place, f);
    }
  for (std::size_t c : sizes) {
    check_reduce_scatter<algo::ring, T, Op>(comm, c, f);
    check_reduce_scatter<algo::dissemination, T, Op>(comm, c, f);
    check_reduce_scatter<algo::automatic, T, Op>(comm, c, f);
  }
}

/// Runs the body on a world of n ranks made by `run` and checks results and counters.
template <class Run>
void run_world(int n, Run run) {
  found f;
  counts::reset();
  gsync::config cfg;
  cfg.timeout = std::chrono::seconds(120);
  run(n, [&](auto& comm, gsync_test::world_sync&) {
    body<float, gsync::op::sum>(comm, f);
    body<double, gsync::op::avg>(comm, f);
  }, cfg);
  for (const auto& s : f.list) FAIL_CHECK(s);
  CHECK(f.list.empty());
  // The toy space's primitives ran every operation (host_primitives would leave these at zero).
  CHECK(counts::built.load() > 0);
  if (n > 1) {
    CHECK(counts::messages.load() > 0);
    CHECK(counts::reductions.load() > 0);
  } else {
    CHECK(counts::copies.load() > 0);  // one rank: the result is a local (finalizing) copy
  }
}

}  // namespace space_test

TEST_CASE("memory space: allreduce and reduce_scatter run over the primitives of the buffer's space, in process") {
  for (int n : {1, 2, 3, 4, 5}) {
    CAPTURE(n);
    space_test::run_world(n, [](int w, auto f, gsync::config cfg) { gsync_test::run_inproc(w, f, cfg); });
  }
}

TEST_CASE("memory space: allreduce and reduce_scatter run over the primitives of the buffer's space, mailbox transport") {
  for (int n : {2, 3, 6}) {
    CAPTURE(n);
    space_test::run_world(n, [](int w, auto f, gsync::config cfg) { gsync_test::run_mailbox(w, f, cfg); });
  }
}

TEST_CASE("memory space: host buffers still run over host_primitives, not the toy space's") {
  // std::span maps to host memory: a host allreduce leaves the toy space's counters untouched.
  space_test::counts::reset();
  std::atomic<int> wrong{0};
  gsync_test::run_inproc(3, [&](auto& comm, gsync_test::world_sync&) {
    std::vector<float> v(100, 1.0f);
    gsync::allreduce<gsync::algo::ring>(comm, std::span<float>{v});
    for (float x : v) wrong += x != 3.0f;
  });
  CHECK(wrong.load() == 0);
  CHECK(space_test::counts::built.load() == 0);
}
