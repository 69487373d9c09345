// trnsim._C._profiler: the profiler (include/trnsim/profiler.h) bound to the
// neuron devices of this process.
#pragma once
#include <pybind11/pybind11.h>

namespace trnsim::neuron {

// Adds the submodule "_profiler" to 'm'.
void init_profiler_bindings(pybind11::module_& m);

}  // namespace trnsim::neuron
