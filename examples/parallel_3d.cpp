// 3D-parallel training (data x pipeline x tensor) of a residual MLP with gsync::make_grid.
//
//   gsyncrun -n 8 -- ./parallel_3d                                  # 2 x 2 x 2
//   gsyncrun -n 4 -- ./parallel_3d --data 1 --pipeline 2 --tensor 2
//
// Model: L blocks (--blocks, default 4) of the Megatron MLP y = x + relu(x W1) W2, W1: dim x hidden,
// W2: hidden x dim, no biases; the loss is the mean squared error against a target t = x M (M a fixed
// random dim x dim "teacher"), mean over the B samples of the global batch and the dim outputs; plain SGD.
// Step k uses the global samples k*B .. k*B + B - 1; features, targets and weights all come from the
// counter-based generator of common/dense.hpp, so any rank makes any of them without communication.
//
// Layout (gsync::make_grid, Megatron order: world rank = (stage * data + replica) * tensor + shard):
//
//                      shard 0  shard 1
//   stage 0 replica 0:  [ 0 ]    [ 1 ]      tensor groups   [0 1] [2 3] [4 5] [6 7]
//           replica 1:  [ 2 ]    [ 3 ]      data groups     [0 2] [1 3] [4 6] [5 7]
//   stage 1 replica 0:  [ 4 ]    [ 5 ]      pipeline groups [0 4] [1 5] [2 6] [3 7]
//           replica 1:  [ 6 ]    [ 7 ]
//
// - pipeline: stage s owns a balanced, contiguous run of the blocks (--blocks >= --pipeline).
// - tensor: within a stage, shard k owns a balanced slice h_k of the hidden units of each of its blocks:
//   the columns h_k of W1 and the rows h_k of W2. relu acts on the columns a shard owns, so the forward
//   is Z = X W1[:, h_k], P_k = relu(Z) W2[h_k, :], Y = X + allreduce_sum(P_k) over g.tensor, and the
//   backward dA = dY W2[h_k, :]^T, dW2[h_k, :] = A^T dY, dZ = relu'(Z) dA, dW1[:, h_k] = X^T dZ,
//   dX = dY + allreduce_sum(dZ W1[:, h_k]^T). X, Y, dY and dX are whole (dim wide) on every shard.
// - data: replica r takes a balanced slice of the global batch, cut into --micro micro-batches.
//
// One step on each rank (GPipe schedule: all forwards, then all backwards):
//   forward, for each micro-batch m:  X = generated features (stage 0) or recv from stage s-1 (tag 2m)
//     over g.pipeline; the stage's blocks; send Y to stage s+1 (tag 2m), or on the last stage the loss
//     and dY. Every shard of a stage sends to / receives from the same shard of the next stage.
//   backward, for each m: dY = recv from stage s+1 (tag 2m+1), or the loss gradient on the last stage;
//     the blocks in reverse, accumulating dW over the micro-batches; dX to stage s-1 (tag 2m+1).
//   The sends of a link all go one way in each phase, so no send waits on a receive that waits on it.
//   gradients: allreduce_avg of every dW over g.data. A replica's loss is its samples' part of the
//     global mean (squared errors / (B dim)); its gradient is D times that part's gradient, so the
//     average over the D replicas is the gradient of the global mean loss.
//   SGD on the shards each rank owns. The global loss is the last stage's (shard 0) summed over the
//     replicas: allreduce_sum over the world, so every rank has it.
//
// Check (every step): every rank also trains the whole model (all blocks, all hidden units) on the whole
// batch in one pass, in float as the parallel run, from the same initialization, and compares the global
// loss with that single-rank loss; a relative difference above 1e-5 on any step fails the run (exit 1).
// The two differ only by rounding: the hidden sums are split into T partial sums, the batch gradient
// into D averaged parts (the differences seen are up to a few 1e-7 relative).
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
  int data = 2, pipeline = 2, tensor = 2;  ///< D x P x T, must be the world size
  std::size_t batch = 16;                  ///< B, global samples per step
  std::size_t micro = 2;                   ///< micro-batches per replica and step
  std::size_t dim = 16;                    ///< model width (features, block input and output)
  std::size_t hidden = 32;                 ///< hidden units of every block
  std::size_t blocks = 4;                  ///< L, MLP blocks of the model
  std::size_t steps = 6;                   ///< training steps
  double lr = 0.05;                        ///< SGD learning rate
  std::uint64_t seed = 1;                  ///< seed of weights and data
};

