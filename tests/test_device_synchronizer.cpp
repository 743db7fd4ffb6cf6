// The device gradient synchronizer (grad/device_synchronizer.hpp) against the host one, bit for
// bit, on the host stand-in for CUDA (support/fake_cuda.hpp: device memory is host memory, each
// stream a thread, the gradient passes the host's). Every step a "backward kernel" on the compute
// stream writes each gradient just before it is marked ready, so a bucket launched before its
// packing has run, or an unpack that does not wait for the communication stream, shows stale data.
// Covered: float32 and 16-bit gradients, wire types, zero-copy views, accumulation, loss scaling
// with an overflow on one rank, clipping, world sizes 1-4.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>
#include <gsync/grad.hpp>
#include <gsync/grad/compressed_reducer.hpp>
#include <gsync/grad/device_synchronizer.hpp>

#include "support/fake_cuda.hpp"
#include "support/reference.hpp"
#include "support/world.hpp"

namespace {

namespace gg = gsync::grad;

struct tensor_def {
  std::size_t count;
  gsync::dtype type;
  bool view;
};

/// Gradient element i of tensor k on rank r at step s (an Inf on rank 1 in tensor 0 at step 1 when `inf`).
float grad_value(int r, int s, std::size_t k, std::size_t i, bool inf) {
  if (inf && r == 1 && s == 1 && k == 0 && i == 3) return std::numeric_limits<float>::infinity();
  const std::uint32_t h = gsync_test::mix(i + k * 1000003, r, static_cast<std::uint32_t>(s) * 77 + 5);
  return static_cast<float>(static_cast<int>(h % 40001) - 20000) / 997.0f;
}

template <class F>
void each_type(gsync::dtype t, F&& f) {
  gg::detail::visit_grad_type(t, std::forward<F>(f));
}

/// Raw bytes of tensor k's element storage (host or fake-device memory).
struct storage {
  std::vector<std::byte> bytes;
};

void fill(storage& st, const tensor_def& d, int r, int s, std::size_t k, bool inf, bool accumulate) {
  each_type(d.type, [&](auto v) {
    using T = decltype(v);
    T* p = reinterpret_cast<T*>(st.bytes.data());
    for (std::size_t i = 0; i < d.count; ++i) {
      const float x = grad_value(r, s, k, i, inf);
      p[i] = gg::detail::from_f<T>(accumulate ? gg::detail::to_f(p[i]) + x : x);
    }
  });
}

struct case_def {
  std::vector<tensor_def> tensors;
  gg::synchronizer_options opt;
  bool inf = false;
  double clip = 0;
  int steps = 3;
};

/// The reducers of both synchronizers: plain allreduce (P = void) or compression policy P.
template <class P>
struct reducers {
  template <class X>
  using host = gg::synchronizer<X, gg::compressed_reducer<P>>;
  template <class X>
  using device = gg::device_synchronizer<X, gg::device_compressed_reducer<P>>;
  P policy;
  template <class X>
  std::unique_ptr<host<X>> make_host(gsync::communicator<X>& comm, const gg::synchronizer_options& o) const {
    return std::make_unique<host<X>>(comm, o, gg::compressed_reducer<P>{policy});
  }
  template <class X>
  std::unique_ptr<device<X>> make_device(gsync::communicator<X>& comm, const gg::synchronizer_options& o, gsync::cuda_stream s) const {
    return std::make_unique<device<X>>(comm, o, gg::device_compressed_reducer<P>{policy}, s);
  }
};
template <>
struct reducers<void> {
  template <class X>
  std::unique_ptr<gg::synchronizer<X>> make_host(gsync::communicator<X>& comm, const gg::synchronizer_options& o) const {
    return std::make_unique<gg::synchronizer<X>>(comm, o);
  }
  template <class X>
  std::unique_ptr<gg::device_synchronizer<X>> make_device(gsync::communicator<X>& comm, const gg::synchronizer_options& o,
                                                          gsync::cuda_stream s) const {
    return std::make_unique<gg::device_synchronizer<X>>(comm, o, s);
  }
};

template <class P = void>
void run_case(gsync_test::fake_cuda& api, int n, const case_def& c, const reducers<P>& red = {}) {
  gsync_test::run_inproc(n, [&](auto& comm, auto&) {
    const int r = comm.rank();
    const std::size_t T = c.tensors.size();
    // host synchronizer
    auto hs_ptr = red.make_host(comm, c.opt);
    auto& hs = *hs_ptr;
    std::vector<storage> host(T);
    std::vector<std::size_t> hidx(T);
    for (std::size_t k = 0; k < T; ++k) {
      const auto& d = c.tensors[k];
      each_type(d.type, [&](auto v) {
        using E = decltype(v);
        if (d.view) hidx[k] = hs.template add_view<E>(d.count, "t" + std::to_string(k));
        else {
          host[k].bytes.resize(d.count * sizeof(E) + 1);
          hidx[k] = hs.add(std::span<E>(reinterpret_cast<E*>(host[k].bytes.data()), d.count), "t" + std::to_string(k));
        }
      });
    }
    // device synchronizer
    struct stream_owner {  // outlives the synchronizer, which uses the stream until its destructor
      gsync_test::fake_cuda& api;
      gsync::cuda_stream s;
      ~stream_owner() { api.destroy_stream(s); }
    } owner{api, api.create_stream()};
    gsync::cuda_stream compute = owner.s;
    auto ds_ptr = red.make_device(comm, c.opt, compute);
    auto& ds = *ds_ptr;
    std::vector<storage> dev(T);
    std::vector<std::size_t> didx(T);
    for (std::size_t k = 0; k < T; ++k) {
      const auto& d = c.tensors[k];
      each_type(d.type, [&](auto v) {
        using E = decltype(v);
        if (d.view) didx[k] = ds.template add_view<E>(d.count, "t" + std::to_string(k));
        else {
          dev[k].bytes.resize(d.count * sizeof(E) + 1);
          didx[k] = ds.add(gsync::device_span<E>(reinterpret_cast<E*>(dev[k].bytes.data()), d.count), "t" + std::to_string(k));
        }
      });
    }
    hs.build();
    ds.build();
    // where each tensor's elements live
    auto host_ptr = [&](std::size_t k) -> std::byte* {
      if (!c.tensors[k].view) return host[k].bytes.data();
      std::byte* p = nullptr;
      each_type(c.tensors[k].type, [&](auto v) { p = reinterpret_cast<std::byte*>(hs.template view<decltype(v)>(hidx[k]).data()); });
      return p;
    };
    auto dev_ptr = [&](std::size_t k) -> std::byte* {
      if (!c.tensors[k].view) return dev[k].bytes.data();
      std::byte* p = nullptr;
      each_type(c.tensors[k].type, [&](auto v) { p = reinterpret_cast<std::byte*>(ds.template view<decltype(v)>(didx[k]).data()); });
      return p;
    };
    std::size_t differ = 0, verdicts = 0;
    for (int s = 0; s < c.steps; ++s) {
      const bool accumulate = (s % c.opt.accumulation_steps) != 0;
      for (std::size_t k = T; k-- > 0;) {
        storage hv{};
        // host backward: write, then mark
        {
          const auto& d = c.tensors[k];
          each_type(d.type, [&](auto v) {
            using E = decltype(v);
            storage tmp;
            if (d.count) tmp.bytes.assign(host_ptr(k), host_ptr(k) + d.count * sizeof(E));
            fill(tmp, d, r, s, k, c.inf, accumulate);
            if (d.count) std::memcpy(host_ptr(k), tmp.bytes.data(), d.count * sizeof(E));
          });
        }
        hs.mark_ready(hidx[k]);
        // device backward: a kernel on the compute stream writes, then mark
        std::byte* p = dev_ptr(k);
        const tensor_def d = c.tensors[k];
        api.launch(compute, [=] {
          each_type(d.type, [&](auto v) {
            using E = decltype(v);
            storage tmp;
            if (d.count) tmp.bytes.assign(p, p + d.count * sizeof(E));
            fill(tmp, d, r, s, k, c.inf, accumulate);
            if (d.count) std::memcpy(p, tmp.bytes.data(), d.count * sizeof(E));
          });
        });
        ds.mark_ready(didx[k]);
      }
      const gg::step_result hr = hs.finish();
      const gg::step_result dr = ds.finish();
      double hn = 0, dn = 0;
      if (c.clip > 0 && hr.apply) {
        hn = gg::clip_grad_norm(hs.tensors(), c.clip);
        dn = ds.clip_grad_norm(c.clip);
      }
      api.synchronize(compute);
      verdicts += hr.synced != dr.synced || hr.apply != dr.apply || hr.nonfinite.size() != dr.nonfinite.size() || hn != dn;
      if constexpr (!std::is_void_v<P>) verdicts += hr.stats.bytes_on_wire != dr.stats.bytes_on_wire;
      for (std::size_t j = 0; j < hr.nonfinite.size() && j < dr.nonfinite.size(); ++j)
        verdicts += hr.nonfinite[j].tensor != dr.nonfinite[j].tensor || hr.nonfinite[j].count != dr.nonfinite[j].count ||
                    hr.nonfinite[j].first_index != dr.nonfinite[j].first_index;
      if (hr.synced)
        for (std::size_t k = 0; k < T; ++k)
          differ += c.tensors[k].count && std::memcmp(host_ptr(k), dev_ptr(k), c.tensors[k].count * gsync::size_of(c.tensors[k].type)) != 0;
    }
    CHECK(differ == 0);
    CHECK(verdicts == 0);
    CHECK(ds.loss_scale() == hs.loss_scale());
    api.synchronize(compute);
  });
}

}  // namespace

