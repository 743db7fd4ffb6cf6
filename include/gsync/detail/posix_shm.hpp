#pragma once
/// \file
/// A POSIX shared-memory object, created or opened by name and mapped read-write: the one place
/// that calls shm_open, posix_fallocate, fstat and mmap for the host transport's segments
/// (transport/shm.hpp) and the CUDA IPC control pages (cuda/ipc_counters.hpp). A leaf: failures
/// come back as the errno and the call that failed, and each caller words its own error.

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace gsync::detail {

/// The name of a shared-memory object gsync makes in process `pid`: "/gsync-<pid>-<what>". The pid
/// lets a launcher remove what a child that died during set-up left (gsyncrun removes
/// /dev/shm/gsync-<pid>-*); "/gsync-" tells gsync's names from others'.
inline std::string shm_name(long pid, std::string_view what) {
  return "/gsync-" + std::to_string(pid) + "-" + std::string(what);
}

/// A mapped shared-memory object (RAII: unmaps on destruction, and unlinks the name while it owns it).
class posix_shm {
 public:
  /// Why a `create` or `open` failed: the errno (EBADMSG: the object has another size) and the call.
  struct failure {
    int err = 0;
    const char* call = "";
  };

  posix_shm() = default;
  posix_shm(const posix_shm&) = delete;
  posix_shm& operator=(const posix_shm&) = delete;
  posix_shm(posix_shm&& o) noexcept { *this = std::move(o); }
  posix_shm& operator=(posix_shm&& o) noexcept {
    if (this != &o) {
      reset();
      base_ = std::exchange(o.base_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      name_ = std::move(o.name_);
      linked_ = std::exchange(o.linked_, false);
    }
    return *this;
  }
  ~posix_shm() { reset(); }

  /// Creates `name` (exclusively, mode 0600) with `bytes` reserved now (posix_fallocate: a full
  /// /dev/shm fails here, not as a SIGBUS on first touch) and maps it; MAP_POPULATE when
  /// `populate`. On failure returns an empty object (the name removed again) and fills `why`.
  static posix_shm create(const std::string& name, std::size_t bytes, bool populate, failure& why) {
    posix_shm m;
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) return why = {errno, "shm_open"}, posix_shm{};
    m.name_ = name;
    m.linked_ = true;  // from here on the destructor unlinks it
    if (const int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); rc != 0) {
      ::close(fd);
      return why = {rc, "posix_fallocate"}, posix_shm{};
    }
    if (!m.map(fd, bytes, populate)) return why = {errno, "mmap"}, posix_shm{};
    return m;
  }

  /// Opens the existing object `name`, which must hold exactly `bytes`, and maps it. On failure
  /// returns an empty object and fills `why` (EBADMSG from "fstat": another size).
  static posix_shm open(const std::string& name, std::size_t bytes, bool populate, failure& why) {
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
    if (fd < 0) return why = {errno, "shm_open"}, posix_shm{};
    struct stat st{};
    if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes) {
      ::close(fd);
      return why = {EBADMSG, "fstat"}, posix_shm{};
    }
    posix_shm m;
    m.name_ = name;
    if (!m.map(fd, bytes, populate)) return why = {errno, "mmap"}, posix_shm{};
    return m;
  }

  /// The mapping's first byte (nullptr when empty).
  std::byte* data() const noexcept { return base_; }
  /// Bytes mapped.
  std::size_t size() const noexcept { return bytes_; }
  /// The object's name.
  const std::string& name() const noexcept { return name_; }
  /// True when mapped.
  explicit operator bool() const noexcept { return base_ != nullptr; }
  /// Removes the name (the memory lives on while mapped). Idempotent.
  void unlink() noexcept {
    if (linked_) ::shm_unlink(name_.c_str());
    linked_ = false;
  }
  /// Forgets the mapping without unmapping it (memory that another owner, such as CUDA's host
  /// registration, still uses); the name is kept.
  std::byte* release_mapping() noexcept {
    bytes_ = 0;
    return std::exchange(base_, nullptr);
  }

 private:
  bool map(int fd, std::size_t bytes, bool populate) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd, 0);
    const int e = errno;
    ::close(fd);
    errno = e;
    if (p == MAP_FAILED) return false;
    base_ = static_cast<std::byte*>(p);
    bytes_ = bytes;
    return true;
  }
  void reset() noexcept {
    unlink();
    if (base_) ::munmap(base_, bytes_);
    base_ = nullptr;
    bytes_ = 0;
  }

  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
  std::string name_;
  bool linked_ = false;
};

}  // namespace gsync::detail
