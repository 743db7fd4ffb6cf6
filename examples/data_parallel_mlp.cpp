// Data-parallel training of an MLP with gsync's gradient synchronizer.
//
// Every rank holds the whole model (same deterministic initialization from --seed), takes its own
// slice of each global batch, runs forward and a hand-written backward, and hands each layer's
// gradients to `gsync::grad::synchronizer` as soon as backward has produced them: buckets of gradients
// are averaged over the ranks on the progress engine while backward continues with earlier layers.
// After `finish()` every rank holds the same averaged gradients and applies the same SGD step, so the
// replicas stay identical.
//
// Which samples a rank sees depends only on the seed, the step and the global sample index: with N
// ranks, per-rank batch B and K accumulation micro-steps, step s covers the global samples
// [s*N*K*B, (s+1)*N*K*B); rank r takes s*N*K*B + r*K*B + m*B ... + B-1 in micro-step m. One rank with
// --batch 4B therefore trains on exactly the samples of four ranks with --batch B (and of one rank
// with --batch 2B --accum 2), and the printed loss (the global mean over the step's samples,
// reduced with an allreduce) agrees within float rounding.
//
//   gsyncrun -n 4 -- data_parallel_mlp --steps 50 --batch 8 --wire bf16 --json out.json
//
// Options: --steps S --batch B (per rank) --seed X --wire f32|bf16|f16 --compress none|int8|topk
// --topk-ratio R --no-ef --accum K --json FILE --dim D --classes C --hidden H --layers L --lr LR
// --bucket-mb MB --first-bucket-mb MB --zero-copy --loss-scale --clip NORM --baseline-ms MS
// --measure-baseline --print-every P --eval-samples E --compare REF.json --tol T (exit 3 unless every
// step's loss is within relative tolerance T of REF's; this is how the ctest equivalence tests check)
// --elastic --die-rank R --die-step S.
//
// --elastic: when a rank dies (run under `gsyncrun --elastic`, or any launcher that lets the others
// run on), the survivors catch peer_lost, shrink the communicator (communicator::shrink), take the
// new rank 0's parameters, redo the step the earliest of them was in, with the samples re-sharded
// over the ranks left, and go on; at the end rank 0 exits 4 unless every loss was finite and the
// last one below the first. A rank the shrink excluded (it was stopped, or cut off, while the
// others went on: errc::excluded) exits with gsync::excluded_exit_status, which `gsyncrun
// --elastic` lets go. --die-rank R --die-step S: rank R kills itself with SIGKILL in the
// middle of step S (after its forward pass), for tests.
//
// JSON (written by rank 0): {"world_size", "steps", "batch", "accum", "wire", "loss": [per step],
// "final_loss" (mean loss over a fixed evaluation set after the last step), "bytes_on_wire" (total
// bytes rank 0 sent for gradient synchronization), "comm_ratio" (exposed communication / step time),
// "step_time_ms" (mean), "comm_time_ms" (mean per step: the progress engine's time in the step's
// collectives), "exposed_ms" (mean per step: time blocked in finish()), "sync_time_ms" (mean per step
// of the shortest comm time of any rank: the rank that reached the collectives last waited least for
// the others, so this is the synchronization's own duration), "skipped_steps"}.

#include <chrono>
#include <csignal>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <gsync/async.hpp>
#include <gsync/grad.hpp>
#include <gsync/gsync.hpp>

#include "common/dense.hpp"

#if __has_include(<gsync/grad/compressed_reducer.hpp>) && !defined(DP_NO_COMPRESSION)
#include <gsync/grad/compressed_reducer.hpp>  // compression as the synchronizer's bucket reducer
#define DP_HAVE_COMPRESSION 1
#endif

