#pragma once
/// \file
/// The receiving side of a verbs link's ring (transport/links/verbs_link.hpp): the registered
/// ring its peer writes frames into as a byte stream, with how far the writes have arrived (their
/// immediates say) and how far this side has read. Frames are read where they lie, copied out or
/// handed to a reduction in aligned pieces, across the ring's end where they wrap. No verbs call:
/// the link polls the completions and tells the reader what arrived.

#include "gsync/verbs/resources.hpp"

#if GSYNC_HAVE_VERBS
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "gsync/detail/function_ref.hpp"

namespace gsync::verbs {

/// The ring this side reads (see the file comment). Positions count bytes since the start.
class ring_reader {
 public:
  ring_reader() = default;
  /// A ring of `bytes` (a multiple of 64) registered with `d` for the peer to write.
  ring_reader(const device& d, std::size_t bytes) : ring_(d, bytes, /*remote_write=*/true) {}

  /// The registered ring (its address and key go to the peer).
  const registered& memory() const noexcept { return ring_; }
  std::size_t size() const noexcept { return ring_.size(); }
  /// Bytes arrived and not read yet.
  std::size_t ready() const noexcept { return static_cast<std::size_t>(arrived_ - read_); }
  /// Bytes read so far (the peer may write over everything before).
  std::uint64_t read() const noexcept { return read_; }
  /// A write's immediate said `n` more bytes are in place.
  void arrived(std::uint64_t n) noexcept { arrived_ += n; }

  /// Copies `n` arrived bytes to `dst` and reads past them.
  void copy_out(std::byte* dst, std::size_t n) noexcept {
    copy_at(read_, dst, n);
    read_ += n;
  }
  /// Copies `n` bytes from position `pos` without reading them.
  void copy_at(std::uint64_t pos, std::byte* dst, std::size_t n) const noexcept {
    const std::size_t at = static_cast<std::size_t>(pos % ring_.size());
    const std::size_t first = std::min(n, ring_.size() - at);
    std::memcpy(dst, ring_.data() + at, first);
    if (first < n) std::memcpy(dst + first, ring_.data(), n - first);
  }
  /// Hands `n` arrived bytes (a multiple of `align`, at most 256) to `fn` where they lie, in
  /// pieces of whole elements; an element across the ring's end goes through a bounce buffer.
  void consume(std::size_t n, std::size_t align, gsync::detail::function_ref<void(std::span<const std::byte>)>& fn) {
    while (n) {
      const std::size_t at = static_cast<std::size_t>(read_ % ring_.size());
      const std::size_t run = std::min(n, ring_.size() - at);
      const std::size_t whole = run - run % align;
      if (whole) {
        fn(std::span<const std::byte>(ring_.data() + at, whole));
        read_ += whole, n -= whole;
      } else {
        std::byte b[256];
        copy_out(b, align);
        fn(std::span<const std::byte>(b, align));
        n -= align;
      }
    }
  }
  /// Ends a frame: reads on to the next 64-byte boundary (where the peer writes the next one).
  void end_frame() noexcept { read_ = (read_ + 63) & ~std::uint64_t{63}; }

 private:
  registered ring_;
  std::uint64_t arrived_ = 0, read_ = 0;
};

}  // namespace gsync::verbs

#endif  // GSYNC_HAVE_VERBS
