#pragma once
/// \file
/// Small dense-math kit for the gsync examples (not part of the library).
///
/// What is here:
/// - `dense::matrix<T>` (row-major owner) and `dense::view<T>` (row-major, non-owning, contiguous rows
///   of `cols` elements): the examples hand views of whole matrices or of row blocks to the kernels.
/// - Kernels: `matmul` (C = A B), `matmul_tn` (C = A^T B), `matmul_nt` (C = A B^T), each overwriting C or
///   accumulating into it; `add_bias` / `bias_grad`; `relu` / `relu_backward`;
///   `softmax_cross_entropy` (forward and backward of the mean loss); `sgd_update`.
///   All are templates on the element type: the examples run them in `float` and recompute the same
///   math in `double` as a reference. The inner loops run over contiguous rows with no aliasing between
///   inputs and output; GCC 12 vectorizes every one of them at -O3 (checked with -fopt-info-vec). Its
///   -O2 uses the "very cheap" cost model, which skips loops of unknown trip count: build examples
///   with -O3 or add -fvect-cost-model=cheap.
/// - A counter-based random number generator (`dense::rng`, splitmix64 finalizer): every value is a
///   pure function of (seed, stream, index), so any rank regenerates any parameter element or any data
///   sample without communication. `init_uniform` / `init_normal` fill a view that may be a shard of a
///   bigger tensor: element (i, j) of the view takes the value of element (row0 + i, col0 + j) of the
///   full `full_cols`-wide tensor, whoever generates it.
/// - `dense::teacher_dataset`: a generated classification problem. `sample(global_index, x)` fills the
///   D features of sample `global_index` and returns its label, the argmax of a fixed random two-layer
///   teacher network; the data a rank sees therefore depends only on the seed and the global sample
///   index.
///
/// Shape errors throw `gsync::error(errc::invalid_argument, ...)` naming the kernel and the shapes.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "gsync/core/error.hpp"

namespace dense {

// ------------------------------------------------------------------------------------------------
// Matrices
// ------------------------------------------------------------------------------------------------

/// Non-owning row-major matrix: element (i, j) is `data[i * cols + j]`.
/// \tparam T element type (`float`, `double`, possibly const-qualified for inputs).
template <class T>
struct view {
  T* data = nullptr;      ///< first element
  std::size_t rows = 0;   ///< number of rows
  std::size_t cols = 0;   ///< number of columns (and the distance between rows)

  /// Element (i, j).
  T& operator()(std::size_t i, std::size_t j) const { return data[i * cols + j]; }
  /// Pointer to the first element of row i.
  T* row(std::size_t i) const { return data + i * cols; }
  /// Number of elements.
  std::size_t size() const { return rows * cols; }
  /// All elements as one span.
  std::span<T> flat() const { return {data, rows * cols}; }
  /// Rows [first, first + count) as a view (a row block shares the column count, so it stays contiguous).
  view rows_block(std::size_t first, std::size_t count) const {
    if (first + count > rows)
      throw gsync::error(gsync::errc::invalid_argument,
                         "dense::view::rows_block: rows [" + std::to_string(first) + ", " +
                             std::to_string(first + count) + ") outside a " + std::to_string(rows) + "-row matrix");
    return {data + first * cols, count, cols};
  }
  /// The same view with const elements (inputs of the kernels are read-only views).
  template <class U = T>
    requires(!std::is_const_v<U>)
  operator view<const U>() const {
    return {data, rows, cols};
  }
};

/// Owning row-major matrix (zero-initialized).
/// \tparam T element type (`float` or `double`).
template <class T>
struct matrix {
  std::size_t rows = 0;   ///< number of rows
  std::size_t cols = 0;   ///< number of columns
  std::vector<T> data;    ///< rows * cols elements, row-major

  matrix() = default;
  /// A rows x cols matrix of zeros.
  matrix(std::size_t r, std::size_t c) : rows(r), cols(c), data(r * c, T{}) {}

