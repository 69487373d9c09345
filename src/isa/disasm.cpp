// Text form of instructions and programs, one instruction per line:
//   [tensor] nc_matmul psum.f32[p0+128 @0, 512:1] <- sbuf.bf16[...], sbuf.bf16[...] accumulate wait(q5>=3) signal(s64)
// Corrupt enum values print as "<kind>?<number>" instead of failing, so that a
// listing can show the instruction validate() rejected.
#include <iomanip>
#include <sstream>

#include "trnsim/isa.h"

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

std::string engine_text(const Instruction& ins) {
    if (ins.engine == Engine::DMA) return "dma" + std::to_string(ins.dma_queue);
    if (static_cast<unsigned>(ins.engine) > static_cast<unsigned>(Engine::DMA))
        return unknown("engine", unsigned(ins.engine));
    return engine_name(ins.engine);
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

// A scalar operand: the per-partition AP when its flag is set, else the immediate.
std::string scalar_text(bool from_ap, const AccessPattern& ap, float imm) {
    if (from_ap) return ap_text(ap);
    std::ostringstream os;
    os << imm;
    return os.str();
}

void write_operands(std::ostringstream& os, const Instruction& ins) {
    const bool ap1 = ins.flags & F_SCALE_AP, ap2 = ins.flags & F_BIAS_AP;
    switch (ins.op) {
        case Opcode::dma_copy:
        case Opcode::dma_transpose:
        case Opcode::nc_transpose:
        case Opcode::tensor_copy: os << " " << ap_text(ins.dst) << " <- " << ap_text(ins.src0); break;
        case Opcode::dma_gather:
        case Opcode::dma_scatter_add:
            os << " " << ap_text(ins.dst) << (ins.op == Opcode::dma_gather ? " <- " : " += ") << ap_text(ins.src0)
               << " indices " << ap_text(ins.src1);
            break;
        case Opcode::nc_matmul:
            os << " " << ap_text(ins.dst) << " <- " << ap_text(ins.src0) << ", " << ap_text(ins.src1);
            if (ins.flags & F_ACCUMULATE) os << " accumulate";
            break;
        case Opcode::activation:
            os << " " << func_text(ins.func) << " " << ap_text(ins.dst) << " <- " << ap_text(ins.src0)
               << " scale=" << scalar_text(ap1, ins.src1, ins.imm0)
               << " bias=" << scalar_text(ap2, ins.src2, ins.imm1);
            if (ins.reduce != ReduceOp::none)
                os << " reduce=" << reduce_text(ins.reduce) << " acc=" << ap_text(ins.acc);
            break;
        case Opcode::tensor_tensor:
            os << " " << alu_text(ins.alu0) << " " << ap_text(ins.dst) << " <- " << ap_text(ins.src0) << ", "
               << ap_text(ins.src1);
            break;
        case Opcode::tensor_scalar:
            os << " " << ap_text(ins.dst) << " <- " << ap_text(ins.src0) << " op0=" << alu_text(ins.alu0)
               << " s0=" << scalar_text(ins.flags & F_S0_AP, ins.src1, ins.imm0);
            if (ins.flags & F_REVERSE0) os << " reverse0";
            if (ins.alu1 != AluOp::bypass) {
                os << " op1=" << alu_text(ins.alu1) << " s1=" << scalar_text(ins.flags & F_S1_AP, ins.src2, ins.imm1);
                if (ins.flags & F_REVERSE1) os << " reverse1";
            }
            break;
        case Opcode::tensor_reduce:
            os << " " << reduce_text(ins.reduce) << " dims=" << int(ins.reduce_ndim) << " " << ap_text(ins.dst)
               << " <- " << ap_text(ins.src0);
            break;
        case Opcode::memset: os << " " << ap_text(ins.dst) << " <- " << ins.imm0; break;
        case Opcode::iota: os << " " << ap_text(ins.dst) << " <- " << affine_text(ins.affine, ins.dst.ndim); break;
        case Opcode::affine_select:
            os << " " << ap_text(ins.dst) << " <- " << affine_text(ins.affine, ins.dst.ndim) << " "
               << alu_text(ins.alu0) << " 0 ? " << ap_text(ins.src0) << " : " << ins.imm0;
            break;
        case Opcode::select:
            os << " " << ap_text(ins.dst) << " <- " << ap_text(ins.src0) << " ? " << ap_text(ins.src1) << " : "
               << scalar_text(ins.flags & F_S1_AP, ins.src2, ins.imm0);
            break;
        case Opcode::max8: os << " " << ap_text(ins.dst) << " <- " << ap_text(ins.src0); break;
        case Opcode::nc_find_index8:
            os << " " << ap_text(ins.dst) << " <- " << ap_text(ins.src0) << " values " << ap_text(ins.src1);
            break;
        case Opcode::nc_match_replace8:
            os << " " << ap_text(ins.dst) << " <- " << ap_text(ins.src0) << " values " << ap_text(ins.src1)
               << " := " << ins.imm0;
            if (ins.flags & F_ACC_OUT) os << " indices=" << ap_text(ins.acc);
            break;
        case Opcode::barrier:
        case Opcode::count_: break;
    }
}

}  // namespace

std::string disassemble(const Instruction& ins) {
    std::ostringstream os;
    os << "[" << engine_text(ins) << "] " << op_text(ins.op);
    if (in_range(ins.op)) write_operands(os, ins);
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
