// libFuzzer target: the server side of the job-key handshake (bootstrap/auth.hpp) fed arbitrary
// bytes in arbitrary pieces, as a stranger's connection would deliver them. It must end in
// need_more or failed (a stranger cannot forge the proof without the key), never crash, and never
// answer more than one challenge.
#include <cstdint>
#include <string>

#include "gsync/bootstrap/auth.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  namespace auth = gsync::bootstrap::auth;
#if defined(GSYNC_HAVE_OPENSSL)
  static const auth::job_key key("fuzzing key, 16+ bytes");
#else
  static const auth::job_key key;
#endif
  if (size == 0) return 0;
  auth::server_handshake hs(key);
  std::string in, out;
  const std::size_t step = 1 + data[0] % 41;  // how the bytes arrive
  for (std::size_t i = 1; i < size; i += step) {
    in.append(reinterpret_cast<const char*>(data + i), std::min(step, size - i));
    const auto st = hs.feed(in, out);
    if (out.size() > auth::challenge_bytes) __builtin_trap();
#if defined(GSYNC_HAVE_OPENSSL)
    if (st == auth::server_handshake::state::done) __builtin_trap();  // forged proof accepted
#endif
    if (st == auth::server_handshake::state::failed) {
      if (hs.why().empty()) __builtin_trap();
      break;
    }
  }
  return 0;
}
