// Blocked, double-buffered matmul on one physical NeuronCore (see ops/matmul_kernel.h; the split
// between the physical cores of a logical core is in matmul_spmd.cpp).
//
// Loop nest (per problem of the batch, per block of MB x NB outputs and KB contraction):
//   load B[k-block, n-block] and A^T[k-block, m-block] panels into SBUF in the order
//   the TensorE consumes them (column chunks of 512), then
//   for each 512-column n chunk (two at a time when both panels come straight from HBM, so that
//   each A^T tile is loaded into the TensorE once for both), for each 128-row m tile:
//       for each 128-deep k tile: nc_matmul into one PSUM bank per chunk (accumulate over k)
//       evacuate PSUM -> SBUF (Vector and Scalar alternate) through the epilogue
//       (alpha, addend, the caller's epilogue hook), DMA to HBM.
//   An output tile's addend (and whatever the caller's prologue hook loads) is loaded before
//   the tile's matmuls.
// Panels are double buffered, PSUM banks and output staging tiles rotate, so
// loads, matmuls, evacuations and stores of neighbouring tiles overlap. Operands
// stored the other way round (A as [M,K], B as [N,K], e.g. a Linear weight) are
// loaded in [128 rows, 512 k] pieces through a deep ring and transposed on the
// TensorE into the panels; those transposes are interleaved with the matmuls (each
// m tile first runs the transposes it needs plus a share of the next chunk's), and
// a transposed B panel serves every m tile of its block.
// Column sums of A (MatmulArgs::a_column_sums): while the n blocks sweep A for the first time,
// each block's A^T panel (K on partitions) is reduced along its free axis on the GpSimd, which a
// matmul otherwise leaves idle, into fp32 sums per k; at the end they are transposed on the
// TensorE into rows and stored, rounded once.
#include <algorithm>
#include <array>
#include <tuple>

#include "trnsim/ops/matmul_kernel.h"

namespace trnsim {

namespace {

constexpr uint32_t kTileM = 128;   // stationary free size (PE columns)
constexpr uint32_t kTileK = 128;   // contraction (partitions)
constexpr uint32_t kTileN = 512;   // moving free size (one PSUM bank of fp32)
// PSUM banks in flight for matmul outputs: all 8 (two groups of four chunks, see group_chunks),
// or 4 when transposes take the other 4 (fewer transpose banks stall the TensorE on the copies
// out of them).
constexpr int kPsumRotation = 8;
constexpr uint32_t kMaxGroupChunks = 4;   // B chunks per A^T stationary
constexpr int kPsumRotationWithTransposes = 4;
constexpr int kTransposeBanks = 4;
constexpr int kStagingRotation = 8;    // output tiles in flight to HBM
constexpr int kAddendRotation = kMatmulTilesInFlight;   // addend tiles (loaded before their tile's matmuls)
// Pieces of operands stored the other way round ([rows, K] instead of [K, rows]): each holds
// up to 4 k tiles of 128 rows, loads with one DMA per k tile (several queues at once) and is
// transposed on the TensorE. The ring is deep enough that the loads run well ahead of the
// transposes: one DMA carries a fixed latency of about a microsecond.
constexpr uint32_t kPieceTiles = 4;
constexpr int kPieceRotation = 16;

uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }
uint32_t round_up(uint32_t a, uint32_t b) { return ceil_div(a, b) * b; }

// Row 'kt' of a panel tile laid out [partitions][nkt][width]: columns [c0, c0+n) of partitions [0, rows).
AccessPattern panel_ap(const Tile& t, uint32_t kt, uint32_t width, uint32_t rows, uint32_t c0, uint32_t n) {
    AccessPattern ap = t.rows(0, rows);
    ap.ndim = 1;
    ap.offset = t.offset + (static_cast<uint64_t>(kt) * width + c0) * dtype_size(t.dtype);
    ap.size = {n, 1, 1, 1};
    ap.stride = {1, 0, 0, 0};
    return ap;
}

// A matrix of stored rows in HBM.
struct HbmMatrix {
    uint64_t base;
    uint8_t arg;
    DType dtype;
    int64_t row_stride, col_stride, batch_stride;   // elements

