// Pointwise operators of the eager library run as simulator kernels and match
// plain C++ references: unary, binary with broadcasting, scalar ops, where,
// fill, strided/casting copy, clamp and activation backward, for f32 and bf16,
// contiguous, strided and broadcast views, odd and empty shapes.
#include "ops_test_util.h"

#include <cmath>
#include <cstdio>
#include <functional>

using namespace trnsim;
using namespace trnsim::ops_test;
using ops::ActivationGrad;
using ops::Binary;
using ops::Unary;

namespace {

double unary_ref(Unary op, double x) {
    switch (op) {
        case Unary::identity: return x;
        case Unary::neg: return -x;
        case Unary::abs: return std::abs(x);
        case Unary::exp: return std::exp(x);
        case Unary::log: return std::log(x);
        case Unary::sqrt: return std::sqrt(x);
        case Unary::rsqrt: return 1.0 / std::sqrt(x);
        case Unary::reciprocal: return 1.0 / x;
        case Unary::sigmoid: return 1.0 / (1.0 + std::exp(-x));
        case Unary::tanh: return std::tanh(x);
        case Unary::relu: return x > 0 ? x : 0;
        case Unary::gelu: return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
        case Unary::gelu_tanh: return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
        case Unary::silu: return x / (1.0 + std::exp(-x));
        case Unary::sin: return std::sin(x);
        case Unary::cos: return std::cos(x);
        case Unary::erf: return std::erf(x);
        case Unary::square: return x * x;
        case Unary::sign: return x > 0 ? 1 : (x < 0 ? -1 : 0);
        case Unary::softplus: return std::log1p(std::exp(x));
        case Unary::logical_not: return x == 0 ? 1 : 0;
    }
    return 0;
}

constexpr Unary kUnaryOps[] = {Unary::identity, Unary::neg,     Unary::abs,       Unary::exp,  Unary::log,
                               Unary::sqrt,     Unary::rsqrt,   Unary::reciprocal, Unary::sigmoid, Unary::tanh,
                               Unary::relu,     Unary::gelu,    Unary::gelu_tanh, Unary::silu, Unary::sin,
                               Unary::cos,      Unary::erf,     Unary::square,    Unary::sign, Unary::softplus,
                               Unary::logical_not};

bool positive_domain(Unary op) {
    return op == Unary::log || op == Unary::sqrt || op == Unary::rsqrt || op == Unary::reciprocal;
}

double binary_ref(Binary op, double a, double b) {
    switch (op) {
        case Binary::add: return a + b;
        case Binary::sub: return a - b;
        case Binary::mul: return a * b;
        case Binary::div: return a / b;
        case Binary::maximum: return std::max(a, b);
        case Binary::minimum: return std::min(a, b);
        case Binary::pow: return std::pow(a, b);
        case Binary::fmod: return std::fmod(a, b);
        case Binary::eq: return a == b;
        case Binary::ne: return a != b;
        case Binary::lt: return a < b;
        case Binary::le: return a <= b;
        case Binary::gt: return a > b;
        case Binary::ge: return a >= b;
        case Binary::logical_and: return (a != 0) && (b != 0);
        case Binary::logical_or: return (a != 0) || (b != 0);
        case Binary::logical_xor: return (a != 0) != (b != 0);
        case Binary::bitwise_and: return static_cast<int>(a) & static_cast<int>(b);
        case Binary::bitwise_or: return static_cast<int>(a) | static_cast<int>(b);
        case Binary::bitwise_xor: return static_cast<int>(a) ^ static_cast<int>(b);
    }
    return 0;
}

class OpsPointwise : public ::testing::Test, public OpsHarness {};

}  // namespace

TEST_F(OpsPointwise, UnaryEveryOpF32AndBf16) {
    for (DType dt : {DType::f32, DType::bf16}) {
        for (Unary op : kUnaryOps) {
            const TensorDesc in = view(2, dt, {3, 5, 7}), out = view(1, dt, {3, 5, 7});
            std::vector<float> x = positive_domain(op) ? put_random(in, 0.1f, 3.0f) : put_random(in);
            if (op == Unary::logical_not) x = put(in, [&] { auto v = x; for (size_t i = 0; i < v.size(); i += 3) v[i] = 0; return v; }());
            KernelBuilder kb = builder("unary");
            ops::unary(kb, op, out, in);
            run(kb);
            std::vector<double> ref;
            for (float v : x) ref.push_back(round_to(static_cast<float>(unary_ref(op, v)), dt));
            expect_close(get(out), ref, dt, ("unary op " + std::to_string(int(op))).c_str(), 1e-5, 2e-5);
        }
    }
}

