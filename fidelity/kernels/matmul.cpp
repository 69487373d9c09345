// The matmul optimisation stages of the AWS NKI matrix-multiplication tutorial
// (trn1, bf16) and of "Introduction to NKI Kernel Optimization" (trn2, fp32):
// result[M,N] = lhsT[K,M]^T @ rhs[K,N], 128x128 stationary and 128x512 moving tiles.
#include "kernels.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "common.h"

namespace trnsim::fidelity {

namespace {

constexpr uint32_t TM = 128, TK = 128, TN = 512;

struct Operands {
    HbmTensor lhsT, rhs, out;
};

Operands operands(HbmArena& hbm, const MatmulShape& s) {
    return {HbmTensor::make(hbm, s.dtype, s.K, s.M), HbmTensor::make(hbm, s.dtype, s.K, s.N),
            HbmTensor::make(hbm, s.dtype, s.M, s.N)};
}

// PSUM -> SBUF copy and store of one finished [128, 512] result tile.
void drain(KernelBuilder& kb, Rotation& res, const Tile& ps, const HbmTensor& out, uint64_t m0, uint64_t n0) {
    const Tile& r = res.take();
    kb.tensor_copy(r.ap(), ps.ap(), Engine::Vector);
    store(kb, out.tile(m0, TM, n0, TN), r.ap());
}

}  // namespace

// nki_matmul_tiled_: every k step loads one lhsT and one rhs tile.
std::vector<Program> matmul_tiled(const ChipConfig& chip, const MatmulShape& s) {
    KernelBuilder kb(chip, "matmul_tiled");
    HbmArena hbm;
    Operands o = operands(hbm, s);
    Rotation lt(kb, 4, TK, {TM}, s.dtype), rt(kb, 4, TK, {TN}, s.dtype), res(kb, 4, TM, {TN}, s.dtype);
    PsumRotation ps(kb, 2, TM, TN);
    for (uint64_t m = 0; m < s.M; m += TM)
        for (uint64_t n = 0; n < s.N; n += TN) {
            const Tile& acc = ps.take();
            for (uint64_t k = 0; k < s.K; k += TK) {
                const Tile& a = lt.take();
                const Tile& b = rt.take();
                load(kb, a.ap(), o.lhsT.tile(k, TK, m, TM));
                load(kb, b.ap(), o.rhs.tile(k, TK, n, TN));
                kb.matmul(acc.ap(), a.ap(), b.ap(), k > 0);
            }
            drain(kb, res, acc, o.out, m, n);
        }
    return {kb.finish()};
}

// nki_matmul_hoist_load_: the lhsT column of K tiles is loaded once per m, the rhs
// column once per (m, n); the k loop only issues matmuls.
std::vector<Program> matmul_hoisted(const ChipConfig& chip, const MatmulShape& s) {
    KernelBuilder kb(chip, "matmul_hoisted");
    HbmArena hbm;
    Operands o = operands(hbm, s);
    const uint32_t nk = ceil_div(s.K, TK);
    // Double-buffered columns when they fit SBUF (bf16 on trn1), else single (fp32: 160 KiB per partition).
    const uint64_t column_bytes = uint64_t(nk) * (TM + TN) * dtype_size(s.dtype);
    const int bufs = 2 * column_bytes + 4 * TN * dtype_size(s.dtype) <= chip.sbuf.bytes_per_partition ? 2 : 1;
    Rotation lt(kb, bufs, TK, {nk * TM}, s.dtype), rt(kb, bufs, TK, {nk * TN}, s.dtype), res(kb, 4, TM, {TN}, s.dtype);
    PsumRotation ps(kb, 2, TM, TN);
    for (uint64_t m = 0; m < s.M; m += TM) {
        const Tile& a = lt.take();
        for (uint32_t k = 0; k < nk; ++k) load(kb, cols(a.ap(), k * TM, TM), o.lhsT.tile(k * TK, TK, m, TM));
        for (uint64_t n = 0; n < s.N; n += TN) {
            const Tile& b = rt.take();
            for (uint32_t k = 0; k < nk; ++k) load(kb, cols(b.ap(), k * TN, TN), o.rhs.tile(k * TK, TK, n, TN));
            const Tile& acc = ps.take();
            for (uint32_t k = 0; k < nk; ++k) kb.matmul(acc.ap(), cols(a.ap(), k * TM, TM), cols(b.ap(), k * TN, TN), k > 0);
            drain(kb, res, acc, o.out, m, n);
        }
    }
    return {kb.finish()};
}

// nki_matmul_block_free_dimension_: blocks of bm x bn tiles share their loaded K columns. When the
// whole-K panels do not fit SBUF (fp32 on trn2: K x 1024 fp32 is 256 KiB per partition), the rhs
// panel is streamed one k tile at a time instead, with k outermost and the bm x bn accumulators
// held in PSUM across k, and what does not fit is read again: each rhs tile once per 128-row tile of
// the block. The published v4 profile moves that much: MBU 42.55% of 725 GB/s (the denominator that
// gives v2, v3 and v5 their computed traffic) over 28.41 ms is 8.8 GB, against 4.5 GB for one rhs
// read per block.
std::vector<Program> matmul_block_free(const ChipConfig& chip, const MatmulShape& s, uint32_t tiles_m,
                                       uint32_t tiles_n) {
    KernelBuilder kb(chip, "matmul_block_free");
    HbmArena hbm;
    Operands o = operands(hbm, s);
    const uint32_t nk = ceil_div(s.K, TK), BM = tiles_m * TM, BN = tiles_n * TN;
    const uint64_t es = dtype_size(s.dtype);
    const bool whole_k = uint64_t(nk) * (BM + BN) * es + 4 * TN * es <= chip.sbuf.bytes_per_partition;
    Rotation lt(kb, 1, TK, {nk * BM}, s.dtype), res(kb, 4, TM, {TN}, s.dtype);
    Rotation rt(kb, whole_k ? 1 : 4, TK, {whole_k ? nk * BN : BN}, s.dtype);
    PsumRotation ps(kb, std::max<int>(4, static_cast<int>(tiles_m * tiles_n)), TM, TN);
    for (uint64_t m = 0; m < s.M; m += BM) {
        const Tile& a = lt.take();
        for (uint32_t k = 0; k < nk; ++k) load(kb, cols(a.ap(), k * BM, BM), o.lhsT.tile(k * TK, TK, m, BM));
        for (uint64_t n = 0; n < s.N; n += BN) {
            if (whole_k) {
                const Tile& b = rt.take();
                for (uint32_t k = 0; k < nk; ++k) load(kb, cols(b.ap(), k * BN, BN), o.rhs.tile(k * TK, TK, n, BN));
                for (uint32_t bm = 0; bm < tiles_m; ++bm)
                    for (uint32_t bn = 0; bn < tiles_n; ++bn) {
                        const Tile& acc = ps.take();
                        for (uint32_t k = 0; k < nk; ++k)
                            kb.matmul(acc.ap(), cols(a.ap(), k * BM + bm * TM, TM),
                                      cols(b.ap(), k * BN + bn * TN, TN), k > 0);
                        drain(kb, res, acc, o.out, m + bm * TM, n + bn * TN);
                    }
                continue;
            }
            std::vector<const Tile*> acc;
            for (uint32_t i = 0; i < tiles_m * tiles_n; ++i) acc.push_back(&ps.take());
            for (uint32_t k = 0; k < nk; ++k)
                for (uint32_t bm = 0; bm < tiles_m; ++bm) {
                    const Tile& b = rt.take();
                    load(kb, b.ap(), o.rhs.tile(k * TK, TK, n, BN));
                    for (uint32_t bn = 0; bn < tiles_n; ++bn)
                        kb.matmul(acc[bm * tiles_n + bn]->ap(), cols(a.ap(), k * BM + bm * TM, TM),
                                  cols(b.ap(), bn * TN, TN), k > 0);
                }
            for (uint32_t bm = 0; bm < tiles_m; ++bm)
                for (uint32_t bn = 0; bn < tiles_n; ++bn)
                    drain(kb, res, *acc[bm * tiles_n + bn], o.out, m + bm * TM, n + bn * TN);
        }
    }
    return {kb.finish()};
}

// nki_matmul_fully_optimized_: blocks of tiles_m x tiles_n x tiles_k tiles. Loop order
// n-block -> k-block (sequential) -> m-block; each finished PSUM tile is added into an
// SBUF accumulator holding the whole M x BN result column (VectorE tensor_tensor add);
// the column is stored after the last k block. With packed_store (the trn2 v5 source), the
// panels live only during an n block's k loop, and each 128-row strip's tiles are then copied
// (VectorE tensor_copy) into a [128, BN] buffer that the store reads; in fp32 the accumulator
// column and the single-buffered panels fill the 224 KiB partition, so the buffer takes the
// panels' space.
std::vector<Program> matmul_blocked(const ChipConfig& chip, const MatmulShape& s, uint32_t tiles_m, uint32_t tiles_n,
                       uint32_t tiles_k, int panel_buffers, bool packed_store) {
    KernelBuilder kb(chip, "matmul_blocked");
    HbmArena hbm;
    Operands o = operands(hbm, s);
    const uint32_t BM = tiles_m * TM, BN = tiles_n * TN, BK = tiles_k * TK;
    const uint32_t mtiles = ceil_div(s.M, TM);
    std::optional<Rotation> lt, rt;
    auto alloc_panels = [&] {
        lt.emplace(kb, panel_buffers, TK, std::vector<uint32_t>{tiles_k * BM}, s.dtype);
        rt.emplace(kb, panel_buffers, TK, std::vector<uint32_t>{tiles_k * BN}, s.dtype);
    };
    if (!packed_store) alloc_panels();
    Tile result = kb.alloc_sbuf(TM, {mtiles * BN}, s.dtype);
    PsumRotation ps(kb, 8, TM, TN);
    for (uint64_t n = 0; n < s.N; n += BN) {
        for (uint32_t t = 0; t < mtiles * tiles_n; ++t) kb.memset(cols(result.ap(), t * TN, TN), 0.0f);
        if (packed_store) alloc_panels();
        for (uint64_t k = 0; k < s.K; k += BK) {
            const Tile& b = rt->take();
            for (uint32_t bk = 0; bk < tiles_k; ++bk) load(kb, cols(b.ap(), bk * BN, BN), o.rhs.tile(k + bk * TK, TK, n, BN));
            for (uint64_t m = 0; m < s.M; m += BM) {
                const Tile& a = lt->take();
                for (uint32_t bk = 0; bk < tiles_k; ++bk)
                    load(kb, cols(a.ap(), bk * BM, BM), o.lhsT.tile(k + bk * TK, TK, m, BM));
                for (uint32_t bn = 0; bn < tiles_n; ++bn)
                    for (uint32_t bm = 0; bm < tiles_m; ++bm) {
                        const Tile& acc = ps.take();
                        for (uint32_t bk = 0; bk < tiles_k; ++bk)
                            kb.matmul(acc.ap(), cols(a.ap(), bk * BM + bm * TM, TM), cols(b.ap(), bk * BN + bn * TN, TN),
                                      bk > 0);
                        const uint32_t slot = (static_cast<uint32_t>(m / TM) + bm) * tiles_n + bn;
                        AccessPattern r = cols(result.ap(), slot * TN, TN);
                        kb.tensor_tensor(r, r, acc.ap(), AluOp::add);
                    }
            }
        }
        if (!packed_store) {
            for (uint32_t mt = 0; mt < mtiles; ++mt)
                store(kb, o.out.tile(mt * TM, TM, n, BN), cols(result.ap(), mt * BN, BN));
            continue;
        }
        for (const std::optional<Rotation>* r : {&lt, &rt})
            for (const Tile& t : (*r)->tiles) kb.release(t);
        Rotation packed(kb, 2, TM, {BN}, s.dtype);
        for (uint32_t mt = 0; mt < mtiles; ++mt) {
            const Tile& p = packed.take();
            for (uint32_t bn = 0; bn < tiles_n; ++bn)
                kb.tensor_copy(cols(p.ap(), bn * TN, TN), cols(result.ap(), mt * BN + bn * TN, TN), Engine::Vector);
            store(kb, o.out.tile(mt * TM, TM, n, BN), p.ap());
        }
        for (const Tile& t : packed.tiles) kb.release(t);
    }
    return {kb.finish()};
}

}  // namespace trnsim::fidelity
