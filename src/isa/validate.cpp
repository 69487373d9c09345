// The operand checker: every rule an instruction must satisfy before an engine
// may run it (hardware.md 1.4, 2.1-2.3). Each broken rule throws IsaError
// "<opcode>: <operand> <rule> <offending values>".
#include <sstream>
#include <string>

#include "trnsim/chip.h"
#include "trnsim/isa.h"

// A switch over Opcode, WorkKind or CostKind without a case for every value does not build.
#pragma GCC diagnostic error "-Wswitch"

namespace trnsim {

namespace {

constexpr uint32_t engine_bit(Engine e) { return 1u << static_cast<uint32_t>(e); }

bool is_fp8(DType t) { return t == DType::fp8_e4m3 || t == DType::fp8_e5m2; }
bool is_integer(DType t) { return t == DType::i32 || t == DType::u8 || t == DType::boolean; }
bool is_matmul_input(DType t) {
    return t == DType::f32 || t == DType::bf16 || t == DType::f16 || is_fp8(t);
}
bool is_bitwise(AluOp op) {
    return op == AluOp::bitwise_and || op == AluOp::bitwise_or || op == AluOp::bitwise_xor;
}

std::string allowed_engines(uint32_t mask) {
    std::string out;
    for (Engine e : {Engine::Tensor, Engine::Vector, Engine::Scalar, Engine::GpSimd, Engine::Sync, Engine::DMA}) {
        if (!(mask & engine_bit(e))) continue;
        if (!out.empty()) out += ", ";
        out += engine_name(e);
    }
    return out;
}

using WideInt = AccessPattern::WideInt;

std::string to_string(WideInt v) {
    if (v < 0) return "-" + to_string(-v);
    std::string digits;
    do {
        digits.insert(digits.begin(), static_cast<char>('0' + static_cast<int>(v % 10)));
        v /= 10;
    } while (v > 0);
    return digits;
}

class Checker {
public:
    Checker(const Instruction& ins, const ChipConfig& chip, uint64_t hbm_bytes)
        : ins_(ins), chip_(chip), hbm_bytes_(hbm_bytes) {}

    void run() {
        if (static_cast<size_t>(ins_.op) >= static_cast<size_t>(Opcode::count_))
            throw IsaError("instruction: invalid opcode " + std::to_string(static_cast<int>(ins_.op)));
        name_ = opcode_name(ins_.op);
        check_engine();
        check_sync();
        check_enums();
        for_each_operand(ins_, [this](const OperandInfo& d, const AccessPattern& ap) {
            const std::string name = operand_label(d);
            check_ap(name.c_str(), ap);
            check_memory(name.c_str(), d, ap);
        });
        check_opcode_rules();
    }

private:
    const Instruction& ins_;
    const ChipConfig& chip_;
    uint64_t hbm_bytes_;
    const char* name_ = "";

    template <typename... Parts>
    [[noreturn]] void fail(const Parts&... parts) const {
        std::ostringstream os;
        os << name_ << ": ";
        (os << ... << parts);
        throw IsaError(os.str());
    }

    bool compute_engine() const { return ins_.engine != Engine::DMA; }
    bool uses_flag(uint32_t f) const { return (ins_.flags & f) != 0; }

    // "src1 (moving)": the slot, with its role where it has one.
    static std::string operand_label(const OperandInfo& d) {
        std::string label = operand_slot_name(d.slot);
        if (d.role && *d.role) label = label + " (" + d.role + ")";
        return label;
    }

    // The memories the opcode's declaration lets this slot reach.
    void check_memory(const char* operand, const OperandInfo& d, const AccessPattern& ap) const {
        if (d.memories & mem_bit(ap.space)) return;
        std::string allowed;
        for (MemSpace m : {MemSpace::HBM, MemSpace::SBUF, MemSpace::PSUM}) {
            if (!(d.memories & mem_bit(m))) continue;
            if (!allowed.empty()) allowed += " or ";
            allowed += mem_space_name(m);
        }
        fail(operand, " in ", mem_space_name(ap.space), " must be in ", allowed);
    }

