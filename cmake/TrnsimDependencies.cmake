# Third-party dependencies of trnsim_core, all taken from the system (Debian packages).
#
# Defines:
#   trnsim::openblas  CBLAS (cblas_sgemm and friends) from OpenBLAS, <cblas.h> on the include path
#   trnsim::yaml_cpp  yaml-cpp, whatever its exported target is called in the installed version
#   trnsim::sleef     SLEEF vectorised math (the ScalarE transcendentals), <sleef.h> on the include path
#   Threads::Threads

find_package(Threads REQUIRED)
find_package(PkgConfig QUIET)

# trnsim_system_library(<target> <pkg-config module> <library> <header> <Debian package> [suffix...])
# Defines the interface target from pkg-config when the module is known, otherwise from the
# library and the header found directly (the header searched under the given path suffixes).
function(trnsim_system_library target module library header package)
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  if(PkgConfig_FOUND)
    pkg_check_modules(${module}_PC QUIET IMPORTED_TARGET GLOBAL ${module})
  endif()
  if(${module}_PC_FOUND)
    target_link_libraries(${target} INTERFACE PkgConfig::${module}_PC)
    return()
  endif()
  find_library(${module}_LIBRARY NAMES ${library})
  find_path(${module}_INCLUDE_DIR NAMES ${header} PATH_SUFFIXES ${ARGN})
  if(NOT ${module}_LIBRARY OR NOT ${module}_INCLUDE_DIR)
    message(FATAL_ERROR "${library} not found: install ${package} (make deps)")
  endif()
  target_link_libraries(${target} INTERFACE "${${module}_LIBRARY}")
  target_include_directories(${target} INTERFACE "${${module}_INCLUDE_DIR}")
endfunction()

# OpenBLAS: Debian's openblas.pc points at the threaded variant.
trnsim_system_library(trnsim::openblas openblas openblas cblas.h libopenblas-dev
                      openblas openblas-pthread x86_64-linux-gnu x86_64-linux-gnu/openblas-pthread)
trnsim_system_library(trnsim::sleef sleef sleef sleef.h libsleef-dev x86_64-linux-gnu)

# yaml-cpp 0.7 exports `yaml-cpp`, 0.8 and later `yaml-cpp::yaml-cpp`.
find_package(yaml-cpp CONFIG REQUIRED)
add_library(trnsim::yaml_cpp INTERFACE IMPORTED)
if(TARGET yaml-cpp::yaml-cpp)
  target_link_libraries(trnsim::yaml_cpp INTERFACE yaml-cpp::yaml-cpp)
else()
  target_link_libraries(trnsim::yaml_cpp INTERFACE yaml-cpp)
endif()
