// Device collectives over CUDA IPC on a real GPU, as processes launched by gsyncrun (every rank uses
// GPU local_rank % devices, so 2 or 4 processes on a one-GPU machine share it). Checks that the
// communicator formed an IPC group (not host staging), then allreduce in place and out of place
// (float32 sum, bfloat16 avg, int32 max, float64 prod), reduce_scatter, allgather, broadcast,
// reduce and alltoall against the double-precision reference, at sizes of one element, one chunk and several
// chunks of the arena slot; and that every rank holds the same bits. The schedule is chosen by
// GSYNC_ALGO (the ctest entries run one_shot and two_shot), and forced by the template argument
// (allreduce<algo::one_shot>, allreduce<algo::two_shot>) in a second pass. Exit 77 without a device.

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <gsync/gsync.hpp>

#include "support/reference.hpp"

namespace {

void ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw gsync::error(gsync::errc::cuda, std::string(what) + ": " + cudaGetErrorString(e));
}

template <class T>
struct dev_buf {
  T* p = nullptr;
  std::size_t n = 0;
  explicit dev_buf(std::size_t count) : n(count) { ok(cudaMalloc(reinterpret_cast<void**>(&p), std::max<std::size_t>(1, n) * sizeof(T)), "cudaMalloc"); }
  ~dev_buf() { cudaFree(p); }
  void put(const std::vector<T>& h) { ok(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy H2D"); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    ok(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
    return h;
  }
};

template <class T, class Op, class Algo = gsync::algo::automatic>
int check_allreduce(gsync::tcp_communicator& comm, cudaStream_t s, std::size_t count, bool in_place) {
  const int n = comm.size(), r = comm.rank();
  std::vector<T> in(count);
  for (std::size_t i = 0; i < count; ++i) in[i] = gsync_test::input<T, Op>(r, i);
  dev_buf<T> a(count), b(count);
  a.put(in);
  if (in_place) gsync::allreduce<Algo>(comm, gsync::device_span<T>{a.p, count}, Op{}, s);
  else gsync::allreduce<Algo>(comm, gsync::device_span<const T>{a.p, count}, gsync::device_span<T>{b.p, count}, Op{}, s);
  ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  const std::vector<T> out = in_place ? a.get() : b.get();
  int wrong = 0;
  for (std::size_t i = 0; i < count; ++i) wrong += !gsync_test::check_element<T, Op>(out[i], n, i);
  // the same bits on every rank: rank 0's result, broadcast, compared
  std::vector<T> first = out;
  gsync::broadcast(comm, std::span<T>(first), 0);
  wrong += std::memcmp(first.data(), out.data(), count * sizeof(T)) != 0;
  if (wrong)
    std::fprintf(stderr, "rank %d: allreduce<%s> %s %s count %zu%s: %d wrong\n", r, std::string(Algo::name).c_str(),
                 std::string(gsync::name(gsync::dtype_of<T>)).c_str(), std::string(Op::name).c_str(), count, in_place ? " in place" : "", wrong);
  return wrong;
}

int check_others(gsync::tcp_communicator& comm, cudaStream_t s, std::size_t count) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t N = static_cast<std::size_t>(n);
  std::vector<float> blocks(N * count), in(count), data(count);
  for (std::size_t i = 0; i < N * count; ++i) blocks[i] = gsync_test::input<float, gsync::op::sum>(r, i);
  for (std::size_t i = 0; i < count; ++i) {
    in[i] = gsync_test::input<float, gsync::op::sum>(r, i);
    data[i] = r == n - 1 ? static_cast<float>(i % 4096) : 0.0f;
  }
  dev_buf<float> d_blocks(N * count), d_mine(count), d_gathered(N * count), d_data(count), d_in(count), d_red(count);
  d_blocks.put(blocks);
  d_data.put(data);
  d_in.put(in);
  gsync::reduce_scatter(comm, gsync::device_span<const float>{d_blocks.p, N * count}, gsync::device_span<float>{d_mine.p, count},
                        gsync::op::sum{}, s);
  gsync::allgather(comm, gsync::device_span<const float>{d_mine.p, count}, gsync::device_span<float>{d_gathered.p, N * count}, s);
  gsync::broadcast(comm, gsync::device_span<float>{d_data.p, count}, n - 1, s);
  gsync::reduce(comm, gsync::device_span<const float>{d_in.p, count}, gsync::device_span<float>{d_red.p, count}, gsync::op::sum{}, 0, s);
  std::vector<std::int32_t> sent(N * count);
  for (std::size_t p = 0; p < N; ++p)
    for (std::size_t i = 0; i < count; ++i) sent[p * count + i] = static_cast<std::int32_t>((r * 131 + static_cast<int>(p)) * 7 + static_cast<int>(i % 1000));
  dev_buf<std::int32_t> d_sent(N * count), d_got(N * count);
  d_sent.put(sent);
  gsync::alltoall(comm, gsync::device_span<const std::int32_t>{d_sent.p, N * count}, gsync::device_span<std::int32_t>{d_got.p, N * count}, s);
  ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  int wrong = 0;
  const auto got = d_got.get();
  for (std::size_t p = 0; p < N; ++p)
    for (std::size_t i = 0; i < count; ++i)
      wrong += got[p * count + i] != static_cast<std::int32_t>((static_cast<int>(p) * 131 + r) * 7 + static_cast<int>(i % 1000));
  const auto mine = d_mine.get(), gathered = d_gathered.get(), bc = d_data.get(), red = d_red.get();
  for (std::size_t i = 0; i < count; ++i)
    wrong += !gsync_test::check_element<float, gsync::op::sum>(mine[i], n, static_cast<std::size_t>(r) * count + i);
  for (std::size_t i = 0; i < N * count; ++i) wrong += !gsync_test::check_element<float, gsync::op::sum>(gathered[i], n, i);
  for (std::size_t i = 0; i < count; ++i) wrong += bc[i] != static_cast<float>(i % 4096);
  if (r == 0)
    for (std::size_t i = 0; i < count; ++i) wrong += !gsync_test::check_element<float, gsync::op::sum>(red[i], n, i);
  if (wrong) std::fprintf(stderr, "rank %d: reduce_scatter/allgather/broadcast/reduce/alltoall count %zu: %d wrong\n", r, count, wrong);
  return wrong;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::puts("skipped: no CUDA device");
    return 77;
  }
  int rank = -1;
  try {
    auto comm = gsync::tcp_communicator::from_env();
    rank = comm.rank();
    ok(cudaSetDevice(comm.local_rank() % devices), "cudaSetDevice");
    cudaStream_t s = nullptr;
    ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
    int wrong = check_allreduce<float, gsync::op::sum>(comm, s, 1, true);
    auto st = std::static_pointer_cast<gsync::detail::ipc_state>(comm.ipc_state_slot());
    if (!st || !st->group) {
      std::fprintf(stderr, "rank %d: no CUDA IPC group formed: %s\n", rank, st ? st->refusal.c_str() : "no set-up");
      return 1;
    }
    const std::size_t slot_floats = comm.settings().cuda_ipc.slot_bytes / 4;
    for (std::size_t count : {std::size_t{1}, std::size_t{1000}, slot_floats + 3, 3 * slot_floats - 7}) {
      wrong += check_allreduce<float, gsync::op::sum>(comm, s, count, false);
      wrong += check_allreduce<gsync::bfloat16, gsync::op::avg>(comm, s, count, true);
      wrong += check_allreduce<std::int32_t, gsync::op::max>(comm, s, count, false);
      wrong += check_allreduce<double, gsync::op::prod>(comm, s, count, true);
      wrong += check_others(comm, s, count);
      // the registry's device algorithms, forced as a user forces them (pinned API)
      wrong += check_allreduce<float, gsync::op::sum, gsync::algo::one_shot>(comm, s, count, true);
      wrong += check_allreduce<float, gsync::op::avg, gsync::algo::two_shot>(comm, s, count, false);
    }
    ok(cudaStreamDestroy(s), "cudaStreamDestroy");
    std::printf("rank %d/%d: %s\n", comm.rank(), comm.size(), wrong ? "FAILED" : "all results correct over CUDA IPC");
    return wrong ? 1 : 0;
  } catch (const gsync::error& e) {
    std::fprintf(stderr, "rank %d: gsync::error: %s\n", rank, e.what());
    return 1;
  }
}
