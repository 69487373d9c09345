// The tiled, double-buffered matmul kernel gives the right numbers on the
// functional simulator, for square, ragged and K-blocked shapes and both A layouts.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "trnsim/ops/matmul_kernel.h"
#include "trnsim/sim.h"

using namespace trnsim;

namespace {

struct Case {
    uint32_t M, K, N;
    bool a_transposed;
    DType c_dtype;
};

// Fills 'n' values rounded to bf16 so the reference sees exactly what the device stores.
std::vector<float> bf16_values(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (auto& x : v) x = bf16_bits_to_f32(f32_to_bf16_bits(u(rng)));
    return v;
}

// A 2048^3 bf16 matmul with A stored transposed, its operands at fixed addresses (timing runs).
MatmulArgs square_2048_args() {
    MatmulArgs args;
    args.M = args.K = args.N = 2048;
    args.a_transposed = true;
    args.b = 8 << 20;
    args.c = 16 << 20;
    return args;
}

void write(NeuronCore& core, uint64_t addr, const std::vector<float>& v, DType dt) {
    convert_from_f32(v.data(), core.memory().hbm(addr), dt, v.size());
}

void check_matmul(const ChipConfig& chip, const Case& c) {
    const uint64_t hbm = 256ull << 20;
    NeuronCore core(chip, ExecMode::Functional, hbm);
    std::vector<float> A = bf16_values(size_t(c.M) * c.K, 1), B = bf16_values(size_t(c.K) * c.N, 2);
    MatmulArgs args;
    args.M = c.M;
    args.K = c.K;
    args.N = c.N;
    args.a = 0;
    args.b = 64ull << 20;
    args.c = 128ull << 20;
    args.a_transposed = c.a_transposed;
    args.c_dtype = c.c_dtype;
    if (c.a_transposed) {
        std::vector<float> At(A.size());
        for (uint32_t m = 0; m < c.M; ++m)
            for (uint32_t k = 0; k < c.K; ++k) At[size_t(k) * c.M + m] = A[size_t(m) * c.K + k];
        write(core, args.a, At, DType::bf16);
    } else {
        write(core, args.a, A, DType::bf16);
    }
    write(core, args.b, B, DType::bf16);
    KernelBuilder kb(chip, "matmul", hbm);
    build_matmul(kb, args);
    core.run(kb.finish());

    std::vector<float> C(size_t(c.M) * c.N);
    convert_to_f32(core.memory().hbm(args.c), c.c_dtype, C.data(), C.size());
    // Every element of small results; for large ones the first and last rows and columns
    // (tile edges) plus a fixed random sample, so the fp64 reference stays cheap.
    std::vector<std::pair<uint32_t, uint32_t>> points;
    if (size_t(c.M) * c.N <= 300000) {
        for (uint32_t m = 0; m < c.M; ++m)
            for (uint32_t n = 0; n < c.N; ++n) points.push_back({m, n});
    } else {
        for (uint32_t i = 0; i < c.N; ++i) points.push_back({0, i}), points.push_back({c.M - 1, i});
        for (uint32_t i = 0; i < c.M; ++i) points.push_back({i, 0}), points.push_back({i, c.N - 1});
        std::mt19937 rng(7);
        for (int i = 0; i < 20000; ++i) points.push_back({rng() % c.M, rng() % c.N});
    }
    for (auto [m, n] : points) {
        {
            double ref = 0;
            for (uint32_t k = 0; k < c.K; ++k) ref += double(A[size_t(m) * c.K + k]) * B[size_t(k) * c.N + n];
            double got = C[size_t(m) * c.N + n];
            // fp32 accumulation (and a final bf16 rounding when C is bf16).
            double tol = (c.c_dtype == DType::bf16 ? 8e-3 * std::abs(ref) : 0) + 1e-4 * std::sqrt(double(c.K)) + 1e-5;
            ASSERT_NEAR(got, ref, tol) << "m=" << m << " n=" << n << " M=" << c.M << " K=" << c.K << " N=" << c.N;
        }
    }
}

}  // namespace

