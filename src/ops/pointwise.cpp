// Pointwise operators: unary (ScalarE activation functions), binary and
// scalar ops (VectorE ALU), where, fill, copy, clamp and activation backward.
#include <algorithm>
#include <cmath>

#include "pointwise_common.h"
#include "trnsim/ops.h"
#include "trnsim/tiling.h"

namespace trnsim::ops {

using namespace tiling;

namespace {

ActFunc act_for(Unary op) {
    if (std::optional<ActFunc> f = activation_of(op)) return *f;
    throw OpError("unary: op " + std::to_string(static_cast<int>(op)) + " has no activation function");
}


bool is_bitwise(Binary op) {
    return op == Binary::bitwise_and || op == Binary::bitwise_or || op == Binary::bitwise_xor;
}

void check_bitwise_dtypes(const std::string& name, Binary op, std::initializer_list<const TensorDesc*> ts) {
    if (!is_bitwise(op)) return;
    for (const TensorDesc* t : ts)
        if (is_float(t->dtype)) fail(name, std::string("bitwise ops need integer or bool tensors, got ") + t->str());
}

bool is_tensor_engine_float(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

// A copy whose innermost output dim 'a' is not the input's contiguous dim 'b' (a transpose of
// the (b, a) plane, for every index of the other dims): [a 128-row, b 512-column] blocks load
// with contiguous b runs, TensorE transposes [128, 128] pieces into PSUM ([b, a], f32), engines
// copy them to SBUF in out's dtype, and stores write contiguous a runs. Float dtypes only.
bool transpose_copy(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, const IterSpace& s) {
    if (!is_tensor_engine_float(in.dtype) || !is_float(out.dtype) || s.dims.size() < 2) return false;
    const int ia = static_cast<int>(s.dims.size()) - 1;
    if (s.dims[ia].stride[1] == 1) return false;
    int ib = -1;
    for (int d = 0; d < ia; ++d)
        if (s.dims[d].stride[1] == 1) ib = d;
    if (ib < 0) return false;
    const Dim da = s.dims[ia], db = s.dims[ib];
    if (da.size < 16 || db.size < 16 || da.size * db.size < 4096) return false;
    std::vector<Dim> outer;
    for (int d = 0; d < ia; ++d)
        if (d != ib) outer.push_back(s.dims[d]);

    constexpr uint32_t kSub = kPartitions, kSubs = 4, kBlock = kSub * kSubs;   // 512 x 512 blocks
    TileRing x_ring(kb, 2, {kSubs, kBlock}, in.dtype);
    TileRing y_ring(kb, 2, {kSubs, kBlock}, out.dtype);
    std::vector<Tile> psum;
    for (int i = 0; i < 4; ++i) psum.push_back(kb.alloc_psum(kPartitions, kBlock));
    uint32_t npsum = 0, ncopy = 0;
    const Engine copy_engines[2] = {Engine::Vector, Engine::Scalar};

    // The DMA queues split in halves for loads and stores, which move the same bytes. Both move
    // 32-partition pieces; a store piece always covers the same 32 output rows on the same
    // queue, so stores that interleave in HBM (neighbouring blocks) never wait on each other.
    const uint32_t nq = std::max(2u, kb.chip().dma.queues), nload = nq / 2, nstore = nq - nload;
    constexpr uint32_t kGroup = 32;
    uint32_t next_load = 0;
    // [P, nsub, len] piece of operand k: row p + 128 q along rows_dim, element c along cols_dim.
    auto hbm_piece = [&](int k, const TensorDesc& d, int64_t base, const Dim& rows_dim, const Dim& cols_dim,
                         uint32_t P, uint32_t nsub, uint32_t len) {
        Box box;
        box.offset[k] = base;
        Dim p, q, c;
        p.size = P, p.stride[k] = rows_dim.stride[k];
        q.size = nsub, q.stride[k] = kSub * rows_dim.stride[k];
        c.size = len, c.stride[k] = cols_dim.stride[k];
        box.dims = {p, q, c};
        return hbm_ap(box, k, d);
    };
    // x[p, q, j] = in[a = a0 + 128 q + p, b = b0 + j] for ta rows, tb columns.
    auto load = [&](const Tile& x, int64_t base, uint32_t ta, uint32_t tb) {
        const uint32_t whole = ta / kSub, tail = ta % kSub;
        // Two parts: the whole 128-row sub-blocks, then the tail rows (as one more sub-block).
        struct Part { uint32_t q0, nsub, rows; };
        for (const Part& part : {Part{0, whole, kSub}, Part{whole, 1, tail}}) {
            const uint32_t q0 = part.q0, nsub = part.nsub, rows = part.rows;
            if (nsub == 0 || rows == 0) continue;
            for (uint32_t p0 = 0; p0 < rows; p0 += kGroup) {
                const uint32_t P = std::min(kGroup, rows - p0);
                AccessPattern sb = tile_view(x, P, {nsub, tb}, {kBlock, 1}, static_cast<uint64_t>(q0) * kBlock);
                sb.start_partition = static_cast<uint16_t>(p0);
                const int64_t at = base + (static_cast<int64_t>(q0) * kSub + p0) * da.stride[1];
                kb.dma_copy(sb, hbm_piece(1, in, at, da, db, P, nsub, tb), static_cast<int>(next_load++ % nload));
            }
        }
    };
    // out[b = b0 + 128 m + p, a = a0 + i] = y[p, m, i] for tb rows, ta columns.
    auto store = [&](const Tile& y, int64_t base, int64_t b0, uint32_t ta, uint32_t tb) {
        for (uint32_t r0 = 0; r0 < tb; r0 += kGroup) {
            const uint32_t P = std::min(kGroup, tb - r0);
            AccessPattern sb = tile_view(y, P, {ta}, {1}, static_cast<uint64_t>(r0 / kSub) * kBlock);
            sb.start_partition = static_cast<uint16_t>(r0 % kSub);
            const int queue = static_cast<int>(nload + ((b0 + r0) / kGroup) % nstore);
            kb.dma_copy(hbm_piece(0, out, base + r0 * db.stride[0], db, da, P, 1, ta), sb, queue);
        }
    };

    // The blocks are independent: dealt out to the physical cores of the logical core.
    struct Block {
        Box o;
        int64_t a0, b0;
    };
    std::vector<Block> blocks;
    for_each_box(outer, s.offset, 1, 0, [&](const Box& o) {
        for (int64_t a0 = 0; a0 < da.size; a0 += kBlock)
            for (int64_t b0 = 0; b0 < db.size; b0 += kBlock) blocks.push_back({o, a0, b0});
    });
    SpmdSplit spmd(kb, blocks.size());
    for (size_t i = 0; i < blocks.size(); ++i) {
        spmd.enter(i);
        const Box& o = blocks[i].o;
        const int64_t a0 = blocks[i].a0, b0 = blocks[i].b0;
        {
            const uint32_t ta = static_cast<uint32_t>(std::min<int64_t>(kBlock, da.size - a0));
            {
                const uint32_t tb = static_cast<uint32_t>(std::min<int64_t>(kBlock, db.size - b0));
                // x[p, k, j] = in[a = a0 + 128 k + p, b = b0 + j]
                const Tile& x = x_ring.next();
                load(x, o.offset[1] + a0 * da.stride[1] + b0 * db.stride[1], ta, tb);
                // y[p, m, i] = out[b = b0 + 128 m + p, a = a0 + i]
                const Tile& y = y_ring.next();
                for (uint32_t m = 0; m * kSub < tb; ++m) {
                    const uint32_t pb = std::min(kSub, tb - m * kSub);
                    const Tile& ps = psum[npsum++ % psum.size()];
                    for (uint32_t k = 0; k * kSub < ta; ++k) {
                        const uint32_t pa = std::min(kSub, ta - k * kSub);
                        kb.transpose(ps.region(0, pb, k * kSub, pa),
                                     tile_view(x, pa, {pb}, {1}, static_cast<uint64_t>(k) * kBlock + m * kSub));
                    }
                    kb.tensor_copy(tile_view(y, pb, {ta}, {1}, static_cast<uint64_t>(m) * kBlock),
                                   ps.region(0, pb, 0, ta), copy_engines[ncopy++ % 2]);
                }
                store(y, o.offset[0] + a0 * da.stride[0] + b0 * db.stride[0], b0, ta, tb);
            }
        }
    }
    for (auto it = psum.rbegin(); it != psum.rend(); ++it) kb.release(*it);
    y_ring.release(kb);
    x_ring.release(kb);
    return true;
}

}  // namespace

void unary(KernelBuilder& kb, Unary op, const TensorDesc& out, const TensorDesc& in) {
    if (op == Unary::logical_not) {
        run_elementwise(kb, "logical_not", out, {&in}, 0, [&](auto& x, auto& y, auto&) {
            kb.tensor_scalar(y, x[0], AluOp::eq, 0.0f);
        });
        return;
    }
    const ActFunc f = act_for(op);
    run_elementwise(kb, "unary", out, {&in}, 0, [&](auto& x, auto& y, auto&) { kb.activation(y, x[0], f); });
}

void binary(KernelBuilder& kb, Binary op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b, float alpha) {
    const AluOp alu = alu_of(op);
    check_bitwise_dtypes("binary", op, {&out, &a, &b});
    const bool scaled = alpha != 1.0f;
    if (scaled && op != Binary::add && op != Binary::sub) fail("binary", "alpha is only defined for add and sub");
    // An operand with one value per partition becomes tensor_scalar's per-partition scalar (one
    // input stream instead of two); the scalar must be f32, or an integer for bitwise ops.
    auto scalar_operand = [&](const AccessPattern& v) {
        return is_partition_scalar(v) && (is_bitwise(op) ? !is_float(v.dtype) : v.dtype == DType::f32);
    };
    run_elementwise(kb, "binary", out, {&a, &b}, scaled ? 1 : 0, [&](auto& x, auto& y, auto& tmp) {
        if (scalar_operand(x[1])) {
            AccessPattern s = partition_scalar(x[1]);
            if (scaled) {
                const AccessPattern scaled_s = partition_scalar(tmp[0]);
                kb.tensor_scalar(scaled_s, s, AluOp::mul, alpha);
                s = scaled_s;
            }
            kb.tensor_scalar_ex(y, x[0], alu, 0.0f, &s, AluOp::bypass, 0.0f, nullptr);
        } else if (scalar_operand(x[0])) {
            const AccessPattern s = partition_scalar(x[0]);
            if (scaled) {   // s + alpha b or s - alpha b
                kb.tensor_scalar_ex(y, x[1], AluOp::mul, op == Binary::sub ? -alpha : alpha, nullptr, AluOp::add, 0.0f,
                                    &s);
            } else {
                kb.tensor_scalar_ex(y, x[1], alu, 0.0f, &s, AluOp::bypass, 0.0f, nullptr, F_REVERSE0);
            }
        } else if (scaled) {
            kb.tensor_scalar(tmp[0], x[1], AluOp::mul, alpha);
            kb.tensor_tensor(y, x[0], tmp[0], alu);
        } else {
            kb.tensor_tensor(y, x[0], x[1], alu);
        }
    });
}

void binary_scalar(KernelBuilder& kb, Binary op, const TensorDesc& out, const TensorDesc& a, float s, bool reverse) {
    const AluOp alu = alu_of(op);
    check_bitwise_dtypes("binary_scalar", op, {&out, &a});
    run_elementwise(kb, "binary_scalar", out, {&a}, 0, [&](auto& x, auto& y, auto&) {
        kb.tensor_scalar_ex(y, x[0], alu, s, nullptr, AluOp::bypass, 0.0f, nullptr, reverse ? F_REVERSE0 : 0);
    });
}

void where(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& cond, const TensorDesc& a, const TensorDesc& b) {
    run_elementwise(kb, "where", out, {&cond, &a, &b}, 0,
                    [&](auto& x, auto& y, auto&) { kb.select(y, x[0], x[1], x[2]); });
}

void clamp(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, std::optional<float> lo,
           std::optional<float> hi) {
    if ((lo && std::isnan(*lo)) || (hi && std::isnan(*hi))) fail("clamp", "NaN bounds are not supported");
    run_elementwise(kb, "clamp", out, {&in}, 0, [&](auto& x, auto& y, auto&) {
        if (lo && hi) kb.tensor_scalar(y, x[0], AluOp::max, *lo, AluOp::min, *hi);
        else if (lo) kb.tensor_scalar(y, x[0], AluOp::max, *lo);
        else if (hi) kb.tensor_scalar(y, x[0], AluOp::min, *hi);
        else kb.tensor_copy(y, x[0]);
    });
}

void fill(KernelBuilder& kb, const TensorDesc& out, float value) {
    pointwise_detail::fill_space(kb, "fill", out, [&](const AccessPattern& v) { kb.memset(v, value); });
}

void copy(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in) {
    IterSpace s = elementwise_space("copy", out, {&in});
    if (s.numel() == 0) return;
    simplify(s);
    check_no_overlap("copy", s, 0);
    if (transpose_copy(kb, out, in, s)) return;
    pointwise_detail::copy_space(kb, s, out, in);
}

namespace pointwise_detail {

void copy_space(KernelBuilder& kb, const IterSpace& s, const TensorDesc& out, const TensorDesc& in) {
    // HBM to HBM: each piece is one DMA with access patterns on both sides; pieces are sized so
    // that every DMA queue gets work (but no piece is smaller than 512 elements per row).
    const int64_t queues_n = std::max<uint32_t>(1, kb.chip().dma.queues);
    const int64_t target = std::max<int64_t>(512, s.numel() / (kPartitions * queues_n));
    const std::vector<TileBox> tiles = plan_tiles(s, 65535, 0, target);
    uint32_t q = 0;
    for (const TileBox& t : tiles)
        kb.dma_copy(hbm_ap(t.box, 0, out), hbm_ap(t.box, 1, in), static_cast<int>(q++ % queues_n));
}

void fill_space(KernelBuilder& kb, const char* op, const TensorDesc& out,
                const std::function<void(const AccessPattern& tile)>& write_constant) {
    IterSpace s = elementwise_space(op, out, {});
    if (s.numel() == 0) return;
    simplify(s);
    check_no_overlap(op, s, 0);
    const uint32_t fmax = column_budget(kb.chip(), dtype_size(out.dtype), 1);
    const std::vector<TileBox> tiles = plan_tiles(s, fmax);
    uint32_t P = 1, F = 1;
    for (const TileBox& t : tiles) P = std::max(P, t.P), F = std::max(F, t.F);
    // One constant tile, stored to every piece of out.
    const Tile tile = kb.alloc_sbuf(kPartitions, {F}, out.dtype);
    write_constant(tile_view(tile, P, F));
    DmaQueues queues(kb.chip());
    for (const TileBox& t : tiles) kb.dma_copy(hbm_ap(t.box, 0, out), tile_view(tile, t.P, t.F), queues.store());
    kb.release(tile);
}

}  // namespace pointwise_detail

void activation_backward(KernelBuilder& kb, ActivationGrad op, const TensorDesc& grad_in, const TensorDesc& grad_out,
                         const TensorDesc& x, float threshold) {
    const int ntmp = 1;
    run_elementwise(kb, "activation_backward", grad_in, {&grad_out, &x}, ntmp, [&](auto& in, auto& out, auto& t) {
        const AccessPattern &g = in[0], &v = in[1];
        switch (op) {
            case ActivationGrad::gelu:
                kb.activation(t[0], v, ActFunc::gelu_dx);
                kb.tensor_tensor(out, t[0], g, AluOp::mul);
                return;
            case ActivationGrad::gelu_tanh:
                kb.activation(t[0], v, ActFunc::gelu_tanh_dx);
                kb.tensor_tensor(out, t[0], g, AluOp::mul);
                return;
            case ActivationGrad::silu:
                kb.activation(t[0], v, ActFunc::silu_dx);
                kb.tensor_tensor(out, t[0], g, AluOp::mul);
                return;
            case ActivationGrad::sigmoid:
                kb.tensor_scalar(t[0], v, AluOp::mul, -1.0f, AluOp::add, 1.0f);
                kb.tensor_tensor(t[0], t[0], v, AluOp::mul);
                kb.tensor_tensor(out, t[0], g, AluOp::mul);
                return;
            case ActivationGrad::tanh:
                kb.activation(t[0], v, ActFunc::square);
                kb.tensor_scalar(t[0], t[0], AluOp::mul, -1.0f, AluOp::add, 1.0f);
                kb.tensor_tensor(out, t[0], g, AluOp::mul);
                return;
            case ActivationGrad::threshold:
                kb.tensor_scalar(t[0], v, AluOp::gt, threshold);
                select_imm(kb, out, t[0], g, 0.0f);
                return;
        }
        throw OpError("activation_backward: unknown op " + std::to_string(static_cast<int>(op)));
    });
}

AluOp alu_of(Binary op) {
    switch (op) {
        case Binary::add: return AluOp::add;
        case Binary::sub: return AluOp::sub;
        case Binary::mul: return AluOp::mul;
        case Binary::div: return AluOp::div;
        case Binary::maximum: return AluOp::max;
        case Binary::minimum: return AluOp::min;
        case Binary::pow: return AluOp::pow;
        case Binary::fmod: return AluOp::mod;
        case Binary::eq: return AluOp::eq;
        case Binary::ne: return AluOp::ne;
        case Binary::lt: return AluOp::lt;
        case Binary::le: return AluOp::le;
        case Binary::gt: return AluOp::gt;
        case Binary::ge: return AluOp::ge;
        case Binary::logical_and: return AluOp::logical_and;
        case Binary::logical_or: return AluOp::logical_or;
        case Binary::logical_xor: return AluOp::logical_xor;
        case Binary::bitwise_and: return AluOp::bitwise_and;
        case Binary::bitwise_or: return AluOp::bitwise_or;
        case Binary::bitwise_xor: return AluOp::bitwise_xor;
    }
    throw OpError("binary: unknown op " + std::to_string(static_cast<int>(op)));
}

std::optional<ActFunc> activation_of(Unary op) {
    switch (op) {
        case Unary::identity: return ActFunc::identity;
        case Unary::neg: return ActFunc::neg;
        case Unary::abs: return ActFunc::abs;
        case Unary::exp: return ActFunc::exp;
        case Unary::log: return ActFunc::log;
        case Unary::sqrt: return ActFunc::sqrt;
        case Unary::rsqrt: return ActFunc::rsqrt;
        case Unary::reciprocal: return ActFunc::reciprocal;
        case Unary::sigmoid: return ActFunc::sigmoid;
        case Unary::tanh: return ActFunc::tanh;
        case Unary::relu: return ActFunc::relu;
        case Unary::gelu: return ActFunc::gelu;
        case Unary::gelu_tanh: return ActFunc::gelu_tanh;
        case Unary::silu: return ActFunc::silu;
        case Unary::sin: return ActFunc::sin;
        case Unary::cos: return ActFunc::cos;
        case Unary::erf: return ActFunc::erf;
        case Unary::square: return ActFunc::square;
        case Unary::sign: return ActFunc::sign;
        case Unary::softplus: return ActFunc::softplus;
        case Unary::logical_not: break;
    }
    return std::nullopt;
}

}  // namespace trnsim::ops
