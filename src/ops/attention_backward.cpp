// Scaled dot-product attention backward (ops/attention.h): recomputes the probabilities tile by
// tile from the saved logsumexp.
// Backward, per (batch, head), kv tile outer and q tile inner (FlashAttention-2):
//   P = exp(scale * Q K^T - lse), dV += P^T dO, dP = dO V^T,
//   dS = scale * P * (dP - rowsum(dO * O)), dK += dS^T Q, dQ += dS K
// dV and dK accumulate in PSUM over the q tiles, dQ in an fp32 SBUF accumulator.
#include "attention_backward.h"

namespace trnsim::ops {

using namespace attention_detail;

Backward::Backward(KernelBuilder& kb, const TensorDesc& dq, const TensorDesc& dk, const TensorDesc& dv,
                   const TensorDesc& dout, const TensorDesc& q, const TensorDesc& k, const TensorDesc& v,
                   const TensorDesc& out, const TensorDesc& lse, const Shapes& s, const Mask& mask, bool causal,
                   float scale)
    : kb(kb), lse(lse), s(s), mask(mask), causal(causal), scale(scale), Q{&q}, K{&k}, V{&v}, O{&out}, dO{&dout},
      dQ{&dq}, dK{&dk}, dV{&dv}, dmaq(kb.chip()) {
    dt = q.dtype;
    Sq = static_cast<uint32_t>(s.Sq), Skv = static_cast<uint32_t>(s.Skv);
    D = static_cast<uint32_t>(s.D), Dv = static_cast<uint32_t>(s.Dv);
    nqt = ceil_div(Sq, kRows), nkt = ceil_div(Skv, kRows);
    const uint64_t es = dtype_size(dt);
    // Chips with DMA transposes load q^T, dO^T, k^T and v^T transposed from HBM; others load
    // the natural rows and transpose them on the TensorE (v's natural rows serve only that).
    dma_t = kb.has_dma_transpose() && (dt == DType::bf16 || dt == DType::f16 || dt == DType::f32);
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
    block_tiles = std::max(1u, nkt);
    while (block_tiles > 1 && q_bytes + kv_bytes(block_tiles) > budget) block_tiles = ceil_div(block_tiles, 2);
    const uint64_t head_bytes = q_bytes + kv_bytes(block_tiles);
    check_sbuf(kBackwardOp, kb, head_bytes);

    q_nat = kb.alloc_sbuf(kRows, {nqt * D}, dt);
    q_t = kb.alloc_sbuf(D, {nqt * kRows}, dt);
    do_nat = kb.alloc_sbuf(kRows, {nqt * Dv}, dt);
    do_t = kb.alloc_sbuf(Dv, {nqt * kRows}, dt);
    o_nat = kb.alloc_sbuf(kRows, {nqt * Dv}, dt);
    k_nat = kb.alloc_sbuf(kRows, {block_tiles * D}, dt);
    k_t = kb.alloc_sbuf(D, {block_tiles * kRows}, dt);
    v_t = kb.alloc_sbuf(Dv, {block_tiles * kRows}, dt);
    v_nat = dma_t ? Tile{} : kb.alloc_sbuf(kRows, {block_tiles * Dv}, dt);
    neg_lse = kb.alloc_sbuf(kRows, {nqt}, DType::f32);
    di = kb.alloc_sbuf(kRows, {nqt}, DType::f32);
    // (dq_acc: [128 q, nqt * D] per q tile; dqt_acc: [D, Sq] in quad mode; allocated below)
    prod = kb.alloc_sbuf(kRows, {Dv}, DType::f32);
    dst_dma = dma_t;
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
    group = kMaxGroup;
    while (group > 1 && work_bytes(group) > free_bytes) group /= 2;
    if (dst_dma && work_bytes(group) > free_bytes) {
        dst_dma = false;
        group = kMaxGroup;
        while (group > 1 && work_bytes(group) > free_bytes) group /= 2;
    }
    c_lag = dst_dma ? kDmaLag : 1;
    ds_ring = dst_dma ? kDsRing : kRing;
    quad = quad_candidate && dst_dma;
    dq_outs = quad ? 2 * kQuad : kDqOut;
    dq_acc = quad ? kb.alloc_sbuf(D, {nqt * kRows}, DType::f32) : kb.alloc_sbuf(kRows, {nqt * D}, DType::f32);
    cols = group * kRows;
    // P is stored in the operands' dtype straight from the exp: the TensorE reads it, and
    // dS = P * dS' (fp32) takes it as it is.
    for (int i = 0; i < kRing; ++i) {
        p_sb[i] = kb.alloc_sbuf(kRows, {cols}, dt);
        ds_f32[i] = kb.alloc_sbuf(kRows, {cols}, DType::f32);
        if (mask.t) s_sb[i] = kb.alloc_sbuf(kRows, {cols}, DType::f32);
    }
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
    if (mask.t) mask_tile = kb.alloc_sbuf(kRows, {cols}, mask.t->dtype == DType::boolean ? DType::u8 : DType::f32);
    // PSUM: scores and dP of two blocks (a bank each), dV and dK of the key group's kv tiles
    // (a bank each, one region per kv tile), dS^T and dQ of two blocks, the load transposes.
    for (int i = 0; i < 2; ++i) {
        if (!dma_t) ps_load[i] = kb.alloc_psum(kRows, kRows, dt);
        ps_s[i] = kb.alloc_psum(kRows, cols);
        ps_dp[i] = kb.alloc_psum(kRows, cols);
        // dS^T of two kv tiles side by side (quad mode: of the head's first key group, see stage B)
        if (!dst_dma || quad) ps_dst[i] = kb.alloc_psum(kRows, 2 * kRows, dt);
        // Quad mode: one bank (a quad's dQ^T leaves it in less than the four blocks to the next)
        if (!quad || i == 0) ps_dq[i] = quad ? kb.alloc_psum(D, kQuad * kRows) : kb.alloc_psum(kRows, D);
    }
    ps_dk = dma_t ? kb.alloc_psum(D, cols) : kb.alloc_psum(kRows, group * D);
    ps_dv = dma_t ? kb.alloc_psum(Dv, cols) : kb.alloc_psum(kRows, group * Dv);
    q_tile_ready.resize(nqt);
    dq_started.resize(nqt);
    dq_stored.resize(nqt);
}

void Backward::run() {
    // Heads are independent: contiguous runs of them go to the physical cores of the logical core.
    tiling::SpmdSplit spmd(kb, static_cast<size_t>(s.B * s.H));
    for (b = 0; b < s.B; ++b)
        for (h = 0; h < s.H; ++h) {
            spmd.enter(static_cast<size_t>(b * s.H + h));
            head();
        }
}

// The head's operands are loaded in the order the blocks use them, each a few blocks
// before its first use (issued from stage M, so that loads and the blocks' own DMAs
// share the queues in order): the first key group's k and v, then q, dO, O and lse
// tile by tile kLoadAhead tiles ahead, each key group's successor when the group
// starts. Each tile's transposes and Di are made just before its first block, so the
// blocks start as soon as their own tiles are in (while the previous head's last
// blocks still run). kv tile j of the key block starting at tile kb0 lives in slot
// j - kb0.
void Backward::head() {
    q_next = kv_next = kv_base = 0;
    load_kv_upto(std::min(group, block_tiles));
    load_q_upto(kLoadAhead);
    std::fill(q_tile_ready.begin(), q_tile_ready.end(), 0);
    std::fill(dq_started.begin(), dq_started.end(), 0);
    std::fill(dq_stored.begin(), dq_stored.end(), 0);
    for (uint32_t kb0 = 0; kb0 < nkt; kb0 += block_tiles) key_block(kb0);
    for (uint32_t i = 0; i < nqt; ++i)
        if (!dq_stored[i]) store_dq(i);
}

void Backward::load_kv_tile(uint32_t j, uint32_t kb0) {
    const uint32_t k0 = j * kRows, nk = kv_rows_of(j), slot = j - kb0;
    if (dma_t) {
        kb.dma_transpose(k_t.region(0, D, slot * kRows, nk), K.rows(b, h, k0, nk), dmaq.load());
        kb.dma_transpose(v_t.region(0, Dv, slot * kRows, nk), V.rows(b, h, k0, nk), dmaq.load());
    } else {
        kb.dma_copy(tile_rows(v_nat, slot, nk, Dv), V.rows(b, h, k0, nk), dmaq.load());
    }
    kb.dma_copy(tile_rows(k_nat, slot, nk, D), K.rows(b, h, k0, nk), dmaq.load());
}

void Backward::load_q_tile(uint32_t i) {
    const uint32_t q0 = i * kRows, nq = rows_of(i);
    if (dma_t) {
        kb.dma_transpose(q_t.region(0, D, q0, nq), Q.rows(b, h, q0, nq), dmaq.load());
        kb.dma_transpose(do_t.region(0, Dv, q0, nq), dO.rows(b, h, q0, nq), dmaq.load());
    }
    kb.dma_copy(tile_rows(q_nat, i, nq, D), Q.rows(b, h, q0, nq), dmaq.load());
    kb.dma_copy(tile_rows(do_nat, i, nq, Dv), dO.rows(b, h, q0, nq), dmaq.load());
    kb.dma_copy(tile_rows(o_nat, i, nq, Dv), O.rows(b, h, q0, nq), dmaq.load());
    kb.dma_copy(neg_lse.region(0, nq, i, 1), lse_rows(lse, b, h, q0, nq), dmaq.load());
}

void Backward::load_q_upto(uint32_t end) {
    for (end = std::min(end, nqt); q_next < end; ++q_next) load_q_tile(q_next);
}

void Backward::load_kv_upto(uint32_t end) {
    for (end = std::min(end, nkt); kv_next < end; ++kv_next) load_kv_tile(kv_next, kv_base);
}

void Backward::store_dq(uint32_t i) {
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
}

// q tile i: q^T and dO^T (without DMA transposes), -lse and -scale * Di =
// -scale * rowsum(dO * O).
void Backward::prepare_q_tile(uint32_t i) {
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
}


void sdpa_backward(KernelBuilder& kb, const TensorDesc& dq, const TensorDesc& dk, const TensorDesc& dv,
                   const TensorDesc& dout, const TensorDesc& q, const TensorDesc& k, const TensorDesc& v,
                   const TensorDesc& out, const TensorDesc& lse, const TensorDesc* attn_mask, bool causal, float scale) {
    const std::string op = kBackwardOp;
    const Shapes s = check_inputs(op, q, k, v);
    check_heads(op, out, "out", s.B, s.H, s.Sq, s.Dv);
    check_heads(op, dout, "grad_out", s.B, s.H, s.Sq, s.Dv);
    check_heads(op, dq, "grad_q", s.B, s.H, s.Sq, s.D);
    check_heads(op, dk, "grad_k", s.B, s.H, s.Skv, s.D);
    check_heads(op, dv, "grad_v", s.B, s.H, s.Skv, s.Dv);
    tiling::check_desc(op, lse, "lse");
    if (lse.dim() != 3 || lse.sizes[0] != s.B || lse.sizes[1] != s.H || lse.sizes[2] != s.Sq || lse.dtype != DType::f32)
        fail(op, "lse " + lse.str() + " must be f32 [B, H, Sq]");
    const Mask mask = check_mask(op, attn_mask, s);
    if (s.B * s.H == 0) return;
    Backward(kb, dq, dk, dv, dout, q, k, v, out, lse, s, mask, causal, scale).run();
}

}  // namespace trnsim::ops
