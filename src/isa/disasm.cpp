// Text form of instructions and programs, one instruction per line:
//   [tensor] nc_matmul psum.f32[p0+128 @0, 512:1] <- sbuf.bf16[...], sbuf.bf16[...] accumulate wait(q5>=3) signal(s64)
// Corrupt enum values print as "<kind>?<number>" instead of failing, so that a
// listing can show the instruction validate() rejected.
#include <iomanip>
#include <sstream>

#include "trnsim/isa.h"

// A switch over Opcode, WorkKind or CostKind without a case for every value does not build.
#pragma GCC diagnostic error "-Wswitch"

namespace trnsim {

namespace {

template <typename E>
bool in_range(E v) {
    return static_cast<size_t>(v) < static_cast<size_t>(E::count_);
}

std::string unknown(const char* kind, unsigned v) { return std::string(kind) + "?" + std::to_string(v); }

std::string op_text(Opcode op) { return in_range(op) ? opcode_name(op) : unknown("opcode", unsigned(op)); }
std::string func_text(ActFunc f) { return in_range(f) ? act_func_name(f) : unknown("func", unsigned(f)); }
std::string alu_text(AluOp op) { return in_range(op) ? alu_op_name(op) : unknown("alu", unsigned(op)); }
std::string reduce_text(ReduceOp r) { return in_range(r) ? reduce_op_name(r) : unknown("reduce", unsigned(r)); }

std::string ap_text(const AccessPattern& ap) {
    if (static_cast<unsigned>(ap.space) > static_cast<unsigned>(MemSpace::PSUM) || !in_range(ap.dtype) ||
        ap.ndim > kMaxFreeDims)
        return "<corrupt access pattern>";
    return format_ap(ap);
}

// The queue, prefixed by its physical core ("c1.") beyond the first.
std::string engine_text(const Instruction& ins) {
    const std::string core = ins.core ? "c" + std::to_string(ins.core) + "." : "";
    if (ins.engine == Engine::DMA) return core + "dma" + std::to_string(ins.dma_queue);
    if (static_cast<unsigned>(ins.engine) > static_cast<unsigned>(Engine::DMA))
        return unknown("engine", unsigned(ins.engine));
    return core + engine_name(ins.engine);
}

// Semaphores below kMaxQueues count a queue's completed instructions ("q"),
// the others are user semaphores ("s").
std::string sem_text(uint32_t sem) { return (sem < kMaxQueues ? "q" : "s") + std::to_string(sem); }

std::string affine_text(const Affine& a, int ndim) {
    std::ostringstream os;
    os << "affine(" << a.base << " + " << a.partition_mul << "*p";
    for (int k = 0; k < ndim && k < kMaxFreeDims; ++k) os << " + " << a.free_mul[k] << "*i" << k;
    os << ")";
    return os.str();
}

std::string num_text(float v) {
    std::ostringstream os;
    os << v;
    return os.str();
}

// The instruction's own fields (functions, ALU ops, immediates an operand flag does not
// replace), after its name. Operands come after, from the operand table.
void write_fields(std::ostringstream& os, const Instruction& ins) {
    const auto flag = [&](uint32_t f) { return (ins.flags & f) != 0; };
    switch (ins.op) {
        case Opcode::nc_matmul:
            if (flag(F_ACCUMULATE)) os << " accumulate";
            return;
        case Opcode::activation:
            os << " " << func_text(ins.func);
            if (!flag(F_SCALE_AP)) os << " scale=" << num_text(ins.imm0);
            if (!flag(F_BIAS_AP)) os << " bias=" << num_text(ins.imm1);
            if (ins.reduce != ReduceOp::none) os << " reduce=" << reduce_text(ins.reduce);
            return;
        case Opcode::tensor_tensor: os << " " << alu_text(ins.alu0); return;
        case Opcode::tensor_scalar:
            os << " op0=" << alu_text(ins.alu0);
            if (!flag(F_S0_AP)) os << " s0=" << num_text(ins.imm0);
            if (flag(F_REVERSE0)) os << " reverse0";
            if (ins.alu1 != AluOp::bypass) {
                os << " op1=" << alu_text(ins.alu1);
                if (!flag(F_S1_AP)) os << " s1=" << num_text(ins.imm1);
                if (flag(F_REVERSE1)) os << " reverse1";
            }
            if (ins.reduce != ReduceOp::none) os << " reduce=" << reduce_text(ins.reduce);
            return;
        case Opcode::scalar_tensor_tensor:
            os << " op0=" << alu_text(ins.alu0);
            if (!flag(F_S0_AP)) os << " s0=" << num_text(ins.imm0);
            if (flag(F_REVERSE0)) os << " reverse0";
            os << " op1=" << alu_text(ins.alu1);
            if (flag(F_REVERSE1)) os << " reverse1";
            return;
        case Opcode::tensor_tensor_scan:
            os << " op0=" << alu_text(ins.alu0) << " op1=" << alu_text(ins.alu1);
            if (!flag(F_S1_AP)) os << " initial=" << num_text(ins.imm0);
            return;
        case Opcode::tensor_reduce: os << " " << reduce_text(ins.reduce) << " dims=" << int(ins.reduce_ndim); return;
        case Opcode::tensor_partition_reduce: os << " " << reduce_text(ins.reduce); return;
        case Opcode::memset: os << " value=" << num_text(ins.imm0); return;
        case Opcode::iota: os << " " << affine_text(ins.affine, ins.dst.ndim); return;
        case Opcode::affine_select:
            os << " " << affine_text(ins.affine, ins.dst.ndim) << " " << alu_text(ins.alu0) << " 0 else="
               << num_text(ins.imm0);
            return;
        case Opcode::select:
            if (!flag(F_S1_AP)) os << " else=" << num_text(ins.imm0);
            if (ins.reduce != ReduceOp::none) os << " reduce=" << reduce_text(ins.reduce);
            return;
        case Opcode::nc_match_replace8: os << " replace=" << num_text(ins.imm0); return;
        case Opcode::int_alu:
            os << " " << int_op_name(ins.iop);
            if (!flag(F_S0_AP)) os << " imm=" << ins.imm_int;
            return;
        case Opcode::int_reduce: os << " " << int_op_name(ins.iop) << " dims=" << int(ins.reduce_ndim); return;
        case Opcode::int_scan:
            os << " " << int_op_name(ins.iop);
            if (!flag(F_S1_AP)) os << " initial=" << ins.imm_int;
            return;
        case Opcode::dma_copy:
        case Opcode::dma_transpose:
        case Opcode::nc_transpose:
        case Opcode::tensor_copy:
        case Opcode::dma_gather:
        case Opcode::dma_scatter_add:
        case Opcode::dma_scatter:
        case Opcode::max8:
        case Opcode::nc_find_index8:
        case Opcode::bn_stats:
        case Opcode::bn_aggr:
        case Opcode::barrier:
        case Opcode::count_: return;
    }
}

// "dst[, acc=...] <- src0, role=src1, ...": what the instruction writes, then what it reads (a
// read-modify-write operand appears on both sides); operands with a role carry its name.
void write_operands(std::ostringstream& os, const Instruction& ins) {
    std::string writes, reads;
    for_each_operand(ins, [&](const OperandInfo& d, const AccessPattern& ap) {
        const bool has_role = d.role && *d.role;
        const bool named = has_role || (d.slot != OperandSlot::dst && d.slot != OperandSlot::src0);
        const std::string text =
            (named ? std::string(has_role ? d.role : operand_slot_name(d.slot)) + "=" : "") + ap_text(ap);
        if (operand_writes(ins, d)) writes += (writes.empty() ? " " : ", ") + text;
        if (operand_reads(ins, d)) reads += (reads.empty() ? "" : ", ") + text;
    });
    if (!writes.empty()) os << writes;
    if (!reads.empty()) os << " <- " << reads;
}

}  // namespace

std::string disassemble(const Instruction& ins) {
    std::ostringstream os;
    os << "[" << engine_text(ins) << "] " << op_text(ins.op);
    if (in_range(ins.op)) {
        write_fields(os, ins);
        write_operands(os, ins);
    }
    if (ins.flags & F_DEPENDS_ON_PREV) os << " depends_on_prev";
    if (ins.num_waits > 0) {
        os << " wait(";
        for (int i = 0; i < ins.num_waits && i < kMaxWaits; ++i)
            os << (i ? ", " : "") << sem_text(ins.waits[i].sem) << ">=" << ins.waits[i].value;
        if (ins.num_waits > kMaxWaits) os << ", ?" << int(ins.num_waits) << " waits";
        os << ")";
    }
    if (ins.signal >= 0) os << " signal(" << sem_text(static_cast<uint32_t>(ins.signal)) << ")";
    return os.str();
}

std::string disassemble(const Program& prog) {
    std::ostringstream os;
    os << "program " << (prog.name.empty() ? "<unnamed>" : prog.name) << ": " << prog.instrs.size()
       << " instructions\n";
    const int width = static_cast<int>(std::to_string(prog.instrs.empty() ? 0 : prog.instrs.size() - 1).size());
    for (size_t i = 0; i < prog.instrs.size(); ++i) {
        const Instruction& ins = prog.instrs[i];
        os << std::setw(width) << i << ": " << disassemble(ins);
        if (ins.tag < prog.tag_names.size() && !prog.tag_names[ins.tag].empty())
            os << "  # " << prog.tag_names[ins.tag];
        else if (ins.tag != 0)
            os << "  # tag " << ins.tag;
        os << "\n";
    }
    return os.str();
}

}  // namespace trnsim