TEST_F(OpsPointwise, UnaryOddShapesEmptyAndScalar) {
    for (std::vector<int64_t> shape : std::vector<std::vector<int64_t>>{{1}, {130, 257}, {}, {128 * 700 + 3}, {2, 1, 129}}) {
        const TensorDesc in = view(3, DType::f32, shape), out = view(1, DType::f32, shape);
        std::vector<float> x = put_random(in);
        KernelBuilder kb = builder("exp");
        ops::unary(kb, Unary::exp, out, in);
        run(kb);
        std::vector<double> ref;
        for (float v : x) ref.push_back(std::exp(double(v)));
        expect_close(get(out), ref, DType::f32, "exp", 1e-5, 2e-6);
    }
    KernelBuilder kb = builder("empty");
    ops::unary(kb, Unary::exp, view(1, DType::f32, {0, 5}), view(2, DType::f32, {0, 5}));
    EXPECT_EQ(kb.size(), 0u);
}

TEST_F(OpsPointwise, LargeContiguousUsesFewBigTiles) {
    const int64_t n = 3 * 128 * 2048 + 77;
    const TensorDesc a = view(2, DType::bf16, {n}), b = view(3, DType::bf16, {n}), out = view(1, DType::bf16, {n});
    std::vector<float> x = put_random(a), y = put_random(b);
    KernelBuilder kb = builder("add");
    ops::binary(kb, Binary::add, out, a, b);
    const size_t instrs = run(kb);
    EXPECT_LT(instrs, 40u);
    std::vector<double> ref(n);
    for (int64_t i = 0; i < n; ++i) ref[i] = round_to(x[i] + y[i], DType::bf16);
    expect_close(get(out), ref, DType::bf16, "add");
}

TEST_F(OpsPointwise, BinaryEveryOpWithBroadcasting) {
    const Binary ops_list[] = {Binary::add, Binary::sub, Binary::mul, Binary::div, Binary::maximum, Binary::minimum,
                               Binary::pow, Binary::fmod, Binary::eq, Binary::ne, Binary::lt, Binary::le, Binary::gt,
                               Binary::ge, Binary::logical_and, Binary::logical_or, Binary::logical_xor};
    for (DType dt : {DType::f32, DType::bf16}) {
        for (Binary op : ops_list) {
            const TensorDesc a = view(2, dt, {4, 1, 7}), b = view(3, dt, {3, 1}), out = view(1, dt, {4, 3, 7});
            std::vector<float> x = put_random(a, op == Binary::pow ? 0.2f : -2.0f, 2.0f);
            std::vector<float> y = put_random(b, op == Binary::pow ? -1.5f : -2.0f, 2.0f);
            if (op == Binary::eq || op == Binary::logical_and) y = put(b, {x[0], 0.0f, x[3]});
            KernelBuilder kb = builder("binary");
            ops::binary(kb, op, out, a, b);
            run(kb);
            const std::vector<float> la = logical(a, x, out.sizes), lb = logical(b, y, out.sizes);
            std::vector<double> ref;
            for (size_t i = 0; i < la.size(); ++i) ref.push_back(round_to(float(binary_ref(op, la[i], lb[i])), dt));
            expect_close(get(out), ref, dt, ("binary op " + std::to_string(int(op))).c_str(), 1e-5, 1e-5);
        }
    }
}

