// Matrix products: mm, bmm, addmm, baddbmm, linear (ops.h) on the blocked
// TensorE kernel (kernels.h). This file only maps strided, batched, broadcast
// views onto MatmulArgs: batch dims that fold into M become one large GEMM,
// the innermost mergeable batch dims become the kernel's batch loop, and any
// remaining outer batch dims are unrolled into several kernel calls.
#include <algorithm>

#include "trnsim/ops.h"
#include "trnsim/tiling.h"
#include "trnsim/ops/matmul_kernel.h"

namespace trnsim::ops {

namespace {

using tiling::fail;

// One operand of the product seen over the output's [batch..., rows, cols] loop.
struct Operand {
    uint8_t arg = 1;
    DType dtype = DType::f32;
    int64_t offset = 0;                  // elements
    std::vector<int64_t> batch_strides;  // one per output batch dim (0 = broadcast)
    int64_t row_stride = 0, col_stride = 0;
};

// 'Operand' for t, whose last two dims are [rows, cols] and whose leading dims broadcast to 'batch'.
Operand operand_of(const std::string& op, const TensorDesc& t, const std::vector<int64_t>& batch, const char* name) {
    tiling::check_desc(op, t, name);
    if (t.dim() < 2) fail(op, std::string(name) + " " + t.str() + " must have at least 2 dims");
    Operand o;
    o.arg = t.arg;
    o.dtype = t.dtype;
    o.offset = t.offset;
    o.row_stride = t.strides[t.dim() - 2];
    o.col_stride = t.strides[t.dim() - 1];
    const int64_t lead = t.dim() - 2;
    if (lead > static_cast<int64_t>(batch.size()))
        fail(op, std::string(name) + " " + t.str() + " has more batch dims than the output");
    o.batch_strides.assign(batch.size(), 0);
    const size_t skip = batch.size() - static_cast<size_t>(lead);
    for (int64_t d = 0; d < lead; ++d) {
        const int64_t s = t.sizes[d], want = batch[skip + d];
        if (s == want) o.batch_strides[skip + d] = s == 1 ? 0 : t.strides[d];
        else if (s != 1) fail(op, std::string(name) + " " + t.str() + " does not broadcast to the output's batch dims");
    }
    return o;
}

// The problem after folding and merging: batch dims outermost first, then [M, K] x [K, N].
struct Problem {
    std::vector<int64_t> batch;
    int64_t M = 0, K = 0, N = 0;
    Operand a, b, c, d;      // d: the addend (optional)
    bool has_d = false;
    float alpha = 1.0f, beta = 1.0f;
};

std::vector<Operand*> operands(Problem& p) {
    std::vector<Operand*> ops{&p.a, &p.b, &p.c};
    if (p.has_d) ops.push_back(&p.d);
    return ops;
}

// out^T = b^T a^T: used when the output is stored column-major.
void transpose_problem(Problem& p) {
    std::swap(p.a, p.b);
    std::swap(p.M, p.N);
    for (Operand* o : operands(p)) std::swap(o->row_stride, o->col_stride);
}

// Drops size-1 batch dims and merges neighbours that are contiguous in every operand.
void merge_batch_dims(Problem& p) {
    const std::vector<Operand*> ops = operands(p);
    std::vector<int64_t> sizes;
    std::vector<std::vector<int64_t>> strides(ops.size());
    for (size_t d = 0; d < p.batch.size(); ++d) {
        if (p.batch[d] == 1) continue;
        bool merge = !sizes.empty();
        for (size_t k = 0; merge && k < ops.size(); ++k)
            merge = strides[k].back() == ops[k]->batch_strides[d] * p.batch[d];
        if (merge) sizes.back() *= p.batch[d];
        else sizes.push_back(p.batch[d]);
        for (size_t k = 0; k < ops.size(); ++k) {
            if (merge) strides[k].back() = ops[k]->batch_strides[d];
            else strides[k].push_back(ops[k]->batch_strides[d]);
        }
    }
    p.batch = sizes;
    for (size_t k = 0; k < ops.size(); ++k) ops[k]->batch_strides = strides[k];
}

// When b is shared by every problem and the batch dims continue a's, c's and d's rows, the
// whole batch is one GEMM with more rows (e.g. linear on [B, S, K]).
void fold_batch_into_rows(Problem& p) {
    while (!p.batch.empty()) {
        const size_t d = p.batch.size() - 1;
        if (p.b.batch_strides[d] != 0) return;
        for (Operand* o : {&p.a, &p.c, &p.d}) {
            if (o == &p.d && !p.has_d) continue;
            if (p.M != 1 && o->batch_strides[d] != o->row_stride * p.M) return;
        }
        for (Operand* o : {&p.a, &p.c, &p.d}) {
            if (o == &p.d && !p.has_d) continue;
            if (p.M == 1) o->row_stride = o->batch_strides[d];
            o->batch_strides.pop_back();
        }
        p.b.batch_strides.pop_back();
        p.M *= p.batch[d];
        p.batch.pop_back();
    }
}

// How the kernel reads a [R, C] operand with strides (rs, cs): as stored rows of C elements, or
// stored transposed (rows of R elements). ld = elements between stored rows, col = within one.
struct Layout {
    bool transposed;
    int64_t ld, col;
};
Layout layout_of(const std::string& op, const char* name, uint8_t arg, int64_t R, int64_t C, int64_t rs, int64_t cs) {
    Layout l;
    if (rs == 0 && R > 1) l = {true, C == 1 ? 1 : cs, 0};   // broadcast rows: columns of equal elements
    else if (cs == 1 || C == 1) l = {false, R == 1 ? 1 : rs, 1};
    else if (rs == 1 || R == 1) l = {true, cs, 1};
    else l = {false, rs, cs};
    if (l.ld == 0)
        throw NeedsDenseOperand(arg, op + ": " + name + " is broadcast along both matrix dims");
    return l;
}

uint64_t byte_offset(const Operand& o, int64_t elems) {
    return static_cast<uint64_t>((o.offset + elems) * static_cast<int64_t>(dtype_size(o.dtype)));
}

// Runs the kernel for batch dims [0, batch.size()-1) unrolled at the given element offsets.
void emit(KernelBuilder& kb, const std::string& op, const Problem& p) {
    const size_t nb = p.batch.size();
    MatmulArgs m;
    m.M = static_cast<uint32_t>(p.M);
    m.K = static_cast<uint32_t>(p.K);
    m.N = static_cast<uint32_t>(p.N);
    if (p.M > UINT32_MAX || p.K > UINT32_MAX || p.N > UINT32_MAX) fail(op, "matrix dims beyond 2^32");
    m.a_dtype = p.a.dtype;
    m.b_dtype = p.b.dtype;
    m.c_dtype = p.c.dtype;
    m.a_arg = p.a.arg;
    m.b_arg = p.b.arg;
    m.c_arg = p.c.arg;
    m.alpha = p.alpha;
    const Layout la = layout_of(op, "a", p.a.arg, p.M, p.K, p.a.row_stride, p.a.col_stride);
    m.a_transposed = la.transposed;
    m.lda = la.ld;
    m.a_col_stride = la.col;
    const Layout lb = layout_of(op, "b", p.b.arg, p.K, p.N, p.b.row_stride, p.b.col_stride);
    m.b_transposed = lb.transposed;
    m.ldb = lb.ld;
    m.b_col_stride = lb.col;
    const Layout lc = layout_of(op, "out", p.c.arg, p.M, p.N, p.c.row_stride, p.c.col_stride);
    if (lc.transposed) fail(op, "out rows overlap (stride-0 rows)");
    m.ldc = lc.ld;
    m.c_col_stride = lc.col;
    if (p.has_d) {
        m.addend.present = true;
        m.addend.arg = p.d.arg;
        m.addend.dtype = p.d.dtype;
        m.addend.row_stride = p.d.row_stride;
        m.addend.col_stride = p.d.col_stride;
        m.addend.beta = p.beta;
    }
    m.batch = nb ? static_cast<uint32_t>(p.batch[nb - 1]) : 1;
    if (nb) {
        m.a_batch_stride = p.a.batch_strides[nb - 1];
        m.b_batch_stride = p.b.batch_strides[nb - 1];
        m.c_batch_stride = p.c.batch_strides[nb - 1];
        if (p.has_d) m.addend.batch_stride = p.d.batch_strides[nb - 1];
    }
    // Outer batch dims: an odometer over their indices.
    const size_t outer = nb ? nb - 1 : 0;
    std::vector<int64_t> idx(outer, 0);
    for (;;) {
        auto at = [&](const Operand& o) {
            int64_t e = 0;
            for (size_t d = 0; d < outer; ++d) e += idx[d] * o.batch_strides[d];
            return byte_offset(o, e);
        };
        m.a = at(p.a);
        m.b = at(p.b);
        m.c = at(p.c);
        if (p.has_d) m.addend.addr = at(p.d);
        build_matmul(kb, m);
        size_t d = outer;
        while (d > 0 && ++idx[d - 1] == p.batch[d - 1]) idx[--d] = 0;
        if (d == 0) break;
    }
}

void check_dtypes(const std::string& op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b) {
    for (const TensorDesc* t : {&out, &a, &b})
        if (t->dtype != DType::f32 && t->dtype != DType::bf16 && t->dtype != DType::f16)
            fail(op, "dtype " + std::string(dtype_name(t->dtype)) + " of " + t->str() +
                         " not supported (f32, bf16, f16)");
}

// out[batch..., M, N] = beta * self + alpha * a @ b with every batch dim broadcast.
void gemm(KernelBuilder& kb, const std::string& op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b,
          const TensorDesc* self, float beta, float alpha) {
    check_dtypes(op, out, a, b);
    tiling::check_desc(op, out, "out");
    if (out.dim() < 2) fail(op, "out " + out.str() + " must have at least 2 dims");
    Problem p;
    p.batch.assign(out.sizes.begin(), out.sizes.end() - 2);
    p.M = out.sizes[out.dim() - 2];
    p.N = out.sizes[out.dim() - 1];
    p.a = operand_of(op, a, p.batch, "a");
    p.b = operand_of(op, b, p.batch, "b");
    p.c = operand_of(op, out, p.batch, "out");
    p.K = a.sizes[a.dim() - 1];
    if (a.sizes[a.dim() - 2] != p.M || b.sizes[b.dim() - 2] != p.K || b.sizes[b.dim() - 1] != p.N)
        fail(op, "shapes " + a.str() + " @ " + b.str() + " do not give " + out.str());
    p.alpha = alpha;
    p.beta = beta;
    if (self && beta != 0.0f) {
        tiling::check_desc(op, *self, "self");
        TensorDesc d = *self;
        d.strides = tiling::broadcast_strides(op, *self, out.sizes);
        d.sizes = out.sizes;
        p.d = operand_of(op, d, p.batch, "self");
        p.has_d = true;
    }
    if (p.M == 0 || p.N == 0 || out.numel() == 0) return;
    // An output stored column-major is computed transposed, so stores write whole rows.
    if (p.c.col_stride != 1 && p.N > 1 && (p.c.row_stride == 1 || p.M == 1)) transpose_problem(p);
    merge_batch_dims(p);
    fold_batch_into_rows(p);
    emit(kb, op, p);
}

// The [.., N, K] weight seen as [.., K, N].
TensorDesc transposed_last(const TensorDesc& t) {
    TensorDesc r = t;
    const int64_t n = t.dim();
    std::swap(r.sizes[n - 1], r.sizes[n - 2]);
    std::swap(r.strides[n - 1], r.strides[n - 2]);
    return r;
}

}  // namespace

void mm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b) {
    if (out.dim() != 2 || a.dim() != 2 || b.dim() != 2) fail("mm", "operands must be 2-D");
    gemm(kb, "mm", out, a, b, nullptr, 0.0f, 1.0f);
}

