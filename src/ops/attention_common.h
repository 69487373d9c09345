// Shared pieces of the attention kernels (attention_forward.cpp, attention_backward.cpp): tile
// shapes, operand checks, head loads and transposes, masks.
#pragma once
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "trnsim/ops.h"
#include "trnsim/tiling.h"

namespace trnsim::ops::attention_detail {

using namespace trnsim::tiling;

using tiling::fail;

constexpr uint32_t kRows = 128;        // q rows / kv rows per tile (partitions)
constexpr uint32_t kScoreCols = 512;   // kv columns per score block (one PSUM bank of fp32)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

inline uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

// A [B, H, S, E] tensor: rows of one (batch, head) as HBM access patterns.
struct Heads {
    const TensorDesc* t;
    int64_t row_stride() const { return t->strides[2]; }
    // rows [r0, r0+n) x all E columns of head (b, h); rows on partitions.
    AccessPattern rows(int64_t b, int64_t h, uint32_t r0, uint32_t n) const {
        AccessPattern ap;
        ap.space = MemSpace::HBM;
        ap.dtype = t->dtype;
        ap.arg = t->arg;
        const int64_t e = t->offset + b * t->strides[0] + h * t->strides[1] + int64_t(r0) * t->strides[2];
        ap.offset = static_cast<uint64_t>(e * static_cast<int64_t>(dtype_size(t->dtype)));
        ap.partitions = static_cast<uint16_t>(n);
        ap.partition_stride = t->strides[2];
        ap.ndim = 1;
        ap.size[0] = static_cast<uint32_t>(t->sizes[3]);
        ap.stride[0] = t->strides[3];
        return ap;
    }
    // Full 128-row tiles [t0*128, (t0+ntiles)*128) laid out [128 partitions][ntiles][E].
    AccessPattern tiles(int64_t b, int64_t h, uint32_t t0, uint32_t ntiles) const {
        AccessPattern ap = rows(b, h, t0 * kRows, kRows);
        ap.ndim = 2;
        ap.size = {ntiles, static_cast<uint32_t>(t->sizes[3]), 1, 1};
        ap.stride = {int64_t(kRows) * t->strides[2], t->strides[3], 0, 0};
        return ap;
    }
};

// [B, H, Sq] logsumexp rows of one head as a [n, 1] HBM access pattern.
inline AccessPattern lse_rows(const TensorDesc& lse, int64_t b, int64_t h, uint32_t r0, uint32_t n) {
    AccessPattern ap;
    ap.space = MemSpace::HBM;
    ap.dtype = lse.dtype;
    ap.arg = lse.arg;
    const int64_t e = lse.offset + b * lse.strides[0] + h * lse.strides[1] + int64_t(r0) * lse.strides[2];
    ap.offset = static_cast<uint64_t>(e * static_cast<int64_t>(dtype_size(lse.dtype)));
    ap.partitions = static_cast<uint16_t>(n);
    ap.partition_stride = lse.strides[2];
    ap.ndim = 1;
    ap.size[0] = 1;
    return ap;
}

// The additive/boolean mask broadcast to [B, H, Sq, Skv].
struct Mask {
    const TensorDesc* t = nullptr;
    std::vector<int64_t> strides;
    AccessPattern block(int64_t b, int64_t h, uint32_t q0, uint32_t nq, uint32_t k0, uint32_t nk) const {
        AccessPattern ap;
        ap.space = MemSpace::HBM;
        ap.dtype = t->dtype;
        ap.arg = t->arg;
        const int64_t e = t->offset + b * strides[0] + h * strides[1] + int64_t(q0) * strides[2] + int64_t(k0) * strides[3];
        ap.offset = static_cast<uint64_t>(e * static_cast<int64_t>(dtype_size(t->dtype)));
        ap.partitions = static_cast<uint16_t>(nq);
        ap.partition_stride = strides[2];
        ap.ndim = 1;
        ap.size[0] = nk;
        ap.stride[0] = strides[3];
        return ap;
    }
};

struct Shapes {
    int64_t B, H, Sq, Skv, D, Dv;
};

inline void check_heads(const std::string& op, const TensorDesc& t, const char* name, int64_t B, int64_t H, int64_t S,
                 int64_t E, bool float_only = true) {
    tiling::check_desc(op, t, name);
    if (t.dim() != 4 || t.sizes[0] != B || t.sizes[1] != H || t.sizes[2] != S || t.sizes[3] != E)
        fail(op, std::string(name) + " " + t.str() + " must be [" + std::to_string(B) + "," + std::to_string(H) + "," +
                     std::to_string(S) + "," + std::to_string(E) + "]");
    if (float_only && t.dtype != DType::f32 && t.dtype != DType::bf16 && t.dtype != DType::f16)
        fail(op, std::string(name) + " dtype " + dtype_name(t.dtype) + " not supported (f32, bf16, f16)");
}

inline Shapes check_inputs(const std::string& op, const TensorDesc& q, const TensorDesc& k, const TensorDesc& v) {
    if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) fail(op, "q, k, v must be [B, H, S, D]");
    Shapes s{q.sizes[0], q.sizes[1], q.sizes[2], k.sizes[2], q.sizes[3], v.sizes[3]};
    check_heads(op, q, "q", s.B, s.H, s.Sq, s.D);
    check_heads(op, k, "k", s.B, s.H, s.Skv, s.D);
    check_heads(op, v, "v", s.B, s.H, s.Skv, s.Dv);
    if (s.D > kRows || s.Dv > kRows)
        fail(op, "head dims " + std::to_string(s.D) + "/" + std::to_string(s.Dv) + " exceed 128");
    if (q.dtype != k.dtype || q.dtype != v.dtype) fail(op, "q, k, v dtypes differ");
    if (s.Sq > UINT32_MAX || s.Skv > UINT32_MAX) fail(op, "sequence too long");
    return s;
}

