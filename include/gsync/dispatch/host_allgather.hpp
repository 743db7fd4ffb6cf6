#pragma once
/// \file
/// The host allgather under `gsync::allgather` (allgather.hpp): argument checks, numbering and the
/// algorithm's run. On a floor of its own because the communicator's own set-up collectives
/// (`communicator::split`, the CUDA IPC group's records: split.hpp, dispatch/ipc_setup.hpp) run it.

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

#include "gsync/algo/select_collectives.hpp"
#include "gsync/core/communicator.hpp"
#include "gsync/core/concepts.hpp"
#include "gsync/core/error.hpp"
#include "gsync/core/memory_space.hpp"
#include "gsync/core/ops.hpp"
#include "gsync/dispatch/collective.hpp"

namespace gsync {

namespace detail {

template <class Algo, class Space = host_memory, class X, class T>
void run_allgather(communicator<X>& comm, message_id id, const T* in, T* out, std::size_t c) {
  id.fp.algo = algo_code_of<Algo>();
  auto p = make_primitives<Space>(comm, id, in, out, c, op::sum{});
  static_assert(allgather_algorithm<Algo, decltype(p)>, "this algorithm policy has no allgather schedule");
  Algo::allgather(p);
}

/// Runs allgather ticket `tk` (numbered at issue) on `comm`.
template <class Algo, class Space = host_memory, class X, class T>
void allgather_run(communicator<X>& comm, op_ticket tk, const T* in, T* out, std::size_t c) {
  const message_id id{tag_allgather, tk.seq, make_fingerprint<T>(c, 0, -1)};
  op_scope scope(comm, "allgather", tk, id);
  if (c == 0) return;
  if constexpr (std::is_same_v<Algo, algo::automatic>) {
    const auto ch = algo::choose_allgather(c * sizeof(T), comm.size(), comm.segment_bytes(), comm.settings().algo_allgather);
    log_choice(comm, "allgather", dtype_of<T>, c, "", ch, [](auto i) { return algo::name(i); });
    algo::visit(ch.id, [&](auto a) {
      using A = decltype(a);
      if constexpr (allgather_algorithm<A, primitives_t<Space, T, op::sum, X>>) run_allgather<A, Space>(comm, id, in, out, c);
    });
  } else {
    run_allgather<Algo, Space>(comm, id, in, out, c);
  }
}

/// Checks allgather arguments (sizes, the only in-place form).
template <class X, class T>
void check_allgather(const communicator<X>& comm, std::span<const T> in, std::span<T> out) {
  const std::size_t n = static_cast<std::size_t>(comm.size()), c = in.size();
  check_extent("allgather", "output", out.size(), sizeof(T));
  check_blocks("allgather", "output", out.size(), n, c, "world size x input elements");
  const bool in_place = static_cast<const void*>(in.data()) == static_cast<const void*>(out.data() + comm.rank() * c);
  if (!in_place && overlaps(in.data(), in.size_bytes(), out.data(), out.size_bytes()))
    invalid("allgather", "input and output overlap, but the input is not block " + std::to_string(comm.rank()) +
                             " of the output (the only in-place form)");
}

/// Numbers an allgather and runs it (inline, or behind pending asynchronous operations).
template <class Algo, class Space = host_memory, class X, class T>
void allgather_impl(communicator<X>& comm, const T* in, T* out, std::size_t c) {
  launch(comm, "allgather", [=](communicator<X>& x, op_ticket tk) { allgather_run<Algo, Space>(x, tk, in, out, c); });
}

}  // namespace detail

}  // namespace gsync
