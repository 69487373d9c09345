// Scaled dot-product attention (ops.h): a flash-style forward that keeps the
// scores on chip (PSUM -> SBUF) with an online softmax, and a backward that
// recomputes the probabilities tile by tile from the saved logsumexp.
//
// Forward, per (batch, head): K is loaded once and transposed on the TensorE
// into K^T [D, Skv]; V stays in natural 128-row tiles. Per 128-row q tile:
//   for each 512-column kv block:  S = Q K^T (one matmul, contraction D)
//     s = scale * S (+ mask, causal affine_select), m' = max(m, rowmax s)
//     p = exp(s - m') with its row sum (ScalarE), alpha = exp(m - m')
//     l = l * alpha + rowsum;  O = O * alpha + P V  (P transposed on the TensorE)
//   out = O / l,  lse = m + log l.
// Backward, per (batch, head), kv tile outer and q tile inner (FlashAttention-2):
//   P = exp(scale * Q K^T - lse), dV += P^T dO, dP = dO V^T,
//   dS = scale * P * (dP - rowsum(dO * O)), dK += dS^T Q, dQ += dS K
// dV and dK accumulate in PSUM over the q tiles, dQ in an fp32 SBUF accumulator.
#include <algorithm>
#include <cmath>
#include <limits>

#include "common.h"

