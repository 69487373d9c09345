// The fused Mamba selective-scan kernels of the AWS NKI tutorial (fused_mamba.rst):
//   out[b, c, t] = sum_s C[b,s,t] * h_s[c,t],  h_s[c,t] = exp(delta*A[c,s]) * h_s[c,t-1] + delta*u*B[b,s,t]
// delta, u, out: [batch, channels, seq]; A: [channels, state]; B, C: [batch, state, seq]; fp32.
// Channels map to partitions in tiles of 128. ScalarE computes exp(delta * A) (activation with a
// per-partition scale), VectorE the products, the scan (tensor_tensor_scan) and the accumulation.
#include <vector>

#include "common.h"
#include "kernels.h"

namespace trnsim::fidelity {

namespace {

constexpr uint32_t P = 128;

struct MambaTensors {
    HbmTensor delta, u, A, B, C, out, spill;
};

MambaTensors mamba_tensors(HbmArena& hbm, const MambaShape& s) {
    MambaTensors t;
    t.delta = HbmTensor::make(hbm, DType::f32, uint64_t(s.batch) * s.channels, s.seq);
    t.u = HbmTensor::make(hbm, DType::f32, uint64_t(s.batch) * s.channels, s.seq);
    t.A = HbmTensor::make(hbm, DType::f32, s.channels, s.state);
    t.B = HbmTensor::make(hbm, DType::f32, uint64_t(s.batch) * s.state, s.seq);
    t.C = HbmTensor::make(hbm, DType::f32, uint64_t(s.batch) * s.state, s.seq);
    t.out = HbmTensor::make(hbm, DType::f32, uint64_t(s.batch) * s.channels, s.seq);
    t.spill = HbmTensor::make(hbm, DType::f32, s.channels, s.seq);
    return t;
}

// Row 'row' of B or C, [1, n] from column c0, broadcast to all 128 partitions (partition stride 0).
AccessPattern broadcast_row(const HbmTensor& t, uint64_t row, uint64_t c0, uint32_t n) {
    AccessPattern ap = t.tile(row, P, c0, n);
    ap.partition_stride = 0;
    return ap;
}

// One state step on a [128, n] tile: deltaA = exp(delta*A_s); b = deltaU*B_s;
// work = scan(deltaA, b, initial); c = work*C_s (the state's contribution); accum += c
// when an accumulator is given. 'work' keeps the scan (its last column carries to the next tile).
void state_step(KernelBuilder& kb, const MambaTensors& t, const AccessPattern& delta, const AccessPattern& delta_u,
                const AccessPattern& a_col, const AccessPattern& delta_a, const AccessPattern& b,
                const AccessPattern& c, const AccessPattern& work, const AccessPattern* accum, uint64_t bs_row, uint64_t c0, uint32_t n,
                const AccessPattern* initial) {
    kb.activation_ex(delta_a, delta, ActFunc::exp, 1.0f, &a_col, 0.0f, nullptr);
    // B and C may share one tile (when SBUF is short): C is then loaded after the scan consumed B.
    const bool shared = b.space == c.space && b.offset == c.offset && b.start_partition == c.start_partition;
    load(kb, b, broadcast_row(t.B, bs_row, c0, n));
    if (!shared) load(kb, c, broadcast_row(t.C, bs_row, c0, n));
    kb.tensor_tensor(b, delta_u, b, AluOp::mul);
    Instruction scan;
    scan.op = Opcode::tensor_tensor_scan;
    scan.engine = Engine::Vector;
    scan.dst = work;
    scan.src0 = delta_a;
    scan.src1 = b;
    scan.alu0 = AluOp::mul;
    scan.alu1 = AluOp::add;
    if (initial) {
        scan.src2 = *initial;
        scan.flags |= F_S1_AP;
    }
    kb.emit(scan);
    if (shared) load(kb, c, broadcast_row(t.C, bs_row, c0, n));
    kb.tensor_tensor(c, work, c, AluOp::mul);
    if (accum) kb.tensor_tensor(*accum, *accum, c, AluOp::add);
}

}  // namespace

// v1: batch -> state -> channel tile; delta and u are reloaded for every (state, channel tile).
std::vector<Program> mamba_v1(const ChipConfig& chip, const MambaShape& s) {
    KernelBuilder kb(chip, "mamba_v1");
    HbmArena hbm;
    MambaTensors t = mamba_tensors(hbm, s);
    const uint32_t nct = s.channels / P, n = s.seq;
    Tile accum = kb.alloc_sbuf(P, {nct, n}, DType::f32);
    Tile delta = kb.alloc_sbuf(P, {n}, DType::f32), u = kb.alloc_sbuf(P, {n}, DType::f32);
    Tile delta_a = kb.alloc_sbuf(P, {n}, DType::f32), bt = kb.alloc_sbuf(P, {n}, DType::f32);
    Tile ct_tile = kb.alloc_sbuf(P, {n}, DType::f32);
    Tile work = kb.alloc_sbuf(P, {n}, DType::f32), a_col = kb.alloc_sbuf(P, {1}, DType::f32);
    for (uint32_t b = 0; b < s.batch; ++b) {
        for (uint32_t ct = 0; ct < nct; ++ct) kb.memset(entry(accum, ct), 0.0f);
        for (uint32_t st = 0; st < s.state; ++st)
            for (uint32_t ct = 0; ct < nct; ++ct) {
                const uint64_t row = uint64_t(b) * s.channels + ct * P;
                load(kb, delta.ap(), t.delta.tile(row, P, 0, n));
                load(kb, a_col.ap(), t.A.tile(ct * P, P, st, 1));
                load(kb, u.ap(), t.u.tile(row, P, 0, n));
                kb.tensor_tensor(u.ap(), delta.ap(), u.ap(), AluOp::mul);
                const AccessPattern acc = entry(accum, ct);
                state_step(kb, t, delta.ap(), u.ap(), a_col.ap(), delta_a.ap(), bt.ap(), ct_tile.ap(), work.ap(), &acc,
                           uint64_t(b) * s.state + st, 0, n, nullptr);
            }
        for (uint32_t ct = 0; ct < nct; ++ct)
            store(kb, t.out.tile(uint64_t(b) * s.channels + ct * P, P, 0, n), entry(accum, ct));
    }
    return {kb.finish()};
}

// v2: channel tile outside the state loop; delta, u and delta*u once per channel tile. The
// working set is [128, seq] fp32 tiles: delta, delta*u, the accumulator, the exp result, B, C and
// the scan; the exp result is double buffered when 8 tiles fit. When the 7 do not fit SBUF, the
// accumulator is spilled to HBM (reloaded and stored around every accumulation, as the
// compiler's spill code does).
std::vector<Program> mamba_v2(const ChipConfig& chip, const MambaShape& s) {
    KernelBuilder kb(chip, "mamba_v2");
    HbmArena hbm;
    MambaTensors t = mamba_tensors(hbm, s);
    const uint32_t nct = s.channels / P, n = s.seq;
    const uint64_t tile_bytes = (uint64_t(n) * 4 + 63) / 64 * 64, budget = chip.sbuf.bytes_per_partition - 1024;
    const bool spill = 7 * tile_bytes > budget;
    const int exp_buffers = 8 * tile_bytes > budget ? 1 : 2;
    Tile delta = kb.alloc_sbuf(P, {n}, DType::f32), delta_u = kb.alloc_sbuf(P, {n}, DType::f32);
    Tile accum = spill ? Tile{} : kb.alloc_sbuf(P, {n}, DType::f32);
    std::vector<Tile> delta_a;
    for (int i = 0; i < exp_buffers; ++i) delta_a.push_back(kb.alloc_sbuf(P, {n}, DType::f32));
    Tile bt = kb.alloc_sbuf(P, {n}, DType::f32);
    Tile ctl = spill ? bt : kb.alloc_sbuf(P, {n}, DType::f32);   // spilled: B and C share a tile
    Tile work = kb.alloc_sbuf(P, {n}, DType::f32);
    Tile a_cols = kb.alloc_sbuf(P, {s.state}, DType::f32);
    int k = 0;
    for (uint32_t b = 0; b < s.batch; ++b)
        for (uint32_t ct = 0; ct < nct; ++ct) {
            const uint64_t row = uint64_t(b) * s.channels + ct * P;
            load(kb, delta.ap(), t.delta.tile(row, P, 0, n));
            load(kb, delta_u.ap(), t.u.tile(row, P, 0, n));
            load(kb, a_cols.ap(), t.A.tile(ct * P, P, 0, s.state));
            kb.tensor_tensor(delta_u.ap(), delta.ap(), delta_u.ap(), AluOp::mul);
            const AccessPattern spill_tile = t.spill.tile(ct * P, P, 0, n);
            if (!spill) kb.memset(accum.ap(), 0.0f);
            for (uint32_t st = 0; st < s.state; ++st) {
                const AccessPattern da = delta_a[k++ % exp_buffers].ap();
                const AccessPattern acc = accum.ap();
                state_step(kb, t, delta.ap(), delta_u.ap(), cols(a_cols.ap(), st, 1), da, bt.ap(), ctl.ap(), work.ap(),
                           spill ? nullptr : &acc, uint64_t(b) * s.state + st, 0, n, nullptr);
                if (!spill) continue;
                // Spilled accumulator: reload the partial sum into the work tile, add, store it back.
                if (st > 0) {
                    load(kb, work.ap(), spill_tile);
                    kb.tensor_tensor(ctl.ap(), ctl.ap(), work.ap(), AluOp::add);
                }
                store(kb, st + 1 < s.state ? spill_tile : t.out.tile(row, P, 0, n), ctl.ap());
            }
            if (!spill) store(kb, t.out.tile(row, P, 0, n), accum.ap());
        }
    return {kb.finish()};
}

// v3: v2 with the sequence tiled by seq_tile; each state's scan continues from the last column
// of its previous sequence tile (the 'initial' operand).
std::vector<Program> mamba_v3(const ChipConfig& chip, const MambaShape& s, uint32_t seq_tile) {
    KernelBuilder kb(chip, "mamba_v3");
    HbmArena hbm;
    MambaTensors t = mamba_tensors(hbm, s);
    const uint32_t nct = s.channels / P, n = std::min(seq_tile, s.seq);
    std::vector<Tile> delta, delta_u, accum, work;
    for (int i = 0; i < 2; ++i) {
        delta.push_back(kb.alloc_sbuf(P, {n}, DType::f32));
        delta_u.push_back(kb.alloc_sbuf(P, {n}, DType::f32));
        accum.push_back(kb.alloc_sbuf(P, {n}, DType::f32));
    }
    std::vector<Tile> delta_a = {kb.alloc_sbuf(P, {n}, DType::f32), kb.alloc_sbuf(P, {n}, DType::f32)};
    std::vector<Tile> bt = {kb.alloc_sbuf(P, {n}, DType::f32), kb.alloc_sbuf(P, {n}, DType::f32)};
    std::vector<Tile> ctl = {kb.alloc_sbuf(P, {n}, DType::f32), kb.alloc_sbuf(P, {n}, DType::f32)};
    work = {kb.alloc_sbuf(P, {s.state, n}, DType::f32)};   // one scan state per state index
    Tile a_cols = kb.alloc_sbuf(P, {s.state}, DType::f32);
    int k = 0, j = 0;
    for (uint32_t b = 0; b < s.batch; ++b)
        for (uint32_t ct = 0; ct < nct; ++ct) {
            const uint64_t row = uint64_t(b) * s.channels + ct * P;
            load(kb, a_cols.ap(), t.A.tile(ct * P, P, 0, s.state));
            for (uint32_t t0 = 0; t0 < s.seq; t0 += n, ++j) {
                const Tile& d = delta[j % 2];
                const Tile& du = delta_u[j % 2];
                const Tile& acc = accum[j % 2];
                load(kb, d.ap(), t.delta.tile(row, P, t0, n));
                load(kb, du.ap(), t.u.tile(row, P, t0, n));
                kb.tensor_tensor(du.ap(), d.ap(), du.ap(), AluOp::mul);
                kb.memset(acc.ap(), 0.0f);
                for (uint32_t st = 0; st < s.state; ++st) {
                    const AccessPattern w = entry(work[0], st);
                    const AccessPattern last = cols(w, n - 1, 1);
                    const int slot = k++ % 2;
                    const AccessPattern acc_ap = acc.ap();
                    state_step(kb, t, d.ap(), du.ap(), cols(a_cols.ap(), st, 1), delta_a[slot].ap(), bt[slot].ap(), ctl[slot].ap(), w,
                               &acc_ap, uint64_t(b) * s.state + st, t0, n, t0 > 0 ? &last : nullptr);
                }
                store(kb, t.out.tile(row, P, t0, n), acc.ap());
            }
        }
    return {kb.finish()};
}

}  // namespace trnsim::fidelity
