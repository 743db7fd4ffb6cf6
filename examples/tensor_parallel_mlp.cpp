// Tensor-parallel (Megatron-style) MLP block over N ranks with gsync collectives.
//
//   gsyncrun -n 3 -- ./tensor_parallel_mlp --tokens 12 --dim 16 --hidden 30
//
// The block is Y = relu(X W1) W2 with X: T x D (T tokens), W1: D x H, W2: H x D. W1 is split by columns
// and W2 by rows, so rank r holds W1[:, h_r] (D x |h_r|) and W2[h_r, :] (|h_r| x D) for its slice h_r of
// the hidden units: relu acts elementwise on the columns a rank owns, and the only communication is on
// activations of width D. H not divisible by N works: the slices are balanced (their sizes differ by at
// most one; a rank may own no hidden unit when H < N, and then contributes zeros).
//
// Two standard ways of moving the activations are run one after the other:
//
// (a) sequence parallel. X is sharded by rows: rank r holds the tokens t_r.
//     forward:  allgather(X rows) -> X (every token)        local: Z = X W1[:, h_r], A = relu(Z)
//               local: P_r = A W2[h_r, :] (T x D, a partial sum over hidden slices)
//               reduce_scatter(sum, P) -> Y rows t_r          (Y = sum_r P_r, rank r keeps its tokens)
//     backward: allgather(dY rows) -> dY                    local: dW2[h_r, :] = A^T dY,
//               dZ = relu'(Z) * (dY W2[h_r, :]^T),  dW1[:, h_r] = X^T dZ,  Q_r = dZ W1[:, h_r]^T
//               reduce_scatter(sum, Q) -> dX rows t_r
//     (the backward of an allgather is a reduce_scatter and vice versa.) T not divisible by N works:
//     token shards are balanced and every rank's block is padded with zero rows to ceil(T/N) rows, so
//     the collectives see equal blocks; zero rows stay zero through the block (relu(0) = 0) and add
//     nothing to the weight gradients.
// (b) plain tensor parallel. X and dY are replicated; the partial P_r is combined with
//     allreduce(sum) -> Y on every rank, and in backward Q_r with allreduce(sum) -> dX on every rank.
//
// Check (--check 1, the default): every rank regenerates the whole X, W1, W2, dY from the seed (the
// counter-based generator of common/dense.hpp gives every element from (seed, tensor, index), so shards
// and full tensors agree without communication) and computes the unsharded block in double precision.
// The ReLU mask of that reference is taken from the float pre-activations of an unsharded float forward,
// which are bitwise those of the shards (each element of Z = X W1 is one dot product over D summed in
// the same order whichever columns a rank holds): a pre-activation within rounding of zero then cannot
// switch a gradient on in one computation and off in the other.
// Tolerance: the float results are checked element by element against the Higham bound for sums of n
// products, |fl(s) - s| <= gamma_n * sum |terms| with gamma_n ~ n u (u = 2^-24), chained through the
// block: |err| <= 2 (T' + D + H + N) u * R, where R is the same computation run on |X|, |W1|, |W2|, |dY|
// (T' = padded token count, the N partial sums of the reduction add N; the factor 2 covers second-order
// terms). err/bound must stay <= 1. Also printed: max |err| and max |err| / max |reference| per tensor.
// The process exits 1 when any check fails on any rank (the worst ratio is combined with allreduce(max)).
#include <gsync/gsync.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>
#include <vector>

#include "common/dense.hpp"

namespace {

using dense::balanced;
using dense::matrix;
using dense::range;
using dense::view;

/// Command-line options.
struct options {
  std::size_t tokens = 64;   ///< T
  std::size_t dim = 32;      ///< D
  std::size_t hidden = 96;   ///< H
  std::uint64_t seed = 1;    ///< generator seed
  bool check = true;         ///< compare with the unsharded double-precision block
};

/// Streams of the counter-based generator, one per tensor.
enum : std::uint64_t { stream_w1 = 1, stream_w2 = 2, stream_x = 3, stream_dy = 4 };

std::size_t parse_size(const char* name, const char* s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s || *end != '\0' || v == 0)
    throw gsync::error(gsync::errc::invalid_argument, std::string(name) + " wants a positive integer, got '" + s + "'");
  return static_cast<std::size_t>(v);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf("usage: tensor_parallel_mlp [--tokens T] [--dim D] [--hidden H] [--seed S] [--check 0|1]\n");
      std::exit(0);
    }
    if (i + 1 >= argc) throw gsync::error(gsync::errc::invalid_argument, "option " + a + " needs a value (see --help)");
    const char* v = argv[++i];
    if (a == "--tokens") o.tokens = parse_size("--tokens", v);
    else if (a == "--dim") o.dim = parse_size("--dim", v);
    else if (a == "--hidden") o.hidden = parse_size("--hidden", v);
    else if (a == "--seed") o.seed = std::strtoull(v, nullptr, 10);
    else if (a == "--check") o.check = std::string(v) != "0";
    else throw gsync::error(gsync::errc::invalid_argument, "unknown option " + a + " (see --help)");
  }
  return o;
}