    void check_engine() const {
        if (static_cast<uint32_t>(ins_.engine) > static_cast<uint32_t>(Engine::DMA))
            fail("invalid engine ", static_cast<int>(ins_.engine));
        const uint32_t allowed = opcode_info(ins_.op).engines;
        if (!(allowed & engine_bit(ins_.engine)))
            fail("engine ", engine_name(ins_.engine), " not allowed (allowed: ", allowed_engines(allowed), ")");
        if (ins_.engine == Engine::DMA && ins_.dma_queue >= chip_.dma.queues)
            fail("dma queue ", static_cast<int>(ins_.dma_queue), " out of range (chip has ", chip_.dma.queues,
                 " DMA queues)");
    }

    void check_sync() const {
        if (ins_.num_waits > kMaxWaits)
            fail("num_waits ", static_cast<int>(ins_.num_waits), " exceeds ", kMaxWaits, " (max waits)");
        for (int i = 0; i < ins_.num_waits; ++i) {
            if (ins_.waits[i].sem >= kMaxSemaphores)
                fail("wait ", i, " semaphore ", ins_.waits[i].sem, " out of range (must be < ", kMaxSemaphores, ")");
        }
        if (ins_.signal != -1 &&
            (ins_.signal < static_cast<int>(kUserSemBase) || ins_.signal >= static_cast<int>(kMaxSemaphores)))
            fail("signal semaphore ", ins_.signal, " out of range (must be -1 or a user semaphore in [",
                 kUserSemBase, ", ", kMaxSemaphores, "))");
    }

    // Every enum field holds a valid value, whether or not this opcode reads it (a corrupt
    // field would otherwise surface later, in the disassembler or a reused instruction).
    void check_enums() const {
        if (static_cast<size_t>(ins_.func) >= static_cast<size_t>(ActFunc::count_))
            fail("invalid activation func ", static_cast<int>(ins_.func));
        check_alu_enum("alu0", ins_.alu0);
        check_alu_enum("alu1", ins_.alu1);
        check_reduce_enum();
    }
    void check_alu_enum(const char* field, AluOp op) const {
        if (static_cast<size_t>(op) >= static_cast<size_t>(AluOp::count_))
            fail("invalid ", field, " alu op ", static_cast<int>(op));
    }
    void check_reduce_enum() const {
        if (static_cast<size_t>(ins_.reduce) >= static_cast<size_t>(ReduceOp::count_))
            fail("invalid reduce op ", static_cast<int>(ins_.reduce));
    }

    // Rules every access pattern obeys, whatever the opcode.
    void check_ap(const char* operand, const AccessPattern& ap) const {
        if (static_cast<uint32_t>(ap.space) > static_cast<uint32_t>(MemSpace::PSUM))
            fail(operand, " invalid memory space ", static_cast<int>(ap.space));
        if (static_cast<size_t>(ap.dtype) >= static_cast<size_t>(DType::count_))
            fail(operand, " invalid dtype ", static_cast<int>(ap.dtype));
        const char* space = mem_space_name(ap.space);
        if (ap.space == MemSpace::HBM && compute_engine())
            fail(operand, " in hbm: the ", engine_name(ins_.engine),
                 " engine cannot access HBM (only DMA can)");
        // The GpSimd reads and writes SBUF only (nki.isa.tensor_copy: "GpSimd cannot access PSUM").
        if (ap.space == MemSpace::PSUM && ins_.engine == Engine::GpSimd)
            fail(operand, " in psum: the gpsimd engine cannot access PSUM (only SBUF)");
        if (ap.ndim < 1 || ap.ndim > kMaxFreeDims)
            fail(operand, " ndim ", static_cast<int>(ap.ndim), " must be 1..", kMaxFreeDims);
        for (int k = 0; k < ap.ndim; ++k)
            if (ap.size[k] < 1) fail(operand, " size[", k, "] is 0 (sizes must be >= 1)");
        if (ap.partitions < 1) fail(operand, " partitions is 0 (must be >= 1)");

        if (ap.space != MemSpace::HBM) {
            const uint32_t pmax = ap.space == MemSpace::SBUF ? chip_.sbuf.partitions : chip_.psum.partitions;
            if (ap.partitions > pmax) fail(operand, " partitions ", ap.partitions, " exceed ", pmax, " (pmax)");
            if (ap.start_partition + ap.partitions > pmax)
                fail(operand, " start_partition ", ap.start_partition, " + partitions ", ap.partitions,
                     " exceeds ", pmax, " ", space, " partitions");
            if (compute_engine()) check_start_partition(operand, ap);
        }

        const size_t esz = dtype_size(ap.dtype);
        if (ap.offset % esz != 0)
            fail(operand, " offset ", ap.offset, " not aligned to ", esz, "-byte ", dtype_name(ap.dtype),
                 " (alignment)");

        const AccessPattern::ByteExtent r = ap.byte_extent();
        const uint64_t limit = ap.space == MemSpace::HBM    ? hbm_bytes_
                               : ap.space == MemSpace::SBUF ? chip_.sbuf.bytes_per_partition
                                                            : chip_.psum.bytes_per_partition;
        if (r.lo < 0 || r.hi > static_cast<WideInt>(limit))
            fail(operand, " bytes [", to_string(r.lo), ", ", to_string(r.hi), ") out of bounds of ", space,
                 " [0, ", limit, ")", ap.space == MemSpace::HBM ? "" : " per partition");
    }

