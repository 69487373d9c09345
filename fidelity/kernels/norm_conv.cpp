// LayerNorm v1/v2 of the AWS NKI layernorm tutorial and the depthwise conv1d of the Autocomp
// trn1 study (both fp32, trn1).
#include <algorithm>

#include "common.h"
#include "kernels.h"

namespace trnsim::fidelity {

namespace {
constexpr uint32_t P = 128;
constexpr DType F32 = DType::f32;
}  // namespace

// Per 128-row tile: load [128, cols]; mean and variance; (x - mean) * rstd; * gamma + beta
// (gamma, beta loaded once, broadcast over the partitions); store.
//   v1 (nki.language): mean = tensor_reduce, x - mean (tensor_scalar), square (ScalarE),
//      variance = tensor_reduce, rstd (ScalarE rsqrt), * rstd (tensor_scalar), * gamma, + beta.
//   v2 (nki.isa): statistics in one VectorE pass (bn_stats per 512-column chunk, then bn_aggr,
//      costed as a reduce over the tile and a small reduce over the chunk stats), one tensor_scalar
//      for (x - mean) * rstd, * gamma, + beta.
std::vector<Program> layernorm(const ChipConfig& chip, uint32_t rows, uint32_t ncols, int version) {
    KernelBuilder kb(chip, version == 1 ? "layernorm_v1" : "layernorm_v2");
    HbmArena hbm;
    HbmTensor x = HbmTensor::make(hbm, F32, rows, ncols), y = HbmTensor::make(hbm, F32, rows, ncols),
              gamma = HbmTensor::make(hbm, F32, 1, ncols), beta = HbmTensor::make(hbm, F32, 1, ncols);
    Tile g = kb.alloc_sbuf(P, {ncols}, F32), b = kb.alloc_sbuf(P, {ncols}, F32);
    AccessPattern gsrc = gamma.tile(0, P, 0, ncols), bsrc = beta.tile(0, P, 0, ncols);
    gsrc.partition_stride = bsrc.partition_stride = 0;
    load(kb, g.ap(), gsrc);
    load(kb, b.ap(), bsrc);
    Rotation in(kb, 2, P, {ncols}, F32), work(kb, 1, P, {ncols}, F32);
    Rotation stat(kb, 8, P, {1}, F32), chunk_stats(kb, 2, P, {ncols / 512 * 2}, F32);
    // The next tile's load is issued before this tile's compute (the compiler's software pipelining).
    const uint32_t n = rows / P;
    for (uint32_t i = 0; i <= n; ++i) {
        if (i < n) load(kb, in.tiles[i % 2].ap(), x.tile(uint64_t(i) * P, P, 0, ncols));
        if (i == 0) continue;
        const uint32_t t = i - 1;
        const Tile& xt = in.tiles[t % 2];
        const Tile& w = work.take();
        const AccessPattern mean = stat.take().ap(), var = stat.take().ap(), rstd = stat.take().ap();
        if (version == 1) {
            kb.tensor_reduce(mean, xt.ap(), ReduceOp::add);
            kb.tensor_scalar_ex(xt.ap(), xt.ap(), AluOp::sub, 0.0f, &mean, AluOp::bypass, 0.0f, nullptr);
            kb.activation(w.ap(), xt.ap(), ActFunc::square);
            kb.tensor_reduce(var, w.ap(), ReduceOp::add);
            kb.activation(rstd, var, ActFunc::rsqrt, 1.0f / ncols, 1e-5f);
            kb.tensor_scalar_ex(w.ap(), xt.ap(), AluOp::mul, 0.0f, &rstd, AluOp::bypass, 0.0f, nullptr);
        } else {
            const Tile& cs = chunk_stats.take();
            kb.tensor_reduce(cs.ap(), split2(xt.ap(), ncols / 512 * 2, 256), ReduceOp::add);
            kb.tensor_reduce(mean, cs.ap(), ReduceOp::add);
            kb.activation(rstd, mean, ActFunc::rsqrt, 1.0f, 1e-5f);
            kb.tensor_scalar_ex(w.ap(), xt.ap(), AluOp::sub, 0.0f, &mean, AluOp::mul, 0.0f, &rstd);
        }
        kb.tensor_tensor(w.ap(), w.ap(), g.ap(), AluOp::mul);
        kb.tensor_tensor(w.ap(), w.ap(), b.ap(), AluOp::add);
        store(kb, y.tile(uint64_t(t) * P, P, 0, ncols), w.ap());
    }
    return {kb.finish()};
}

// conv1d_depthwise at Autocomp's 4.955 ms step: channel tile loop outside the batch loop, the
// [128, 3] filter held in PSUM; per output position one [128, 3] x filter tensor_tensor, and one
// tensor_reduce per 4 positions ([128, 4, 3] -> [128, 4]): 65,536 and 16,384 instructions, the
// published counts. The compiler issues each reduce after the next group's products (the published
// per-instruction times, ~60 ns each, leave no room for a dependency stall).
std::vector<Program> conv1d_depthwise(const ChipConfig& chip, uint32_t batch, uint32_t channels, uint32_t width) {
    KernelBuilder kb(chip, "conv1d_depthwise");
    HbmArena hbm;
    const uint32_t taps = 3, group = 4;
    HbmTensor x = HbmTensor::make(hbm, F32, uint64_t(batch) * channels, width + 2),
              f = HbmTensor::make(hbm, F32, channels, taps), y = HbmTensor::make(hbm, F32, uint64_t(batch) * channels, width);
    Tile filt_sb = kb.alloc_sbuf(P, {taps}, F32);
    Tile filt = kb.alloc_psum(P, taps);
    Rotation in(kb, 2, P, {width + 2}, F32), out(kb, 2, P, {width}, F32), prod(kb, 3, P, {group * taps}, F32);
    for (uint32_t ct = 0; ct < channels / P; ++ct) {
        load(kb, filt_sb.ap(), f.tile(uint64_t(ct) * P, P, 0, taps));
        kb.tensor_copy(filt.ap(), filt_sb.ap());
        for (uint32_t n = 0; n < batch; ++n) {
            const uint64_t row = uint64_t(n) * channels + ct * P;
            const Tile& xt = in.take();
            const Tile& yt = out.take();
            load(kb, xt.ap(), x.tile(row, P, 0, width + 2));
            const Tile* pending = nullptr;
            uint32_t pending_w = 0;
            for (uint32_t w = 0; w < width; w += group) {
                const Tile& pt = prod.take();
                for (uint32_t j = 0; j < group; ++j)
                    kb.tensor_tensor(cols(pt.ap(), j * taps, taps), cols(xt.ap(), w + j, taps), filt.ap(), AluOp::mul);
                if (pending)
                    kb.tensor_reduce(cols(yt.ap(), pending_w, group), split2(pending->ap(), group, taps), ReduceOp::add);
                pending = &pt;
                pending_w = w;
            }
            kb.tensor_reduce(cols(yt.ap(), pending_w, group), split2(pending->ap(), group, taps), ReduceOp::add);
            store(kb, y.tile(row, P, 0, width), yt.ap());
        }
    }
    return {kb.finish()};
}

}  // namespace trnsim::fidelity
