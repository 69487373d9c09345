// The integer kernels (ops/integer.h) and the GpSimd integer instructions behind them: exact
// int64 arithmetic over the whole range (values fp32 would round), wrapping stores to narrower
// dtypes, reductions and scans across tile chunks, arange, rule checks and the cost model's
// two-word int64.
#include "ops_test_util.h"

#include <cstring>
#include <limits>

#include "trnsim/ops/integer.h"

using namespace trnsim;
using namespace trnsim::ops_test;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
const std::vector<int64_t> kEdges = {(int64_t(1) << 62) + 1, int64_t(1) << 62, -(int64_t(1) << 62) - 1, kMax, kMin,
                                     (int64_t(1) << 53) + 1, -7, 7, 0, -1, 50256, int64_t(1) << 31};

struct IntHarness : OpsHarness {
    void put_ints(const TensorDesc& t, const std::vector<int64_t>& v) {
        uint8_t* p = core.memory().hbm(base(t.arg));
        const size_t es = dtype_size(t.dtype);
        for (size_t i = 0; i < v.size(); ++i) std::memcpy(p + i * es, &v[i], es);   // little-endian low bytes
    }
    std::vector<int64_t> get_ints(const TensorDesc& t, size_t n) {
        const uint8_t* p = core.memory().hbm(base(t.arg));
        std::vector<int64_t> out(n);
        for (size_t i = 0; i < n; ++i) {
            switch (t.dtype) {
                case DType::i64: std::memcpy(&out[i], p + 8 * i, 8); break;
                case DType::i32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); out[i] = v; break; }
                case DType::u8: case DType::boolean: out[i] = p[i]; break;
                default: ADD_FAILURE() << "dtype";
            }
        }
        return out;
    }
};

