// Depthwise convolutions (conv_common.h): one input and one output channel per group, as ConvNeXt's
// and MobileNet's depthwise layers use them. A GEMM would contract over a single channel, so these
// run on the VectorE instead: channels on partitions (128 at a time), the same virtual-input windows
// as the implicit GEMM, and per kernel tap one multiply-add of the tap's view by the channel's
// weight (scalar_tensor_tensor, fp32 accumulation). The weight gradient multiplies grad_out by each
// tap's view and reduces along the free axis, per block, summed over blocks.
#include "conv_common.h"

namespace trnsim::ops::conv_detail {

namespace {

constexpr uint32_t kP = tiling::kPartitions;
constexpr int64_t kMaxPositions = 2048;   // output pixels per block (no PSUM bank to fit)

// dst = (src0 * s0) + src1 with s0 a per-partition column: one VectorE instruction.
void multiply_add(KernelBuilder& kb, const AccessPattern& dst, const AccessPattern& src0, const AccessPattern& s0,
                  const AccessPattern& src1) {
    Instruction ins;
    ins.op = Opcode::scalar_tensor_tensor;
    ins.engine = Engine::Vector;
    ins.dst = dst;
    ins.src0 = src0;
    ins.src1 = src1;
    ins.src2 = s0;
    ins.alu0 = AluOp::mul;
    ins.alu1 = AluOp::add;
    ins.flags = F_S0_AP;
    kb.emit(ins);
}

}  // namespace

void depthwise_conv(KernelBuilder& kb, const std::string& op, const TensorDesc& out, const TensorDesc& x,
                    const WeightView& wv, const TensorDesc* bias, const Geometry& g, int64_t groups) {
    const int64_t taps = g.taps();
    const int64_t max_window = static_cast<int64_t>((32 * 1024) / dtype_size(x.dtype));
    const std::vector<Block> blocks = plan_blocks(op, g, kMaxPositions, max_window);
    uint32_t max_count = 1;
    for (const Block& b : blocks) max_count = std::max(max_count, b.count());
    tiling::DmaQueues q(kb.chip());
    const Tile wcol = kb.alloc_sbuf(kP, {static_cast<uint32_t>(taps)}, DType::f32);
    const Tile bcol = kb.alloc_sbuf(kP, {1}, DType::f32);
    std::array<Tile, 2> win;
    for (auto& t : win) t = kb.alloc_sbuf(kP, {static_cast<uint32_t>(max_window)}, x.dtype);
    tiling::TileRing acc(kb, 2, {max_count}, DType::f32);
    tiling::TileRing staging(kb, 2, {max_count}, out.dtype);
    const int64_t group_stride = wv.ci_gstride + wv.co_gstride;
    int set = 0;
    for (int64_t c0 = 0; c0 < groups; c0 += kP) {
        const uint32_t P = static_cast<uint32_t>(std::min<int64_t>(kP, groups - c0));
        for (int64_t t = 0; t < taps; ++t) {
            AccessPattern src = hbm_at(*wv.w, wv.tap0 + (t / g.kw) * wv.tap_si + (t % g.kw) * wv.tap_sj + c0 * group_stride);
            src.partitions = static_cast<uint16_t>(P);
            src.partition_stride = group_stride;
            kb.dma_copy(wcol.region(0, P, static_cast<uint32_t>(t), 1), src, q.load());
        }
        const AccessPattern bias_col = bcol.region(0, P, 0, 1);
        if (bias) {
            AccessPattern src = hbm_at(*bias, c0 * bias->strides[0]);
            src.partitions = static_cast<uint16_t>(P);
            src.partition_stride = bias->strides[0];
            kb.dma_copy(bias_col, src, q.load());
        }
        for (const Block& b : blocks) {
            set ^= 1;
            load_window(kb, q, win[set], x, g, b, c0, P);
            const AccessPattern a = acc.next().region(0, P, 0, b.count());
            for (int64_t t = 0; t < taps; ++t) {
                const AccessPattern v = tap_view(win[set], g, b, P, t / g.kw, t % g.kw);
                const AccessPattern w = wcol.region(0, P, static_cast<uint32_t>(t), 1);
                if (t == 0) {
                    kb.tensor_scalar_ex(a, v, AluOp::mul, 0.0f, &w, bias ? AluOp::add : AluOp::bypass, 0.0f,
                                        bias ? &bias_col : nullptr, 0, Engine::GpSimd);
                } else {
                    multiply_add(kb, a, v, w, a);
                }
            }
            const AccessPattern st = staging.next().region(0, P, 0, b.count());
            kb.tensor_copy(st, a, Engine::Scalar);
            kb.dma_copy(channel_block(out, b.n, c0, P, b.ho0, b.hc, b.wo0, b.wc), st, q.store());
        }
    }
    staging.release(kb);
    acc.release(kb);
    for (int s = 1; s >= 0; --s) kb.release(win[s]);
    kb.release(bcol);
    kb.release(wcol);
}

void depthwise_grad_weight(KernelBuilder& kb, const std::string& op, const TensorDesc& grad_w,
                           const TensorDesc& grad_out, const TensorDesc& x, const Geometry& g, int64_t groups) {
    if (grad_w.sizes != std::vector<int64_t>{groups, 1, g.kh, g.kw})
        fail(op, "grad_weight " + grad_w.str() + " must be [groups, 1, kh, kw]");
    const uint32_t taps = static_cast<uint32_t>(g.taps());
    const int64_t max_window = static_cast<int64_t>((32 * 1024) / dtype_size(x.dtype));
    const std::vector<Block> blocks = plan_blocks(op, g, kMaxPositions, max_window);
    uint32_t max_count = 1;
    for (const Block& b : blocks) max_count = std::max(max_count, b.count());
    tiling::DmaQueues q(kb.chip());
    const Tile total = kb.alloc_sbuf(kP, {taps}, DType::f32), part = kb.alloc_sbuf(kP, {taps}, DType::f32);
    std::array<Tile, 2> win, gblk;
    for (auto& t : win) t = kb.alloc_sbuf(kP, {static_cast<uint32_t>(max_window)}, x.dtype);
    for (auto& t : gblk) t = kb.alloc_sbuf(kP, {max_count}, grad_out.dtype);
    const Tile prod = kb.alloc_sbuf(kP, {max_count}, DType::f32);
    const Tile out = kb.alloc_sbuf(kP, {taps}, grad_w.dtype);
    int set = 0;
    for (int64_t c0 = 0; c0 < groups; c0 += kP) {
        const uint32_t P = static_cast<uint32_t>(std::min<int64_t>(kP, groups - c0));
        for (size_t bi = 0; bi < blocks.size(); ++bi) {
            const Block& b = blocks[bi];
            set ^= 1;
            const AccessPattern gv = gblk[set].region(0, P, 0, b.count());
            kb.dma_copy(gv, channel_block(grad_out, b.n, c0, P, b.ho0, b.hc, b.wo0, b.wc), q.load());
            load_window(kb, q, win[set], x, g, b, c0, P);
            for (uint32_t t = 0; t < taps; ++t) {
                const AccessPattern pv = prod.region(0, P, 0, b.count());
                kb.tensor_tensor(pv, gv, tap_view(win[set], g, b, P, t / g.kw, t % g.kw), AluOp::mul, Engine::GpSimd);
                kb.tensor_reduce(part.region(0, P, t, 1), pv, ReduceOp::add);
            }
            const AccessPattern tv = total.region(0, P, 0, taps), pt = part.region(0, P, 0, taps);
            if (bi == 0) kb.tensor_copy(tv, pt);
            else kb.tensor_tensor(tv, tv, pt, AluOp::add);
        }
        kb.tensor_copy(out.region(0, P, 0, taps), total.region(0, P, 0, taps));
        const auto& ws = grad_w.strides;
        AccessPattern dst = hbm_at(grad_w, c0 * ws[0]);
        dst.partitions = static_cast<uint16_t>(P);
        dst.partition_stride = ws[0];
        dst.ndim = 2;
        dst.size = {static_cast<uint32_t>(g.kh), static_cast<uint32_t>(g.kw), 1, 1};
        dst.stride = {ws[2], ws[3], 0, 0};
        kb.dma_copy(dst, out.region(0, P, 0, taps), q.store());
    }
    kb.release(out);
    kb.release(prod);
    for (int s = 1; s >= 0; --s) kb.release(gblk[s]);
    for (int s = 1; s >= 0; --s) kb.release(win[s]);
    kb.release(part);
    kb.release(total);
}

}  // namespace trnsim::ops::conv_detail