    // Compute engines address SBUF/PSUM in quadrants of 32 partitions.
    void check_start_partition(const char* operand, const AccessPattern& ap) const {
        const uint32_t start = ap.start_partition, n = ap.partitions;
        const char* required = nullptr;
        if (n > 64) {
            if (start != 0) required = "0";
        } else if (n > 32) {
            if (start != 0 && start != 64) required = "0 or 64";
        } else if (start % 32 != 0) {
            required = "a multiple of 32";
        }
        if (required)
            fail(operand, " start_partition ", start, " with ", n, " partitions must be ", required,
                 " (start-partition rule)");
    }

    void check_same_shape(const char* a_name, const AccessPattern& a, const char* b_name,
                          const AccessPattern& b) const {
        if (a.partitions != b.partitions)
            fail(a_name, " partitions ", a.partitions, " != ", b_name, " partitions ", b.partitions,
                 " (shape mismatch)");
        if (a.free_elems() != b.free_elems())
            fail(a_name, " free elements ", a.free_elems(), " != ", b_name, " free elements ", b.free_elems(),
                 " (shape mismatch)");
    }

    // A per-partition scalar operand [P,1] next to the data operand src0.
    void check_scalar_operand(const char* operand, const AccessPattern& ap, bool integer) const {
        if (ap.free_elems() != 1)
            fail(operand, " free elements ", ap.free_elems(), " must be 1 (per-partition scalar [P,1])");
        if (ap.partitions != ins_.src0.partitions)
            fail(operand, " partitions ", ap.partitions, " != src0 partitions ", ins_.src0.partitions,
                 " (per-partition scalar [P,1])");
        if (integer ? !is_integer(ap.dtype) : ap.dtype != DType::f32)
            fail(operand, " dtype ", dtype_name(ap.dtype), " must be ", integer ? "i32/u8/boolean" : "f32",
                 " (per-partition scalar dtype)");
    }

    void check_bitwise_operand(AluOp op, const char* operand, const AccessPattern& ap) const {
        if (is_bitwise(op) && !is_integer(ap.dtype))
            fail(operand, " dtype ", dtype_name(ap.dtype), " not allowed for ", alu_op_name(op),
                 " (bitwise ops need i32/u8/boolean)");
    }

    void check_in_space(const char* operand, const AccessPattern& ap, MemSpace space) const {
        if (ap.space != space)
            fail(operand, " in ", mem_space_name(ap.space), " must be in ", mem_space_name(space));
    }

