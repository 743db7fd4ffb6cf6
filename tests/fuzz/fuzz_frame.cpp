// libFuzzer target: a received data-frame header (transport/frame.hpp) against what the receiver
// expects. check_header must accept exactly the expected header and otherwise throw
// gsync::error(mismatch) with a message, for any header bytes (describe_message formats whatever
// fingerprint codes arrive).
#include <cstdint>
#include <cstring>

#include "gsync/transport/frame.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace gsync::transport;
  if (size < 2 * sizeof(frame_header)) return 0;
  frame_header h, w;
  std::memcpy(&h, data, sizeof h);
  std::memcpy(&w, data + sizeof h, sizeof w);  // the receiver's expectation, from the same bytes
  const gsync::message_id want{w.tag, w.seq, w.fp};
  const std::uint64_t want_bytes = w.bytes;
  const bool same = h.magic == frame_magic && h.tag == want.tag && h.seq == want.seq && h.fp == want.fp && h.bytes == want_bytes;
  try {
    check_header(h, want, static_cast<std::size_t>(want_bytes), 0, 1);
    if (!same) __builtin_trap();
  } catch (const gsync::error& e) {
    if (same || e.kind() != gsync::errc::mismatch || std::strlen(e.what()) == 0) __builtin_trap();
  }
  return 0;
}
