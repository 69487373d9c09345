// Useful work of an instruction, as the profiler counts it.
#include <string>

#include "trnsim/isa.h"

namespace trnsim {

namespace {
void require_valid_opcode(const Instruction& ins, const char* what) {
    if (static_cast<size_t>(ins.op) >= static_cast<size_t>(Opcode::count_))
        throw IsaError(std::string(what) + ": invalid opcode " + std::to_string(static_cast<int>(ins.op)));
}
}  // namespace

bool writes_acc(const Instruction& ins) {
    switch (ins.op) {
        case Opcode::activation: return ins.reduce != ReduceOp::none;
        case Opcode::nc_match_replace8: return (ins.flags & F_ACC_OUT) != 0;
        default: return false;
    }
}

// Floating-point (or integer ALU) operations: 2*K*M*N for a matmul, one per
// output element for elementwise work (two for a two-op tensor_scalar), one per
// input element for a reduction. Pure data movement (DMA, transposes, memset,
// iota) and barriers do no arithmetic and count 0.
uint64_t instruction_flops(const Instruction& ins) {
    require_valid_opcode(ins, "instruction_flops");
    switch (ins.op) {
        case Opcode::nc_matmul:
            return 2 * static_cast<uint64_t>(ins.src0.partitions) * ins.src0.free_elems() * ins.src1.free_elems();
        case Opcode::activation:
        case Opcode::tensor_tensor:
        case Opcode::tensor_copy:
        case Opcode::affine_select:
        case Opcode::select: return ins.dst.elems();
        case Opcode::tensor_scalar: return ins.dst.elems() * (ins.alu1 != AluOp::bypass ? 2 : 1);
        case Opcode::tensor_reduce:
        case Opcode::max8:
        case Opcode::nc_find_index8:
        case Opcode::nc_match_replace8: return ins.src0.elems();   // one comparison per element
        case Opcode::dma_copy:
        case Opcode::dma_transpose:
        case Opcode::dma_gather:
        case Opcode::dma_scatter_add:
        case Opcode::nc_transpose:
        case Opcode::memset:
        case Opcode::iota:
        case Opcode::barrier:
        case Opcode::count_: return 0;
    }
    return 0;
}

// Bytes a DMA moves to or from HBM: each HBM side counts (an HBM-to-HBM copy
// reads and writes). Compute engines never touch HBM.
uint64_t instruction_hbm_bytes(const Instruction& ins) {
    require_valid_opcode(ins, "instruction_hbm_bytes");
    if (ins.op == Opcode::dma_gather || ins.op == Opcode::dma_scatter_add) {
        // The rows moved, on each HBM side; a scatter-add reads and writes its table rows.
        const bool gather = ins.op == Opcode::dma_gather;
        const AccessPattern& table = gather ? ins.src0 : ins.dst;
        const AccessPattern& rows = gather ? ins.dst : ins.src0;
        uint64_t bytes = 0;
        if (table.space == MemSpace::HBM) bytes += rows.elems() * dtype_size(table.dtype) * (gather ? 1 : 2);
        if (rows.space == MemSpace::HBM) bytes += rows.bytes();
        return bytes;
    }
    if (ins.op != Opcode::dma_copy && ins.op != Opcode::dma_transpose) return 0;
    uint64_t bytes = 0;
    if (ins.src0.space == MemSpace::HBM) bytes += ins.src0.bytes();
    if (ins.dst.space == MemSpace::HBM) bytes += ins.dst.bytes();
    return bytes;
}

}  // namespace trnsim