    void check_single_psum_bank(const char* operand, const AccessPattern& ap) const {
        const uint64_t bank = chip_.psum.bank_bytes();
        const AccessPattern::ByteExtent r = ap.byte_extent();
        if (r.lo / bank != (r.hi - 1) / bank)
            fail(operand, " bytes [", to_string(r.lo), ", ", to_string(r.hi), ") straddle a PSUM bank boundary (",
                 bank, "-byte banks)");
    }

    // The GpSimd's integer instructions: integer operands, an op the instruction has, shapes.
    void check_int() const {
        if (static_cast<size_t>(ins_.iop) >= static_cast<size_t>(IntOp::count_))
            fail("invalid integer op ", static_cast<int>(ins_.iop));
        const auto integer = [](DType t) {
            return t == DType::i64 || t == DType::i32 || t == DType::i16 || t == DType::i8 || t == DType::u8 ||
                   t == DType::boolean;
        };
        for_each_operand(ins_, [&](const OperandInfo& d, const AccessPattern& ap) {
            if (!integer(ap.dtype))
                fail(operand_slot_name(d.slot), " dtype ", dtype_name(ap.dtype),
                     " must be an integer dtype (i64, i32, i16, i8, u8, boolean)");
        });
        const IntOp op = ins_.iop;
        const bool arg = op == IntOp::argmax || op == IntOp::argmin;
        if (ins_.op == Opcode::int_alu) {
            if (arg) fail("iop ", int_op_name(op), " is a reduction (int_reduce only)");
            check_same_shape("dst", ins_.dst, "src0", ins_.src0);
            if (uses_flag(F_S0_AP)) check_same_shape("dst", ins_.dst, "src1", ins_.src1);
            if (op == IntOp::select && !uses_flag(F_S0_AP) && !uses_flag(F_S1_AP))
                fail("select needs src1 (F_S0_AP) or src2 (F_S1_AP): one of its values may be imm_int");
            if (uses_flag(F_S1_AP)) {
                if (op != IntOp::select) fail("src2 is read by select only");
                check_same_shape("dst", ins_.dst, "src2", ins_.src2);
            }
            return;
        }
        const bool scan_op = op == IntOp::add || op == IntOp::mul || op == IntOp::max || op == IntOp::min;
        if (ins_.op == Opcode::int_scan) {
            if (!scan_op) fail("iop ", int_op_name(op), " cannot scan (add, mul, max, min)");
            check_same_shape("dst", ins_.dst, "src0", ins_.src0);
            if (uses_flag(F_S1_AP)) {
                if (ins_.src1.free_elems() != 1 || ins_.src1.partitions != ins_.src0.partitions)
                    fail("src1 (initial) must be [P,1] with src0's partitions");
            }
            return;
        }
        if (!scan_op && !arg && op != IntOp::logical_and && op != IntOp::logical_or)
            fail("iop ", int_op_name(op), " cannot reduce (add, mul, max, min, logical_and/or, argmax/argmin)");
        if (ins_.reduce_ndim < 1 || ins_.reduce_ndim > ins_.src0.ndim)
            fail("reduce_ndim ", int(ins_.reduce_ndim), " must be 1..src0 ndim ", int(ins_.src0.ndim));
        uint64_t kept = 1;
        for (int k = 0; k < ins_.src0.ndim - ins_.reduce_ndim; ++k) kept *= ins_.src0.size[k];
        if (ins_.dst.partitions != ins_.src0.partitions || ins_.dst.free_elems() != kept)
            fail("dst must be [", ins_.src0.partitions, ", ", kept, "] (src0 without its reduced dims)");
    }