TEST_CASE("device synchronizer: the host synchronizer's bits, float32 gradients, native and 16-bit wires, world sizes 1-4") {
  gsync_test::fake_cuda_scope fk;
  for (int n = 1; n <= 4; ++n)
    for (auto wire : {gg::wire_dtype::native, gg::wire_dtype::bfloat16, gg::wire_dtype::float16}) {
      CAPTURE(n);
      CAPTURE(static_cast<int>(wire));
      case_def c;
      c.tensors = {{1000, gsync::dtype::float32, false}, {17, gsync::dtype::float32, false}, {0, gsync::dtype::float32, false},
                   {30011, gsync::dtype::float32, false}, {5, gsync::dtype::float32, false}};
      c.opt.bucket_bytes = 64 << 10;
      c.opt.first_bucket_bytes = 4 << 10;
      c.opt.wire = wire;
      run_case(fk.api, n, c);
    }
}

TEST_CASE("device synchronizer: 16-bit gradients, zero-copy views, accumulation, clipping") {
  gsync_test::fake_cuda_scope fk;
  for (int n : {2, 3}) {
    CAPTURE(n);
    case_def c;
    c.tensors = {{2000, gsync::dtype::bfloat16, false}, {333, gsync::dtype::float16, true}, {4097, gsync::dtype::float32, true},
                 {65, gsync::dtype::float32, false}};
    c.opt.bucket_bytes = 16 << 10;
    c.opt.accumulation_steps = 2;
    c.clip = 0.5;
    c.steps = 4;
    run_case(fk.api, n, c);
  }
}