TEST(KernelMatmul, Square1024Bf16TransposedA) {
    check_matmul(load_chip("trn2"), {1024, 1024, 1024, true, DType::bf16});
}

TEST(KernelMatmul, Square1024RowMajorAWithTensorETransposes) {
    check_matmul(load_chip("trn2"), {1024, 1024, 1024, false, DType::f32});
}

TEST(KernelMatmul, RaggedShapesNotMultiplesOf128) {
    check_matmul(load_chip("trn2"), {200, 300, 700, false, DType::f32});
    check_matmul(load_chip("trn2"), {129, 1, 513, true, DType::f32});
    check_matmul(load_chip("trn1"), {77, 250, 1030, false, DType::bf16});
}

TEST(KernelMatmul, KBlockedWhenPanelsDoNotFitSbuf) {
    ChipConfig chip = load_chip("trn2");
    chip.sbuf.bytes_per_partition = 48 * 1024;   // forces K blocking with fp32 accumulators
    check_matmul(chip, {256, 2560, 640, false, DType::f32});
}

TEST(KernelMatmul, OverlapsLoadsWithComputeAndKeepsTensorEBusy) {
    ChipConfig chip = load_chip("trn2");
    chip.tensor.throttle_start_limit = 1.0;   // the matmul costs alone (throttling: test_throttling.cpp)
    chip.lnc = 1;   // one physical core's kernel (the SPMD split: test_logical_core.cpp)
    NeuronCore core(chip, ExecMode::TimingOnly);
    KernelBuilder kb(chip, "matmul");
    MatmulArgs args = square_2048_args();
    build_matmul(kb, args);
    Program prog = kb.finish();
    RunStats s = core.run(prog);
    const double te = static_cast<double>(s.busy_ps[static_cast<size_t>(Engine::Tensor)]);
    // The matmuls alone: (2048/128)^2 * (2048/512) instructions x 512 cycles, plus a
    // LoadStationary for each one whose stationary differs from the previous matmul's
    // (load_stationary_background is off in the presets). A^T tiles serve up to four B chunks in
    // a row; this kernel is one block, whose first chunk runs alone (so that the first matmuls
    // wait for one chunk of B only) and the other three together: half the matmuls load one.
    ASSERT_FALSE(chip.tensor.load_stationary_background);
    int matmuls = 0, loads = 0;
    const AccessPattern* last = nullptr;
    for (const Instruction& ins : prog.instrs) {
        if (ins.op != Opcode::nc_matmul) continue;
        ++matmuls;
        if (!last || last->offset != ins.src0.offset || last->start_partition != ins.src0.start_partition ||
            last->size[0] != ins.src0.size[0])
            ++loads;
        last = &ins.src0;
    }
    EXPECT_EQ(matmuls, 16 * 16 * 4);
    EXPECT_LE(loads, matmuls / 2);
    EXPECT_DOUBLE_EQ(te, std::llround(512 * 1000 / chip.tensor.clock_ghz) * (matmuls - loads) +
                             std::llround((512 + chip.tensor.load_stationary_cycles) * 1000 / chip.tensor.clock_ghz) *
                                 loads);
    // 24 MiB cross HBM; with no overlap the kernel would take the TensorE time plus the transfers.
    const double transfer_ps = 24.0 * (1 << 20) / (chip.hbm_bytes_per_ns_per_core() / 1000.0);
    EXPECT_LT(s.duration_ps(), te + 0.35 * transfer_ps);
    EXPECT_GT(te / s.duration_ps(), 0.85);
}

