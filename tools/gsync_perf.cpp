// gsync-perf: collective bandwidth benchmark and correctness check, modelled on nccl-tests'
// all_reduce_perf (and its reduce_scatter, all_gather, broadcast, reduce and alltoall siblings).
//
//   gsyncrun -n 4 -- gsync-perf -b 8 -e 64M -f 2 -d float32 -o sum -a auto -c 1
//   gsyncrun -n 4 -- gsync-perf --coll allgather -b 1K -e 64M
//
// Every rank joins the job from the environment (gsync::tcp_communicator::from_env()). For each
// message size from -b to -e (geometric with -f, or additive with -i) the tool optionally checks one
// allreduce against a reference computed on the host (-c 1), runs -w warmup iterations, then times
// -n iterations. Rank 0 prints one table row per size: the time is the largest per-rank average,
// algbw = bytes / time, busbw = algbw * factor with nccl-tests' factors (allreduce 2(N-1)/N, the
// traffic on each link of a ring; reduce_scatter, allgather, alltoall (N-1)/N; broadcast, reduce 1),
// and #wrong the number of output elements, over all ranks, that differ from the reference by more
// than the tolerance of the element type. As in nccl-tests, the size of reduce_scatter, allgather
// and alltoall is the whole N-block buffer (per-rank block = size / N). --json FILE also writes
// the rows as JSON, each with the collective in "op".
//
// Exit status: 0 when every check passed, 1 when an element was wrong, 2 for usage errors, 3 when
// gsync (or anything else) failed at run time.

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gsync/allgather.hpp"
#include "gsync/allreduce.hpp"
#include "gsync/alltoall.hpp"
#include "gsync/broadcast.hpp"
#include "gsync/reduce.hpp"
#include "gsync/reduce_scatter.hpp"
#include "gsync/communicator.hpp"
#include "gsync/core/config.hpp"
#include "gsync/core/dtype.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/half.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/detail/function_ref.hpp"

