#!/usr/bin/env python3
"""Checks the vcpkg port (ports/gsync) and the Conan recipe (conanfile.py, test_package/) without
either client, which cannot be installed here: required fields, the version equal to CMake's
project version (from include/gsync/version.hpp), features and options matching CMake's optional
parts (GSYNC_WITH_<NAME>), install paths and target names matching what CMake installs, and every
kind of header under include/ packaged by Conan.

    package_files_check.py SOURCE_DIR CMAKE_PROJECT_VERSION      exit 0 when all hold
"""
import ast
import json
import os
import re
import sys

src, cmake_version = sys.argv[1], sys.argv[2]
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


def read(*parts):
    with open(os.path.join(src, *parts), encoding="utf-8") as f:
        return f.read()


cmakelists = read("CMakeLists.txt")
config_in = read("cmake", "gsyncConfig.cmake.in")
version_hpp = read("include", "gsync", "version.hpp")
m = re.search(r'GSYNC_VERSION_STRING "([0-9]+\.[0-9]+\.[0-9]+)"', version_hpp)
check(m is not None, "include/gsync/version.hpp has no GSYNC_VERSION_STRING")
version = m.group(1) if m else None
check(version == cmake_version, f"version.hpp says {version}, CMake's project version is {cmake_version}")
cmake_options = set(re.findall(r"option\((GSYNC_[A-Z_]+)", cmakelists))
# Targets a consumer can name: the installed ones (gsync::gsync, gsync::compiled) and the components.
targets = {"gsync::gsync", "gsync::compiled"} | set(re.findall(r"add_library\((gsync::[a-z_]+) INTERFACE IMPORTED\)", config_in))
optional_parts = {o[len("GSYNC_WITH_"):].lower() for o in cmake_options if o.startswith("GSYNC_WITH_")} - {"openssl"}

# --- vcpkg ---------------------------------------------------------------------------------------
manifest = json.loads(read("ports", "gsync", "vcpkg.json"))
check(manifest.get("name") == "gsync", "vcpkg.json: name is not gsync")
check(manifest.get("version") == version, f"vcpkg.json: version {manifest.get('version')} is not {version}")
check(bool(manifest.get("description")), "vcpkg.json: no description")
deps = {d if isinstance(d, str) else d["name"]: d for d in manifest.get("dependencies", [])}
for d in ("asio", "openssl"):
    check(d in deps, f"vcpkg.json: no dependency on {d}")
for d in ("vcpkg-cmake", "vcpkg-cmake-config"):
    check(isinstance(deps.get(d), dict) and deps[d].get("host") is True, f"vcpkg.json: {d} is not a host dependency")
features = manifest.get("features", {})
check(set(features) == optional_parts, f"vcpkg.json: features {sorted(features)} are not CMake's optional parts {sorted(optional_parts)}")
for name, f in features.items():
    check(bool(f.get("description")), f"vcpkg.json: feature {name} has no description")
portfile = read("ports", "gsync", "portfile.cmake")
for fn in ("vcpkg_cmake_configure", "vcpkg_cmake_install", "vcpkg_cmake_config_fixup", "vcpkg_fixup_pkgconfig"):
    check(fn + "(" in portfile, f"portfile.cmake: does not call {fn}")
for name in features:
    check(re.search(rf"^\s*{name}\s+GSYNC_WITH_{name.upper()}\s*$", portfile, re.M) is not None,
          f"portfile.cmake: feature {name} is not mapped to GSYNC_WITH_{name.upper()}")
for opt in re.findall(r"-D(GSYNC_[A-Z_]+)=", portfile):
    check(opt in cmake_options, f"portfile.cmake: -D{opt} is not an option of CMakeLists.txt")
m = re.search(r"vcpkg_cmake_config_fixup\(CONFIG_PATH ([^ )]+)\)", portfile)
check(m is not None and m.group(1) == "lib/cmake/gsync" and "${CMAKE_INSTALL_LIBDIR}/cmake/gsync" in cmakelists,
      "portfile.cmake: the config fix-up path is not where CMakeLists.txt installs the package")
check("file(INSTALL" in portfile and "copyright" in portfile, "portfile.cmake: no usage or copyright installed")
usage = read("ports", "gsync", "usage")
check("find_package(gsync CONFIG REQUIRED)" in usage, "usage: no find_package(gsync CONFIG REQUIRED)")
for t in re.findall(r"gsync::[a-z_]+", usage):
    check(t in targets, f"usage: names {t}, which the CMake package does not define")

# --- Conan ---------------------------------------------------------------------------------------
recipe_text = read("conanfile.py")
recipe = ast.parse(recipe_text)
cls = next((n for n in recipe.body if isinstance(n, ast.ClassDef)), None)
check(cls is not None, "conanfile.py: no recipe class")
attrs = {}
methods = {}
if cls is not None:
    for n in cls.body:
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            try:
                attrs[n.targets[0].id] = ast.literal_eval(n.value)
            except ValueError:
                pass
        elif isinstance(n, ast.FunctionDef):
            methods[n.name] = ast.get_source_segment(recipe_text, n)
check(attrs.get("name") == "gsync", "conanfile.py: name is not gsync")
check(attrs.get("package_type") == "header-library", "conanfile.py: package_type is not header-library")
check(set(attrs.get("options", {})) == optional_parts, f"conanfile.py: options {sorted(attrs.get('options', {}))} are not {sorted(optional_parts)}")
check(set(attrs.get("default_options", {})) == set(attrs.get("options", {})), "conanfile.py: options without defaults")
for m_ in ("set_version", "requirements", "package", "package_info", "package_id", "validate"):
    check(m_ in methods, f"conanfile.py: no {m_}()")
# set_version must read the version from version.hpp: apply the recipe's own pattern to it.
pat = re.search(r"re\.search\(r'([^']+)'", methods.get("set_version", ""))
check(pat is not None and re.search(pat.group(1), version_hpp) is not None and re.search(pat.group(1), version_hpp).group(1) == version,
      "conanfile.py: set_version does not read version.hpp's version")
check("include/*" in (attrs.get("exports_sources") or ()), "conanfile.py: include/ is not exported")
header_kinds = {os.path.splitext(f)[1] for _, _, fs in os.walk(os.path.join(src, "include")) for f in fs}
for ext in header_kinds:
    check(f'"*{ext}"' in methods.get("package", ""), f"conanfile.py: package() does not copy the *{ext} files of include/")
for t in re.findall(r'"cmake_target_name", "([^"]+)"', methods.get("package_info", "")):
    check(t in targets, f"conanfile.py: target {t} is not one the CMake package defines")
check("asio" in methods.get("requirements", "") and "openssl" in methods.get("requirements", ""), "conanfile.py: asio or openssl not required")
for f in ("conanfile.py", "CMakeLists.txt", "test_package.cpp"):
    check(os.path.isfile(os.path.join(src, "test_package", f)), f"test_package/{f} is missing")
check("tested_reference_str" in read("test_package", "conanfile.py"), "test_package/conanfile.py does not require the tested reference")

for f in failures:
    print("FAIL:", f)
print(f"package files: {'OK' if not failures else str(len(failures)) + ' problems'} (version {version}; features {sorted(optional_parts)})")
sys.exit(1 if failures else 0)
