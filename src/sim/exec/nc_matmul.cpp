// nc_matmul: dst[M,N] (+)= src0[K,M]^T @ src1[K,N] in fp32 (K = partitions).
//
// The hot path of functional execution: both operands are converted into
// per-thread fp32 buffers and one sgemm runs with C pointing straight into PSUM
// when dst is an fp32 PSUM tile with dense rows (beta = 1 accumulates in place).
// Any other dst goes through a scratch tile and CoreMemory's rounding store.
#include <cblas.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "exec_common.h"
#include "matmul_batch.h"

namespace trnsim {

namespace {

// The products here are one tile chain each (K <= a few thousand, M <= 128): OpenBLAS's worker
// threads cost more in hand-off and spin-waiting than they save, and the simulator runs on one
// host thread. Unless the user chose a count (OPENBLAS_NUM_THREADS), BLAS runs on the caller.
void use_single_threaded_blas() {
    static const bool once = [] {
        if (!std::getenv("OPENBLAS_NUM_THREADS")) openblas_set_num_threads(1);
        return true;
    }();
    (void)once;
}

bool dense_f32_psum_rows(const AccessPattern& dst, uint64_t n) {
    return dst.space == MemSpace::PSUM && dst.dtype == DType::f32 && dst.offset % 4 == 0 &&
           dst.contiguous_bytes() >= n * 4;
}

}  // namespace

void exec_nc_matmul(CoreMemory& mem, const Instruction& ins) {
    const AccessPattern& stationary = ins.src0;
    const AccessPattern& moving = ins.src1;
    const uint32_t K = stationary.partitions;
    const uint64_t M = stationary.free_elems();
    const uint64_t N = moving.free_elems();
    if (moving.partitions != K)
        exec::fail(ins, "src0 " + format_ap(stationary) + " and src1 " + format_ap(moving) +
                            " must have the same partitions (the contraction dim)");
    if (ins.dst.partitions != M || ins.dst.free_elems() != N)
        exec::fail(ins, "dst " + format_ap(ins.dst) + " must be [" + std::to_string(M) + ", " + std::to_string(N) + "]");
    if (K == 0 || M == 0 || N == 0) return;
    const bool accumulate = ins.flags & F_ACCUMULATE;

    float* a = exec::scratch(exec::kScratchA, K * M);   // [K][M]: A^T of the product
    float* b = exec::scratch(exec::kScratchB, K * N);   // [K][N]
    mem.load_f32(stationary, a);
    mem.load_f32(moving, b);

    float* c;
    uint64_t ldc;
    const bool in_place = dense_f32_psum_rows(ins.dst, N);
    if (in_place) {
        const uint64_t row_bytes = mem.chip().psum.bytes_per_partition;
        // Both ends checked: the first and the last element of the tile.
        mem.psum(ins.dst.start_partition + M - 1, ins.dst.offset + N * 4 - 1);
        c = reinterpret_cast<float*>(mem.psum(ins.dst.start_partition, ins.dst.offset));
        ldc = row_bytes / 4;
    } else {
        c = exec::scratch(exec::kScratchC, M * N);
        ldc = N;
        if (accumulate) mem.load_f32(ins.dst, c);
    }
    use_single_threaded_blas();
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                1.0f, a, static_cast<int>(M), b, static_cast<int>(N), accumulate ? 1.0f : 0.0f, c,
                static_cast<int>(ldc));
    if (!in_place) mem.store_f32(ins.dst, c);
}

}  // namespace trnsim

