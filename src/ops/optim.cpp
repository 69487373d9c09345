// Optimizer steps and gradient clipping (ops.h). Every tensor of a list is
// streamed through SBUF in [128, F] fp32 chunks (DMA casts on load and store)
// in one program; hyperparameters that change between steps (lr schedules,
// bias corrections) come from a small f32 launch argument broadcast to all
// partitions, so one cached program serves every step.
#include <algorithm>
#include <cmath>

#include "trnsim/ops.h"
#include "trnsim/tiling.h"

namespace trnsim::ops {

namespace {

using tiling::fail;

constexpr uint32_t kChunkCols = 1024;

// A piece of a flat tensor: P rows of F contiguous elements, row r at elem0 + r * row_stride.
struct FlatChunk {
    int64_t elem0;
    uint32_t P, F;
    int64_t row_stride;
};

// Element range [0, n) as [128, F] chunks (partition p holds a contiguous run) plus a [1, rest] tail.
std::vector<FlatChunk> flat_chunks(int64_t n) {
    std::vector<FlatChunk> out;
    const int64_t per_row = n / tiling::kPartitions;
    for (int64_t c0 = 0; c0 < per_row; c0 += kChunkCols)
        out.push_back({c0, tiling::kPartitions, static_cast<uint32_t>(std::min<int64_t>(kChunkCols, per_row - c0)), per_row});
    for (int64_t e = per_row * tiling::kPartitions; e < n; e += kChunkCols)
        out.push_back({e, 1, static_cast<uint32_t>(std::min<int64_t>(kChunkCols, n - e)), 0});
    return out;
}

AccessPattern chunk_ap(const TensorDesc& t, const FlatChunk& c) {
    AccessPattern ap;
    ap.space = MemSpace::HBM;
    ap.dtype = t.dtype;
    ap.arg = t.arg;
    ap.offset = static_cast<uint64_t>((t.offset + c.elem0) * static_cast<int64_t>(dtype_size(t.dtype)));
    ap.partitions = static_cast<uint16_t>(c.P);
    ap.partition_stride = c.row_stride;
    ap.ndim = 1;
    ap.size[0] = c.F;
    return ap;
}

void check_flat(const std::string& op, const TensorDesc& t, const char* name, int64_t numel) {
    tiling::check_desc(op, t, name);
    if (!t.is_contiguous()) throw NeedsDenseOperand(t.arg, op + ": " + name + " " + t.str() + " is not contiguous");
    if (!tiling::is_float(t.dtype)) fail(op, std::string(name) + " " + t.str() + " must be a float tensor");
    if (numel >= 0 && t.numel() != numel) fail(op, std::string(name) + " " + t.str() + " numel differs from the param's");
}

void check_lists(const std::string& op, std::initializer_list<const std::vector<TensorDesc>*> lists) {
    const size_t n = (*lists.begin())->size();
    for (const auto* l : lists)
        if (l->size() != n) fail(op, "tensor lists differ in length");
}

// The f32 hyperparameter vector broadcast to every partition: column i = scalar i.
Tile load_scalars(KernelBuilder& kb, const std::string& op, const TensorDesc& scalars, uint32_t count) {
    tiling::check_desc(op, scalars, "scalars");
    if (scalars.dtype != DType::f32 || scalars.numel() != count || !scalars.is_contiguous())
        fail(op, "scalars " + scalars.str() + " must be a contiguous f32 vector of " + std::to_string(count));
    Tile t = kb.alloc_sbuf(tiling::kPartitions, {count}, DType::f32);
    AccessPattern src;
    src.space = MemSpace::HBM;
    src.dtype = DType::f32;
    src.arg = scalars.arg;
    src.offset = static_cast<uint64_t>(scalars.offset * 4);
    src.partitions = static_cast<uint16_t>(tiling::kPartitions);
    src.partition_stride = 0;
    src.size[0] = count;
    kb.dma_copy(t.ap(), src);
    return t;
}

// Streams of fp32 [128, kChunkCols] tiles, double buffered.
struct Streams {
    std::vector<std::array<Tile, 2>> tiles;
    int cur = 0;
    Streams(KernelBuilder& kb, int n) : tiles(n) {
        for (auto& s : tiles)
            for (auto& t : s) t = kb.alloc_sbuf(tiling::kPartitions, {kChunkCols}, DType::f32);
    }
    void advance() { cur ^= 1; }
    AccessPattern at(int stream, const FlatChunk& c) const { return tiles[stream][cur].region(0, c.P, 0, c.F); }
    void release(KernelBuilder& kb) {
        for (auto it = tiles.rbegin(); it != tiles.rend(); ++it)
            for (int i = 1; i >= 0; --i) kb.release((*it)[i]);
    }
};

}  // namespace

std::array<float, kAdamWScalars> adamw_scalars(double lr, double beta1, double beta2, double eps,
                                               double weight_decay, int64_t step) {
    const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(step));
    const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(step));
    return {static_cast<float>(1.0 - lr * weight_decay), static_cast<float>(1.0 - beta1), static_cast<float>(beta2),
            static_cast<float>(1.0 - beta2),            static_cast<float>(std::sqrt(bias_correction2)),
            static_cast<float>(eps),                    static_cast<float>(-(lr / bias_correction1))};
}

