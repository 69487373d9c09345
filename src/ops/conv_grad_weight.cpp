// Weight gradients of the general convolutions (conv_common.h): a GEMM contracting over output
// positions. For a block of up to 128 output pixels, grad_out [co, positions] and each tap's view
// of the input window [ci, positions] are transposed on the TensorE (positions onto partitions),
// and grad_w[co, ci] of the tap accumulates in PSUM over every block. The accumulators ([128, 128]
// fp32, four to a bank) are taken in chunks of (output-channel tile, tap, input-channel tile);
// with more than a chunk's worth the blocks are swept once per chunk.
#include "conv_common.h"

namespace trnsim::ops::conv_detail {

namespace {

constexpr uint32_t kP = tiling::kPartitions;
constexpr size_t kAccumulators = 24;   // six PSUM banks; two more hold eight transposes in flight

struct Acc {
    uint32_t cot;
    int64_t tap;
    uint32_t cit;
};

uint32_t rows_of(int64_t total, int64_t first) { return static_cast<uint32_t>(std::min<int64_t>(kP, total - first)); }

}  // namespace

void grad_weight_gemm(KernelBuilder& kb, const std::string& op, const TensorDesc& grad_w, const TensorDesc& grad_out,
                      const TensorDesc& x, const Geometry& g, int64_t groups) {
    if (g.up[0] != 1 || g.up[1] != 1) fail(op, "weight gradient over a zero-interleaved input");
    const int64_t G = groups, Cog = grad_out.sizes[1] / G, Cig = x.sizes[1] / G;
    if (grad_out.sizes[1] % G != 0 || x.sizes[1] % G != 0 ||
        grad_w.sizes != std::vector<int64_t>{G * Cog, Cig, g.kh, g.kw})
        fail(op, "grad_weight " + grad_w.str() + " does not match grad_out " + grad_out.str() + " and input " + x.str());
    const DType dt = x.dtype;
    const uint64_t dsz = dtype_size(dt);
    const uint32_t ncit = static_cast<uint32_t>(ceil_div(Cig, kP)), ncot = static_cast<uint32_t>(ceil_div(Cog, kP));
    const int64_t max_window = static_cast<int64_t>((64 * 1024 / (2 * ncit)) / dsz);
    const std::vector<Block> blocks = plan_blocks(op, g, kP, max_window);
    std::vector<Acc> all;
    for (int64_t tap = 0; tap < g.taps(); ++tap)
        for (uint32_t cit = 0; cit < ncit; ++cit)
            for (uint32_t cot = 0; cot < ncot; ++cot) all.push_back({cot, tap, cit});

    tiling::DmaQueues q(kb.chip());
    std::array<Tile, 2> g_blk, g_t;
    for (auto& t : g_blk) t = kb.alloc_sbuf(kP, {ncot * kP}, grad_out.dtype);
    for (auto& t : g_t) t = kb.alloc_sbuf(kP, {static_cast<uint32_t>(Cog)}, dt);
    std::array<std::vector<Tile>, 2> win;
    for (auto& set : win)
        for (uint32_t t = 0; t < ncit; ++t) set.push_back(kb.alloc_sbuf(kP, {static_cast<uint32_t>(max_window)}, dt));
    // Every (tap, input-channel tile) operand of a chunk, transposed: [positions, pair x 128].
    std::array<Tile, 2> x_t;
    for (auto& t : x_t) t = kb.alloc_sbuf(kP, {static_cast<uint32_t>(std::min(kAccumulators, all.size())) * kP}, dt);
    std::array<Tile, 8> tpsum;
    for (auto& t : tpsum) t = kb.alloc_psum(kP, kP);
    std::vector<Tile> acc(std::min(kAccumulators, all.size()));
    for (auto& t : acc) t = kb.alloc_psum(kP, kP);
    tiling::TileRing staging(kb, 2, {kP}, grad_w.dtype);
    int set = 0, tp_next = 0, copy_next = 0;
    auto transpose_to = [&](const AccessPattern& dst, const AccessPattern& src, uint32_t np, uint32_t cols) {
        const AccessPattern tp = tpsum[tp_next].region(0, np, 0, cols);
        tp_next = (tp_next + 1) % static_cast<int>(tpsum.size());
        kb.transpose(tp, src);
        kb.tensor_copy(dst, tp, (copy_next++ & 1) ? Engine::Scalar : Engine::Vector);
    };
    const auto& ws = grad_w.strides;
    for (int64_t grp = 0; grp < G; ++grp) {
        for (size_t a0 = 0; a0 < all.size(); a0 += acc.size()) {
            const size_t na = std::min(acc.size(), all.size() - a0);
            std::vector<bool> cit_used(ncit, false);
            for (size_t a = 0; a < na; ++a) cit_used[all[a0 + a].cit] = true;
            for (size_t bi = 0; bi < blocks.size(); ++bi) {
                const Block& b = blocks[bi];
                const uint32_t np = b.count();
                set ^= 1;
                // grad_out^T [positions, co] of this block.
                for (uint32_t cot = 0; cot < ncot; ++cot) {
                    const uint32_t rows = rows_of(Cog, cot * int64_t{kP});
                    const AccessPattern blk = g_blk[set].region(0, rows, cot * kP, np);
                    tiling::dma_tile(kb, q, blk, channel_block(grad_out, b.n, grp * Cog + cot * int64_t{kP}, rows, b.ho0, b.hc, b.wo0, b.wc),
                                     false, kSplitBytes);
                    transpose_to(g_t[set].region(0, np, cot * kP, rows), blk, np, rows);
                }
                for (uint32_t cit = 0; cit < ncit; ++cit)
                    if (cit_used[cit])
                        load_window(kb, q, win[set][cit], x, g, b, grp * Cig + cit * int64_t{kP}, rows_of(Cig, cit * int64_t{kP}));
                // All the chunk's transposes first, then its matmuls: the TensorE (in order) never
                // waits for a transpose's copy out of PSUM behind a matmul that needs it.
                std::vector<uint32_t> pair_of(na);
                uint32_t pairs = 0;
                for (size_t a = 0; a < na; ++a) {
                    const Acc& c = all[a0 + a];
                    if (a > 0 && all[a0 + a - 1].tap == c.tap && all[a0 + a - 1].cit == c.cit) {
                        pair_of[a] = pair_of[a - 1];
                        continue;
                    }
                    pair_of[a] = pairs++;
                    const uint32_t cr = rows_of(Cig, c.cit * int64_t{kP});
                    transpose_to(x_t[set].region(0, np, pair_of[a] * kP, cr),
                                 tap_view(win[set][c.cit], g, b, cr, c.tap / g.kw, c.tap % g.kw), np, cr);
                }
                for (size_t a = 0; a < na; ++a) {
                    const Acc& c = all[a0 + a];
                    const uint32_t cr = rows_of(Cig, c.cit * int64_t{kP}), rows = rows_of(Cog, c.cot * int64_t{kP});
                    kb.matmul(acc[a].region(0, rows, 0, cr), g_t[set].region(0, np, c.cot * kP, rows),
                              x_t[set].region(0, np, pair_of[a] * kP, cr), bi > 0);
                }
            }
            for (size_t a = 0; a < na; ++a) {
                const Acc& c = all[a0 + a];
                const uint32_t cr = rows_of(Cig, c.cit * int64_t{kP}), rows = rows_of(Cog, c.cot * int64_t{kP});
                const AccessPattern st = staging.next().region(0, rows, 0, cr);
                kb.tensor_copy(st, acc[a].region(0, rows, 0, cr), (a & 1) ? Engine::Scalar : Engine::Vector);
                AccessPattern dst = hbm_at(grad_w, (grp * Cog + c.cot * int64_t{kP}) * ws[0] + c.cit * int64_t{kP} * ws[1] +
                                                       (c.tap / g.kw) * ws[2] + (c.tap % g.kw) * ws[3]);
                dst.partitions = static_cast<uint16_t>(rows);
                dst.partition_stride = ws[0];
                dst.size = {cr, 1, 1, 1};
                dst.stride = {ws[1], 0, 0, 0};
                kb.dma_copy(dst, st, q.store());
            }
        }
    }
    staging.release(kb);
    for (auto it = acc.rbegin(); it != acc.rend(); ++it) kb.release(*it);
    for (auto it = tpsum.rbegin(); it != tpsum.rend(); ++it) kb.release(*it);
    for (int s = 1; s >= 0; --s) kb.release(x_t[s]);
    for (int s = 1; s >= 0; --s)
        for (auto it = win[s].rbegin(); it != win[s].rend(); ++it) kb.release(*it);
    for (int s = 1; s >= 0; --s) kb.release(g_t[s]);
    for (int s = 1; s >= 0; --s) kb.release(g_blk[s]);
}

}  // namespace trnsim::ops::conv_detail
