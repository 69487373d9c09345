// Shared pieces of the integer kernels (integer.cpp, integer_reduce.cpp): dtype checks and the
// GpSimd integer instructions as KernelBuilder emits them.
#pragma once
#include <string>

#include "trnsim/ops/integer.h"
#include "trnsim/tiling.h"

namespace trnsim::ops::int_detail {

inline void check_int(const std::string& op, const TensorDesc& t, const char* name) {
    if (!is_int_dtype(t.dtype))
        tiling::fail(op, std::string(name) + " dtype " + dtype_name(t.dtype) + " is not an integer or boolean dtype");
}

// A GpSimd integer instruction of 'opcode' computing op from src into dst.
inline Instruction int_instruction(Opcode opcode, IntOp op, const AccessPattern& dst, const AccessPattern& src) {
    Instruction ins;
    ins.op = opcode;
    ins.engine = Engine::GpSimd;
    ins.iop = op;
    ins.dst = dst;
    ins.src0 = src;
    return ins;
}

// One int_alu: dst = a op (b, or imm when b is null); select reads b and c (either may be null:
// then imm stands for it).
inline void emit_int_alu(KernelBuilder& kb, IntOp op, const AccessPattern& dst, const AccessPattern& a,
                         const AccessPattern* b, int64_t imm, const AccessPattern* c = nullptr) {
    Instruction ins = int_instruction(Opcode::int_alu, op, dst, a);
    ins.imm_int = imm;
    if (b) ins.src1 = *b, ins.flags |= F_S0_AP;
    if (c) ins.src2 = *c, ins.flags |= F_S1_AP;
    kb.emit(ins);
}

// One int_reduce over the innermost free dim of src.
inline void emit_int_reduce(KernelBuilder& kb, IntOp op, const AccessPattern& dst, const AccessPattern& src) {
    Instruction ins = int_instruction(Opcode::int_reduce, op, dst, src);
    ins.reduce_ndim = 1;
    kb.emit(ins);
}

// One int_scan along each partition's row; the running value starts at init, or at the [P,1]
// values of *carry (a previous chunk's last column).
inline void emit_int_scan(KernelBuilder& kb, IntOp op, const AccessPattern& dst, const AccessPattern& src, int64_t init,
                          const AccessPattern* carry) {
    Instruction ins = int_instruction(Opcode::int_scan, op, dst, src);
    ins.imm_int = init;
    if (carry) ins.src1 = *carry, ins.flags |= F_S1_AP;
    kb.emit(ins);
}

}  // namespace trnsim::ops::int_detail