std::span<const float> cspan(const matrix<float>& m) { return m.data; }
std::span<float> span(matrix<float>& m) { return m.data; }

/// The unsharded block in double: forward and all gradients. `mask` (T x H, 1 where the pre-activation
/// is positive) replaces the test z > 0, so the same function also runs on absolute values (the bound).
struct reference {
  matrix<double> y, dx, dw1, dw2;

  reference(const matrix<double>& x, const matrix<double>& w1, const matrix<double>& w2, const matrix<double>& dy,
            const std::vector<unsigned char>& mask) {
    const std::size_t t = x.rows, d = x.cols, h = w1.cols;
    matrix<double> a(t, h), da(t, h);
    dense::matmul(x, w1, a.v());
    for (std::size_t k = 0; k < a.data.size(); ++k) a.data[k] = mask[k] ? a.data[k] : 0.0;
    y = matrix<double>(t, d);
    dense::matmul(a, w2, y.v());
    dense::matmul_nt(dy, w2, da.v());  // dA = dY W2^T
    dw2 = matrix<double>(h, d);
    dense::matmul_tn(a, dy, dw2.v());  // dW2 = A^T dY
    for (std::size_t k = 0; k < da.data.size(); ++k) da.data[k] = mask[k] ? da.data[k] : 0.0;  // dZ
    dw1 = matrix<double>(d, h);
    dense::matmul_tn(x, da, dw1.v());  // dW1 = X^T dZ
    dx = matrix<double>(t, d);
    dense::matmul_nt(da, w1, dx.v());  // dX = dZ W1^T
  }
};

matrix<double> absolute(const matrix<double>& m) {
  matrix<double> r = m;
  for (double& v : r.data) v = std::fabs(v);
  return r;
}

/// Worst errors of one tensor, combined over the ranks with allreduce(max).
struct error_stats {
  double abs = 0;    ///< max |got - ref|
  double rel = 0;    ///< max |got - ref| / max |ref|
  double ratio = 0;  ///< max |got - ref| / bound (must be <= 1)
};

/// Compares got (rows x cols, float) with the block of ref / bound_ref starting at (row0, col0).
error_stats compare(view<const float> got, const matrix<double>& ref, const matrix<double>& bound_ref, std::size_t row0,
                    std::size_t col0, double kappa) {
  error_stats s;
  double ref_max = 0;
  for (double v : ref.data) ref_max = std::max(ref_max, std::fabs(v));
  for (std::size_t i = 0; i < got.rows; ++i)
    for (std::size_t j = 0; j < got.cols; ++j) {
      const double r = ref(row0 + i, col0 + j);
      const double e = std::fabs(static_cast<double>(got(i, j)) - r);
      const double bound = kappa * bound_ref(row0 + i, col0 + j) + 1e-30;
      const bool bad = std::isnan(e);  // a NaN fails (and must not vanish in std::max)
      s.abs = std::max(s.abs, bad ? 1e300 : e);
      s.ratio = std::max(s.ratio, bad ? 1e300 : e / bound);
    }
  s.rel = ref_max > 0 ? s.abs / ref_max : s.abs;
  return s;
}

/// Padding rows must come out exactly zero.
error_stats check_zero_rows(view<const float> rows) {
  error_stats s;
  for (std::size_t k = 0; k < rows.size(); ++k)
    if (rows.data[k] != 0.0f) s.abs = std::max(s.abs, static_cast<double>(std::fabs(rows.data[k])));
  s.rel = s.abs;
  s.ratio = s.abs > 0 ? 1e300 : 0;
  return s;
}

/// Float gradients and outputs of one mode as this rank holds them.
struct tp_result {
  matrix<float> y, dx;    ///< SP: this rank's padded token rows; plain: every token
  matrix<float> dw1, dw2; ///< this rank's shards
};

