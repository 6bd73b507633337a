# normgen_add_torch_ops(): PyTorch operators for a kernel library (python/normgen_torch_ops.cpp).
#
#   include(NormgenAddKernels)
#   include(NormgenTorch)
#   normgen_add_kernels(TARGET my_kernels NORM my_norm.norm DTYPES f32 bf16 GRAD ON)
#   normgen_add_torch_ops(TARGET my_ops KERNELS my_kernels)
#
# and from Python (python/ on PYTHONPATH):
#
#   import normgen.torch
#   lib = normgen.torch.load("<build>/libmy_ops.so")   # torch.ops.normgen.<layer>, <layer>_backward
#   norm = lib.my_norm(4096)                           # an nn.Module (normgen/torch.py)
#
# Arguments:
#   TARGET            the loadable module to create (lib<TARGET>.so).
#   KERNELS           the kernel library (normgen_add_kernels; GRAD ON for autograd).
#   OUTPUT_DIRECTORY  where lib<TARGET>.so goes (default: the current binary dir).
#
# It links Debian's libtorch (libtorch-dev), the same libtorch python3-torch loads; give
# NORMGEN_TORCH_LIBRARY_DIR to use another. Several libraries may be loaded into one process: an
# operator name already registered (the same layer in two libraries) keeps the first library's.

include_guard(GLOBAL)

function(normgen_add_torch_ops)
  cmake_parse_arguments(PARSE_ARGV 0 NT "" "TARGET;KERNELS;OUTPUT_DIRECTORY" "")
  if(NOT NT_TARGET OR NOT NT_KERNELS)
    message(FATAL_ERROR "normgen_add_torch_ops: give TARGET <name> and KERNELS <kernel library target>")
  endif()
  if(NT_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "normgen_add_torch_ops(${NT_TARGET}): unknown arguments: ${NT_UNPARSED_ARGUMENTS}")
  endif()
  set(hints "")
  if(NORMGEN_TORCH_LIBRARY_DIR)
    set(hints HINTS ${NORMGEN_TORCH_LIBRARY_DIR} NO_DEFAULT_PATH)
  endif()
  find_library(NORMGEN_TORCH_LIB torch ${hints})
  find_library(NORMGEN_TORCH_CPU torch_cpu ${hints})
  find_library(NORMGEN_C10 c10 ${hints})
  if(NOT NORMGEN_TORCH_LIB OR NOT NORMGEN_TORCH_CPU OR NOT NORMGEN_C10)
    message(FATAL_ERROR "normgen_add_torch_ops(${NT_TARGET}): libtorch not found (install libtorch-dev: scripts/install-deps.sh)")
  endif()
  get_filename_component(root "${CMAKE_CURRENT_FUNCTION_LIST_DIR}/.." ABSOLUTE)
  set(src "${root}/python/normgen_torch_ops.cpp")
  add_library(${NT_TARGET} MODULE ${src})
  target_include_directories(${NT_TARGET} PRIVATE ${root})
  target_compile_definitions(${NT_TARGET} PRIVATE NORMGEN_TORCH_LIBRARY="${NT_TARGET}")
  target_link_libraries(${NT_TARGET} PRIVATE ${NT_KERNELS} normgen_registry ${NORMGEN_TORCH_LIB} ${NORMGEN_TORCH_CPU} ${NORMGEN_C10})
  set_target_properties(${NT_TARGET} PROPERTIES PREFIX "lib")
  if(NT_OUTPUT_DIRECTORY)
    set_target_properties(${NT_TARGET} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${NT_OUTPUT_DIRECTORY})
  endif()
endfunction()
