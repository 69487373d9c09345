// sdpa_backward's pipeline over the blocks of one key block (see attention_backward.h): per block
// (one q tile against one key group) the stages M, E, D, B and C, issued interleaved.
#include "attention_backward.h"

namespace trnsim::ops::attention_detail {

void Backward::key_block(uint32_t kb0) {
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

}  // namespace trnsim::ops::attention_detail
