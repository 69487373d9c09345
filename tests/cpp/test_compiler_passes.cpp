// Pass-level tests of the graph compiler: each fusion turns its pattern into the expected
// fused graph (and leaves graphs it must not touch alone); canonicalize, schedule,
// plan_memory, segmenting around eager nodes and the dump directory.
#include <filesystem>
#include <fstream>

#include "compiler/passes.h"
#include "compiler_test_util.h"

namespace trnsim::compiler_test {
namespace {

const ChipConfig& trn2() {
    static const ChipConfig chip = load_chip("trn2");
    return chip;
}

// p = a [32, 64] @ b [64, 16] on two f32 inputs; returns p.
int matmul_32x64x16(Graph& g) {
    const int a = g.add_input(DType::f32, {32, 64});
    const int b = g.add_input(DType::f32, {64, 16});
    return g.matmul(a, b);
}

TEST(CompilerPasses, DefaultPipelineIsNamedAndOrdered) {
    std::vector<std::string> names;
    for (const auto& p : compiler::default_pipeline()) names.push_back(p.name);
    EXPECT_EQ(names, (std::vector<std::string>{"canonicalize", "fuse_softmax", "fuse_attention", "fuse_norm",
                                               "fuse_matmul_epilogue", "fuse_matmul_column_sums", "fuse_elementwise",
                                               "schedule"}));
}

TEST(CompilerPasses, CanonicalizeForwardsIdentitiesAndDropsDeadNodes) {
    Graph g;
    const int x = g.add_input(DType::f32, {4, 8});
    const int c = g.cast(x, DType::f32);                       // identity copy
    const int m = g.binary_scalar(ops::Binary::mul, c, 1.0f);  // x * 1
    g.unary(ops::Unary::exp, x);                               // unused
    const int y = g.unary(ops::Unary::tanh, m);
    g.set_outputs({y});
    CompileOptions opt;
    auto ctx = run_named(g, trn2(), opt, {"canonicalize"});
    EXPECT_EQ(g.live_nodes().size(), 1u);
    EXPECT_EQ(only_live(g, Op::unary).inputs, std::vector<int>{x});
    EXPECT_EQ(ctx.stats["identities_removed"], 2);
    EXPECT_EQ(ctx.stats["dead_nodes_removed"], 1);   // the unused exp
}

TEST(CompilerPasses, CanonicalizeKeepsCopiesThatMaterialiseStridedViews) {
    // copy(x^T) then a view of the copy: the view's strides address the copy's buffer, so
    // the copy must stay (forwarding it would leave the view without storage).
    Graph g;
    const int x = g.add_input(DType::f32, {8, 4});
    const int xt = g.add_view(x, {4, 8}, {1, 4}, 0);
    const int c = g.cast(xt, DType::f32);
    const int flat = g.add_view(c, {32}, {1}, 0);
    const int y = g.unary(ops::Unary::exp, flat);
    g.set_outputs({y});
    CompileOptions opt;
    auto ctx = run_named(g, trn2(), opt, {"canonicalize"});
    EXPECT_EQ(ctx.stats["identities_removed"], 0);
    EXPECT_EQ(g.values[flat].storage, g.values[c].storage);
    const compiler::CompiledGraph cg = compiler::compile(g, trn2());
    EXPECT_EQ(cg.stats.at("programs"), 1);
}

TEST(CompilerPasses, CanonicalizeMovesViewsOfForwardedCopiesOntoTheInput) {
    // A contiguous slice copied, then viewed: the view moves onto x's storage at the slice's offset.
    Graph g;
    const int x = g.add_input(DType::f32, {4, 8});
    const int row = g.add_view(x, {2, 8}, {8, 1}, 16);
    const int c = g.cast(row, DType::f32);
    const int flat = g.add_view(c, {16}, {1}, 0);
    const int y = g.unary(ops::Unary::exp, flat);
    g.set_outputs({y});
    CompileOptions opt;
    auto ctx = run_named(g, trn2(), opt, {"canonicalize"});
    EXPECT_EQ(ctx.stats["identities_removed"], 1);
    EXPECT_EQ(g.values[flat].storage, g.values[x].storage);
    EXPECT_EQ(g.values[flat].offset, 16);
}

TEST(CompilerPasses, FuseElementwiseMakesOneNodePerChain) {
    Graph g = elementwise_chain(DType::f32, 16, 32, false);
    CompileOptions opt;
    auto ctx = run_named(g, trn2(), opt, {"fuse_elementwise"});
    ASSERT_EQ(g.live_nodes().size(), 1u);
    const auto& n = only_live(g, Op::fused_elementwise);
    ASSERT_EQ(n.body.size(), 3u);
    EXPECT_EQ(n.body[0].op, Op::binary_scalar);
    EXPECT_EQ(n.body[1].op, Op::binary);
    EXPECT_EQ(n.body[1].args, (std::vector<int>{-1, 1}));   // step 0, then input 1 (the bias)
    EXPECT_EQ(n.body[2].op, Op::unary);
    EXPECT_EQ(n.inputs, (std::vector<int>{g.inputs[0], g.inputs[1]}));
    EXPECT_EQ(n.body_outputs, std::vector<int>{2});
    EXPECT_EQ(ctx.stats["fused_elementwise_nodes"], 3);
}

TEST(CompilerPasses, FuseElementwiseExposesIntermediatesReadOutside) {
    Graph g = elementwise_chain(DType::bf16, 16, 32, true);
    CompileOptions opt;
    run_named(g, trn2(), opt, {"fuse_elementwise"});
    const auto& n = only_live(g, Op::fused_elementwise);
    EXPECT_EQ(n.outputs.size(), 2u);
    EXPECT_EQ(n.body_outputs, (std::vector<int>{0, 2}));
    int tiles = 0;
    compiler::assign_scratch_tiles(n, &tiles);
    EXPECT_EQ(tiles, 2);   // s0 lives to the end (an output); s1's tile is reused by s2
}

TEST(CompilerPasses, FuseElementwiseStopsAtShapeChanges) {
    Graph g;
    const int x = g.add_input(DType::f32, {8, 16});
    const int e = g.unary(ops::Unary::exp, x);
    const int r = g.reduce(ops::Reduce::sum, e, {-1}, true);   // not pointwise
    const int y = g.binary_scalar(ops::Binary::mul, r, 3.0f);
    g.set_outputs({y});
    CompileOptions opt;
    run_named(g, trn2(), opt, {"fuse_elementwise"});
    EXPECT_EQ(count_live(g, Op::fused_elementwise), 0);
    EXPECT_EQ(g.live_nodes().size(), 3u);
}

TEST(CompilerPasses, FuseMatmulEpilogueTakesBiasActivationAndResidual) {
    Graph g = linear_epilogue(DType::bf16, 2, 64, 128, 256);
    CompileOptions opt;
    auto ctx = run_named(g, trn2(), opt, {"fuse_matmul_epilogue"});
    EXPECT_EQ(ctx.stats["fused_matmul_epilogue"], 1);
    EXPECT_EQ(count_live(g, Op::addmm), 0);
    const auto& n = only_live(g, Op::fused_matmul);
    ASSERT_EQ(n.body.size(), 3u);   // product (with the bias as addend), gelu, + residual
    EXPECT_EQ(n.body[0].op, Op::matmul);
    EXPECT_EQ(n.body[1].op, Op::unary);
    EXPECT_EQ(n.body[2].op, Op::binary);
    EXPECT_EQ(n.i1, 1);   // bias is the addend
    ASSERT_EQ(n.inputs.size(), 4u);
    EXPECT_EQ(n.inputs[3], g.inputs[3]);                       // residual
    EXPECT_EQ(n.dims, (std::vector<int64_t>{0, 1, 256, 1}));   // bias broadcast over rows; residual [M,N]
    EXPECT_EQ(g.values[n.outputs[0]].sizes, (std::vector<int64_t>{2, 64, 256}));
}

TEST(CompilerPasses, FuseMatmulEpilogueStoresAProductThatIsAlsoAnOutput) {
    Graph g;
    const int p = matmul_32x64x16(g);
    const int r = g.unary(ops::Unary::relu, p);
    g.set_outputs({r, p});   // the product is needed as is
    CompileOptions opt;
    auto ctx = run_named(g, trn2(), opt, {"fuse_matmul_epilogue"});
    EXPECT_EQ(ctx.stats["fused_matmul_epilogue_stores"], 1);
    EXPECT_EQ(count_live(g, Op::matmul), 0);
    const auto& n = only_live(g, Op::fused_matmul);
    ASSERT_EQ(n.body.size(), 2u);
    EXPECT_EQ(n.outputs, (std::vector<int>{r, p}));
    EXPECT_EQ(n.body_outputs, (std::vector<int>{1, 0}));   // relu from step 1, the product from step 0
    EXPECT_NO_THROW(g.verify());
}

TEST(CompilerPasses, FuseMatmulEpilogueStoresASavedPreActivationThroughReshapes) {
    Graph g = linear_gelu_saving_preactivation(DType::bf16, 2, 64, 128, 256);
    const int saved = g.outputs[1];   // the [B, T, N] view of the addmm output
    CompileOptions opt;
    run_named(g, trn2(), opt, {"fuse_matmul_epilogue"});
    EXPECT_EQ(count_live(g, Op::addmm), 0);
    EXPECT_EQ(count_live(g, Op::unary), 0);
    const auto& n = only_live(g, Op::fused_matmul);
    ASSERT_EQ(n.body.size(), 2u);
    EXPECT_EQ(n.body[1].op, Op::unary);
    ASSERT_EQ(n.outputs.size(), 2u);
    EXPECT_EQ(n.outputs[1], saved);   // written by the fused node in its own shape
    EXPECT_EQ(n.body_outputs, (std::vector<int>{1, 0}));
    EXPECT_EQ(g.values[saved].sizes, (std::vector<int64_t>{2, 64, 256}));
    // gelu's [B*T, N] reshape stays a view of the fused result.
    EXPECT_EQ(count_live(g, Op::view), 2);   // w^T and the reshape of the result
    EXPECT_NO_THROW(g.verify());
}

TEST(CompilerPasses, FuseMatmulEpilogueStopsBeforeAReaderOfAnIntermediate) {
    Graph g;
    const int p = matmul_32x64x16(g);
    const int r = g.unary(ops::Unary::relu, p);
    const int s = g.reduce(ops::Reduce::sum, p, {-1}, true);   // reads p after relu, before exp
    const int e = g.unary(ops::Unary::exp, r);
    g.set_outputs({e, s});
    CompileOptions opt;
    run_named(g, trn2(), opt, {"fuse_matmul_epilogue"});
    // The fused node takes relu's place: exp would put it after the reduce that reads p.
    const auto& n = only_live(g, Op::fused_matmul);
    EXPECT_EQ(n.body.size(), 2u);
    EXPECT_EQ(n.outputs, (std::vector<int>{r, p}));
    EXPECT_EQ(count_live(g, Op::unary), 1);
    EXPECT_NO_THROW(g.verify());
}

TEST(CompilerPasses, FuseMatmulEpilogueTakesActivationBackward) {
    Graph g = matmul_activation_backward(DType::bf16, 2, 64, 96, 256, ops::ActivationGrad::gelu);
    const int x = g.inputs[2];
    CompileOptions opt;
    auto ctx = run_named(g, trn2(), opt, {"fuse_matmul_epilogue"});
    EXPECT_EQ(ctx.stats["fused_matmul_epilogue"], 1);
    EXPECT_EQ(count_live(g, Op::activation_backward), 0);
    const auto& n = only_live(g, Op::fused_matmul);
    ASSERT_EQ(n.body.size(), 2u);
    EXPECT_EQ(n.body[1].op, Op::activation_backward);
    EXPECT_EQ(n.body[1].i0, static_cast<int64_t>(ops::ActivationGrad::gelu));
    EXPECT_EQ(n.body[1].args, (std::vector<int>{-1, 2}));   // grad = the product, x = input 2
    ASSERT_EQ(n.inputs.size(), 3u);
    EXPECT_EQ(n.inputs[2], x);
    EXPECT_EQ(n.dims, (std::vector<int64_t>{256, 1}));   // x read as the [M, N] matrix
    EXPECT_EQ(n.outputs, g.outputs);
}

TEST(CompilerPasses, FuseMatmulColumnSumsMovesTheBiasGradientIntoTheDxMatmul) {
    Graph g = linear_backward(DType::bf16, 256, 256, 1024, false, false);
    const int dx = g.outputs[0], db = g.outputs[2];
    const int sums = g.nodes[g.values[db].producer].inputs[0];   // the reduce's [1, out]
    const int dy = g.nodes[g.values[sums].producer].inputs[0];
    CompileOptions opt;
    auto ctx = run_named(g, trn2(), opt, {"fuse_matmul_epilogue", "fuse_matmul_column_sums"});
    EXPECT_EQ(ctx.stats["fused_matmul_column_sums"], 1);
    EXPECT_EQ(count_live(g, Op::reduce), 0);
    EXPECT_EQ(count_live(g, Op::matmul), 1);   // dw = dy^T @ x reads dy in another layout
    const auto& n = only_live(g, Op::fused_matmul);
    EXPECT_EQ(n.i0, 1);
    EXPECT_EQ(n.inputs, (std::vector<int>{dy, g.inputs[1]}));
    EXPECT_EQ(n.outputs, (std::vector<int>{dx, sums}));
    ASSERT_EQ(n.body.size(), 1u);
    EXPECT_EQ(n.body[0].op, Op::matmul);
    EXPECT_EQ(n.body_outputs, (std::vector<int>{0}));
    EXPECT_EQ(g.values[sums].producer, g.values[dx].producer);
    EXPECT_NO_THROW(g.verify());
}

TEST(CompilerPasses, FuseMatmulColumnSumsMovesViewsOfAnEarlierReduceAfterTheMatmul) {
    // db = dy.sum(0) comes first and its [out] view sits before the fused dx matmul (with a gelu
    // backward in its epilogue).
    Graph g = linear_backward(DType::bf16, 256, 1024, 256, true, true);
    const int db = g.outputs[2];
    CompileOptions opt;
    auto ctx = run_named(g, trn2(), opt, {"fuse_matmul_epilogue", "fuse_matmul_column_sums"});
    EXPECT_EQ(ctx.stats["fused_matmul_epilogue"], 1);
    EXPECT_EQ(ctx.stats["fused_matmul_column_sums"], 1);
    EXPECT_EQ(count_live(g, Op::reduce), 0);
    const auto& n = only_live(g, Op::fused_matmul);
    EXPECT_EQ(n.i0, 1);
    ASSERT_EQ(n.body.size(), 2u);
    EXPECT_EQ(n.body[1].op, Op::activation_backward);
    ASSERT_EQ(n.outputs.size(), 2u);
    EXPECT_EQ(n.outputs[0], g.outputs[0]);
    const int view = g.values[db].producer;
    EXPECT_EQ(g.nodes[view].inputs[0], n.outputs[1]);
    const std::vector<int> order = g.live_nodes();
    const auto pos = [&](int node) { return std::find(order.begin(), order.end(), node) - order.begin(); };
    EXPECT_GT(pos(view), pos(g.values[n.outputs[1]].producer));
    EXPECT_NO_THROW(g.verify());
}

TEST(CompilerPasses, FuseMatmulColumnSumsFusesEveryLayer) {
    // Three layers' input gradients in a chain, each layer's bias gradient computed first.
    Graph g;
    int grad = g.add_input(DType::bf16, {128, 256});
    std::vector<int> outs;
    for (int layer = 0; layer < 3; ++layer) {
        const int w = g.add_input(DType::bf16, {256, 256});
        outs.push_back(g.add_view(g.reduce(ops::Reduce::sum, grad, {0}, true), {256}, {}, 0));
        grad = g.matmul(grad, w);
    }
    outs.push_back(grad);
    g.set_outputs(outs);
    CompileOptions opt;
    auto ctx = run_named(g, trn2(), opt, {"fuse_matmul_column_sums"});
    EXPECT_EQ(ctx.stats["fused_matmul_column_sums"], 3);
    EXPECT_EQ(count_live(g, Op::reduce), 0);
    EXPECT_EQ(count_live(g, Op::fused_matmul), 3);
    for (int i : g.live_nodes())   // producers renumbered with the moved views
        for (int v : g.nodes[i].outputs) EXPECT_EQ(g.values[v].producer, i);
    EXPECT_NO_THROW(g.verify());
}

TEST(CompilerPasses, FuseMatmulColumnSumsTakesAViewInTheMatmulOperandsLayout) {
    Graph g;
    const int grad = g.add_input(DType::f32, {1, 64, 96});
    const int w = g.add_input(DType::f32, {96, 32});
    const int dx = g.matmul(g.add_view(grad, {64, 96}, {}, 0), w);
    const int db = g.reduce(ops::Reduce::sum, g.add_view(grad, {64, 96}, {}, 0), {0}, false);   // another view
    g.set_outputs({dx, db});
    CompileOptions opt;
    auto ctx = run_named(g, trn2(), opt, {"fuse_matmul_column_sums"});
    EXPECT_EQ(ctx.stats["fused_matmul_column_sums"], 1);
    EXPECT_EQ(only_live(g, Op::fused_matmul).outputs, (std::vector<int>{dx, db}));
}

TEST(CompilerPasses, FuseMatmulColumnSumsLeavesOtherReducesAlone) {
    enum Case { rows_summed, b_operand, mean, read_before_matmul, strided_a };
    for (Case c : {rows_summed, b_operand, mean, read_before_matmul, strided_a}) {
        Graph g;
        const int dy = g.add_input(DType::f32, {64, 96});
        const int w = g.add_input(DType::f32, {96, 32});
        int r = -1;
        if (c == read_before_matmul) {   // a reader of db that is not a view sits before the matmul
            r = g.unary(ops::Unary::neg, g.reduce(ops::Reduce::sum, dy, {0}, true));
        }
        const int a = c == strided_a ? g.add_view(dy, {32, 96}, {192, 1}, 0) : dy;   // every other row
        const int dx = g.matmul(a, w);
        if (c == rows_summed) r = g.reduce(ops::Reduce::sum, dy, {1}, false);
        if (c == b_operand) r = g.reduce(ops::Reduce::sum, w, {0}, false);
        if (c == mean) r = g.reduce(ops::Reduce::mean, dy, {0}, false);
        if (c == strided_a) r = g.reduce(ops::Reduce::sum, dy, {0}, false);
        g.set_outputs({dx, r});
        CompileOptions opt;
        auto ctx = run_named(g, trn2(), opt, {"fuse_matmul_column_sums"});
        EXPECT_EQ(ctx.stats["fused_matmul_column_sums"], 0) << "case " << c;
        EXPECT_EQ(count_live(g, Op::reduce), 1) << "case " << c;
        EXPECT_EQ(count_live(g, Op::matmul), 1) << "case " << c;
    }
}

TEST(CompilerPasses, FuseSoftmaxRecognisesTheDecomposedForm) {
    Graph g;
    const int x = g.add_input(DType::f32, {8, 40});
    g.set_outputs({decomposed_softmax(g, x)});
    CompileOptions opt;
    auto ctx = run_named(g, trn2(), opt, {"fuse_softmax"});
    EXPECT_EQ(ctx.stats["fused_softmax"], 1);
    ASSERT_EQ(g.live_nodes().size(), 1u);
    const auto& n = only_live(g, Op::softmax);
    EXPECT_EQ(n.inputs, std::vector<int>{x});
    EXPECT_EQ(n.i0, 1);
}

TEST(CompilerPasses, FuseSoftmaxKeepsPatternsWhoseIntermediatesAreUsed) {
    Graph g;
    const int x = g.add_input(DType::f32, {8, 40});
    const int y = decomposed_softmax(g, x);
    const int m = g.nodes[g.values[g.nodes[g.values[y].producer].inputs[0]].producer].inputs[0];   // exp's input
    g.set_outputs({y, m});
    CompileOptions opt;
    run_named(g, trn2(), opt, {"fuse_softmax"});
    EXPECT_EQ(count_live(g, Op::softmax), 0);
}

TEST(CompilerPasses, FuseNormMakesRmsNormWithWeightAndRstd) {
    Graph g = decomposed_rms_norm(DType::f32, 16, 64, true);
    const int rstd = g.outputs[1];
    CompileOptions opt;
    auto ctx = run_named(g, trn2(), opt, {"fuse_norm"});
    EXPECT_EQ(ctx.stats["fused_norm"], 1);
    ASSERT_EQ(g.live_nodes().size(), 1u);
    const auto& n = only_live(g, Op::rms_norm);
    EXPECT_EQ(n.inputs, (std::vector<int>{g.inputs[0], g.inputs[1]}));
    EXPECT_EQ(n.i1, 1);
    EXPECT_FLOAT_EQ(n.f0, 1e-6f);
    EXPECT_EQ(n.outputs, (std::vector<int>{g.outputs[0], rstd}));
}

TEST(CompilerPasses, FuseNormFoldsTheResidualAddIntoLayerNormBackward) {
    // The residual defined before the norm (the fused node takes the norm's place) or after it
    // (the add's place); grad_in added directly or through a reshaping view.
    for (const auto& [through_view, residual_after] : {std::pair{false, false}, {true, false}, {false, true}}) {
        Graph g = layer_norm_backward_add(DType::bf16, 64, 256, through_view, residual_after);
        const int out = g.outputs[0];
        CompileOptions opt;
        auto ctx = run_named(g, trn2(), opt, {"fuse_norm"});
        EXPECT_EQ(ctx.stats["fused_norm_backward_add"], 1);
        EXPECT_EQ(count_live(g, Op::binary), 0);
        EXPECT_EQ(count_live(g, Op::view), 0);
        const auto& n = only_live(g, Op::layer_norm_backward);
        ASSERT_EQ(n.inputs.size(), 6u);
        EXPECT_EQ(n.i1, 1 | 2 | 4 | 8 | 16);
        EXPECT_EQ(n.outputs[0], out);
        const int residual = g.values[n.inputs[5]].producer;
        ASSERT_GE(residual, 0);
        EXPECT_EQ(g.nodes[residual].op, Op::unary);
        EXPECT_LT(residual, g.values[out].producer);   // defined before the node reading it
    }
}

TEST(CompilerPasses, FuseNormKeepsAResidualAddItCannotFold) {
    {   // grad_in is read elsewhere too (here: a graph output)
        Graph g = layer_norm_backward_add(DType::bf16, 64, 256, false, false);
        const int gi = g.nodes[g.values[g.outputs[0]].producer].inputs[1];
        g.outputs.push_back(gi);
        CompileOptions opt;
        auto ctx = run_named(g, trn2(), opt, {"fuse_norm"});
        EXPECT_EQ(ctx.stats["fused_norm_backward_add"], 0);
        EXPECT_EQ(count_live(g, Op::binary), 1);
    }
    {   // residual - grad_in is not an add of the two
        Graph g = layer_norm_backward_add(DType::bf16, 64, 256, false, false);
        g.nodes[g.values[g.outputs[0]].producer].f0 = -1.0f;
        CompileOptions opt;
        auto ctx = run_named(g, trn2(), opt, {"fuse_norm"});
        EXPECT_EQ(ctx.stats["fused_norm_backward_add"], 0);
        EXPECT_EQ(only_live(g, Op::layer_norm_backward).inputs.size(), 5u);
    }
}

TEST(CompilerPasses, FuseAttentionFindsScaledSoftmaxBetweenTwoMatmuls) {
    Graph g = decomposed_attention(DType::bf16, 1, 2, 256, 64, 0.125f);
    CompileOptions opt;
    auto ctx = run_named(g, trn2(), opt, {"fuse_softmax", "fuse_attention"});
    EXPECT_EQ(ctx.stats["fused_attention"], 1);
    ASSERT_EQ(g.live_nodes().size(), 1u);
    const auto& n = only_live(g, Op::attention);
    EXPECT_EQ(n.inputs, (std::vector<int>{g.inputs[0], g.inputs[1], g.inputs[2]}));
    EXPECT_FLOAT_EQ(n.f0, 0.125f);
    ASSERT_EQ(n.outputs.size(), 2u);   // out and the logsumexp
    EXPECT_EQ(g.values[n.outputs[1]].sizes, (std::vector<int64_t>{1, 2, 256}));
}

TEST(CompilerPasses, FuseAttentionLooksThroughBmmReshapesAndMaterialisedTransposes) {
    // What ATen's bmm decomposition leaves: 3-D reshapes around the matmuls, k^T copied contiguous.
    Graph g;
    const int q = g.add_input(DType::f32, {2, 4, 32, 16});
    const int k = g.add_input(DType::f32, {2, 4, 32, 16});
    const int v = g.add_input(DType::f32, {2, 4, 32, 16});
    const int kt = g.cast(g.add_view(k, {2, 4, 16, 32}, {2048, 512, 1, 16}, 0), DType::f32);
    const int s = g.matmul(g.add_view(q, {8, 32, 16}, {}, 0), g.add_view(kt, {8, 16, 32}, {}, 0));
    const int p = g.softmax(g.binary_scalar(ops::Binary::mul, g.add_view(s, {2, 4, 32, 32}, {}, 0), 0.25f), -1);
    g.set_outputs({g.matmul(g.add_view(p, {8, 32, 32}, {}, 0), g.add_view(v, {8, 32, 16}, {}, 0))});
    CompileOptions opt;
    auto ctx = run_named(g, trn2(), opt, {"canonicalize", "fuse_attention"});
    EXPECT_EQ(ctx.stats["fused_attention"], 1);
    EXPECT_EQ(count_live(g, Op::copy), 0);
    const auto& n = only_live(g, Op::attention);
    const compiler::Value& kv = g.values[n.inputs[1]];
    EXPECT_EQ(kv.storage, g.values[k].storage);
    EXPECT_EQ(kv.sizes, (std::vector<int64_t>{8, 32, 16}));
    EXPECT_EQ(kv.strides, (std::vector<int64_t>{512, 16, 1}));
    EXPECT_FLOAT_EQ(n.f0, 0.25f);
}

TEST(CompilerPasses, FuseAttentionNeedsKTransposed) {
    Graph g;
    const int q = g.add_input(DType::bf16, {2, 128, 64});
    const int kt = g.add_input(DType::bf16, {2, 64, 128});   // a tensor, not a view of k
    const int v = g.add_input(DType::bf16, {2, 128, 64});
    const int p = g.softmax(g.matmul(q, kt), -1);
    g.set_outputs({g.matmul(p, v)});
    CompileOptions opt;
    run_named(g, trn2(), opt, {"fuse_attention"});
    EXPECT_EQ(count_live(g, Op::attention), 0);
}

TEST(CompilerPasses, ScheduleGroupsCompiledNodesBetweenEagerOnes) {
    // a -> eager1 ; b (independent of eager1) ; eager1 -> c. b is moved before eager1.
    Graph g;
    const int x = g.add_input(DType::f32, {4, 4});
    const int a = g.unary(ops::Unary::exp, x);
    compiler::Node e;
    e.op = Op::eager;
    e.inputs = {a};
    e.eager_id = 7;
    e.label = "aten.cumsum";
    const int ev = g.nodes[g.add_node(e, {{DType::f32, {4, 4}}})].outputs[0];
    const int b = g.unary(ops::Unary::tanh, x);
    const int c = g.binary(ops::Binary::add, ev, b);
    g.set_outputs({c});
    CompileOptions opt;
    opt.disabled_passes = {"fuse_elementwise"};
    compiler::CompiledGraph cg = compiler::compile(g, trn2(), opt);
    ASSERT_EQ(cg.segments.size(), 3u);   // [exp, tanh] eager [add]
    EXPECT_FALSE(cg.segments[0].eager);
    EXPECT_TRUE(cg.segments[1].eager);
    EXPECT_FALSE(cg.segments[2].eager);
    EXPECT_EQ(cg.stats["programs"], 2);
    EXPECT_EQ(cg.stats["eager_nodes"], 1);
    EXPECT_EQ(cg.eager_labels, std::vector<std::string>{"aten.cumsum"});
    // The eager node's input lives where the host can read it, its output in its own slot.
    ASSERT_EQ(cg.eager_inputs.size(), 1u);
    EXPECT_GE(cg.eager_inputs[0][0].slot, 0);
    bool has_eager_slot = false;
    for (const auto& s : cg.memory.slots) has_eager_slot = has_eager_slot || s.kind == compiler::SlotKind::eager;
    EXPECT_TRUE(has_eager_slot);
}

TEST(CompilerPasses, PlanMemoryReusesWorkspaceOfDeadIntermediates) {
    Graph g;
    const int x = g.add_input(DType::f32, {64, 64});
    int v = x;
    for (int i = 0; i < 6; ++i) v = g.unary(i % 2 ? ops::Unary::exp : ops::Unary::tanh, v);
    g.set_outputs({v});
    CompileOptions opt;
    opt.fuse = false;
    compiler::CompiledGraph cg = compiler::compile(g, trn2(), opt);
    // Five intermediates of 16 KiB, at most two live at once.
    EXPECT_EQ(cg.memory.workspace_bytes, 2 * 64 * 64 * 4);
    EXPECT_EQ(cg.stats["programs"], 1);
    EXPECT_EQ(cg.segments.size(), 1u);
}

TEST(CompilerPasses, DumpDirHoldsIrAfterEachPassAndTheProgram) {
    const auto dir = std::filesystem::temp_directory_path() / "trnsim_compiler_dump_test";
    std::filesystem::remove_all(dir);
    Graph g = elementwise_chain(DType::f32, 8, 8, false);
    g.name = "chain";
    CompileOptions opt;
    opt.dump_dir = dir.string();
    compiler::compile(g, trn2(), opt);
    for (const char* f : {"00_input.ir", "01_canonicalize.ir", "07_fuse_elementwise.ir", "08_schedule.ir", "program.txt"})
        EXPECT_TRUE(std::filesystem::exists(dir / "chain" / f)) << f;
    std::ifstream ir(dir / "chain" / "07_fuse_elementwise.ir");
    std::string text((std::istreambuf_iterator<char>(ir)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find("fused_elementwise"), std::string::npos);
    std::ifstream prog(dir / "chain" / "program.txt");
    std::string ptext((std::istreambuf_iterator<char>(prog)), std::istreambuf_iterator<char>());
    EXPECT_NE(ptext.find("dma_copy"), std::string::npos);
    std::filesystem::remove_all(dir);
}

TEST(CompilerPasses, VerifyRejectsUseBeforeDefinition) {
    Graph g;
    const int x = g.add_input(DType::f32, {4});
    const int y = g.unary(ops::Unary::exp, x);
    g.nodes[0].inputs = {y};
    EXPECT_THROW(g.verify(), compiler::CompileError);
}

}  // namespace
}  // namespace trnsim::compiler_test
