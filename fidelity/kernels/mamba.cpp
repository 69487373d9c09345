// The fused Mamba selective-scan kernels of the AWS NKI tutorial (fused_mamba.rst):
//   out[b, c, t] = sum_s C[b,s,t] * h_s[c,t],  h_s[c,t] = exp(delta*A[c,s]) * h_s[c,t-1] + delta*u*B[b,s,t]
// delta, u, out: [batch, channels, seq]; A: [channels, state]; B, C: [batch, state, seq]; fp32.
// Channels map to partitions in tiles of 128. ScalarE computes exp(delta * A) (activation with a
// per-partition scale), VectorE the products, the scan (tensor_tensor_scan) and the accumulation.
// B and C rows are broadcast across partitions the way the compiler lowers nl.broadcast_to (see
// RowBroadcast).
#include <algorithm>
#include <vector>

#include "common.h"
#include "kernels.h"

namespace trnsim::fidelity {

namespace {

constexpr uint32_t P = 128;

struct MambaTensors {
    HbmTensor delta, u, A, B, C, out;
};

MambaTensors mamba_tensors(HbmArena& hbm, const MambaShape& s) {
    MambaTensors t;
    t.delta = HbmTensor::make(hbm, DType::f32, uint64_t(s.batch) * s.channels, s.seq);
    t.u = HbmTensor::make(hbm, DType::f32, uint64_t(s.batch) * s.channels, s.seq);
    t.A = HbmTensor::make(hbm, DType::f32, s.channels, s.state);
    t.B = HbmTensor::make(hbm, DType::f32, uint64_t(s.batch) * s.state, s.seq);
    t.C = HbmTensor::make(hbm, DType::f32, uint64_t(s.batch) * s.state, s.seq);
    t.out = HbmTensor::make(hbm, DType::f32, uint64_t(s.batch) * s.channels, s.seq);
    return t;
}

constexpr uint32_t kPsumBankFp32 = 512;   // one 2 KiB PSUM bank of fp32 per partition

// nl.broadcast_to of a [1, n] row of B or C across the 128 partitions, lowered as the profiles of
// fused_mamba.rst show it (TensorE activity in kernels without a matmul): the row is loaded onto
// one partition and multiplied by a row of ones on the TensorE, one PSUM bank (512 fp32 columns)
// at a time. A row of up to 512 columns is read by VectorE straight from PSUM; a longer one does
// not fit a PSUM tile (one bank) and is copied bank by bank into an SBUF tile on ScalarE, the
// engine the compiler gives PSUM evictions the source leaves to it (NKIBench mamba, the compiled
// form of this loop nest, evicts its broadcasts there: published ScalarE 537 us, simulated 534).
// VectorE then waits on those copies, which is why v2 (whole-sequence tiles) runs slower than v3
// (512-column tiles) at seq 1024-6144 with the same VectorE instructions otherwise.
struct RowBroadcast {
    Tile ones;                  // [1, 128] of 1.0: the stationary operand
    Rotation staging;           // [1, 512] rows for broadcasts read from PSUM
    PsumRotation banks;
    RowBroadcast(KernelBuilder& kb)
        : ones(kb.alloc_sbuf(1, {P}, DType::f32)), staging(kb, 4, 1, {kPsumBankFp32}, DType::f32),
          banks(kb, 8, P, kPsumBankFp32) {
        kb.memset(ones.ap(), 1.0f);
    }
    // Row 'row' of t, columns [c0, c0+n), on all partitions. 'sbuf_tile' ([128, n]) receives it when
    // n exceeds a bank (its partition 0 also stages the row); otherwise the PSUM bank is returned.
    AccessPattern row(KernelBuilder& kb, const HbmTensor& t, uint64_t r, uint64_t c0, uint32_t n,
                      const AccessPattern& sbuf_tile) {
        if (n <= kPsumBankFp32) {
            const AccessPattern stage = cols(staging.take().ap(), 0, n);
            load(kb, stage, t.tile(r, 1, c0, n));
            const AccessPattern bank = cols(banks.take().ap(), 0, n);
            kb.matmul(bank, ones.ap(), stage, false);
            return bank;
        }
        const AccessPattern stage = sub(sbuf_tile, 0, 1);
        load(kb, stage, t.tile(r, 1, c0, n));
        return staged(kb, stage, n, sbuf_tile);
    }
    // A row of n > 512 columns already loaded into 'stage' (one partition), broadcast into sbuf_tile.
    AccessPattern staged(KernelBuilder& kb, const AccessPattern& stage, uint32_t n, const AccessPattern& sbuf_tile) {
        for (uint32_t c = 0; c < n; c += kPsumBankFp32) {
            const uint32_t w = std::min(kPsumBankFp32, n - c);
            const AccessPattern bank = cols(banks.take().ap(), 0, w);
            kb.matmul(bank, ones.ap(), cols(stage, c, w), false);
            kb.tensor_copy(cols(sbuf_tile, c, w), bank, Engine::Scalar);
        }
        return sbuf_tile;
    }
};

// h = scan(deltaA, b): work[i] = delta_a[i] * work[i-1] + b[i], from 'initial' (its last column
// carried from the previous sequence tile) or 0.
void scan(KernelBuilder& kb, const AccessPattern& work, const AccessPattern& delta_a, const AccessPattern& b,
          const AccessPattern* initial) {
    Instruction ins;
    ins.op = Opcode::tensor_tensor_scan;
    ins.engine = Engine::Vector;
    ins.dst = work;
    ins.src0 = delta_a;
    ins.src1 = b;
    ins.alu0 = AluOp::mul;
    ins.alu1 = AluOp::add;
    if (initial) {
        ins.src2 = *initial;
        ins.flags |= F_S1_AP;
    }
    kb.emit(ins);
}

// One state step on a [128, n] tile: deltaA = exp(delta*A_s); b = deltaU*B_s;
// work = scan(deltaA, b, initial); c = work*C_s (the state's contribution); accum += c
// when an accumulator is given. 'work' keeps the scan (its last column carries to the next tile).
void state_step(KernelBuilder& kb, RowBroadcast& bc, const MambaTensors& t, const AccessPattern& delta,
                const AccessPattern& delta_u, const AccessPattern& a_col, const AccessPattern& delta_a,
                const AccessPattern& b, const AccessPattern& c, const AccessPattern& work, const AccessPattern* accum,
                uint64_t bs_row, uint64_t c0, uint32_t n, const AccessPattern* initial) {
    kb.activation_ex(delta_a, delta, ActFunc::exp, 1.0f, &a_col, 0.0f, nullptr);
    // B and C may share one tile (when SBUF is short): C is then broadcast after the scan consumed B.
    const bool shared = b.space == c.space && b.offset == c.offset && b.start_partition == c.start_partition;
    const AccessPattern b_row = bc.row(kb, t.B, bs_row, c0, n, b);
    kb.tensor_tensor(b, delta_u, b_row, AluOp::mul);
    AccessPattern c_row;
    if (!shared) c_row = bc.row(kb, t.C, bs_row, c0, n, c);
    scan(kb, work, delta_a, b, initial);
    if (shared) c_row = bc.row(kb, t.C, bs_row, c0, n, c);
    kb.tensor_tensor(c, work, c_row, AluOp::mul);
    if (accum) kb.tensor_tensor(*accum, *accum, c, AluOp::add);
}

// A state step of v2 when delta and the accumulator are both spilled (seq 8192). 'delta_a' holds
// this state's reloaded delta (exponentiated in place) and partition 0 of 'work' this state's B row.
// Every transfer is issued as soon as its tile is free, as the compiler's scheduler places spill
// code: the next state's delta reload once the scan has read 'delta_a'; the partial sum's reload
// into the B tile once the scan has read it; the next B row into 'work' once the C product has
// read it; this state's C row into the C tile once the previous partial sum has been stored.
void spilled_state_step(KernelBuilder& kb, RowBroadcast& bc, const MambaTensors& t, const AccessPattern& delta_u,
                        const AccessPattern& a_col, const AccessPattern& delta_a, const AccessPattern& b,
                        const AccessPattern& c, const AccessPattern& work, uint64_t bs_row, uint32_t n,
                        const AccessPattern* next_delta, bool reload_sum, const AccessPattern& sum_hbm) {
    const AccessPattern row_stage = sub(work, 0, 1);
    kb.activation_ex(delta_a, delta_a, ActFunc::exp, 1.0f, &a_col, 0.0f, nullptr);
    load(kb, sub(c, 0, 1), t.C.tile(bs_row, 1, 0, n));
    const AccessPattern b_row = bc.staged(kb, row_stage, n, b);
    kb.tensor_tensor(b, delta_u, b_row, AluOp::mul);
    scan(kb, work, delta_a, b, nullptr);
    if (next_delta) load(kb, delta_a, *next_delta);
    if (reload_sum) load(kb, b, sum_hbm);
    const AccessPattern c_row = bc.staged(kb, sub(c, 0, 1), n, c);
    kb.tensor_tensor(c, work, c_row, AluOp::mul);
    if (next_delta) load(kb, row_stage, t.B.tile(bs_row + 1, 1, 0, n));
    if (reload_sum) kb.tensor_tensor(c, c, b, AluOp::add);
    store(kb, sum_hbm, c);
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
    RowBroadcast bc(kb);
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
                state_step(kb, bc, t, delta.ap(), u.ap(), a_col.ap(), delta_a.ap(), bt.ap(), ct_tile.ap(), work.ap(), &acc,
                           uint64_t(b) * s.state + st, 0, n, nullptr);
            }
        for (uint32_t ct = 0; ct < nct; ++ct)
            store(kb, t.out.tile(uint64_t(b) * s.channels + ct * P, P, 0, n), entry(accum, ct));
    }
    return {kb.finish()};
}