    void check_opcode_rules() const {
        switch (ins_.op) {
            case Opcode::dma_copy: return check_dma_copy();
            case Opcode::dma_transpose: return check_dma_transpose();
            case Opcode::dma_gather:
            case Opcode::dma_scatter_add:
            case Opcode::dma_scatter: return check_dma_indirect();
            case Opcode::nc_matmul: return check_matmul();
            case Opcode::nc_transpose: return check_transpose();
            case Opcode::activation: return check_activation();
            case Opcode::tensor_tensor:
                check_same_shape("dst", ins_.dst, "src0", ins_.src0);
                check_same_shape("dst", ins_.dst, "src1", ins_.src1);
                check_bitwise_operand(ins_.alu0, "dst", ins_.dst);
                check_bitwise_operand(ins_.alu0, "src0", ins_.src0);
                check_bitwise_operand(ins_.alu0, "src1", ins_.src1);
                return;
            case Opcode::tensor_scalar: return check_tensor_scalar();
            case Opcode::tensor_tensor_scan:
                check_same_shape("dst", ins_.dst, "src0", ins_.src0);
                check_same_shape("dst", ins_.dst, "src1", ins_.src1);
                if (uses_flag(F_S1_AP) && ins_.src2.free_elems() != 1)
                    fail("src2 (initial) must be one element per partition, got ", ins_.src2.free_elems());
                if (uses_flag(F_S1_AP) && ins_.src2.partitions != ins_.dst.partitions)
                    fail("src2 (initial) partitions ", ins_.src2.partitions, " != dst partitions ", ins_.dst.partitions);
                return;
            case Opcode::tensor_reduce: return check_tensor_reduce();
            case Opcode::tensor_copy:
            case Opcode::affine_select: check_same_shape("dst", ins_.dst, "src0", ins_.src0); return;
            case Opcode::select:
                check_same_shape("dst", ins_.dst, "src0", ins_.src0);
                check_same_shape("dst", ins_.dst, "src1", ins_.src1);
                if (uses_flag(F_S1_AP)) check_same_shape("dst", ins_.dst, "src2", ins_.src2);
                if (ins_.reduce != ReduceOp::none) {
                    if (ins_.engine != Engine::Vector) fail("a reduce (select_reduce) runs on the Vector engine only");
                    if (ins_.acc.partitions != ins_.dst.partitions || ins_.acc.free_elems() != 1)
                        fail("acc must be [", ins_.dst.partitions, ", 1] (reduce accumulator)");
                }
                return;
            case Opcode::iota:
                if (is_fp8(ins_.dst.dtype)) fail("dst dtype ", dtype_name(ins_.dst.dtype), " not allowed (iota into fp8)");
                return;
            case Opcode::max8:
            case Opcode::nc_find_index8:
            case Opcode::nc_match_replace8: return check_top8();
            case Opcode::scalar_tensor_tensor:
                check_same_shape("dst", ins_.dst, "src0", ins_.src0);
                check_same_shape("dst", ins_.dst, "src1", ins_.src1);
                if (uses_flag(F_S0_AP)) check_scalar_operand("src2 (s0)", ins_.src2, false);
                for (AluOp op : {ins_.alu0, ins_.alu1})
                    if (is_bitwise(op)) fail("alu op ", alu_op_name(op), " is bitwise (arithmetic ops only)");
                if (ins_.src0.space == MemSpace::PSUM && ins_.src1.space == MemSpace::PSUM)
                    fail("src0 and src1 (operand1) both in PSUM (at most one tensor input may be)");
                return;
            case Opcode::bn_stats:
            case Opcode::bn_aggr: return check_bn();
            case Opcode::tensor_partition_reduce:
                if (ins_.reduce == ReduceOp::none) fail("reduce op none (a reduce op is required)");
                if (ins_.dst.partitions != 1) fail("dst partitions ", ins_.dst.partitions, " must be 1 (one row)");
                if (ins_.dst.free_elems() != ins_.src0.free_elems())
                    fail("dst free elements ", ins_.dst.free_elems(), " != src0 free elements ",
                         ins_.src0.free_elems(), " (shape mismatch)");
                return;
            case Opcode::int_alu:
            case Opcode::int_reduce:
            case Opcode::int_scan: return check_int();
            case Opcode::memset:
            case Opcode::barrier:
            case Opcode::count_: return;
        }
    }

    // nki.isa.dma_copy moves data between HBM and SBUF; PSUM is reached by the compute engines.
    void check_dma_copy() const {
        if (ins_.dst.elems() != ins_.src0.elems())
            fail("dst elements ", ins_.dst.elems(), " != src0 elements ", ins_.src0.elems(), " (element count)");
    }

