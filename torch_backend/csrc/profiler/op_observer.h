// Observes the ATen operators that run while a trnsim profiler records: each
// device launch is labelled with the innermost operator issuing it
// ("aten::addmm"), and the forward pass's matmul / convolution / attention
// FLOPs are counted from operand shapes (the PaLM model FLOPs; formulas as in
// torch.utils.flop_counter). Uses a global at::RecordFunction callback, so no
// Python runs per operator.
#pragma once
#include <cstdint>

#include "trnsim/profiler.h"

namespace trnsim::neuron::op_observer {

// Starts labelling launches for 'prof' and counting FLOPs (from zero); replaces any
// previous target. stop() removes the callback.
void start(profiler::Profiler& prof);
void stop();
// While set, operators are not counted as forward FLOPs (the backward pass).
void set_in_backward(bool in_backward);
// Forward FLOPs counted since start().
uint64_t forward_flops();

}  // namespace trnsim::neuron::op_observer
