// Normalizations: softmax / log_softmax along a dim and their backward,
// layer_norm and rms_norm over the last dims with their backward.
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
#include <algorithm>
#include <cmath>

#include "common.h"

namespace trnsim::ops {

using namespace detail;

namespace {

// Normalized rows at least this long are laid one per partition by layer norm and rms norm, which
// then split their work across VectorE, ScalarE, GpSimdE (and TensorE for the parameter
// gradients); shorter rows are grouped G to a partition and normalized on the VectorE, fewer
// instructions.
constexpr uint32_t kEngineSplitRow = 512;

AccessPattern chunk_view(const Tile& t, uint32_t P, uint32_t G, uint32_t R) { return tile_view(t, P, {G, R}, {R, 1}); }
AccessPattern group_bcast(const Tile& t, uint32_t P, uint32_t G, uint32_t R) { return tile_view(t, P, {G, R}, {1, 0}); }
// A [128, D] row tile broadcast to [P, G, D] (same row for every group).
AccessPattern row_bcast(const Tile& t, uint32_t P, uint32_t G, uint32_t D) { return tile_view(t, P, {G, D}, {0, 1}); }

void check_same_shape(const std::string& op, const TensorDesc& a, const TensorDesc& b) {
    if (a.sizes != b.sizes) fail(op, "shape mismatch: " + a.str() + " vs " + b.str());
}

// Loads t (D elements, row-major over its own dims) into every partition of row tile 'dst' ([128, D]),
// in four partition groups on as many queues (one queue alone moves a quarter of the rate); on the
// store queues when 'store_queues' (idle at a kernel's start, while the load queues bring the first
// row tiles).
void load_row_broadcast(KernelBuilder& kb, const Tile& dst, const TensorDesc& t, DmaQueues& q,
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
void store_row(KernelBuilder& kb, const TensorDesc& t, const Tile& src, DmaQueues& q) {
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
void store_partition_sum(KernelBuilder& kb, const Tile& acc, uint32_t D, const TensorDesc& t, DmaQueues& q) {
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
void accumulate_groups(KernelBuilder& kb, const Tile& acc, const Tile& v, const Tile& tmp, uint32_t P, uint32_t G,
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

RowSpace row_space(const std::string& name, const TensorDesc& in, const std::vector<int64_t>& dims,
                   const std::vector<SpaceOperand>& ops) {
    check_desc(name, in, "in");
    RowSpace r;
    r.space = reduction_space(name, in.sizes, dims, ops, &r.nred);
    for (int64_t d : dims) r.D *= in.sizes[d];
    return r;
}

std::vector<int64_t> last_dims(const std::string& name, const TensorDesc& in, int64_t k) {
    if (k < 1 || k > in.dim()) fail(name, "normalized_ndim " + std::to_string(k) + " out of range for " + in.str());
    std::vector<int64_t> dims;
    for (int64_t d = in.dim() - k; d < in.dim(); ++d) dims.push_back(d);
    return dims;
}

// The column budget of a norm kernel that keeps whole rows in SBUF, for 'bytes_per_col' per
// column; 0 when a row of D elements does not fit (the chunked kernels take those rows).
uint32_t whole_row_budget(const ChipConfig& chip, uint64_t bytes_per_col, int64_t D) {
    const uint64_t cols = chip.sbuf.bytes_per_partition * 85 / 100 / bytes_per_col;
    if (static_cast<uint64_t>(D) > cols) return 0;
    return static_cast<uint32_t>(std::max<uint64_t>(D, std::min<uint64_t>(cols, 4096)));
}

// The HBM row of operand k (a tensor of the normalized shape) for chunk box c of a row tile
// whose kept part has nkept dims: one partition holding the chunk's elements.
AccessPattern chunk_row_ap(const Box& c, size_t nkept, int k, const TensorDesc& t) {
    if (nkept == 0) return hbm_ap(c, k, t);   // no rows: the chunk itself (DMAs flatten both sides)
    AccessPattern ap = hbm_ap(c, k, t, static_cast<int>(nkept) - 1);
    ap.partitions = 1;
    return ap;
}

// t[chunk] = sum over the first P partitions of acc[:, R] (TensorE: ones^T @ acc), stored to 'dst'.
void store_chunk_partition_sum(KernelBuilder& kb, const Tile& acc, const Tile& ones, const Tile& row, const Tile& ps,
                               uint32_t R, const AccessPattern& dst, DmaQueues& q) {
    const uint32_t bank = ps.shape[0];
    for (uint32_t c0 = 0; c0 < R; c0 += bank) {
        const uint32_t n = std::min(bank, R - c0);
        kb.matmul(ps.region(0, 1, 0, n), ones.ap(), acc.region(0, kPartitions, c0, n), false);
        kb.tensor_copy(row.region(0, 1, c0, n), ps.region(0, 1, 0, n));
    }
    kb.dma_copy(dst, row.region(0, 1, 0, R), q.store());
}

}  // namespace

// ------------------------------------------------------------------ softmax
void softmax(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& in, int64_t dim, bool log) {
    const std::string name = log ? "log_softmax" : "softmax";
    check_same_shape(name, out, in);
    RowSpace rs = row_space(name, in, normalize_dims(name, in.dim(), {dim}), {{&out, false}, {&in, false}});
    if (rs.space.numel() == 0) return;
    rs.nred = simplify(rs.space, true, rs.nred);
    check_no_overlap(name, rs.space, 0);
    const uint32_t fmax = column_budget(kb.chip(), dtype_size(in.dtype) + dtype_size(out.dtype) + 12, 2);
    const std::vector<RowTile> tiles = plan_rows(rs.space, rs.nred, fmax);
    uint32_t F = 1, G = 1;
    for (const RowTile& t : tiles) {
        G = std::max(G, t.G);
        for (uint32_t r : t.R) F = std::max(F, t.G * r);
    }
    TileRing x_ring(kb, 2, {F}, in.dtype);
    TileRing e_ring(kb, 2, {F}, DType::f32);
    const Tile w = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
    TileRing o_ring(kb, 2, {F}, out.dtype);
    const Tile m = kb.alloc_sbuf(kPartitions, {G}, DType::f32);
    const Tile s = kb.alloc_sbuf(kPartitions, {G}, DType::f32);
    const Tile part = kb.alloc_sbuf(kPartitions, {G}, DType::f32);
    DmaQueues queues(kb.chip());

    for (const RowTile& t : tiles) {
        const uint32_t P = t.P, Gt = t.G;
        const AccessPattern mv = tile_view(m, P, Gt), sv = tile_view(s, P, Gt), pv = tile_view(part, P, Gt);
        auto load = [&](size_t c) -> const Tile& {
            const Tile& x = x_ring.next();
            dma_tile(kb, queues, tile_view(x, P, Gt * t.R[c]), hbm_ap(t.chunks[c], 1, in), false);
            return x;
        };
        auto store = [&](size_t c, const AccessPattern& o) { dma_tile(kb, queues, hbm_ap(t.chunks[c], 0, out), o, true); };

        if (t.chunks.size() == 1 && Gt > 1) {
            // Several short rows per partition: broadcast the row statistics along the row.
            const uint32_t R = t.R[0];
            const Tile& x = load(0);
            const AccessPattern xv = chunk_view(x, P, Gt, R);
            const Tile& e = e_ring.next();
            const AccessPattern ev = chunk_view(e, P, Gt, R), wv = chunk_view(w, P, Gt, R);
            const AccessPattern o = chunk_view(o_ring.next(), P, Gt, R);
            kb.tensor_reduce(mv, xv, ReduceOp::max);
            kb.tensor_tensor(ev, xv, group_bcast(m, P, Gt, R), AluOp::sub);
            if (log) {
                kb.activation(wv, ev, ActFunc::exp);
                kb.tensor_reduce(sv, wv, ReduceOp::add);
                kb.activation(sv, sv, ActFunc::log);
                kb.tensor_tensor(o, ev, group_bcast(s, P, Gt, R), AluOp::sub);
            } else {
                kb.activation(ev, ev, ActFunc::exp);
                kb.tensor_reduce(sv, ev, ReduceOp::add);
                kb.tensor_tensor(o, ev, group_bcast(s, P, Gt, R), AluOp::div);
            }
            store(0, o);
            continue;
        }
        // One row per partition: exp(x - max) on the ScalarE with the per-partition bias -max
        // and its fused sum; rows longer than a tile take three passes over their chunks.
        const bool single = t.chunks.size() == 1;
        const Tile* first = nullptr;
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const Tile& x = load(c);
            if (c == 0) first = &x;
            kb.tensor_reduce(c == 0 ? mv : pv, tile_view(x, P, t.R[c]), ReduceOp::max);
            if (c > 0) kb.tensor_tensor(mv, mv, pv, AluOp::max);
        }
        kb.tensor_scalar(mv, mv, AluOp::mul, -1.0f);   // m := -max
        const Tile* e_first = nullptr;
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const Tile& x = single ? *first : load(c);
            const Tile& e = e_ring.next();
            if (c == 0) e_first = &e;
            const AccessPattern acc = c == 0 ? sv : pv;
            kb.activation_ex(tile_view(e, P, t.R[c]), tile_view(x, P, t.R[c]), ActFunc::exp, 1.0f, nullptr, 0.0f,
                             &mv, ReduceOp::add, &acc);
            if (c > 0) kb.tensor_tensor(sv, sv, pv, AluOp::add);
        }
        if (log) {
            kb.activation(sv, sv, ActFunc::log);
            kb.tensor_tensor(mv, mv, sv, AluOp::sub);   // -max - log(sum)
        } else {
            kb.activation(sv, sv, ActFunc::reciprocal);
        }
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const uint32_t R = t.R[c];
            const AccessPattern o = tile_view(o_ring.next(), P, R);
            if (log) {
                const Tile& x = single ? *first : load(c);
                kb.activation_ex(o, tile_view(x, P, R), ActFunc::identity, 1.0f, nullptr, 0.0f, &mv);
            } else {
                const Tile* e = e_first;
                if (!single) {
                    const Tile& x = load(c);
                    e = &e_ring.next();
                    kb.activation_ex(tile_view(*e, P, R), tile_view(x, P, R), ActFunc::exp, 1.0f, nullptr, 0.0f, &mv);
                }
                kb.tensor_scalar_ex(o, tile_view(*e, P, R), AluOp::mul, 0.0f, &sv, AluOp::bypass, 0.0f, nullptr);
            }
            store(c, o);
        }
    }
    kb.release(part);
    kb.release(s);
    kb.release(m);
    o_ring.release(kb);
    kb.release(w);
    e_ring.release(kb);
    x_ring.release(kb);
}

void softmax_backward(KernelBuilder& kb, const TensorDesc& grad_in, const TensorDesc& grad_out, const TensorDesc& out,
                      int64_t dim, bool log) {
    const std::string name = log ? "log_softmax_backward" : "softmax_backward";
    check_same_shape(name, grad_in, out);
    check_same_shape(name, grad_out, out);
    RowSpace rs = row_space(name, out, normalize_dims(name, out.dim(), {dim}),
                            {{&grad_in, false}, {&grad_out, false}, {&out, false}});
    if (rs.space.numel() == 0) return;
    rs.nred = simplify(rs.space, true, rs.nred);
    check_no_overlap(name, rs.space, 0);
    const uint32_t fmax =
        column_budget(kb.chip(), dtype_size(grad_out.dtype) + dtype_size(out.dtype) + dtype_size(grad_in.dtype) + 4, 2);
    const std::vector<RowTile> tiles = plan_rows(rs.space, rs.nred, fmax);
    uint32_t F = 1, G = 1;
    for (const RowTile& t : tiles) {
        G = std::max(G, t.G);
        for (uint32_t r : t.R) F = std::max(F, t.G * r);
    }
    TileRing g_ring(kb, 2, {F}, grad_out.dtype);
    TileRing y_ring(kb, 2, {F}, out.dtype);
    TileRing w_ring(kb, 2, {F}, DType::f32);
    TileRing o_ring(kb, 2, {F}, grad_in.dtype);
    const Tile s = kb.alloc_sbuf(kPartitions, {G}, DType::f32);
    const Tile part = kb.alloc_sbuf(kPartitions, {G}, DType::f32);
    DmaQueues queues(kb.chip());

    for (const RowTile& t : tiles) {
        const uint32_t P = t.P, Gt = t.G;
        const AccessPattern sv = tile_view(s, P, Gt), pv = tile_view(part, P, Gt);
        const bool single = t.chunks.size() == 1;
        auto load = [&](TileRing& ring, size_t c, int k, const TensorDesc& d) -> const Tile& {
            const Tile& x = ring.next();
            dma_tile(kb, queues, tile_view(x, P, Gt * t.R[c]), hbm_ap(t.chunks[c], k, d), false);
            return x;
        };
        // Pass 1: sum(g * y) (softmax) or sum(g) (log_softmax) per row.
        const Tile *g0 = nullptr, *y0 = nullptr;
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const uint32_t R = t.R[c];
            const Tile& g = load(g_ring, c, 1, grad_out);
            const Tile& y = load(y_ring, c, 2, out);
            if (c == 0) g0 = &g, y0 = &y;
            const AccessPattern dst = c == 0 ? sv : pv;
            if (log) {
                kb.tensor_reduce(dst, chunk_view(g, P, Gt, R), ReduceOp::add);
            } else {
                const AccessPattern wv = chunk_view(w_ring.next(), P, Gt, R);
                kb.tensor_tensor(wv, chunk_view(g, P, Gt, R), chunk_view(y, P, Gt, R), AluOp::mul);
                kb.tensor_reduce(dst, wv, ReduceOp::add);
            }
            if (c > 0) kb.tensor_tensor(sv, sv, pv, AluOp::add);
        }
        // Pass 2: the gradient.
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const uint32_t R = t.R[c];
            const Tile& g = single ? *g0 : load(g_ring, c, 1, grad_out);
            const Tile& y = single ? *y0 : load(y_ring, c, 2, out);
            const AccessPattern gv = chunk_view(g, P, Gt, R), yv = chunk_view(y, P, Gt, R);
            const AccessPattern wv = chunk_view(w_ring.next(), P, Gt, R);
            const AccessPattern o = chunk_view(o_ring.next(), P, Gt, R);
            if (log) {
                kb.activation(wv, yv, ActFunc::exp);
                kb.tensor_tensor(wv, wv, group_bcast(s, P, Gt, R), AluOp::mul);
                kb.tensor_tensor(o, gv, wv, AluOp::sub);
            } else {
                kb.tensor_tensor(wv, gv, group_bcast(s, P, Gt, R), AluOp::sub);
                kb.tensor_tensor(o, wv, yv, AluOp::mul);
            }
            dma_tile(kb, queues, hbm_ap(t.chunks[c], 0, grad_in), o, true);
        }
    }
    kb.release(part);
    kb.release(s);
    o_ring.release(kb);
    w_ring.release(kb);
    y_ring.release(kb);
    g_ring.release(kb);
}