/// Generator streams: the features, the teacher, then W1 and W2 of block l (stream_w + 2l, + 2l + 1).
enum : std::uint64_t { stream_x = 1, stream_teacher = 2, stream_w = 100 };

constexpr double tolerance = 1e-5;  ///< relative loss difference allowed on every step

[[noreturn]] void bad_option(const std::string& what) { throw gsync::error(gsync::errc::invalid_argument, what); }

std::size_t parse_size(const std::string& name, const char* s) {
  char* end = nullptr;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (end == s || *end != '\0' || v == 0 || v > 1000000) bad_option(name + " wants a positive integer, got '" + s + "'");
  return static_cast<std::size_t>(v);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf("usage: parallel_3d [--data D] [--pipeline P] [--tensor T] [--batch B] [--micro M] [--dim N]\n"
                  "                   [--hidden H] [--blocks L] [--steps S] [--lr LR] [--seed X]\n"
                  "run with D*P*T ranks (gsyncrun -n D*P*T); defaults 2 x 2 x 2\n");
      std::exit(0);
    }
    if (i + 1 >= argc) bad_option("option " + a + " needs a value (see --help)");
    const char* v = argv[++i];
    if (a == "--data") o.data = static_cast<int>(parse_size(a, v));
    else if (a == "--pipeline") o.pipeline = static_cast<int>(parse_size(a, v));
    else if (a == "--tensor") o.tensor = static_cast<int>(parse_size(a, v));
    else if (a == "--batch") o.batch = parse_size(a, v);
    else if (a == "--micro") o.micro = parse_size(a, v);
    else if (a == "--dim") o.dim = parse_size(a, v);
    else if (a == "--hidden") o.hidden = parse_size(a, v);
    else if (a == "--blocks") o.blocks = parse_size(a, v);
    else if (a == "--steps") o.steps = parse_size(a, v);
    else if (a == "--lr") o.lr = std::strtod(v, nullptr);
    else if (a == "--seed") o.seed = std::strtoull(v, nullptr, 10);
    else bad_option("unknown option " + a + " (see --help)");
  }
  const auto D = static_cast<std::size_t>(o.data), P = static_cast<std::size_t>(o.pipeline), T = static_cast<std::size_t>(o.tensor);
  if (o.blocks < P) bad_option(std::to_string(P) + " pipeline stages need at least as many blocks (--blocks " + std::to_string(o.blocks) + ")");
  if (o.hidden < T) bad_option(std::to_string(T) + " tensor shards need at least as many hidden units (--hidden " + std::to_string(o.hidden) + ")");
  if (o.batch < D * o.micro)
    bad_option("--batch " + std::to_string(o.batch) + " is too small for " + std::to_string(D) + " replicas x " +
               std::to_string(o.micro) + " micro-batches (every micro-batch needs a sample)");
  return o;
}

/// One MLP block, or a tensor shard of it: the hidden units h of W1's columns and W2's rows.
struct block {
  matrix<float> w1, w2, dw1, dw2;
};