    // Rows [r0, r0+rows) x columns [c0, c0+cols) of problem 'batch_index'; rows map to partitions.
    AccessPattern block(uint32_t batch_index, uint32_t r0, uint32_t rows, uint32_t c0, uint32_t cols) const {
        const int64_t elem = static_cast<int64_t>(batch_index) * batch_stride + static_cast<int64_t>(r0) * row_stride +
                             static_cast<int64_t>(c0) * col_stride;
        AccessPattern ap = hbm_matrix_ap(base + static_cast<uint64_t>(elem * static_cast<int64_t>(dtype_size(dtype))),
                                         dtype, rows, cols, row_stride);
        ap.stride[0] = col_stride;
        ap.arg = arg;
        return ap;
    }
};

struct Blocking {
    uint32_t MB, NB, KB;
};

// Panels are double buffered only when there is a next panel to prefetch.
int a_buffers(const MatmulArgs& a, const Blocking& b) { return (a.M > b.MB || a.K > b.KB || a.batch > 1) ? 2 : 1; }
int b_buffers(const MatmulArgs& a, const Blocking& b) {
    return (a.N > b.NB || a.K > b.KB || (a.batch > 1 && a.b_batch_stride != 0)) ? 2 : 1;
}

bool has_epilogue_operand(const MatmulArgs& a) { return a.accumulate || a.addend.present; }

// Which operands stored the other way round are transposed on the way in by the DMA (chips with
// dma_transpose, 2- and 4-byte floats) instead of through row pieces and TensorE transposes.
struct DmaTransposes {
    bool a = false, b = false;
    bool pieces(const MatmulArgs& m) const { return (!m.a_transposed && !a) || (m.b_transposed && !b); }
};

DmaTransposes dma_transposes(const KernelBuilder& kb, const MatmulArgs& a) {
    auto ok = [&](DType dt) { return kb.has_dma_transpose() && (dt == DType::bf16 || dt == DType::f16 || dt == DType::f32); };
    return {!a.a_transposed && ok(a.a_dtype), a.b_transposed && ok(a.b_dtype)};
}

uint64_t align64(uint64_t bytes) { return (bytes + 63) / 64 * 64; }

// SBUF of the column sums of A: the fp32 sums per k (k tile by k tile along the free axis), the
// sums of one block's panel, and the rows of the transposed result.
uint64_t column_sums_sbuf(const MatmulArgs& a, const Blocking& b) {
    return align64(ceil_div(a.K, kTileK) * 4) + align64(ceil_div(b.KB, kTileK) * 4) +
           align64(kTileK * dtype_size(a.a_column_sums.dtype));
}

uint64_t sbuf_need(const MatmulArgs& a, const Blocking& b, bool k_blocked, bool pieces) {
    uint64_t nkt = ceil_div(b.KB, kTileK);
    uint64_t need = a_buffers(a, b) * nkt * b.MB * dtype_size(a.a_dtype)     // A^T panels
                    + b_buffers(a, b) * nkt * b.NB * dtype_size(a.b_dtype)   // B panels
                    + kStagingRotation * kTileN * dtype_size(a.c_dtype);     // output staging
    if (has_epilogue_operand(a)) need += kAddendRotation * kTileN * 4;       // addend tiles (fp32)
    if (a.alpha != 1.0f) need += kTileN * 4;                                 // scaled product (fp32)
    if (pieces)                                                              // row pieces
        need += kPieceRotation * kPieceTiles * kTileK * std::max(dtype_size(a.a_dtype), dtype_size(a.b_dtype));
    if (k_blocked) need += static_cast<uint64_t>(ceil_div(b.MB, kTileM)) * b.NB * 4;        // fp32 accumulators
    if (a.a_column_sums.present) need += column_sums_sbuf(a, b);                             // column sums of A
    return need + 64 * 24;   // alignment slack
}

Blocking choose_blocking(const MatmulArgs& a, uint64_t budget, bool pieces) {
    Blocking b{std::min(round_up(a.M, kTileM), 2048u), std::min(round_up(a.N, kTileN), 2048u),
               std::max(kTileK, round_up(a.K, kTileK))};
    while (sbuf_need(a, b, b.KB < a.K, pieces) > budget) {
        if (b.KB > 2048) b.KB = round_up(b.KB / 2, kTileK);
        else if (b.MB > kTileM * 4) b.MB = round_up(b.MB / 2, kTileM);
        else if (b.KB > 1024 && b.NB > 2 * kTileN) b.KB = round_up(b.KB / 2, kTileK);   // keeps 4-chunk groups
        else if (b.NB > kTileN) b.NB = round_up(b.NB / 2, kTileN);
        else if (b.KB > kTileK) b.KB = round_up(b.KB / 2, kTileK);
        else if (b.MB > kTileM) b.MB = round_up(b.MB / 2, kTileM);
        else throw IsaError("matmul: operands do not fit SBUF even with minimal blocking");
    }
    return b;
}

// Stores 'count' elements of a vector from SBUF rows of 128 (element e0 + 128 p + i in partition p,
// column i of 'rows'): the whole rows in one transfer ('store' may split it), the rest in another.
void store_vector_rows(const MatmulColumnSums& out, const Tile& rows, uint64_t e0, uint64_t count,
                       const MatmulDma& store) {
    const uint64_t whole = count / kTileK, rest = count % kTileK, esz = dtype_size(out.dtype);
    auto hbm_rows = [&](uint64_t first, uint32_t n, uint32_t width) {
        AccessPattern ap = hbm_matrix_ap(out.addr + (e0 + first) * esz, out.dtype, n, width, kTileK);
        ap.arg = out.arg;
        return ap;
    };
    if (whole) store(hbm_rows(0, static_cast<uint32_t>(whole), kTileK), rows.region(0, static_cast<uint32_t>(whole), 0, kTileK));
    if (rest)
        store(hbm_rows(whole * kTileK, 1, static_cast<uint32_t>(rest)),
              rows.region(static_cast<uint32_t>(whole), 1, 0, static_cast<uint32_t>(rest)));
}

// [P, n] view of columns [c0, c0 + n) of each of 'groups' consecutive runs of 'width' columns of a
// tile ([P, groups * width] in SBUF order), e.g. k tiles of an A^T panel: [P, groups, n].
AccessPattern tile_runs(const Tile& t, uint32_t p, uint32_t first_run, uint32_t groups, uint32_t width, uint32_t n) {
    AccessPattern ap = t.rows(0, p);
    ap.offset = t.offset + static_cast<uint64_t>(first_run) * width * dtype_size(t.dtype);
    ap.ndim = 2;
    ap.size = {groups, n, 1, 1};
    ap.stride = {static_cast<int64_t>(width), 1, 0, 0};
    return ap;
}

}  // namespace

