# normgen_add_kernels(): a user's own CMake project declares .norm files and gets, at build time,
# a static library of their Halide kernels that runtime/registry.h can load and run.
#
#   add_subdirectory(<normgen source root> normgen EXCLUDE_FROM_ALL)  # the normgen tool + normgen_registry
#   list(APPEND CMAKE_MODULE_PATH <normgen source root>/cmake)
#   include(NormgenAddKernels)
#   normgen_add_kernels(TARGET my_kernels NORM my_norm.norm other.norm
#                       DTYPES f32 bf16 TARGETS host x86-64-avx2)
#   add_executable(app main.cpp)
#   target_link_libraries(app PRIVATE my_kernels)
#
# Arguments:
#   TARGET   the name of the STATIC library to create (required).
#   NORM     one or more .norm files (relative to the current source dir, or absolute); each must
#            declare a different layer name.
#   DTYPES   storage types to generate: f32 bf16 f16 (default: f32).
#   TARGETS  Halide targets: host, x86-64-avx2, or Halide target strings (default: host).
#   NORMGEN  the normgen executable: a target name or a path (default: the `normgen` target when
#            normgen was added with add_subdirectory, else `normgen` found on PATH).
#
# What it builds, in ${CMAKE_CURRENT_BINARY_DIR}/<TARGET>_kernels/:
#   <layer>/<layer>__<dtype>__<isa>__<variant>.{a,h}   one `normgen compile` per .norm file;
#       isa: avx512 for `host` on an AVX-512 machine (else avx2), avx2 for x86-64-avx2;
#       variant: core, plus full when the layer has an optional output (`name?`).
#   manifest.json, kernel_table.cpp   merged from the per-file manifests (one table, one manifest).
# The library <TARGET> holds the kernel table and one Halide runtime object, links every kernel
# library and normgen_registry, puts the kernel headers on the include path, and defines
# NORMGEN_DEFAULT_MANIFEST (the merged manifest's path) for its users, so that
#   normgen::Registry::load(normgen::default_manifest_path(), normgen::kKernelTable, normgen::kKernelTableSize)
# finds it ($NORMGEN_MANIFEST overrides it at run time). The path is also the target's
# NORMGEN_MANIFEST property.
#
# The set of files a .norm yields is decided when CMake configures (the build must know every
# library it links), from the layer's name and whether its signature has an optional output; the
# .norm files are configure dependencies, so editing one reconfigures.

