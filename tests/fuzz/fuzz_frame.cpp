// libFuzzer target: a received data-frame header (transport/frame.hpp) against what the receiver
// expects. check_header must accept exactly the expected header and otherwise throw
// gsync::error(mismatch) with a message, for any 24 bytes.
#include <cstdint>
#include <cstring>

#include "gsync/transport/frame.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gsync::transport;
  if (size < sizeof(frame_header) + 20) return 0;
  frame_header h;
  std::memcpy(&h, data, sizeof h);
  gsync::message_id want{};
  std::uint64_t want_bytes = 0;
  std::memcpy(&want.tag, data + sizeof h, 4);
  std::memcpy(&want.seq, data + sizeof h + 4, 8);
  std::memcpy(&want_bytes, data + sizeof h + 12, 8);
  const bool same = h.magic == frame_magic && h.tag == want.tag && h.seq == want.seq && h.bytes == want_bytes;
  try {
    check_header(h, want, static_cast<std::size_t>(want_bytes), 0, 1);
    if (!same) __builtin_trap();
  } catch (const gsync::error& e) {
    if (same || e.kind() != gsync::errc::mismatch || std::strlen(e.what()) == 0) __builtin_trap();
  }
  return 0;
}