// Functional execution runs matmul chains that share moving operands as one product; an
// instruction between them that rewrites a later chain's stationary (or reads its PSUM
// tile) must still be seen in program order.
TEST(KernelMatmul, BatchedChainsRespectInstructionsBetweenThem) {
    ChipConfig chip = load_chip("trn2");
    NeuronCore core(chip, ExecMode::Functional, 1 << 22);
    KernelBuilder kb(chip, "batch", 1 << 22);
    Tile st0 = kb.alloc_sbuf(128, {128}, DType::f32), st1 = kb.alloc_sbuf(128, {128}, DType::f32);
    Tile mv = kb.alloc_sbuf(128, {64}, DType::f32);
    Tile p0 = kb.alloc_psum(128, 64), p1 = kb.alloc_psum(128, 64);
    Tile out0 = kb.alloc_sbuf(128, {64}, DType::f32), out1 = kb.alloc_sbuf(128, {64}, DType::f32);
    kb.memset(st0.ap(), 1.0f);
    kb.memset(st1.ap(), 1.0f);
    kb.memset(mv.ap(), 1.0f);
    kb.matmul(p0.ap(), st0.ap(), mv.ap(), false);       // chain 1: every output = 128
    kb.tensor_copy(out0.ap(), p0.ap());
    kb.memset(st1.ap(), 2.0f);                          // rewrites chain 2's stationary
    kb.matmul(p1.ap(), st1.ap(), mv.ap(), false);       // chain 2: every output = 256
    kb.tensor_copy(out1.ap(), p1.ap());
    kb.matmul(p0.ap(), st0.ap(), mv.ap(), false);       // chain 3 reuses p0 after it was read
    kb.tensor_scalar(out0.ap(), p0.ap(), AluOp::add, 0.0f);
    core.run(kb.finish());
    auto value = [&](const Tile& t, uint32_t p, uint32_t i) {
        return *reinterpret_cast<const float*>(core.memory().sbuf(p, t.offset + i * 4));
    };
    for (uint32_t p : {0u, 77u, 127u}) {
        EXPECT_EQ(value(out0, p, 5), 128.0f);
        EXPECT_EQ(value(out1, p, 63), 256.0f);
    }
}

namespace {

// C = A @ B + R with R loaded by the prologue (rotating SBUF slots) and added by the epilogue,
// which also stores the plain product P through the matmul's DMA hook. A [K, M] (transposed),
// B [K, N], all f32 results.
void check_prologue_and_epilogue_store(const ChipConfig& chip, uint32_t M, uint32_t K, uint32_t N) {
    const uint64_t hbm = 256ull << 20;
    NeuronCore core(chip, ExecMode::Functional, hbm);
    const std::vector<float> At = bf16_values(size_t(K) * M, 1), B = bf16_values(size_t(K) * N, 2),
                             R = bf16_values(size_t(M) * N, 3);
    MatmulArgs args;
    args.M = M, args.K = K, args.N = N;
    args.a_transposed = true;
    args.a = 0, args.b = 32ull << 20, args.c = 64ull << 20;
    args.c_dtype = DType::f32;
    const uint64_t r_addr = 96ull << 20, p_addr = 128ull << 20;
    write(core, args.a, At, DType::bf16);
    write(core, args.b, B, DType::bf16);
    write(core, r_addr, R, DType::f32);
    KernelBuilder kb(chip, "matmul", hbm);
    std::vector<Tile> slots;
    for (int i = 0; i < kMatmulTilesInFlight; ++i) slots.push_back(kb.alloc_sbuf(128, {512}, DType::f32));
    std::vector<std::array<uint32_t, 2>> loaded, finished;   // tile origins, in call order
    args.prologue = [&](KernelBuilder&, uint32_t, uint32_t row0, uint32_t rows, uint32_t col0, uint32_t cols,
                        const MatmulDma& dma) {
        const AccessPattern src = hbm_matrix_ap(r_addr + (uint64_t(row0) * N + col0) * 4, DType::f32, rows, cols, N);
        dma(slots[loaded.size() % slots.size()].region(0, rows, 0, cols), src);
        loaded.push_back({row0, col0});
    };
    args.epilogue = [&](KernelBuilder& k, const AccessPattern& tile, uint32_t, uint32_t row0, uint32_t col0,
                        const MatmulDma& dma) {
        const uint32_t rows = tile.partitions, cols = static_cast<uint32_t>(tile.free_elems());
        dma(hbm_matrix_ap(p_addr + (uint64_t(row0) * N + col0) * 4, DType::f32, rows, cols, N), tile);
        k.tensor_tensor(tile, tile, slots[finished.size() % slots.size()].region(0, rows, 0, cols), AluOp::add);
        finished.push_back({row0, col0});
    };
    build_matmul(kb, args);
    core.run(kb.finish());
    EXPECT_EQ(loaded, finished);
    EXPECT_EQ(loaded.size(), size_t((M + 127) / 128) * ((N + 511) / 512));

    std::vector<float> C(size_t(M) * N), P(size_t(M) * N);
    convert_to_f32(core.memory().hbm(args.c), DType::f32, C.data(), C.size());
    convert_to_f32(core.memory().hbm(p_addr), DType::f32, P.data(), P.size());
    for (uint32_t m = 0; m < M; ++m)
        for (uint32_t n = 0; n < N; ++n) {
            double ref = 0;
            for (uint32_t k = 0; k < K; ++k) ref += double(At[size_t(k) * M + m]) * B[size_t(k) * N + n];
            const size_t i = size_t(m) * N + n;
            ASSERT_NEAR(P[i], ref, 1e-4 * std::sqrt(double(K)) + 1e-5) << "m=" << m << " n=" << n;
            ASSERT_EQ(C[i], P[i] + R[i]) << "m=" << m << " n=" << n;
        }
}

}  // namespace

