// libFuzzer target: bytes a client sends to the store server after the handshake. The stream is cut
// into frames exactly as the server does (u32 length, 1..16 MiB) and every frame is decoded by
// store_proto::parse_request, which must either accept it with consistent fields or reject it.
// Every frame is also read as a rank's set-up record (bootstrap/rank_record.hpp: values in the
// store are not trusted), which must parse into a record that encodes back to the same text or
// raise gsync::error. And every frame is read as the body of a reply, as the client decodes get,
// mget and add replies (store_proto::decode_*), which must accept exactly the well-formed ones.
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gsync/bootstrap/rank_record.hpp"
#include "gsync/bootstrap/store.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gsync::bootstrap::store_proto;
  std::string in(reinterpret_cast<const char*>(data), size);
  while (in.size() >= 4) {
    std::uint32_t len = 0;
    std::memcpy(&len, in.data(), 4);
    if (len == 0 || len > max_frame || in.size() < 4 + std::size_t{len}) break;  // server: drop or wait
    const std::string frame = in.substr(4, len);
    in.erase(0, 4 + std::size_t{len});
    request r;
    std::string why;
    if (parse_request(frame, r, why)) {
      if (r.cmd < cmd_set || r.cmd > cmd_mget) __builtin_trap();
      const bool keyless = r.cmd == cmd_hello || r.cmd == cmd_bye;
      if (keyless ? !r.keys.empty() : (r.cmd != cmd_wait && r.cmd != cmd_mget && r.keys.size() != 1)) __builtin_trap();
      if (r.cmd == cmd_hello && r.rank < 0) __builtin_trap();
      if (r.keys.size() > 65536) __builtin_trap();
    } else if (why.empty()) {
      __builtin_trap();  // a rejection must say why (it is logged)
    }
    // The same bytes as a reply body, read the way the client reads them (bootstrap/store_client.hpp).
    std::string v;
    if (decode_value(frame, v) && v.size() + 4 != frame.size()) __builtin_trap();
    std::vector<std::string> vs;
    if (decode_values(frame, frame.size() % 5, vs)) {
      std::size_t total = 0;
      for (auto& x : vs) total += 4 + x.size();
      if (vs.size() != frame.size() % 5 || total != frame.size()) __builtin_trap();
    }
    std::int64_t i64 = 0;
    if (decode_i64(frame, i64) && frame.size() != 8) __builtin_trap();
    try {
      const auto rec = gsync::bootstrap::rank_record::parse(frame, 3);
      if (rec.port == 0 || rec.kernel.empty() || rec.host.empty()) __builtin_trap();
      if (gsync::bootstrap::rank_record::parse(rec.encode(), 3).encode() != rec.encode()) __builtin_trap();
    } catch (const gsync::error&) {
    }
  }
  return 0;
}
