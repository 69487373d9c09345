// Functional execution: dispatch to the per-instruction semantics in
// src/sim/exec/<name>.cpp, plus the helpers they share (exec_common.h).
#include <array>

#include "exec/exec_common.h"

namespace trnsim {

namespace {

using ExecFn = void (*)(CoreMemory&, const Instruction&);

const ExecFn kExecTable[] = {
#define ISA_INSTR(name, ...) &exec_##name,
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

namespace {

// Whether ap is an fp32 tile with each partition's free elements contiguous and 4-byte
// aligned; if so, the rows' base address and pitch (bounds checked by element()). In HBM the
// rows must also follow each other without overlapping (partition_stride >= the row length).
bool direct_f32(CoreMemory& mem, const AccessPattern& ap, RowsF32* rows) {
    if (ap.dtype != DType::f32 || ap.offset % 4 != 0 || ap.partitions == 0) return false;
    if (ap.space == MemSpace::HBM && ap.partitions > 1 &&
        (ap.partition_stride < 0 || static_cast<uint64_t>(ap.partition_stride) < ap.free_elems()))
        return false;
    int64_t expect = 1;
    for (int k = ap.ndim - 1; k >= 0; --k) {
        if (ap.size[k] == 1) continue;
        if (ap.stride[k] != expect) return false;
        expect *= ap.size[k];
    }
    const uint64_t F = ap.free_elems();
    if (F == 0) return false;
    uint8_t* first = mem.element(ap, 0, 0);
    mem.element(ap, ap.partitions - 1, F - 1);   // throws when the tile runs off the memory
    rows->base = reinterpret_cast<float*>(first);
    rows->pitch = ap.partitions > 1 ? static_cast<size_t>(mem.element(ap, 1, 0) - first) / 4 : F;
    rows->direct = true;
    return true;
}

bool same_tile(const AccessPattern& a, const AccessPattern& b) {
    return a.space == b.space && a.start_partition == b.start_partition && a.partitions == b.partitions &&
           a.offset == b.offset && a.dtype == b.dtype && a.free_elems() == b.free_elems() &&
           (a.space != MemSpace::HBM || a.partition_stride == b.partition_stride);
}

}  // namespace

bool may_overlap(const AccessPattern& a, const AccessPattern& b) {
    if (a.space != b.space || a.space == MemSpace::HBM) return a.space == b.space;
    if (a.start_partition >= b.start_partition + b.partitions || b.start_partition >= a.start_partition + a.partitions)
        return false;
    auto span = [](const AccessPattern& x) {
        int64_t lo = 0, hi = 0;
        for (int k = 0; k < x.ndim; ++k) {
            const int64_t ext = static_cast<int64_t>(x.size[k] - 1) * x.stride[k];
            (ext < 0 ? lo : hi) += ext;
        }
        const int64_t es = static_cast<int64_t>(dtype_size(x.dtype));
        return std::pair<int64_t, int64_t>(static_cast<int64_t>(x.offset) + lo * es,
                                           static_cast<int64_t>(x.offset) + (hi + 1) * es);
    };
    auto [a0, a1] = span(a);
    auto [b0, b1] = span(b);
    return a0 < b1 && b0 < a1;
}

RowsF32 source_rows(CoreMemory& mem, const AccessPattern& ap, ScratchSlot slot) {
    RowsF32 rows;
    if (direct_f32(mem, ap, &rows)) return rows;
    rows.base = scratch(slot, ap.elems());
    rows.pitch = ap.free_elems();
    mem.load_f32(ap, rows.base);
    return rows;
}

RowsF32 dest_rows(CoreMemory& mem, const AccessPattern& ap, ScratchSlot slot,
                  std::initializer_list<const AccessPattern*> srcs, bool allow_direct) {
    RowsF32 rows;
    bool hazard = !allow_direct;
    for (const AccessPattern* s : srcs) hazard = hazard || (may_overlap(ap, *s) && !same_tile(ap, *s));
    if (!hazard && direct_f32(mem, ap, &rows)) return rows;
    rows = RowsF32{scratch(slot, ap.elems()), ap.free_elems(), false};
    return rows;
}

void commit_rows(CoreMemory& mem, const AccessPattern& ap, const RowsF32& rows) {
    if (!rows.direct) mem.store_f32(ap, rows.base);
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

namespace {

// reduce_runs for one operation: 'step' is its fp32 combine.
template <class Step>
void reduce_runs_with(Step step, float identity, const float* x, size_t pitch, size_t rows, size_t n, float* out) {
    constexpr size_t kLanes = 8;
    size_t r = 0;
    for (; r + kLanes <= rows; r += kLanes) {
        const float* base = x + r * pitch;
        float acc[kLanes];
        for (size_t j = 0; j < kLanes; ++j) acc[j] = identity;
        for (size_t i = 0; i < n; ++i)
            for (size_t j = 0; j < kLanes; ++j) acc[j] = step(acc[j], base[j * pitch + i]);
        for (size_t j = 0; j < kLanes; ++j) out[r + j] = acc[j];
    }
    for (; r < rows; ++r) {
        const float* row = x + r * pitch;
        float acc = identity;
        for (size_t i = 0; i < n; ++i) acc = step(acc, row[i]);
        out[r] = acc;
    }
}

}  // namespace

void reduce_runs(ReduceOp op, const float* x, size_t pitch, size_t rows, size_t n, float* out) {
    if (rows == 0) return;
    const float identity = reduce_identity(op);
    switch (op) {
        case ReduceOp::add:
            reduce_runs_with([](float a, float v) { return a + v; }, identity, x, pitch, rows, n, out);
            break;
        case ReduceOp::max:
            reduce_runs_with([](float a, float v) { return nan_max(a, v); }, identity, x, pitch, rows, n, out);
            break;
        default:   // min (reduce_identity rejected everything else)
            reduce_runs_with([](float a, float v) { return nan_min(a, v); }, identity, x, pitch, rows, n, out);
            break;
    }
}

float reduce_run(ReduceOp op, const float* x, size_t n) {
    float out;
    reduce_runs(op, x, n, 1, n, &out);
    return out;
}

void reduce_rows(ReduceOp op, const float* x, size_t rows, size_t cols, float* out) {
    std::fill(out, out + cols, reduce_identity(op));
    for (size_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        switch (op) {
            case ReduceOp::add:
                for (size_t c = 0; c < cols; ++c) out[c] += row[c];
                break;
            case ReduceOp::max:
                for (size_t c = 0; c < cols; ++c) out[c] = nan_max(out[c], row[c]);
                break;
            default:   // min
                for (size_t c = 0; c < cols; ++c) out[c] = nan_min(out[c], row[c]);
                break;
        }
    }
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
