// Decode attention (ops/attention_decode.h): flash-decoding of a few query tokens against a long
// KV cache, contiguous or paged.
//
// Work is cut into waves: one batch row b and up to 'slots' k/v heads of it. Each k/v head owns a
// slot of 32 (64, 128) partitions holding its M = (Hq / Hkv) * Sq query rows, so that every
// query head sharing a k/v head reads its keys and values once. The context of a wave is split
// into passes of 512 keys (one PSUM bank of scores); in one pass, per k/v head:
//   K tiles (128 keys each) in natural layout -> K^T [D, 512] (DMA transpose from HBM, or the
//   TensorE); S[slot rows, 512] = Q K^T (one matmul per head, into the head's slot partitions).
// Then for all heads of the wave at once (their slots side by side on the partitions):
//   s = scale * S (+ mask, or the context length of a paged sequence), m' = max(m, rowmax s),
//   p = exp(s - m') with its row sum, alpha = exp(m - m'), l = l * alpha + rowsum,
//   P^T per 128 keys (TensorE), O_pass = P V (per head, into its slot), O = O * alpha + O_pass.
// After the wave's last pass: out = O / l, lse = m + log l. The partial results of the passes are
// combined by the running max and sum (the flash-decoding combine), so a pass never waits for
// the whole context. Passes are software-pipelined: pass g+1's scores are issued before pass g's
// P V, and K/V loads run two passes ahead.
#include "attention_common.h"
#include "trnsim/ops/attention_decode.h"

#include <cfloat>
#include <cmath>
#include <functional>