# ---------------------------------------------------------------------------------------------
# Script mode: the merge step, run by the build as
#   cmake -D_NORMGEN_MANIFEST=<out> -D_NORMGEN_TABLE=<out> -P NormgenAddKernels.cmake -- <manifest.json>...
# Each input is a `normgen compile` manifest ({"normgen_manifest": 1, "kernels": [...]}). The
# output manifest lists every entry, with "library" and "header" made relative to its own folder;
# the table is what normgen-gen's write_kernel_table writes (codegen/halide/aot.cpp), plus an
# anchor that ties the table's object to the Halide runtime's (see below).
if(CMAKE_SCRIPT_MODE_FILE AND CMAKE_SCRIPT_MODE_FILE STREQUAL CMAKE_CURRENT_LIST_FILE)
  cmake_minimum_required(VERSION 3.19)  # string(JSON)
  if(NOT _NORMGEN_MANIFEST OR NOT _NORMGEN_TABLE)
    message(FATAL_ERROR "NormgenAddKernels.cmake: give -D_NORMGEN_MANIFEST=... -D_NORMGEN_TABLE=...")
  endif()
  set(inputs "")
  set(after_dashes FALSE)
  math(EXPR last "${CMAKE_ARGC} - 1")
  foreach(i RANGE 1 ${last})
    if(after_dashes)
      list(APPEND inputs "${CMAKE_ARGV${i}}")
    elseif(CMAKE_ARGV${i} STREQUAL "--")
      set(after_dashes TRUE)
    endif()
  endforeach()

  get_filename_component(out_dir "${_NORMGEN_MANIFEST}" DIRECTORY)
  set(merged "{\"normgen_manifest\": 1, \"kernels\": []}")
  set(functions "")
  set(n 0)
  foreach(input IN LISTS inputs)
    file(READ "${input}" doc)
    string(JSON version ERROR_VARIABLE err GET "${doc}" normgen_manifest)
    if(err OR NOT version EQUAL 1)
      message(FATAL_ERROR "normgen_add_kernels: '${input}' is not a normgen manifest (version 1)")
    endif()
    string(JSON count LENGTH "${doc}" kernels)
    get_filename_component(in_dir "${input}" DIRECTORY)
    file(RELATIVE_PATH rel "${out_dir}" "${in_dir}")
    if(count GREATER 0)
      math(EXPR last "${count} - 1")
      foreach(i RANGE 0 ${last})
        string(JSON entry GET "${doc}" kernels ${i})
        string(JSON fn GET "${entry}" function)
        if(fn IN_LIST functions)
          message(FATAL_ERROR "normgen_add_kernels: kernel '${fn}' comes from two .norm files (the second: ${input}); "
                              "give each layer its own name")
        endif()
        list(APPEND functions "${fn}")
        foreach(field library header)
          string(JSON value ERROR_VARIABLE err GET "${entry}" ${field})
          if(NOT err AND NOT rel STREQUAL "")
            string(JSON entry SET "${entry}" ${field} "\"${rel}/${value}\"")
          endif()
        endforeach()
        string(JSON merged SET "${merged}" kernels ${n} "${entry}")
        math(EXPR n "${n} + 1")
      endforeach()
    endif()
  endforeach()

  # kernel_table.cpp, as write_kernel_table (codegen/halide/aot.cpp) writes it.
  set(decls "")
  set(rows "")
  foreach(fn IN LISTS functions)
    string(APPEND decls "int ${fn}_argv(void **args);\n")
    string(APPEND rows "    {\"${fn}\", &${fn}_argv},\n")
  endforeach()
  if(n EQUAL 0)
    set(rows "    {nullptr, nullptr},\n")
  endif()
  set(table
"// Auto-generated by normgen_add_kernels (cmake/NormgenAddKernels.cmake) from the kernel manifest. Do not edit!
#include \"runtime/kernel_table.h\"

extern \"C\" {
${decls}}

namespace normgen {

const KernelEntry kKernelTable[] = {
${rows}};
const size_t kKernelTableSize = ${n};

}  // namespace normgen

// The Halide runtime object sits in the same archive as this table. A program that uses the table
// pulls this object in, and this reference pulls the runtime in with it (the linker rescans an
// archive until nothing new is needed), so the kernels' libraries, which come after the archive on
// the link line, find the runtime whatever order the program lists its libraries in.
extern \"C\" void *halide_malloc(void *user_context, size_t size);
extern void *(*const normgen_kernel_table_halide_runtime_anchor)(void *, size_t);
void *(*const normgen_kernel_table_halide_runtime_anchor)(void *, size_t) = &halide_malloc;
")

  # Written only when the content changes, so that an unchanged table is not recompiled.
  foreach(pair "_NORMGEN_MANIFEST;merged" "_NORMGEN_TABLE;table")
    list(GET pair 0 path_var)
    list(GET pair 1 text_var)
    set(path "${${path_var}}")
    set(old "")
    if(EXISTS "${path}")
      file(READ "${path}" old)
    endif()
    if(NOT old STREQUAL "${${text_var}}\n" AND NOT old STREQUAL "${${text_var}}")
      file(WRITE "${path}" "${${text_var}}\n")
    endif()
  endforeach()
  message(STATUS "normgen_add_kernels: ${n} kernels in ${_NORMGEN_MANIFEST}")
  return()
endif()

# ---------------------------------------------------------------------------------------------
include_guard(GLOBAL)
if(CMAKE_VERSION VERSION_LESS 3.19)
  message(FATAL_ERROR "normgen_add_kernels needs CMake >= 3.19 (string(JSON)); this is CMake ${CMAKE_VERSION}")
endif()