TEST_CASE("device synchronizer: loss scaling skips the step with an overflow on one rank, on every rank alike") {
  gsync_test::fake_cuda_scope fk;
  case_def c;
  c.tensors = {{100, gsync::dtype::float32, false}, {900, gsync::dtype::float32, false}};
  c.opt.on_nonfinite = gg::nonfinite_action::report;
  c.opt.loss_scaling = gg::loss_scaler_options{};
  c.opt.wire = gg::wire_dtype::bfloat16;
  c.inf = true;
  run_case(fk.api, 3, c);
}

TEST_CASE("device synchronizer: refused clearly without gradient kernels") {
  gsync_test::fake_cuda_scope fk;
  gsync::cuda::grad_kernels* prev = gsync::cuda::set_grad_kernels(nullptr);
  auto comms = gsync::make_inproc_world(1);
  try {
    gg::device_synchronizer<gsync::transport::inproc> ds(comms[0]);
    FAIL_CHECK("no error without kernels");
  } catch (const gsync::error& e) {
    CHECK(e.code() == gsync::errc::cuda);
    CHECK(std::string(e.what()).find("grad/device_kernels.cuh") != std::string::npos);
  }
  gsync::cuda::set_grad_kernels(prev);
}

TEST_CASE("device synchronizer: compressed buckets (int8 encoded on the device, top-k and bf16 through host memory) give the host's bits, step after step") {
  gsync_test::fake_cuda_scope fk;
  case_def c;
  c.tensors = {{1000, gsync::dtype::float32, false}, {17, gsync::dtype::float32, true}, {0, gsync::dtype::float32, false},
               {30011, gsync::dtype::float32, false}, {5, gsync::dtype::float32, false}};
  c.opt.bucket_bytes = 64 << 10;
  c.opt.first_bucket_bytes = 4 << 10;
  c.steps = 4;  // the residuals carry over
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    gg::compress::int8 nearest;
    nearest.block = 100;  // blocks straddle chunk and tensor boundaries
    run_case(fk.api, n, c, reducers<gg::compress::int8>{nearest});
    gg::compress::int8 stochastic;
    stochastic.round = gg::rounding::stochastic;
    stochastic.seed = 7;
    run_case(fk.api, n, c, reducers<gg::compress::int8>{stochastic});
    gg::compress::int8 plain;
    plain.error_feedback = false;
    run_case(fk.api, n, c, reducers<gg::compress::int8>{plain});
    run_case(fk.api, n, c, reducers<gg::compress::topk>{gg::compress::topk{0.05, true}});
    run_case(fk.api, n, c, reducers<gg::compress::bf16>{gg::compress::bf16{true}});
  }
  // with accumulation, clipping and a sum instead of the average
  c.opt.accumulation_steps = 2;
  c.opt.average = false;
  c.clip = 1.0;
  run_case(fk.api, 3, c, reducers<gg::compress::int8>{});
}

TEST_CASE("device synchronizer: a compressed reducer refuses 16-bit buckets") {
  gsync_test::fake_cuda_scope fk;
  gsync_test::run_inproc(2, [&](auto& comm, auto&) {
    using X = typename std::remove_reference_t<decltype(comm)>::transport_type;
    gg::synchronizer_options o;
    o.wire = gg::wire_dtype::bfloat16;
    std::vector<float> g(64, 1.0f);
    gg::device_synchronizer<X, gg::device_compressed_reducer<gg::compress::int8>> ds(comm, o, gg::device_compressed_reducer<gg::compress::int8>{},
                                                                                     nullptr);
    ds.add(gsync::device_span<float>{g.data(), g.size()}, "g");
    try {
      ds.finish();
      FAIL_CHECK("a bfloat16 bucket was accepted");
    } catch (const gsync::error& e) {
      CHECK(e.code() == gsync::errc::invalid_argument);
      CHECK(std::string(e.what()).find("float32") != std::string::npos);
    }
  });
}