inline Mask check_mask(const std::string& op, const TensorDesc* mask, const Shapes& s) {
    Mask m;
    if (!mask) return m;
    tiling::check_desc(op, *mask, "attn_mask");
    if (mask->dtype != DType::boolean && mask->dtype != DType::f32 && mask->dtype != DType::bf16 &&
        mask->dtype != DType::f16)
        fail(op, "attn_mask dtype " + std::string(dtype_name(mask->dtype)) + " not supported (bool or float)");
    m.t = mask;
    m.strides = tiling::broadcast_strides(op, *mask, {s.B, s.H, s.Sq, s.Skv});
    return m;
}

// Engine alternation for PSUM evacuations (the GpSimd cannot read PSUM).
struct Evac {
    int next = 0;
    Engine operator()() { return (next++ & 1) ? Engine::Scalar : Engine::Vector; }
};

// Transposes the first 'rows' rows [rows, E] of 'src' (a [128, E]-shaped AP) into columns
// [c0, c0+rows) of dst [E, *] through a PSUM tile.
inline void transpose_into(KernelBuilder& kb, const Tile& dst, uint32_t c0, const AccessPattern& src, uint32_t rows,
                    uint32_t E, const Tile& ps, Evac& evac) {
    kb.transpose(ps.region(0, E, 0, rows), src);
    kb.tensor_copy(dst.region(0, E, c0, rows), ps.region(0, E, 0, rows), evac());
}

// A [128, n*E] natural tile's rows of tile t: [rows, E].
inline AccessPattern tile_rows(const Tile& t, uint32_t tile, uint32_t rows, uint32_t E) {
    return t.region(0, rows, tile * E, E);
}

// Loads all rows of one head into a natural tile [128][ntiles][E]: the full tiles in DMAs of up
// to kTilesPerLoad tiles on successive queues (one queue alone moves a fraction of the core's
// bandwidth), and one DMA for the ragged rest.
constexpr uint32_t kTilesPerLoad = 4;
inline void load_natural(KernelBuilder& kb, tiling::DmaQueues& q, const Heads& src, int64_t b, int64_t h, uint32_t S,
                  const Tile& dst) {
    const uint32_t E = static_cast<uint32_t>(src.t->sizes[3]), full = S / kRows, rest = S % kRows;
    for (uint32_t t0 = 0; t0 < full; t0 += kTilesPerLoad) {
        const uint32_t n = std::min(kTilesPerLoad, full - t0);
        AccessPattern d = dst.rows(0, kRows);
        d.offset += static_cast<uint64_t>(t0) * E * dtype_size(dst.dtype);
        d.ndim = 1;
        d.size = {n * E, 1, 1, 1};
        d.stride = {1, 0, 0, 0};
        kb.dma_copy(d, src.tiles(b, h, t0, n), q.load());
    }
    if (rest) kb.dma_copy(tile_rows(dst, full, rest, E), src.rows(b, h, full * kRows, rest), q.load());
}

// Natural [128][ntiles][E] -> transposed [E, S] through the TensorE.
inline void transpose_all(KernelBuilder& kb, const Tile& natural, uint32_t S, uint32_t E, const Tile& dst,
                   const std::array<Tile, 2>& ps, int& ps_next, Evac& evac) {
    for (uint32_t t = 0; t * kRows < S; ++t) {
        const uint32_t rows = std::min(kRows, S - t * kRows);
        transpose_into(kb, dst, t * kRows, tile_rows(natural, t, rows, E), rows, E, ps[ps_next ^= 1], evac);
    }
}

inline void check_sbuf(const std::string& op, const KernelBuilder& kb, uint64_t bytes) {
    if (bytes > kb.chip().sbuf.bytes_per_partition * 3 / 4)
        fail(op, "sequence too long for one head in SBUF (" + std::to_string(bytes) + " bytes per partition needed)");
}

// dst = (mask != 0) ? src : -inf   (boolean masks: True attends)
inline void select_or_neg_inf(KernelBuilder& kb, const AccessPattern& dst, const AccessPattern& mask, const AccessPattern& src) {
    Instruction ins;
    ins.op = Opcode::select;
    ins.engine = Engine::Vector;
    ins.dst = dst;
    ins.src0 = mask;
    ins.src1 = src;
    ins.imm0 = kNegInf;
    kb.emit(ins);
}

// s += mask (float) or s = mask ? s : -inf (bool), for the [nq, nk] block at (q0, k0).
inline void apply_mask(KernelBuilder& kb, tiling::DmaQueues& q, const Mask& mask, const Tile& mask_tile, int64_t b, int64_t h,
                uint32_t q0, uint32_t nq, uint32_t k0, uint32_t nk, const AccessPattern& s) {
    const AccessPattern m = mask_tile.region(0, nq, 0, nk);
    kb.dma_copy(m, mask.block(b, h, q0, nq, k0, nk), q.load());
    if (mask.t->dtype == DType::boolean) select_or_neg_inf(kb, s, m, s);
    else kb.tensor_tensor(s, s, m, AluOp::add);
}

// Causal (top-left aligned, like torch): row q0+p keeps columns k0+i <= q0+p; others get 'fill'.
inline void causal_mask(KernelBuilder& kb, const AccessPattern& s, uint32_t q0, uint32_t k0, float fill) {
    Affine a;
    a.base = static_cast<int32_t>(int64_t(q0) - int64_t(k0));
    a.partition_mul = 1;
    a.free_mul = {-1, 0, 0, 0};
    kb.affine_select(s, s, a, AluOp::ge, fill);
}


}  // namespace trnsim::ops::attention_detail