/// (a) sequence parallel: X, Y, dY, dX sharded by token rows.
template <class Comm>
tp_result run_sequence_parallel(Comm& comm, const options& o, const matrix<float>& w1, const matrix<float>& w2,
                                dense::rng g) {
  const std::size_t n = static_cast<std::size_t>(comm.size()), r = static_cast<std::size_t>(comm.rank());
  const std::size_t d = o.dim, h = w1.cols;
  const range tok = balanced(o.tokens, n, r);
  const std::size_t b = (o.tokens + n - 1) / n;  // rows per rank after padding
  const std::size_t tp = n * b;                  // padded token count

  // This rank's tokens of X and dY (rows tok.start.. of the full tensors), zero-padded to b rows.
  matrix<float> x_loc(b, d), dy_loc(b, d);
  dense::init_normal(x_loc.v().rows_block(0, tok.count), g, stream_x, 1.0, tok.start);
  dense::init_normal(dy_loc.v().rows_block(0, tok.count), g, stream_dy, 1.0, tok.start);

  // forward
  matrix<float> x_all(tp, d), a(tp, h), p(tp, d);
  tp_result out{matrix<float>(b, d), matrix<float>(b, d), matrix<float>(d, h), matrix<float>(h, d)};
  gsync::allgather(comm, cspan(x_loc), span(x_all));  // block q of x_all = tokens of rank q
  dense::matmul(x_all, w1, a.v());                     // Z = X W1[:, h_r]
  dense::relu(a, a.v());                               // A = relu(Z), in place
  dense::matmul(a, w2, p.v());                         // P_r = A W2[h_r, :]
  gsync::reduce_scatter(comm, cspan(p), span(out.y), gsync::op::sum{});  // Y rows of this rank

  // backward
  matrix<float> dy_all(tp, d), da(tp, h), q(tp, d);
  gsync::allgather(comm, cspan(dy_loc), span(dy_all));
  dense::matmul_nt(dy_all, w2, da.v());     // dA = dY W2[h_r, :]^T
  dense::matmul_tn(a, dy_all, out.dw2.v()); // dW2[h_r, :] = A^T dY
  dense::relu_backward(a, da, da.v());      // dZ = relu'(Z) * dA (A > 0 exactly where Z > 0)
  dense::matmul_tn(x_all, da, out.dw1.v()); // dW1[:, h_r] = X^T dZ
  dense::matmul_nt(da, w1, q.v());          // Q_r = dZ W1[:, h_r]^T
  gsync::reduce_scatter(comm, cspan(q), span(out.dx), gsync::op::sum{});  // dX rows of this rank
  return out;
}

/// (b) plain tensor parallel: X and dY replicated, partial sums combined with allreduce.
template <class Comm>
tp_result run_plain(Comm& comm, const options& o, const matrix<float>& w1, const matrix<float>& w2, dense::rng g) {
  const std::size_t t = o.tokens, d = o.dim, h = w1.cols;
  matrix<float> x(t, d), dy(t, d), a(t, h), da(t, h);
  dense::init_normal(x.v(), g, stream_x, 1.0);
  dense::init_normal(dy.v(), g, stream_dy, 1.0);
  tp_result out{matrix<float>(t, d), matrix<float>(t, d), matrix<float>(d, h), matrix<float>(h, d)};

  dense::matmul(x, w1, a.v());
  dense::relu(a, a.v());
  dense::matmul(a, w2, out.y.v());                         // partial Y
  gsync::allreduce(comm, span(out.y), gsync::op::sum{});   // Y on every rank

  dense::matmul_nt(dy, w2, da.v());
  dense::matmul_tn(a, dy, out.dw2.v());
  dense::relu_backward(a, da, da.v());
  dense::matmul_tn(x, da, out.dw1.v());
  dense::matmul_nt(da, w1, out.dx.v());                    // partial dX
  gsync::allreduce(comm, span(out.dx), gsync::op::sum{});  // dX on every rank
  return out;
}