    void check_dma_transpose() const {
        const AccessPattern &src = ins_.src0, &dst = ins_.dst;
        if (chip_.dma.transpose_efficiency_hbm <= 0 || chip_.dma.transpose_efficiency_sbuf <= 0)
            fail("chip ", chip_.name, " has no DMA transpose (NeuronCore-v3 and later)");
        if (src.dtype != dst.dtype) fail("dst dtype ", dtype_name(dst.dtype), " != src0 dtype ", dtype_name(src.dtype));
        if (src.dtype != DType::bf16 && src.dtype != DType::f16 && src.dtype != DType::f32)
            fail("dtype ", dtype_name(src.dtype), " not transposable by DMA (2- or 4-byte float)");
        if (src.ndim != 1 || dst.ndim != 1) fail("DMA transpose takes one free dim on each side");
        if (dst.partitions != src.size[0] || dst.size[0] != src.partitions)
            fail("dst [", dst.partitions, ", ", dst.size[0], "] is not the transpose of src0 [", src.partitions, ", ",
                 src.size[0], "]");
    }

    // Indirect DMA: a table [1, rows, row...], the other side [P, n * row], indices src1 [P, n] i32 in SBUF.
    void check_dma_indirect() const {
        const bool gather = ins_.op == Opcode::dma_gather;
        const AccessPattern& table = gather ? ins_.src0 : ins_.dst;
        const AccessPattern& rows = gather ? ins_.dst : ins_.src0;
        const char* table_name = gather ? "src0 (table)" : "dst (table)";
        const char* rows_name = gather ? "dst" : "src0";
        if (ins_.src1.dtype != DType::i32)
            fail("src1 (indices) dtype ", dtype_name(ins_.src1.dtype), " must be i32");
        if (table.partitions != 1) fail(table_name, " partitions ", table.partitions, " must be 1 (rows are its first free dim)");
        if (ins_.src1.partitions != rows.partitions)
            fail("src1 (indices) partitions ", ins_.src1.partitions, " != ", rows_name, " partitions ", rows.partitions);
        const uint64_t row_elems = table.free_elems() / table.size[0];
        if (rows.free_elems() != ins_.src1.free_elems() * row_elems)
            fail(rows_name, " free elements ", rows.free_elems(), " != indices per partition ",
                 ins_.src1.free_elems(), " x row elements ", row_elems, " (indirect shape)");
    }

    void check_matmul() const {
        const AccessPattern &stationary = ins_.src0, &moving = ins_.src1, &dst = ins_.dst;
        if (!is_matmul_input(stationary.dtype))
            fail("src0 (stationary) dtype ", dtype_name(stationary.dtype),
                 " not a matmul input dtype (bf16, f16, fp8_e4m3, fp8_e5m2, f32)");
        if (!is_matmul_input(moving.dtype))
            fail("src1 (moving) dtype ", dtype_name(moving.dtype),
                 " not a matmul input dtype (bf16, f16, fp8_e4m3, fp8_e5m2, f32)");
        const bool bf16_out = chip_.generation >= 4 && dst.dtype == DType::bf16;
        if (dst.dtype != DType::f32 && !bf16_out)
            fail("dst dtype ", dtype_name(dst.dtype), " not allowed: PSUM accumulates in f32",
                 chip_.generation >= 4 ? " or bf16" : "", " (matmul output dtype)");

        const uint64_t k = stationary.partitions, m = stationary.free_elems(), n = moving.free_elems();
        if (moving.partitions != k)
            fail("src1 (moving) partitions ", moving.partitions, " != src0 (stationary) partitions ", k,
                 " (contraction mismatch)");
        if (k > chip_.tensor.rows)
            fail("contraction partitions ", k, " exceed tensor rows ", chip_.tensor.rows);
        if (m > chip_.tensor.cols)
            fail("src0 (stationary) free size ", m, " exceeds gemm_stationary_fmax ", chip_.tensor.cols);
        if (n > chip_.tensor.moving_fmax)
            fail("src1 (moving) free size ", n, " exceeds gemm_moving_fmax ", chip_.tensor.moving_fmax);
        if (dst.partitions != m)
            fail("dst partitions ", dst.partitions, " != stationary free size ", m, " (output shape [M,N])");
        if (dst.free_elems() != n)
            fail("dst free elements ", dst.free_elems(), " != moving free size ", n, " (output shape [M,N])");
        const uint64_t row_bytes = n * dtype_size(dst.dtype);
        if (row_bytes > chip_.psum.bank_bytes())
            fail("dst row of ", row_bytes, " bytes exceeds one PSUM bank of ", chip_.psum.bank_bytes(), " bytes");
        check_single_psum_bank("dst", dst);
    }