void build_matmul_on_core(KernelBuilder& kb, const MatmulArgs& args) {
    MatmulArgs a = args;
    const MatmulColumnSums& col_sums = a.a_column_sums;
    if (col_sums.present) {
        if (a.batch != 1) throw IsaError("matmul: column sums of A need batch == 1");
        if (a.N == 0 && a.M > 0 && a.K > 0) throw IsaError("matmul: column sums of A need N > 0");
        if (a.M == 0 && a.K > 0) {   // sums over no rows: zeros
            const Tile rows = kb.alloc_sbuf(kTileK, {kTileK}, col_sums.dtype);
            kb.memset(rows.ap(), 0.0f, Engine::GpSimd);
            const MatmulDma store = [&](const AccessPattern& dst, const AccessPattern& src) { kb.dma_copy(dst, src); };
            for (uint64_t e0 = 0; e0 < a.K; e0 += kTileK * kTileK)
                store_vector_rows(col_sums, rows, e0, std::min<uint64_t>(kTileK * kTileK, a.K - e0), store);
            kb.release(rows);
            return;
        }
    }
    if (a.M == 0 || a.N == 0 || a.batch == 0) return;
    if (a.accumulate && a.addend.present)
        throw IsaError("matmul: 'accumulate' and an addend cannot be combined (pass C as the addend)");
    if (a.lda == 0) a.lda = a.a_transposed ? a.M : a.K;
    if (a.ldb == 0) a.ldb = a.b_transposed ? a.K : a.N;
    if (a.ldc == 0) a.ldc = a.N;
    // A stored [M,K] or [K,M]; B stored [K,N] or [N,K]; C [M,N].
    const HbmMatrix A{a.a, a.a_arg, a.a_dtype, a.lda, a.a_col_stride, a.a_batch_stride};
    const HbmMatrix B{a.b, a.b_arg, a.b_dtype, a.ldb, a.b_col_stride, a.b_batch_stride};
    const HbmMatrix C{a.c, a.c_arg, a.c_dtype, a.ldc, a.c_col_stride, a.c_batch_stride};
    MatmulAddend addend = a.addend;
    if (a.accumulate) addend = {true, a.c, a.c_arg, a.c_dtype, a.ldc, a.c_col_stride, a.c_batch_stride, 1.0f};
    const bool has_addend = addend.present && addend.beta != 0.0f;   // beta = 0 ignores D (even NaN), like torch
    const HbmMatrix D{addend.addr, addend.arg, addend.dtype, addend.row_stride, addend.col_stride, addend.batch_stride};

    const ChipConfig& chip = kb.chip();
    const DmaTransposes dma_t = dma_transposes(kb, a);
    // SBUF the caller already holds (e.g. a fused epilogue's tiles) is not available to the panels.
    const Blocking blk =
        choose_blocking(a, (chip.sbuf.bytes_per_partition - kb.sbuf_bytes_in_use()) * 85 / 100, dma_t.pieces(a));
    const bool k_blocked = blk.KB < a.K;
    const uint32_t nkt_max = ceil_div(blk.KB, kTileK);

    const int n_a_panels = a_buffers(a, blk), n_b_panels = b_buffers(a, blk);
    std::array<Tile, 2> a_panel, b_panel;
    for (int i = 0; i < n_a_panels; ++i) a_panel[i] = kb.alloc_sbuf(kTileK, {nkt_max, blk.MB}, a.a_dtype);
    for (int i = 0; i < n_b_panels; ++i) b_panel[i] = kb.alloc_sbuf(kTileK, {nkt_max, blk.NB}, a.b_dtype);
    // Row pieces (raw bytes, viewed in the dtype of the operand being transposed).
    const bool any_transposed_load = dma_t.pieces(a);
    const DType piece_dtype = dtype_size(a.a_dtype) >= dtype_size(a.b_dtype) ? a.a_dtype : a.b_dtype;
    std::vector<Tile> pieces;
    if (any_transposed_load)
        for (int i = 0; i < kPieceRotation; ++i) pieces.push_back(kb.alloc_sbuf(kTileM, {kPieceTiles * kTileK}, piece_dtype));
    std::array<Tile, kStagingRotation> staging;
    for (auto& t : staging) t = kb.alloc_sbuf(kTileM, {kTileN}, a.c_dtype);
    std::array<Tile, kAddendRotation> d_in;
    if (has_addend)
        for (auto& t : d_in) t = kb.alloc_sbuf(kTileM, {kTileN}, DType::f32);
    Tile scaled;
    if (a.alpha != 1.0f) scaled = kb.alloc_sbuf(kTileM, {kTileN}, DType::f32);
    Tile zeros;   // K == 0: the product is zero
    if (a.K == 0) {
        zeros = kb.alloc_sbuf(kTileM, {kTileN}, DType::f32);
        kb.memset(zeros.ap(), 0.0f);
    }
    std::vector<Tile> acc;
    if (k_blocked)
        for (uint32_t i = 0; i < ceil_div(blk.MB, kTileM); ++i) acc.push_back(kb.alloc_sbuf(kTileM, {blk.NB}, DType::f32));
    std::vector<Tile> psum(any_transposed_load ? kPsumRotationWithTransposes : kPsumRotation);
    for (auto& t : psum) t = kb.alloc_psum(kTileM, kTileN);
    std::array<Tile, kTransposeBanks> psum_t;
    if (any_transposed_load)
        for (auto& t : psum_t) t = kb.alloc_psum(kTileK, kTileN);
    // Column sums of A: fp32 sums per k ([k within its tile, k tile]), one block's panel sums, and
    // the rows of the result. The sums are zeroed first: a ragged last k tile leaves partitions
    // unwritten that the final transpose reads.
    const bool column_sums = col_sums.present && a.K > 0;
    Tile cs_total, cs_block, cs_rows;
    if (column_sums) {
        cs_total = kb.alloc_sbuf(kTileK, {ceil_div(a.K, kTileK)}, DType::f32);
        cs_block = kb.alloc_sbuf(kTileK, {nkt_max}, DType::f32);
        cs_rows = kb.alloc_sbuf(kTileK, {kTileK}, col_sums.dtype);
        kb.memset(cs_total.ap(), 0.0f, Engine::GpSimd);
    }

    // Stores use their own DMA queues at the end of the range, so after the first prefetches a
    // store never waits behind a load.
    const uint32_t store_queues = std::max(1u, chip.dma.queues / 4);
    const uint32_t load_queues = chip.dma.queues;   // stores use the last store_queues of them
    // Loads take every queue until the first store; after it they keep off the store queues,
    // where they would wait behind the bursts of stores at the end of each block.
    uint32_t load_next = 0, store_next = 0;
    bool stored = false;
    auto load_queue = [&] {
        return static_cast<int>(load_next++ % (stored ? load_queues - store_queues : load_queues));
    };
    auto load = [&](const AccessPattern& dst, const AccessPattern& src) { kb.dma_copy(dst, src, load_queue()); };
    auto load_transposed = [&](const AccessPattern& dst, const AccessPattern& src) {
        kb.dma_transpose(dst, src, load_queue());
    };
    // A store is split by partition groups over the store queues to shorten the kernel's tail.
    auto store = [&](const AccessPattern& dst, const AccessPattern& src) {
        const uint32_t rows = src.partitions, groups = std::min(store_queues, ceil_div(rows, 32));
        const uint32_t per = ceil_div(rows, groups);
        for (uint32_t p0 = 0; p0 < rows; p0 += per) {
            const uint32_t np = std::min(per, rows - p0);
            AccessPattern d = dst, s = src;
            d.offset += static_cast<uint64_t>(static_cast<int64_t>(p0) * dst.partition_stride *
                                              static_cast<int64_t>(dtype_size(dst.dtype)));
            d.partitions = static_cast<uint16_t>(np);
            s.start_partition = static_cast<uint16_t>(s.start_partition + p0);
            s.partitions = static_cast<uint16_t>(np);
            kb.dma_copy(d, s, static_cast<int>(load_queues - store_queues + store_next++ % store_queues));
        }
        stored = true;
    };
    // The prologue's and epilogue's transfers rotate over the queues before the store queues.
    uint32_t hook_next = 0;
    const MatmulDma hook_dma = [&](const AccessPattern& dst, const AccessPattern& src) {
        kb.dma_copy(dst, src, static_cast<int>(hook_next++ % std::max(1u, load_queues - store_queues)));
    };

    int psum_next = 0, staging_next = 0, evac_next = 0, tpose_next = 0, d_next = 0;
    int a_buf = 0, b_buf = 0;
    std::tuple<int64_t, uint32_t, uint32_t> b_loaded_key{-1, 0, 0};
    // A broadcast addend row (row stride 0, beta 1) is loaded once per column chunk (one entry per
    // chunk of a group, see group_chunks).
    const bool addend_reusable = has_addend && addend.row_stride == 0 && addend.beta == 1.0f;
    std::array<int64_t, kMaxGroupChunks> d_loaded_key;
    d_loaded_key.fill(-1);
    std::array<int, kMaxGroupChunks> d_loaded_slot{};

    // The addend rows of one output tile, loaded into the next d_in slot (split by partition
    // groups over the load queues, so the load takes one group's time); a broadcast row is
    // loaded once per column chunk. Called before the tile's matmuls so that the load is there
    // when its sum leaves PSUM.
    auto prepare_addend = [&](uint32_t bi, uint32_t row0, uint32_t ms, uint32_t col0, uint32_t ns) -> const Tile* {
        if (!has_addend) return nullptr;
        const int64_t key = static_cast<int64_t>(bi) * addend.batch_stride + static_cast<int64_t>(col0) * addend.col_stride;
        const size_t entry = (col0 / kTileN) % kMaxGroupChunks;
        if (addend_reusable && key == d_loaded_key[entry]) return &d_in[d_loaded_slot[entry]];
        const Tile* dt = &d_in[d_next];
        const uint32_t rows = addend_reusable ? std::min(kTileM, a.M) : ms;
        for (uint32_t p0 = 0; p0 < rows; p0 += 32) {
            const uint32_t np = std::min(32u, rows - p0);
            load(dt->region(p0, np, 0, ns), D.block(bi, row0 + (addend_reusable ? 0 : p0), np, col0, ns));
        }
        if (addend.beta != 1.0f)
            kb.tensor_scalar(dt->region(0, rows, 0, ns), dt->region(0, rows, 0, ns), AluOp::mul, addend.beta,
                             AluOp::bypass, 0.0f, Engine::GpSimd);
        d_loaded_key[entry] = addend_reusable ? key : -1;
        d_loaded_slot[entry] = d_next;
        d_next = (d_next + 1) % kAddendRotation;
        return dt;
    };

    // Writes one output tile from its fp32 sum (PSUM or SBUF; plus 'last_part' from PSUM when the
    // sum is an SBUF accumulator of earlier K blocks): alpha, the addend, rounding, store.
    auto finish_tile = [&](const AccessPattern& sum, const AccessPattern* last_part, uint32_t bi, uint32_t row0,
                           uint32_t ms, uint32_t col0, uint32_t ns, Engine evac, const Tile* addend_tile = nullptr) {
        const Tile& st = staging[staging_next];
        staging_next = (staging_next + 1) % kStagingRotation;
        const AccessPattern st_ap = st.region(0, ms, 0, ns);
        if (last_part) {
            if (!has_addend && a.alpha == 1.0f) {
                kb.tensor_tensor(st_ap, sum, *last_part, AluOp::add, Engine::Vector);
                if (a.epilogue) a.epilogue(kb, st_ap, bi, row0, col0, hook_dma);
                store(C.block(bi, row0, ms, col0, ns), st_ap);
                return;
            }
            kb.tensor_tensor(sum, sum, *last_part, AluOp::add, Engine::Vector);
        }
        AccessPattern product = sum;
        if (a.alpha != 1.0f) {
            product = scaled.region(0, ms, 0, ns);
            kb.activation(has_addend ? product : st_ap, sum, ActFunc::identity, a.alpha);
        }
        if (has_addend) {
            const Tile* dt = addend_tile ? addend_tile : prepare_addend(bi, row0, ms, col0, ns);
            kb.tensor_tensor(st_ap, product, dt->region(0, ms, 0, ns), AluOp::add, Engine::Vector);
        } else if (a.alpha == 1.0f) {
            kb.tensor_copy(st_ap, sum, evac);
        }
        if (a.epilogue) a.epilogue(kb, st_ap, bi, row0, col0, hook_dma);
        store(C.block(bi, row0, ms, col0, ns), st_ap);
    };

    if (a.K == 0) {
        for (uint32_t bi = 0; bi < a.batch; ++bi)
            for (uint32_t n0 = 0; n0 < a.N; n0 += kTileN)
                for (uint32_t m0 = 0; m0 < a.M; m0 += kTileM) {
                    const uint32_t ms = std::min(kTileM, a.M - m0), ns = std::min(kTileN, a.N - n0);
                    if (a.prologue) a.prologue(kb, bi, m0, ms, n0, ns, hook_dma);
                    finish_tile(zeros.region(0, ms, 0, ns), nullptr, bi, m0, ms, n0, ns,
                                (evac_next++ & 1) ? Engine::Scalar : Engine::Vector);
                }
    }

    // One piece of an operand stored the other way round: rows [r0, r0+n) x k tiles [kt0, kt0+group)
    // of the block starting at k0, transposed into panel columns [c0, c0+n) of those k tiles. Up to
    // 4 transposes fill one PSUM bank and leave it with one copy.
    struct TransposeJob {
        const HbmMatrix* src;
        const Tile* panel;
        uint32_t width, bi, r0, n, k0, kbsz, kt0, group, c0;
    };
    auto piece_of = [&](const TransposeJob& j, uint64_t seq) {
        Tile piece = pieces[seq % kPieceRotation];
        piece.dtype = j.src->dtype;
        return piece;
    };
    auto load_job = [&](const TransposeJob& j, uint64_t seq) {
        const Tile piece = piece_of(j, seq);
        for (uint32_t g = 0; g < j.group; ++g) {
            const uint32_t kc = (j.kt0 + g) * kTileK, ks = std::min(kTileK, j.kbsz - kc);
            load(piece.region(0, j.n, g * kTileK, ks), j.src->block(j.bi, j.r0, j.n, j.k0 + kc, ks));
        }
    };
    auto transpose_job = [&](const TransposeJob& j, uint64_t seq) {
        const Tile piece = piece_of(j, seq);
        const uint32_t ks_last = std::min(kTileK, j.kbsz - (j.kt0 + j.group - 1) * kTileK);
        const Tile& pt = psum_t[tpose_next];
        tpose_next = (tpose_next + 1) % kTransposeBanks;
        for (uint32_t g = 0; g < j.group; ++g) {
            const uint32_t ks = g + 1 < j.group ? kTileK : ks_last;
            kb.transpose(pt.region(0, ks, g * kTileM, j.n), piece.region(0, j.n, g * kTileK, ks));
        }
        const uint32_t ks = j.group > 1 ? kTileK : ks_last;   // a ragged k tile is always alone
        AccessPattern from = pt.region(0, ks, 0, j.n), to = panel_ap(*j.panel, j.kt0, j.width, ks, j.c0, j.n);
        from.ndim = to.ndim = 2;
        from.size = to.size = {j.group, j.n, 1, 1};
        from.stride = {kTileM, 1, 0, 0};
        to.stride = {j.width, 1, 0, 0};
        kb.tensor_copy(to, from, (evac_next++ & 1) ? Engine::Scalar : Engine::Vector);
    };
    // The jobs of a block run in order; job x (of the whole kernel) uses piece x % kPieceRotation,
    // so its load may be issued once the transposes of job x - kPieceRotation are emitted: loads run
    // up to a ring's depth ahead of the transposes.
    std::vector<TransposeJob> jobs;
    uint64_t job_base = 0;
    size_t jobs_loaded = 0, jobs_done = 0;
    auto run_jobs = [&](size_t upto) {
        upto = std::min(upto, jobs.size());
        while (jobs_done < upto) {
            const size_t load_upto = std::min(jobs.size(), jobs_done + kPieceRotation);
            for (; jobs_loaded < load_upto; ++jobs_loaded) load_job(jobs[jobs_loaded], job_base + jobs_loaded);
            transpose_job(jobs[jobs_done], job_base + jobs_done);
            ++jobs_done;
        }
    };
    // The jobs of rows [r0, r0+count) of a block, in the order the matmuls need them.
    auto transpose_jobs = [&](std::vector<TransposeJob>& jobs, const HbmMatrix& src, const Tile& panel,
                              uint32_t width, uint32_t bi, uint32_t r0, uint32_t count, uint32_t k0, uint32_t kbsz,
                              uint32_t c0) {
        const uint32_t nkt = ceil_div(kbsz, kTileK), full_kt = kbsz / kTileK;
        for (uint32_t r = 0; r < count; r += kTileM)
            for (uint32_t kt0 = 0; kt0 < nkt;) {
                const uint32_t group = kt0 < full_kt ? std::min(kPieceTiles, full_kt - kt0) : 1;
                jobs.push_back({&src, &panel, width, bi, r0 + r, std::min(kTileM, count - r), k0, kbsz, kt0, group,
                                c0 + r});
                kt0 += group;
            }
    };

    // Panel chunks straight from HBM: stored [K, cols], or [cols, K] transposed by the DMA.
    auto load_b_chunk_of = [&](const Tile& bp, uint32_t bi, uint32_t n0, uint32_t nb, uint32_t k0, uint32_t kbsz,
                               uint32_t c0) {
        const uint32_t cn = std::min(kTileN, nb - c0);
        for (uint32_t kt = 0; kt * kTileK < kbsz; ++kt) {
            const uint32_t ks = std::min(kTileK, kbsz - kt * kTileK);
            const AccessPattern dst = panel_ap(bp, kt, blk.NB, ks, c0, cn);
            if (dma_t.b) load_transposed(dst, B.block(bi, n0 + c0, cn, k0 + kt * kTileK, ks));
            else load(dst, B.block(bi, k0 + kt * kTileK, ks, n0 + c0, cn));
        }
    };
    auto load_a_chunk_of = [&](const Tile& ap, uint32_t bi, uint32_t m0, uint32_t k0, uint32_t kbsz, uint32_t c0,
                               uint32_t width) {
        for (uint32_t kt = 0; kt * kTileK < kbsz; ++kt) {
            const uint32_t ks = std::min(kTileK, kbsz - kt * kTileK);
            const AccessPattern dst = panel_ap(ap, kt, blk.MB, ks, c0, width);
            if (dma_t.a) load_transposed(dst, A.block(bi, m0 + c0, width, k0 + kt * kTileK, ks));
            else load(dst, A.block(bi, k0 + kt * kTileK, ks, m0 + c0, width));
        }
    };
    // Without transposes on the TensorE (both panels come straight from HBM), the panels of the
    // next block are loaded while the current one computes, from just after its first output
    // tile: issued at the top of their own block, they would queue on the DMA engines behind the
    // current block's last stores and leave the TensorE waiting at every block boundary.
    const bool direct = (a.a_transposed || dma_t.a) && (!a.b_transposed || dma_t.b);
    // In direct mode each A^T tile serves up to four 512-column chunks of B back to back, so the
    // TensorE loads each stationary once per four matmuls (load_stationary_background; the
    // blocking keeps NB at 2048 where it can). The kernel's first chunk runs alone, so that the
    // first matmuls wait for one chunk of B only.
    const uint32_t group_chunks = direct ? kMaxGroupChunks : 1;
    auto chunks_in_group = [&](bool first_block, uint32_t nc, uint32_t nb) {
        return first_block && nc == 0 ? 1u : std::min(group_chunks, ceil_div(nb - nc, kTileN));
    };
    struct Issued {
        int a_buf = 0, b_buf = 0;
        bool load_b = false;
        uint32_t b_cols = 0;   // columns of B's panel loaded so far (direct mode)
    };
    // Rotates the panel buffers for block (bi, n0, m0, k0) and, in direct mode, loads B's first
    // chunk (when B changes) and all of A.
    auto issue = [&](uint32_t bi, uint32_t n0, uint32_t m0, uint32_t k0) {
        Issued is;
        const std::tuple<int64_t, uint32_t, uint32_t> b_key{static_cast<int64_t>(bi) * a.b_batch_stride, n0, k0};
        is.load_b = b_key != b_loaded_key;
        if (is.load_b) {
            b_buf = (b_buf + 1) % n_b_panels;
            b_loaded_key = b_key;
        }
        a_buf = (a_buf + 1) % n_a_panels;
        is.a_buf = a_buf;
        is.b_buf = b_buf;
        if (!direct) return is;
        const uint32_t nb = std::min(blk.NB, a.N - n0), mb = std::min(blk.MB, a.M - m0),
                       kbsz = std::min(blk.KB, a.K - k0);
        if (is.load_b) {
            is.b_cols = std::min(nb, chunks_in_group(bi == 0 && n0 == 0 && m0 == 0 && k0 == 0, 0, nb) * kTileN);
            for (uint32_t c0 = 0; c0 < is.b_cols; c0 += kTileN) load_b_chunk_of(b_panel[is.b_buf], bi, n0, nb, k0, kbsz, c0);
        }
        for (uint32_t c0 = 0; c0 < mb; c0 += kTileN)
            load_a_chunk_of(a_panel[is.a_buf], bi, m0, k0, kbsz, c0, std::min(kTileN, mb - c0));
        return is;
    };
    // The block after (bi, n0, m0, k0) in loop order (false after the last).
    auto next_block = [&](uint32_t& bi, uint32_t& n0, uint32_t& m0, uint32_t& k0) {
        if ((k0 += blk.KB) < a.K) return true;
        k0 = 0;
        if ((m0 += blk.MB) < a.M) return true;
        m0 = 0;
        if ((n0 += blk.NB) < a.N) return true;
        n0 = 0;
        return ++bi < a.batch;
    };
    // Adds sum over the mb columns of each k row of panel 'ap' (block m0, k0) into cs_total: whole
    // k tiles in one reduce, a ragged last tile (ks partitions) in another; the first M block
    // writes the sums directly, later ones add them.
    auto reduce_panel = [&](const Tile& ap, uint32_t m0, uint32_t mb, uint32_t k0, uint32_t kbsz) {
        const uint32_t whole = kbsz / kTileK, ragged = kbsz % kTileK, kt0 = k0 / kTileK;
        auto reduce = [&](uint32_t p, uint32_t kt, uint32_t n) {
            const AccessPattern src = tile_runs(ap, p, kt, n, blk.MB, mb);
            const AccessPattern total = cs_total.region(0, p, kt0 + kt, n);
            if (m0 == 0) {
                kb.tensor_reduce(total, src, ReduceOp::add, 1, Engine::GpSimd);
                return;
            }
            const AccessPattern part = cs_block.region(0, p, kt, n);
            kb.tensor_reduce(part, src, ReduceOp::add, 1, Engine::GpSimd);
            kb.tensor_tensor(total, total, part, AluOp::add, Engine::GpSimd);
        };
        if (whole) reduce(kTileK, 0, whole);
        if (ragged) reduce(ragged, whole, 1);
    };
    // The sums per k, [k within its tile, k tile], transposed into rows of 128 consecutive k
    // (128 k tiles at a time), rounded and stored.
    auto store_column_sums = [&] {
        const uint32_t k_tiles = ceil_div(a.K, kTileK);
        for (uint32_t g0 = 0; g0 < k_tiles; g0 += kTileK) {
            const uint32_t gn = std::min(kTileK, k_tiles - g0);
            const AccessPattern pt = psum[psum_next].region(0, gn, 0, kTileK);
            psum_next = (psum_next + 1) % static_cast<int>(psum.size());
            kb.transpose(pt, cs_total.region(0, kTileK, g0, gn));
            kb.tensor_copy(cs_rows.region(0, gn, 0, kTileK), pt, (evac_next++ & 1) ? Engine::Scalar : Engine::Vector);
            const uint64_t e0 = static_cast<uint64_t>(g0) * kTileK;
            store_vector_rows(col_sums, cs_rows, e0, std::min<uint64_t>(static_cast<uint64_t>(gn) * kTileK, a.K - e0),
                              store);
        }
    };

    Issued pending;
    if (direct && a.K > 0) pending = issue(0, 0, 0, 0);

    for (uint32_t bi = 0; bi < a.batch && a.K > 0; ++bi) {
        for (uint32_t n0 = 0; n0 < a.N; n0 += blk.NB) {
            const uint32_t nb = std::min(blk.NB, a.N - n0);
            for (uint32_t m0 = 0; m0 < a.M; m0 += blk.MB) {
                const uint32_t mb = std::min(blk.MB, a.M - m0);
                for (uint32_t k0 = 0; k0 < a.K; k0 += blk.KB) {
                    const uint32_t kbsz = std::min(blk.KB, a.K - k0);
                    const uint32_t nkt = ceil_div(kbsz, kTileK);
                    const bool first_k = k0 == 0, last_k = k0 + blk.KB >= a.K;

                    // ---- loads, in consumption order (direct mode: issued during the block before)
                    const Issued cur = direct ? pending : issue(bi, n0, m0, k0);
                    const bool load_b = cur.load_b;
                    const Tile& ap = a_panel[cur.a_buf];
                    const Tile& bp = b_panel[cur.b_buf];
                    bool next_issued = !direct;
                    auto issue_next = [&] {
                        if (next_issued) return;
                        next_issued = true;
                        uint32_t nbi = bi, nn0 = n0, nm0 = m0, nk0 = k0;
                        if (next_block(nbi, nn0, nm0, nk0)) pending = issue(nbi, nn0, nm0, nk0);
                    };
                    auto load_b_chunk = [&](uint32_t c0) { load_b_chunk_of(bp, bi, n0, nb, k0, kbsz, c0); };
                    auto load_a_chunk = [&](uint32_t c0, uint32_t width) {
                        load_a_chunk_of(ap, bi, m0, k0, kbsz, c0, width);
                    };
                    // The first n chunk sweeps every m tile, so B's first chunk and all of A come first;
                    // each later B chunk is prefetched one chunk ahead (so that it does not queue in
                    // front of the stores of the chunk before it). Operands that need transposes become
                    // jobs in that same order: [B chunk 0, A by m tile, B chunk 1, ...]; before the
                    // matmuls of a tile the jobs it needs run, plus an even share of those the next
                    // chunk needs, so transposes interleave with matmuls instead of stalling them.
                    const bool transpose_b = load_b && a.b_transposed && !dma_t.b,
                               transpose_a = !a.a_transposed && !dma_t.a;
                    jobs.clear();
                    jobs_loaded = jobs_done = 0;
                    std::vector<size_t> b_jobs_end;   // jobs through B chunk c (c >= 1), per chunk
                    size_t a_jobs_begin = 0;
                    if (transpose_b) transpose_jobs(jobs, B, bp, blk.NB, bi, n0, std::min(kTileN, nb), k0, kbsz, 0);
                    a_jobs_begin = jobs.size();
                    if (transpose_a) transpose_jobs(jobs, A, ap, blk.MB, bi, m0, mb, k0, kbsz, 0);
                    const size_t a_jobs_per_tile = transpose_a ? ceil_div(kbsz, kTileK) - kbsz / kTileK +
                                                                     ceil_div(kbsz / kTileK, kPieceTiles)
                                                               : 0;
                    b_jobs_end.push_back(jobs.size());
                    for (uint32_t c0 = kTileN; c0 < nb; c0 += kTileN) {
                        if (transpose_b)
                            transpose_jobs(jobs, B, bp, blk.NB, bi, n0 + c0, std::min(kTileN, nb - c0), k0, kbsz, c0);
                        b_jobs_end.push_back(jobs.size());
                    }
                    const bool load_b_direct = load_b && (!a.b_transposed || dma_t.b);
                    uint32_t b_cols = direct ? cur.b_cols : 0;
                    if (!direct) {
                        if (load_b_direct) load_b_chunk(0), b_cols = kTileN;
                        if (a.a_transposed || dma_t.a)
                            for (uint32_t c0 = 0; c0 < mb; c0 += kTileN) load_a_chunk(c0, std::min(kTileN, mb - c0));
                    }

                    // ---- compute and evacuate: chunks of 512 columns, group_chunks at a time
                    const bool first_block = bi == 0 && n0 == 0 && m0 == 0 && k0 == 0;
                    for (uint32_t nc = 0, chunk = 0, nchunks = 0; nc < nb; nc += nchunks * kTileN, chunk += nchunks) {
                        nchunks = chunks_in_group(first_block, nc, nb);
                        // B's chunks through the next group are loaded (prefetched one group ahead),
                        // after the first tile's addend and prologue loads.
                        auto prefetch_b = [&] {
                            if (!load_b_direct) return;
                            const uint32_t next = nc + nchunks * kTileN;
                            const uint32_t upto = next < nb ? next + chunks_in_group(false, next, nb) * kTileN : nb;
                            for (; b_cols < std::min(nb, upto); b_cols += kTileN) load_b_chunk(b_cols);
                        };
                        const size_t next_chunk_needs = chunk + 1 < b_jobs_end.size() ? b_jobs_end[chunk + 1] : jobs.size();
                        for (uint32_t mt = 0; mt < mb; mt += kTileM) {
                            const uint32_t ms = std::min(kTileM, mb - mt);
                            const size_t needed = chunk == 0 ? a_jobs_begin + (mt / kTileM + 1) * a_jobs_per_tile
                                                             : b_jobs_end[chunk];
                            const size_t tiles_left = ceil_div(mb - mt, kTileM);
                            run_jobs(std::max(needed, jobs_done + ceil_div(static_cast<uint32_t>(next_chunk_needs - jobs_done),
                                                                           static_cast<uint32_t>(tiles_left))));
                            std::array<const Tile*, kMaxGroupChunks> addend_tile{};
                            std::array<AccessPattern, kMaxGroupChunks> out;
                            std::array<uint32_t, kMaxGroupChunks> cols{}, ns{};
                            for (uint32_t g = 0; g < nchunks; ++g) {
                                cols[g] = nc + g * kTileN;
                                ns[g] = std::min(kTileN, nb - cols[g]);
                                if (!k_blocked || last_k) {
                                    addend_tile[g] = prepare_addend(bi, m0 + mt, ms, n0 + cols[g], ns[g]);
                                    if (a.prologue) a.prologue(kb, bi, m0 + mt, ms, n0 + cols[g], ns[g], hook_dma);
                                }
                                out[g] = psum[psum_next].region(0, ms, 0, ns[g]);
                                psum_next = (psum_next + 1) % static_cast<int>(psum.size());
                            }
                            if (mt == 0) prefetch_b();
                            for (uint32_t kt = 0; kt < nkt; ++kt) {
                                const uint32_t ks = std::min(kTileK, kbsz - kt * kTileK);
                                for (uint32_t g = 0; g < nchunks; ++g)
                                    kb.matmul(out[g], panel_ap(ap, kt, blk.MB, ks, mt, ms),
                                              panel_ap(bp, kt, blk.NB, ks, cols[g], ns[g]), kt > 0);
                            }
                            issue_next();   // after the block's first tile (no-op later)
                            for (uint32_t g = 0; g < nchunks; ++g) {
                                const Engine evac = (evac_next++ & 1) ? Engine::Scalar : Engine::Vector;
                                const Engine add_engine = Engine::Vector;
                                if (!k_blocked) {
                                    finish_tile(out[g], nullptr, bi, m0 + mt, ms, n0 + cols[g], ns[g], evac, addend_tile[g]);
                                    continue;
                                }
                                // fp32 partial sums in SBUF across K blocks; the total is rounded once.
                                const AccessPattern acc_ap = acc[mt / kTileM].region(0, ms, cols[g], ns[g]);
                                if (first_k) kb.tensor_copy(acc_ap, out[g], evac);
                                else if (last_k) finish_tile(acc_ap, &out[g], bi, m0 + mt, ms, n0 + cols[g], ns[g], evac, addend_tile[g]);
                                else kb.tensor_tensor(acc_ap, acc_ap, out[g], AluOp::add, add_engine);
                            }
                        }
                    }
                    issue_next();
                    job_base += jobs.size();
                    // Column sums of A from this block's panel (A's first sweep only), after the
                    // block's matmuls so that the GpSimd queue never holds up an epilogue.
                    if (column_sums && n0 == 0) reduce_panel(ap, m0, mb, k0, kbsz);
                }
            }
        }
    }

    if (column_sums) store_column_sums();

    if (column_sums) {
        kb.release(cs_rows);
        kb.release(cs_block);
        kb.release(cs_total);
    }
    for (auto& t : psum_t) if (t.partitions) kb.release(t);
    for (auto& t : psum) kb.release(t);
    for (auto& t : acc) kb.release(t);
    if (zeros.partitions) kb.release(zeros);
    if (scaled.partitions) kb.release(scaled);
    for (auto& t : d_in) if (t.partitions) kb.release(t);
    for (auto& t : staging) kb.release(t);
    for (auto it = pieces.rbegin(); it != pieces.rend(); ++it) kb.release(*it);
    for (int i = n_b_panels - 1; i >= 0; --i) kb.release(b_panel[i]);
    for (int i = n_a_panels - 1; i >= 0; --i) kb.release(a_panel[i]);
}

}  // namespace trnsim
