# The C++ core as layers, each a static library with the layers it may use declared once.
#
#   layer     sources            public headers (include/trnsim/)           uses
#   isa       src/isa            dtype.h chip.h isa.h instructions.def      -
#   sim       src/sim            sim.h                                      isa
#   kernel    src/kernel         kernel.h tiling.h                          sim isa
#   ops       src/ops            ops.h ops/*.h                              kernel sim isa
#   runtime   src/runtime        runtime.h                                  sim isa
#   profiler  src/profiler       profiler.h                                 runtime sim isa
#   compiler  src/compiler       compiler.h                                 ops kernel runtime sim isa
#
# trnsim_check_layers (built before every layer) scans each layer's sources for
# `#include "trnsim/..."` and `#include "../..."` and fails the build when a layer includes a
# header of a layer it does not use, or another layer's private header.

set(TRNSIM_LAYERS isa sim kernel ops runtime profiler compiler)
set(TRNSIM_LAYER_isa_HEADERS "dtype.h;chip.h;isa.h;instructions.def")
set(TRNSIM_LAYER_sim_HEADERS "sim.h;interrupt.h")
set(TRNSIM_LAYER_kernel_HEADERS "kernel.h;tiling.h")
set(TRNSIM_LAYER_ops_HEADERS "ops.h;ops/")
set(TRNSIM_LAYER_runtime_HEADERS "runtime.h")
set(TRNSIM_LAYER_profiler_HEADERS "profiler.h")
set(TRNSIM_LAYER_compiler_HEADERS "compiler.h")
set(TRNSIM_LAYER_isa_USES "")
set(TRNSIM_LAYER_sim_USES "isa")
set(TRNSIM_LAYER_kernel_USES "sim;isa")
set(TRNSIM_LAYER_ops_USES "kernel;sim;isa")
set(TRNSIM_LAYER_runtime_USES "sim;isa")
set(TRNSIM_LAYER_profiler_USES "runtime;sim;isa")
set(TRNSIM_LAYER_compiler_USES "ops;kernel;runtime;sim;isa")

# Writes the table for the check script (cmake/CheckLayers.cmake).
function(trnsim_write_layer_table path)
  set(text "")
  foreach(layer IN LISTS TRNSIM_LAYERS)
    string(APPEND text "set(TRNSIM_LAYER_${layer}_HEADERS \"${TRNSIM_LAYER_${layer}_HEADERS}\")\n")
    string(APPEND text "set(TRNSIM_LAYER_${layer}_USES \"${TRNSIM_LAYER_${layer}_USES}\")\n")
  endforeach()
  string(APPEND text "set(TRNSIM_LAYERS \"${TRNSIM_LAYERS}\")\n")
  file(WRITE "${path}" "${text}")
endfunction()

# trnsim_add_layer(<layer> [EXTRA_LIBS ...]): trnsim_<layer> from src/<layer>/**.cpp.
function(trnsim_add_layer layer)
  cmake_parse_arguments(ARG "" "" "EXTRA_LIBS" ${ARGN})
  file(GLOB_RECURSE sources CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/src/${layer}/*.cpp")
  add_library(trnsim_${layer} STATIC ${sources})
  target_include_directories(trnsim_${layer} PUBLIC "${PROJECT_SOURCE_DIR}/include")
  target_compile_definitions(trnsim_${layer} PUBLIC TRNSIM_VERSION="${PROJECT_VERSION}")
  set(uses "")
  foreach(dep IN LISTS TRNSIM_LAYER_${layer}_USES)
    list(APPEND uses trnsim_${dep})
  endforeach()
  target_link_libraries(trnsim_${layer} PUBLIC ${uses} Threads::Threads PRIVATE ${ARG_EXTRA_LIBS} trnsim_warnings)
  add_dependencies(trnsim_${layer} trnsim_check_layers)
endfunction()
