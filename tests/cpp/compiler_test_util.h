// Helpers for the compiler tests (test_compiler_*.cpp): small graphs of the patterns each
// fusion pass looks for, and running a compiled graph on a functional NeuronCore.
#pragma once
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "trnsim/compiler.h"
#include "trnsim/sim.h"

namespace trnsim::compiler_test {

using compiler::CompiledGraph;
using compiler::CompileOptions;
using compiler::Graph;
using compiler::Op;

inline int count_live(const Graph& g, Op op) {
    int n = 0;
    for (int i : g.live_nodes()) n += g.nodes[i].op == op;
    return n;
}

inline const compiler::Node& only_live(const Graph& g, Op op) {
    for (int i : g.live_nodes())
        if (g.nodes[i].op == op) return g.nodes[i];
    throw std::runtime_error(std::string("no live ") + compiler::op_name(op) + " node");
}

// Runs the named passes (in default_pipeline order) on g.
inline compiler::PassContext run_named(Graph& g, const ChipConfig& chip, const CompileOptions& options,
                                       std::initializer_list<const char*> names) {
    compiler::PassContext ctx{chip, options, {}};
    std::vector<compiler::Pass> passes;
    for (const auto& p : compiler::default_pipeline())
        for (const char* n : names)
            if (p.name == n) passes.push_back(p);
    compiler::run_passes(g, passes, ctx);
    return ctx;
}

// A functional core with every slot of a compiled graph at its own HBM address.
class CompiledRunner {
public:
    static constexpr uint64_t kHbm = 256ull << 20;
    ChipConfig chip = load_chip("trn2");
    NeuronCore core{chip, ExecMode::Functional, kHbm};

    // Compiles g, writes 'inputs' (logical row-major values of each contiguous graph input),
    // runs, and returns each graph output's logical values.
    std::vector<std::vector<float>> run(const Graph& g, const std::vector<std::vector<float>>& inputs,
                                        const CompileOptions& options = {}, CompiledGraph* out = nullptr) {
        CompiledGraph cg = compiler::compile(g, chip, options);
        std::vector<uint64_t> addrs;
        uint64_t next = 4096;
        for (const auto& slot : cg.memory.slots) {
            addrs.push_back(next);
            next += (static_cast<uint64_t>(slot.bytes) + 8191) / 4096 * 4096 + 4096;
        }
        EXPECT_LT(next, kHbm);
        for (size_t i = 0; i < g.inputs.size(); ++i) {
            const auto& v = g.values[g.inputs[i]];
            EXPECT_TRUE(v.is_contiguous() && v.offset == 0);
            convert_from_f32(inputs[i].data(), core.memory().hbm(addrs[i]), v.dtype, inputs[i].size());
        }
        compiler::run_compiled(core, cg, addrs);
        std::vector<std::vector<float>> results;
        for (const auto& p : cg.outputs) {
            int64_t n = 1;
            for (int64_t s : p.sizes) n *= s;
            std::vector<float> vals(n);
            std::vector<int64_t> idx(p.sizes.size(), 0);
            for (int64_t e = 0; e < n; ++e) {
                int64_t pos = 0;
                for (size_t d = 0; d < idx.size(); ++d) pos += idx[d] * p.strides[d];
                vals[e] = load_as_f32(core.memory().hbm(addrs[p.slot] + p.byte_offset + pos * dtype_size(p.dtype)), p.dtype);
                for (int d = static_cast<int>(idx.size()) - 1; d >= 0 && ++idx[d] == p.sizes[d]; --d) idx[d] = 0;
            }
            results.push_back(std::move(vals));
        }
        if (out) *out = std::move(cg);
        return results;
    }
};

inline std::vector<float> random_values(size_t n, uint32_t seed, float lo = -2.0f, float hi = 2.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
}

// Rounds host values to dt (what the device holds after a store).
inline std::vector<float> rounded(std::vector<float> v, DType dt) {
    for (float& x : v) {
        uint8_t buf[4];
        store_from_f32(x, buf, dt);
        x = load_as_f32(buf, dt);
    }
    return v;
}

inline void expect_all_near(const std::vector<float>& got, const std::vector<float>& want, double abs_tol,
                            double rel_tol, const char* what) {
    ASSERT_EQ(got.size(), want.size()) << what;
    for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], abs_tol + rel_tol * std::abs(want[i])) << what << " at " << i;
}

