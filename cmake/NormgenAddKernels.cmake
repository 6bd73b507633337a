# normgen_add_kernels(): a user's own CMake project declares .norm files and gets, at build time,
# a static library of their kernels that runtime/registry.h can load and run.
#
#   add_subdirectory(<normgen source root> normgen EXCLUDE_FROM_ALL)  # the normgen tool + normgen_registry
#   list(APPEND CMAKE_MODULE_PATH <normgen source root>/cmake)
#   include(NormgenAddKernels)
#   normgen_add_kernels(TARGET my_kernels NORM my_norm.norm other.norm
#                       DTYPES f32 bf16 TARGETS host x86-64-avx2 BACKENDS halide mlir TUNING tuning)
#   add_executable(app main.cpp)
#   target_link_libraries(app PRIVATE my_kernels)
#
# Arguments:
#   TARGET    the name of the STATIC library to create (required).
#   NORM      one or more .norm files (relative to the current source dir, or absolute); each must
#             declare a different layer name.
#   DTYPES    storage types to generate: f32 bf16 f16 (default: f32).
#   TARGETS   Halide targets: host, x86-64-avx2, or Halide target strings (default: host).
#   BACKENDS  halide, mlir (default: halide). mlir compiles for this host (mlir-cpu) and needs
#             normgen-mlir beside normgen (NORMGEN_WITH_MLIR ON).
#   GRAD      ON: also each file's backward kernels (`normgen compile --grad`: layer <name>_grad,
#             found by Registry::select_grad(<name>, ...)), for the same types, targets, backends.
#   SCHEDULE  schedule overrides for every kernel ('knob=value,...' or a JSON file; see
#             `normgen compile --help`).
#   TUNING    a tuning database folder (`normgen tune ... --db DIR`): each file also gets one kernel
#             per schedule the database chose for its layer on a CPU of each target's ISA, which
#             Registry::select_for picks by the call's shape class (stale records are ignored with a
#             note). A file's kernels are rebuilt when its layer's DIR/best/<layer>.json changes.
#   NORMGEN   the normgen executable: a target name or a path (default: the `normgen` target when
#             normgen was added with add_subdirectory, else `normgen` found on PATH).
#
# What it builds, in ${CMAKE_CURRENT_BINARY_DIR}/<TARGET>_kernels/:
#   <n>_<file>/<backend>/   one `normgen compile` per .norm file and backend: the kernels' objects
#       and headers, all in kernels.a, a manifest.json (every kernel, its plan's ABI and schedule
#       record) and the Halide runtime object;
#   manifest.json, kernel_table.cpp   merged by `normgen merge` (one table, one manifest).
# Which kernels a file yields (types x targets x variants: `normgen describe FILE --plan`) is the
# tool's business: the build links one archive per file and backend, named before anything is
# generated, so nothing here reads the .norm text.
# The library <TARGET> holds the kernel table and one Halide runtime object, links every kernel
# archive and normgen_registry, puts the kernel headers on the include path, and defines
# NORMGEN_DEFAULT_MANIFEST (the merged manifest's path) for its users, so that
#   normgen::Registry::load(normgen::default_manifest_path(), normgen::kKernelTable, normgen::kKernelTableSize)
# finds it ($NORMGEN_MANIFEST overrides it at run time). The path is also the target's
# NORMGEN_MANIFEST property.

include_guard(GLOBAL)

