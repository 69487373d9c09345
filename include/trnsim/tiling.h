// Tiling: the shared machinery with which kernels (the operator library, the compiler's fused
// kernels) cut strided tensors into SBUF tiles and move them (src/kernel/tiling.cpp,
// tile_buffers.cpp, elementwise.cpp).
//
// How an op kernel is written with these helpers
//  1. Describe the loop nest over the output as an IterSpace: one Dim per output
//     dimension, each carrying the stride (elements) of every operand along it
//     (0 where an operand broadcasts). elementwise_space() builds it from
//     TensorDescs with PyTorch broadcasting; operand 0 is the output.
//  2. simplify() drops size-1 dims, orders dims by operand 0's strides (so the
//     output is written in memory order) and merges dims that are contiguous in
//     every operand: a contiguous tensor becomes one dim, whatever its rank.
//  3. plan_tiles() cuts the space into Tiles: a partition part (rows, <= 128) and
//     a free part (columns, <= fmax elements), each a Box expressible as one DMA
//     access pattern per operand (<= 5 dims: the HBM partition dim + 4 free
//     dims). Dims are split (with remainder boxes) to fill 128 partitions and the
//     free budget; views that need more dims fall back to host loops that emit
//     one tile per outer index. Reductions keep whole reduced dims in the free
//     part (min_col_dims) so tensor_reduce sees them innermost.
//  4. hbm_ap() gives the DMA access pattern of operand k for a box; SBUF tiles
//     are [P, F] contiguous, so DMAs between them and HBM just flatten both in
//     row-major order.
//  5. TileRing rotates a few SBUF buffers (double/triple buffering: the
//     KernelBuilder's automatic semaphores then overlap loads, compute and
//     stores of neighbouring tiles); DmaQueues spreads loads and stores over the
//     chip's DMA queues (stores on their own queues so they never wait behind
//     prefetches).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include <stdexcept>

#include "trnsim/kernel.h"

namespace trnsim {

// A kernel's error about its operands (shapes, dtypes, strides it cannot take). The message
// names the operation.
struct OpError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// A kernel asking for a dense copy of launch argument 'arg': its strides (a broadcast, a view
// with too many non-mergeable dims, a layout the kernel has no access pattern for) cannot be
// read or written directly. The operation itself is supported: the PyTorch launch layer passes
// a contiguous copy of that argument and builds again (copying it back if the kernel writes
// it). Callers that cannot materialise see an OpError.
struct NeedsDenseOperand : OpError {
    NeedsDenseOperand(uint8_t arg, const std::string& what) : OpError(what), arg(arg) {}
    uint8_t arg;
};

// A strided view (sizes/strides in elements, like ATen) of one launch argument. Kernels are
// relocatable: they address HBM only through launch arguments (AccessPattern::arg), so one
// cached Program serves every tensor with the same signature.
struct TensorDesc {
    uint8_t arg = 1;                 // launch argument holding the data (1-based)
    DType dtype = DType::f32;
    std::vector<int64_t> sizes;      // empty = a 0-d tensor
    std::vector<int64_t> strides;    // elements; 0 = broadcast
    int64_t offset = 0;              // elements from the argument's base