    void check_transpose() const {
        const AccessPattern &src = ins_.src0, &dst = ins_.dst;
        const uint64_t p = src.partitions, f = src.free_elems();
        if (ins_.engine == Engine::Tensor) {
            if (p > chip_.tensor.rows || f > chip_.tensor.cols)
                fail("src0 [", p, ", ", f, "] exceeds the tensor engine transpose limit [", chip_.tensor.rows, ", ",
                     chip_.tensor.cols, "]");
            check_in_space("dst", dst, MemSpace::PSUM);
            if (!is_matmul_input(src.dtype))
                fail("src0 dtype ", dtype_name(src.dtype),
                     " not a tensor engine input dtype (bf16, f16, fp8_e4m3, fp8_e5m2, f32)");
            if (dst.dtype != DType::f32 && dst.dtype != src.dtype)
                fail("dst dtype ", dtype_name(dst.dtype), " must be f32 or the src0 dtype ", dtype_name(src.dtype),
                     " (transpose output dtype)");
        } else {
            constexpr uint64_t kVectorBlock = 32;
            if (p > kVectorBlock || f > kVectorBlock)
                fail("src0 [", p, ", ", f, "] exceeds the vector engine transpose limit [32, 32]");
        }
        if (dst.partitions != f)
            fail("dst partitions ", dst.partitions, " != src0 free elements ", f, " (transposed shape)");
        if (dst.free_elems() != p)
            fail("dst free elements ", dst.free_elems(), " != src0 partitions ", p, " (transposed shape)");
        if (ins_.engine == Engine::Tensor) check_single_psum_bank("dst", dst);
    }

    void check_activation() const {
        check_same_shape("dst", ins_.dst, "src0", ins_.src0);
        if (uses_flag(F_SCALE_AP)) check_scalar_operand("src1 (scale)", ins_.src1, false);
        if (uses_flag(F_BIAS_AP)) check_scalar_operand("src2 (bias)", ins_.src2, false);
        if (ins_.reduce != ReduceOp::none) {
            if (ins_.acc.partitions != ins_.src0.partitions)
                fail("acc partitions ", ins_.acc.partitions, " != src0 partitions ", ins_.src0.partitions,
                     " (reduce accumulator [P,1])");
            if (ins_.acc.free_elems() != 1)
                fail("acc free elements ", ins_.acc.free_elems(), " must be 1 (reduce accumulator [P,1])");
        }
    }

    void check_tensor_scalar() const {
        check_same_shape("dst", ins_.dst, "src0", ins_.src0);
        if (ins_.reduce != ReduceOp::none) {
            if (ins_.engine != Engine::Vector) fail("a reduce (tensor_scalar_reduce) runs on the Vector engine only");
            if (ins_.acc.partitions != ins_.src0.partitions || ins_.acc.free_elems() != 1)
                fail("acc must be [", ins_.src0.partitions, ", 1] (reduce accumulator)");
        }
        if (uses_flag(F_S0_AP)) check_scalar_operand("src1 (s0)", ins_.src1, is_bitwise(ins_.alu0));
        if (uses_flag(F_S1_AP)) check_scalar_operand("src2 (s1)", ins_.src2, is_bitwise(ins_.alu1));
        for (AluOp op : {ins_.alu0, ins_.alu1}) {
            check_bitwise_operand(op, "dst", ins_.dst);
            check_bitwise_operand(op, "src0", ins_.src0);
        }
    }

