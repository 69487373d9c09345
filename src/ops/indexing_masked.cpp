// Mask-driven indexing (ops/indexing.h): nonzero's flat indices, masked_select and masked_scatter.
// The mask is walked in row-major order in chunks on one partition (the running count is a
// sequential dependency) with a tensor_tensor_scan of (mask != 0) carried from chunk to chunk,
// which ranks every selected element; an indirect DMA then moves each one by its rank.
#include <algorithm>

#include "trnsim/ops.h"
#include "trnsim/tiling.h"

namespace trnsim::ops {

using namespace tiling;

namespace {

constexpr uint32_t kChunk = 4096;
constexpr int64_t kExactCount = int64_t{1} << 24;

// [1, n] view of a dense 1-D HBM tensor from element 'at'.
AccessPattern flat_ap(const TensorDesc& t, int64_t at, uint32_t n) {
    AccessPattern ap;
    ap.space = MemSpace::HBM;
    ap.dtype = t.dtype;
    ap.arg = t.arg;
    ap.offset = static_cast<uint64_t>((t.offset + at) * static_cast<int64_t>(dtype_size(t.dtype)));
    ap.partitions = 1;
    ap.ndim = 1;
    ap.size = {n, 1, 1, 1};
    ap.stride = {1, 0, 0, 0};
    return ap;
}

void require_dense(const std::string& op, const TensorDesc& t) {
    if (!t.is_contiguous()) throw NeedsDenseOperand(t.arg, op + ": " + t.str() + " is not contiguous");
}

AccessPattern last_col(const AccessPattern& v) {
    AccessPattern a = v;
    a.offset += static_cast<uint64_t>(v.size[0] - 1) * dtype_size(v.dtype);
    a.size[0] = 1;
    return a;
}

// Calls body(at, n, m, rank, q) per chunk of the mask: m = (mask != 0) and rank = the inclusive
// running count (both [1, n] f32).
template <class Body>
void for_each_mask_chunk(KernelBuilder& kb, const std::string& op, const TensorDesc& mask, Body&& body) {
    require_dense(op, mask);
    const int64_t N = mask.numel();
    if (N >= kExactCount) fail(op, "masks of 2^24 elements or more (ranks are counted in fp32)");
    const Tile raw = kb.alloc_sbuf(1, {kChunk}, DType::f32), m = kb.alloc_sbuf(1, {kChunk}, DType::f32),
               rank = kb.alloc_sbuf(1, {kChunk}, DType::f32), carry = kb.alloc_sbuf(1, {1}, DType::f32);
    DmaQueues q(kb.chip());
    for (int64_t at = 0; at < N; at += kChunk) {
        const uint32_t n = static_cast<uint32_t>(std::min<int64_t>(kChunk, N - at));
        const AccessPattern rv = tile_view(raw, 1, n), mv = tile_view(m, 1, n), kv = tile_view(rank, 1, n),
                            cv = tile_view(carry, 1, 1);
        kb.dma_copy(rv, flat_ap(mask, at, n), q.load());
        kb.tensor_scalar(mv, rv, AluOp::ne, 0.0f);
        const AccessPattern cv_in = cv;
        scan_tile(kb, Scan::sum, kv, mv, at > 0 ? &cv_in : nullptr);
        kb.tensor_copy(cv, last_col(kv));
        body(at, n, mv, kv, q);
    }
    kb.release(carry);
    kb.release(rank);
    kb.release(m);
    kb.release(raw);
}

// out[rank - 1] = value of each selected element; the others write out[count] (out has count + 1
// elements; the caller keeps the first count). values: null = the flat index (out i32).
void compact(KernelBuilder& kb, const std::string& op, const TensorDesc& out, const TensorDesc& mask,
             const TensorDesc* values) {
    require_dense(op, out);
    if (out.numel() < 1) fail(op, "out " + out.str() + " must hold the count plus one element");
    if (values) {
        require_dense(op, *values);
        if (values->numel() != mask.numel()) fail(op, "values " + values->str() + " must match the mask " + mask.str());
    } else if (out.dtype != DType::i32) {
        fail(op, "out " + out.str() + " must be i32 (flat indices)");
    }
    const float dummy = static_cast<float>(out.numel() - 1);
    const TensorDesc table = TensorDesc::contiguous(out.arg, out.dtype, {out.numel()});
    const Tile dst = kb.alloc_sbuf(1, {kChunk}, DType::i32), val = kb.alloc_sbuf(1, {kChunk}, out.dtype);
    for_each_mask_chunk(kb, op, mask, [&](int64_t at, uint32_t n, const AccessPattern& mv, const AccessPattern& kv,
                                          DmaQueues& q) {
        const AccessPattern dv = tile_view(dst, 1, n), vv = tile_view(val, 1, n);
        kb.tensor_scalar(kv, kv, AluOp::sub, 1.0f);
        select_imm(kb, dv, mv, kv, dummy);
        if (values) {
            kb.dma_copy(vv, flat_ap(*values, at, n), q.load());
        } else {
            Affine a;
            a.base = static_cast<int32_t>(at);
            a.free_mul[0] = 1;
            kb.iota(vv, a);
        }
        Instruction ins;
        ins.op = Opcode::dma_scatter;
        ins.engine = Engine::DMA;
        ins.dma_queue = static_cast<uint8_t>(q.store());
        ins.dst = flat_ap(table, 0, static_cast<uint32_t>(out.numel()));
        ins.src0 = vv;
        ins.src1 = dv;
        kb.emit(ins);
    });
    kb.release(val);
    kb.release(dst);
}

}  // namespace

void nonzero_flat(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& mask) {
    compact(kb, "nonzero", out, mask, nullptr);
}

void masked_select(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, const TensorDesc& mask) {
    compact(kb, "masked_select", out, mask, &in);
}

void masked_scatter(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& self, const TensorDesc& mask,
                    const TensorDesc& source) {
    const std::string op = "masked_scatter";
    for (const TensorDesc* t : {&out, &self, &source}) require_dense(op, *t);
    if (out.numel() != mask.numel() || self.numel() != mask.numel())
        fail(op, "out " + out.str() + " and self " + self.str() + " must match the mask " + mask.str());
    if (source.numel() < 1) fail(op, "source " + source.str() + " is empty");
    const TensorDesc table = TensorDesc::contiguous(source.arg, source.dtype, {source.numel()});
    const Tile src_idx = kb.alloc_sbuf(1, {kChunk}, DType::i32), got = kb.alloc_sbuf(1, {kChunk}, out.dtype),
               old = kb.alloc_sbuf(1, {kChunk}, out.dtype);
    for_each_mask_chunk(kb, op, mask, [&](int64_t at, uint32_t n, const AccessPattern& mv, const AccessPattern& kv,
                                          DmaQueues& q) {
        const AccessPattern iv = tile_view(src_idx, 1, n), gv = tile_view(got, 1, n), ov = tile_view(old, 1, n);
        // Selected elements take source[rank - 1]; the others read source[0] and keep self.
        kb.tensor_scalar(kv, kv, AluOp::sub, 1.0f);
        select_imm(kb, iv, mv, kv, 0.0f);
        Instruction ins;
        ins.op = Opcode::dma_gather;
        ins.engine = Engine::DMA;
        ins.dma_queue = static_cast<uint8_t>(q.load());
        ins.dst = gv;
        ins.src0 = flat_ap(table, 0, static_cast<uint32_t>(source.numel()));
        ins.src1 = iv;
        kb.emit(ins);
        kb.dma_copy(ov, flat_ap(self, at, n), q.load());
        AccessPattern sel = ov;
        kb.select(sel, mv, gv, ov);
        kb.dma_copy(flat_ap(out, at, n), sel, q.store());
    });
    kb.release(old);
    kb.release(got);
    kb.release(src_idx);
}

void unravel_index(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& flat, const std::vector<int64_t>& sizes) {
    const std::string op = "nonzero";
    const int64_t nd = static_cast<int64_t>(sizes.size());
    if (out.dim() != 2 || out.sizes[1] != nd || flat.dim() != 1 || flat.sizes[0] != out.sizes[0])
        fail(op, "out " + out.str() + " must be [count, " + std::to_string(nd) + "] for flat " + flat.str());
    int64_t stride = 1;
    for (int64_t d = nd - 1; d >= 0; --d) {
        TensorDesc col = out;
        col.sizes = {out.sizes[0]};
        col.strides = {out.strides[0]};
        col.offset = out.offset + d * out.strides[1];
        const float st = static_cast<float>(stride), size = static_cast<float>(sizes[d]);
        run_elementwise(kb, op, col, {&flat}, 1,
                        [&](const std::vector<AccessPattern>& in, const AccessPattern& o,
                            const std::vector<AccessPattern>& tmp) {
                            // (flat - flat mod stride) / stride is exact; then mod size.
                            kb.tensor_scalar(tmp[0], in[0], AluOp::mod, st);
                            kb.tensor_tensor(tmp[0], in[0], tmp[0], AluOp::sub);
                            kb.tensor_scalar(o, tmp[0], AluOp::div, st, AluOp::mod, size);
                        });
        stride *= sizes[d];
    }
}

}  // namespace trnsim::ops
