// One fused step as ISA instructions, and the engine balancer of the fused kernels.
#include "kernel_common.h"

namespace trnsim::compiler {

namespace {

ActFunc act_for(ops::Unary u) {
    if (std::optional<ActFunc> f = ops::activation_of(u)) return *f;
    throw CompileError("fused step: unary op " + std::to_string(static_cast<int>(u)) + " has no activation function");
}


const StreamEngineConfig& engine_config(const ChipConfig& chip, Engine e) {
    return e == Engine::Scalar ? chip.scalar : e == Engine::GpSimd ? chip.gpsimd : chip.vector;
}

}  // namespace

Engine EngineBalancer::pick(std::initializer_list<Engine> allowed, uint64_t elems) {
    Engine best = *allowed.begin();
    double best_end = 0;
    bool first = true;
    for (Engine e : allowed) {
        const StreamEngineConfig& c = engine_config(chip_, e);
        const double cycles = std::max<double>(static_cast<double>(elems) / std::max(1u, c.elems_per_cycle), c.min_ii_cycles) +
                              c.fixed_overhead_cycles + c.access_overhead_cycles;
        const double end = busy_ns_[static_cast<int>(e)] + cycles / c.clock_ghz;
        if (first || end < best_end) best = e, best_end = end, first = false;
    }
    busy_ns_[static_cast<int>(best)] = best_end;
    return best;
}

AccessPattern with_dtype(AccessPattern ap, DType dt) {
    ap.dtype = dt;
    return ap;
}

void emit_step(KernelBuilder& kb, EngineBalancer& engines, const Step& s, const AccessPattern& dst,
               const std::vector<AccessPattern>& args) {
    const uint64_t elems = dst.free_elems();
    switch (s.op) {
        case Op::unary:
            engines.pick({Engine::Scalar}, elems);
            kb.activation(dst, args[0], act_for(static_cast<ops::Unary>(s.i0)));
            return;
        case Op::binary:
            kb.tensor_tensor(dst, args[0], args[1], ops::alu_of(static_cast<ops::Binary>(s.i0)),
                             engines.pick({Engine::Vector, Engine::GpSimd}, elems));
            return;
        case Op::binary_scalar:
            kb.tensor_scalar_ex(dst, args[0], ops::alu_of(static_cast<ops::Binary>(s.i0)), s.f0, nullptr, AluOp::bypass, 0.0f,
                                nullptr, s.i1 ? F_REVERSE0 : 0, engines.pick({Engine::Vector, Engine::GpSimd}, elems));
            return;
        case Op::where:
            kb.select(dst, args[0], args[1], args[2], engines.pick({Engine::Vector, Engine::GpSimd}, elems));
            return;
        case Op::copy:
            kb.tensor_copy(dst, args[0], engines.pick({Engine::Vector, Engine::Scalar, Engine::GpSimd}, elems));
            return;
        default: break;
    }
    throw CompileError(std::string("fused step: ") + op_name(s.op) + " cannot be fused");
}

}  // namespace trnsim::compiler