int64_t wrap_add(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
int64_t wrap_mul(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }

std::vector<int64_t> sample(size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int64_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = i < kEdges.size() ? kEdges[i] : static_cast<int64_t>(rng());
    return v;
}

TEST(OpsInteger, Int64ArithmeticIsExactOverTheWholeRange) {
    IntHarness h;
    const int64_t n = 48;
    const TensorDesc out = view(1, DType::i64, {n}), a = view(2, DType::i64, {n}), b = view(3, DType::i64, {n});
    const auto av = sample(n, 1), bv = sample(n, 2);
    h.put_ints(a, av);
    h.put_ints(b, bv);
    struct Case { IntOp op; int64_t (*ref)(int64_t, int64_t); };
    const Case cases[] = {
        {IntOp::add, wrap_add},
        {IntOp::mul, wrap_mul},
        {IntOp::sub, [](int64_t x, int64_t y) { return static_cast<int64_t>(static_cast<uint64_t>(x) - static_cast<uint64_t>(y)); }},
        {IntOp::max, [](int64_t x, int64_t y) { return std::max(x, y); }},
        {IntOp::eq, [](int64_t x, int64_t y) { return int64_t(x == y); }},
        {IntOp::lt, [](int64_t x, int64_t y) { return int64_t(x < y); }},
        {IntOp::bit_xor, [](int64_t x, int64_t y) { return x ^ y; }},
        {IntOp::shr, [](int64_t x, int64_t y) { return x >> (static_cast<uint64_t>(y) % 64); }},
    };
    for (const Case& c : cases) {
        std::vector<int64_t> bb = bv;
        if (c.op == IntOp::shr) {
            for (int64_t& v : bb) v = static_cast<int64_t>(static_cast<uint64_t>(v) % 64);
            h.put_ints(b, bb);
        }
        KernelBuilder kb = h.builder("int");
        ops::int_binary(kb, c.op, out, a, b);
        h.run(kb);
        const auto got = h.get_ints(out, n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[i], c.ref(av[i], bb[i])) << int_op_name(c.op) << " at " << i;
    }
}

TEST(OpsInteger, EqualityTellsApartNeighboursFp32Merges) {
    IntHarness h;
    const TensorDesc out = view(1, DType::boolean, {3}), a = view(2, DType::i64, {3});
    h.put_ints(a, {(int64_t(1) << 62) + 1, int64_t(1) << 62, (int64_t(1) << 24) + 1});
    KernelBuilder kb = h.builder("eq");
    ops::int_binary_scalar(kb, IntOp::eq, out, a, (int64_t(1) << 62) + 1, false);
    h.run(kb);
    EXPECT_EQ(h.get_ints(out, 3), (std::vector<int64_t>{1, 0, 0}));
}

TEST(OpsInteger, StoresWrapToTheOutputWidthAndReversedScalarsWork) {
    IntHarness h;
    const TensorDesc o32 = view(1, DType::i32, {4}), a = view(2, DType::i64, {4}), o64 = view(3, DType::i64, {4});
    h.put_ints(a, {(int64_t(1) << 32) + 5, -1, kMax, kMin});
    KernelBuilder kb = h.builder("cast");
    ops::int_unary(kb, IntOp::copy, o32, a);
    ops::int_binary_scalar(kb, IntOp::sub, o64, a, 10, /*reverse=*/true);
    h.run(kb);
    EXPECT_EQ(h.get_ints(o32, 4), (std::vector<int64_t>{5, -1, -1, 0}));
    EXPECT_EQ(h.get_ints(o64, 4), (std::vector<int64_t>{10 - ((int64_t(1) << 32) + 5), 11, 10 - kMax, wrap_add(10, kMin)}));
}

TEST(OpsInteger, ReductionsAndScansCarryAcrossChunks) {
    IntHarness h;
    const int64_t R = 3, C = 50000;   // rows longer than one SBUF tile
    const TensorDesc in = view(1, DType::i64, {R, C}), sum = view(2, DType::i64, {R}), arg = view(3, DType::i64, {R}),
                     scan = view(4, DType::i64, {R, C});
    auto v = sample(R * C, 3);
    v[2 * C + 40000] = kMax;   // the maximum of row 2 in a later chunk
    h.put_ints(in, v);
    KernelBuilder kb = h.builder("reduce");
    ops::int_reduce(kb, IntOp::add, sum, in, {1});
    ops::int_reduce(kb, IntOp::argmax, arg, in, {1});
    ops::int_scan(kb, IntOp::add, scan, in, 1);
    h.run(kb);
    const auto s = h.get_ints(sum, R), am = h.get_ints(arg, R), sc = h.get_ints(scan, R * C);
    for (int64_t r = 0; r < R; ++r) {
        int64_t acc = 0, best = 0;
        for (int64_t c = 0; c < C; ++c) {
            acc = wrap_add(acc, v[r * C + c]);
            ASSERT_EQ(sc[r * C + c], acc) << r << "," << c;
            if (v[r * C + c] > v[r * C + best]) best = c;
        }
        EXPECT_EQ(s[r], acc);
        EXPECT_EQ(am[r], best);
    }
    EXPECT_EQ(am[2], 40000);
}

TEST(OpsInteger, ArangeOfLargeStartsAndNegativeSteps) {
    IntHarness h;
    const int64_t n = 300;
    const TensorDesc out = view(1, DType::i64, {n}, {2});   // strided output
    KernelBuilder kb = h.builder("arange");
    const int64_t start = (int64_t(1) << 62) + 1;
    ops::int_arange(kb, out, start, -3);
    h.run(kb);
    const auto got = h.get_ints(view(1, DType::i64, {2 * n}), 2 * n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(got[2 * i], start - 3 * i) << i;
}

TEST(OpsInteger, DivisionByZeroRaises) {
    IntHarness h;
    const TensorDesc out = view(1, DType::i64, {2}), a = view(2, DType::i64, {2}), b = view(3, DType::i64, {2});
    h.put_ints(a, {4, 5});
    h.put_ints(b, {1, 0});
    KernelBuilder kb = h.builder("div");
    ops::int_binary(kb, IntOp::div_floor, out, a, b);
    EXPECT_THROW(h.run(kb), IsaError);
}

TEST(OpsInteger, RulesRefuseFloatOperandsAndOtherEngines) {
    IntHarness h;
    KernelBuilder kb = h.builder("rules");
    const Tile f = kb.alloc_sbuf(4, {8}, DType::f32), i = kb.alloc_sbuf(4, {8}, DType::i64);
    Instruction ins;
    ins.op = Opcode::int_alu;
    ins.engine = Engine::GpSimd;
    ins.iop = IntOp::add;
    ins.dst = i.ap();
    ins.src0 = f.ap();
    EXPECT_THROW(kb.emit(ins), IsaError);
    ins.src0 = i.ap();
    ins.engine = Engine::Vector;
    EXPECT_THROW(kb.emit(ins), IsaError);
    ins.engine = Engine::GpSimd;
    ins.iop = IntOp::argmax;   // a reduction, not an elementwise op
    EXPECT_THROW(kb.emit(ins), IsaError);
}

// The cost model charges an int64 as two 32-bit words: more GpSimd cycles than the same op on int32,
// and division far more than addition.
TEST(OpsInteger, CostModelCountsWordOperations) {
    IntHarness h;
    auto engine_ps = [&](DType dt, IntOp op) {
        KernelBuilder kb = h.builder("cost");
        const Tile t = kb.alloc_sbuf(128, {2048}, dt);
        Instruction ins;
        ins.op = Opcode::int_alu;
        ins.engine = Engine::GpSimd;
        ins.iop = op;
        ins.dst = t.ap();
        ins.src0 = t.ap();
        ins.imm_int = 3;
        kb.emit(ins);
        Program prog = kb.finish();
        NeuronCore core(h.chip, ExecMode::TimingOnly, OpsHarness::kHbm);
        return core.run(prog).busy_ps[static_cast<int>(Engine::GpSimd)];
    };
    const int64_t add32 = engine_ps(DType::i32, IntOp::add), add64 = engine_ps(DType::i64, IntOp::add);
    const int64_t div64 = engine_ps(DType::i64, IntOp::div_trunc);
    EXPECT_GT(add64, 2 * add32);
    EXPECT_GT(div64, 20 * add64);
}

}  // namespace
