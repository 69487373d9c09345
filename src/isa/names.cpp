// Names of the ISA's enums and the opcode table generated from instructions.def.
#include <stdexcept>

#include "trnsim/isa.h"

namespace trnsim {

namespace {
// Operand declarations of instructions.def as OperandInfo values.
#define IN(slot, mem, role) OperandInfo{OperandSlot::slot, WHEN_ALWAYS, WHEN_NEVER, mem, role}
#define IN_IF(slot, when, mem, role) OperandInfo{OperandSlot::slot, when, WHEN_NEVER, mem, role}
#define OUT(slot, mem, role) OperandInfo{OperandSlot::slot, WHEN_NEVER, WHEN_ALWAYS, mem, role}
#define OUT_IF(slot, when, mem, role) OperandInfo{OperandSlot::slot, WHEN_NEVER, when, mem, role}
#define OUT_READS_IF(slot, when, mem, role) OperandInfo{OperandSlot::slot, when, WHEN_ALWAYS, mem, role}
#define INOUT(slot, mem, role) OperandInfo{OperandSlot::slot, WHEN_ALWAYS, WHEN_ALWAYS, mem, role}

template <typename... Ops>
constexpr OpcodeInfo make_info(const char* name, uint32_t engines, WorkKind work, CostKind cost,
                               const char* summary, Ops... ops) {
    static_assert(sizeof...(Ops) <= kMaxOperandSlots, "more operands than slots");
    return OpcodeInfo{name, engines, work, cost, summary, static_cast<int>(sizeof...(Ops)), {ops...}};
}

constexpr OpcodeInfo kOpcodeTable[] = {
#define ISA_INSTR(name, engines, work, cost, summary, ...) \
    make_info(#name, engines, WorkKind::work, CostKind::cost, summary __VA_OPT__(, ) __VA_ARGS__),
#include "trnsim/instructions.def"
#undef ISA_INSTR
};
#undef IN
#undef IN_IF
#undef OUT
#undef OUT_IF
#undef OUT_READS_IF
#undef INOUT
static_assert(sizeof(kOpcodeTable) / sizeof(kOpcodeTable[0]) == static_cast<size_t>(Opcode::count_));

// No slot is declared twice for one opcode.
constexpr bool slots_unique(const OpcodeInfo& info) {
    for (int i = 0; i < info.num_operands; ++i)
        for (int j = i + 1; j < info.num_operands; ++j)
            if (info.operands[i].slot == info.operands[j].slot) return false;
    return true;
}
constexpr bool all_slots_unique() {
    for (const OpcodeInfo& info : kOpcodeTable)
        if (!slots_unique(info)) return false;
    return true;
}
static_assert(all_slots_unique(), "instructions.def declares an operand slot twice");

const char* const kSlotNames[] = {"dst", "src0", "src1", "src2", "acc"};
static_assert(sizeof(kSlotNames) / sizeof(kSlotNames[0]) == static_cast<size_t>(OperandSlot::count_));

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

const char* const kIntOpNames[] = {
    "add",         "sub",        "mul",         "div_trunc", "div_floor", "remainder", "fmod",   "max",
    "min",         "eq",         "ne",          "lt",        "le",        "gt",        "ge",     "bit_and",
    "bit_or",      "bit_xor",    "shl",         "shr",       "logical_and", "logical_or", "logical_xor",
    "copy",        "neg",        "abs",         "bit_not",   "logical_not", "sign",    "select", "argmax",
    "argmin"};
static_assert(sizeof(kIntOpNames) / sizeof(kIntOpNames[0]) == static_cast<size_t>(IntOp::count_));
}  // namespace

const OpcodeInfo& opcode_info(Opcode op) {
    auto i = static_cast<size_t>(op);
    if (i >= static_cast<size_t>(Opcode::count_)) throw std::out_of_range("opcode_info: bad opcode");
    return kOpcodeTable[i];
}
const char* opcode_name(Opcode op) { return opcode_info(op).name; }
const char* operand_slot_name(OperandSlot s) { return kSlotNames[static_cast<size_t>(s)]; }

const OperandInfo* OpcodeInfo::operand(OperandSlot s) const {
    for (int i = 0; i < num_operands; ++i)
        if (operands[i].slot == s) return &operands[i];
    return nullptr;
}
bool OpcodeInfo::reads(OperandSlot s) const {
    const OperandInfo* d = operand(s);
    return d && d->reads_when != WHEN_NEVER;
}
const char* act_func_name(ActFunc f) { return kActNames[static_cast<size_t>(f)]; }
const char* alu_op_name(AluOp op) { return kAluNames[static_cast<size_t>(op)]; }
const char* reduce_op_name(ReduceOp op) { return kReduceNames[static_cast<size_t>(op)]; }
const char* int_op_name(IntOp op) {
    const auto i = static_cast<size_t>(op);
    return i < static_cast<size_t>(IntOp::count_) ? kIntOpNames[i] : "?";
}

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
