#include <doctest/doctest.h>

#include <gsync/core/chunking.hpp>
#include <cstdint>
#include <vector>

using gsync::range;

TEST_CASE("split covers the buffer exactly, in order, with sizes differing by at most one") {
  for (std::size_t count : {0u, 1u, 2u, 7u, 8u, 9u, 63u, 64u, 65u, 1000u, 999983u}) {
    for (std::size_t parts = 1; parts <= 17; ++parts) {
      std::size_t next = 0, lo = SIZE_MAX, hi = 0;
      for (std::size_t i = 0; i < parts; ++i) {
        const range r = gsync::split(count, parts, i);
        CHECK(r.offset == next);
        next += r.count;
        lo = std::min(lo, r.count);
        hi = std::max(hi, r.count);
      }
      CHECK(next == count);
      CHECK(hi - lo <= 1);
      // Larger parts come first.
      if (count % parts) CHECK(gsync::split(count, parts, 0).count == count / parts + 1);
    }
  }
}

TEST_CASE("ring_layout: every element in exactly one segment of one chunk, segments bounded") {
  for (int world = 1; world <= 9; ++world) {
    for (std::size_t count : {0u, 1u, 3u, 8u, 9u, 100u, 4099u}) {
      for (std::size_t seg : {1u, 2u, 3u, 7u, 64u, 1u << 20}) {
        const gsync::ring_layout L(count, world, seg);
        CHECK(L.segments() >= 1);
        std::vector<int> hits(count, 0);
        for (int c = 0; c < world; ++c) {
          const range ch = L.chunk(c);
          std::size_t inside = 0;
          for (std::size_t k = 0; k < L.segments(); ++k) {
            const range s = L.segment(c, k);
            CHECK(s.count <= std::max<std::size_t>(seg, 1));
            CHECK(s.offset >= ch.offset);
            CHECK(s.offset + s.count <= ch.offset + ch.count);
            for (std::size_t i = 0; i < s.count; ++i) ++hits[s.offset + i];
            inside += s.count;
          }
          CHECK(inside == ch.count);
        }
        for (int h : hits) CHECK(h == 1);
      }
    }
  }
}

TEST_CASE("ring_layout: segment count follows the largest chunk") {
  const gsync::ring_layout L(10, 3, 2);  // chunks 4,3,3 -> 2 segments each
  CHECK(L.segments() == 2);
  CHECK(L.chunk(0) == range{0, 4});
  CHECK(L.chunk(2) == range{7, 3});
  CHECK(L.segment(0, 1) == range{2, 2});
  CHECK(L.segment(1, 0) == range{4, 2});
  CHECK(L.segment(1, 1) == range{6, 1});
  const gsync::ring_layout E(2, 4, 8);  // fewer elements than ranks: empty chunks, empty segments
  CHECK(E.chunk(3).count == 0);
  CHECK(E.segment(3, 0).count == 0);
}

TEST_CASE("wrap") {
  CHECK(gsync::wrap(-1, 5) == 4);
  CHECK(gsync::wrap(-11, 5) == 4);
  CHECK(gsync::wrap(7, 5) == 2);
  CHECK(gsync::wrap(0, 1) == 0);
}
