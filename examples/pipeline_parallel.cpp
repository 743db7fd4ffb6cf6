// Pipeline-parallel training of an MLP with gsync::send / gsync::recv, 1F1B schedule.
//
//   gsyncrun -n 4 -- ./pipeline_parallel --micro 8 --batch 32 --steps 5
//
// Model: L fully connected layers (--layers, default 6): dim -> hidden -> ... -> hidden -> classes,
// y = x W + b with a ReLU after every layer but the last, softmax cross-entropy on the logits, mean over
// the batch, plain SGD. The data is the generated teacher task of common/dense.hpp: step t uses samples
// t*B .. t*B + B - 1, so stage 0 (features) and the last stage (labels) produce them on their own.
//
// Stages: one rank per stage (--stages is the world size); stage s owns a balanced, contiguous run of
// layers (layer counts differ by at most one; every stage owns at least one, so L >= stages). The batch is
// cut into M micro-batches (--micro, balanced: sizes differ by at most one).
//
// How data moves (1F1B, "one forward, one backward", as in PipeDream-Flush / Megatron):
//   stage s first runs W_s = min(S-1-s, M) warm-up forwards, then alternates one forward and one backward
//   until every micro-batch has gone forward, then runs the remaining backwards. Micro-batch m's
//   activations go s -> s+1 with tag 2m, its gradients (d loss / d activations) go s+1 -> s with tag
//   2m+1. At most W_s + 1 micro-batches keep activations on stage s at a time (GPipe would keep M).
//   Backward passes run in micro-batch order 0..M-1; weight gradients accumulate over the micro-batches
//   and the loss of each is divided by the whole batch size B, so they add up to the full batch's.
//   A steady-state step of stage s is: receive activations of micro-batch W_s+k from s-1, forward it,
//   receive the gradient of micro-batch k from s+1, send the activations of W_s+k to s+1, backward k,
//   send its input gradient to s-1. Receiving from s+1 *before* sending to it makes both ends of every
//   link see the same order of messages (f_0..f_{W_s}, b_0, f_{W_s+1}, b_1, ...), so the schedule cannot
//   deadlock even when a send waits for its receiver (a large message does); the natural order
//   "send forward, then receive backward" deadlocks in that case.
//   After the last backward every stage applies SGD to its own layers: no other communication is needed.
//
// Check (every step, every rank): the rank also trains the whole model sequentially, full batch in one
// pass, from the same deterministic initialization (common/dense.hpp regenerates every parameter from
// (seed, tensor, index)), and compares its stage's weight and bias gradients with the sequential ones,
// and the pipeline's loss (computed on the last stage, broadcast to all) with the sequential loss.
// The reference uses the same float kernels: each activation row is the same dot products in the same
// order whether or not the batch is cut, and the weight gradients accumulate sample by sample in batch
// order in both, so the two agree to the last bit unless the compiler contracts multiply-adds
// differently in the two call sites; the tolerance (gradients: max |err| <= 1e-5 max |reference|, loss:
// 1e-6 relative) allows for that and nothing more. (A double-precision reference is the wrong tool here:
// a pre-activation within rounding of zero switches its ReLU gradient on in one precision and off in the
// other, a discontinuity no tolerance covers, and parameters drift apart step after step.)
// The worst errors are combined over the ranks with allreduce(max); every rank exits 1 on a mismatch.
#include <gsync/gsync.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/dense.hpp"

namespace {

using dense::balanced;
using dense::matrix;
using dense::range;
using dense::view;

/// Command-line options.
struct options {
  std::size_t micro = 4;     ///< M, micro-batches per step
  std::size_t batch = 32;    ///< B, samples per step
  std::size_t steps = 5;     ///< training steps
  std::size_t layers = 6;    ///< L, fully connected layers in the model
  std::size_t dim = 16;      ///< input features
  std::size_t hidden = 32;   ///< width of the hidden layers
  std::size_t classes = 4;   ///< output classes
  double lr = 0.2;           ///< SGD learning rate
  std::uint64_t seed = 1;    ///< seed of parameters and data
};

std::size_t parse_size(const std::string& name, const char* s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s || *end != '\0' || v == 0)
    throw gsync::error(gsync::errc::invalid_argument, name + " wants a positive integer, got '" + s + "'");
  return static_cast<std::size_t>(v);
}

