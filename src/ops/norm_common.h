// Shared pieces of the softmax and normalization kernels (softmax.cpp, norms.cpp,
// norms_backward.cpp, norms_backward_chunked.cpp): row views and broadcasts, per-partition sums on
// the TensorE, row spaces, the software pipeline of row tiles and the engine column split.
//
//
// Rows of the normalized dim lie along the free axis (plan_rows): per-row
// statistics are [P, G] tiles (G rows per partition for short rows), applied
// back to the rows through stride-0 broadcast access patterns. Softmax rows
// longer than one tile are processed in chunks over several passes. Weight and
// bias gradients accumulate per partition in fp32 and are summed across
// partitions at the end by a TensorE matmul with a ones vector; with one row
// per partition the TensorE sums each row tile into PSUM accumulators instead.
// Layer norm and rms norm rows of at least kEngineSplitRow elements lie one per
// partition and their row tiles are software-pipelined (run_pipeline): each
// engine's in-order queue holds the stages of several row tiles in flight.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "trnsim/ops.h"
#include "trnsim/sim.h"
#include "trnsim/tiling.h"

namespace trnsim::ops::norm_detail {

using namespace trnsim::tiling;


// Normalized rows at least this long are laid one per partition by layer norm and rms norm, which
// then split their work across VectorE, ScalarE, GpSimdE (and TensorE for the parameter
// gradients); shorter rows are grouped G to a partition and normalized on the VectorE, fewer
// instructions.
constexpr uint32_t kEngineSplitRow = 512;

inline AccessPattern chunk_view(const Tile& t, uint32_t P, uint32_t G, uint32_t R) { return tile_view(t, P, {G, R}, {R, 1}); }
inline AccessPattern group_bcast(const Tile& t, uint32_t P, uint32_t G, uint32_t R) { return tile_view(t, P, {G, R}, {1, 0}); }
// A [128, D] row tile broadcast to [P, G, D] (same row for every group).
inline AccessPattern row_bcast(const Tile& t, uint32_t P, uint32_t G, uint32_t D) { return tile_view(t, P, {G, D}, {0, 1}); }

inline void check_same_shape(const std::string& op, const TensorDesc& a, const TensorDesc& b) {
    if (a.sizes != b.sizes) fail(op, "shape mismatch: " + a.str() + " vs " + b.str());
}

// Loads t (D elements, row-major over its own dims) into every partition of row tile 'dst' ([128, D]),
// in four partition groups on as many queues (one queue alone moves a quarter of the rate); on the
// store queues when 'store_queues' (idle at a kernel's start, while the load queues bring the first
// row tiles).
inline void load_row_broadcast(KernelBuilder& kb, const Tile& dst, const TensorDesc& t, DmaQueues& q,
                        bool store_queues = false) {
    constexpr uint32_t kGroup = kPartitions / 4;
    IterSpace s = elementwise_space("row", t, {});
    simplify(s, false);
    uint32_t pos = 0;
    for_each_box(s.dims, s.offset, s.numel(), kMaxFreeDims, [&](const Box& b) {
        AccessPattern src = hbm_ap(b, 0, t, 0, 0);
        src.partitions = kGroup;
        src.partition_stride = 0;
        src.ndim = static_cast<uint8_t>(std::max<size_t>(1, b.dims.size()));
        for (size_t d = 0; d < b.dims.size(); ++d) {
            src.size[d] = static_cast<uint32_t>(b.dims[d].size);
            src.stride[d] = b.dims[d].stride[0];
        }
        const uint32_t n = static_cast<uint32_t>(b.numel());
        for (uint32_t p0 = 0; p0 < kPartitions; p0 += kGroup)
            kb.dma_copy(dst.region(p0, kGroup, pos, n), src, store_queues ? q.store() : q.load());
        pos += n;
    });
}

// Stores the first partition of row tile 'src' ([.., D]) into t, row-major over t's dims.
inline void store_row(KernelBuilder& kb, const TensorDesc& t, const Tile& src, DmaQueues& q) {
    IterSpace s = elementwise_space("row", t, {});
    simplify(s, false);
    uint32_t pos = 0;
    for_each_box(s.dims, s.offset, s.numel(), kMaxApDims, [&](const Box& b) {
        const uint32_t n = static_cast<uint32_t>(b.numel());
        kb.dma_copy(hbm_ap(b, 0, t), src.region(0, 1, pos, n), q.store());
        pos += n;
    });
}

// out[D] = sum over the 128 partitions of acc[128, D] (TensorE: ones^T @ acc), stored to t.
inline void store_partition_sum(KernelBuilder& kb, const Tile& acc, uint32_t D, const TensorDesc& t, DmaQueues& q) {
    const Tile ones = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
    kb.memset(ones.ap(), 1.0f);
    const Tile row = kb.alloc_sbuf(1, {D}, t.dtype);
    const uint32_t bank = kb.chip().tensor.moving_fmax;
    const Tile ps = kb.alloc_psum(1, bank);
    for (uint32_t c0 = 0; c0 < D; c0 += bank) {
        const uint32_t n = std::min(bank, D - c0);
        kb.matmul(ps.region(0, 1, 0, n), ones.ap(), acc.region(0, kPartitions, c0, n), false);
        kb.tensor_copy(row.region(0, 1, c0, n), ps.region(0, 1, 0, n));
    }
    store_row(kb, t, row, q);
    kb.release(ps);
    kb.release(row);
    kb.release(ones);
}

// acc[:P, D] += sum over the G groups of v [P, G, D] (tmp: a [P, D] scratch).
inline void accumulate_groups(KernelBuilder& kb, const Tile& acc, const Tile& v, const Tile& tmp, uint32_t P, uint32_t G,
                       uint32_t D) {
    const AccessPattern a = tile_view(acc, P, D);
    if (G == 1) {
        kb.tensor_tensor(a, a, tile_view(v, P, D), AluOp::add);
        return;
    }
    kb.tensor_reduce(tile_view(tmp, P, D), tile_view(v, P, {D, G}, {1, D}), ReduceOp::add);
    kb.tensor_tensor(a, a, tile_view(tmp, P, D), AluOp::add);
}

struct RowSpace {
    IterSpace space;
    int nred = 0;
    int64_t D = 1;
};

inline RowSpace row_space(const std::string& name, const TensorDesc& in, const std::vector<int64_t>& dims,
                   const std::vector<SpaceOperand>& ops) {
    check_desc(name, in, "in");
    RowSpace r;
    r.space = reduction_space(name, in.sizes, dims, ops, &r.nred);
    for (int64_t d : dims) r.D *= in.sizes[d];
    return r;
}

inline std::vector<int64_t> last_dims(const std::string& name, const TensorDesc& in, int64_t k) {
    if (k < 1 || k > in.dim()) fail(name, "normalized_ndim " + std::to_string(k) + " out of range for " + in.str());
    std::vector<int64_t> dims;
    for (int64_t d = in.dim() - k; d < in.dim(); ++d) dims.push_back(d);
    return dims;
}

// The column budget of a norm kernel that keeps whole rows in SBUF, for 'bytes_per_col' per
// column; 0 when a row of D elements does not fit (the chunked kernels take those rows).
inline uint32_t whole_row_budget(const ChipConfig& chip, uint64_t bytes_per_col, int64_t D) {
    const uint64_t cols = chip.sbuf.bytes_per_partition * 85 / 100 / bytes_per_col;
    if (static_cast<uint64_t>(D) > cols) return 0;
    return static_cast<uint32_t>(std::max<uint64_t>(D, std::min<uint64_t>(cols, 4096)));
}

// The HBM row of operand k (a tensor of the normalized shape) for chunk box c of a row tile
// whose kept part has nkept dims: one partition holding the chunk's elements.
inline AccessPattern chunk_row_ap(const Box& c, size_t nkept, int k, const TensorDesc& t) {
    if (nkept == 0) return hbm_ap(c, k, t);   // no rows: the chunk itself (DMAs flatten both sides)
    AccessPattern ap = hbm_ap(c, k, t, static_cast<int>(nkept) - 1);
    ap.partitions = 1;
    return ap;
}

// t[chunk] = sum over the first P partitions of acc[:, R] (TensorE: ones^T @ acc), stored to 'dst'.
inline void store_chunk_partition_sum(KernelBuilder& kb, const Tile& acc, const Tile& ones, const Tile& row, const Tile& ps,
                               uint32_t R, const AccessPattern& dst, DmaQueues& q) {
    const uint32_t bank = ps.shape[0];
    for (uint32_t c0 = 0; c0 < R; c0 += bank) {
        const uint32_t n = std::min(bank, R - c0);
        kb.matmul(ps.region(0, 1, 0, n), ones.ap(), acc.region(0, kPartitions, c0, n), false);
        kb.tensor_copy(row.region(0, 1, c0, n), ps.region(0, 1, 0, n));
    }
    kb.dma_copy(dst, row.region(0, 1, 0, R), q.store());
}


// SBUF buffers indexed by row tile: tile i uses buffer i % depth. The pipelined kernels below keep
// several row tiles in flight, each stage addressing the buffers of its own tile.
class TileSlots {
public:
    TileSlots() = default;
    TileSlots(KernelBuilder& kb, int depth, uint32_t cols, DType dt) {
        for (int i = 0; i < depth; ++i) tiles_.push_back(kb.alloc_sbuf(kPartitions, {cols}, dt));
    }
    const Tile& operator[](size_t i) const { return tiles_[i % tiles_.size()]; }
    void release(KernelBuilder& kb) {
        for (auto it = tiles_.rbegin(); it != tiles_.rend(); ++it) kb.release(*it);
        tiles_.clear();
    }

private:
    std::vector<Tile> tiles_;
};

// A software pipeline over n row tiles: step k runs every stage, in the order given, on tile
// k + lead (when there is such a tile). Each engine's in-order queue then interleaves the stages
// of several tiles, so that work of an older tile never waits behind a newer tile's dependency.
struct PipelineStage {
    size_t lead;
    std::function<void(size_t)> run;
};
// 'spmd', when given, deals the items out to the physical cores (each stage runs on its item's).
inline void run_pipeline(size_t n, const std::vector<PipelineStage>& stages, tiling::SpmdSplit* spmd = nullptr) {
    size_t max_lead = 0;
    for (const PipelineStage& s : stages) max_lead = std::max(max_lead, s.lead);
    for (size_t k = 0; k < n + max_lead; ++k)
        for (const PipelineStage& s : stages)
            if (k + s.lead >= max_lead && k + s.lead - max_lead < n) {
                if (spmd) spmd->enter(k + s.lead - max_lead);
                s.run(k + s.lead - max_lead);
            }
}

// Nanoseconds per element of a pass of one engine over a row (the sim's estimate).
inline double ns_per_elem(const StreamEngineConfig& e, double cycles_per_elem) {
    return stream_ns_per_elem(e, cycles_per_elem);
}

// Two-input elementwise passes over D columns split between the VectorE (columns [0, c)) and the
// GpSimdE (the rest): c such that both finish a row tile together, given 'ops' such passes and
// the other work each engine has per row tile. Slices under kMinSplit columns are not split off.
inline uint32_t vector_columns(const ChipConfig& chip, uint32_t D, int ops, double vector_other_ns, double gpsimd_other_ns) {
    constexpr uint32_t kMinSplit = 128, kAlign = 32;
    if (ops == 0) return D;
    const double v = ns_per_elem(chip.vector, chip.vector.two_input_cycles_per_elem);
    const double g = ns_per_elem(chip.gpsimd, chip.gpsimd.two_input_cycles_per_elem);
    const double g_fixed = chip.gpsimd.fixed_overhead_cycles / chip.gpsimd.clock_ghz;
    const double c = (gpsimd_other_ns + ops * (g_fixed + D * g) - vector_other_ns) / (ops * (v + g));
    const uint32_t cols = static_cast<uint32_t>(std::clamp(std::round(c / kAlign) * kAlign, 0.0, double(D)));
    if (cols < kMinSplit) return 0;
    return D - cols < kMinSplit ? D : cols;
}

// Estimated busy nanoseconds of one pass over n elements per partition on engine e, reading and
// writing 'operands' tensors (their access overheads count where e does not pipeline them).
inline double pass_ns(const StreamEngineConfig& e, double n, double cycles_per_elem, int operands) {
    return estimate_stream_ns(e, n, cycles_per_elem, e.access_overhead_pipelined ? 0 : operands);
}

// Runs op(first column, count, engine) on the VectorE's and the GpSimdE's column ranges.
inline void split_columns(uint32_t D, uint32_t vector_cols, const std::function<void(uint32_t, uint32_t, Engine)>& op) {
    if (vector_cols > 0) op(0, vector_cols, Engine::Vector);
    if (vector_cols < D) op(vector_cols, D - vector_cols, Engine::GpSimd);
}

// SBUF bytes per partition left to a kernel that allocates now (a few small tiles aside).
inline uint64_t sbuf_available(const KernelBuilder& kb) {
    constexpr uint64_t kSmallTiles = 4096;
    const uint64_t total = kb.chip().sbuf.bytes_per_partition, used = kb.sbuf_bytes_in_use() + kSmallTiles;
    return total > used ? total - used : 0;
}

// The forward with one row per partition (rows of at least kEngineSplitRow elements), row tiles
// software-pipelined: step k loads tile k+3, sums the row of tile k+2 on the VectorE (layer
// norm), runs the ScalarE part of tile k+1 (-mean; the sum of squared deviations as a square
// with the -mean bias and a fused sum; rstd; xhat = (x - mean) * rstd) and the weight and bias
// passes of tile k, split by columns between the VectorE and the GpSimdE, then stores it.

// Layer norm / RMS norm backward over rows longer than one SBUF partition holds (norms_backward_chunked.cpp).
void norm_backward_chunked(KernelBuilder& kb, const std::string& name, bool rms, const TensorDesc* grad_in,
                           const TensorDesc* grad_weight, const TensorDesc* grad_bias, const TensorDesc& grad_out,
                           const TensorDesc& in, const TensorDesc* mean, const TensorDesc& rstd,
                           const TensorDesc* weight, const TensorDesc* addend, int64_t normalized_ndim);

}  // namespace trnsim::ops::norm_detail
