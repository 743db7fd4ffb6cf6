// libFuzzer target: everything the host mesh reads from other processes outside the data frames
// (transport/mesh/records.hpp, bootstrap/rank_record.hpp, transport/mesh/heartbeat.hpp). The first
// byte picks the parser, the rest is its input:
//   0  a rank's set-up record (rank_record::parse): parses, or throws gsync::error(mismatch) only;
//      what parses encodes and parses back to itself;
//   1  a failure record: any bytes give a kind this build knows and the words after the number;
//   2  a stall record: what parses is re-encoded and parses back to the same fingerprint;
//   3  a data-connection hello: hello_ok accepts exactly a higher rank of the same job;
//   4  a failure notice's header: kind known, first rank in range or -1, text bounded;
//   5  a heartbeat byte stream: messages come out whole, text bounded, nothing read past the input.
#include <cstdint>
#include <cstring>
#include <string>

#include "gsync/bootstrap/rank_record.hpp"
#include "gsync/transport/mesh/heartbeat.hpp"
#include "gsync/transport/mesh/records.hpp"

namespace {
bool known(gsync::errc k) { return k >= gsync::errc::timeout && static_cast<int>(k) <= gsync::errc_last; }
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gsync::transport;
  if (size < 1) return 0;
  const std::string in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 6) {
    case 0: {
      try {
        const auto r = gsync::bootstrap::rank_record::parse(in, 3);
        const auto again = gsync::bootstrap::rank_record::parse(r.encode(), 3);
        if (again.address != r.address || again.port != r.port || again.recovery_port != r.recovery_port ||
            again.heartbeat_port != r.heartbeat_port || again.kernel != r.kernel || again.host != r.host || r.port == 0)
          __builtin_trap();
      } catch (const gsync::error& e) {
        if (e.kind() != gsync::errc::mismatch) __builtin_trap();
      }
      break;
    }
    case 1: {
      if (const auto r = records::rank_lost(in); r && (*r < 0 || !in.starts_with("rank ") || in.find(" is lost") == std::string::npos)) __builtin_trap();
      const auto f = records::parse_failure_record(in);
      if (f && (!known(f->kind) || f->why.size() >= in.size())) __builtin_trap();
      if (f) {  // what a rank writes reads back the same
        const auto g = records::parse_failure_record(records::failure_record(f->kind, f->why));
        if (!g || g->kind != f->kind || g->why != f->why) __builtin_trap();
      }
      break;
    }
    case 2: {
      std::uint64_t seq = 0;
      std::uint32_t tag = 0;
      gsync::fingerprint fp;
      if (records::parse_stall_record(in, seq, tag, fp)) {
        std::uint64_t seq2 = 0;
        std::uint32_t tag2 = 0;
        gsync::fingerprint fp2;
        if (!records::parse_stall_record(records::stall_record(gsync::message_id{tag, seq, fp}), seq2, tag2, fp2) || seq2 != seq || tag2 != tag ||
            std::memcmp(&fp2, &fp, sizeof fp) != 0)
          __builtin_trap();
        (void)describe_message(tag, seq, fp);  // what a stall report prints of it
      }
      break;
    }
    case 3: {
      if (in.size() < sizeof(records::hello) + 12) break;
      records::hello h;
      std::memcpy(&h, in.data(), sizeof h);
      std::int32_t self, n;
      std::uint32_t lo;
      std::memcpy(&self, in.data() + sizeof h, 4);
      std::memcpy(&n, in.data() + sizeof h + 4, 4);
      std::memcpy(&lo, in.data() + sizeof h + 8, 4);
      const std::uint64_t nonce = h.nonce ^ (lo & 1);  // half the time the job's own nonce
      const bool ok = records::hello_ok(h, self, n, nonce);
      const bool want = h.magic == records::hello{}.magic && h.version == 1 && h.size == n && h.nonce == nonce && h.rank >= 0 && h.rank > self && h.rank < n;
      if (ok != want || (ok && (h.rank < 0 || h.rank >= n))) __builtin_trap();
      break;
    }
    case 4: {
      if (in.size() < sizeof(frame_header) + 4) break;
      frame_header h;
      std::memcpy(&h, in.data(), sizeof h);
      std::int32_t n;
      std::memcpy(&n, in.data() + sizeof h, 4);
      if (n < 1) n = 1;
      const records::notice nt = records::decode_notice(h, n);
      if (!known(nt.kind) || nt.first < -1 || nt.first >= n || nt.text_bytes > max_notice_bytes) __builtin_trap();
      break;
    }
    case 5: {
      std::string stream = in;
      heartbeat::msg_header h;
      std::string text;
      std::size_t taken = 0;
      for (int r; (r = heartbeat::take_message(stream, h, text)) != 0;) {
        if (r < 0) break;
        if (text.size() != h.len || h.len > heartbeat::max_text) __builtin_trap();
        taken += sizeof h + h.len;
      }
      if (taken + stream.size() != in.size()) __builtin_trap();
      break;
    }
  }
  return 0;
}