options parse(int argc, char** argv, int world) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf(
          "usage: pipeline_parallel [--stages S] [--micro M] [--batch B] [--steps N] [--seed X] [--layers L]\n"
          "                         [--dim D] [--hidden H] [--classes C] [--lr LR]\n"
          "one rank per stage: run under a launcher with S ranks (gsyncrun -n S); --stages, if given, must be S\n");
      std::exit(0);
    }
    if (i + 1 >= argc) throw gsync::error(gsync::errc::invalid_argument, "option " + a + " needs a value (see --help)");
    const char* v = argv[++i];
    if (a == "--stages") {
      if (parse_size(a, v) != static_cast<std::size_t>(world))
        throw gsync::error(gsync::errc::invalid_argument, "--stages " + std::string(v) + " but the world has " +
                                                              std::to_string(world) + " ranks (one rank per stage)");
    } else if (a == "--micro") o.micro = parse_size(a, v);
    else if (a == "--batch") o.batch = parse_size(a, v);
    else if (a == "--steps") o.steps = parse_size(a, v);
    else if (a == "--layers") o.layers = parse_size(a, v);
    else if (a == "--dim") o.dim = parse_size(a, v);
    else if (a == "--hidden") o.hidden = parse_size(a, v);
    else if (a == "--classes") o.classes = parse_size(a, v);
    else if (a == "--seed") o.seed = std::strtoull(v, nullptr, 10);
    else if (a == "--lr") o.lr = std::strtod(v, nullptr);
    else throw gsync::error(gsync::errc::invalid_argument, "unknown option " + a + " (see --help)");
  }
  if (o.micro > o.batch)
    throw gsync::error(gsync::errc::invalid_argument, "--micro " + std::to_string(o.micro) + " exceeds --batch " +
                                                          std::to_string(o.batch) + " (a micro-batch needs a sample)");
  if (o.layers < static_cast<std::size_t>(world))
    throw gsync::error(gsync::errc::invalid_argument, std::to_string(world) + " stages need at least as many layers (--layers " +
                                                          std::to_string(o.layers) + ")");
  if (o.classes < 2) throw gsync::error(gsync::errc::invalid_argument, "--classes must be at least 2");
  return o;
}

/// One fully connected layer with its gradients.
struct layer {
  matrix<float> w, dw;        ///< in x out weights and their gradient
  std::vector<float> b, db;   ///< out biases and their gradient
  bool relu = true;           ///< ReLU after the affine map (every layer but the last)
};

/// Layer l of the model, from the deterministic initialization (He-scaled weights, small biases).
layer make_layer(const options& o, std::size_t l) {
  const std::size_t in = l == 0 ? o.dim : o.hidden, out = l + 1 == o.layers ? o.classes : o.hidden;
  const dense::rng g{o.seed};
  layer y{matrix<float>(in, out), matrix<float>(in, out), std::vector<float>(out), std::vector<float>(out),
          l + 1 != o.layers};
  dense::init_normal(y.w.v(), g, 100 + 2 * l, std::sqrt(2.0 / static_cast<double>(in)));
  dense::init_uniform(view<float>{y.b.data(), 1, out}, g, 101 + 2 * l, -0.1, 0.1);
  return y;
}

/// y = act(x W + b).
void forward_layer(const layer& L, dense::in_view<float> x, view<float> y) {
  dense::matmul(x, L.w, y);
  dense::add_bias(y, std::span<const float>{L.b});
  if (L.relu) dense::relu(y, y);
}

/// Backward of one layer given its input x, output y and the gradient dy of the output (overwritten with
/// the pre-activation gradient). Writes (or, with `accumulate`, adds) dW and db; writes dx unless it is
/// empty (the first layer of the model needs no input gradient).
void backward_layer(layer& L, dense::in_view<float> x, dense::in_view<float> y, view<float> dy, view<float> dx,
                    bool accumulate) {
  if (L.relu) dense::relu_backward(y, dy, dy);
  dense::matmul_tn(x, dy, L.dw.v(), accumulate);
  dense::bias_grad(dy, std::span<float>{L.db}, accumulate);
  if (dx.data != nullptr) dense::matmul_nt(dy, L.w, dx);
}

void sgd(layer& L, float lr) {
  dense::sgd_update(L.w.flat(), L.dw.flat(), lr);
  dense::sgd_update(std::span<float>{L.b}, std::span<const float>{L.db}, lr);
}

/// The features and labels of samples first .. first + count - 1.
void make_batch(const dense::teacher_dataset& ds, std::size_t first, matrix<float>& x, std::vector<int>& labels) {
  ds.batch(first, x.v(), std::span<int>{labels});
}

/// A run of consecutive layers and the activations of the micro-batches in flight through them.
struct stage {
  std::size_t first = 0;                       ///< index of the first layer in the model
  std::vector<layer> layers;                   ///< the layers this stage owns
  std::vector<std::vector<matrix<float>>> act; ///< act[m][j]: input of layer j for micro-batch m; act[m][n] the output

