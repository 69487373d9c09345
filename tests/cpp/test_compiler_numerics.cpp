// Numerics of compiled programs: each fused kernel against the same graph compiled with no
// fusion (every node one operator-library kernel, as eager execution runs it) and against a
// host reference.
#include <cmath>

#include "compiler_test_util.h"

namespace trnsim::compiler_test {
namespace {

float gelu(float x) { return 0.5f * x * (1.0f + std::erf(x / std::sqrt(2.0f))); }

CompileOptions unfused() {
    CompileOptions o;
    o.fuse = false;
    return o;
}

TEST(CompilerNumerics, FusedElementwiseMatchesUnfusedAndHost) {
    for (DType dt : {DType::f32, DType::bf16}) {
        const int64_t rows = 200, cols = 96;
        Graph g = elementwise_chain(dt, rows, cols, true);
        const auto x = rounded(random_values(rows * cols, 1), dt), b = rounded(random_values(cols, 2), dt);
        CompiledRunner r;
        CompiledGraph cg;
        const auto fused = r.run(g, {x, b}, {}, &cg);
        EXPECT_EQ(cg.stats["fused_elementwise"], 1);
        EXPECT_EQ(cg.stats["programs"], 1);
        const auto plain = r.run(g, {x, b}, unfused());
        // Each step rounds to the node's dtype in both forms: results agree exactly.
        EXPECT_EQ(fused[0], plain[0]) << dtype_name(dt);
        EXPECT_EQ(fused[1], plain[1]) << dtype_name(dt);
        std::vector<float> want(rows * cols), want_t(rows * cols);
        for (int64_t i = 0; i < rows; ++i)
            for (int64_t j = 0; j < cols; ++j) {
                const float t = rounded({x[i * cols + j] * 2.0f}, dt)[0];
                const float s = rounded({t + b[j]}, dt)[0];
                want_t[i * cols + j] = t;
                want[i * cols + j] = rounded({gelu(s)}, dt)[0];
            }
        const double tol = dt == DType::bf16 ? 1e-2 : 1e-5;
        expect_all_near(fused[0], want, tol, tol, "gelu(2x + b)");
        expect_all_near(fused[1], want_t, 0, 0, "2x");
    }
}

TEST(CompilerNumerics, FusedElementwiseMovesLessHbmTraffic) {
    Graph g = elementwise_chain(DType::f32, 256, 512, false);
    CompiledRunner r;
    const auto x = random_values(256 * 512, 3), b = random_values(512, 4);
    CompiledGraph fused_cg, plain_cg;
    r.run(g, {x, b}, {}, &fused_cg);
    r.run(g, {x, b}, unfused(), &plain_cg);
    uint64_t fused_bytes = 0, plain_bytes = 0;
    for (const auto& s : fused_cg.segments)
        for (const auto& ins : s.program.instrs) fused_bytes += instruction_hbm_bytes(ins);
    for (const auto& s : plain_cg.segments)
        for (const auto& ins : s.program.instrs) plain_bytes += instruction_hbm_bytes(ins);
    // Fused: read x once, write y once. Unfused: three ops each read and write the whole tensor.
    EXPECT_LT(fused_bytes * 2, plain_bytes);
    EXPECT_EQ(fused_cg.stats["hbm_intermediate_bytes"], 0);
}

TEST(CompilerNumerics, FusedMatmulEpilogueMatchesUnfused) {
    const int64_t B = 2, T = 96, K = 160, N = 192;
    const DType dt = DType::bf16;
    Graph g = linear_epilogue(dt, B, T, K, N);
    const auto x = rounded(random_values(B * T * K, 5, -1, 1), dt), w = rounded(random_values(N * K, 6, -0.2f, 0.2f), dt),
               bias = rounded(random_values(N, 7), dt), res = rounded(random_values(B * T * N, 8), dt);
    CompiledRunner r;
    CompiledGraph cg;
    const auto fused = r.run(g, {x, w, bias, res}, {}, &cg);
    EXPECT_EQ(cg.stats["fused_matmul_epilogue"], 1);
    const auto plain = r.run(g, {x, w, bias, res}, unfused());
    EXPECT_EQ(fused[0], plain[0]);
    std::vector<float> want(B * T * N);
    for (int64_t m = 0; m < B * T; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(x[m * K + k]) * w[n * K + k];
            const float h = rounded({static_cast<float>(acc) + bias[n]}, dt)[0];
            const float a = rounded({gelu(h)}, dt)[0];
            want[m * N + n] = a + res[m * N + n];
        }
    expect_all_near(fused[0], want, 3e-2, 2e-2, "gelu(x w^T + b) + r");
}

// An operand broadcast along its rows (row stride 0, e.g. an expanded vector) is not a dense
// matrix: the fused matmul must read the same row for every M, as the unfused matmul does.
TEST(CompilerNumerics, FusedMatmulWithRowBroadcastOperandMatchesUnfused) {
    const int64_t M = 160, K = 96, N = 128;
    const DType dt = DType::f32;
    Graph g;
    const int x = g.add_input(dt, {1, K}), w = g.add_input(dt, {K, N});
    const int xe = g.add_view(x, {M, K}, {0, 1}, 0);
    g.set_outputs({g.unary(ops::Unary::relu, g.matmul(xe, w))});
    const auto xv = random_values(K, 31, -1, 1), wv = random_values(K * N, 32, -1, 1);
    CompiledRunner r;
    CompiledGraph cg;
    const auto fused = r.run(g, {xv, wv}, {}, &cg);
    const auto plain = r.run(g, {xv, wv}, unfused());
    std::vector<float> want(M * N);
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(xv[k]) * wv[k * N + n];
            want[m * N + n] = std::max(0.0f, static_cast<float>(acc));
        }
    expect_all_near(plain[0], want, 1e-4, 1e-4, "unfused relu(expand(x) w)");
    expect_all_near(fused[0], want, 1e-4, 1e-4, "fused relu(expand(x) w)");
}

TEST(CompilerNumerics, FusedMatmulStoringThePreActivationMatchesUnfused) {
    const int64_t B = 2, T = 100, K = 96, N = 600;   // ragged row and column tiles
    const DType dt = DType::bf16;
    Graph g = linear_gelu_saving_preactivation(dt, B, T, K, N);
    const auto x = rounded(random_values(B * T * K, 11, -1, 1), dt), w = rounded(random_values(N * K, 12, -0.3f, 0.3f), dt),
               bias = rounded(random_values(N, 13), dt);
    CompiledRunner r;
    CompiledGraph cg;
    const auto fused = r.run(g, {x, w, bias}, {}, &cg);
    EXPECT_EQ(cg.stats["fused_matmul_epilogue_stores"], 1);
    EXPECT_EQ(cg.stats["hbm_intermediate_bytes"], 0);
    const auto plain = r.run(g, {x, w, bias}, unfused());
    EXPECT_EQ(fused[0], plain[0]) << "gelu(h)";
    EXPECT_EQ(fused[1], plain[1]) << "h";
    std::vector<float> want_h(B * T * N), want_a(B * T * N);
    for (int64_t m = 0; m < B * T; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(x[m * K + k]) * w[n * K + k];
            want_h[m * N + n] = rounded({static_cast<float>(acc) + bias[n]}, dt)[0];
            want_a[m * N + n] = rounded({gelu(want_h[m * N + n])}, dt)[0];
        }
    expect_all_near(fused[1], want_h, 2e-2, 1e-2, "x w^T + b");
    expect_all_near(fused[0], want_a, 3e-2, 2e-2, "gelu(x w^T + b)");
}

// Every activation backward fused into the matmul epilogue gives what the unfused kernel gives.
TEST(CompilerNumerics, FusedMatmulActivationBackwardMatchesUnfused) {
    const int64_t B = 2, T = 100, K = 96, N = 600;
    using ops::ActivationGrad;
    for (DType dt : {DType::bf16, DType::f32})
        for (ActivationGrad kind : {ActivationGrad::gelu, ActivationGrad::gelu_tanh, ActivationGrad::silu,
                                    ActivationGrad::sigmoid, ActivationGrad::tanh, ActivationGrad::threshold}) {
            const std::string what = std::string(dtype_name(dt)) + " kind " + std::to_string(static_cast<int>(kind));
            Graph g = matmul_activation_backward(dt, B, T, K, N, kind, 0.25f);
            const auto dy = rounded(random_values(B * T * K, 21, -1, 1), dt),
                       w = rounded(random_values(K * N, 22, -0.3f, 0.3f), dt), x = rounded(random_values(B * T * N, 23), dt);
            CompiledRunner r;
            CompiledGraph cg;
            const auto fused = r.run(g, {dy, w, x}, {}, &cg);
            EXPECT_EQ(cg.stats["fused_matmul_epilogue"], 1) << what;
            EXPECT_EQ(cg.stats["hbm_intermediate_bytes"], 0) << what;
            const auto plain = r.run(g, {dy, w, x}, unfused());
            ASSERT_EQ(fused[0].size(), plain[0].size());
            int64_t differ = 0;
            for (size_t i = 0; i < plain[0].size(); ++i) differ += fused[0][i] != plain[0][i];
            EXPECT_EQ(differ, 0) << what;
        }
}

// A Linear layer's bias gradient computed by its dx matmul gives the products the unfused
// kernels give and the column sums of dy (fp32 sums, rounded once) in both traced orders.
TEST(CompilerNumerics, BiasGradientFusedIntoTheDxMatmulMatchesUnfused) {
    const int64_t M = 300, in = 96, out = 200;   // ragged row and k tiles
    for (DType dt : {DType::bf16, DType::f32})
        for (bool bias_grad_first : {false, true}) {
            const std::string what = std::string(dtype_name(dt)) + (bias_grad_first ? " db first" : " db last");
            Graph g = linear_backward(dt, M, in, out, bias_grad_first, bias_grad_first);
            std::vector<std::vector<float>> inputs = {rounded(random_values(M * out, 31, -1, 1), dt),
                                                      rounded(random_values(out * in, 32, -0.3f, 0.3f), dt),
                                                      rounded(random_values(M * in, 33), dt)};
            if (bias_grad_first) inputs.push_back(rounded(random_values(M * in, 34), dt));
            CompiledRunner r;
            CompiledGraph cg;
            const auto fused = r.run(g, inputs, {}, &cg);
            EXPECT_EQ(cg.stats["fused_matmul_column_sums"], 1) << what;
            const auto plain = r.run(g, inputs, unfused());
            EXPECT_EQ(fused[0], plain[0]) << what << ": dx";
            EXPECT_EQ(fused[1], plain[1]) << what << ": dw";
            std::vector<float> want(out);
            for (int64_t k = 0; k < out; ++k) {
                double acc = 0;
                for (int64_t m = 0; m < M; ++m) acc += inputs[0][m * out + k];
                want[k] = rounded({static_cast<float>(acc)}, dt)[0];
            }
            const double tol = dt == DType::bf16 ? 8e-3 : 1e-5;
            expect_all_near(fused[2], want, tol, tol, (what + ": db").c_str());
            expect_all_near(plain[2], want, tol, tol, (what + ": db unfused").c_str());
        }
}

TEST(CompilerNumerics, FusedSoftmaxMatchesHost) {
    const int64_t rows = 130, cols = 77;
    Graph g;
    const int x = g.add_input(DType::f32, {rows, cols});
    g.set_outputs({decomposed_softmax(g, x)});
    const auto xv = random_values(rows * cols, 9, -5, 5);
    CompiledRunner r;
    CompiledGraph cg;
    const auto got = r.run(g, {xv}, {}, &cg);
    EXPECT_EQ(cg.stats["fused_softmax"], 1);
    const auto plain = r.run(g, {xv}, unfused());
    std::vector<float> want(rows * cols);
    for (int64_t i = 0; i < rows; ++i) {
        double m = -1e30, s = 0;
        for (int64_t j = 0; j < cols; ++j) m = std::max<double>(m, xv[i * cols + j]);
        for (int64_t j = 0; j < cols; ++j) s += std::exp(xv[i * cols + j] - m);
        for (int64_t j = 0; j < cols; ++j) want[i * cols + j] = static_cast<float>(std::exp(xv[i * cols + j] - m) / s);
    }
    expect_all_near(got[0], want, 1e-6, 1e-4, "fused softmax");
    expect_all_near(plain[0], want, 1e-6, 1e-4, "unfused softmax");
}

TEST(CompilerNumerics, FusedRmsNormMatchesHost) {
    const int64_t rows = 64, cols = 256;
    Graph g = decomposed_rms_norm(DType::f32, rows, cols, true);
    const auto x = random_values(rows * cols, 10), w = random_values(cols, 11);
    CompiledRunner r;
    CompiledGraph cg;
    const auto got = r.run(g, {x, w}, {}, &cg);
    EXPECT_EQ(cg.stats["fused_norm"], 1);
    std::vector<float> want(rows * cols), want_rstd(rows);
    for (int64_t i = 0; i < rows; ++i) {
        double ss = 0;
        for (int64_t j = 0; j < cols; ++j) ss += static_cast<double>(x[i * cols + j]) * x[i * cols + j];
        const double rstd = 1.0 / std::sqrt(ss / cols + 1e-6);
        want_rstd[i] = static_cast<float>(rstd);
        for (int64_t j = 0; j < cols; ++j) want[i * cols + j] = static_cast<float>(x[i * cols + j] * rstd * w[j]);
    }
    expect_all_near(got[0], want, 1e-5, 1e-4, "rms_norm");
    expect_all_near(got[1], want_rstd, 1e-6, 1e-4, "rstd");
}

TEST(CompilerNumerics, LayerNormBackwardWithItsResidualAddMatchesUnfused) {
    // Rows one per partition (1024, pipelined) and grouped to a partition (96); the fused kernel
    // rounds grad_in + residual once, the unfused graph twice.
    struct Case {
        DType dt;
        int64_t D;
        bool through_view;
    };
    const int64_t rows = 200;
    for (const Case& c : {Case{DType::bf16, 1024, true}, Case{DType::f32, 1024, false}, Case{DType::bf16, 96, false},
                          Case{DType::f32, 96, true}}) {
        Graph g = layer_norm_backward_add(c.dt, rows, c.D, c.through_view, false);
        const std::vector<std::vector<float>> in = {
            rounded(random_values(rows * c.D, 11), c.dt), rounded(random_values(rows * c.D, 12), c.dt),
            random_values(rows, 13, -0.5f, 0.5f),       random_values(rows, 14, 0.5f, 1.5f),
            rounded(random_values(c.D, 15, 0.5f, 1.5f), c.dt), rounded(random_values(rows * c.D, 16), c.dt)};
        CompiledRunner r;
        CompiledGraph cg;
        const auto fused = r.run(g, in, {}, &cg);
        EXPECT_EQ(cg.stats["fused_norm_backward_add"], 1);
        const auto plain = r.run(g, in, unfused());
        const bool bf16 = c.dt == DType::bf16;
        expect_all_near(fused[0], plain[0], bf16 ? 2e-2 : 1e-5, bf16 ? 8e-3 : 1e-5, "residual + grad_in");
        EXPECT_EQ(fused[1], plain[1]);
        EXPECT_EQ(fused[2], plain[2]);
    }
}

TEST(CompilerNumerics, FusedAttentionMatchesUnfused) {
    const int64_t B = 1, H = 2, S = 160, D = 64;
    const DType dt = DType::bf16;
    Graph g = decomposed_attention(dt, B, H, S, D, 0.125f);
    const auto q = rounded(random_values(B * H * S * D, 12), dt), k = rounded(random_values(B * H * S * D, 13), dt),
               v = rounded(random_values(B * H * S * D, 14), dt);
    CompiledRunner r;
    CompiledGraph cg;
    const auto fused = r.run(g, {q, k, v}, {}, &cg);
    EXPECT_EQ(cg.stats["fused_attention"], 1);
    // Scores and probabilities stay on chip: the only HBM intermediate is the logsumexp.
    EXPECT_EQ(cg.stats["hbm_intermediate_bytes"], B * H * S * 4);
    CompiledGraph plain_cg;
    const auto plain = r.run(g, {q, k, v}, unfused(), &plain_cg);
    EXPECT_GT(plain_cg.stats["hbm_intermediate_bytes"], 0);
    // Unfused rounds scores and probabilities to bf16; fused keeps them in fp32 on chip.
    expect_all_near(fused[0], plain[0], 3e-2, 3e-2, "attention");
}

TEST(CompilerNumerics, AttentionBackwardInKeyBlocksMatchesOneBlock) {
    // One head of S = 1024 needs more SBUF than an 18 KiB partition allows: the kernel takes the
    // keys in blocks; the gradients match those of the full SBUF (all keys at once).
    const int64_t S = 1024, D = 64;
    const DType dt = DType::bf16;
    Graph g;
    std::vector<int> in;
    for (int k = 0; k < 5; ++k) in.push_back(g.add_input(dt, {1, 1, S, D}));   // grad_o, q, k, v, o
    in.push_back(g.add_input(DType::f32, {1, 1, S}));                          // lse
    compiler::Node n;
    n.op = Op::attention_backward;
    n.inputs = in;
    n.f0 = 0.125f;
    const int node = g.add_node(n, {{dt, {1, 1, S, D}}, {dt, {1, 1, S, D}}, {dt, {1, 1, S, D}}});
    g.set_outputs(g.nodes[node].outputs);
    std::vector<std::vector<float>> inputs;
    for (int k = 0; k < 5; ++k) inputs.push_back(rounded(random_values(S * D, 20 + k, -1.0f, 1.0f), dt));
    inputs.push_back(random_values(S, 30, 4.0f, 6.0f));
    CompiledRunner full;
    const auto want = full.run(g, inputs);
    CompiledRunner small;
    small.chip.sbuf.bytes_per_partition = 18 * 1024;
    const auto got = small.run(g, inputs);
    const char* names[] = {"grad_q", "grad_k", "grad_v"};
    for (int k = 0; k < 3; ++k) expect_all_near(got[k], want[k], 2e-2, 2e-2, names[k]);
}

TEST(CompilerNumerics, AttentionBackwardWritesGradientsInHeadsLastOrder) {
    // Gradients stored as [B, S, H, D] (set_dense_strides), with all keys at once and in key
    // blocks, hold the same values as the contiguous [B, H, S, D] ones.
    const int64_t H = 2, S = 1024, D = 64;
    const DType dt = DType::bf16;
    auto build = [&](bool heads_last) {
        Graph g;
        std::vector<int> in;
        for (int k = 0; k < 5; ++k) in.push_back(g.add_input(dt, {1, H, S, D}));   // grad_o, q, k, v, o
        in.push_back(g.add_input(DType::f32, {1, H, S}));                          // lse
        compiler::Node n;
        n.op = Op::attention_backward;
        n.inputs = in;
        n.f0 = 0.125f;
        const int node = g.add_node(n, {{dt, {1, H, S, D}}, {dt, {1, H, S, D}}, {dt, {1, H, S, D}}});
        if (heads_last)
            for (int out : g.nodes[node].outputs) g.set_dense_strides(out, {S * H * D, D, H * D, 1});
        g.set_outputs(g.nodes[node].outputs);
        return g;
    };
    std::vector<std::vector<float>> inputs;
    for (int k = 0; k < 5; ++k) inputs.push_back(rounded(random_values(H * S * D, 40 + k, -1.0f, 1.0f), dt));
    inputs.push_back(random_values(H * S, 50, 4.0f, 6.0f));
    CompiledRunner full;
    const auto want = full.run(build(false), inputs);
    const auto got = full.run(build(true), inputs);
    CompiledRunner small;
    small.chip.sbuf.bytes_per_partition = 18 * 1024;
    const auto blocked = small.run(build(true), inputs);
    const char* names[] = {"grad_q", "grad_k", "grad_v"};
    for (int k = 0; k < 3; ++k) {
        expect_all_near(got[k], want[k], 0.0f, 0.0f, names[k]);
        expect_all_near(blocked[k], want[k], 2e-2, 2e-2, names[k]);
    }
}

TEST(CompilerNumerics, OnlyAttentionOutputsTakeAnotherDenseOrder) {
    Graph g;
    const int x = g.add_input(DType::f32, {2, 3});
    const int y = g.unary(ops::Unary::exp, x);
    EXPECT_THROW(g.set_dense_strides(y, {1, 2}), compiler::CompileError);   // not an attention output
    compiler::Node n;
    n.op = Op::attention;
    n.inputs = {g.add_input(DType::f32, {1, 2, 4, 8}), g.add_input(DType::f32, {1, 2, 4, 8}),
                g.add_input(DType::f32, {1, 2, 4, 8})};
    const int node = g.add_node(n, {{DType::f32, {1, 2, 4, 8}}, {DType::f32, {1, 2, 4}}});
    const int out = g.nodes[node].outputs[0];
    EXPECT_THROW(g.set_dense_strides(out, {64, 8, 8, 1}), compiler::CompileError);   // overlapping
    EXPECT_THROW(g.set_dense_strides(out, {64, 8, 16}), compiler::CompileError);     // wrong rank
    g.set_dense_strides(out, {64, 8, 16, 1});
    EXPECT_EQ(g.values[out].strides, (std::vector<int64_t>{64, 8, 16, 1}));
    // place_in: another output of the same node, inside its bounds.
    const int lse = g.nodes[node].outputs[1];
    EXPECT_THROW(g.place_in(lse, y, {1, 1, 1}, 0), compiler::CompileError);     // not of one attention node
    EXPECT_THROW(g.place_in(out, lse, {64, 8, 16, 1}, 0), compiler::CompileError);   // out does not fit in lse
}

TEST(CompilerNumerics, GraphWithEagerNodesCannotRunWithoutItsHost) {
    Graph g;
    const int x = g.add_input(DType::f32, {4});
    compiler::Node e;
    e.op = Op::eager;
    e.inputs = {x};
    e.label = "aten.sort";
    g.set_outputs({g.nodes[g.add_node(e, {{DType::f32, {4}}})].outputs[0]});
    CompiledRunner r;
    EXPECT_THROW(r.run(g, {{1, 2, 3, 4}}), compiler::CompileError);
}

TEST(CompilerNumerics, AttentionWithABroadcastMaskMatchesTheDefinition) {
    // attention and attention_backward with an additive mask [1, 1, S, S] (one for every head)
    // as their last input, against softmax(scale * q k^T + mask) v and its gradients in fp64.
    const int64_t H = 2, S = 40, D = 16;
    const float scale = 0.25f;
    const DType dt = DType::f32;
    Graph g;
    const int q = g.add_input(dt, {1, H, S, D}), k = g.add_input(dt, {1, H, S, D}), v = g.add_input(dt, {1, H, S, D});
    const int grad_o = g.add_input(dt, {1, H, S, D}), mask = g.add_input(dt, {1, 1, S, S});
    compiler::Node fwd;
    fwd.op = Op::attention;
    fwd.inputs = {q, k, v, mask};
    fwd.f0 = scale;
    const int f = g.add_node(fwd, {{dt, {1, H, S, D}}, {DType::f32, {1, H, S}}});
    const int o = g.nodes[f].outputs[0], lse = g.nodes[f].outputs[1];
    compiler::Node bwd;
    bwd.op = Op::attention_backward;
    bwd.inputs = {grad_o, q, k, v, o, lse, mask};
    bwd.f0 = scale;
    const int b = g.add_node(bwd, {{dt, {1, H, S, D}}, {dt, {1, H, S, D}}, {dt, {1, H, S, D}}});
    g.set_outputs({o, g.nodes[b].outputs[0], g.nodes[b].outputs[1], g.nodes[b].outputs[2]});
    std::vector<std::vector<float>> in;
    for (int t = 0; t < 4; ++t) in.push_back(random_values(H * S * D, 60 + t, -1.0f, 1.0f));
    in.push_back(random_values(S * S, 70, -3.0f, 1.0f));
    CompiledRunner r;
    const auto got = r.run(g, in);

    std::vector<std::vector<double>> want(4, std::vector<double>(H * S * D, 0.0));
    auto at = [&](int64_t h, int64_t i, int64_t d) { return (h * S + i) * D + d; };
    for (int64_t h = 0; h < H; ++h) {
        std::vector<double> p(S * S), dp(S * S);
        for (int64_t i = 0; i < S; ++i) {
            double mx = -1e300;
            for (int64_t j = 0; j < S; ++j) {
                double s = 0;
                for (int64_t d = 0; d < D; ++d) s += double(in[0][at(h, i, d)]) * in[1][at(h, j, d)];
                p[i * S + j] = scale * s + in[4][i * S + j];
                mx = std::max(mx, p[i * S + j]);
            }
            double sum = 0;
            for (int64_t j = 0; j < S; ++j) sum += (p[i * S + j] = std::exp(p[i * S + j] - mx));
            for (int64_t j = 0; j < S; ++j) p[i * S + j] /= sum;
            for (int64_t d = 0; d < D; ++d)
                for (int64_t j = 0; j < S; ++j) want[0][at(h, i, d)] += p[i * S + j] * in[2][at(h, j, d)];
        }
        for (int64_t i = 0; i < S; ++i) {
            double delta = 0;
            for (int64_t d = 0; d < D; ++d) delta += double(in[3][at(h, i, d)]) * want[0][at(h, i, d)];
            for (int64_t j = 0; j < S; ++j) {
                double g_v = 0;
                for (int64_t d = 0; d < D; ++d) g_v += double(in[3][at(h, i, d)]) * in[2][at(h, j, d)];
                dp[i * S + j] = p[i * S + j] * (g_v - delta) * scale;   // d(loss)/d(q k^T)
            }
        }
        for (int64_t i = 0; i < S; ++i)
            for (int64_t j = 0; j < S; ++j)
                for (int64_t d = 0; d < D; ++d) {
                    want[1][at(h, i, d)] += dp[i * S + j] * in[1][at(h, j, d)];
                    want[2][at(h, j, d)] += dp[i * S + j] * in[0][at(h, i, d)];
                    want[3][at(h, j, d)] += p[i * S + j] * in[3][at(h, i, d)];
                }
    }
    const char* names[] = {"out", "grad_q", "grad_k", "grad_v"};
    for (int t = 0; t < 4; ++t)
        expect_all_near(got[t], std::vector<float>(want[t].begin(), want[t].end()), 1e-5, 1e-4, names[t]);
}

}  // namespace
}  // namespace trnsim::compiler_test