int run(int argc, char** argv) {
  const options o = parse(argc, argv);
  auto comm = gsync::tcp_communicator::from_env();
  const std::size_t n = static_cast<std::size_t>(comm.size()), r = static_cast<std::size_t>(comm.rank());
  const std::size_t t = o.tokens, d = o.dim, hh = o.hidden;
  const dense::rng g{o.seed};
  const range hid = balanced(hh, n, r), tok = balanced(t, n, r);
  const std::size_t b = (t + n - 1) / n;
  std::printf("rank %zu/%zu: hidden units [%zu, %zu), tokens [%zu, %zu) (sequence-parallel block of %zu rows)\n", r, n,
              hid.start, hid.start + hid.count, tok.start, tok.start + tok.count, b);

  // This rank's shards, generated in place: W1[:, h_r] and W2[h_r, :].
  const double s1 = std::sqrt(2.0 / static_cast<double>(d)), s2 = std::sqrt(1.0 / static_cast<double>(hh));
  matrix<float> w1(d, hid.count), w2(hid.count, d);
  dense::init_normal(w1.v(), g, stream_w1, s1, 0, hid.start, hh);
  dense::init_normal(w2.v(), g, stream_w2, s2, hid.start, 0, d);

  const tp_result sp = run_sequence_parallel(comm, o, w1, w2, g);
  const tp_result pl = run_plain(comm, o, w1, w2, g);
  if (!o.check) {
    if (r == 0) std::printf("ran sequence-parallel and plain tensor-parallel passes (check off)\n");
    return 0;
  }

  // The unsharded reference on every rank (float inputs, double math).
  matrix<float> xf(t, d), w1f(d, hh), w2f(hh, d), dyf(t, d), zf(t, hh);
  dense::init_normal(xf.v(), g, stream_x, 1.0);
  dense::init_normal(w1f.v(), g, stream_w1, s1);
  dense::init_normal(w2f.v(), g, stream_w2, s2);
  dense::init_normal(dyf.v(), g, stream_dy, 1.0);
  dense::matmul(xf, w1f, zf.v());  // float pre-activations: bitwise those of the shards
  std::vector<unsigned char> mask(zf.data.size());
  const auto x = dense::convert<double>(xf), w1d = dense::convert<double>(w1f), w2d = dense::convert<double>(w2f),
             dy = dense::convert<double>(dyf);
  std::size_t near_zero = 0;
  {
    matrix<double> zd(t, hh);
    dense::matmul(x, w1d, zd.v());
    for (std::size_t k = 0; k < mask.size(); ++k) {
      mask[k] = zf.data[k] > 0.0f;
      near_zero += (zd.data[k] > 0.0) != static_cast<bool>(mask[k]);
    }
  }
  const reference ref(x, w1d, w2d, dy, mask);
  const reference bnd(absolute(x), absolute(w1d), absolute(w2d), absolute(dy), mask);
  const double u = std::ldexp(1.0, -24);
  const double kappa = 2.0 * static_cast<double>(n * b + d + hh + n) * u;

  // Per tensor: {abs, rel, ratio}; combined over ranks with allreduce(max).
  const char* names[] = {"Y", "dX", "dW1 shard", "dW2 shard", "Y", "dX", "dW1 shard", "dW2 shard", "padding rows"};
  std::vector<error_stats> st = {
      compare(sp.y.v().rows_block(0, tok.count), ref.y, bnd.y, tok.start, 0, kappa),
      compare(sp.dx.v().rows_block(0, tok.count), ref.dx, bnd.dx, tok.start, 0, kappa),
      compare(sp.dw1, ref.dw1, bnd.dw1, 0, hid.start, kappa),
      compare(sp.dw2, ref.dw2, bnd.dw2, hid.start, 0, kappa),
      compare(pl.y, ref.y, bnd.y, 0, 0, kappa),
      compare(pl.dx, ref.dx, bnd.dx, 0, 0, kappa),
      compare(pl.dw1, ref.dw1, bnd.dw1, 0, hid.start, kappa),
      compare(pl.dw2, ref.dw2, bnd.dw2, hid.start, 0, kappa),
  };
  {
    const error_stats py = check_zero_rows(sp.y.v().rows_block(tok.count, b - tok.count));
    const error_stats pdx = check_zero_rows(sp.dx.v().rows_block(tok.count, b - tok.count));
    st.push_back({std::max(py.abs, pdx.abs), std::max(py.rel, pdx.rel), std::max(py.ratio, pdx.ratio)});
  }
  std::vector<double> flat;
  for (const auto& s : st) flat.insert(flat.end(), {s.abs, s.rel, s.ratio});
  flat.push_back(static_cast<double>(near_zero));
  gsync::allreduce(comm, std::span<double>{flat}, gsync::op::max{});

  bool ok = true;
  if (r == 0) std::printf("%-20s %-13s %12s %12s %10s\n", "mode", "tensor", "max_abs_err", "max_rel_err", "err/bound");
  for (std::size_t k = 0; k < st.size(); ++k) {
    const double ratio = flat[3 * k + 2];
    const bool pass = ratio <= 1.0;
    ok = ok && pass;
    if (r == 0)
      std::printf("%-20s %-13s %12.3e %12.3e %10.3g%s\n",
                  k < 4 ? "sequence-parallel" : (k < 8 ? "plain (allreduce)" : "sequence-parallel"), names[k],
                  flat[3 * k], flat[3 * k + 1], ratio, pass ? "" : "  FAIL");
  }
  if (r == 0) {
    std::printf("T=%zu D=%zu H=%zu N=%zu: bound = %.3g x (same block on |inputs|); %g pre-activations whose sign differs in double\n",
                t, d, hh, n, kappa, flat.back());
    std::printf("%s\n", ok ? "tensor-parallel check passed" : "tensor-parallel check FAILED");
  }
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return dense::run_example("tensor_parallel_mlp", run, argc, argv); }