namespace trnsim {

// A chain of nc_matmuls accumulating into one PSUM tile (the k loop of a tiled
// matmul) is one product with a longer contraction: its operands are stacked
// into [sum K, M] and [sum K, N] fp32 buffers and a single sgemm runs, which a
// host BLAS does far more efficiently than many K <= 128 calls. The sum is the
// same fp32 accumulation, in a different association order.
static bool same_operands(const std::vector<AccessPattern>& a, const Instruction* chain, size_t count);

// Loads the chain's moving operands into cache->data ([sum K, N] fp32) unless it already holds them.
void execute_matmul_chain_moving(CoreMemory& mem, const Instruction* chain, size_t count, MovingOperandCache* cache);

static bool same_operands(const std::vector<AccessPattern>& a, const Instruction* chain, size_t count) {
    if (a.size() != count) return false;
    for (size_t i = 0; i < count; ++i) {
        const AccessPattern &x = a[i], &y = chain[i].src1;
        if (x.space != y.space || x.dtype != y.dtype || x.ndim != y.ndim || x.start_partition != y.start_partition ||
            x.partitions != y.partitions || x.offset != y.offset || x.size != y.size || x.stride != y.stride)
            return false;
    }
    return true;
}

// The moving operand of consecutive chains is often the same SBUF data (one B panel swept
// by every m tile): its fp32 copy [sum K, N] is kept in 'cache' until SBUF under it is written.
static bool same_ap_fields(const AccessPattern& x, const AccessPattern& y) {
    return x.space == y.space && x.dtype == y.dtype && x.ndim == y.ndim && x.start_partition == y.start_partition &&
           x.partitions == y.partitions && x.offset == y.offset && x.size == y.size && x.stride == y.stride;
}

static bool same_ap_list(const std::vector<AccessPattern>& a, const std::vector<AccessPattern>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
        if (!same_ap_fields(a[i], b[i])) return false;
    return true;
}

// Records which operands a cache entry holds and the SBUF bytes they span (valid only for SBUF).
static void set_bounds(MovingOperandCache& e, const std::vector<AccessPattern>& aps) {
    e.operands = aps;
    e.valid = true;
    e.p0 = ~0u;
    e.p1 = 0;
    e.b0 = ~0ull;
    e.b1 = 0;
    for (const AccessPattern& ap : aps) {
        e.valid = e.valid && ap.space == MemSpace::SBUF;
        e.p0 = std::min<uint32_t>(e.p0, ap.start_partition);
        e.p1 = std::max<uint32_t>(e.p1, ap.start_partition + ap.partitions);
        int64_t lo = 0, hi = 0;   // element extent of the free dims
        for (int k = 0; k < ap.ndim; ++k) {
            const int64_t span = ap.stride[k] * (static_cast<int64_t>(ap.size[k]) - 1);
            (span < 0 ? lo : hi) += span;
        }
        const int64_t es = static_cast<int64_t>(dtype_size(ap.dtype));
        e.b0 = std::min<uint64_t>(e.b0, static_cast<uint64_t>(static_cast<int64_t>(ap.offset) + lo * es));
        e.b1 = std::max<uint64_t>(e.b1, static_cast<uint64_t>(static_cast<int64_t>(ap.offset) + (hi + 1) * es));
    }
}

static const float* load_moving(CoreMemory& mem, const Instruction* chain, size_t count, uint64_t K, uint64_t N,
                                MovingOperandCache* cache) {
    if (cache && cache->valid && same_operands(cache->operands, chain, count)) return cache->data.data();
    float* b = cache ? (cache->data.resize(K * N), cache->data.data()) : exec::scratch(exec::kScratchB, K * N);
    uint64_t k0 = 0;
    for (size_t i = 0; i < count; ++i) {
        mem.load_f32(chain[i].src1, b + k0 * N);
        k0 += chain[i].src1.partitions;
    }
    if (!cache) return b;
    std::vector<AccessPattern> aps;
    for (size_t i = 0; i < count; ++i) aps.push_back(chain[i].src1);
    set_bounds(*cache, aps);
    return b;
}

void execute_matmul_chain_moving(CoreMemory& mem, const Instruction* chain, size_t count, MovingOperandCache* cache) {
    uint64_t K = 0;
    for (size_t i = 0; i < count; ++i) K += chain[i].src1.partitions;
    load_moving(mem, chain, count, K, chain[0].src1.free_elems(), cache);
}

void execute_matmul_chain(CoreMemory& mem, const Instruction* chain, size_t count, MovingOperandCache* cache) {
    if (!dense_f32_psum_rows(chain[0].dst, chain[0].src1.free_elems())) {
        for (size_t i = 0; i < count; ++i) exec_nc_matmul(mem, chain[i]);
        return;
    }
    const uint64_t M = chain[0].src0.free_elems();
    const uint64_t N = chain[0].src1.free_elems();
    uint64_t K = 0;
    for (size_t i = 0; i < count; ++i) {
        const Instruction& ins = chain[i];
        if (ins.src1.partitions != ins.src0.partitions || ins.src0.free_elems() != M || ins.src1.free_elems() != N ||
            ins.dst.partitions != M || ins.dst.free_elems() != N)
            exec::fail(ins, "operand shapes do not match the accumulation chain it belongs to");
        K += ins.src0.partitions;
    }
    float* a = exec::scratch(exec::kScratchA, K * M);
    uint64_t k0 = 0;
    for (size_t i = 0; i < count; ++i) {
        mem.load_f32(chain[i].src0, a + k0 * M);
        k0 += chain[i].src0.partitions;
    }
    const float* b = load_moving(mem, chain, count, K, N, cache);
    const AccessPattern& dst = chain[0].dst;
    mem.psum(dst.start_partition + M - 1, dst.offset + N * 4 - 1);   // bounds of the last element
    float* c = reinterpret_cast<float*>(mem.psum(dst.start_partition, dst.offset));
    const uint64_t ldc = mem.chip().psum.bytes_per_partition / 4;
    const bool accumulate = chain[0].flags & F_ACCUMULATE;
    use_single_threaded_blas();
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
                1.0f, a, static_cast<int>(M), b, static_cast<int>(N), accumulate ? 1.0f : 0.0f, c,
                static_cast<int>(ldc));
}

}  // namespace trnsim

