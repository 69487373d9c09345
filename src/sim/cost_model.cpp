// Per-instruction cost model (hardware.md 2.2 and 2.4). Every constant comes
// from the chip preset; the formulas are the published ones:
//   TensorE  nc_matmul    max(N_moving, MM_INIT) cycles, x fp32_passes for fp32, / fp8_speedup for fp8
//            nc_transpose max(P, min(64, F)) cycles
//   Vector/Scalar         max(MIN_II, N) for one tensor input, 2N for two (the preset's
//                         two_input_cycles_per_elem; N when one is in PSUM
//                         or for contiguous bf16 add/sub/mul), divide_cycles_per_elem x N when an
//                         ALU stage divides, plus a static cost per tensor access (the PSUM one
//                         for PSUM operands; on engines where it is pipelined, only when the
//                         instruction waited, i.e. the engine was idle before it) and a turnaround
//                         when it depends on its predecessor
//                         tensor_tensor_scan max(MIN_II, 2N); max8, nc_find_index8 N (no MIN_II floor);
//                         nc_match_replace8, bn_stats max(MIN_II, N); bn_aggr max(MIN_II, 13N/3);
//                         tensor_scalar with a reduce output + MIN_II;
//                         at least cross_partition_cycles_per_elem x N when the destination starts
//                         on another partition than the source
//   GpSimd                fixed start (~150) + N
//                         integer instructions (int_alu/int_reduce/int_scan): N x the 32-bit word
//                         operations one element takes on the GpSimd's integer ALUs (int_word_ops;
//                         an int64 is two words: docs/integers.md)
//   DMA                   fixed latency + bytes / (queue bandwidth x descriptor efficiency
//                         [x HBM write efficiency for SBUF -> HBM]),
//                         HBM bandwidth shared between queues (timing.cpp)
#include <algorithm>
#include <cmath>
#include <functional>

#include "timing.h"

// A switch over Opcode, WorkKind or CostKind without a case for every value does not build.
#pragma GCC diagnostic error "-Wswitch"

