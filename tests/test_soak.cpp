// Soak test: long random sequences of collectives, every result verified.
//
// Each world (in process N = 1..8; shared memory, TCP and mixed hosts over loopback N = 2..5)
// runs a sequence of operations drawn from one random generator that every rank seeds alike, so
// all ranks issue the same sequence: the kind (allreduce, reduce_scatter, allgather, broadcast,
// reduce, alltoall, barrier, a send/recv pair), the element type and operator, the algorithm
// (a template policy, or automatic), the root or the pair, the size (0 .. ~200k elements, skewed
// to small), in place or out of place, synchronous or `_async` (requests then waited for in a
// random order, up to 8 at a time, while later synchronous calls queue behind them), and now and
// then the segment size. Inputs come from tests/support/reference.hpp at a random index offset
// per operation; reduced results are checked element by element against its double-precision
// reference, moved data bitwise, inputs that must stay untouched are sampled, and a reduce's
// output on other ranks than the root must not be written.
//
// Every (element type, operator, algorithm, transport) that can be drawn is a template
// instantiation, so the draws come from fixed case lists (`reductions_inproc`, `reductions_host`,
// `dtypes_*` below) rather than the full product: every type and operator in process, every
// operator and element size over shared memory and TCP, every algorithm with several of them.
//
// GSYNC_SOAK_SEED fixes the seed (printed at every world, so a failure can be replayed);
// GSYNC_SOAK_OPS sets the number of operations per world (default 600) for long manual runs.

#include <doctest/doctest.h>

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <gsync/gsync.hpp>

#include "support/reference.hpp"
#include "support/world.hpp"

using namespace std::chrono_literals;

