#pragma once
/// \file
/// The fingerprint of one call: what a rank believes the operation is (element type, count,
/// operator, root, algorithm). Every message on the wire carries its sender's fingerprint next to
/// the operation's kind (the wire tag) and sequence number, and the receiver compares it with its
/// own, so that ranks calling different collectives, or the same one with different arguments,
/// fail with `errc::mismatch` spelling out both calls ("rank 2 called allreduce(float32, 1048576,
/// sum) as op #17, rank 3 called allreduce(float32, 1048575, sum) as op #17") instead of hanging or
/// mixing bytes. It also names the communicator the call belongs to (`comm`, 0 for the job's
/// world communicator, a value derived by `communicator::split` for the others), so that the
/// traffic of several communicators sharing one connection is told apart. 24 bytes per message:
/// the cost is noise next to any payload (see benchmarks/results/fingerprint.md).
///
/// Codes are small integers so that a receiver can name what the sender called without any
/// extra round trip. User operators are one code ("user": two different user functors cannot be
/// told apart), algorithms outside gsync's set are "custom".

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

#include "gsync/core/dtype.hpp"

namespace gsync {

/// What one rank passed to one call, as carried in every frame of that call.
struct fingerprint {
  std::uint64_t count = 0;  ///< elements per rank as the caller passed them (block size for rs/ag/a2a)
  std::uint64_t comm = 0;   ///< the communicator's identity (0: the world; set by the transport, see split)
  std::int32_t root = -1;   ///< root rank of broadcast / reduce; -1 for unrooted calls
  std::uint8_t dtype = 0;   ///< 1 + `gsync::dtype` of the elements; 0: none (barrier)
  std::uint8_t op = 0;      ///< operator code (`op_code`); 0: no operator
  std::uint8_t algo = 0;    ///< algorithm code (`algo_code`); 0: none (point-to-point)
  std::uint8_t flags = 0;   ///< reserved, always 0
  bool operator==(const fingerprint&) const = default;
};
static_assert(sizeof(fingerprint) == 24 && std::is_trivially_copyable_v<fingerprint>);

namespace detail {

inline constexpr std::string_view op_codes[] = {"", "sum", "prod", "min", "max", "avg"};
inline constexpr std::uint8_t user_op_code = 255;

inline constexpr std::string_view algo_codes[] = {"",     "ring",          "recursive_doubling", "halving_doubling",
                                                   "tree", "direct",        "hierarchical",       "binomial_tree",
                                                   "pairwise", "dissemination", "int8",     "star",
                                                   "one_shot", "two_shot",      "hierarchical_ipc"};
inline constexpr std::uint8_t custom_algo_code = 255;

}  // namespace detail

namespace detail {
/// Index of `name` in `table` (from 1), else `other`.
template <std::size_t N>
constexpr std::uint8_t code_in(const std::string_view (&table)[N], std::string_view name, std::uint8_t other) noexcept {
  for (std::uint8_t i = 1; i < N; ++i)
    if (table[i] == name) return i;
  return other;
}
/// Entry `c` of `table`, `other_name` for code `other`, "?" for anything else.
template <std::size_t N>
constexpr std::string_view name_in(const std::string_view (&table)[N], std::uint8_t c, std::uint8_t other,
                                   std::string_view other_name) noexcept {
  if (c == other) return other_name;
  return c < N ? table[c] : std::string_view("?");
}
}  // namespace detail

/// Code of an operator name: sum, prod, min, max, avg, anything else "user".
constexpr std::uint8_t op_code(std::string_view name) noexcept {
  return detail::code_in(detail::op_codes, name, detail::user_op_code);
}

/// Name of an operator code ("user" for user functors, "?" for an unknown code).
constexpr std::string_view op_code_name(std::uint8_t c) noexcept {
  return detail::name_in(detail::op_codes, c, detail::user_op_code, "user");
}

/// Code of an algorithm name (gsync's algorithms; anything else "custom").
constexpr std::uint8_t algo_code(std::string_view name) noexcept {
  return detail::code_in(detail::algo_codes, name, detail::custom_algo_code);
}

/// The code of algorithm policy A's name, computed at compile time when `A::name` is a constant
/// (every gsync algorithm's is): the table search then costs nothing per operation.
/// \tparam A an algorithm policy (a type with a static `name`).
template <class A>
std::uint8_t algo_code_of() noexcept {
  if constexpr (requires { typename std::integral_constant<std::uint8_t, algo_code(A::name)>; })
    return std::integral_constant<std::uint8_t, algo_code(A::name)>::value;
  else
    return algo_code(A::name);
}

/// The code of operator Op's name (`Op::name` if it has one, else "user"), at compile time when
/// the name is a constant. \tparam Op a reduction operator.
template <class Op>
std::uint8_t op_code_of() noexcept {
  if constexpr (!requires { Op::name; })
    return detail::user_op_code;
  else if constexpr (requires { typename std::integral_constant<std::uint8_t, op_code(Op::name)>; })
    return std::integral_constant<std::uint8_t, op_code(Op::name)>::value;
  else
    return op_code(Op::name);
}

/// Name of an algorithm code ("custom" for algorithms outside gsync, "?" for an unknown code).
constexpr std::string_view algo_code_name(std::uint8_t c) noexcept {
  return detail::name_in(detail::algo_codes, c, detail::custom_algo_code, "custom");
}

/// The fingerprint of a call on elements `T` with `count` elements, operator code `op` and `root`.
/// \tparam T element type (void: none).
template <class T>
constexpr fingerprint make_fingerprint(std::uint64_t count, std::uint8_t op = 0, int root = -1) noexcept {
  fingerprint f;
  f.count = count;
  f.root = root;
  if constexpr (!std::is_void_v<T>) f.dtype = static_cast<std::uint8_t>(1 + static_cast<int>(dtype_of<T>));
  f.op = op;
  return f;
}

/// Bytes per rank the call moves as its caller sees them (count x element size), 0 without a type.
constexpr std::uint64_t payload_bytes(const fingerprint& f) noexcept {
  if (f.dtype == 0 || f.dtype > 12) return 0;
  return f.count * size_of(static_cast<dtype>(f.dtype - 1));
}

/// "allreduce(float32, 1048576, sum)", "broadcast(int32, 10, root 2)", "barrier()": a call as the
/// user wrote it, from the operation's kind name and its fingerprint; the algorithm follows in
/// brackets when known ("[ring]").
inline std::string describe_call(std::string_view kind, const fingerprint& f) {
  std::string s(kind);
  s += '(';
  if (f.dtype != 0) {
    s += f.dtype <= 12 ? std::string(name(static_cast<dtype>(f.dtype - 1))) : "dtype#" + std::to_string(f.dtype);
    if (kind == "alltoallv") s += ", counts per pair";  // they differ from rank to rank: the fingerprint carries none
    else s += ", " + std::to_string(f.count);
  }
  if (f.op != 0) s += ", " + std::string(op_code_name(f.op));
  if (f.root >= 0) s += ", root " + std::to_string(f.root);
  s += ')';
  if (f.algo != 0) s += " [" + std::string(algo_code_name(f.algo)) + "]";
  return s;
}

/// "communicator 9f3c0a17d2e4b651" (16 hex digits), or "the world communicator" for id 0: how
/// messages name a communicator.
inline std::string comm_label(std::uint64_t id) {
  if (id == 0) return "the world communicator";
  static constexpr char hex[] = "0123456789abcdef";
  std::string s = "communicator ";
  for (int i = 60; i >= 0; i -= 4) s += hex[(id >> i) & 15];
  return s;
}

/// Which fields of two fingerprints differ, in words ("count, operator"); empty if none.
inline std::string fingerprint_difference(const fingerprint& a, const fingerprint& b) {
  std::string d;
  auto add = [&](const char* w) { d += (d.empty() ? "" : ", ") + std::string(w); };
  if (a.dtype != b.dtype) add("element type");
  if (a.count != b.count) add("count");
  if (a.op != b.op) add("operator");
  if (a.root != b.root) add("root");
  if (a.algo != b.algo) add("algorithm");
  if (a.flags != b.flags) add("flags");
  if (a.comm != b.comm) add("communicator");
  return d;
}

}  // namespace gsync