namespace trnsim {

namespace {

int64_t cycles_to_ps(double cycles, double clock_ghz) {
    return static_cast<int64_t>(std::llround(cycles * 1000.0 / clock_ghz));
}

bool is_two_byte(DType t) { return t == DType::bf16 || t == DType::f16; }
bool is_fp8(DType t) { return t == DType::fp8_e4m3 || t == DType::fp8_e5m2; }


// The destination starts on another partition than the (same-sized) source: the cross-half or
// cross-quadrant data movement of the engines (trainium_inferentia2_arch, Cross-Partition Connectivity).
bool crosses_partitions(const Instruction& ins) {
    return opcode_info(ins.op).reads(OperandSlot::src0) && ins.src0.valid() && ins.src0.space != MemSpace::HBM &&
           ins.src0.partitions == ins.dst.partitions && ins.src0.start_partition != ins.dst.start_partition;
}

bool divides(const Instruction& ins) {
    const CostKind kind = opcode_info(ins.op).cost;
    return (kind == CostKind::stream_alu || kind == CostKind::stream_two_input) &&
           (ins.alu0 == AluOp::div || ins.alu1 == AluOp::div);
}

// 32-bit integer ALU operations per element of a GpSimd integer instruction. A 64-bit value is
// two words: add/sub propagate a carry (lo, carry, hi), comparisons and max/min compare the high
// words then the low ones unsigned, a product takes the three partial products of its low 64
// bits, shifts funnel across the word boundary, and division is bit-serial (one
// shift-compare-subtract step per quotient bit, as on cores without a hardware divider).
double int_word_ops(const Instruction& ins) {
    DType widest = ins.src0.dtype;
    for (const AccessPattern* ap : {&ins.dst, &ins.src1, &ins.src2})
        if (ap->valid() && dtype_size(ap->dtype) > dtype_size(widest)) widest = ap->dtype;
    const bool wide = widest == DType::i64;
    const double w = wide ? 2 : 1;
    switch (ins.iop) {
        case IntOp::copy: case IntOp::bit_and: case IntOp::bit_or: case IntOp::bit_xor: case IntOp::bit_not:
        case IntOp::select:
            return w;
        case IntOp::add: case IntOp::sub: case IntOp::neg: case IntOp::max: case IntOp::min: case IntOp::abs:
        case IntOp::eq: case IntOp::ne: case IntOp::lt: case IntOp::le: case IntOp::gt: case IntOp::ge:
        case IntOp::logical_and: case IntOp::logical_or: case IntOp::logical_xor: case IntOp::logical_not:
        case IntOp::sign:
            return wide ? 3 : 1;
        case IntOp::shl: case IntOp::shr: return wide ? 4 : 1;
        case IntOp::argmax: case IntOp::argmin: return wide ? 4 : 2;
        case IntOp::mul: return wide ? 6 : 1;
        case IntOp::div_trunc: case IntOp::div_floor: case IntOp::remainder: case IntOp::fmod:
            return wide ? 64 * 3 : 32;
        case IntOp::count_: break;
    }
    throw IsaError(std::string(opcode_name(ins.op)) + ": unknown integer op");
}

double stream_cycles(const Instruction& ins, const StreamEngineConfig& eng, bool back_to_back) {
    const double min_ii = eng.min_ii_cycles;
    // Elements per partition streamed through the engine.
    double n = static_cast<double>(std::max(ins.dst.free_elems(), ins.src0.valid() && opcode_info(ins.op).reads(OperandSlot::src0)
                                                                      ? ins.src0.free_elems()
                                                                      : 0));
    double rate = std::max<uint32_t>(1, eng.elems_per_cycle);
    double c = 0;
    switch (opcode_info(ins.op).cost) {
        case CostKind::stream_two_input: {
            bool psum_operand = ins.src0.space == MemSpace::PSUM || ins.src1.space == MemSpace::PSUM;
            bool fast_bf16 = is_two_byte(ins.src0.dtype) && is_two_byte(ins.src1.dtype) &&
                             (ins.alu0 == AluOp::add || ins.alu0 == AluOp::sub || ins.alu0 == AluOp::mul) &&
                             ins.src0.stride[ins.src0.ndim - 1] == 1 && ins.src1.stride[ins.src1.ndim - 1] == 1;
            double per_elem = psum_operand || fast_bf16 ? 1.0 : eng.two_input_cycles_per_elem;
            if (divides(ins)) per_elem = std::max<double>(per_elem, eng.divide_cycles_per_elem);
            c = std::max(min_ii, per_elem * n / rate);
            break;
        }
        case CostKind::stream_reduce: {
            n = static_cast<double>(ins.src0.free_elems());
            bool fast = is_two_byte(ins.src0.dtype) && (ins.reduce == ReduceOp::add || ins.reduce == ReduceOp::max);
            c = std::max(min_ii, (fast ? n / 2 : n) / rate);
            break;
        }
        case CostKind::stream_alu: {
            bool fast = eng.bf16_fast_mode && is_two_byte(ins.src0.dtype) && is_two_byte(ins.dst.dtype);
            // The divide stage runs at its own rate (no 2-byte fast mode).
            c = std::max(min_ii, divides(ins) ? eng.divide_cycles_per_elem * n / rate : (fast ? n / 2 : n) / rate);
            // tensor_scalar with a reduce output (tensor_scalar_reduce): published as max(MIN_II, N) + MIN_II.
            if (ins.reduce != ReduceOp::none) c += min_ii;
            break;
        }
        case CostKind::stream_fill: {
            bool zero16 = ins.imm0 == 0.0f && is_two_byte(ins.dst.dtype);
            c = std::max(min_ii, (zero16 ? n / 2 : n) / rate);
            break;
        }
        case CostKind::stream_two_pass: c = std::max(min_ii, 2 * n / rate); break;
        // Published as N cycles, N = elements per partition of the data read (no MIN_II floor).
        case CostKind::stream_data: c = static_cast<double>(ins.src0.free_elems()) / rate; break;
        // Published as max(MIN_II, 13 * N / 3), N = elements per partition of the triples read.
        case CostKind::stream_aggregate:
            c = std::max(min_ii, 13.0 * static_cast<double>(ins.src0.free_elems()) / 3.0 / rate);
            break;
        case CostKind::int_words: {
            n = static_cast<double>(std::max(ins.dst.free_elems(), ins.src0.free_elems()));
            c = std::max(min_ii, int_word_ops(ins) * n / rate);
            break;
        }
        // nc_match_replace8 is published as "min(MIN_II, N)", which would stream 16K elements in
        // 64 cycles, faster than the engine reads them; it uses max(MIN_II, N), the form of every
        // other VectorE instruction. A VectorE transpose streams its block the same way.
        case CostKind::stream:
        case CostKind::transpose: c = std::max(min_ii, n / rate); break;
        case CostKind::none: return 0;
        case CostKind::dma_copy:
        case CostKind::dma_transpose:
        case CostKind::dma_indirect:
        case CostKind::matmul: throw IsaError(std::string(opcode_name(ins.op)) + ": not a streaming-engine instruction");
    }
    if (crosses_partitions(ins)) c = std::max(c, eng.cross_partition_cycles_per_elem * n / rate);
    c += eng.fixed_overhead_cycles;
    const bool dependent = ins.flags & F_DEPENDS_ON_PREV;
    if (!(eng.access_overhead_pipelined && back_to_back))
        for_each_tensor_operand(ins, [&](const AccessPattern& ap) {
            c += ap.space == MemSpace::PSUM ? eng.psum_access_overhead_cycles : eng.access_overhead_cycles;
        });
    if (dependent) c += eng.dependent_turnaround_cycles;
    return c;
}

}  // namespace

const StreamEngineConfig& stream_engine_config(const ChipConfig& chip, Engine e) {
    switch (e) {
        case Engine::Scalar: return chip.scalar;
        case Engine::GpSimd: return chip.gpsimd;
        default: return chip.vector;
    }
}

double stream_ns_per_elem(const StreamEngineConfig& e, double cycles_per_elem) {
    return cycles_per_elem / (std::max<uint32_t>(1, e.elems_per_cycle) * e.clock_ghz);
}

double estimate_stream_ns(const StreamEngineConfig& e, double n, double cycles_per_elem, int tensor_accesses) {
    const double c = std::max<double>(e.min_ii_cycles, n * cycles_per_elem / std::max<uint32_t>(1, e.elems_per_cycle)) +
                     e.fixed_overhead_cycles + static_cast<double>(e.access_overhead_cycles) * tensor_accesses;
    return c / e.clock_ghz;
}

void for_each_tensor_operand(const Instruction& ins, const std::function<void(const AccessPattern&)>& f) {
    if (ins.engine == Engine::DMA) return;
    for_each_operand(ins, [&](const OperandInfo&, const AccessPattern& ap) { f(ap); });
}

int64_t compute_cost_ps(const Instruction& ins, const ChipConfig& chip, bool stationary_reloaded, bool back_to_back,
                        bool reads_accumulation) {
    if (opcode_info(ins.op).cost == CostKind::none) return 0;
    if (ins.engine == Engine::Tensor) {
        const TensorEngineConfig& te = chip.tensor;
        double c = 0;
        if (opcode_info(ins.op).cost == CostKind::matmul) {
            double n = static_cast<double>(ins.src1.free_elems());
            c = std::max<double>(n, te.min_moving_cycles);
            if (ins.src0.dtype == DType::f32 || ins.src1.dtype == DType::f32) c *= te.fp32_passes;
            else if (is_fp8(ins.src0.dtype) && is_fp8(ins.src1.dtype) && te.fp8_speedup > 1)
                c = std::max<double>(n / te.fp8_speedup, te.min_moving_cycles);
            if (stationary_reloaded) c += te.load_stationary_cycles;
        } else {  // nc_transpose on the TensorE
            double p = ins.src0.partitions, f = static_cast<double>(ins.src0.free_elems());
            c = std::max(p, std::min(64.0, f));
            if (ins.src0.dtype == DType::f32) c *= te.fp32_passes;
        }
        if (ins.flags & F_DEPENDS_ON_PREV) c += te.dependent_turnaround_cycles;
        return cycles_to_ps(c, te.clock_ghz);
    }
    const StreamEngineConfig& eng = stream_engine_config(chip, ins.engine);
    double c = stream_cycles(ins, eng, back_to_back);
    if (reads_accumulation) c += eng.accumulation_read_cycles;
    return cycles_to_ps(c, eng.clock_ghz);
}

DmaCost dma_cost(const Instruction& ins, const ChipConfig& chip) {
    DmaCost c;
    const CostKind kind = opcode_info(ins.op).cost;
    if (kind == CostKind::dma_indirect) {
        // One descriptor per table row (its contiguous run); a scatter-add reads and writes the table.
        const bool gather = ins.op == Opcode::dma_gather;
        const AccessPattern& table = gather ? ins.src0 : ins.dst;
        const AccessPattern& rows = gather ? ins.dst : ins.src0;
        c.bytes = rows.elems() * std::max(dtype_size(table.dtype), dtype_size(rows.dtype));
        const uint64_t row_bytes = table.free_elems() / std::max<uint32_t>(1, table.size[0]) * dtype_size(table.dtype);
        double chunk = std::max(1.0, static_cast<double>(std::min(row_bytes, table.contiguous_bytes())));
        c.rate_bytes_per_ps = chip.dma.bytes_per_ns_per_queue * chunk / (chunk + chip.dma.descriptor_overhead_bytes) / 1000.0;
        c.hbm_sides = (table.space == MemSpace::HBM) * (ins.op == Opcode::dma_scatter_add ? 2 : 1) + (rows.space == MemSpace::HBM);
        c.fixed_ps = static_cast<int64_t>(std::llround(chip.dma.fixed_latency_ns * 1000.0));
        return c;
    }
    if (kind == CostKind::dma_transpose) {
        // The element-wise shuffle runs at a fixed fraction of the queue rate (by source memory).
        c.bytes = ins.src0.bytes();
        const bool from_hbm = ins.src0.space == MemSpace::HBM;
        c.rate_bytes_per_ps = chip.dma.bytes_per_ns_per_queue *
                              (from_hbm ? chip.dma.transpose_efficiency_hbm : chip.dma.transpose_efficiency_sbuf) / 1000.0;
        c.hbm_sides = from_hbm;
        c.fixed_ps = static_cast<int64_t>(std::llround(chip.dma.fixed_latency_ns * 1000.0));
        return c;
    }
    if (kind != CostKind::dma_copy) return c;
    uint64_t elems = ins.src0.elems();
    c.bytes = elems * std::max(dtype_size(ins.src0.dtype), dtype_size(ins.dst.dtype));
    // Efficiency follows the contiguous run of the HBM side (DRAM bursts), the slower side of a
    // transfer: nki-dma-overview measured a 2 KiB HBM run spread over 8 SBUF partitions of 256 B at
    // 21 of 23 B/ns. Between on-chip memories, the shorter run of the two sides.
    const bool src_hbm = ins.src0.space == MemSpace::HBM, dst_hbm = ins.dst.space == MemSpace::HBM;
    double chunk = static_cast<double>(
        src_hbm && !dst_hbm   ? ins.src0.contiguous_bytes()
        : dst_hbm && !src_hbm ? ins.dst.contiguous_bytes()
                              : std::min(ins.src0.contiguous_bytes(), ins.dst.contiguous_bytes()));
    chunk = std::max(1.0, chunk);
    double eff = chunk / (chunk + chip.dma.descriptor_overhead_bytes);
    if (dst_hbm && !src_hbm) eff *= chip.dma.hbm_write_efficiency;
    c.rate_bytes_per_ps = chip.dma.bytes_per_ns_per_queue * eff / 1000.0;
    c.hbm_sides = (ins.src0.space == MemSpace::HBM) + (ins.dst.space == MemSpace::HBM);
    c.fixed_ps = static_cast<int64_t>(std::llround(chip.dma.fixed_latency_ns * 1000.0));
    return c;
}

}  // namespace trnsim