namespace {

using gsync_test::check_element;
using gsync_test::input;
using gsync_test::to_double;

// ---- settings ---------------------------------------------------------------------------------

std::uint64_t soak_seed() {
  static const std::uint64_t s = [] {
    if (const char* v = std::getenv("GSYNC_SOAK_SEED"); v && *v) return static_cast<std::uint64_t>(std::strtoull(v, nullptr, 0));
    return (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }();
  return s;
}

int soak_ops() {
  if (const char* v = std::getenv("GSYNC_SOAK_OPS"); v && *v) return std::max(1, std::atoi(v));
  return 600;
}

// ---- what runs ----------------------------------------------------------------------------------

enum class kind { allreduce, reduce_scatter, allgather, broadcast, reduce, alltoall, barrier, send_recv, count_ };
constexpr const char* kind_names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "alltoall", "barrier", "send_recv"};
constexpr int kind_weights[] = {30, 12, 10, 10, 10, 8, 5, 15};  // percent

/// A reduction case: element type, operator, and the algorithms it runs with.
/// \tparam T element type. \tparam Op reduction operator.
/// \tparam R the reduce policy (`automatic`: any of automatic, ring, binomial_tree).
/// \tparam A allreduce policies.
template <class T, class Op, class R, class... A>
struct red {
  using type = T;
  using op = Op;
  using rooted = R;
  static constexpr std::size_t n_algos = sizeof...(A);
  /// Calls f(std::type_identity<A_i>{}) with i = `i` % n_algos.
  template <class F>
  static void with_algo(std::size_t i, F&& f) {
    i %= n_algos;
    std::size_t k = 0;
    ((k++ == i ? (f(std::type_identity<A>{}), 0) : 0), ...);
  }
};

namespace alg = gsync::algo;
/// Every allreduce policy: `automatic` instantiates all of them anyway, so these cases cost no more.
template <class T, class Op>
using red_all = red<T, Op, alg::automatic, alg::automatic, alg::ring, alg::recursive_doubling, alg::halving_doubling, alg::tree, alg::direct,
                    alg::hierarchical_default>;

#ifdef GSYNC_TEST_SANITIZE
/// Under the sanitizers (tools/sanitize.sh) fewer cases, to compile in a third of the time: every
/// operator, every element width and every policy still, in fewer combinations. What a sanitizer
/// can report here (a request or buffer used after its operation, a race between the progress
/// engine and the caller) depends on the sequence of operations, not on the arithmetic, which the
/// plain build checks for every case below.
using reductions_inproc = std::tuple<
    red_all<float, gsync::op::sum>, red<double, gsync::op::avg, alg::ring, alg::halving_doubling, alg::direct>,
    red<gsync::half, gsync::op::sum, alg::binomial_tree, alg::ring, alg::recursive_doubling>,
    red<gsync::bfloat16, gsync::op::max, alg::binomial_tree, alg::direct, alg::tree>,
    red<std::int8_t, gsync::op::min, alg::ring, alg::tree, alg::hierarchical_default>,
    red<std::int64_t, gsync::op::prod, alg::binomial_tree, alg::halving_doubling, alg::ring>>;
using reductions_host = std::tuple<
    red_all<float, gsync::op::sum>, red<gsync::half, gsync::op::avg, alg::binomial_tree, alg::ring, alg::recursive_doubling>,
    red<std::int8_t, gsync::op::max, alg::ring, alg::direct, alg::hierarchical_default>,
    red<std::int64_t, gsync::op::prod, alg::binomial_tree, alg::tree, alg::halving_doubling>,
    red<double, gsync::op::min, alg::ring, alg::halving_doubling, alg::direct>>;
using dtypes_inproc = std::tuple<float, gsync::half, std::int8_t, std::uint64_t>;
using dtypes_host = std::tuple<float, gsync::half, std::uint8_t, std::int64_t>;
#else
/// The reduction cases of the in-process worlds: every element type and every operator several
/// times. Each case runs the allreduce with two policies only (two cases with all of them), so
/// that the file compiles in reasonable time: every (type, operator, policy) triple is a schedule
/// instantiated per transport.
using reductions_inproc = std::tuple<
    red_all<float, gsync::op::sum>, red<float, gsync::op::prod, alg::ring, alg::ring, alg::tree>,
    red<float, gsync::op::min, alg::binomial_tree, alg::recursive_doubling, alg::direct>,
    red<float, gsync::op::max, alg::ring, alg::halving_doubling, alg::hierarchical_default>, red<float, gsync::op::avg, alg::binomial_tree, alg::tree, alg::ring>,
    red_all<double, gsync::op::sum>, red<double, gsync::op::avg, alg::ring, alg::halving_doubling, alg::direct>,
    red<gsync::half, gsync::op::sum, alg::binomial_tree, alg::ring, alg::recursive_doubling>,
    red<gsync::bfloat16, gsync::op::avg, alg::ring, alg::tree, alg::halving_doubling>, red<gsync::bfloat16, gsync::op::max, alg::binomial_tree, alg::direct, alg::tree>,
    red<std::int8_t, gsync::op::sum, alg::ring, alg::direct, alg::ring>,
    red<std::uint8_t, gsync::op::min, alg::binomial_tree, alg::recursive_doubling, alg::hierarchical_default>,
    red<std::int16_t, gsync::op::avg, alg::ring, alg::ring, alg::tree>, red<std::uint16_t, gsync::op::prod, alg::binomial_tree, alg::halving_doubling, alg::direct>,
    red<std::int32_t, gsync::op::prod, alg::ring, alg::recursive_doubling, alg::ring>, red<std::uint32_t, gsync::op::max, alg::binomial_tree, alg::tree, alg::direct>,
    red<std::int64_t, gsync::op::avg, alg::ring, alg::halving_doubling, alg::hierarchical_default>,
    red<std::int64_t, gsync::op::min, alg::binomial_tree, alg::ring, alg::halving_doubling>,
    red<std::uint64_t, gsync::op::sum, alg::ring, alg::ring, alg::recursive_doubling>>;

/// The reduction cases of the worlds over shared memory and TCP: every operator, every element
/// size (1, 2, 4, 8 bytes), floating and integer, every policy.
using reductions_host = std::tuple<
    red_all<float, gsync::op::sum>, red<float, gsync::op::prod, alg::binomial_tree, alg::ring, alg::tree>,
    red<double, gsync::op::avg, alg::ring, alg::halving_doubling, alg::direct>,
    red<gsync::half, gsync::op::sum, alg::binomial_tree, alg::ring, alg::recursive_doubling>, red<gsync::bfloat16, gsync::op::max, alg::ring, alg::direct, alg::tree>,
    red<std::int8_t, gsync::op::sum, alg::binomial_tree, alg::direct, alg::ring>,
    red<std::uint8_t, gsync::op::min, alg::ring, alg::recursive_doubling, alg::hierarchical_default>,
    red<std::int32_t, gsync::op::prod, alg::binomial_tree, alg::hierarchical_default, alg::ring>,
    red<std::uint64_t, gsync::op::sum, alg::ring, alg::tree, alg::recursive_doubling>>;

/// Element types of the data-moving collectives: all of them in process; one per size (and both
/// 16-bit floats) over shared memory and TCP.
using dtypes_inproc = std::tuple<float, double, gsync::half, gsync::bfloat16, std::int8_t, std::uint8_t, std::int16_t, std::uint16_t,
                                 std::int32_t, std::uint32_t, std::int64_t, std::uint64_t>;
using dtypes_host = std::tuple<float, double, gsync::half, gsync::bfloat16, std::uint8_t, std::int64_t>;
#endif

/// The case lists of a communicator type.
/// \tparam Comm the communicator type of a world.
template <class Comm>
struct cases {
  static constexpr bool inproc = std::is_same_v<Comm, gsync::inproc_communicator>;
  using reductions = std::conditional_t<inproc, reductions_inproc, reductions_host>;
  using dtypes = std::conditional_t<inproc, dtypes_inproc, dtypes_host>;
};

/// Calls f(std::type_identity<std::tuple_element_t<i, Tuple>>{}).
/// \tparam Tuple a std::tuple of cases or types.
template <class Tuple, class F>
void with_element(std::size_t i, F&& f) {
  [&]<std::size_t... I>(std::index_sequence<I...>) {
    ((i == I ? (f(std::type_identity<std::tuple_element_t<I, Tuple>>{}), 0) : 0), ...);
  }(std::make_index_sequence<std::tuple_size_v<Tuple>>{});
}

/// Algorithm policies of the other collectives: each `with_*_algo(i, f)` calls
/// f(std::type_identity<Policy>{}) for policy number i (0: automatic).
template <class F>
void with_rooted_algo(int i, F&& f) {  // broadcast, reduce
  switch (i) {
    case 0: return f(std::type_identity<gsync::algo::automatic>{});
    case 1: return f(std::type_identity<gsync::algo::ring>{});
    default: return f(std::type_identity<gsync::algo::binomial_tree>{});
  }
}
template <class F>
void with_block_algo(int i, F&& f) {  // reduce_scatter, allgather
  if (i == 0) return f(std::type_identity<gsync::algo::automatic>{});
  return f(std::type_identity<gsync::algo::ring>{});
}
template <class F>
void with_alltoall_algo(int i, F&& f) {
  if (i == 0) return f(std::type_identity<gsync::algo::automatic>{});
  return f(std::type_identity<gsync::algo::pairwise>{});
}
template <class F>
void with_barrier_algo(int i, F&& f) {
  if (i == 0) return f(std::type_identity<gsync::algo::automatic>{});
  return f(std::type_identity<gsync::algo::dissemination>{});
}
constexpr int n_algos[] = {7, 2, 2, 3, 3, 2, 2, 1};  // by kind (allreduce: modulo the case's own list)

/// One drawn operation (identical on every rank).
struct op_desc {
  int index = 0;           // position in the sequence
  kind k = kind::barrier;
  int type = 0;            // index into the world's reduction cases or element types
  int algo = 0;
  std::size_t count = 0;   // elements: of the buffer, or of one block (reduce_scatter, allgather, alltoall)
  bool in_place = false;
  bool async = false;
  int root = 0;            // broadcast, reduce; send_recv: the sender
  int peer = 0;            // send_recv: the receiver
  int tag = 0;
  bool empty_out = false;  // reduce, out of place: non-root ranks pass an empty output
  std::uint64_t base = 0;  // index offset of the inputs
  std::size_t segment = 0; // the communicator's segment size when it runs (for messages)
};

/// Sizes: 3% zero, else log-uniform, up to 4096 elements four times in five and up to 200k the
/// fifth time; block collectives divide by the world size so their buffers stay as large.
std::size_t draw_count(std::mt19937_64& g, int n, bool per_block) {
  std::uniform_real_distribution<double> u(0, 1);
  if (u(g) < 0.03) return 0;
  const double top = u(g) < 0.8 ? 4096.0 : 200000.0;
  auto c = static_cast<std::size_t>(std::exp(u(g) * std::log(top)));
  if (per_block) c = c / static_cast<std::size_t>(n) + (u(g) < 0.5 ? 1 : 0);
  return c;
}

/// Draws operation number `index` of a world of `n` ranks with `n_reductions` reduction cases
/// and `n_dtypes` element types.
op_desc draw(std::mt19937_64& g, int n, int index, int n_reductions, int n_dtypes) {
  op_desc d;
  d.index = index;
  std::uniform_int_distribution<int> pct(0, 99);
  int w = pct(g), k = 0;
  while (w >= kind_weights[k]) w -= kind_weights[k++];
  d.k = static_cast<kind>(k);
  if (d.k == kind::send_recv && n == 1) d.k = kind::allreduce;
  const bool reducing = d.k == kind::allreduce || d.k == kind::reduce_scatter || d.k == kind::reduce;
  d.type = std::uniform_int_distribution<int>(0, (reducing ? n_reductions : n_dtypes) - 1)(g);
  d.algo = std::uniform_int_distribution<int>(0, n_algos[k] - 1)(g);
  d.count = draw_count(g, n, d.k == kind::reduce_scatter || d.k == kind::allgather || d.k == kind::alltoall);
  d.in_place = pct(g) < 40;
  d.async = pct(g) < 40;
  d.root = std::uniform_int_distribution<int>(0, n - 1)(g);
  d.peer = n > 1 ? (d.root + 1 + std::uniform_int_distribution<int>(0, n - 2)(g)) % n : 0;
  d.tag = std::uniform_int_distribution<int>(0, 1 << 20)(g);
  d.empty_out = pct(g) < 50;
  d.base = g() >> 32;
  return d;
}

// ---- per-rank state ---------------------------------------------------------------------------

/// Failures and counters of one world (shared by its rank threads).
struct world_report {
  std::mutex m;
  std::vector<std::string> failures;
  std::uint64_t ops = 0, bytes = 0, elements_checked = 0;
  void fail(std::string s) {
    std::lock_guard lk(m);
    if (failures.size() < 20) failures.push_back(std::move(s));
  }
};

/// One rank's view: its report, the pending asynchronous operations, a description of the world.
struct rank_ctx {
  world_report& rep;
  std::string world;
  std::uint64_t bytes = 0, elements = 0;
  struct pending {
    gsync::request req;
    std::function<void()> verify;  // owns the buffers
  };
  std::vector<pending> inflight;
};

template <class T> std::string dname() { return std::string(gsync::name(gsync::dtype_of<T>)); }

std::string describe(const op_desc& d, const std::string& type, std::string_view algo, int n) {
  std::string s = "op " + std::to_string(d.index) + ": " + kind_names[static_cast<int>(d.k)] + " " + type + " algo " +
                  std::string(algo) + " count " + std::to_string(d.count) + " N=" + std::to_string(n) + (d.async ? " async" : " sync") +
                  " segment " + std::to_string(d.segment);
  if (d.k == kind::allreduce || d.k == kind::reduce_scatter || d.k == kind::allgather || d.k == kind::reduce)
    s += d.in_place ? " in-place" : " out-of-place";
  if (d.k == kind::reduce && !d.in_place && d.empty_out) s += " (empty output off the root)";
  if (d.k == kind::broadcast || d.k == kind::reduce) s += " root " + std::to_string(d.root);
  if (d.k == kind::send_recv) s += " " + std::to_string(d.root) + "->" + std::to_string(d.peer) + " tag " + std::to_string(d.tag);
  return s;
}

template <class T>
bool same_bits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

/// Runs the operation now (sync) or issues it and queues its check (async).
/// `launch_sync` runs it; `launch_async` returns its request; `verify` checks the buffers.
template <class Sync, class Async, class Verify>
void run_op(rank_ctx& x, const op_desc& d, Sync&& launch_sync, Async&& launch_async, Verify verify) {
  if (d.async) {
    x.inflight.push_back({launch_async(), std::function<void()>(std::move(verify))});
  } else {
    launch_sync();
    verify();
  }
}

/// Counts the wrong reduced elements of [got, got+c) whose reference indices start at `first`.
template <class T, class Op>
void check_reduced(rank_ctx& x, const std::string& what, int r, int n, const T* got, std::size_t c, std::uint64_t first) {
  std::size_t wrong = 0, at = 0;
  for (std::size_t i = 0; i < c; ++i)
    if (!check_element<T, Op>(got[i], n, first + i) && wrong++ == 0) at = i;
  x.elements += c;
  x.bytes += c * sizeof(T);
  if (wrong)
    x.rep.fail(x.world + " " + what + ": rank " + std::to_string(r) + " has " + std::to_string(wrong) + " wrong elements, first at " +
               std::to_string(at) + " = " + std::to_string(to_double(got[at])));
}

/// Counts the elements got[i] of [got, got+c) that differ bitwise from want(i).
template <class T, class Want>
void check_moved(rank_ctx& x, const std::string& what, int r, const T* got, std::size_t c, Want want) {
  std::size_t wrong = 0, at = 0;
  for (std::size_t i = 0; i < c; ++i)
    if (!same_bits(got[i], want(i)) && wrong++ == 0) at = i;
  x.elements += c;
  x.bytes += c * sizeof(T);
  if (wrong)
    x.rep.fail(x.world + " " + what + ": rank " + std::to_string(r) + " has " + std::to_string(wrong) + " wrong elements, first at " +
               std::to_string(at));
}

/// Checks that an input is unchanged after the operation: every 97th element of [0, c) outside
/// [skip_lo, skip_hi) still equals input<T, Op>(r, base + i).
template <class T, class Op>
void check_input_kept(rank_ctx& x, const std::string& what, int r, const T* in, std::size_t c, std::uint64_t base,
                      std::size_t skip_lo = 0, std::size_t skip_hi = 0) {
  for (std::size_t i = 0; i < c; i += 97)
    if ((i < skip_lo || i >= skip_hi) && !same_bits(in[i], input<T, Op>(r, base + i))) {
      x.rep.fail(x.world + " " + what + ": rank " + std::to_string(r) + " input modified at " + std::to_string(i));
      return;
    }
}

/// A buffer of n elements whose bytes are all `byte` (a sentinel: anything not written keeps it).
template <class T>
std::shared_ptr<std::vector<T>> filled(std::size_t n, unsigned char byte = 0xA5) {
  auto v = std::make_shared<std::vector<T>>(n);
  if (n) std::memset(static_cast<void*>(v->data()), byte, n * sizeof(T));
  return v;
}

// ---- one operation per kind -----------------------------------------------------------------

template <class Comm>
void do_allreduce(Comm& comm, rank_ctx& x, const op_desc& d) {
  with_element<typename cases<Comm>::reductions>(static_cast<std::size_t>(d.type), [&](auto ci) {
    using C = typename decltype(ci)::type;
    using T = typename C::type;
    using Op = typename C::op;
    C::with_algo(static_cast<std::size_t>(d.algo), [&](auto ai) {
      using A = typename decltype(ai)::type;
      const int n = comm.size(), r = comm.rank();
      const std::size_t c = d.count;
      auto in = filled<T>(c), out = d.in_place ? in : filled<T>(c);
      for (std::size_t i = 0; i < c; ++i) (*in)[i] = input<T, Op>(r, d.base + i);
      const std::string what = describe(d, dname<T>() + " " + std::string(Op::name), A::name, n);
      std::span<const T> si(in->data(), c);
      std::span<T> so(out->data(), c);
      run_op(
          x, d,
          [&] {
            if (d.in_place) gsync::allreduce<A>(comm, so, Op{});
            else gsync::allreduce<A>(comm, si, so, Op{});
          },
          [&] { return d.in_place ? gsync::allreduce_async<A>(comm, so, Op{}) : gsync::allreduce_async<A>(comm, si, so, Op{}); },
          [&x, in, out, c, r, n, d, what] {
            check_reduced<T, Op>(x, what, r, n, out->data(), c, d.base);
            if (!d.in_place) check_input_kept<T, Op>(x, what, r, in->data(), c, d.base);
          });
    });
  });
}

template <class Comm>
void do_reduce_scatter(Comm& comm, rank_ctx& x, const op_desc& d) {
  with_element<typename cases<Comm>::reductions>(static_cast<std::size_t>(d.type), [&](auto ci) {
    using C = typename decltype(ci)::type;
    using T = typename C::type;
    using Op = typename C::op;
    with_block_algo(d.algo, [&](auto ai) {
      using A = typename decltype(ai)::type;
      const int n = comm.size(), r = comm.rank();
      const std::size_t c = d.count, total = c * static_cast<std::size_t>(n), mine = static_cast<std::size_t>(r) * c;
      auto in = filled<T>(total);
      auto out = d.in_place ? in : filled<T>(c);
      for (std::size_t i = 0; i < total; ++i) (*in)[i] = input<T, Op>(r, d.base + i);
      T* o = d.in_place ? in->data() + mine : out->data();
      const std::string what = describe(d, dname<T>() + " " + std::string(Op::name), A::name, n);
      std::span<const T> si(in->data(), total);
      std::span<T> so(o, c);
      run_op(
          x, d, [&] { gsync::reduce_scatter<A>(comm, si, so, Op{}); },
          [&] { return gsync::reduce_scatter_async<A>(comm, si, so, Op{}); },
          [&x, in, out, o, c, total, mine, r, n, d, what] {
            check_reduced<T, Op>(x, what, r, n, o, c, d.base + mine);
            if (d.in_place) check_input_kept<T, Op>(x, what, r, in->data(), total, d.base, mine, mine + c);
            else check_input_kept<T, Op>(x, what, r, in->data(), total, d.base);
            (void)out;
          });
    });
  });
}

template <class Comm>
void do_reduce(Comm& comm, rank_ctx& x, const op_desc& d) {
  with_element<typename cases<Comm>::reductions>(static_cast<std::size_t>(d.type), [&](auto ci) {
    using C = typename decltype(ci)::type;
    using T = typename C::type;
    using Op = typename C::op;
    auto body = [&](auto ai) {
      using A = typename decltype(ai)::type;
      const int n = comm.size(), r = comm.rank();
      const bool root = r == d.root;
      const std::size_t c = d.count;
      auto in = filled<T>(c);
      for (std::size_t i = 0; i < c; ++i) (*in)[i] = input<T, Op>(r, d.base + i);
      // Out of place on a non-root rank: an empty output, or a sentinel buffer that must stay untouched.
      const std::size_t out_n = (root || d.in_place || !d.empty_out) ? c : 0;
      auto out = d.in_place ? in : filled<T>(out_n);
      const std::string what = describe(d, dname<T>() + " " + std::string(Op::name), A::name, n);
      std::span<const T> si(in->data(), c);
      std::span<T> so(out->data(), out_n);
      run_op(
          x, d, [&] { gsync::reduce<A>(comm, si, so, Op{}, d.root); },
          [&] { return gsync::reduce_async<A>(comm, si, so, Op{}, d.root); },
          [&x, in, out, c, out_n, r, n, root, d, what] {
            if (root) check_reduced<T, Op>(x, what, r, n, out->data(), c, d.base);
            if (!root || !d.in_place) check_input_kept<T, Op>(x, what, r, in->data(), c, d.base);
            if (!root && !d.in_place) {
              const auto* b = reinterpret_cast<const unsigned char*>(out->data());
              for (std::size_t i = 0; i < out_n * sizeof(T); i += 13)
                if (b[i] != 0xA5) {
                  x.rep.fail(x.world + " " + what + ": rank " + std::to_string(r) + " (not the root) had its output written");
                  break;
                }
            }
          });
    };
    if constexpr (std::is_same_v<typename C::rooted, gsync::algo::automatic>) with_rooted_algo(d.algo, body);
    else body(std::type_identity<typename C::rooted>{});
  });
}

template <class Comm>
void do_allgather(Comm& comm, rank_ctx& x, const op_desc& d) {
  with_element<typename cases<Comm>::dtypes>(static_cast<std::size_t>(d.type), [&](auto ti) {
    using T = typename decltype(ti)::type;
    using Op = gsync::op::sum;
    with_block_algo(d.algo, [&](auto ai) {
      using A = typename decltype(ai)::type;
      const int n = comm.size(), r = comm.rank();
      const std::size_t c = d.count, total = c * static_cast<std::size_t>(n), mine = static_cast<std::size_t>(r) * c;
      auto out = filled<T>(total);
      auto in = d.in_place ? out : filled<T>(c);
      T* i0 = d.in_place ? out->data() + mine : in->data();
      for (std::size_t i = 0; i < c; ++i) i0[i] = input<T, Op>(r, d.base + i);
      const std::string what = describe(d, dname<T>(), A::name, n);
      std::span<const T> si(i0, c);
      std::span<T> so(out->data(), total);
      run_op(
          x, d, [&] { gsync::allgather<A>(comm, si, so); }, [&] { return gsync::allgather_async<A>(comm, si, so); },
          [&x, in, out, c, r, d, what] {
            check_moved(x, what, r, out->data(), out->size(), [&](std::size_t j) {
              return input<T, Op>(static_cast<int>(j / c), d.base + j % c);
            });
            (void)in;
          });
    });
  });
}

template <class Comm>
void do_broadcast(Comm& comm, rank_ctx& x, const op_desc& d) {
  with_element<typename cases<Comm>::dtypes>(static_cast<std::size_t>(d.type), [&](auto ti) {
    using T = typename decltype(ti)::type;
    using Op = gsync::op::sum;
    with_rooted_algo(d.algo, [&](auto ai) {
      using A = typename decltype(ai)::type;
      const int n = comm.size(), r = comm.rank();
      const std::size_t c = d.count;
      auto data = filled<T>(c);
      if (r == d.root)
        for (std::size_t i = 0; i < c; ++i) (*data)[i] = input<T, Op>(r, d.base + i);
      const std::string what = describe(d, dname<T>(), A::name, n);
      std::span<T> s(data->data(), c);
      run_op(
          x, d, [&] { gsync::broadcast<A>(comm, s, d.root); }, [&] { return gsync::broadcast_async<A>(comm, s, d.root); },
          [&x, data, c, r, d, what] {
            check_moved(x, what, r, data->data(), c, [&](std::size_t j) { return input<T, Op>(d.root, d.base + j); });
          });
    });
  });
}

template <class Comm>
void do_alltoall(Comm& comm, rank_ctx& x, const op_desc& d) {
  with_element<typename cases<Comm>::dtypes>(static_cast<std::size_t>(d.type), [&](auto ti) {
    using T = typename decltype(ti)::type;
    using Op = gsync::op::sum;
    with_alltoall_algo(d.algo, [&](auto ai) {
      using A = typename decltype(ai)::type;
      const int n = comm.size(), r = comm.rank();
      const std::size_t c = d.count, total = c * static_cast<std::size_t>(n);
      auto in = filled<T>(total), out = filled<T>(total);
      for (std::size_t i = 0; i < total; ++i) (*in)[i] = input<T, Op>(r, d.base + i);
      const std::string what = describe(d, dname<T>(), A::name, n);
      std::span<const T> si(in->data(), total);
      std::span<T> so(out->data(), total);
      run_op(
          x, d, [&] { gsync::alltoall<A>(comm, si, so); }, [&] { return gsync::alltoall_async<A>(comm, si, so); },
          [&x, in, out, c, total, r, d, what] {
            // Block j of the output is block r of rank j's input.
            check_moved(x, what, r, out->data(), total, [&](std::size_t i) {
              return input<T, Op>(static_cast<int>(i / c), d.base + static_cast<std::size_t>(r) * c + i % c);
            });
            check_input_kept<T, Op>(x, what, r, in->data(), total, d.base);
          });
    });
  });
}

template <class Comm>
void do_barrier(Comm& comm, rank_ctx& x, const op_desc& d) {
  with_barrier_algo(d.algo, [&](auto ai) {
    using A = typename decltype(ai)::type;
    run_op(
        x, d, [&] { gsync::barrier<A>(comm); }, [&] { return gsync::barrier_async<A>(comm); }, [] {});
  });
}

template <class Comm>
void do_send_recv(Comm& comm, rank_ctx& x, const op_desc& d) {
  const int r = comm.rank();
  if (r != d.root && r != d.peer) return;
  with_element<typename cases<Comm>::dtypes>(static_cast<std::size_t>(d.type), [&](auto ti) {
    using T = typename decltype(ti)::type;
    using Op = gsync::op::sum;
    const std::size_t c = d.count;
    const std::string what = describe(d, dname<T>(), "p2p", comm.size());
    auto buf = filled<T>(c);
    std::span<T> s(buf->data(), c);
    if (r == d.root) {
      for (std::size_t i = 0; i < c; ++i) (*buf)[i] = input<T, Op>(r, d.base + i);
      std::span<const T> cs(buf->data(), c);
      run_op(
          x, d, [&] { gsync::send(comm, cs, d.peer, d.tag); }, [&] { return gsync::send_async(comm, cs, d.peer, d.tag); },
          [&x, buf, c, r, d, what] { check_input_kept<T, Op>(x, what, r, buf->data(), c, d.base); });
    } else {
      run_op(
          x, d, [&] { gsync::recv(comm, s, d.root, d.tag); }, [&] { return gsync::recv_async(comm, s, d.root, d.tag); },
          [&x, buf, c, r, d, what] {
            check_moved(x, what, r, buf->data(), c, [&](std::size_t j) { return input<T, Op>(d.root, d.base + j); });
          });
    }
  });
}

/// Waits for one pending operation chosen by `g` and runs its check. `g` is this rank's own
/// generator: the pending lists of two ranks differ by the p2p operations each took no part in.
void finish_one(rank_ctx& x, std::mt19937_64& g) {
  const std::size_t i = std::uniform_int_distribution<std::size_t>(0, x.inflight.size() - 1)(g);
  auto p = std::move(x.inflight[i]);
  x.inflight.erase(x.inflight.begin() + static_cast<std::ptrdiff_t>(i));
  p.req.wait();
  p.verify();
}

/// One rank's part of a world: the whole drawn sequence.
template <class Comm>
void soak_rank(Comm& comm, world_report& rep, const std::string& world, std::uint64_t seed, int ops) {
  rank_ctx x{rep, world, 0, 0, {}};
  std::mt19937_64 g(seed);  // the same on every rank: every draw from it is rank-independent
  std::mt19937_64 wait_order(seed + static_cast<std::uint64_t>(comm.rank()) + 1);  // this rank's own
  const int n = comm.size();
  static constexpr std::size_t segments[] = {512 << 10, 64 << 10, 4 << 10, 1 << 20};
  for (int k = 0; k < ops; ++k) {
    if (k % 37 == 36) comm.set_segment_bytes(segments[std::uniform_int_distribution<int>(0, 3)(g)]);  // waits for pending work
    op_desc d = draw(g, n, k, static_cast<int>(std::tuple_size_v<typename cases<Comm>::reductions>),
                           static_cast<int>(std::tuple_size_v<typename cases<Comm>::dtypes>));
    d.segment = comm.segment_bytes();
    switch (d.k) {
      case kind::allreduce: do_allreduce(comm, x, d); break;
      case kind::reduce_scatter: do_reduce_scatter(comm, x, d); break;
      case kind::allgather: do_allgather(comm, x, d); break;
      case kind::broadcast: do_broadcast(comm, x, d); break;
      case kind::reduce: do_reduce(comm, x, d); break;
      case kind::alltoall: do_alltoall(comm, x, d); break;
      case kind::barrier: do_barrier(comm, x, d); break;
      default: do_send_recv(comm, x, d); break;
    }
    // How many requests to wait for now: drawn on every rank alike, so that `g` stays in step.
    const int waits = std::uniform_int_distribution<int>(0, 99)(g) < 30 ? std::uniform_int_distribution<int>(1, 3)(g) : 0;
    for (int w = 0; w < waits && !x.inflight.empty(); ++w) finish_one(x, wait_order);
    while (x.inflight.size() > 8) finish_one(x, wait_order);
  }
  while (!x.inflight.empty()) finish_one(x, wait_order);
  std::lock_guard lk(rep.m);
  rep.ops += static_cast<std::uint64_t>(ops);
  rep.bytes += x.bytes;
  rep.elements_checked += x.elements;
}

gsync::config soak_config() {
  gsync::config c;
  c.timeout = 60s;  // a lost message fails the test with a timeout rather than hanging it
  return c;
}

/// Runs one world through `run(n, f, cfg)` and reports what it verified.
template <class Runner>
void soak_world(const char* family, int n, Runner run, world_report& total) {
  world_report rep;
  const std::uint64_t seed = soak_seed() ^ (std::hash<std::string>{}(family) + 0x9E3779B97F4A7C15ull * static_cast<std::uint64_t>(n));
  const std::string world = std::string(family) + " N=" + std::to_string(n);
  const int ops = soak_ops();
  const auto t0 = std::chrono::steady_clock::now();
  INFO("soak world " << world << ", GSYNC_SOAK_SEED=" << soak_seed());
  CHECK_NOTHROW(run(n, [&](auto& comm, gsync_test::world_sync&) { soak_rank(comm, rep, world, seed, ops); }, soak_config()));
  for (const auto& f : rep.failures) FAIL_CHECK(f);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("[soak] %-10s %4d ops, %9.2f MiB verified, %5.2f s (GSYNC_SOAK_SEED=%" PRIu64 ")\n", world.c_str(), ops,
              static_cast<double>(rep.bytes) / (1 << 20), s, soak_seed());
  std::fflush(stdout);
  std::lock_guard lk(total.m);
  total.ops += static_cast<std::uint64_t>(ops);
  total.bytes += rep.bytes;
  total.elements_checked += rep.elements_checked;
  CHECK(rep.failures.empty());
}

void print_total(const char* family, const world_report& t) {
  std::printf("[soak] %s total: %" PRIu64 " operations, %" PRIu64 " elements (%.2f MiB) verified\n", family, t.ops, t.elements_checked,
              static_cast<double>(t.bytes) / (1 << 20));
  std::fflush(stdout);
}

}  // namespace

