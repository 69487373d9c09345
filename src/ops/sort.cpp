// Top-k and sort (ops/sort.h): rows on the partitions, a row's keys in one SBUF tile, k/8 rounds of
// max8 + nc_match_replace8 on the VectorE; values are recovered from the keys.
#include <algorithm>
#include <cmath>
#include <limits>

#include "trnsim/ops.h"
#include "trnsim/tiling.h"

namespace trnsim::ops {

using namespace tiling;

namespace {

constexpr float kFltMax = std::numeric_limits<float>::max();
constexpr float kInf = std::numeric_limits<float>::infinity();
// Keys of the elements that rank last: -inf (largest) / +inf (smallest), and NaN (smallest).
constexpr float kKeyInf = -0.75f * kFltMax;
constexpr float kKeyNan = -kFltMax;

// [P rows, cols) of a 2-D HBM tensor starting at row r0, column c0.
AccessPattern rows_ap(const TensorDesc& t, int64_t r0, uint32_t P, int64_t c0, uint32_t cols) {
    AccessPattern ap;
    ap.space = MemSpace::HBM;
    ap.dtype = t.dtype;
    ap.arg = t.arg;
    ap.offset = static_cast<uint64_t>((t.offset + r0 * t.strides[0] + c0 * t.strides[1]) *
                                      static_cast<int64_t>(dtype_size(t.dtype)));
    ap.partitions = static_cast<uint16_t>(P);
    ap.partition_stride = t.strides[0];
    ap.ndim = 1;
    ap.size = {cols, 1, 1, 1};
    ap.stride = {t.strides[1], 0, 0, 0};
    return ap;
}

AccessPattern cols_of(const AccessPattern& v, uint32_t c0, uint32_t n) {
    AccessPattern a = v;
    a.offset += static_cast<uint64_t>(c0) * dtype_size(v.dtype);
    a.size[0] = n;
    return a;
}

}  // namespace

void topk(KernelBuilder& kb, const TensorDesc* values, const TensorDesc* indices, const TensorDesc& in, int64_t k,
          bool largest) {
    const std::string op = "topk";
    check_desc(op, in, "in");
    if (in.dim() != 2) fail(op, "in " + in.str() + " must be [rows, n]");
    const int64_t rows = in.sizes[0], n = in.sizes[1];
    if (k < 0 || k > n) fail(op, "k " + std::to_string(k) + " out of range for rows of " + std::to_string(n));
    if (n > kTopkMaxRow) fail(op, "rows of " + std::to_string(n) + " elements (at most " + std::to_string(kTopkMaxRow) + ")");
    for (const TensorDesc* t : {values, indices}) {
        if (!t) continue;
        check_desc(op, *t, "out");
        if (t->dim() != 2 || t->sizes[0] != rows || t->sizes[1] != k) fail(op, "out " + t->str() + " must be [rows, k]");
    }
    if (indices && indices->dtype != DType::i32) fail(op, "indices " + indices->str() + " must be i32");
    if (values && !is_float(values->dtype)) fail(op, "values " + values->str() + " must be a float dtype");
    if (rows == 0 || k == 0) return;
    const uint32_t n8 = static_cast<uint32_t>(std::max<int64_t>(n, 8));
    const uint32_t rounds = static_cast<uint32_t>(ceil_div(k, 8)), K = 8 * rounds;
    const Tile key = kb.alloc_sbuf(kPartitions, {n8}, DType::f32);
    const Tile mask = kb.alloc_sbuf(kPartitions, {std::max(n8, K)}, DType::f32);
    const Tile top = kb.alloc_sbuf(kPartitions, {K}, DType::f32);
    const Tile idx = kb.alloc_sbuf(kPartitions, {K}, DType::i32);
    Tile val;
    if (values) val = kb.alloc_sbuf(kPartitions, {K}, values->dtype);
    DmaQueues q(kb.chip());
    for (int64_t r0 = 0; r0 < rows; r0 += kPartitions) {
        const uint32_t P = static_cast<uint32_t>(std::min<int64_t>(kPartitions, rows - r0));
        const AccessPattern kv = tile_view(key, P, n8);
        const AccessPattern kn = cols_of(kv, 0, static_cast<uint32_t>(n)), mn = tile_view(mask, P, static_cast<uint32_t>(n));
        dma_tile(kb, q, kn, rows_ap(in, r0, P, 0, static_cast<uint32_t>(n)), false);   // cast to fp32
        // Keys: x/2 (or -x/2); the last-ranked elements below every finite key.
        kb.tensor_scalar(kn, kn, AluOp::mul, largest ? 0.5f : -0.5f);
        kb.tensor_scalar(mn, kn, AluOp::ne, -kInf);
        select_imm(kb, kn, mn, kn, kKeyInf);
        if (!largest) {
            kb.tensor_tensor(mn, kn, kn, AluOp::eq);   // 0 for NaN
            select_imm(kb, kn, mn, kn, kKeyNan);
        }
        if (n8 > n) kb.memset(cols_of(kv, static_cast<uint32_t>(n), n8 - static_cast<uint32_t>(n)), -kInf);
        const AccessPattern tv = tile_view(top, P, K), iv = tile_view(idx, P, K);
        for (uint32_t r = 0; r < rounds; ++r) {
            const AccessPattern t8 = cols_of(tv, 8 * r, 8), i8 = cols_of(iv, 8 * r, 8);
            kb.max8(t8, kv);
            kb.match_replace8(kv, kv, t8, -kInf, &i8);
        }
        const uint32_t kk = static_cast<uint32_t>(k);
        if (indices) dma_tile(kb, q, rows_ap(*indices, r0, P, 0, kk), cols_of(iv, 0, kk), true);
        if (values) {
            // Values from the keys: x = 2 * key (or -2 * key); twice kKeyInf overflows to the
            // infinity it stands for, kKeyNan is mapped back to NaN.
            const AccessPattern tk = cols_of(tv, 0, kk), mk = cols_of(tile_view(mask, P, K), 0, kk);
            const AccessPattern vv = cols_of(tile_view(val, P, K), 0, kk);
            if (largest) {
                kb.tensor_scalar(vv, tk, AluOp::mul, 2.0f);
            } else {
                kb.tensor_scalar(mk, tk, AluOp::ne, kKeyNan);
                kb.tensor_scalar(tk, tk, AluOp::mul, -2.0f);
                select_imm(kb, vv, mk, tk, std::nanf(""));
            }
            dma_tile(kb, q, rows_ap(*values, r0, P, 0, kk), vv, true);
        }
    }
    if (values) kb.release(val);
    kb.release(idx);
    kb.release(top);
    kb.release(mask);
    kb.release(key);
}

}  // namespace trnsim::ops
