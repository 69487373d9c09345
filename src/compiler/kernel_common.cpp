// One fused step as ISA instructions, and the engine balancer of the fused kernels.
#include "kernel_common.h"

#include "trnsim/sim.h"
#include "trnsim/tiling.h"

namespace trnsim::compiler {

namespace {

bool in_psum(const AccessPattern& ap) { return ap.space == MemSpace::PSUM; }

ActFunc act_for(ops::Unary u) {
    if (std::optional<ActFunc> f = ops::activation_of(u)) return *f;
    throw CompileError("fused step: unary op " + std::to_string(static_cast<int>(u)) + " has no activation function");
}

// grad_in = grad_out * f'(x) with the instructions of ops::activation_backward (same rounding):
// the derivative (or mask) in an fp32 scratch tile t, then one product (or select) into dst.
void emit_activation_backward(KernelBuilder& kb, EngineBalancer& engines, ops::ActivationGrad op, float threshold,
                              const AccessPattern& dst, const AccessPattern& g, const AccessPattern& x,
                              const AccessPattern& t) {
    const uint64_t elems = dst.free_elems();
    const bool psum = in_psum(dst) || in_psum(g) || in_psum(x) || in_psum(t);
    auto alu = [&] { return engines.pick({Engine::Vector, Engine::GpSimd}, elems, psum); };
    auto act = [&](const AccessPattern& out, const AccessPattern& in, ActFunc f) {
        engines.pick({Engine::Scalar}, elems);
        kb.activation(out, in, f);
    };
    switch (op) {
        case ops::ActivationGrad::gelu: act(t, x, ActFunc::gelu_dx); break;
        case ops::ActivationGrad::gelu_tanh: act(t, x, ActFunc::gelu_tanh_dx); break;
        case ops::ActivationGrad::silu: act(t, x, ActFunc::silu_dx); break;
        case ops::ActivationGrad::sigmoid:   // y * (1 - y)
            kb.tensor_scalar(t, x, AluOp::mul, -1.0f, AluOp::add, 1.0f, alu());
            kb.tensor_tensor(t, t, x, AluOp::mul, alu());
            break;
        case ops::ActivationGrad::tanh:   // 1 - y^2
            act(t, x, ActFunc::square);
            kb.tensor_scalar(t, t, AluOp::mul, -1.0f, AluOp::add, 1.0f, alu());
            break;
        case ops::ActivationGrad::threshold:   // x > threshold ? g : 0
            kb.tensor_scalar(t, x, AluOp::gt, threshold, AluOp::bypass, 0.0f, alu());
            tiling::select_imm(kb, dst, t, g, 0.0f, alu());
            return;
        default:
            throw CompileError("fused step: activation_backward kind " + std::to_string(static_cast<int>(op)) +
                               " cannot be fused");
    }
    kb.tensor_tensor(dst, t, g, AluOp::mul, alu());
}



}  // namespace

Engine EngineBalancer::pick(std::initializer_list<Engine> allowed, uint64_t elems, bool touches_psum) {
    Engine best = *allowed.begin();
    double best_end = 0;
    bool first = true;
    for (Engine e : allowed) {
        if (touches_psum && e == Engine::GpSimd) continue;
        const double end =
            busy_ns_[static_cast<int>(e)] + estimate_stream_ns(stream_engine_config(chip_, e), static_cast<double>(elems), 1, 1);
        if (first || end < best_end) best = e, best_end = end, first = false;
    }
    busy_ns_[static_cast<int>(best)] = best_end;
    return best;
}

AccessPattern with_dtype(AccessPattern ap, DType dt) {
    ap.dtype = dt;
    return ap;
}

bool step_needs_scratch(const Step& s) { return s.op == Op::activation_backward; }

void emit_step(KernelBuilder& kb, EngineBalancer& engines, const Step& s, const AccessPattern& dst,
               const std::vector<AccessPattern>& args, const AccessPattern* scratch) {
    const uint64_t elems = dst.free_elems();
    bool psum = in_psum(dst);
    for (const AccessPattern& a : args) psum = psum || in_psum(a);
    if (step_needs_scratch(s) && !scratch)
        throw CompileError(std::string("fused step: ") + op_name(s.op) + " needs a scratch tile");
    switch (s.op) {
        case Op::unary:
            engines.pick({Engine::Scalar}, elems);
            kb.activation(dst, args[0], act_for(static_cast<ops::Unary>(s.i0)));
            return;
        case Op::binary:
            kb.tensor_tensor(dst, args[0], args[1], ops::alu_of(static_cast<ops::Binary>(s.i0)),
                             engines.pick({Engine::Vector, Engine::GpSimd}, elems, psum));
            return;
        case Op::binary_scalar:
            kb.tensor_scalar_ex(dst, args[0], ops::alu_of(static_cast<ops::Binary>(s.i0)), s.f0, nullptr, AluOp::bypass, 0.0f,
                                nullptr, s.i1 ? F_REVERSE0 : 0, engines.pick({Engine::Vector, Engine::GpSimd}, elems, psum));
            return;
        case Op::where:
            kb.select(dst, args[0], args[1], args[2], engines.pick({Engine::Vector, Engine::GpSimd}, elems, psum));
            return;
        case Op::copy:
            kb.tensor_copy(dst, args[0], engines.pick({Engine::Vector, Engine::Scalar, Engine::GpSimd}, elems, psum));
            return;
        case Op::activation_backward:
            emit_activation_backward(kb, engines, static_cast<ops::ActivationGrad>(s.i0), s.f0, dst, args[0], args[1],
                                     *scratch);
            return;
        default: break;
    }
    throw CompileError(std::string("fused step: ") + op_name(s.op) + " cannot be fused");
}

}  // namespace trnsim::compiler