namespace {

constexpr int exit_ok = 0;
constexpr int exit_wrong = 1;
constexpr int exit_usage = 2;
constexpr int exit_failure = 3;

/// Runtime tag of a reduction operator (the `-o` option).
enum class redop { sum, prod, min, max, avg };

/// The name of `r` as printed and accepted by `-o`.
constexpr std::string_view redop_name(redop r) noexcept {
  switch (r) {
    case redop::sum: return "sum";
    case redop::prod: return "prod";
    case redop::min: return "min";
    case redop::max: return "max";
    case redop::avg: return "avg";
  }
  return "?";
}

/// What `-d all` and `-o all` run, in order.
constexpr gsync::dtype all_dtypes[] = {
    gsync::dtype::int8,    gsync::dtype::uint8,    gsync::dtype::int16,   gsync::dtype::uint16,
    gsync::dtype::int32,   gsync::dtype::uint32,   gsync::dtype::int64,   gsync::dtype::uint64,
    gsync::dtype::float16, gsync::dtype::bfloat16, gsync::dtype::float32, gsync::dtype::float64,
};
constexpr redop all_redops[] = {redop::sum, redop::prod, redop::min, redop::max, redop::avg};

/// The collective benchmarked (the `--coll` option).
enum class coll { allreduce, reduce_scatter, allgather, broadcast, reduce, alltoall };

/// The name of `c` as accepted by `--coll` and written to JSON's "op".
constexpr std::string_view coll_name(coll c) noexcept {
  switch (c) {
    case coll::allreduce: return "allreduce";
    case coll::reduce_scatter: return "reduce_scatter";
    case coll::allgather: return "allgather";
    case coll::broadcast: return "broadcast";
    case coll::reduce: return "reduce";
    case coll::alltoall: return "alltoall";
  }
  return "?";
}
constexpr coll all_colls[] = {coll::allreduce, coll::reduce_scatter, coll::allgather, coll::broadcast, coll::reduce, coll::alltoall};

/// True when the collective combines values (takes -o).
constexpr bool reduces(coll c) noexcept { return c == coll::allreduce || c == coll::reduce_scatter || c == coll::reduce; }

/// True when the size is the whole buffer of N blocks (nccl-tests' convention for these).
constexpr bool blocked(coll c) noexcept { return c == coll::reduce_scatter || c == coll::allgather || c == coll::alltoall; }

/// nccl-tests' bus bandwidth factor of `c` over `n` ranks (doc/PERFORMANCE.md).
constexpr double busbw_factor(coll c, int n) noexcept {
  switch (c) {
    case coll::allreduce: return 2.0 * (n - 1) / n;
    case coll::reduce_scatter:
    case coll::allgather:
    case coll::alltoall: return static_cast<double>(n - 1) / n;
    case coll::broadcast:
    case coll::reduce: return 1.0;
  }
  return 1.0;
}

/// Everything the command line says.
struct options {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{64} << 20;
  double factor = 2.0;         ///< geometric step (used when increment == 0)
  std::size_t increment = 0;   ///< additive step, 0 = geometric
  std::vector<gsync::dtype> dtypes{gsync::dtype::float32};
  std::string dtype_label = "float32";
  std::vector<redop> redops{redop::sum};
  std::string redop_label = "sum";
  std::optional<gsync::algo::allreduce_id> algo;  ///< nothing = automatic (allreduce)
  std::optional<gsync::algo::collective_id> coll_algo;  ///< nothing = automatic (other collectives)
  std::string algo_label = "auto";
  coll collective = coll::allreduce;
  int root = 0;
  int iters = 20;
  int warmup = 5;
  bool check = true;
  bool inplace = false;
  std::string json_path;
  bool help = false;
};

/// A command-line mistake; reported on stderr with exit status 2.
struct usage_error {
  std::string what;
};

/// One table row.
struct row {
  coll collective = coll::allreduce;
  std::size_t bytes = 0;
  std::size_t count = 0;
  std::string dtype;
  std::string redop;
  std::string algo;
  double time_us = 0;
  double algbw = 0;
  double busbw = 0;
  std::optional<std::int64_t> wrong;  ///< nothing when not checked
};

/// Rank for error messages: -1 until known.
int g_rank = -1;

/// Prints the usage text to `f`.
void print_usage(std::FILE* f) {
  std::fprintf(f,
               "usage: gsync-perf [options]   (start N ranks with gsyncrun, torchrun, mpirun or srun)\n"
               "  -b, --minbytes SIZE     smallest message in bytes, K/M/G suffixes (default 8)\n"
               "  -e, --maxbytes SIZE     largest message in bytes (default 64M)\n"
               "  -f, --stepfactor F      multiply the size by F each step (default 2)\n"
               "  -i, --stepbytes SIZE    add SIZE bytes each step instead of multiplying\n"
               "  -d, --datatype TYPE     float32 float64 float16 bfloat16 int8 uint8 int16 uint16\n"
               "                          int32 uint32 int64 uint64, nccl aliases (float, double, half,\n"
               "                          bf16, int, ...), or all (default float32)\n"
               "  -o, --op OP             sum prod min max avg, or all (default sum)\n"
               "      --coll NAME         allreduce reduce_scatter allgather broadcast reduce alltoall\n"
               "                          (default allreduce; for reduce_scatter, allgather and alltoall\n"
               "                          sizes are the whole buffer of N blocks, as in nccl-tests)\n"
               "  -a, --algo ALGO         allreduce: %s; broadcast, reduce: %s;\n"
               "                          reduce_scatter, allgather: %s; alltoall: %s (default auto)\n"
               "  -r, --root R            root rank of broadcast and reduce (default 0)\n"
               "  -n, --iters N           timed iterations per size (default 20)\n"
               "  -w, --warmup_iters N    untimed iterations before timing (default 5)\n"
               "  -c, --check 0|1         check one result per size against a reference (default 1)\n"
               "      --inplace 0|1       in place (1) or out of place (0, default)\n"
               "      --json FILE         rank 0 also writes the results to FILE as JSON\n"
               "  -h, --help              this text\n"
               "exit status: 0 all correct, 1 wrong results, 2 usage error, 3 run-time failure\n",
               gsync::algo::allreduce_names().c_str(), gsync::algo::valid_names("broadcast").c_str(),
               gsync::algo::valid_names("reduce_scatter").c_str(), gsync::algo::valid_names("alltoall").c_str());
}

/// Lower-cases `s` (ASCII).
std::string lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

/// Parses a dtype name or alias; nothing when unknown.
std::optional<gsync::dtype> parse_dtype(std::string_view s) {
  struct alias {
    std::string_view name;
    gsync::dtype d;
  };
  static constexpr alias aliases[] = {
      {"float32", gsync::dtype::float32},   {"float", gsync::dtype::float32},    {"fp32", gsync::dtype::float32},
      {"f32", gsync::dtype::float32},       {"float64", gsync::dtype::float64},  {"double", gsync::dtype::float64},
      {"fp64", gsync::dtype::float64},      {"f64", gsync::dtype::float64},      {"float16", gsync::dtype::float16},
      {"half", gsync::dtype::float16},      {"fp16", gsync::dtype::float16},     {"f16", gsync::dtype::float16},
      {"bfloat16", gsync::dtype::bfloat16}, {"bf16", gsync::dtype::bfloat16},    {"int8", gsync::dtype::int8},
      {"char", gsync::dtype::int8},         {"i8", gsync::dtype::int8},          {"uint8", gsync::dtype::uint8},
      {"u8", gsync::dtype::uint8},          {"int16", gsync::dtype::int16},      {"short", gsync::dtype::int16},
      {"i16", gsync::dtype::int16},         {"uint16", gsync::dtype::uint16},    {"u16", gsync::dtype::uint16},
      {"int32", gsync::dtype::int32},       {"int", gsync::dtype::int32},        {"i32", gsync::dtype::int32},
      {"uint32", gsync::dtype::uint32},     {"uint", gsync::dtype::uint32},      {"u32", gsync::dtype::uint32},
      {"int64", gsync::dtype::int64},       {"long", gsync::dtype::int64},       {"i64", gsync::dtype::int64},
      {"uint64", gsync::dtype::uint64},     {"ulong", gsync::dtype::uint64},     {"u64", gsync::dtype::uint64},
  };
  const std::string l = lower(s);
  for (const auto& a : aliases)
    if (a.name == l) return a.d;
  return std::nullopt;
}

/// Parses an operator name; nothing when unknown.
std::optional<redop> parse_redop(std::string_view s) {
  const std::string l = lower(s);
  for (redop r : all_redops)
    if (redop_name(r) == l) return r;
  return std::nullopt;
}

/// Parses a size option (K/M/G suffixes, 1024-based).
std::size_t parse_size_arg(const std::string& opt, const std::string& v) {
  auto b = gsync::detail::parse_size(v);
  if (!b) throw usage_error{opt + " '" + v + "' is not a size such as 8, 64K or 1M"};
  return *b;
}

/// Parses an integer option in [lo, hi].
int parse_int_arg(const std::string& opt, const std::string& v, int lo, int hi) {
  try {
    std::size_t pos = 0;
    const long long x = std::stoll(v, &pos, 10);
    if (pos == v.size() && x >= lo && x <= hi) return static_cast<int>(x);
  } catch (...) {
  }
  throw usage_error{opt + " '" + v + "' is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]"};
}

/// Parses the command line.
options parse_args(int argc, char** argv) {
  options o;
  bool factor_given = false;
  std::optional<std::pair<std::string, std::string>> algo_arg;  // (option, value), parsed once --coll is known
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string value;
    bool has_value = false;
    // --name=value and -xVALUE forms.
    if (a.rfind("--", 0) == 0) {
      if (auto eq = a.find('='); eq != std::string::npos) {
        value = a.substr(eq + 1);
        a.resize(eq);
        has_value = true;
      }
    } else if (a.size() > 2 && a[0] == '-' && std::isalpha(static_cast<unsigned char>(a[1]))) {
      value = a.substr(2);
      a.resize(2);
      has_value = true;
    }
    auto next = [&]() -> std::string {
      if (has_value) return value;
      if (i + 1 >= argc) throw usage_error{a + " needs a value"};
      return argv[++i];
    };
    if (a == "-h" || a == "--help") {
      o.help = true;
    } else if (a == "-b" || a == "--minbytes") {
      o.min_bytes = parse_size_arg(a, next());
    } else if (a == "-e" || a == "--maxbytes") {
      o.max_bytes = parse_size_arg(a, next());
    } else if (a == "-f" || a == "--stepfactor") {
      const std::string v = next();
      std::size_t pos = 0;
      try {
        o.factor = std::stod(v, &pos);
      } catch (...) {
        pos = 0;
      }
      if (pos == 0 || pos != v.size()) throw usage_error{a + " '" + v + "' is not a number"};
      if (!(o.factor > 1.0) || !std::isfinite(o.factor)) throw usage_error{a + " must be greater than 1"};
      factor_given = true;
    } else if (a == "-i" || a == "--stepbytes") {
      o.increment = parse_size_arg(a, next());
      if (o.increment == 0) throw usage_error{a + " must be at least 1 byte"};
    } else if (a == "-d" || a == "--datatype") {
      const std::string v = next();
      if (lower(v) == "all") {
        o.dtypes.assign(std::begin(all_dtypes), std::end(all_dtypes));
        o.dtype_label = "all";
      } else if (auto d = parse_dtype(v)) {
        o.dtypes = {*d};
        o.dtype_label = std::string(gsync::name(*d));
      } else {
        throw usage_error{a + ": unknown data type '" + v +
                          "' (valid: float32 float64 float16 bfloat16 int8 uint8 int16 uint16 int32 uint32 "
                          "int64 uint64, aliases float double half bf16 int ..., or all)"};
      }
    } else if (a == "-o" || a == "--op") {
      const std::string v = next();
      if (lower(v) == "all") {
        o.redops.assign(std::begin(all_redops), std::end(all_redops));
        o.redop_label = "all";
      } else if (auto r = parse_redop(v)) {
        o.redops = {*r};
        o.redop_label = std::string(redop_name(*r));
      } else {
        throw usage_error{a + ": unknown operator '" + v + "' (valid: sum, prod, min, max, avg, all)"};
      }
    } else if (a == "-a" || a == "--algo") {
      algo_arg = std::make_pair(a, next());
    } else if (a == "--coll") {
      const std::string v = lower(next());
      bool found = false;
      for (coll c : all_colls)
        if (coll_name(c) == v) {
          o.collective = c;
          found = true;
        }
      if (!found)
        throw usage_error{a + ": unknown collective '" + v +
                          "' (valid: allreduce, reduce_scatter, allgather, broadcast, reduce, alltoall)"};
    } else if (a == "-r" || a == "--root") {
      o.root = parse_int_arg(a, next(), 0, 1 << 30);
    } else if (a == "-n" || a == "--iters") {
      o.iters = parse_int_arg(a, next(), 1, 1 << 30);
    } else if (a == "-w" || a == "--warmup_iters") {
      o.warmup = parse_int_arg(a, next(), 0, 1 << 30);
    } else if (a == "-c" || a == "--check") {
      o.check = parse_int_arg(a, next(), 0, 1) != 0;
    } else if (a == "--inplace") {
      o.inplace = parse_int_arg(a, next(), 0, 1) != 0;
    } else if (a == "--json") {
      o.json_path = next();
      if (o.json_path.empty()) throw usage_error{"--json needs a file name"};
    } else {
      throw usage_error{"unknown option '" + std::string(argv[i]) + "' (see -h)"};
    }
  }
  if (o.help) return o;
  if (algo_arg) {
    const auto& [a, v] = *algo_arg;
    if (o.collective == coll::allreduce) {
      try {
        o.algo = gsync::algo::parse_allreduce(v, a);
      } catch (const gsync::error&) {
        throw usage_error{a + ": unknown allreduce algorithm '" + v + "' (valid: " +
                          gsync::algo::allreduce_names() + ")"};
      }
      o.algo_label = o.algo ? v : "auto";
    } else {
      const std::string_view cn = coll_name(o.collective);
      try {
        o.coll_algo = gsync::algo::parse_collective(cn, v, a);
      } catch (const gsync::error&) {
        throw usage_error{a + ": unknown " + std::string(cn) + " algorithm '" + v + "' (valid: " +
                          gsync::algo::valid_names(cn) + ")"};
      }
      o.algo_label = o.coll_algo ? std::string(gsync::algo::name(*o.coll_algo)) : "auto";
    }
  }
  if (o.collective == coll::alltoall && o.inplace) throw usage_error{"--inplace 1: alltoall has no in-place form"};
  if (!reduces(o.collective)) {  // -o does not apply: one run per dtype
    o.redops = {redop::sum};
    o.redop_label = "none";
  }
  if (factor_given && o.increment != 0) throw usage_error{"give either -f (multiply) or -i (add), not both"};
  if (o.min_bytes == 0) throw usage_error{"-b must be at least 1 byte"};
  if (o.max_bytes < o.min_bytes) throw usage_error{"-e must not be smaller than -b"};
  return o;
}