TEST_F(OpsPointwise, BinaryAlphaTransposedInputAndBitwise) {
    // out[130, 257] = a^T (a stored [257, 130]) - 0.5 * b
    const TensorDesc a = view(2, DType::f32, {130, 257}, {1, 130}, 5), b = view(4, DType::f32, {130, 257});
    const TensorDesc out = view(1, DType::f32, {130, 257});
    std::vector<float> x = put_random(a), y = put_random(b);
    KernelBuilder kb = builder("sub");
    ops::binary(kb, Binary::sub, out, a, b, 0.5f);
    run(kb);
    const std::vector<float> la = logical(a, x), lb = logical(b, y);
    std::vector<double> ref;
    for (size_t i = 0; i < la.size(); ++i) ref.push_back(la[i] - 0.5f * lb[i]);
    expect_close(get(out), ref, DType::f32, "sub alpha");

    const TensorDesc ia = view(2, DType::i32, {9, 11}), ib = view(3, DType::i32, {11}), io = view(1, DType::i32, {9, 11});
    std::vector<float> u(span(ia)), v(span(ib));
    for (size_t i = 0; i < u.size(); ++i) u[i] = float((i * 37) % 1000);
    for (size_t i = 0; i < v.size(); ++i) v[i] = float((i * 91) % 255);
    put(ia, u);
    put(ib, v);
    for (Binary op : {Binary::bitwise_and, Binary::bitwise_or, Binary::bitwise_xor}) {
        KernelBuilder k2 = builder("bitwise");
        ops::binary(k2, op, io, ia, ib);
        run(k2);
        const std::vector<float> lu = logical(ia, u, io.sizes), lv = logical(ib, v, io.sizes);
        std::vector<double> ref2;
        for (size_t i = 0; i < lu.size(); ++i) ref2.push_back(binary_ref(op, lu[i], lv[i]));
        expect_close(get(io), ref2, DType::f32, "bitwise", 0, 0);
    }
    KernelBuilder bad = builder("bad");
    EXPECT_THROW(ops::binary(bad, Binary::bitwise_and, out, a, b), ops::OpError);
    EXPECT_THROW(ops::binary(bad, Binary::add, out, a, view(3, DType::f32, {4})), ops::OpError);
}

TEST_F(OpsPointwise, BinaryScalarForwardAndReverse) {
    for (DType dt : {DType::f32, DType::bf16}) {
        const TensorDesc a = view(2, dt, {5, 33}), out = view(1, dt, {5, 33});
        std::vector<float> x = put_random(a, 0.5f, 2.0f);
        for (bool reverse : {false, true}) {
            for (Binary op : {Binary::sub, Binary::div, Binary::pow, Binary::lt}) {
                KernelBuilder kb = builder("scalar");
                ops::binary_scalar(kb, op, out, a, 1.5f, reverse);
                run(kb);
                std::vector<double> ref;
                for (float v : x)
                    ref.push_back(round_to(float(reverse ? binary_ref(op, 1.5, v) : binary_ref(op, v, 1.5)), dt));
                expect_close(get(out), ref, dt, "binary_scalar");
            }
        }
    }
}

TEST_F(OpsPointwise, WhereWithBroadcastCondition) {
    const TensorDesc cond = view(2, DType::boolean, {1, 6}), a = view(3, DType::f32, {4, 6});
    const TensorDesc b = view(4, DType::f32, {}), out = view(1, DType::f32, {4, 6});
    std::vector<float> c = put(cond, {1, 0, 0, 1, 1, 0});
    std::vector<float> x = put_random(a), y = put(b, {42.0f});
    KernelBuilder kb = builder("where");
    ops::where(kb, out, cond, a, b);
    run(kb);
    const std::vector<float> lc = logical(cond, c, out.sizes), la = logical(a, x);
    std::vector<double> ref;
    for (size_t i = 0; i < la.size(); ++i) ref.push_back(lc[i] != 0 ? la[i] : 42.0);
    expect_close(get(out), ref, DType::f32, "where", 0, 0);
}

TEST_F(OpsPointwise, FillStridedOutputLeavesGapsAlone) {
    // Every other column of a [9, 300] buffer.
    const TensorDesc out = view(1, DType::bf16, {9, 150}, {300, 2}, 1);
    const TensorDesc whole = view(1, DType::bf16, {9 * 300 + 1});
    poison(whole);
    KernelBuilder kb = builder("fill");
    ops::fill(kb, out, 3.25f);
    run(kb);
    const std::vector<float> st = storage(whole);
    for (int64_t i = 0; i < 9 * 300 + 1; ++i) {
        const bool written = i >= 1 && (i - 1) % 2 == 0;
        ASSERT_EQ(st[i], written ? 3.25f : -776.0f) << i;   // -777 rounds to -776 in bf16
    }
}

