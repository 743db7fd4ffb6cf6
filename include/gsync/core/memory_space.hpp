#pragma once
/// \file
/// Memory spaces: where a buffer's elements live, as a type, and the primitives that move and
/// combine elements there.
///
/// A collective's schedule (algo/) is written once over a primitives object; which primitives it
/// runs over follows from the buffer's memory space, chosen at compile time:
///   buffer view V  --memory_space_of-->  space S  --primitives_for<S, T, Op, X>-->  primitives P
/// A collective's public overload maps its view to a space (`std::span<T>` is host memory) and
/// hands the space to its internal run functions; detail::make_primitives builds the space's
/// primitives after checking that the transport can move that space (`moves`, core/concepts.hpp).
///
/// Adding a space (device memory with `device_span<T>` in issue 27) is three declarations beside
/// what exists, no edit of the algorithms: a tag (`struct device_memory`, with `name` and
/// `moved_by<X>`), `memory_space_of<device_span<T>>`, and `primitives_for<device_memory, ...>`;
/// plus, per collective, a thin overload for the new view that passes its space to the run
/// function (`detail::allreduce_impl<Algo, Space>`; tests/test_memory_space.cpp shows one).
///
/// Why a whole primitives class per space, rather than host primitives calling per-space copy
/// and reduce hooks: what differs between spaces is not only the element loop but where incoming
/// bytes land (host staging, IPC, a stream-ordered copy) and when a send has released its source
/// (stream completion), i.e. every primitive. The host space's primitives are untyped
/// (`basic_host_primitives<X>`): they reach the element loops of core/reduce.hpp through a table
/// of the (T, Op) pair (core/elem_kernels.hpp), one indirect call per piece, so that the host
/// schedules are compiled once per transport; inside each entry the loop stays inlined and
/// vectorized as before.

#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>

#include "gsync/core/concepts.hpp"

namespace gsync {

/// Host memory: pageable or pinned memory the CPU reads and writes (`std::span<T>`). The only
/// memory space today; device memory arrives with issue 27 as another tag of this kind.
struct host_memory {
  static constexpr std::string_view name = "host";  ///< for messages
  /// Transport X can move host buffers when its traits say so (every transport by default).
  /// \tparam X a transport.
  template <class X>
  static constexpr bool moved_by = [] {
    if constexpr (requires { transport_traits<X>::supports_host_memory; }) return bool(transport_traits<X>::supports_host_memory);
    else return true;  // a specialization that does not say keeps the default
  }();
};
static_assert(memory_space<host_memory>);

/// The memory space of a buffer view type: `type` names it. The primary template has no `type`
/// (not a view gsync knows); specialise it for a new view, e.g. `device_span<T>` -> the device space.
/// \tparam V a buffer view type (cv and references are removed by `memory_space_of_t`).
template <class V>
struct memory_space_of {};

/// `std::span` views host memory.
/// \tparam T element type (const for inputs). \tparam E extent.
template <class T, std::size_t E>
struct memory_space_of<std::span<T, E>> {
  using type = host_memory;  ///< the space
};

/// The memory space of buffer view V (see memory_space_of).
/// \tparam V a buffer view type.
template <class V>
using memory_space_of_t = typename memory_space_of<std::remove_cvref_t<V>>::type;

/// The primitives type of memory space `Space`: `type` is the class that runs schedules over
/// buffers of that space (host: `basic_host_primitives<X>`, core/primitives.hpp). Each space
/// specialises it beside its tag. `type` offers the vocabulary of core/primitives.hpp and is
/// constructible as `type(x, id, in, out, count, segment_elems, op, deadline, scratch)`
/// (`X&, message_id, const T*, T*, std::size_t, std::size_t, Op, deadline, std::span<std::byte>`),
/// which is how detail::make_primitives builds it (with the caller's operator, which outlives the
/// primitives: `op` may be taken by reference).
/// \tparam Space a memory space. \tparam T element type. \tparam Op reduction operator.
/// \tparam X transport.
template <class Space, class T, class Op, class X>
struct primitives_for;

/// The primitives type of memory space Space (see primitives_for).
/// \tparam Space a memory space. \tparam T element type. \tparam Op operator. \tparam X transport.
template <class Space, class T, class Op, class X>
using primitives_t = typename primitives_for<Space, T, Op, X>::type;

}  // namespace gsync
