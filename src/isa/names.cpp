// Names of the ISA's enums and the opcode table generated from instructions.def.
#include <stdexcept>

#include "trnsim/isa.h"

namespace trnsim {

namespace {
const OpcodeInfo kOpcodeTable[] = {
#define ISA_INSTR(name, engines, nsrc, writes_acc, summary) {#name, engines, nsrc, writes_acc, summary},
#include "trnsim/instructions.def"
#undef ISA_INSTR
};
static_assert(sizeof(kOpcodeTable) / sizeof(kOpcodeTable[0]) == static_cast<size_t>(Opcode::count_));

const char* const kActNames[] = {"identity", "exp",  "log",  "tanh",      "sigmoid", "gelu", "gelu_tanh",
                                 "silu",     "relu", "rsqrt", "sqrt",     "square",  "reciprocal",
                                 "abs",      "neg",  "sin",  "cos",       "erf",     "softplus", "sign",
                                 "gelu_dx",  "gelu_tanh_dx", "silu_dx"};
static_assert(sizeof(kActNames) / sizeof(kActNames[0]) == static_cast<size_t>(ActFunc::count_));

const char* const kAluNames[] = {"bypass",      "add",        "sub",         "mul",         "div",
                                 "max",         "min",        "pow",         "mod",         "eq",
                                 "ne",          "lt",         "le",          "gt",          "ge",
                                 "logical_and", "logical_or", "logical_xor", "bitwise_and", "bitwise_or",
                                 "bitwise_xor", "abs_max"};
static_assert(sizeof(kAluNames) / sizeof(kAluNames[0]) == static_cast<size_t>(AluOp::count_));

const char* const kReduceNames[] = {"none", "add", "max", "min"};
static_assert(sizeof(kReduceNames) / sizeof(kReduceNames[0]) == static_cast<size_t>(ReduceOp::count_));
}  // namespace

const OpcodeInfo& opcode_info(Opcode op) {
    auto i = static_cast<size_t>(op);
    if (i >= static_cast<size_t>(Opcode::count_)) throw std::out_of_range("opcode_info: bad opcode");
    return kOpcodeTable[i];
}
const char* opcode_name(Opcode op) { return opcode_info(op).name; }
const char* act_func_name(ActFunc f) { return kActNames[static_cast<size_t>(f)]; }
const char* alu_op_name(AluOp op) { return kAluNames[static_cast<size_t>(op)]; }
const char* reduce_op_name(ReduceOp op) { return kReduceNames[static_cast<size_t>(op)]; }

const char* mem_space_name(MemSpace s) {
    switch (s) {
        case MemSpace::HBM: return "hbm";
        case MemSpace::SBUF: return "sbuf";
        case MemSpace::PSUM: return "psum";
    }
    return "?";
}

const char* engine_name(Engine e) {
    switch (e) {
        case Engine::Tensor: return "tensor";
        case Engine::Vector: return "vector";
        case Engine::Scalar: return "scalar";
        case Engine::GpSimd: return "gpsimd";
        case Engine::Sync: return "sync";
        case Engine::DMA: return "dma";
    }
    return "?";
}

}  // namespace trnsim
