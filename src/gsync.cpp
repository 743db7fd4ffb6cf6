// The set-up code of gsync, compiled once, for programs built with GSYNC_SEPARATE_COMPILATION
// (CMake target gsync::compiled; see include/gsync/detail/build_mode.hpp).
#include <gsync/impl/src.hpp>