  /// Forwards micro-batch m from `input`; the output stays in act[m].back() until backward(m).
  const matrix<float>& forward(std::size_t m, matrix<float> input) {
    auto& a = act[m];
    a.clear();
    a.push_back(std::move(input));
    for (const layer& L : layers) {
      matrix<float> y(a.back().rows, L.w.cols);
      forward_layer(L, a.back(), y.v());
      a.push_back(std::move(y));
    }
    return a.back();
  }

  /// Backward of micro-batch m from the gradient of its output; returns the gradient of its input (empty
  /// when `need_dx` is false) and frees its activations. Gradients are overwritten unless `accumulate`.
  matrix<float> backward(std::size_t m, matrix<float> dout, bool need_dx, bool accumulate) {
    auto& a = act[m];
    for (std::size_t j = layers.size(); j-- > 0;) {
      matrix<float> dx = (j > 0 || need_dx) ? matrix<float>(a[j].rows, a[j].cols) : matrix<float>();
      backward_layer(layers[j], a[j], a[j + 1], dout.v(), dx.rows ? dx.v() : view<float>{}, accumulate);
      dout = std::move(dx);
    }
    a.clear();
    return dout;
  }
};

constexpr int tag_forward(std::size_t m) { return static_cast<int>(2 * m); }
constexpr int tag_backward(std::size_t m) { return static_cast<int>(2 * m + 1); }

/// One 1F1B training step of stage s (gradients only; the caller applies SGD). Returns the summed loss
/// of the micro-batches on the last stage, 0 elsewhere.
template <class Comm>
double train_step_1f1b(Comm& comm, stage& st, const options& o, const dense::teacher_dataset& ds, std::size_t step) {
  const std::size_t s = static_cast<std::size_t>(comm.rank()), n_stages = static_cast<std::size_t>(comm.size());
  const bool first = s == 0, last = s + 1 == n_stages;
  const int prev = comm.rank() - 1, next = comm.rank() + 1;
  const std::size_t M = o.micro, warmup = std::min(n_stages - 1 - s, M);
  const std::size_t in_dim = st.layers.front().w.rows, out_dim = st.layers.back().w.cols;
  st.act.assign(M, {});
  double loss = 0;

  auto forward = [&](std::size_t m) {  // receive (or generate) the input of micro-batch m and forward it
    const range mb = balanced(o.batch, M, m);
    matrix<float> in(mb.count, in_dim);
    if (first) {
      std::vector<int> unused(mb.count);
      make_batch(ds, step * o.batch + mb.start, in, unused);
    } else {
      gsync::recv(comm, in.flat(), prev, tag_forward(m));
    }
    st.forward(m, std::move(in));
  };
  auto send_forward = [&](std::size_t m) {
    if (!last) gsync::send(comm, std::span<const float>{st.act[m].back().data}, next, tag_forward(m));
  };
  auto receive_gradient = [&](std::size_t m) {  // from the next stage, or from the loss on the last
    const range mb = balanced(o.batch, M, m);
    matrix<float> d(mb.count, out_dim);
    if (last) {
      matrix<float> unused_x(mb.count, o.dim);
      std::vector<int> labels(mb.count);
      make_batch(ds, step * o.batch + mb.start, unused_x, labels);
      loss += dense::softmax_cross_entropy(st.act[m].back(), labels, d.v(), static_cast<double>(o.batch));
    } else {
      gsync::recv(comm, d.flat(), next, tag_backward(m));
    }
    return d;
  };
  auto backward = [&](std::size_t m, matrix<float> d) {
    matrix<float> dx = st.backward(m, std::move(d), !first, m > 0);
    if (!first) gsync::send(comm, std::span<const float>{dx.data}, prev, tag_backward(m));
  };

  for (std::size_t m = 0; m < warmup; ++m) {  // warm-up: forwards only
    forward(m);
    send_forward(m);
  }
  for (std::size_t k = 0; k + warmup < M; ++k) {  // steady state: one forward, one backward
    forward(warmup + k);
    matrix<float> d = receive_gradient(k);  // before sending forward: see the file comment
    send_forward(warmup + k);
    backward(k, std::move(d));
  }
  for (std::size_t k = M - warmup; k < M; ++k) backward(k, receive_gradient(k));  // cool-down
  return loss;
}

/// The whole model trained sequentially on the full batch (the reference).
struct sequential_model {
  std::vector<layer> layers;

