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

// One int_alu: dst = a op (b, or imm when b is null); select reads b and c (either may be null:
// then imm stands for it).
inline void emit_int_alu(KernelBuilder& kb, IntOp op, const AccessPattern& dst, const AccessPattern& a,
                         const AccessPattern* b, int64_t imm, const AccessPattern* c = nullptr) {
    Instruction ins;
    ins.op = Opcode::int_alu;
    ins.engine = Engine::GpSimd;
    ins.iop = op;
    ins.dst = dst;
    ins.src0 = a;
    ins.imm_int = imm;
    if (b) ins.src1 = *b, ins.flags |= F_S0_AP;
    if (c) ins.src2 = *c, ins.flags |= F_S1_AP;
    kb.emit(ins);
}

// One int_reduce over the innermost free dim of src.
inline void emit_int_reduce(KernelBuilder& kb, IntOp op, const AccessPattern& dst, const AccessPattern& src) {
    Instruction ins;
    ins.op = Opcode::int_reduce;
    ins.engine = Engine::GpSimd;
    ins.iop = op;
    ins.reduce_ndim = 1;
    ins.dst = dst;
    ins.src0 = src;
    kb.emit(ins);
}

}  // namespace trnsim::ops::int_detail
