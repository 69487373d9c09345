// Scaled dot-product attention forward (ops/attention.h): a flash-style kernel that keeps the
// scores on chip (PSUM -> SBUF) with an online softmax.
//
// Forward, per (batch, head): K is loaded once and transposed on the TensorE
// into K^T [D, Skv]; V stays in natural 128-row tiles. Per 128-row q tile:
//   for each 512-column kv block:  S = Q K^T (one matmul, contraction D)
//     s = scale * S (+ mask, causal affine_select), m' = max(m, rowmax s)
//     p = exp(s - m') with its row sum (ScalarE), alpha = exp(m - m')
//     l = l * alpha + rowsum;  O = O * alpha + P V  (P transposed on the TensorE)
//   out = O / l,  lse = m + log l.
#include "attention_common.h"

namespace trnsim::ops {

using namespace attention_detail;

void sdpa_forward(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& lse, const TensorDesc& q,
                  const TensorDesc& k, const TensorDesc& v, const TensorDesc* attn_mask, bool causal, float scale) {
    const std::string op = "scaled_dot_product_attention";
    const Shapes s = check_inputs(op, q, k, v);
    check_heads(op, out, "out", s.B, s.H, s.Sq, s.Dv);
    tiling::check_desc(op, lse, "lse");
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
    tiling::DmaQueues dq(kb.chip());
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
    // The heads [first, last) (flattened b x H + h) as one stream of blocks, on the builder's core.
    auto run_heads = [&](int64_t first, int64_t last) {
    std::vector<Row> rows;
    std::vector<Block> blocks;
    for (int64_t bh = first; bh < last; ++bh)
            for (uint32_t q0 = 0; q0 < Sq; q0 += kRows) {
                const int64_t b = bh / s.H, h = bh % s.H;
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
        if (row.q0 + nq == Sq && head + 2 < last) load_head((head + 2) / s.H, (head + 2) % s.H);
    };

    load_head(first / s.H, first % s.H);
    if (first + 1 < last) load_head((first + 1) / s.H, (first + 1) % s.H);
    // Head h+2 is loaded after head h's last C stage, and its first S stage must come after
    // that: the stream is cut (the pipeline drains) before a head whose predecessor has fewer
    // than kLookahead + 2 blocks.
    auto head_of = [&](size_t g) { return rows[blocks[g].row].b * s.H + rows[blocks[g].row].h; };
    std::vector<uint32_t> head_blocks(static_cast<size_t>(s.B * s.H), 0);
    for (const Block& blk : blocks) ++head_blocks[static_cast<size_t>(rows[blk.row].b * s.H + rows[blk.row].h)];
    auto cut_before = [&](size_t g) {
        const int64_t head = head_of(g);
        return blocks[g].n == 0 && rows[blocks[g].row].q0 == 0 && head >= first + 2 &&
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
    };
    // Heads are independent: contiguous runs of them go to the physical cores of the logical core.
    const int64_t heads = s.B * s.H;
    tiling::SpmdSplit spmd(kb, static_cast<size_t>(heads));
    for (uint32_t c = 0; c < spmd.cores(); ++c) {
        const int64_t first = static_cast<int64_t>(spmd.begin(c)), last = static_cast<int64_t>(spmd.begin(c + 1));
        if (first == last) continue;
        spmd.enter(static_cast<size_t>(first));
        run_heads(first, last);
    }
}

}  // namespace trnsim::ops