namespace trnsim::ops {

using namespace attention_detail;

namespace {

constexpr uint32_t kPassKeys = kScoreCols;          // keys per pass: one PSUM bank of fp32 scores
constexpr uint32_t kChunks = kPassKeys / kRows;     // 128-key tiles per pass
// K/V buffers: loads run kLoadRing - 1 passes ahead, so that a buffer freed by a pass is refilled
// (after the DMA latency) while the passes between compute.
constexpr int kLoadRing = 4;
constexpr int kRing = 3;                            // per-pass score, probability and statistics tiles
constexpr uint32_t kGatherRows = 32;                // keys per gather of a paged cache
constexpr size_t kEarly = kLoadRing + 1;            // Source::early runs this many passes ahead
constexpr int kEarlyRing = kEarly + 1;

struct Plan {
    std::string op;
    DType dt;
    int64_t B, Hq, Hkv, G, Sq;
    uint32_t S, D, Dv, M, slot_w, slots;
    float scale;
};

uint32_t slot_width(uint32_t rows) { return rows <= 32 ? 32 : rows <= 64 ? 64 : 128; }

struct Wave {
    int64_t b;
    uint32_t h0, nh;   // k/v heads [h0, h0 + nh)
};

// Where a pass's keys come from. load() fills, for keys [k0, k0 + nk) of the wave's heads, either
// kt ([D, slots x 512], head hs at columns hs * 512) directly, or knat; vnat always. Natural
// tiles are [128 keys, kChunks x slots x E]: chunk c of head hs at columns (c * slots + hs) * E.
struct Source {
    bool k_transposed = false;   // load() writes kt (no TensorE transposes of K)
    std::function<void(const Wave&, uint32_t k0, uint32_t nk, const Tile& kt, const Tile& knat, const Tile& vnat,
                       int ring, int early_slot)> load;
    // Optional: what a pass's loads depend on, fetched kEarly passes ahead into slot 'early_slot'
    // of a ring of kEarlyRing (a DMA whose inputs are long there starts without the DMA latency).
    std::function<void(const Wave&, uint32_t k0, uint32_t nk, int early_slot)> early;
    // Optional: the source's tiles (allocated once: a tile is at the same address on every
    // physical core), their initial contents (written on each core before its waves), per-wave
    // setup, and the mask of a pass: writes bias [rows, nk] (f32) and returns
    // how it combines with the scaled scores, s = (scale * S) op bias: add (a float mask), or
    // min with +inf where a key is visible and -inf where it is not.
    std::function<void()> setup, init;
    std::function<void(const Wave&, uint32_t rows, int wave_ring)> start_wave;
    std::function<AluOp(const Wave&, uint32_t k0, uint32_t nk, uint32_t rows, const AccessPattern& bias, int wave_ring,
                        int load_ring)> mask;
};

// dst = (src0 * scale) op bias: one VectorE pass over the scores in PSUM.
void scale_and_mask(KernelBuilder& kb, const AccessPattern& dst, const AccessPattern& src0, float scale, AluOp op,
                    const AccessPattern& bias) {
    Instruction ins;
    ins.op = Opcode::scalar_tensor_tensor;
    ins.engine = Engine::Vector;
    ins.dst = dst;
    ins.src0 = src0;
    ins.src1 = bias;
    ins.imm0 = scale;
    ins.alu0 = AluOp::mul;
    ins.alu1 = op;
    kb.emit(ins);
}

// The queues of the K/V stream: every DMA queue of the core in turn (one queue alone moves a
// fraction of the core's HBM bandwidth; the few other transfers share them).
struct StreamQueues {
    uint32_t n, next = 0;
    explicit StreamQueues(const ChipConfig& chip) : n(std::max(1u, chip.dma.queues)) {}
    int operator()() { return static_cast<int>(next++ % n); }
};

AccessPattern hbm_elems(const TensorDesc& t, int64_t elem_offset) {
    AccessPattern ap;
    ap.space = MemSpace::HBM;
    ap.dtype = t.dtype;
    ap.arg = t.arg;
    ap.offset = static_cast<uint64_t>(elem_offset * static_cast<int64_t>(dtype_size(t.dtype)));
    return ap;
}

// The physical cores of the logical core a program spreads over (all of them, unless the caller
// already split its work over them), and the switch between them.
uint32_t spmd_cores(const KernelBuilder& kb) { return kb.core() == 0 ? kb.num_cores() : 1; }
uint32_t current_core(const KernelBuilder& kb) { return kb.core(); }
void enter_core(KernelBuilder& kb, uint32_t core) { kb.set_core(core); }

// The waves of each physical core (per_core[c] on core c, from the builder's current core on).
void run_waves(KernelBuilder& kb, const Plan& p, const Heads& Q, const Heads& O, const TensorDesc* lse,
               Source& src, tiling::DmaQueues& dq, const std::vector<std::vector<Wave>>& per_core) {
    const DType dt = p.dt;
    const uint32_t D = p.D, Dv = p.Dv, W = p.slot_w, slots = p.slots;
    Evac evac;
    const uint32_t npass = ceil_div(p.S, kPassKeys);
    std::vector<Wave> waves;   // of the core being written
    size_t total = 0;

    // Tiles.
    std::array<Tile, kLoadRing> kt, knat, vnat;
    for (int i = 0; i < kLoadRing; ++i) {
        kt[i] = kb.alloc_sbuf(D, {slots * kPassKeys}, dt);
        if (!src.k_transposed) knat[i] = kb.alloc_sbuf(kRows, {kChunks * slots * D}, dt);
        vnat[i] = kb.alloc_sbuf(kRows, {kChunks * slots * Dv}, dt);
    }
    std::array<Tile, 2> q_nat, q_t, l_run, o_acc, o_out, lse_t, log_l, linv;
    for (int i = 0; i < 2; ++i) {
        q_nat[i] = kb.alloc_sbuf(kRows, {D}, dt);
        q_t[i] = kb.alloc_sbuf(D, {kRows}, dt);
        l_run[i] = kb.alloc_sbuf(kRows, {1}, DType::f32);
        o_acc[i] = kb.alloc_sbuf(kRows, {Dv}, DType::f32);
        o_out[i] = kb.alloc_sbuf(kRows, {Dv}, O.t->dtype);
        lse_t[i] = kb.alloc_sbuf(kRows, {1}, DType::f32);
        log_l[i] = kb.alloc_sbuf(kRows, {1}, DType::f32);
        linv[i] = kb.alloc_sbuf(kRows, {1}, DType::f32);
    }
    std::array<Tile, kRing> s_sb, p_sb, pt_sb, mx, nm, alpha, rowsum, ps_s, ps_pv;
    for (int i = 0; i < kRing; ++i) {
        s_sb[i] = kb.alloc_sbuf(kRows, {kPassKeys}, DType::f32);
        p_sb[i] = kb.alloc_sbuf(kRows, {kPassKeys}, dt);
        pt_sb[i] = kb.alloc_sbuf(kRows, {kChunks * kRows}, dt);
        mx[i] = kb.alloc_sbuf(kRows, {1}, DType::f32);
        nm[i] = kb.alloc_sbuf(kRows, {1}, DType::f32);
        alpha[i] = kb.alloc_sbuf(kRows, {1}, DType::f32);
        rowsum[i] = kb.alloc_sbuf(kRows, {1}, DType::f32);
    }
    for (int i = 0; i < 2; ++i) {
        ps_s[i] = kb.alloc_psum(kRows, kPassKeys);
        ps_pv[i] = kb.alloc_psum(kRows, Dv);
    }
    std::array<Tile, kRing> bias_t;
    if (src.mask)
        for (auto& t : bias_t) t = kb.alloc_sbuf(kRows, {kPassKeys}, DType::f32);
    std::array<Tile, 2> ps_t;   // TensorE transposes: P^T and K^T chunks
    for (int i = 0; i < 2; ++i) ps_t[i] = kb.alloc_psum(kRows, kRows, dt);
    const Tile ps_q = kb.alloc_psum(D, kRows, dt);   // the wave's Q^T
    std::array<Tile, 4> ps_k;                         // a head's K^T for one pass (one per head of a wave)
    if (!src.k_transposed)
        for (auto& t : ps_k) t = kb.alloc_psum(D, kPassKeys, dt);
    int ps_k_next = 0;
    int ps_t_next = 0;


    auto wave_rows = [&](const Wave& w) { return w.nh * W; };
    auto pass_keys = [&](uint32_t n) { return std::min(kPassKeys, p.S - n * kPassKeys); };
    auto load = [&](size_t g) {
        const Wave& w = waves[g / npass];
        const uint32_t n = static_cast<uint32_t>(g % npass);
        const int r = static_cast<int>(g % kLoadRing);
        if (src.early && g + kEarly < total) {
            const size_t e = g + kEarly;
            const uint32_t en = static_cast<uint32_t>(e % npass);
            src.early(waves[e / npass], en * kPassKeys, pass_keys(en), static_cast<int>(e % kEarlyRing));
        }
        src.load(w, n * kPassKeys, pass_keys(n), kt[r], knat[r], vnat[r], r, static_cast<int>(g % kEarlyRing));
    };
    // Stages of pass g, issued as S(g+1), T(g), P(g), E(g+1), O(g) so that each engine's
    // in-order queue holds work whose inputs are (nearly) there:
    //   S: the wave's Q^T (first pass), K^T (TensorE transposes without DMA transposes), the
    //      scores Q K^T;
    //   E: the row max and nm = -m' (the exp's bias), p = exp(scale * s + nm) with its row sum,
    //      alpha = exp(m - m'), l = l * alpha + rowsum;
    //   T: P^T per 128 keys (TensorE) into SBUF;  P: P V per head;
    //   O: O = O * alpha + P V; after a wave's last pass out = O / l and lse = log l - nm.
    // Unmasked passes (scale > 0) take the max and the exp straight from PSUM; masked ones are
    // scaled into SBUF and masked first.
    const bool from_psum = !src.mask && p.scale > 0.0f;
    auto stage_s = [&](size_t g) {
        const size_t wi = g / npass;
        const Wave& w = waves[wi];
        const uint32_t n = static_cast<uint32_t>(g % npass), nk = pass_keys(n);
        const uint32_t rows = wave_rows(w);
        const int wr = static_cast<int>(wi & 1), lr = static_cast<int>(g % kLoadRing);
        if (n == 0) {
            // The wave's queries: rows (head hs, group member j, token i) at hs * W + j * Sq + i.
            for (uint32_t hs = 0; hs < w.nh; ++hs)
                for (int64_t j = 0; j < p.G; ++j) {
                    const int64_t h = (w.h0 + hs) * p.G + j;
                    kb.dma_copy(q_nat[wr].region(static_cast<uint32_t>(hs * W + j * p.Sq), static_cast<uint32_t>(p.Sq),
                                                 0, D),
                                Q.rows(w.b, h, 0, static_cast<uint32_t>(p.Sq)), dq.load());
                }
            kb.transpose(ps_q.region(0, D, 0, rows), q_nat[wr].region(0, rows, 0, D));
            kb.tensor_copy(q_t[wr].region(0, D, 0, rows), ps_q.region(0, D, 0, rows), evac());
            if (src.start_wave) src.start_wave(w, rows, wr);
        }
        if (!src.k_transposed) {
            // A head's K^T for the pass gathers in one PSUM bank and leaves it in one copy.
            for (uint32_t hs = 0; hs < w.nh; ++hs) {
                const Tile& pk = ps_k[ps_k_next++ % ps_k.size()];
                for (uint32_t c = 0; c * kRows < nk; ++c) {
                    const uint32_t wk = std::min(kRows, nk - c * kRows);
                    kb.transpose(pk.region(0, D, c * kRows, wk), knat[lr].region(0, wk, (c * slots + hs) * D, D));
                }
                kb.tensor_copy(kt[lr].region(0, D, hs * kPassKeys, nk), pk.region(0, D, 0, nk), evac());
            }
        }
        const Tile& ps = ps_s[g & 1];
        for (uint32_t hs = 0; hs < w.nh; ++hs)
            kb.matmul(ps.region(hs * W, p.M, 0, nk), q_t[wr].region(0, D, hs * W, p.M),
                      kt[lr].region(0, D, hs * kPassKeys, nk), false);
    };
    auto stage_e = [&](size_t g) {
        const size_t wi = g / npass;
        const Wave& w = waves[wi];
        const uint32_t n = static_cast<uint32_t>(g % npass), k0 = n * kPassKeys, nk = pass_keys(n);
        const uint32_t rows = wave_rows(w);
        const int wr = static_cast<int>(wi & 1), r = static_cast<int>(g % kRing);
        const AccessPattern raw = ps_s[g & 1].region(0, rows, 0, nk);
        const AccessPattern s = from_psum ? raw : s_sb[r].region(0, rows, 0, nk);
        if (src.mask) {
            const AccessPattern bias = bias_t[r].region(0, rows, 0, nk);
            scale_and_mask(kb, s, raw, p.scale, src.mask(w, k0, nk, rows, bias, wr, static_cast<int>(g % kLoadRing)),
                           bias);
        } else if (!from_psum) {
            kb.activation(s, raw, ActFunc::identity, p.scale);
        }
        // nm = -m' = min(-factor * rowmax, nm_old), kept <= FLT_MAX so that a row without a
        // visible key gets exp(-inf) = 0 rather than NaN.
        const float factor = from_psum ? p.scale : 1.0f;
        const AccessPattern mxa = mx[r].rows(0, rows), nma = nm[r].rows(0, rows);
        kb.tensor_reduce(mxa, s, ReduceOp::max);
        if (n == 0) {
            kb.tensor_scalar(nma, mxa, AluOp::mul, -factor, AluOp::min, FLT_MAX, Engine::GpSimd);
        } else {
            const AccessPattern nm_old = nm[(g - 1) % kRing].rows(0, rows);
            kb.tensor_scalar_ex(nma, mxa, AluOp::mul, -factor, nullptr, AluOp::min, 0.0f, &nm_old, 0, Engine::GpSimd);
        }
        const AccessPattern l = l_run[wr].rows(0, rows);
        const AccessPattern rs = n == 0 ? l : rowsum[r].rows(0, rows);
        kb.activation_ex(p_sb[r].region(0, rows, 0, nk), s, ActFunc::exp, factor, nullptr, 0.0f, &nma, ReduceOp::add,
                         &rs);
        if (n == 0) return;
        // alpha = exp(m - m') = e^(nm - nm_old) on the GpSimd; l = l * alpha + rowsum.
        const AccessPattern al = alpha[r].rows(0, rows), nm_old = nm[(g - 1) % kRing].rows(0, rows);
        kb.tensor_scalar_ex(al, nma, AluOp::sub, 0.0f, &nm_old, AluOp::pow, std::exp(1.0f), nullptr, F_REVERSE1,
                            Engine::GpSimd);
        kb.tensor_scalar_ex(l, l, AluOp::mul, 0.0f, &al, AluOp::add, 0.0f, &rs, 0, Engine::GpSimd);
    };
    auto stage_t = [&](size_t g) {
        const Wave& w = waves[g / npass];
        const uint32_t nk = pass_keys(static_cast<uint32_t>(g % npass)), rows = wave_rows(w);
        const int r = static_cast<int>(g % kRing);
        for (uint32_t c = 0; c * kRows < nk; ++c) {
            const uint32_t wk = std::min(kRows, nk - c * kRows);
            const Tile& pt = ps_t[ps_t_next ^= 1];
            kb.transpose(pt.region(0, wk, 0, rows), p_sb[r].region(0, rows, c * kRows, wk));
            kb.tensor_copy(pt_sb[r].region(0, wk, c * kRows, rows), pt.region(0, wk, 0, rows), evac());
        }
    };
    auto stage_p = [&](size_t g) {
        const Wave& w = waves[g / npass];
        const uint32_t nk = pass_keys(static_cast<uint32_t>(g % npass));
        const int lr = static_cast<int>(g % kLoadRing), r = static_cast<int>(g % kRing);
        for (uint32_t hs = 0; hs < w.nh; ++hs)
            for (uint32_t c = 0; c * kRows < nk; ++c) {
                const uint32_t wk = std::min(kRows, nk - c * kRows);
                kb.matmul(ps_pv[g & 1].region(hs * W, p.M, 0, Dv), pt_sb[r].region(0, wk, c * kRows + hs * W, p.M),
                          vnat[lr].region(0, wk, (c * slots + hs) * Dv, Dv), c > 0);
            }
    };
    auto stage_o = [&](size_t g) {
        const size_t wi = g / npass;
        const Wave& w = waves[wi];
        const uint32_t n = static_cast<uint32_t>(g % npass), rows = wave_rows(w);
        const int wr = static_cast<int>(wi & 1), r = static_cast<int>(g % kRing);
        const AccessPattern oacc = o_acc[wr].region(0, rows, 0, Dv), pva = ps_pv[g & 1].region(0, rows, 0, Dv);
        if (n == 0) {
            kb.tensor_copy(oacc, pva);
        } else {
            const AccessPattern al = alpha[r].rows(0, rows);
            kb.tensor_scalar_ex(oacc, oacc, AluOp::mul, 0.0f, &al, AluOp::bypass, 0.0f, nullptr, 0, Engine::GpSimd);
            kb.tensor_tensor(oacc, oacc, pva, AluOp::add);
        }
        if (n + 1 < npass) return;
        // out = O / max(l, tiny) (a row without a visible key has O = 0 and gives 0).
        const AccessPattern l = l_run[wr].rows(0, rows), li = linv[wr].rows(0, rows);
        kb.tensor_scalar_ex(li, l, AluOp::max, 1e-30f, nullptr, AluOp::div, 1.0f, nullptr, F_REVERSE1,
                            Engine::GpSimd);
        const AccessPattern ot = o_out[wr].region(0, rows, 0, Dv);
        kb.tensor_scalar_ex(ot, oacc, AluOp::mul, 0.0f, &li, AluOp::bypass, 0.0f, nullptr, 0, Engine::GpSimd);
        if (lse) {
            kb.activation(log_l[wr].rows(0, rows), l, ActFunc::log);
            kb.tensor_tensor(lse_t[wr].rows(0, rows), log_l[wr].rows(0, rows), nm[r].rows(0, rows), AluOp::sub);
        }
        for (uint32_t hs = 0; hs < w.nh; ++hs)
            for (int64_t j = 0; j < p.G; ++j) {
                const int64_t h = (w.h0 + hs) * p.G + j;
                const uint32_t r0 = static_cast<uint32_t>(hs * W + j * p.Sq), nq = static_cast<uint32_t>(p.Sq);
                kb.dma_copy(O.rows(w.b, h, 0, nq), o_out[wr].region(r0, nq, 0, Dv), dq.store());
                if (lse) kb.dma_copy(lse_rows(*lse, w.b, h, 0, nq), lse_t[wr].region(r0, nq, 0, 1), dq.store());
            }
    };

    const uint32_t home = current_core(kb);
    for (size_t core = 0; core < per_core.size(); ++core) {
        // Tiles are at the same addresses on every physical core; each core's program starts its own.
        if (per_core.size() > 1) enter_core(kb, home + static_cast<uint32_t>(core));
        waves = per_core[core];
        total = waves.size() * npass;
        // Partitions no query row uses are never written by the matmuls: zeros there keep every
        // row of the vector work finite.
        for (int i = 0; i < 2; ++i) {
            kb.memset(ps_s[i].ap(), 0.0f);
            kb.memset(ps_pv[i].ap(), 0.0f);
            kb.memset(q_nat[i].ap(), 0.0f, Engine::GpSimd);
        }
        if (src.init) src.init();
        if (src.early)
            for (size_t e = 0; e < std::min(total, kEarly); ++e) {
                const uint32_t en = static_cast<uint32_t>(e % npass);
                src.early(waves[e / npass], en * kPassKeys, pass_keys(en), static_cast<int>(e % kEarlyRing));
            }
        for (size_t g = 0; g + 1 < kLoadRing && g < total; ++g) load(g);
        stage_s(0);
        stage_e(0);
        for (size_t g = 0; g < total; ++g) {
            if (g + kLoadRing - 1 < total) load(g + kLoadRing - 1);
            if (g + 1 < total) stage_s(g + 1);
            stage_t(g);
            stage_p(g);
            if (g + 1 < total) stage_e(g + 1);
            stage_o(g);
        }
    }
    if (per_core.size() > 1) enter_core(kb, home);
}

// Flash-decoding split over the physical cores of the logical core: whole waves per core (no
// combine across cores), waves narrowed to fewer heads when there are fewer than cores.
void run_decode(KernelBuilder& kb, const Plan& p, const Heads& Q, const Heads& O, const TensorDesc* lse,
                Source& src, tiling::DmaQueues& dq) {
    const uint32_t cores = spmd_cores(kb), Hkv = static_cast<uint32_t>(p.Hkv);
    uint32_t per_wave = p.slots;
    while (per_wave > 1 && static_cast<uint64_t>(p.B) * ceil_div(Hkv, per_wave) < cores) per_wave = (per_wave + 1) / 2;
    std::vector<Wave> waves;
    for (int64_t b = 0; b < p.B; ++b)
        for (uint32_t h0 = 0; h0 < Hkv; h0 += per_wave) waves.push_back({b, h0, std::min(per_wave, Hkv - h0)});
    const size_t used = std::min<size_t>(cores, waves.size());
    std::vector<std::vector<Wave>> per_core;
    for (size_t c = 0; c < used; ++c)
        per_core.emplace_back(waves.begin() + c * waves.size() / used, waves.begin() + (c + 1) * waves.size() / used);
    if (src.setup) src.setup();
    run_waves(kb, p, Q, O, lse, src, dq, per_core);
}

Plan make_plan(const std::string& op, const TensorDesc& q, const TensorDesc& k, const TensorDesc& v, int64_t Hkv,
               int64_t S, float scale) {
    Plan p;
    p.op = op;
    p.dt = q.dtype;
    p.B = q.sizes[0];
    p.Hq = q.sizes[1];
    p.Sq = q.sizes[2];
    p.Hkv = Hkv;
    if (Hkv <= 0 || p.Hq % Hkv != 0)
        fail(op, std::to_string(p.Hq) + " query heads are not a multiple of " + std::to_string(Hkv) + " k/v heads");
    p.G = p.Hq / Hkv;
    p.D = static_cast<uint32_t>(q.sizes[3]);
    p.Dv = static_cast<uint32_t>(v.sizes[v.dim() - 1]);
    if (p.D > kRows || p.Dv > kRows) fail(op, "head dims exceed 128");
    if (p.G * p.Sq > kRows)
        fail(op, std::to_string(p.G * p.Sq) + " query rows per k/v head exceed 128 (use sdpa_forward)");
    if (S <= 0 || S > UINT32_MAX) fail(op, "the key sequence must be non-empty");
    if (q.dtype != k.dtype || q.dtype != v.dtype) fail(op, "q, k, v dtypes differ");
    if (q.dtype != DType::f32 && q.dtype != DType::bf16 && q.dtype != DType::f16)
        fail(op, std::string("dtype ") + dtype_name(q.dtype) + " not supported (f32, bf16, f16)");
    p.S = static_cast<uint32_t>(S);
    p.M = static_cast<uint32_t>(p.G * p.Sq);
    p.slot_w = slot_width(p.M);
    p.slots = kRows / p.slot_w;
    p.scale = scale;
    return p;
}

}  // namespace

bool sdpa_decode_fits(int64_t q_heads, int64_t kv_heads, int64_t q_len, int64_t head_dim, int64_t v_head_dim) {
    return kv_heads > 0 && q_heads % kv_heads == 0 && (q_heads / kv_heads) * q_len <= kRows && head_dim <= kRows &&
           v_head_dim <= kRows && q_len > 0;
}

void sdpa_decode(KernelBuilder& kb, const TensorDesc& out, const TensorDesc* lse, const TensorDesc& q,
                 const TensorDesc& k, const TensorDesc& v, const TensorDesc* attn_mask, float scale) {
    const std::string op = "sdpa_decode";
    if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) fail(op, "q, k, v must be [B, H, S, D]");
    const int64_t B = q.sizes[0], Hq = q.sizes[1], Sq = q.sizes[2], Hkv = k.sizes[1], S = k.sizes[2];
    check_heads(op, q, "q", B, Hq, Sq, q.sizes[3]);
    check_heads(op, k, "k", B, Hkv, S, q.sizes[3]);
    check_heads(op, v, "v", B, Hkv, S, v.sizes[3]);
    check_heads(op, out, "out", B, Hq, Sq, v.sizes[3]);
    if (lse) {
        tiling::check_desc(op, *lse, "lse");
        if (lse->dim() != 3 || lse->sizes[0] != B || lse->sizes[1] != Hq || lse->sizes[2] != Sq ||
            lse->dtype != DType::f32)
            fail(op, "lse " + lse->str() + " must be f32 [B, Hq, Sq]");
    }
    if (B * Hq * Sq == 0) return;
    const Plan p = make_plan(op, q, k, v, Hkv, S, scale);
    const Mask mask = check_mask(op, attn_mask, Shapes{B, Hq, Sq, S, q.sizes[3], v.sizes[3]});
    const Heads Q{&q}, K{&k}, V{&v}, O{&out};
    tiling::DmaQueues dq(kb.chip());
    const bool dma_t = kb.has_dma_transpose();
    StreamQueues sq(kb.chip());