/// The message sizes in bytes: from min to max inclusive, geometric or additive.
std::vector<std::size_t> message_sizes(const options& o) {
  std::vector<std::size_t> v;
  for (std::size_t s = o.min_bytes; s <= o.max_bytes;) {
    v.push_back(s);
    std::size_t n = 0;
    if (o.increment != 0) {
      if (s > o.max_bytes - o.increment) break;
      n = s + o.increment;
    } else {
      const double d = static_cast<double>(s) * o.factor;
      if (!(d <= static_cast<double>(o.max_bytes))) break;
      n = std::max(s + 1, static_cast<std::size_t>(d));
    }
    s = n;
  }
  return v;
}

// ---------------------------------------------------------------------------------------------
// Input values and the reference.

/// True for the floating element types (float, double, gsync::half, gsync::bfloat16).
template <class T>
inline constexpr bool is_float_v = std::is_floating_point_v<T> || std::is_same_v<T, gsync::half> ||
                                   std::is_same_v<T, gsync::bfloat16>;

/// A pseudo-random 64-bit value for element `i` of rank `rank` (splitmix64 finalizer).
inline std::uint64_t cell_hash(int rank, std::size_t i) noexcept {
  std::uint64_t x = static_cast<std::uint64_t>(i) * 0x9e3779b97f4a7c15ull +
                    static_cast<std::uint64_t>(rank + 1) * 0xd1b54a32d192ed03ull;
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

/// Converts a double to element type `T` (through float for the 16-bit float types).
template <class T>
inline T from_double(double x) noexcept {
  if constexpr (std::is_same_v<T, gsync::half> || std::is_same_v<T, gsync::bfloat16>) return T(static_cast<float>(x));
  else return static_cast<T>(x);
}

/// Converts a floating element to double (exact).
template <class T>
inline double to_double(T x) noexcept {
  if constexpr (std::is_same_v<T, gsync::half> || std::is_same_v<T, gsync::bfloat16>) return static_cast<float>(x);
  else return static_cast<double>(x);
}

/// Largest magnitude of a sum/avg input of integer type `T` such that no partial sum over `world`
/// ranks overflows.
template <class T>
constexpr std::uint64_t sum_bound(int world) noexcept {
  std::uint64_t cap = 0;
  if constexpr (sizeof(T) == 1) cap = 15;
  else if constexpr (sizeof(T) == 2) cap = 1000;
  else if constexpr (sizeof(T) == 4) cap = 1000000;
  else cap = 1000000000000ull;
  const auto limit = static_cast<std::uint64_t>(std::numeric_limits<T>::max()) / static_cast<std::uint64_t>(world);
  return std::min(cap, limit);
}

/// The input of rank `rank` at element `i` for operator `Op` in a world of `world` ranks. Chosen so
/// that integer reductions never overflow (sum/avg: small values; prod: 1, -1 and at most two 2s per
/// element; min/max: anything) and float reductions stay well inside the range of the type.
template <class T, class Op>
inline T input_value(int rank, std::size_t i, int world) noexcept {
  const std::uint64_t h = cell_hash(rank, i);
  if constexpr (std::is_same_v<Op, gsync::op::prod>) {
    const auto w = static_cast<std::size_t>(world);
    const auto r = static_cast<std::size_t>(rank);
    int v = 1;
    if (r == i % w || r == (i / w + 1) % w) v = 2;
    else if (std::is_signed_v<T> || is_float_v<T>) v = (h & 1) != 0 ? -1 : 1;
    if constexpr (is_float_v<T>) return from_double<T>(v);
    else return static_cast<T>(v);
  } else if constexpr (std::is_same_v<Op, gsync::op::min> || std::is_same_v<Op, gsync::op::max>) {
    if constexpr (is_float_v<T>) return from_double<T>((static_cast<double>(h >> 11) * 0x1.0p-53 - 0.5) * 2000.0);
    else return static_cast<T>(h);  // any value of the type (modular conversion)
  } else {  // sum, avg
    if constexpr (is_float_v<T>) {
      return from_double<T>((static_cast<double>(h >> 11) * 0x1.0p-53 - 0.5) * 20.0);
    } else {
      const std::uint64_t b = sum_bound<T>(world);
      if constexpr (std::is_signed_v<T>)
        return static_cast<T>(static_cast<std::int64_t>(h % (2 * b + 1)) - static_cast<std::int64_t>(b));
      else return static_cast<T>(h % (b + 1));
    }
  }
}

/// Fills `data[0, count)` with this rank's inputs.
template <class T, class Op>
void fill_input(T* data, std::size_t count, int rank, int world) {
  for (std::size_t i = 0; i < count; ++i) data[i] = input_value<T, Op>(rank, i, world);
}

/// Fills `data[0, count)` with values that a repeated in-place allreduce leaves unchanged (0 for
/// sum/avg, 1 for prod; min/max keep whatever is there), so timed in-place iterations cannot overflow.
template <class T, class Op>
void fill_stable(T* data, std::size_t count) {
  if constexpr (std::is_same_v<Op, gsync::op::min> || std::is_same_v<Op, gsync::op::max>) return;
  const double v = std::is_same_v<Op, gsync::op::prod> ? 1.0 : 0.0;
  T x;
  if constexpr (is_float_v<T>) x = from_double<T>(v);
  else x = static_cast<T>(v);
  std::fill(data, data + count, x);
}

/// Relative tolerance unit of a floating type (a few ulps of one rounding).
template <class T>
constexpr double float_eps() noexcept {
  if constexpr (std::is_same_v<T, gsync::half>) return 0x1.0p-10;
  else if constexpr (std::is_same_v<T, gsync::bfloat16>) return 0x1.0p-7;
  else if constexpr (std::is_same_v<T, float>) return 0x1.0p-22;
  else return 0x1.0p-50;
}

/// Number of elements of `out[0, count)` that differ from the reference reduction of every rank's
/// `input_value`: exactly for integers (and for float min/max/prod, which are exact with these
/// inputs), within world * eps * sum|x| (divided by world for avg) for float sums and averages.
template <class T, class Op>
std::int64_t count_wrong(const T* out, std::size_t count, int world, std::size_t first = 0) {
  constexpr bool is_sum = std::is_same_v<Op, gsync::op::sum>;
  constexpr bool is_avg = std::is_same_v<Op, gsync::op::avg>;
  constexpr bool is_prod = std::is_same_v<Op, gsync::op::prod>;
  constexpr bool is_min = std::is_same_v<Op, gsync::op::min>;
  std::int64_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if constexpr (is_float_v<T>) {
      double acc = is_prod ? 1.0 : 0.0, abs_sum = 0.0;
      for (int r = 0; r < world; ++r) {
        const double x = to_double(input_value<T, Op>(r, first + i, world));
        if constexpr (is_sum || is_avg) {
          acc += x;
          abs_sum += std::fabs(x);
        }
        else if constexpr (is_prod) acc *= x;
        else if constexpr (is_min) acc = r == 0 ? x : std::min(acc, x);
        else acc = r == 0 ? x : std::max(acc, x);
      }
      double tol = 0.0;
      if constexpr (is_sum) tol = world * float_eps<T>() * abs_sum;
      if constexpr (is_avg) {
        acc /= world;
        tol = float_eps<T>() * abs_sum;
      }
      const double got = to_double(out[i]);
      if (!(std::fabs(got - acc) <= tol)) ++wrong;  // NaN counts as wrong
    } else {
      using W = std::conditional_t<std::is_signed_v<T>, std::int64_t, std::uint64_t>;
      W acc = is_prod ? 1 : 0;
      for (int r = 0; r < world; ++r) {
        const W x = static_cast<W>(input_value<T, Op>(r, first + i, world));
        if constexpr (is_sum || is_avg) acc += x;
        else if constexpr (is_prod) acc *= x;
        else if constexpr (is_min) acc = r == 0 ? x : std::min(acc, x);
        else acc = r == 0 ? x : std::max(acc, x);
      }
      if constexpr (is_avg) acc /= static_cast<W>(world);  // truncates toward zero, as op::avg does
      if (static_cast<W>(out[i]) != acc) ++wrong;
    }
  }
  return wrong;
}

