// The `trnsim._core` extension module: Python bindings of the C++ simulator.
#include <pybind11/pybind11.h>

#include <string>

PYBIND11_MODULE(_core, m) {
    m.doc() = "trnsim simulator core (C++)";
    m.def("version", [] { return std::string(TRNSIM_VERSION); }, "Version of the trnsim C++ core.");
}
