# Third-party dependencies of trnsim_core, all taken from the system (Debian packages).
#
# Defines:
#   trnsim::openblas  CBLAS (cblas_sgemm and friends) from OpenBLAS, <cblas.h> on the include path
#   trnsim::yaml_cpp  yaml-cpp, whatever its exported target is called in the installed version
#   trnsim::sleef     SLEEF vectorised math (the ScalarE transcendentals), <sleef.h> on the include path
#   Threads::Threads

find_package(Threads REQUIRED)

# OpenBLAS: prefer pkg-config (Debian ships openblas.pc pointing at the threaded variant),
# otherwise look for the library and the CBLAS header directly.
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(OPENBLAS QUIET IMPORTED_TARGET openblas)
endif()
add_library(trnsim::openblas INTERFACE IMPORTED)
if(OPENBLAS_FOUND)
  target_link_libraries(trnsim::openblas INTERFACE PkgConfig::OPENBLAS)
else()
  find_library(OPENBLAS_LIBRARY NAMES openblas)
  find_path(OPENBLAS_CBLAS_INCLUDE_DIR NAMES cblas.h
            PATH_SUFFIXES openblas openblas-pthread x86_64-linux-gnu x86_64-linux-gnu/openblas-pthread)
  if(NOT OPENBLAS_LIBRARY OR NOT OPENBLAS_CBLAS_INCLUDE_DIR)
    message(FATAL_ERROR "OpenBLAS not found: install libopenblas-dev (make deps)")
  endif()
  target_link_libraries(trnsim::openblas INTERFACE "${OPENBLAS_LIBRARY}")
  target_include_directories(trnsim::openblas INTERFACE "${OPENBLAS_CBLAS_INCLUDE_DIR}")
endif()

# yaml-cpp 0.7 exports `yaml-cpp`, 0.8 and later `yaml-cpp::yaml-cpp`.
find_package(yaml-cpp CONFIG REQUIRED)
add_library(trnsim::yaml_cpp INTERFACE IMPORTED)
if(TARGET yaml-cpp::yaml-cpp)
  target_link_libraries(trnsim::yaml_cpp INTERFACE yaml-cpp::yaml-cpp)
else()
  target_link_libraries(trnsim::yaml_cpp INTERFACE yaml-cpp)
endif()

# SLEEF: Debian ships sleef.pc; otherwise look for the library and header directly.
if(PkgConfig_FOUND)
  pkg_check_modules(SLEEF QUIET IMPORTED_TARGET sleef)
endif()
add_library(trnsim::sleef INTERFACE IMPORTED)
if(SLEEF_FOUND)
  target_link_libraries(trnsim::sleef INTERFACE PkgConfig::SLEEF)
else()
  find_library(SLEEF_LIBRARY NAMES sleef)
  find_path(SLEEF_INCLUDE_DIR NAMES sleef.h PATH_SUFFIXES x86_64-linux-gnu)
  if(NOT SLEEF_LIBRARY OR NOT SLEEF_INCLUDE_DIR)
    message(FATAL_ERROR "SLEEF not found: install libsleef-dev (make deps)")
  endif()
  target_link_libraries(trnsim::sleef INTERFACE "${SLEEF_LIBRARY}")
  target_include_directories(trnsim::sleef INTERFACE "${SLEEF_INCLUDE_DIR}")
endif()