  /// Element (i, j).
  T& operator()(std::size_t i, std::size_t j) { return data[i * cols + j]; }
  /// Element (i, j).
  const T& operator()(std::size_t i, std::size_t j) const { return data[i * cols + j]; }
  /// Mutable view of the whole matrix.
  view<T> v() { return {data.data(), rows, cols}; }
  /// Read-only view of the whole matrix.
  view<const T> v() const { return {data.data(), rows, cols}; }
  /// Implicit conversion to a mutable view.
  operator view<T>() { return v(); }
  /// Implicit conversion to a read-only view.
  operator view<const T>() const { return v(); }
  /// All elements as one span.
  std::span<T> flat() { return data; }
  /// All elements as one read-only span.
  std::span<const T> flat() const { return data; }
  /// Sets every element to zero.
  void zero() { std::fill(data.begin(), data.end(), T{}); }
};

/// Read-only view of T elements as a kernel input. The element type is not deduced from it (it comes
/// from the kernel's output argument), so a `matrix<T>`, a `view<T>` or a `view<const T>` all convert.
/// \tparam T element type.
template <class T>
using in_view = view<const std::type_identity_t<T>>;

/// Copies `src` into a new matrix of another element type (e.g. float parameters to a double reference):
/// `auto wd = dense::convert<double>(w.v());`.
/// \tparam To element type of the result. \tparam From element type of the source, possibly const.
template <class To, class From>
matrix<To> convert(view<From> src) {
  matrix<To> out(src.rows, src.cols);
  for (std::size_t k = 0; k < src.size(); ++k) out.data[k] = static_cast<To>(src.data[k]);
  return out;
}

/// Copies a matrix into a new matrix of another element type: `auto wd = dense::convert<double>(w);`.
/// \tparam To element type of the result. \tparam From element type of the source.
template <class To, class From>
matrix<To> convert(const matrix<From>& src) {
  return convert<To>(src.v());
}

namespace detail {
inline std::string shape(std::size_t r, std::size_t c) { return std::to_string(r) + "x" + std::to_string(c); }

[[noreturn]] inline void shape_error(const char* kernel, const std::string& what) {
  throw gsync::error(gsync::errc::invalid_argument, std::string("dense::") + kernel + ": " + what);
}
}  // namespace detail

// ------------------------------------------------------------------------------------------------
// Matrix products
// ------------------------------------------------------------------------------------------------

/// C = A B (or C += A B when `accumulate`). A is m x k, B is k x n, C is m x n; C must not overlap A or B.
/// Loop order i, p, j: the inner loop is an axpy over a row of B into a row of C (vectorizes).
/// \tparam T element type.
template <class T>
void matmul(in_view<T> a, in_view<T> b, view<T> c, bool accumulate = false) {
  if (a.cols != b.rows || c.rows != a.rows || c.cols != b.cols)
    detail::shape_error("matmul", "A " + detail::shape(a.rows, a.cols) + " * B " + detail::shape(b.rows, b.cols) +
                                      " does not give C " + detail::shape(c.rows, c.cols));
  const std::size_t n = b.cols;
  for (std::size_t i = 0; i < a.rows; ++i) {
    T* __restrict ci = c.row(i);
    if (!accumulate) std::fill(ci, ci + n, T{});
    const T* ai = a.row(i);
    for (std::size_t p = 0; p < a.cols; ++p) {
      const T s = ai[p];
      const T* __restrict bp = b.row(p);
      for (std::size_t j = 0; j < n; ++j) ci[j] += s * bp[j];
    }
  }
}

/// C = A^T B (or C += A^T B when `accumulate`). A is k x m, B is k x n, C is m x n. This is the weight
/// gradient of Y = X W: dW = X^T dY. Loop order p, i, j (rows of A and B read once, axpy into C rows).
/// \tparam T element type.
template <class T>
void matmul_tn(in_view<T> a, in_view<T> b, view<T> c, bool accumulate = false) {
  if (a.rows != b.rows || c.rows != a.cols || c.cols != b.cols)
    detail::shape_error("matmul_tn", "A^T with A " + detail::shape(a.rows, a.cols) + " * B " +
                                         detail::shape(b.rows, b.cols) + " does not give C " +
                                         detail::shape(c.rows, c.cols));
  const std::size_t n = b.cols;
  if (!accumulate) std::fill(c.data, c.data + c.size(), T{});
  for (std::size_t p = 0; p < a.rows; ++p) {
    const T* ap = a.row(p);
    const T* __restrict bp = b.row(p);
    for (std::size_t i = 0; i < a.cols; ++i) {
      const T s = ap[i];
      T* __restrict ci = c.row(i);
      for (std::size_t j = 0; j < n; ++j) ci[j] += s * bp[j];
    }
  }
}

/// C = A B^T (or C += A B^T when `accumulate`). A is m x k, B is n x k, C is m x n. This is the input
/// gradient of Y = X W: dX = dY W^T. Each element is a dot product of two contiguous rows.
/// \tparam T element type.
template <class T>
void matmul_nt(in_view<T> a, in_view<T> b, view<T> c, bool accumulate = false) {
  if (a.cols != b.cols || c.rows != a.rows || c.cols != b.rows)
    detail::shape_error("matmul_nt", "A " + detail::shape(a.rows, a.cols) + " * B^T with B " +
                                         detail::shape(b.rows, b.cols) + " does not give C " +
                                         detail::shape(c.rows, c.cols));
  const std::size_t k = a.cols;
  for (std::size_t i = 0; i < a.rows; ++i) {
    const T* ai = a.row(i);
    T* ci = c.row(i);
    for (std::size_t j = 0; j < b.rows; ++j) {
      const T* bj = b.row(j);
      T s{};
      for (std::size_t p = 0; p < k; ++p) s += ai[p] * bj[p];
      ci[j] = accumulate ? ci[j] + s : s;
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Elementwise layers
// ------------------------------------------------------------------------------------------------

/// Adds the bias row vector `b` (length y.cols) to every row of y.
/// \tparam T element type.
template <class T>
void add_bias(view<T> y, std::span<const std::type_identity_t<T>> b) {
  if (b.size() != y.cols)
    detail::shape_error("add_bias", "bias of " + std::to_string(b.size()) + " for " + detail::shape(y.rows, y.cols));
  for (std::size_t i = 0; i < y.rows; ++i) {
    T* __restrict yi = y.row(i);
    for (std::size_t j = 0; j < y.cols; ++j) yi[j] += b[j];
  }
}

/// Bias gradient: db = column sums of dy (or db += ... when `accumulate`).
/// \tparam T element type.
template <class T>
void bias_grad(in_view<T> dy, std::span<T> db, bool accumulate = false) {
  if (db.size() != dy.cols)
    detail::shape_error("bias_grad", "bias of " + std::to_string(db.size()) + " for " + detail::shape(dy.rows, dy.cols));
  if (!accumulate) std::fill(db.begin(), db.end(), T{});
  T* __restrict d = db.data();
  for (std::size_t i = 0; i < dy.rows; ++i) {
    const T* __restrict gi = dy.row(i);
    for (std::size_t j = 0; j < dy.cols; ++j) d[j] += gi[j];
  }
}

/// y = max(x, 0) elementwise; y may be x (in place).
/// \tparam T element type.
template <class T>
void relu(in_view<T> x, view<T> y) {
  if (x.rows != y.rows || x.cols != y.cols)
    detail::shape_error("relu", detail::shape(x.rows, x.cols) + " into " + detail::shape(y.rows, y.cols));
  const std::size_t n = x.size();
  for (std::size_t k = 0; k < n; ++k) y.data[k] = x.data[k] > T{} ? x.data[k] : T{};
}

/// ReLU backward: dx = dy where the forward *output* y (or the input; both are > 0 at the same places)
/// is positive, 0 elsewhere. dx may be dy (in place).
/// \tparam T element type.
template <class T>
void relu_backward(in_view<T> y, in_view<T> dy, view<T> dx) {
  if (y.rows != dy.rows || y.cols != dy.cols || dx.rows != dy.rows || dx.cols != dy.cols)
    detail::shape_error("relu_backward", "y " + detail::shape(y.rows, y.cols) + ", dy " + detail::shape(dy.rows, dy.cols) +
                                             ", dx " + detail::shape(dx.rows, dx.cols));
  const std::size_t n = y.size();
  for (std::size_t k = 0; k < n; ++k) {
    const T g = dy.data[k];  // loaded unconditionally, so the select vectorizes
    dx.data[k] = y.data[k] > T{} ? g : T{};
  }
}

namespace detail {
template <class T>
double softmax_cross_entropy(view<const T> logits, std::span<const int> labels, view<T> dlogits, double normalizer) {
  if (labels.size() != logits.rows)
    shape_error("softmax_cross_entropy", std::to_string(labels.size()) + " labels for " +
                                             shape(logits.rows, logits.cols) + " logits");
  const bool grad = dlogits.data != nullptr;
  if (grad && (dlogits.rows != logits.rows || dlogits.cols != logits.cols))
    shape_error("softmax_cross_entropy", "dlogits " + shape(dlogits.rows, dlogits.cols) + " for logits " +
                                             shape(logits.rows, logits.cols));
  if (normalizer == 0) normalizer = static_cast<double>(logits.rows);
  if (normalizer <= 0) return 0;  // no rows: zero loss
  const T inv = static_cast<T>(1.0 / normalizer);
  double total = 0;
  for (std::size_t i = 0; i < logits.rows; ++i) {
    const T* z = logits.row(i);
    const int label = labels[i];
    if (label < 0 || static_cast<std::size_t>(label) >= logits.cols)
      shape_error("softmax_cross_entropy", "label " + std::to_string(label) + " outside 0.." + std::to_string(logits.cols - 1));
    T zmax = z[0];
    for (std::size_t j = 1; j < logits.cols; ++j) zmax = std::max(zmax, z[j]);
    T sum{};
    for (std::size_t j = 0; j < logits.cols; ++j) sum += std::exp(z[j] - zmax);
    total += static_cast<double>(std::log(sum) - (z[label] - zmax));
    if (grad) {
      T* g = dlogits.row(i);
      const T scale = inv / sum;
      for (std::size_t j = 0; j < logits.cols; ++j) g[j] = std::exp(z[j] - zmax) * scale;
      g[label] -= inv;
    }
  }
  return total / normalizer;
}
}  // namespace detail

/// Softmax + cross-entropy, forward and backward. `logits` has one row per sample and one column per
/// class. Returns the sum over rows of -log softmax(logits_i)[labels_i], divided by `normalizer` (0: the
/// row count, i.e. the mean over these rows), and writes into `dlogits` the gradient of that value,
/// (softmax(logits) - onehot(labels)) / normalizer. When the rows are one micro-batch of a bigger batch,
/// pass the whole batch size as `normalizer`: the micro-batch losses and gradients then add up to those
/// of the whole batch's mean loss. The row max is subtracted before exp (no overflow); the loss is summed
/// in double.
/// \tparam T element type.
template <class T>
double softmax_cross_entropy(in_view<T> logits, std::span<const int> labels, view<T> dlogits, double normalizer = 0) {
  if (dlogits.data == nullptr && logits.size() != 0)
    detail::shape_error("softmax_cross_entropy", "dlogits is empty (use softmax_cross_entropy_loss for the loss alone)");
  return detail::softmax_cross_entropy<T>(logits, labels, dlogits, normalizer);
}

/// The loss of `softmax_cross_entropy` alone (no gradient), for a view (const or not).
/// \tparam T element type, possibly const-qualified.
template <class T>
double softmax_cross_entropy_loss(view<T> logits, std::span<const int> labels, double normalizer = 0) {
  using U = std::remove_const_t<T>;
  return detail::softmax_cross_entropy<U>(view<const U>{logits.data, logits.rows, logits.cols}, labels, view<U>{}, normalizer);
}

/// The loss of `softmax_cross_entropy` alone (no gradient), for a matrix.
/// \tparam T element type.
template <class T>
double softmax_cross_entropy_loss(const matrix<T>& logits, std::span<const int> labels, double normalizer = 0) {
  return softmax_cross_entropy_loss(logits.v(), labels, normalizer);
}

/// Plain SGD step: param -= lr * grad.
/// \tparam T element type.
template <class T>
void sgd_update(std::span<T> param, std::span<const std::type_identity_t<T>> grad, std::type_identity_t<T> lr) {
  if (param.size() != grad.size())
    detail::shape_error("sgd_update", std::to_string(param.size()) + " parameters, " + std::to_string(grad.size()) + " gradients");
  T* __restrict p = param.data();
  const T* __restrict g = grad.data();
  for (std::size_t k = 0; k < param.size(); ++k) p[k] -= lr * g[k];
}

// ------------------------------------------------------------------------------------------------
// Counter-based random numbers
// ------------------------------------------------------------------------------------------------

/// The splitmix64 output function: a bijective 64-bit mix (good avalanche), used here as a hash.
constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

/// Stateless generator: every draw is a pure function of (seed, stream, index). A "stream" names one
/// tensor (a parameter, the features, the teacher...), an index one element of it.
struct rng {
  std::uint64_t seed = 0;  ///< run seed

  /// 64 random bits for (stream, index).
  constexpr std::uint64_t bits(std::uint64_t stream, std::uint64_t index) const {
    return splitmix64(splitmix64(splitmix64(seed) ^ stream) + index);
  }
  /// Uniform in [0, 1) with 53 random bits.
  constexpr double uniform01(std::uint64_t stream, std::uint64_t index) const {
    return static_cast<double>(bits(stream, index) >> 11) * 0x1.0p-53;
  }
  /// Uniform in [lo, hi).
  constexpr double uniform(std::uint64_t stream, std::uint64_t index, double lo, double hi) const {
    return lo + (hi - lo) * uniform01(stream, index);
  }
  /// Approximately standard normal: the sum of four independent 16-bit uniforms from one 64-bit draw,
  /// centred and scaled to unit variance (Irwin-Hall; bounded by +-2 sqrt(3), which is all an
  /// initializer needs).
  constexpr double normalish(std::uint64_t stream, std::uint64_t index) const {
    const std::uint64_t b = bits(stream, index);
    double s = 0;
    for (int k = 0; k < 4; ++k) s += (static_cast<double>((b >> (16 * k)) & 0xffff) + 0.5) * (1.0 / 65536.0);
    return (s - 2.0) * 1.7320508075688772;  // var of the sum of 4 U(0,1) is 1/3
  }
};

/// Fills `v` with U[lo, hi) values of tensor `stream`, where `v` is the block at (row0, col0) of a tensor
/// `full_cols` wide (0: as wide as `v`). Any rank computes the same value for the same full-tensor element.
/// \tparam T element type.
template <class T>
void init_uniform(view<T> v, rng g, std::uint64_t stream, double lo, double hi, std::size_t row0 = 0,
                  std::size_t col0 = 0, std::size_t full_cols = 0) {
  if (full_cols == 0) full_cols = v.cols;
  if (col0 + v.cols > full_cols)
    detail::shape_error("init_uniform", "columns [" + std::to_string(col0) + ", " + std::to_string(col0 + v.cols) +
                                            ") outside a tensor " + std::to_string(full_cols) + " wide");
  for (std::size_t i = 0; i < v.rows; ++i)
    for (std::size_t j = 0; j < v.cols; ++j)
      v(i, j) = static_cast<T>(g.uniform(stream, (row0 + i) * full_cols + col0 + j, lo, hi));
}

/// Fills `v` with `scale` times approximately standard normal values of tensor `stream` (block at
/// (row0, col0) of a `full_cols`-wide tensor, as in `init_uniform`). For a fan-in of n, scale =
/// sqrt(2 / n) is He initialization, good in front of a ReLU.
/// \tparam T element type.
template <class T>
void init_normal(view<T> v, rng g, std::uint64_t stream, double scale, std::size_t row0 = 0, std::size_t col0 = 0,
                 std::size_t full_cols = 0) {
  if (full_cols == 0) full_cols = v.cols;
  if (col0 + v.cols > full_cols)
    detail::shape_error("init_normal", "columns [" + std::to_string(col0) + ", " + std::to_string(col0 + v.cols) +
                                           ") outside a tensor " + std::to_string(full_cols) + " wide");
  for (std::size_t i = 0; i < v.rows; ++i)
    for (std::size_t j = 0; j < v.cols; ++j)
      v(i, j) = static_cast<T>(scale * g.normalish(stream, (row0 + i) * full_cols + col0 + j));
}

// ------------------------------------------------------------------------------------------------
// Generated classification data
// ------------------------------------------------------------------------------------------------

/// A synthetic, learnable classification task. Features are approximately standard normal, drawn from
/// (seed, sample index); the label is the argmax of a fixed random teacher network
/// relu(x T1) T2 (dim -> teacher_hidden -> classes), whose weights also come from the seed. Nothing is
/// stored per sample: any rank produces sample i on demand.
class teacher_dataset {
 public:
  /// \param seed run seed (features and teacher). \param dim features per sample. \param classes label
  /// count (>= 2). \param teacher_hidden width of the teacher's hidden layer.
  teacher_dataset(std::uint64_t seed, std::size_t dim, std::size_t classes, std::size_t teacher_hidden = 32)
      : g_{seed}, dim_(dim), classes_(classes), t1_(dim, teacher_hidden), t2_(teacher_hidden, classes) {
    if (dim == 0 || classes < 2 || teacher_hidden == 0)
      throw gsync::error(gsync::errc::invalid_argument, "dense::teacher_dataset: need dim >= 1, classes >= 2, hidden >= 1 (got " +
                                                            std::to_string(dim) + ", " + std::to_string(classes) + ", " +
                                                            std::to_string(teacher_hidden) + ")");
    init_normal(t1_.v(), g_, stream_teacher1, 1.0 / std::sqrt(static_cast<double>(dim)));
    init_normal(t2_.v(), g_, stream_teacher2, 1.0 / std::sqrt(static_cast<double>(teacher_hidden)));
  }

  /// Number of features per sample.
  std::size_t dim() const { return dim_; }
  /// Number of classes.
  std::size_t classes() const { return classes_; }

  /// Writes the features of sample `index` into `x` (dim() elements) and returns its label.
  /// \tparam T element type of the features.
  template <class T>
  int sample(std::uint64_t index, std::span<T> x) const {
    if (x.size() != dim_)
      detail::shape_error("teacher_dataset::sample", std::to_string(x.size()) + " features, dataset has " + std::to_string(dim_));
    std::vector<double> xd(dim_), h(t1_.cols, 0.0);
    for (std::size_t j = 0; j < dim_; ++j) {
      xd[j] = g_.normalish(stream_features, index * dim_ + j);
      x[j] = static_cast<T>(xd[j]);
    }
    for (std::size_t p = 0; p < dim_; ++p)
      for (std::size_t k = 0; k < t1_.cols; ++k) h[k] += xd[p] * t1_(p, k);
    int best = 0;
    double best_z = -std::numeric_limits<double>::infinity();
    for (std::size_t c = 0; c < classes_; ++c) {
      double z = 0;
      for (std::size_t k = 0; k < t1_.cols; ++k) z += std::max(h[k], 0.0) * t2_(k, c);
      if (z > best_z) best_z = z, best = static_cast<int>(c);
    }
    return best;
  }

  /// Fills x (count x dim) and labels (count) with samples first, first + 1, ..., first + count - 1.
  /// \tparam T element type of the features.
  template <class T>
  void batch(std::uint64_t first, view<T> x, std::span<int> labels) const {
    if (x.cols != dim_ || labels.size() != x.rows)
      detail::shape_error("teacher_dataset::batch", "x " + detail::shape(x.rows, x.cols) + " and " +
                                                        std::to_string(labels.size()) + " labels for dim " + std::to_string(dim_));
    for (std::size_t i = 0; i < x.rows; ++i) labels[i] = sample(first + i, std::span<T>{x.row(i), dim_});
  }

 private:
  static constexpr std::uint64_t stream_features = 0x66656174ULL;  // "feat"
  static constexpr std::uint64_t stream_teacher1 = 0x74636831ULL;  // "tch1"
  static constexpr std::uint64_t stream_teacher2 = 0x74636832ULL;  // "tch2"
  rng g_;
  std::size_t dim_, classes_;
  matrix<double> t1_, t2_;
};

/// A contiguous range [start, start + count).
struct range {
  std::size_t start = 0, count = 0;
};

/// Part i of n items split into `parts` balanced ranges (sizes differ by at most one, larger first).
inline range balanced(std::size_t n, std::size_t parts, std::size_t i) {
  const std::size_t q = n / parts, r = n % parts;
  return {i * q + std::min(i, r), q + (i < r ? 1 : 0)};
}

/// Runs an example's `run(argc, argv)` and returns its exit code; an error is printed as
/// "name: message" and exits 2 for invalid arguments, 1 otherwise.
template <class F>
int run_example(const char* name, F&& run, int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const gsync::error& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return e.kind() == gsync::errc::invalid_argument ? 2 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace dense
