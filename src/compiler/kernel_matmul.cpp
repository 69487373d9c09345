// Fused matmul: the library's blocked matmul (build_matmul) with the fused epilogue applied to
// each output tile in SBUF between the PSUM evacuation and the store. Epilogue operands
// (residuals, per-column vectors) are loaded per tile into rotating SBUF tiles.
#include <algorithm>

#include "trnsim/kernels.h"
#include "kernel_common.h"

namespace trnsim::compiler {

namespace {

constexpr uint32_t kTileRows = 128, kTileCols = 512;   // build_matmul's output tile

// One 2-D operand of the matmul as MatmulArgs sees it: address, leading dim, stored transposed.
struct MatrixOperand {
    uint64_t addr;
    int64_t ld;
    bool transposed;   // stored [cols, rows]
};

MatrixOperand matrix_operand(const ops::TensorDesc& t, const char* what) {
    const int64_t rows = t.sizes[0], cols = t.sizes[1];
    const int64_t rs = t.strides[0], cs = t.strides[1];
    MatrixOperand m;
    m.addr = static_cast<uint64_t>(t.offset) * dtype_size(t.dtype);
    if (cs == 1 || cols == 1) {
        m.transposed = false;
        m.ld = rows == 1 ? cols : rs;
    } else if (rs == 1 || rows == 1) {
        m.transposed = true;
        m.ld = cols == 1 ? rows : cs;
    } else {
        throw CompileError(std::string("fused_matmul: operand ") + what + " " + t.str() + " has no unit stride");
    }
    return m;
}

}  // namespace

void build_fused_matmul(KernelBuilder& kb, const Node& node, const std::vector<ops::TensorDesc>& in,
                        const ops::TensorDesc& out) {
    const ops::TensorDesc &a = in[0], &b = in[1];
    if (a.dim() != 2 || b.dim() != 2) throw CompileError("fused_matmul: operands must be 2-D");
    const MatrixOperand A = matrix_operand(a, "a"), B = matrix_operand(b, "b");
    MatmulArgs args;
    args.M = static_cast<uint32_t>(a.sizes[0]);
    args.K = static_cast<uint32_t>(a.sizes[1]);
    args.N = static_cast<uint32_t>(b.sizes[1]);
    if (out.numel() != static_cast<int64_t>(args.M) * args.N || !out.is_contiguous())
        throw CompileError("fused_matmul: output " + out.str() + " is not a contiguous [M, N] matrix");
    args.a = A.addr, args.a_arg = a.arg, args.a_dtype = a.dtype, args.lda = A.ld;
    args.a_transposed = A.transposed;
    args.b = B.addr, args.b_arg = b.arg, args.b_dtype = b.dtype, args.ldb = B.ld;
    args.b_transposed = B.transposed;
    args.c = static_cast<uint64_t>(out.offset) * dtype_size(out.dtype), args.c_arg = out.arg;
    args.c_dtype = out.dtype;
    args.alpha = node.f0;
    const auto strides_of = [&](size_t input) {
        return std::pair<int64_t, int64_t>{node.dims[2 * (input - 2)], node.dims[2 * (input - 2) + 1]};
    };
    if (node.i1 & 1) {
        const ops::TensorDesc& d = in[2];
        const auto [rs, cs] = strides_of(2);
        args.addend = {true, static_cast<uint64_t>(d.offset) * dtype_size(d.dtype), d.arg, d.dtype, rs, cs, 0, node.f1};
    }

    // Epilogue operands, each in two rotating SBUF tiles; scratch tiles for the body's steps.
    const size_t first_operand = (node.i1 & 1) ? 3 : 2;
    std::vector<std::array<Tile, 2>> operand_tiles;
    for (size_t k = first_operand; k < in.size(); ++k)
        operand_tiles.push_back({kb.alloc_sbuf(kTileRows, {kTileCols}, in[k].dtype),
                                 kb.alloc_sbuf(kTileRows, {kTileCols}, in[k].dtype)});
    const size_t nsteps = node.body.size();
    const bool round_product = node.body[0].dtype != out.dtype;
    std::vector<Tile> scratch;   // one per step except the last (which writes the output tile)
    for (size_t s = 0; s + 1 < nsteps; ++s) scratch.push_back(kb.alloc_sbuf(kTileRows, {kTileCols}, DType::f32));
    EngineBalancer engines(kb.chip());
    int rotation = 0;

    args.epilogue = [&](KernelBuilder& k, const AccessPattern& tile, uint32_t, uint32_t row0, uint32_t col0) {
        const uint32_t rows = tile.partitions, cols = static_cast<uint32_t>(tile.free_elems());
        std::vector<AccessPattern> operand_views;
        for (size_t j = 0; j < operand_tiles.size(); ++j) {
            const ops::TensorDesc& t = in[first_operand + j];
            const auto [rs, cs] = strides_of(first_operand + j);
            AccessPattern src;
            src.space = MemSpace::HBM;
            src.dtype = t.dtype;
            src.arg = t.arg;
            src.partitions = static_cast<uint16_t>(rows);
            src.partition_stride = rs;
            src.ndim = 1;
            src.size = {cols, 1, 1, 1};
            src.stride = {cs, 0, 0, 0};
            src.offset = static_cast<uint64_t>(t.offset + static_cast<int64_t>(row0) * rs + static_cast<int64_t>(col0) * cs) *
                         dtype_size(t.dtype);
            const AccessPattern dst = operand_tiles[j][rotation].region(0, rows, 0, cols);
            k.dma_copy(dst, src);
            operand_views.push_back(dst);
        }
        rotation ^= 1;
        std::vector<AccessPattern> step_views(nsteps);
        step_views[0] = tile;
        if (round_product) {   // the product rounds to its own dtype before the epilogue reads it
            step_views[0] = with_dtype(scratch[0].region(0, rows, 0, cols), node.body[0].dtype);
            k.tensor_copy(step_views[0], tile, engines.pick({Engine::Vector, Engine::GpSimd}, cols));
        }
        for (size_t s = 1; s < nsteps; ++s) {
            const Step& step = node.body[s];
            std::vector<AccessPattern> views;
            for (int arg : step.args) views.push_back(arg >= 0 ? operand_views[arg - first_operand] : step_views[-arg - 1]);
            step_views[s] = s + 1 == nsteps ? tile : with_dtype(scratch[s].region(0, rows, 0, cols), step.dtype);
            emit_step(k, engines, step, step_views[s], views);
        }
    };
    build_matmul(kb, args);

    for (auto it = scratch.rbegin(); it != scratch.rend(); ++it) kb.release(*it);
    for (auto it = operand_tiles.rbegin(); it != operand_tiles.rend(); ++it) {
        kb.release((*it)[1]);
        kb.release((*it)[0]);
    }
}

}  // namespace trnsim::compiler