TEST(KernelMatmul, PrologueLoadsEpilogueOperandsInTileOrderAndEpilogueStoresMore) {
    check_prologue_and_epilogue_store(load_chip("trn2"), 200, 300, 700);
    ChipConfig small = load_chip("trn2");
    small.sbuf.bytes_per_partition = 64 * 1024;   // K blocks: the prologue runs before the last one
    check_prologue_and_epilogue_store(small, 256, 2560, 640);
}

// An epilogue operand loaded by the prologue is in SBUF when its tile leaves PSUM: a residual
// add costs the TensorE-bound kernel almost nothing.
TEST(KernelMatmul, PrologueLoadsKeepTheEpilogueOffTheCriticalPath) {
    ChipConfig chip = load_chip("trn2");
    auto run = [&](bool residual) {
        NeuronCore core(chip, ExecMode::TimingOnly);
        KernelBuilder kb(chip, "matmul");
        MatmulArgs args = square_2048_args();
        const uint64_t r_addr = 24 << 20;
        std::vector<Tile> slots;
        if (residual)
            for (int i = 0; i < kMatmulTilesInFlight; ++i) slots.push_back(kb.alloc_sbuf(128, {512}, DType::bf16));
        uint64_t loaded = 0, finished = 0;
        if (residual) {
            args.prologue = [&](KernelBuilder&, uint32_t, uint32_t row0, uint32_t rows, uint32_t col0, uint32_t cols,
                                const MatmulDma& dma) {
                const Tile& t = slots[loaded++ % slots.size()];
                for (uint32_t p0 = 0; p0 < rows; p0 += 32)
                    dma(t.region(p0, 32, 0, cols),
                        hbm_matrix_ap(r_addr + (uint64_t(row0 + p0) * 2048 + col0) * 2, DType::bf16, 32, cols, 2048));
            };
            args.epilogue = [&](KernelBuilder& k, const AccessPattern& tile, uint32_t, uint32_t, uint32_t,
                                const MatmulDma&) {
                const uint32_t rows = tile.partitions, cols = static_cast<uint32_t>(tile.free_elems());
                k.tensor_tensor(tile, tile, slots[finished++ % slots.size()].region(0, rows, 0, cols), AluOp::add);
            };
        }
        build_matmul(kb, args);
        return static_cast<double>(core.run(kb.finish()).duration_ps());
    };
    // The residual's loads and adds cost under 4% (the VectorE add of each tile is in there).
    const double plain = run(false), with_residual = run(true);
    EXPECT_LT(with_residual, 1.04 * plain) << "plain " << plain * 1e-6 << " us, with residual " << with_residual * 1e-6
                                           << " us";
}