void adamw(KernelBuilder& kb, const std::vector<TensorDesc>& params, const std::vector<TensorDesc>& grads,
           const std::vector<TensorDesc>& exp_avgs, const std::vector<TensorDesc>& exp_avg_sqs,
           const TensorDesc& scalars) {
    const std::string op = "adamw";
    check_lists(op, {&params, &grads, &exp_avgs, &exp_avg_sqs});
    for (size_t i = 0; i < params.size(); ++i) {
        check_flat(op, params[i], "param", -1);
        check_flat(op, grads[i], "grad", params[i].numel());
        check_flat(op, exp_avgs[i], "exp_avg", params[i].numel());
        check_flat(op, exp_avg_sqs[i], "exp_avg_sq", params[i].numel());
    }
    const Tile sc = load_scalars(kb, op, scalars, kAdamWScalars);
    enum { P, G, M, V, T, U, kStreams };
    Streams st(kb, kStreams);
    tiling::DmaQueues q(kb.chip());
    for (size_t i = 0; i < params.size(); ++i)
        for (const FlatChunk& c : flat_chunks(params[i].numel())) {
            st.advance();
            auto s = [&](int k) { return sc.region(0, c.P, k, 1); };
            const AccessPattern p = st.at(P, c), g = st.at(G, c), m = st.at(M, c), v = st.at(V, c), t = st.at(T, c),
                                u = st.at(U, c);
            const AccessPattern decay = s(0), w = s(1), b2 = s(2), one_minus_b2 = s(3), bc2_sqrt = s(4), eps = s(5),
                                neg_step = s(6);
            kb.dma_copy(p, chunk_ap(params[i], c), q.load());
            kb.dma_copy(g, chunk_ap(grads[i], c), q.load());
            kb.dma_copy(m, chunk_ap(exp_avgs[i], c), q.load());
            kb.dma_copy(v, chunk_ap(exp_avg_sqs[i], c), q.load());
            // param *= 1 - lr * weight_decay
            kb.tensor_scalar_ex(p, p, AluOp::mul, 0, &decay, AluOp::bypass, 0, nullptr, 0, Engine::GpSimd);
            // exp_avg.lerp_(grad, 1 - beta1) = exp_avg + w * (grad - exp_avg)
            kb.tensor_tensor(t, g, m, AluOp::sub);
            kb.tensor_scalar_ex(t, t, AluOp::mul, 0, &w, AluOp::bypass, 0, nullptr, 0, Engine::GpSimd);
            kb.tensor_tensor(m, m, t, AluOp::add);
            // exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * grad * grad
            kb.tensor_scalar_ex(u, g, AluOp::mul, 0, &one_minus_b2, AluOp::bypass, 0, nullptr, 0, Engine::Scalar);
            kb.tensor_tensor(u, u, g, AluOp::mul, Engine::GpSimd);
            kb.tensor_scalar_ex(v, v, AluOp::mul, 0, &b2, AluOp::bypass, 0, nullptr, 0, Engine::Scalar);
            kb.tensor_tensor(v, v, u, AluOp::add);
            kb.dma_copy(chunk_ap(exp_avgs[i], c), m, q.store());
            kb.dma_copy(chunk_ap(exp_avg_sqs[i], c), v, q.store());
            // denom = sqrt(exp_avg_sq) / sqrt(bias_correction2) + eps
            kb.activation(t, v, ActFunc::sqrt);
            kb.tensor_scalar_ex(t, t, AluOp::div, 0, &bc2_sqrt, AluOp::add, 0, &eps, 0, Engine::GpSimd);
            // param += (-lr / bias_correction1) * exp_avg / denom
            kb.tensor_scalar_ex(u, m, AluOp::mul, 0, &neg_step, AluOp::bypass, 0, nullptr, 0, Engine::Scalar);
            kb.tensor_tensor(u, u, t, AluOp::div);
            kb.tensor_tensor(p, p, u, AluOp::add, Engine::GpSimd);
            kb.dma_copy(chunk_ap(params[i], c), p, q.store());
        }
    st.release(kb);
    kb.release(sc);
}

