// Why the host data path stays on raw system calls while set-up runs on Asio (issue 52, item 4):
// a ping-pong over one loopback TCP connection, two threads, the same message sizes both ways,
// once with the data path's own calls (non-blocking send/recv, poll(2) when nothing is there) and
// once with Asio (async_write / async_read on an io_context run by the waiting thread).
//
//   asio_vs_raw [ITERATIONS [SPIN_US]]   one line per size: median round trip in us, both ways, ratio
//
// Built by benchmarks/CMakeLists.txt (gsync-asio-vs-raw); results in benchmarks/results/issue52/.

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read.hpp>
#include <asio/write.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

using clk = std::chrono::steady_clock;
using socket_t = asio::basic_stream_socket<asio::ip::tcp, asio::io_context::executor_type>;
using acceptor_t = asio::basic_socket_acceptor<asio::ip::tcp, asio::io_context::executor_type>;

void nodelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// How long a waiting side polls without blocking before it sleeps (the mesh's GSYNC_SPIN_US
// default); 0: sleep at once.
int spin_us = 0;

// The data path's way: non-blocking calls, then (after spin_us of retries) poll(2) when the socket
// has no room or no bytes.
void raw_send(int fd, const char* p, std::size_t n) {
  while (n) {
    const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w > 0) {
      p += w, n -= static_cast<std::size_t>(w);
      continue;
    }
    pollfd f{fd, POLLOUT, 0};
    ::poll(&f, 1, 1000);
  }
}
void raw_recv(int fd, char* p, std::size_t n) {
  while (n) {
    const ssize_t r = ::recv(fd, p, n, MSG_DONTWAIT);
    if (r > 0) {
      p += r, n -= static_cast<std::size_t>(r);
      continue;
    }
    if (r == 0) std::exit(2);
    pollfd f{fd, POLLIN, 0};
    const auto until = clk::now() + std::chrono::microseconds(spin_us);
    while (clk::now() < until && ::poll(&f, 1, 0) == 0) {
    }
    ::poll(&f, 1, 1000);
  }
}

// Both ends of one connection on `io` (the test's own).
struct pair_of {
  asio::io_context io_a, io_b;
  socket_t a{io_a}, b{io_b};
  pair_of() {
    acceptor_t acc(io_b, asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    a.connect(acc.local_endpoint());
    acc.accept(b);
    nodelay(a.native_handle());
    nodelay(b.native_handle());
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One end of the connection, the data path's way.
struct raw_end {
  int fd;
  void send(const char* d, std::size_t k) { raw_send(fd, d, k); }
  void recv(char* d, std::size_t k) { raw_recv(fd, d, k); }
};

// One end, Asio's way: the waiting thread runs its io_context (the same spin, then it blocks).
struct asio_end {
  socket_t& s;
  asio::io_context& io;
  void run() {
    io.restart();
    const auto until = clk::now() + std::chrono::microseconds(spin_us);
    while (!io.stopped() && clk::now() < until) io.poll();
    io.run();
  }
  void send(const char* d, std::size_t k) {
    asio::async_write(s, asio::buffer(d, k), [](const asio::error_code&, std::size_t) {});
    run();
  }
  void recv(char* d, std::size_t k) {
    asio::async_read(s, asio::buffer(d, k), [](const asio::error_code&, std::size_t) {});
    run();
  }
};

// Round trips of `n` bytes, `iters` times: the echo end `b` on a thread, the timed end `a` here.
template <class End>
double ping_pong(std::size_t n, int iters, End a, End b) {
  std::vector<char> x(n, 'x'), y(n);
  std::thread echo([&] {
    std::vector<char> buf(n);
    for (int i = 0; i < iters + 10; ++i) {
      b.recv(buf.data(), n);
      b.send(buf.data(), n);
    }
  });
  std::vector<double> us;
  for (int i = 0; i < iters + 10; ++i) {
    const auto t0 = clk::now();
    a.send(x.data(), n);
    a.recv(y.data(), n);
    if (i >= 10) us.push_back(std::chrono::duration<double, std::micro>(clk::now() - t0).count());
  }
  echo.join();
  return median(us);
}

}  // namespace

int main(int argc, char** argv) {
  const int iters = argc > 1 ? std::atoi(argv[1]) : 2000;
  spin_us = argc > 2 ? std::atoi(argv[2]) : 0;
  std::printf("spin before sleeping: %d us\n\n| bytes | raw calls, median round trip us | Asio async, us | Asio / raw |\n|---:|---:|---:|---:|\n");
  for (std::size_t n : {std::size_t{8}, std::size_t{2048}, std::size_t{65536}, std::size_t{1} << 20}) {
    const int it = n >= (std::size_t{1} << 20) ? std::max(50, iters / 20) : iters;
    pair_of p, q;
    const double raw_us = ping_pong(n, it, raw_end{p.a.native_handle()}, raw_end{p.b.native_handle()});
    const double asio_us = ping_pong(n, it, asio_end{q.a, q.io_a}, asio_end{q.b, q.io_b});
    std::printf("| %zu | %.1f | %.1f | %.2f |\n", n, raw_us, asio_us, asio_us / raw_us);
  }
}
