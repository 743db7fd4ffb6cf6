#pragma once
/// \file
/// A fixed-size, cache-line aligned byte buffer (staging and scratch buffers are allocated once,
/// at construction, with this).

#include <cstddef>
#include <memory>
#include <new>

namespace gsync::detail {

struct aligned_delete {
  void operator()(std::byte* p) const noexcept { ::operator delete[](p, std::align_val_t{64}); }
};

/// Owning pointer to a 64-byte aligned byte array.
using aligned_bytes = std::unique_ptr<std::byte[], aligned_delete>;

/// Allocates `n` bytes aligned to 64.
inline aligned_bytes make_aligned_bytes(std::size_t n) { return aligned_bytes(new (std::align_val_t{64}) std::byte[n]); }

}  // namespace gsync::detail
