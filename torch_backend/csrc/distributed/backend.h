// trnsim._C._distributed: the c10d backend of the neuron device.
#pragma once
#include <pybind11/pybind11.h>

namespace trnsim::neuron {

// Adds the submodule "_distributed" to 'm': the c10d::Backend whose collectives
// python/trnsim/distributed implements, and the device clock hooks it uses.
void init_distributed_bindings(pybind11::module_& m);

}  // namespace trnsim::neuron
