#pragma once
/// \file
/// What every test file parses (doctest, Asio through gsync, all of gsync), precompiled once per
/// build: by CMake for gsync_tests (GSYNC_TEST_PCH) and by tools/sanitize.sh for its two builds
/// (GSYNC_SANITIZE_PCH). The one list both read. test_main.cpp goes without: it defines doctest's
/// main before including doctest.
#include <doctest/doctest.h>
#include <gsync/gsync.hpp>
#include <gsync/grad.hpp>