// ---------------------------------------------------------------------------------------------
// Running.

/// What every case needs: the communicator, the options, the sizes, and the rows so far.
struct bench {
  gsync::tcp_communicator& comm;
  const options& opt;
  std::vector<std::size_t> sizes;
  std::vector<row> rows;
};

/// A barrier: an allreduce of one int32.
void barrier(gsync::tcp_communicator& comm) {
  std::int32_t one = 1;
  gsync::allreduce(comm, std::span<std::int32_t>{&one, 1}, gsync::op::sum{});
}

/// The name of the algorithm that policy `Algo` runs for `bytes` (for `automatic`, what
/// `choose_allreduce` picks, honouring GSYNC_ALGO).
template <class Algo>
std::string algo_ran(gsync::tcp_communicator& comm, std::size_t bytes) {
  if constexpr (std::is_same_v<Algo, gsync::algo::automatic>) {
    const auto ch = gsync::algo::choose_allreduce(bytes, comm.size(), gsync::local_costs_of(comm.transport()), comm.settings().algo,
                                                  &comm.placement(), nullptr, comm.segment_bytes());
    return gsync::algo::visit(ch.id, [](auto a) { return std::string(decltype(a)::name); });
  } else {
    return std::string(Algo::name);
  }
}

/// Prints one table row (rank 0).
void print_row(const row& r) {
  char wrong[32];
  if (r.wrong) std::snprintf(wrong, sizeof wrong, "%lld", static_cast<long long>(*r.wrong));
  else std::snprintf(wrong, sizeof wrong, "N/A");
  std::printf("%13zu %13zu %9s %6s %18s %11.2f %10.3f %10.3f %7s\n", r.bytes, r.count, r.dtype.c_str(), r.redop.c_str(),
              r.algo.c_str(), r.time_us, r.algbw, r.busbw, wrong);
  std::fflush(stdout);
}