TEST_F(OpsPointwise, CopyStridedCastingAndExpanded) {
    struct Case {
        TensorDesc out, in;
    };
    const std::vector<Case> cases = {
        // transpose to contiguous with f32 -> bf16
        {view(1, DType::bf16, {130, 257}), view(2, DType::f32, {130, 257}, {1, 130})},
        // bf16 -> f32 of a sliced view with an offset
        {view(1, DType::f32, {3, 5, 7}), view(2, DType::bf16, {3, 5, 7}, {100, 12, 1}, 9)},
        // expanded (broadcast) input
        {view(1, DType::f32, {6, 40}), view(2, DType::f32, {1, 40})},
        // a 6-d permuted view that no 5-dim access pattern covers (host loops)
        {view(1, DType::f32, {2, 3, 2, 3, 2, 5}), view(2, DType::f32, {2, 3, 2, 3, 2, 5}, {1, 2 * 2 * 3 * 3 * 5, 2, 45 * 4, 6, 18})},
        // contiguous into a strided output, f32 -> i32 truncation
        {view(1, DType::i32, {4, 9}, {20, 2}, 3), view(2, DType::f32, {4, 9})},
        // single element, and a 0-d tensor
        {view(1, DType::f32, {1}), view(2, DType::bf16, {1})},
        {view(1, DType::f32, {}), view(2, DType::f32, {})},
    };
    for (const Case& c : cases) {
        std::vector<float> x = put_random(c.in, -50.0f, 50.0f);
        KernelBuilder kb = builder("copy");
        ops::copy(kb, c.out, c.in);
        run(kb);
        const std::vector<float> lx = logical(c.in, x, c.out.sizes);
        std::vector<double> ref;
        for (float v : lx) ref.push_back(c.out.dtype == DType::i32 ? std::trunc(v) : round_to(v, c.out.dtype));
        expect_close(get(c.out), ref, DType::f32, ("copy " + c.in.str() + " -> " + c.out.str()).c_str(), 0, 0);
    }
}

// Copies that transpose the innermost dims run through TensorE transposes of [128, 128] pieces.
TEST_F(OpsPointwise, TransposedCopiesExactForEveryLayout) {
    struct Case {
        TensorDesc out, in;
    };
    const std::vector<Case> cases = {
        // partial blocks in both dims (600 = 512 + 88, 700 = 512 + 188)
        {view(1, DType::f32, {600, 700}), view(2, DType::f32, {600, 700}, {1, 600})},
        // a batch of transposed planes, bf16 -> f32
        {view(1, DType::f32, {3, 130, 200}), view(2, DType::bf16, {3, 130, 200}, {130 * 200, 1, 130})},
        // into a transposed output view, f32 -> bf16
        {view(1, DType::bf16, {256, 300}, {1, 256}), view(2, DType::f32, {256, 300})},
        // a padded, offset input (row stride 300 for 280 columns), f16
        {view(1, DType::f16, {280, 256}), view(2, DType::f16, {280, 256}, {1, 300}, 5)},
        // the key transpose of attention: [B, H, S, D] -> [B, H, D, S]
        {view(1, DType::bf16, {2, 3, 64, 160}), view(2, DType::bf16, {2, 3, 64, 160}, {3 * 160 * 64, 160 * 64, 1, 64})},
        // fewer than 128 rows in the transposed block (only a tail part)
        {view(1, DType::f32, {64, 100}), view(2, DType::f32, {64, 100}, {1, 64})},
        // a head-split projection transposed for q @ k^T: [B, H, D, S] read from [B, S, H*D]
        {view(1, DType::f32, {4, 4, 32, 64}), view(2, DType::f32, {4, 4, 32, 64}, {24576, 32, 1, 384})},
    };
    for (const Case& c : cases) {
        std::vector<float> x = put_random(c.in, -50.0f, 50.0f);
        poison(c.out);
        KernelBuilder kb = builder("copy");
        ops::copy(kb, c.out, c.in);
        const size_t n = run(kb);
        EXPECT_GT(n, 3u) << "expected the blocked transpose path for " << c.in.str();
        const std::vector<float> lx = logical(c.in, x, c.out.sizes);
        std::vector<double> ref;
        for (float v : lx) ref.push_back(round_to(v, c.out.dtype));
        expect_close(get(c.out), ref, DType::f32, ("copy " + c.in.str() + " -> " + c.out.str()).c_str(), 0, 0);
    }
}