namespace {

struct ColumnSumsCase {
    uint32_t M, K, N;
    bool a_transposed;
    DType sums_dtype;
};

// C = A @ B and the sums over the rows of A (one per column of A), against host references; A
// is stored [M, K] or [K, M]. *prog (optional): the program, for checks of how the sums were computed.
void check_column_sums(const ChipConfig& chip, const ColumnSumsCase& c, Program* prog = nullptr) {
    const uint64_t hbm = 256ull << 20;
    NeuronCore core(chip, ExecMode::Functional, hbm);
    const std::vector<float> A = bf16_values(size_t(c.M) * c.K, 11), B = bf16_values(size_t(c.K) * c.N, 12);
    MatmulArgs args;
    args.M = c.M, args.K = c.K, args.N = c.N;
    args.a = 0, args.b = 64ull << 20, args.c = 128ull << 20;
    args.a_transposed = c.a_transposed;
    args.c_dtype = DType::f32;
    args.a_column_sums = {true, 192ull << 20, 0, c.sums_dtype};
    std::vector<float> stored = A;
    if (c.a_transposed)
        for (uint32_t m = 0; m < c.M; ++m)
            for (uint32_t k = 0; k < c.K; ++k) stored[size_t(k) * c.M + m] = A[size_t(m) * c.K + k];
    write(core, args.a, stored, DType::bf16);
    write(core, args.b, B, DType::bf16);
    write(core, args.a_column_sums.addr, std::vector<float>(c.K + 64, 96.0f), c.sums_dtype);   // sentinel
    KernelBuilder kb(chip, "matmul_column_sums", hbm);
    build_matmul(kb, args);
    Program program = kb.finish();
    core.run(program);
    if (prog) *prog = program;

    std::vector<float> sums(c.K + 64), C(size_t(c.M) * c.N);
    convert_to_f32(core.memory().hbm(args.a_column_sums.addr), c.sums_dtype, sums.data(), sums.size());
    convert_to_f32(core.memory().hbm(args.c), DType::f32, C.data(), C.size());
    const std::string what = std::string(chip.name) + " M=" + std::to_string(c.M) + " K=" + std::to_string(c.K) +
                             " N=" + std::to_string(c.N) + (c.a_transposed ? " A^T" : " A");
    for (uint32_t k = 0; k < c.K; ++k) {
        double ref = 0, mag = 0;
        for (uint32_t m = 0; m < c.M; ++m) ref += A[size_t(m) * c.K + k], mag += std::abs(A[size_t(m) * c.K + k]);
        // fp32 accumulation, one rounding to the sums' dtype.
        const double tol = (c.sums_dtype == DType::bf16 ? 4e-3 * std::abs(ref) : 0) + 1e-6 * mag + 1e-6;
        ASSERT_NEAR(sums[k], ref, tol) << what << " k=" << k;
    }
    for (uint32_t k = c.K; k < c.K + 64; ++k) ASSERT_EQ(sums[k], 96.0f) << what << ": wrote past K at " << k;
    // The product is unaffected: the first and last rows.
    for (uint32_t m : {0u, c.M - 1})
        for (uint32_t n = 0; n < c.N; ++n) {
            double ref = 0;
            for (uint32_t k = 0; k < c.K; ++k) ref += double(A[size_t(m) * c.K + k]) * B[size_t(k) * c.N + n];
            ASSERT_NEAR(C[size_t(m) * c.N + n], ref, 1e-4 * std::sqrt(double(c.K)) + 1e-5) << what << " m=" << m << " n=" << n;
        }
}

int count_ops(const Program& p, Opcode op, Engine e) {
    int n = 0;
    for (const Instruction& ins : p.instrs) n += ins.op == op && ins.engine == e;
    return n;
}

}  // namespace

