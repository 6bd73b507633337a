# Finds Halide 21 and brings in its CMake helpers (add_halide_generator, add_halide_library).
#
# Halide comes from the PyPI wheel that scripts/install-deps.sh installs into the project venv: the
# wheel carries the C++ library (libHalide.so, with its own statically linked LLVM), GenGen, the
# headers and the CMake package. A Halide_DIR or CMAKE_PREFIX_PATH given by the user wins over the venv.
include_guard(GLOBAL)

# Halide's package files start with cmake_minimum_required(VERSION 3.28); say so plainly instead of
# letting that line fail inside the package.
if(CMAKE_VERSION VERSION_LESS 3.28)
  message(FATAL_ERROR
    "normgen: Halide 21's CMake package needs CMake >= 3.28, this is CMake ${CMAKE_VERSION}.\n"
    "Configure with the CMake that scripts/install-deps.sh puts in the venv: .venv/bin/cmake -S . -B build\n"
    "(or configure with -DNORMGEN_WITH_HALIDE=OFF to build without Halide).")
endif()

# Relative to this file rather than CMAKE_SOURCE_DIR, so it also works when normgen is a subproject.
# The python3.X directory depends on the interpreter the venv was made with: glob it.
get_filename_component(_normgen_root "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
file(GLOB _normgen_halide_hints LIST_DIRECTORIES true
  "${_normgen_root}/.venv/lib/python3*/site-packages/halide/lib64/cmake/Halide"
  "${_normgen_root}/.venv/lib/python3*/site-packages/halide/lib/cmake/Halide")

# Only the `shared` component: the wheel ships libHalide.so only, and naming a component keeps the
# package from also looking for libpng/libjpeg (its default components), which normgen never uses.
# The version file is SameMajorVersion, so `21` accepts 21.x and nothing else.
#
# GLOBAL imported targets: this file is included once (include_guard), but add_halide_library may be
# called from any directory (codegen/, generated/, tests/) and needs Halide::* visible there.
set(CMAKE_FIND_PACKAGE_TARGETS_GLOBAL TRUE)
find_package(Halide 21 CONFIG COMPONENTS shared HINTS ${_normgen_halide_hints})
unset(CMAKE_FIND_PACKAGE_TARGETS_GLOBAL)

if(NOT Halide_FOUND)
  message(FATAL_ERROR
    "normgen: Halide 21 was not found (looked in the project venv: ${_normgen_root}/.venv).\n"
    "Run scripts/install-deps.sh, which installs the Halide 21 wheel into .venv/, then configure again;\n"
    "or point -DHalide_DIR=<prefix>/lib64/cmake/Halide at another Halide 21 install;\n"
    "or configure with -DNORMGEN_WITH_HALIDE=OFF to build without Halide.")
endif()
message(STATUS "normgen: Halide ${Halide_VERSION} from ${Halide_DIR}")

unset(_normgen_root)
unset(_normgen_halide_hints)