// ------------------------------------------------------------------ layer norm / rms norm
namespace {

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
void run_pipeline(size_t n, const std::vector<PipelineStage>& stages) {
    size_t max_lead = 0;
    for (const PipelineStage& s : stages) max_lead = std::max(max_lead, s.lead);
    for (size_t k = 0; k < n + max_lead; ++k)
        for (const PipelineStage& s : stages)
            if (k + s.lead >= max_lead && k + s.lead - max_lead < n) s.run(k + s.lead - max_lead);
}

// Nanoseconds per element of a pass of one engine over a row (preset rates).
double ns_per_elem(const StreamEngineConfig& e, double cycles_per_elem) {
    return cycles_per_elem / (std::max<uint32_t>(1, e.elems_per_cycle) * e.clock_ghz);
}

// Two-input elementwise passes over D columns split between the VectorE (columns [0, c)) and the
// GpSimdE (the rest): c such that both finish a row tile together, given 'ops' such passes and
// the other work each engine has per row tile. Slices under kMinSplit columns are not split off.
uint32_t vector_columns(const ChipConfig& chip, uint32_t D, int ops, double vector_other_ns, double gpsimd_other_ns) {
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
double pass_ns(const StreamEngineConfig& e, double n, double cycles_per_elem, int operands) {
    double c = std::max<double>(e.min_ii_cycles, n * cycles_per_elem / std::max<uint32_t>(1, e.elems_per_cycle)) +
               e.fixed_overhead_cycles;
    if (!e.access_overhead_pipelined) c += static_cast<double>(e.access_overhead_cycles) * operands;
    return c / e.clock_ghz;
}

// Runs op(first column, count, engine) on the VectorE's and the GpSimdE's column ranges.
void split_columns(uint32_t D, uint32_t vector_cols, const std::function<void(uint32_t, uint32_t, Engine)>& op) {
    if (vector_cols > 0) op(0, vector_cols, Engine::Vector);
    if (vector_cols < D) op(vector_cols, D - vector_cols, Engine::GpSimd);
}

// SBUF bytes per partition left to a kernel that allocates now (a few small tiles aside).
uint64_t sbuf_available(const KernelBuilder& kb) {
    constexpr uint64_t kSmallTiles = 4096;
    const uint64_t total = kb.chip().sbuf.bytes_per_partition, used = kb.sbuf_bytes_in_use() + kSmallTiles;
    return total > used ? total - used : 0;
}

// The forward with one row per partition (rows of at least kEngineSplitRow elements), row tiles
// software-pipelined: step k loads tile k+3, sums the row of tile k+2 on the VectorE (layer
// norm), runs the ScalarE part of tile k+1 (-mean; the sum of squared deviations as a square
// with the -mean bias and a fused sum; rstd; xhat = (x - mean) * rstd) and the weight and bias
// passes of tile k, split by columns between the VectorE and the GpSimdE, then stores it.
// Returns false, emitting nothing, when its buffers do not fit in SBUF.
bool norm_forward_rows(KernelBuilder& kb, bool rms, const std::vector<RowTile>& tiles, uint32_t D,
                       const TensorDesc& out, const TensorDesc* mean, const TensorDesc* rstd, const TensorDesc& in,
                       const TensorDesc* weight, const TensorDesc* bias, float eps) {
    for (const RowTile& t : tiles)
        if (t.G != 1 || t.chunks.size() != 1) return false;
    const ChipConfig& chip = kb.chip();
    const bool affine = weight || bias;
    // Buffers: x (loaded ahead), xhat (fp32, when an affine pass follows), out, weight and bias
    // rows; the deepest set that fits. A buffer's depth is at least the number of row tiles it
    // holds at once in program order (x: 3, xhat: 2, out: 2 as the ScalarE writes it a step
    // before its store when no affine pass follows); deeper ones let the loads run further ahead
    // and the stores drain.
    struct Depths {
        int x, work, out;
    };
    const uint64_t fixed = (weight ? dtype_size(weight->dtype) : 0) + (bias ? dtype_size(bias->dtype) : 0);
    auto bytes = [&](const Depths& d) {
        return uint64_t(D) * (fixed + d.x * dtype_size(in.dtype) + (affine ? d.work * 4 : 0) +
                              d.out * dtype_size(out.dtype));
    };
    const uint64_t available = sbuf_available(kb);
    const Depths* depth = nullptr;
    static constexpr Depths kDepths[] = {{4, 2, 3}, {3, 2, 2}};
    for (const Depths& d : kDepths)
        if (bytes(d) <= available) {
            depth = &d;
            break;
        }
    if (!depth) return false;

    // As many bytes are stored as loaded: half the queues take the stores.
    DmaQueues queues(chip, chip.dma.queues / 2);
    Tile w_tile, b_tile;
    if (weight) {
        w_tile = kb.alloc_sbuf(kPartitions, {D}, weight->dtype);
        load_row_broadcast(kb, w_tile, *weight, queues, true);
    }
    if (bias) {
        b_tile = kb.alloc_sbuf(kPartitions, {D}, bias->dtype);
        load_row_broadcast(kb, b_tile, *bias, queues, true);
    }
    TileSlots x(kb, depth->x, D, in.dtype), xhat, o(kb, depth->out, D, out.dtype);
    if (affine) xhat = TileSlots(kb, depth->work, D, DType::f32);
    // Per row tile: the row sum, then -mean; the sum of squares, then rstd; mean.
    TileSlots stats(kb, 6, 3, DType::f32);
    const float inv_d = 1.0f / static_cast<float>(D);
    const double vector_sum_ns =
        rms ? 0.0
            : D * ns_per_elem(chip.vector, chip.vector.bf16_fast_mode && dtype_size(in.dtype) == 2 ? 0.5 : 1.0);
    const uint32_t vector_cols = vector_columns(chip, D, (weight ? 1 : 0) + (bias ? 1 : 0), vector_sum_ns, 0.0);

    run_pipeline(tiles.size(), {
        {3, [&](size_t i) {
             dma_tile(kb, queues, tile_view(x[i], tiles[i].P, D), hbm_ap(tiles[i].chunks[0], 1, in), false, 0);
         }},
        {2, [&](size_t i) {
             const uint32_t P = tiles[i].P;
             if (!rms) kb.tensor_reduce(stats[i].region(0, P, 0, 1), tile_view(x[i], P, D), ReduceOp::add);
         }},
        {1, [&](size_t i) {
             const RowTile& t = tiles[i];
             const uint32_t P = t.P;
             const AccessPattern xv = tile_view(x[i], P, D), nm = stats[i].region(0, P, 0, 1),
                                 rv = stats[i].region(0, P, 1, 1), mv = stats[i].region(0, P, 2, 1);
             if (!rms) kb.tensor_scalar(nm, nm, AluOp::mul, -inv_d, AluOp::bypass, 0.0f, Engine::Scalar);
             // The square's output is discarded: it goes where xhat goes next.
             const AccessPattern dst = tile_view(affine ? xhat[i] : o[i], P, D);
             kb.activation_ex(dst, xv, ActFunc::square, 1.0f, nullptr, 0.0f, rms ? nullptr : &nm, ReduceOp::add, &rv);
             kb.activation(rv, rv, ActFunc::rsqrt, inv_d, eps);
             if (rms) kb.tensor_scalar_ex(dst, xv, AluOp::mul, 0, &rv, AluOp::bypass, 0, nullptr, 0, Engine::Scalar);
             else kb.tensor_scalar_ex(dst, xv, AluOp::add, 0, &nm, AluOp::mul, 0, &rv, 0, Engine::Scalar);
             if (mean && !rms) {
                 kb.tensor_scalar(mv, nm, AluOp::mul, -1.0f, AluOp::bypass, 0.0f, Engine::Scalar);
                 dma_tile(kb, queues, hbm_ap(t.kept, 2, *mean), mv, true);
             }
             if (rstd) dma_tile(kb, queues, hbm_ap(t.kept, 3, *rstd), rv, true);
         }},
        {0, [&](size_t i) {
             const RowTile& t = tiles[i];
             const uint32_t P = t.P;
             if (affine) split_columns(D, vector_cols, [&](uint32_t c0, uint32_t n, Engine e) {
                 const AccessPattern h = xhat[i].region(0, P, c0, n), ov = o[i].region(0, P, c0, n);
                 if (weight) kb.tensor_tensor(bias ? h : ov, h, w_tile.region(0, P, c0, n), AluOp::mul, e);
                 if (bias) kb.tensor_tensor(ov, h, b_tile.region(0, P, c0, n), AluOp::add, e);
             });
             dma_tile(kb, queues, hbm_ap(t.chunks[0], 0, out), tile_view(o[i], P, D), true, 0);
         }},
    });
    stats.release(kb);
    if (affine) xhat.release(kb);
    o.release(kb);
    x.release(kb);
    if (bias) kb.release(b_tile);
    if (weight) kb.release(w_tile);
    return true;
}

// Rows longer than one SBUF partition holds, in chunks of the normalized dims, per row tile:
// pass 1 the mean (layer norm), pass 2 the sum of squared deviations (ScalarE square with the
// -mean bias and a fused sum), pass 3 the normalized output; weight and bias chunks are loaded
// broadcast to the row tile's partitions.
void norm_forward_chunked(KernelBuilder& kb, const std::string& name, bool rms, const TensorDesc& out,
                          const TensorDesc* mean, const TensorDesc* rstd, const TensorDesc& in,
                          const TensorDesc* weight, const TensorDesc* bias, int64_t normalized_ndim, float eps) {
    const std::vector<int64_t> dims = last_dims(name, in, normalized_ndim);
    // Operands: 0 out, 1 in, 2 mean, 3 rstd, 4 weight, 5 bias (weight and bias broadcast over rows).
    RowSpace rs = row_space(name, in, dims,
                            {{&out, false}, {&in, false}, {mean, true}, {rstd, true}, {weight, false}, {bias, false}});
    rs.nred = simplify(rs.space, true, rs.nred);
    const uint64_t per_col = 2 * dtype_size(in.dtype) + 4 + 2 * dtype_size(out.dtype) +
                             (weight ? 2 * dtype_size(weight->dtype) : 0) + (bias ? 2 * dtype_size(bias->dtype) : 0);
    const uint32_t fmax = column_budget(kb.chip(), per_col, 1);
    const std::vector<RowTile> tiles = plan_rows(rs.space, rs.nred, fmax, false);
    uint32_t F = 1;
    for (const RowTile& t : tiles)
        for (uint32_t r : t.R) F = std::max(F, r);
    const float inv_d = 1.0f / static_cast<float>(rs.D);

    TileRing x_ring(kb, 2, {F}, in.dtype);
    TileRing w_ring, b_ring;
    if (weight) w_ring = TileRing(kb, 2, {F}, weight->dtype);
    if (bias) b_ring = TileRing(kb, 2, {F}, bias->dtype);
    const Tile work = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
    TileRing o_ring(kb, 2, {F}, out.dtype);
    const Tile m = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
    const Tile neg_m = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
    const Tile r = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
    const Tile part = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
    DmaQueues queues(kb.chip());

    for (const RowTile& t : tiles) {
        const uint32_t P = t.P;
        const AccessPattern mv = tile_view(m, P, 1), nv = tile_view(neg_m, P, 1), rv = tile_view(r, P, 1),
                            pv = tile_view(part, P, 1);
        auto load = [&](TileRing& ring, size_t c, int k, const TensorDesc& d) {
            const AccessPattern v = tile_view(ring.next(), P, t.R[c]);
            dma_tile(kb, queues, v, hbm_ap(t.chunks[c], k, d), false);
            return v;
        };
        if (!rms) {
            for (size_t c = 0; c < t.chunks.size(); ++c) {
                kb.tensor_reduce(c == 0 ? mv : pv, load(x_ring, c, 1, in), ReduceOp::add);
                if (c > 0) kb.tensor_tensor(mv, mv, pv, AluOp::add);
            }
            kb.tensor_scalar(mv, mv, AluOp::mul, inv_d);
            kb.tensor_scalar(nv, mv, AluOp::mul, -1.0f);
        }
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const AccessPattern acc = c == 0 ? rv : pv;
            kb.activation_ex(tile_view(work, P, t.R[c]), load(x_ring, c, 1, in), ActFunc::square, 1.0f, nullptr, 0.0f,
                             rms ? nullptr : &nv, ReduceOp::add, &acc);
            if (c > 0) kb.tensor_tensor(rv, rv, pv, AluOp::add);
        }
        kb.activation(rv, rv, ActFunc::rsqrt, inv_d, eps);
        for (size_t c = 0; c < t.chunks.size(); ++c) {
            const AccessPattern x = load(x_ring, c, 1, in), wk = tile_view(work, P, t.R[c]);
            const AccessPattern o = tile_view(o_ring.next(), P, t.R[c]);
            const bool more = weight || bias;
            if (rms) kb.tensor_scalar_ex(more ? wk : o, x, AluOp::mul, 0.0f, &rv, AluOp::bypass, 0.0f, nullptr);
            else kb.tensor_scalar_ex(more ? wk : o, x, AluOp::sub, 0.0f, &mv, AluOp::mul, 0.0f, &rv);
            if (weight) kb.tensor_tensor(bias ? wk : o, wk, load(w_ring, c, 4, *weight), AluOp::mul);
            if (bias) kb.tensor_tensor(o, wk, load(b_ring, c, 5, *bias), AluOp::add);
            dma_tile(kb, queues, hbm_ap(t.chunks[c], 0, out), o, true);
        }
        if (mean && !rms) dma_tile(kb, queues, hbm_ap(t.kept, 2, *mean), mv, true);
        if (rstd) dma_tile(kb, queues, hbm_ap(t.kept, 3, *rstd), rv, true);
    }
    kb.release(part);
    kb.release(r);
    kb.release(neg_m);
    kb.release(m);
    o_ring.release(kb);
    kb.release(work);
    if (bias) b_ring.release(kb);
    if (weight) w_ring.release(kb);
    x_ring.release(kb);
}

// The shared forward: out = (x - mean) * rstd * weight + bias (rms: no mean, no bias).
void norm_forward(KernelBuilder& kb, const std::string& name, bool rms, const TensorDesc& out, const TensorDesc* mean,
                  const TensorDesc* rstd, const TensorDesc& in, const TensorDesc* weight, const TensorDesc* bias,
                  int64_t normalized_ndim, float eps) {
    check_same_shape(name, out, in);
    const std::vector<int64_t> dims = last_dims(name, in, normalized_ndim);
    RowSpace rs = row_space(name, in, dims, {{&out, false}, {&in, false}, {mean, true}, {rstd, true}});
    if (weight && weight->numel() != rs.D) fail(name, "weight " + weight->str() + " must have the normalized shape");
    if (bias && bias->numel() != rs.D) fail(name, "bias " + bias->str() + " must have the normalized shape");
    if (rs.space.numel() == 0) return;
    rs.nred = simplify(rs.space, true, rs.nred);
    check_no_overlap(name, rs.space, 0);
    if (rs.nred > kMaxFreeDims) fail(name, "the normalized dims of " + in.str() + " need more than 4 access-pattern dims");
    const uint64_t per_col = 2 * dtype_size(in.dtype) + 8 + 2 * dtype_size(out.dtype) +
                             (weight ? dtype_size(weight->dtype) : 0) + (bias ? dtype_size(bias->dtype) : 0);
    const uint32_t fmax = whole_row_budget(kb.chip(), per_col, rs.D);
    if (fmax == 0) {
        norm_forward_chunked(kb, name, rms, out, mean, rstd, in, weight, bias, normalized_ndim, eps);
        return;
    }
    const uint32_t D = static_cast<uint32_t>(rs.D);
    // Rows of at least kEngineSplitRow elements go one per partition, so that the per-row
    // statistics are per-partition scalars and the work splits across engines.
    if (D >= kEngineSplitRow &&
        norm_forward_rows(kb, rms, plan_rows(rs.space, rs.nred, D), D, out, mean, rstd, in, weight, bias, eps))
        return;
    const std::vector<RowTile> tiles = plan_rows(rs.space, rs.nred, fmax);
    uint32_t F = 1, G = 1;
    for (const RowTile& t : tiles) F = std::max(F, t.G * D), G = std::max(G, t.G);

    DmaQueues queues(kb.chip());
    Tile w_tile, b_tile;
    if (weight) {
        w_tile = kb.alloc_sbuf(kPartitions, {D}, weight->dtype);
        load_row_broadcast(kb, w_tile, *weight, queues);
    }
    if (bias) {
        b_tile = kb.alloc_sbuf(kPartitions, {D}, bias->dtype);
        load_row_broadcast(kb, b_tile, *bias, queues);
    }
    TileRing x_ring(kb, 2, {F}, in.dtype);
    const Tile xc = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
    const Tile sq = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
    TileRing o_ring(kb, 2, {F}, out.dtype);
    TileRing m_ring(kb, 2, {G}, DType::f32);
    TileRing r_ring(kb, 2, {G}, DType::f32);

    for (const RowTile& t : tiles) {
        const uint32_t P = t.P, Gt = t.G;
        const Tile& x = x_ring.next();
        dma_tile(kb, queues, tile_view(x, P, Gt * D), hbm_ap(t.chunks[0], 1, in), false);
        const AccessPattern xv = chunk_view(x, P, Gt, D), cv = chunk_view(xc, P, Gt, D), qv = chunk_view(sq, P, Gt, D);
        const Tile& m = m_ring.next();
        const Tile& r = r_ring.next();
        const AccessPattern mv = tile_view(m, P, Gt), rv = tile_view(r, P, Gt);
        AccessPattern centered = xv;
        if (!rms) {
            kb.tensor_reduce(mv, xv, ReduceOp::add);
            kb.tensor_scalar(mv, mv, AluOp::mul, 1.0f / static_cast<float>(D));
            kb.tensor_tensor(cv, xv, group_bcast(m, P, Gt, D), AluOp::sub);
            centered = cv;
        }
        kb.tensor_tensor(qv, centered, centered, AluOp::mul);
        kb.tensor_reduce(rv, qv, ReduceOp::add);
        kb.activation(rv, rv, ActFunc::rsqrt, 1.0f / static_cast<float>(D), eps);
        // y = centered * rstd (* weight) (+ bias); the last step writes out's dtype.
        const AccessPattern o = chunk_view(o_ring.next(), P, Gt, D);
        const bool more_after_scale = weight || bias;
        kb.tensor_tensor(more_after_scale ? cv : o, centered, group_bcast(r, P, Gt, D), AluOp::mul);
        if (weight) kb.tensor_tensor(bias ? cv : o, cv, row_bcast(w_tile, P, Gt, D), AluOp::mul);
        if (bias) kb.tensor_tensor(o, cv, row_bcast(b_tile, P, Gt, D), AluOp::add);
        dma_tile(kb, queues, hbm_ap(t.chunks[0], 0, out), o, true);
        if (mean && !rms) dma_tile(kb, queues, hbm_ap(t.kept, 2, *mean), mv, true);
        if (rstd) dma_tile(kb, queues, hbm_ap(t.kept, 3, *rstd), rv, true);
    }
    r_ring.release(kb);
    m_ring.release(kb);
    o_ring.release(kb);
    kb.release(sq);
    kb.release(xc);
    x_ring.release(kb);
    if (bias) kb.release(b_tile);
    if (weight) kb.release(w_tile);
}

// Rows longer than one SBUF partition holds, in chunks of the normalized dims. grad_in per row
// tile in two passes over the chunks (the row sums mean(gw) and mean(gw * xhat), then the
// gradient, plus the addend's chunk when there is one); grad_weight / grad_bias in a third pass,
// chunk by chunk over every row tile, into [128, chunk] fp32 accumulators summed across
// partitions by the TensorE.
void norm_backward_chunked(KernelBuilder& kb, const std::string& name, bool rms, const TensorDesc* grad_in,
                           const TensorDesc* grad_weight, const TensorDesc* grad_bias, const TensorDesc& grad_out,
                           const TensorDesc& in, const TensorDesc* mean, const TensorDesc& rstd,
                           const TensorDesc* weight, const TensorDesc* addend, int64_t normalized_ndim) {
    const std::vector<int64_t> dims = last_dims(name, in, normalized_ndim);
    const uint64_t per_col = 2 * (dtype_size(grad_out.dtype) + dtype_size(in.dtype)) + 12 +
                             (weight ? 2 * dtype_size(weight->dtype) : 0) + (grad_in ? dtype_size(grad_in->dtype) : 0) +
                             (addend ? 2 * dtype_size(addend->dtype) : 0);
    const uint32_t fmax = column_budget(kb.chip(), per_col, 1);
    int64_t D = 1;
    for (int64_t d : dims) D *= in.sizes[d];
    const float inv_d = 1.0f / static_cast<float>(D);
    DmaQueues queues(kb.chip());
    // Operands 1 grad_out, 2 in, 3 mean, 4 rstd of both spaces; 0 and 5 differ per pass.
    auto plan = [&](RowSpace& rs) {
        rs.nred = simplify(rs.space, true, rs.nred);
        return plan_rows(rs.space, rs.nred, fmax, false);
    };
    auto max_cols = [](const std::vector<RowTile>& tiles) {
        uint32_t F = 1;
        for (const RowTile& t : tiles)
            for (uint32_t r : t.R) F = std::max(F, r);
        return F;
    };
    const Tile m = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
    const Tile r = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
    // xhat = (x - mean) * rstd (rms: x * rstd) of a loaded chunk.
    auto normalized = [&](const AccessPattern& dst, const AccessPattern& x, uint32_t P) {
        const AccessPattern mv = tile_view(m, P, 1), rv = tile_view(r, P, 1);
        if (rms) kb.tensor_scalar_ex(dst, x, AluOp::mul, 0.0f, &rv, AluOp::bypass, 0.0f, nullptr);
        else kb.tensor_scalar_ex(dst, x, AluOp::sub, 0.0f, &mv, AluOp::mul, 0.0f, &rv);
    };
    auto load_stats = [&](const RowTile& t) {
        if (!rms) dma_tile(kb, queues, tile_view(m, t.P, 1), hbm_ap(t.kept, 3, *mean), false);
        dma_tile(kb, queues, tile_view(r, t.P, 1), hbm_ap(t.kept, 4, rstd), false);
    };

    if (grad_in) {
        RowSpace rs = row_space(name, in, dims,
                                {{grad_in, false}, {&grad_out, false}, {&in, false}, {mean, true}, {&rstd, true},
                                 {weight, false}, {addend, false}});
        const std::vector<RowTile> tiles = plan(rs);
        const uint32_t F = max_cols(tiles);
        TileRing g_ring(kb, 2, {F}, grad_out.dtype), x_ring(kb, 2, {F}, in.dtype), w_ring, add_ring;
        if (weight) w_ring = TileRing(kb, 2, {F}, weight->dtype);
        if (addend) add_ring = TileRing(kb, 2, {F}, addend->dtype);
        const Tile xhat = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
        const Tile gw = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
        const Tile tmp = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
        TileRing o_ring(kb, 2, {F}, grad_in->dtype);
        const Tile a = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
        const Tile b = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
        const Tile part = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
        for (const RowTile& t : tiles) {
            const uint32_t P = t.P;
            const AccessPattern av = tile_view(a, P, 1), bv = tile_view(b, P, 1), pv = tile_view(part, P, 1);
            load_stats(t);
            // xhat and gw = g * weight of chunk c (views of the xhat / gw tiles).
            auto chunk = [&](size_t c, AccessPattern* hv, AccessPattern* gwv) {
                const uint32_t R = t.R[c];
                const AccessPattern g = tile_view(g_ring.next(), P, R), x = tile_view(x_ring.next(), P, R);
                dma_tile(kb, queues, g, hbm_ap(t.chunks[c], 1, grad_out), false);
                dma_tile(kb, queues, x, hbm_ap(t.chunks[c], 2, in), false);
                *hv = tile_view(xhat, P, R);
                normalized(*hv, x, P);
                *gwv = g;
                if (weight) {
                    const AccessPattern w = tile_view(w_ring.next(), P, R);
                    dma_tile(kb, queues, w, hbm_ap(t.chunks[c], 5, *weight), false);
                    *gwv = tile_view(gw, P, R);
                    kb.tensor_tensor(*gwv, g, w, AluOp::mul);
                }
            };
            for (size_t c = 0; c < t.chunks.size(); ++c) {
                AccessPattern hv, gwv;
                chunk(c, &hv, &gwv);
                const AccessPattern tv = tile_view(tmp, P, t.R[c]);
                kb.tensor_tensor(tv, gwv, hv, AluOp::mul);
                kb.tensor_reduce(c == 0 ? bv : pv, tv, ReduceOp::add);
                if (c > 0) kb.tensor_tensor(bv, bv, pv, AluOp::add);
                if (rms) continue;
                kb.tensor_reduce(c == 0 ? av : pv, gwv, ReduceOp::add);
                if (c > 0) kb.tensor_tensor(av, av, pv, AluOp::add);
            }
            kb.tensor_scalar(bv, bv, AluOp::mul, inv_d);
            if (!rms) kb.tensor_scalar(av, av, AluOp::mul, inv_d);
            for (size_t c = 0; c < t.chunks.size(); ++c) {
                AccessPattern hv, gwv;
                chunk(c, &hv, &gwv);
                const AccessPattern tv = tile_view(tmp, P, t.R[c]), o = tile_view(o_ring.next(), P, t.R[c]);
                const AccessPattern rv = tile_view(r, P, 1);
                AccessPattern add;
                if (addend) {
                    add = tile_view(add_ring.next(), P, t.R[c]);
                    dma_tile(kb, queues, add, hbm_ap(t.chunks[c], 6, *addend), false);
                }
                kb.tensor_scalar_ex(tv, hv, AluOp::mul, 0.0f, &bv, AluOp::bypass, 0.0f, nullptr);
                kb.tensor_tensor(tv, gwv, tv, AluOp::sub);
                // The gradient rounds to grad_in's dtype once: after the addend's add when there is one.
                const AccessPattern grad = addend ? tv : o;
                if (rms) kb.tensor_scalar_ex(grad, tv, AluOp::mul, 0.0f, &rv, AluOp::bypass, 0.0f, nullptr);
                else kb.tensor_scalar_ex(grad, tv, AluOp::sub, 0.0f, &av, AluOp::mul, 0.0f, &rv);
                if (addend) kb.tensor_tensor(o, tv, add, AluOp::add);
                dma_tile(kb, queues, hbm_ap(t.chunks[c], 0, *grad_in), o, true);
            }
        }
        kb.release(part);
        kb.release(b);
        kb.release(a);
        o_ring.release(kb);
        kb.release(tmp);
        kb.release(gw);
        kb.release(xhat);
        if (addend) add_ring.release(kb);
        if (weight) w_ring.release(kb);
        x_ring.release(kb);
        g_ring.release(kb);
    }

    if (grad_weight || grad_bias) {
        RowSpace rs = row_space(name, in, dims,
                                {{grad_weight, false}, {&grad_out, false}, {&in, false}, {mean, true}, {&rstd, true},
                                 {grad_bias, false}});
        const std::vector<RowTile> tiles = plan(rs);
        const uint32_t F = max_cols(tiles);
        const uint32_t bank = kb.chip().tensor.moving_fmax;
        TileRing g_ring(kb, 2, {F}, grad_out.dtype), x_ring(kb, 2, {F}, in.dtype);
        const Tile xhat = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
        Tile dw_acc, db_acc, dw_row, db_row;
        if (grad_weight) {
            dw_acc = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
            dw_row = kb.alloc_sbuf(1, {F}, grad_weight->dtype);
        }
        if (grad_bias) {
            db_acc = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
            db_row = kb.alloc_sbuf(1, {F}, grad_bias->dtype);
        }
        const Tile ones = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
        kb.memset(ones.ap(), 1.0f);
        const Tile ps = kb.alloc_psum(1, bank);
        // Every row tile cuts the normalized dims into the same chunks.
        for (size_t c = 0; c < tiles[0].chunks.size(); ++c) {
            const uint32_t R = tiles[0].R[c];
            if (grad_weight) kb.memset(tile_view(dw_acc, kPartitions, R), 0.0f);
            if (grad_bias) kb.memset(tile_view(db_acc, kPartitions, R), 0.0f);
            for (const RowTile& t : tiles) {
                const uint32_t P = t.P;
                const AccessPattern g = tile_view(g_ring.next(), P, R);
                dma_tile(kb, queues, g, hbm_ap(t.chunks[c], 1, grad_out), false);
                if (grad_bias) {
                    const AccessPattern acc = tile_view(db_acc, P, R);
                    kb.tensor_tensor(acc, acc, g, AluOp::add);
                }
                if (!grad_weight) continue;
                load_stats(t);
                const AccessPattern x = tile_view(x_ring.next(), P, R), hv = tile_view(xhat, P, R);
                dma_tile(kb, queues, x, hbm_ap(t.chunks[c], 2, in), false);
                normalized(hv, x, P);
                kb.tensor_tensor(hv, hv, g, AluOp::mul);
                const AccessPattern acc = tile_view(dw_acc, P, R);
                kb.tensor_tensor(acc, acc, hv, AluOp::add);
            }
            const size_t nkept = tiles[0].kept.dims.size();
            if (grad_weight)
                store_chunk_partition_sum(kb, dw_acc, ones, dw_row, ps, R,
                                          chunk_row_ap(tiles[0].chunks[c], nkept, 0, *grad_weight), queues);
            if (grad_bias)
                store_chunk_partition_sum(kb, db_acc, ones, db_row, ps, R,
                                          chunk_row_ap(tiles[0].chunks[c], nkept, 5, *grad_bias), queues);
        }
        kb.release(ps);
        kb.release(ones);
        if (grad_bias) {
            kb.release(db_row);
            kb.release(db_acc);
        }
        if (grad_weight) {
            kb.release(dw_row);
            kb.release(dw_acc);
        }
        kb.release(xhat);
        x_ring.release(kb);
        g_ring.release(kb);
    }
    kb.release(r);
    kb.release(m);
}

// The backward with one row per partition (rows of at least kEngineSplitRow elements), row tiles
// software-pipelined. With gwr = gw * rstd (gw = g * weight), a = -mean(gwr) and
// b = -rstd * mean(gw * xhat), grad_in = gwr + xhat * b + a (rms: a = 0). The ScalarE, the
// busiest engine, computes xhat = (x - mean) * rstd, gwr with its row sum, the row sum of
// rstd * gw * xhat and u = xhat * b + a; the VectorE gw; the two-input passes gw * xhat,
// g * xhat and gwr + u are split by columns between the VectorE and the GpSimdE. The TensorE
// sums g * xhat and g over the rows (ones^T @ tile, accumulated in PSUM) for grad_weight and
// grad_bias. Step k loads tile k+3, finishes tile k (u, grad_in, its store), starts tile k+2
// (xhat, gw, the grad_bias sums) and runs the middle of tile k+1 (shallower where SBUF is short).
// An addend (operand 5) is loaded with the tile's other operands and added to gwr, in fp32, by
// one more split two-input pass just before grad_in = gwr + u.
// Returns false, emitting nothing, when its buffers do not fit in SBUF.
bool norm_backward_rows(KernelBuilder& kb, bool rms, const std::vector<RowTile>& tiles, uint32_t D,
                        const TensorDesc* grad_in, const TensorDesc* grad_weight, const TensorDesc* grad_bias,
                        const TensorDesc& grad_out, const TensorDesc& in, const TensorDesc* mean,
                        const TensorDesc& rstd, const TensorDesc* weight, const TensorDesc* addend) {
    for (const RowTile& t : tiles)
        if (t.G != 1 || t.chunks.size() != 1) return false;
    const ChipConfig& chip = kb.chip();
    // Per-column accumulators in PSUM: grad_weight's block j (psum_cols columns) on partition
    // 2j * kAccStride, grad_bias's on (2j + 1) * kAccStride (matmul outputs start on a multiple of
    // 32 partitions), each bank-sized chunk of a block in its own bank.
    constexpr uint32_t kAccStride = 32;
    const uint32_t bank_cols = chip.tensor.moving_fmax;
    const uint32_t psum_cols = static_cast<uint32_t>(chip.psum.bytes_per_partition / 4);
    const uint32_t blocks = static_cast<uint32_t>(ceil_div(D, psum_cols));
    const uint32_t bank_cols_used = std::min<uint32_t>(D, psum_cols);
    const uint32_t acc_partitions = (2 * blocks - 1) * kAccStride + 1;
    if ((grad_weight || grad_bias) && acc_partitions > chip.psum.partitions) return false;

    // Which intermediates exist: gw = g * weight (grad_in with a weight), gw * xhat (t, grad_in;
    // it is g * xhat without a weight) and g * xhat (prod, grad_weight).
    const bool need_gw = grad_in && weight;
    const bool need_prod = grad_weight || (grad_in && !weight);
    const bool need_t = grad_in && weight;
    // Pipeline shape and buffers, the deepest that fits. The loads run load_lead steps ahead, the
    // start of a tile (xhat, gw) start_lead steps. A buffer's depth is at least the number of row
    // tiles it holds at once in program order: grad_in and the products 1; xhat and gwr 3 when a
    // tile starts two steps ahead, 2 when one; g and x 3 and 2 with loads three steps ahead, 2 and
    // 1 with loads two steps ahead, 2 and 2 when the tile also starts one step ahead.
    struct Depths {
        size_t load_lead, start_lead;
        int g, x, work, out, tmp;
    };
    const uint64_t fixed = weight && grad_in ? dtype_size(weight->dtype) : 0;
    auto bytes = [&](const Depths& d) {
        uint64_t per_col = fixed + d.g * dtype_size(grad_out.dtype) + d.x * dtype_size(in.dtype) + d.work * 4 +
                           d.tmp * 4 * ((need_t ? 1 : 0) + (need_prod ? 1 : 0));
        if (grad_in) per_col += d.work * 4 + d.out * dtype_size(grad_in->dtype);   // gwr, grad_in
        // The addend is held from its load to the tile's last stage.
        if (addend) per_col += (d.load_lead + 1) * dtype_size(addend->dtype);
        return uint64_t(D) * per_col;
    };
    const uint64_t available = sbuf_available(kb);
    const Depths* depth = nullptr;
    static constexpr Depths kDepths[] = {
        {3, 2, 3, 2, 3, 2, 1}, {3, 2, 3, 2, 3, 1, 1}, {2, 2, 2, 1, 3, 1, 1}, {2, 1, 2, 2, 2, 1, 1}};
    for (const Depths& d : kDepths)
        if (bytes(d) <= available) {
            depth = &d;
            break;
        }
    if (!depth) return false;

    // The stores (grad_in) are a third of the traffic.
    DmaQueues queues(chip, grad_in ? chip.dma.queues / 3 : chip.dma.queues / 4);
    Tile w_tile;
    if (need_gw) {
        w_tile = kb.alloc_sbuf(kPartitions, {D}, weight->dtype);
        load_row_broadcast(kb, w_tile, *weight, queues, true);
    }
    TileSlots g(kb, depth->g, D, grad_out.dtype), x(kb, depth->x, D, in.dtype), xhat(kb, depth->work, D, DType::f32);
    TileSlots gwr, o, t_slots, prod, add;
    if (grad_in) {
        gwr = TileSlots(kb, depth->work, D, DType::f32);
        o = TileSlots(kb, depth->out, D, grad_in->dtype);
    }
    if (addend) add = TileSlots(kb, static_cast<int>(depth->load_lead) + 1, D, addend->dtype);
    if (need_t) t_slots = TileSlots(kb, depth->tmp, D, DType::f32);
    if (need_prod) prod = TileSlots(kb, depth->tmp, D, DType::f32);
    // Per row tile: mean, rstd, sum(gwr) then a, rstd * sum(gw * xhat) then b.
    TileSlots stats(kb, 6, 4, DType::f32);
    Tile ones_f32, ones_g;
    std::vector<Tile> acc_banks;
    if (grad_weight || grad_bias) {
        ones_f32 = kb.alloc_sbuf(kPartitions, {1}, DType::f32);
        kb.memset(ones_f32.ap(), 1.0f);
        ones_g = kb.alloc_sbuf(kPartitions, {1}, grad_out.dtype);
        kb.memset(ones_g.ap(), 1.0f);
        for (uint32_t c0 = 0; c0 < bank_cols_used; c0 += bank_cols)
            acc_banks.push_back(kb.alloc_psum(acc_partitions, std::min(bank_cols, bank_cols_used - c0)));
    }
    // acc[c0, n) += sum over the P rows of src columns [c0, c0 + n) (kind 0: grad_weight, 1: grad_bias).
    auto row_sum = [&](size_t i, const Tile& src, const Tile& ones, uint32_t kind) {
        const uint32_t P = tiles[i].P;
        for (uint32_t c0 = 0; c0 < D; c0 += bank_cols) {
            const uint32_t n = std::min(bank_cols, D - c0), block = c0 / psum_cols;
            const Tile& bank = acc_banks[(c0 % psum_cols) / bank_cols];
            kb.matmul(bank.region((2 * block + kind) * kAccStride, 1, 0, n), ones.region(0, P, 0, 1),
                      src.region(0, P, c0, n), i > 0);
        }
    };
    const float inv_d = 1.0f / static_cast<float>(D);
    const double vector_gw_ns =
        need_gw ? D * ns_per_elem(chip.vector, chip.vector.bf16_fast_mode && dtype_size(grad_out.dtype) == 2 &&
                                                       dtype_size(weight->dtype) == 2
                                                   ? 1.0
                                                   : chip.vector.two_input_cycles_per_elem)
                : 0.0;
    // The u pass: columns [0, scalar_cols) on the ScalarE, the rest on the GpSimdE; the two-input
    // passes split at vector_cols. scalar_cols is the one (in steps of 32) that minimises the
    // busiest engine's estimated time per row tile.
    const int split_ops = (need_t ? 1 : 0) + (need_prod ? 1 : 0) + (grad_in ? 1 : 0) + (addend ? 1 : 0);
    const double scalar_ns =
        grad_in ? 3 * pass_ns(chip.scalar, D, 1, 4) + pass_ns(chip.scalar, 2, 1, 2) : pass_ns(chip.scalar, D, 1, 4);
    const double vector_elem = chip.vector.two_input_cycles_per_elem;
    const double gpsimd_elem = chip.gpsimd.two_input_cycles_per_elem;
    uint32_t scalar_cols = D, vector_cols = vector_columns(chip, D, split_ops, vector_gw_ns, 0.0);
    double best = INFINITY;
    for (uint32_t s = 0; grad_in; s = std::min(D, s + 32)) {
        const double gpsimd_u = s < D ? pass_ns(chip.gpsimd, D - s, 1, 2) : 0.0;
        const uint32_t c = vector_columns(chip, D, split_ops, vector_gw_ns, gpsimd_u);
        const double scalar = scalar_ns + (s > 0 ? pass_ns(chip.scalar, s, 1, 4) : 0.0);
        const double vector = vector_gw_ns + (c > 0 ? split_ops * pass_ns(chip.vector, c, vector_elem, 3) : 0.0);
        const double gpsimd = gpsimd_u + (c < D ? split_ops * pass_ns(chip.gpsimd, D - c, gpsimd_elem, 3) : 0.0);
        const double busiest = std::max({scalar, vector, gpsimd});
        if (busiest < best) best = busiest, scalar_cols = s, vector_cols = c;
        if (s == D) break;
    }
    // u = xhat * b + a over columns [c0, c0 + n), in place.
    auto u_pass = [&](size_t i, uint32_t c0, uint32_t n, Engine e) {
        const uint32_t P = tiles[i].P;
        const AccessPattern h = xhat[i].region(0, P, c0, n), av = stats[i].region(0, P, 2, 1),
                            bv = stats[i].region(0, P, 3, 1);
        kb.tensor_scalar_ex(h, h, AluOp::mul, 0.0f, &bv, rms ? AluOp::bypass : AluOp::add, 0.0f, rms ? nullptr : &av, 0,
                            e);
    };
    // The ScalarE's row sum of rstd * gw * xhat runs over t (g * xhat without a weight).
    const TileSlots& t_src = need_t ? t_slots : prod;

    run_pipeline(tiles.size(), {
        {depth->load_lead, [&](size_t i) {
             const RowTile& t = tiles[i];
             dma_tile(kb, queues, tile_view(g[i], t.P, D), hbm_ap(t.chunks[0], 1, grad_out), false, 0);
             dma_tile(kb, queues, tile_view(x[i], t.P, D), hbm_ap(t.chunks[0], 2, in), false, 0);
             if (!rms) dma_tile(kb, queues, stats[i].region(0, t.P, 0, 1), hbm_ap(t.kept, 3, *mean), false);
             dma_tile(kb, queues, stats[i].region(0, t.P, 1, 1), hbm_ap(t.kept, 4, rstd), false);
             if (addend) dma_tile(kb, queues, tile_view(add[i], t.P, D), hbm_ap(t.chunks[0], 5, *addend), false, 0);
         }},
        {0, [&](size_t i) {   // the ScalarE's columns of u = xhat * b + a, in place
             if (grad_in && scalar_cols > 0) u_pass(i, 0, scalar_cols, Engine::Scalar);
         }},
        {depth->start_lead, [&](size_t i) {   // xhat, gw, the grad_bias row sums
             const uint32_t P = tiles[i].P;
             const AccessPattern xv = tile_view(x[i], P, D), h = tile_view(xhat[i], P, D);
             const AccessPattern mv = stats[i].region(0, P, 0, 1), rv = stats[i].region(0, P, 1, 1);
             if (rms) kb.tensor_scalar_ex(h, xv, AluOp::mul, 0, &rv, AluOp::bypass, 0, nullptr, 0, Engine::Scalar);
             else kb.tensor_scalar_ex(h, xv, AluOp::sub, 0, &mv, AluOp::mul, 0, &rv, 0, Engine::Scalar);
             if (need_gw)
                 kb.tensor_tensor(tile_view(gwr[i], P, D), tile_view(g[i], P, D), w_tile.rows(0, P), AluOp::mul);
             if (grad_bias) row_sum(i, g[i], ones_g, 1);
         }},
        {1, [&](size_t i) {   // gw * xhat, g * xhat, the grad_weight row sums, gwr, the row sums of a and b
             const uint32_t P = tiles[i].P;
             const Tile& gw = need_gw ? gwr[i] : g[i];
             split_columns(D, vector_cols, [&](uint32_t c0, uint32_t n, Engine e) {
                 const AccessPattern h = xhat[i].region(0, P, c0, n);
                 const AccessPattern gv = g[i].region(0, P, c0, n);
                 if (need_t) kb.tensor_tensor(t_slots[i].region(0, P, c0, n), gw.region(0, P, c0, n), h, AluOp::mul, e);
                 if (need_prod) kb.tensor_tensor(prod[i].region(0, P, c0, n), gv, h, AluOp::mul, e);
             });
             if (grad_weight) row_sum(i, prod[i], ones_f32, 0);
             if (!grad_in) return;
             const AccessPattern rv = stats[i].region(0, P, 1, 1), av = stats[i].region(0, P, 2, 1),
                                 bv = stats[i].region(0, P, 3, 1);
             const AccessPattern gwv = tile_view(gwr[i], P, D), tv = tile_view(t_src[i], P, D);
             kb.activation_ex(gwv, tile_view(gw, P, D), ActFunc::identity, 1.0f, &rv, 0.0f, nullptr,
                              rms ? ReduceOp::none : ReduceOp::add, rms ? nullptr : &av);
             kb.activation_ex(tv, tv, ActFunc::identity, 1.0f, &rv, 0.0f, nullptr, ReduceOp::add, &bv);
             const AccessPattern ab = rms ? bv : stats[i].region(0, P, 2, 2);
             kb.tensor_scalar(ab, ab, AluOp::mul, -inv_d, AluOp::bypass, 0.0f, Engine::Scalar);
         }},
        {0, [&](size_t i) {   // the GpSimdE's columns of u, grad_in = gwr (+ addend) + u
             if (!grad_in) return;
             const RowTile& t = tiles[i];
             if (scalar_cols < D) u_pass(i, scalar_cols, D - scalar_cols, Engine::GpSimd);
             split_columns(D, vector_cols, [&](uint32_t c0, uint32_t n, Engine e) {
                 const AccessPattern gv = gwr[i].region(0, t.P, c0, n);
                 if (addend) kb.tensor_tensor(gv, gv, add[i].region(0, t.P, c0, n), AluOp::add, e);
                 kb.tensor_tensor(o[i].region(0, t.P, c0, n), gv, xhat[i].region(0, t.P, c0, n), AluOp::add, e);
             });
             dma_tile(kb, queues, hbm_ap(t.chunks[0], 0, *grad_in), tile_view(o[i], t.P, D), true, 0);
         }},
    });

    stats.release(kb);
    if (need_prod) prod.release(kb);
    if (need_t) t_slots.release(kb);
    if (addend) add.release(kb);
    if (grad_in) {
        o.release(kb);
        gwr.release(kb);
    }
    xhat.release(kb);
    x.release(kb);
    g.release(kb);
    if (need_gw) kb.release(w_tile);
    if (grad_weight || grad_bias) {
        // Each accumulator to an SBUF row (partition 0), then stored (the row buffers released first).
        for (uint32_t kind = 0; kind < 2; ++kind) {
            const TensorDesc* dst = kind == 0 ? grad_weight : grad_bias;
            if (!dst) continue;
            const Tile row = kb.alloc_sbuf(1, {D}, DType::f32);
            for (uint32_t c0 = 0; c0 < D; c0 += bank_cols) {
                const uint32_t n = std::min(bank_cols, D - c0), block = c0 / psum_cols;
                const Tile& bank = acc_banks[(c0 % psum_cols) / bank_cols];
                kb.tensor_copy(row.region(0, 1, c0, n), bank.region((2 * block + kind) * kAccStride, 1, 0, n));
            }
            store_row(kb, *dst, row, queues);
            kb.release(row);
        }
        for (auto it = acc_banks.rbegin(); it != acc_banks.rend(); ++it) kb.release(*it);
        kb.release(ones_g);
        kb.release(ones_f32);
    }
    return true;
}

// The shared backward. xhat = (x - mean) * rstd (rms: x * rstd), gw = g * weight;
//   layer norm: grad_in = rstd * (gw - mean(gw) - xhat * mean(gw * xhat))
//   rms norm:   grad_in = rstd * (gw - xhat * mean(gw * xhat))
//   grad_weight = sum over rows of g * xhat, grad_bias = sum over rows of g.
// With an addend, grad_in = (the above, in fp32) + addend, rounded once.
void norm_backward(KernelBuilder& kb, const std::string& name, bool rms, const TensorDesc* grad_in,
                   const TensorDesc* grad_weight, const TensorDesc* grad_bias, const TensorDesc& grad_out,
                   const TensorDesc& in, const TensorDesc* mean, const TensorDesc& rstd, const TensorDesc* weight,
                   const TensorDesc* addend, int64_t normalized_ndim) {
    check_same_shape(name, grad_out, in);
    if (grad_in) check_same_shape(name, *grad_in, in);
    if (addend) {
        if (!grad_in) fail(name, "a grad_input addend needs grad_input");
        check_same_shape(name, *addend, in);
        if (!dtype_is_float(addend->dtype)) fail(name, "the grad_input addend " + addend->str() + " must be a float");
    }
    const std::vector<int64_t> dims = last_dims(name, in, normalized_ndim);
    RowSpace rs = row_space(name, in, dims,
                            {{grad_in, false}, {&grad_out, false}, {&in, false}, {mean, true}, {&rstd, true},
                             {addend, false}});
    for (const TensorDesc* t : {weight, grad_weight, grad_bias})
        if (t && t->numel() != rs.D) fail(name, t->str() + " must have the normalized shape");
    const uint32_t D = static_cast<uint32_t>(rs.D);
    DmaQueues queues(kb.chip());
    if (in.numel() == 0) {
        // No rows: the parameter gradients are zero.
        for (const TensorDesc* t : {grad_weight, grad_bias})
            if (t) fill(kb, *t, 0.0f);
        return;
    }
    rs.nred = simplify(rs.space, true, rs.nred);
    if (grad_in) check_no_overlap(name, rs.space, 0);
    if (rs.nred > kMaxFreeDims) fail(name, "the normalized dims of " + in.str() + " need more than 4 access-pattern dims");
    const uint64_t per_col = dtype_size(grad_out.dtype) * 2 + dtype_size(in.dtype) * 2 + 12 +
                             (grad_in ? dtype_size(grad_in->dtype) : 0) + (weight ? dtype_size(weight->dtype) : 0) +
                             (grad_weight ? 4 : 0) + (grad_bias ? 4 : 0) + (addend ? 2 * dtype_size(addend->dtype) : 0);
    const uint32_t fmax = whole_row_budget(kb.chip(), per_col, rs.D);
    if (fmax == 0) {
        norm_backward_chunked(kb, name, rms, grad_in, grad_weight, grad_bias, grad_out, in, mean, rstd, weight, addend,
                              normalized_ndim);
        return;
    }
    // Rows of at least kEngineSplitRow elements go one per partition (see norm_backward_rows).
    if (D >= kEngineSplitRow && norm_backward_rows(kb, rms, plan_rows(rs.space, rs.nred, D), D, grad_in, grad_weight,
                                                   grad_bias, grad_out, in, mean, rstd, weight, addend))
        return;
    const std::vector<RowTile> tiles = plan_rows(rs.space, rs.nred, fmax);
    uint32_t F = 1, G = 1;
    for (const RowTile& t : tiles) F = std::max(F, t.G * D), G = std::max(G, t.G);

    Tile w_tile, dw_acc, db_acc;
    if (weight) {
        w_tile = kb.alloc_sbuf(kPartitions, {D}, weight->dtype);
        load_row_broadcast(kb, w_tile, *weight, queues);
    }
    if (grad_weight) {
        dw_acc = kb.alloc_sbuf(kPartitions, {D}, DType::f32);
        kb.memset(dw_acc.ap(), 0.0f);
    }
    if (grad_bias) {
        db_acc = kb.alloc_sbuf(kPartitions, {D}, DType::f32);
        kb.memset(db_acc.ap(), 0.0f);
    }
    TileRing g_ring(kb, 2, {F}, grad_out.dtype);
    TileRing x_ring(kb, 2, {F}, in.dtype);
    const Tile xhat = kb.alloc_sbuf(kPartitions, {F}, DType::f32), gw = kb.alloc_sbuf(kPartitions, {F}, DType::f32),
               tmp = kb.alloc_sbuf(kPartitions, {F}, DType::f32);
    TileRing o_ring, add_ring;
    if (grad_in) o_ring = TileRing(kb, 2, {F}, grad_in->dtype);
    if (addend) add_ring = TileRing(kb, 2, {F}, addend->dtype);
    TileRing m_ring(kb, 2, {G}, DType::f32), r_ring(kb, 2, {G}, DType::f32), a_ring(kb, 2, {G}, DType::f32),
        b_ring(kb, 2, {G}, DType::f32);
    const float inv_d = 1.0f / static_cast<float>(D);

    for (const RowTile& t : tiles) {
        const uint32_t P = t.P, Gt = t.G;
        const Tile& g = g_ring.next();
        const Tile& x = x_ring.next();
        const Tile &m = m_ring.next(), &r = r_ring.next(), &a = a_ring.next(), &b = b_ring.next();
        dma_tile(kb, queues, tile_view(g, P, Gt * D), hbm_ap(t.chunks[0], 1, grad_out), false);
        dma_tile(kb, queues, tile_view(x, P, Gt * D), hbm_ap(t.chunks[0], 2, in), false);
        const AccessPattern mv = tile_view(m, P, Gt), rv = tile_view(r, P, Gt);
        if (!rms) dma_tile(kb, queues, mv, hbm_ap(t.kept, 3, *mean), false);
        dma_tile(kb, queues, rv, hbm_ap(t.kept, 4, rstd), false);
        AccessPattern add;
        if (addend) {
            const Tile& a_tile = add_ring.next();
            dma_tile(kb, queues, tile_view(a_tile, P, Gt * D), hbm_ap(t.chunks[0], 5, *addend), false);
            add = chunk_view(a_tile, P, Gt, D);
        }
        const AccessPattern gv = chunk_view(g, P, Gt, D), xv = chunk_view(x, P, Gt, D);
        const AccessPattern hv = chunk_view(xhat, P, Gt, D), wv = chunk_view(gw, P, Gt, D), tv = chunk_view(tmp, P, Gt, D);
        if (rms) {
            kb.tensor_tensor(hv, xv, group_bcast(r, P, Gt, D), AluOp::mul);
        } else {
            kb.tensor_tensor(hv, xv, group_bcast(m, P, Gt, D), AluOp::sub);
            kb.tensor_tensor(hv, hv, group_bcast(r, P, Gt, D), AluOp::mul);
        }
        if (grad_bias) accumulate_groups(kb, db_acc, g, tmp, P, Gt, D);
        if (grad_weight) {
            kb.tensor_tensor(tv, gv, hv, AluOp::mul);
            accumulate_groups(kb, dw_acc, tmp, gw, P, Gt, D);
        }
        if (!grad_in) continue;
        const AccessPattern gwv = weight ? wv : gv;
        if (weight) kb.tensor_tensor(wv, gv, row_bcast(w_tile, P, Gt, D), AluOp::mul);
        const AccessPattern av = tile_view(a, P, Gt), bv = tile_view(b, P, Gt);
        kb.tensor_tensor(tv, gwv, hv, AluOp::mul);
        kb.tensor_reduce(bv, tv, ReduceOp::add);
        kb.tensor_scalar(bv, bv, AluOp::mul, inv_d);
        kb.tensor_tensor(tv, hv, group_bcast(b, P, Gt, D), AluOp::mul);
        kb.tensor_tensor(tv, gwv, tv, AluOp::sub);
        if (!rms) {
            kb.tensor_reduce(av, gwv, ReduceOp::add);
            kb.tensor_scalar(av, av, AluOp::mul, inv_d);
            kb.tensor_tensor(tv, tv, group_bcast(a, P, Gt, D), AluOp::sub);
        }
        const AccessPattern o = chunk_view(o_ring.next(), P, Gt, D);
        // The gradient rounds to grad_in's dtype once: after the addend's add when there is one.
        kb.tensor_tensor(addend ? tv : o, tv, group_bcast(r, P, Gt, D), AluOp::mul);
        if (addend) kb.tensor_tensor(o, tv, add, AluOp::add);
        dma_tile(kb, queues, hbm_ap(t.chunks[0], 0, *grad_in), o, true);
    }
    b_ring.release(kb);
    a_ring.release(kb);
    r_ring.release(kb);
    m_ring.release(kb);
    if (addend) add_ring.release(kb);
    if (grad_in) o_ring.release(kb);
    kb.release(tmp);
    kb.release(gw);
    kb.release(xhat);
    x_ring.release(kb);
    g_ring.release(kb);
    if (grad_bias) store_partition_sum(kb, db_acc, D, *grad_bias, queues);
    if (grad_weight) store_partition_sum(kb, dw_acc, D, *grad_weight, queues);
    if (grad_bias) kb.release(db_acc);
    if (grad_weight) kb.release(dw_acc);
    if (weight) kb.release(w_tile);
}

}  // namespace

