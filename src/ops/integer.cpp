// Integer and boolean elementwise kernels: arithmetic, comparisons, bitwise ops, casts, where,
// masked_fill, fill and arange, on the GpSimd's exact integer instruction int_alu (docs/integers.md).
// Tiles come from run_elementwise (loads and stores overlapped, broadcast inputs loaded once);
// each tile is one int_alu over [P, F] elements.
#include "trnsim/ops/integer.h"

#include <algorithm>

#include "integer_common.h"
#include "pointwise_common.h"
#include "trnsim/tiling.h"

namespace trnsim::ops {

using namespace tiling;

bool is_int_dtype(DType t) {
    return t == DType::i64 || t == DType::i32 || t == DType::i16 || t == DType::i8 || t == DType::u8 ||
           t == DType::boolean;
}


using namespace int_detail;

void int_binary(KernelBuilder& kb, IntOp op, const TensorDesc& out, const TensorDesc& a, const TensorDesc& b) {
    const std::string name = std::string("int_") + int_op_name(op);
    for (auto [t, n] : {std::pair{&out, "out"}, std::pair{&a, "a"}, std::pair{&b, "b"}}) check_int(name, *t, n);
    run_elementwise(kb, name, out, {&a, &b}, 0,
                    [&](auto& x, auto& y, auto&) { emit_int_alu(kb, op, y, x[0], &x[1], 0); });
}

void int_unary(KernelBuilder& kb, IntOp op, const TensorDesc& out, const TensorDesc& a) {
    const std::string name = std::string("int_") + int_op_name(op);
    check_int(name, out, "out");
    check_int(name, a, "a");
    run_elementwise(kb, name, out, {&a}, 0, [&](auto& x, auto& y, auto&) { emit_int_alu(kb, op, y, x[0], nullptr, 0); });
}

void int_binary_scalar(KernelBuilder& kb, IntOp op, const TensorDesc& out, const TensorDesc& a, int64_t s,
                       bool reverse) {
    const std::string name = std::string("int_") + int_op_name(op);
    check_int(name, out, "out");
    check_int(name, a, "a");
    if (!reverse) {
        run_elementwise(kb, name, out, {&a}, 0, [&](auto& x, auto& y, auto&) { emit_int_alu(kb, op, y, x[0], nullptr, s); });
        return;
    }
    // s op a (sub, divisions, shifts): s goes into the output tile (memset 0, add s), which holds
    // it exactly because out has the computation's dtype; comparisons are swapped by callers.
    if (out.dtype == DType::boolean) fail(name, "a reversed operation needs an output of the computation's dtype");
    run_elementwise(kb, name, out, {&a}, 0, [&](auto& x, auto& y, auto&) {
        kb.memset(y, 0.0f, Engine::GpSimd);
        emit_int_alu(kb, IntOp::add, y, y, nullptr, s);
        emit_int_alu(kb, op, y, y, &x[0], 0);
    });
}

void int_where(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& cond, const TensorDesc& a,
               const TensorDesc& b) {
    for (auto [t, n] : {std::pair{&out, "out"}, std::pair{&cond, "cond"}, std::pair{&a, "a"}, std::pair{&b, "b"}})
        check_int("int_where", *t, n);
    run_elementwise(kb, "int_where", out, {&cond, &a, &b}, 0,
                    [&](auto& x, auto& y, auto&) { emit_int_alu(kb, IntOp::select, y, x[0], &x[1], 0, &x[2]); });
}

void int_masked_fill(KernelBuilder& kb, const TensorDesc& out, const TensorDesc& a, const TensorDesc& mask,
                     int64_t value) {
    for (auto [t, n] : {std::pair{&out, "out"}, std::pair{&a, "a"}, std::pair{&mask, "mask"}})
        check_int("int_masked_fill", *t, n);
    run_elementwise(kb, "int_masked_fill", out, {&mask, &a}, 0,
                    [&](auto& x, auto& y, auto&) { emit_int_alu(kb, IntOp::select, y, x[0], nullptr, value, &x[1]); });
}

void int_fill(KernelBuilder& kb, const TensorDesc& out, int64_t value) {
    check_int("int_fill", out, "out");
    // The constant tile is zeroed, then the value added exactly (a memset goes through fp32).
    pointwise_detail::fill_space(kb, "int_fill", out, [&](const AccessPattern& v) {
        kb.memset(v, 0.0f, Engine::GpSimd);
        if (value != 0) emit_int_alu(kb, IntOp::add, v, v, nullptr, value);
    });
}

void int_arange(KernelBuilder& kb, const TensorDesc& out, int64_t start, int64_t step) {
    check_desc("int_arange", out, "out");
    if (out.dim() != 1) fail("int_arange", "out must be 1-d, got " + out.str());
    const int64_t N = out.sizes[0];
    if (N == 0) return;
    if (N > INT32_MAX) fail("int_arange", "more than 2^31 - 1 elements");
    const bool float_out = !is_int_dtype(out.dtype);
    if (float_out && (std::max(std::abs(start), std::abs(start + (N - 1) * step)) >= (int64_t(1) << 24)))
        fail("int_arange", "float values beyond 2^24 are not exact in fp32");
    const int64_t stride = out.strides[0];
    const uint32_t fmax = column_budget(kb.chip(), 4 + 8 + dtype_size(out.dtype), 2);
    const uint32_t F = static_cast<uint32_t>(std::clamp<int64_t>(ceil_div(N, kPartitions), 1, fmax));
    TileRing idx_ring(kb, 2, {F}, DType::i32);
    TileRing wide_ring(kb, 2, {F}, DType::i64);
    TileRing out_ring(kb, 2, {F}, out.dtype);
    DmaQueues queues(kb.chip());
    for (int64_t base = 0; base < N;) {
        const auto Fc = static_cast<uint32_t>(std::min<int64_t>(F, N - base));
        const auto P = static_cast<uint32_t>(std::min<int64_t>(kPartitions, (N - base) / Fc));
        Affine aff;
        aff.base = static_cast<int32_t>(base);
        aff.partition_mul = static_cast<int32_t>(Fc);
        aff.free_mul[0] = 1;
        const AccessPattern idx = tile_view(idx_ring.next(), P, Fc);
        kb.iota(idx, aff);
        const AccessPattern o = tile_view(out_ring.next(), P, Fc);
        if (float_out) {
            kb.tensor_scalar(o, idx, AluOp::mul, static_cast<float>(step), AluOp::add, static_cast<float>(start));
        } else {
            const AccessPattern w = tile_view(wide_ring.next(), P, Fc);
            emit_int_alu(kb, IntOp::mul, w, idx, nullptr, step);
            emit_int_alu(kb, IntOp::add, o, w, nullptr, start);
        }
        Box box;
        box.offset[0] = out.offset + base * stride;
        Dim pd, fd;
        pd.size = P, pd.stride[0] = static_cast<int64_t>(Fc) * stride;
        fd.size = Fc, fd.stride[0] = stride;
        box.dims = {pd, fd};
        dma_tile(kb, queues, hbm_ap(box, 0, out), o, true);
        base += static_cast<int64_t>(P) * Fc;
    }
    out_ring.release(kb);
    wide_ring.release(kb);
    idx_ring.release(kb);
}

}  // namespace trnsim::ops
