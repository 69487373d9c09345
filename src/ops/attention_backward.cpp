// Scaled dot-product attention backward (ops/attention.h): recomputes the probabilities tile by
// tile from the saved logsumexp.
// Backward, per (batch, head), kv tile outer and q tile inner (FlashAttention-2):
//   P = exp(scale * Q K^T - lse), dV += P^T dO, dP = dO V^T,
//   dS = scale * P * (dP - rowsum(dO * O)), dK += dS^T Q, dQ += dS K
// dV and dK accumulate in PSUM over the q tiles, dQ in an fp32 SBUF accumulator.
#include "attention_common.h"

namespace trnsim::ops {

using namespace attention_detail;

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
    tiling::check_desc(op, lse, "lse");
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
    tiling::DmaQueues dmaq(kb.chip());
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