    // max8 / nc_find_index8 / nc_match_replace8: data src0 [P, 8..16384 (max8, nc_find_index8) or
    // 1..16384], 8 values per partition (src1, dst of max8 and nc_find_index8, acc of the replace).
    void check_top8() const {
        constexpr uint64_t kMaxData = 16384;
        const AccessPattern& data = ins_.src0;
        const uint64_t n = data.free_elems();
        const uint64_t min_data = ins_.op == Opcode::nc_match_replace8 ? 1 : 8;
        if (n < min_data || n > kMaxData)
            fail("src0 (data) free elements ", n, " must be ", min_data, "..", kMaxData);
        auto eight = [&](const char* name, const AccessPattern& ap) {
            if (ap.partitions != data.partitions)
                fail(name, " partitions ", ap.partitions, " != src0 partitions ", data.partitions, " (shape mismatch)");
            if (ap.free_elems() != 8) fail(name, " free elements ", ap.free_elems(), " must be 8");
        };
        auto index_dtype = [&](const char* name, const AccessPattern& ap) {
            if (ap.dtype != DType::i32 && ap.dtype != DType::f32)
                fail(name, " dtype ", dtype_name(ap.dtype), " must be i32 or f32 (indices)");
        };
        switch (ins_.op) {
            case Opcode::max8: eight("dst", ins_.dst); return;
            case Opcode::nc_find_index8:
                eight("dst", ins_.dst);
                eight("src1 (values)", ins_.src1);
                index_dtype("dst", ins_.dst);
                return;
            default:
                check_same_shape("dst", ins_.dst, "src0", data);
                eight("src1 (values)", ins_.src1);
                if (writes_acc(ins_)) {
                    eight("acc (indices)", ins_.acc);
                    index_dtype("acc (indices)", ins_.acc);
                }
                return;
        }
    }

    // bn_stats: data src0 [P, 1..512 (bn_stats_fmax)] into dst [P, 6]; bn_aggr: src0 [P, 3k] triples
    // into dst [P, 2] (mean, variance).
    void check_bn() const {
        constexpr uint64_t kBnStatsFmax = 512;
        const AccessPattern& data = ins_.src0;
        const uint64_t n = data.free_elems();
        const bool stats = ins_.op == Opcode::bn_stats;
        if (stats && (n < 1 || n > kBnStatsFmax))
            fail("src0 (data) free elements ", n, " must be 1..", kBnStatsFmax, " (bn_stats_fmax)");
        if (!stats && (n == 0 || n % 3 != 0))
            fail("src0 (data) free elements ", n, " must be a multiple of 3 ((count, mean, M2) triples)");
        if (ins_.dst.partitions != data.partitions)
            fail("dst partitions ", ins_.dst.partitions, " != src0 partitions ", data.partitions, " (shape mismatch)");
        const uint64_t want = stats ? 6 : 2;
        if (ins_.dst.free_elems() != want) fail("dst free elements ", ins_.dst.free_elems(), " must be ", want);
    }

    void check_tensor_reduce() const {
        const AccessPattern &src = ins_.src0, &dst = ins_.dst;
        if (ins_.reduce == ReduceOp::none) fail("reduce op none (a reduce op is required)");
        if (ins_.reduce_ndim < 1 || ins_.reduce_ndim > src.ndim)
            fail("reduce_ndim ", static_cast<int>(ins_.reduce_ndim), " must be 1..", static_cast<int>(src.ndim),
                 " (src0 ndim)");
        if (dst.partitions != src.partitions)
            fail("dst partitions ", dst.partitions, " != src0 partitions ", src.partitions, " (shape mismatch)");
        uint64_t kept = 1;
        for (int k = 0; k < src.ndim - ins_.reduce_ndim; ++k) kept *= src.size[k];
        if (dst.free_elems() != kept)
            fail("dst free elements ", dst.free_elems(), " != ", kept,
                 " (product of the src0 dims not reduced: shape mismatch)");
    }
};

}  // namespace

void validate(const Instruction& ins, const ChipConfig& chip, uint64_t hbm_bytes) {
    Checker(ins, chip, hbm_bytes).run();
}

}  // namespace trnsim