/// One allreduce of `count` elements from `in` to `out` (in place when they are equal), with the
/// algorithm the case was instantiated for.
template <class T>
using allreduce_call = gsync::detail::function_ref<void(const T* in, T* out, std::size_t count)>;
/// The name of the algorithm that ran for a message (allreduce) or call (the others) of `bytes`.
using algo_name_of = gsync::detail::function_ref<std::string(std::size_t bytes)>;

/// Benchmarks (and checks) every size for element type `T` and operator `Op`, running `call`.
/// Not templated on the algorithm: only `call` is, so the filling, timing and checking code is
/// compiled once per (T, Op) rather than once per algorithm too.
template <class T, class Op>
void run_case(bench& b, allreduce_call<T> call, algo_name_of algo_ran) {
  auto& comm = b.comm;
  const options& o = b.opt;
  const int rank = comm.rank(), world = comm.size();
  const std::size_t max_count = o.max_bytes / sizeof(T);
  if (max_count == 0) return;
  std::vector<T> in(max_count);
  std::vector<T> out(o.inplace ? 0 : max_count);
  if (!o.inplace) fill_input<T, Op>(in.data(), max_count, rank, world);

  std::size_t last_count = 0;
  for (const std::size_t size : b.sizes) {
    const std::size_t count = size / sizeof(T);
    if (count == 0 || count == last_count) continue;  // too small, or the same message as the last row
    last_count = count;
    const std::size_t bytes = count * sizeof(T);
    T* const data = in.data();
    T* const res = o.inplace ? in.data() : out.data();
    auto run_once = [&] { call(data, res, count); };

    row r;
    if (o.check) {
      if (o.inplace) fill_input<T, Op>(data, count, rank, world);
      run_once();
      std::int64_t wrong = count_wrong<T, Op>(res, count, world);
      gsync::allreduce(comm, std::span<std::int64_t>{&wrong, 1}, gsync::op::sum{});
      r.wrong = wrong;
    }
    if (o.inplace) fill_stable<T, Op>(data, count);

    for (int w = 0; w < o.warmup; ++w) run_once();
    barrier(comm);
    const auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < o.iters; ++it) run_once();
    const auto t1 = std::chrono::steady_clock::now();
    double time_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / o.iters;
    gsync::allreduce(comm, std::span<double>{&time_us, 1}, gsync::op::max{});

    r.bytes = bytes;
    r.count = count;
    r.dtype = std::string(gsync::name(gsync::dtype_of<T>));
    r.redop = std::string(Op::name);
    r.algo = algo_ran(bytes);
    r.time_us = time_us;
    r.algbw = time_us > 0 ? static_cast<double>(bytes) / time_us / 1e3 : 0.0;
    r.busbw = r.algbw * 2.0 * (world - 1) / world;
    if (rank == 0) print_row(r);
    b.rows.push_back(std::move(r));
  }
}

/// run_case with algorithm policy `Algo`.
template <class T, class Op, class Algo>
void run_case_with(bench& b) {
  auto& comm = b.comm;
  auto call = [&comm](const T* in, T* out, std::size_t count) {
    if (in == out) gsync::allreduce<Algo>(comm, std::span<T>{out, count}, Op{});
    else gsync::allreduce<Algo>(comm, std::span<const T>{in, count}, std::span<T>{out, count}, Op{});
  };
  auto ran = [&comm](std::size_t bytes) { return algo_ran<Algo>(comm, bytes); };
  run_case<T, Op>(b, call, ran);
}

/// True when policy `Algo` can run collective `c` for element `T` and operator `Op` (automatic can).
template <class Algo, class T, class Op>
constexpr bool can_run(coll c) {
  using P = gsync::primitives_t<gsync::host_memory, T, Op, gsync::transport::tcp>;  // host buffers
  // Collectives that move data without reducing it run with op::sum only (parse_args sets -o
  // to sum for them): their code for the other operators would be identical and only cost
  // compile time.
  if (!reduces(c) && !std::is_same_v<Op, gsync::op::sum>) return false;
  if constexpr (std::is_same_v<Algo, gsync::algo::automatic>) return true;
  else {
    switch (c) {
      case coll::reduce_scatter: return gsync::reduce_scatter_algorithm<Algo, P>;
      case coll::allgather: return gsync::allgather_algorithm<Algo, P>;
      case coll::broadcast: return gsync::broadcast_algorithm<Algo, P>;
      case coll::reduce: return gsync::rooted_reduce_algorithm<Algo, P>;
      case coll::alltoall: return gsync::alltoall_algorithm<Algo, P>;
      case coll::allreduce: return false;
    }
    return false;
  }
}