namespace trnsim::ops {

namespace {

using detail::fail;

constexpr uint32_t kRows = 128;        // q rows / kv rows per tile (partitions)
constexpr uint32_t kScoreCols = 512;   // kv columns per score block (one PSUM bank of fp32)
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

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
AccessPattern lse_rows(const TensorDesc& lse, int64_t b, int64_t h, uint32_t r0, uint32_t n) {
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

void check_heads(const std::string& op, const TensorDesc& t, const char* name, int64_t B, int64_t H, int64_t S,
                 int64_t E, bool float_only = true) {
    detail::check_desc(op, t, name);
    if (t.dim() != 4 || t.sizes[0] != B || t.sizes[1] != H || t.sizes[2] != S || t.sizes[3] != E)
        fail(op, std::string(name) + " " + t.str() + " must be [" + std::to_string(B) + "," + std::to_string(H) + "," +
                     std::to_string(S) + "," + std::to_string(E) + "]");
    if (float_only && t.dtype != DType::f32 && t.dtype != DType::bf16 && t.dtype != DType::f16)
        fail(op, std::string(name) + " dtype " + dtype_name(t.dtype) + " not supported (f32, bf16, f16)");
}

Shapes check_inputs(const std::string& op, const TensorDesc& q, const TensorDesc& k, const TensorDesc& v) {
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

Mask check_mask(const std::string& op, const TensorDesc* mask, const Shapes& s) {
    Mask m;
    if (!mask) return m;
    detail::check_desc(op, *mask, "attn_mask");
    if (mask->dtype != DType::boolean && mask->dtype != DType::f32 && mask->dtype != DType::bf16 &&
        mask->dtype != DType::f16)
        fail(op, "attn_mask dtype " + std::string(dtype_name(mask->dtype)) + " not supported (bool or float)");
    m.t = mask;
    m.strides = detail::broadcast_strides(op, *mask, {s.B, s.H, s.Sq, s.Skv});
    return m;
}

// Engine alternation for PSUM evacuations (the GpSimd cannot read PSUM).
struct Evac {
    int next = 0;
    Engine operator()() { return (next++ & 1) ? Engine::Scalar : Engine::Vector; }
};

// Transposes the first 'rows' rows [rows, E] of 'src' (a [128, E]-shaped AP) into columns
// [c0, c0+rows) of dst [E, *] through a PSUM tile.
void transpose_into(KernelBuilder& kb, const Tile& dst, uint32_t c0, const AccessPattern& src, uint32_t rows,
                    uint32_t E, const Tile& ps, Evac& evac) {
    kb.transpose(ps.region(0, E, 0, rows), src);
    kb.tensor_copy(dst.region(0, E, c0, rows), ps.region(0, E, 0, rows), evac());
}

// A [128, n*E] natural tile's rows of tile t: [rows, E].
AccessPattern tile_rows(const Tile& t, uint32_t tile, uint32_t rows, uint32_t E) {
    return t.region(0, rows, tile * E, E);
}

// Loads all rows of one head into a natural tile [128][ntiles][E]: the full tiles in DMAs of up
// to kTilesPerLoad tiles on successive queues (one queue alone moves a fraction of the core's
// bandwidth), and one DMA for the ragged rest.
constexpr uint32_t kTilesPerLoad = 4;
void load_natural(KernelBuilder& kb, detail::DmaQueues& q, const Heads& src, int64_t b, int64_t h, uint32_t S,
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
void transpose_all(KernelBuilder& kb, const Tile& natural, uint32_t S, uint32_t E, const Tile& dst,
                   const std::array<Tile, 2>& ps, int& ps_next, Evac& evac) {
    for (uint32_t t = 0; t * kRows < S; ++t) {
        const uint32_t rows = std::min(kRows, S - t * kRows);
        transpose_into(kb, dst, t * kRows, tile_rows(natural, t, rows, E), rows, E, ps[ps_next ^= 1], evac);
    }
}

void check_sbuf(const std::string& op, const KernelBuilder& kb, uint64_t bytes) {
    if (bytes > kb.chip().sbuf.bytes_per_partition * 3 / 4)
        fail(op, "sequence too long for one head in SBUF (" + std::to_string(bytes) + " bytes per partition needed)");
}

// dst = (mask != 0) ? src : -inf   (boolean masks: True attends)
void select_or_neg_inf(KernelBuilder& kb, const AccessPattern& dst, const AccessPattern& mask, const AccessPattern& src) {
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
void apply_mask(KernelBuilder& kb, detail::DmaQueues& q, const Mask& mask, const Tile& mask_tile, int64_t b, int64_t h,
                uint32_t q0, uint32_t nq, uint32_t k0, uint32_t nk, const AccessPattern& s) {
    const AccessPattern m = mask_tile.region(0, nq, 0, nk);
    kb.dma_copy(m, mask.block(b, h, q0, nq, k0, nk), q.load());
    if (mask.t->dtype == DType::boolean) select_or_neg_inf(kb, s, m, s);
    else kb.tensor_tensor(s, s, m, AluOp::add);
}

// Causal (top-left aligned, like torch): row q0+p keeps columns k0+i <= q0+p; others get 'fill'.
void causal_mask(KernelBuilder& kb, const AccessPattern& s, uint32_t q0, uint32_t k0, float fill) {
    Affine a;
    a.base = static_cast<int32_t>(int64_t(q0) - int64_t(k0));
    a.partition_mul = 1;
    a.free_mul = {-1, 0, 0, 0};
    kb.affine_select(s, s, a, AluOp::ge, fill);
}

}  // namespace

void sdpa_forward(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& lse, const TensorDesc& q,
                  const TensorDesc& k, const TensorDesc& v, const TensorDesc* attn_mask, bool causal, float scale) {
    const std::string op = "scaled_dot_product_attention";
    const Shapes s = check_inputs(op, q, k, v);
    check_heads(op, out, "out", s.B, s.H, s.Sq, s.Dv);
    detail::check_desc(op, lse, "lse");
    if (lse.dim() != 3 || lse.sizes[0] != s.B || lse.sizes[1] != s.H || lse.sizes[2] != s.Sq || lse.dtype != DType::f32)
        fail(op, "lse " + lse.str() + " must be f32 [B, H, Sq]");
    const Mask mask = check_mask(op, attn_mask, s);
    if (s.B * s.H * s.Sq == 0) return;
    const DType dt = q.dtype;
    const uint32_t Sq = static_cast<uint32_t>(s.Sq), Skv = static_cast<uint32_t>(s.Skv);
    const uint32_t D = static_cast<uint32_t>(s.D), Dv = static_cast<uint32_t>(s.Dv);
    const uint32_t nkt = ceil_div(Skv, kRows);
    check_sbuf(op, kb, 2 * uint64_t(nkt) * (D + Dv) * dtype_size(dt) + 2 * uint64_t(Skv) * dtype_size(dt));
    if (Skv == 0) fail(op, "empty key sequence");

    const Heads Q{&q}, K{&k}, V{&v}, O{&out};
    detail::DmaQueues dq(kb.chip());
    Evac evac;
    // Chips with DMA transposes load K^T and each q tile's Q^T transposed from HBM; others load
    // natural rows and transpose them on the TensorE.
    const bool dma_t = kb.has_dma_transpose() && (dt == DType::bf16 || dt == DType::f16 || dt == DType::f32);

    // Per head (double buffered across heads): K^T, V natural (and K natural without DMA transposes).
    std::array<Tile, 2> k_nat, k_t, v_nat;
    for (int i = 0; i < 2; ++i) {
        if (!dma_t) k_nat[i] = kb.alloc_sbuf(kRows, {nkt * D}, dt);
        k_t[i] = kb.alloc_sbuf(D, {nkt * kRows}, dt);
        v_nat[i] = kb.alloc_sbuf(kRows, {nkt * Dv}, dt);
    }
    // The blocks of all rows (one q tile of one head) form one stream, so the pipeline below
    // never drains between rows: up to five rows are in flight, each with its own Q^T, O
    // accumulator and row sum.
    constexpr int kRowRing = 5;
    std::array<Tile, kRowRing> q_rows, q_t, o_acc, l_run;
    for (int i = 0; i < kRowRing; ++i) {
        if (!dma_t) q_rows[i] = kb.alloc_sbuf(kRows, {D}, dt);
        q_t[i] = kb.alloc_sbuf(D, {kRows}, dt);
        o_acc[i] = kb.alloc_sbuf(kRows, {Dv}, DType::f32);
        l_run[i] = kb.alloc_sbuf(kRows, {1}, DType::f32);
    }
    std::array<Tile, 2> o_out, log_l, lse_t;
    for (int i = 0; i < 2; ++i) {
        o_out[i] = kb.alloc_sbuf(kRows, {Dv}, out.dtype);
        log_l[i] = kb.alloc_sbuf(kRows, {1}, DType::f32);
        lse_t[i] = kb.alloc_sbuf(kRows, {1}, DType::f32);
    }
    // Score blocks without masks span two PSUM banks (1024 keys) when P^T is 2-byte (its PSUM
    // tiles then leave room): the exp, the row max and the softmax rescaling pay their
    // per-instruction costs once per 1024 keys. Causal rows use them below the diagonal. The
    // scores of three blocks are in flight (see the block loop); everything else per block
    // rotates over a ring as deep as the pipeline.
    const bool may_mask = mask.t || causal || !(scale > 0.0f);   // blocks scaled into SBUF first
    const uint32_t banks = mask.t || !(scale > 0.0f) || dtype_size(dt) > 2 ? 1 : 2;
    const uint32_t block_keys = banks * kScoreCols, chunks = block_keys / kRows;
    constexpr int kRing = 3;
    constexpr size_t kLookahead = 2;   // the S stage runs this many blocks ahead of the E stage
    std::vector<Tile> ps_s(kLookahead + 1);
    for (auto& t : ps_s) t = kb.alloc_psum_banks(kRows, banks);
    std::array<Tile, kRing> s_sb, p_sb, mx, mx_half, rowsum, alpha, ps_pv;
    for (int i = 0; i < kRing; ++i) {
        if (may_mask) s_sb[i] = kb.alloc_sbuf(kRows, {block_keys}, DType::f32);
        mx_half[i] = kb.alloc_sbuf(kRows, {block_keys / 2}, DType::f32);
        p_sb[i] = kb.alloc_sbuf(kRows, {block_keys}, dt);
        mx[i] = kb.alloc_sbuf(kRows, {1}, DType::f32);
        rowsum[i] = kb.alloc_sbuf(kRows, {1}, DType::f32);
        alpha[i] = kb.alloc_sbuf(kRows, {1}, DType::f32);
        ps_pv[i] = kb.alloc_psum(kRows, Dv);
    }
    // The running max of each block's row, kept negated (nm = -m: the exp's bias as it stands);
    // blocks g-2 .. g+2 are in flight.
    constexpr int kNmRing = kRing + 2;
    std::array<Tile, kNmRing> nm_run;
    for (auto& t : nm_run) t = kb.alloc_sbuf(kRows, {1}, DType::f32);
    // P^T of two blocks (one being transposed, one multiplied), two 128-column chunks per tile
    // side by side: [128 keys, 2 x 128 queries], evacuated from PSUM by one instruction per pair.
    // Two-bank scores leave PSUM for one block's P^T tiles only.
    const uint32_t pairs = chunks / 2;
    const uint32_t pt_sets = banks == 2 ? 1 : 2;
    std::vector<Tile> pt_sb(2 * pairs), ps_pt(pt_sets * pairs);
    for (auto& t : pt_sb) t = kb.alloc_sbuf(kRows, {2 * kRows}, dt);
    for (auto& t : ps_pt) t = kb.alloc_psum(kRows, 2 * kRows, dt);
    Tile mask_tile;
    if (mask.t) mask_tile = kb.alloc_sbuf(kRows, {block_keys}, mask.t->dtype == DType::boolean ? DType::u8 : DType::f32);
    std::array<Tile, 2> ps_load;   // TensorE transposes of loaded K and Q (without DMA transposes)
    if (!dma_t)
        for (auto& t : ps_load) t = kb.alloc_psum(kRows, kRows, dt);
    int ps_load_next = 0;

    struct Row {
        int64_t b, h;
        uint32_t q0, nq, nblocks;
    };
    struct Block {
        uint32_t row, n;   // block n of the row
        uint32_t k0, nk;   // its keys
    };
    std::vector<Row> rows;
    std::vector<Block> blocks;
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.H; ++h)
            for (uint32_t q0 = 0; q0 < Sq; q0 += kRows) {
                const uint32_t nq = std::min(kRows, Sq - q0);
                const uint32_t k_end = causal ? std::min(Skv, q0 + nq) : Skv;
                // Full blocks while every key is visible to every row of the tile; a causal row's
                // remaining keys (up to and across the diagonal) in blocks of one PSUM bank.
                const uint32_t r = static_cast<uint32_t>(rows.size());
                uint32_t n = 0, k0 = 0;
                for (; k0 + block_keys <= k_end && (!causal || k0 + block_keys - 1 <= q0); k0 += block_keys)
                    blocks.push_back({r, n++, k0, block_keys});
                for (; k0 < k_end || n == 0; k0 += kScoreCols)
                    blocks.push_back({r, n++, k0, std::min(kScoreCols, k_end - k0)});
                rows.push_back({b, h, q0, nq, n});
            }
    auto head_buffer = [&](const Row& r) { return static_cast<int>((r.b * s.H + r.h) & 1); };
    auto load_head = [&](int64_t b, int64_t h) {
        const int hb = static_cast<int>((b * s.H + h) & 1);
        if (dma_t) {
            for (uint32_t j = 0; j < nkt; ++j) {
                const uint32_t k0 = j * kRows, nk = std::min(kRows, Skv - k0);
                kb.dma_transpose(k_t[hb].region(0, D, k0, nk), K.rows(b, h, k0, nk), dq.load());
            }
        } else {
            load_natural(kb, dq, K, b, h, Skv, k_nat[hb]);
        }
        load_natural(kb, dq, V, b, h, Skv, v_nat[hb]);
        if (!dma_t) transpose_all(kb, k_nat[hb], Skv, D, k_t[hb], ps_load, ps_load_next, evac);
    };
    // A row's Q^T.
    auto start_row = [&](uint32_t r) {
        const Row& row = rows[r];
        const Tile& qt = q_t[r % kRowRing];
        if (dma_t) {
            kb.dma_transpose(qt.region(0, D, 0, row.nq), Q.rows(row.b, row.h, row.q0, row.nq), dq.load());
        } else {
            const Tile& qr = q_rows[r % kRowRing];
            kb.dma_copy(qr.region(0, row.nq, 0, D), Q.rows(row.b, row.h, row.q0, row.nq), dq.load());
            transpose_into(kb, qt, 0, qr.region(0, row.nq, 0, D), row.nq, D, ps_load[ps_load_next ^= 1], evac);
        }
    };

    // Per score block g, five stages issued as S(g+2), E(g), B(g-1), C(g-2), M(g+2), so that
    // each engine's in-order queue holds work whose inputs are already there:
    //   S: scores = Q K^T (TensorE), the first half of the row max (VectorE);
    //   E: P = exp(scale * scores + nm) with its row sum (ScalarE), alpha, l = l * alpha + rowsum;
    //   B: P^T, 128 columns at a time, on the TensorE and out of PSUM (ScalarE, VectorE);
    //   C: P V, O = O * alpha (GpSimd) + P V (VectorE); after a row's last block, out = O / l
    //      and the lse;
    //   M: the row max, nm(g) = min(nm(g-1), -scale * max).
    // The GpSimd cannot reach PSUM: it takes the SBUF-only work (alpha, l, O * alpha, nm, the
    // second half of the row max). A row's first block starts l and O instead of rescaling them.
    auto nm_of = [&](size_t g) { return nm_run[g % kNmRing].rows(0, rows[blocks[g].row].nq); };
    auto masked_block = [&](size_t g) {
        const Row& row = rows[blocks[g].row];
        const uint32_t k0 = blocks[g].k0, nk = blocks[g].nk;
        return mask.t || (causal && k0 + nk - 1 > row.q0) || !(scale > 0.0f);
    };
    // Unmasked blocks of whole 128-key chunks take the row max in two steps (see stage_s).
    auto halved_max = [&](size_t g) {
        const uint32_t nk = blocks[g].nk;
        return !masked_block(g) && nk % 2 == 0 && nk >= 2 * kRows;
    };
    auto stage_s = [&](size_t g) {
        const Row& row = rows[blocks[g].row];
        const uint32_t k0 = blocks[g].k0, nk = blocks[g].nk, nq = row.nq;
        const int bi = static_cast<int>(g % kRing);
        const AccessPattern sp = ps_s[g % ps_s.size()].region(0, nq, 0, nk);
        for (uint32_t c0 = 0; c0 < nk; c0 += kScoreCols)   // one matmul per PSUM bank
            kb.matmul(ps_s[g % ps_s.size()].region(0, nq, c0, std::min(kScoreCols, nk - c0)),
                      q_t[blocks[g].row % kRowRing].region(0, D, 0, nq),
                      k_t[head_buffer(row)].region(0, D, k0 + c0, std::min(kScoreCols, nk - c0)), false);
        // Unmasked blocks take the softmax straight from PSUM: the row max of the raw scores
        // (scale > 0 keeps it the max of the scaled ones), then one ScalarE pass
        // exp(scale * s + nm). Masked blocks are scaled into SBUF and masked first.
        const bool masked = masked_block(g);
        const AccessPattern ss = masked ? s_sb[bi].region(0, nq, 0, nk) : sp;
        if (masked) {
            kb.activation(ss, sp, ActFunc::identity, scale);
            if (mask.t) apply_mask(kb, dq, mask, mask_tile, row.b, row.h, row.q0, nq, k0, nk, ss);
            if (causal && k0 + nk - 1 > row.q0) causal_mask(kb, ss, row.q0, k0, kNegInf);
        }
        // The row max of scores in PSUM in two steps: the larger of keys j and j + nk/2 into
        // SBUF (one VectorE pass at the PSUM rate, so half the elements of a direct reduce),
        // then (stage M) the reduce of that half, on the GpSimd for full two-bank blocks.
        if (halved_max(g)) {
            const uint32_t half = nk / 2;
            const Tile& st = ps_s[g % ps_s.size()];
            kb.tensor_tensor(mx_half[bi].region(0, nq, 0, half), st.region(0, nq, 0, half),
                             st.region(0, nq, half, half), AluOp::max);
        }
    };
    // M: the rest of the row max and nm(g), issued after other work so that neither instruction
    // waits on the one just before it on its engine.
    auto stage_m = [&](size_t g) {
        const Row& row = rows[blocks[g].row];
        const uint32_t n = blocks[g].n, nk = blocks[g].nk, nq = row.nq;
        const int bi = static_cast<int>(g % kRing);
        const bool masked = masked_block(g);
        const AccessPattern mb = mx[bi].rows(0, nq);
        if (halved_max(g))
            kb.tensor_reduce(mb, mx_half[bi].region(0, nq, 0, nk / 2), ReduceOp::max, 1,
                             nk >= 2 * kScoreCols ? Engine::GpSimd : Engine::Vector);
        else
            kb.tensor_reduce(mb, masked ? s_sb[bi].region(0, nq, 0, nk) : ps_s[g % ps_s.size()].region(0, nq, 0, nk),
                             ReduceOp::max);
        if (n == 0) {
            kb.tensor_scalar_ex(nm_of(g), mb, AluOp::mul, masked ? -1.0f : -scale, nullptr, AluOp::bypass, 0.0f,
                                nullptr, 0, Engine::GpSimd);
        } else {
            const AccessPattern nm_old = nm_of(g - 1);
            kb.tensor_scalar_ex(nm_of(g), mb, AluOp::mul, masked ? -1.0f : -scale, nullptr, AluOp::min, 0.0f, &nm_old,
                                0, Engine::GpSimd);
        }
    };
    auto stage_e = [&](size_t g) {
        const uint32_t r = blocks[g].row, n = blocks[g].n, nk = blocks[g].nk, nq = rows[r].nq;
        const int bi = static_cast<int>(g % kRing);
        const AccessPattern nm = nm_of(g), l = l_run[r % kRowRing].rows(0, nq);
        const AccessPattern ps = p_sb[bi].region(0, nq, 0, nk);
        const AccessPattern rs = n == 0 ? l : rowsum[bi].rows(0, nq);
        if (masked_block(g))
            kb.activation_ex(ps, s_sb[bi].region(0, nq, 0, nk), ActFunc::exp, 1.0f, nullptr, 0.0f, &nm, ReduceOp::add,
                             &rs);
        else
            kb.activation_ex(ps, ps_s[g % ps_s.size()].region(0, nq, 0, nk), ActFunc::exp, scale, nullptr, 0.0f, &nm, ReduceOp::add,
                             &rs);
        if (n == 0) return;
        // alpha = exp(m_old - m) = e^(nm - nm_old) on the GpSimd, which has the time;
        // l = l * alpha + rowsum.
        const AccessPattern al = alpha[bi].rows(0, nq), nm_old = nm_of(g - 1);
        kb.tensor_scalar_ex(al, nm, AluOp::sub, 0.0f, &nm_old, AluOp::pow, std::exp(1.0f), nullptr, F_REVERSE1,
                            Engine::GpSimd);
        kb.tensor_scalar_ex(l, l, AluOp::mul, 0.0f, &al, AluOp::add, 0.0f, &rs, 0, Engine::GpSimd);
    };
    // Chunk c of block g's P^T: [w keys, nq queries] in column (c % 2) * nq of its pair tile.
    auto pt_chunk = [&](const std::vector<Tile>& tiles, size_t g, uint32_t c, uint32_t w, uint32_t nq) {
        return tiles[(g % (tiles.size() / pairs)) * pairs + c / 2].region(0, w, (c % 2) * nq, nq);
    };
    auto stage_b = [&](size_t g) {
        const uint32_t nk = blocks[g].nk, nq = rows[blocks[g].row].nq;
        auto width = [&](uint32_t c) { return std::min(kRows, nk - c * kRows); };
        const uint32_t nchunks = ceil_div(nk, kRows);
        for (uint32_t pair = 0; 2 * pair < nchunks; ++pair) {
            const uint32_t c0 = 2 * pair, w = width(c0);
            const bool both = c0 + 1 < nchunks && width(c0 + 1) == w;
            for (uint32_t c = c0; c < std::min(c0 + 2, nchunks); ++c)
                kb.transpose(pt_chunk(ps_pt, g, c, width(c), nq), p_sb[g % kRing].region(0, nq, c * kRows, width(c)));
            // PSUM is read by the ScalarE and the VectorE only: the first pair on the ScalarE
            // (which also carries the exp), the others on the VectorE.
            const Engine engine = pair == 0 ? Engine::Scalar : Engine::Vector;
            if (both) {
                const Tile &from = ps_pt[(g % pt_sets) * pairs + pair], &to = pt_sb[(g & 1) * pairs + pair];
                kb.tensor_copy(to.region(0, w, 0, 2 * nq), from.region(0, w, 0, 2 * nq), engine);
            } else {
                for (uint32_t c = c0; c < std::min(c0 + 2, nchunks); ++c)
                    kb.tensor_copy(pt_chunk(pt_sb, g, c, width(c), nq), pt_chunk(ps_pt, g, c, width(c), nq), engine);
            }
        }
    };
    auto stage_c = [&](size_t g) {
        const uint32_t r = blocks[g].row, n = blocks[g].n, k0 = blocks[g].k0, nk = blocks[g].nk;
        const Row& row = rows[r];
        const uint32_t nq = row.nq;
        const int bi = static_cast<int>(g % kRing);
        const AccessPattern pv = ps_pv[bi].region(0, nq, 0, Dv), oacc = o_acc[r % kRowRing].region(0, nq, 0, Dv);
        for (uint32_t c = 0; c * kRows < nk; ++c) {
            const uint32_t w = std::min(kRows, nk - c * kRows);
            kb.matmul(pv, pt_chunk(pt_sb, g, c, w, nq), v_nat[head_buffer(row)].region(0, w, (k0 / kRows + c) * Dv, Dv),
                      c > 0);
        }
        // O = O * alpha on the GpSimd (SBUF only), + P V on the VectorE (which reads PSUM).
        if (n == 0) {
            kb.tensor_copy(oacc, pv);
        } else {
            const AccessPattern al = alpha[bi].rows(0, nq);
            kb.tensor_scalar_ex(oacc, oacc, AluOp::mul, 0.0f, &al, AluOp::bypass, 0.0f, nullptr, 0, Engine::GpSimd);
            kb.tensor_tensor(oacc, oacc, pv, AluOp::add, Engine::Vector);
        }
        if (n + 1 < row.nblocks) return;
        // out = O / l, lse = m + log(l) = log(l) - nm
        const AccessPattern l = l_run[r % kRowRing].rows(0, nq), ot = o_out[r & 1].region(0, nq, 0, Dv);
        kb.tensor_scalar_ex(ot, oacc, AluOp::div, 0.0f, &l, AluOp::bypass, 0.0f, nullptr, 0, Engine::GpSimd);
        kb.dma_copy(O.rows(row.b, row.h, row.q0, nq), ot, dq.store());
        const AccessPattern ll = log_l[r & 1].rows(0, nq), lt = lse_t[r & 1].rows(0, nq);
        kb.activation(ll, l, ActFunc::log);
        kb.tensor_tensor(lt, ll, nm_of(g), AluOp::sub);
        kb.dma_copy(lse_rows(lse, row.b, row.h, row.q0, nq), lt, dq.store());
        // The head's K and V buffer is free: the head after next loads into it, while the next
        // one computes.
        const int64_t head = row.b * s.H + row.h;
        if (row.q0 + nq == Sq && head + 2 < s.B * s.H) load_head((head + 2) / s.H, (head + 2) % s.H);
    };

    load_head(0, 0);
    if (s.B * s.H > 1) load_head(s.H > 1 ? 0 : 1, s.H > 1 ? 1 : 0);
    // Head h+2 is loaded after head h's last C stage, and its first S stage must come after
    // that: the stream is cut (the pipeline drains) before a head whose predecessor has fewer
    // than kLookahead + 2 blocks.
    auto head_of = [&](size_t g) { return rows[blocks[g].row].b * s.H + rows[blocks[g].row].h; };
    std::vector<uint32_t> head_blocks(static_cast<size_t>(s.B * s.H), 0);
    for (const Block& blk : blocks) ++head_blocks[static_cast<size_t>(rows[blk.row].b * s.H + rows[blk.row].h)];
    auto cut_before = [&](size_t g) {
        const int64_t head = head_of(g);
        return blocks[g].n == 0 && rows[blocks[g].row].q0 == 0 && head >= 2 &&
               head_blocks[head - 1] < kLookahead + 2;
    };
    const size_t nb = blocks.size();
    for (size_t g0 = 0; g0 < nb;) {
        size_t g1 = g0 + 1;
        while (g1 < nb && !cut_before(g1)) ++g1;
        for (size_t g = g0; g < std::min(g1, g0 + kLookahead); ++g) {
            if (g == g0 || blocks[g].n == 0) start_row(blocks[g].row);
            stage_s(g);
            stage_m(g);
        }
        for (size_t g = g0; g < g1 + 2; ++g) {
            if (g + kLookahead < g1) {
                if (blocks[g + kLookahead].n == 0) start_row(blocks[g + kLookahead].row);
                stage_s(g + kLookahead);
            }
            if (g < g1) stage_e(g);
            if (g >= g0 + 1 && g <= g1) stage_b(g - 1);
            if (g >= g0 + 2) stage_c(g - 2);
            if (g + kLookahead < g1) stage_m(g + kLookahead);
        }
        g0 = g1;
    }
}

void sdpa_backward(KernelBuilder& kb, const TensorDesc& dq, const TensorDesc& dk, const TensorDesc& dv,
                   const TensorDesc& dout, const TensorDesc& q, const TensorDesc& k, const TensorDesc& v,
                   const TensorDesc& out, const TensorDesc& lse, const TensorDesc* attn_mask, bool causal, float scale) {
    const std::string op = "scaled_dot_product_attention_backward";
    const Shapes s = check_inputs(op, q, k, v);
    check_heads(op, out, "out", s.B, s.H, s.Sq, s.Dv);
    check_heads(op, dout, "grad_out", s.B, s.H, s.Sq, s.Dv);
    check_heads(op, dq, "grad_q", s.B, s.H, s.Sq, s.D);
    check_heads(op, dk, "grad_k", s.B, s.H, s.Skv, s.D);
    check_heads(op, dv, "grad_v", s.B, s.H, s.Skv, s.Dv);
    detail::check_desc(op, lse, "lse");
    if (lse.dim() != 3 || lse.sizes[0] != s.B || lse.sizes[1] != s.H || lse.sizes[2] != s.Sq || lse.dtype != DType::f32)
        fail(op, "lse " + lse.str() + " must be f32 [B, H, Sq]");
    const Mask mask = check_mask(op, attn_mask, s);
    if (s.B * s.H == 0) return;
    const DType dt = q.dtype;
    const uint32_t Sq = static_cast<uint32_t>(s.Sq), Skv = static_cast<uint32_t>(s.Skv);
    const uint32_t D = static_cast<uint32_t>(s.D), Dv = static_cast<uint32_t>(s.Dv);
    const uint32_t nqt = ceil_div(Sq, kRows), nkt = ceil_div(Skv, kRows);
    const uint64_t es = dtype_size(dt);
    // Chips with DMA transposes load q^T, dO^T, k^T and v^T transposed from HBM; others load
    // the natural rows and transpose them on the TensorE (v's natural rows serve only that).
    const bool dma_t = kb.has_dma_transpose() && (dt == DType::bf16 || dt == DType::f16 || dt == DType::f32);
    // A head's q side stays on chip: q^T, dO^T, the natural q, dO and O, the dQ accumulator,
    // -lse and Di. Its keys come in blocks of kv tiles (k^T, v^T and the natural k), as many
    // as fit next to it; each block's gradients dK and dV are final, dQ adds up over blocks.
    // dQ of quads (chips with DMA transposes, full q tiles, no mask): the dQ matmuls of four
    // consecutive q tiles of a key group run as one, K's kv tile as the stationary and the four
    // tiles' dS^T side by side as the moving (512 columns), into dQ^T [D, 4 x 128]: one
    // LoadStationary per kv tile and quad instead of one per kv tile and block. dQ^T adds up in
    // SBUF ([D, Sq] fp32) and reaches [Sq, D] through a DMA transpose at the store.
    const bool quad_candidate = dma_t && !causal && !mask.t && Sq % kRows == 0;
    const uint64_t q_bytes =
        es * uint64_t(nqt) * (2 * kRows + D + 2 * Dv) + 4 * uint64_t(nqt) * ((quad_candidate ? kRows : D) + 2);
    auto kv_bytes = [&](uint32_t tiles) { return es * uint64_t(tiles) * (2 * kRows + D + (dma_t ? 0 : Dv)); };
    const uint64_t budget = kb.chip().sbuf.bytes_per_partition * 3 / 4;
    uint32_t block_tiles = std::max(1u, nkt);
    while (block_tiles > 1 && q_bytes + kv_bytes(block_tiles) > budget) block_tiles = ceil_div(block_tiles, 2);
    const uint64_t head_bytes = q_bytes + kv_bytes(block_tiles);
    check_sbuf(op, kb, head_bytes);

    const Heads Q{&q}, K{&k}, V{&v}, O{&out}, dO{&dout}, dQ{&dq}, dK{&dk}, dV{&dv};
    detail::DmaQueues dmaq(kb.chip());
    Evac evac;

    const Tile q_nat = kb.alloc_sbuf(kRows, {nqt * D}, dt), q_t = kb.alloc_sbuf(D, {nqt * kRows}, dt);
    const Tile do_nat = kb.alloc_sbuf(kRows, {nqt * Dv}, dt), do_t = kb.alloc_sbuf(Dv, {nqt * kRows}, dt);
    const Tile o_nat = kb.alloc_sbuf(kRows, {nqt * Dv}, dt);
    const Tile k_nat = kb.alloc_sbuf(kRows, {block_tiles * D}, dt), k_t = kb.alloc_sbuf(D, {block_tiles * kRows}, dt);
    const Tile v_t = kb.alloc_sbuf(Dv, {block_tiles * kRows}, dt);
    const Tile v_nat = dma_t ? Tile{} : kb.alloc_sbuf(kRows, {block_tiles * Dv}, dt);
    const Tile neg_lse = kb.alloc_sbuf(kRows, {nqt}, DType::f32), di = kb.alloc_sbuf(kRows, {nqt}, DType::f32);
    // (dq_acc: [128 q, nqt * D] per q tile; dqt_acc: [D, Sq] in quad mode; allocated below)
    const Tile prod = kb.alloc_sbuf(kRows, {Dv}, DType::f32);
    // Keys are taken up to kMaxGroup kv tiles (one 512-column PSUM bank of scores) at a time, so
    // that each exp, dS and cast covers up to [128, 512]: as many as the SBUF left next to the
    // head's operands holds. Per (q tile, key group) block, rings as deep as the pipeline (see
    // the block loop).
    constexpr uint32_t kMaxGroup = kScoreCols / kRows;
    constexpr int kRing = 3;
    constexpr uint32_t kDqOut = 4;
    // With DMA transposes, dS^T reaches SBUF by an SBUF-to-SBUF DMA transpose instead of the
    // TensorE: a transfer takes a few blocks' time, so dS and dS^T live in deeper rings and the
    // dQ stage runs kDmaLag blocks behind the dK/dV stage (dQ only adds up, so late is fine).
    // Where even one kv tile's deeper rings do not fit, dS^T goes through the TensorE.
    constexpr int kDmaLag = 4, kDsRing = kDmaLag + 2;
    constexpr uint32_t kQuad = 4, kQuadRing = 3;
    bool dst_dma = dma_t;
    const uint64_t free_bytes = kb.chip().sbuf.bytes_per_partition - head_bytes;
    auto work_bytes = [&](uint32_t g) {
        const uint64_t c = uint64_t(g) * kRows;   // a group's keys
        auto tile = [](uint64_t bytes) { return (bytes + 63) / 64 * 64; };   // allocations are 64-byte aligned
        const uint64_t dst_bytes = quad_candidate && dst_dma ? kQuadRing * tile(kQuad * c * es) + kDsRing * tile(c * es)
                                   : (dst_dma ? kDsRing : kRing) * 2 * tile(c * es);
        return kRing * (tile(c * es) + tile(c * 4) + (mask.t ? tile(c * 4) : 0)) + dst_bytes +
               (mask.t ? tile(c * 4) : 0) + 2 * (tile(g * D * es) + tile(g * Dv * es)) + (dma_t ? 4 * tile(c * es) : 0) +
               kDqOut * tile(D * es) + tile(4 * Dv);
    };
    uint32_t group = kMaxGroup;
    while (group > 1 && work_bytes(group) > free_bytes) group /= 2;
    if (dst_dma && work_bytes(group) > free_bytes) {
        dst_dma = false;
        group = kMaxGroup;
        while (group > 1 && work_bytes(group) > free_bytes) group /= 2;
    }
    const int c_lag = dst_dma ? kDmaLag : 1;
    const int ds_ring = dst_dma ? kDsRing : kRing;
    const bool quad = quad_candidate && dst_dma;
    const uint32_t dq_outs = quad ? 2 * kQuad : kDqOut;
    const Tile dq_acc = quad ? kb.alloc_sbuf(D, {nqt * kRows}, DType::f32) : kb.alloc_sbuf(kRows, {nqt * D}, DType::f32);
    const uint32_t cols = group * kRows;
    // P is stored in the operands' dtype straight from the exp: the TensorE reads it, and
    // dS = P * dS' (fp32) takes it as it is.
    std::array<Tile, kRing> p_sb, ds_f32, s_sb;
    std::array<Tile, kDsRing> ds_mm, dst_sb;
    for (int i = 0; i < kRing; ++i) {
        p_sb[i] = kb.alloc_sbuf(kRows, {cols}, dt);
        ds_f32[i] = kb.alloc_sbuf(kRows, {cols}, DType::f32);
        if (mask.t) s_sb[i] = kb.alloc_sbuf(kRows, {cols}, DType::f32);
    }
    std::array<Tile, kQuadRing> dst_quad;   // quad mode: [128 keys, kv tile, q tile of the quad, 128 queries]
    for (int i = 0; i < ds_ring; ++i) {
        ds_mm[i] = kb.alloc_sbuf(kRows, {cols}, dt);
        if (!quad) dst_sb[i] = kb.alloc_sbuf(kRows, {cols}, dt);   // 'group' [128 keys, 128 queries] tiles
    }
    if (quad)
        for (Tile& t : dst_quad) t = kb.alloc_sbuf(kRows, {kQuad * cols}, dt);
    // dK and dV of a whole key group leave PSUM together: two groups' worth, so that no
    // evacuation waits for the store of an earlier tile. The dQ tiles of a head's last group
    // leave one per block, each store taking about two blocks' time: a ring of kDqOut.
    // With DMA transposes, dK^T and dV^T [D, keys] accumulate instead (see stage B) and reach
    // dk_out/dv_out through SBUF-to-SBUF DMA transposes from dkt_out/dvt_out.
    std::array<Tile, 2> dk_out, dv_out, dkt_out, dvt_out;
    std::array<Tile, 2 * kQuad> dq_out, dqt_out;   // dq_outs of them
    for (int i = 0; i < 2; ++i) {
        dk_out[i] = kb.alloc_sbuf(kRows, {group * D}, dk.dtype);
        dv_out[i] = kb.alloc_sbuf(kRows, {group * Dv}, dv.dtype);
        if (dma_t) {
            dkt_out[i] = kb.alloc_sbuf(D, {cols}, dk.dtype);
            dvt_out[i] = kb.alloc_sbuf(Dv, {cols}, dv.dtype);
        }
    }
    for (uint32_t i = 0; i < dq_outs; ++i) {
        dq_out[i] = kb.alloc_sbuf(kRows, {D}, dq.dtype);
        if (quad) dqt_out[i] = kb.alloc_sbuf(D, {kRows}, dq.dtype);
    }
    Tile mask_tile;
    if (mask.t) mask_tile = kb.alloc_sbuf(kRows, {cols}, mask.t->dtype == DType::boolean ? DType::u8 : DType::f32);
    // PSUM: scores and dP of two blocks (a bank each), dV and dK of the key group's kv tiles
    // (a bank each, one region per kv tile), dS^T and dQ of two blocks, the load transposes.
    std::array<Tile, 2> ps_load, ps_s, ps_dp, ps_dst, ps_dq;
    for (int i = 0; i < 2; ++i) {
        if (!dma_t) ps_load[i] = kb.alloc_psum(kRows, kRows, dt);
        ps_s[i] = kb.alloc_psum(kRows, cols);
        ps_dp[i] = kb.alloc_psum(kRows, cols);
        // dS^T of two kv tiles side by side (quad mode: of the head's first key group, see stage B)
        if (!dst_dma || quad) ps_dst[i] = kb.alloc_psum(kRows, 2 * kRows, dt);
        // Quad mode: one bank (a quad's dQ^T leaves it in less than the four blocks to the next)
        if (!quad || i == 0) ps_dq[i] = quad ? kb.alloc_psum(D, kQuad * kRows) : kb.alloc_psum(kRows, D);
    }
    const Tile ps_dk = dma_t ? kb.alloc_psum(D, cols) : kb.alloc_psum(kRows, group * D),
               ps_dv = dma_t ? kb.alloc_psum(Dv, cols) : kb.alloc_psum(kRows, group * Dv);
    int ps_load_next = 0;
    uint32_t dst_next = 0;
    uint32_t groups_finished = 0;

    auto rows_of = [&](uint32_t i) { return std::min(kRows, Sq - i * kRows); };
    auto kv_rows_of = [&](uint32_t j) { return std::min(kRows, Skv - j * kRows); };
    std::vector<char> q_tile_ready(nqt), dq_started(nqt), dq_stored(nqt);
    for (int64_t b = 0; b < s.B; ++b)
        for (int64_t h = 0; h < s.H; ++h) {
            // The head's operands are loaded in the order the blocks use them, each a few blocks
            // before its first use (issued from stage M, so that loads and the blocks' own DMAs
            // share the queues in order): the first key group's k and v, then q, dO, O and lse
            // tile by tile kLoadAhead tiles ahead, each key group's successor when the group
            // starts. Each tile's transposes and Di are made just before its first block, so the
            // blocks start as soon as their own tiles are in (while the previous head's last
            // blocks still run). kv tile j of the key block starting at tile kb0 lives in slot
            // j - kb0.
            auto load_kv_tile = [&](uint32_t j, uint32_t kb0) {
                const uint32_t k0 = j * kRows, nk = kv_rows_of(j), slot = j - kb0;
                if (dma_t) {
                    kb.dma_transpose(k_t.region(0, D, slot * kRows, nk), K.rows(b, h, k0, nk), dmaq.load());
                    kb.dma_transpose(v_t.region(0, Dv, slot * kRows, nk), V.rows(b, h, k0, nk), dmaq.load());
                } else {
                    kb.dma_copy(tile_rows(v_nat, slot, nk, Dv), V.rows(b, h, k0, nk), dmaq.load());
                }
                kb.dma_copy(tile_rows(k_nat, slot, nk, D), K.rows(b, h, k0, nk), dmaq.load());
            };
            auto load_q_tile = [&](uint32_t i) {
                const uint32_t q0 = i * kRows, nq = rows_of(i);
                if (dma_t) {
                    kb.dma_transpose(q_t.region(0, D, q0, nq), Q.rows(b, h, q0, nq), dmaq.load());
                    kb.dma_transpose(do_t.region(0, Dv, q0, nq), dO.rows(b, h, q0, nq), dmaq.load());
                }
                kb.dma_copy(tile_rows(q_nat, i, nq, D), Q.rows(b, h, q0, nq), dmaq.load());
                kb.dma_copy(tile_rows(do_nat, i, nq, Dv), dO.rows(b, h, q0, nq), dmaq.load());
                kb.dma_copy(tile_rows(o_nat, i, nq, Dv), O.rows(b, h, q0, nq), dmaq.load());
                kb.dma_copy(neg_lse.region(0, nq, i, 1), lse_rows(lse, b, h, q0, nq), dmaq.load());
            };
            constexpr uint32_t kLoadAhead = 8;
            uint32_t q_next = 0, kv_next = 0, kv_base = 0;   // tiles loaded so far
            auto load_q_upto = [&](uint32_t end) {
                for (end = std::min(end, nqt); q_next < end; ++q_next) load_q_tile(q_next);
            };
            auto load_kv_upto = [&](uint32_t end) {
                for (end = std::min(end, nkt); kv_next < end; ++kv_next) load_kv_tile(kv_next, kv_base);
            };
            load_kv_upto(std::min(group, block_tiles));
            load_q_upto(kLoadAhead);
            std::fill(q_tile_ready.begin(), q_tile_ready.end(), 0);
            std::fill(dq_started.begin(), dq_started.end(), 0);
            std::fill(dq_stored.begin(), dq_stored.end(), 0);
            auto store_dq = [&](uint32_t i) {
                const uint32_t q0 = i * kRows, nq = rows_of(i);
                const AccessPattern o = dq_out[i % dq_outs].region(0, nq, 0, D);
                if (quad) {   // dQ^T [D, 128] -> dQ [128, D] through a DMA transpose
                    const AccessPattern acc = dq_acc.region(0, D, q0, nq), ot = dqt_out[i % dq_outs].region(0, D, 0, nq);
                    if (!dq_started[i]) kb.memset(acc, 0.0f, Engine::GpSimd);
                    kb.tensor_copy(ot, acc, (i & 1) ? Engine::GpSimd : Engine::Vector);
                    kb.dma_transpose(o, ot, dmaq.store());
                    kb.dma_copy(dQ.rows(b, h, q0, nq), o, dmaq.store());
                    dq_stored[i] = 1;
                    return;
                }
                const AccessPattern acc = dq_acc.region(0, nq, i * D, D);
                if (!dq_started[i]) kb.memset(acc, 0.0f, Engine::GpSimd);   // no key reaches it
                kb.tensor_copy(o, acc, (i & 1) ? Engine::GpSimd : Engine::Vector);
                kb.dma_copy(dQ.rows(b, h, q0, nq), o, dmaq.store());
                dq_stored[i] = 1;
            };
            // q tile i: q^T and dO^T (without DMA transposes), -lse and -scale * Di =
            // -scale * rowsum(dO * O).
            auto prepare_q_tile = [&](uint32_t i) {
                if (q_tile_ready[i]) return;
                q_tile_ready[i] = 1;
                const uint32_t q0 = i * kRows, nq = rows_of(i);
                if (!dma_t) {
                    transpose_into(kb, q_t, q0, tile_rows(q_nat, i, nq, D), nq, D, ps_load[ps_load_next ^= 1], evac);
                    transpose_into(kb, do_t, q0, tile_rows(do_nat, i, nq, Dv), nq, Dv, ps_load[ps_load_next ^= 1], evac);
                }
                // The GpSimd carries most of stage D (and the first key group's blocks each prepare a
                // q tile): of this only the product runs there.
                const AccessPattern nl = neg_lse.region(0, nq, i, 1);
                kb.tensor_scalar(nl, nl, AluOp::mul, -1.0f, AluOp::bypass, 0.0f, Engine::Vector);
                kb.tensor_tensor(prod.region(0, nq, 0, Dv), tile_rows(do_nat, i, nq, Dv), tile_rows(o_nat, i, nq, Dv),
                                 AluOp::mul, Engine::GpSimd);
                kb.tensor_reduce(di.region(0, nq, i, 1), prod.region(0, nq, 0, Dv), ReduceOp::add);
                kb.tensor_scalar(di.region(0, nq, i, 1), di.region(0, nq, i, 1), AluOp::mul, -scale, AluOp::bypass, 0.0f,
                                 Engine::Vector);
            };

            for (uint32_t kb0 = 0; kb0 < nkt; kb0 += block_tiles) {
                const uint32_t block_end = std::min(nkt, kb0 + block_tiles);
                kv_base = kb0;
                load_kv_upto(std::min(block_end, kb0 + group));
                // The key groups of this key block. Their blocks (one q tile against one group)
                // form one stream, so the pipeline does not drain between groups: a group's dK
                // and dV leave PSUM after its last block's B stage, while the next group's first
                // blocks are already in flight.
                struct Group {
                    uint32_t j0, k0, nkg, ng, lk0;
                    std::vector<uint32_t> tiles;                 // q tiles that attend to some key of it
                    std::array<size_t, kMaxGroup> first_block{};   // per kv tile: the first block seeing it
                    uint32_t keys_of(uint32_t c) const { return std::min(kRows, nkg - c * kRows); }
                };
                struct Item {
                    uint32_t group;
                    size_t n;   // block n of the group: q tile tiles[n]
                };
                std::vector<Group> groups;
                std::vector<Item> stream;
                for (uint32_t j0 = kb0; j0 < block_end; j0 += group) {
                    Group gr;
                    gr.j0 = j0;
                    gr.k0 = j0 * kRows;
                    gr.nkg = std::min(cols, std::min(Skv, block_end * kRows) - gr.k0);
                    gr.ng = ceil_div(gr.nkg, kRows);
                    gr.lk0 = (j0 - kb0) * kRows;   // the group's first key in the block's slots
                    for (uint32_t i = 0; i < nqt; ++i)
                        if (!(causal && gr.k0 > i * kRows + rows_of(i) - 1)) gr.tiles.push_back(i);
                    // dV and dK of kv tile c accumulate over the q tiles that attend to it (causal:
                    // a suffix of 'tiles').
                    for (uint32_t c = 0; c < gr.ng; ++c) {
                        gr.first_block[c] = gr.tiles.size();
                        for (size_t n = 0; n < gr.tiles.size(); ++n)
                            if (!(causal && gr.k0 + c * kRows > gr.tiles[n] * kRows + rows_of(gr.tiles[n]) - 1)) {
                                gr.first_block[c] = n;
                                break;
                            }
                    }
                    for (size_t n = 0; n < gr.tiles.size(); ++n)
                        stream.push_back({static_cast<uint32_t>(groups.size()), n});
                    groups.push_back(std::move(gr));
                }
                // dK and dV of a group: out of PSUM (zero for keys no query sees) and stored.
                auto finish_group = [&](const Group& gr) {
                    const int ob = static_cast<int>(groups_finished++ & 1);
                    if (dma_t && !gr.tiles.empty()) {   // dK^T, dV^T: out of PSUM, transposed by DMA, stored
                        kb.tensor_copy(dkt_out[ob].region(0, D, 0, gr.nkg), ps_dk.region(0, D, 0, gr.nkg), evac());
                        kb.tensor_copy(dvt_out[ob].region(0, Dv, 0, gr.nkg), ps_dv.region(0, Dv, 0, gr.nkg), evac());
                        for (uint32_t c = 0; c < gr.ng; ++c) {
                            const uint32_t kc = gr.k0 + c * kRows, nk = gr.keys_of(c);
                            const AccessPattern dko = dk_out[ob].region(0, nk, c * D, D),
                                                dvo = dv_out[ob].region(0, nk, c * Dv, Dv);
                            kb.dma_transpose(dko, dkt_out[ob].region(0, D, c * kRows, nk), dmaq.store());
                            kb.dma_transpose(dvo, dvt_out[ob].region(0, Dv, c * kRows, nk), dmaq.store());
                            kb.dma_copy(dK.rows(b, h, kc, nk), dko, dmaq.store());
                            kb.dma_copy(dV.rows(b, h, kc, nk), dvo, dmaq.store());
                        }
                        return;
                    }
                    for (uint32_t c = 0; c < gr.ng; ++c) {
                        const uint32_t kc = gr.k0 + c * kRows, nk = gr.keys_of(c);
                        const AccessPattern dko = dk_out[ob].region(0, nk, c * D, D),
                                            dvo = dv_out[ob].region(0, nk, c * Dv, Dv);
                        if (gr.first_block[c] >= gr.tiles.size()) {
                            kb.memset(dko, 0.0f);
                            kb.memset(dvo, 0.0f);
                        } else {
                            kb.tensor_copy(dko, ps_dk.region(0, nk, c * D, D), evac());
                            kb.tensor_copy(dvo, ps_dv.region(0, nk, c * Dv, Dv), evac());
                        }
                        kb.dma_copy(dK.rows(b, h, kc, nk), dko, dmaq.store());
                        kb.dma_copy(dV.rows(b, h, kc, nk), dvo, dmaq.store());
                    }
                };
                for (const Group& gr : groups)
                    if (gr.tiles.empty()) finish_group(gr);
                // The last group each q tile is in: dQ leaves after it, while later blocks run.
                std::vector<uint32_t> last_group(nqt, UINT32_MAX);
                for (uint32_t k = 0; k < groups.size(); ++k)
                    for (uint32_t i : groups[k].tiles) last_group[i] = k;
                // Per block g of the stream, five stages issued as M(g+1), E(g), D(g), B(g-1),
                // C(g-1-c_lag), so that each engine's in-order queue holds work whose inputs are there:
                //   M: S = Q K^T and dP = dO V^T over the key group (TensorE);
                //   E: P = exp(scale * S - lse) in the operands' dtype and dS' = scale * (dP - Di) in
                //      fp32, out of PSUM (ScalarE);
                //   D: dS = P * dS' (GpSimdE and VectorE);
                //   B: dV += P^T dO and dK += dS^T Q (with DMA transposes: dV^T and dK^T over the
                //      group), and dS^T: by SBUF-to-SBUF DMA transposes where the rings fit (dst_dma),
                //      else on the TensorE and out of PSUM;
                //   C: dQ = sum over the group's kv tiles of dS K, added to the SBUF accumulator (quad
                //      mode: dQ^T of the quad's four q tiles at once, after its last block).
                // Quad mode: the quad of block g, numbered across the stream (quads do not straddle groups).
                std::vector<uint32_t> quad_base(groups.size() + 1, 0);
                for (size_t k = 0; k < groups.size(); ++k)
                    quad_base[k + 1] = quad_base[k] + ceil_div(static_cast<uint32_t>(groups[k].tiles.size()), kQuad);
                auto quad_of = [&](size_t g) {
                    return quad_base[stream[g].group] + static_cast<uint32_t>(stream[g].n / kQuad);
                };
                auto stage_m = [&](size_t g) {
                    const Group& gr = groups[stream[g].group];
                    const size_t n = stream[g].n;
                    const uint32_t i = gr.tiles[n], q0 = i * kRows, nq = rows_of(i);
                    const int r = static_cast<int>(g % 2);
                    if (n == 0) load_kv_upto(gr.j0 + gr.ng);   // the group's own kv tiles
                    if (n == 0 && !dma_t)   // the group's k^T and v^T
                        for (uint32_t c = 0; c < gr.ng; ++c) {
                            const uint32_t slot = gr.j0 - kb0 + c, nk = gr.keys_of(c);
                            transpose_into(kb, k_t, slot * kRows, tile_rows(k_nat, slot, nk, D), nk, D,
                                           ps_load[ps_load_next ^= 1], evac);
                            transpose_into(kb, v_t, slot * kRows, tile_rows(v_nat, slot, nk, Dv), nk, Dv,
                                           ps_load[ps_load_next ^= 1], evac);
                        }
                    load_q_upto(i + 1 + kLoadAhead);
                    if (n == 0) load_kv_upto(std::min(block_end, gr.j0 + 2 * group));   // and its successor's
                    prepare_q_tile(i);
                    kb.matmul(ps_s[r].region(0, nq, 0, gr.nkg), q_t.region(0, D, q0, nq), k_t.region(0, D, gr.lk0, gr.nkg),
                              false);
                    kb.matmul(ps_dp[r].region(0, nq, 0, gr.nkg), do_t.region(0, Dv, q0, nq),
                              v_t.region(0, Dv, gr.lk0, gr.nkg), false);
                };
                auto stage_e = [&](size_t g) {
                    const Group& gr = groups[stream[g].group];
                    const uint32_t i = gr.tiles[stream[g].n], q0 = i * kRows, nq = rows_of(i), nkg = gr.nkg, k0 = gr.k0;
                    const int r = static_cast<int>(g % 2), ri = static_cast<int>(g % kRing);
                    const AccessPattern sp = ps_s[r].region(0, nq, 0, nkg), pf = p_sb[ri].region(0, nq, 0, nkg);
                    const AccessPattern nl = neg_lse.region(0, nq, i, 1), ndi = di.region(0, nq, i, 1);
                    if (mask.t) {
                        const AccessPattern ss = s_sb[ri].region(0, nq, 0, nkg);
                        kb.activation(ss, sp, ActFunc::identity, scale);
                        apply_mask(kb, dmaq, mask, mask_tile, b, h, q0, nq, k0, nkg, ss);
                        kb.activation_ex(pf, ss, ActFunc::exp, 1.0f, nullptr, 0.0f, &nl);
                    } else {
                        kb.activation_ex(pf, sp, ActFunc::exp, scale, nullptr, 0.0f, &nl);
                    }
                    if (causal && k0 + nkg - 1 > q0) causal_mask(kb, pf, q0, k0, 0.0f);
                    // dS' = scale * dP - scale * Di; with dS^T off the TensorE, the VectorE has the time
                    // for the last quarter of the columns (the ScalarE also runs the exp).
                    const uint32_t split = dst_dma && nkg >= 2 * kRows ? nkg * 3 / 4 : nkg;
                    kb.activation_ex(ds_f32[ri].region(0, nq, 0, split), ps_dp[r].region(0, nq, 0, split), ActFunc::identity,
                                     scale, nullptr, 0.0f, &ndi);
                    if (split < nkg)
                        kb.tensor_scalar_ex(ds_f32[ri].region(0, nq, split, nkg - split), ps_dp[r].region(0, nq, split, nkg - split),
                                            AluOp::mul, scale, nullptr, AluOp::add, 0.0f, &ndi);
                };
                auto stage_d = [&](size_t g) {
                    // dS = P * dS', three quarters of the columns on GpSimdE, the rest on VectorE.
                    const Group& gr = groups[stream[g].group];
                    const uint32_t nq = rows_of(gr.tiles[stream[g].n]), nkg = gr.nkg, split = std::max(1u, nkg * 3 / 4);
                    const int ri = static_cast<int>(g % kRing);
                    const Tile &pt = p_sb[ri], &dsf = ds_f32[ri], &dsm = ds_mm[g % ds_ring];
                    kb.tensor_tensor(dsm.region(0, nq, 0, split), dsf.region(0, nq, 0, split), pt.region(0, nq, 0, split),
                                     AluOp::mul, Engine::GpSimd);
                    if (split < nkg)
                        kb.tensor_tensor(dsm.region(0, nq, split, nkg - split), dsf.region(0, nq, split, nkg - split),
                                         pt.region(0, nq, split, nkg - split), AluOp::mul, Engine::Vector);
                };
                auto stage_b = [&](size_t g) {
                    const Group& gr = groups[stream[g].group];
                    const size_t n = stream[g].n;
                    const uint32_t i = gr.tiles[n], nq = rows_of(i);
                    const int ri = static_cast<int>(g % kRing), rd = static_cast<int>(g % ds_ring);
                    // dS^T of kv tiles c and c + 1 goes to one PSUM tile and, for full q tiles of
                    // the same key count, leaves it with one copy.
                    const Tile* ps = nullptr;
                    bool pending = false;   // tile c - 1's dS^T waits in ps for its pair's copy
                    // With DMA transposes: dV^T += dO^T P and dK^T += Q^T dS over the whole group,
                    // one 512-column matmul each, with dO and Q as the stationaries (each loaded
                    // once, not once per kv tile). Keys no query of this tile sees have P = dS = 0.
                    if (dma_t) {
                        kb.matmul(ps_dv.region(0, Dv, 0, gr.nkg), tile_rows(do_nat, i, nq, Dv),
                                  p_sb[ri].region(0, nq, 0, gr.nkg), n > 0);
                        kb.matmul(ps_dk.region(0, D, 0, gr.nkg), tile_rows(q_nat, i, nq, D),
                                  ds_mm[rd].region(0, nq, 0, gr.nkg), n > 0);
                    }
                    if (dst_dma) {   // dS^T by DMA, read by stage C kDmaLag blocks later
                        // The head's first key group brings in a q tile per block, and the DMA queues
                        // would bound it: there (quad mode) dS^T comes from TensorE transposes.
                        const bool on_tensor = quad && kb0 == 0 && stream[g].group == 0;
                        for (uint32_t c = 0; c < gr.ng; ++c) {
                            if (n < gr.first_block[c]) continue;
                            const uint32_t nk = gr.keys_of(c);
                            const AccessPattern dst = quad ? dst_quad[quad_of(g) % kQuadRing].region(
                                                                 0, nk, (c * kQuad + n % kQuad) * kRows, nq)
                                                           : dst_sb[rd].region(0, nk, c * kRows, nq);
                            const AccessPattern src = ds_mm[rd].region(0, nq, c * kRows, nk);
                            if (!on_tensor) {
                                kb.dma_transpose(dst, src, dmaq.load());
                                continue;
                            }
                            const uint32_t k = dst_next++;   // four PSUM slots: two tiles' halves
                            const AccessPattern pt = ps_dst[(k >> 1) & 1].region(0, nk, (k & 1) * kRows, nq);
                            kb.transpose(pt, src);
                            kb.tensor_copy(dst, pt, Engine::Vector);
                        }
                        if (n + 1 == gr.tiles.size()) finish_group(gr);
                        return;
                    }
                    for (uint32_t c = 0; c < gr.ng; ++c) {
                        if (n < gr.first_block[c]) continue;   // causal: no query of this tile sees these keys
                        const uint32_t nk = gr.keys_of(c);
                        const AccessPattern dsm = ds_mm[rd].region(0, nq, c * kRows, nk);
                        const bool acc = n > gr.first_block[c];
                        if (!dma_t) {
                            kb.matmul(ps_dv.region(0, nk, c * Dv, Dv), p_sb[ri].region(0, nq, c * kRows, nk),
                                      tile_rows(do_nat, i, nq, Dv), acc);
                            kb.matmul(ps_dk.region(0, nk, c * D, D), dsm, tile_rows(q_nat, i, nq, D), acc);
                        }
                        const uint32_t half = c % 2;
                        if (half == 0) ps = &ps_dst[dst_next ^= 1];
                        kb.transpose(ps->region(0, nk, half * kRows, nq), dsm);
                        if (pending) {
                            kb.tensor_copy(dst_sb[rd].region(0, nk, (c - 1) * kRows, 2 * kRows),
                                           ps->region(0, nk, 0, 2 * kRows), Engine::Vector);
                            pending = false;
                        } else if (half == 0 && nq == kRows && c + 1 < gr.ng && n >= gr.first_block[c + 1] &&
                                   gr.keys_of(c + 1) == nk) {
                            pending = true;
                        } else {
                            kb.tensor_copy(dst_sb[rd].region(0, nk, c * kRows, nq), ps->region(0, nk, half * kRows, nq),
                                           Engine::Vector);
                        }
                    }
                    if (n + 1 == gr.tiles.size()) finish_group(gr);
                };
                auto stage_c = [&](size_t g) {
                    const Group& gr = groups[stream[g].group];
                    const size_t n = stream[g].n;
                    const uint32_t i = gr.tiles[n], nq = rows_of(i);
                    if (quad) {   // after the quad's last block: dQ^T of its tiles (all full, all keys seen)
                        const size_t first = n - n % kQuad, nt = std::min<size_t>(kQuad, gr.tiles.size() - first);
                        if (n + 1 != first + nt) return;
                        const uint32_t i0 = gr.tiles[first], w = static_cast<uint32_t>(nt) * kRows;
                        const AccessPattern dqp = ps_dq[0].region(0, D, 0, w);
                        const Tile& dst = dst_quad[quad_of(g) % kQuadRing];
                        for (uint32_t c = 0; c < gr.ng; ++c) {
                            const uint32_t nk = gr.keys_of(c);
                            kb.matmul(dqp, tile_rows(k_nat, gr.j0 - kb0 + c, nk, D),
                                      dst.region(0, nk, c * kQuad * kRows, w), c > 0);
                        }
                        const AccessPattern acc = dq_acc.region(0, D, i0 * kRows, w);
                        if (dq_started[i0]) kb.tensor_tensor(acc, acc, dqp, AluOp::add);
                        else kb.tensor_copy(acc, dqp);
                        for (size_t t = first; t < first + nt; ++t) {
                            dq_started[gr.tiles[t]] = 1;
                            if (block_end == nkt && stream[g].group == last_group[gr.tiles[t]]) store_dq(gr.tiles[t]);
                        }
                        return;
                    }
                    const int rd = static_cast<int>(g % ds_ring);
                    const AccessPattern dqp = ps_dq[g % 2].region(0, nq, 0, D);
                    bool started = false;
                    for (uint32_t c = 0; c < gr.ng; ++c) {
                        if (n < gr.first_block[c]) continue;
                        const uint32_t nk = gr.keys_of(c);
                        kb.matmul(dqp, dst_sb[rd].region(0, nk, c * kRows, nq), tile_rows(k_nat, gr.j0 - kb0 + c, nk, D),
                                  started);
                        started = true;
                    }
                    const AccessPattern acc = dq_acc.region(0, nq, i * D, D);
                    if (dq_started[i]) kb.tensor_tensor(acc, acc, dqp, AluOp::add);
                    else kb.tensor_copy(acc, dqp);
                    dq_started[i] = 1;
                    if (block_end == nkt && stream[g].group == last_group[i]) store_dq(i);   // its last contribution
                };
                const size_t nb = stream.size();
                if (nb) stage_m(0);
                const size_t lag = 1 + static_cast<size_t>(c_lag);   // stage C runs at g - lag
                for (size_t g = 0; g < nb + lag; ++g) {
                    if (g + 1 < nb) stage_m(g + 1);
                    if (g < nb) {
                        stage_e(g);
                        stage_d(g);
                    }
                    if (g >= 1 && g <= nb) stage_b(g - 1);
                    if (g >= lag) stage_c(g - lag);
                }
            }
            for (uint32_t i = 0; i < nqt; ++i)
                if (!dq_stored[i]) store_dq(i);
        }
}

}  // namespace trnsim::ops
