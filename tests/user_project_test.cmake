# The user path, end to end: configure, build and run the example project tests/user_project/ from
# an empty build folder, as a user's own project would (normgen as a subproject, its .norm files
# turned into a kernel library by normgen_add_kernels). Then the check of the check: the example,
# run with its outputs perturbed (NORMGEN_EXAMPLE_CORRUPT=1), must fail.
#
#   cmake -DNORMGEN_SOURCE_DIR=<normgen root> -DEXAMPLE_BINARY_DIR=<empty or scratch folder>
#         [-DGENERATOR=Ninja] [-DMAKE_PROGRAM=...] [-DC_COMPILER=...] [-DCXX_COMPILER=...]
#         [-DBUILD_TYPE=Release] [-DHALIDE_DIR=...] [-DJOBS=2]
#         -P tests/user_project_test.cmake
#
# Registered as the ctest test `user project` (label `user`) by tests/user/CMakeLists.txt, which
# passes the generator, compilers and build type of the build that runs it.
cmake_minimum_required(VERSION 3.25)

foreach(var NORMGEN_SOURCE_DIR EXAMPLE_BINARY_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "user_project_test.cmake: give -D${var}=...")
  endif()
endforeach()
if(NOT JOBS)
  set(JOBS 2)
endif()
set(src "${NORMGEN_SOURCE_DIR}/tests/user_project")
set(bin "${EXAMPLE_BINARY_DIR}")

string(TIMESTAMP t0 "%s")
file(REMOVE_RECURSE "${bin}")  # from scratch, every time
file(MAKE_DIRECTORY "${bin}")

set(args -S "${src}" -B "${bin}" "-DNORMGEN_SOURCE_DIR=${NORMGEN_SOURCE_DIR}")
if(GENERATOR)
  list(APPEND args -G "${GENERATOR}")
endif()
if(MAKE_PROGRAM)
  list(APPEND args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(C_COMPILER)
  list(APPEND args "-DCMAKE_C_COMPILER=${C_COMPILER}")
endif()
if(CXX_COMPILER)
  list(APPEND args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(BUILD_TYPE)
  list(APPEND args "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
endif()
if(HALIDE_DIR)
  list(APPEND args "-DHalide_DIR=${HALIDE_DIR}")
endif()

message(STATUS "configure: ${CMAKE_COMMAND} ${args}")
execute_process(COMMAND "${CMAKE_COMMAND}" ${args} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "user project: configuring ${src} failed (${rc})")
endif()
string(TIMESTAMP t1 "%s")

message(STATUS "build: ${CMAKE_COMMAND} --build ${bin} -j${JOBS}")
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${bin}" -j${JOBS} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "user project: building ${bin} failed (${rc})")
endif()
string(TIMESTAMP t2 "%s")

# The example finds its manifest through NORMGEN_DEFAULT_MANIFEST; a NORMGEN_MANIFEST inherited from
# the environment would point it elsewhere.
set(exe "${bin}/normgen_example")
execute_process(COMMAND "${CMAKE_COMMAND}" -E env --unset=NORMGEN_MANIFEST "${exe}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "user project: ${exe} failed (${rc})")
endif()
if(NOT out MATCHES "passed: [1-9][0-9]* kernels run, 0 failed")
  message(FATAL_ERROR "user project: ${exe} exited 0 but did not report its kernels as passed")
endif()

execute_process(COMMAND "${CMAKE_COMMAND}" -E env --unset=NORMGEN_MANIFEST NORMGEN_EXAMPLE_CORRUPT=1 "${exe}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(rc EQUAL 0 OR NOT out MATCHES "FAIL [a-z0-9_]+__")
  message("${out}")
  message(FATAL_ERROR "user project: with its outputs perturbed, ${exe} should report failing kernels and exit non-zero (exit ${rc})")
endif()
message(STATUS "perturbed outputs are caught (exit ${rc})")
string(TIMESTAMP t3 "%s")

math(EXPR d_conf "${t1} - ${t0}")
math(EXPR d_build "${t2} - ${t1}")
math(EXPR d_run "${t3} - ${t2}")
message(STATUS "user project passed: configure ${d_conf} s, build ${d_build} s, run ${d_run} s")