/// The name of the algorithm that policy `Algo` runs for collective `c` with `bytes` per call (for
/// `automatic`, what algo/select_collectives.hpp picks, honouring GSYNC_ALGO_<COLLECTIVE>).
template <class Algo>
std::string coll_algo_ran(gsync::tcp_communicator& comm, coll c, std::size_t bytes) {
  if constexpr (std::is_same_v<Algo, gsync::algo::automatic>) {
    const auto& s = comm.settings();
    const std::size_t seg = comm.segment_bytes();
    const int n = comm.size();
    gsync::algo::collective_id id = gsync::algo::collective_id_of<gsync::algo::ring>;
    switch (c) {
      case coll::reduce_scatter: id = gsync::algo::choose_reduce_scatter(bytes, n, seg, s.algo_reduce_scatter).id; break;
      case coll::allgather: id = gsync::algo::choose_allgather(bytes, n, seg, s.algo_allgather).id; break;
      case coll::broadcast: id = gsync::algo::choose_broadcast(bytes, n, seg, s.algo_broadcast, &comm.placement()).id; break;
      case coll::reduce: id = gsync::algo::choose_reduce(bytes, n, seg, s.algo_reduce, &comm.placement()).id; break;
      case coll::alltoall: id = gsync::algo::choose_alltoall(bytes, n, seg, s.algo_alltoall).id; break;
      case coll::allreduce: break;
    }
    return std::string(gsync::algo::name(id));
  } else {
    return std::string(Algo::name);
  }
}

/// One call of the benchmarked collective: input `ip`, output `op`, `c` elements a block, `total`
/// in the whole buffer; with the algorithm the case was instantiated for.
template <class T>
using coll_call = gsync::detail::function_ref<void(T* ip, T* op, std::size_t c, std::size_t total)>;
/// Benchmarks (and checks) every size of a collective other than allreduce for element type `T`,
/// operator `Op` (reducing collectives only), running `call`. Sizes of reduce_scatter,
/// allgather and alltoall are the whole N-block buffer, as in nccl-tests.
/// Not templated on the algorithm: `call` runs the collective with it, `algo_ran` names it.
template <class T, class Op>
void run_coll_case(bench& b, coll_call<T> call, algo_name_of algo_ran) {
  auto& comm = b.comm;
  const options& o = b.opt;
  const coll cl = o.collective;
  const int rank = comm.rank(), world = comm.size(), root = o.root;
  const std::size_t blocks = blocked(cl) ? static_cast<std::size_t>(world) : 1;
  const std::size_t max_total = o.max_bytes / sizeof(T);
  if (max_total / blocks == 0) return;
  std::vector<T> in(max_total), out(max_total);
  fill_input<T, Op>(in.data(), max_total, rank, world);
  auto same = [](const T& a, const T& b) { return std::memcmp(&a, &b, sizeof(T)) == 0; };

  std::size_t last_c = 0;
  for (const std::size_t size : b.sizes) {
    const std::size_t c = size / sizeof(T) / blocks;  // per-rank block (or buffer) elements
    if (c == 0 || c == last_c) continue;
    last_c = c;
    const std::size_t total = c * blocks;
    const std::size_t bytes = total * sizeof(T);
    const std::size_t rc = static_cast<std::size_t>(rank) * c;
    T* const ip = (cl == coll::allgather && o.inplace) ? out.data() + rc : in.data();
    T* const op = o.inplace ? (cl == coll::reduce_scatter ? in.data() + rc : cl == coll::reduce ? in.data() : out.data())
                            : out.data();
    auto run_once = [&] { call(ip, op, c, total); };

    row r;
    if (o.check) {
      // Inputs as the reference expects them (the timed runs below may have changed them).
      switch (cl) {
        case coll::broadcast:
          if (rank == root) fill_input<T, Op>(ip, c, root, world);
          else std::memset(static_cast<void*>(ip), 0, c * sizeof(T));
          break;
        case coll::allgather: fill_input<T, Op>(ip, c, rank, world); break;
        default: fill_input<T, Op>(ip, total, rank, world); break;
      }
      run_once();
      std::int64_t wrong = 0;
      switch (cl) {
        case coll::reduce_scatter: wrong = count_wrong<T, Op>(op, c, world, rc); break;
        case coll::reduce: wrong = rank == root ? count_wrong<T, Op>(op, c, world) : 0; break;
        case coll::broadcast:
          for (std::size_t i = 0; i < c; ++i) wrong += !same(ip[i], input_value<T, Op>(root, i, world));
          break;
        case coll::allgather:
          for (int j = 0; j < world; ++j)
            for (std::size_t i = 0; i < c; ++i) wrong += !same(op[static_cast<std::size_t>(j) * c + i], input_value<T, Op>(j, i, world));
          break;
        case coll::alltoall:
          for (int j = 0; j < world; ++j)
            for (std::size_t i = 0; i < c; ++i)
              wrong += !same(op[static_cast<std::size_t>(j) * c + i], input_value<T, Op>(j, rc + i, world));
          break;
        case coll::allreduce: break;
      }
      gsync::allreduce(comm, std::span<std::int64_t>{&wrong, 1}, gsync::op::sum{});
      r.wrong = wrong;
    }
    // In place, a reduction rewrites its own input: keep it at values repeated runs leave unchanged.
    if (o.inplace && (cl == coll::reduce_scatter || cl == coll::reduce)) fill_stable<T, Op>(in.data(), total);

    for (int w = 0; w < o.warmup; ++w) run_once();
    barrier(comm);
    const auto t0 = std::chrono::steady_clock::now();
    for (int it = 0; it < o.iters; ++it) run_once();
    const auto t1 = std::chrono::steady_clock::now();
    double time_us = std::chrono::duration<double, std::micro>(t1 - t0).count() / o.iters;
    gsync::allreduce(comm, std::span<double>{&time_us, 1}, gsync::op::max{});

    r.collective = cl;
    r.bytes = bytes;
    r.count = total;
    r.dtype = std::string(gsync::name(gsync::dtype_of<T>));
    r.redop = reduces(cl) ? std::string(Op::name) : "none";
    r.algo = algo_ran((blocked(cl) ? c : total) * sizeof(T));
    r.time_us = time_us;
    r.algbw = time_us > 0 ? static_cast<double>(bytes) / time_us / 1e3 : 0.0;
    r.busbw = r.algbw * busbw_factor(cl, world);
    if (rank == 0) print_row(r);
    b.rows.push_back(std::move(r));
  }
}

