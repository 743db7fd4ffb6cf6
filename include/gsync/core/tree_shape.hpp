#pragma once
/// \file
/// Shapes of the two binary trees of the double-binary-tree allreduce, pure and tested alone
/// (tests/test_chunking.cpp).
///
/// One tree, over labels 1..N. Every label x has a "level" b = lowest set bit of x. Odd labels
/// (b = 1) are leaves; a label with b >= 2 has the left child x - b/2 and the right child x + b/2.
/// This is the in-order binary tree whose root is the largest power of two <= N. When N is not
/// of the form 2^k - 1 some labels above N are missing: a missing right child is replaced by the
/// first label <= N on its chain of left children, and a label whose parent is missing hangs from
/// the first ancestor that exists. The height is floor(log2 N) and every node has at most two
/// children.
///
/// The double tree. Tree 0 gives rank r the label r + 1, so odd ranks are interior nodes and even
/// ranks are leaves. Tree 1 gives rank r the label ((r + 1) mod N) + 1 (tree 0 shifted by one
/// rank), so even ranks (except N-1 when N is odd) are interior and odd ranks are leaves. Hence no
/// rank is an interior node in both trees: a rank does the receiving-from-two-children work of
/// only one tree, and the two trees, each carrying half of the buffer, share the load evenly.

#include <bit>
#include <cstddef>

namespace gsync {

/// Parent/children relations of one of the two binary trees over `world` ranks.
class binary_tree {
 public:
  /// Tree `which` (0 or 1) of the double binary tree over `world` ranks (>= 1).
  constexpr binary_tree(int world, int which) noexcept : n_(world), which_(which) {}

  /// Ranks in the tree.
  constexpr int size() const noexcept { return n_; }
  /// The root rank.
  constexpr int root() const noexcept { return rank_of(static_cast<int>(std::bit_floor(static_cast<unsigned>(n_)))); }
  /// Parent of rank r, or -1 for the root.
  constexpr int parent(int r) const noexcept {
    int x = label_of(r);
    const int root_label = static_cast<int>(std::bit_floor(static_cast<unsigned>(n_)));
    if (x == root_label) return -1;
    // Walk up the complete (infinite) tree until an existing label; x < 2 * root_label always.
    do {
      const int b = x & -x;
      x = (x & (b << 1)) ? x - b : x + b;
    } while (x > n_);
    return rank_of(x);
  }
  /// Left child of rank r, or -1.
  constexpr int left(int r) const noexcept {
    const int x = label_of(r), b = x & -x;
    return b >= 2 ? rank_of(x - b / 2) : -1;
  }
  /// Right child of rank r, or -1.
  constexpr int right(int r) const noexcept {
    const int x = label_of(r), b = x & -x;
    if (b < 2 || x >= n_) return -1;
    int c = x + b / 2;
    while (c > n_) c -= (c & -c) / 2;  // missing: descend to the left child (ends at x + 1 <= n_ at worst)
    return rank_of(c);
  }
  /// Number of children of rank r (0, 1 or 2).
  constexpr int children(int r) const noexcept { return (left(r) >= 0) + (right(r) >= 0); }
  /// Depth of rank r (the root has depth 0).
  constexpr int depth(int r) const noexcept {
    int d = 0;
    for (int p = parent(r); p >= 0; p = parent(p)) ++d;
    return d;
  }
  /// Height of the subtree below rank r (a leaf has height 0).
  constexpr int height(int r) const noexcept {
    // The subtree of label x spans labels (x - b, x + b) with b its lowest set bit; its height is
    // log2(b) when complete. Missing labels can only shorten the right side, never the left, and
    // the left subtree is complete, so the height is log2(b) whatever N is.
    const int x = label_of(r);
    return std::countr_zero(static_cast<unsigned>(x));
  }
  /// Height of the whole tree: floor(log2 N).
  constexpr int height() const noexcept { return std::bit_width(static_cast<unsigned>(n_)) - 1; }

  /// Label of rank r (1..N).
  constexpr int label_of(int r) const noexcept { return which_ == 0 ? r + 1 : (r + 1) % n_ + 1; }
  /// Rank of label x (1..N).
  constexpr int rank_of(int x) const noexcept { return which_ == 0 ? x - 1 : (x - 2 + n_) % n_; }

 private:
  int n_, which_;
};

}  // namespace gsync