TEST_F(OpsPointwise, TransposedCopyNearCopyBandwidth) {
    auto time_of = [&](const TensorDesc& in) {
        KernelBuilder kb(chip, "copy", 1ull << 30);
        ops::copy(kb, TensorDesc::contiguous(1, DType::bf16, {2048, 2048}), in);
        Program prog = kb.finish();
        NeuronCore timing(chip, ExecMode::TimingOnly, 1ull << 30);
        const uint64_t args[2] = {64ull << 20, 128ull << 20};
        return timing.run(prog, nullptr, args, 2).duration_ps();
    };
    const int64_t plain = time_of(view(2, DType::bf16, {2048, 2048}));
    const int64_t transposed = time_of(view(2, DType::bf16, {2048, 2048}, {1, 2048}));
    EXPECT_LT(transposed, 2 * plain);
}

TEST_F(OpsPointwise, CopyLargeContiguousSpreadsOverDmaQueues) {
    const int64_t n = 1 << 20;
    const TensorDesc in = view(2, DType::f32, {n}), out = view(1, DType::bf16, {n});
    std::vector<float> x = put_random(in);
    KernelBuilder kb = builder("copy");
    ops::copy(kb, out, in);
    Program prog = kb.finish();
    EXPECT_GE(prog.instrs.size(), 8u);
    EXPECT_LE(prog.instrs.size(), 40u);
    uint64_t args[2] = {base(1), base(2)};
    core.run(prog, nullptr, args, 2);
    const std::vector<float> got = get(out);
    for (int64_t i = 0; i < n; i += 997) ASSERT_EQ(got[i], round_to(x[i], DType::bf16)) << i;
}

TEST_F(OpsPointwise, ClampBothAndOneSided) {
    const TensorDesc in = view(2, DType::f32, {7, 19}), out = view(1, DType::f32, {7, 19});
    std::vector<float> x = put_random(in, -3.0f, 3.0f);
    x[5] = NAN;
    put(in, x);
    struct Bounds {
        std::optional<float> lo, hi;
    };
    for (Bounds b : {Bounds{-1.0f, 1.5f}, Bounds{0.5f, std::nullopt}, Bounds{std::nullopt, -0.25f}}) {
        KernelBuilder kb = builder("clamp");
        ops::clamp(kb, out, in, b.lo, b.hi);
        run(kb);
        std::vector<double> ref;
        for (float v : x) {
            double r = v;
            if (!std::isnan(r)) {
                if (b.lo) r = std::max<double>(r, *b.lo);
                if (b.hi) r = std::min<double>(r, *b.hi);
            }
            ref.push_back(r);
        }
        expect_close(get(out), ref, DType::f32, "clamp", 0, 0);
    }
}

TEST_F(OpsPointwise, ActivationBackwardMatchesDerivatives) {
    auto deriv = [](ActivationGrad op, double x) {
        const double s = 1 / (1 + std::exp(-x));
        switch (op) {
            case ActivationGrad::gelu:
                return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
            case ActivationGrad::gelu_tanh: {
                const double b = std::sqrt(2 / M_PI), k = 0.044715, t = std::tanh(b * (x + k * x * x * x));
                return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * b * (1 + 3 * k * x * x);
            }
            case ActivationGrad::silu: return s * (1 + x * (1 - s));
            case ActivationGrad::sigmoid: return x * (1 - x);   // x is the forward output here
            case ActivationGrad::tanh: return 1 - x * x;
            case ActivationGrad::threshold: return x > 0.25 ? 1.0 : 0.0;
        }
        return 0.0;
    };
    for (DType dt : {DType::f32, DType::bf16}) {
        for (ActivationGrad op : {ActivationGrad::gelu, ActivationGrad::gelu_tanh, ActivationGrad::silu,
                                  ActivationGrad::sigmoid, ActivationGrad::tanh, ActivationGrad::threshold}) {
            // x is a transposed view, grad_out broadcasts along dim 0.
            const TensorDesc g = view(2, dt, {1, 37}), x = view(3, dt, {11, 37}, {1, 11});
            const TensorDesc gi = view(1, dt, {11, 37});
            std::vector<float> gv = put_random(g), xv = put_random(x, -3.0f, 3.0f);
            if (op == ActivationGrad::sigmoid) xv = put_random(x, 0.0f, 1.0f);
            if (op == ActivationGrad::tanh) xv = put_random(x, -1.0f, 1.0f);
            KernelBuilder kb = builder("act_bwd");
            ops::activation_backward(kb, op, gi, g, x, 0.25f);
            run(kb);
            const std::vector<float> lg = logical(g, gv, gi.sizes), lx = logical(x, xv);
            std::vector<double> ref;
            for (size_t i = 0; i < lx.size(); ++i) ref.push_back(lg[i] * deriv(op, lx[i]));
            expect_close(get(gi), ref, dt, ("activation_backward " + std::to_string(int(op))).c_str(), 2e-6, 2e-5);
        }
    }
}