TEST_CASE("soak: random collectives in process, N = 1..8") {
  world_report total;
  for (int n = 1; n <= 8; ++n)
    soak_world("inproc", n, [](int w, auto f, gsync::config c) { gsync_test::run_inproc(w, f, c); }, total);
  print_total("inproc", total);
  CHECK(total.elements_checked > 0);
}

TEST_CASE("soak: random collectives over shared memory, N = 2..5") {
  world_report total;
  for (int n = 2; n <= 5; ++n)
    soak_world("shm", n, [](int w, auto f, gsync::config c) { gsync_test::run_shm(w, f, c); }, total);
  print_total("shm", total);
  CHECK(total.elements_checked > 0);
}

TEST_CASE("soak: random collectives over TCP, N = 2..5") {
  world_report total;
  for (int n = 2; n <= 5; ++n)
    soak_world("tcp", n, [](int w, auto f, gsync::config c) { gsync_test::run_tcp(w, f, c); }, total);
  print_total("tcp", total);
  CHECK(total.elements_checked > 0);
}

TEST_CASE("soak: random collectives over mixed hosts (shared memory inside, TCP across), N = 3..5") {
  world_report total;
  for (int n = 3; n <= 5; ++n)
    soak_world("mixed", n, [](int w, auto f, gsync::config c) { gsync_test::run_mixed(w, 2, f, c); }, total);
  print_total("mixed", total);
  CHECK(total.elements_checked > 0);
}
