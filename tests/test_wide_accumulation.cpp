// 16-bit gradients reduced with float32 accumulation (grad/wide_accumulation.hpp): every element
// must equal its float32 sum over ranks in rank order, rounded to 16 bits once, on every rank and
// bit for bit, for world sizes 1-8 and awkward counts; and the synchronizer's default reducer must
// use it for 16-bit buckets (a per-hop-rounding ring fails the same check from 3 ranks on).

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include <doctest/doctest.h>
#include <gsync/grad.hpp>
#include <gsync/grad/wide_accumulation.hpp>

#include "support/reference.hpp"
#include "support/world.hpp"

namespace {

template <class W>
W value(int r, std::size_t i) {
  return gsync::grad::detail::from_f<W>(gsync_test::gradient_value(i * 7 + static_cast<std::size_t>(r) * 131) * (1.0f + 0.37f * r));
}

/// The float32 sum over ranks 0..n-1 in rank order, averaged when asked, rounded once.
template <class W>
W expected(int n, std::size_t i, bool average) {
  float acc = gsync::grad::detail::to_f(value<W>(0, i));
  for (int q = 1; q < n; ++q) acc += gsync::grad::detail::to_f(value<W>(q, i));
  return gsync::grad::detail::from_f<W>(average ? acc * (1.0f / static_cast<float>(n)) : acc);
}

template <class W>
void wide_case(int n, std::size_t count, bool average) {
  gsync_test::run_inproc(n, [&](auto& comm, auto&) {
    std::vector<W> data(count);
    for (std::size_t i = 0; i < count; ++i) data[i] = value<W>(comm.rank(), i);
    gsync::grad::wide_scratch s;
    gsync::grad::allreduce_wide(comm, std::span<W>(data), average, s);
    gsync::grad::allreduce_wide(comm, std::span<W>(data.data(), 0), average, s);  // empty: nothing moves
    std::size_t off = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const W want = expected<W>(n, i, average);
      off += std::memcmp(&data[i], &want, sizeof(W)) != 0;
    }
    CHECK(off == 0);
  });
}

}  // namespace

TEST_CASE("allreduce_wide: one rounding per element, world sizes 1-8, bfloat16 and half, sum and average") {
  for (int n = 1; n <= 8; ++n)
    for (std::size_t count : {std::size_t{1}, std::size_t(n), std::size_t(n + 1), std::size_t{1021}, std::size_t{40009}})
      for (bool average : {false, true}) {
        CAPTURE(n);
        CAPTURE(count);
        CAPTURE(average);
        wide_case<gsync::bfloat16>(n, count, average);
        wide_case<gsync::half>(n, count, average);
      }
}

TEST_CASE("synchronizer: bfloat16 buckets are reduced with float32 accumulation (the default reducer)") {
  const int n = 6;
  const std::size_t count = 30011;
  gsync_test::run_inproc(n, [&](auto& comm, auto&) {
    std::vector<gsync::bfloat16> data(count);
    for (std::size_t i = 0; i < count; ++i) data[i] = value<gsync::bfloat16>(comm.rank(), i);
    std::uint64_t sent = 0;
    gsync::grad::allreduce_reducer red;
    gsync::grad::bucket_job<gsync::bfloat16> job{0, std::span<gsync::bfloat16>(data), true, &sent};
    red.start(comm, job).wait();
    std::size_t off = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const gsync::bfloat16 want = expected<gsync::bfloat16>(n, i, true);
      off += std::memcmp(&data[i], &want, 2) != 0;
    }
    CHECK(off == 0);
    CHECK(sent > 0);
  });
}