namespace {

struct options {
  int steps = 50;
  std::size_t batch = 16;
  std::uint64_t seed = 1;
  std::string wire = "f32";
  std::string compress = "none";
  double topk_ratio = 0.01;
  bool error_feedback = true;
  std::uint32_t accum = 1;
  std::string json;
  std::size_t dim = 32, classes = 10, hidden = 64, layers = 2;
  float lr = 0.05f;
  double bucket_mb = 25, first_bucket_mb = 1;
  bool zero_copy = false, loss_scale = false;
  double clip = 0;
  double baseline_ms = 0;
  bool measure_baseline = false;
  int print_every = 1;
  std::size_t eval_samples = 512;
  std::string compare;  // reference JSON whose losses this run must match
  double tol = 1e-5;    // relative tolerance of --compare
  bool elastic = false;  // go on without a rank that dies (shrink, re-shard, redo the step)
  int die_rank = -1, die_step = -1;  // this rank kills itself (SIGKILL) in that step, for tests
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "data_parallel_mlp: %s\n", msg.c_str());
  std::exit(2);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      return argv[++i];
    };
    auto num = [&](double lo, double hi) {
      const std::string v = val();
      char* end = nullptr;
      const double x = std::strtod(v.c_str(), &end);
      if (end == v.c_str() || *end != '\0' || !(x >= lo && x <= hi))
        usage_error(a + " " + v + ": expected a number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
      return x;
    };
    if (a == "--steps") o.steps = static_cast<int>(num(1, 1e9));
    else if (a == "--batch") o.batch = static_cast<std::size_t>(num(1, 1e7));
    else if (a == "--seed") o.seed = static_cast<std::uint64_t>(num(0, 1e18));
    else if (a == "--wire") o.wire = val();
    else if (a == "--compress") o.compress = val();
    else if (a == "--topk-ratio") o.topk_ratio = num(1e-9, 1);
    else if (a == "--no-ef") o.error_feedback = false;
    else if (a == "--accum") o.accum = static_cast<std::uint32_t>(num(1, 1e6));
    else if (a == "--json") o.json = val();
    else if (a == "--dim") o.dim = static_cast<std::size_t>(num(1, 1e6));
    else if (a == "--classes") o.classes = static_cast<std::size_t>(num(2, 1e6));
    else if (a == "--hidden") o.hidden = static_cast<std::size_t>(num(1, 1e6));
    else if (a == "--layers") o.layers = static_cast<std::size_t>(num(0, 1000));
    else if (a == "--lr") o.lr = static_cast<float>(num(0, 1e6));
    else if (a == "--bucket-mb") o.bucket_mb = num(1e-6, 1e6);
    else if (a == "--first-bucket-mb") o.first_bucket_mb = num(1e-6, 1e6);
    else if (a == "--zero-copy") o.zero_copy = true;
    else if (a == "--loss-scale") o.loss_scale = true;
    else if (a == "--clip") o.clip = num(0, 1e30);
    else if (a == "--baseline-ms") o.baseline_ms = num(0, 1e12);
    else if (a == "--measure-baseline") o.measure_baseline = true;
    else if (a == "--print-every") o.print_every = static_cast<int>(num(0, 1e9));
    else if (a == "--compare") o.compare = val();
    else if (a == "--tol") o.tol = num(0, 1e30);
    else if (a == "--eval-samples") o.eval_samples = static_cast<std::size_t>(num(1, 1e8));
    else if (a == "--elastic") o.elastic = true;
    else if (a == "--die-rank") o.die_rank = static_cast<int>(num(0, 1e6));
    else if (a == "--die-step") o.die_step = static_cast<int>(num(0, 1e9));
    else usage_error("unknown option " + a + " (see the comment at the top of examples/data_parallel_mlp.cpp)");
  }
  if (o.wire != "f32" && o.wire != "bf16" && o.wire != "f16") usage_error("--wire must be f32, bf16 or f16, not " + o.wire);
  if (o.compress != "none" && o.compress != "int8" && o.compress != "topk")
    usage_error("--compress must be none, int8 or topk, not " + o.compress);
  if (o.elastic && o.zero_copy) usage_error("--elastic keeps the gradients in its own buffers: drop --zero-copy");
  return o;
}