    int64_t numel() const;
    int64_t dim() const { return static_cast<int64_t>(sizes.size()); }
    bool is_contiguous() const;
    // A contiguous tensor of this shape (strides computed).
    static TensorDesc contiguous(uint8_t arg, DType dt, std::vector<int64_t> sizes);
    std::string str() const;         // "f32[4,8]{8,1}+0@arg1" (used in cache keys)
};

namespace tiling {

constexpr int kMaxOperands = 7;   // norm backward over long rows: 5 row operands, weight, addend
constexpr uint32_t kPartitions = 128;
constexpr int kMaxApDims = 1 + kMaxFreeDims;   // HBM partition dim + free dims

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

[[noreturn]] void fail(const std::string& op, const std::string& what);

// Checks a descriptor (sizes/strides ranks, non-negative sizes and offset, arg >= 1).
void check_desc(const std::string& op, const TensorDesc& t, const char* name);
// The broadcast shape of several shapes (PyTorch rules); throws OpError naming op.
std::vector<int64_t> broadcast_shape(const std::string& op, std::initializer_list<const TensorDesc*> ts);
// Strides of t viewed with shape 'sizes' (trailing-aligned; 0 on broadcast dims).
std::vector<int64_t> broadcast_strides(const std::string& op, const TensorDesc& t, const std::vector<int64_t>& sizes);

struct Dim {
    int64_t size = 1;
    std::array<int64_t, kMaxOperands> stride{};   // per operand, elements
};

// Nested loops (outermost first); operand k is at offset[k] + sum_d i_d * dims[d].stride[k].
struct IterSpace {
    int nops = 0;
    std::vector<Dim> dims;
    std::array<int64_t, kMaxOperands> offset{};
    int64_t numel() const;
};

// Loop nest over out's shape; operand 0 = out, then 'ins' broadcast to out's shape.
IterSpace elementwise_space(const std::string& op, const TensorDesc& out, std::initializer_list<const TensorDesc*> ins);
// Drops size-1 dims, merges dims contiguous in every operand. With order_by_first, dims are
// first sorted (stably) by decreasing |stride| of operand 0. The last 'keep_last' dims are
// left in place and only merged among themselves (reduction dims); returns how many remain.
int simplify(IterSpace& s, bool order_by_first = true, int keep_last = 0);
// Throws if operand k writes some element twice (a stride-0 or overlapping output).
void check_no_overlap(const std::string& op, const IterSpace& s, int k);

// A rectangular piece of the space that one DMA per operand moves (dims outermost first).
struct Box {
    std::vector<Dim> dims;
    std::array<int64_t, kMaxOperands> offset{};
    int64_t numel() const;
};

// The HBM access pattern of operand k (tensor t: arg, dtype) over box dims [d0, d1):
// the first dim is the partition dim, the rest free dims (padded with a size-1 dim).
AccessPattern hbm_ap(const Box& b, int k, const TensorDesc& t, int d0 = 0, int d1 = -1);

// A tile: rows (partitions) x cols (free elements) of the space, as one box whose first
// row_dims dims are the rows.
struct TileBox {
    Box box;
    int row_dims = 0;
    uint32_t P = 1;   // product of the row dims
    uint32_t F = 1;   // product of the col dims
};

// Cuts s (already simplified) into tiles of at most 128 rows and fmax columns. The
// innermost min_col_dims dims always lie whole in the columns (they must fit fmax and
// kMaxFreeDims); col_target is the preferred column count (0 = spread the space over
// 128 partitions); extra_cols = false keeps exactly those min_col_dims in the columns.
std::vector<TileBox> plan_tiles(const IterSpace& s, uint32_t fmax, int min_col_dims = 0, int64_t col_target = 0,
                                bool extra_cols = true);

// Dims to reduce: negatives wrapped, duplicates rejected, sorted; empty = all dims.
std::vector<int64_t> normalize_dims(const std::string& op, int64_t ndim, std::vector<int64_t> dims);

// An operand of a reduction space: a full tensor (in's shape, broadcastable to it) or a
// reduced one (in's shape with the reduced dims removed or of size 1). nullptr = absent
// (stride 0 everywhere, never accessed).
struct SpaceOperand {
    const TensorDesc* t;
    bool reduced;
};
// Loop nest over 'sizes' ordered [kept dims..., reduced dims...] (not yet simplified), one
// operand per entry of ops; *nred = number of reduced dims.
IterSpace reduction_space(const std::string& op, const std::vector<int64_t>& sizes, const std::vector<int64_t>& dims,
                          const std::vector<SpaceOperand>& ops, int* nred);

// Row tiles for reductions along the last 'nred' dims of s (simplified with keep_last = nred).
// Each tile has P rows x G groups (kept dims) and one or more chunks of the reduced dims:
// chunk c is a full box (rows, groups, reduced part) of G * R[c] columns per row. When the
// reduced dims fit 'fmax' there is one chunk and G grows to fill the columns (several rows
// per partition, if group_rows); otherwise G = 1 and the reduced dims are cut into chunks.
struct RowTile {
    Box kept;                     // rows and groups only (operands with stride 0 on reduced dims)
    uint32_t P = 1, G = 1;
    std::vector<Box> chunks;
    std::vector<uint32_t> R;
};
std::vector<RowTile> plan_rows(const IterSpace& s, int nred, uint32_t fmax, bool group_rows = true);

// Enumerates boxes covering dims with at most 'budget' elements and max_dims dims each;
// offsets start at base.
void for_each_box(const std::vector<Dim>& dims, const std::array<int64_t, kMaxOperands>& base, int64_t budget,
                  int max_dims, const std::function<void(const Box&)>& fn);

// Round-robin DMA queue choice: loads on the first queues, stores on the last quarter.
class DmaQueues {
public:
    explicit DmaQueues(const ChipConfig& chip);
    // The last 'store_queues' queues take the stores (clamped so that one queue is left for loads),
    // for kernels whose stores are a larger share of their traffic than a quarter.
    DmaQueues(const ChipConfig& chip, uint32_t store_queues);
    int load();
    int store();

private:
    uint32_t n_, store_n_, load_next_ = 0, store_next_ = 0;
};

// A DMA between an SBUF tile view and an HBM access pattern with the same partitions: large
// transfers are split into partition groups on several queues (one DMA queue alone moves a
// fraction of the core's bandwidth), others go to one queue. store = SBUF to HBM.
// 'split_bytes': the size from which a transfer is split (kernels that keep several tiles in flight
// split smaller ones, so that each arrives sooner).
constexpr uint64_t kDmaSplitBytes = 256 * 1024;   // below this one queue finishes soon enough
void dma_tile(KernelBuilder& kb, DmaQueues& q, const AccessPattern& dst, const AccessPattern& src, bool store,
              uint64_t split_bytes = kDmaSplitBytes);

// 'depth' SBUF tiles of [128, free] of one dtype, handed out in rotation.
class TileRing {
public:
    TileRing() = default;
    TileRing(KernelBuilder& kb, int depth, std::vector<uint32_t> free_shape, DType dt);
    const Tile& next();
    const Tile& current() const { return tiles_[cur_]; }
    void release(KernelBuilder& kb);   // in reverse allocation order by the caller

private:
    std::vector<Tile> tiles_;
    int cur_ = -1;
};

// [P, F] view of the first P partitions of a tile (free dims flattened, contiguous).
AccessPattern tile_view(const Tile& t, uint32_t P, uint32_t F);
// [P, sizes...] view with explicit element strides (up to 4 free dims), starting at element 'start'.
AccessPattern tile_view(const Tile& t, uint32_t P, std::initializer_list<uint32_t> sizes,
                        std::initializer_list<int64_t> strides, uint64_t start = 0);

// Column budget for 'streams' SBUF tile streams of the given total bytes per element,
// each 'depth' deep, within a fraction of SBUF; clamped to [64, 4096].
uint32_t column_budget(const ChipConfig& chip, uint64_t bytes_per_column, int depth);

bool is_float(DType t);

// The standard elementwise kernel: for every tile of out's shape, loads each input (broadcast
// to out's shape) into SBUF, calls body with views of the inputs, of out's tile ([P, F], out's
// dtype) and of 'ntmp' fp32 scratch tiles ([P, F]), then stores out's tile. Tiles are triple
// buffered; an empty out emits nothing. An input is loaded only along the columns it varies
// along and its view re-expands it with stride-0 dims ([P, F] elements in all, possibly several
// free dims); a piece already loaded by the previous tile is not loaded again. An input with
// one value per partition in every tile is kept as f32 when it is a float (in its own dtype
// otherwise); other inputs keep their own dtype.
using ElementwiseBody = std::function<void(const std::vector<AccessPattern>& in, const AccessPattern& out,
                                           const std::vector<AccessPattern>& tmp)>;
void run_elementwise(KernelBuilder& kb, const std::string& op, const TensorDesc& out,
                     std::initializer_list<const TensorDesc*> ins, int ntmp, const ElementwiseBody& body);
// Whether an input view of run_elementwise holds one value per partition (stride 0 along every
// free dim), and that value as a [P, 1] view (a per-partition scalar operand when f32).
bool is_partition_scalar(const AccessPattern& v);
AccessPattern partition_scalar(const AccessPattern& v);

// Emits a select with an immediate else-value: dst = mask != 0 ? on_true : value.
void select_imm(KernelBuilder& kb, const AccessPattern& dst, const AccessPattern& mask, const AccessPattern& on_true,
                float value, Engine e = Engine::Vector);

// SPMD over the physical cores of a logical core: 'items' independent work items (output tiles,
// rows, heads) are dealt out in contiguous chunks, core c taking items [c x n / cores, (c+1) x n /
// cores), so that each core rotates through its own TileRings (tiles sit at the same SBUF address
// on every core). enter(i) switches the builder to item i's core; the destructor returns to the
// core it started on. A builder already on another core than 0 (a split caller) is not split
// again, nor is a single item. What a kernel loads before its loop (a weight row broadcast to
// every partition, constants) is on the starting core only: 'setup' runs once on each other core
// when enter() first switches to it.
class SpmdSplit {
public:
    SpmdSplit(KernelBuilder& kb, size_t items, std::function<void()> setup = {});
    ~SpmdSplit();
    SpmdSplit(const SpmdSplit&) = delete;
    SpmdSplit& operator=(const SpmdSplit&) = delete;
    void enter(size_t item);
    uint32_t core_of(size_t item) const;
    uint32_t cores() const { return cores_; }
    // The first item of core c (items [begin(c), begin(c + 1)) are core c's; begin(cores()) = items).
    size_t begin(uint32_t c) const { return (static_cast<size_t>(c) * items_ + cores_ - 1) / cores_; }

private:
    KernelBuilder& kb_;
    size_t items_;
    uint32_t start_core_, cores_;
    std::function<void()> setup_;
    std::array<bool, kMaxPhysicalCores> ready_{};   // cores set up
};

}  // namespace tiling
}  // namespace trnsim
