#pragma once
/// \file
/// gsync's version: the one place it is written (CMakeLists.txt, the vcpkg port and the Conan
/// recipe read it or are checked against it by the test suite).

#define GSYNC_VERSION_MAJOR 0  ///< incompatible API changes
#define GSYNC_VERSION_MINOR 1  ///< additions
#define GSYNC_VERSION_PATCH 0  ///< fixes
#define GSYNC_VERSION_STRING "0.1.0"  ///< "MAJOR.MINOR.PATCH"

namespace gsync {
/// The version as one number, MAJOR * 10000 + MINOR * 100 + PATCH, for `static_assert`s.
inline constexpr int version = GSYNC_VERSION_MAJOR * 10000 + GSYNC_VERSION_MINOR * 100 + GSYNC_VERSION_PATCH;
}  // namespace gsync