// ---- graphs of the fusion patterns
// y = gelu(x * 2 + b) (b broadcast over rows), also returning t = x * 2 when 'expose' is set.
inline Graph elementwise_chain(DType dt, int64_t rows, int64_t cols, bool expose) {
    Graph g;
    const int x = g.add_input(dt, {rows, cols});
    const int b = g.add_input(dt, {cols});
    const int t = g.binary_scalar(ops::Binary::mul, x, 2.0f);
    const int s = g.binary(ops::Binary::add, t, b);
    const int y = g.unary(ops::Unary::gelu, s);
    g.set_outputs(expose ? std::vector<int>{y, t} : std::vector<int>{y});
    return g;
}

// x [rows, K] @ w^T (w [N, K], a Linear weight) + bias [N], as one addmm node; returns its output.
inline int add_linear(Graph& g, int x, int w, int bias) {
    const int64_t rows = g.values[x].sizes[0], K = g.values[w].sizes[1], N = g.values[w].sizes[0];
    const int wt = g.add_view(w, {K, N}, {1, K}, 0);
    compiler::Node addmm;
    addmm.op = Op::addmm;
    addmm.inputs = {bias, x, wt};
    addmm.f0 = 1.0f;
    addmm.f1 = 1.0f;
    return g.nodes[g.add_node(addmm, {{g.values[x].dtype, {rows, N}}})].outputs[0];
}

// out = (gelu(x @ w^T + bias)).view(B, T, N) + residual  (a linear layer with its epilogue)
inline Graph linear_epilogue(DType dt, int64_t B, int64_t T, int64_t K, int64_t N) {
    Graph g;
    const int x = g.add_input(dt, {B * T, K});
    const int w = g.add_input(dt, {N, K});
    const int bias = g.add_input(dt, {N});
    const int residual = g.add_input(dt, {B, T, N});
    const int h = add_linear(g, x, w, bias);
    const int a = g.unary(ops::Unary::gelu, h);
    const int a3 = g.add_view(a, {B, T, N}, {}, 0);
    const int y = g.binary(ops::Binary::add, a3, residual);
    g.set_outputs({y});
    return g;
}

// A linear layer whose pre-activation is also an output (saved for the backward pass), as
// traced: h = (x @ w^T + bias).view(B, T, N); a = gelu(h).view(B * T, N); returns {a, h}.
inline Graph linear_gelu_saving_preactivation(DType dt, int64_t B, int64_t T, int64_t K, int64_t N) {
    Graph g;
    const int x = g.add_input(dt, {B * T, K});
    const int w = g.add_input(dt, {N, K});
    const int bias = g.add_input(dt, {N});
    const int p = add_linear(g, x, w, bias);
    const int h = g.add_view(p, {B, T, N}, {}, 0);
    const int a = g.add_view(g.unary(ops::Unary::gelu, h), {B * T, N}, {}, 0);
    g.set_outputs({a, h});
    return g;
}

// The backward of an activation after a linear layer, as traced: grad_in =
// activation_backward((dy @ w).view(B, T, N), x) with x [B, T, N] (the activation's input, or
// its output for sigmoid and tanh).
inline Graph matmul_activation_backward(DType dt, int64_t B, int64_t T, int64_t K, int64_t N, ops::ActivationGrad kind,
                                        float threshold = 0.0f) {
    Graph g;
    const int dy = g.add_input(dt, {B * T, K});
    const int w = g.add_input(dt, {K, N});
    const int x = g.add_input(dt, {B, T, N});
    const int grad = g.add_view(g.matmul(dy, w), {B, T, N}, {}, 0);
    compiler::Node n;
    n.op = Op::activation_backward;
    n.i0 = static_cast<int64_t>(kind);
    n.f0 = threshold;
    n.inputs = {grad, x};
    g.set_outputs({g.nodes[g.add_node(n, {{dt, {B, T, N}}})].outputs[0]});
    return g;
}

// A Linear layer's backward as traced, with dy [M, out] a view of the incoming gradient
// [1, M, out], w [out, in], x [M, in]: dx = dy @ w, dw = dy^T @ x, db = dy.sum(0) (a [1, out]
// reduce viewed as [out]). bias_grad_first: db is computed before dx (traced graphs show both
// orders). activation_grad: dx goes through a gelu backward against an input a [1, M, in].
// Inputs: grad, w, x[, a]; outputs: dx, dw, db.
inline Graph linear_backward(DType dt, int64_t M, int64_t in, int64_t out, bool bias_grad_first, bool activation_grad) {
    Graph g;
    const int grad = g.add_input(dt, {1, M, out});
    const int w = g.add_input(dt, {out, in});
    const int x = g.add_input(dt, {M, in});
    const int a = activation_grad ? g.add_input(dt, {1, M, in}) : -1;
    const int dy = g.add_view(grad, {M, out}, {}, 0);
    int db = -1;
    const auto bias_grad = [&] { db = g.add_view(g.reduce(ops::Reduce::sum, dy, {0}, true), {out}, {}, 0); };
    if (bias_grad_first) bias_grad();
    int dx = g.matmul(dy, w);
    if (activation_grad) {
        compiler::Node n;
        n.op = Op::activation_backward;
        n.i0 = static_cast<int64_t>(ops::ActivationGrad::gelu);
        n.inputs = {g.add_view(dx, {1, M, in}, {}, 0), a};
        dx = g.nodes[g.add_node(n, {{dt, {1, M, in}}})].outputs[0];
    }
    const int dw = g.matmul(g.add_view(dy, {out, M}, {1, out}, 0), x);
    if (!bias_grad_first) bias_grad();
    g.set_outputs({dx, dw, db});
    return g;
}