void sgd(KernelBuilder& kb, const std::vector<TensorDesc>& params, const std::vector<TensorDesc>& grads,
         const std::vector<TensorDesc>& momentum_buffers, const TensorDesc& scalars, const SgdOptions& opt) {
    const std::string op = "sgd";
    check_lists(op, {&params, &grads});
    const bool use_momentum = opt.momentum;
    if (use_momentum) check_lists(op, {&params, &momentum_buffers});
    if (opt.nesterov && !use_momentum) fail(op, "nesterov needs momentum");
    for (size_t i = 0; i < params.size(); ++i) {
        check_flat(op, params[i], "param", -1);
        check_flat(op, grads[i], "grad", params[i].numel());
        if (use_momentum) check_flat(op, momentum_buffers[i], "momentum_buffer", params[i].numel());
    }
    const Tile sc = load_scalars(kb, op, scalars, kSgdScalars);
    enum { P, G, B, T, kStreams };
    Streams st(kb, kStreams);
    tiling::DmaQueues q(kb.chip());
    for (size_t i = 0; i < params.size(); ++i)
        for (const FlatChunk& c : flat_chunks(params[i].numel())) {
            st.advance();
            auto s = [&](int k) { return sc.region(0, c.P, k, 1); };
            const AccessPattern p = st.at(P, c), g = st.at(G, c), b = st.at(B, c), t = st.at(T, c);
            const AccessPattern wd = s(0), mom = s(1), one_minus_damp = s(2), neg_lr = s(3);
            kb.dma_copy(p, chunk_ap(params[i], c), q.load());
            kb.dma_copy(g, chunk_ap(grads[i], c), q.load());
            if (opt.weight_decay) {   // grad = grad + weight_decay * param
                kb.tensor_scalar_ex(t, p, AluOp::mul, 0, &wd, AluOp::bypass, 0, nullptr, 0, Engine::GpSimd);
                kb.tensor_tensor(g, g, t, AluOp::add);
            }
            AccessPattern step = g;
            if (use_momentum) {
                if (opt.first_step) {   // buf = grad
                    kb.dma_copy(chunk_ap(momentum_buffers[i], c), g, q.store());
                    step = g;
                } else {   // buf = buf * momentum + (1 - dampening) * grad
                    kb.dma_copy(b, chunk_ap(momentum_buffers[i], c), q.load());
                    kb.tensor_scalar_ex(b, b, AluOp::mul, 0, &mom, AluOp::bypass, 0, nullptr, 0, Engine::GpSimd);
                    kb.tensor_scalar_ex(t, g, AluOp::mul, 0, &one_minus_damp, AluOp::bypass, 0, nullptr, 0,
                                        Engine::Scalar);
                    kb.tensor_tensor(b, b, t, AluOp::add);
                    kb.dma_copy(chunk_ap(momentum_buffers[i], c), b, q.store());
                    step = b;
                }
                if (opt.nesterov) {   // grad = grad + momentum * buf
                    kb.tensor_scalar_ex(t, step, AluOp::mul, 0, &mom, AluOp::bypass, 0, nullptr, 0, Engine::Scalar);
                    kb.tensor_tensor(g, g, t, AluOp::add);
                    step = g;
                }
            }
            // param = param + (-lr) * step
            kb.tensor_scalar_ex(t, step, AluOp::mul, 0, &neg_lr, AluOp::bypass, 0, nullptr, 0, Engine::Scalar);
            kb.tensor_tensor(p, p, t, AluOp::add, Engine::GpSimd);
            kb.dma_copy(chunk_ap(params[i], c), p, q.store());
        }
    st.release(kb);
    kb.release(sc);
}

std::array<float, kSgdScalars> sgd_scalars(double lr, double momentum, double dampening, double weight_decay) {
    return {static_cast<float>(weight_decay), static_cast<float>(momentum), static_cast<float>(1.0 - dampening),
            static_cast<float>(-lr)};
}

