// trnsim._C._compiler: the graph compiler (include/trnsim/compiler.h) for torch.compile's
// "neuron" backend, and the launch of compiled segments on the neuron devices.
#pragma once
#include <pybind11/pybind11.h>

namespace trnsim::neuron {

// Adds the submodule "_compiler" to 'm'.
void init_compiler_bindings(pybind11::module_& m);

}  // namespace trnsim::neuron
