// Payload integrity (GSYNC_CHECKSUM, host_options::checksum): the CRC32C itself (detail/crc32c.hpp)
// against its standard check value and a bitwise reference, every path of it alike; collectives
// with checksums on over TCP and shared memory; a payload altered after the sender summed it is
// caught as errc::corrupted naming the link; ranks that disagree on the setting get a mismatch.
#include <doctest/doctest.h>

#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include <gsync/detail/crc32c.hpp>

#include "support/reference.hpp"
#include "support/world.hpp"

namespace {

// CRC32C one bit at a time: the definition, slow and obviously right.
std::uint32_t crc_bitwise(const unsigned char* p, std::size_t n) {
  std::uint32_t c = 0xffffffffu;
  for (std::size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
  }
  return ~c;
}

gsync::config with_checksum(bool on) {
  gsync::config c;
  c.transport.checksum = on;
  return c;
}

}  // namespace

TEST_CASE("crc32c: the standard check value, the bitwise definition at every length and offset, and chaining") {
  const char* nine = "123456789";
  CHECK(gsync::detail::crc32c(0, nine, 9) == 0xE3069283u);
  CHECK(gsync::detail::crc32c(0, nullptr, 0) == 0u);
  std::mt19937 rng(7);
  std::vector<unsigned char> buf(3 * 6144 + 200);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  // Lengths around the 8-byte words and the three-stream rounds (3 x 2 KiB), from odd offsets.
  for (std::size_t n : {0ul, 1ul, 7ul, 8ul, 9ul, 63ul, 6143ul, 6144ul, 6145ul, 12288ul + 13, 18432ul + 5})
    for (std::size_t off : {0ul, 1ul, 3ul}) {
      CAPTURE(n);
      CAPTURE(off);
      const std::uint32_t want = crc_bitwise(buf.data() + off, n);
      CHECK(gsync::detail::crc32c(0, buf.data() + off, n) == want);
      CHECK(gsync::detail::crc32c_impl::software(~0u, buf.data() + off, n) == ~want);
      const std::size_t cut = n / 3;  // crc(a b) from crc(a), then b
      CHECK(gsync::detail::crc32c(gsync::detail::crc32c(0, buf.data() + off, cut), buf.data() + off + cut, n - cut) == want);
    }
  // A flipped bit anywhere changes it.
  const std::uint32_t all = gsync::detail::crc32c(0, buf.data(), buf.size());
  for (std::size_t at : {0ul, 4097ul, 12000ul, buf.size() - 1}) {
    buf[at] ^= 0x10;
    CHECK(gsync::detail::crc32c(0, buf.data(), buf.size()) != all);
    buf[at] ^= 0x10;
  }
}

TEST_CASE("checksum: collectives over TCP and shared memory are right with GSYNC_CHECKSUM on") {
  for (bool shm : {false, true}) {
    CAPTURE(shm);
    auto body = [&](gsync::tcp_communicator& comm, gsync_test::world_sync&) {
      const int n = comm.size(), r = comm.rank();
      for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{4099}, std::size_t{1} << 20}) {
        std::vector<float> v(count);
        for (std::size_t i = 0; i < count; ++i) v[i] = gsync_test::input<float, gsync::op::sum>(r, i);
        gsync::allreduce(comm, std::span<float>{v});
        int wrong = 0;
        for (std::size_t i = 0; i < count; ++i) wrong += !gsync_test::check_element<float, gsync::op::sum>(v[i], n, i);
        CHECK(wrong == 0);
      }
      std::vector<double> b(10007, r == 1 ? 2.5 : 0.0);
      gsync::broadcast(comm, std::span<double>{b}, 1);
      CHECK(b[10006] == 2.5);
      std::vector<std::int32_t> mine(3000, r), all(3000 * static_cast<std::size_t>(n));
      gsync::allgather(comm, std::span<const std::int32_t>{mine}, std::span<std::int32_t>{all});
      CHECK(all.back() == n - 1);
    };
    if (shm) gsync_test::run_shm(3, body, with_checksum(true));
    else gsync_test::run_tcp(4, body, with_checksum(true));
  }
}

