// Cumulative operators (ops/scan.h). Each row tile holds [P rows, R elements of the scanned dims]:
// one tensor_tensor_scan (r[i] = x[i] op r[i-1], its second operation bypassed) per chunk, in fp32,
// started from the identity or from the last value of the previous chunk of the same rows.
#include <algorithm>

#include "trnsim/ops.h"
#include "trnsim/tiling.h"

namespace trnsim::ops {

using namespace tiling;

void scan_tile(KernelBuilder& kb, Scan op, const AccessPattern& dst, const AccessPattern& src,
               const AccessPattern* carry) {
    Instruction ins;
    ins.op = Opcode::tensor_tensor_scan;
    ins.engine = Engine::Vector;
    ins.alu0 = op == Scan::sum ? AluOp::add : AluOp::mul;
    ins.alu1 = AluOp::bypass;
    ins.dst = dst;
    ins.src0 = src;
    ins.src1 = src;   // read by the bypassed second operation only
    ins.imm0 = op == Scan::sum ? 0.0f : 1.0f;
    if (carry) {
        ins.src2 = *carry;
        ins.flags |= F_S1_AP;
    }
    kb.emit(ins);
}

namespace {

// The running value of 'in' over 'dims', row tile by row tile. With 'last_only' out has in's shape
// without the dims (or with them of size 1) and receives each row's final value; otherwise out
// has in's shape and receives every running value.
void scan_rows(KernelBuilder& kb, const std::string& name, Scan op, const TensorDesc& out, const TensorDesc& in,
               const std::vector<int64_t>& dims, bool last_only) {
    check_desc(name, in, "in");
    check_desc(name, out, "out");
    int nred = 0;
    IterSpace s = reduction_space(name, in.sizes, dims, {{&out, last_only}, {&in, false}}, &nred);
    if (s.numel() == 0) return;
    if (!last_only) check_no_overlap(name, s, 0);
    nred = simplify(s, true, nred);
    const uint64_t per_col = dtype_size(in.dtype) + 4 + (last_only ? 0 : dtype_size(out.dtype));
    const std::vector<RowTile> tiles = plan_rows(s, nred, column_budget(kb.chip(), per_col, 2), false);
    uint32_t F = 1;
    for (const RowTile& t : tiles)
        for (uint32_t r : t.R) F = std::max(F, r);
    TileRing x_ring(kb, 2, {F}, in.dtype), w_ring(kb, 2, {F}, DType::f32);
    TileRing o_ring(kb, 2, {last_only ? 1u : F}, out.dtype);
    const Tile carry = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
    DmaQueues q(kb.chip(), 2);
    for (const RowTile& t : tiles) {
        const AccessPattern cv = tile_view(carry, t.P, 1);
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const uint32_t R = t.R[c];
            const bool final_chunk = c + 1 == t.chunks.size();
            const AccessPattern x = tile_view(x_ring.next(), t.P, R), w = tile_view(w_ring.next(), t.P, R);
            dma_tile(kb, q, x, hbm_ap(t.chunks[c], 1, in), false);
            scan_tile(kb, op, w, x, c > 0 ? &cv : nullptr);
            AccessPattern last = w;
            last.size[0] = 1;
            last.offset += static_cast<uint64_t>(R - 1) * dtype_size(DType::f32);
            if (!final_chunk) kb.tensor_copy(cv, last);
            if (last_only && final_chunk) {
                const AccessPattern o = tile_view(o_ring.next(), t.P, 1);
                kb.tensor_copy(o, last);
                dma_tile(kb, q, hbm_ap(t.kept, 0, out), o, true);
            } else if (!last_only) {
                const AccessPattern o = tile_view(o_ring.next(), t.P, R);
                kb.tensor_copy(o, w);
                dma_tile(kb, q, hbm_ap(t.chunks[c], 0, out), o, true);
            }
        }
    }
    kb.release(carry);
    o_ring.release(kb);
    w_ring.release(kb);
    x_ring.release(kb);
}

}  // namespace

void cumulative(KernelBuilder& kb, Scan op, const TensorDesc& out, const TensorDesc& in, int64_t dim) {
    const std::string name = op == Scan::sum ? "cumsum" : "cumprod";
    if (out.sizes != in.sizes) fail(name, "out " + out.str() + " must have the shape of " + in.str());
    if (in.dim() == 0) return copy(kb, out, in);
    if (dim < -in.dim() || dim >= in.dim()) fail(name, "dim " + std::to_string(dim) + " out of range");
    scan_rows(kb, name, op, out, in, {dim < 0 ? dim + in.dim() : dim}, false);
}

void prod(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, const std::vector<int64_t>& dims) {
    const std::string name = "prod";
    if (in.dim() == 0) return copy(kb, out, in);
    const std::vector<int64_t> rd = normalize_dims(name, in.dim(), dims);
    for (int64_t d : rd)
        if (in.sizes[d] == 0) return fill(kb, out, 1.0f);   // the empty product
    scan_rows(kb, name, Scan::prod, out, in, rd, true);
}

void sign_words(KernelBuilder& kb, const TensorDesc& high, const TensorDesc& low) {
    run_elementwise(kb, "sign_words", high, {&low}, 0,
                    [&](const std::vector<AccessPattern>& in, const AccessPattern& o, const std::vector<AccessPattern>&) {
                        kb.tensor_scalar(o, in[0], AluOp::lt, 0.0f, AluOp::mul, -1.0f);
                    });
}

}  // namespace trnsim::ops