// Operands constant along the innermost dim: a 0-d tensor on either side (a per-partition scalar
// operand, with and without alpha), [N,1] against [C] and the reverse, a [C] row and an [N,1]
// column against [N,C], and a general broadcast; shapes that need several and remainder tiles.
TEST_F(OpsPointwise, BinaryInnerBroadcastsMatchReference) {
    const Binary ops_list[] = {Binary::add, Binary::sub, Binary::div, Binary::pow, Binary::maximum, Binary::lt,
                               Binary::eq, Binary::logical_and};
    struct Shapes {
        std::vector<int64_t> a, b, out;
    };
    const std::vector<int64_t> big = {150, 300};
    const Shapes shapes[] = {{big, {}, big},          {{}, big, big},         {{150, 1}, {300}, big},
                             {{300}, {150, 1}, big},  {big, {300}, big},      {{150, 1}, big, big},
                             {{7, 1, 5}, {1, 13, 1}, {7, 13, 5}}};
    {   // a 0-d bf16 operand is a per-partition f32 scalar: one input stream, no tensor_tensor
        KernelBuilder kb = builder("mul");
        ops::binary(kb, Binary::mul, view(1, DType::bf16, big), view(2, DType::bf16, {}), view(3, DType::bf16, big));
        const Program prog = kb.finish();
        int scalar_ops = 0;
        for (const Instruction& ins : prog.instrs) {
            EXPECT_NE(ins.op, Opcode::tensor_tensor);
            scalar_ops += ins.op == Opcode::tensor_scalar && (ins.flags & F_S0_AP) && (ins.flags & F_REVERSE0);
        }
        EXPECT_GT(scalar_ops, 0);
    }
    for (DType dt : {DType::f32, DType::bf16}) {
        for (const Shapes& sh : shapes) {
            for (Binary op : ops_list) {
                for (float alpha : {1.0f, -0.75f}) {
                    if (alpha != 1.0f && op != Binary::add && op != Binary::sub) continue;
                    const TensorDesc a = view(2, dt, sh.a), b = view(3, dt, sh.b), out = view(1, dt, sh.out);
                    std::vector<float> x = put_random(a, op == Binary::pow ? 0.2f : -2.0f, 2.0f);
                    std::vector<float> y = put_random(b, op == Binary::pow ? -1.5f : -2.0f, 2.0f);
                    if (op == Binary::eq || op == Binary::logical_and) {   // small integers: ties and zeros
                        for (float& v : x) v = std::round(v);
                        for (float& v : y) v = std::round(v);
                        x = put(a, x), y = put(b, y);
                    }
                    poison(out);
                    KernelBuilder kb = builder("binary");
                    ops::binary(kb, op, out, a, b, alpha);
                    run(kb);
                    const std::vector<float> la = logical(a, x, out.sizes), lb = logical(b, y, out.sizes);
                    std::vector<double> ref;
                    for (size_t i = 0; i < la.size(); ++i) {
                        const double bv = alpha != 1.0f ? float(alpha * lb[i]) : lb[i];
                        ref.push_back(round_to(float(binary_ref(op, la[i], bv)), dt));
                    }
                    expect_close(get(out), ref, dt,
                                 ("binary op " + std::to_string(int(op)) + " " + a.str() + " " + b.str()).c_str(),
                                 1e-5, 1e-5);
                }
            }
        }
    }
}

