#include <doctest/doctest.h>

#include <gsync/core/chunking.hpp>
#include <gsync/core/tree_shape.hpp>
#include <algorithm>
#include <bit>
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

// ---- halving-doubling (Rabenseifner) layout ------------------------------------------------------

TEST_CASE("halving_doubling_layout: halves partition, partners agree, blocks end owned once") {
  const std::size_t counts[] = {0u, 1u, 2u, 3u, 5u, 7u, 8u, 13u, 16u, 17u, 100u, 1000u, 999983u, std::size_t{1} << 22};
  for (int world = 1; world <= 16; ++world) {
    const int group = static_cast<int>(std::bit_floor(static_cast<unsigned>(world)));
    for (std::size_t count : counts) {
      CAPTURE(world);
      CAPTURE(count);
      const gsync::halving_doubling_layout L(count, group);
      CHECK(L.steps() == std::countr_zero(static_cast<unsigned>(group)));
      for (int v = 0; v < group; ++v) {
        CHECK(L.held(v, 0) == range{0, count});
        for (int s = 0; s < L.steps(); ++s) {
          const int q = L.partner(v, s);
          CHECK(q != v);
          CHECK(q >= 0);
          CHECK(q < group);
          CHECK(L.partner(q, s) == v);
          const range h = L.held(v, s), k = L.kept(v, s), g = L.given(v, s);
          // The partner holds the same range before the step, and keeps what v gives.
          CHECK(L.held(q, s) == h);
          CHECK(L.kept(q, s) == g);
          CHECK(L.given(q, s) == k);
          // kept and given are the two adjacent halves of held, sizes differing by at most the
          // block granularity.
          CHECK(k.count + g.count == h.count);
          CHECK(std::min(k.offset, g.offset) == h.offset);
          CHECK(std::max(k.offset, g.offset) == std::min(k.offset, g.offset) + (k.offset < g.offset ? k.count : g.count));
          const std::size_t blocks = static_cast<std::size_t>(group >> (s + 1));
          const std::size_t hi = std::max(k.count, g.count), lo = std::min(k.count, g.count);
          CHECK(hi - lo <= blocks);
          CHECK(L.held(v, s + 1) == k);
        }
        CHECK(L.owned(v) == gsync::split(count, static_cast<std::size_t>(group), static_cast<std::size_t>(v)));
      }
      // Every element is owned by exactly one rank at the end.
      if (count <= 100000) {
        std::vector<int> hits(count, 0);
        for (int v = 0; v < group; ++v)
          for (std::size_t i = 0; i < L.owned(v).count; ++i) ++hits[L.owned(v).offset + i];
        for (int h : hits) CHECK(h == 1);
      }
      // Replaying the steps backwards (allgather) grows the owned block back to the whole buffer.
      for (int v = 0; v < group; ++v) {
        range have = L.owned(v);
        for (int s = L.steps() - 1; s >= 0; --s) {
          const range got = L.given(v, s);
          CHECK((got.offset + got.count == have.offset || have.offset + have.count == got.offset));
          have = {std::min(have.offset, got.offset), have.count + got.count};
          CHECK(have == L.held(v, s));
        }
        CHECK(have == range{0, count});
      }
    }
  }
}

TEST_CASE("halving_doubling_layout: small example") {
  const gsync::halving_doubling_layout L(10, 4);  // blocks 3,3,2,2
  CHECK(L.steps() == 2);
  CHECK(L.partner(1, 0) == 3);
  CHECK(L.partner(1, 1) == 0);
  CHECK(L.kept(1, 0) == range{0, 6});
  CHECK(L.given(1, 0) == range{6, 4});
  CHECK(L.kept(1, 1) == range{3, 3});
  CHECK(L.given(1, 1) == range{0, 3});
  CHECK(L.owned(3) == range{8, 2});
}

// ---- double binary tree ---------------------------------------------------------------------------