// The model: weight layers l = 0..L (L = --layers hidden layers), W_l is in_l x out_l, b_l is out_l;
// ReLU after every layer but the last. Parameters come from (seed, layer), biases start at zero.
struct mlp {
  std::vector<dense::matrix<float>> w;
  std::vector<std::vector<float>> b;

  mlp(const options& o) {
    std::vector<std::size_t> dims = {o.dim};
    for (std::size_t l = 0; l < o.layers; ++l) dims.push_back(o.hidden);
    dims.push_back(o.classes);
    const dense::rng g{o.seed};
    for (std::size_t l = 0; l + 1 < dims.size(); ++l) {
      w.emplace_back(dims[l], dims[l + 1]);
      dense::init_normal(w.back().v(), g, 1000 + l, std::sqrt(2.0 / static_cast<double>(dims[l])));
      b.emplace_back(dims[l + 1], 0.0f);
    }
  }
  std::size_t n_layers() const { return w.size(); }
};

// Activations of one forward pass: a[0] = input, a[l + 1] = output of layer l (logits for the last).
struct activations {
  std::vector<dense::matrix<float>> a;
};

void forward(const mlp& m, activations& act) {
  for (std::size_t l = 0; l < m.n_layers(); ++l) {
    dense::matmul<float>(act.a[l], m.w[l], act.a[l + 1]);
    dense::add_bias<float>(act.a[l + 1], m.b[l]);
    if (l + 1 < m.n_layers()) dense::relu<float>(act.a[l + 1], act.a[l + 1]);
  }
}

activations make_activations(const mlp& m, std::size_t rows) {
  activations act;
  act.a.emplace_back(rows, m.w[0].rows);
  for (std::size_t l = 0; l < m.n_layers(); ++l) act.a.emplace_back(rows, m.w[l].cols);
  return act;
}

// Gradient storage: caller-owned vectors (copy mode) or views into the synchronizer's buckets
// (zero-copy mode); the backward pass writes through these spans either way.
struct grads {
  std::vector<std::span<float>> dw, db;
  std::vector<std::size_t> idx_w, idx_b;  // registration indices
};

// Backward of the mean loss over `normalizer` samples for this micro-batch; dz holds dlogits on entry.
// Accumulates into the gradients when `accumulate`. Calls mark(i) as soon as gradient i is final.
template <class Mark>
void backward(const mlp& m, activations& act, dense::matrix<float> dz, grads& g, bool accumulate, Mark mark) {
  for (std::size_t l = m.n_layers(); l-- > 0;) {
    dense::view<float> dwv{g.dw[l].data(), m.w[l].rows, m.w[l].cols};
    dense::bias_grad<float>(dz, g.db[l], accumulate);
    mark(g.idx_b[l]);
    dense::matmul_tn<float>(act.a[l], dz, dwv, accumulate);
    mark(g.idx_w[l]);
    if (l > 0) {
      dense::matrix<float> da(dz.rows, m.w[l].rows);
      dense::matmul_nt<float>(dz, m.w[l], da);
      dense::relu_backward<float>(act.a[l], da, da);
      dz = std::move(da);
    }
  }
}

// Mean loss over `count` evaluation samples starting at global index `first`, split over the ranks.
template <class Comm>
double eval_loss(Comm& comm, const mlp& m, const dense::teacher_dataset& ds, std::uint64_t first, std::size_t count) {
  const auto n = static_cast<std::size_t>(comm.size()), r = static_cast<std::size_t>(comm.rank());
  const std::size_t lo = count * r / n, hi = count * (r + 1) / n;
  double sum = 0;
  if (hi > lo) {
    activations act = make_activations(m, hi - lo);
    std::vector<int> labels(hi - lo);
    ds.batch<float>(first + lo, act.a[0], labels);
    forward(m, act);
    sum = dense::softmax_cross_entropy_loss(act.a.back(), labels, 1.0);  // sum of per-sample losses
  }
  gsync::allreduce(comm, std::span<double>{&sum, 1}, gsync::op::sum{});
  return sum / static_cast<double>(count);
}