/// run_coll_case with algorithm policy `Algo`.
template <class T, class Op, class Algo>
void run_coll_case_with(bench& b) {
  const coll cl = b.opt.collective;
  if (!can_run<Algo, T, Op>(cl)) return;  // parse_collective lets no such pair through
  auto& comm = b.comm;
  const int root = b.opt.root;
  auto call = [&comm, cl, root](T* ip, T* op, std::size_t c, std::size_t total) {
    switch (cl) {
      case coll::reduce_scatter:
        if constexpr (can_run<Algo, T, Op>(coll::reduce_scatter))
          gsync::reduce_scatter<Algo>(comm, std::span<const T>{ip, total}, std::span<T>{op, c}, Op{});
        break;
      case coll::allgather:
        if constexpr (can_run<Algo, T, Op>(coll::allgather))
          gsync::allgather<Algo>(comm, std::span<const T>{ip, c}, std::span<T>{op, total});
        break;
      case coll::broadcast:
        if constexpr (can_run<Algo, T, Op>(coll::broadcast)) gsync::broadcast<Algo>(comm, std::span<T>{ip, c}, root);
        break;
      case coll::reduce:
        if constexpr (can_run<Algo, T, Op>(coll::reduce))
          gsync::reduce<Algo>(comm, std::span<const T>{ip, c}, std::span<T>{op, c}, Op{}, root);
        break;
      case coll::alltoall:
        if constexpr (can_run<Algo, T, Op>(coll::alltoall))
          gsync::alltoall<Algo>(comm, std::span<const T>{ip, total}, std::span<T>{op, total});
        break;
      case coll::allreduce: break;
    }
  };
  auto ran = [&comm, cl](std::size_t bytes) { return coll_algo_ran<Algo>(comm, cl, bytes); };
  run_coll_case<T, Op>(b, call, ran);
}

/// Runs the case for `T` and `Op` with the algorithm chosen by -a.
template <class T, class Op>
void run_algo(bench& b) {
  if (b.opt.collective != coll::allreduce) {
    if (!b.opt.coll_algo) return run_coll_case_with<T, Op, gsync::algo::automatic>(b);
    return gsync::algo::visit(*b.opt.coll_algo, [&](auto a) { run_coll_case_with<T, Op, decltype(a)>(b); });
  }
  if (!b.opt.algo) return run_case_with<T, Op, gsync::algo::automatic>(b);
  gsync::algo::visit(*b.opt.algo, [&](auto a) { run_case_with<T, Op, decltype(a)>(b); });
}

/// Runs the case for `T` with runtime operator `r`.
template <class T>
void run_op(bench& b, redop r) {
  switch (r) {
    case redop::sum: return run_algo<T, gsync::op::sum>(b);
    case redop::prod: return run_algo<T, gsync::op::prod>(b);
    case redop::min: return run_algo<T, gsync::op::min>(b);
    case redop::max: return run_algo<T, gsync::op::max>(b);
    case redop::avg: return run_algo<T, gsync::op::avg>(b);
  }
}

/// Runs the case for runtime element type `d` and operator `r`.
void run_dtype(bench& b, gsync::dtype d, redop r) {
  switch (d) {
    case gsync::dtype::int8: return run_op<std::int8_t>(b, r);
    case gsync::dtype::uint8: return run_op<std::uint8_t>(b, r);
    case gsync::dtype::int16: return run_op<std::int16_t>(b, r);
    case gsync::dtype::uint16: return run_op<std::uint16_t>(b, r);
    case gsync::dtype::int32: return run_op<std::int32_t>(b, r);
    case gsync::dtype::uint32: return run_op<std::uint32_t>(b, r);
    case gsync::dtype::int64: return run_op<std::int64_t>(b, r);
    case gsync::dtype::uint64: return run_op<std::uint64_t>(b, r);
    case gsync::dtype::float16: return run_op<gsync::half>(b, r);
    case gsync::dtype::bfloat16: return run_op<gsync::bfloat16>(b, r);
    case gsync::dtype::float32: return run_op<float>(b, r);
    case gsync::dtype::float64: return run_op<double>(b, r);
  }
}

/// Writes `s` as a JSON string literal to `f`.
void json_string(std::FILE* f, std::string_view s) {
  std::fputc('"', f);
  for (const char c : s) {
    if (c == '"' || c == '\\') std::fprintf(f, "\\%c", c);
    else if (static_cast<unsigned char>(c) < 0x20) std::fprintf(f, "\\u%04x", static_cast<unsigned>(c));
    else std::fputc(c, f);
  }
  std::fputc('"', f);
}

/// Writes the results as JSON to `f`; false on a write error.
bool write_json(std::FILE* f, int world, std::string_view transport, const std::vector<row>& rows) {
  std::fprintf(f, "{\"world_size\": %d, \"transport\": ", world);
  json_string(f, transport);
  std::fprintf(f, ", \"rows\": [");
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const row& r = rows[k];
    std::fprintf(f, "%s\n  {\"op\": \"%s\", \"bytes\": %zu, \"count\": %zu, \"dtype\": ", k ? "," : "",
                 std::string(coll_name(r.collective)).c_str(), r.bytes, r.count);
    json_string(f, r.dtype);
    std::fprintf(f, ", \"redop\": ");
    json_string(f, r.redop);
    std::fprintf(f, ", \"algo\": ");
    json_string(f, r.algo);
    std::fprintf(f, ", \"time_us\": %.6g, \"algbw_gbs\": %.6g, \"busbw_gbs\": %.6g, \"wrong\": ", r.time_us, r.algbw,
                 r.busbw);
    if (r.wrong) std::fprintf(f, "%lld}", static_cast<long long>(*r.wrong));
    else std::fprintf(f, "null}");
  }
  std::fprintf(f, "%s]}\n", rows.empty() ? "" : "\n");
  const bool ok = std::ferror(f) == 0;
  return std::fclose(f) == 0 && ok;
}