TEST_CASE("binary_tree: both trees span every rank with consistent relations, at most two children") {
  for (int n = 1; n <= 64; ++n) {
    CAPTURE(n);
    int interior_in[64] = {};
    for (int which = 0; which < 2; ++which) {
      CAPTURE(which);
      const gsync::binary_tree t(n, which);
      const int root = t.root();
      REQUIRE(root >= 0);
      REQUIRE(root < n);
      CHECK(t.parent(root) == -1);
      std::vector<int> child_of(static_cast<std::size_t>(n), 0);
      int max_depth = 0;
      for (int r = 0; r < n; ++r) {
        CHECK(t.rank_of(t.label_of(r)) == r);
        CHECK(t.label_of(r) >= 1);
        CHECK(t.label_of(r) <= n);
        const int p = t.parent(r);
        if (r != root) {
          REQUIRE(p >= 0);
          REQUIRE(p < n);
          CHECK(p != r);
          CHECK((t.left(p) == r || t.right(p) == r));  // r is a child of its parent
        }
        for (int c : {t.left(r), t.right(r)}) {
          if (c < 0) continue;
          REQUIRE(c < n);
          CHECK(t.parent(c) == r);
          ++child_of[static_cast<std::size_t>(c)];
        }
        if (t.left(r) >= 0 && t.right(r) >= 0) CHECK(t.left(r) != t.right(r));
        if (t.right(r) >= 0) CHECK(t.left(r) >= 0);
        CHECK(t.children(r) <= 2);
        if (t.children(r) > 0) ++interior_in[r];
        // The walk to the root ends (no cycle), and depth agrees with it.
        int d = 0;
        for (int a = r; a != root; a = t.parent(a)) {
          REQUIRE(d <= n);
          ++d;
        }
        CHECK(t.depth(r) == d);
        max_depth = std::max(max_depth, d);
        // Subtree height: one more than the tallest child, 0 for a leaf.
        int h = 0;
        for (int c : {t.left(r), t.right(r)})
          if (c >= 0) h = std::max(h, t.height(c) + 1);
        CHECK(t.height(r) == h);
      }
      // Every rank but the root is the child of exactly one rank: the tree spans all ranks.
      for (int r = 0; r < n; ++r) CHECK(child_of[static_cast<std::size_t>(r)] == (r == root ? 0 : 1));
      CHECK(t.height() == max_depth);
      CHECK(t.height(root) == t.height());
      CHECK(t.height() == std::bit_width(static_cast<unsigned>(n)) - 1);
    }
    // Double-tree property: no rank is an interior node in both trees; with at least 3 ranks
    // every rank is interior in at most one and the two roots differ.
    for (int r = 0; r < n; ++r) CHECK(interior_in[r] <= 1);
    if (n >= 2) CHECK(gsync::binary_tree(n, 0).root() != gsync::binary_tree(n, 1).root());
    // Leaves in tree 0 are the even ranks; in tree 1 the odd ranks (and N-1 when N is odd).
    for (int r = 0; r < n && n >= 2; ++r) {
      CHECK((gsync::binary_tree(n, 0).children(r) == 0) == (r % 2 == 0));
      CHECK((gsync::binary_tree(n, 1).children(r) == 0) == (r % 2 == 1 || r == n - 1));
    }
  }
}

TEST_CASE("binary_tree: shapes of small worlds") {
  const gsync::binary_tree a(2, 0), b(2, 1);
  CHECK(a.root() == 1);
  CHECK(a.left(1) == 0);
  CHECK(a.right(1) == -1);
  CHECK(b.root() == 0);
  CHECK(b.left(0) == 1);
  const gsync::binary_tree t(6, 0);  // labels 1..6: root 4, children 2 and 6; 2 -> 1, 3; 6 -> 5
  CHECK(t.root() == 3);
  CHECK(t.left(3) == 1);
  CHECK(t.right(3) == 5);
  CHECK(t.left(1) == 0);
  CHECK(t.right(1) == 2);
  CHECK(t.left(5) == 4);
  CHECK(t.right(5) == -1);
  const gsync::binary_tree u(5, 0);  // labels 1..5: root 4, right child 6 missing -> 5
  CHECK(u.right(3) == 4);
  CHECK(u.parent(4) == 3);
  const gsync::binary_tree one(1, 1);
  CHECK(one.root() == 0);
  CHECK(one.children(0) == 0);
}