// One local training step on `rows` samples with no communication: the single-rank cost of a step of
// the same global batch, for the speedup estimate.
double local_step_ms(const options& o, const dense::teacher_dataset& ds, std::size_t rows, int reps) {
  mlp m(o);
  activations act = make_activations(m, rows);
  std::vector<int> labels(rows);
  grads g;
  std::vector<std::vector<float>> store;
  store.reserve(2 * m.n_layers());
  for (std::size_t l = 0; l < m.n_layers(); ++l) {
    store.emplace_back(m.w[l].data.size());
    g.dw.emplace_back(store.back());
    g.idx_w.push_back(0);
    store.emplace_back(m.b[l].size());
    g.db.emplace_back(store.back());
    g.idx_b.push_back(0);
  }
  double best = 1e300;
  for (int k = 0; k < reps; ++k) {
    const auto t0 = std::chrono::steady_clock::now();
    ds.batch<float>(static_cast<std::uint64_t>(k) * rows, act.a[0], labels);
    forward(m, act);
    dense::matrix<float> dz(rows, o.classes);
    dense::softmax_cross_entropy<float>(act.a.back(), labels, dz);
    backward(m, act, std::move(dz), g, false, [](std::size_t) {});
    for (std::size_t l = 0; l < m.n_layers(); ++l) {
      dense::sgd_update<float>(m.w[l].flat(), g.dw[l], o.lr);
      dense::sgd_update<float>(std::span<float>{m.b[l]}, g.db[l], o.lr);
    }
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// Reads the "loss" array of a JSON file written by this program.
std::vector<double> read_losses(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw gsync::error(gsync::errc::invalid_argument, "--compare: cannot read " + path);
  const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const auto k = text.find("\"loss\": [");
  if (k == std::string::npos) throw gsync::error(gsync::errc::invalid_argument, "--compare: no \"loss\" array in " + path);
  std::vector<double> v;
  const char* p = text.c_str() + k + 9;
  for (;;) {
    while (*p == ' ' || *p == ',') ++p;
    if (*p == ']' || *p == '\0') break;
    char* end = nullptr;
    v.push_back(std::strtod(p, &end));
    if (end == p) throw gsync::error(gsync::errc::invalid_argument, "--compare: malformed loss array in " + path);
    p = end;
  }
  return v;
}

// `make_reducer()`: the synchronizer's bucket reducer (a fresh one each time the synchronizer is made).
template <class MakeReducer>
int train(const options& o, gsync::tcp_communicator& comm, MakeReducer make_reducer) {
  using Reducer = decltype(make_reducer());
  int n = comm.size(), rank = comm.rank();
  const int first_rank = rank;  // this process's rank at the start (--die-rank names it)
  const dense::teacher_dataset ds(o.seed, o.dim, o.classes);
  mlp m(o);

  gsync::grad::synchronizer_options so;
  so.bucket_bytes = static_cast<std::size_t>(o.bucket_mb * 1048576.0);
  so.first_bucket_bytes = static_cast<std::size_t>(o.first_bucket_mb * 1048576.0);
  so.wire = o.wire == "bf16" ? gsync::grad::wire_dtype::bfloat16
            : o.wire == "f16" ? gsync::grad::wire_dtype::float16 : gsync::grad::wire_dtype::native;
  so.accumulation_steps = o.accum;
  if (o.loss_scale) {
    so.on_nonfinite = gsync::grad::nonfinite_action::report;
    so.loss_scaling = gsync::grad::loss_scaler_options{};
  }
  using sync_type = gsync::grad::synchronizer<gsync::tcp_communicator::transport_type, Reducer>;
  std::optional<sync_type> sync_slot;

  // Register in forward order (W_0, b_0, W_1, ...); backward marks them in reverse. Made again
  // over the shrunk communicator after a rank is lost (--elastic).
  grads g;
  std::vector<std::vector<float>> owned;  // copy mode: the gradients live here
  owned.reserve(2 * m.n_layers());
  for (std::size_t l = 0; l < m.n_layers() && !o.zero_copy; ++l) {
    owned.emplace_back(m.w[l].data.size());
    owned.emplace_back(m.b[l].size());
  }
  const auto make_sync = [&] {
    sync_slot.reset();
    sync_slot.emplace(comm, so, make_reducer());
    sync_type& sync = *sync_slot;
    g = grads{};
    for (std::size_t l = 0; l < m.n_layers(); ++l) {
      const std::string ln = "layer" + std::to_string(l);
      if (o.zero_copy) {
        g.idx_w.push_back(sync.template add_view<float>(m.w[l].data.size(), ln + ".weight"));
        g.idx_b.push_back(sync.template add_view<float>(m.b[l].size(), ln + ".bias"));
      } else {
        g.idx_w.push_back(sync.add(std::span<float>{owned[2 * l]}, ln + ".weight"));
        g.idx_b.push_back(sync.add(std::span<float>{owned[2 * l + 1]}, ln + ".bias"));
      }
    }
    sync.build();  // collective: plans buckets, checks all ranks registered the same tensors
    for (std::size_t l = 0; l < m.n_layers(); ++l) {
      if (o.zero_copy) {
        g.dw.push_back(sync.template view<float>(g.idx_w[l]));
        g.db.push_back(sync.template view<float>(g.idx_b[l]));
      } else {
        g.dw.emplace_back(owned[2 * l]);
        g.db.emplace_back(owned[2 * l + 1]);
      }
    }
  };
  make_sync();

  if (rank == 0) {
    std::size_t params = 0;
    for (std::size_t l = 0; l < m.n_layers(); ++l) params += m.w[l].data.size() + m.b[l].size();
    std::printf("data_parallel_mlp: %d ranks, per-rank batch %zu x %u micro-steps (global %zu), %zu parameters in %zu "
                "buckets, wire %s%s\n",
                n, o.batch, o.accum, o.batch * o.accum * static_cast<std::size_t>(n), params, sync_slot->plan().bucket_count(),
                o.wire.c_str(), o.zero_copy ? ", zero-copy" : "");
  }

  double baseline_ms = o.baseline_ms;
  if (o.measure_baseline) {  // every rank measures (keeps them in step); rank 0's number is printed
    baseline_ms = local_step_ms(o, ds, o.batch * o.accum * static_cast<std::size_t>(n), 3);
  }

  activations act = make_activations(m, o.batch);
  std::vector<int> labels(o.batch);
  std::vector<double> losses;
  double sync_s = 0;  // sum over steps of the shortest comm time of any rank (see the JSON's sync_time_ms)
  std::uint64_t nn = static_cast<std::uint64_t>(n);
  const std::uint64_t bb = o.batch, kk = o.accum;
  sync_slot->begin_step();  // a step then runs from one finish() to the next: forward, backward, update
  int recoveries = 0;
  for (int s = 0; s < o.steps;) {
    try {
      double local_loss = 0;
      gsync::grad::step_result res;
      for (std::uint32_t micro = 0; micro < o.accum; ++micro) {
        const std::uint64_t first = static_cast<std::uint64_t>(s) * nn * kk * bb + static_cast<std::uint64_t>(rank) * kk * bb + micro * bb;
        ds.batch<float>(first, act.a[0], labels);
        forward(m, act);
        if (first_rank == o.die_rank && s == o.die_step) std::raise(SIGKILL);  // a crash mid-step (tests)
        dense::matrix<float> dz(o.batch, o.classes);
        local_loss += dense::softmax_cross_entropy<float>(act.a.back(), labels, dz);
        if (o.loss_scale) {
          const float sc = sync_slot->loss_scale();
          for (float& v : dz.data) v *= sc;
        }
        backward(m, act, std::move(dz), g, micro > 0, [&](std::size_t i) { sync_slot->mark_ready(i); });
        res = sync_slot->finish();  // micro-steps 1..K-1 only close the step; the K-th synchronizes
      }
      if (res.apply) {
        if (o.clip > 0) gsync::grad::clip_grad_norm(sync_slot->tensors(), o.clip);
        for (std::size_t l = 0; l < m.n_layers(); ++l) {
          dense::sgd_update<float>(m.w[l].flat(), g.dw[l], o.lr);
          dense::sgd_update<float>(std::span<float>{m.b[l]}, g.db[l], o.lr);
        }
      }
      double loss = local_loss / static_cast<double>(o.accum);
      gsync::allreduce(comm, std::span<double>{&loss, 1}, gsync::op::avg{});
      // The rank that reached the step's collectives last waited least for the others: its engine
      // time is the synchronization's own duration, without the skew between ranks' backward passes.
      double comm_s = res.stats.comm_time.count();
      gsync::allreduce(comm, std::span<double>{&comm_s, 1}, gsync::op::min{});
      losses.resize(static_cast<std::size_t>(s));
      losses.push_back(loss);
      sync_s += comm_s;
      if (rank == 0 && o.print_every > 0 && (s % o.print_every == 0 || s + 1 == o.steps))
        std::printf("step %4d  loss %.6f  wire %8.1f KiB  comm %.3f ms  exposed %.3f ms  step %.3f ms  comm ratio %.3f%s\n", s, loss,
                    static_cast<double>(res.stats.bytes_on_wire) / 1024.0, 1e3 * res.stats.comm_time.count(),
                    1e3 * res.stats.exposed_time.count(), 1e3 * res.stats.step_time.count(), res.stats.comm_ratio(),
                    res.apply ? "" : "  (skipped: non-finite gradients)");
      ++s;
    } catch (const gsync::error& e) {
      const bool lost = e.kind() == gsync::errc::peer_lost || e.kind() == gsync::errc::aborted || e.kind() == gsync::errc::timeout;
      if (!o.elastic || !lost) throw;
      // A rank is gone: go on with the others. Some survivors may have finished this step's
      // collectives and others not, so they take the new rank 0's parameters and redo the
      // earliest step any of them was in, its samples spread over the ranks left.
      const auto t0 = std::chrono::steady_clock::now();
      sync_slot.reset();
      comm = comm.shrink();
      const double shrink_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      n = comm.size();
      rank = comm.rank();
      nn = static_cast<std::uint64_t>(n);
      for (std::size_t l = 0; l < m.n_layers(); ++l) {
        gsync::broadcast(comm, m.w[l].flat(), 0);
        gsync::broadcast(comm, std::span<float>{m.b[l]}, 0);
      }
      int redo = s;
      gsync::allreduce(comm, std::span<int>{&redo, 1}, gsync::op::min{});
      if (rank == 0)
        std::printf("elastic: %s; shrank to %d ranks in %.1f ms, redoing step %d\n", e.what(), n, shrink_ms, redo);
      s = redo;
      ++recoveries;
      make_sync();
      sync_slot->begin_step();
    }
  }
  const double final_loss = eval_loss(comm, m, ds, std::uint64_t{1} << 40, o.eval_samples);
  const auto& tot = sync_slot->totals();
  const double step_ms = 1e3 * tot.step_time().count() / o.steps;  // per optimizer step (K micro-steps)
  if (rank == 0) {
    std::printf("final: eval loss %.6f (%zu samples), bytes on wire %llu, comm ratio %.3f, step %.3f ms",
                final_loss, o.eval_samples, static_cast<unsigned long long>(tot.bytes_on_wire()), tot.comm_ratio(), step_ms);
    if (baseline_ms > 0) std::printf(", one-rank step %.3f ms, speedup %.2fx", baseline_ms, baseline_ms / step_ms);
    if (sync_slot->scaler()) std::printf(", loss scale %g, skipped %llu", static_cast<double>(sync_slot->loss_scale()),
                                   static_cast<unsigned long long>(sync_slot->scaler()->skipped_steps()));
    std::printf("\n");
    if (!o.json.empty()) {
      std::ofstream f(o.json);
      if (!f) throw gsync::error(gsync::errc::system, "cannot write " + o.json);
      char buf[64];
      auto fmt = [&](double v) {
        std::snprintf(buf, sizeof buf, "%.17g", v);
        return std::string(buf);
      };
      f << "{\"world_size\": " << n << ", \"steps\": " << o.steps << ", \"batch\": " << o.batch << ", \"accum\": " << o.accum
        << ", \"wire\": \"" << o.wire << "\", \"loss\": [";
      for (std::size_t i = 0; i < losses.size(); ++i) f << (i ? ", " : "") << fmt(losses[i]);
      f << "], \"final_loss\": " << fmt(final_loss) << ", \"bytes_on_wire\": " << tot.bytes_on_wire()
        << ", \"comm_ratio\": " << fmt(tot.comm_ratio()) << ", \"step_time_ms\": " << fmt(step_ms)
        << ", \"comm_time_ms\": " << fmt(1e3 * tot.comm_time().count() / o.steps)
        << ", \"exposed_ms\": " << fmt(1e3 * tot.exposed_time().count() / o.steps)
        << ", \"sync_time_ms\": " << fmt(1e3 * sync_s / o.steps)
        << ", \"skipped_steps\": " << (sync_slot->scaler() ? sync_slot->scaler()->skipped_steps() : 0) << "}\n";
    }
    if (!o.compare.empty()) {
      const std::vector<double> ref = read_losses(o.compare);
      if (ref.size() != losses.size()) {
        std::fprintf(stderr, "compare: %zu steps here, %zu in %s\n", losses.size(), ref.size(), o.compare.c_str());
        return 3;
      }
      double worst = 0;
      std::size_t at = 0;
      for (std::size_t i = 0; i < ref.size(); ++i) {
        const double rel = std::abs(losses[i] - ref[i]) / std::max(1.0, std::abs(ref[i]));
        if (!(rel <= worst)) worst = rel, at = i;
      }
      std::printf("compare with %s: largest relative loss difference %.3g at step %zu (tolerance %.3g)\n", o.compare.c_str(),
                  worst, at, o.tol);
      if (!(worst <= o.tol)) return 3;
    }
  }
  if (o.elastic && rank == 0) {
    bool finite = std::isfinite(final_loss);
    for (double l : losses) finite = finite && std::isfinite(l);
    std::printf("elastic: %d recoveries, %d ranks at the end, loss %.6f at step 0, %.6f at step %zu\n", recoveries, n,
                losses.front(), losses.back(), losses.size() - 1);
    if (!finite || !(losses.back() < losses.front())) {
      std::fprintf(stderr, "data_parallel_mlp: --elastic: the loss is not finite or did not decrease\n");
      return 4;
    }
  }
  return 0;
}

int run(const options& o) {
  if (o.compress != "none" && o.wire != "f32") usage_error("--compress " + o.compress + " needs --wire f32");
  auto comm = gsync::tcp_communicator::from_env();
  if (o.compress == "none") return train(o, comm, [] { return gsync::grad::allreduce_reducer{}; });
#ifdef DP_HAVE_COMPRESSION
  if (o.compress == "int8") {
    gsync::grad::compress::int8 p;
    p.error_feedback = o.error_feedback;
    return train(o, comm, [p] { return gsync::grad::compressed_reducer<gsync::grad::compress::int8>{p}; });
  }
  gsync::grad::compress::topk p;
  p.ratio = o.topk_ratio;
  p.error_feedback = o.error_feedback;
  return train(o, comm, [p] { return gsync::grad::compressed_reducer<gsync::grad::compress::topk>{p}; });
#else
  std::fprintf(stderr, "data_parallel_mlp: --compress %s is not available in this build (built without gsync/grad/compressed_reducer.hpp)\n",
               o.compress.c_str());
  return 2;
#endif
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  try {
    return run(o);
  } catch (const gsync::error& e) {
    std::fprintf(stderr, "data_parallel_mlp: %s\n", e.what());
    return e.kind() == gsync::errc::excluded ? gsync::excluded_exit_status : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "data_parallel_mlp: %s\n", e.what());
    return 1;
  }
}