# Whether `host` means AVX-512 here: the ISA tag normgen compile gives the host target (probed as
# generated/CMakeLists.txt does).
function(_normgen_host_isa out)
  get_property(isa GLOBAL PROPERTY _NORMGEN_HOST_ISA)
  if(NOT isa)
    execute_process(COMMAND grep -qw avx512f /proc/cpuinfo RESULT_VARIABLE no_avx512 OUTPUT_QUIET ERROR_QUIET)
    if(no_avx512 EQUAL 0)
      set(isa avx512)
    else()
      set(isa avx2)
    endif()
    set_property(GLOBAL PROPERTY _NORMGEN_HOST_ISA ${isa})
  endif()
  set(${out} ${isa} PARENT_SCOPE)
endfunction()

function(normgen_add_kernels)
  cmake_parse_arguments(PARSE_ARGV 0 NG "" "TARGET;NORMGEN" "NORM;DTYPES;TARGETS")
  if(NG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "normgen_add_kernels: unknown arguments: ${NG_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT NG_TARGET)
    message(FATAL_ERROR "normgen_add_kernels: give TARGET <name>")
  endif()
  if(NOT NG_NORM)
    message(FATAL_ERROR "normgen_add_kernels(${NG_TARGET}): give NORM <file.norm>...")
  endif()
  if(NOT NG_DTYPES)
    set(NG_DTYPES f32)
  endif()
  if(NOT NG_TARGETS)
    set(NG_TARGETS host)
  endif()
  foreach(dtype IN LISTS NG_DTYPES)
    if(NOT dtype MATCHES "^(f32|bf16|f16)$")
      message(FATAL_ERROR "normgen_add_kernels(${NG_TARGET}): DTYPES '${dtype}' (expected f32, bf16 or f16)")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES NG_DTYPES)
  if(NOT TARGET normgen_registry)
    message(FATAL_ERROR "normgen_add_kernels(${NG_TARGET}): the normgen_registry library is not defined; "
                        "add normgen first: add_subdirectory(<normgen source root> normgen EXCLUDE_FROM_ALL) "
                        "(with NORMGEN_WITH_HALIDE ON)")
  endif()

  # The generator.
  if(NOT NG_NORMGEN)
    if(TARGET normgen)
      set(NG_NORMGEN normgen)
    else()
      find_program(NORMGEN_EXECUTABLE normgen)
      if(NOT NORMGEN_EXECUTABLE)
        message(FATAL_ERROR "normgen_add_kernels(${NG_TARGET}): no `normgen` target and none on PATH; give NORMGEN <path>")
      endif()
      set(NG_NORMGEN ${NORMGEN_EXECUTABLE})
    endif()
  endif()
  if(TARGET ${NG_NORMGEN})
    set(normgen_cmd $<TARGET_FILE:${NG_NORMGEN}>)
  else()
    get_filename_component(NG_NORMGEN "${NG_NORMGEN}" ABSOLUTE)
    set(normgen_cmd ${NG_NORMGEN})
  endif()

  # The ISA tags the targets resolve to (normgen compiles each tag once).
  set(isas "")
  foreach(t IN LISTS NG_TARGETS)
    if(t STREQUAL "host")
      _normgen_host_isa(isa)
    elseif(t MATCHES "avx512")
      set(isa avx512)
    else()
      set(isa avx2)
    endif()
    list(APPEND isas ${isa})
  endforeach()
  list(REMOVE_DUPLICATES isas)
  list(JOIN NG_DTYPES "," dtype_arg)
  list(JOIN NG_TARGETS "," target_arg)

  set(out ${CMAKE_CURRENT_BINARY_DIR}/${NG_TARGET}_kernels)
  set(all_outputs "")
  set(all_libs "")
  set(include_dirs "")
  set(fragments "")
  set(layers "")
  set(runtime_object "")
  foreach(norm IN LISTS NG_NORM)
    get_filename_component(norm "${norm}" ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    if(NOT EXISTS "${norm}")
      message(FATAL_ERROR "normgen_add_kernels(${NG_TARGET}): no such file: ${norm}")
    endif()
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${norm})
    file(READ "${norm}" text)
    string(REGEX REPLACE "#[^\n]*" "" text "${text}")  # comments run from '#' to the end of the line
    # The layer: `norm NAME(`.
    if(NOT text MATCHES "(^|[^A-Za-z0-9_])norm[ \t\r\n]+([A-Za-z_][A-Za-z0-9_]*)[ \t\r\n]*\\(")
      message(FATAL_ERROR "normgen_add_kernels(${NG_TARGET}): ${norm} declares no `norm NAME(...)`")
    endif()
    set(layer ${CMAKE_MATCH_2})
    if(layer IN_LIST layers)
      message(FATAL_ERROR "normgen_add_kernels(${NG_TARGET}): two .norm files declare the layer '${layer}' (the second: ${norm})")
    endif()
    list(APPEND layers ${layer})
    # Variants: an optional output is an identifier followed by '?' in the signature (-> ... {).
    set(variants core)
    if(text MATCHES "->([^{]*)\\{")
      if(CMAKE_MATCH_1 MATCHES "[A-Za-z0-9_][ \t\r\n]*\\?")
        list(APPEND variants full)
      endif()
    endif()

    set(dir ${out}/${layer})
    set(outputs ${dir}/manifest.json ${dir}/kernel_table.cpp ${dir}/halide_runtime.o)
    foreach(dtype IN LISTS NG_DTYPES)
      foreach(isa IN LISTS isas)
        foreach(variant IN LISTS variants)
          set(fn ${layer}__${dtype}__${isa}__${variant})
          list(APPEND outputs ${dir}/${fn}.h)
          list(APPEND all_libs ${dir}/${fn}.a)
          list(APPEND outputs ${dir}/${fn}.a)
        endforeach()
      endforeach()
    endforeach()
    if(NOT runtime_object)
      set(runtime_object ${dir}/halide_runtime.o)  # every compile writes one; the first serves all
    endif()
    file(RELATIVE_PATH rel ${CMAKE_CURRENT_SOURCE_DIR} ${norm})  # the manifest's "source"
    add_custom_command(
      OUTPUT ${outputs}
      COMMAND ${CMAKE_COMMAND} -E make_directory ${dir}
      COMMAND ${normgen_cmd} compile ${rel} -o ${dir} --backend halide --dtype ${dtype_arg} --target ${target_arg}
      WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
      DEPENDS ${NG_NORMGEN} ${norm}
      COMMENT "normgen compile ${rel} (${NG_TARGET}: ${layer})"
      VERBATIM)
    list(APPEND all_outputs ${outputs})
    list(APPEND fragments ${dir}/manifest.json)
    list(APPEND include_dirs ${dir})
  endforeach()

  add_custom_command(
    OUTPUT ${out}/manifest.json ${out}/kernel_table.cpp
    COMMAND ${CMAKE_COMMAND} -D_NORMGEN_MANIFEST=${out}/manifest.json -D_NORMGEN_TABLE=${out}/kernel_table.cpp
            -P ${CMAKE_CURRENT_FUNCTION_LIST_FILE} -- ${fragments}
    DEPENDS ${fragments} ${CMAKE_CURRENT_FUNCTION_LIST_FILE}
    COMMENT "normgen_add_kernels: ${NG_TARGET}_kernels/manifest.json and kernel_table.cpp"
    VERBATIM)

  # Every generated file is built before the library (the kernel libraries are link inputs of the
  # library's users, not sources of the library itself).
  add_custom_target(${NG_TARGET}_generate DEPENDS ${all_outputs})

  find_package(Threads REQUIRED)
  add_library(${NG_TARGET} STATIC ${out}/kernel_table.cpp ${runtime_object})
  set_source_files_properties(${runtime_object} PROPERTIES EXTERNAL_OBJECT TRUE GENERATED TRUE)
  add_dependencies(${NG_TARGET} ${NG_TARGET}_generate)
  target_include_directories(${NG_TARGET} PUBLIC ${include_dirs})
  target_link_libraries(${NG_TARGET} PUBLIC normgen_registry ${all_libs} Threads::Threads ${CMAKE_DL_LIBS})
  target_compile_definitions(${NG_TARGET} PUBLIC NORMGEN_DEFAULT_MANIFEST="${out}/manifest.json")
  set_target_properties(${NG_TARGET} PROPERTIES NORMGEN_MANIFEST ${out}/manifest.json)
endfunction()