// Integer operands: a 0-d i32 scalar in bitwise ops (an integer per-partition scalar), and
// [N,1] == [C] label comparisons (one-hot masks) with a boolean output.
TEST_F(OpsPointwise, IntegerInnerBroadcasts) {
    const TensorDesc ia = view(2, DType::i32, {200, 300}), is = view(3, DType::i32, {});
    const TensorDesc io = view(1, DType::i32, {200, 300});
    std::vector<float> u(span(ia));
    for (size_t i = 0; i < u.size(); ++i) u[i] = float((i * 37) % 1000);
    put(ia, u);
    put(is, {181.0f});
    for (Binary op : {Binary::bitwise_and, Binary::bitwise_or, Binary::bitwise_xor}) {
        for (bool scalar_first : {false, true}) {
            KernelBuilder kb = builder("bitwise");
            if (scalar_first) ops::binary(kb, op, io, is, ia);
            else ops::binary(kb, op, io, ia, is);
            run(kb);
            std::vector<double> ref;
            for (float v : u) ref.push_back(binary_ref(op, v, 181.0));
            expect_close(get(io), ref, DType::f32, "bitwise with a 0-d operand", 0, 0);
        }
    }
    const TensorDesc labels = view(2, DType::i32, {333, 1}), classes = view(3, DType::i32, {517});
    const TensorDesc mask = view(1, DType::boolean, {333, 517});
    std::vector<float> lv(333), cv(517);
    for (size_t i = 0; i < lv.size(); ++i) lv[i] = float((i * 101) % 517);
    for (size_t i = 0; i < cv.size(); ++i) cv[i] = float(i);
    put(labels, lv);
    put(classes, cv);
    KernelBuilder kb = builder("eq");
    ops::binary(kb, Binary::eq, mask, labels, classes);
    run(kb);
    std::vector<double> ref;
    for (float l : lv)
        for (float c : cv) ref.push_back(l == c);
    expect_close(get(mask), ref, DType::f32, "labels == classes", 0, 0);
}

// A [C] row over many row tiles is loaded once and stays resident; where and unary read
// broadcast views (a masked fill with a 0-d value, exp of an expanded row).
TEST_F(OpsPointwise, ResidentRowWhereAndUnaryOnBroadcastViews) {
    const std::vector<int64_t> shape = {2000, 700};
    const TensorDesc a = view(2, DType::f32, shape), row = view(3, DType::f32, {700}), out = view(1, DType::f32, shape);
    std::vector<float> x = put_random(a), r = put_random(row);
    KernelBuilder kb = builder("add_row");
    ops::binary(kb, Binary::add, out, a, row);
    Program prog = kb.finish();
    uint64_t row_elems = 0, a_elems = 0;
    for (const Instruction& ins : prog.instrs) {
        if (ins.op != Opcode::dma_copy || ins.src0.space != MemSpace::HBM) continue;
        (ins.src0.arg == row.arg ? row_elems : a_elems) += ins.src0.elems();
    }
    EXPECT_EQ(a_elems, 2000u * 700u);
    // One [128, 700] load for the full row tiles, one for the remainder tile, on each physical
    // core the row tiles are dealt out to.
    EXPECT_LE(row_elems, chip.lnc * 2u * 128u * 700u) << "the row should stay resident across row tiles";
    uint64_t args[3] = {base(1), base(2), base(3)};
    core.run(prog, nullptr, args, 3);
    const std::vector<float> got = get(out);
    for (int64_t i = 0; i < 2000; i += 7)
        for (int64_t j = 0; j < 700; ++j) ASSERT_EQ(got[i * 700 + j], x[i * 700 + j] + r[j]) << i << "," << j;

    const TensorDesc cond = view(2, DType::boolean, {40, 50}), src = view(3, DType::f32, {40, 50});
    const TensorDesc fillv = view(4, DType::bf16, {}), wout = view(1, DType::f32, {40, 50});
    std::vector<float> c(2000), s = put_random(src);
    for (size_t i = 0; i < c.size(); ++i) c[i] = (i * 7) % 3 == 0;
    put(cond, c);
    put(fillv, {-3.5f});
    KernelBuilder kw = builder("where");
    ops::where(kw, wout, cond, fillv, src);
    run(kw);
    std::vector<double> wref;
    for (size_t i = 0; i < c.size(); ++i) wref.push_back(c[i] != 0 ? -3.5 : s[i]);
    expect_close(get(wout), wref, DType::f32, "where with a 0-d value", 0, 0);

    const TensorDesc expanded = view(3, DType::f32, {300, 700}, {0, 1}), eout = view(1, DType::f32, {300, 700});
    std::vector<float> e = put_random(expanded);
    KernelBuilder ke = builder("exp");
    ops::unary(ke, Unary::exp, eout, expanded);
    run(ke);
    std::vector<double> eref;
    for (int64_t i = 0; i < 300; ++i)
        for (int64_t j = 0; j < 700; ++j) eref.push_back(std::exp(double(e[j])));
    expect_close(get(eout), eref, DType::f32, "exp of an expanded row", 1e-5, 2e-6);
}