void total_norm(KernelBuilder& kb, const TensorDesc& out, const std::vector<TensorDesc>& tensors) {
    const std::string op = "total_norm";
    tiling::check_desc(op, out, "out");
    if (out.numel() != 1 || out.dtype != DType::f32) fail(op, "out " + out.str() + " must be one f32 element");
    size_t nchunks = 0;
    for (const TensorDesc& t : tensors) {
        check_flat(op, t, "tensor", -1);
        nchunks += flat_chunks(t.numel()).size();
    }
    const uint32_t cols = static_cast<uint32_t>(std::max<size_t>(1, nchunks));
    const Tile partial = kb.alloc_sbuf(tiling::kPartitions, {cols}, DType::f32);
    const Tile ones = kb.alloc_sbuf(tiling::kPartitions, {1}, DType::f32);
    const Tile rows = kb.alloc_sbuf(tiling::kPartitions, {1}, DType::f32);
    const Tile result = kb.alloc_sbuf(1, {1}, DType::f32);
    Streams st(kb, 2);
    const Tile ps = kb.alloc_psum(1, 1);
    tiling::DmaQueues q(kb.chip());
    kb.memset(partial.ap(), 0.0f, Engine::GpSimd);
    kb.memset(ones.ap(), 1.0f, Engine::GpSimd);
    uint32_t col = 0;
    for (const TensorDesc& t : tensors)
        for (const FlatChunk& c : flat_chunks(t.numel())) {
            st.advance();
            const AccessPattern x = st.at(0, c), sq = st.at(1, c);
            kb.dma_copy(x, chunk_ap(t, c), q.load());
            const AccessPattern acc = partial.region(0, c.P, col++, 1);
            kb.activation_ex(sq, x, ActFunc::square, 1.0f, nullptr, 0.0f, nullptr, ReduceOp::add, &acc);
        }
    // Sum the columns, then the partitions (ones^T @ rows on the TensorE), then sqrt.
    kb.tensor_reduce(rows.ap(), partial.ap(), ReduceOp::add);
    kb.matmul(ps.ap(), ones.ap(), rows.ap(), false);
    kb.activation(result.ap(), ps.ap(), ActFunc::sqrt);
    AccessPattern dst;
    dst.space = MemSpace::HBM;
    dst.dtype = DType::f32;
    dst.arg = out.arg;
    dst.offset = static_cast<uint64_t>(out.offset * 4);
    kb.dma_copy(dst, result.ap(), q.store());
    kb.release(ps);
    st.release(kb);
    kb.release(result);
    kb.release(rows);
    kb.release(ones);
    kb.release(partial);
}

void clip_grads(KernelBuilder& kb, const std::vector<TensorDesc>& tensors, const TensorDesc& norm, float max_norm) {
    const std::string op = "clip_grads";
    tiling::check_desc(op, norm, "total_norm");
    if (norm.numel() != 1 || norm.dtype != DType::f32) fail(op, "total_norm " + norm.str() + " must be one f32 element");
    for (const TensorDesc& t : tensors) check_flat(op, t, "tensor", -1);
    TensorDesc norm_scalar = TensorDesc::contiguous(norm.arg, DType::f32, {1});
    norm_scalar.offset = norm.offset;
    const Tile coef = load_scalars(kb, op, norm_scalar, 1);
    // coef = min(max_norm / (norm + 1e-6), 1), as torch.nn.utils.clip_grad_norm_
    kb.tensor_scalar_ex(coef.ap(), coef.ap(), AluOp::add, 1e-6f, nullptr, AluOp::div, max_norm, nullptr, F_REVERSE1);
    kb.tensor_scalar(coef.ap(), coef.ap(), AluOp::min, 1.0f);
    Streams st(kb, 1);
    tiling::DmaQueues q(kb.chip());
    for (const TensorDesc& t : tensors)
        for (const FlatChunk& c : flat_chunks(t.numel())) {
            st.advance();
            const AccessPattern x = st.at(0, c), k = coef.region(0, c.P, 0, 1);
            kb.dma_copy(x, chunk_ap(t, c), q.load());
            kb.tensor_scalar_ex(x, x, AluOp::mul, 0, &k, AluOp::bypass, 0, nullptr, 0,
                                (c.elem0 / kChunkCols) & 1 ? Engine::GpSimd : Engine::Vector);
            kb.dma_copy(chunk_ap(t, c), x, q.store());
        }
    st.release(kb);
    kb.release(coef);
}

}  // namespace trnsim::ops