  /// Forward and backward of the full batch; leaves the gradients in the layers and returns the loss.
  double gradients(const matrix<float>& x, const std::vector<int>& labels) {
    std::vector<matrix<float>> a;
    a.push_back(x);
    for (const layer& L : layers) {
      matrix<float> y(x.rows, L.w.cols);
      forward_layer(L, a.back(), y.v());
      a.push_back(std::move(y));
    }
    matrix<float> d(x.rows, layers.back().w.cols);
    const double loss = dense::softmax_cross_entropy(a.back(), labels, d.v());
    for (std::size_t j = layers.size(); j-- > 0;) {
      matrix<float> dx = j > 0 ? matrix<float>(a[j].rows, a[j].cols) : matrix<float>();
      backward_layer(layers[j], a[j], a[j + 1], d.v(), dx.rows ? dx.v() : view<float>{}, false);
      d = std::move(dx);
    }
    return loss;
  }
};

/// max |got - ref| and max |ref| of two equally long arrays (a NaN in got counts as infinite error).
void compare(std::span<const float> got, std::span<const float> ref, double& max_err, double& max_ref) {
  for (std::size_t k = 0; k < got.size(); ++k) {
    const double e = std::fabs(static_cast<double>(got[k]) - static_cast<double>(ref[k]));
    max_err = std::max(max_err, std::isnan(e) ? 1e300 : e);
    max_ref = std::max(max_ref, static_cast<double>(std::fabs(ref[k])));
  }
}

int run(int argc, char** argv) {
  auto comm = gsync::tcp_communicator::from_env();
  const options o = parse(argc, argv, comm.size());
  const std::size_t s = static_cast<std::size_t>(comm.rank()), n_stages = static_cast<std::size_t>(comm.size());
  const dense::teacher_dataset ds(o.seed, o.dim, o.classes);

  stage st;
  const range own = balanced(o.layers, n_stages, s);
  st.first = own.start;
  for (std::size_t l = own.start; l < own.start + own.count; ++l) st.layers.push_back(make_layer(o, l));
  sequential_model ref;
  for (std::size_t l = 0; l < o.layers; ++l) ref.layers.push_back(make_layer(o, l));
  std::printf("stage %zu/%zu: layers [%zu, %zu), %zu warm-up forwards\n", s, n_stages, own.start,
              own.start + own.count, std::min(n_stages - 1 - s, o.micro));
  if (s == 0)
    std::printf("1F1B: %zu micro-batches of %zu..%zu samples per batch of %zu, %zu steps, lr %g\n", o.micro,
                o.batch / o.micro, (o.batch + o.micro - 1) / o.micro, o.batch, o.steps, o.lr);

  const double grad_tol = 1e-5, loss_tol = 1e-6;
  bool ok = true;
  for (std::size_t step = 0; step < o.steps; ++step) {
    // Pipeline step, then the loss from the last stage to everyone.
    double loss = train_step_1f1b(comm, st, o, ds, step);
    gsync::broadcast(comm, std::span<double>{&loss, 1}, comm.size() - 1);

    // Sequential reference of the same step.
    matrix<float> x(o.batch, o.dim);
    std::vector<int> labels(o.batch);
    make_batch(ds, step * o.batch, x, labels);
    const double ref_loss = ref.gradients(x, labels);

    // This stage's gradients against the reference's: worst relative error over its tensors.
    double grad_rel = 0, grad_abs = 0;
    for (std::size_t j = 0; j < st.layers.size(); ++j) {
      const layer& p = st.layers[j];
      const layer& q = ref.layers[st.first + j];
      for (int t = 0; t < 2; ++t) {
        double e = 0, m = 0;
        if (t == 0) compare(p.dw.flat(), q.dw.flat(), e, m);
        else compare(p.db, q.db, e, m);
        grad_abs = std::max(grad_abs, e);
        grad_rel = std::max(grad_rel, m > 0 ? e / m : e);
      }
    }
    const double loss_err = std::fabs(loss - ref_loss) / std::max(1.0, std::fabs(ref_loss));
    double worst[3] = {grad_abs, grad_rel, std::isnan(loss_err) ? 1e300 : loss_err};
    gsync::allreduce(comm, std::span<double>{worst}, gsync::op::max{});
    const bool pass = worst[1] <= grad_tol && worst[2] <= loss_tol;
    ok = ok && pass;
    if (s == 0)
      std::printf("step %zu: loss %.6f (sequential %.6f, rel diff %.2e) | stage gradients max abs err %.2e, "
                  "max rel err %.2e%s\n",
                  step, loss, ref_loss, worst[2], worst[0], worst[1], pass ? "" : "  MISMATCH");

    for (layer& L : st.layers) sgd(L, static_cast<float>(o.lr));
    for (layer& L : ref.layers) sgd(L, static_cast<float>(o.lr));
  }
  if (s == 0)
    std::printf("%s (tolerance: gradients %.0e of max |reference| per tensor, loss %.0e relative)\n",
                ok ? "pipeline check passed" : "pipeline check FAILED", grad_tol, loss_tol);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return dense::run_example("pipeline_parallel", run, argc, argv); }
