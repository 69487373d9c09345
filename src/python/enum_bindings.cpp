// The enums of the C++ core as Python enums (py::enum_), so that Python code names their values
// instead of copying their orders: the ISA's (trnsim._core.Opcode, ActFunc, AluOp, ReduceOp, DType,
// Engine, MemSpace, named by the ISA's own name functions) and the operator library's codes that
// the compiler's IR carries in Node::i0 (trnsim._core.ops.Unary, Binary, Reduce, ActivationGrad).
#include <pybind11/pybind11.h>

#include "trnsim/isa.h"
#include "trnsim/ops.h"

namespace py = pybind11;

namespace trnsim {
namespace {

// Values 0..count-1 of E, each named name(value).
template <class E, class NameFn>
void bind_counted(py::module_& m, const char* enum_name, int count, NameFn name) {
    py::enum_<E> e(m, enum_name);
    for (int i = 0; i < count; ++i) e.value(name(static_cast<E>(i)), static_cast<E>(i));
}

}  // namespace

void register_enum_bindings(py::module_& m) {
    bind_counted<Opcode>(m, "Opcode", int(Opcode::count_), opcode_name);
    bind_counted<ActFunc>(m, "ActFunc", int(ActFunc::count_), act_func_name);
    bind_counted<AluOp>(m, "AluOp", int(AluOp::count_), alu_op_name);
    bind_counted<ReduceOp>(m, "ReduceOp", int(ReduceOp::count_), reduce_op_name);
    bind_counted<DType>(m, "DType", int(DType::count_), dtype_name);
    bind_counted<Engine>(m, "Engine", int(Engine::DMA) + 1, engine_name);
    bind_counted<MemSpace>(m, "MemSpace", 3, mem_space_name);

    // The operator library's enums have no name functions: each value is named here once, by
    // its enumerator (a renamed or removed enumerator does not build).
    py::module_ ops = m.def_submodule("ops", "Enums of the operator library (include/trnsim/ops/*.h)");
    using ops::ActivationGrad;
    using ops::Binary;
    using ops::Reduce;
    using ops::Unary;
    py::enum_<Unary>(ops, "Unary")
        .value("identity", Unary::identity).value("neg", Unary::neg).value("abs", Unary::abs)
        .value("exp", Unary::exp).value("log", Unary::log).value("sqrt", Unary::sqrt).value("rsqrt", Unary::rsqrt)
        .value("reciprocal", Unary::reciprocal).value("sigmoid", Unary::sigmoid).value("tanh", Unary::tanh)
        .value("relu", Unary::relu).value("gelu", Unary::gelu).value("gelu_tanh", Unary::gelu_tanh)
        .value("silu", Unary::silu).value("sin", Unary::sin).value("cos", Unary::cos).value("erf", Unary::erf)
        .value("square", Unary::square).value("sign", Unary::sign).value("softplus", Unary::softplus)
        .value("logical_not", Unary::logical_not);
    py::enum_<Binary>(ops, "Binary")
        .value("add", Binary::add).value("sub", Binary::sub).value("mul", Binary::mul).value("div", Binary::div)
        .value("maximum", Binary::maximum).value("minimum", Binary::minimum).value("pow", Binary::pow)
        .value("fmod", Binary::fmod).value("eq", Binary::eq).value("ne", Binary::ne).value("lt", Binary::lt)
        .value("le", Binary::le).value("gt", Binary::gt).value("ge", Binary::ge)
        .value("logical_and", Binary::logical_and).value("logical_or", Binary::logical_or)
        .value("logical_xor", Binary::logical_xor).value("bitwise_and", Binary::bitwise_and)
        .value("bitwise_or", Binary::bitwise_or).value("bitwise_xor", Binary::bitwise_xor);
    py::enum_<Reduce>(ops, "Reduce")
        .value("sum", Reduce::sum).value("mean", Reduce::mean).value("max", Reduce::max).value("min", Reduce::min);
    py::enum_<ActivationGrad>(ops, "ActivationGrad")
        .value("gelu", ActivationGrad::gelu).value("gelu_tanh", ActivationGrad::gelu_tanh)
        .value("silu", ActivationGrad::silu).value("sigmoid", ActivationGrad::sigmoid)
        .value("tanh", ActivationGrad::tanh).value("threshold", ActivationGrad::threshold);
}

}  // namespace trnsim
