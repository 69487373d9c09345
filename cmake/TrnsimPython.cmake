# Locates pybind11 for the `_core` extension module.
#
# The pybind11 pip package (in the active Python environment) is preferred, since it
# matches the interpreter the extension is built for; Debian's pybind11-dev is the fallback.

set(PYBIND11_FINDPYTHON ON)
find_package(Python 3.10 REQUIRED COMPONENTS Interpreter Development.Module)

if(NOT pybind11_DIR)
  execute_process(
    COMMAND "${Python_EXECUTABLE}" -m pybind11 --cmakedir
    OUTPUT_VARIABLE TRNSIM_PYBIND11_CMAKEDIR
    OUTPUT_STRIP_TRAILING_WHITESPACE
    ERROR_QUIET
    RESULT_VARIABLE TRNSIM_PYBIND11_QUERY_RESULT)
  if(TRNSIM_PYBIND11_QUERY_RESULT EQUAL 0 AND IS_DIRECTORY "${TRNSIM_PYBIND11_CMAKEDIR}")
    set(pybind11_DIR "${TRNSIM_PYBIND11_CMAKEDIR}" CACHE PATH "pybind11 CMake package directory")
  endif()
endif()

find_package(pybind11 CONFIG REQUIRED)