function(normgen_add_kernels)
  cmake_parse_arguments(PARSE_ARGV 0 NG "" "TARGET;NORMGEN;SCHEDULE;GRAD;TUNING" "NORM;DTYPES;TARGETS;BACKENDS")
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
  if(NOT NG_BACKENDS)
    set(NG_BACKENDS halide)
  endif()
  foreach(backend IN LISTS NG_BACKENDS)
    if(NOT backend MATCHES "^(halide|mlir)$")
      message(FATAL_ERROR "normgen_add_kernels(${NG_TARGET}): BACKENDS '${backend}' (expected halide or mlir)")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES NG_BACKENDS)
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

  list(JOIN NG_DTYPES "," dtype_arg)
  list(JOIN NG_TARGETS "," target_arg)
  set(schedule_arg "")
  if(NG_SCHEDULE)
    set(schedule_arg --schedule ${NG_SCHEDULE})
  endif()
  set(tuning_arg "")
  if(NG_TUNING)
    get_filename_component(NG_TUNING "${NG_TUNING}" ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    if(NOT IS_DIRECTORY "${NG_TUNING}")
      message(FATAL_ERROR "normgen_add_kernels(${NG_TARGET}): TUNING ${NG_TUNING} is not a folder (run `normgen tune ... --db DIR` first)")
    endif()
    set(tuning_arg --tuning ${NG_TUNING})
  endif()
  set(mlir_depends "")
  if(("mlir" IN_LIST NG_BACKENDS OR NG_TUNING) AND TARGET normgen-mlir)
    set(mlir_depends normgen-mlir)  # normgen runs it for --backend mlir and for tuned streaming stores
  endif()

  set(out ${CMAKE_CURRENT_BINARY_DIR}/${NG_TARGET}_kernels)
  set(all_outputs "")
  set(all_libs "")
  set(include_dirs "")
  set(fragments "")
  set(runtime_object "")
  set(index 0)
  foreach(norm IN LISTS NG_NORM)
    get_filename_component(norm "${norm}" ABSOLUTE BASE_DIR ${CMAKE_CURRENT_SOURCE_DIR})
    if(NOT EXISTS "${norm}")
      message(FATAL_ERROR "normgen_add_kernels(${NG_TARGET}): no such file: ${norm}")
    endif()
    get_filename_component(stem "${norm}" NAME_WE)
    math(EXPR index "${index} + 1")
    file(RELATIVE_PATH rel ${CMAKE_CURRENT_SOURCE_DIR} ${norm})  # the manifest's "source"
    set(passes forward)
    if(NG_GRAD)
      list(APPEND passes grad)
    endif()
    foreach(pass IN LISTS passes)
    foreach(backend IN LISTS NG_BACKENDS)
      set(dir ${out}/${index}_${stem}/${backend})
      set(grad_opt "")
      if(pass STREQUAL "grad")
        set(dir ${out}/${index}_${stem}_grad/${backend})
        set(grad_opt --grad)
      endif()
      set(outputs ${dir}/manifest.json ${dir}/kernel_table.cpp ${dir}/halide_runtime.o ${dir}/kernels.a)
      # The layer's tuning index, when the database has one (the layer is named after the file in
      # most projects; a project whose layers are named otherwise lists them with CONFIGURE_DEPENDS).
      set(tuning_deps "")
      if(NG_TUNING)
        get_filename_component(layer_guess "${norm}" NAME_WE)
        if(pass STREQUAL "grad")
          set(layer_guess ${layer_guess}_grad)
        endif()
        file(GLOB tuning_deps CONFIGURE_DEPENDS ${NG_TUNING}/best/${layer_guess}.json)
      endif()
      set(target_opt --target ${target_arg})
      if(backend STREQUAL "mlir")
        set(target_opt "")
      endif()
      add_custom_command(
        OUTPUT ${outputs}
        COMMAND ${CMAKE_COMMAND} -E make_directory ${dir}
        COMMAND ${normgen_cmd} compile ${rel} -o ${dir} --backend ${backend} --dtype ${dtype_arg} ${target_opt}
                --archive kernels.a ${schedule_arg} ${grad_opt} ${tuning_arg}
        WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}
        DEPENDS ${NG_NORMGEN} ${mlir_depends} ${norm} ${tuning_deps}
        COMMENT "normgen compile ${rel} --backend ${backend} ${grad_opt} (${NG_TARGET})"
        VERBATIM)
      list(APPEND all_outputs ${outputs})
      list(APPEND all_libs ${dir}/kernels.a)
      list(APPEND fragments ${dir}/manifest.json)
      list(APPEND include_dirs ${dir})
      if(NOT runtime_object)
        set(runtime_object ${dir}/halide_runtime.o)  # every compile writes one; the first serves all
      endif()
    endforeach()
    endforeach()
  endforeach()

  add_custom_command(
    OUTPUT ${out}/manifest.json ${out}/kernel_table.cpp
    COMMAND ${normgen_cmd} merge --manifest ${out}/manifest.json --table ${out}/kernel_table.cpp ${fragments}
    DEPENDS ${fragments} ${NG_NORMGEN}
    COMMENT "normgen merge: ${NG_TARGET}_kernels/manifest.json and kernel_table.cpp"
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