namespace trnsim {

// Several chains that share their moving operands (one B chunk swept by consecutive m
// tiles) run as one sgemm with their stationaries side by side: [sum K, chains x M].
// The run loop only batches chains when nothing in between touches their operands.
void execute_matmul_batch(CoreMemory& mem, const MatmulChainRef* chains, size_t count, MovingOperandCache* cache) {
    bool dense = true;
    for (size_t c = 0; c < count; ++c)
        dense = dense && dense_f32_psum_rows(chains[c].first[0].dst, chains[c].first[0].src1.free_elems());
    if (count == 1 || !dense) {   // (running the chains one after another is equally valid)
        for (size_t c = 0; c < count; ++c) execute_matmul_chain(mem, chains[c].first, chains[c].count, cache);
        return;
    }
    const Instruction& head = chains[0].first[0];
    const uint64_t M = head.src0.free_elems(), N = head.src1.free_elems();
    uint64_t K = 0;
    for (size_t i = 0; i < chains[0].count; ++i) K += chains[0].first[i].src0.partitions;
    const uint64_t MB = M * count;
    // Moving operands: the first chain's (all chains share them), through the cache.
    execute_matmul_chain_moving(mem, chains[0].first, chains[0].count, cache);
    const float* b = cache->data.data();
    // Stationaries side by side: chain c fills columns [c*M, (c+1)*M); reused from the cache
    // when the same batch of stationaries ran before and SBUF under them is unchanged.
    std::vector<AccessPattern> stationary_aps;
    for (size_t c = 0; c < count; ++c)
        for (size_t i = 0; i < chains[c].count; ++i) stationary_aps.push_back(chains[c].first[i].src0);
    MovingOperandCache* hit = nullptr;
    for (MovingOperandCache& e : cache->stationaries)
        if (e.valid && same_ap_list(e.operands, stationary_aps)) hit = &e;
    if (!hit) {
        // An entry no longer valid is refilled in place, so that its buffer is reused (the
        // entries outlive the programs, invalidated, for this).
        for (MovingOperandCache& e : cache->stationaries)
            if (!e.valid) hit = &e;
        if (!hit) {
            constexpr size_t kEntries = 32;
            if (cache->stationaries.size() >= kEntries) cache->stationaries.erase(cache->stationaries.begin());
            cache->stationaries.emplace_back();
            hit = &cache->stationaries.back();
        }
        hit->data.resize(K * MB);
        float* a = hit->data.data();
        for (size_t c = 0; c < count; ++c) {
            uint64_t k0 = 0;
            for (size_t i = 0; i < chains[c].count; ++i) {
                const AccessPattern& st = chains[c].first[i].src0;
                // Dense fp32 rows are copied straight from SBUF, others through a scratch tile.
                const exec::RowsF32 rows = exec::source_rows(mem, st, exec::kScratchB);
                for (uint32_t k = 0; k < st.partitions; ++k)
                    std::memcpy(a + (k0 + k) * MB + c * M, rows.row(k), M * sizeof(float));
                k0 += st.partitions;
            }
        }
        set_bounds(*hit, stationary_aps);
    }
    const float* a = hit->data.data();
    const bool accumulate = head.flags & F_ACCUMULATE;
    float* cbig = exec::scratch(exec::kScratchC, MB * N);
    auto row = [&](size_t c, uint64_t m) {
        const AccessPattern& dst = chains[c].first[0].dst;
        return reinterpret_cast<float*>(mem.psum(dst.start_partition + static_cast<uint32_t>(m), dst.offset));
    };
    if (accumulate)
        for (size_t c = 0; c < count; ++c)
            for (uint64_t m = 0; m < M; ++m) std::memcpy(cbig + (c * M + m) * N, row(c, m), N * sizeof(float));
    use_single_threaded_blas();
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(MB), static_cast<int>(N), static_cast<int>(K),
                1.0f, a, static_cast<int>(MB), b, static_cast<int>(N), accumulate ? 1.0f : 0.0f, cbig,
                static_cast<int>(N));
    for (size_t c = 0; c < count; ++c) {
        const AccessPattern& dst = chains[c].first[0].dst;
        mem.psum(dst.start_partition + static_cast<uint32_t>(M) - 1, dst.offset + N * 4 - 1);   // bounds
        for (uint64_t m = 0; m < M; ++m) std::memcpy(row(c, m), cbig + (c * M + m) * N, N * sizeof(float));
    }
}

}  // namespace trnsim