// A layer norm's backward whose input gradient joins a residual's gradient, as traced:
// (gi, gw, gb) = layer_norm_backward(dy, x, mean, rstd, w), out = residual + gi, with x [1, rows, D].
// through_view: gi is added as gi.view(rows, D) to a [rows, D] residual. residual_after: the
// residual is computed (-r) after the norm node. Inputs: dy, x, mean, rstd, w, r; outputs: out, gw, gb.
inline Graph layer_norm_backward_add(DType dt, int64_t rows, int64_t D, bool through_view, bool residual_after) {
    Graph g;
    const std::vector<int64_t> shape = {1, rows, D}, flat = {rows, D};
    const int dy = g.add_input(dt, shape);
    const int x = g.add_input(dt, shape);
    const int mean = g.add_input(DType::f32, {1, rows, 1});
    const int rstd = g.add_input(DType::f32, {1, rows, 1});
    const int w = g.add_input(dt, {D});
    const int r = g.add_input(dt, through_view ? flat : shape);
    int residual = r;
    if (!residual_after) residual = g.unary(ops::Unary::neg, r);
    compiler::Node n;
    n.op = Op::layer_norm_backward;
    n.inputs = {dy, x, mean, rstd, w};
    n.i0 = 1;
    n.i1 = 1 | 2 | 4 | 8;
    const int norm = g.add_node(n, {{dt, shape}, {dt, {D}}, {dt, {D}}});
    if (residual_after) residual = g.unary(ops::Unary::neg, r);
    int gi = g.nodes[norm].outputs[0];
    if (through_view) gi = g.add_view(gi, flat, {}, 0);
    const int out = g.binary(ops::Binary::add, residual, gi);
    g.set_outputs({out, g.nodes[norm].outputs[1], g.nodes[norm].outputs[2]});
    return g;
}

// softmax(x, -1) written out: exp(x - max) / sum(exp(x - max))
inline int decomposed_softmax(Graph& g, int x) {
    const int m = g.reduce(ops::Reduce::max, x, {-1}, true);
    const int s = g.binary(ops::Binary::sub, x, m);
    const int e = g.unary(ops::Unary::exp, s);
    const int t = g.reduce(ops::Reduce::sum, e, {-1}, true);
    return g.binary(ops::Binary::div, e, t);
}

// x * rsqrt(mean(x^2, -1) + eps) * w; also returns the rstd when 'expose_rstd'.
inline Graph decomposed_rms_norm(DType dt, int64_t rows, int64_t cols, bool expose_rstd) {
    Graph g;
    const int x = g.add_input(dt, {rows, cols});
    const int w = g.add_input(dt, {cols});
    const int sq = g.binary_scalar(ops::Binary::pow, x, 2.0f);
    const int ms = g.reduce(ops::Reduce::mean, sq, {-1}, true);
    const int a = g.binary_scalar(ops::Binary::add, ms, 1e-6f);
    const int r = g.unary(ops::Unary::rsqrt, a);
    const int y = g.binary(ops::Binary::mul, x, r);
    const int z = g.binary(ops::Binary::mul, y, w);
    g.set_outputs(expose_rstd ? std::vector<int>{z, r} : std::vector<int>{z});
    return g;
}

// softmax(q @ k^T * scale) @ v over [B, H, S, D]
inline Graph decomposed_attention(DType dt, int64_t B, int64_t H, int64_t S, int64_t D, float scale) {
    Graph g;
    const int q = g.add_input(dt, {B, H, S, D});
    const int k = g.add_input(dt, {B, H, S, D});
    const int v = g.add_input(dt, {B, H, S, D});
    const int kt = g.add_view(k, {B, H, D, S}, {H * S * D, S * D, 1, D}, 0);
    const int s = g.matmul(q, kt);
    const int ss = g.binary_scalar(ops::Binary::mul, s, scale);
    const int p = decomposed_softmax(g, ss);
    g.set_outputs({g.matmul(p, v)});
    return g;
}

}  // namespace trnsim::compiler_test