void layer_norm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc* mean, const TensorDesc* rstd,
                const TensorDesc& in, const TensorDesc* weight, const TensorDesc* bias, int64_t normalized_ndim,
                float eps) {
    norm_forward(kb, "layer_norm", false, out, mean, rstd, in, weight, bias, normalized_ndim, eps);
}

void layer_norm_backward(KernelBuilder& kb, const TensorDesc* grad_in, const TensorDesc* grad_weight,
                         const TensorDesc* grad_bias, const TensorDesc& grad_out, const TensorDesc& in,
                         const TensorDesc& mean, const TensorDesc& rstd, const TensorDesc* weight,
                         int64_t normalized_ndim, const TensorDesc* grad_input_addend) {
    norm_backward(kb, "layer_norm_backward", false, grad_in, grad_weight, grad_bias, grad_out, in, &mean, rstd, weight,
                  grad_input_addend, normalized_ndim);
}

void rms_norm(KernelBuilder& kb, const TensorDesc& out, const TensorDesc* rstd, const TensorDesc& in,
              const TensorDesc* weight, int64_t normalized_ndim, float eps) {
    norm_forward(kb, "rms_norm", true, out, nullptr, rstd, in, weight, nullptr, normalized_ndim, eps);
}

void rms_norm_backward(KernelBuilder& kb, const TensorDesc* grad_in, const TensorDesc* grad_weight,
                       const TensorDesc& grad_out, const TensorDesc& in, const TensorDesc& rstd,
                       const TensorDesc* weight, int64_t normalized_ndim, const TensorDesc* grad_input_addend) {
    norm_backward(kb, "rms_norm_backward", true, grad_in, grad_weight, nullptr, grad_out, in, nullptr, rstd, weight,
                  grad_input_addend, normalized_ndim);
}

}  // namespace trnsim::ops