/// Block l restricted to hidden units h (all of them for the reference), from the seed.
block make_block(const options& o, std::size_t l, range h) {
  const dense::rng g{o.seed};
  block b{matrix<float>(o.dim, h.count), matrix<float>(h.count, o.dim), matrix<float>(o.dim, h.count),
          matrix<float>(h.count, o.dim)};
  dense::init_normal(b.w1.v(), g, stream_w + 2 * l, std::sqrt(2.0 / static_cast<double>(o.dim)), 0, h.start, o.hidden);
  // W2 scaled by 1/sqrt(L) as well: the L residual branches add up to a bounded change of x.
  dense::init_normal(b.w2.v(), g, stream_w + 2 * l + 1, 1.0 / std::sqrt(static_cast<double>(o.hidden * o.blocks)),
                     h.start, 0, o.dim);
  return b;
}

/// Features and targets of the global samples first .. first + x.rows - 1.
void make_samples(const options& o, std::size_t first, matrix<float>& x, matrix<float>& t) {
  const dense::rng g{o.seed};
  matrix<float> teacher(o.dim, o.dim);
  dense::init_normal(teacher.v(), g, stream_teacher, 1.0 / std::sqrt(static_cast<double>(o.dim)));
  dense::init_normal(x.v(), g, stream_x, 1.0, first);
  dense::matmul(x, teacher, t.v());
}

/// What a block's backward needs of its forward: the input X and A = relu(X W1) (this shard's columns).
struct saved {
  matrix<float> x, a;
};

/// Y = X + reduce(relu(X W1) W2); `reduce` sums the partial products over the tensor shards.
template <class Reduce>
matrix<float> block_forward(const block& b, matrix<float> x, saved& s, Reduce&& reduce) {
  matrix<float> a(x.rows, b.w1.cols), y(x.rows, x.cols);
  dense::matmul(x, b.w1, a.v());
  dense::relu(a, a.v());
  dense::matmul(a, b.w2, y.v());  // this shard's partial sum over the hidden units
  reduce(y);
  for (std::size_t k = 0; k < y.data.size(); ++k) y.data[k] += x.data[k];
  s = {std::move(x), std::move(a)};
  return y;
}

/// dX = dY + reduce(dZ W1^T); writes (or with `accumulate` adds to) this shard's dW1 and dW2.
template <class Reduce>
matrix<float> block_backward(block& b, const saved& s, const matrix<float>& dy, bool accumulate, Reduce&& reduce) {
  matrix<float> dz(dy.rows, b.w1.cols), dx(dy.rows, dy.cols);
  dense::matmul_nt(dy, b.w2, dz.v());                 // dA = dY W2^T
  dense::matmul_tn(s.a, dy, b.dw2.v(), accumulate);  // dW2 = A^T dY
  dense::relu_backward(s.a, dz, dz.v());             // dZ = relu'(Z) dA
  dense::matmul_tn(s.x, dz, b.dw1.v(), accumulate);  // dW1 = X^T dZ
  dense::matmul_nt(dz, b.w1, dx.v());                // partial dX = dZ W1^T
  reduce(dx);
  for (std::size_t k = 0; k < dx.data.size(); ++k) dx.data[k] += dy.data[k];  // the residual path
  return dx;
}

/// Sum of the squared errors y - t; writes dy = scale * 2 (y - t).
double squared_error(const matrix<float>& y, const matrix<float>& t, matrix<float>& dy, double scale) {
  const float c = static_cast<float>(2.0 * scale);
  double sum = 0;
  for (std::size_t k = 0; k < y.data.size(); ++k) {
    const float d = y.data[k] - t.data[k];
    sum += static_cast<double>(d) * d;
    dy.data[k] = c * d;
  }
  return sum;
}

void sgd(std::vector<block>& blocks, float lr) {
  for (block& b : blocks) {
    dense::sgd_update(b.w1.flat(), b.dw1.flat(), lr);
    dense::sgd_update(b.w2.flat(), b.dw2.flat(), lr);
  }
}

constexpr int tag_forward(std::size_t m) { return static_cast<int>(2 * m); }
constexpr int tag_backward(std::size_t m) { return static_cast<int>(2 * m + 1); }