/// Formats a byte count for the header ("64 MiB", "8 B").
std::string human_bytes(std::size_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (u < 4 && b >= 1024 && b % 1024 == 0) b /= 1024, ++u;
  return std::to_string(b) + " " + units[u];
}

/// Rank of this process from the launcher's variables, or -1 (for messages before joining).
int rank_from_env() noexcept {
  try {
    return gsync::bootstrap::launch_info::from_env().rank;
  } catch (...) {
    return -1;
  }
}

/// The tool proper; returns the exit status.
int run(int argc, char** argv) {
  options opt;
  try {
    opt = parse_args(argc, argv);
  } catch (const usage_error& e) {
    if (rank_from_env() <= 0) std::fprintf(stderr, "gsync-perf: %s\n", e.what.c_str());
    return exit_usage;
  }
  if (opt.help) {
    if (rank_from_env() <= 0) print_usage(stdout);
    return exit_ok;
  }

  auto comm = gsync::tcp_communicator::from_env();
  g_rank = comm.rank();
  const int world = comm.size();
  const std::string transport(comm.transport().name());

  // Rank 0 opens the JSON file now, so that a bad path stops every rank before the benchmark.
  std::FILE* json = nullptr;
  std::int32_t json_failed = 0;
  if (g_rank == 0 && !opt.json_path.empty()) {
    json = std::fopen(opt.json_path.c_str(), "w");
    if (json == nullptr) {
      std::fprintf(stderr, "gsync-perf: cannot open --json file '%s': %s\n", opt.json_path.c_str(), std::strerror(errno));
      json_failed = 1;
    }
  }
  gsync::allreduce(comm, std::span<std::int32_t>{&json_failed, 1}, gsync::op::max{});
  if (json_failed != 0) return exit_usage;

  if (opt.root >= world) {
    if (g_rank == 0) std::fprintf(stderr, "gsync-perf: -r %d is not a rank of this %d-rank job\n", opt.root, world);
    return exit_usage;
  }
  bench b{comm, opt, message_sizes(opt), {}};
  if (g_rank == 0) {
    std::string algo = opt.algo_label;
    if (opt.collective == coll::allreduce && !opt.algo && !comm.settings().algo.empty())
      algo += " (GSYNC_ALGO=" + comm.settings().algo + ")";
    std::string coll_label;
    if (opt.collective != coll::allreduce) {
      coll_label = "collective " + std::string(coll_name(opt.collective)) + ", ";
      if (opt.collective == coll::broadcast || opt.collective == coll::reduce) coll_label += "root " + std::to_string(opt.root) + ", ";
    }
    std::printf("# gsync-perf: %d ranks, transport %s, %sdtype %s, op %s, algo %s, iters %d, warmup %d, check %d, %s\n",
                world, transport.c_str(), coll_label.c_str(), opt.dtype_label.c_str(), opt.redop_label.c_str(), algo.c_str(), opt.iters,
                opt.warmup, opt.check ? 1 : 0, opt.inplace ? "in place" : "out of place");
    char step[64];
    if (opt.increment != 0) std::snprintf(step, sizeof step, "step +%s", human_bytes(opt.increment).c_str());
    else std::snprintf(step, sizeof step, "factor %g", opt.factor);
    std::printf("# sizes: %s .. %s, %s; time = max over ranks of the mean per iteration\n",
                human_bytes(opt.min_bytes).c_str(), human_bytes(opt.max_bytes).c_str(), step);
    const gsync::topology& topo = comm.transport().topo();
    if (topo.hosts() > 1 && topo.links())
      std::printf("# %d hosts; links between hosts (%s): %.1f us per message, %.3f Gbit/s\n", topo.hosts(),
                  topo.links()->measured ? "timed at start-up" : "GSYNC_NET_* or assumed", topo.links()->alpha_us,
                  topo.links()->gbps());
    std::printf("#\n");
    std::printf("# %11s %13s %9s %6s %18s %11s %10s %10s %7s\n", "size", "count", "type", "redop", "algo", "time",
                "algbw", "busbw", "#wrong");
    std::printf("# %11s %13s %9s %6s %18s %11s %10s %10s %7s\n", "(B)", "(elements)", "", "", "", "(us)", "(GB/s)",
                "(GB/s)", "");
    std::fflush(stdout);
  }

  for (const gsync::dtype d : opt.dtypes)
    for (const redop r : opt.redops) run_dtype(b, d, r);

  std::int64_t wrong_total = 0;
  double busbw_sum = 0;
  for (const row& r : b.rows) {
    wrong_total += r.wrong.value_or(0);
    busbw_sum += r.busbw;
  }
  if (g_rank == 0) {
    std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong_total), wrong_total ? "ERROR" : "OK");
    std::printf("# Avg bus bandwidth    : %g\n", b.rows.empty() ? 0.0 : busbw_sum / static_cast<double>(b.rows.size()));
    std::printf("#\n");
    std::fflush(stdout);
  }
  // Rank 0 writes the JSON file before any rank exits: launchers such as gsyncrun tear the job down
  // as soon as one rank exits with a non-zero status (as every rank does when a check failed).
  std::int32_t write_failed = 0;
  if (json != nullptr && !write_json(json, world, transport, b.rows)) {
    std::fprintf(stderr, "gsync-perf: rank 0: writing '%s' failed\n", opt.json_path.c_str());
    write_failed = 1;
  }
  gsync::allreduce(comm, std::span<std::int32_t>{&write_failed, 1}, gsync::op::max{});
  if (write_failed != 0) return exit_failure;
  return wrong_total != 0 ? exit_wrong : exit_ok;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const gsync::error& e) {
    if (g_rank < 0) g_rank = rank_from_env();
    std::fprintf(stderr, "gsync-perf: rank %s: %s\n", g_rank < 0 ? "?" : std::to_string(g_rank).c_str(), e.what());
    return exit_failure;
  } catch (const std::exception& e) {
    if (g_rank < 0) g_rank = rank_from_env();
    std::fprintf(stderr, "gsync-perf: rank %s: %s\n", g_rank < 0 ? "?" : std::to_string(g_rank).c_str(), e.what());
    return exit_failure;
  }
}
