// Shared by the compiler's fused kernels: one fused step as ISA instructions.
#pragma once
#include <array>

#include "passes.h"

namespace trnsim::compiler {

// Picks, among the engines allowed for an instruction, the one with the least work queued so
// far (estimated busy time), so fused bodies spread over the Vector, Scalar and GpSimd engines.
// An instruction with an operand in PSUM never goes to the GpSimd, which reaches SBUF only.
class EngineBalancer {
public:
    explicit EngineBalancer(const ChipConfig& chip) : chip_(chip) {}
    Engine pick(std::initializer_list<Engine> allowed, uint64_t elems, bool touches_psum = false);

private:
    const ChipConfig& chip_;
    std::array<double, 4> busy_ns_{};   // Tensor, Vector, Scalar, GpSimd
};

// Whether step 's' needs a scratch region (fp32, dst's shape) for a partial result.
bool step_needs_scratch(const Step& s);

// Emits step 's' writing dst from its operand views (args in step order); 'scratch' is the
// region step_needs_scratch() asks for (it may not overlap dst or the args).
void emit_step(KernelBuilder& kb, EngineBalancer& engines, const Step& s, const AccessPattern& dst,
               const std::vector<AccessPattern>& args, const AccessPattern* scratch = nullptr);

// 'ap' with another dtype (same element positions; the tile must be wide enough).
AccessPattern with_dtype(AccessPattern ap, DType dt);

}  // namespace trnsim::compiler
