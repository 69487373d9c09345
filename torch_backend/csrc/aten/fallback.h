// Operators without a native neuron kernel run on the CPU through a boxed
// fallback: inputs are copied to the host, the CPU kernel runs, results are
// copied back. Every such call is counted per operator; the first one of each
// operator warns. With TRNSIM_STRICT=1 the fallback raises NotImplementedError.
// The CPU run returns every write the operator makes, see run_on_cpu.
//
// Native kernels: one file per op group in aten/native/<group>.cpp, each
// registering into TORCH_LIBRARY_IMPL(aten, PrivateUse1, m). An op with a
// PrivateUse1 kernel never reaches the fallback, so it is never counted.
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>

#include <cstdint>
#include <map>
#include <string>

namespace trnsim::neuron {

// Calls per operator ("aten::add.Tensor") since the last reset.
std::map<std::string, int64_t> fallback_counts();
void reset_fallback_counts();

// The boxed CPU fallback itself (counted, strict-mode aware). Native kernels call it for the
// cases they do not cover, through at::native::call_fallback_fn<&cpu_fallback, ATEN_OP(op)>.
void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Runs op on the CPU for the stack's neuron tensors (no counting, no policy): every byte the
// CPU kernel writes to an argument, annotated as written or not, goes back to the device,
// resized out= tensors are resized there too, and the returns are device tensors
// (aten/fallback_run.cpp).
void run_on_cpu(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace trnsim::neuron
