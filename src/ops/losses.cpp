// Losses (ops/losses.h): nll_loss forward and backward, the target classes picked from the input
// by per-element indirect DMAs (indexed_access.h).
#include <algorithm>

#include "indexed_access.h"

namespace trnsim::ops {

using namespace indexing_detail;

namespace {

// The loss's loop: input [N, C, d...] (a 1-D [C] input is one row) against target [N, d...].
struct NllShape {
    TensorDesc input, target;   // input as [N, C, d...], target as [N, d...]
    IndexedTable table;         // input's elements of the target classes
    int64_t classes = 0;
};
NllShape nll_shape(const std::string& op, const TensorDesc& input, const TensorDesc& target,
                   const TensorDesc* weight) {
    tiling::check_desc(op, input, "input");
    tiling::check_desc(op, target, "target");
    if (target.dtype != DType::i32) fail(op, "target " + target.str() + " must be i32");
    NllShape s;
    s.input = input;
    s.target = target;
    if (input.dim() == 1) {   // no batch dim: one row
        if (target.numel() != 1) fail(op, "target " + target.str() + " must be one class for input " + input.str());
        s.input.sizes.insert(s.input.sizes.begin(), 1);
        s.input.strides.insert(s.input.strides.begin(), 0);
        s.target.sizes = {1};
        s.target.strides = {1};
    }
    if (s.input.dim() < 2) fail(op, "input " + input.str() + " must be [C], [N, C] or [N, C, d...]");
    s.classes = s.input.sizes[1];
    std::vector<int64_t> want = s.input.sizes;
    want.erase(want.begin() + 1);
    if (s.target.sizes != want) fail(op, "target " + target.str() + " does not match input " + input.str());
    if (weight) {
        tiling::check_desc(op, *weight, "weight");
        if (weight->dim() != 1 || weight->sizes[0] != s.classes)
            fail(op, "weight " + weight->str() + " must have one entry per class");
    }
    for (int64_t d = 0; d < s.input.dim(); ++d)
        if (d != 1) s.table.base_strides.push_back(s.input.strides[d]);
    s.table.dim_size = s.classes;
    s.table.dim_stride = s.input.strides[1];
    return s;
}

// The class weight as a table of one element per class.
AccessPattern weight_table(const TensorDesc& w) {
    AccessPattern ap;
    ap.space = MemSpace::HBM;
    ap.dtype = w.dtype;
    ap.arg = w.arg;
    ap.offset = static_cast<uint64_t>(w.offset) * dtype_size(w.dtype);
    ap.partitions = 1;
    ap.ndim = 1;
    ap.size = {static_cast<uint32_t>(1 + (w.sizes[0] - 1) * w.strides[0]), 1, 1, 1};
    ap.stride = {1, 0, 0, 0};
    return ap;
}

// valid = target != ignore_index; target = valid ? target : 0 (in place); w = the class weights of
// the targets (or none: 1).
void nll_targets(KernelBuilder& kb, tiling::DmaQueues& q, const IndexedTile& t, const NllShape& s,
                 const TensorDesc* weight, int64_t ignore_index, const AccessPattern& valid, const AccessPattern& w) {
    kb.tensor_scalar(valid, t.idx, AluOp::ne, static_cast<float>(ignore_index));
    tiling::select_imm(kb, t.idx, valid, t.idx, 0.0f);
    if (weight) {
        flat_offsets(kb, t, s.classes, weight->strides[0], false);
        indirect(kb, q, true, weight_table(*weight), w, t.flat);
    }
}

}  // namespace

void nll_loss(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& total_weight, const TensorDesc& input,
              const TensorDesc& target, const TensorDesc* weight, LossReduction reduction, int64_t ignore_index) {
    const std::string op = "nll_loss";
    NllShape s = nll_shape(op, input, target, weight);
    s.table.table = &s.input;
    const bool elementwise = reduction == LossReduction::none;
    // Reduction none with a batch writes one loss per target and total_weight 0 (as aten);
    // otherwise both sums are formed (a 1-D input's 'none' output is its single loss).
    const bool sums = !elementwise || input.dim() == 1;
    TensorDesc out1 = out;
    if (elementwise) {
        if (out.numel() != s.target.numel()) fail(op, "out " + out.str() + " must have target's shape");
        out1 = at_least_1d(out);
        out1.sizes = s.target.sizes;
        if (out.dim() == 0) out1.strides = {1};
    } else if (out.numel() != 1) {
        fail(op, "out " + out.str() + " must be one element for a reduced loss");
    }
    if (total_weight.numel() != 1) fail(op, "total_weight " + total_weight.str() + " must be one element");
    Tile acc, part;
    if (sums) {
        acc = kb.alloc_sbuf(tiling::kPartitions, {2}, DType::f32);   // per partition: loss, weight
        part = kb.alloc_sbuf(tiling::kPartitions, {2}, DType::f32);
        kb.memset(acc.ap(), 0.0f);
    }
    for_each_indexed_tile(kb, op, s.target, s.table, {&out1}, 3, [&](const IndexedTile& t, tiling::DmaQueues& q) {
        const AccessPattern &valid = t.tmp[0], &x = t.tmp[1], &w = t.tmp[2];
        nll_targets(kb, q, t, s, weight, ignore_index, valid, w);
        flat_offsets(kb, t, s.classes, s.table.dim_stride, true);
        indirect(kb, q, true, t.table, x, t.flat);
        if (weight) kb.tensor_tensor(x, x, w, AluOp::mul);
        kb.tensor_scalar(x, x, AluOp::mul, -1.0f);
        tiling::select_imm(kb, x, valid, x, 0.0f);   // (not x * 0: an ignored row may hold -inf)
        if (elementwise) tiling::dma_tile(kb, q, tiling::hbm_ap(t.tb->box, 2, out1), x, true);
        if (!sums) return;
        const uint32_t P = t.tb->P;
        kb.tensor_reduce(part.region(0, P, 0, 1), x, ReduceOp::add);
        if (weight) {
            tiling::select_imm(kb, w, valid, w, 0.0f);
            kb.tensor_reduce(part.region(0, P, 1, 1), w, ReduceOp::add);
        } else {
            kb.tensor_reduce(part.region(0, P, 1, 1), valid, ReduceOp::add);
        }
        kb.tensor_tensor(acc.rows(0, P), acc.rows(0, P), part.rows(0, P), AluOp::add);
    });
    if (!sums) {
        fill(kb, total_weight, 0.0f);
        return;
    }
    // Column sums over the partitions: ones^T @ acc on the TensorE (fp32).
    const Tile ones = kb.alloc_sbuf(tiling::kPartitions, {1}, DType::f32);
    const Tile sum_ps = kb.alloc_psum(1, 2);
    const Tile sum = kb.alloc_sbuf(1, {2}, DType::f32);
    kb.memset(ones.ap(), 1.0f);
    kb.matmul(sum_ps.ap(), ones.ap(), acc.ap(), false);
    kb.tensor_copy(sum.ap(), sum_ps.ap());
    const AccessPattern loss = sum.region(0, 1, 0, 1), tw = sum.region(0, 1, 1, 1);
    if (reduction == LossReduction::mean) kb.tensor_tensor(loss, loss, tw, AluOp::div);
    auto scalar_ap = [](const TensorDesc& d) {
        AccessPattern ap;
        ap.space = MemSpace::HBM;
        ap.dtype = d.dtype;
        ap.arg = d.arg;
        ap.offset = static_cast<uint64_t>(d.offset) * dtype_size(d.dtype);
        return ap;
    };
    kb.dma_copy(scalar_ap(out), loss);
    kb.dma_copy(scalar_ap(total_weight), tw);
    kb.release(sum);
    kb.release(sum_ps);
    kb.release(ones);
    kb.release(part);
    kb.release(acc);
}

void nll_loss_backward(KernelBuilder& kb, const TensorDesc& grad_input, const TensorDesc& grad_output,
                       const TensorDesc& target, const TensorDesc* weight, LossReduction reduction,
                       int64_t ignore_index, const TensorDesc& total_weight) {
    const std::string op = "nll_loss_backward";
    // The gradient lands in grad_input (zeroed first) at the target classes: one element per target.
    NllShape s = nll_shape(op, grad_input, target, weight);
    s.table.table = &s.input;
    const bool elementwise = reduction == LossReduction::none && grad_input.dim() > 1;
    TensorDesc g = grad_output;
    if (elementwise) {
        if (grad_output.sizes != target.sizes)
            fail(op, "grad_output " + grad_output.str() + " must have target's shape " + target.str());
    } else {
        if (grad_output.numel() != 1) fail(op, "grad_output " + grad_output.str() + " must be one element");
        g.sizes = {};
        g.strides = {};
    }
    if (total_weight.numel() != 1) fail(op, "total_weight " + total_weight.str() + " must be one element");
    TensorDesc tw = total_weight;
    tw.sizes = {};
    tw.strides = {};
    fill(kb, grad_input, 0.0f);
    for_each_indexed_tile(kb, op, s.target, s.table, {&g, &tw}, 4, [&](const IndexedTile& t, tiling::DmaQueues& q) {
        const AccessPattern &valid = t.tmp[0], &v = t.tmp[1], &w = t.tmp[2], &scale = t.tmp[3];
        nll_targets(kb, q, t, s, weight, ignore_index, valid, w);
        tiling::dma_tile(kb, q, v, tiling::hbm_ap(t.tb->box, 2, g), false);
        if (reduction == LossReduction::mean) {
            tiling::dma_tile(kb, q, scale, tiling::hbm_ap(t.tb->box, 3, tw), false);
            kb.tensor_tensor(v, v, scale, AluOp::div);
        }
        if (weight) kb.tensor_tensor(v, v, w, AluOp::mul);
        kb.tensor_scalar(v, v, AluOp::mul, -1.0f);
        tiling::select_imm(kb, v, valid, v, 0.0f);
        flat_offsets(kb, t, s.classes, s.table.dim_stride, true);
        indirect(kb, q, false, t.table, v, t.flat);
    });
}


}  // namespace trnsim::ops
