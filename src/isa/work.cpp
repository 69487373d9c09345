// Operand slots and conditions of the operand model, and the useful work of an instruction as
// the profiler counts it, both read off the instructions.def table.
#include <string>

#include "trnsim/isa.h"

// A switch over Opcode, WorkKind or CostKind without a case for every value does not build.
#pragma GCC diagnostic error "-Wswitch"

namespace trnsim {

namespace {
void require_valid_opcode(const Instruction& ins, const char* what) {
    if (static_cast<size_t>(ins.op) >= static_cast<size_t>(Opcode::count_))
        throw IsaError(std::string(what) + ": invalid opcode " + std::to_string(static_cast<int>(ins.op)));
}

bool holds(uint32_t when, const Instruction& ins) {
    if (when & WHEN_ALWAYS) return true;
    if ((when & WHEN_REDUCE) && ins.reduce != ReduceOp::none) return true;
    return (when & ins.flags & ~(WHEN_ALWAYS | WHEN_REDUCE)) != 0;
}
}  // namespace

const AccessPattern& operand(const Instruction& ins, OperandSlot s) {
    switch (s) {
        case OperandSlot::dst: return ins.dst;
        case OperandSlot::src0: return ins.src0;
        case OperandSlot::src1: return ins.src1;
        case OperandSlot::src2: return ins.src2;
        case OperandSlot::acc:
        case OperandSlot::count_: break;
    }
    return ins.acc;
}
AccessPattern& operand(Instruction& ins, OperandSlot s) {
    return const_cast<AccessPattern&>(operand(static_cast<const Instruction&>(ins), s));
}

bool operand_reads(const Instruction& ins, const OperandInfo& d) { return holds(d.reads_when, ins); }
bool operand_writes(const Instruction& ins, const OperandInfo& d) { return holds(d.writes_when, ins); }

bool writes_acc(const Instruction& ins) {
    require_valid_opcode(ins, "writes_acc");
    const OperandInfo* acc = opcode_info(ins.op).operand(OperandSlot::acc);
    return acc && operand_writes(ins, *acc);
}

// Floating-point (or integer ALU) operations: 2*K*M*N for a matmul, one per
// output element for elementwise work (two for a two-op tensor_scalar), one per
// input element for a reduction. Pure data movement (DMA, transposes, memset,
// iota) and barriers do no arithmetic and count 0.
uint64_t instruction_flops(const Instruction& ins) {
    require_valid_opcode(ins, "instruction_flops");
    switch (opcode_info(ins.op).work) {
        case WorkKind::matmul:
            return 2 * static_cast<uint64_t>(ins.src0.partitions) * ins.src0.free_elems() * ins.src1.free_elems();
        case WorkKind::per_output: return ins.dst.elems();
        case WorkKind::per_output_stage: return ins.dst.elems() * (ins.alu1 != AluOp::bypass ? 2 : 1);
        case WorkKind::per_input: return ins.src0.elems();
        case WorkKind::none: return 0;
    }
    return 0;
}

// Bytes a DMA moves to or from HBM: each HBM side counts (an HBM-to-HBM copy
// reads and writes). Compute engines never touch HBM.
uint64_t instruction_hbm_bytes(const Instruction& ins) {
    require_valid_opcode(ins, "instruction_hbm_bytes");
    switch (opcode_info(ins.op).cost) {
        case CostKind::dma_indirect: {
            // The rows moved, on each HBM side; a scatter-add reads and writes its table rows.
            const bool gather = ins.op == Opcode::dma_gather;
            const AccessPattern& table = gather ? ins.src0 : ins.dst;
            const AccessPattern& rows = gather ? ins.dst : ins.src0;
            const uint64_t table_passes = ins.op == Opcode::dma_scatter_add ? 2 : 1;
            uint64_t bytes = 0;
            if (table.space == MemSpace::HBM) bytes += rows.elems() * dtype_size(table.dtype) * table_passes;
            if (rows.space == MemSpace::HBM) bytes += rows.bytes();
            return bytes;
        }
        case CostKind::dma_copy:
        case CostKind::dma_transpose: {
            uint64_t bytes = 0;
            if (ins.src0.space == MemSpace::HBM) bytes += ins.src0.bytes();
            if (ins.dst.space == MemSpace::HBM) bytes += ins.dst.bytes();
            return bytes;
        }
        case CostKind::none:
        case CostKind::matmul:
        case CostKind::transpose:
        case CostKind::stream:
        case CostKind::stream_two_input:
        case CostKind::stream_alu:
        case CostKind::stream_reduce:
        case CostKind::stream_fill:
        case CostKind::stream_two_pass:
        case CostKind::stream_data:
        case CostKind::stream_aggregate:
        case CostKind::int_words: return 0;
    }
    return 0;
}

}  // namespace trnsim