TEST(KernelMatmul, ColumnSumsOfAFromItsPanels) {
    for (const char* name : {"trn2", "trn1"}) {   // trn1: A^T by TensorE transposes, trn2: by the DMA
        const ChipConfig chip = load_chip(name);
        for (bool a_transposed : {false, true}) {
            check_column_sums(chip, {256, 384, 512, a_transposed, DType::f32});
            check_column_sums(chip, {200, 300, 700, a_transposed, DType::bf16});   // ragged M and K
            check_column_sums(chip, {77, 1, 130, a_transposed, DType::f32});
        }
        // More than 128 k tiles: the sums leave in two transposes.
        check_column_sums(chip, {3, 16500, 40, false, DType::bf16});
    }
}

TEST(KernelMatmul, ColumnSumsAddUpMBlocksAndKBlocks) {
    for (const char* name : {"trn2", "trn1"}) {
        ChipConfig chip = load_chip(name);
        chip.sbuf.bytes_per_partition = 48 * 1024;   // K blocks, and M blocks of 512 rows
        for (bool a_transposed : {false, true}) {
            Program p;
            check_column_sums(chip, {1100, 2600, 640, a_transposed, DType::bf16}, &p);
            // Several M blocks by several K blocks (the last one ragged), each panel reduced once:
            // the first M block's sums are written, the later ones' added on.
            const int reduces = count_ops(p, Opcode::tensor_reduce, Engine::GpSimd),
                      adds = count_ops(p, Opcode::tensor_tensor, Engine::GpSimd);
            EXPECT_GE(reduces, 3 * 2 * 2) << name;
            EXPECT_GT(adds, 0) << name;
            EXPECT_LT(adds, reduces) << name;
        }
    }
}

TEST(KernelMatmul, ColumnSumsOfNoRowsAreZeroAndOfNoColumnsNothing) {
    const ChipConfig chip = load_chip("trn2");
    for (uint32_t M : {0u, 5u}) {
        const uint32_t K = M ? 0 : 300;
        NeuronCore core(chip, ExecMode::Functional, 64 << 20);
        MatmulArgs args;
        args.M = M, args.K = K, args.N = 64;
        args.b = 1 << 20, args.c = 2 << 20;
        args.a_column_sums = {true, 4 << 20, 0, DType::f32};
        write(core, args.a_column_sums.addr, std::vector<float>(400, 7.0f), DType::f32);
        KernelBuilder kb(chip, "matmul", 64 << 20);
        build_matmul(kb, args);
        core.run(kb.finish());
        std::vector<float> sums(400);
        convert_to_f32(core.memory().hbm(args.a_column_sums.addr), DType::f32, sums.data(), sums.size());
        for (uint32_t k = 0; k < 400; ++k) ASSERT_EQ(sums[k], k < K ? 0.0f : 7.0f) << "M=" << M << " k=" << k;
    }
    KernelBuilder kb(chip, "matmul");
    MatmulArgs batched;
    batched.M = batched.K = batched.N = 128;
    batched.batch = 2;
    batched.a_column_sums.present = true;
    EXPECT_THROW(build_matmul(kb, batched), IsaError);
}

// The GpSimd reduces each panel while the TensorE computes: the sums cost a TensorE-bound
// matmul almost nothing.
TEST(KernelMatmul, ColumnSumsStayOffTheCriticalPath) {
    const ChipConfig chip = load_chip("trn2");
    for (bool a_transposed : {true, false}) {
        auto run = [&](bool sums) {
            NeuronCore core(chip, ExecMode::TimingOnly);
            KernelBuilder kb(chip, "matmul");
            MatmulArgs args = square_2048_args();
            args.a_transposed = a_transposed;
            if (sums) args.a_column_sums = {true, 24 << 20, 0, DType::bf16};
            build_matmul(kb, args);
            return static_cast<double>(core.run(kb.finish()).duration_ps());
        };
        const double plain = run(false), with_sums = run(true);
        EXPECT_LT(with_sums, 1.01 * plain) << "plain " << plain * 1e-6 << " us, with column sums " << with_sums * 1e-6
                                           << " us";
    }
}