// Rank 0 posts a message bigger than what its link takes at once, then alters its last byte
// while the link still sends from it (the payload goes from the caller's memory): the bytes on
// the wire differ from those the checksum was taken over, as if the link had altered them.
TEST_CASE("checksum: a payload altered after it was summed fails with errc::corrupted naming the link, on both ranks") {
  for (bool shm : {false, true}) {
    CAPTURE(shm);
    std::string err[2];
    gsync::errc kind[2] = {};
    unsigned char last_seen = 0;
    auto body = [&](gsync::tcp_communicator& comm, gsync_test::world_sync& sync) {
      const std::size_t n = std::size_t{64} << 20;  // far more than a socket buffer or a ring holds
      std::vector<unsigned char> buf(n, 7);
      gsync::message_id id{};
      id.tag = 0x80000000u + 5;
      id.seq = 1;
      const auto dl = std::chrono::steady_clock::now() + std::chrono::seconds(60);
      auto& t = comm.transport();
      try {
        if (comm.rank() == 0) {
          t.post_send(1, id, reinterpret_cast<const std::byte*>(buf.data()), n);
          buf[n - 1] = 9;  // the link has not sent it yet: rank 1 reads nothing before the barrier
          sync.bar.arrive_and_wait();
          t.flush_sends(dl);
          t.recv(1, id, reinterpret_cast<std::byte*>(buf.data()), 1, dl);  // rank 1's verdict reaches this rank
        } else {
          sync.bar.arrive_and_wait();
          t.recv(0, id, reinterpret_cast<std::byte*>(buf.data()), n, dl);
          last_seen = buf[n - 1];
          t.post_send(0, id, reinterpret_cast<const std::byte*>(buf.data()), 1);
          t.flush_sends(dl);
        }
      } catch (const gsync::error& e) {
        err[comm.rank()] = e.what();
        kind[comm.rank()] = e.kind();
      }
    };
    SUBCASE("checksum on") {
      if (shm) gsync_test::run_shm(2, body, with_checksum(true));
      else gsync_test::run_tcp(2, body, with_checksum(true));
      CHECK(kind[1] == gsync::errc::corrupted);
      CHECK(err[1].find("failed its checksum") != std::string::npos);
      CHECK(err[1].find(shm ? "shm link" : "tcp link") != std::string::npos);
      CHECK(err[1].find("from rank 0") != std::string::npos);
      CHECK(kind[0] == gsync::errc::corrupted);  // rank 1's failure notice tells the sender why
    }
    SUBCASE("checksum off: the alteration goes through unnoticed (what the checksum is for)") {
      if (shm) gsync_test::run_shm(2, body, with_checksum(false));
      else gsync_test::run_tcp(2, body, with_checksum(false));
      CHECK(err[0].empty());
      CHECK(err[1].empty());
      CHECK(last_seen == 9);
    }
  }
}

TEST_CASE("checksum: ranks that disagree on GSYNC_CHECKSUM fail with a mismatch that says so") {
  const auto port = gsync_test::free_port();
  std::string err[2];
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r)
    th.emplace_back([&, r] {
      try {
        auto comm = gsync::tcp_communicator::join(gsync_test::test_launch_info(r, 2, port, "host-" + std::to_string(r)), with_checksum(r == 0));
        std::vector<float> v(1000, 1.0f);
        gsync::allreduce(comm, std::span<float>{v});
        gsync::allreduce(comm, std::span<float>{v});
      } catch (const gsync::error& e) {
        if (e.kind() == gsync::errc::mismatch || e.kind() == gsync::errc::peer_lost) err[r] = e.what();
        else err[r] = std::string("unexpected kind: ") + e.what();
      }
    });
  for (auto& t : th) t.join();
  const std::string both = err[0] + " | " + err[1];
  CHECK_MESSAGE(both.find("GSYNC_CHECKSUM") != std::string::npos, both);
  CHECK(both.find("unexpected kind") == std::string::npos);
}