    std::array<Tile, kLoadRing> mask_t;   // loaded with the pass's K and V
    Source src;
    src.k_transposed = dma_t;
    // One DMA per 128-key tile and head: a tile of a [B, H, S, D] head is one contiguous run.
    src.load = [&](const Wave& w, uint32_t k0, uint32_t nk, const Tile& kt, const Tile& knat, const Tile& vnat, int ring,
                   int) {
        for (uint32_t c = 0; c * kRows < nk; ++c) {
            const uint32_t wk = std::min(kRows, nk - c * kRows), key = k0 + c * kRows;
            for (uint32_t hs = 0; hs < w.nh; ++hs) {
                // K and V take turns on the queues (a DMA transpose moves its bytes slower).
                const int kq = sq(), vq = sq();
                const bool swap = (c + hs) & 1;
                if (dma_t)
                    kb.dma_transpose(kt.region(0, p.D, hs * kPassKeys + c * kRows, wk), K.rows(w.b, w.h0 + hs, key, wk),
                                     swap ? vq : kq);
                else
                    kb.dma_copy(knat.region(0, wk, (c * p.slots + hs) * p.D, p.D), K.rows(w.b, w.h0 + hs, key, wk),
                                swap ? vq : kq);
                kb.dma_copy(vnat.region(0, wk, (c * p.slots + hs) * p.Dv, p.Dv), V.rows(w.b, w.h0 + hs, key, wk),
                            swap ? kq : vq);
            }
        }
        // The pass's mask rows travel with its keys (a DMA queued behind later passes' loads would
        // arrive late).
        if (mask.t)
            for (uint32_t hs = 0; hs < w.nh; ++hs)
                for (int64_t j = 0; j < p.G; ++j) {
                    const int64_t h = (w.h0 + hs) * p.G + j;
                    const uint32_t r0 = static_cast<uint32_t>(hs * p.slot_w + j * p.Sq);
                    kb.dma_copy(mask_t[ring].region(r0, static_cast<uint32_t>(p.Sq), 0, nk),
                                mask.block(w.b, h, 0, static_cast<uint32_t>(p.Sq), k0, nk), sq());
                }
    };
    if (mask.t) {
        const DType mdt = mask.t->dtype == DType::boolean ? DType::u8 : DType::f32;
        // The hooks run after this block: they keep their own copy of the mask's dtype.
        src.setup = [&, mdt] {
            for (auto& t : mask_t) t = kb.alloc_sbuf(kRows, {kPassKeys}, mdt);
        };
        src.init = [&, mdt] {
            for (auto& t : mask_t) kb.memset(t.ap(), mdt == DType::u8 ? 1.0f : 0.0f, Engine::GpSimd);
        };
        src.mask = [&](const Wave&, uint32_t, uint32_t nk, uint32_t rows, const AccessPattern& bias, int, int r) {
            const AccessPattern m = mask_t[r].region(0, rows, 0, nk);
            if (mask.t->dtype != DType::boolean) {
                kb.tensor_copy(bias, m, Engine::GpSimd);
                return AluOp::add;
            }
            // True -> +inf, False -> -inf (the scores' min with it keeps or hides them).
            kb.tensor_scalar(bias, m, AluOp::sub, 0.5f, AluOp::mul, INFINITY, Engine::GpSimd);
            return AluOp::min;
        };
    }
    run_decode(kb, p, Q, O, lse, src, dq);
}