// v2: channel tile outside the state loop; delta, u and delta*u once per channel tile. The
// working set is [128, seq] fp32 tiles: delta, delta*u and the accumulator for the whole channel
// tile, and per state the exp result, B, C and the scan. The per-state tiles are double buffered
// (the compiler rotates tiles declared in a loop body) when 3 + 2 x 4 tiles fit SBUF. When not
// even 3 + 4 fit (seq >= 7168), the compiler spills: delta, an input, is rematerialised by
// reloading it from HBM for every state (into the exp result's tile, the exp runs in place). The
// reload cannot start before the previous state's scan has read that tile, so VectorE waits on it
// every state (the spill-reload waits of the 8K profile). With 6 tiles' room (seq 7168) B and C
// share a tile; with 5 (seq 8192: 6 x 32 KiB is the whole partition) B and C keep their tiles and
// the accumulator is spilled instead: each state's partial sum is reloaded from HBM, added to and
// stored back (the spill stores the 8K profile shows next to the reloads), with every transfer
// issued as soon as its tile is free (spilled_state_step).
std::vector<Program> mamba_v2(const ChipConfig& chip, const MambaShape& s) {
    KernelBuilder kb(chip, "mamba_v2");
    HbmArena hbm;
    MambaTensors t = mamba_tensors(hbm, s);
    const uint32_t nct = s.channels / P, n = s.seq;
    const uint64_t tile_bytes = (uint64_t(n) * 4 + 63) / 64 * 64, budget = chip.sbuf.bytes_per_partition - 1024;
    const bool spill = 7 * tile_bytes > budget, spill_accum = 6 * tile_bytes > budget;
    const int sets = 11 * tile_bytes > budget ? 1 : 2;
    Tile delta = spill ? Tile{} : kb.alloc_sbuf(P, {n}, DType::f32);
    Tile delta_u = kb.alloc_sbuf(P, {n}, DType::f32);
    Tile accum = spill_accum ? Tile{} : kb.alloc_sbuf(P, {n}, DType::f32);
    std::vector<Tile> delta_a, bt, ctl, work;
    for (int i = 0; i < sets; ++i) {
        delta_a.push_back(kb.alloc_sbuf(P, {n}, DType::f32));
        bt.push_back(kb.alloc_sbuf(P, {n}, DType::f32));
        ctl.push_back(spill && !spill_accum ? bt.back() : kb.alloc_sbuf(P, {n}, DType::f32));
        work.push_back(kb.alloc_sbuf(P, {n}, DType::f32));
    }
    Tile a_cols = kb.alloc_sbuf(P, {s.state}, DType::f32);
    RowBroadcast bc(kb);
    int k = 0;
    for (uint32_t b = 0; b < s.batch; ++b)
        for (uint32_t ct = 0; ct < nct; ++ct) {
            const uint64_t row = uint64_t(b) * s.channels + ct * P;
            const AccessPattern delta_hbm = t.delta.tile(row, P, 0, n), out_hbm = t.out.tile(row, P, 0, n);
            const AccessPattern delta_once = spill ? work[0].ap() : delta.ap();
            load(kb, delta_once, delta_hbm);
            load(kb, delta_u.ap(), t.u.tile(row, P, 0, n));
            load(kb, a_cols.ap(), t.A.tile(ct * P, P, 0, s.state));
            kb.tensor_tensor(delta_u.ap(), delta_once, delta_u.ap(), AluOp::mul);
            if (!spill_accum) kb.memset(accum.ap(), 0.0f);
            for (uint32_t st = 0; st < s.state; ++st) {
                const int set = k++ % sets;
                const AccessPattern da = delta_a[set].ap();
                if (spill_accum) {
                    if (st == 0) {
                        load(kb, da, delta_hbm);
                        load(kb, sub(work[set].ap(), 0, 1), t.B.tile(uint64_t(b) * s.state, 1, 0, n));
                    }
                    spilled_state_step(kb, bc, t, delta_u.ap(), cols(a_cols.ap(), st, 1), da, bt[set].ap(),
                                       ctl[set].ap(), work[set].ap(), uint64_t(b) * s.state + st, n,
                                       st + 1 < s.state ? &delta_hbm : nullptr, st > 0, out_hbm);
                    continue;
                }
                if (spill) load(kb, da, delta_hbm);   // rematerialised delta; exp in place
                const AccessPattern acc = accum.ap();
                state_step(kb, bc, t, spill ? da : delta.ap(), delta_u.ap(), cols(a_cols.ap(), st, 1), da,
                           bt[set].ap(), ctl[set].ap(), work[set].ap(), &acc, uint64_t(b) * s.state + st, 0, n,
                           nullptr);
            }
            if (!spill_accum) store(kb, out_hbm, accum.ap());
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
    RowBroadcast bc(kb);
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
                    state_step(kb, bc, t, d.ap(), du.ap(), cols(a_cols.ap(), st, 1), delta_a[slot].ap(), bt[slot].ap(), ctl[slot].ap(), w,
                               &acc_ap, uint64_t(b) * s.state + st, t0, n, t0 > 0 ? &last : nullptr);
                }
                store(kb, t.out.tile(row, P, t0, n), acc.ap());
            }
        }
    return {kb.finish()};
}

}  // namespace trnsim::fidelity
