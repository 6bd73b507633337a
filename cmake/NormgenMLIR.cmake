# Finds MLIR/LLVM 22 (Debian's libmlir-22-dev / llvm-22-dev) and defines normgen::mlir, an INTERFACE
# target that compiles against the MLIR and LLVM headers and links the two monolithic shared
# libraries, libMLIR.so and libLLVM.so, never the hundreds of static component libraries.
#
# Link normgen::mlir only into targets that include MLIR/LLVM headers, and never into an executable
# that also links libHalide.so: Halide carries its own LLVM. Use the target, not MLIR_*/LLVM_*
# variables: those are set only in the directory that first includes this file.
include_guard(GLOBAL)

# No version in the find_package call on purpose: MLIR's version file accepts a request only when
# major.minor match exactly, so `find_package(MLIR 22)` (read as 22.0) rejects 22.1.x. Check the
# major by hand instead.
#
# GLOBAL imported targets: this file is included once (include_guard), and normgen::mlir must be
# usable, with the MLIR/LLVM targets it names, from any directory.
set(CMAKE_FIND_PACKAGE_TARGETS_GLOBAL TRUE)
find_package(MLIR CONFIG HINTS /usr/lib/llvm-22/lib/cmake/mlir)
unset(CMAKE_FIND_PACKAGE_TARGETS_GLOBAL)

if(NOT MLIR_FOUND)
  message(FATAL_ERROR
    "normgen: MLIR 22 was not found (looked in /usr/lib/llvm-22/lib/cmake/mlir).\n"
    "Run scripts/install-deps.sh, which installs libmlir-22-dev and llvm-22-dev, then configure again;\n"
    "or point -DMLIR_DIR=<prefix>/lib/cmake/mlir at another MLIR 22 install;\n"
    "or configure with -DNORMGEN_WITH_MLIR=OFF to build without MLIR.")
endif()
if(NOT LLVM_VERSION_MAJOR EQUAL 22)
  message(FATAL_ERROR
    "normgen: found MLIR/LLVM ${LLVM_PACKAGE_VERSION} at ${MLIR_DIR}, but normgen needs major version 22.\n"
    "Run scripts/install-deps.sh or point -DMLIR_DIR at an MLIR 22 install.")
endif()
# The shared libraries are what we link; a build of MLIR without them cannot be used here.
if(NOT TARGET MLIR OR NOT TARGET LLVM)
  message(FATAL_ERROR
    "normgen: the MLIR at ${MLIR_DIR} has no shared libMLIR/libLLVM targets (MLIR and LLVM).\n"
    "normgen links the monolithic shared libraries; install libmlir-22-dev (scripts/install-deps.sh).")
endif()
message(STATUS "normgen: MLIR/LLVM ${LLVM_PACKAGE_VERSION} from ${MLIR_DIR}")

if(NOT TARGET normgen_mlir)
  add_library(normgen_mlir INTERFACE)
  add_library(normgen::mlir ALIAS normgen_mlir)

  # SYSTEM: LLVM's headers are not ours to keep warning-free under -Wall -Wextra.
  target_include_directories(normgen_mlir SYSTEM INTERFACE ${LLVM_INCLUDE_DIRS} ${MLIR_INCLUDE_DIRS})

  # LLVM_DEFINITIONS is one space-separated string of -D flags.
  separate_arguments(_normgen_llvm_defs UNIX_COMMAND "${LLVM_DEFINITIONS}")
  target_compile_definitions(normgen_mlir INTERFACE ${_normgen_llvm_defs})
  unset(_normgen_llvm_defs)

  # Classes with virtual methods defined in libLLVM/libMLIR need matching RTTI, or subclassing them
  # (passes, patterns) fails to link on missing typeinfo. Debian builds LLVM with RTTI, so usually
  # nothing is added; for an LLVM built without it, only targets that link normgen::mlir get -fno-rtti.
  if(NOT LLVM_ENABLE_RTTI)
    target_compile_options(normgen_mlir INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-fno-rtti>)
  endif()

  # Our code calls LLVM directly too (target initialisation, TargetMachine), so LLVM is linked
  # explicitly: libMLIR.so's dependency on it is not part of the MLIR target's link interface.
  target_link_libraries(normgen_mlir INTERFACE MLIR LLVM)
endif()