void paged_attention_decode(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& q,
                            const TensorDesc& key_cache, const TensorDesc& value_cache, const TensorDesc& slots,
                            const TensorDesc& context_lens, float scale) {
    const std::string op = "paged_attention_decode";
    for (auto [t, name] : std::initializer_list<std::pair<const TensorDesc*, const char*>>{
             {&out, "out"}, {&q, "q"}, {&key_cache, "key_cache"}, {&value_cache, "value_cache"}, {&slots, "slots"},
             {&context_lens, "context_lens"}})
        tiling::check_desc(op, *t, name);
    if (q.dim() != 3 || out.dim() != 3) fail(op, "q and out must be [B, Hq, D]");
    if (key_cache.dim() != 4 || value_cache.dim() != 4)
        fail(op, "key_cache and value_cache must be [num_blocks, block_size, Hkv, D]");
    if (slots.dim() != 2 || slots.dtype != DType::i32 || slots.sizes[0] != q.sizes[0])
        fail(op, "slots " + slots.str() + " must be i32 [B, L]");
    if (context_lens.dim() != 1 || context_lens.dtype != DType::i32 || context_lens.sizes[0] != q.sizes[0])
        fail(op, "context_lens " + context_lens.str() + " must be i32 [B]");
    const int64_t Hkv = key_cache.sizes[2], nslots = key_cache.sizes[0] * key_cache.sizes[1];
    for (const TensorDesc* c : {&key_cache, &value_cache}) {
        if (c->sizes[0] != key_cache.sizes[0] || c->sizes[1] != key_cache.sizes[1] || c->sizes[2] != Hkv)
            fail(op, "key_cache and value_cache shapes differ");
        // Slot s of a cache is at s * strides[1]: blocks must follow each other.
        if (c->sizes[0] > 1 && c->strides[0] != c->sizes[1] * c->strides[1])
            throw NeedsDenseOperand(c->arg, op + ": cache blocks must be contiguous");
    }
    if (out.sizes != std::vector<int64_t>{q.sizes[0], q.sizes[1], value_cache.sizes[3]})
        fail(op, "out " + out.str() + " must be [B, Hq, Dv]");
    if (nslots > (int64_t{1} << 24)) fail(op, "more than 2^24 cache slots");
    if (q.numel() == 0) return;
    // q and out as [B, Hq, 1, D] heads.
    auto as_heads = [](const TensorDesc& t) {
        TensorDesc h = t;
        h.sizes = {t.sizes[0], t.sizes[1], 1, t.sizes[2]};
        h.strides = {t.strides[0], t.strides[1], t.strides[2], t.strides[2]};
        return h;
    };
    const TensorDesc q4 = as_heads(q), out4 = as_heads(out);
    const Plan p = make_plan(op, q4, key_cache, value_cache, Hkv, slots.sizes[1], scale);
    if (key_cache.sizes[3] != p.D) fail(op, "key_cache head dim differs from q's");
    const Heads Q{&q4}, O{&out4};
    tiling::DmaQueues dq(kb.chip());
    StreamQueues sq(kb.chip());

    // Per pass: the slot of each key (i32, one column per 128-key chunk), gathered rows of all
    // the wave's heads at once ([nh, D] of one slot is one contiguous run of the cache).
    std::array<Tile, kEarlyRing> idx;
    auto table = [&](const TensorDesc& c, uint32_t h0, uint32_t nh) {
        AccessPattern ap = hbm_elems(c, c.offset + int64_t(h0) * c.strides[2]);
        ap.partitions = 1;
        ap.ndim = 3;
        ap.size = {static_cast<uint32_t>(nslots), nh, static_cast<uint32_t>(c.sizes[3]), 1};
        ap.stride = {c.strides[1], c.strides[2], c.strides[3], 0};
        return ap;
    };
    auto gather = [&](const AccessPattern& dst, const AccessPattern& tab, const AccessPattern& ids) {
        Instruction ins;
        ins.op = Opcode::dma_gather;
        ins.engine = Engine::DMA;
        ins.dma_queue = static_cast<uint8_t>(sq());
        ins.dst = dst;
        ins.src0 = tab;
        ins.src1 = ids;
        kb.emit(ins);
    };
    Source src;
    src.k_transposed = false;
    src.early = [&](const Wave& w, uint32_t k0, uint32_t nk, int e) {
        for (uint32_t c = 0; c * kRows < nk; ++c) {
            const uint32_t wk = std::min(kRows, nk - c * kRows);
            AccessPattern s = hbm_elems(slots, slots.offset + w.b * slots.strides[0] +
                                                   int64_t(k0 + c * kRows) * slots.strides[1]);
            s.partitions = static_cast<uint16_t>(wk);
            s.partition_stride = slots.strides[1];
            kb.dma_copy(idx[e].region(0, wk, c, 1), s, sq());
        }
    };
    src.load = [&](const Wave& w, uint32_t, uint32_t nk, const Tile&, const Tile& knat, const Tile& vnat, int,
                   int r) {
        for (uint32_t c = 0; c * kRows < nk; ++c) {
            const uint32_t wk = std::min(kRows, nk - c * kRows);
            // A gather moves one row per descriptor on one queue: 32 keys per gather spread the
            // rows of a chunk over four queues.
            for (uint32_t p0 = 0; p0 < wk; p0 += kGatherRows) {
                const uint32_t np = std::min(kGatherRows, wk - p0);
                const AccessPattern ids = idx[r].region(p0, np, c, 1);
                gather(knat.region(p0, np, c * p.slots * p.D, w.nh * p.D), table(key_cache, w.h0, w.nh), ids);
                gather(vnat.region(p0, np, c * p.slots * p.Dv, w.nh * p.Dv), table(value_cache, w.h0, w.nh), ids);
            }
        }
    };
    // Positions at or past the sequence's length are hidden: per wave, left = (len - 0.5) - column;
    // per pass, bias = (left - k0) * inf, +inf for a visible key and -inf past the length.
    Tile cols;
    std::array<Tile, 2> len, left;
    src.setup = [&] {
        for (auto& t : idx) t = kb.alloc_sbuf(kRows, {kChunks}, DType::i32);
        cols = kb.alloc_sbuf(kRows, {kPassKeys}, DType::f32);
        for (int i = 0; i < 2; ++i) {
            len[i] = kb.alloc_sbuf(kRows, {1}, DType::f32);
            left[i] = kb.alloc_sbuf(kRows, {kPassKeys}, DType::f32);
        }
    };
    src.init = [&] {
        Affine a;
        a.free_mul = {1, 0, 0, 0};
        kb.iota(cols.ap(), a);
    };
    src.start_wave = [&](const Wave& w, uint32_t rows, int wr) {
        AccessPattern l = hbm_elems(context_lens, context_lens.offset + w.b * context_lens.strides[0]);
        l.partitions = static_cast<uint16_t>(rows);
        l.partition_stride = 0;
        const AccessPattern n = len[wr].rows(0, rows);
        kb.dma_copy(n, l, dq.load());
        kb.tensor_scalar(n, n, AluOp::sub, 0.5f, AluOp::bypass, 0.0f, Engine::GpSimd);
        kb.tensor_scalar_ex(left[wr].rows(0, rows), cols.rows(0, rows), AluOp::mul, -1.0f, nullptr, AluOp::add, 0.0f,
                            &n, 0, Engine::GpSimd);
    };
    src.mask = [&](const Wave&, uint32_t k0, uint32_t nk, uint32_t rows, const AccessPattern& bias, int wr, int) {
        kb.tensor_scalar(bias, left[wr].region(0, rows, 0, nk), AluOp::sub, static_cast<float>(k0), AluOp::mul,
                         INFINITY, Engine::GpSimd);
        return AluOp::min;
    };
    run_decode(kb, p, Q, O, nullptr, src, dq);
}

}  // namespace trnsim::ops
