#pragma once
// Two verbs links of this process connected to each other on one device (the stand-in's, or the
// first real one), for tests of the link's own calls without a mesh; and reading a frame from one
// while pumping the other.

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "support/verbs_world.hpp"

namespace gsync_test {

struct verbs_pair {
  std::shared_ptr<const gsync::verbs::device> dev;
  gsync::transport::verbs_link l0, l1;
  /// Rings of `ring` bytes; tries of 4.096 us x 2^timeout (one retry at the default, seven above).
  explicit verbs_pair(std::size_t ring, int timeout = 10) {
    ibv_emu_fabric();
    std::string why;
    const auto* lib = gsync::verbs::library::load(ibv_emu_path(), why);
    REQUIRE_MESSAGE(lib != nullptr, why);
    const auto d = gsync::verbs::discover(*lib, gsync::verbs::hca_filter{}, -1);
    REQUIRE_MESSAGE(!d.ports.empty(), d.why_none);
    dev = std::make_shared<const gsync::verbs::device>(*lib, d.ports.front());
    gsync::verbs::qp_settings qs;
    qs.timeout = timeout;
    qs.retry_cnt = timeout > 10 ? 7 : 1;
    l0.open(dev, qs, ring);
    l1.open(dev, qs, ring);
    l0.connect(l1.address(11), 22, 1);
    l1.connect(l0.address(22), 11, 0);
  }
};

inline gsync::transport::frame_header header_for(std::uint64_t seq, std::size_t n) {
  gsync::transport::frame_header h{};
  h.seq = seq;
  h.bytes = n;
  return h;
}

/// Reads one frame of `n` payload bytes from rx into the result (its header into h), pumping tx
/// while it waits (bounded; a lost link fails the test); adds the frames tx completed meanwhile to
/// `*completed` when given.
inline std::vector<std::byte> read_frame(gsync::transport::verbs_link& rx, gsync::transport::verbs_link& tx,
                                         gsync::transport::frame_header& h, std::size_t n, std::size_t* completed = nullptr) {
  std::vector<std::byte> dst(n);
  std::size_t got = 0, done = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  const auto pump = [&] {
    const gsync::link_io t = tx.pump(done);
    REQUIRE_MESSAGE(t.err == 0, (t.why ? t.why : "?"));
  };
  for (;;) {
    REQUIRE(std::chrono::steady_clock::now() < until);
    const gsync::link_io io = rx.try_header(h, dst.data(), n);
    REQUIRE(io.err == 0);
    if (io.done) {
      got = io.bytes;  // payload bytes that came with the header
      break;
    }
    pump();
  }
  while (got < n) {
    REQUIRE(std::chrono::steady_clock::now() < until);
    const gsync::link_io io = rx.try_payload(dst.data() + got, n - got, 1, nullptr);
    REQUIRE_MESSAGE(io.err == 0, (io.why ? io.why : "?"));
    got += io.bytes;
    if (io.bytes == 0) pump();
  }
  rx.end_read();
  if (completed) *completed += done;
  return dst;
}

}  // namespace gsync_test