TEST_CASE("block_layout: covered columns of every block cut into the same bounded segments") {
  for (std::size_t stride : {0u, 5u, 37u, 1000u}) {
    for (std::size_t width : {0u, 1u, 5u, 37u}) {
      for (std::size_t column : {0u, 3u}) {
        if (stride != 0 && column + width > stride) continue;
        for (std::size_t seg : {1u, 2u, 7u, 64u}) {
          const gsync::block_layout L(stride, column, width, seg);
          CHECK(L.segments() >= 1);
          for (int b = 0; b < 4; ++b) {
            const range blk = L.block(b);
            CHECK(blk.offset == b * stride + column);
            CHECK(blk.count == width);
            std::size_t next = blk.offset;
            for (std::size_t k = 0; k < L.segments(); ++k) {
              const range s = L.segment(b, k);
              CHECK(s.offset == next);
              CHECK(s.count <= seg);
              next += s.count;
            }
            CHECK(next == blk.offset + width);
          }
        }
      }
    }
  }
  // Two layouts over the same width (input blocks, one output block, scratch slots) agree segment
  // by segment on sizes, which is what lets the sender's and receiver's messages match.
  const gsync::block_layout in_l(100, 20, 30, 7), out_l(0, 20, 30, 7), tmp_l(30, 0, 30, 7);
  CHECK(in_l.segments() == out_l.segments());
  for (std::size_t k = 0; k < in_l.segments(); ++k) {
    CHECK(in_l.segment(3, k).count == out_l.segment(0, k).count);
    CHECK(in_l.segment(3, k).count == tmp_l.segment(2, k).count);
    CHECK(out_l.segment(0, k).offset == in_l.segment(3, k).offset - 300);
  }
}

TEST_CASE("for_each_piece: pieces in order, each at most the width, covering the buffer once, a width of 0 counting as 1") {
  for (std::size_t count : {0, 1, 7, 64, 1000})
    for (std::size_t width : {0, 1, 3, 64, 5000}) {
      CAPTURE(count);
      CAPTURE(width);
      std::vector<gsync::range> seen;
      gsync::for_each_piece(count, width, [&](gsync::range r) { seen.push_back(r); });
      const std::size_t w = std::max<std::size_t>(1, width);
      CHECK(seen.size() == (count + w - 1) / w);
      std::size_t at = 0;
      for (const auto& r : seen) {
        CHECK(r.offset == at);
        CHECK(r.count >= 1);
        CHECK(r.count <= w);
        at += r.count;
      }
      CHECK(at == count);
    }
}

TEST_CASE("varied_blocks: blocks packed in order, a window's columns of every block cut into bounded segments, empty blocks none") {
  const std::vector<std::size_t> counts = {5, 0, 17, 1, 0, 64};
  for (std::size_t seg : {1, 4, 100})
    for (std::size_t width : {1, 3, 16, 1000}) {
      CAPTURE(seg);
      CAPTURE(width);
      const gsync::varied_blocks L(counts, seg);
      CHECK(L.total() == 87);
      CHECK(L.largest() == 64);
      std::size_t at = 0;
      for (int b = 0; b < static_cast<int>(counts.size()); ++b) {
        CHECK(L.block(b) == gsync::range{at, counts[static_cast<std::size_t>(b)]});
        CHECK(L.count(b) == counts[static_cast<std::size_t>(b)]);
        // The columns of all windows of width `width` tile the block once, in order, in segments.
        std::size_t covered = 0;
        for (std::size_t col = 0; col < L.largest(); col += width) {
          const gsync::range cols = L.columns(b, col, width);
          CHECK(cols.count == (col >= L.count(b) ? 0 : std::min(width, L.count(b) - col)));
          if (cols.count) CHECK(cols.offset == at + col);
          const std::size_t S = L.segments(b, col, width);
          CHECK(S == (cols.count + seg - 1) / seg);
          std::size_t in = 0;
          for (std::size_t k = 0; k < S; ++k) {
            const gsync::range s = L.segment(b, k, col, width);
            CHECK(s.offset == cols.offset + in);
            CHECK(s.count >= 1);
            CHECK(s.count <= seg);
            in += s.count;
          }
          CHECK(in == cols.count);
          covered += in;
        }
        CHECK(covered == L.count(b));
        at += counts[static_cast<std::size_t>(b)];
      }
    }
}
