"""Conan 2 recipe of gsync, a header-only library: `conan create . -o gsync/*:mpi=True`.

The version is read from include/gsync/version.hpp. Options `cuda` and `mpi` add the components
gsync::cuda and gsync::mpi (the same optional parts as CMake's GSYNC_WITH_CUDA / GSYNC_WITH_MPI);
`verbs` (GSYNC_WITH_VERBS) builds the InfiniBand / RoCE link against rdma-core's headers.
"""
import os
import re

from conan import ConanFile
from conan.tools.build import check_min_cppstd
from conan.tools.files import copy, load
from conan.tools.layout import basic_layout

required_conan_version = ">=2.0"


class GsyncConan(ConanFile):
    name = "gsync"
    package_type = "header-library"
    description = "Header-only C++20 collectives for gradient synchronization over TCP and shared memory"
    topics = ("collectives", "allreduce", "distributed-training", "header-only")
    settings = "os", "arch", "compiler", "build_type"
    options = {"cuda": [True, False], "mpi": [True, False], "verbs": [True, False]}
    default_options = {"cuda": False, "mpi": False, "verbs": False}
    exports_sources = "include/*", "README.md"
    no_copy_source = True

    def set_version(self):
        text = load(self, os.path.join(self.recipe_folder, "include", "gsync", "version.hpp"))
        self.version = re.search(r'GSYNC_VERSION_STRING "([0-9]+\.[0-9]+\.[0-9]+)"', text).group(1)

    def layout(self):
        basic_layout(self, src_folder=".")

    def requirements(self):
        self.requires("asio/[>=1.24 <2]")
        self.requires("openssl/[>=3 <4]")
        if self.options.mpi:
            self.requires("openmpi/[>=4.1 <6]")
        if self.options.verbs:
            self.requires("rdma-core/[>=44]")  # headers; libibverbs is loaded at run time

    def validate(self):
        check_min_cppstd(self, 20)

    def package_id(self):
        # Headers only: one package whatever the compiler, but the options still tell packages apart.
        self.info.settings.clear()

    def package(self):
        for pattern in ("*.hpp", "*.ipp", "*.cuh"):
            copy(self, pattern, src=os.path.join(self.source_folder, "include"), dst=os.path.join(self.package_folder, "include"))

    def package_info(self):
        self.cpp_info.bindirs = []
        self.cpp_info.libdirs = []
        self.cpp_info.set_property("cmake_file_name", "gsync")
        self.cpp_info.set_property("pkg_config_name", "gsync")
        core = self.cpp_info.components["core"]
        core.set_property("cmake_target_name", "gsync::gsync")
        core.bindirs = []
        core.libdirs = []
        core.defines = ["ASIO_STANDALONE", "ASIO_NO_DEPRECATED", "GSYNC_HAVE_OPENSSL=1"]
        if not self.options.verbs:
            core.defines.append("GSYNC_NO_VERBS=1")  # verbs off even where the consumer has libibverbs' headers
        core.requires = ["asio::asio", "openssl::crypto"] + (["rdma-core::rdma-core"] if self.options.verbs else [])
        if self.settings.os in ("Linux", "FreeBSD"):
            core.system_libs = ["pthread"]
        if self.options.mpi:
            mpi = self.cpp_info.components["mpi"]
            mpi.set_property("cmake_target_name", "gsync::mpi")
            mpi.bindirs = []
            mpi.libdirs = []
            mpi.requires = ["core", "openmpi::openmpi"]
        if self.options.cuda:
            cuda = self.cpp_info.components["cuda"]
            cuda.set_property("cmake_target_name", "gsync::cuda")
            cuda.bindirs = []
            cuda.libdirs = []
            cuda.requires = ["core"]
            cuda.defines = ["GSYNC_WITH_CUDA=1"]
            cuda.system_libs = ["cudart"]  # the CUDA toolkit is not a Conan package: the system's
