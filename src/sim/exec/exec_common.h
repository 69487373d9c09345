// Shared pieces of the per-instruction functional semantics (src/sim/exec/*.cpp):
// the exec_<name> declarations generated from instructions.def, ALU and
// reductions, scratch buffers and affine
// index iteration. Engines compute in fp32 and round on store (CoreMemory).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "trnsim/sim.h"

namespace trnsim {

#define ISA_INSTR(name, ...) void exec_##name(CoreMemory& mem, const Instruction& ins);
#include "trnsim/instructions.def"
#undef ISA_INSTR

namespace exec {

// Per-thread fp32 scratch, reused across instructions (no allocation per call
// once warm). Distinct slots may be held at the same time.
enum ScratchSlot { kScratchA, kScratchB, kScratchC, kScratchD, kScratchE, kNumScratch };
float* scratch(ScratchSlot slot, size_t n);

// dst[f, p] = src0[p, f] with the free dims of each side flattened (nc_transpose, dma_transpose).
void transpose(CoreMemory& mem, const Instruction& ins);

// An operand's fp32 values as one row per partition. When the operand is an fp32 on-chip
// tile whose free elements are contiguous within each partition, the rows point straight
// into SBUF/PSUM (no copy); otherwise they are rows of a dense scratch copy.
struct RowsF32 {
    float* base = nullptr;
    size_t pitch = 0;      // floats from one partition's row to the next
    bool direct = false;
    float* row(uint32_t p) const { return base + p * pitch; }
};
// Source rows (a scratch copy is loaded).
RowsF32 source_rows(CoreMemory& mem, const AccessPattern& ap, ScratchSlot slot);
// Destination rows. They are direct only if no source in 'srcs' overlaps them other than as
// the identical tile (in-place): rows are computed one after another, so a shifted overlap
// would feed results back into later rows. Call commit_rows() after writing them.
RowsF32 dest_rows(CoreMemory& mem, const AccessPattern& ap, ScratchSlot slot,
                  std::initializer_list<const AccessPattern*> srcs, bool allow_direct = true);
void commit_rows(CoreMemory& mem, const AccessPattern& ap, const RowsF32& rows);   // stores a scratch copy
// Conservative overlap test of two operands (same memory, partitions and byte spans intersect).
bool may_overlap(const AccessPattern& a, const AccessPattern& b);

// Throws IsaError "<opcode>: <what>" for an operand the semantics cannot use.
[[noreturn]] void fail(const Instruction& ins, const std::string& what);
void require_same_elems(const Instruction& ins, const AccessPattern& a, const char* a_name, const AccessPattern& b,
                        const char* b_name);
// Loads a [P,1] per-partition operand (P = partitions) into out[P].
void load_per_partition(CoreMemory& mem, const Instruction& ins, const AccessPattern& ap, const char* name,
                        uint32_t partitions, float* out);
// A per-partition operand that is either the [P,1] AP 'ap' (when from_ap) or the immediate 'imm'.
inline void per_partition_operand(CoreMemory& mem, const Instruction& ins, bool from_ap, const AccessPattern& ap,
                                  const char* name, float imm, uint32_t partitions, float* out) {
    if (from_ap) load_per_partition(mem, ins, ap, name, partitions, out);
    else std::fill(out, out + partitions, imm);
}

// float -> int32 the way bitwise ALU ops see their operands: truncate, saturate, NaN -> 0.
inline int32_t alu_to_int(float v) {
    if (std::isnan(v)) return 0;
    if (v >= 2147483648.0f) return std::numeric_limits<int32_t>::max();
    if (v <= -2147483648.0f) return std::numeric_limits<int32_t>::min();
    return static_cast<int32_t>(v);
}

// max/min that propagate NaN from either side (like torch.maximum/minimum).
inline float nan_max(float a, float b) { return (a != a || a > b) ? a : b; }
inline float nan_min(float a, float b) { return (a != a || a < b) ? a : b; }

// Calls fn(op_functor) with a functor computing 'a op b' in fp32, so that
// callers get one tight loop per operation.
template <class Fn>
void with_alu(AluOp op, Fn&& fn) {
    switch (op) {
        case AluOp::bypass: fn([](float a, float) { return a; }); return;
        case AluOp::add: fn([](float a, float b) { return a + b; }); return;
        case AluOp::sub: fn([](float a, float b) { return a - b; }); return;
        case AluOp::mul: fn([](float a, float b) { return a * b; }); return;
        case AluOp::div: fn([](float a, float b) { return a / b; }); return;
        case AluOp::max: fn([](float a, float b) { return nan_max(a, b); }); return;
        case AluOp::min: fn([](float a, float b) { return nan_min(a, b); }); return;
        case AluOp::pow: fn([](float a, float b) { return std::pow(a, b); }); return;
        case AluOp::mod: fn([](float a, float b) { return std::fmod(a, b); }); return;   // torch.fmod
        case AluOp::eq: fn([](float a, float b) { return a == b ? 1.0f : 0.0f; }); return;
        case AluOp::ne: fn([](float a, float b) { return a != b ? 1.0f : 0.0f; }); return;
        case AluOp::lt: fn([](float a, float b) { return a < b ? 1.0f : 0.0f; }); return;
        case AluOp::le: fn([](float a, float b) { return a <= b ? 1.0f : 0.0f; }); return;
        case AluOp::gt: fn([](float a, float b) { return a > b ? 1.0f : 0.0f; }); return;
        case AluOp::ge: fn([](float a, float b) { return a >= b ? 1.0f : 0.0f; }); return;
        case AluOp::logical_and: fn([](float a, float b) { return (a != 0.0f && b != 0.0f) ? 1.0f : 0.0f; }); return;
        case AluOp::logical_or: fn([](float a, float b) { return (a != 0.0f || b != 0.0f) ? 1.0f : 0.0f; }); return;
        case AluOp::logical_xor: fn([](float a, float b) { return ((a != 0.0f) != (b != 0.0f)) ? 1.0f : 0.0f; }); return;
        case AluOp::bitwise_and:
            fn([](float a, float b) { return static_cast<float>(alu_to_int(a) & alu_to_int(b)); });
            return;
        case AluOp::bitwise_or:
            fn([](float a, float b) { return static_cast<float>(alu_to_int(a) | alu_to_int(b)); });
            return;
        case AluOp::bitwise_xor:
            fn([](float a, float b) { return static_cast<float>(alu_to_int(a) ^ alu_to_int(b)); });
            return;
        case AluOp::abs_max: fn([](float a, float b) { return nan_max(std::fabs(a), std::fabs(b)); }); return;
        case AluOp::count_: break;
    }
    throw IsaError("unknown ALU op " + std::to_string(static_cast<int>(op)));
}

inline float alu_apply(AluOp op, float a, float b) {
    float r = 0;
    with_alu(op, [&](auto f) { r = f(a, b); });
    return r;
}

// Reductions: identity element and one fp32 step (max/min propagate NaN).
inline float reduce_identity(ReduceOp op) {
    switch (op) {
        case ReduceOp::add: return 0.0f;
        case ReduceOp::max: return -std::numeric_limits<float>::infinity();
        case ReduceOp::min: return std::numeric_limits<float>::infinity();
        default: throw IsaError(std::string("reduce op '") + reduce_op_name(op) + "' has no identity");
    }
}

inline float reduce_step(ReduceOp op, float acc, float v) {
    switch (op) {
        case ReduceOp::add: return acc + v;
        case ReduceOp::max: return nan_max(acc, v);
        case ReduceOp::min: return nan_min(acc, v);
        default: throw IsaError(std::string("reduce op '") + reduce_op_name(op) + "' is not a reduction");
    }
}

// Sequential fp32 reduction of x[0..n).
float reduce_run(ReduceOp op, const float* x, size_t n);
// out[r] = reduce_run(op, x + r * pitch, n) for r < rows, bit for bit. Several rows advance
// together (each still accumulating in index order), so their dependency chains overlap.
void reduce_runs(ReduceOp op, const float* x, size_t pitch, size_t rows, size_t n, float* out);
// out[c] = reduce over r of x[r * cols + c], accumulating r in index order (as reduce_run does).
void reduce_rows(ReduceOp op, const float* x, size_t rows, size_t cols, float* out);

// value(p, i..) of 'affine' for every element of 'shape' in row-major order
// (partition outermost) into out[shape.elems()].
void affine_values(const Affine& affine, const AccessPattern& shape, int64_t* out);

}  // namespace exec
}  // namespace trnsim