/// One 3D-parallel step of this rank (gradients averaged over g.data, weights not yet updated).
/// Returns this replica's part of the global mean loss on the last stage, 0 elsewhere.
template <class Grid>
double train_step(Grid& g, std::vector<block>& mine, const options& o, std::size_t step) {
  const bool first = g.stage == 0, last = g.stage + 1 == o.pipeline;
  const range rep = balanced(o.batch, static_cast<std::size_t>(o.data), static_cast<std::size_t>(g.replica));
  const double norm = static_cast<double>(o.batch * o.dim);  // the global mean's divisor
  auto tensor_sum = [&](matrix<float>& m) { gsync::allreduce(g.tensor, m.flat(), gsync::op::sum{}); };
  std::vector<std::vector<saved>> act(o.micro, std::vector<saved>(mine.size()));
  std::vector<matrix<float>> dout(o.micro);
  double loss = 0;

  for (std::size_t m = 0; m < o.micro; ++m) {  // forward
    const range mb = balanced(rep.count, o.micro, m);
    matrix<float> x(mb.count, o.dim), t(mb.count, o.dim);
    if (first || last) make_samples(o, step * o.batch + rep.start + mb.start, x, t);
    if (!first) gsync::recv(g.pipeline, x.flat(), g.stage - 1, tag_forward(m));
    for (std::size_t j = 0; j < mine.size(); ++j) x = block_forward(mine[j], std::move(x), act[m][j], tensor_sum);
    if (!last) {
      gsync::send(g.pipeline, std::span<const float>{x.data}, g.stage + 1, tag_forward(m));
    } else {
      dout[m] = matrix<float>(x.rows, x.cols);
      loss += squared_error(x, t, dout[m], o.data / norm) / norm;  // x D: allreduce_avg divides by D
    }
  }
  for (std::size_t m = 0; m < o.micro; ++m) {  // backward
    matrix<float> d = std::move(dout[m]);
    if (!last) {
      d = matrix<float>(balanced(rep.count, o.micro, m).count, o.dim);
      gsync::recv(g.pipeline, d.flat(), g.stage + 1, tag_backward(m));
    }
    for (std::size_t j = mine.size(); j-- > 0;) d = block_backward(mine[j], act[m][j], d, m > 0, tensor_sum);
    if (!first) gsync::send(g.pipeline, std::span<const float>{d.data}, g.stage - 1, tag_backward(m));
  }
  for (block& b : mine) {  // gradient of the global mean loss
    gsync::allreduce(g.data, b.dw1.flat(), gsync::op::avg{});
    gsync::allreduce(g.data, b.dw2.flat(), gsync::op::avg{});
  }
  return loss;
}

/// The single-rank reference: one step of the whole model on the whole batch; returns its loss.
double reference_step(std::vector<block>& model, const options& o, std::size_t step) {
  const auto none = [](matrix<float>&) {};
  const double norm = static_cast<double>(o.batch * o.dim);
  matrix<float> x(o.batch, o.dim), t(o.batch, o.dim), d(o.batch, o.dim);
  make_samples(o, step * o.batch, x, t);
  std::vector<saved> act(model.size());
  for (std::size_t j = 0; j < model.size(); ++j) x = block_forward(model[j], std::move(x), act[j], none);
  const double loss = squared_error(x, t, d, 1.0 / norm) / norm;
  for (std::size_t j = model.size(); j-- > 0;) d = block_backward(model[j], act[j], d, false, none);
  sgd(model, static_cast<float>(o.lr));
  return loss;
}

