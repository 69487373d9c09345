// NKIBench (AccelOpt) baseline kernels, trn1, fp32: the compiler-style NKI kernels of
// zhang677/AccelOpt NKIBench/kernels/*.py, written again with the same loop nests, tile shapes and
// engines. Where the source leaves the engine to the compiler (nisa.*(engine=unknown_engine),
// nl.copy), the engine is the one the published per-engine active fractions show: tensor_scalar and
// PSUM copies run on ScalarE, two-input arithmetic, reciprocal and reductions on VectorE.
#include <algorithm>

#include "common.h"
#include "kernels.h"

namespace trnsim::fidelity {

namespace {

constexpr uint32_t P = 128;
constexpr DType F32 = DType::f32;
// The compiler software-pipelines affine loops: the loads of iteration i + kPrefetch are issued
// before the compute of iteration i (input rotations hold kPrefetch + 1 tiles).
constexpr uint32_t kPrefetch = 2;

// nisa.reciprocal on VectorE: 1 / x.
void reciprocal(KernelBuilder& kb, const AccessPattern& dst, const AccessPattern& src) {
    kb.tensor_scalar_ex(dst, src, AluOp::div, 1.0f, nullptr, AluOp::bypass, 0.0f, nullptr, 1, Engine::Vector);
}

}  // namespace

// silu_M4096_N7168: x viewed as [128, 32, 7168]; per (i0, i1) a [128, 1024] load, then per
// 512-column half: exp(-x) (ScalarE), +1 (tensor_scalar), reciprocal, x * r (VectorE); one store.
std::vector<Program> nkibench_silu(const ChipConfig& chip) {
    KernelBuilder kb(chip, "nkibench_silu");
    HbmArena hbm;
    const uint32_t outer = 32, inner = 7, W = 1024, row = 32 * 7168;
    HbmTensor x = HbmTensor::make(hbm, F32, P, row), y = HbmTensor::make(hbm, F32, P, row);
    Tile zero = kb.alloc_sbuf(P, {1}, F32);
    kb.memset(zero.ap(), 0.0f);
    Rotation in(kb, kPrefetch + 1, P, {W}, F32), out(kb, 2, P, {W}, F32), e(kb, 2, P, {W / 2}, F32), d(kb, 2, P, {W / 2}, F32),
        r(kb, 2, P, {W / 2}, F32);
    const uint32_t n = outer * inner;
    auto col0 = [&](uint32_t i) { return uint64_t(i / inner) * 7168 + uint64_t(i % inner) * W; };
    for (uint32_t i = 0; i < n + kPrefetch; ++i) {
        if (i < n) load(kb, in.tiles[i % in.tiles.size()].ap(), x.tile(0, P, col0(i), W));
        if (i < kPrefetch) continue;
        const uint32_t c = i - kPrefetch;
        {
            const Tile& xi = in.tiles[c % in.tiles.size()];
            const Tile& yo = out.take();
            const uint64_t c0 = col0(c);
            for (uint32_t h = 0; h < 2; ++h) {
                const AccessPattern xh = cols(xi.ap(), h * 512, 512);
                const Tile &et = e.take(), &dt = d.take(), &rt = r.take();
                const AccessPattern bias = zero.ap();
                kb.activation_ex(et.ap(), xh, ActFunc::exp, -1.0f, nullptr, 0.0f, &bias);
                kb.tensor_scalar(dt.ap(), et.ap(), AluOp::add, 1.0f, AluOp::bypass, 0.0f, Engine::Scalar);
                reciprocal(kb, rt.ap(), dt.ap());
                kb.tensor_tensor(cols(yo.ap(), h * 512, 512), xh, rt.ap(), AluOp::mul);
            }
            store(kb, y.tile(0, P, c0, W), yo.ap());
        }
    }
    return {kb.finish()};
}

// adamw_M10944_N2048: theta, m, v, g in [128, 1024] tiles (86 x 2, the last one masked to 64 rows);
// per 512-column half 7 tensor_scalar (ScalarE), sqrt (ScalarE), 6 tensor_tensor and a reciprocal
// (VectorE); one store of the new theta. Three ScalarE products per half are written to PSUM: the
// published profile counts 2,113,536 PSUM write bytes in a kernel without a matmul, 344 half tiles x
// 3 x 2,048 bytes per partition (its SBUF counters hold the other 6 of the 9 one-input results), so
// three VectorE tensor_tensor ops read one operand from PSUM (N instead of 2N per element); which
// three is not published, here each feeds a different tensor_tensor. Issued stage by stage over
// both halves, as the compiler schedules independent affine iterations: written half by half, each
// engine's in-order queue would wait on the other engine at every step of one half's dependency
// chain (+27% over the measurement).
std::vector<Program> nkibench_adamw(const ChipConfig& chip) {
    KernelBuilder kb(chip, "nkibench_adamw");
    HbmArena hbm;
    const uint32_t M = 10944, N = 2048, W = 1024, H = 512;
    HbmTensor theta = HbmTensor::make(hbm, F32, M, N), g = HbmTensor::make(hbm, F32, M, N),
              m = HbmTensor::make(hbm, F32, M, N), v = HbmTensor::make(hbm, F32, M, N),
              out = HbmTensor::make(hbm, F32, M, N);
    Tile zero = kb.alloc_sbuf(P, {1}, F32);
    kb.memset(zero.ap(), 0.0f);
    Rotation ti(kb, kPrefetch + 1, P, {W}, F32), mi(kb, kPrefetch + 1, P, {W}, F32),
        vi(kb, kPrefetch + 1, P, {W}, F32), gi(kb, kPrefetch + 1, P, {W}, F32), res(kb, 2, P, {W}, F32);
    Rotation tmp(kb, 13 * 2, P, {H}, F32);
    PsumRotation psum_tmp(kb, 8, P, H);   // the 8 PSUM banks, one [128, 512] fp32 tile each
    const uint32_t n = ceil_div(M, P) * (N / W);
    auto rows_of = [&](uint32_t i) { return std::min<uint32_t>(P, M - (i / (N / W)) * P); };
    auto r0_of = [&](uint32_t i) { return uint64_t(i / (N / W)) * P; };
    auto c0_of = [&](uint32_t i) { return uint64_t(i % (N / W)) * W; };
    for (uint32_t i = 0; i < n + kPrefetch; ++i) {
        if (i < n) {
            const uint32_t rows = rows_of(i), slot = i % ti.tiles.size();
            const uint64_t r0 = r0_of(i), c0 = c0_of(i);
            load(kb, sub(ti.tiles[slot].ap(), 0, rows), theta.tile(r0, rows, c0, W));
            load(kb, sub(mi.tiles[slot].ap(), 0, rows), m.tile(r0, rows, c0, W));
            load(kb, sub(vi.tiles[slot].ap(), 0, rows), v.tile(r0, rows, c0, W));
            load(kb, sub(gi.tiles[slot].ap(), 0, rows), g.tile(r0, rows, c0, W));
        }
        if (i < kPrefetch) continue;
        const uint32_t c = i - kPrefetch, slot = c % ti.tiles.size(), rows = rows_of(c);
        const uint64_t r0 = r0_of(c), c0 = c0_of(c);
        {
            const Tile &t = ti.tiles[slot], &mt = mi.tiles[slot], &vt = vi.tiles[slot], &gt = gi.tiles[slot],
                       &o = res.take();
            // The iterations are independent (affine_range), so the compiler's list scheduler issues
            // each engine's instructions as soon as their inputs exist: per stage, both halves.
            auto next = [&]() { return sub(tmp.take().ap(), 0, rows); };
            auto ts_to = [&](AccessPattern d, const AccessPattern& src, AluOp op, float s) {
                kb.tensor_scalar(d, src, op, s, AluOp::bypass, 0.0f, Engine::Scalar);
                return d;
            };
            auto ts = [&](const AccessPattern& src, AluOp op, float s) { return ts_to(next(), src, op, s); };
            auto ts_psum = [&](const AccessPattern& src, AluOp op, float s) {
                return ts_to(sub(psum_tmp.take().ap(), 0, rows), src, op, s);
            };
            auto tt = [&](const AccessPattern& a, const AccessPattern& b, AluOp op) {
                AccessPattern d = next();
                kb.tensor_tensor(d, a, b, op);
                return d;
            };
            struct Half {
                AccessPattern t, m, v, g, decay, m1, g1, v1, g2, theta_d, m_new, v_new, step, denom;
            } hs[2];
            for (uint32_t h = 0; h < 2; ++h) {   // ScalarE: the products of the inputs
                auto part = [&](const Tile& x) { return sub(cols(x.ap(), h * H, H), 0, rows); };
                Half& x = hs[h];
                x.t = part(t), x.m = part(mt), x.v = part(vt), x.g = part(gt);
                x.decay = ts_psum(x.t, AluOp::mul, 1e-5f);
                x.m1 = ts_psum(x.m, AluOp::mul, 0.9f);
                x.g1 = ts(x.g, AluOp::mul, 0.1f);
                x.v1 = ts(x.v, AluOp::mul, 0.999f);
                x.g2 = ts_psum(x.g, AluOp::mul, 0.001f);
            }
            for (Half& x : hs) {   // VectorE: decayed theta and the new moments
                x.theta_d = tt(x.t, x.decay, AluOp::sub);
                x.m_new = tt(x.m1, x.g1, AluOp::add);
                AccessPattern gg = tt(x.g2, x.g, AluOp::mul);
                x.v_new = tt(x.v1, gg, AluOp::add);
            }
            for (Half& x : hs) {   // ScalarE: step and sqrt(v) + eps
                x.step = ts(x.m_new, AluOp::mul, 0.01f);
                AccessPattern root = next();
                const AccessPattern bias = sub(zero.ap(), 0, rows);
                kb.activation_ex(root, x.v_new, ActFunc::sqrt, 1000.0f, nullptr, 0.0f, &bias);
                x.denom = ts(root, AluOp::add, 1e-8f);
            }
            for (uint32_t h = 0; h < 2; ++h) {   // VectorE: the update
                Half& x = hs[h];
                AccessPattern inv = next();
                reciprocal(kb, inv, x.denom);
                AccessPattern upd = tt(x.step, inv, AluOp::mul);
                kb.tensor_tensor(sub(cols(o.ap(), h * H, H), 0, rows), x.theta_d, upd, AluOp::sub);
            }
            store(kb, out.tile(r0, rows, c0, W), sub(o.ap(), 0, rows));
        }
    }
    return {kb.finish()};
}

// matmul_M4096_N12288_K5120: per 1024-column block of rhs (12), the 40 [128, 1024] rhs tiles are
// loaded; per 128-row block of lhs (32), lhs is loaded in 5 [128, 1024] pieces, transposed on the
// TensorE block by block (matmul against the identity, copied out of PSUM), then 2 x 40 fp32
// matmuls accumulate [128, 512] in PSUM, are copied out and stored as [128, 1024].
// The 160 KiB rhs block and the per-row-block tiles do not fit the 192 KiB partition together:
// the compiler spills the rhs block, i.e. every row block reads its rhs halves from HBM again
// (9.3 GB read in all, against 9,059.8 MB published).
std::vector<Program> nkibench_matmul(const ChipConfig& chip) {
    KernelBuilder kb(chip, "nkibench_matmul");
    HbmArena hbm;
    const uint32_t M = 4096, N = 12288, K = 5120, BN = 1024, KT = K / P;
    HbmTensor lhs = HbmTensor::make(hbm, F32, M, K), rhs = HbmTensor::make(hbm, F32, K, N),
              out = HbmTensor::make(hbm, F32, M, N), ident = HbmTensor::make(hbm, F32, P, P);
    Tile identity = kb.alloc_sbuf(P, {P}, F32);
    load(kb, identity.ap(), ident.tile(0, P, 0, P));
    const uint64_t per_row_block = 2 * (5 * BN * 4) + KT * P * 4 + 2 * BN * 4;
    const bool spill = uint64_t(KT) * BN * 4 + per_row_block > chip.sbuf.bytes_per_partition;
    Rotation rhs_block(kb, 1, P, {spill ? 512u : KT * BN}, F32);
    Rotation rhs_stream(kb, spill ? 6 : 1, P, {512}, F32);
    Rotation lhs_piece(kb, 4, P, {BN}, F32), res(kb, 2, P, {BN}, F32);
    Tile lhsT = kb.alloc_sbuf(P, {KT * P}, F32);
    PsumRotation tp(kb, 4, P, P), acc(kb, 2, P, 512);
    for (uint32_t i0 = 0; i0 < N / BN; ++i0) {
        const Tile& rb = rhs_block.take();
        if (!spill)
            for (uint32_t k = 0; k < KT; ++k) load(kb, cols(rb.ap(), k * BN, BN), rhs.tile(k * P, P, i0 * BN, BN));
        for (uint32_t i3 = 0; i3 < M / P; ++i3) {
            for (uint32_t i4 = 0; i4 < 5; ++i4) {
                const Tile& piece = lhs_piece.take();
                load(kb, piece.ap(), lhs.tile(i3 * P, P, i4 * BN, BN));
                for (uint32_t i5 = 0; i5 < 8; ++i5) {
                    const Tile& t = tp.take();
                    kb.matmul(t.ap(), cols(piece.ap(), i5 * P, P), identity.ap(), false);
                    kb.tensor_copy(cols(lhsT.ap(), (i4 * 8 + i5) * P, P), t.ap(), Engine::Scalar);
                }
            }
            const Tile& o = res.take();
            for (uint32_t i6 = 0; i6 < 2; ++i6) {
                const Tile& a = acc.take();
                for (uint32_t k = 0; k < KT; ++k) {
                    AccessPattern moving;
                    if (spill) {
                        moving = rhs_stream.take().ap();
                        load(kb, moving, rhs.tile(k * P, P, i0 * BN + i6 * 512, 512));
                    } else {
                        moving = cols(rb.ap(), k * BN + i6 * 512, 512);
                    }
                    kb.matmul(a.ap(), cols(lhsT.ap(), k * P, P), moving, k > 0);
                }
                kb.tensor_copy(cols(o.ap(), i6 * 512, 512), a.ap(), Engine::Scalar);
            }
            store(kb, out.tile(i3 * P, P, i0 * BN, BN), o.ap());
        }
    }
    return {kb.finish()};
}

// rmsnorm_matmul_M4096_N2048_K1024: per 1024-row block (4) and 128-row tile (8): load x [128, 1024],
// square (ScalarE), scale by 1/K (tensor_scalar), row sums (VectorE tensor_reduce per half),
// rsqrt (ScalarE); load x again, scale rows (tensor_scalar), transpose in 128x128 blocks on the
// TensorE (copies out of PSUM on ScalarE). Then per 1024-column half of the output: load the 8 rhs
// [128, 1024] tiles, and per row tile 2 x 8 fp32 matmuls into [128, 512] PSUM tiles, copy, store.
std::vector<Program> nkibench_rmsnorm_matmul(const ChipConfig& chip) {
    KernelBuilder kb(chip, "nkibench_rmsnorm_matmul");
    HbmArena hbm;
    const uint32_t M = 4096, N = 2048, K = 1024, KT = K / P;
    HbmTensor x = HbmTensor::make(hbm, F32, M, K), w = HbmTensor::make(hbm, F32, K, N),
              out = HbmTensor::make(hbm, F32, M, N), ident = HbmTensor::make(hbm, F32, P, P);
    Tile identity = kb.alloc_sbuf(P, {P}, F32), zero = kb.alloc_sbuf(P, {1}, F32);
    kb.memset(zero.ap(), 0.0f);
    load(kb, identity.ap(), ident.tile(0, P, 0, P));
    Rotation xin(kb, 2, P, {K}, F32), xin2(kb, 2, P, {K}, F32), sq(kb, 2, P, {512}, F32), scaled(kb, 2, P, {512}, F32),
        normed(kb, 2, P, {512}, F32), part(kb, 2, P, {2}, F32), rstd(kb, 2, P, {1}, F32), ssum(kb, 2, P, {1}, F32);
    Tile xT = kb.alloc_sbuf(P, {8, KT * P}, F32);   // 8 row tiles of one block, transposed
    Rotation wt(kb, 1, P, {KT * 1024}, F32), res(kb, 2, P, {1024}, F32);
    PsumRotation tp(kb, 4, P, P), acc(kb, 2, P, 512);
    const AccessPattern bias = zero.ap();
    for (uint32_t i0 = 0; i0 < M / 1024; ++i0) {
        for (uint32_t i1 = 0; i1 < 8; ++i1) {
            const uint64_t r0 = uint64_t(i0) * 1024 + i1 * P;
            const Tile& xt = xin.take();
            load(kb, xt.ap(), x.tile(r0, P, 0, K));
            const Tile& pt = part.take();
            for (uint32_t h = 0; h < 2; ++h) {
                const Tile &s = sq.take(), &sc = scaled.take();
                kb.activation_ex(s.ap(), cols(xt.ap(), h * 512, 512), ActFunc::square, 1.0f, nullptr, 0.0f, &bias);
                kb.tensor_scalar(sc.ap(), s.ap(), AluOp::mul, 1.0f / K, AluOp::bypass, 0.0f, Engine::Scalar);
                kb.tensor_reduce(cols(pt.ap(), h, 1), sc.ap(), ReduceOp::add);
            }
            const Tile &ss = ssum.take(), &rs = rstd.take();
            kb.tensor_reduce(ss.ap(), pt.ap(), ReduceOp::add);
            kb.activation_ex(rs.ap(), ss.ap(), ActFunc::rsqrt, 1.0f, nullptr, 0.0f, &bias);
            const Tile& x2 = xin2.take();
            load(kb, x2.ap(), x.tile(r0, P, 0, K));
            const AccessPattern rs_ap = rs.ap();
            for (uint32_t h = 0; h < 2; ++h) {
                const Tile& nt = normed.take();
                kb.tensor_scalar_ex(nt.ap(), cols(x2.ap(), h * 512, 512), AluOp::mul, 0.0f, &rs_ap, AluOp::bypass, 0.0f,
                                    nullptr, 0, Engine::Scalar);
                for (uint32_t i4 = 0; i4 < 4; ++i4) {
                    const Tile& t = tp.take();
                    kb.matmul(t.ap(), cols(nt.ap(), i4 * P, P), identity.ap(), false);
                    kb.tensor_copy(cols(entry(xT, i1), (h * 4 + i4) * P, P), t.ap(), Engine::Scalar);
                }
            }
        }
        for (uint32_t i5 = 0; i5 < N / 1024; ++i5) {
            const Tile& wb = wt.take();
            for (uint32_t k = 0; k < KT; ++k) load(kb, cols(wb.ap(), k * 1024, 1024), w.tile(k * P, P, i5 * 1024, 1024));
            for (uint32_t i8 = 0; i8 < 8; ++i8) {
                const Tile& o = res.take();
                for (uint32_t i9 = 0; i9 < 2; ++i9) {
                    const Tile& a = acc.take();
                    for (uint32_t k = 0; k < KT; ++k)
                        kb.matmul(a.ap(), cols(entry(xT, i8), k * P, P), cols(wb.ap(), k * 1024 + i9 * 512, 512),
                                  k > 0);
                    kb.tensor_copy(cols(o.ap(), i9 * 512, 512), a.ap(), Engine::Scalar);
                }
                store(kb, out.tile(uint64_t(i0) * 1024 + i8 * P, P, i5 * 1024, 1024), o.ap());
            }
        }
    }
    return {kb.finish()};
}

}  // namespace trnsim::fidelity
