// The matmul on a logical NeuronCore: its output split between the physical cores (SPMD), each
// core running the single-core kernel (matmul_kernel.cpp) on its part.
#include <algorithm>
#include <functional>

#include "trnsim/ops/matmul_kernel.h"

namespace trnsim {

namespace {

constexpr uint32_t kRowTile = 128;   // output rows per TensorE tile (PE columns)
constexpr uint32_t kColTile = 512;   // output columns per PSUM bank of fp32

enum class Split { None, Batch, Rows, Cols };

// [begin, end) of part 'c' of 'n' parts of 'total' units, parts a multiple of 'grain' (the last
// part takes the rest).
std::pair<uint32_t, uint32_t> part(uint32_t total, uint32_t n, uint32_t c, uint32_t grain) {
    const uint32_t units = (total + grain - 1) / grain;
    const uint32_t per = (units + n - 1) / n;
    const uint32_t b = std::min(total, c * per * grain), e = std::min(total, (c + 1) * per * grain);
    return {b, e};
}

// Which dimension to split: every core must get at least one whole tile of it; among those,
// the one that makes the cores read the fewest bytes twice (splitting rows duplicates B, splitting
// columns duplicates A, splitting the batch duplicates only broadcast operands).
Split choose_split(const MatmulArgs& a, uint32_t cores) {
    const double es_a = static_cast<double>(dtype_size(a.a_dtype)), es_b = static_cast<double>(dtype_size(a.b_dtype));
    const double a_bytes = static_cast<double>(a.M) * a.K * es_a, b_bytes = static_cast<double>(a.K) * a.N * es_b;
    double best = -1;
    Split choice = Split::None;
    auto consider = [&](Split s, bool ok, double duplicated) {
        if (ok && (best < 0 || duplicated < best)) best = duplicated, choice = s;
    };
    const bool sums = a.a_column_sums.present;   // sums over all rows: rows stay together
    consider(Split::Batch, !sums && a.batch >= cores,
             (a.a_batch_stride == 0 ? a_bytes : 0) + (a.b_batch_stride == 0 ? b_bytes : 0));
    consider(Split::Rows, !sums && a.M >= cores * kRowTile, b_bytes * a.batch);
    consider(Split::Cols, a.N >= cores * kColTile || (a.M < cores * kRowTile && a.N >= cores * kRowTile),
             a_bytes * a.batch);
    return choice;
}

using Prologue = decltype(MatmulArgs::prologue);
using Epilogue = decltype(MatmulArgs::epilogue);

// Hooks of a part seeing the whole problem's coordinates.
void shift_hooks(MatmulArgs& p, const MatmulArgs& whole, uint32_t batch0, uint32_t row0, uint32_t col0) {
    if (whole.prologue) {
        const Prologue& f = whole.prologue;
        p.prologue = [&f, batch0, row0, col0](KernelBuilder& kb, uint32_t b, uint32_t r, uint32_t rows, uint32_t c,
                                              uint32_t cols, const MatmulDma& load) {
            f(kb, b + batch0, r + row0, rows, c + col0, cols, load);
        };
    }
    if (whole.epilogue) {
        const Epilogue& f = whole.epilogue;
        p.epilogue = [&f, batch0, row0, col0](KernelBuilder& kb, const AccessPattern& tile, uint32_t b, uint32_t r,
                                              uint32_t c, const MatmulDma& store) {
            f(kb, tile, b + batch0, r + row0, c + col0, store);
        };
    }
}

// The part [b0, b1) x [r0, r1) x [c0, c1) of the problem (element offsets into every operand).
MatmulArgs sub_problem(const MatmulArgs& whole, uint32_t b0, uint32_t b1, uint32_t r0, uint32_t r1, uint32_t c0,
                       uint32_t c1) {
    MatmulArgs p = whole;
    const int64_t lda = whole.lda ? whole.lda : (whole.a_transposed ? whole.M : whole.K);
    const int64_t ldb = whole.ldb ? whole.ldb : (whole.b_transposed ? whole.K : whole.N);
    const int64_t ldc = whole.ldc ? whole.ldc : whole.N;
    p.lda = lda, p.ldb = ldb, p.ldc = ldc;
    auto at = [](uint64_t addr, DType dt, int64_t elems) {
        return addr + static_cast<uint64_t>(elems * static_cast<int64_t>(dtype_size(dt)));
    };
    // Element offset of row r (of M) in A, column c (of N) in B, (r, c) in C and D.
    const int64_t a_row = whole.a_transposed ? whole.a_col_stride : lda;
    const int64_t b_col = whole.b_transposed ? ldb : whole.b_col_stride;
    p.a = at(whole.a, whole.a_dtype, b0 * whole.a_batch_stride + r0 * a_row);
    p.b = at(whole.b, whole.b_dtype, b0 * whole.b_batch_stride + c0 * b_col);
    p.c = at(whole.c, whole.c_dtype, b0 * whole.c_batch_stride + r0 * ldc + c0 * whole.c_col_stride);
    if (whole.addend.present)
        p.addend.addr = at(whole.addend.addr, whole.addend.dtype,
                           b0 * whole.addend.batch_stride + r0 * whole.addend.row_stride + c0 * whole.addend.col_stride);
    p.batch = b1 - b0, p.M = r1 - r0, p.N = c1 - c0;
    shift_hooks(p, whole, b0, r0, c0);
    return p;
}

}  // namespace

void build_matmul(KernelBuilder& kb, const MatmulArgs& args) {
    const uint32_t cores = kb.num_cores();
    const Split split = cores > 1 && kb.core() == 0 ? choose_split(args, cores) : Split::None;
    if (split == Split::None) {
        build_matmul_on_core(kb, args);
        return;
    }
    for (uint32_t c = 0; c < cores; ++c) {
        MatmulArgs p;
        if (split == Split::Batch) {
            const auto [b, e] = part(args.batch, cores, c, 1);
            p = sub_problem(args, b, e, 0, args.M, 0, args.N);
        } else if (split == Split::Rows) {
            const auto [b, e] = part(args.M, cores, c, kRowTile);
            p = sub_problem(args, 0, args.batch, b, e, 0, args.N);
        } else {
            const uint32_t grain = args.N >= cores * kColTile ? kColTile : kRowTile;
            const auto [b, e] = part(args.N, cores, c, grain);
            p = sub_problem(args, 0, args.batch, 0, args.M, b, e);
            // The column sums of A do not depend on the columns of C: the first core computes them.
            if (c > 0) p.a_column_sums.present = false;
        }
        if (p.batch == 0 || p.M == 0 || p.N == 0) continue;
        kb.set_core(c);
        build_matmul_on_core(kb, p);
    }
    kb.set_core(0);
}

}  // namespace trnsim