int run(int argc, char** argv) {
  const options o = parse(argc, argv);
  auto world = gsync::tcp_communicator::from_env();
  if (static_cast<long long>(o.data) * o.pipeline * o.tensor != world.size())
    bad_option("--data " + std::to_string(o.data) + " x --pipeline " + std::to_string(o.pipeline) + " x --tensor " +
               std::to_string(o.tensor) + " = " + std::to_string(o.data * o.pipeline * o.tensor) +
               " ranks, but the job has " + std::to_string(world.size()) + " (gsyncrun -n " +
               std::to_string(o.data * o.pipeline * o.tensor) + ", or change the sizes)");
  auto g = gsync::make_grid(world, o.data, o.pipeline, o.tensor);

  const range own = balanced(o.blocks, static_cast<std::size_t>(o.pipeline), static_cast<std::size_t>(g.stage));
  const range hid = balanced(o.hidden, static_cast<std::size_t>(o.tensor), static_cast<std::size_t>(g.shard));
  const range rep = balanced(o.batch, static_cast<std::size_t>(o.data), static_cast<std::size_t>(g.replica));
  std::vector<block> mine, model;
  for (std::size_t l = own.start; l < own.start + own.count; ++l) mine.push_back(make_block(o, l, hid));
  for (std::size_t l = 0; l < o.blocks; ++l) model.push_back(make_block(o, l, {0, o.hidden}));
  std::printf("rank %d: replica %d stage %d shard %d: blocks [%zu, %zu), hidden units [%zu, %zu), batch samples [%zu, %zu)\n",
              world.rank(), g.replica, g.stage, g.shard, own.start, own.start + own.count, hid.start,
              hid.start + hid.count, rep.start, rep.start + rep.count);
  std::fflush(stdout);
  if (world.rank() == 0)
    std::printf("%d data x %d pipeline x %d tensor, batch %zu (%zu micro-batches per replica), dim %zu, hidden %zu, "
                "%zu blocks, lr %g\n%4s  %14s  %14s  %10s\n",
                o.data, o.pipeline, o.tensor, o.batch, o.micro, o.dim, o.hidden, o.blocks, o.lr, "step",
                "parallel loss", "reference loss", "rel diff");

  std::vector<std::size_t> bad_steps;
  bool diverged = false;  // the reference itself: no parallel run can match a NaN
  for (std::size_t step = 0; step < o.steps; ++step) {
    const double part = train_step(g, mine, o, step);
    sgd(mine, static_cast<float>(o.lr));
    double loss = (g.stage + 1 == o.pipeline && g.shard == 0) ? part : 0.0;
    gsync::allreduce(world, std::span<double>{&loss, 1}, gsync::op::sum{});
    const double ref = reference_step(model, o, step);
    const double rel = std::fabs(loss - ref) / std::max(std::fabs(ref), 1e-30);
    const bool pass = rel <= tolerance;  // false for NaN
    diverged = diverged || !std::isfinite(ref);
    if (!pass) bad_steps.push_back(step);
    if (world.rank() == 0) {  // flushed: a failing rank ends the job, which may not wait for rank 0's exit
      std::printf("%4zu  %14.8f  %14.8f  %10.2e%s\n", step, loss, ref, rel, pass ? "" : "  MISMATCH");
      std::fflush(stdout);
    }
  }
  // Every rank computed the same verdict from the same numbers; combine anyway so that all agree.
  int failed = bad_steps.empty() ? 0 : 1;
  gsync::allreduce(world, std::span<int>{&failed, 1}, gsync::op::max{});
  if (world.rank() == 0) {
    if (failed)
      std::fprintf(stderr, "parallel_3d: FAILED: %zu of %zu steps differ from single-rank training by more than %.0e "
                           "relative (first: step %zu)%s\n",
                   bad_steps.size(), o.steps, tolerance, bad_steps.empty() ? std::size_t{0} : bad_steps.front(),
                   diverged ? "; the single-rank training itself diverged (non-finite loss): lower --lr" : "");
    else
      std::printf("3D-parallel check passed: all %zu steps match single-rank training within %.0e relative\n", o.steps,
                  tolerance);
  }
  return failed;
}

}  // namespace

int main(int argc, char** argv) { return dense::run_example("parallel_3d", run, argc, argv); }
