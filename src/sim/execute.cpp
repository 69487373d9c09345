// Functional execution: dispatch to the per-instruction semantics in
// src/sim/exec/<name>.cpp, plus the helpers they share (exec_common.h).
#include <array>

#include "exec/exec_common.h"

namespace trnsim {

namespace {

using ExecFn = void (*)(CoreMemory&, const Instruction&);

const ExecFn kExecTable[] = {
#define ISA_INSTR(name, engines, nsrc, writes_acc, summary) &exec_##name,
#include "trnsim/instructions.def"
#undef ISA_INSTR
};
static_assert(sizeof(kExecTable) / sizeof(kExecTable[0]) == static_cast<size_t>(Opcode::count_));

}  // namespace

void execute(CoreMemory& mem, const Instruction& ins) {
    const auto i = static_cast<size_t>(ins.op);
    if (i >= static_cast<size_t>(Opcode::count_)) throw IsaError("execute: unknown opcode " + std::to_string(i));
    kExecTable[i](mem, ins);
}

namespace exec {

float* scratch(ScratchSlot slot, size_t n) {
    thread_local std::array<std::vector<float>, kNumScratch> buffers;
    std::vector<float>& buf = buffers[slot];
    if (buf.size() < n) buf.resize(n);
    return buf.data();
}

void fail(const Instruction& ins, const std::string& what) {
    throw IsaError(std::string(opcode_name(ins.op)) + ": " + what);
}

void require_same_elems(const Instruction& ins, const AccessPattern& a, const char* a_name, const AccessPattern& b,
                        const char* b_name) {
    if (a.partitions != b.partitions || a.free_elems() != b.free_elems())
        fail(ins, std::string(a_name) + " " + format_ap(a) + " and " + b_name + " " + format_ap(b) +
                      " differ in shape ([partitions, free elements] must match)");
}

void load_per_partition(CoreMemory& mem, const Instruction& ins, const AccessPattern& ap, const char* name,
                        uint32_t partitions, float* out) {
    if (ap.partitions != partitions || ap.free_elems() != 1)
        fail(ins, std::string(name) + " " + format_ap(ap) + " must be [" + std::to_string(partitions) +
                      ", 1] (one value per partition)");
    mem.load_f32(ap, out);
}

float reduce_run(ReduceOp op, const float* x, size_t n) {
    float acc = reduce_identity(op);
    switch (op) {
        case ReduceOp::add:
            for (size_t i = 0; i < n; ++i) acc += x[i];
            break;
        case ReduceOp::max:
            for (size_t i = 0; i < n; ++i) acc = nan_max(acc, x[i]);
            break;
        default:   // min (reduce_identity rejected everything else)
            for (size_t i = 0; i < n; ++i) acc = nan_min(acc, x[i]);
            break;
    }
    return acc;
}

void affine_values(const Affine& affine, const AccessPattern& shape, int64_t* out) {
    const uint64_t free = shape.free_elems();
    for (uint32_t p = 0; p < shape.partitions; ++p) {
        std::array<uint32_t, kMaxFreeDims> idx{};
        int64_t value = affine.base + static_cast<int64_t>(affine.partition_mul) * p;
        for (uint64_t f = 0; f < free; ++f) {
            *out++ = value;
            for (int k = shape.ndim - 1; k >= 0; --k) {   // odometer, updating the value incrementally
                value += affine.free_mul[k];
                if (++idx[k] < shape.size[k]) break;
                value -= static_cast<int64_t>(affine.free_mul[k]) * shape.size[k];
                idx[k] = 0;
            }
        }
    }
}

}  // namespace exec
}  // namespace trnsim