void bmm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b) {
    gemm(kb, "bmm", out, a, b, nullptr, 0.0f, 1.0f);
}

void addmm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& self, const TensorDesc& a, const TensorDesc& b,
           float beta, float alpha) {
    if (out.dim() != 2 || a.dim() != 2 || b.dim() != 2) fail("addmm", "operands must be 2-D");
    gemm(kb, "addmm", out, a, b, &self, beta, alpha);
}

void baddbmm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& self, const TensorDesc& a,
             const TensorDesc& b, float beta, float alpha) {
    gemm(kb, "baddbmm", out, a, b, &self, beta, alpha);
}

void linear(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& x, const TensorDesc& weight,
            const TensorDesc* bias) {
    if (weight.dim() != 2) fail("linear", "weight " + weight.str() + " must be [out_features, in_features]");
    if (x.dim() < 1 || out.dim() != x.dim()) fail("linear", "x " + x.str() + " and out " + out.str() + " ranks differ");
    if (bias && (bias->dim() != 1 || bias->sizes[0] != weight.sizes[0]))
        fail("linear", "bias " + bias->str() + " must be [out_features]");
    // A 1-D input is one row.
    TensorDesc xx = x, oo = out;
    if (x.dim() == 1) {
        xx.sizes.insert(xx.sizes.begin(), 1);
        xx.strides.insert(xx.strides.begin(), 0);
        oo.sizes.insert(oo.sizes.begin(), 1);
        oo.strides.insert(oo.strides.begin(), 0);
    }
    gemm(kb, "linear", oo, xx, transposed_last(weight), bias, 1.0f, 1.0f);
}

}  // namespace trnsim::ops
