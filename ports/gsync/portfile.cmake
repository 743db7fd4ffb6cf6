# vcpkg port of gsync, as an overlay port of this repository:
#   vcpkg install gsync[mpi] --overlay-ports=<gsync>/ports
# Header-only: one release configuration, no libraries (gsync::compiled is not installed), the
# CMake package under share/gsync and gsync.pc under share/pkgconfig.
set(VCPKG_BUILD_TYPE release)
get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)

vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
  FEATURES
    cuda GSYNC_WITH_CUDA
    mpi  GSYNC_WITH_MPI
    verbs GSYNC_WITH_VERBS
)

vcpkg_cmake_configure(
  SOURCE_PATH "${SOURCE_PATH}"
  OPTIONS
    ${FEATURE_OPTIONS}
    -DGSYNC_BUILD_TESTS=OFF
    -DGSYNC_BUILD_EXAMPLES=OFF
    -DGSYNC_BUILD_TOOLS=OFF
    -DGSYNC_INSTALL_COMPILED=OFF
    -DGSYNC_WITH_OPENSSL=ON
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(CONFIG_PATH lib/cmake/gsync)
vcpkg_fixup_pkgconfig()

file(REMOVE_RECURSE "${CURRENT_PACKAGES_DIR}/lib" "${CURRENT_PACKAGES_DIR}/debug")
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
# The repository has no licence file yet (README, "Install"): the port says so instead of inventing one.
file(WRITE "${CURRENT_PACKAGES_DIR}/share/${PORT}/copyright" "gsync ships no licence file yet; see README.md of the source.\n")