// Broadcast operands are loaded once per distinct piece (stride-0 DMA replication into the
// partitions, or one value per partition) instead of element by element, so a broadcast op
// costs about what a same-shape op of the output's size costs.
TEST_F(OpsPointwise, BroadcastOperandsCostAboutASameShapeOp) {
    auto time_of = [&](const std::function<void(KernelBuilder&)>& emit) {
        KernelBuilder kb(chip, "bcast", 1ull << 30);
        emit(kb);
        Program prog = kb.finish();
        NeuronCore timing(chip, ExecMode::TimingOnly, 1ull << 30);
        std::vector<uint64_t> args(prog.num_args());
        for (size_t i = 0; i < args.size(); ++i) args[i] = (i + 1) * (64ull << 20);
        return timing.run(prog, nullptr, args.data(), args.size()).duration_ps();
    };
    const std::vector<int64_t> shape = {512, 256};
    auto same_shape = [&](Binary op, DType in_dt, DType out_dt) {
        return time_of([&](KernelBuilder& kb) {
            ops::binary(kb, op, view(1, out_dt, shape), view(2, in_dt, shape), view(3, in_dt, shape));
        });
    };
    const int64_t add_f32 = same_shape(Binary::add, DType::f32, DType::f32);
    const int64_t add_bf16 = same_shape(Binary::add, DType::bf16, DType::bf16);
    const int64_t eq_i32 = same_shape(Binary::eq, DType::i32, DType::boolean);
    struct Case {
        const char* name;
        int64_t reference;
        std::function<void(KernelBuilder&)> emit;
    };
    const Case cases[] = {
        {"[512,256] * 0-dim f32", add_f32,
         [&](KernelBuilder& kb) {
             ops::binary(kb, Binary::mul, view(1, DType::f32, shape), view(2, DType::f32, shape),
                         view(3, DType::f32, {}));
         }},
        {"0-dim - [512,256] bf16, alpha 2", add_bf16,
         [&](KernelBuilder& kb) {
             ops::binary(kb, Binary::sub, view(1, DType::bf16, shape), view(2, DType::bf16, {}),
                         view(3, DType::bf16, shape), 2.0f);
         }},
        {"[512,1] == [256] i32", eq_i32,
         [&](KernelBuilder& kb) {
             ops::binary(kb, Binary::eq, view(1, DType::boolean, shape), view(2, DType::i32, {512, 1}),
                         view(3, DType::i32, {256}));
         }},
        {"[512,256] + [256] f32", add_f32,
         [&](KernelBuilder& kb) {
             ops::binary(kb, Binary::add, view(1, DType::f32, shape), view(2, DType::f32, shape),
                         view(3, DType::f32, {256}));
         }},
        {"[512,256] * [512,1] f32", add_f32,
         [&](KernelBuilder& kb) {
             ops::binary(kb, Binary::mul, view(1, DType::f32, shape), view(2, DType::f32, shape),
                         view(3, DType::f32, {512, 1}));
         }},
        {"where([512,256], [512,256], 0-dim) f32", add_f32,
         [&](KernelBuilder& kb) {
             ops::where(kb, view(1, DType::f32, shape), view(2, DType::boolean, shape), view(3, DType::f32, shape),
                        view(4, DType::f32, {}));
         }},
        {"exp of [256] expanded to [512,256] f32", add_f32,
         [&](KernelBuilder& kb) {
             ops::unary(kb, Unary::exp, view(1, DType::f32, shape), view(2, DType::f32, shape, {0, 1}));
         }},
    };
    for (const Case& c : cases) {
        const int64_t t = time_of(c.emit);
        std::printf("%-42s %9.2f us (same-shape %.2f us)\n", c.name, t / 1e6, c.reference / 1e6);
        EXPECT_LT(t, 3 * c.reference) << c.name << ": " << t / 1e6 << " us vs same-shape " << c.reference / 1e6
                                      << " us";
    }
}
