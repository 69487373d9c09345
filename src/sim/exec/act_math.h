// The ScalarE activation functions evaluated in fp32 over a run of values.
// Transcendentals go through SLEEF's vector functions (1-3.5 ulp), four lanes
// at a time, and GELU's normal CDF through a fast erfc (~2e-7 relative), so a
// long activation costs a few times a copy. The hardware evaluates these
// functions by table interpolation; fp32 accuracy to a few ulp is the goal.
#pragma once
#include <cstddef>

#include "trnsim/isa.h"

namespace trnsim::exec {

// x[i] = func(x[i]) for i in [0, n). Throws IsaError for an unknown function.
void apply_activation(ActFunc func, float* x, size_t n);

}  // namespace trnsim::exec
